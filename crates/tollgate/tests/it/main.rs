//! The library's integration tests, in one binary (linking one is most of what a test run
//! costs): the conformance suite on every store, exactness, faults, the middleware.

#[macro_use]
mod conformance;
mod failover_load;
mod faults;

mod builder_settings;
mod clock_range;
mod concurrency;
mod examples;
mod incompatible;
mod lease;
mod lease_processes;
mod memory_cap;
mod memory_conformance;
mod middleware;
mod middleware_peer;
mod middleware_stacked;
mod model;
mod postgres_conformance;
mod postgres_exactness;
mod postgres_failover;
mod postgres_faults;
mod postgres_garbage;
mod postgres_rebase;
mod postgres_schema;
mod postgres_tls;
mod postgres_windows;
mod rebase;
mod rebase_ports;
mod redis_cluster;
mod redis_cluster_nodes;
mod redis_conformance;
mod redis_durability;
mod redis_exactness;
mod redis_faults;
mod redis_garbage;
mod redis_rebase;
mod redis_runs;
mod redis_sentinel;
mod redis_take_first;
mod redis_windows;
mod redis_writes;
mod shared_store;
mod store_config;
mod store_refused;
mod wait;
