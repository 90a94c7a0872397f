//! The Envoy config directory, watched as the TOML file is (see [`crate::reload`]): read again
//! every [`POLL`](crate::reload::POLL) and on SIGHUP; a change that two reads in a row agree on
//! is loaded, and put in force when good, or refused with its message while the running config
//! stays.

use std::path::PathBuf;
use std::sync::Arc;

use tokio_util::sync::CancellationToken;

use super::Envoy;
use super::config::{EnvoyConfig, LoadError, Snapshot, read_dir};

/// Reloads `dir` into `envoy` until `shutdown`; `running` is what was loaded at start.
pub(crate) async fn watch(
    envoy: Arc<Envoy>,
    dir: PathBuf,
    merge_domains: bool,
    running: Snapshot,
    shutdown: CancellationToken,
) {
    let mut hangup = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup()).ok();
    let read = || read_dir(&dir);
    let mut applied: Result<Snapshot, LoadError> = Ok(running);
    let mut seen = read();
    let mut tick = tokio::time::interval(crate::reload::POLL);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        let forced = tokio::select! {
            () = shutdown.cancelled() => return,
            _ = tick.tick() => false,
            Some(()) = async { match hangup.as_mut() {
                Some(signal) => signal.recv().await,
                None => std::future::pending().await,
            } } => true,
        };
        let now = read();
        let settled = now == seen;
        seen = now.clone();
        if forced || (settled && now != applied) {
            let why = if forced {
                "SIGHUP"
            } else {
                "the files changed"
            };
            let loaded = now
                .clone()
                .and_then(|files| EnvoyConfig::load(&files, merge_domains));
            match loaded {
                Ok(config) => {
                    tracing::info!(
                        trigger = why,
                        files = config.files(),
                        domains = config.domains(),
                        "envoy config reloaded"
                    );
                    envoy.reload(config);
                    envoy.metrics().loaded(true);
                }
                Err(error) => {
                    envoy.metrics().loaded(false);
                    tracing::error!(
                        %error,
                        trigger = why,
                        "envoy config reload refused; the running config stays in force"
                    );
                }
            }
            applied = now;
        }
    }
}
