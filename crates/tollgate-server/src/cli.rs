//! The command line: `tollgate [serve] [--listen ADDR] [--store URL] ...`.

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::{ArgMatches, Args, Parser, Subcommand, ValueEnum};
use serde::Deserialize;

use crate::store::StoreSpec;

/// tollgate: an exact, distributed token-bucket rate limiter.
#[derive(Debug, Parser)]
#[command(
    name = "tollgate",
    version,
    about,
    args_conflicts_with_subcommands = true
)]
pub struct Cli {
    /// What to do; `serve` when omitted.
    #[command(subcommand)]
    pub command: Option<Command>,
    /// `serve`'s options, so that `tollgate --listen ...` serves too.
    #[command(flatten)]
    pub serve: ServeArgs,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Serve the rate-limit API (the default).
    Serve(ServeArgs),
    /// Create the PostgreSQL schema, table and function (also done on first use).
    Migrate(MigrateArgs),
    /// Measure a store beside the approaches teams publish, and write the report.
    #[command(subcommand)]
    Bench(BenchTarget),
    /// Work with config files.
    #[command(subcommand)]
    Config(ConfigCommand),
}

/// `tollgate config`'s subcommands.
#[derive(Debug, Subcommand)]
pub enum ConfigCommand {
    /// Check a config file: print its policies and exit 0, or print what is wrong (file, line,
    /// column, field) and exit 1. Given a directory, check it as envoyproxy/ratelimit YAML.
    Check {
        /// The TOML file, or a directory of envoyproxy/ratelimit YAML files.
        file: PathBuf,
        /// Merge the YAML files that name the same domain (for a directory).
        #[arg(long)]
        envoy_merge_domain_config: bool,
    },
}

/// `tollgate bench`'s targets.
#[derive(Debug, Subcommand)]
pub enum BenchTarget {
    /// The memory store beside `governor`: ns per check on a hot key, 100k and 1M keys, at 1
    /// and 2 threads, and bytes per key.
    Memory(tollgate_bench::MemoryBenchArgs),
    /// The Redis store beside a Lua script, several commands, and WATCH/MULTI.
    Redis(tollgate_bench::RedisBenchArgs),
    /// The PostgreSQL store beside the published PL/pgSQL function.
    Postgres(tollgate_bench::PostgresBenchArgs),
    /// The tower middleware (memory store) and the server's own router beside a bare axum
    /// handler.
    Http(tollgate_bench::HttpBenchArgs),
    /// `CL.THROTTLE` on tollgate's Redis-protocol port beside redis-cell and throttlecrab.
    Resp(tollgate_bench::RespBenchArgs),
    /// Envoy's `ShouldRateLimit` on tollgate's gRPC listener, memory store and Redis.
    Grpc(tollgate_bench::GrpcBenchArgs),
    /// A long run on Redis with a fault every period: latency per period, and memory, file
    /// descriptors and tasks before and after.
    Soak(tollgate_bench::SoakArgs),
    /// Every benchmark in one run, on throwaway servers it starts and stops itself, with an
    /// index (`index.md`) of the machine and of every goal, met or not.
    All(AllArgs),
}

/// `tollgate bench all`.
#[derive(Debug, Clone, Args)]
pub struct AllArgs {
    /// A smoke run: every benchmark cut short (about two minutes in all); its figures are not
    /// for quoting.
    #[arg(long)]
    pub quick: bool,
    /// Where every report and the index are written.
    #[arg(long, default_value = "bench-report")]
    pub out: PathBuf,
    /// A Redis to use instead of starting one (the benchmarks write their own keys into it).
    #[arg(long)]
    pub redis: Option<String>,
    /// A PostgreSQL to use instead of starting one (the benchmarks make their own schemas).
    #[arg(long)]
    pub postgres: Option<String>,
    /// The nodes of a Redis Cluster to use instead of starting one of three masters
    /// (comma-separated URLs).
    #[arg(long, value_delimiter = ',')]
    pub cluster: Vec<String>,
    /// Only these benchmarks, comma-separated (default: every one).
    #[arg(long, value_delimiter = ',')]
    pub only: Vec<BenchName>,
}

/// The benchmarks `bench all` runs, in the order it runs them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum BenchName {
    /// `bench memory`.
    Memory,
    /// `bench redis`.
    Redis,
    /// `bench postgres`.
    Postgres,
    /// `bench http`.
    Http,
    /// `bench resp`.
    Resp,
    /// `bench grpc`.
    Grpc,
    /// `bench soak`.
    Soak,
}

/// `tollgate migrate`.
#[derive(Debug, Clone, Args)]
pub struct MigrateArgs {
    /// The database: `postgres://USER@HOST:PORT/DB`.
    #[arg(long)]
    pub store: String,

    /// The PostgreSQL store's options.
    #[command(flatten)]
    pub postgres: PostgresArgs,
}

/// Options of the PostgreSQL store.
#[derive(Debug, Clone, PartialEq, Eq, Args)]
pub struct PostgresArgs {
    /// The schema holding the buckets table.
    #[arg(long, default_value = "tollgate")]
    pub postgres_schema: String,

    /// The buckets table.
    #[arg(long, default_value = "buckets")]
    pub postgres_table: String,

    /// Create the table UNLOGGED: faster, but a crash empties it (every bucket full again).
    #[arg(long)]
    pub postgres_unlogged: bool,

    /// Make each decision wait for its commit to reach the disk. Off (the default), a crash
    /// of the database server loses the decisions of its last moment (at most 3 ×
    /// `wal_writer_delay`, 600 ms by default): their tokens can be taken again.
    #[arg(long)]
    pub postgres_synchronous_commit: bool,

    /// The isolation level: `read-committed` (atomic without retries) or `serializable`
    /// (as distributed SQL runs; conflicts are retried).
    #[arg(long, value_enum, default_value_t = IsolationArg::ReadCommitted)]
    pub postgres_isolation: IsolationArg,

    /// Connections shared by all requests (statements are pipelined on them).
    #[arg(long, default_value_t = 4)]
    pub postgres_connections: usize,
}

/// `--postgres-isolation`, and `[store.postgres] isolation`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum IsolationArg {
    /// READ COMMITTED.
    ReadCommitted,
    /// SERIALIZABLE.
    Serializable,
}

/// `tollgate serve`.
#[derive(Debug, Clone, Args)]
pub struct ServeArgs {
    /// The config file (TOML): store, listeners, fail policy, named policies. Flags given on
    /// the command line override it. Without one, the embedded default: the flags' defaults,
    /// inline policies only.
    #[arg(long, env = "TOLLGATE_CONFIG")]
    pub config: Option<PathBuf>,

    /// Where the HTTP/JSON API listens; port 0 picks a free port (printed at start).
    #[arg(long, default_value = "127.0.0.1:8080")]
    pub listen: SocketAddr,

    /// Where the Redis protocol (`CL.THROTTLE`, `THROTTLE`, `TOLLGATE.CHECK`) listens; off
    /// unless given here or in the config file.
    #[arg(long)]
    pub resp_listen: Option<SocketAddr>,

    /// Where Envoy's rate-limit service (gRPC, `envoy.service.ratelimit.v3`) listens; off
    /// unless given here or in the config file, or an Envoy config directory is (then on
    /// 127.0.0.1:8081).
    #[arg(long)]
    pub grpc_listen: Option<SocketAddr>,

    /// A directory of envoyproxy/ratelimit YAML config files, loaded as that service loads
    /// them and watched for changes (it turns the gRPC listener on); off unless given here or
    /// in the config file.
    #[arg(long)]
    pub envoy_config_dir: Option<PathBuf>,

    /// Merge the files that name the same domain into one (envoyproxy/ratelimit's
    /// `MERGE_DOMAIN_CONFIG`), rather than refuse the second.
    #[arg(long)]
    pub envoy_merge_domain_config: bool,

    /// The store: `memory`, `redis://HOST:PORT[/DB]`, `rediss://...` (TLS), several
    /// comma-separated redis:// URLs (the seed nodes of a Redis Cluster), or
    /// `postgres://USER@HOST:PORT/DB`.
    #[arg(long, default_value = "memory", value_parser = StoreSpec::parse)]
    pub store: StoreSpec,

    /// What to answer when the store fails or does not answer in time: `allow` (fail open),
    /// `deny` (fail closed: 503), or `local` (decide in this process's memory meanwhile).
    #[arg(long, value_enum, default_value_t = OnStoreError::Allow)]
    pub on_store_error: OnStoreError,

    /// The bound on one store call, in milliseconds (default: 50 for Redis and memory, 100
    /// for PostgreSQL).
    #[arg(long = "store-timeout-ms", value_parser = parse_millis)]
    pub store_timeout: Option<Duration>,

    /// The most keys held in memory (the memory store, and the `local` fallback).
    #[arg(long, default_value_t = tollgate::store::memory::DEFAULT_MAX_KEYS)]
    pub max_keys: usize,

    /// The PostgreSQL store's options.
    #[command(flatten)]
    pub postgres: PostgresArgs,

    /// How log lines are written (to stderr): `text` or `json` (one object per line).
    #[arg(long, value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,

    /// The options given on the command line (or by environment), which override the file.
    #[arg(skip)]
    pub given: Given,
}

/// The ids of the options given on the command line or by environment, rather than defaulted.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Given(BTreeSet<String>);

impl Given {
    /// What `matches` (those of `serve`, or of the command itself) were given.
    pub fn of(matches: &ArgMatches) -> Given {
        Given(
            matches
                .ids()
                .filter(|id| {
                    matches!(
                        matches.value_source(id.as_str()),
                        Some(clap::parser::ValueSource::CommandLine)
                            | Some(clap::parser::ValueSource::EnvVariable)
                    )
                })
                .map(|id| id.as_str().to_owned())
                .collect(),
        )
    }

    /// Whether the option with clap id `id` was given.
    pub fn has(&self, id: &str) -> bool {
        self.0.contains(id)
    }
}

/// `--log-format`, and `[log] format`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    /// Human-readable lines.
    Text,
    /// One JSON object per line.
    Json,
}

/// The fail policy, as the command line names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum OnStoreError {
    /// Fail open: allow.
    Allow,
    /// Fail closed: 503.
    Deny,
    /// Decide locally, in memory.
    Local,
}

impl std::fmt::Display for OnStoreError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            OnStoreError::Allow => "allow",
            OnStoreError::Deny => "deny",
            OnStoreError::Local => "local",
        })
    }
}

fn parse_millis(s: &str) -> Result<Duration, String> {
    match s.parse::<u64>() {
        Ok(0) => Err("must be at least 1 ms".to_owned()),
        Ok(ms) => Ok(Duration::from_millis(ms)),
        Err(e) => Err(format!("{s:?} is not a whole number of milliseconds: {e}")),
    }
}
