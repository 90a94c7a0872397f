//! The configured policies: each by name, in force until a reload replaces them.

use std::collections::HashMap;
use std::sync::Arc;

use tollgate::Policy;

/// The most policies a file may name: each has its own metrics series and entry in memory.
pub const MAX_POLICIES: usize = 4096;

/// A configured policy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NamedPolicy {
    /// Its name, which names its buckets in the store.
    pub name: Arc<str>,
    /// Its numbers.
    pub policy: Policy,
    /// Outcome and charged, but never denies.
    pub shadow: bool,
    /// Hot buckets are decided from leased tokens (`lease = true`; see `tollgate::store::lease`).
    pub lease: bool,
    /// Where the file defines it: line and column of its name.
    pub defined_at: (usize, usize),
}

/// The configured policies, by name, listed sorted by name.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Policies {
    by_name: HashMap<Arc<str>, NamedPolicy>,
    sorted: Vec<Arc<str>>,
}

impl Policies {
    /// The policy named `name`.
    pub fn get(&self, name: &str) -> Option<&NamedPolicy> {
        self.by_name.get(name)
    }

    /// Every policy, by name.
    pub fn iter(&self) -> impl Iterator<Item = &NamedPolicy> {
        self.sorted.iter().filter_map(|name| self.by_name.get(name))
    }

    /// How many there are.
    pub fn len(&self) -> usize {
        self.sorted.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.sorted.is_empty()
    }

    /// Adds `policy`, replacing one of the same name.
    pub(crate) fn insert(&mut self, policy: NamedPolicy) {
        let name = Arc::clone(&policy.name);
        if self.by_name.insert(Arc::clone(&name), policy).is_none() {
            let at = self.sorted.partition_point(|n| *n < name);
            self.sorted.insert(at, name);
        }
    }
}
