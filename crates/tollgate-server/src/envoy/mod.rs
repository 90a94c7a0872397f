//! Envoy's rate-limit service, drop-in: `envoy.service.ratelimit.v3.RateLimitService` over gRPC,
//! configured by a directory of envoyproxy/ratelimit YAML files, unchanged, or over xDS
//! ([`xds`]).
//!
//! Envoy's rules ([`descriptors`](crate::descriptors)), beside the decision core, resolve
//! descriptors as envoyproxy/ratelimit does; this front end answers as it does, and the
//! decisions are tollgate's, on any store: every descriptor of a request in one store call,
//! all-or-nothing, and a denied request takes nothing ([`ratelimit`]).

pub mod health;
pub mod json;
pub mod metrics;
pub mod prometheus;
pub mod ratelimit;
pub(crate) mod reload;
pub mod service;
pub mod xds;

use std::collections::BTreeMap;
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use std::path::PathBuf;
use std::sync::Arc;

use std::sync::PoisonError;
use std::sync::atomic::{AtomicBool, Ordering};

use arc_swap::ArcSwap;

use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitRequest;

use crate::auth::Scope;
use crate::descriptors::config::{EnvoyConfig, LoadError};
use crate::descriptors::{Charge, EnvoyAlgorithm, policy_of};
use crate::limiter::Limiter;
use metrics::EnvoyMetrics;

/// Where gRPC listens when it is on and no address is given (envoyproxy/ratelimit's port).
pub const DEFAULT_LISTEN: SocketAddr = SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::LOCALHOST, 8081));

/// Above this share of its limit a descriptor counts as near it (envoyproxy/ratelimit's
/// `NEAR_LIMIT_RATIO`); for the metrics only.
pub const DEFAULT_NEAR_LIMIT_RATIO: f64 = 0.8;

/// envoyproxy/ratelimit's names of its response headers, by default.
pub const DEFAULT_HEADER_NAMES: [&str; 3] =
    ["RateLimit-Limit", "RateLimit-Remaining", "RateLimit-Reset"];

/// The scope `request` needs: deciding, or, where a descriptor gives hits back
/// (`is_negative_hits`, a refund that no reservation of the caller's bounds), administering.
pub fn scope_of(request: &RateLimitRequest) -> Scope {
    if request.descriptors.iter().any(|d| d.is_negative_hits) {
        Scope::Admin
    } else {
        Scope::Check
    }
}

/// The gRPC front end's settings (`[grpc]`, `--grpc-listen`, `--envoy-*`).
#[derive(Debug, Clone, PartialEq)]
pub struct EnvoySettings {
    /// Where it listens over TCP; none when it listens on a Unix socket alone.
    pub listen: Option<SocketAddr>,
    /// The Unix socket it listens on, if any (`GRPC_UDS`).
    pub unix_socket: Option<PathBuf>,
    /// The envoyproxy/ratelimit config directory; none: no domains (every request is OK).
    pub config_dir: Option<PathBuf>,
    /// Files naming the same domain are merged (`MERGE_DOMAIN_CONFIG`).
    pub merge_domain_config: bool,
    /// How limits are counted, unless a domain says otherwise.
    pub algorithm: EnvoyAlgorithm,
    /// Domains counted otherwise.
    pub domain_algorithms: BTreeMap<String, EnvoyAlgorithm>,
    /// Nothing is denied; what would be is reported (`SHADOW_MODE`).
    pub shadow_mode: bool,
    /// Which descriptors are charged when one is over its limit.
    pub charge: Charge,
    /// The `RateLimit-Limit`, `-Remaining` and `-Reset` headers envoyproxy/ratelimit adds
    /// (`LIMIT_RESPONSE_HEADERS_ENABLED`).
    pub response_headers: bool,
    /// The IETF `RateLimit` and `RateLimit-Policy` headers.
    pub ietf_headers: bool,
    /// The names of the limit, remaining and reset headers (`LIMIT_LIMIT_HEADER`,
    /// `LIMIT_REMAINING_HEADER`, `LIMIT_RESET_HEADER`).
    pub header_names: [String; 3],
    /// See [`DEFAULT_NEAR_LIMIT_RATIO`].
    pub near_limit_ratio: f64,
    /// The rules come from an xDS management server (`[grpc.xds]`) rather than `config_dir`.
    pub xds: Option<xds::XdsSettings>,
    /// `/healthcheck` answers 500 until a config has been loaded
    /// (`HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED`).
    pub health_needs_config: bool,
    /// Each answer carries the request's domain, descriptors and hits, and the metadata of
    /// the limits it passed, in its `dynamic_metadata` (`RESPONSE_DYNAMIC_METADATA`).
    pub response_dynamic_metadata: bool,
    /// The counters under envoyproxy/ratelimit's Prometheus names, on a listener of their own
    /// (`[grpc.prometheus]`, `USE_PROMETHEUS`).
    pub prometheus: Option<prometheus::PrometheusSettings>,
}

impl EnvoySettings {
    /// The algorithm of `domain`.
    pub fn algorithm_of(&self, domain: &str) -> EnvoyAlgorithm {
        self.domain_algorithms
            .get(domain)
            .copied()
            .unwrap_or(self.algorithm)
    }

    /// Whether `other` differs only in what applies without a restart.
    pub(crate) fn needs_restart(&self, other: &EnvoySettings) -> bool {
        self.listen != other.listen
            || self.unix_socket != other.unix_socket
            || self.config_dir != other.config_dir
            || self.merge_domain_config != other.merge_domain_config
            || self.xds != other.xds
            || self.prometheus != other.prometheus
    }
}

/// What is in force: the loaded files and the settings they are answered under.
pub struct Loaded {
    /// The domains.
    pub config: EnvoyConfig,
    /// The settings.
    pub settings: EnvoySettings,
    /// Their metric series.
    pub metrics: metrics::Series,
    /// No config has been loaded yet (over xDS, before the first good version): every
    /// request is answered with an error, as envoyproxy/ratelimit answers before its first.
    pub waiting: bool,
}

/// The Envoy front end's state, shared by the gRPC service, `/json`, `/rlconfig` and the
/// reloads.
pub struct Envoy {
    limiter: Arc<Limiter>,
    loaded: ArcSwap<Loaded>,
    /// Held while `loaded` is replaced: the directory's watcher and the TOML file's each
    /// change one half of it, and neither may undo the other's change.
    update: std::sync::Mutex<()>,
    metrics: EnvoyMetrics,
    /// A config has been put in force at least once: the directory's at start, or one
    /// [`Envoy::reload`] took (a directory's change, or a config received over xDS).
    config_loaded: AtomicBool,
    /// The server is shutting down: `/healthcheck` says so.
    stopping: AtomicBool,
}

impl Envoy {
    /// Answers with `config` under `settings`, deciding through `limiter`, or says which limit
    /// its store cannot decide.
    pub fn new(
        limiter: Arc<Limiter>,
        config: EnvoyConfig,
        settings: EnvoySettings,
        metrics: EnvoyMetrics,
    ) -> Result<Envoy, LoadError> {
        check_store(&limiter, &config, &settings)?;
        if let Some(top) = limiter.top() {
            top.keep_domains(config.domain_names());
        }
        let series = metrics.series(&config);
        // A directory read at start is a config loaded; without one, none is until a reload.
        let config_loaded = AtomicBool::new(settings.config_dir.is_some());
        Ok(Envoy {
            config_loaded,
            stopping: AtomicBool::new(false),
            limiter,
            loaded: ArcSwap::from_pointee(Loaded {
                config,
                settings,
                metrics: series,
                waiting: false,
            }),
            update: std::sync::Mutex::new(()),
            metrics,
        })
    }

    /// What is in force.
    pub fn loaded(&self) -> Arc<Loaded> {
        self.loaded.load_full()
    }

    /// Puts `config` in force for the next requests, or says which limit the store cannot
    /// decide (and keeps the running config).
    pub fn reload(&self, config: EnvoyConfig) -> Result<(), LoadError> {
        let _update = self.update.lock().unwrap_or_else(PoisonError::into_inner);
        let settings = self.loaded.load().settings.clone();
        check_store(&self.limiter, &config, &settings)?;
        if let Some(top) = self.limiter.top() {
            top.keep_domains(config.domain_names());
        }
        let series = self.metrics.series(&config);
        let old = self.loaded.swap(Arc::new(Loaded {
            config,
            settings,
            metrics: series,
            waiting: false,
        }));
        self.metrics
            .forget_gone(&old.metrics, &self.loaded.load().metrics);
        self.config_loaded.store(true, Ordering::Release);
        Ok(())
    }

    /// Whether a config has been put in force at least once (what
    /// `HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED` waits for).
    pub fn config_loaded(&self) -> bool {
        self.config_loaded.load(Ordering::Acquire)
    }

    /// Marks the server as shutting down: `/healthcheck` answers 500 from now on.
    pub fn stopping(&self) {
        self.stopping.store(true, Ordering::Release);
    }

    /// Whether [`Envoy::stopping`] was called.
    pub fn is_stopping(&self) -> bool {
        self.stopping.load(Ordering::Acquire)
    }

    /// Keeps the files, answers under `settings` (a reload of the TOML file), or says which
    /// limit the store cannot decide under them (and keeps the running settings).
    pub fn reconfigure(&self, settings: EnvoySettings) -> Result<(), LoadError> {
        let _update = self.update.lock().unwrap_or_else(PoisonError::into_inner);
        let loaded = self.loaded.load_full();
        check_store(&self.limiter, &loaded.config, &settings)?;
        self.loaded.store(Arc::new(Loaded {
            config: loaded.config.clone(),
            settings,
            metrics: loaded.metrics.clone(),
            waiting: loaded.waiting,
        }));
        Ok(())
    }

    /// Answers every request with an error until a config is loaded by [`reload`](Self::reload)
    /// (configuration over xDS, before its first version).
    pub(crate) fn wait_for_config(&self) {
        let _update = self.update.lock().unwrap_or_else(PoisonError::into_inner);
        let loaded = self.loaded.load_full();
        self.loaded.store(Arc::new(Loaded {
            config: loaded.config.clone(),
            settings: loaded.settings.clone(),
            metrics: loaded.metrics.clone(),
            waiting: true,
        }));
    }

    /// The front end's metrics.
    pub fn metrics(&self) -> &EnvoyMetrics {
        &self.metrics
    }

    /// The state the decisions go through.
    pub fn limiter(&self) -> &Limiter {
        &self.limiter
    }
}

/// Refuses a config whose limits the store cannot decide under the settings' algorithms (a
/// Redis store computes in Lua's doubles, so a sliding counter over a year of many requests
/// is beyond it), naming the first such limit.
pub fn check_store(
    limiter: &Limiter,
    config: &EnvoyConfig,
    settings: &EnvoySettings,
) -> Result<(), LoadError> {
    for (domain, rule) in config.rules() {
        let algorithm = settings.algorithm_of(domain);
        if let Some(policy) = policy_of(&rule, algorithm)
            && let Err(e) = limiter.supports(&policy)
        {
            return Err(LoadError {
                file: settings.config_dir.clone(),
                message: format!(
                    "{}: the {} store cannot count it with {}: {e}",
                    rule.full_key,
                    limiter.store_name(),
                    algorithm.as_str()
                ),
            });
        }
    }
    Ok(())
}
