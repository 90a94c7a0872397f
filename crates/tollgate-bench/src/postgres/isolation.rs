//! The transaction isolation of a cell, for both approaches.

use std::fmt;

use tollgate::store::postgres::Isolation as StoreIsolation;

/// The isolation level every transaction of a cell runs at.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, clap::ValueEnum)]
pub enum Isolation {
    /// PostgreSQL's default.
    ReadCommitted,
    /// What the write-up ran (and what YugabyteDB and CockroachDB run): conflicts fail with
    /// SQLSTATE 40001 and must be retried.
    Serializable,
}

impl Isolation {
    /// Both levels, in report order.
    pub const ALL: [Isolation; 2] = [Isolation::ReadCommitted, Isolation::Serializable];

    /// The name used in arguments.
    pub fn name(self) -> &'static str {
        match self {
            Isolation::ReadCommitted => "read-committed",
            Isolation::Serializable => "serializable",
        }
    }

    /// The level as SQL spells it (and as the report shows it).
    pub fn sql(self) -> &'static str {
        match self {
            Isolation::ReadCommitted => "READ COMMITTED",
            Isolation::Serializable => "SERIALIZABLE",
        }
    }

    /// The same level for tollgate's store.
    pub(crate) fn store(self) -> StoreIsolation {
        match self {
            Isolation::ReadCommitted => StoreIsolation::ReadCommitted,
            Isolation::Serializable => StoreIsolation::Serializable,
        }
    }
}

impl fmt::Display for Isolation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.sql())
    }
}
