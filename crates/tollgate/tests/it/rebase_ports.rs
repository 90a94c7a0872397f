//! What the Redis and PostgreSQL ports of the rebase are driven with: policies up to the stores'
//! bounds, keys of their own, and the numbers in the stores' unit (microseconds).
#![cfg(any(feature = "redis", feature = "postgres"))]

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use proptest::prelude::*;
use tollgate::{Nanos, Policy};

/// The stores' clock unit.
pub(crate) const MICROSECOND: Nanos = Nanos::new(1000);

/// A key no other case uses.
pub(crate) fn fresh_key() -> String {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    format!("rebase-{}", NEXT.fetch_add(1, Ordering::Relaxed))
}

/// Token buckets from a token a microsecond to bursts that take years to refill.
pub(crate) fn policies() -> impl Strategy<Value = Policy> {
    (
        prop_oneof![1u64..=10, 1u64..=10_000_000],
        prop_oneof![1u64..=10, 1u64..=10_000_000],
        prop_oneof![1u64..=10_000_000, 1u64..=100_000_000_000_000_000],
    )
        .prop_filter_map("valid", |(c, r, p)| {
            Policy::token_bucket(c, r, Duration::from_nanos(p)).ok()
        })
}

/// `d` in whole microseconds.
pub(crate) fn micros(d: Duration) -> u64 {
    Nanos::from(d).as_u64() / 1000
}
