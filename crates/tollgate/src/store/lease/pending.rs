//! One decision through the leases: which checks a lease answers, which go to the store (and
//! which of those top a lease up in the same call), and putting back what was taken when the
//! call denies, fails or is dropped.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use tokio::time::Instant;

use super::table::{OwnedBucket, View};
use super::{Core, bump, size, sweep};
use crate::store::Check;
use crate::store::settle::Settle;
use crate::{Decision, StoreError, Verdict};

/// Tokens paid for leases that must go back to the store, by bucket.
type Owed = Vec<(OwnedBucket, u64)>;

#[derive(Debug, Clone, Copy)]
enum Plan {
    /// Not watched: the store decides it as it would without leases.
    Store,
    /// Watched in slot `.0`: the store decides it, and its answer is this server's new view.
    Watched(usize),
    /// Answered from the lease in slot `.0`, whose tokens were taken (and go back to it if
    /// another check of the call denies, unless the bucket was reset since: epoch `.2`).
    Local(usize, Decision, u64),
    /// Decided by the store with `.1` more tokens for the lease in slot `.0` (which takes them
    /// unless the bucket was reset since: epoch `.2`).
    Renew(usize, u64, u64),
}

pub(super) struct Pending<'a, 'k, S: Settle> {
    core: &'a Arc<Core<S>>,
    checks: &'a [Check<'k>],
    plans: Vec<Plan>,
    /// The call allowed: what the leases gave stays given.
    settled: bool,
}

impl<'a, 'k, S: Settle> Pending<'a, 'k, S> {
    /// Plans every check: taking from a lease where it can.
    pub(super) fn plan(
        core: &'a Arc<Core<S>>,
        checks: &'a [Check<'k>],
        now: Instant,
    ) -> Pending<'a, 'k, S> {
        Pending {
            core,
            checks,
            plans: checks.iter().map(|c| plan_one(core, c, now)).collect(),
            settled: false,
        }
    }

    pub(super) async fn decide(mut self) -> Result<Verdict, StoreError> {
        if self.plans.iter().all(|p| matches!(p, Plan::Local(..))) {
            self.settled = true;
            bump(&self.core.stats.local, self.plans.len() as u64);
            let decisions = self.plans.iter().filter_map(|p| match p {
                Plan::Local(_, decision, _) => Some(*decision),
                _ => None,
            });
            return Ok(Verdict::new(decisions.collect()));
        }
        if self.plans.iter().all(|p| matches!(p, Plan::Store)) {
            // Nothing leased or watched: the store's answer as it is.
            return self.core.inner.decide(self.checks).await;
        }
        let mut verdict = self.ask(true).await?;
        if !verdict.allowed() && !verdict.by_fail_policy() && self.renews() {
            // Denied with the top-ups: it may be the top-ups the bucket could not pay. Ask
            // again for the checks alone, which is what the answer must be about.
            self.observe(&verdict);
            self.stop_renewing();
            verdict = self.ask(false).await?;
        }
        let allowed = verdict.allowed();
        let (answer, owed) = self.conclude(verdict)?;
        if allowed {
            self.settled = true;
            let local = self.plans.iter().filter(|p| matches!(p, Plan::Local(..)));
            bump(&self.core.stats.local, local.count() as u64);
        }
        for (bucket, tokens) in owed {
            self.core.give_back(bucket.check(), tokens).await;
        }
        Ok(answer)
    }

    /// The store's call for every check a lease did not answer, with the top-ups if asked.
    async fn ask(&self, top_ups: bool) -> Result<Verdict, StoreError> {
        let as_given = |p: &Plan| match p {
            Plan::Local(..) => false,
            Plan::Renew(..) => !top_ups,
            _ => true,
        };
        if self.plans.iter().all(as_given) {
            return self.core.inner.decide(self.checks).await;
        }
        let checks: Vec<Check<'_>> = self
            .plans
            .iter()
            .zip(self.checks)
            .filter_map(|(plan, check)| match *plan {
                Plan::Local(..) => None,
                Plan::Renew(_, top_up, _) if top_ups => Some(check.with_cost(check.cost + top_up)),
                _ => Some(*check),
            })
            .collect();
        self.core.inner.decide(&checks).await
    }

    fn renews(&self) -> bool {
        self.plans.iter().any(|p| matches!(p, Plan::Renew(..)))
    }

    /// The store's decisions, each beside the index of its check.
    fn asked<'v>(&self, verdict: &'v Verdict) -> impl Iterator<Item = (usize, &'v Decision)> {
        let asked = (0..self.plans.len()).filter(|&i| !matches!(self.plans[i], Plan::Local(..)));
        asked.zip(verdict.decisions())
    }

    /// Takes the store's answer as this server's view of every watched bucket.
    fn observe(&self, verdict: &Verdict) {
        let now = Instant::now();
        for (i, decision) in self.asked(verdict) {
            let (Plan::Watched(index) | Plan::Renew(index, ..)) = self.plans[i] else {
                continue;
            };
            let mut slot = self.core.table.slot(index);
            if let Some(entry) = slot.as_mut().filter(|e| e.is(&self.checks[i])) {
                entry.view = Some(View {
                    remaining: decision.remaining(),
                    reset_after: decision.reset_after(),
                    at: now,
                });
            }
        }
    }

    /// Ends every renewal without a lease.
    fn stop_renewing(&mut self) {
        for i in 0..self.plans.len() {
            if let Plan::Renew(index, ..) = self.plans[i] {
                self.end_renewal(i, index);
                self.plans[i] = Plan::Watched(index);
            }
        }
    }

    fn end_renewal(&self, i: usize, index: usize) {
        let mut slot = self.core.table.slot(index);
        if let Some(entry) = slot.as_mut().filter(|e| e.is(&self.checks[i])) {
            entry.renewing = false;
        }
    }

    /// Takes the store's answer in, one lock per bucket: it is this server's new view of each
    /// watched bucket (unless a fail policy gave it), an allowed call's top-ups go to their
    /// leases (or are owed back to the store, once it is closed), renewals end, and each
    /// decision says what remains with the lease added (this server's view of the bucket).
    fn conclude(&mut self, verdict: Verdict) -> Result<(Verdict, Owed), StoreError> {
        let now = Instant::now();
        let by_store = !verdict.by_fail_policy();
        let allowed = verdict.allowed();
        let fill = by_store && allowed;
        let mut owed = Vec::new();
        let mut filled = false;
        let mut answered = verdict.decisions().iter();
        let mut decisions = Vec::with_capacity(self.plans.len());
        for i in 0..self.plans.len() {
            let plan = self.plans[i];
            let index = match plan {
                Plan::Local(_, decision, _) => {
                    decisions.push(decision);
                    continue;
                }
                Plan::Store => None,
                Plan::Watched(index) | Plan::Renew(index, ..) => Some(index),
            };
            let Some(mut decision) = answered.next().copied() else {
                return Err(StoreError::incompatible(
                    "the store answered fewer decisions than it was asked",
                ));
            };
            if let Some(index) = index {
                let mut slot = self.core.table.slot(index);
                // A renewing entry keeps its slot; a watched one may have lost it meanwhile.
                if let Some(entry) = slot.as_mut().filter(|e| e.is(&self.checks[i])) {
                    if by_store {
                        entry.view = Some(View {
                            remaining: decision.remaining(),
                            reset_after: decision.reset_after(),
                            at: now,
                        });
                    }
                    if let Plan::Renew(_, top_up, epoch) = plan {
                        entry.renewing = false;
                        if fill && entry.epoch == epoch {
                            bump(&self.core.stats.renewals, 1);
                            bump(&self.core.stats.leased, top_up);
                            // Read under the lock: `close` sets it before it takes each
                            // slot's lease, so a lease either sees it or is taken by it.
                            if self.core.closed.load(Ordering::Relaxed) {
                                owed.push((entry.owned(), top_up));
                            } else {
                                entry.lease += top_up;
                                entry.expires = now + self.core.lifetime;
                                filled = true;
                            }
                        }
                    }
                    // An allowed answer counts the lease in; a denial says what the store
                    // holds (the lease, smaller than the cost, does not make it allowed).
                    if allowed {
                        decision = Decision::new(
                            decision.allowed(),
                            decision.limit(),
                            decision
                                .remaining()
                                .saturating_add(entry.lease)
                                .min(decision.limit()),
                            decision.retry_after(),
                            decision.reset_after(),
                        );
                    }
                }
                // The renewal ended: nothing for the drop to undo.
                self.plans[i] = Plan::Watched(index);
            }
            decisions.push(decision);
        }
        if filled {
            sweep::start(self.core);
        }
        let answer = Verdict::new(decisions);
        let answer = if by_store {
            answer
        } else {
            answer.from_fail_policy()
        };
        Ok((answer, owed))
    }
}

/// Whatever ends a decision that did not allow (a denial, an error, a caller gone): the
/// tokens taken from leases go back to them, and renewals in flight end.
impl<S: Settle> Drop for Pending<'_, '_, S> {
    fn drop(&mut self) {
        for i in 0..self.plans.len() {
            match self.plans[i] {
                Plan::Renew(index, ..) => self.end_renewal(i, index),
                Plan::Local(index, _, epoch) if !self.settled => {
                    let mut slot = self.core.table.slot(index);
                    let entry = slot.as_mut().filter(|e| e.is(&self.checks[i]));
                    if let Some(entry) = entry.filter(|e| e.epoch == epoch) {
                        entry.lease += self.checks[i].cost;
                    }
                }
                _ => {}
            }
        }
    }
}

/// Takes `check` from its lease if it can; else plans its store call, with a top-up when its
/// bucket is hot, known, not near empty and not being renewed already.
fn plan_one<S: Settle>(core: &Core<S>, check: &Check<'_>, now: Instant) -> Plan {
    // A cost above the capacity is the store's to refuse.
    if !core.may_lease(check) || check.cost > check.policy.capacity() {
        return Plan::Store;
    }
    let Some((index, mut slot)) = core.table.watch(check, now, core.lifetime, core.hot) else {
        return Plan::Store;
    };
    let entry = slot.as_mut().expect("watch leaves the bucket's entry");
    entry.take_policy(check.policy, core.divisor);
    entry.count(check.cost, now, core.lifetime);
    if entry.lease >= check.cost {
        entry.lease -= check.cost;
        return Plan::Local(index, entry.local_decision(now), entry.epoch);
    }
    if entry.renewing || !entry.is_hot(core.hot) || core.closed.load(Ordering::Relaxed) {
        return Plan::Watched(index);
    }
    let Some(seen) = entry.seen() else {
        return Plan::Watched(index);
    };
    let room = entry.policy.capacity().saturating_sub(check.cost);
    let top_up = size::target(seen, core.divisor)
        .saturating_sub(entry.lease)
        .min(room);
    if top_up < size::MIN_LEASE {
        return Plan::Watched(index);
    }
    entry.renewing = true;
    Plan::Renew(index, top_up, entry.epoch)
}
