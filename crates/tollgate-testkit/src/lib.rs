//! # tollgate-testkit
//!
//! Throwaway `redis-server`, Redis Cluster and PostgreSQL processes for tollgate's tests, so that
//! every test that needs a store gets its own, empty one, and can kill it to test faults.
//!
//! Each handle starts a real server on a free 127.0.0.1 port, with its files and log in a
//! temporary directory, and returns once the server answers. Dropping the handle kills the
//! server, reaps it and removes the directory. If an environment variable names an existing
//! server, that one is used instead and nothing is started:
//!
//! | handle               | variable                      |
//! |----------------------|-------------------------------|
//! | [`TestRedis`]        | `TOLLGATE_REDIS_URL`          |
//! | [`TestRedisCluster`] | `TOLLGATE_REDIS_CLUSTER_URLS` |
//! | [`TestPostgres`]     | `TOLLGATE_DATABASE_URL`       |
//!
//! A missing binary is an error naming the package to install, never a skipped test.
//!
//! [`TestPostgresReplica`] is a PostgreSQL primary with a hot standby streaming from it
//! (`pg_basebackup -R`), replicated synchronously or not, whose primary a test kills and whose
//! standby it promotes; it always starts its own servers.
//!
//! [`SentinelSet`] is a primary, its replicas and Redis Sentinels (always kit-started), whose
//! primary a test kills (SIGKILL) or pauses (SIGSTOP) to see a failover.
//!
//! [`XdsServer`] is an xDS management server in process (tonic), serving envoyproxy/ratelimit's
//! `RateLimitConfig` resources over ADS, plain or over mutual TLS, for tests of configuration
//! over xDS.
//!
//! Test servers trade durability for speed (PostgreSQL without `fsync`). `tollgate-bench all`
//! starts its PostgreSQL with [`TestPostgres::start_durable`] instead: commits wait for the
//! disk, as in production.
//!
//! ```no_run
//! use tollgate_testkit::{Reply, TestPostgres, TestRedis};
//!
//! let mut redis = TestRedis::start()?;
//! assert_eq!(redis.cmd(&[b"SET", b"k", b"v"])?, Reply::Status("OK".into()));
//!
//! redis.stop()?; // Redis dies: the store under test should now fail (open or closed).
//! redis.restart()?; // Back on the same port, empty.
//!
//! let postgres = TestPostgres::start()?;
//! println!("connect to {}", postgres.url()); // postgres://postgres@127.0.0.1:PORT/postgres
//! # Ok::<(), tollgate_testkit::TestkitError>(())
//! ```
//!
//! ## Import circles
//!
//! [`modules`] reads a crate's source and finds the modules that name each other in a circle;
//! the kit's own tests run it over every crate of the workspace.
//!
//! ## Process lifetime
//!
//! The kit is meant for `cargo nextest` (a process per test) with the handle kept alive for the
//! whole test. Servers are spawned with `PR_SET_PDEATHSIG`, so they die with the test process
//! even if it is killed; they are forked from one kit-owned thread that lives as long as the
//! process, so a handle may be created on any thread. Under `cargo test` (one process, many
//! tests) the servers of all tests die together if the process dies.
//!
//! ## Files
//!
//! Redis directories go in `$TMPDIR` (`/tmp`). PostgreSQL data directories go in `/dev/shm`
//! when `TMPDIR` is unset and that tmpfs has 1 GiB free, since copying the template and running
//! on RAM makes a start several times faster on slow CI disks; set `TMPDIR` to keep them on
//! disk. The initdb'ed template is cached in `$TMPDIR/tollgate-testkit-<uid>/`. A test process
//! killed outright leaves its directories behind; the next server started sweeps them.

// The readiness deadlines need the real clock; the testkit is not on the decision path that
// `.clippy.toml` protects from ambient time.
#![allow(clippy::disallowed_methods)]

mod cluster;
mod error;
pub mod modules;
mod postgres;
mod postgres_replica;
mod process;
mod proxy;
mod redis;
mod resp;
mod scratch;
mod sentinel;
mod tls;
mod url;
pub mod xds;

pub use cluster::TestRedisCluster;
pub use error::TestkitError;
pub use postgres::TestPostgres;
pub use postgres_replica::{Replication, TestPostgresReplica};
pub use proxy::StallProxy;
pub use redis::TestRedis;
pub use resp::{RedisTarget, Reply, command_calls, redis_cmd};
pub use sentinel::SentinelSet;
pub use tls::TestCa;
pub use xds::{Seen, XdsServer, XdsServerTls};
