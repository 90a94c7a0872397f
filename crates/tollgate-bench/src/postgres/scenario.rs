//! What is measured: which key each call asks about.

use std::fmt;
use std::sync::Arc;

use super::rng::SplitMix64;

/// A load shape. Both run under the allow-all limit, so every call of both approaches writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, clap::ValueEnum)]
#[value(rename_all = "snake_case")]
pub enum Scenario {
    /// Each call picks a key uniformly at random out of `--keys`, all created before the run.
    ManyKeys,
    /// Every call on one key (also created before the run): the row lock is the bottleneck.
    HotKey,
}

/// The hot key's name (in each approach's own table).
pub(crate) const HOT: &str = "hot";

impl Scenario {
    /// Both scenarios, in report order.
    pub const ALL: [Scenario; 2] = [Scenario::ManyKeys, Scenario::HotKey];

    /// The name used in arguments and the report.
    pub fn name(self) -> &'static str {
        match self {
            Scenario::ManyKeys => "many_keys",
            Scenario::HotKey => "hot_key",
        }
    }

    /// One line on what the scenario measures.
    pub fn describe(self, keys: usize) -> String {
        match self {
            Scenario::ManyKeys => format!(
                "each call on a key drawn uniformly from {keys} keys, every key's row created \
                 before the run for both approaches; allow-all limit"
            ),
            Scenario::HotKey => {
                "every call on one key, its row created before the run; allow-all limit".into()
            }
        }
    }

    /// The keys of worker `worker`.
    pub(crate) fn keys(self, space: &Arc<[String]>, seed: u64, worker: usize) -> Keys {
        match self {
            Scenario::ManyKeys => Keys::Uniform {
                space: Arc::clone(space),
                rng: SplitMix64::new(seed ^ (worker as u64).wrapping_mul(0x9e37_79b9)),
            },
            Scenario::HotKey => Keys::One(HOT.into()),
        }
    }
}

impl fmt::Display for Scenario {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The names of the many_keys keys, `k0` .. `k{n-1}`, the same in both approaches' tables.
pub(crate) fn key_space(n: usize) -> Arc<[String]> {
    (0..n).map(|i| format!("k{i}")).collect()
}

/// Where one worker's calls go.
pub(crate) enum Keys {
    /// Always this key.
    One(String),
    /// A uniformly random key of `space` per call.
    Uniform {
        space: Arc<[String]>,
        rng: SplitMix64,
    },
}

impl Keys {
    pub(crate) fn next(&mut self) -> &str {
        match self {
            Keys::One(key) => key,
            Keys::Uniform { space, rng } => &space[rng.below(space.len())],
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hot_is_one_key_and_many_spreads_over_the_space() {
        let space = key_space(50);
        assert_eq!(&space[..2], ["k0", "k1"]);
        let mut hot = Scenario::HotKey.keys(&space, 1, 0);
        assert_eq!(hot.next(), HOT);
        assert_eq!(hot.next(), HOT);
        let mut many = Scenario::ManyKeys.keys(&space, 1, 0);
        let seen: std::collections::HashSet<String> =
            (0..1000).map(|_| many.next().to_owned()).collect();
        assert_eq!(seen.len(), 50);
    }
}
