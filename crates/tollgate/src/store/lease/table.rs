//! The buckets a server watches for heat, and the leases it holds on them: a fixed number of
//! slots, so that nothing clients send grows it. A bucket lives in the slot its name hashes
//! to; a newcomer takes a slot only from a bucket that holds no lease and has gone cold, so a
//! hot bucket keeps its lease and a flood of new keys only ever passes through.

use std::hash::BuildHasher;
use std::time::Duration;

use parking_lot::{Mutex, MutexGuard};
use tokio::time::Instant;

use super::size::{self, Seen};
use crate::store::Check;
use crate::{Algorithm, Decision, Policy};

/// Which bucket: what [`Check::same_bucket`] compares, owned.
#[derive(Debug)]
struct BucketId {
    key: Vec<u8>,
    name: Option<Box<str>>,
    /// The numbers of an unnamed policy, which name its bucket.
    numbers: Option<(u64, u64, Duration)>,
}

impl BucketId {
    fn of(check: &Check<'_>) -> BucketId {
        BucketId {
            key: check.key.to_vec(),
            name: check.name.map(Box::from),
            numbers: numbers(check),
        }
    }

    fn is(&self, check: &Check<'_>) -> bool {
        self.key == check.key
            && self.name.as_deref() == check.name
            && self.numbers == numbers(check)
    }
}

fn numbers(check: &Check<'_>) -> Option<(u64, u64, Duration)> {
    let p = check.policy;
    check
        .name
        .is_none()
        .then(|| (p.capacity(), p.refill(), p.period()))
}

/// One watched bucket: its recent demand, and its lease.
#[derive(Debug)]
pub(super) struct Entry {
    bucket: BucketId,
    /// The policy of the latest check, whose numbers the lease's calls use.
    pub(super) policy: Policy,
    window_start: Instant,
    /// Decisions and tokens asked in the current lifetime-long window, and in the one before.
    decisions: u64,
    tokens: u64,
    last_decisions: u64,
    last_tokens: u64,
    /// Tokens paid in the store and not yet handed out.
    pub(super) lease: u64,
    /// When the lease is due to be resized (or returned, once nobody asks).
    pub(super) expires: Instant,
    /// A call that renews the lease is in flight: others do not start a second.
    pub(super) renewing: bool,
    /// The store's answer at this server's last call on the bucket.
    pub(super) view: Option<View>,
    /// Counts the resets of the bucket: tokens taken or leased before one (a local take going
    /// back, a renewal in flight) must not reach the lease after it.
    pub(super) epoch: u64,
}

/// What the store said of a bucket at a call: `remaining` after it, `reset_after` from `at`.
#[derive(Debug, Clone, Copy)]
pub(super) struct View {
    pub(super) remaining: u64,
    pub(super) reset_after: Duration,
    pub(super) at: Instant,
}

impl Entry {
    fn new(check: &Check<'_>, now: Instant) -> Entry {
        Entry {
            bucket: BucketId::of(check),
            policy: check.policy,
            window_start: now,
            decisions: 0,
            tokens: 0,
            last_decisions: 0,
            last_tokens: 0,
            lease: 0,
            expires: now,
            renewing: false,
            view: None,
            epoch: 0,
        }
    }

    /// Whether it is `check`'s bucket (its slot may have passed to another since it was
    /// locked last).
    pub(super) fn is(&self, check: &Check<'_>) -> bool {
        self.bucket.is(check)
    }

    /// Counts a decision of `cost` at `now`, starting a new window every `lifetime`.
    pub(super) fn count(&mut self, cost: u64, now: Instant, lifetime: Duration) {
        self.roll(now, lifetime);
        self.decisions += 1;
        self.tokens = self.tokens.saturating_add(cost);
    }

    fn roll(&mut self, now: Instant, lifetime: Duration) {
        let elapsed = now.saturating_duration_since(self.window_start);
        if elapsed < lifetime {
            return;
        }
        // A window that ended more than a lifetime ago says nothing of the last one.
        let recent = elapsed < lifetime * 2;
        self.last_decisions = if recent { self.decisions } else { 0 };
        self.last_tokens = if recent { self.tokens } else { 0 };
        self.decisions = 0;
        self.tokens = 0;
        self.window_start = now;
    }

    /// Whether it was decided at least `hot` times in the last lifetime or so far in this one.
    pub(super) fn is_hot(&self, hot: u64) -> bool {
        self.decisions.max(self.last_decisions) >= hot
    }

    /// What the lease's size is computed from (see [`super::size::target`]); `None` before the
    /// store answered once.
    pub(super) fn seen(&self) -> Option<Seen> {
        self.view.map(|view| Seen {
            demand: self.tokens.max(self.last_tokens),
            remaining: view.remaining,
            capacity: self.policy.capacity(),
        })
    }

    /// At the end of a lifetime, the tokens beyond what the next one needs, taken out of the
    /// lease to be given back: all of them once the bucket has gone cold. Zero before then, and
    /// while a renewal is in flight.
    pub(super) fn excess(
        &mut self,
        now: Instant,
        lifetime: Duration,
        hot: u64,
        divisor: u64,
    ) -> u64 {
        if self.renewing || self.lease == 0 || now < self.expires {
            return 0;
        }
        self.roll(now, lifetime);
        let keep = match self.seen() {
            Some(seen) if self.is_hot(hot) => size::target(seen, divisor),
            _ => 0,
        };
        let excess = self.lease.saturating_sub(keep);
        self.lease -= excess;
        self.expires = now + lifetime;
        excess
    }

    /// Counts `tokens` given back into the bucket by a refund sent at `sent`, in this server's
    /// view: unless the view is newer than the refund, when it may hold them already.
    pub(super) fn returned(&mut self, tokens: u64, sent: Instant) {
        if let Some(view) = self.view.as_mut().filter(|v| v.at < sent) {
            view.remaining = view.remaining.saturating_add(tokens);
        }
    }

    /// Takes the policy of the latest check: when its numbers changed (a reload), the lease
    /// keeps no more than a share of the new capacity (the rest is dropped, an under-grant):
    /// tokens leased under a larger limit must not pour out under a smaller one.
    pub(super) fn take_policy(&mut self, policy: Policy, divisor: u64) {
        if self.policy != policy {
            self.lease = self.lease.min(policy.capacity() / divisor);
            self.policy = policy;
        }
    }

    /// Whether a newcomer may take its slot: no lease, no call in flight, and cold.
    fn is_evictable(&self, now: Instant, lifetime: Duration, hot: u64) -> bool {
        self.lease == 0
            && !self.renewing
            && (now.saturating_duration_since(self.window_start) >= lifetime || !self.is_hot(hot))
    }

    /// The bucket, owned, to name it in a call made after the slot is unlocked.
    pub(super) fn owned(&self) -> OwnedBucket {
        OwnedBucket {
            policy: self.policy,
            name: self.bucket.name.clone(),
            key: self.bucket.key.clone(),
        }
    }

    /// A decision as this server sees the bucket: the store's last word, less the time since,
    /// plus the lease it holds (never more than the capacity).
    pub(super) fn local_decision(&self, now: Instant) -> Decision {
        let (remaining, reset_after) = self.view.map_or((0, Duration::ZERO), |v| {
            let since = now.saturating_duration_since(v.at);
            (v.remaining, v.reset_after.saturating_sub(since))
        });
        Decision::new(
            true,
            self.policy.capacity(),
            remaining
                .saturating_add(self.lease)
                .min(self.policy.capacity()),
            Duration::ZERO,
            reset_after,
        )
    }
}

/// A bucket named apart from its slot.
pub(super) struct OwnedBucket {
    policy: Policy,
    name: Option<Box<str>>,
    key: Vec<u8>,
}

impl OwnedBucket {
    /// A check of nothing on it.
    pub(super) fn check(&self) -> Check<'_> {
        Check {
            policy: self.policy,
            name: self.name.as_deref(),
            key: &self.key,
            cost: 0,
        }
    }
}

/// Whether a check may be leased at all: a token bucket (a window cannot take a refund, so an
/// unspent lease could not go back) and a cost to take (a peek is the store's to answer).
pub(super) fn leasable(check: &Check<'_>) -> bool {
    check.policy.algorithm() == Algorithm::TokenBucket && check.cost > 0
}

pub(super) struct Table {
    slots: Box<[Mutex<Option<Entry>>]>,
    hasher: foldhash::fast::RandomState,
}

impl Table {
    /// `slots` rounded up to a power of two.
    pub(super) fn new(slots: usize) -> Table {
        let slots = slots.next_power_of_two();
        Table {
            slots: (0..slots).map(|_| Mutex::new(None)).collect(),
            hasher: foldhash::fast::RandomState::default(),
        }
    }

    pub(super) fn len(&self) -> usize {
        self.slots.len()
    }

    fn index(&self, check: &Check<'_>) -> usize {
        let hash = self
            .hasher
            .hash_one((check.key, check.name, numbers(check)));
        // The slot count is a power of two.
        (hash as usize) & (self.slots.len() - 1)
    }

    /// The slot of `check`'s bucket, locked, with its entry when this slot is (or now becomes)
    /// the bucket's: `None` when another bucket holds the slot and may not be evicted.
    pub(super) fn watch(
        &self,
        check: &Check<'_>,
        now: Instant,
        lifetime: Duration,
        hot: u64,
    ) -> Option<(usize, MutexGuard<'_, Option<Entry>>)> {
        let index = self.index(check);
        let mut slot = self.slots[index].lock();
        match slot.as_mut() {
            Some(entry) if entry.bucket.is(check) => {}
            Some(entry) if !entry.is_evictable(now, lifetime, hot) => return None,
            _ => *slot = Some(Entry::new(check, now)),
        }
        Some((index, slot))
    }

    /// Drops what `check`'s bucket holds of a lease, if it is watched, and what calls in
    /// flight took or will lease before now.
    pub(super) fn forget(&self, check: &Check<'_>) {
        let mut slot = self.slots[self.index(check)].lock();
        if let Some(entry) = slot.as_mut().filter(|e| e.is(check)) {
            entry.lease = 0;
            entry.epoch += 1;
        }
    }

    /// The slot at `index`, locked.
    pub(super) fn slot(&self, index: usize) -> MutexGuard<'_, Option<Entry>> {
        self.slots[index].lock()
    }
}
