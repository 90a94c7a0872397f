//! The entrance for a request whose checks another rule set resolved (Envoy's, beside the
//! core): what it gives back is given back first, then its checks are decided all-or-nothing
//! in rounds, by the caller's rule of which denials deny the request.

use tollgate::{Check, Decision, StoreError};

use super::rounds::Rounds;
use super::{DecideError, Limiter};

/// A request resolved into checks by rules of its own.
pub struct Counted<'a> {
    own_limit: bool,
    /// The Envoy domain whose summary counts its checks' keys.
    domain: Option<&'a str>,
    refunds: Vec<Check<'a>>,
    checks: Vec<Check<'a>>,
    denied: Vec<bool>,
}

/// One check of a [`Counted`] request, decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CountedCheck {
    /// It denies: the store denied it, or it was denied before any call.
    pub denied: bool,
    /// Its decision (for a check left out of later rounds, the one that denied it).
    pub decision: Decision,
}

/// What became of a [`Counted`] request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CountedOutcome {
    /// Per refund, in order: its bucket after it; `None` when the store failed and the refunds
    /// were dropped (giving nothing back is the safe side).
    pub refunds: Vec<Option<Decision>>,
    /// Per check, in order.
    pub checks: Vec<CountedCheck>,
}

impl<'a> Counted<'a> {
    /// A request with nothing to count yet; `own_limit` when it names a limit of the
    /// client's choosing, which is refused where inline policies are.
    pub fn new(own_limit: bool) -> Counted<'a> {
        Counted {
            own_limit,
            domain: None,
            refunds: Vec::new(),
            checks: Vec::new(),
            denied: Vec::new(),
        }
    }

    /// Counts its checks' keys in the summary of Envoy domain `domain` (`GET /v1/top`), if
    /// that domain has one.
    pub fn in_domain(mut self, domain: &'a str) -> Counted<'a> {
        self.domain = Some(domain);
        self
    }

    /// Gives `check`'s cost back to its bucket (token buckets only), before anything is
    /// decided.
    pub fn refund(&mut self, check: Check<'a>) {
        self.refunds.push(check);
    }

    /// Decides `check`; `denied` when it can never be allowed (it then takes nothing, and only
    /// its decision is asked for).
    pub fn check(&mut self, check: Check<'a>, denied: bool) {
        self.checks.push(check);
        self.denied.push(denied);
    }
}

impl Limiter {
    /// Decides `counted`: refused if it names its own limit where inline policies are off;
    /// its refunds made in one store call; its checks decided in rounds until the request is
    /// settled, `denies` telling from which checks deny whether the request is denied (a
    /// denied request is charged nothing). A check the store refuses is the request's fault.
    pub async fn check_counted(
        &self,
        counted: Counted<'_>,
        denies: impl Fn(&[bool]) -> bool,
    ) -> Result<CountedOutcome, DecideError> {
        if counted.own_limit && !self.live.load().inline_allowed() {
            return Err(DecideError::InlineRefused);
        }
        let refunds = self.refund_counted(&counted.refunds).await?;
        let mut rounds = Rounds::new(counted.denied);
        rounds.run(self, &counted.checks, denies).await?;
        let checks: Vec<CountedCheck> = rounds
            .denied
            .iter()
            .copied()
            .zip(rounds.decided()?)
            .map(|(denied, decision)| CountedCheck { denied, decision })
            .collect();
        let top = counted.domain.zip(self.top.as_ref());
        if let Some(summary) = top.and_then(|(domain, top)| top.domain(domain)) {
            for (check, decided) in counted.checks.iter().zip(&checks) {
                if check.cost() > 0 {
                    summary.record(check.key(), decided.denied);
                }
            }
        }
        Ok(CountedOutcome { refunds, checks })
    }

    /// Makes `refunds` in one store call; drops them when the store fails.
    async fn refund_counted(
        &self,
        refunds: &[Check<'_>],
    ) -> Result<Vec<Option<Decision>>, DecideError> {
        if refunds.is_empty() {
            return Ok(Vec::new());
        }
        match self.refund(refunds).await {
            Ok(verdict) => {
                let mut decided: Vec<Option<Decision>> =
                    verdict.into_decisions().into_iter().map(Some).collect();
                decided.resize(refunds.len(), None);
                Ok(decided)
            }
            Err(e @ StoreError::Check(_)) => Err(e.into()),
            Err(e) => {
                tracing::debug!(error = %e, "a refund was dropped: the store failed");
                Ok(vec![None; refunds.len()])
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use tollgate::{Check, Policy};

    use super::{Counted, DecideError, Limiter};
    use crate::limiter::testing::limiter;

    fn policy() -> Policy {
        Policy::token_bucket(5, 5, Duration::from_secs(3600)).unwrap()
    }

    /// What is left of bucket `key` (asked at cost 0).
    async fn left(limiter: &Limiter, key: &[u8]) -> u64 {
        let verdict = limiter
            .ask_store(&[Check::new(policy(), key, 0).named("t")])
            .await
            .unwrap();
        verdict.decisions()[0].remaining()
    }

    #[tokio::test]
    async fn an_own_limit_is_refused_where_inline_policies_are_off_before_anything_is_counted() {
        for inline in [false, true] {
            let limiter = limiter(inline);
            let mut counted = Counted::new(true);
            counted.check(Check::new(policy(), b"a", 2).named("t"), false);
            let outcome = limiter.check_counted(counted, |d| d.contains(&true)).await;
            if inline {
                assert!(!outcome.unwrap().checks[0].denied);
                assert_eq!(left(&limiter, b"a").await, 3);
            } else {
                assert_eq!(outcome, Err(DecideError::InlineRefused));
                assert_eq!(left(&limiter, b"a").await, 5);
            }
        }
    }

    #[tokio::test]
    async fn refunds_are_given_back_before_the_checks_are_decided() {
        let limiter = limiter(false);
        let mut first = Counted::new(false);
        first.check(Check::new(policy(), b"a", 3).named("t"), false);
        limiter.check_counted(first, |_| false).await.unwrap();
        // 2 left; 2 given back makes room for 4.
        let mut counted = Counted::new(false);
        counted.refund(Check::new(policy(), b"a", 2).named("t"));
        counted.check(Check::new(policy(), b"a", 4).named("t"), false);
        let outcome = limiter
            .check_counted(counted, |d| d.contains(&true))
            .await
            .unwrap();
        assert_eq!(outcome.refunds.len(), 1);
        assert_eq!(outcome.refunds[0].map(|d| d.remaining()), Some(4));
        assert!(!outcome.checks[0].denied);
        assert_eq!(outcome.checks[0].decision.remaining(), 0);
    }

    #[tokio::test]
    async fn a_check_denied_before_any_call_is_not_charged_nor_are_the_others_when_it_denies() {
        let limiter = limiter(false);
        let mut counted = Counted::new(false);
        counted.check(Check::new(policy(), b"a", 6).named("t"), true);
        counted.check(Check::new(policy(), b"b", 1).named("t"), false);
        let outcome = limiter
            .check_counted(counted, |d| d.contains(&true))
            .await
            .unwrap();
        let denied: Vec<bool> = outcome.checks.iter().map(|c| c.denied).collect();
        assert_eq!(denied, [true, false]);
        assert_eq!(left(&limiter, b"a").await, 5);
        assert_eq!(left(&limiter, b"b").await, 5);
        // When its denial does not deny the request, the others are charged.
        let mut counted = Counted::new(false);
        counted.check(Check::new(policy(), b"a", 6).named("t"), true);
        counted.check(Check::new(policy(), b"b", 1).named("t"), false);
        limiter.check_counted(counted, |_| false).await.unwrap();
        assert_eq!(left(&limiter, b"b").await, 4);
    }
}
