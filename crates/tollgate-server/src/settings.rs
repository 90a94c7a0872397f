//! What the server runs with: the defaults, overridden by the config file, overridden by the
//! options given on the command line ([`Overrides`]; never by a flag's default).

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::auth::Tokens;
use crate::config::{Config, ConfigError, ListenerGiven, TracingConfig};
use crate::descriptors::EnvoyAlgorithm;
use crate::envoy::EnvoySettings;
use crate::error::ServeError;
use crate::limiter::Policies;
use crate::net::{ListenerSettings, limits};
use crate::options::{
    DEFAULT_LISTEN, LogFormat, OnStoreError, PostgresGiven, PostgresOptions, StoreSpec, StoreTls,
    StoreWait,
};
use crate::resp::RespSettings;
use crate::traces::TracingSettings;

/// What the command line says: each option it gave, `None` where it is silent (then the
/// config file, or else the default, decides).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Overrides {
    /// The config file.
    pub config: Option<PathBuf>,
    /// Where HTTP listens.
    pub listen: Option<SocketAddr>,
    /// Where RESP listens.
    pub resp_listen: Option<SocketAddr>,
    /// Where gRPC listens.
    pub grpc_listen: Option<SocketAddr>,
    /// Where the admin endpoints listen.
    pub admin_listen: Option<SocketAddr>,
    /// The Envoy config directory.
    pub envoy_config_dir: Option<PathBuf>,
    /// Merge the Envoy files of one domain.
    pub envoy_merge_domain_config: bool,
    /// The store.
    pub store: Option<StoreSpec>,
    /// The fail policy.
    pub on_store_error: Option<OnStoreError>,
    /// The bound on one store call.
    pub store_timeout: Option<Duration>,
    /// The most keys held in memory.
    pub max_keys: Option<usize>,
    /// The PostgreSQL store's options.
    pub postgres: PostgresGiven,
    /// How logs are written.
    pub log_format: Option<LogFormat>,
}

/// The server's settings, resolved.
#[derive(Debug, Clone)]
pub struct Settings {
    /// What the command line said, which every reload of the config file resolves under.
    pub overrides: Overrides,
    /// The config file, if any.
    pub config: Option<PathBuf>,
    /// What the config file held when these settings were read from it.
    pub config_text: Option<String>,
    /// Where HTTP listens.
    pub listen: SocketAddr,
    /// The HTTP listener's limits and TLS.
    pub http: ListenerSettings,
    /// The gRPC listener's limits and TLS (when gRPC is on).
    pub grpc_listener: ListenerSettings,
    /// Where the admin endpoints listen, if on their own port.
    pub admin_listen: Option<SocketAddr>,
    /// The admin listener's limits and TLS.
    pub admin: ListenerSettings,
    /// The store.
    pub store: StoreSpec,
    /// The Redis store's TLS files of its own (`[store.tls]`).
    pub store_tls: Option<StoreTls>,
    /// The Redis store's durability option (`[store] wait_replicas`, `wait_timeout_ms`).
    pub store_wait: Option<StoreWait>,
    /// The fail policy.
    pub on_store_error: OnStoreError,
    /// The bound on one store call.
    pub store_timeout: Duration,
    /// The most keys held in memory.
    pub max_keys: usize,
    /// The PostgreSQL store's options.
    pub postgres: PostgresOptions,
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
    /// The tokens requests need (none: everything is open).
    pub auth: Tokens,
    /// OpenTelemetry spans over OTLP, if `[tracing] enabled`.
    pub tracing: Option<TracingSettings>,
    /// The keys each summary of who is limited lists, and one decision in how many it records,
    /// if `[top] enabled` (the default).
    pub top: Option<(usize, u32)>,
}

impl Settings {
    /// The settings `overrides` ask for: the config file they name (or none: the embedded
    /// default) under them, its policies checked against the store.
    pub fn load(overrides: Overrides) -> Result<Settings, ServeError> {
        let config = overrides.config.as_deref().map(Config::load).transpose()?;
        let settings = Settings::resolve(overrides, config.as_ref());
        if let Some(grpc) = &settings.grpc
            && grpc.xds.is_some()
            && settings.overrides.envoy_config_dir.is_some()
        {
            return Err(ConfigError {
                file: settings.config.clone().unwrap_or_default(),
                at: None,
                field: "grpc.xds".to_owned(),
                message: "--envoy-config-dir and [grpc.xds] are two sources of Envoy's rules: \
                          give one (as envoyproxy/ratelimit's CONFIG_TYPE is FILE or \
                          GRPC_XDS_SOTW)"
                    .to_owned(),
            }
            .into());
        }
        check_policies(
            settings.config.as_deref(),
            &settings.store,
            &settings.policies,
        )?;
        Ok(settings)
    }

    /// `overrides` over `file` over the defaults.
    pub fn resolve(overrides: Overrides, file: Option<&Config>) -> Settings {
        let cli = &overrides;
        let f = file;
        let store = cli
            .store
            .clone()
            .or_else(|| f.and_then(|c| c.store.clone()))
            .unwrap_or(StoreSpec::Memory);
        let timeout_default = match store {
            StoreSpec::Postgres(_) => tollgate::store::postgres::DEFAULT_TIMEOUT,
            _ => tollgate::store::redis::DEFAULT_TIMEOUT,
        };
        let grpc = f.map(|c| c.grpc.clone()).unwrap_or_default();
        let grpc_listen = cli.grpc_listen.or(grpc.listen);
        let config_dir = cli.envoy_config_dir.clone().or(grpc.config_dir);
        let xds = grpc.xds;
        let unix_socket = grpc.unix_socket;
        let on =
            grpc_listen.is_some() || config_dir.is_some() || unix_socket.is_some() || xds.is_some();
        let grpc = on.then(|| EnvoySettings {
            // On a Unix socket alone unless an address is given too.
            listen: match (grpc_listen, &unix_socket) {
                (Some(addr), _) => Some(addr),
                (None, Some(_)) => None,
                (None, None) => Some(crate::envoy::DEFAULT_LISTEN),
            },
            unix_socket,
            config_dir,
            merge_domain_config: cli.envoy_merge_domain_config
                || grpc.merge_domain_config.unwrap_or(false),
            algorithm: grpc.algorithm.unwrap_or(EnvoyAlgorithm::FixedWindow),
            domain_algorithms: grpc.domain_algorithms,
            shadow_mode: grpc.shadow_mode.unwrap_or(false),
            charge: grpc.charge.unwrap_or_default(),
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
            xds,
            health_needs_config: grpc.health_needs_config.unwrap_or(false),
            response_dynamic_metadata: grpc.response_dynamic_metadata.unwrap_or(false),
            prometheus: grpc.prometheus,
        });
        let listener = |defaults: limits::ConnLimits, pick: fn(&Config) -> &ListenerGiven| {
            let given = f.map(pick).cloned().unwrap_or_default();
            ListenerSettings {
                limits: defaults.with(&given.conn),
                tls: given.tls,
            }
        };
        let postgres = PostgresOptions::default()
            .with(&f.map(|c| c.postgres.clone()).unwrap_or_default())
            .with(&cli.postgres);
        Settings {
            config: f.map(|c| c.path.clone()),
            config_text: f.map(|c| c.text.clone()),
            listen: cli
                .listen
                .or_else(|| f.and_then(|c| c.listen))
                .unwrap_or(DEFAULT_LISTEN),
            http: listener(limits::HTTP, |c| &c.http_listener),
            grpc_listener: listener(limits::GRPC, |c| &c.grpc_listener),
            admin_listen: cli.admin_listen.or_else(|| f.and_then(|c| c.admin_listen)),
            admin: listener(limits::HTTP, |c| &c.admin_listener),
            store,
            store_tls: f.and_then(|c| c.store_tls.clone()),
            store_wait: f.and_then(|c| c.store_wait),
            on_store_error: cli
                .on_store_error
                .or_else(|| f.and_then(|c| c.on_store_error))
                .unwrap_or(OnStoreError::Allow),
            store_timeout: cli
                .store_timeout
                .or_else(|| f.and_then(|c| c.store_timeout))
                .unwrap_or(timeout_default),
            max_keys: cli
                .max_keys
                .or_else(|| f.and_then(|c| c.max_keys))
                .unwrap_or(tollgate::store::memory::DEFAULT_MAX_KEYS),
            postgres,
            inline_policies: f.and_then(|c| c.inline_policies).unwrap_or(true),
            log_format: cli
                .log_format
                .or_else(|| f.and_then(|c| c.log_format))
                .unwrap_or(LogFormat::Text),
            policies: f.map(|c| c.policies.clone()).unwrap_or_default(),
            resp_listen: cli.resp_listen.or_else(|| f.and_then(|c| c.resp_listen)),
            resp: RespSettings {
                password: f.and_then(|c| c.resp_password.clone()),
                listener: listener(limits::RESP, |c| &c.resp_listener),
            },
            grpc,
            auth: f.map(|c| c.auth.clone()).unwrap_or_default(),
            tracing: f.and_then(|c| tracing(&c.tracing)),
            top: top(f.map(|c| c.top).unwrap_or_default()),
            overrides,
        }
    }

    /// The settings that differ between these (running) and `new`, and need a restart to
    /// change.
    pub fn needing_restart(&self, new: &Settings) -> Vec<&'static str> {
        let running = self;
        let mut changed = Vec::new();
        let mut differ = |name, differs: bool| {
            if differs {
                changed.push(name);
            }
        };
        differ("http.listen", running.listen != new.listen);
        differ("[http] connection limits or tls", running.http != new.http);
        differ(
            "[grpc] connection limits or tls",
            running.grpc_listener != new.grpc_listener,
        );
        differ(
            "admin.listen, or [admin] connection limits or tls",
            running.admin_listen != new.admin_listen || running.admin != new.admin,
        );
        differ("store.url", running.store != new.store);
        differ("store.tls", running.store_tls != new.store_tls);
        differ(
            "store.wait_replicas or store.wait_timeout_ms",
            running.store_wait != new.store_wait,
        );
        differ(
            "store.on_error",
            running.on_store_error != new.on_store_error,
        );
        differ("store.timeout", running.store_timeout != new.store_timeout);
        differ("store.max_keys", running.max_keys != new.max_keys);
        differ("store.postgres", running.postgres != new.postgres);
        differ("log.format", running.log_format != new.log_format);
        differ("resp.listen", running.resp_listen != new.resp_listen);
        differ("resp", running.resp != new.resp);
        differ("tracing", running.tracing != new.tracing);
        differ("top", running.top != new.top);
        differ(
            "grpc.listen, grpc.unix_socket, grpc.config_dir, grpc.merge_domain_config, [grpc.xds] \
             or [grpc.prometheus]",
            match (&running.grpc, &new.grpc) {
                (Some(a), Some(b)) => a.needs_restart(b),
                (None, None) => false,
                _ => true,
            },
        );
        changed
    }
}

/// `[top]`'s capacity and sampling over their defaults, when it is enabled (as it is by
/// default).
fn top(given: crate::config::TopConfig) -> Option<(usize, u32)> {
    given.enabled.unwrap_or(true).then(|| {
        (
            given.capacity.unwrap_or(crate::top::DEFAULT_CAPACITY),
            given
                .sample_every
                .unwrap_or(crate::top::DEFAULT_SAMPLE_EVERY),
        )
    })
}

/// `[tracing]` over its defaults, when it is enabled.
fn tracing(given: &TracingConfig) -> Option<TracingSettings> {
    given.enabled.unwrap_or(false).then(|| TracingSettings {
        protocol: given.protocol.unwrap_or_default(),
        endpoint: given.endpoint.clone(),
        service_name: given
            .service_name
            .clone()
            .unwrap_or_else(|| crate::traces::DEFAULT_SERVICE_NAME.to_owned()),
        service_namespace: given.service_namespace.clone().unwrap_or_default(),
        service_instance_id: given.service_instance_id.clone().unwrap_or_default(),
        sampling_rate: given.sampling_rate.unwrap_or(1.0),
    })
}

/// Refuses policies the store cannot decide (numbers beyond its range), naming where the file
/// defines each.
pub(crate) fn check_policies(
    file: Option<&Path>,
    store: &StoreSpec,
    policies: &Policies,
) -> Result<(), ConfigError> {
    for p in policies.iter() {
        if let Err(e) = store.supports(&p.policy) {
            return Err(ConfigError {
                file: file.map(Path::to_owned).unwrap_or_default(),
                at: Some(p.defined_at),
                field: format!("policies.{}.{}", p.name, e.field()),
                message: format!("the store ({store}) cannot decide it: {e}"),
            });
        }
    }
    Ok(())
}
