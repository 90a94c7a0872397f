//! # tollgate
//!
//! An exact token-bucket rate limiter: pure decision functions, and stores that run them
//! atomically — in memory here, in Redis and PostgreSQL by feature.
//!
//! A [`Policy`] is a capacity (the burst) refilled by `refill` tokens every `period`. A check
//! takes `cost` tokens from the bucket of one key: it is allowed iff the bucket holds them, and a
//! denial takes nothing. Time is integer nanoseconds from an injected [`Clock`]; the token bucket
//! is GCRA ([`algorithm::gcra`]), so a bucket's whole state is one number and rounding can only
//! under-grant.
//!
//! ```
//! use std::time::Duration;
//! use tollgate::{MemoryStore, Policy};
//!
//! // 10 requests at once, then 10 per second.
//! let policy = Policy::token_bucket(10, 10, Duration::from_secs(1))?;
//! let store = MemoryStore::new();
//! for _ in 0..10 {
//!     assert!(store.check(b"alice", &policy, 1)?.allowed);
//! }
//! let denied = store.check(b"alice", &policy, 1)?;
//! assert!(!denied.allowed);
//! assert!(denied.retry_after <= Duration::from_millis(100));
//! // Bob has his own bucket.
//! assert_eq!(store.check(b"bob", &policy, 1)?.remaining, 9);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

#![forbid(unsafe_code)]
#![warn(
    missing_docs,
    rust_2018_idioms,
    unreachable_pub,
    clippy::missing_panics_doc
)]

pub mod algorithm;
mod clock;
mod decision;
mod error;
pub mod headers;
#[cfg(feature = "tower")]
pub mod middleware;
mod nanos;
mod policy;
pub mod store;

pub use clock::{Clock, ManualClock, MonotonicClock};
pub use decision::{Decision, Verdict};
pub use error::{CheckError, ErrorKind, StoreError};
pub use nanos::Nanos;
pub use policy::{Algorithm, MAX_LOG_LIMIT, MAX_TOLERANCE, Policy, PolicyError};
pub use store::memory::{MemoryLimiter, MemoryStore, MemoryStoreBuilder};
#[cfg(feature = "postgres")]
pub use store::postgres::{PostgresStore, PostgresStoreBuilder};
#[cfg(feature = "redis")]
pub use store::redis::{RedisStore, RedisStoreBuilder};
pub use store::{Check, DynStore, Store};

/// The README's examples, compiled and run as doc tests.
#[cfg(doctest)]
#[doc = include_str!("../../../README.md")]
pub struct ReadmeDoctests;
