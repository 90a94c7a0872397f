//! The task that gives back, once per lifetime, what leases hold beyond their next lifetime's
//! need: all of it for a bucket nobody asks about any more. It holds the store weakly, so it
//! ends with the store (whose leases are then lost until the refill pays them back, unless
//! [`Leased::close`](super::Leased::close) gave them back first).

use std::sync::Arc;
use std::sync::atomic::Ordering;

use tokio::time::{Instant, MissedTickBehavior};

use super::Core;
use crate::store::settle::Settle;

/// Starts the task, once per store, on the runtime of the caller.
pub(super) fn start<S: Settle>(core: &Arc<Core<S>>) {
    if core.sweeping.swap(true, Ordering::Relaxed) {
        return;
    }
    let Ok(runtime) = tokio::runtime::Handle::try_current() else {
        core.sweeping.store(false, Ordering::Relaxed);
        return;
    };
    let store = Arc::downgrade(core);
    let lifetime = core.lifetime;
    runtime.spawn(async move {
        let mut tick = tokio::time::interval(lifetime);
        tick.set_missed_tick_behavior(MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            let Some(core) = store.upgrade() else { return };
            core.give_back_all(Instant::now(), false).await;
        }
    });
}
