//! The one rule for checks whose denial does not deny the request: a shadow policy, and in
//! Envoy's terms a descriptor in shadow or quota mode while another still has room.
//!
//! A store call is all-or-nothing: when any check denies, none is charged. So when only such
//! checks deny, the call charged nothing that it should have: the checks that denied are left
//! out (peeked at cost 0, keeping the decision that denied them, as it would stand were they
//! enforced), and so are those a caller asks to leave out of every retry, and the others are
//! decided again. Each round leaves out at least one more check, so the rounds end: at most
//! one more than there are checks, and two when every check that cannot deny is left out of
//! the retry.

use tollgate::{Check, Decision};

use super::{DecideError, Limiter};

/// Where the rounds stand: per check, whether it denies and the decision to show.
pub(crate) struct Rounds {
    /// Per check: it denies (given before any call for checks that can never be allowed, such
    /// as a limit of 0; those are left out from the start).
    pub(crate) denied: Vec<bool>,
    /// Per check: its decision, once a call made one.
    pub(crate) decisions: Vec<Option<Decision>>,
    /// Per check: left out of every round after the first, whatever it decided (empty: none).
    retried_without: Vec<bool>,
    /// Whether every call was answered by the store (none by the fail policy): the tokens of
    /// an allowed request were taken.
    pub(crate) paid: bool,
}

impl Rounds {
    /// Rounds over checks of which those in `denied` deny before any call.
    pub(crate) fn new(denied: Vec<bool>) -> Rounds {
        let n = denied.len();
        Rounds {
            denied,
            decisions: vec![None; n],
            retried_without: Vec::new(),
            paid: true,
        }
    }

    /// These rounds, with the checks in `without` left out of every retry (a shadow policy
    /// is charged in the first call or not at all, as were it alone).
    pub(crate) fn retried_without(mut self, without: Vec<bool>) -> Rounds {
        self.retried_without = without;
        self
    }

    /// Decides `checks` (their costs as asked) through `limiter` until the request is settled:
    /// allowed, or denied by a check whose denial denies it, as `denies` tells from which
    /// checks deny. A denied request is charged nothing.
    pub(crate) async fn run(
        &mut self,
        limiter: &Limiter,
        checks: &[Check<'_>],
        denies: impl Fn(&[bool]) -> bool,
    ) -> Result<(), DecideError> {
        for round in 0..=checks.len() {
            let left_out = |i: usize| self.left_out(i, round);
            // Every check left out, and each has the decision to show: nothing to charge.
            if (0..checks.len()).all(left_out) && self.decisions.iter().all(Option::is_some) {
                return Ok(());
            }
            if checks.is_empty() {
                return Ok(());
            }
            let over = denies(&self.denied);
            // The usual call, of every check as asked, is made from `checks` themselves.
            let peeks: Vec<Check<'_>>;
            let call = if over || (0..checks.len()).any(left_out) {
                peeks = checks
                    .iter()
                    .enumerate()
                    .map(|(i, check)| {
                        let cost = if over || left_out(i) { 0 } else { check.cost() };
                        check.with_cost(cost)
                    })
                    .collect();
                &peeks[..]
            } else {
                checks
            };
            let verdict = limiter.ask_store(call).await?;
            self.paid &= !verdict.by_fail_policy();
            let allowed = verdict.allowed();
            for (i, decision) in verdict.into_decisions().into_iter().enumerate() {
                if self.left_out(i, round) {
                    // Left out: keep the decision that stood (or the peek, if none did).
                    self.decisions[i].get_or_insert(decision);
                    continue;
                }
                self.decisions[i] = Some(decision);
                self.denied[i] = !decision.allowed();
            }
            // Allowed: every check not left out was charged. Over: nothing was, nor should be.
            // Otherwise only left-out checks denied, and the call charged nothing: again.
            if allowed || over || denies(&self.denied) {
                return Ok(());
            }
        }
        Err(DecideError::Unavailable(
            "the store kept denying checks that do not deny the request".to_owned(),
        ))
    }

    /// Whether check `i` is left out of round `round` (peeked, its decision kept): it denies,
    /// or it is one to leave out of every retry.
    fn left_out(&self, i: usize, round: usize) -> bool {
        self.denied[i] || (round > 0 && self.retried_without.get(i) == Some(&true))
    }

    /// The decision of every check, in order, once [`run`](Self::run) settled them; an error
    /// if a check has none (the store answered fewer decisions than asked). Read in place:
    /// nothing is allocated on the way to an answer.
    pub(crate) fn decided(&self) -> Result<impl Iterator<Item = Decision> + '_, DecideError> {
        if self.decisions.iter().any(Option::is_none) {
            return Err(DecideError::Unavailable(
                "the store answered no decision for a check".to_owned(),
            ));
        }
        Ok(self.decisions.iter().flatten().copied())
    }
}
