//! The server's own option types: what the command line and the config file both set, parsed
//! into values that cannot be wrong. The command line and the config file read their text into
//! these; nothing past them sees a flag or a TOML value.

use std::fmt;
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use std::path::PathBuf;
use std::time::Duration;

use serde::Deserialize;
pub use tollgate::store::postgres::Isolation;
use tollgate::{Algorithm, Policy, PolicyError, PostgresStore, RedisStore};

pub use crate::limiter::OnStoreError;

/// Where HTTP listens unless told otherwise.
pub const DEFAULT_LISTEN: SocketAddr = SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::LOCALHOST, 8080));

/// An address to listen on, as the `--*listen` options and the config file's `listen` keys
/// give it: `IP:PORT` (`[IPv6]:PORT`), `HOST:PORT` (the host name resolved now, its first IPv4
/// address taken where it has one, as `localhost` is 127.0.0.1), or a bare `PORT` (on
/// 127.0.0.1, never on every interface unless asked).
pub fn listen_addr(s: &str) -> Result<SocketAddr, String> {
    let s = s.trim();
    if let Ok(addr) = s.parse::<SocketAddr>() {
        return Ok(addr);
    }
    if let Ok(port) = s.parse::<u16>() {
        return Ok(SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::LOCALHOST, port)));
    }
    let Some((host, port)) = s.rsplit_once(':') else {
        return Err(format!(
            "{s:?} is not an address to listen on: give HOST:PORT, IP:PORT or a port alone"
        ));
    };
    let port: u16 = port
        .parse()
        .map_err(|_| format!("{s:?}: {port:?} is not a port (0 to 65535)"))?;
    let addrs: Vec<SocketAddr> = std::net::ToSocketAddrs::to_socket_addrs(&(host, port))
        .map_err(|e| format!("{s:?}: the host {host:?} does not resolve: {e}"))?
        .collect();
    addrs
        .iter()
        .find(|a| a.is_ipv4())
        .or(addrs.first())
        .copied()
        .ok_or_else(|| format!("{s:?}: the host {host:?} has no address"))
}

/// A store to decide on, as `--store` and `[store] url` name it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StoreSpec {
    /// This process's memory.
    Memory,
    /// One Redis (`redis://`, `rediss://`, or a Unix socket, `redis+unix:///PATH`), or the
    /// primary behind Redis Sentinel (`redis+sentinel://`, `rediss+sentinel://`).
    Redis(String),
    /// The seed nodes of a Redis Cluster.
    RedisCluster(Vec<String>),
    /// PostgreSQL (`postgres://` or `postgresql://`).
    Postgres(String),
}

impl StoreSpec {
    /// Parses `memory`, a Redis URL, or comma-separated Redis URLs (a cluster).
    pub fn parse(s: &str) -> Result<StoreSpec, String> {
        let s = s.trim();
        if s == "memory" {
            return Ok(StoreSpec::Memory);
        }
        if s.starts_with("postgres://") || s.starts_with("postgresql://") {
            return Ok(StoreSpec::Postgres(s.to_owned()));
        }
        // The redis crate reads a fragment `#insecure` as "check no certificate": a store's
        // trust is [store.tls]'s to say, never a URL's tail.
        if s.contains('#') {
            return Err(format!(
                "{}: a Redis store URL takes no fragment (`#...`); for TLS settings use \
                 [store.tls] (skip_hostname_verification still checks the chain)",
                redact(s)
            ));
        }
        // Redis behind Sentinel: the commas list sentinels, not a cluster's nodes.
        if let Some((scheme, rest)) = s.split_once("://")
            && matches!(scheme, "redis+sentinel" | "rediss+sentinel")
        {
            let (hosts, path) = rest.split_once('/').unwrap_or((rest, ""));
            let master = path.split(['/', '?']).next().unwrap_or_default();
            if hosts.rsplit('@').next().is_none_or(str::is_empty) || master.is_empty() {
                return Err(format!(
                    "{}: a Redis Sentinel URL names the sentinels and the master: \
                     `{scheme}://[USER:PASSWORD@]HOST:26379[,HOST:26379...]/MASTER_NAME[/DB]`",
                    redact(s)
                ));
            }
            return Ok(StoreSpec::Redis(s.to_owned()));
        }
        // A Unix socket (`redis+unix:///PATH`, `unix:///PATH`): one Redis, never a cluster's
        // node.
        if let Some((scheme, rest)) = s.split_once("://")
            && matches!(scheme, "redis+unix" | "unix")
        {
            if !rest.starts_with('/') || s.contains(',') {
                return Err(format!(
                    "{s:?}: a Redis Unix socket is named by one absolute path: \
                     `redis+unix:///PATH`"
                ));
            }
            return Ok(StoreSpec::Redis(s.to_owned()));
        }
        let urls: Vec<String> = s.split(',').map(|u| u.trim().to_owned()).collect();
        for url in &urls {
            let Some((scheme, rest)) = url.split_once("://") else {
                return Err(format!(
                    "{url:?} is not a store: expected `memory`, `redis://HOST:PORT`, \
                     `rediss://HOST:PORT`, a comma-separated list of redis:// URLs, or \
                     `postgres://USER@HOST:PORT/DB`"
                ));
            };
            if !matches!(scheme, "redis" | "rediss") {
                return Err(format!(
                    "{url:?}: unknown store scheme {scheme:?}; expected redis, rediss or postgres"
                ));
            }
            if rest.is_empty() {
                return Err(format!("{url:?} names no host"));
            }
        }
        Ok(match <[String; 1]>::try_from(urls) {
            Ok([url]) => StoreSpec::Redis(url),
            Err(urls) => StoreSpec::RedisCluster(urls),
        })
    }

    /// Whether the store this names can decide `policy` (checked without connecting).
    pub fn supports(&self, policy: &Policy) -> Result<(), PolicyError> {
        match self {
            StoreSpec::Memory => Ok(()),
            StoreSpec::Redis(_) | StoreSpec::RedisCluster(_) => RedisStore::supports_policy(policy),
            StoreSpec::Postgres(_) => PostgresStore::supports_policy(policy),
        }
    }
}

impl fmt::Display for StoreSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StoreSpec::Memory => f.write_str("memory"),
            StoreSpec::Redis(url) => write!(f, "redis at {}", redact(url)),
            StoreSpec::RedisCluster(urls) => {
                let urls: Vec<String> = urls.iter().map(|u| redact(u)).collect();
                write!(f, "redis cluster at {}", urls.join(","))
            }
            StoreSpec::Postgres(url) => write!(f, "postgres at {}", redact(url)),
        }
    }
}

/// A URL without its password, for logs: neither the user information before `@` nor a
/// password given in the query (`redis+unix:///PATH?pass=...`, `postgres://...?password=...`,
/// `redis+sentinel://...?sentinel_password=...`).
fn redact(url: &str) -> String {
    let (base, query) = url
        .split_once('?')
        .map_or((url, None), |(b, q)| (b, Some(q)));
    let base = match (base.split_once("://"), base.rfind('@')) {
        (Some((scheme, _)), Some(at)) => format!("{scheme}://***{}", &base[at..]),
        _ => base.to_owned(),
    };
    let Some(query) = query else {
        return base;
    };
    let query: Vec<String> = query
        .split('&')
        .map(|pair| match pair.split_once('=') {
            Some((key, _)) if matches!(key, "pass" | "password" | "sentinel_password") => {
                format!("{key}=***")
            }
            _ => pair.to_owned(),
        })
        .collect();
    format!("{base}?{}", query.join("&"))
}

/// `[store] wait_replicas` and `wait_timeout_ms`: the Redis store's durability option
/// (`RedisStoreBuilder::wait_for_replicas`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StoreWait {
    /// How many replicas must acknowledge each write.
    pub replicas: u32,
    /// How long a call waits for them (below the store timeout).
    pub timeout: Duration,
}

/// `[store.tls]`: TLS files of the Redis store's own, for `rediss://` URLs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoreTls {
    /// A PEM CA bundle trusted instead of the system's roots.
    pub ca: Option<PathBuf>,
    /// A client certificate chain and its key (PEM), for a Redis that asks for one.
    pub client: Option<(PathBuf, PathBuf)>,
    /// The server certificate's host name is not checked (its chain still is).
    pub skip_hostname_verification: bool,
}

/// How log lines are written (`--log-format`, `[log] format`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    /// Human-readable lines.
    Text,
    /// One JSON object per line.
    Json,
}

impl std::str::FromStr for LogFormat {
    type Err = String;

    fn from_str(s: &str) -> Result<LogFormat, String> {
        match s {
            "text" => Ok(LogFormat::Text),
            "json" => Ok(LogFormat::Json),
            other => Err(format!(
                "unknown log format {other:?}; expected `text` or `json`"
            )),
        }
    }
}

/// The PostgreSQL store's options (`--postgres-*`, `[store.postgres]`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PostgresOptions {
    /// The schema holding the buckets table.
    pub schema: String,
    /// The buckets table.
    pub table: String,
    /// The table is UNLOGGED.
    pub unlogged: bool,
    /// Each decision waits for its commit to reach the disk.
    pub synchronous_commit: bool,
    /// The isolation level.
    pub isolation: Isolation,
    /// Connections shared by all requests.
    pub connections: usize,
}

impl PostgresOptions {
    /// The schema unless told otherwise.
    pub const DEFAULT_SCHEMA: &str = "tollgate";
    /// The table unless told otherwise.
    pub const DEFAULT_TABLE: &str = "buckets";
    /// The connections unless told otherwise.
    pub const DEFAULT_CONNECTIONS: usize = 4;
}

impl Default for PostgresOptions {
    fn default() -> PostgresOptions {
        PostgresOptions {
            schema: PostgresOptions::DEFAULT_SCHEMA.to_owned(),
            table: PostgresOptions::DEFAULT_TABLE.to_owned(),
            unlogged: false,
            synchronous_commit: false,
            isolation: Isolation::ReadCommitted,
            connections: PostgresOptions::DEFAULT_CONNECTIONS,
        }
    }
}

/// The PostgreSQL options one source gives (the command line, the config file), `None` where
/// it is silent.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PostgresGiven {
    /// `schema`.
    pub schema: Option<String>,
    /// `table`.
    pub table: Option<String>,
    /// `unlogged`.
    pub unlogged: Option<bool>,
    /// `synchronous_commit`.
    pub synchronous_commit: Option<bool>,
    /// `isolation`.
    pub isolation: Option<Isolation>,
    /// `connections`.
    pub connections: Option<usize>,
}

impl PostgresOptions {
    /// These options, with what `given` sets in their place.
    pub fn with(self, given: &PostgresGiven) -> PostgresOptions {
        PostgresOptions {
            schema: given.schema.clone().unwrap_or(self.schema),
            table: given.table.clone().unwrap_or(self.table),
            unlogged: given.unlogged.unwrap_or(self.unlogged),
            synchronous_commit: given.synchronous_commit.unwrap_or(self.synchronous_commit),
            isolation: given.isolation.unwrap_or(self.isolation),
            connections: given.connections.unwrap_or(self.connections),
        }
    }
}

/// The config file's name of an algorithm.
pub fn algorithm_name(algorithm: Algorithm) -> &'static str {
    match algorithm {
        Algorithm::TokenBucket => "token_bucket",
        Algorithm::FixedWindow => "fixed_window",
        Algorithm::SlidingWindowLog => "sliding_log",
        Algorithm::SlidingWindowCounter => "sliding_counter",
        // `Algorithm` is non-exhaustive: one the config file cannot name yet.
        _ => "unknown",
    }
}

/// An isolation level by the name the command line and the config file give it.
pub fn isolation(name: &str) -> Result<Isolation, String> {
    match name {
        "read-committed" => Ok(Isolation::ReadCommitted),
        "serializable" => Ok(Isolation::Serializable),
        // As serde words an unknown name, which the config file's other choices get.
        other => Err(format!(
            "unknown variant `{other}`, expected `read-committed` or `serializable`"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_each_kind_of_store() {
        assert_eq!(StoreSpec::parse("memory"), Ok(StoreSpec::Memory));
        assert_eq!(
            StoreSpec::parse("redis://127.0.0.1:6379/2"),
            Ok(StoreSpec::Redis("redis://127.0.0.1:6379/2".into()))
        );
        assert_eq!(
            StoreSpec::parse("redis://a:1, redis://b:2"),
            Ok(StoreSpec::RedisCluster(vec![
                "redis://a:1".into(),
                "redis://b:2".into()
            ]))
        );
    }

    #[test]
    fn unix_sockets_name_one_redis() {
        assert_eq!(
            StoreSpec::parse("redis+unix:///run/redis.sock?pass=x"),
            Ok(StoreSpec::Redis(
                "redis+unix:///run/redis.sock?pass=x".into()
            ))
        );
        assert!(matches!(
            StoreSpec::parse("unix:///run/r.sock"),
            Ok(StoreSpec::Redis(_))
        ));
        assert!(
            StoreSpec::parse("unix://run/r.sock")
                .unwrap_err()
                .contains("absolute")
        );
        assert!(
            StoreSpec::parse("redis+unix:///a.sock,redis://b:1")
                .unwrap_err()
                .contains("one absolute path")
        );
    }

    /// The password shows nowhere the store is named: neither before `@` nor in the query
    /// (the environment mode puts `REDIS_AUTH` there for a Unix socket).
    #[test]
    fn a_store_is_named_without_its_password() {
        let shown = |url: &str| StoreSpec::parse(url).unwrap().to_string();
        assert_eq!(
            shown("redis+unix:///run/r.sock?user=u&pass=s3cret"),
            "redis at redis+unix:///run/r.sock?user=u&pass=***"
        );
        assert_eq!(shown("redis://u:s3cret@h:1"), "redis at redis://***@h:1");
        assert_eq!(
            shown("redis+sentinel://u:s3cret@h1:26379,h2/m/1?sentinel_password=s3cret"),
            "redis at redis+sentinel://***@h1:26379,h2/m/1?sentinel_password=***"
        );
        assert_eq!(
            shown("postgres://u@db/l?password=s3cret&sslmode=require"),
            "postgres at postgres://***@db/l?password=***&sslmode=require"
        );
    }

    /// `#insecure` would switch the redis crate's certificate checks off.
    #[test]
    fn a_redis_url_with_a_fragment_is_refused() {
        for url in [
            "rediss://h:6379/#insecure",
            "redis+unix:///r.sock#insecure",
            "rediss://u:s3cret@a:1,rediss://b:2#insecure",
        ] {
            let e = StoreSpec::parse(url).unwrap_err();
            assert!(e.contains("no fragment"), "{e}");
            assert!(!e.contains("s3cret"), "{e}");
        }
    }

    #[test]
    fn postgres_urls_name_the_postgres_store() {
        assert_eq!(
            StoreSpec::parse("postgres://u@db:5432/limits"),
            Ok(StoreSpec::Postgres("postgres://u@db:5432/limits".into()))
        );
        assert!(matches!(
            StoreSpec::parse("postgresql://db/x"),
            Ok(StoreSpec::Postgres(_))
        ));
    }

    #[test]
    fn refuses_what_it_cannot_open_and_says_why() {
        assert!(StoreSpec::parse("mysql://x").unwrap_err().contains("mysql"));
        assert!(
            StoreSpec::parse("redis://")
                .unwrap_err()
                .contains("no host")
        );
        assert!(StoreSpec::parse("memroy").unwrap_err().contains("memroy"));
    }

    #[test]
    fn sentinel_urls_name_one_redis_and_must_name_the_master() {
        for url in [
            "redis+sentinel://h1:26379,h2:26379/mymaster",
            "rediss+sentinel://:pw@h1/mymaster/2?sentinel_password=x",
        ] {
            assert_eq!(StoreSpec::parse(url), Ok(StoreSpec::Redis(url.into())));
        }
        for url in [
            "redis+sentinel://h1,h2",
            "redis+sentinel://h1/",
            "redis+sentinel:///m",
            "redis+sentinel://:s3cret@/m",
        ] {
            let e = StoreSpec::parse(url).unwrap_err();
            assert!(e.contains("MASTER_NAME"), "{url}: {e}");
            assert!(!e.contains("s3cret"), "{e}");
        }
    }

    #[test]
    fn passwords_stay_out_of_logs() {
        let spec = StoreSpec::parse("redis://user:secret@host:6379").unwrap();
        assert_eq!(spec.to_string(), "redis at redis://***@host:6379");
    }

    #[test]
    fn listen_addresses_take_host_names_and_bare_ports() {
        let local = |port| SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::LOCALHOST, port));
        assert_eq!(listen_addr("127.0.0.1:8080"), Ok(local(8080)));
        assert_eq!(listen_addr("8080"), Ok(local(8080)));
        assert_eq!(listen_addr("localhost:8080"), Ok(local(8080)));
        assert_eq!(
            listen_addr("[::1]:9"),
            Ok("[::1]:9".parse::<SocketAddr>().unwrap())
        );
        assert!(listen_addr("localhost").unwrap_err().contains("HOST:PORT"));
        assert!(listen_addr("localhost:http").unwrap_err().contains("port"));
        assert!(
            listen_addr("no-such-host.invalid:80")
                .unwrap_err()
                .contains("resolve")
        );
    }

    #[test]
    fn isolation_levels_go_by_their_names() {
        assert_eq!(isolation("serializable"), Ok(Isolation::Serializable));
        assert_eq!(isolation("read-committed"), Ok(Isolation::ReadCommitted));
        assert!(isolation("snapshot").unwrap_err().contains("snapshot"));
    }
}
