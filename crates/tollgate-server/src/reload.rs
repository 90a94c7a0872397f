//! Live reload: the config file is read again when it changes and on SIGHUP, and a good edit
//! puts its policies in force for the next decisions, buckets kept, and its tokens (`[auth]`,
//! their secret files and variables read again) for the next requests.
//!
//! The file is polled ([`watch::POLL`]) rather than watched through inotify: editors write in place
//! or rename over the file, and Kubernetes swaps a symlink to a new directory; reading the
//! path again sees all three the same way, with nothing to re-arm. A change is applied once
//! two reads in a row agree, so a file caught half-written is not refused as a bad edit.

use std::path::PathBuf;
use std::sync::Arc;

use tokio_util::sync::CancellationToken;

use crate::config::{Config, ConfigError};
use crate::envoy::Envoy;
use crate::limiter::Limiter;
use crate::settings::{Settings, check_policies};
use crate::watch;

/// Reloads `path` until `shutdown`; `running` is what the server started with.
pub(crate) async fn watch(
    path: PathBuf,
    running: Settings,
    state: Arc<Limiter>,
    envoy: Option<Arc<Envoy>>,
    shutdown: CancellationToken,
) {
    // Off the async workers, as the Envoy directory is read: the file may be large, slow to
    // read, or swapped for a FIFO. Shared, as the watcher keeps the last two reads.
    let read = || {
        let path = path.clone();
        async move {
            let file = path.clone();
            let read =
                tokio::task::spawn_blocking(move || crate::config::read(&file).map(Arc::new));
            read.await
                .unwrap_or_else(|e| Err(ConfigError::unreadable(&path, &std::io::Error::other(e))))
        }
    };
    // What is in force: the bytes the running settings were read from, however long the
    // server took to start since.
    let applied = Ok(Arc::new(
        running.config_text.clone().unwrap_or_default().into_bytes(),
    ));
    // The watcher hands each change over, and they are applied here one after the other: a
    // reload that names another store waits for it to answer (a few seconds at most), and the
    // next change must not overtake it.
    let (changes, mut changed) = tokio::sync::mpsc::unbounded_channel();
    let watching = watch::on_change(read, applied, shutdown, move |now, forced| {
        // The receiver outlives the watcher: this cannot fail.
        let _ = changes.send((now.clone(), forced));
    });
    let applying = async {
        while let Some((now, forced)) = changed.recv().await {
            reload(
                &path,
                now.as_ref().map(|bytes| bytes.as_slice()),
                &running,
                &state,
                envoy.as_deref(),
                forced,
            )
            .await;
        }
    };
    tokio::join!(watching, applying);
}

/// Puts `bytes`, the file at `path` as just read (or why it could not be), in force, or logs why
/// not and keeps the running config. A file that names a store that can never work (as a
/// start would refuse it) is refused whole.
async fn reload(
    path: &std::path::Path,
    bytes: Result<&[u8], &ConfigError>,
    running: &Settings,
    state: &Limiter,
    envoy: Option<&Envoy>,
    forced: bool,
) {
    let why = if forced { "SIGHUP" } else { "the file changed" };
    let loaded = bytes
        .map_err(Clone::clone)
        .and_then(|bytes| Config::from_bytes(path, bytes));
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
    let changed = running.needing_restart(&settings);
    for changed in &changed {
        tracing::warn!(
            setting = changed,
            "the config file changes a setting that takes effect on restart only; the running value stays"
        );
    }
    if changed
        .iter()
        .any(|c| matches!(*c, "store.url" | "store.postgres" | "store.timeout"))
        && let Err(error) = check_new_store(&settings).await
    {
        state.metrics().reloaded(false);
        tracing::error!(
            store = %settings.store,
            error = %crate::error::plain(&error),
            trigger = why,
            "config reload refused: the store the config file names can never work as \
             configured, and a restart would refuse it; fix [store] url (the running config \
             stays in force)"
        );
        return;
    }
    state.reload(settings.policies.clone(), settings.inline_policies);
    state.auth().reload(settings.auth.clone());
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
        tokens = settings.auth.len(),
        "config reloaded"
    );
}

/// Asks the store a reloaded file names, which the running server does not use before a
/// restart, as `config check` does: an error when it can never work as configured (a host name
/// that does not resolve, no trust roots, a certificate not trusted, no such database or DB
/// index, credentials refused); one that does not answer is only noted.
async fn check_new_store(settings: &Settings) -> Result<(), tollgate::StoreError> {
    let store = settings.store.to_string();
    match crate::store::probe(settings, crate::store::WARM_UP).await {
        Ok(()) => {
            tracing::info!(%store, "the store the config file names answers; it takes effect on restart");
            Ok(())
        }
        Err(e) if e.kind() == tollgate::ErrorKind::Config => Err(e),
        Err(e) => {
            tracing::warn!(
                %store,
                error = %e,
                "the store the config file names does not answer now; it takes effect on restart"
            );
            Ok(())
        }
    }
}
