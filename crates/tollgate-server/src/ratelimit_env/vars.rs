//! Every variable of envoyproxy/ratelimit's `src/settings/settings.go`, with its type and
//! default, and the reader that gives each its value: the default when it is unset, else its
//! text parsed as envconfig parses that type. Upstream parses every variable at start, used or
//! not, and stops on one it cannot parse; so does [`Env::check_all`].

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::time::Duration;

use super::EnvError;
use super::go;

/// How envconfig parses a variable.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Kind {
    Str,
    Bool,
    Int,
    Float,
    Duration,
    Map,
    List,
}

/// The variables, their kinds and upstream's defaults (`""`: none).
pub(super) const VARIABLES: &[(&str, Kind, &str)] = &[
    ("HOST", Kind::Str, "0.0.0.0"),
    ("PORT", Kind::Int, "8080"),
    ("DEBUG_HOST", Kind::Str, "0.0.0.0"),
    ("DEBUG_PORT", Kind::Int, "6070"),
    ("GRPC_UDS", Kind::Str, ""),
    ("GRPC_HOST", Kind::Str, "0.0.0.0"),
    ("GRPC_PORT", Kind::Int, "8081"),
    ("GRPC_MAX_CONNECTION_AGE", Kind::Duration, "24h"),
    ("GRPC_MAX_CONNECTION_AGE_GRACE", Kind::Duration, "1h"),
    ("GRPC_SERVER_USE_TLS", Kind::Bool, "false"),
    ("GRPC_SERVER_TLS_CERT", Kind::Str, ""),
    ("GRPC_SERVER_TLS_KEY", Kind::Str, ""),
    ("GRPC_CLIENT_TLS_CACERT", Kind::Str, ""),
    ("GRPC_CLIENT_TLS_SAN", Kind::Str, ""),
    ("LOG_LEVEL", Kind::Str, "WARN"),
    ("LOG_FORMAT", Kind::Str, "text"),
    ("CONFIG_TYPE", Kind::Str, "FILE"),
    ("FORCE_START_WITHOUT_INITIAL_CONFIG", Kind::Bool, "false"),
    ("CONFIG_GRPC_XDS_NODE_ID", Kind::Str, "default"),
    ("CONFIG_GRPC_XDS_NODE_METADATA", Kind::Str, ""),
    ("CONFIG_GRPC_XDS_SERVER_URL", Kind::Str, "localhost:18000"),
    (
        "CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL",
        Kind::Duration,
        "3s",
    ),
    ("CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS", Kind::Map, ""),
    ("CONFIG_GRPC_XDS_SERVER_USE_TLS", Kind::Bool, "false"),
    ("CONFIG_GRPC_XDS_CLIENT_TLS_CERT", Kind::Str, ""),
    ("CONFIG_GRPC_XDS_CLIENT_TLS_KEY", Kind::Str, ""),
    ("CONFIG_GRPC_XDS_SERVER_TLS_CACERT", Kind::Str, ""),
    ("CONFIG_GRPC_XDS_SERVER_TLS_SAN", Kind::Str, ""),
    ("XDS_CLIENT_BACKOFF_INITIAL_INTERVAL", Kind::Duration, "10s"),
    ("XDS_CLIENT_BACKOFF_MAX_INTERVAL", Kind::Duration, "60s"),
    ("XDS_CLIENT_BACKOFF_RANDOM_FACTOR", Kind::Float, "0.5"),
    ("XDS_CLIENT_BACKOFF_JITTER", Kind::Bool, "true"),
    ("XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES", Kind::Int, ""),
    ("USE_DOG_STATSD", Kind::Bool, "false"),
    ("USE_DOG_STATSD_MOGRIFIERS", Kind::List, ""),
    ("USE_STATSD", Kind::Bool, "true"),
    ("STATSD_HOST", Kind::Str, "localhost"),
    ("STATSD_PORT", Kind::Int, "8125"),
    ("EXTRA_TAGS", Kind::Map, ""),
    ("STATS_FLUSH_INTERVAL", Kind::Duration, "10s"),
    ("DISABLE_STATS", Kind::Bool, "false"),
    ("USE_PROMETHEUS", Kind::Bool, "false"),
    ("PROMETHEUS_ADDR", Kind::Str, ":9090"),
    ("PROMETHEUS_PATH", Kind::Str, "/metrics"),
    ("PROMETHEUS_MAPPER_YAML", Kind::Str, ""),
    (
        "PROMETHEUS_RESPONSE_TIME_AS_MILLISECONDS",
        Kind::Bool,
        "false",
    ),
    ("RUNTIME_ROOT", Kind::Str, "/srv/runtime_data/current"),
    ("RUNTIME_SUBDIRECTORY", Kind::Str, ""),
    ("RUNTIME_APPDIRECTORY", Kind::Str, "config"),
    ("RUNTIME_IGNOREDOTFILES", Kind::Bool, "false"),
    ("RUNTIME_WATCH_ROOT", Kind::Bool, "true"),
    ("EXPIRATION_JITTER_MAX_SECONDS", Kind::Int, "300"),
    ("LOCAL_CACHE_SIZE_IN_BYTES", Kind::Int, "0"),
    ("NEAR_LIMIT_RATIO", Kind::Float, "0.8"),
    ("CACHE_KEY_PREFIX", Kind::Str, ""),
    ("BACKEND_TYPE", Kind::Str, "redis"),
    (
        "STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT",
        Kind::Bool,
        "false",
    ),
    ("LIMIT_RESPONSE_HEADERS_ENABLED", Kind::Bool, "false"),
    ("LIMIT_LIMIT_HEADER", Kind::Str, "RateLimit-Limit"),
    ("LIMIT_REMAINING_HEADER", Kind::Str, "RateLimit-Remaining"),
    ("LIMIT_RESET_HEADER", Kind::Str, "RateLimit-Reset"),
    (
        "HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED",
        Kind::Bool,
        "false",
    ),
    ("REDIS_SOCKET_TYPE", Kind::Str, "unix"),
    ("REDIS_TYPE", Kind::Str, "SINGLE"),
    ("REDIS_URL", Kind::Str, "/var/run/nutcracker/ratelimit.sock"),
    ("REDIS_POOL_SIZE", Kind::Int, "10"),
    ("REDIS_AUTH", Kind::Str, ""),
    ("REDIS_TLS", Kind::Bool, "false"),
    ("REDIS_TLS_CLIENT_CERT", Kind::Str, ""),
    ("REDIS_TLS_CLIENT_KEY", Kind::Str, ""),
    ("REDIS_TLS_CACERT", Kind::Str, ""),
    ("REDIS_TLS_SKIP_HOSTNAME_VERIFICATION", Kind::Bool, "false"),
    ("REDIS_PIPELINE_WINDOW", Kind::Duration, "0"),
    ("REDIS_PIPELINE_LIMIT", Kind::Int, "0"),
    ("REDIS_CLUSTER_PIPELINE_PARALLELISM", Kind::Int, "1"),
    ("REDIS_PERSECOND", Kind::Bool, "false"),
    ("REDIS_PERSECOND_SOCKET_TYPE", Kind::Str, "unix"),
    ("REDIS_PERSECOND_TYPE", Kind::Str, "SINGLE"),
    (
        "REDIS_PERSECOND_URL",
        Kind::Str,
        "/var/run/nutcracker/ratelimitpersecond.sock",
    ),
    ("REDIS_PERSECOND_POOL_SIZE", Kind::Int, "10"),
    ("REDIS_PERSECOND_AUTH", Kind::Str, ""),
    ("REDIS_PERSECOND_TLS", Kind::Bool, "false"),
    ("REDIS_SENTINEL_AUTH", Kind::Str, ""),
    ("REDIS_PERSECOND_SENTINEL_AUTH", Kind::Str, ""),
    ("REDIS_PERSECOND_PIPELINE_WINDOW", Kind::Duration, "0"),
    ("REDIS_PERSECOND_PIPELINE_LIMIT", Kind::Int, "0"),
    (
        "REDIS_PERSECOND_CLUSTER_PIPELINE_PARALLELISM",
        Kind::Int,
        "1",
    ),
    ("REDIS_HEALTH_CHECK_ACTIVE_CONNECTION", Kind::Bool, "false"),
    ("REDIS_TIMEOUT", Kind::Duration, "10s"),
    ("REDIS_PERSECOND_TIMEOUT", Kind::Duration, "10s"),
    ("REDIS_POOL_ON_EMPTY_BEHAVIOR", Kind::Str, "WAIT"),
    ("REDIS_PERSECOND_POOL_ON_EMPTY_BEHAVIOR", Kind::Str, "WAIT"),
    ("REDIS_STARTUP_INITIAL_INTERVAL", Kind::Duration, "1s"),
    ("REDIS_STARTUP_MAX_INTERVAL", Kind::Duration, "30s"),
    ("REDIS_STARTUP_MAX_ELAPSED_TIME", Kind::Duration, "0"),
    ("MEMCACHE_HOST_PORT", Kind::List, ""),
    ("MEMCACHE_MAX_IDLE_CONNS", Kind::Int, "2"),
    ("MEMCACHE_SRV", Kind::Str, ""),
    ("MEMCACHE_SRV_REFRESH", Kind::Duration, "0"),
    ("MEMCACHE_TLS", Kind::Bool, "false"),
    ("MEMCACHE_TLS_CLIENT_CERT", Kind::Str, ""),
    ("MEMCACHE_TLS_CLIENT_KEY", Kind::Str, ""),
    ("MEMCACHE_TLS_CACERT", Kind::Str, ""),
    (
        "MEMCACHE_TLS_SKIP_HOSTNAME_VERIFICATION",
        Kind::Bool,
        "false",
    ),
    ("SHADOW_MODE", Kind::Bool, "false"),
    ("QUOTA_MODE", Kind::Bool, "false"),
    ("RESPONSE_DYNAMIC_METADATA", Kind::Bool, "false"),
    ("MERGE_DOMAIN_CONFIG", Kind::Bool, "false"),
    ("TRACING_ENABLED", Kind::Bool, "false"),
    ("TRACING_SERVICE_NAME", Kind::Str, "RateLimit"),
    ("TRACING_SERVICE_NAMESPACE", Kind::Str, ""),
    ("TRACING_SERVICE_INSTANCE_ID", Kind::Str, ""),
    ("TRACING_EXPORTER_PROTOCOL", Kind::Str, "http"),
    ("TRACING_SAMPLING_RATE", Kind::Float, "1"),
];

/// The most bytes one variable's value may hold: the environment is bounded by the kernel
/// (`ARG_MAX`), this only keeps an error message short.
const SHOWN: usize = 64;

/// The environment, as the process got it.
#[derive(Debug, Clone, Default)]
pub struct Env {
    vars: BTreeMap<String, Result<String, OsString>>,
}

impl Env {
    /// The variables `vars` (as `std::env::vars_os` gives them); one whose name is not UTF-8
    /// is none of upstream's.
    pub fn new(vars: impl IntoIterator<Item = (OsString, OsString)>) -> Env {
        Env {
            vars: vars
                .into_iter()
                .filter_map(|(k, v)| Some((k.into_string().ok()?, v.into_string())))
                .collect(),
        }
    }

    /// The variable `name`'s text, `None` when unset; one that is not UTF-8 is refused.
    pub(super) fn raw(&self, name: &'static str) -> Result<Option<&str>, EnvError> {
        match self.vars.get(name) {
            None => Ok(None),
            Some(Ok(text)) => Ok(Some(text)),
            Some(Err(_)) => Err(EnvError::new(name, "is not UTF-8")),
        }
    }

    /// Whether `name` is set (to anything, even empty).
    pub(super) fn is_set(&self, name: &'static str) -> bool {
        self.vars.contains_key(name)
    }

    /// The text `name` is parsed from: its value when set, even empty (as envconfig takes it),
    /// else upstream's default.
    pub(super) fn text(&self, name: &'static str) -> Result<String, EnvError> {
        match self.raw(name)? {
            Some(text) => Ok(text.to_owned()),
            None => Ok(default_of(name).to_owned()),
        }
    }

    /// A string variable.
    pub(super) fn string(&self, name: &'static str) -> Result<String, EnvError> {
        self.text(name)
    }

    /// A boolean variable.
    pub(super) fn bool(&self, name: &'static str) -> Result<bool, EnvError> {
        self.parsed(name, go::bool)
    }

    /// An integer variable (`0` when unset without a default, as Go's zero value).
    pub(super) fn int(&self, name: &'static str) -> Result<i64, EnvError> {
        self.parsed(name, go::int)
    }

    /// A floating-point variable.
    pub(super) fn float(&self, name: &'static str) -> Result<f64, EnvError> {
        self.parsed(name, go::float)
    }

    /// A duration variable.
    pub(super) fn duration(&self, name: &'static str) -> Result<Duration, EnvError> {
        self.parsed(name, go::duration)
    }

    /// A map variable (`k1:v1,k2:v2`).
    pub(super) fn map(&self, name: &'static str) -> Result<BTreeMap<String, String>, EnvError> {
        self.parsed(name, go::map)
    }

    fn parsed<T: Default>(
        &self,
        name: &'static str,
        parse: impl Fn(&str) -> Result<T, String>,
    ) -> Result<T, EnvError> {
        let set = self.raw(name)?;
        let text = match set {
            Some(text) => text,
            // envconfig leaves a field without default at its zero value.
            None if default_of(name).is_empty() => return Ok(T::default()),
            None => default_of(name),
        };
        parse(text).map_err(|why| EnvError::new(name, shorten(&why)))
    }

    /// Parses every variable of [`VARIABLES`] that is set, as upstream does at start.
    pub(super) fn check_all(&self) -> Result<(), EnvError> {
        for &(name, kind, _) in VARIABLES {
            match kind {
                Kind::Str | Kind::List => self.raw(name).map(drop)?,
                Kind::Bool => self.bool(name).map(drop)?,
                Kind::Int => self.int(name).map(drop)?,
                Kind::Float => self.float(name).map(drop)?,
                Kind::Duration => self.duration(name).map(drop)?,
                Kind::Map => self.map(name).map(drop)?,
            }
        }
        Ok(())
    }
}

/// Upstream's default of `name`.
pub(super) fn default_of(name: &str) -> &'static str {
    VARIABLES
        .iter()
        .find(|(n, _, _)| *n == name)
        .map_or("", |(_, _, default)| default)
}

/// A parse error, its quoted value cut to [`SHOWN`] bytes.
fn shorten(why: &str) -> String {
    if why.len() <= SHOWN * 2 {
        return why.to_owned();
    }
    let mut end = SHOWN * 2;
    while !why.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &why[..end])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(vars: &[(&str, &str)]) -> Env {
        Env::new(vars.iter().map(|(k, v)| ((*k).into(), (*v).into())))
    }

    #[test]
    fn unset_takes_the_default_and_set_takes_the_value() {
        let e = env(&[("PORT", "9000"), ("GRPC_UDS", "")]);
        assert_eq!(e.int("PORT").unwrap(), 9000);
        assert_eq!(e.int("GRPC_PORT").unwrap(), 8081);
        assert_eq!(e.string("GRPC_UDS").unwrap(), "");
        assert_eq!(e.string("HOST").unwrap(), "0.0.0.0");
        assert_eq!(e.int("XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES").unwrap(), 0);
        assert!(e.bool("USE_STATSD").unwrap());
        assert_eq!(
            e.duration("REDIS_TIMEOUT").unwrap(),
            Duration::from_secs(10)
        );
    }

    #[test]
    fn an_unparsable_variable_is_refused_by_name_even_unused() {
        let e = env(&[("REDIS_PERSECOND_TIMEOUT", "ten seconds")]);
        let err = e.check_all().unwrap_err().to_string();
        assert!(err.starts_with("REDIS_PERSECOND_TIMEOUT: "), "{err}");
        assert!(err.contains("not a duration"), "{err}");
        let e = env(&[("PORT", "")]);
        assert!(e.check_all().unwrap_err().to_string().contains("PORT"));
    }

    #[test]
    fn every_default_parses_as_its_kind() {
        assert!(Env::default().check_all().is_ok());
        let mut names: Vec<_> = VARIABLES.iter().map(|v| v.0).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), VARIABLES.len(), "a variable is listed twice");
    }
}
