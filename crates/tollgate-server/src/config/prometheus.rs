//! `[grpc.prometheus]` checked and resolved: the listener's address, the path, and the mapping
//! file read (through [`crate::files`]) and checked, so that a file that cannot work stops the
//! server at start naming the key (in the environment's mode, `PROMETHEUS_MAPPER_YAML`).

use std::path::Path;
use std::sync::Arc;

use toml::Spanned;

use super::file::PrometheusFile;
use super::policies::FaultAt;
use super::{ConfigError, checked};
use crate::envoy::prometheus::mapper::Mapper;
use crate::envoy::prometheus::{DEFAULT_LISTEN, DEFAULT_PATH, PrometheusSettings, check_path};
use crate::files::{self, Kind};
use crate::options;

/// The exporter's settings; `None` when there is no `[grpc.prometheus]`.
pub(super) fn resolve(
    file: Option<Spanned<PrometheusFile>>,
    dir: &Path,
    refuse: &FaultAt<'_>,
) -> Result<Option<PrometheusSettings>, ConfigError> {
    let Some(file) = file else {
        return Ok(None);
    };
    let file = file.into_inner();
    let address = |s: &String| options::listen_addr(s);
    let listen = checked(file.listen, "grpc.prometheus.listen", &address, refuse)?;
    let path = checked(
        file.path,
        "grpc.prometheus.path",
        &|p: &String| check_path(p).map(|()| p.clone()),
        refuse,
    )?;
    let mapper = match file.mapper {
        Some(name) => {
            let span = name.span();
            let path = dir.join(name.get_ref());
            let field = "grpc.prometheus.mapper";
            let bytes = files::read(&path, Kind::StatsdMapper)
                .map_err(|e| refuse(Some(span.clone()), field, e.to_string()))?;
            let text = std::str::from_utf8(&bytes).map_err(|e| {
                refuse(
                    Some(span.clone()),
                    field,
                    format!("{}: not UTF-8 ({e})", path.display()),
                )
            })?;
            Mapper::parse(text)
                .map_err(|e| refuse(Some(span), field, format!("{}: {e}", path.display())))?
        }
        None => Mapper::upstream_default(),
    };
    Ok(Some(PrometheusSettings {
        listen: listen.unwrap_or(DEFAULT_LISTEN),
        path: path.unwrap_or_else(|| DEFAULT_PATH.to_owned()),
        mapper: Arc::new(mapper),
    }))
}
