//! The core's entrances for a check and for one bucket (read, reset): every front end's request
//! is validated here, by the rules written once (the key, the client's numbers, the cost), and
//! then decided.

use std::sync::Arc;

use super::live::Entry;
use super::{Ask, Cost, DecideError, Limiter, Outcome, Target, check_key};

impl Limiter {
    /// Decides `ask`: its key and policies validated, all its policies decided
    /// all-or-nothing, shadow policies never denying, every outcome counted.
    pub async fn check(&self, ask: Ask<'_>) -> Result<Outcome, DecideError> {
        let (entries, over_capacity) = self.admit(&ask)?;
        self.decide_entries(entries, ask.key, &ask.cost, over_capacity)
            .await
    }

    /// The state of `key`'s bucket under `target`'s one policy, as a check of cost 0 answers it.
    pub async fn read(&self, target: Target, key: &[u8]) -> Result<Outcome, DecideError> {
        let ask = Ask {
            target,
            key,
            cost: Cost::All(0),
        };
        self.check(ask).await
    }

    /// Makes `key`'s bucket under `target`'s policies full again.
    pub async fn reset(&self, target: Target, key: &[u8]) -> Result<(), DecideError> {
        let ask = Ask {
            target,
            key,
            cost: Cost::All(0),
        };
        let (entries, _) = self.admit(&ask)?;
        let checks: Vec<_> = entries.iter().map(|e| e.check(key, 0)).collect();
        Ok(self.reset_checks(&checks).await?)
    }

    /// The policies `ask` names, once its key, its policies and its cost pass the rules; and
    /// whether the cost exceeds a [`Target::Chosen`] bucket's capacity (then the answer is a
    /// look). The rules, in the order a request is refused by them: the key, numbers of the
    /// client's where they are turned off, unknown names, a cost the client's own policy can
    /// never allow.
    pub(super) fn admit(&self, ask: &Ask<'_>) -> Result<(Vec<Arc<Entry>>, bool), DecideError> {
        check_key(ask.key, &ask.target).map_err(DecideError::Key)?;
        let entries = self.live.load().resolve(&ask.target)?;
        let over = |i: usize, e: &Entry| ask.cost.of(i) > e.policy.capacity();
        let over_capacity = match &ask.target {
            Target::Named { .. } => false,
            Target::Chosen { .. } => entries.iter().enumerate().any(|(i, e)| over(i, e)),
            Target::Inline(policy) => {
                if let Some(cost) = Some(ask.cost.of(0)).filter(|&c| c > policy.capacity()) {
                    return Err(DecideError::CostExceedsCapacity(format!(
                        "cost {cost} exceeds the capacity {}: it can never be allowed",
                        policy.capacity()
                    )));
                }
                false
            }
        };
        Ok((entries, over_capacity))
    }
}
