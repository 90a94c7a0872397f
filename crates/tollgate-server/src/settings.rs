//! What the server runs with: the command line's defaults, overridden by the config file,
//! overridden by the options given on the command line (never by a flag's default).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use crate::cli::{LogFormat, OnStoreError, PostgresArgs, ServeArgs};
use crate::config::{Config, Policies};
use crate::envoy::{EnvoyAlgorithm, EnvoySettings};
use crate::resp::RespSettings;
use crate::store::StoreSpec;

/// The server's settings, resolved.
#[derive(Debug, Clone)]
pub struct Settings {
    /// The config file, if any.
    pub config: Option<PathBuf>,
    /// What the config file held when these settings were read from it.
    pub config_text: Option<String>,
    /// Where HTTP listens.
    pub listen: SocketAddr,
    /// The store.
    pub store: StoreSpec,
    /// The fail policy.
    pub on_store_error: OnStoreError,
    /// The bound on one store call.
    pub store_timeout: Duration,
    /// The most keys held in memory.
    pub max_keys: usize,
    /// The PostgreSQL store's options.
    pub postgres: PostgresArgs,
    /// Whether `/v1/check` takes numbers from the client.
    pub inline_policies: bool,
    /// How logs are written.
    pub log_format: LogFormat,
    /// The named policies.
    pub policies: Policies,
    /// Where RESP listens, if it does.
    pub resp_listen: Option<SocketAddr>,
    /// The RESP listener's settings.
    pub resp: RespSettings,
    /// Envoy's rate-limit service, if it is on.
    pub grpc: Option<EnvoySettings>,
}

impl Settings {
    /// `args` over `file` over the defaults.
    pub fn resolve(args: &ServeArgs, file: Option<&Config>) -> Settings {
        let given = |id: &str| args.given.has(id);
        // The flag when given, else the file's value when it has one, else the flag's default.
        macro_rules! pick {
            ($id:literal, $flag:expr, $file:expr) => {
                match ($file, given($id)) {
                    (Some(value), false) => value,
                    _ => $flag,
                }
            };
        }
        let f = file;
        let pg = f.map(|c| c.postgres.clone()).unwrap_or_default();
        let store = pick!("store", args.store.clone(), f.and_then(|c| c.store.clone()));
        let timeout_default = match store {
            StoreSpec::Postgres(_) => tollgate::store::postgres::DEFAULT_TIMEOUT,
            _ => tollgate::store::redis::DEFAULT_TIMEOUT,
        };
        let store_timeout = match (args.store_timeout, f.and_then(|c| c.store_timeout)) {
            (Some(flag), _) => flag,
            (None, Some(file)) => file,
            (None, None) => timeout_default,
        };
        let grpc = f.map(|c| c.grpc.clone()).unwrap_or_default();
        let grpc_listen = args.grpc_listen.or(grpc.listen);
        let config_dir = args.envoy_config_dir.clone().or(grpc.config_dir);
        let grpc = (grpc_listen.is_some() || config_dir.is_some()).then(|| EnvoySettings {
            listen: grpc_listen.unwrap_or(crate::envoy::DEFAULT_LISTEN),
            config_dir,
            merge_domain_config: args.envoy_merge_domain_config
                || grpc.merge_domain_config.unwrap_or(false),
            algorithm: grpc.algorithm.unwrap_or(EnvoyAlgorithm::FixedWindow),
            domain_algorithms: grpc.domain_algorithms,
            shadow_mode: grpc.shadow_mode.unwrap_or(false),
            response_headers: grpc.response_headers.unwrap_or(false),
            ietf_headers: grpc.ietf_headers.unwrap_or(false),
            header_names: std::array::from_fn(|i| {
                grpc.header_names[i]
                    .clone()
                    .unwrap_or_else(|| crate::envoy::DEFAULT_HEADER_NAMES[i].to_owned())
            }),
            near_limit_ratio: grpc
                .near_limit_ratio
                .unwrap_or(crate::envoy::DEFAULT_NEAR_LIMIT_RATIO),
        });
        Settings {
            config: f.map(|c| c.path.clone()),
            config_text: f.map(|c| c.text.clone()),
            listen: pick!("listen", args.listen, f.and_then(|c| c.listen)),
            store,
            on_store_error: pick!(
                "on_store_error",
                args.on_store_error,
                f.and_then(|c| c.on_store_error)
            ),
            store_timeout,
            max_keys: pick!("max_keys", args.max_keys, f.and_then(|c| c.max_keys)),
            postgres: PostgresArgs {
                postgres_schema: pick!(
                    "postgres_schema",
                    args.postgres.postgres_schema.clone(),
                    pg.schema
                ),
                postgres_table: pick!(
                    "postgres_table",
                    args.postgres.postgres_table.clone(),
                    pg.table
                ),
                postgres_unlogged: pick!(
                    "postgres_unlogged",
                    args.postgres.postgres_unlogged,
                    pg.unlogged
                ),
                postgres_synchronous_commit: pick!(
                    "postgres_synchronous_commit",
                    args.postgres.postgres_synchronous_commit,
                    pg.synchronous_commit
                ),
                postgres_isolation: pick!(
                    "postgres_isolation",
                    args.postgres.postgres_isolation,
                    pg.isolation
                ),
                postgres_connections: pick!(
                    "postgres_connections",
                    args.postgres.postgres_connections,
                    pg.connections
                ),
            },
            inline_policies: f.and_then(|c| c.inline_policies).unwrap_or(true),
            log_format: pick!("log_format", args.log_format, f.and_then(|c| c.log_format)),
            policies: f.map(|c| c.policies.clone()).unwrap_or_default(),
            resp_listen: match (args.resp_listen, f.and_then(|c| c.resp_listen)) {
                (Some(flag), _) => Some(flag),
                (None, file) => file,
            },
            resp: RespSettings {
                password: f.and_then(|c| c.resp_password.clone()),
                idle_timeout: f
                    .and_then(|c| c.resp_idle_timeout)
                    .unwrap_or(crate::resp::DEFAULT_IDLE_TIMEOUT),
                max_connections: f
                    .and_then(|c| c.resp_max_connections)
                    .unwrap_or(crate::resp::DEFAULT_MAX_CONNECTIONS),
            },
            grpc,
        }
    }
}
