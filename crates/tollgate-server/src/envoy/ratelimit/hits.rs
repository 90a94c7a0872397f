//! The hits a request counts, once the core has not refused it: each counted descriptor's
//! metric series (found or made) and its hits in `total_hits`, and the descriptors naming a
//! domain no file configures.

use super::plan::{Part, Plan};
use crate::envoy::metrics::Counters;
use crate::envoy::{EnvoyMetrics, Loaded};

/// Counts `plan`'s hits in `metrics`; the series of each part (none for a part not counted).
pub(super) fn count(loaded: &Loaded, metrics: &EnvoyMetrics, plan: &Plan) -> Vec<Option<Counters>> {
    metrics.domain_not_found.inc_by(plan.domain_not_found);
    plan.parts
        .iter()
        .map(|part| {
            let Part::Counted { limit, hits, .. } = part else {
                return None;
            };
            let counters = metrics.of(
                &loaded.metrics,
                &limit.rule.full_key,
                &limit.stats_key,
                limit.detailed,
            );
            counters.total_hits.inc_by(*hits);
            Some(counters)
        })
        .collect()
}
