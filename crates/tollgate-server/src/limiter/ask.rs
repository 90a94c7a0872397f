//! What a request asks of the core, whichever front end it came through, in the core's own
//! terms: the policies ([`Target`]), the key, what it costs each policy ([`Cost`]); and the
//! bounds on what it may ask, each written here once.

use tollgate::Policy;

/// The longest key accepted, in bytes.
pub const MAX_KEY_BYTES: usize = 1024;

/// The most policies one check may name.
pub const MAX_POLICIES_PER_CHECK: usize = 16;

/// Which policies a request asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    /// An inline token-bucket policy: the client's numbers, its buckets named by them.
    Inline(Policy),
    /// Configured policies by name (`"policy"`: one; `"policies"`: one or more, and then the
    /// answer lists each).
    Named {
        /// The names, without duplicates.
        names: Vec<String>,
        /// Whether they came as a `"policies"` list.
        listed: bool,
    },
    /// The client's numbers on buckets of one name, whatever the numbers (redis-cell's
    /// `CL.THROTTLE` keys, throttlecrab's `THROTTLE` keys): a key is one bucket, as in those
    /// servers. A cost above the capacity is answered from a look at the bucket (nothing is
    /// taken), as they answer it, and an empty key is a key like any, as Redis takes it.
    Chosen {
        /// The numbers.
        policy: Policy,
        /// The name every bucket of this kind goes by (its metrics' `policy` label too).
        bucket: &'static str,
    },
}

impl Target {
    /// Whether the client chose the numbers (refused where inline policies are turned off).
    pub fn chosen_by_client(&self) -> bool {
        !matches!(self, Target::Named { .. })
    }

    /// Whether the answer lists each policy.
    pub fn listed(&self) -> bool {
        matches!(self, Target::Named { listed: true, .. })
    }
}

/// What a request costs its policies.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Cost {
    /// The same for every policy (`"cost": 3`, or 1 when absent).
    All(u64),
    /// One per named policy, in the order of [`Target::Named`]'s names (`"cost": {"requests":
    /// 1, "tokens": 2000}`).
    Each(Vec<u64>),
}

impl Cost {
    /// What the request costs its `i`-th policy.
    pub fn of(&self, i: usize) -> u64 {
        match self {
            Cost::All(cost) => *cost,
            Cost::Each(costs) => costs.get(i).copied().unwrap_or(0),
        }
    }
}

/// A request to decide: `cost` tokens of `key` under `target`'s policies.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ask<'a> {
    /// The policies.
    pub target: Target,
    /// The buckets' key.
    pub key: &'a [u8],
    /// What it costs each policy; 0 looks without taking.
    pub cost: Cost,
}

/// Why a key cannot name a bucket: it is empty (only [`Target::Chosen`] takes an empty key),
/// or longer than `most` bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KeyError {
    /// The key's length, in bytes.
    pub len: usize,
    /// The most accepted.
    pub most: usize,
}

/// Whether `key` may name a bucket of `target`: the one key rule of every front end.
pub fn check_key(key: &[u8], target: &Target) -> Result<(), KeyError> {
    let empty = key.is_empty() && !matches!(target, Target::Chosen { .. });
    if empty || key.len() > MAX_KEY_BYTES {
        return Err(KeyError {
            len: key.len(),
            most: MAX_KEY_BYTES,
        });
    }
    Ok(())
}
