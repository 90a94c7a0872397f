//! The command line: `tollgate [serve] [--listen ADDR] [--store URL] ...`, `tollgate migrate`,
//! `tollgate config check`, `tollgate top`. This module only parses: each invocation is turned into the
//! server's own option types ([`crate::options`], [`Overrides`]) before anything runs.

use std::collections::BTreeSet;
use std::ffi::OsString;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::str::FromStr;
use std::time::Duration;

use clap::builder::{PossibleValue, PossibleValuesParser, TypedValueParser};
use clap::{ArgMatches, Args, CommandFactory, FromArgMatches, Parser, Subcommand};

use crate::error::ServeError;
use crate::options::{
    self, DEFAULT_LISTEN, LogFormat, OnStoreError, PostgresGiven, PostgresOptions, StoreSpec,
};
use crate::settings::{Overrides, Settings};

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
    Serve(Box<ServeArgs>),
    /// Create the PostgreSQL schema, table and function (also done on first use).
    Migrate(MigrateArgs),
    /// Work with config files.
    #[command(subcommand)]
    Config(ConfigCommand),
    /// Show who is being limited, refreshed every second: each policy's decisions per second
    /// and its top denied keys, read from the admin listener with a `read` token.
    Top(TopArgs),
}

/// `tollgate top`.
#[derive(Debug, Clone, Args)]
pub struct TopArgs {
    /// The admin listener (or the data port, when there is none): `http://HOST:PORT`, or
    /// `https://...`.
    #[arg(long, default_value = "http://127.0.0.1:8080")]
    pub url: String,
    /// A file holding a token with the `read` scope; without one, `TOLLGATE_TOKEN` is read.
    #[arg(long)]
    pub token_file: Option<PathBuf>,
    /// The CA certificate (PEM) to trust for an `https` URL, instead of the system's roots.
    #[arg(long)]
    pub ca: Option<PathBuf>,
    /// Over the last minute or the last hour.
    #[arg(long, default_value = "1m", value_parser = ["1m", "1h"])]
    pub window: String,
    /// The most keys shown per policy.
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u16).range(1..=1000))]
    pub limit: u16,
    /// Print one table and exit (for scripts).
    #[arg(long)]
    pub once: bool,
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

/// `tollgate migrate`.
#[derive(Debug, Clone, Args)]
pub struct MigrateArgs {
    /// The database: `postgres://USER@HOST:PORT/DB`.
    #[arg(long)]
    pub store: String,

    /// The table to create.
    #[command(flatten)]
    pub table: PostgresTableArgs,
}

/// The PostgreSQL table's options: what `migrate` creates, and `serve` decides in.
#[derive(Debug, Clone, PartialEq, Eq, Args)]
pub struct PostgresTableArgs {
    /// The schema holding the buckets table.
    #[arg(long, default_value = PostgresOptions::DEFAULT_SCHEMA)]
    pub postgres_schema: String,

    /// The buckets table.
    #[arg(long, default_value = PostgresOptions::DEFAULT_TABLE)]
    pub postgres_table: String,

    /// Create the table UNLOGGED: faster, but a crash empties it (every bucket full again).
    #[arg(long)]
    pub postgres_unlogged: bool,
}

/// Options of the PostgreSQL store.
#[derive(Debug, Clone, PartialEq, Eq, Args)]
pub struct PostgresArgs {
    /// The table.
    #[command(flatten)]
    pub table: PostgresTableArgs,

    /// Make each decision wait for its commit to reach the disk. Off (the default), a crash
    /// of the database server loses the decisions of its last moment (at most 3 ×
    /// `wal_writer_delay`, 600 ms by default): their tokens can be taken again.
    #[arg(long)]
    pub postgres_synchronous_commit: bool,

    /// The isolation level: `read-committed` (atomic without retries) or `serializable`
    /// (as distributed SQL runs; conflicts are retried).
    #[arg(
        long,
        default_value = "read-committed",
        value_parser = PossibleValuesParser::new([
            PossibleValue::new("read-committed").help("READ COMMITTED"),
            PossibleValue::new("serializable").help("SERIALIZABLE"),
        ])
        .try_map(|name| options::isolation(&name)),
    )]
    pub postgres_isolation: options::Isolation,

    /// Connections shared by all requests (statements are pipelined on them).
    #[arg(long, default_value_t = PostgresOptions::DEFAULT_CONNECTIONS)]
    pub postgres_connections: usize,
}

impl PostgresArgs {
    /// Those of these options that `given` says the command line gave.
    fn given(&self, given: &Given) -> PostgresGiven {
        PostgresGiven {
            schema: given.pick("postgres_schema", &self.table.postgres_schema),
            table: given.pick("postgres_table", &self.table.postgres_table),
            unlogged: given.pick("postgres_unlogged", &self.table.postgres_unlogged),
            synchronous_commit: given.pick(
                "postgres_synchronous_commit",
                &self.postgres_synchronous_commit,
            ),
            isolation: given.pick("postgres_isolation", &self.postgres_isolation),
            connections: given.pick("postgres_connections", &self.postgres_connections),
        }
    }
}

/// `tollgate serve`.
#[derive(Debug, Clone, Args)]
pub struct ServeArgs {
    /// The config file (TOML): store, listeners, fail policy, named policies. Flags given on
    /// the command line override it. Without one, the embedded default: the flags' defaults,
    /// inline policies only.
    #[arg(long, env = "TOLLGATE_CONFIG")]
    pub config: Option<PathBuf>,

    /// Where the HTTP/JSON API listens: IP:PORT, HOST:PORT, or a port alone (on 127.0.0.1);
    /// port 0 picks a free port (printed at start).
    #[arg(long, default_value_t = DEFAULT_LISTEN, value_parser = options::listen_addr)]
    pub listen: SocketAddr,

    /// Where the Redis protocol (`CL.THROTTLE`, `THROTTLE`, `TOLLGATE.CHECK`) listens, as
    /// `--listen` takes it; off unless given here or in the config file.
    #[arg(long, value_parser = options::listen_addr)]
    pub resp_listen: Option<SocketAddr>,

    /// Where Envoy's rate-limit service (gRPC, `envoy.service.ratelimit.v3`) listens; off
    /// unless given here or in the config file, or an Envoy config directory is (then on
    /// 127.0.0.1:8081).
    #[arg(long, value_parser = options::listen_addr)]
    pub grpc_listen: Option<SocketAddr>,

    /// Where the admin endpoints (`/metrics`, `/v1/policies`, `/v1/buckets`, `/rlconfig`)
    /// listen, as `--listen` takes it; they are then gone from the data port; off unless given
    /// here or in the config file (then the data port serves them).
    #[arg(long, value_parser = options::listen_addr)]
    pub admin_listen: Option<SocketAddr>,

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
    /// comma-separated redis:// URLs (the seed nodes of a Redis Cluster), Redis Sentinel
    /// (`redis+sentinel://HOST:26379,HOST:26379/MASTER_NAME`), or
    /// `postgres://USER@HOST:PORT/DB`.
    #[arg(long, default_value = "memory", value_parser = StoreSpec::parse)]
    pub store: StoreSpec,

    /// What to answer when the store fails or does not answer in time: `allow` (fail open),
    /// `deny` (fail closed: 503), or `local` (decide in this process's memory meanwhile).
    #[arg(
        long,
        default_value = "allow",
        value_parser = one_of::<OnStoreError, 3>([
            PossibleValue::new("allow").help("Fail open: allow"),
            PossibleValue::new("deny").help("Fail closed: 503"),
            PossibleValue::new("local").help("Decide locally, in memory"),
        ]),
    )]
    pub on_store_error: OnStoreError,

    /// The bound on one store call, in milliseconds (default: 50 for Redis and memory, 100
    /// for PostgreSQL).
    #[arg(long = "store-timeout-ms", value_name = "MS", value_parser = parse_millis)]
    pub store_timeout: Option<Duration>,

    /// The most keys held in memory (the memory store, and the `local` fallback).
    #[arg(long, default_value_t = tollgate::store::memory::DEFAULT_MAX_KEYS)]
    pub max_keys: usize,

    /// The PostgreSQL store's options.
    #[command(flatten)]
    pub postgres: PostgresArgs,

    /// How log lines are written (to stderr): `text` or `json` (one object per line).
    #[arg(
        long,
        default_value = "text",
        value_parser = one_of::<LogFormat, 2>([
            PossibleValue::new("text").help("Human-readable lines"),
            PossibleValue::new("json").help("One JSON object per line"),
        ]),
    )]
    pub log_format: LogFormat,
}

impl ServeArgs {
    /// What these arguments say, of which `given` names the options the command line (or the
    /// environment) gave: those override the config file; the others are only defaults.
    pub fn overrides(&self, given: &Given) -> Overrides {
        Overrides {
            config: self.config.clone(),
            listen: given.pick("listen", &self.listen),
            resp_listen: self.resp_listen,
            grpc_listen: self.grpc_listen,
            admin_listen: self.admin_listen,
            envoy_config_dir: self.envoy_config_dir.clone(),
            envoy_merge_domain_config: self.envoy_merge_domain_config,
            store: given.pick("store", &self.store),
            on_store_error: given.pick("on_store_error", &self.on_store_error),
            store_timeout: self.store_timeout,
            max_keys: given.pick("max_keys", &self.max_keys),
            postgres: self.postgres.given(given),
            log_format: given.pick("log_format", &self.log_format),
        }
    }
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

    /// `value` if the option `id` was given.
    fn pick<T: Clone>(&self, id: &str, value: &T) -> Option<T> {
        self.has(id).then(|| value.clone())
    }
}

/// What a command line asks for, in the server's own terms.
#[derive(Debug)]
pub enum Invocation {
    /// Serve, with these options over the config file's.
    Serve(Box<Overrides>),
    /// Create the PostgreSQL schema in the database `store` names.
    Migrate {
        /// The `--store` given.
        store: String,
        /// The PostgreSQL options.
        postgres: PostgresOptions,
    },
    /// Show who is being limited.
    Top(crate::monitor::MonitorOptions),
    /// Check a config file or an Envoy config directory.
    CheckConfig {
        /// The file or directory.
        path: PathBuf,
        /// Merge the YAML files that name the same domain.
        merge_domains: bool,
    },
}

impl Invocation {
    /// Reads `argv` (the program's name first), or says why not: clap's error, which prints
    /// itself as `--help` and `--version` too, and knows its exit code.
    pub fn parse<I, T>(argv: I) -> Result<Invocation, clap::Error>
    where
        I: IntoIterator<Item = T>,
        T: Into<OsString> + Clone,
    {
        let matches = Cli::command().try_get_matches_from(argv)?;
        let cli = Cli::from_arg_matches(&matches)?;
        Ok(match cli.command {
            Some(Command::Serve(args)) => {
                let given = Given::of(matches.subcommand_matches("serve").unwrap_or(&matches));
                Invocation::Serve(Box::new(args.overrides(&given)))
            }
            None => Invocation::Serve(Box::new(cli.serve.overrides(&Given::of(&matches)))),
            Some(Command::Migrate(args)) => Invocation::Migrate {
                store: args.store,
                postgres: PostgresOptions {
                    schema: args.table.postgres_schema,
                    table: args.table.postgres_table,
                    unlogged: args.table.postgres_unlogged,
                    ..PostgresOptions::default()
                },
            },
            Some(Command::Top(args)) => Invocation::Top(crate::monitor::MonitorOptions {
                url: args.url,
                token_file: args.token_file,
                ca: args.ca,
                window: args.window,
                limit: usize::from(args.limit),
                once: args.once,
            }),
            Some(Command::Config(ConfigCommand::Check {
                file,
                envoy_merge_domain_config,
            })) => Invocation::CheckConfig {
                path: file,
                merge_domains: envoy_merge_domain_config,
            },
        })
    }
}

/// The settings `tollgate ARGS...` serves with (`argv` without the program's name), its
/// config file read and checked: how tests, embedders and the benchmarks start a server as the
/// command line would.
pub fn serve_settings<I, T>(argv: I) -> Result<Settings, ServeError>
where
    I: IntoIterator<Item = T>,
    T: Into<OsString> + Clone,
{
    let argv = std::iter::once(OsString::from("tollgate")).chain(argv.into_iter().map(Into::into));
    match Invocation::parse(argv) {
        Ok(Invocation::Serve(overrides)) => Settings::load(*overrides),
        Ok(_) => Err(ServeError::Args("not a `serve` command line".to_owned())),
        Err(e) => Err(ServeError::Args(e.to_string())),
    }
}

/// A parser of `values` (each with its help line, which `--help` lists) into `T`.
fn one_of<T, const N: usize>(values: [PossibleValue; N]) -> impl TypedValueParser<Value = T>
where
    T: FromStr<Err = String> + Clone + Send + Sync + 'static,
{
    PossibleValuesParser::new(values).try_map(|name| name.parse::<T>())
}

fn parse_millis(s: &str) -> Result<Duration, String> {
    match s.parse::<u64>() {
        Ok(0) => Err("must be at least 1 ms".to_owned()),
        Ok(ms) => Ok(Duration::from_millis(ms)),
        Err(e) => Err(format!("{s:?} is not a whole number of milliseconds: {e}")),
    }
}
