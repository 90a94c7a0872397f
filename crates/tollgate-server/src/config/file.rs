//! The config file as TOML reads it, before its values are checked: every section and key the
//! file may hold, and nothing else (an unknown key is an error, so a misspelling is never
//! silently ignored).

use std::collections::BTreeMap;

use serde::Deserialize;
use toml::Spanned;

use crate::auth::Scope;
use crate::limiter::descriptors::{Charge, EnvoyAlgorithm};
use crate::options::{LogFormat, OnStoreError};

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
    pub(super) auth: AuthFile,
    pub(super) policies: Option<Spanned<BTreeMap<String, Spanned<PolicyFile>>>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct StoreFile {
    pub(super) url: Option<Spanned<String>>,
    pub(super) timeout: Option<Spanned<String>>,
    pub(super) on_error: Option<OnStoreError>,
    pub(super) max_keys: Option<Spanned<u64>>,
    #[serde(default)]
    pub(super) postgres: PostgresFile,
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

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct HttpFile {
    pub(super) listen: Option<Spanned<String>>,
    pub(super) inline_policies: Option<bool>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RespFile {
    pub(super) listen: Option<Spanned<String>>,
    pub(super) password: Option<String>,
    pub(super) idle_timeout: Option<Spanned<String>>,
    pub(super) max_connections: Option<Spanned<u64>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct GrpcFile {
    pub(super) listen: Option<Spanned<String>>,
    pub(super) config_dir: Option<String>,
    pub(super) merge_domain_config: Option<bool>,
    pub(super) algorithm: Option<EnvoyAlgorithm>,
    pub(super) shadow_mode: Option<bool>,
    pub(super) charge: Option<Charge>,
    pub(super) response_headers: Option<bool>,
    pub(super) ietf_headers: Option<bool>,
    pub(super) limit_header: Option<String>,
    pub(super) remaining_header: Option<String>,
    pub(super) reset_header: Option<String>,
    pub(super) near_limit_ratio: Option<Spanned<f64>>,
    #[serde(default)]
    pub(super) domains: BTreeMap<String, DomainFile>,
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
