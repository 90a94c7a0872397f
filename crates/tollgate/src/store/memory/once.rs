//! The record of settlements done once ([`Once`](crate::store::settle::Once)) in the memory
//! store: which ids were settled, each until it expires, bounded on its own.
//!
//! **Bounded without ever refunding twice.** The record holds at most `max` ids
//! ([`MemoryStoreBuilder::max_settled`](super::MemoryStoreBuilder::max_settled)), apart from the
//! key cap, so a flood of settlements never makes a decision fail, nor a decision flood a
//! settlement. When it is full, ids that have expired go first (their reservation can no longer
//! be committed: whatever carries an id expires before the id's record does). If none has, the
//! id that expires first is forgotten, and the latest expiry forgotten so far is kept: an id
//! that is not recorded and expires no later than that may be one that was settled and
//! forgotten, so its settlement is done *without its refund* (a charge is still taken: a
//! client cannot dodge paying for what it used by flooding). Every other id unknown to the
//! record was never settled. So a refund is given at most once whatever the flood, a
//! settlement never fails for want of room, and a reservation committed while the record is
//! full gets its refund unless more than `max` reservations that expire after it were committed
//! before it. This relies on an id's expiry being fixed: [`Once::ttl`] counts down to the end
//! of whatever carries the id (the server's reservation tokens expire, and their ids are
//! remembered a minute beyond).

use std::collections::{BTreeSet, HashMap};

use crate::Nanos;

/// The default cap on settled ids held: about 120 bytes each with a 16-byte id, so about
/// 125 MB when full.
pub const DEFAULT_MAX_SETTLED: usize = 1 << 20;

/// What recording an id found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Recorded {
    /// Never settled: settle it.
    New,
    /// Settled already, and not expired: settle nothing.
    Again,
    /// Perhaps settled and forgotten to make room: settle it without refunds.
    MaybeForgotten,
}

/// Ids settled once, each until it expires; see the module docs.
pub(super) struct OnceSet {
    ids: HashMap<Box<[u8]>, Nanos>,
    /// The same ids by expiry, to drop the first to expire.
    by_expiry: BTreeSet<(Nanos, Box<[u8]>)>,
    /// The latest expiry of an id forgotten before it expired.
    forgotten_until: Nanos,
    max: usize,
}

impl OnceSet {
    /// A record of at most `max` ids (at least one).
    pub(super) fn new(max: usize) -> OnceSet {
        OnceSet {
            ids: HashMap::new(),
            by_expiry: BTreeSet::new(),
            forgotten_until: Nanos::ZERO,
            max: max.max(1),
        }
    }

    /// Records `id` until `until` at `now`, making room if the record is full.
    pub(super) fn record(&mut self, id: &[u8], until: Nanos, now: Nanos) -> Recorded {
        match self.ids.get(id) {
            Some(&expires) if expires > now => return Recorded::Again,
            Some(_) => self.forget(id),
            None => {}
        }
        let found = if until <= self.forgotten_until {
            Recorded::MaybeForgotten
        } else {
            Recorded::New
        };
        while self.ids.len() >= self.max {
            let Some((expires, oldest)) = self.by_expiry.pop_first() else {
                break;
            };
            self.ids.remove(&oldest);
            if expires > now {
                self.forgotten_until = self.forgotten_until.max(expires);
            }
        }
        let id: Box<[u8]> = id.into();
        self.by_expiry.insert((until, id.clone()));
        self.ids.insert(id, until);
        found
    }

    /// Drops `id`'s record (its settlement failed: it may be settled again).
    pub(super) fn forget(&mut self, id: &[u8]) {
        if let Some((id, expires)) = self.ids.remove_entry(id) {
            self.by_expiry.remove(&(expires, id));
        }
    }

    /// The ids held.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.ids.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: u64 = 1_000_000_000;

    fn at(secs: u64) -> Nanos {
        Nanos::new(secs * S)
    }

    #[test]
    fn expired_ids_make_room_first_and_forgotten_ones_are_never_new() {
        let mut set = OnceSet::new(2);
        assert_eq!(set.record(b"a", at(10), at(0)), Recorded::New);
        assert_eq!(set.record(b"b", at(20), at(0)), Recorded::New);
        assert_eq!(set.record(b"a", at(10), at(1)), Recorded::Again);
        // At 11, `a` has expired: it makes room, and nothing is forgotten.
        assert_eq!(set.record(b"c", at(30), at(11)), Recorded::New);
        assert_eq!(set.len(), 2);
        // Full of live ids: `b`, the first to expire, is forgotten.
        assert_eq!(set.record(b"d", at(40), at(12)), Recorded::New);
        assert_eq!(set.len(), 2);
        // `b` again, or any id unknown that expires by 20: perhaps settled.
        assert_eq!(set.record(b"b", at(20), at(13)), Recorded::MaybeForgotten);
        assert_eq!(set.record(b"e", at(15), at(13)), Recorded::MaybeForgotten);
        // An id expiring later than anything forgotten was never settled.
        assert_eq!(set.record(b"f", at(50), at(13)), Recorded::New);
        assert_eq!(set.len(), 2);
        // A failed settlement is forgotten without a trace.
        set.forget(b"f");
        assert_eq!(set.record(b"f", at(50), at(13)), Recorded::New);
    }
}
