//! Live reload: the config file is read again when it changes and on SIGHUP, and a good edit
//! puts its policies in force for the next decisions, buckets kept.
//!
//! The file is polled ([`POLL`]) rather than watched through inotify: editors write in place
//! or rename over the file, and Kubernetes swaps a symlink to a new directory; reading the
//! path again sees all three the same way, with nothing to re-arm. A change is applied once
//! two reads in a row agree, so a file caught half-written is not refused as a bad edit.

use std::future::Future;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use crate::config::Config;
use crate::envoy::Envoy;
use crate::limiter::Limiter;
use crate::settings::{Settings, check_policies};

/// How often the file is read.
pub(crate) const POLL: Duration = Duration::from_millis(250);

/// Reloads `path` until `shutdown`; `running` is what the server started with.
pub(crate) async fn watch(
    path: PathBuf,
    running: Settings,
    state: Arc<Limiter>,
    envoy: Option<Arc<Envoy>>,
    shutdown: CancellationToken,
) {
    let read = || std::future::ready(std::fs::read(&path).ok());
    // What is in force: the bytes the running settings were read from, however long the
    // server took to start since.
    let applied = running.config_text.clone().map(String::into_bytes);
    on_change(read, applied, shutdown, |now, forced| {
        reload(
            &path,
            now.as_deref(),
            &running,
            &state,
            envoy.as_deref(),
            forced,
        );
    })
    .await;
}

/// Reads with `read` every [`POLL`] and on SIGHUP until `shutdown`, and calls `apply` with
/// what it read (and whether a SIGHUP asked) when that differs from `applied`, or on SIGHUP
/// even unchanged, once two reads in a row agree: a file caught half-written (or a signal sent
/// while it is being written) waits for the write to end. The very value compared is the one
/// applied: a file rewritten meanwhile is read again at the next tick, not applied half-written
/// and then taken as current.
pub(crate) async fn on_change<T, R, F>(
    mut read: impl FnMut() -> R,
    mut applied: T,
    shutdown: CancellationToken,
    mut apply: F,
) where
    T: PartialEq + Clone,
    R: Future<Output = T>,
    F: FnMut(&T, bool),
{
    let mut hangup = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup()) {
        Ok(signal) => Some(signal),
        Err(e) => {
            tracing::warn!(error = %e, "cannot watch SIGHUP; the files are still polled");
            None
        }
    };
    let mut seen = read().await;
    let mut tick = tokio::time::interval(POLL);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut forced = false;
    loop {
        tokio::select! {
            () = shutdown.cancelled() => return,
            _ = tick.tick() => {}
            Some(()) = async { match hangup.as_mut() {
                Some(signal) => signal.recv().await,
                None => std::future::pending().await,
            } } => forced = true,
        }
        let now = read().await;
        let settled = now == seen;
        seen = now.clone();
        if settled && (forced || now != applied) {
            apply(&now, forced);
            forced = false;
            applied = now;
        }
    }
}

/// Puts `bytes`, the file at `path` as just read (`None`: it could not be read), in force, or
/// logs why not and keeps the running config.
fn reload(
    path: &std::path::Path,
    bytes: Option<&[u8]>,
    running: &Settings,
    state: &Limiter,
    envoy: Option<&Envoy>,
    forced: bool,
) {
    let why = if forced { "SIGHUP" } else { "the file changed" };
    let loaded = match bytes {
        Some(bytes) => Config::from_bytes(path, bytes),
        None => Config::load(path),
    };
    let config = loaded.and_then(|config| {
        let settings = Settings::resolve(running.overrides.clone(), Some(&config));
        check_policies(Some(path), &running.store, &settings.policies)?;
        Ok(settings)
    });
    let settings = match config {
        Ok(settings) => settings,
        Err(error) => {
            state.metrics().reloaded(false);
            tracing::error!(%error, trigger = why, "config reload refused; the running config stays in force");
            return;
        }
    };
    for changed in running.needing_restart(&settings) {
        tracing::warn!(
            setting = changed,
            "the config file changes a setting that takes effect on restart only; the running value stays"
        );
    }
    state.reload(settings.policies.clone(), settings.inline_policies);
    if let (Some(envoy), Some(grpc)) = (envoy, &settings.grpc)
        && let Err(error) = envoy.reconfigure(grpc.clone())
    {
        tracing::error!(%error, "the [grpc] settings are refused; the running ones stay");
    }
    state.metrics().reloaded(true);
    tracing::info!(
        trigger = why,
        policies = settings.policies.len(),
        inline_policies = settings.inline_policies,
        "config reloaded"
    );
}
