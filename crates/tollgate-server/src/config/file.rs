//! The config file as TOML reads it, before its values are checked: every section and key the
//! file may hold, and nothing else (an unknown key is an error, so a misspelling is never
//! silently ignored).

use std::collections::BTreeMap;

use serde::Deserialize;
use toml::Spanned;

use crate::auth::Scope;
use crate::descriptors::{Charge, EnvoyAlgorithm};
use crate::options::{LogFormat, OnStoreError};
use crate::traces::TracingProtocol;

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct File {
    #[serde(default)]
    pub(super) store: StoreFile,
    #[serde(default)]
    pub(super) http: HttpFile,
    #[serde(default)]
    pub(super) log: LogFile,
    #[serde(default)]
    pub(super) resp: RespFile,
    #[serde(default)]
    pub(super) grpc: GrpcFile,
    #[serde(default)]
    pub(super) admin: AdminFile,
    #[serde(default)]
    pub(super) auth: AuthFile,
    #[serde(default)]
    pub(super) tracing: TracingFile,
    #[serde(default)]
    pub(super) top: TopFile,
    pub(super) policies: Option<Spanned<BTreeMap<String, Spanned<PolicyFile>>>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct StoreFile {
    pub(super) url: Option<Spanned<String>>,
    pub(super) timeout: Option<Spanned<String>>,
    pub(super) on_error: Option<OnStoreError>,
    pub(super) max_keys: Option<Spanned<u64>>,
    pub(super) wait_replicas: Option<Spanned<u64>>,
    pub(super) wait_timeout_ms: Option<Spanned<u64>>,
    #[serde(default)]
    pub(super) postgres: PostgresFile,
    pub(super) tls: Option<Spanned<StoreTlsFile>>,
}

/// `[store.tls]`: the Redis store's TLS files of its own.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct StoreTlsFile {
    pub(super) ca: Option<String>,
    pub(super) cert: Option<String>,
    pub(super) key: Option<String>,
    #[serde(default)]
    pub(super) skip_hostname_verification: bool,
}

#[derive(Debug, Default, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct PostgresFile {
    pub(super) schema: Option<String>,
    pub(super) table: Option<String>,
    pub(super) unlogged: Option<bool>,
    pub(super) synchronous_commit: Option<bool>,
    pub(super) isolation: Option<Spanned<String>>,
    pub(super) connections: Option<Spanned<u64>>,
}

/// A listener's table: its own keys, then the connection limits and TLS every listener has
/// (`[NAME] max_connections`, ..., `[NAME.tls]`).
macro_rules! listener_table {
    ($(#[$meta:meta])* $name:ident { $($field:ident: $ty:ty,)* }) => {
        $(#[$meta])*
        #[derive(Debug, Default, Deserialize)]
        #[serde(default, deny_unknown_fields)]
        pub(super) struct $name {
            pub(super) listen: Option<Spanned<String>>,
            $(pub(super) $field: $ty,)*
            pub(super) max_connections: Option<Spanned<u64>>,
            pub(super) max_connections_per_ip: Option<Spanned<u64>>,
            pub(super) request_timeout: Option<Spanned<String>>,
            pub(super) idle_timeout: Option<Spanned<String>>,
            pub(super) max_connection_age: Option<Spanned<String>>,
            pub(super) max_connection_age_grace: Option<Spanned<String>>,
            pub(super) keepalive_interval: Option<Spanned<String>>,
            pub(super) tls: Option<Spanned<TlsFile>>,
        }

        impl $name {
            pub(super) fn conn(&self) -> ConnFile<'_> {
                ConnFile {
                    max_connections: &self.max_connections,
                    max_connections_per_ip: &self.max_connections_per_ip,
                    request_timeout: &self.request_timeout,
                    idle_timeout: &self.idle_timeout,
                    max_connection_age: &self.max_connection_age,
                    max_connection_age_grace: &self.max_connection_age_grace,
                    keepalive_interval: &self.keepalive_interval,
                }
            }
        }
    };
}

/// The connection limits of a listener's table, as the file gives them.
pub(super) struct ConnFile<'a> {
    pub(super) max_connections: &'a Option<Spanned<u64>>,
    pub(super) max_connections_per_ip: &'a Option<Spanned<u64>>,
    pub(super) request_timeout: &'a Option<Spanned<String>>,
    pub(super) idle_timeout: &'a Option<Spanned<String>>,
    pub(super) max_connection_age: &'a Option<Spanned<String>>,
    pub(super) max_connection_age_grace: &'a Option<Spanned<String>>,
    pub(super) keepalive_interval: &'a Option<Spanned<String>>,
}

/// `[NAME.tls]`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct TlsFile {
    pub(super) cert: String,
    pub(super) key: String,
    pub(super) client_ca: Option<String>,
    #[serde(default)]
    pub(super) client_san: Vec<String>,
}

listener_table!(HttpFile {
    inline_policies: Option<bool>,
});

listener_table!(RespFile {
    password: Option<String>,
});

listener_table!(AdminFile {});

listener_table!(GrpcFile {
    unix_socket: Option<String>,
    config_dir: Option<String>,
    merge_domain_config: Option<bool>,
    algorithm: Option<EnvoyAlgorithm>,
    shadow_mode: Option<bool>,
    charge: Option<Charge>,
    response_headers: Option<bool>,
    ietf_headers: Option<bool>,
    limit_header: Option<String>,
    remaining_header: Option<String>,
    reset_header: Option<String>,
    near_limit_ratio: Option<Spanned<f64>>,
    health_needs_config: Option<bool>,
    response_dynamic_metadata: Option<bool>,
    domains: BTreeMap<String, DomainFile>,
    xds: Option<Spanned<XdsFile>>,
    prometheus: Option<Spanned<PrometheusFile>>,
});

/// `[grpc.prometheus]`.
#[derive(Debug, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub(super) struct PrometheusFile {
    pub(super) listen: Option<Spanned<String>>,
    pub(super) path: Option<Spanned<String>>,
    pub(super) mapper: Option<Spanned<String>>,
}

/// `[grpc.xds]`.
#[derive(Debug, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub(super) struct XdsFile {
    pub(super) url: Option<Spanned<String>>,
    pub(super) node_id: Option<Spanned<String>>,
    pub(super) node_metadata: BTreeMap<String, String>,
    pub(super) headers: Option<Spanned<BTreeMap<String, String>>>,
    pub(super) max_message_size: Option<Spanned<u64>>,
    pub(super) force_start_without_initial_config: Option<bool>,
    pub(super) retry_interval: Option<Spanned<String>>,
    pub(super) backoff_initial: Option<Spanned<String>>,
    pub(super) backoff_max: Option<Spanned<String>>,
    pub(super) backoff_random_factor: Option<Spanned<f64>>,
    pub(super) backoff_jitter: Option<bool>,
    pub(super) tls: Option<Spanned<XdsTlsFile>>,
}

/// `[grpc.xds.tls]`.
#[derive(Debug, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub(super) struct XdsTlsFile {
    pub(super) ca: Option<String>,
    pub(super) cert: Option<String>,
    pub(super) key: Option<String>,
    pub(super) server_name: Option<Spanned<String>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct DomainFile {
    pub(super) algorithm: EnvoyAlgorithm,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct AuthFile {
    #[serde(default)]
    pub(super) tokens: BTreeMap<String, Spanned<TokenFile>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct TokenFile {
    pub(super) secret_file: Option<Spanned<String>>,
    pub(super) secret_env: Option<Spanned<String>>,
    /// Read only to be refused with the reason (and without its value).
    pub(super) secret: Option<Spanned<serde::de::IgnoredAny>>,
    pub(super) scopes: Spanned<Vec<Scope>>,
}

/// `[tracing]`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct TracingFile {
    pub(super) enabled: Option<bool>,
    pub(super) protocol: Option<TracingProtocol>,
    pub(super) endpoint: Option<Spanned<String>>,
    pub(super) service_name: Option<String>,
    pub(super) service_namespace: Option<String>,
    pub(super) service_instance_id: Option<String>,
    pub(super) sampling_rate: Option<Spanned<f64>>,
}

/// `[top]`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct TopFile {
    pub(super) enabled: Option<bool>,
    pub(super) capacity: Option<Spanned<u64>>,
    pub(super) sample_every: Option<Spanned<u64>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct LogFile {
    pub(super) format: Option<LogFormat>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct PolicyFile {
    pub(super) capacity: Spanned<u64>,
    pub(super) refill: Option<Spanned<u64>>,
    pub(super) period: Spanned<String>,
    pub(super) algorithm: Option<Spanned<AlgorithmName>>,
    #[serde(default)]
    pub(super) shadow: bool,
    pub(super) lease: Option<Spanned<bool>>,
}

/// A policy's `algorithm`, as the file names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(super) enum AlgorithmName {
    TokenBucket,
    FixedWindow,
    SlidingLog,
    SlidingCounter,
}
