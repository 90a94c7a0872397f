//! Leases for the policies that ask for them (`lease = true`): the shared store wrapped in a
//! [`Leased`] whose filter reads the policies in force, so that a reload turns leasing on or
//! off per policy. A memory store is not wrapped: its decisions are local already.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};

use arc_swap::ArcSwap;
use prometheus::IntCounter;
use prometheus::core::{Collector, Desc};
use prometheus::proto::MetricFamily;
use tollgate::store::BoxFuture;
use tollgate::store::lease::Leased;
use tollgate::store::settle::DynSettle;

use super::Policies;
use crate::metrics::Metrics;

/// The leased store, and the names of the policies it leases.
pub(crate) struct Leases {
    store: Arc<Leased<Arc<dyn DynSettle>>>,
    names: Arc<ArcSwap<HashSet<Arc<str>>>>,
}

impl Leases {
    /// `store` wrapped for `policies`' leases, and what controls them, their counters added
    /// to `metrics`; a memory store as it is.
    pub(crate) fn wrap(
        store: Arc<dyn DynSettle>,
        policies: &Policies,
        metrics: &Metrics,
    ) -> Result<(Arc<dyn DynSettle>, Option<Leases>), prometheus::Error> {
        if store.name_dyn() == "memory" {
            return Ok((store, None));
        }
        let names = Arc::new(ArcSwap::from_pointee(leased(policies)));
        let filter = Arc::clone(&names);
        let store = Arc::new(
            Leased::builder(store)
                .only(move |check| check.name().is_some_and(|n| filter.load().contains(n)))
                .build(),
        );
        metrics.register(Box::new(LeaseMetrics::new(Arc::clone(&store))?))?;
        let shared: Arc<dyn DynSettle> = Arc::clone(&store) as Arc<dyn DynSettle>;
        Ok((shared, Some(Leases { store, names })))
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
}

fn leased(policies: &Policies) -> HashSet<Arc<str>> {
    policies
        .iter()
        .filter(|p| p.lease)
        .map(|p| Arc::clone(&p.name))
        .collect()
}

/// The leases' counters, read from the store at each scrape.
struct LeaseMetrics {
    store: Arc<Leased<Arc<dyn DynSettle>>>,
    /// One scrape at a time catches the counters up: two at once would both add the same
    /// difference.
    scrape: Mutex<()>,
    local: IntCounter,
    renewals: IntCounter,
    returned: IntCounter,
    lost: IntCounter,
}

impl LeaseMetrics {
    fn new(store: Arc<Leased<Arc<dyn DynSettle>>>) -> Result<LeaseMetrics, prometheus::Error> {
        Ok(LeaseMetrics {
            store,
            scrape: Mutex::new(()),
            local: IntCounter::new(
                "tollgate_lease_decisions_total",
                "Checks answered from a leased policy's lease, without a store call.",
            )?,
            renewals: IntCounter::new(
                "tollgate_lease_renewals_total",
                "Store calls that leased tokens (each also decided the check that made it).",
            )?,
            returned: IntCounter::new(
                "tollgate_lease_tokens_returned_total",
                "Leased tokens given back unspent.",
            )?,
            lost: IntCounter::new(
                "tollgate_lease_tokens_lost_total",
                "Leased tokens whose return failed: an under-grant the refill pays back.",
            )?,
        })
    }

    fn counters(&self) -> [(&IntCounter, u64); 4] {
        let stats = self.store.stats();
        [
            (&self.local, stats.local_decisions()),
            (&self.renewals, stats.renewals()),
            (&self.returned, stats.tokens_returned()),
            (&self.lost, stats.tokens_lost()),
        ]
    }
}

impl Collector for LeaseMetrics {
    fn desc(&self) -> Vec<&Desc> {
        self.counters()
            .into_iter()
            .flat_map(|(c, _)| c.desc())
            .collect()
    }

    fn collect(&self) -> Vec<MetricFamily> {
        let _one = self.scrape.lock();
        self.counters()
            .into_iter()
            .flat_map(|(counter, now)| {
                // The store's counts only grow: catch the counter up to them.
                counter.inc_by(now.saturating_sub(counter.get()));
                counter.collect()
            })
            .collect()
    }
}
