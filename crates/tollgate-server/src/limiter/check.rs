//! The core's entrances for a check and for one bucket (read, reset): every front end's request
//! is validated here, by the rules written once (the key, the client's numbers, the cost), and
//! then decided.

use std::sync::Arc;

use super::live::Entry;
use super::{Ask, Cost, DecideError, Limiter, MAX_POLICIES_PER_CHECK, Outcome, Target, check_key};

impl Limiter {
    /// Decides `ask`: its key and policies validated, all its policies decided
    /// all-or-nothing, shadow policies never denying, every outcome counted.
    pub async fn check(&self, ask: Ask<'_>) -> Result<Outcome, DecideError> {
        let (entries, over_capacity) = self.validate(&ask)?;
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
        let (entries, _) = self.validate(&ask)?;
        let checks: Vec<_> = entries.iter().map(|e| e.check(key, 0)).collect();
        Ok(self.reset_checks(&checks).await?)
    }

    /// The policies `ask` names, once its key, its policies and its cost pass the rules; and
    /// whether the cost exceeds a [`Target::Chosen`] bucket's capacity (then the answer is a
    /// look). The rules, in the order a request is refused by them: the key, numbers of the
    /// client's where they are turned off, unknown names, a cost the client's own policy can
    /// never allow.
    pub(super) fn validate(&self, ask: &Ask<'_>) -> Result<(Vec<Arc<Entry>>, bool), DecideError> {
        check_key(ask.key, &ask.target).map_err(DecideError::Key)?;
        if let Target::Named { names, .. } = &ask.target {
            check_names(names)?;
        }
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

/// Whether `names` may be one request's policies: 1 to [`MAX_POLICIES_PER_CHECK`], each once
/// (a store call names a bucket once).
fn check_names(names: &[String]) -> Result<(), DecideError> {
    if names.is_empty() || names.len() > MAX_POLICIES_PER_CHECK {
        return Err(DecideError::Policies(format!(
            "policies must list 1 to {MAX_POLICIES_PER_CHECK} names, got {}",
            names.len()
        )));
    }
    let twice = (1..names.len()).find(|&i| names[..i].contains(&names[i]));
    if let Some(name) = twice.map(|i| &names[i]) {
        return Err(DecideError::Policies(format!("{name:?} is listed twice")));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use tollgate::Policy;

    use super::super::testing::limiter;
    use super::super::{Ask, Cost, DecideError, KeyError, Target};

    fn ask(target: Target, key: &[u8], cost: u64) -> Ask<'_> {
        Ask {
            target,
            key,
            cost: Cost::All(cost),
        }
    }

    fn bucket(capacity: u64) -> Policy {
        Policy::token_bucket(capacity, 1, Duration::from_secs(1)).unwrap()
    }

    /// The rules, in the order a request meets them: the key, then the switch of the client's
    /// numbers, then the cost; and an empty key is only a `Target::Chosen` bucket's.
    #[tokio::test]
    async fn the_rules_refuse_in_one_order_on_every_front_end() {
        let off = limiter(false);
        let long = vec![b'k'; 1025];
        let too_long = DecideError::Key(KeyError {
            len: 1025,
            most: 1024,
        });
        let inline = Target::Inline(bucket(2));
        assert_eq!(
            off.check(ask(inline.clone(), &long, 9)).await.err(),
            Some(too_long)
        );
        assert_eq!(
            off.check(ask(inline.clone(), b"k", 9)).await.err(),
            Some(DecideError::InlineRefused)
        );
        let on = limiter(true);
        assert!(matches!(
            on.check(ask(inline.clone(), b"k", 9)).await,
            Err(DecideError::CostExceedsCapacity(_))
        ));
        assert_eq!(
            on.check(ask(inline, b"", 1)).await.err(),
            Some(DecideError::Key(KeyError { len: 0, most: 1024 }))
        );
        let chosen = Target::Chosen {
            policy: bucket(2),
            bucket: "t",
        };
        let outcome = on.check(ask(chosen.clone(), b"", 1)).await.unwrap();
        assert!(outcome.allowed());
        // Above the capacity: a look, denied, nothing taken.
        let looked = on.check(ask(chosen.clone(), b"", 9)).await.unwrap();
        assert!(looked.over_capacity && !looked.allowed());
        assert_eq!(looked.shown().decision.remaining(), 1);
    }

    #[tokio::test]
    async fn a_request_names_one_to_sixteen_policies_each_once() {
        let limiter = limiter(true);
        let named = |names: &[&str]| Target::Named {
            names: names.iter().map(|n| (*n).to_owned()).collect(),
            listed: true,
        };
        let refused = |e: Result<_, DecideError>| match e {
            Err(DecideError::Policies(message)) => message,
            other => panic!("{:?}", other.map(|_: super::super::Outcome| ())),
        };
        assert_eq!(
            refused(limiter.check(ask(named(&[]), b"k", 1)).await),
            "policies must list 1 to 16 names, got 0"
        );
        let many: Vec<String> = (0..17).map(|i| format!("p{i}")).collect();
        let many: Vec<&str> = many.iter().map(String::as_str).collect();
        assert_eq!(
            refused(limiter.check(ask(named(&many), b"k", 1)).await),
            "policies must list 1 to 16 names, got 17"
        );
        assert_eq!(
            refused(limiter.check(ask(named(&["a", "b", "a"]), b"k", 1)).await),
            "\"a\" is listed twice"
        );
    }
}
