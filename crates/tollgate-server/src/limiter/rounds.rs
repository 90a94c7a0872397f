//! The one rule for checks whose denial does not deny the request: a shadow policy, and in
//! Envoy's terms a descriptor in shadow or quota mode while another still has room.
//!
//! A store call is all-or-nothing: when any check denies, none is charged. So when only such
//! checks deny, the call charged nothing that it should have; they are left out (peeked at
//! cost 0, keeping the decision that denied them, as it would stand were they enforced) and
//! the others are decided again. Each round leaves out at least one more check, so the rounds
//! end: at most one more than there are checks.

use tollgate::{Check, Decision};

use super::{DecideError, Limiter};

/// Where the rounds stand: per check, whether it denies and the decision to show.
pub struct Rounds {
    /// Per check: it denies (given before any call for checks that can never be allowed, such
    /// as a limit of 0; those are left out from the start).
    pub denied: Vec<bool>,
    /// Per check: its decision, once a call made one.
    pub decisions: Vec<Option<Decision>>,
    /// Whether every call was answered by the store (none by the fail policy): the tokens of
    /// an allowed request were taken.
    pub paid: bool,
}

impl Rounds {
    /// Rounds over checks of which those in `denied` deny before any call.
    pub fn new(denied: Vec<bool>) -> Rounds {
        let n = denied.len();
        Rounds {
            denied,
            decisions: vec![None; n],
            paid: true,
        }
    }

    /// Decides `checks` (their costs as asked) through `limiter` until the request is settled:
    /// allowed, or denied by a check whose denial denies it, as `denies` tells from which
    /// checks deny. A denied request is charged nothing.
    pub async fn decide(
        &mut self,
        limiter: &Limiter,
        checks: &[Check<'_>],
        denies: impl Fn(&[bool]) -> bool,
    ) -> Result<(), DecideError> {
        for _ in 0..=checks.len() {
            // Every check left out, and each has the decision to show: nothing to charge.
            if self.denied.iter().all(|&d| d) && self.decisions.iter().all(Option::is_some) {
                return Ok(());
            }
            let over = denies(&self.denied);
            let round: Vec<Check<'_>> = checks
                .iter()
                .zip(&self.denied)
                .map(|(check, &denied)| {
                    let cost = if over || denied { 0 } else { check.cost };
                    Check { cost, ..*check }
                })
                .collect();
            if round.is_empty() {
                return Ok(());
            }
            let verdict = limiter.decide(&round).await?;
            self.paid &= !verdict.by_fail_policy;
            let allowed = verdict.allowed();
            for ((denied, shown), decision) in self
                .denied
                .iter_mut()
                .zip(&mut self.decisions)
                .zip(verdict.decisions)
            {
                if *denied {
                    // Left out: keep the decision that denied it (or the peek, if none did).
                    shown.get_or_insert(decision);
                    continue;
                }
                *shown = Some(decision);
                *denied = !decision.allowed;
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
}
