//! What is measured: which keys the workers hit, under which limit.

use std::fmt;

use super::bucket::Limit;

/// A load shape.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, clap::ValueEnum)]
#[value(rename_all = "snake_case")]
pub enum Scenario {
    /// Every worker on one key; a limit so large that every check is allowed (raw throughput).
    HotKey,
    /// A key per worker, the same allow-all limit.
    PerUser,
    /// Every worker on one key limited to burst 10, 10/s: nearly every check is denied.
    HotKeyFlood,
}

/// The allow-all limit: a billion tokens, refilled a billion per second.
pub(crate) const ALLOW_ALL: Limit = Limit {
    burst: 1_000_000_000,
    rate: 1_000_000_000,
};

/// The flood's limit, and the over-grant test's: burst 10, 10 per second.
pub(crate) const SMALL: Limit = Limit {
    burst: 10,
    rate: 10,
};

impl Scenario {
    /// Every scenario, in report order.
    pub const ALL: [Scenario; 3] = [Scenario::HotKey, Scenario::PerUser, Scenario::HotKeyFlood];

    /// The name used in arguments, keys and the report.
    pub fn name(self) -> &'static str {
        match self {
            Scenario::HotKey => "hot_key",
            Scenario::PerUser => "per_user",
            Scenario::HotKeyFlood => "hot_key_flood",
        }
    }

    /// One line on what the scenario measures.
    pub fn describe(self) -> &'static str {
        match self {
            Scenario::HotKey => "every worker on one key, allow-all limit (burst 1e9, 1e9/s)",
            Scenario::PerUser => "one key per worker, allow-all limit (burst 1e9, 1e9/s)",
            Scenario::HotKeyFlood => "every worker on one key, burst 10, 10/s: nearly all denied",
        }
    }

    pub(crate) fn limit(self) -> Limit {
        match self {
            Scenario::HotKey | Scenario::PerUser => ALLOW_ALL,
            Scenario::HotKeyFlood => SMALL,
        }
    }

    /// The key of each of `workers` workers, under `prefix` (unique to the approach, run and
    /// cell, so that no cell starts from another's state).
    pub(crate) fn keys(self, prefix: &str, workers: usize) -> Vec<String> {
        match self {
            Scenario::HotKey | Scenario::HotKeyFlood => vec![format!("{prefix}:hot"); workers],
            Scenario::PerUser => (0..workers).map(|i| format!("{prefix}:user{i}")).collect(),
        }
    }
}

impl fmt::Display for Scenario {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hot_keys_are_shared_and_user_keys_distinct() {
        let hot = Scenario::HotKey.keys("p", 3);
        assert_eq!(hot, ["p:hot", "p:hot", "p:hot"]);
        let users = Scenario::PerUser.keys("p", 3);
        assert_eq!(users, ["p:user0", "p:user1", "p:user2"]);
    }
}
