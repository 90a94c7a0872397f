//! The stores a benchmark runs against, which `all` starts for it or takes by URL, and the one
//! option that hands each to any benchmark.

use super::AllArgs;

/// A store a benchmark runs against, which `all` starts for it or takes by URL.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Store {
    /// One Redis.
    Redis,
    /// A Redis Cluster of three masters.
    Cluster,
    /// A PostgreSQL whose commits wait for the disk.
    Postgres,
}

impl Store {
    /// Every store, in the order the run starts them.
    pub(super) const ALL: [Store; 3] = [Store::Redis, Store::Cluster, Store::Postgres];

    /// The option that hands a benchmark this store, the same for every benchmark and for
    /// `all` itself.
    pub(super) fn option(self) -> &'static str {
        match self {
            Store::Redis => "--redis",
            Store::Cluster => "--cluster",
            Store::Postgres => "--postgres",
        }
    }

    /// Whether `all` was given this store's URL.
    pub(super) fn given(self, args: &AllArgs) -> bool {
        match self {
            Store::Redis => args.redis.is_some(),
            Store::Cluster => !args.cluster.is_empty(),
            Store::Postgres => args.postgres.is_some(),
        }
    }
}
