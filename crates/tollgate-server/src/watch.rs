//! Watching a file or directory for changes by reading it again: every [`POLL`], and on
//! SIGHUP. The config file and the Envoy config directory are both watched this way.

use std::future::Future;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

/// How often the file is read.
pub(crate) const POLL: Duration = Duration::from_millis(250);

/// Reads with `read` every [`POLL`] and on SIGHUP until `shutdown`, and calls `apply` (and
/// waits for it) with what it read (and whether a SIGHUP asked) when that differs from `applied`, or on SIGHUP
/// even unchanged, once two reads in a row agree: a file caught half-written (or a signal sent
/// while it is being written) waits for the write to end. The very value compared is the one
/// applied: a file rewritten meanwhile is read again at the next tick, not applied half-written
/// and then taken as current.
pub(crate) async fn on_change<T, R, F, A>(
    mut read: impl FnMut() -> R,
    mut applied: T,
    shutdown: CancellationToken,
    mut apply: F,
) where
    T: PartialEq + Clone,
    R: Future<Output = T>,
    F: FnMut(T, bool) -> A,
    A: Future<Output = ()>,
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
        let now = tokio::select! {
            () = shutdown.cancelled() => return,
            now = read() => now,
        };
        let settled = now == seen;
        seen = now.clone();
        if settled && (forced || now != applied) {
            tokio::select! {
                () = shutdown.cancelled() => return,
                () = apply(now.clone(), forced) => {}
            }
            forced = false;
            applied = now;
        }
    }
}
