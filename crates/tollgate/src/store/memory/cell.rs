//! The cells a [`Table`](super::table::Table) keeps per key.
//!
//! A token bucket is one `AtomicU64` holding its `tat`. Its top bit is a lock taken only by
//! checks that span several buckets (all or nothing): a single check works by compare-and-swap
//! and waits only while a multi-bucket check holds that bucket, for a few nanoseconds.
//! Window algorithms keep their richer state behind a mutex, with the policy they were last
//! charged under (to tell when the state is idle); so do named token buckets, whose numbers
//! may change under their name (the state is rebased from the numbers it was written under).
//! That state's layout is in [`window`](super::window).

use std::hint;
use std::sync::atomic::{AtomicU64, Ordering};

use parking_lot::{Mutex, MutexGuard};

use super::table::Cell;
use super::window::Window;
use crate::algorithm::gcra::Gcra;
use crate::algorithm::{self, BucketState};
use crate::{Algorithm, Nanos, Policy};

/// The lock bit of a token-bucket cell. A stored `tat` is at most `now + MAX_TOLERANCE`, below
/// 2^63 until the year 2116, so it never sets this bit by itself.
pub(crate) const LOCKED: u64 = 1 << 63;

/// What the slot of a key whose cell moved to its shard's hot cells holds: `MOVED + i`, for
/// the `i`-th hot cell. Never a `tat`, locked or not, by the bound above.
pub(crate) const MOVED: u64 = u64::MAX - 256;

/// What a hot cell holds once its slot is gone: a cached check's compare-and-swap fails on
/// it, and the check goes to the table. Never a `tat`, locked or not.
pub(crate) const RETIRED: u64 = u64::MAX;

impl Cell for AtomicU64 {
    fn fresh() -> AtomicU64 {
        AtomicU64::new(0)
    }

    fn is_idle(&self, now: Nanos) -> bool {
        Gcra::is_full(Nanos::new(self.load(Ordering::Acquire)), now)
    }

    #[inline]
    fn moved(&self) -> Option<usize> {
        let value = self.load(Ordering::Relaxed);
        // A moved slot changes only under its shard's write lock, so a reader holding the
        // read lock sees it moved or not, never in between.
        (MOVED..RETIRED)
            .contains(&value)
            .then(|| (value - MOVED) as usize)
    }

    fn retire_if_idle(&self, now: Nanos) -> bool {
        // A cached check may update the cell at any moment: the retirement is a compare-and-
        // swap from the idle state it saw, so exactly one of the two lands.
        let tat = self.load(Ordering::Acquire);
        tat & LOCKED == 0
            && Gcra::is_full(Nanos::new(tat), now)
            && self
                .compare_exchange(tat, RETIRED, Ordering::AcqRel, Ordering::Acquire)
                .is_ok()
    }

    fn retire(&self) {
        self.store(RETIRED, Ordering::Release);
    }

    fn heap_bytes(&self) -> usize {
        0
    }
}

impl Cell for Mutex<Window> {
    fn fresh() -> Self {
        Mutex::new(Window::fresh())
    }

    fn is_idle(&self, now: Nanos) -> bool {
        self.lock()
            .with_state(|state, policy| policy.is_none_or(|policy| state.is_idle(&policy, now)))
    }

    fn heap_bytes(&self) -> usize {
        self.lock().heap_bytes()
    }
}

/// A cell held by a multi-bucket check. Dropping it releases the cell with `state` written back.
pub(crate) enum Held<'a> {
    Tat { cell: &'a AtomicU64, tat: u64 },
    Window(MutexGuard<'a, Window>),
}

impl<'a> Held<'a> {
    pub(crate) fn lock_tat(cell: &'a AtomicU64) -> Held<'a> {
        loop {
            let tat = cell.load(Ordering::Relaxed);
            if tat & LOCKED == 0
                && cell
                    .compare_exchange_weak(tat, tat | LOCKED, Ordering::Acquire, Ordering::Relaxed)
                    .is_ok()
            {
                return Held::Tat { cell, tat };
            }
            hint::spin_loop();
        }
    }

    pub(crate) fn lock_window(cell: &'a Mutex<Window>) -> Held<'a> {
        Held::Window(cell.lock())
    }

    /// The state as a bucket of `policy` at `now`, and whether it was rebased from other
    /// numbers (a named token bucket whose policy changed: see `algorithm::rebase`).
    pub(crate) fn state_for(&self, policy: &Policy, now: Nanos) -> (BucketState, bool) {
        match self {
            Held::Tat { tat, .. } => (BucketState::TokenBucket(Nanos::new(*tat)), false),
            Held::Window(guard) => match guard.policy {
                Some(old) if old != *policy && policy.algorithm() == Algorithm::TokenBucket => {
                    (algorithm::rebase(&guard.state(), &old, policy, now), true)
                }
                _ => (guard.state(), false),
            },
        }
    }

    /// Writes the state charged under `policy` (`None`: nothing was charged, as for a check of
    /// cost 0, so the policy it was last charged under still says when it is idle).
    pub(crate) fn set(&mut self, state: BucketState, policy: Option<Policy>) {
        match (self, state) {
            (Held::Tat { tat, .. }, BucketState::TokenBucket(new)) => *tat = new.as_u64(),
            (Held::Window(guard), state) => {
                guard.set(state);
                if policy.is_some() {
                    guard.policy = policy;
                }
            }
            // A token-bucket cell only ever gets a token-bucket state: its table holds those.
            (Held::Tat { .. }, _) => {}
        }
    }
}

impl Drop for Held<'_> {
    fn drop(&mut self) {
        if let Held::Tat { cell, tat } = self {
            debug_assert_eq!(*tat & LOCKED, 0);
            cell.store(*tat, Ordering::Release);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::AtomicU64;

    use parking_lot::Mutex;

    use crate::algorithm::sliding_counter::SlidingCounterState;
    use crate::store::memory::table::{Hot, Slot};
    use crate::store::memory::window::Window;

    /// The sizes the store's documentation gives in bytes.
    #[test]
    fn slots_are_the_documented_size() {
        assert_eq!(std::mem::size_of::<Slot<AtomicU64>>(), 40);
        assert_eq!(std::mem::size_of::<Slot<Mutex<Window>>>(), 120);
        // A sliding counter's box while it carries counts of an earlier width.
        assert_eq!(std::mem::size_of::<SlidingCounterState>(), 64);
        // A hot cell's place in its shard's list (its `Arc` is 8 + 8 + 8 more).
        assert_eq!(std::mem::size_of::<Option<Hot<AtomicU64>>>(), 16);
    }
}
