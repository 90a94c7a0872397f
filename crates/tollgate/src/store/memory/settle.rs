//! [`Settle`] for the memory store: refunds and charges under the same bucket locks as a
//! decision of several checks, and the ids of settlements done once.

use std::collections::HashMap;

use super::name::{BucketKey, Prefix};
use super::{MemoryStore, multi};
use crate::algorithm::BucketState;
use crate::algorithm::gcra::Gcra;
use crate::store::Check;
use crate::store::settle::{self, Adjustment, Once, Settle};
use crate::{Algorithm, CheckError, Clock, Nanos, StoreError, Verdict};

/// Ids settled once, each until it expires. At most as many as the store's key cap
/// ([`MemoryStoreBuilder::max_keys`](super::MemoryStoreBuilder::max_keys)), about 60 bytes each
/// with a 16-byte id; when full and none has expired, a settlement under a new id is refused
/// with [`StoreError::Full`].
#[derive(Default)]
pub(super) struct OnceSet {
    ids: HashMap<Box<[u8]>, Nanos>,
}

impl OnceSet {
    /// Records `id` until `until`; `false` if it is recorded already. Expired ids are swept
    /// when the set reaches `max`; a set still full refuses (the caller's fail policy answers).
    fn record(&mut self, id: &[u8], until: Nanos, now: Nanos, max: usize) -> Result<bool, ()> {
        if let Some(&expires) = self.ids.get(id) {
            if expires > now {
                return Ok(false);
            }
        } else if self.ids.len() >= max {
            self.ids.retain(|_, expires| *expires > now);
            if self.ids.len() >= max {
                return Err(());
            }
        }
        self.ids.insert(id.into(), until);
        Ok(true)
    }

    fn forget(&mut self, id: &[u8]) {
        self.ids.remove(id);
    }
}

impl<C: Clock> Settle for MemoryStore<C> {
    async fn settle(
        &self,
        once: Option<Once<'_>>,
        adjustments: &[(Check<'_>, Adjustment)],
    ) -> Result<Verdict, StoreError> {
        self.settle_sync(once, adjustments)
    }

    async fn reset(&self, buckets: &[Check<'_>]) -> Result<(), StoreError> {
        Check::validate_all(buckets)?;
        for check in buckets {
            let prefix = Prefix::of_check(check)?;
            let key = BucketKey::new(&prefix, check.key);
            match check.policy.algorithm() {
                Algorithm::TokenBucket => self.inner.buckets.remove(key, &self.inner.count),
                _ => self.inner.windows.remove(key, &self.inner.count),
            }
        }
        Ok(())
    }
}

impl<C: Clock> MemoryStore<C> {
    /// [`Settle::settle`], synchronously.
    pub fn settle_sync(
        &self,
        once: Option<Once<'_>>,
        adjustments: &[(Check<'_>, Adjustment)],
    ) -> Result<Verdict, StoreError> {
        settle::validate(once, adjustments)?;
        if let Some(once) = once {
            let now = self.now();
            let until = now.saturating_add(Nanos::from(once.ttl));
            let max = self.inner.count.max_keys;
            match self.inner.once.lock().record(once.id, until, now, max) {
                Ok(true) => {}
                Ok(false) => return Err(CheckError::AlreadySettled.into()),
                Err(()) => return Err(self.inner.count.full()),
            }
        }
        let settled = self.adjust(adjustments);
        if let (Err(_), Some(once)) = (&settled, once) {
            // Nothing was settled: the id may be settled again.
            self.inner.once.lock().forget(once.id);
        }
        settled
    }

    fn adjust(&self, adjustments: &[(Check<'_>, Adjustment)]) -> Result<Verdict, StoreError> {
        let checks: Vec<Check<'_>> = adjustments.iter().map(|(c, _)| *c).collect();
        multi::with_held(self, &checks, |states, now| {
            let mut decisions = Vec::with_capacity(states.len());
            for (state, (check, adjustment)) in states.iter_mut().zip(adjustments) {
                let gcra = Gcra::new(&check.policy);
                let tat = match state {
                    BucketState::TokenBucket(tat) => *tat,
                    _ => Nanos::ZERO,
                };
                let tat = match *adjustment {
                    Adjustment::Refund(n) => gcra.refund(tat, now, n),
                    Adjustment::Charge(n) => gcra.charge(tat, now, n),
                };
                *state = BucketState::TokenBucket(tat);
                decisions.push(gcra.evaluate(tat, now, 0).decision(false));
            }
            Ok((Verdict::new(decisions), true))
        })
    }
}
