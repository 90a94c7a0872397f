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

#[cfg(test)]
mod tests {
    use std::path::Path;

    use crate::config::Config;
    use crate::envoy::prometheus::PrometheusSettings;
    use crate::envoy::prometheus::mapper::{Mapped, MetricType};

    fn prometheus(dir: &Path, text: &str) -> Result<Option<PrometheusSettings>, String> {
        Config::parse(&dir.join("tollgate.toml"), text)
            .map(|c| c.grpc.prometheus)
            .map_err(|e| e.to_string())
    }

    #[test]
    fn an_empty_table_takes_upstreams_defaults_and_a_file_is_read_beside_the_config() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(prometheus(dir.path(), "[grpc]\n"), Ok(None));
        let s = prometheus(dir.path(), "[grpc.prometheus]\n")
            .unwrap()
            .unwrap();
        assert_eq!(s.listen.to_string(), "0.0.0.0:9090");
        assert_eq!(s.path, "/metrics");
        assert!(matches!(
            s.mapper.map(
                "ratelimit.service.rate_limit.d.k.total_hits",
                MetricType::Counter
            ),
            Mapped::Metric { name, .. } if name == "ratelimit_service_rate_limit_total_hits"
        ));
        std::fs::write(
            dir.path().join("m.yaml"),
            "mappings:\n- {match: a.*, name: x}\n",
        )
        .unwrap();
        let s = prometheus(
            dir.path(),
            "[grpc.prometheus]\nlisten = \"127.0.0.1:19001\"\npath = \"/stats/prometheus\"\n\
             mapper = \"m.yaml\"\n",
        )
        .unwrap()
        .unwrap();
        assert_eq!(s.listen.to_string(), "127.0.0.1:19001");
        assert_eq!(s.path, "/stats/prometheus");
        assert!(matches!(
            s.mapper.map("a.b", MetricType::Counter),
            Mapped::Metric { name, .. } if name == "x"
        ));
    }

    #[test]
    fn refusals_name_the_key() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("bad.yaml"), "mappings:\n- {match: a.b}\n").unwrap();
        for (text, said) in [
            (
                "[grpc.prometheus]\npath = \"metrics\"\n",
                "grpc.prometheus.path: \"metrics\" is not a path",
            ),
            (
                "[grpc.prometheus]\npath = \"/{x}\"\n",
                "grpc.prometheus.path",
            ),
            (
                "[grpc.prometheus]\nlisten = \"nowhere\"\n",
                "grpc.prometheus.listen",
            ),
            (
                "[grpc.prometheus]\nmapper = \"none.yaml\"\n",
                "grpc.prometheus.mapper",
            ),
            (
                "[grpc.prometheus]\nmapper = \"bad.yaml\"\n",
                "mappings[0].name: is missing",
            ),
            (
                "[grpc.prometheus]\nmaper = \"bad.yaml\"\n",
                "unknown field `maper`",
            ),
        ] {
            let e = prometheus(dir.path(), text).unwrap_err();
            assert!(e.contains(said), "{text:?}: {e}");
        }
    }
}
