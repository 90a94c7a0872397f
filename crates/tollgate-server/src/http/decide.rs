//! A request's policies decided on the store: all-or-nothing, with shadow policies that are
//! charged exactly as if enforced but never deny, and every outcome counted.
//!
//! A shadow policy must not change what the enforced ones decide. So when only shadow
//! policies deny a check of several, nothing was charged (a denial takes nothing), and the
//! enforced policies are decided again on their own: they are charged as if the shadow policy
//! were not there, and the shadow policy's bucket is left as its denial left it, as it would be
//! if it were enforced.

use std::sync::Arc;

use tollgate::{Check, Decision, Verdict};

use super::AppState;
use super::check::store_problem;
use super::live::Entry;
use super::problem::Problem;

/// One policy's part of an answer.
pub(crate) struct Part {
    /// The policy.
    pub(super) entry: Arc<Entry>,
    /// Its decision.
    pub(crate) decision: Decision,
    /// It denied, but is in shadow mode: the request goes on.
    pub(super) shadow_denied: bool,
}

/// A request's decision.
pub(crate) struct Decided {
    /// One part per policy, in the request's order.
    pub(crate) parts: Vec<Part>,
    /// Whether the store took the tokens (rather than the fail policy answering).
    pub(super) paid: bool,
}

impl Decided {
    /// Whether the request may go on.
    pub(crate) fn allowed(&self) -> bool {
        self.parts
            .iter()
            .all(|p| p.decision.allowed || p.shadow_denied)
    }

    /// Whether a shadow policy would have denied it.
    pub(crate) fn shadow_denied(&self) -> bool {
        self.parts.iter().any(|p| p.shadow_denied)
    }

    /// The part to show in the answer's top-level fields and headers: the most restrictive of
    /// the enforced decisions (as [`Verdict::most_restrictive`] picks), or of all when every
    /// policy is a shadow that denied.
    pub(crate) fn shown(&self) -> &Part {
        let enforced: Vec<&Part> = self.parts.iter().filter(|p| !p.shadow_denied).collect();
        let pool = if enforced.is_empty() {
            self.parts.iter().collect()
        } else {
            enforced
        };
        let allowed = pool.iter().all(|p| p.decision.allowed);
        let pick = if allowed {
            pool.iter().min_by_key(|p| p.decision.remaining)
        } else {
            pool.iter()
                .filter(|p| !p.decision.allowed)
                .max_by_key(|p| p.decision.retry_after)
        };
        // `parts` is never empty: a request names at least one policy.
        pick.copied().unwrap_or(&self.parts[0])
    }
}

/// Decides `cost` tokens of `key` under `entries`.
pub(crate) async fn decide(
    state: &AppState,
    entries: Vec<Arc<Entry>>,
    key: &[u8],
    cost: u64,
) -> Result<Decided, Problem> {
    // A policy the store cannot decide at all (beyond Redis's range, say) is the request's
    // fault when inline, and its field says which number to change. A configured one was
    // checked against the store when the config was read.
    for entry in entries.iter().filter(|e| !e.named) {
        if let Err(e) = state.store.supports_dyn(&entry.policy) {
            let field = match e.field() {
                "period" => "period_ms",
                other => other,
            };
            return Err(Problem::invalid_field(field, e.to_string()));
        }
    }
    let checks: Vec<Check<'_>> = entries.iter().map(|e| check(e, key, cost)).collect();
    let verdict = match call(state, &checks).await {
        Ok(verdict) => verdict,
        Err(problem) => {
            for entry in &entries {
                entry.counters.error.inc();
            }
            return Err(problem);
        }
    };
    let paid = !verdict.by_fail_policy;
    let only_shadows_deny = !verdict.allowed()
        && entries
            .iter()
            .zip(&verdict.decisions)
            .all(|(e, d)| d.allowed || e.shadow);
    let mut decisions = verdict.decisions;
    if only_shadows_deny && entries.iter().any(|e| !e.shadow) {
        let enforced: Vec<Check<'_>> = entries
            .iter()
            .filter(|e| !e.shadow)
            .map(|e| check(e, key, cost))
            .collect();
        let again = call(state, &enforced).await.inspect_err(|_| {
            for entry in &entries {
                entry.counters.error.inc();
            }
        })?;
        let mut again = again.decisions.into_iter();
        for (entry, decision) in entries.iter().zip(&mut decisions) {
            if !entry.shadow {
                *decision = again.next().unwrap_or(*decision);
            }
        }
    }
    let enforced_allow = entries
        .iter()
        .zip(&decisions)
        .all(|(e, d)| d.allowed || e.shadow);
    let parts: Vec<Part> = entries
        .into_iter()
        .zip(decisions)
        .map(|(entry, decision)| {
            let shadow_denied = entry.shadow && !decision.allowed && enforced_allow;
            let counter = match (decision.allowed, shadow_denied) {
                (true, _) => &entry.counters.allowed,
                (false, true) => &entry.counters.shadow_denied,
                (false, false) => &entry.counters.denied,
            };
            counter.inc();
            Part {
                entry,
                decision,
                shadow_denied,
            }
        })
        .collect();
    Ok(Decided { parts, paid })
}

/// The check of `entry`: a configured policy's buckets go by its name, an inline one's by its
/// numbers.
pub(super) fn check<'a>(entry: &'a Entry, key: &'a [u8], cost: u64) -> Check<'a> {
    let check = Check::new(entry.policy, key, cost);
    if entry.named {
        check.named(&entry.name)
    } else {
        check
    }
}

/// One store call, its error answered as a problem.
pub(crate) async fn call(state: &AppState, checks: &[Check<'_>]) -> Result<Verdict, Problem> {
    state.decide(checks).await.map_err(store_problem)
}
