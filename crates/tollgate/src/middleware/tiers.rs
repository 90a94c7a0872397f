//! Which policies apply to a request: the layer's own, or a tier chosen per key.

use std::collections::HashMap;
use std::sync::Arc;

use http::request::Parts;
use parking_lot::RwLock;

use crate::Policy;

/// A policy and the name it goes by: in the `RateLimit` headers, and as the scope of its
/// buckets (two layers with differently named policies never share a budget).
///
/// ```
/// use tollgate::Policy;
/// use tollgate::middleware::NamedPolicy;
///
/// let gold = NamedPolicy::new("gold", Policy::per_second(100)?);
/// assert_eq!(&*gold.name, "gold");
/// # Ok::<(), tollgate::PolicyError>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub struct NamedPolicy {
    /// The name, e.g. `api` or `login`.
    pub name: Arc<str>,
    /// The policy.
    pub policy: Policy,
}

impl NamedPolicy {
    /// `policy`, named `name`.
    pub fn new(name: &str, policy: Policy) -> NamedPolicy {
        NamedPolicy {
            name: name.into(),
            policy,
        }
    }
}

/// Chooses the policies of a key (a tier), or `None` for the layer's default policies.
///
/// Any `Fn(&[u8], &Parts) -> Option<Arc<[NamedPolicy]>>` is one; [`TierTable`] is a table
/// changeable at run time.
///
/// ```
/// use std::sync::Arc;
/// use http::request::Parts;
/// use tollgate::Policy;
/// use tollgate::middleware::{NamedPolicy, Tiers};
///
/// # fn main() -> Result<(), tollgate::PolicyError> {
/// // Keys of paying customers start with `pro_`: ten times the default rate.
/// let pro: Arc<[NamedPolicy]> = Arc::new([NamedPolicy::new("pro", Policy::per_second(100)?)]);
/// let tiers = move |key: &[u8], _: &Parts| key.starts_with(b"pro_").then(|| Arc::clone(&pro));
/// let (parts, ()) = http::Request::new(()).into_parts();
/// assert_eq!(&*tiers.policies(b"pro_acme", &parts).unwrap()[0].name, "pro");
/// assert!(tiers.policies(b"free_bob", &parts).is_none()); // the layer's own policies
/// # Ok(())
/// # }
/// ```
pub trait Tiers: Send + Sync + 'static {
    /// The policies for `key`, or `None` for the defaults.
    fn policies(&self, key: &[u8], parts: &Parts) -> Option<Arc<[NamedPolicy]>>;
}

impl<F> Tiers for F
where
    F: Fn(&[u8], &Parts) -> Option<Arc<[NamedPolicy]>> + Send + Sync + 'static,
{
    fn policies(&self, key: &[u8], parts: &Parts) -> Option<Arc<[NamedPolicy]>> {
        self(key, parts)
    }
}

/// Policies by key, changeable while the service runs (a customer upgrades their plan). Clones
/// share the table.
///
/// ```
/// use std::time::Duration;
/// use tollgate::Policy;
/// use tollgate::middleware::{NamedPolicy, TierTable};
///
/// let tiers = TierTable::new();
/// let gold = Policy::token_bucket(100, 100, Duration::from_secs(1))?;
/// tiers.insert(b"key-of-acme".to_vec(), vec![NamedPolicy::new("gold", gold)]);
/// # Ok::<(), tollgate::PolicyError>(())
/// ```
#[derive(Debug, Clone, Default)]
pub struct TierTable {
    table: Arc<RwLock<Table>>,
}

type Table = HashMap<Vec<u8>, Arc<[NamedPolicy]>>;

impl TierTable {
    /// An empty table: every key gets the default policies.
    pub fn new() -> TierTable {
        TierTable::default()
    }

    /// Gives `key` the policies `policies` from now on.
    pub fn insert(&self, key: Vec<u8>, policies: Vec<NamedPolicy>) {
        self.table.write().insert(key, policies.into());
    }

    /// Returns `key` to the default policies.
    pub fn remove(&self, key: &[u8]) {
        self.table.write().remove(key);
    }
}

impl Tiers for TierTable {
    fn policies(&self, key: &[u8], _: &Parts) -> Option<Arc<[NamedPolicy]>> {
        self.table.read().get(key).cloned()
    }
}
