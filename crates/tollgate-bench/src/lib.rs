//! # tollgate-bench
//!
//! tollgate's benchmarks: its stores measured beside the approaches teams publish and copy, in
//! one run on one machine, written up as Markdown with SVG charts. The `tollgate-bench` binary
//! ([`cli`]) runs one of them, `tollgate-bench redis` calling [`run_redis`] with
//! [`RedisBenchArgs`] as its arguments, or every one of them ([`all`]). The servers measured
//! (tollgate's router, its Redis-protocol and gRPC listeners) are started in this process
//! through the server's library, as `tollgate serve` starts them; the server never depends on
//! this crate.
//!
//! Every benchmark has the same layout: `<bench>/mod.rs`, its arguments (`...BenchArgs`, also
//! its command line) and its `run_<bench>`, which checks them, starts what it measures, and
//! writes the report; `<bench>/measure.rs`, the measurement (beside it, the parts it measures:
//! contenders, baselines, load generators); `<bench>/report/`, what it measured, typed
//! ([`RedisReport`], [`PostgresReport`], ...) with the goals judged on that (`mod.rs`), and its
//! `report()`, the run laid out as one [`Report`] (`document.rs`: tables with named columns,
//! goals, notes, bar charts), which one Markdown and one SVG writer render.
//!
//! The baselines live here and never in the library: they are faithful copies of published
//! code, flaws included, kept only to be measured against.
//!
//! ```no_run
//! # async fn example() -> Result<(), tollgate_bench::BenchError> {
//! use tollgate_bench::{RedisBenchArgs, run_redis};
//!
//! let args = RedisBenchArgs {
//!     redis: "redis://127.0.0.1:6391".into(),
//!     ..RedisBenchArgs::default()
//! };
//! let report = run_redis(&args).await?; // also writes bench-report/redis.{md,svg}
//! println!("{}", report.report().to_markdown());
//! # Ok(())
//! # }
//! ```
#![forbid(unsafe_code)]

pub mod all;
mod args;
pub mod benchmark;
pub mod cli;
mod clock;
pub mod commandstats;
mod error;
pub mod failover;
pub mod grpc;
pub mod http;
pub mod memory;
pub mod postgres;
pub mod redis;
pub mod report;
pub mod resp;
pub mod scale;
mod scratch;
mod servers;
pub mod soak;
pub mod stats;
pub mod tail;
mod tls;

pub use crate::failover::{FailoverArgs, FailoverReport, run_failover};
pub use crate::grpc::{GrpcBenchArgs, GrpcReport, run_grpc};
pub use crate::http::{
    HttpBenchArgs, HttpReport, POLICY_NAME, Variant, allow_all, run_http, run_http_with,
};
pub use crate::memory::{MemoryBenchArgs, MemoryReport, run_memory};
pub use crate::postgres::{PostgresBenchArgs, PostgresReport, run_postgres};
pub use crate::redis::{
    Approach, Cell, OverGrant, RedisBenchArgs, RedisReport, Scenario, run_redis,
};
pub use crate::resp::{RespBenchArgs, RespReport, run_resp};
pub use crate::scale::{ScaleBenchArgs, ScaleReport, run_scale};
pub use crate::soak::{SoakArgs, SoakReport, run_soak};
pub use crate::tail::{TailBenchArgs, TailReport, run_tail};
pub use error::BenchError;
pub use report::{Goal, Report};
