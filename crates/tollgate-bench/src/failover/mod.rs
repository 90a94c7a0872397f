//! What a failover costs a rate limiter: clients at their limit on a replicated store, the
//! primary killed (or paused) and a replica promoted, and per run the seconds until the store
//! decides again, the decisions its fail policy answered meanwhile, the tokens granted beyond
//! the exact bound (the over-grant: the writes the failover lost), and the rates before and
//! after.
//!
//! Each run starts its own topology from the test kit (Redis behind three sentinels, a
//! PostgreSQL primary with a streaming standby), so that every fault meets a fresh one.
//! `driver.rs` is the store-agnostic half (the clients, the fault, the counting); `redis.rs`
//! and `postgres.rs` the topologies and their faults; `report.rs` the report.

mod driver;
mod postgres;
mod redis;
mod report;

use std::path::PathBuf;
use std::time::Duration;

use tollgate::Policy;
use tollgate_testkit::Replication;

pub use driver::{FailPolicy, Seen};
pub use redis::Fault;
pub use report::{FailoverReport, RedisCost, Run};

use crate::BenchError;
use crate::args::seconds;
use driver::Load;

/// How long a decision may take before the fail policy answers it (the server's default store
/// timeout is longer; a failover is where a short one shows).
const STORE_TIMEOUT: Duration = Duration::from_millis(250);

/// The loads a run can put on the store.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum LoadShape {
    /// Every client on one key: 100 tokens, 10 a second.
    Hot,
    /// The clients spread over 256 keys: 5 tokens each, 1 a second.
    Many,
}

impl LoadShape {
    fn name(self) -> &'static str {
        match self {
            LoadShape::Hot => "one hot key",
            LoadShape::Many => "256 keys",
        }
    }

    fn load(self, clients: usize, fail_policy: FailPolicy) -> Result<Load, BenchError> {
        let (keys, capacity, rate) = match self {
            LoadShape::Hot => (1, 100, 10),
            LoadShape::Many => (256, 5, 1),
        };
        Ok(Load {
            clients,
            keys,
            policy: Policy::token_bucket(capacity, rate, Duration::from_secs(1))?,
            rate,
            capacity,
            fail_policy,
        })
    }
}

/// The stores a run can fail over.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum FailoverStore {
    /// A Redis primary, two replicas and three sentinels.
    Redis,
    /// A PostgreSQL primary and a streaming standby.
    Postgres,
}

/// Arguments of `tollgate-bench failover`.
#[derive(clap::Args, Debug, Clone)]
pub struct FailoverArgs {
    /// seconds of load before the fault, and again once the store decides again
    #[arg(long, default_value = "2")]
    pub seconds: f64,
    /// clients deciding at once
    #[arg(long, default_value = "64")]
    pub clients: usize,
    /// the loads, one run each per fault
    #[arg(long, value_delimiter = ',', default_value = "hot,many")]
    pub loads: Vec<LoadShape>,
    /// the stores to fail over
    #[arg(long, value_delimiter = ',', default_value = "redis,postgres")]
    pub stores: Vec<FailoverStore>,
    /// what is done to the Redis primary, one run each (PostgreSQL's is always killed)
    #[arg(long, value_delimiter = ',', default_value = "kill,pause")]
    pub faults: Vec<Fault>,
    /// directory to write failover.md to
    #[arg(long, default_value = "bench-report")]
    pub out: PathBuf,
}

/// Runs every failover (each on a topology of its own), writes `failover.md`, and returns the
/// report. A line per run goes to stderr.
pub async fn run_failover(args: &FailoverArgs) -> Result<FailoverReport, BenchError> {
    let phase = seconds(args.seconds, "--seconds")?;
    if args.clients == 0 || args.loads.is_empty() || args.stores.is_empty() {
        return Err(BenchError::Args(
            "--clients must be at least 1, and --loads and --stores name one at least".into(),
        ));
    }
    let redis = args.stores.contains(&FailoverStore::Redis);
    if redis && args.faults.is_empty() {
        return Err(BenchError::Args(
            "--faults must name one fault at least".into(),
        ));
    }
    let mut runs = Vec::new();
    let mut done = |run: Run| {
        eprintln!("{}", run.line());
        runs.push(run);
    };
    for &shape in &args.loads {
        let open = shape.load(args.clients, FailPolicy::Open)?;
        if redis {
            for &fault in &args.faults {
                for durable in [false, true] {
                    done(redis::run(fault, durable, &open, shape.name(), phase, phase).await?);
                }
            }
        }
        if args.stores.contains(&FailoverStore::Postgres) {
            for replication in [Replication::Asynchronous, Replication::Synchronous] {
                done(postgres::run(replication, &open, shape.name(), phase, phase).await?);
            }
        }
    }
    if redis {
        // The same failover answered by `deny`: the fail policy allows nothing.
        let shape = args.loads[0];
        let deny = shape.load(args.clients, FailPolicy::Deny)?;
        let fault = args.faults[0];
        done(redis::run(fault, false, &deny, shape.name(), phase, phase).await?);
    }
    let report = FailoverReport {
        clients: args.clients,
        seconds: args.seconds,
        timeout: STORE_TIMEOUT,
        runs,
    };
    report.report().write(&args.out)?;
    Ok(report)
}
