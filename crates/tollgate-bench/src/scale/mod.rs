//! Several server processes on one store: a hot key far below its limit and at it, with and
//! without leases, on one Redis, a Redis Cluster and PostgreSQL, and many users on the cluster
//! batched per node and per slot. Each process builds the store stack a `tollgate` server
//! builds and drives it with its own workers (no network front end: what is measured is the
//! store's share), all from one start instant; the store counts its own work (Redis `INFO
//! commandstats` and `INFO cpu` on every master, the PostgreSQL store its statements).

mod report;
mod store;
pub mod worker;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

pub use report::ScaleReport;

use tollgate::{Clock, MonotonicClock, Nanos, Policy};
use tollgate_testkit::{TestPostgres, TestRedis, TestRedisCluster};

use crate::BenchError;
use worker::{Counts, Spec, WORKER_ENV};

/// Users in the per-user scenario.
const USERS: u64 = 100_000;

/// Arguments of the scale benchmark.
#[derive(clap::Args, Debug, Clone)]
pub struct ScaleBenchArgs {
    /// seconds per cell
    #[arg(long, default_value = "3")]
    pub seconds: f64,
    /// server processes per cell
    #[arg(long, default_value = "3")]
    pub processes: usize,
    /// concurrent workers in each process
    #[arg(long, default_value = "64")]
    pub workers: usize,
    /// a Redis to use instead of a throwaway one
    #[arg(long)]
    pub redis: Option<String>,
    /// a PostgreSQL to use instead of a throwaway one
    #[arg(long)]
    pub postgres: Option<String>,
    /// a Redis Cluster's nodes, comma-separated, to use instead of a throwaway one of three
    /// masters
    #[arg(long, value_delimiter = ',')]
    pub cluster: Vec<String>,
    /// directory to write scale.md and scale.svg to
    #[arg(long, default_value = "bench-report")]
    pub out: PathBuf,
    /// The binary run as each server process (`tollgate-bench` itself by default; tests, whose
    /// own binary is another, name it).
    #[arg(skip)]
    pub exe: Option<PathBuf>,
}

impl Default for ScaleBenchArgs {
    fn default() -> ScaleBenchArgs {
        ScaleBenchArgs {
            seconds: 3.0,
            processes: 3,
            workers: 64,
            redis: None,
            postgres: None,
            cluster: Vec::new(),
            out: PathBuf::from("bench-report"),
            exe: None,
        }
    }
}

/// Which store a cell runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    /// One Redis.
    Redis,
    /// The test kit's Redis Cluster of three masters.
    Cluster,
    /// PostgreSQL.
    Postgres,
}

impl Backend {
    /// Its name in reports.
    pub fn name(self) -> &'static str {
        match self {
            Backend::Redis => "redis",
            Backend::Cluster => "cluster",
            Backend::Postgres => "postgres",
        }
    }

    fn from_name(name: &str) -> Result<Backend, BenchError> {
        [Backend::Redis, Backend::Cluster, Backend::Postgres]
            .into_iter()
            .find(|b| b.name() == name)
            .ok_or_else(|| BenchError::Args(format!("no backend {name:?}")))
    }
}

/// The load shape of a cell.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scenario {
    /// One key whose bucket outlasts any run: 100,000,000 tokens, refilled at 1,000,000 a
    /// second. (A limit of 1,000,000 a second alone is within reach of leases on two cores:
    /// the run would end at the limit.)
    Hot,
    /// One key at its limit: burst 10, 10 a second (the seed's exactness test).
    Limit,
    /// One key at its limit, large enough to lease: burst 1,000, 1,000 a second.
    LimitLarge,
    /// 100,000 users, each far below its limit.
    PerUser,
}

impl Scenario {
    /// Its name in reports (and the policy's name, which names its buckets).
    pub fn name(self) -> &'static str {
        match self {
            Scenario::Hot => "hot",
            Scenario::Limit => "limit",
            Scenario::LimitLarge => "limit_large",
            Scenario::PerUser => "per_user",
        }
    }

    fn from_name(name: &str) -> Result<Scenario, BenchError> {
        [
            Scenario::Hot,
            Scenario::Limit,
            Scenario::LimitLarge,
            Scenario::PerUser,
        ]
        .into_iter()
        .find(|s| s.name() == name)
        .ok_or_else(|| BenchError::Args(format!("no scenario {name:?}")))
    }

    fn policy(self) -> Result<Policy, BenchError> {
        let second = Duration::from_secs(1);
        Ok(match self {
            Scenario::Hot => {
                Policy::token_bucket(100_000_000, 100_000_000, Duration::from_secs(100))?
            }
            Scenario::Limit => Policy::token_bucket(10, 10, second)?,
            Scenario::LimitLarge => Policy::token_bucket(1_000, 1_000, second)?,
            Scenario::PerUser => Policy::token_bucket(1_000, 1_000, second)?,
        })
    }

    /// The most a run of `seconds` may allow: a full bucket plus the refill, for the limited
    /// scenarios.
    pub fn bound(self, seconds: f64) -> Option<u64> {
        let (burst, rate) = match self {
            Scenario::Limit => (10.0, 10.0),
            Scenario::LimitLarge => (1_000.0, 1_000.0),
            _ => return None,
        };
        Some((burst + rate * seconds).floor() as u64)
    }
}

/// One cell: a scenario on a backend, with or without leases (and per node or per slot).
#[derive(Debug, Clone)]
pub struct ScaleCell {
    /// The store.
    pub backend: Backend,
    /// The load.
    pub scenario: Scenario,
    /// Whether the processes leased.
    pub lease: bool,
    /// Whether a cluster store batched per node (else per slot).
    pub per_node: bool,
    /// Each process's counts.
    pub processes: Vec<ProcessCounts>,
    /// The cell's length.
    pub seconds: f64,
    /// Seconds from the shared start to the last answer of any process: a check asked just
    /// before the end is answered after it, and the bucket refills until then.
    pub span: f64,
    /// Calls the store received (script calls, or statements).
    pub store_calls: u64,
    /// Microseconds the store spent executing them (Redis `INFO commandstats`; 0 on PostgreSQL).
    pub store_usec: u64,
    /// CPU the store's processes used (Redis `INFO cpu`, user and system), in seconds; `None`
    /// on PostgreSQL.
    pub store_cpu: Option<f64>,
}

/// What one process counted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProcessCounts {
    /// Checks answered.
    pub decisions: u64,
    /// Of them, allowed.
    pub allowed: u64,
    /// Checks that failed.
    pub errors: u64,
    /// Answered from a lease.
    pub local: u64,
}

impl ScaleCell {
    /// The most the cell may allow: [`Scenario::bound`] over the span from the start to the
    /// last answer (the cell's length and the answer of the checks asked before its end).
    pub fn bound(&self) -> Option<u64> {
        self.scenario.bound(self.span)
    }

    /// Checks answered by the fleet.
    pub fn decisions(&self) -> u64 {
        self.processes.iter().map(|p| p.decisions).sum()
    }

    /// Checks allowed by the fleet.
    pub fn allowed(&self) -> u64 {
        self.processes.iter().map(|p| p.allowed).sum()
    }

    /// Checks that failed.
    pub fn errors(&self) -> u64 {
        self.processes.iter().map(|p| p.errors).sum()
    }

    /// Fleet decisions per second.
    pub fn decisions_per_sec(&self) -> f64 {
        self.decisions() as f64 / self.seconds
    }

    /// Store calls per decision.
    pub fn calls_per_decision(&self) -> f64 {
        self.store_calls as f64 / self.decisions().max(1) as f64
    }

    /// Store CPU per decision, in microseconds.
    pub fn cpu_micros_per_decision(&self) -> Option<f64> {
        self.store_cpu
            .map(|cpu| cpu * 1e6 / self.decisions().max(1) as f64)
    }

    /// Store execution time per decision, in microseconds (Redis).
    pub fn store_micros_per_decision(&self) -> f64 {
        self.store_usec as f64 / self.decisions().max(1) as f64
    }

    /// The smallest process's share of the allowed, over the fair share (1.0: even).
    pub fn min_fair_share(&self) -> f64 {
        let allowed = self.allowed();
        if allowed == 0 {
            return 0.0;
        }
        let fair = allowed as f64 / self.processes.len() as f64;
        let least = self.processes.iter().map(|p| p.allowed).min().unwrap_or(0);
        least as f64 / fair
    }
}

/// Runs every cell on throwaway stores (or the ones `args` names), writes `scale.md` and
/// returns the report.
pub async fn run_scale(args: &ScaleBenchArgs) -> Result<ScaleReport, BenchError> {
    if args.processes == 0 || args.workers == 0 || args.seconds <= 0.0 {
        return Err(BenchError::Args(
            "--processes, --workers and --seconds must be above 0".into(),
        ));
    }
    let unavailable = |what: &'static str| {
        move |e: tollgate_testkit::TestkitError| BenchError::Args(format!("{what}: {e}"))
    };
    let (_redis, redis_url) = match &args.redis {
        Some(url) => (None, url.clone()),
        None => {
            let redis = TestRedis::start().map_err(unavailable("Redis"))?;
            let url = redis.url().to_owned();
            (Some(redis), url)
        }
    };
    let (_cluster, cluster_urls) = if args.cluster.is_empty() {
        let cluster = TestRedisCluster::start(3).map_err(unavailable("Redis Cluster"))?;
        let urls = cluster.urls();
        (Some(cluster), urls)
    } else {
        (None, args.cluster.clone())
    };
    let exe = match &args.exe {
        Some(exe) => exe.clone(),
        None => std::env::current_exe()?,
    };
    let (_postgres, postgres_url) = match &args.postgres {
        Some(url) => (None, url.clone()),
        None => {
            let pg = TestPostgres::start().map_err(unavailable("PostgreSQL"))?;
            let url = pg.url().to_owned();
            (Some(pg), url)
        }
    };
    let run = format!(
        "{}-{}",
        std::process::id(),
        MonotonicClock::new().now().as_u64()
    );
    let plan = [
        (Backend::Redis, Scenario::Hot, false, false),
        (Backend::Redis, Scenario::Hot, true, false),
        (Backend::Redis, Scenario::Limit, true, false),
        (Backend::Redis, Scenario::LimitLarge, false, false),
        (Backend::Redis, Scenario::LimitLarge, true, false),
        (Backend::Cluster, Scenario::PerUser, false, false),
        (Backend::Cluster, Scenario::PerUser, false, true),
        (Backend::Cluster, Scenario::Hot, false, true),
        (Backend::Cluster, Scenario::Hot, true, true),
        (Backend::Postgres, Scenario::Hot, false, false),
        (Backend::Postgres, Scenario::Hot, true, false),
        (Backend::Postgres, Scenario::Limit, true, false),
    ];
    let mut cells = Vec::new();
    for (index, (backend, scenario, lease, per_node)) in plan.into_iter().enumerate() {
        let urls = match backend {
            Backend::Redis => vec![redis_url.clone()],
            Backend::Cluster => cluster_urls.clone(),
            Backend::Postgres => vec![postgres_url.clone()],
        };
        let spec = Spec {
            backend,
            urls,
            table: "tollgate_scale".to_owned(),
            scenario,
            lease,
            per_node,
            workers: args.workers,
            process: 0,
            // Each cell its own keys.
            run: format!("{run}-{index}"),
            start: Nanos::new(0),
            seconds: args.seconds,
        };
        eprintln!(
            "tollgate-bench scale: {} {} {}",
            backend.name(),
            scenario.name(),
            if lease { "leased" } else { "per decision" }
        );
        cells.push(cell(spec, args.processes, &exe).await?);
    }
    let report = ScaleReport {
        cells,
        processes: args.processes,
        workers: args.workers,
        seconds: args.seconds,
    };
    report.report().write(&args.out)?;
    Ok(report)
}

/// Runs `processes` workers of `spec` together and measures the store around them.
async fn cell(spec: Spec, processes: usize, exe: &Path) -> Result<ScaleCell, BenchError> {
    let before = store::Snapshot::take(&spec).await?;
    // Time for every process to start and connect before the shared start (one that starts
    // late only decides less: the bound counts from the start).
    let start = MonotonicClock::new().now() + Nanos::new(500_000_000);
    let children: Vec<_> = (0..processes)
        .map(|process| {
            let spec = Spec {
                process,
                start,
                ..spec.clone()
            };
            let exe = exe.to_owned();
            tokio::task::spawn_blocking(move || {
                Command::new(exe)
                    .arg("scale")
                    .env(WORKER_ENV, spec.encode())
                    .output()
            })
        })
        .collect();
    let mut counts = Vec::new();
    for child in children {
        let output = child.await??;
        let stdout = String::from_utf8_lossy(&output.stdout);
        let parsed = Counts::parse(&stdout).filter(|_| output.status.success());
        let Some(c) = parsed else {
            return Err(BenchError::Args(format!(
                "a scale worker failed: {}",
                String::from_utf8_lossy(&output.stderr)
            )));
        };
        counts.push(c);
    }
    let after = store::Snapshot::take(&spec).await?;
    let delta = after.since(&before)?;
    let statements: u64 = counts.iter().map(|c| c.statements).sum();
    Ok(ScaleCell {
        backend: spec.backend,
        scenario: spec.scenario,
        lease: spec.lease,
        per_node: spec.per_node,
        processes: counts
            .iter()
            .map(|c| ProcessCounts {
                decisions: c.decisions,
                allowed: c.allowed,
                errors: c.errors,
                local: c.local,
            })
            .collect(),
        seconds: spec.seconds,
        span: counts
            .iter()
            .map(|c| c.span_ns as f64 / 1e9)
            .fold(spec.seconds, f64::max),
        store_calls: if spec.backend == Backend::Postgres {
            statements
        } else {
            delta.calls
        },
        store_usec: delta.usec,
        store_cpu: delta.cpu,
    })
}
