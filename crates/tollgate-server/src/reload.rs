//! Live reload: the config file is read again when it changes and on SIGHUP, and a good edit
//! puts its policies in force for the next decisions, buckets kept, and its tokens (`[auth]`,
//! their secret files and variables read again) for the next requests.
//!
//! The file is polled ([`watch::POLL`]) rather than watched through inotify: editors write in place
//! or rename over the file, and Kubernetes swaps a symlink to a new directory; reading the
//! path again sees all three the same way, with nothing to re-arm. A change is applied once
//! two reads in a row agree, so a file caught half-written is not refused as a bad edit.
//!
//! The file and the secret files it names are read on the file reader's thread
//! ([`crate::files`]), never on a worker that serves requests. A reload never switches
//! authentication off: one that would leave no token where tokens are in force, or no
//! credential at all where one is, is refused ([`drops_credentials`]).

use std::path::PathBuf;
use std::sync::Arc;

use tokio_util::sync::CancellationToken;

use crate::config::{Config, ConfigError};
use crate::console::{Loads, now_ms};
use crate::envoy::Envoy;
use crate::limiter::Limiter;
use crate::settings::{Settings, check_policies};
use crate::watch;

/// Reloads `path` until `shutdown`; `running` is what the server started with. Each reload,
/// good or refused, is noted in `loads` for the console.
pub(crate) async fn watch(
    path: PathBuf,
    running: Settings,
    state: Arc<Limiter>,
    envoy: Option<Arc<Envoy>>,
    loads: Arc<Loads>,
    shutdown: CancellationToken,
) {
    // On the file reader's thread, never on a worker that serves requests: the file may be
    // large, slow to read, or swapped for a FIFO.
    let read = || {
        let path = path.clone();
        async move {
            let file = path.clone();
            crate::files::off_workers(move || crate::config::read(&file))
                .await
                .unwrap_or_else(|stuck| Err(stuck_on(&path, stuck)))
        }
    };
    // What is in force: the bytes the running settings were read from, however long the
    // server took to start since.
    let applied: Result<Arc<[u8]>, ConfigError> = Ok(running
        .config_text
        .clone()
        .unwrap_or_default()
        .into_bytes()
        .into());
    let running = Arc::new(running);
    watch::on_change(read, applied, shutdown, |now, forced| {
        let (path, running, state, envoy, loads) = (
            path.clone(),
            Arc::clone(&running),
            Arc::clone(&state),
            envoy.clone(),
            Arc::clone(&loads),
        );
        async move {
            let why = if forced { "SIGHUP" } else { "the file changed" };
            // Parsing reads the tokens' secret files: on the reader's thread too.
            let overrides = running.overrides.clone();
            let store = running.store.clone();
            let file = path.clone();
            let loaded = match now {
                Err(error) => Err(error),
                Ok(bytes) => crate::files::off_workers(move || {
                    let config = Config::from_bytes(&file, &bytes)?;
                    let settings = Settings::resolve(overrides, Some(&config));
                    check_policies(Some(&file), &store, &settings.policies)?;
                    Ok(settings)
                })
                .await
                .unwrap_or_else(|stuck| Err(stuck_on(&path, stuck))),
            };
            let result = reload(loaded, &running, &state, envoy.as_deref(), why).await;
            loads.record(now_ms(), path.display().to_string(), why, result);
        }
    })
    .await;
}

/// Why a reload to `new` would switch authentication off, if it would: the server has tokens
/// in force (`tokens`) and `new` has none, or it has a credential (a token or `[resp]
/// password`) and `new` has neither. Turning `[auth]` off takes a restart.
fn drops_credentials(tokens: bool, password: bool, new: &Settings) -> Option<&'static str> {
    let new_tokens = !new.auth.is_empty();
    let new_password = new.resp.password.is_some();
    if tokens && !new_tokens {
        Some(
            "the file has no [auth] tokens where tokens are in force: a reload never switches \
             authentication off (an emptied or truncated file, a deleted [auth] table); to run \
             without tokens, restart the server",
        )
    } else if password && !new_tokens && !new_password {
        Some(
            "the file has neither a token nor [resp] password where one is in force: a reload \
             never switches authentication off; to run without, restart the server",
        )
    } else {
        None
    }
}

/// Puts `loaded`, the settings the file now asks for (or why it could not be read or was
/// refused), in force, or logs why not and keeps the running config; the error when refused,
/// else what of the file is not in force (settings that take effect on restart only, `[grpc]`
/// settings refused), for the console.
/// A file that names a store that can never work (as a start would refuse it) is refused
/// whole; the watcher waits for this (a few seconds at most) before it looks at the next
/// change.
async fn reload(
    loaded: Result<Settings, ConfigError>,
    running: &Settings,
    state: &Limiter,
    envoy: Option<&Envoy>,
    why: &'static str,
) -> Result<Vec<String>, String> {
    let settings = match loaded {
        Ok(settings) => settings,
        Err(error) => {
            state.metrics().reloaded(false);
            tracing::error!(%error, trigger = why, "config reload refused; the running config stays in force");
            return Err(error.to_string());
        }
    };
    let tokens_in_force = state.auth().required();
    // `[resp] password` changes on restart only: the one the server started with is in force.
    let password_in_force = running.resp.password.is_some();
    if let Some(error) = drops_credentials(tokens_in_force, password_in_force, &settings) {
        state.metrics().reloaded(false);
        tracing::error!(
            error,
            trigger = why,
            "config reload refused; the running config stays in force"
        );
        return Err(error.to_owned());
    }
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
        return Err(format!(
            "the store {} can never work as configured: {}; fix [store] url",
            settings.store,
            crate::error::plain(&error)
        ));
    }
    state.reload(settings.policies.clone(), settings.inline_policies);
    state.auth().reload(settings.auth.clone());
    let mut notes: Vec<String> = changed
        .iter()
        .map(|c| format!("{c} takes effect on restart only; the running value stays"))
        .collect();
    if let (Some(envoy), Some(grpc)) = (envoy, &settings.grpc)
        && let Err(error) = envoy.reconfigure(grpc.clone())
    {
        tracing::error!(%error, "the [grpc] settings are refused; the running ones stay");
        notes.push(format!(
            "the [grpc] settings are refused ({error}); the running ones stay"
        ));
    }
    state.metrics().reloaded(true);
    tracing::info!(
        trigger = why,
        policies = settings.policies.len(),
        inline_policies = settings.inline_policies,
        tokens = settings.auth.len(),
        "config reloaded"
    );
    Ok(notes)
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

/// A config read that the file reader did not finish (a file that blocks): unreadable, in the
/// words every other unreadable config file has.
fn stuck_on(path: &std::path::Path, stuck: crate::files::Stuck) -> ConfigError {
    ConfigError::unreadable(path, &std::io::Error::other(stuck))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::auth::{Scope, Secret, Token, Tokens};
    use crate::settings::Overrides;

    fn settings(token: bool, password: bool) -> Settings {
        let mut settings = Settings::resolve(Overrides::default(), None);
        if token {
            let scopes = [Scope::Check].into_iter().collect();
            let app = Token::new("app", Secret::new(b"app-secret-0123456789"), scopes);
            settings.auth = Tokens::new(vec![app]).unwrap();
        }
        if password {
            settings.resp.password = Some(Secret::new(b"a-password"));
        }
        settings
    }

    #[test]
    fn a_reload_keeps_some_credential_and_tokens_once_there_are() {
        // (tokens in force, password in force, the new file's token, its password, refused)
        let cases = [
            (true, false, false, false, true),
            (true, false, false, true, true),
            (true, true, false, true, true),
            (false, true, false, false, true),
            (false, true, true, false, false),
            (false, true, false, true, false),
            (true, false, true, false, false),
            (false, false, false, false, false),
            (false, false, true, false, false),
        ];
        for (tokens, password, new_token, new_password, refused) in cases {
            let new = settings(new_token, new_password);
            assert_eq!(
                drops_credentials(tokens, password, &new).is_some(),
                refused,
                "{tokens} {password} -> {new_token} {new_password}"
            );
        }
    }
}
