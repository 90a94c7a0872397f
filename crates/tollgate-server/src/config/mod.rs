//! The config file (`tollgate serve --config FILE`, or `TOLLGATE_CONFIG`): the store, the
//! listeners, the fail policy, the named policies and the tokens (`[auth]`), in TOML.
//!
//! ```toml
//! [store]
//! url = "memory"
//!
//! [http]
//! listen = "127.0.0.1:8080"
//!
//! [policies.api]
//! capacity = 10
//! refill = 10
//! period = "1s"
//! ```
//!
//! Every refusal names the file, the line and column, and the field ([`ConfigError`]). A file
//! says only what it sets: whatever it leaves out keeps the command line's value (its default,
//! or the flag given), and a flag given on the command line overrides the file.

mod auth;
mod bounds;
mod error;
mod file;
mod listener;
mod policies;
mod prometheus;
mod read;
mod redact;
mod top;
mod traces;
mod xds;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::time::Duration;

pub use auth::MIN_SECRET;
pub use bounds::MAX_TOKENS;
pub use error::ConfigError;
pub use listener::ListenerGiven;
pub use read::MAX_FILE_BYTES;
pub(crate) use read::read;
use toml::Spanned;
pub use top::TopConfig;
pub use traces::TracingConfig;

use crate::auth::{Secret, Tokens};
use crate::descriptors::{Charge, EnvoyAlgorithm};
use crate::limiter::Policies;
use crate::options::{
    self, LogFormat, OnStoreError, PostgresGiven, StoreSpec, StoreTls, StoreWait,
};

/// A config file, read and checked: what it sets (`None` where it is silent) and its policies.
#[derive(Debug, Clone)]
pub struct Config {
    /// The file it was read from.
    pub path: PathBuf,
    /// What the file held: a reload compares the file with it.
    pub text: String,
    /// `[store] url`.
    pub store: Option<StoreSpec>,
    /// `[store] timeout`.
    pub store_timeout: Option<Duration>,
    /// `[store] on_error`.
    pub on_store_error: Option<OnStoreError>,
    /// `[store] max_keys`.
    pub max_keys: Option<usize>,
    /// `[store.postgres]`.
    pub postgres: PostgresGiven,
    /// `[store.tls]`, its paths resolved against the file's directory.
    pub store_tls: Option<StoreTls>,
    /// `[store] wait_replicas` and `wait_timeout_ms`.
    pub store_wait: Option<StoreWait>,
    /// `[http] listen`.
    pub listen: Option<SocketAddr>,
    /// `[http] inline_policies`.
    pub inline_policies: Option<bool>,
    /// `[log] format`.
    pub log_format: Option<LogFormat>,
    /// `[resp] listen`.
    pub resp_listen: Option<SocketAddr>,
    /// `[resp] password`.
    pub resp_password: Option<Secret>,
    /// `[http]`'s connection limits and TLS.
    pub http_listener: ListenerGiven,
    /// `[resp]`'s connection limits and TLS.
    pub resp_listener: ListenerGiven,
    /// `[grpc]`'s connection limits and TLS.
    pub grpc_listener: ListenerGiven,
    /// `[admin] listen`.
    pub admin_listen: Option<SocketAddr>,
    /// `[admin]`'s connection limits and TLS.
    pub admin_listener: ListenerGiven,
    /// `[grpc]`.
    pub grpc: GrpcConfig,
    /// `[policies.*]`.
    pub policies: Policies,
    /// `[auth.tokens.*]`, their secrets read.
    pub auth: Tokens,
    /// `[tracing]`.
    pub tracing: TracingConfig,
    /// `[top]`.
    pub top: TopConfig,
    /// What is allowed but unwise (a short `[resp] password`): `config check` prints them.
    pub warnings: Vec<String>,
}

/// `[grpc]`: what it sets.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct GrpcConfig {
    /// `listen`.
    pub listen: Option<SocketAddr>,
    /// `unix_socket`, relative to the config file's directory.
    pub unix_socket: Option<PathBuf>,
    /// `config_dir`, relative to the config file's directory.
    pub config_dir: Option<PathBuf>,
    /// `merge_domain_config`.
    pub merge_domain_config: Option<bool>,
    /// `algorithm`.
    pub algorithm: Option<EnvoyAlgorithm>,
    /// `[grpc.domains.NAME] algorithm`.
    pub domain_algorithms: BTreeMap<String, EnvoyAlgorithm>,
    /// `shadow_mode`.
    pub shadow_mode: Option<bool>,
    /// `charge`.
    pub charge: Option<Charge>,
    /// `response_headers`.
    pub response_headers: Option<bool>,
    /// `ietf_headers`.
    pub ietf_headers: Option<bool>,
    /// `limit_header`, `remaining_header`, `reset_header`.
    pub header_names: [Option<String>; 3],
    /// `near_limit_ratio`.
    pub near_limit_ratio: Option<f64>,
    /// `[grpc.xds]`, its defaults filled in and its TLS files checked.
    pub xds: Option<crate::envoy::xds::XdsSettings>,
    /// `health_needs_config`.
    pub health_needs_config: Option<bool>,
    /// `response_dynamic_metadata`.
    pub response_dynamic_metadata: Option<bool>,
    /// `[grpc.prometheus]`, its mapping file read and checked.
    pub prometheus: Option<crate::envoy::prometheus::PrometheusSettings>,
}

impl Config {
    /// Reads and checks the file at `path`: a regular file of at most [`MAX_FILE_BYTES`].
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        Config::from_bytes(path, &read(path)?)
    }

    /// Checks `bytes`, read from the file at `path`.
    pub fn from_bytes(path: &Path, bytes: &[u8]) -> Result<Config, ConfigError> {
        let text = std::str::from_utf8(bytes).map_err(|e| {
            let invalid = std::io::Error::new(std::io::ErrorKind::InvalidData, e);
            ConfigError::unreadable(path, &invalid)
        })?;
        Config::parse(path, text)
    }

    /// Checks `text`, the contents of the file at `path`.
    pub fn parse(path: &Path, text: &str) -> Result<Config, ConfigError> {
        if text.len() as u64 > MAX_FILE_BYTES {
            return Err(read::too_large(path));
        }
        // Before the parser builds the document, which costs memory for every table.
        bounds::check(path, text)?;
        let refuse = |span: Option<Range<usize>>, field: &str, message: String| -> ConfigError {
            ConfigError::at(path, text, span, field, message)
        };
        let deserializer = toml::Deserializer::parse(text).map_err(|e| {
            // Nothing of an [auth] table is quoted: it may be a secret.
            if redact::in_auth(text, e.span().as_ref(), "") {
                let message = redact::without_values(e.message());
                return refuse(e.span(), "auth", format!("{message} {}", redact::NOT_SHOWN));
            }
            // A syntax error has no field; the text it points at (a duplicate key, say) tells.
            let at = e
                .span()
                .and_then(|span| text.get(span))
                .filter(|t| !t.is_empty() && t.len() <= 64 && !t.contains('\n'))
                .map_or_else(String::new, |t| format!("`{t}`"));
            refuse(e.span(), &at, e.message().to_owned())
        })?;
        let file: file::File = serde_path_to_error::deserialize(deserializer).map_err(|e| {
            // `Spanned` values show in the path as a private field of their own.
            let field = e
                .path()
                .to_string()
                .replace(".$__serde_spanned_private_value", "");
            let field = if field == "." { String::new() } else { field };
            let message = plain(&field, e.inner().message());
            let message = if redact::in_auth(text, e.inner().span().as_ref(), &field) {
                redact::without_values(&message)
            } else {
                message
            };
            refuse(e.inner().span(), &field, message)
        })?;

        let store = checked(
            file.store.url,
            "store.url",
            &|u| StoreSpec::parse(u),
            &refuse,
        )?;
        let store_timeout = checked(file.store.timeout, "store.timeout", &duration, &refuse)?;
        let store_wait = store_wait(
            file.store.wait_replicas,
            file.store.wait_timeout_ms,
            store_timeout,
            &refuse,
        )?;
        let address = |s: &String| options::listen_addr(s);
        let http_listen = checked(file.http.listen.clone(), "http.listen", &address, &refuse)?;
        let resp_listen = checked(file.resp.listen.clone(), "resp.listen", &address, &refuse)?;
        let grpc_listen = checked(file.grpc.listen.clone(), "grpc.listen", &address, &refuse)?;
        let max_keys = checked(
            file.store.max_keys,
            "store.max_keys",
            &at_least_one,
            &refuse,
        )?;
        let pg = file.store.postgres;
        let connections = checked(
            pg.connections,
            "store.postgres.connections",
            &at_least_one,
            &refuse,
        )?;
        let isolation = checked(
            pg.isolation,
            "store.postgres.isolation",
            &|name: &String| options::isolation(name),
            &refuse,
        )?;
        let admin_listen = checked(file.admin.listen.clone(), "admin.listen", &address, &refuse)?;
        let dir = path.parent().unwrap_or_else(|| Path::new(""));
        let http_listener = listener::given(
            "http",
            file.http.conn(),
            file.http.tls.as_ref(),
            true,
            dir,
            &refuse,
        )?;
        let resp_listener = listener::given(
            "resp",
            file.resp.conn(),
            file.resp.tls.as_ref(),
            false,
            dir,
            &refuse,
        )?;
        let grpc_listener = listener::given(
            "grpc",
            file.grpc.conn(),
            file.grpc.tls.as_ref(),
            true,
            dir,
            &refuse,
        )?;
        let admin_listener = listener::given(
            "admin",
            file.admin.conn(),
            file.admin.tls.as_ref(),
            true,
            dir,
            &refuse,
        )?;
        let near_limit_ratio = checked(
            file.grpc.near_limit_ratio,
            "grpc.near_limit_ratio",
            &|r: &f64| {
                if *r > 0.0 && *r <= 1.0 {
                    Ok(*r)
                } else {
                    Err(format!("must be above 0 and at most 1, got {r}"))
                }
            },
            &refuse,
        )?;
        let xds = xds::resolve(file.grpc.xds, dir, &refuse)?;
        let prometheus = prometheus::resolve(file.grpc.prometheus, dir, &refuse)?;
        if let (Some((_, span)), Some(_)) = (&xds, &file.grpc.config_dir) {
            return Err(refuse(
                Some(span.clone()),
                "grpc.xds",
                "grpc.config_dir and [grpc.xds] are two sources of Envoy's rules: give one (as \
                 envoyproxy/ratelimit's CONFIG_TYPE is FILE or GRPC_XDS_SOTW)"
                    .to_owned(),
            ));
        }
        if let (Some(_), Some(tls)) = (&file.grpc.unix_socket, &file.grpc.tls) {
            return Err(refuse(
                Some(tls.span()),
                "grpc.tls",
                "is for gRPC over TCP; TLS on the Unix socket (grpc.unix_socket) is not served"
                    .to_owned(),
            ));
        }
        let grpc = GrpcConfig {
            xds: xds.map(|(xds, _)| xds),
            listen: grpc_listen,
            unix_socket: file.grpc.unix_socket.map(|socket| dir.join(socket)),
            config_dir: file
                .grpc
                .config_dir
                .map(|dir| path.parent().unwrap_or_else(|| Path::new("")).join(dir)),
            merge_domain_config: file.grpc.merge_domain_config,
            algorithm: file.grpc.algorithm,
            domain_algorithms: file
                .grpc
                .domains
                .into_iter()
                .map(|(domain, d)| (domain, d.algorithm))
                .collect(),
            shadow_mode: file.grpc.shadow_mode,
            charge: file.grpc.charge,
            response_headers: file.grpc.response_headers,
            ietf_headers: file.grpc.ietf_headers,
            header_names: [
                file.grpc.limit_header,
                file.grpc.remaining_header,
                file.grpc.reset_header,
            ],
            near_limit_ratio,
            health_needs_config: file.grpc.health_needs_config,
            response_dynamic_metadata: file.grpc.response_dynamic_metadata,
            prometheus,
        };
        let store_tls = file
            .store
            .tls
            .map(|tls| {
                let span = tls.span();
                let tls = tls.into_inner();
                let client = match (tls.cert, tls.key) {
                    (Some(cert), Some(key)) => Some((dir.join(cert), dir.join(key))),
                    (None, None) => None,
                    (Some(_), None) => {
                        return Err(refuse(
                            Some(span),
                            "store.tls.key",
                            "is missing: a client certificate needs its key".to_owned(),
                        ));
                    }
                    (None, Some(_)) => {
                        return Err(refuse(
                            Some(span),
                            "store.tls.cert",
                            "is missing: a client key needs its certificate".to_owned(),
                        ));
                    }
                };
                Ok(StoreTls {
                    ca: tls.ca.map(|ca| dir.join(ca)),
                    client,
                    skip_hostname_verification: tls.skip_hostname_verification,
                })
            })
            .transpose()?;
        let policies = policies::compile(file.policies, &refuse, &|offset| {
            error::line_and_column(text, offset)
        })?;
        let auth = auth::compile(
            file.auth.tokens,
            path.parent().unwrap_or_else(|| Path::new("")),
            file.resp.password.is_some(),
            &refuse,
        )?;
        let tracing = traces::given(file.tracing, &refuse)?;
        let top = top::given(file.top, &refuse)?;
        let mut warnings = Vec::new();
        if let Some(password) = &file.resp.password
            && password.len() < auth::MIN_SECRET
        {
            warnings.push(format!(
                "resp.password is {} bytes: Redis takes any length, but one shorter than {} \
                 bytes can be guessed; make one with `openssl rand -hex 16`",
                password.len(),
                auth::MIN_SECRET
            ));
        }
        Ok(Config {
            warnings,
            path: path.to_owned(),
            text: text.to_owned(),
            store,
            store_timeout,
            on_store_error: file.store.on_error,
            max_keys,
            store_tls,
            store_wait,
            postgres: PostgresGiven {
                schema: pg.schema,
                table: pg.table,
                unlogged: pg.unlogged,
                synchronous_commit: pg.synchronous_commit,
                isolation,
                connections,
            },
            listen: http_listen,
            inline_policies: file.http.inline_policies,
            log_format: file.log.format,
            resp_listen,
            resp_password: file.resp.password.map(|p| Secret::new(p.as_bytes())),
            http_listener,
            resp_listener,
            grpc_listener,
            admin_listen,
            admin_listener,
            grpc,
            policies,
            auth,
            tracing,
            top,
        })
    }
}

/// serde's message for a value of the wrong type, in the file's terms: a duration asked for as
/// a string says how to write one, and a number beyond every integer type says the largest.
fn plain(field: &str, message: &str) -> String {
    let duration = field == "store.timeout"
        || [
            ".period",
            "_timeout",
            ".max_connection_age",
            "_grace",
            ".keepalive_interval",
            ".retry_interval",
            ".backoff_initial",
            ".backoff_max",
        ]
        .iter()
        .any(|end| field.ends_with(end));
    if duration && message.starts_with("invalid type") {
        return format!("{message}; write a duration such as \"50ms\", \"1s\" or \"1h\"");
    }
    if let Some(rest) = message.strip_prefix("invalid type: integer `")
        && let Some((number, _)) = rest.split_once("` as i128")
    {
        return format!(
            "{number} is larger than the largest number accepted, {}",
            u64::MAX
        );
    }
    message.to_owned()
}

/// A humantime duration of at least a millisecond: `"100ms"`, `"1s"`, `"1m"`, `"1h"`, `"1d"`.
/// `value` checked by `check`, refused at its own place under `field`.
fn checked<T, U>(
    value: Option<Spanned<T>>,
    field: &str,
    check: &dyn Fn(&T) -> Result<U, String>,
    refuse: &policies::FaultAt<'_>,
) -> Result<Option<U>, ConfigError> {
    value
        .map(|v| check(v.get_ref()).map_err(|e| refuse(Some(v.span()), field, e)))
        .transpose()
}

fn duration(text: &String) -> Result<Duration, String> {
    let d = humantime::parse_duration(text).map_err(|e| {
        format!("{text:?} is not a duration ({e}); write one such as \"100ms\", \"1s\", \"1m\", \"1h\" or \"1d\"")
    })?;
    if d < Duration::from_millis(1) {
        return Err(format!("must be at least 1ms, got {text:?}"));
    }
    Ok(d)
}

/// `[store] wait_replicas` and `wait_timeout_ms`: both or neither, each at least 1, and the
/// wait shorter than `store.timeout` when the file gives it (otherwise the store refuses it when
/// built, against the timeout in force).
fn store_wait(
    replicas: Option<Spanned<u64>>,
    timeout_ms: Option<Spanned<u64>>,
    store_timeout: Option<Duration>,
    refuse: &policies::FaultAt<'_>,
) -> Result<Option<StoreWait>, ConfigError> {
    let (replicas, timeout_ms) = match (replicas, timeout_ms) {
        (None, None) => return Ok(None),
        (Some(r), None) => {
            return Err(refuse(
                Some(r.span()),
                "store.wait_replicas",
                "needs store.wait_timeout_ms, how long a decision waits for the replicas                  (below store.timeout)"
                    .into(),
            ));
        }
        (None, Some(t)) => {
            return Err(refuse(
                Some(t.span()),
                "store.wait_timeout_ms",
                "needs store.wait_replicas, how many replicas a decision waits for".into(),
            ));
        }
        (Some(r), Some(t)) => (r, t),
    };
    let count = |n: &u64| match u32::try_from(*n) {
        Ok(0) => Err("must be at least 1, got 0 (leave both keys out for no waiting)".to_owned()),
        Ok(n) => Ok(n),
        Err(_) => Err(format!("{n} is too large")),
    };
    let span = timeout_ms.span();
    let replicas = checked(Some(replicas), "store.wait_replicas", &count, refuse)?;
    let millis = |n: &u64| match *n {
        0 => Err("must be at least 1 (Redis reads a WAIT timeout of 0 as for ever)".to_owned()),
        n => Ok(Duration::from_millis(n)),
    };
    let timeout = checked(Some(timeout_ms), "store.wait_timeout_ms", &millis, refuse)?;
    let (Some(replicas), Some(timeout)) = (replicas, timeout) else {
        return Ok(None);
    };
    if let Some(store_timeout) = store_timeout
        && timeout >= store_timeout
    {
        return Err(refuse(
            Some(span),
            "store.wait_timeout_ms",
            format!(
                "{} ms is not below store.timeout ({store_timeout:?}): a decision is answered                  within store.timeout, its WAIT included",
                timeout.as_millis()
            ),
        ));
    }
    Ok(Some(StoreWait { replicas, timeout }))
}

fn at_least_one(value: &u64) -> Result<usize, String> {
    match *value {
        0 => Err("must be at least 1, got 0".to_owned()),
        n => usize::try_from(n).map_err(|_| format!("{n} is too large")),
    }
}

/// The embedded default: no file, so everything from the command line's defaults and inline
/// policies only. Used when neither `--config` nor `TOLLGATE_CONFIG` names a file.
pub const EMBEDDED_DEFAULT: &str =
    "the embedded default (memory store, HTTP on 127.0.0.1:8080, inline policies allowed)";
