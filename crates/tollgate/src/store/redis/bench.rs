//! The Redis store's encoder, reachable without a Redis, for tollgate's instruction-count
//! benchmark (`scripts/instructions` in the repository), which counts with callgrind what this
//! process spends on a batch before the network. Not for applications: what it writes is the
//! wire form of one script call, which changes whenever the scripts do.

use super::RedisStore;
use super::script::{self, Scripts};
use crate::{Check, CheckError};

/// Encodes batches as [`RedisStore`] encodes the calls it sends to one Redis.
///
/// ```
/// use tollgate::store::redis::bench::BatchEncoder;
/// use tollgate::{Check, Policy};
///
/// let policy = Policy::per_second(10)?;
/// let (alice, bob) = ([Check::new(policy, b"alice", 1)], [Check::new(policy, b"bob", 1)]);
/// let mut out = Vec::new();
/// BatchEncoder::new().encode(&[&alice, &bob], &mut out)?;
/// assert!(out.starts_with(b"*")); // one RESP array: the whole call
/// assert!(out.windows(7).any(|w| w == b"EVALSHA"));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct BatchEncoder {
    scripts: Scripts,
}

impl BatchEncoder {
    /// An encoder with the store's scripts (their hashes computed once, as the store does).
    pub fn new() -> BatchEncoder {
        BatchEncoder {
            scripts: Scripts::new(),
        }
    }

    /// Appends to `out` the command one script call sends for `decisions` (each a list of
    /// checks decided all or nothing), as the store makes it: every check validated and encoded
    /// (as [`RedisStore::decide`](crate::Store::decide) does when it is asked), the buckets
    /// planned, `EVALSHA` built and packed in RESP. Refuses what the store refuses.
    pub fn encode(&self, decisions: &[&[Check<'_>]], out: &mut Vec<u8>) -> Result<(), CheckError> {
        let encoded = decisions
            .iter()
            .map(|checks| RedisStore::encode(checks, false))
            .collect::<Result<Vec<_>, _>>()?;
        script::pack(&self.scripts, &encoded, out);
        Ok(())
    }
}

impl Default for BatchEncoder {
    fn default() -> BatchEncoder {
        BatchEncoder::new()
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::Policy;

    #[test]
    fn a_batch_is_one_evalsha_naming_each_bucket_once() {
        let policy = Policy::token_bucket(10, 10, Duration::from_secs(1)).unwrap();
        let alice = [Check::new(policy, b"alice", 1).named("api")];
        let bob = [Check::new(policy, b"bob", 1).named("api")];
        let mut out = Vec::new();
        BatchEncoder::new()
            .encode(&[&alice, &bob, &alice], &mut out)
            .unwrap();
        let text = String::from_utf8_lossy(&out);
        assert!(text.starts_with('*'), "{text}");
        assert!(text.contains("\r\nEVALSHA\r\n"), "{text}");
        // Two distinct buckets: each key sent once, however many decisions name it.
        assert_eq!(text.matches("alice").count(), 1, "{text}");
        assert_eq!(text.matches("bob").count(), 1, "{text}");
    }

    #[test]
    fn what_the_store_refuses_is_refused() {
        let policy = Policy::token_bucket(10, 10, Duration::from_secs(1)).unwrap();
        let greedy = [Check::new(policy, b"alice", 11)];
        let mut out = Vec::new();
        let refused = BatchEncoder::new().encode(&[&greedy], &mut out);
        assert!(
            matches!(
                refused,
                Err(CheckError::CostExceedsCapacity {
                    cost: 11,
                    capacity: 10
                })
            ),
            "{refused:?}"
        );
        assert!(out.is_empty());
    }
}
