//! A request's policies decided on the store: all-or-nothing, with shadow policies that are
//! charged exactly as if enforced but never deny, and every outcome counted (and its key, in
//! the policy's summary of who is denied and allowed: a shadow's denials as denied).
//!
//! A shadow policy must not change what the enforced ones decide. So when only shadow
//! policies deny a check of several, the enforced policies are decided again on their own (a
//! second store call, only then): they are charged as if the shadow policies were not there,
//! and the shadow policies' buckets are left as that first call left them.

use std::sync::Arc;
use std::time::Duration;

use tollgate::{Check, Decision};

use super::live::Entry;
use super::rounds::Rounds;
use super::{Cost, DecideError, Limiter};

/// One policy's part of an answer.
pub struct Part {
    /// The policy.
    pub entry: Arc<Entry>,
    /// Its decision.
    pub decision: Decision,
    /// It denied, but is in shadow mode: the request goes on.
    pub shadow_denied: bool,
}

/// What an answer's top-level fields and headers show (see [`Outcome::shown`]).
pub struct Shown<'a> {
    /// The enforced policy they describe; `None` when every policy is a shadow.
    pub entry: Option<&'a Arc<Entry>>,
    /// The decision they show.
    pub decision: Decision,
}

/// A request's decision.
pub struct Outcome {
    /// One part per policy, in the request's order.
    pub parts: Vec<Part>,
    /// Whether the store took the tokens (rather than the fail policy answering).
    pub paid: bool,
    /// The cost exceeds a [`Target::Chosen`](super::Target) bucket's capacity: the answer is a
    /// look at the bucket, nothing was taken, and the request is denied.
    pub over_capacity: bool,
}

impl Outcome {
    /// Whether the request may go on.
    pub fn allowed(&self) -> bool {
        !self.over_capacity
            && self
                .parts
                .iter()
                .all(|p| p.decision.allowed() || p.shadow_denied)
    }

    /// Whether a shadow policy would have denied it.
    pub fn shadow_denied(&self) -> bool {
        self.parts.iter().any(|p| p.shadow_denied)
    }

    /// What the answer's top-level fields and headers show. A shadow policy is invisible to
    /// the client: they show the most restrictive of the enforced decisions (as
    /// [`Verdict::most_restrictive`](tollgate::Verdict) picks) and never a shadow's. When every
    /// policy is a shadow, they show the most restrictive shadow as the allowed answer it is
    /// (`retry_after` 0), with no policy to put in headers.
    pub fn shown(&self) -> Shown<'_> {
        // Walked again rather than collected: this runs for every answer.
        let enforced = || self.parts.iter().filter(|p| !p.entry.shadow);
        let Some(first) = enforced().next() else {
            // `parts` is never empty: a request names at least one policy.
            let tightest = self
                .parts
                .iter()
                .min_by_key(|p| p.decision.remaining())
                .unwrap_or(&self.parts[0]);
            return Shown {
                entry: None,
                decision: Decision::new(
                    true,
                    tightest.decision.limit(),
                    tightest.decision.remaining(),
                    Duration::ZERO,
                    tightest.decision.reset_after(),
                ),
            };
        };
        let allowed = enforced().all(|p| p.decision.allowed());
        let pick = if allowed {
            enforced().min_by_key(|p| p.decision.remaining())
        } else {
            enforced()
                .filter(|p| !p.decision.allowed())
                .max_by_key(|p| p.decision.retry_after())
        };
        let part = pick.unwrap_or(first);
        Shown {
            entry: Some(&part.entry),
            decision: part.decision,
        }
    }
}

impl Limiter {
    /// Decides `key` under `entries` (as [`Live::resolve`](super::Live) found them), the
    /// `i`-th costing `cost.of(i)` tokens; with `over_capacity`, only looks (cost 0) and
    /// counts the request denied.
    pub(super) async fn decide_entries(
        &self,
        entries: Vec<Arc<Entry>>,
        key: &[u8],
        cost: &Cost,
        over_capacity: bool,
    ) -> Result<Outcome, DecideError> {
        // A policy the store cannot decide at all (beyond Redis's range, say) is the request's
        // fault when the client chose it. A configured one was checked against the store when
        // the config was read.
        for entry in entries.iter().filter(|e| !e.configured) {
            if let Err(e) = self.supports(&entry.policy) {
                return Err(DecideError::Unsupported {
                    field: e.field(),
                    message: e.to_string(),
                });
            }
        }
        let checks: Vec<Check<'_>> = entries
            .iter()
            .enumerate()
            .map(|(i, e)| e.check(key, if over_capacity { 0 } else { cost.of(i) }))
            .collect();
        let mut rounds = Rounds::new(vec![false; entries.len()]);
        if entries.iter().any(|e| e.shadow) {
            rounds = rounds.retried_without(entries.iter().map(|e| e.shadow).collect());
        }
        let enforced_deny =
            |denied: &[bool]| denied.iter().zip(&entries).any(|(&d, e)| d && !e.shadow);
        if let Err(e) = rounds.run(self, &checks, enforced_deny).await {
            for entry in &entries {
                entry.counters.error.inc();
            }
            return Err(e);
        }
        let enforced_allow = !enforced_deny(&rounds.denied);
        let parts: Vec<Part> = entries
            .into_iter()
            .zip(rounds.decided()?)
            .enumerate()
            .map(|(i, (entry, decision))| {
                let shadow_denied = entry.shadow && !decision.allowed() && enforced_allow;
                let allowed = decision.allowed() && !over_capacity;
                let counter = match (allowed, shadow_denied) {
                    (true, _) => &entry.counters.allowed,
                    (false, true) => &entry.counters.shadow_denied,
                    (false, false) => &entry.counters.denied,
                };
                counter.inc();
                // A look (cost 0) decides nothing: who looks is not who is limited.
                if let Some(top) = &entry.top
                    && (over_capacity || cost.of(i) > 0)
                {
                    top.record(key, !allowed);
                }
                Part {
                    entry,
                    decision,
                    shadow_denied,
                }
            })
            .collect();
        Ok(Outcome {
            parts,
            paid: rounds.paid,
            over_capacity,
        })
    }
}
