//! Leases for the policies that ask for them (`lease = true`): the shared store wrapped in a
//! [`Leased`] whose filter reads the policies in force, so that a reload turns leasing on or
//! off per policy. A memory store is not wrapped: its decisions are local already.

use std::collections::HashSet;
use std::sync::Arc;

use arc_swap::ArcSwap;
use tollgate::store::BoxFuture;
use tollgate::store::lease::{LeaseStats, Leased};
use tollgate::store::settle::DynSettle;

use super::Policies;

/// The leased store, and the names of the policies it leases.
pub(crate) struct Leases {
    store: Arc<Leased<Arc<dyn DynSettle>>>,
    names: Arc<ArcSwap<HashSet<Arc<str>>>>,
}

impl Leases {
    /// `store` wrapped for `policies`' leases, and what controls them; a memory store as it is.
    pub(crate) fn wrap(
        store: Arc<dyn DynSettle>,
        policies: &Policies,
    ) -> (Arc<dyn DynSettle>, Option<Leases>) {
        if store.name_dyn() == "memory" {
            return (store, None);
        }
        let names = Arc::new(ArcSwap::from_pointee(leased(policies)));
        let filter = Arc::clone(&names);
        let store = Arc::new(
            Leased::builder(store)
                .only(move |check| check.name().is_some_and(|n| filter.load().contains(n)))
                .build(),
        );
        let shared: Arc<dyn DynSettle> = Arc::clone(&store) as Arc<dyn DynSettle>;
        (shared, Some(Leases { store, names }))
    }

    /// Leases the policies of `policies` that ask for it, from the next decision on.
    pub(crate) fn reload(&self, policies: &Policies) {
        self.names.store(Arc::new(leased(policies)));
    }

    /// Gives every lease back (the server stops). Boxed as `Send` here, where the store's
    /// type is whole: the server's future that awaits it would otherwise have to prove
    /// `dyn DynSettle` a store for every lifetime, which the compiler cannot.
    pub(crate) fn close(&self) -> BoxFuture<'_, ()> {
        Box::pin(self.store.close())
    }

    pub(crate) fn stats(&self) -> &LeaseStats {
        self.store.stats()
    }
}

fn leased(policies: &Policies) -> HashSet<Arc<str>> {
    policies
        .iter()
        .filter(|p| p.lease)
        .map(|p| Arc::clone(&p.name))
        .collect()
}
