//! `[grpc.xds]` checked and resolved: every key refused at its own place when it cannot work
//! (a URL that is not `host:port`, a header gRPC cannot carry, a TLS file that cannot be read
//! or used), and the defaults (envoyproxy/ratelimit's) filled in.

use std::ops::Range;
use std::path::Path;

use toml::Spanned;

use super::file::XdsFile;
use super::policies::FaultAt;
use super::{ConfigError, checked, duration};
use crate::envoy::xds::settings::{
    DEFAULT_BACKOFF, DEFAULT_MAX_MESSAGE_SIZE, DEFAULT_NODE_ID, DEFAULT_RETRY_INTERVAL,
    MAX_MESSAGE_SIZE,
};
use crate::envoy::xds::{Backoff, XdsSettings, XdsTls};

/// The management server when `url` is not given (`CONFIG_GRPC_XDS_SERVER_URL`'s default).
pub(crate) const DEFAULT_URL: &str = "localhost:18000";

/// The settings `[grpc.xds]` gives, and where the table is; `None` when there is none.
pub(super) fn resolve(
    file: Option<Spanned<XdsFile>>,
    dir: &Path,
    refuse: &FaultAt<'_>,
) -> Result<Option<(XdsSettings, Range<usize>)>, ConfigError> {
    let Some(file) = file else {
        return Ok(None);
    };
    let span = file.span();
    let file = file.into_inner();
    let (host, port) = match &file.url {
        Some(url) => XdsSettings::parse_url(url.get_ref())
            .map_err(|e| refuse(Some(url.span()), "grpc.xds.url", e))?,
        None => XdsSettings::parse_url(DEFAULT_URL).map_err(|e| refuse(None, "grpc.xds.url", e))?,
    };
    let node_id = match file.node_id {
        Some(id) if id.get_ref().is_empty() => {
            return Err(refuse(
                Some(id.span()),
                "grpc.xds.node_id",
                "must not be empty: the management server finds tollgate's configs by it"
                    .to_owned(),
            ));
        }
        Some(id) => id.into_inner(),
        None => DEFAULT_NODE_ID.to_owned(),
    };
    let headers_span = file.headers.as_ref().map_or(span.clone(), Spanned::span);
    let mut headers = std::collections::BTreeMap::new();
    for (name, value) in file.headers.map(Spanned::into_inner).unwrap_or_default() {
        let lower = name.to_ascii_lowercase();
        let field = format!("grpc.xds.headers.{name}");
        if lower.ends_with("-bin")
            || tonic::metadata::AsciiMetadataKey::from_bytes(lower.as_bytes()).is_err()
        {
            return Err(refuse(
                Some(headers_span.clone()),
                &field,
                format!(
                    "{name:?} is not a gRPC metadata name (letters, digits, '-', '_', '.'; not ending in -bin)"
                ),
            ));
        }
        // gRPC metadata values are printable ASCII (HTTP would let other bytes through).
        if !value.bytes().all(|b| (0x20..0x7f).contains(&b))
            || tonic::metadata::AsciiMetadataValue::try_from(value.as_str()).is_err()
        {
            return Err(refuse(
                Some(headers_span.clone()),
                &field,
                "the value must be visible ASCII (and spaces)".to_owned(),
            ));
        }
        headers.insert(lower, value);
    }
    let max_message_size = checked(
        file.max_message_size,
        "grpc.xds.max_message_size",
        &|n: &u64| match usize::try_from(*n) {
            Ok(n) if (1..=MAX_MESSAGE_SIZE).contains(&n) => Ok(n),
            _ => Err(format!("must be 1 to {MAX_MESSAGE_SIZE} bytes, got {n}")),
        },
        refuse,
    )?
    .unwrap_or(DEFAULT_MAX_MESSAGE_SIZE);
    let retry_interval = checked(
        file.retry_interval,
        "grpc.xds.retry_interval",
        &duration,
        refuse,
    )?
    .unwrap_or(DEFAULT_RETRY_INTERVAL);
    let initial = checked(
        file.backoff_initial,
        "grpc.xds.backoff_initial",
        &duration,
        refuse,
    )?
    .unwrap_or(DEFAULT_BACKOFF.initial);
    let max = checked(file.backoff_max, "grpc.xds.backoff_max", &duration, refuse)?
        .unwrap_or(DEFAULT_BACKOFF.max);
    let factor = checked(
        file.backoff_random_factor,
        "grpc.xds.backoff_random_factor",
        &|f: &f64| {
            if f.is_finite() {
                Ok(*f)
            } else {
                Err(format!("must be a finite number, got {f}"))
            }
        },
        refuse,
    )?
    .unwrap_or(DEFAULT_BACKOFF.factor);
    let tls = match file.tls {
        None => None,
        Some(tls) => {
            let tls_span = tls.span();
            let tls = tls.into_inner();
            let server_name = match tls.server_name {
                Some(name) => {
                    if rustls::pki_types::ServerName::try_from(name.get_ref().as_str()).is_err() {
                        return Err(refuse(
                            Some(name.span()),
                            "grpc.xds.tls.server_name",
                            format!("{:?} is not a DNS name or an IP address", name.get_ref()),
                        ));
                    }
                    Some(name.into_inner())
                }
                None => None,
            };
            let tls = XdsTls {
                ca: tls.ca.map(|p| dir.join(p)),
                cert: tls.cert.map(|p| dir.join(p)),
                key: tls.key.map(|p| dir.join(p)),
                server_name,
            };
            // Read now so that a file that can never work stops the start, naming its key;
            // read again at every connection.
            if let Err(e) = crate::envoy::xds::tls::client_config(&tls) {
                return Err(refuse(Some(tls_span), e.key, e.message));
            }
            Some(tls)
        }
    };
    let settings = XdsSettings {
        host,
        port,
        node_id,
        node_metadata: file.node_metadata,
        headers,
        max_message_size,
        force_start_without_initial_config: file
            .force_start_without_initial_config
            .unwrap_or(false),
        retry_interval,
        backoff: Backoff {
            initial,
            max,
            factor,
            jitter: file.backoff_jitter.unwrap_or(DEFAULT_BACKOFF.jitter),
        },
        tls,
    };
    Ok(Some((settings, span)))
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::path::Path;
    use std::time::Duration;

    use crate::config::Config;
    use crate::envoy::xds::XdsSettings;
    use crate::envoy::xds::settings::DEFAULT_BACKOFF;

    fn xds(text: &str) -> Result<Option<XdsSettings>, String> {
        Config::parse(Path::new("/etc/tollgate/tollgate.toml"), text)
            .map(|c| c.grpc.xds)
            .map_err(|e| e.to_string())
    }

    #[test]
    fn an_empty_table_takes_upstreams_defaults() {
        let settings = xds("[grpc.xds]\n").unwrap().unwrap();
        assert_eq!(
            settings,
            XdsSettings {
                host: "localhost".to_owned(),
                port: 18000,
                node_id: "default".to_owned(),
                node_metadata: BTreeMap::new(),
                headers: BTreeMap::new(),
                max_message_size: 4 << 20,
                force_start_without_initial_config: false,
                retry_interval: Duration::from_secs(3),
                backoff: DEFAULT_BACKOFF,
                tls: None,
            }
        );
        assert_eq!(xds("[grpc]\nlisten = \"127.0.0.1:0\"\n"), Ok(None));
    }

    #[test]
    fn every_key_is_read() {
        let text = "[grpc.xds]\nurl = \"envoy-gateway:18001\"\nnode_id = \"envoy-ratelimit\"\n\
                    node_metadata = { a = \"1\" }\nheaders = { X-Tenant = \"acme\" }\n\
                    max_message_size = 1024\nforce_start_without_initial_config = true\n\
                    retry_interval = \"1s\"\nbackoff_initial = \"2s\"\nbackoff_max = \"4s\"\n\
                    backoff_random_factor = 2.0\nbackoff_jitter = false\n";
        let s = xds(text).unwrap().unwrap();
        assert_eq!((s.host.as_str(), s.port), ("envoy-gateway", 18001));
        assert_eq!(s.node_id, "envoy-ratelimit");
        assert_eq!(s.node_metadata.get("a").map(String::as_str), Some("1"));
        // Metadata names are lowercase on the wire.
        assert_eq!(s.headers.get("x-tenant").map(String::as_str), Some("acme"));
        assert_eq!(s.max_message_size, 1024);
        assert!(s.force_start_without_initial_config);
        assert_eq!(s.retry_interval, Duration::from_secs(1));
        assert_eq!(
            (
                s.backoff.initial,
                s.backoff.max,
                s.backoff.factor,
                s.backoff.jitter
            ),
            (Duration::from_secs(2), Duration::from_secs(4), 2.0, false)
        );
    }

    #[test]
    fn refusals_name_the_key_and_the_place() {
        let cases = [
            (
                "[grpc.xds]\nurl = \"host\"\n",
                "tollgate.toml:2:7: grpc.xds.url: ",
            ),
            (
                "[grpc.xds]\nnode_id = \"\"\n",
                "grpc.xds.node_id: must not be empty",
            ),
            (
                "[grpc.xds]\nmax_message_size = 0\n",
                "grpc.xds.max_message_size: must be 1 to",
            ),
            ("[grpc.xds]\nretry_interval = 3\n", "write a duration"),
            (
                "[grpc.xds]\nbackoff_random_factor = nan\n",
                "must be a finite number",
            ),
            (
                "[grpc.xds]\nheaders = { \"a:b\" = \"v\" }\n",
                "grpc.xds.headers.a:b: ",
            ),
            (
                "[grpc.xds]\nheaders = { x-b-bin = \"v\" }\n",
                "grpc.xds.headers.x-b-bin: ",
            ),
            (
                "[grpc.xds]\nheaders = { x = \"caf\u{e9}\" }\n",
                "must be visible ASCII",
            ),
            ("[grpc.xds]\nnode = \"x\"\n", "unknown field `node`"),
            (
                "[grpc.xds.tls]\nserver_name = \"a b\"\n",
                "grpc.xds.tls.server_name: ",
            ),
            (
                "[grpc.xds.tls]\nca = \"nowhere.pem\"\n",
                "grpc.xds.tls.ca: ",
            ),
            (
                "[grpc.xds.tls]\ncert = \"c.pem\"\n",
                "grpc.xds.tls.key: a client certificate needs its key",
            ),
            (
                "[grpc]\nconfig_dir = \"envoy\"\n[grpc.xds]\n",
                "tollgate.toml:3:1: grpc.xds: grpc.config_dir and [grpc.xds] are two sources",
            ),
        ];
        for (text, expected) in cases {
            let error = xds(text).unwrap_err();
            assert!(error.contains(expected), "{text:?}: {error}");
        }
    }

    #[test]
    fn tls_paths_are_relative_to_the_file_and_read_at_start() {
        let dir = tempfile::tempdir().unwrap();
        let ca = dir.path().join("ca.pem");
        std::fs::write(&ca, "not a certificate").unwrap();
        let file = dir.path().join("tollgate.toml");
        let error = Config::parse(&file, "[grpc.xds.tls]\nca = \"ca.pem\"\n").unwrap_err();
        assert_eq!(error.field, "grpc.xds.tls.ca");
        assert!(error.message.contains("no certificate"), "{error}");
        let error = Config::parse(&file, "[grpc.xds.tls]\nca = \"missing.pem\"\n").unwrap_err();
        assert!(error.message.contains("missing.pem"), "{error}");
    }
}
