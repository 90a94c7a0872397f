//! [`Settle`] for the memory store: refunds and charges under the same bucket locks as a
//! decision of several checks, at most once per id (the record of ids is in `once.rs`).

use std::borrow::Cow;

use super::name::{BucketKey, Prefix};
use super::once::Recorded;
use super::{MemoryStore, multi};
use crate::algorithm::BucketState;
use crate::algorithm::gcra::Gcra;
use crate::store::Check;
use crate::store::settle::{self, Adjustment, Once, Settle};
use crate::{Algorithm, CheckError, Clock, Nanos, StoreError, Verdict};

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
                Algorithm::TokenBucket if check.name.is_none() => {
                    self.inner.buckets.remove(key, &self.inner.count)
                }
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
        let mut adjustments = Cow::Borrowed(adjustments);
        if let Some(once) = once {
            let now = self.now()?;
            let until = now.saturating_add(Nanos::from(once.ttl));
            match self.inner.once.lock().record(once.id, until, now) {
                Recorded::New => {}
                Recorded::Again => return Err(CheckError::AlreadySettled.into()),
                // Perhaps settled before and forgotten to make room: settling it again must
                // not refund twice, and must still charge (see once.rs).
                Recorded::MaybeForgotten => {
                    adjustments = Cow::Owned(
                        adjustments
                            .iter()
                            .map(|&(check, adjustment)| match adjustment {
                                Adjustment::Refund(_) => (check, Adjustment::Refund(0)),
                                charge @ Adjustment::Charge(_) => (check, charge),
                            })
                            .collect(),
                    );
                }
            }
        }
        let settled = self.adjust(&adjustments);
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
