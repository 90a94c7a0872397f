//! One decision through the leases: which checks a lease answers, which go to the store (and
//! which of those top a lease up in the same call), and putting back what was taken when the
//! call denies, fails or is dropped.

use std::sync::Arc;

use tokio::time::Instant;

use super::table::View;
use super::{Core, bump, size, sweep};
use crate::store::Check;
use crate::store::settle::Settle;
use crate::{Decision, StoreError, Verdict};

#[derive(Debug, Clone, Copy)]
enum Plan {
    /// Not watched: the store decides it as it would without leases.
    Store,
    /// Watched in slot `.0`: the store decides it, and its answer is this server's new view.
    Watched(usize),
    /// Answered from the lease in slot `.0`, whose tokens were taken (and go back to it if
    /// another check of the call denies).
    Local(usize, Decision),
    /// Decided by the store with `.1` more tokens for the lease in slot `.0`.
    Renew(usize, u64),
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
                Plan::Local(_, decision) => Some(*decision),
                _ => None,
            });
            return Ok(Verdict::new(decisions.collect()));
        }
        let mut verdict = self.ask(true).await?;
        if !verdict.allowed() && !verdict.by_fail_policy() && self.renews() {
            // Denied with the top-ups: it may be the top-ups the bucket could not pay. Ask
            // again for the checks alone, which is what the answer must be about.
            self.observe(&verdict);
            self.stop_renewing();
            verdict = self.ask(false).await?;
        }
        if !verdict.by_fail_policy() {
            self.observe(&verdict);
        }
        if verdict.allowed() {
            self.settled = true;
            let local = self.plans.iter().filter(|p| matches!(p, Plan::Local(..)));
            bump(&self.core.stats.local, local.count() as u64);
            if !verdict.by_fail_policy() {
                self.fill().await;
            }
        }
        Ok(self.answer(verdict))
    }

    /// The store's call for every check a lease did not answer, with the top-ups if asked.
    async fn ask(&self, top_ups: bool) -> Result<Verdict, StoreError> {
        let checks: Vec<Check<'_>> = self
            .plans
            .iter()
            .zip(self.checks)
            .filter_map(|(plan, check)| match *plan {
                Plan::Local(..) => None,
                Plan::Renew(_, top_up) if top_ups => Some(check.with_cost(check.cost + top_up)),
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
            let (Plan::Watched(index) | Plan::Renew(index, _)) = self.plans[i] else {
                continue;
            };
            let mut slot = self.core.table.slot(index);
            if let Some(entry) = slot.as_mut().filter(|e| e.is(&self.checks[i])) {
                entry.view = Some(View {
                    remaining: decision.remaining,
                    reset_after: decision.reset_after,
                    at: now,
                });
            }
        }
    }

    /// Ends every renewal without a lease.
    fn stop_renewing(&mut self) {
        for i in 0..self.plans.len() {
            if let Plan::Renew(index, _) = self.plans[i] {
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

    /// Hands the paid top-ups to their leases (or back to the store, once closed).
    async fn fill(&mut self) {
        let now = Instant::now();
        let closed = self.core.closed.load(std::sync::atomic::Ordering::Relaxed);
        let mut owed = Vec::new();
        for i in 0..self.plans.len() {
            let Plan::Renew(index, top_up) = self.plans[i] else {
                continue;
            };
            self.plans[i] = Plan::Watched(index);
            bump(&self.core.stats.renewals, 1);
            bump(&self.core.stats.leased, top_up);
            let mut slot = self.core.table.slot(index);
            // A renewing entry keeps its slot, so it is there.
            let Some(entry) = slot.as_mut().filter(|e| e.is(&self.checks[i])) else {
                continue;
            };
            entry.renewing = false;
            if closed {
                owed.push((entry.owned(), top_up));
            } else {
                entry.lease += top_up;
                entry.expires = now + self.core.lifetime;
            }
        }
        sweep::start(self.core);
        for (bucket, tokens) in owed {
            self.core.give_back(bucket.check(), tokens).await;
        }
    }

    /// One decision per check: a lease's own, or the store's with the lease added to what
    /// remains (this server's view of the bucket).
    fn answer(&self, verdict: Verdict) -> Verdict {
        let mut decisions: Vec<Decision> = self
            .plans
            .iter()
            .map(|p| match p {
                Plan::Local(_, decision) => *decision,
                _ => Decision::new(false, 0, 0, Default::default(), Default::default()),
            })
            .collect();
        for (i, decision) in self.asked(&verdict) {
            let mut decision = *decision;
            if let Plan::Watched(index) | Plan::Renew(index, _) = self.plans[i]
                && let Some(entry) = self.core.table.slot(index).as_ref()
                && entry.is(&self.checks[i])
            {
                decision.remaining = decision
                    .remaining
                    .saturating_add(entry.lease)
                    .min(decision.limit);
            }
            decisions[i] = decision;
        }
        let answer = Verdict::new(decisions);
        if verdict.by_fail_policy() {
            answer.from_fail_policy()
        } else {
            answer
        }
    }
}

/// Whatever ends a decision that did not allow (a denial, an error, a caller gone): the
/// tokens taken from leases go back to them, and renewals in flight end.
impl<S: Settle> Drop for Pending<'_, '_, S> {
    fn drop(&mut self) {
        for i in 0..self.plans.len() {
            match self.plans[i] {
                Plan::Renew(index, _) => self.end_renewal(i, index),
                Plan::Local(index, _) if !self.settled => {
                    let mut slot = self.core.table.slot(index);
                    if let Some(entry) = slot.as_mut().filter(|e| e.is(&self.checks[i])) {
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
    if !core.may_lease(check) {
        return Plan::Store;
    }
    let Some((index, mut slot)) = core.table.watch(check, now, core.lifetime, core.hot) else {
        return Plan::Store;
    };
    let entry = slot.as_mut().expect("watch leaves the bucket's entry");
    entry.count(check.cost, now, core.lifetime);
    if entry.lease >= check.cost {
        entry.lease -= check.cost;
        return Plan::Local(index, entry.local_decision(now));
    }
    if entry.renewing
        || !entry.is_hot(core.hot)
        || core.closed.load(std::sync::atomic::Ordering::Relaxed)
    {
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
    Plan::Renew(index, top_up)
}
