//! The command line: `tollgate [serve] [--listen ADDR] [--store URL] ...`.

use std::net::SocketAddr;
use std::time::Duration;

use clap::{Args, Parser, Subcommand, ValueEnum};

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
}

/// `tollgate serve`.
#[derive(Debug, Clone, Args)]
pub struct ServeArgs {
    /// Where the HTTP/JSON API listens; port 0 picks a free port (printed at start).
    #[arg(long, default_value = "127.0.0.1:8080")]
    pub listen: SocketAddr,

    /// The store: `memory`, `redis://HOST:PORT[/DB]`, `rediss://...` (TLS), or several
    /// comma-separated redis:// URLs: the seed nodes of a Redis Cluster.
    #[arg(long, default_value = "memory", value_parser = StoreSpec::parse)]
    pub store: StoreSpec,

    /// What to answer when the store fails or does not answer in time: `allow` (fail open),
    /// `deny` (fail closed: 503), or `local` (decide in this process's memory meanwhile).
    #[arg(long, value_enum, default_value_t = OnStoreError::Allow)]
    pub on_store_error: OnStoreError,

    /// The bound on one store call, in milliseconds.
    #[arg(long = "store-timeout-ms", default_value = "50", value_parser = parse_millis)]
    pub store_timeout: Duration,

    /// The most keys held in memory (the memory store, and the `local` fallback).
    #[arg(long, default_value_t = tollgate::store::memory::DEFAULT_MAX_KEYS)]
    pub max_keys: usize,
}

/// The fail policy, as the command line names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
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
