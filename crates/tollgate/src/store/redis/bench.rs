//! The Redis store's encoder, reachable without a Redis, for tollgate's instruction-count
//! benchmark (`scripts/instructions` in the repository), which counts with callgrind what this
//! process spends on a batch before the network. Not for applications: what it writes is the
//! wire form of one script call, which changes whenever the scripts do.

use super::RedisStore;
use super::script::{self, Scripts};
use crate::{Check, CheckError};

/// Encodes batches as [`RedisStore`] encodes the calls it sends to one Redis.
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
