//! The Envoy config directory, watched as the TOML file is (see [`crate::watch`]): read again
//! every [`POLL`](crate::watch::POLL) (on the file reader's thread, [`crate::files`]: it may hold megabytes, or a FIFO) and on
//! SIGHUP; a change that two reads in a row agree on is loaded, and put in force when good, or
//! refused with its message while the running config stays. A SIGHUP loads the directory even
//! unchanged, once two reads agree, so that a signal sent while files are being copied does
//! not apply half of them.

use std::path::PathBuf;
use std::sync::Arc;

use tokio_util::sync::CancellationToken;

use super::Envoy;
use crate::descriptors::config::{EnvoyConfig, LoadError, Snapshot, read_dir};

/// Reloads `dir` into `envoy` until `shutdown`; `running` is what was loaded at start.
pub(crate) async fn watch(
    envoy: Arc<Envoy>,
    dir: PathBuf,
    merge_domains: bool,
    running: Snapshot,
    shutdown: CancellationToken,
) {
    let read = || {
        let dir = dir.clone();
        async move {
            crate::files::off_workers(move || read_dir(&dir))
                .await
                .unwrap_or_else(|stuck| {
                    Err(LoadError {
                        file: None,
                        message: stuck.to_string(),
                    })
                })
        }
    };
    let applied: Result<Snapshot, LoadError> = Ok(running);
    crate::watch::on_change(read, applied, shutdown, |now, forced| {
        let why = if forced {
            "SIGHUP"
        } else {
            "the files changed"
        };
        let loaded = now
            .and_then(|files| EnvoyConfig::load(&files, merge_domains))
            .and_then(|config| {
                let (files, domains) = (config.files(), config.domains());
                envoy.reload(config).map(|()| (files, domains))
            });
        let source = || dir.display().to_string();
        match loaded {
            Ok((files, domains)) => {
                envoy.loaded_from(source, why, Ok(()));
                tracing::info!(trigger = why, files, domains, "envoy config reloaded");
            }
            Err(error) => {
                envoy.loaded_from(source, why, Err(&error));
                tracing::error!(
                    %error,
                    trigger = why,
                    "envoy config reload refused; the running config stays in force"
                );
            }
        }
        std::future::ready(())
    })
    .await;
}
