//! # tollgate
//!
//! An exact token-bucket rate limiter: pure decision functions, and stores that run them
//! atomically — in this process's memory, in Redis (or Redis Cluster), or in PostgreSQL — with a
//! tower middleware for axum, hyper and tonic.
//!
//! A [`Policy`] is a capacity (the burst) refilled by `refill` tokens every `period` (or a fixed,
//! sliding-log or sliding-counter window). A check takes `cost` tokens from the bucket of one
//! key: it is allowed iff the bucket holds them, and a denial takes nothing. Time is integer
//! nanoseconds; the token bucket is GCRA ([`algorithm::gcra`]), so a bucket's whole state is one
//! number and rounding can only under-grant. A bucket is named by its policy's name and its key
//! ([`Check::named`]), so a policy's numbers can change under it.
//!
//! The [`guide`] walks through the library chapter by chapter: buckets and their names, each
//! store, reservations and refunds, failures, and the middleware.
//!
//! ## Which store
//!
//! | store | pick it when | decisions |
//! |---|---|---|
//! | [`MemoryStore`] (always) | one process decides alone (or as a fallback, see [`store::guarded`]) | tens of millions a second, bounded memory |
//! | `RedisStore` (feature `redis`) | several processes share limits; you run Redis or Redis Cluster | one Lua script per batch, at Redis's clock |
//! | `PostgresStore` (feature `postgres`) | your state lives in PostgreSQL or distributed SQL, no Redis | one statement per batch, retried under SERIALIZABLE |
//!
//! Every store answers the same decisions (one conformance suite runs against each and against
//! an exact rational model), gives tokens back and resets buckets ([`store::settle`]), and is
//! wrapped by [`store::guarded::Guarded`] in a timeout and a fail policy (allow, deny, or decide
//! locally) for when it is down.
//!
//! In memory:
//!
//! ```
//! use std::time::Duration;
//! use tollgate::{MemoryStore, Policy};
//!
//! // 10 requests at once, then 10 per second.
//! let policy = Policy::token_bucket(10, 10, Duration::from_secs(1))?;
//! let store = MemoryStore::new();
//! for _ in 0..10 {
//!     assert!(store.check(&policy, b"alice", 1)?.allowed());
//! }
//! let denied = store.check(&policy, b"alice", 1)?;
//! assert!(!denied.allowed());
//! assert!(denied.retry_after() <= Duration::from_millis(100));
//! // Bob has his own bucket.
//! assert_eq!(store.check(&policy, b"bob", 1)?.remaining(), 9);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! On Redis (a cluster: [`RedisStoreBuilder::cluster`](store::redis::RedisStoreBuilder::cluster)
//! with its seed nodes):
//!
//! ```no_run
//! # #[cfg(feature = "redis")]
//! # async fn example() -> Result<(), Box<dyn std::error::Error>> {
//! use std::time::Duration;
//! use tollgate::{Check, Policy, RedisStore, Store};
//!
//! let store = RedisStore::builder("redis://127.0.0.1:6379").build().await?;
//! let api = Policy::token_bucket(10, 10, Duration::from_secs(1))?;
//! let verdict = store.decide(&[Check::new(api, b"alice", 1).named("api")]).await?;
//! println!("allowed: {}", verdict.allowed());
//! # Ok(())
//! # }
//! ```
//!
//! On PostgreSQL (the schema is created on first use, or by `tollgate migrate`):
//!
//! ```no_run
//! # #[cfg(feature = "postgres")]
//! # async fn example() -> Result<(), Box<dyn std::error::Error>> {
//! use std::time::Duration;
//! use tollgate::{Check, Policy, PostgresStore, Store};
//!
//! let store = PostgresStore::builder("postgres://app@127.0.0.1:5432/app").build().await?;
//! let api = Policy::token_bucket(10, 10, Duration::from_secs(1))?;
//! let verdict = store.decide(&[Check::new(api, b"alice", 1).named("api")]).await?;
//! println!("allowed: {}", verdict.allowed());
//! # Ok(())
//! # }
//! ```
//!
//! In front of an axum application (feature `axum`; `tower` for hyper and tonic), per client
//! IP, answering `429` with `Retry-After` and the IETF `RateLimit` headers:
//!
//! ```no_run
//! # #[cfg(feature = "axum")]
//! # fn example() -> Result<(), Box<dyn std::error::Error>> {
//! use std::time::Duration;
//! use axum::{Router, routing::get};
//! use tollgate::middleware::{ClientIp, TollgateLayer};
//! use tollgate::{MemoryStore, Policy};
//!
//! let layer = TollgateLayer::builder(MemoryStore::new())
//!     .policy("hello", Policy::token_bucket(5, 1, Duration::from_secs(1))?)
//!     .key(ClientIp::new())
//!     .build()?;
//! let app: Router = Router::new().route("/hello", get(|| async { "hello" })).layer(layer);
//! # Ok(())
//! # }
//! ```
//!
//! ## Features
//!
//! | feature | what it adds |
//! |---|---|
//! | `redis` | `RedisStore`: one Lua script per batch of decisions, Redis Cluster |
//! | `redis-tls` | `rediss://` URLs (rustls; the system's roots or `SSL_CERT_FILE`, or `RedisTls`: a CA, a client certificate) |
//! | `postgres` | `PostgresStore`: one statement per batch, retries for distributed SQL |
//! | `postgres-tls` | `sslmode` / `sslrootcert` in PostgreSQL URLs, as libpq (rustls) |
//! | `tower` | the middleware, `TollgateLayer`, for any tower service (hyper, tonic) |
//! | `axum` | `tower`, and the client's address from axum's `ConnectInfo` |
//! | `tokio` | timeouts, the fail policy ([`store::guarded`]), waiting ([`store::wait`]); the stores enable it |
//! | `test-util` | helpers for tests, never production: a test clock on the Redis and PostgreSQL stores, `Policy::at_resolution` |
//! | `quanta` | `QuantaClock`: the CPU's time-stamp counter, a cheaper clock for the memory store |
//!
//! None is on by default: the memory store and the algorithms need nothing but `std`. On
//! docs.rs every feature is built, and each gated item says which feature it needs.

#![cfg_attr(docsrs, feature(doc_cfg))]
#![forbid(unsafe_code)]

pub mod algorithm;
mod clock;
mod decision;
mod error;
pub mod guide;
pub mod headers;
#[cfg(feature = "tower")]
pub mod middleware;
mod nanos;
mod non_zero;
mod policy;
pub mod store;

#[cfg(feature = "quanta")]
pub use clock::QuantaClock;
pub use clock::{Clock, CoarseClock, ManualClock, MonotonicClock};
pub use decision::{Decision, Verdict};
pub use error::{CheckError, ErrorKind, StoreError};
pub use nanos::Nanos;
pub use non_zero::NonZeroDuration;
pub use policy::{Algorithm, MAX_LOG_LIMIT, MAX_TOLERANCE, Policy, PolicyError};
pub use store::memory::{MemoryLimiter, MemoryStore, MemoryStoreBuilder};
#[cfg(feature = "postgres")]
pub use store::postgres::{PostgresStore, PostgresStoreBuilder};
#[cfg(feature = "redis")]
pub use store::redis::{RedisStore, RedisStoreBuilder};
pub use store::{Check, DynStore, Store};

/// The README's examples, compiled and run as doc tests (the guide's run as its own).
#[cfg(doctest)]
#[doc = include_str!("../../../README.md")]
pub struct ReadmeDoctests;
