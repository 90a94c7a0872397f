//! One server process of the scale benchmark: the benchmark binary run again with
//! `TOLLGATE_SCALE_WORKER` set. It builds the store stack a `tollgate` server builds (the store,
//! leased when the cell says so), drives it with its workers from a start instant shared by
//! every process until the cell's end, gives its leases back, and prints one line of counts.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tollgate::store::lease::Leased;
use tollgate::store::settle::DynSettle;
use tollgate::{Check, Clock, MonotonicClock, Nanos, PostgresStore, RedisStore, Store};

use super::{Backend, Scenario};
use crate::BenchError;

/// The environment variable that makes the benchmark binary a worker.
pub const WORKER_ENV: &str = "TOLLGATE_SCALE_WORKER";

/// What one process is to do, as it travels in [`WORKER_ENV`].
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Spec {
    pub(super) backend: Backend,
    /// The store's URLs: one, or a cluster's nodes.
    pub(super) urls: Vec<String>,
    pub(super) table: String,
    pub(super) scenario: Scenario,
    pub(super) lease: bool,
    pub(super) per_node: bool,
    pub(super) workers: usize,
    /// This process's number, for its keys.
    pub(super) process: usize,
    pub(super) run: String,
    /// When every process starts, on the machine's monotonic clock.
    pub(super) start: Nanos,
    pub(super) seconds: f64,
}

impl Spec {
    pub(super) fn encode(&self) -> String {
        format!(
            "backend={} urls={} table={} scenario={} lease={} per_node={} workers={} process={} run={} start={} seconds={}",
            self.backend.name(),
            self.urls.join(","),
            self.table,
            self.scenario.name(),
            u8::from(self.lease),
            u8::from(self.per_node),
            self.workers,
            self.process,
            self.run,
            self.start.as_u64(),
            self.seconds
        )
    }

    pub(super) fn decode(text: &str) -> Result<Spec, BenchError> {
        let field = |name: &str| {
            text.split(' ')
                .find_map(|f| f.strip_prefix(name)?.strip_prefix('='))
                .ok_or_else(|| BenchError::Args(format!("{WORKER_ENV} lacks {name}: {text:?}")))
        };
        let number = |name: &str| -> Result<u64, BenchError> {
            field(name)?
                .parse()
                .map_err(|_| BenchError::Args(format!("{WORKER_ENV}: {name} is not a number")))
        };
        Ok(Spec {
            backend: Backend::from_name(field("backend")?)?,
            urls: field("urls")?.split(',').map(str::to_owned).collect(),
            table: field("table")?.to_owned(),
            scenario: Scenario::from_name(field("scenario")?)?,
            lease: number("lease")? == 1,
            per_node: number("per_node")? == 1,
            workers: number("workers")? as usize,
            process: number("process")? as usize,
            run: field("run")?.to_owned(),
            start: Nanos::new(number("start")?),
            seconds: field("seconds")?
                .parse()
                .map_err(|_| BenchError::Args(format!("{WORKER_ENV}: seconds is not a number")))?,
        })
    }
}

/// What one process counted.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(super) struct Counts {
    pub(super) decisions: u64,
    pub(super) allowed: u64,
    pub(super) errors: u64,
    /// PostgreSQL statements this process sent (0 on Redis, which counts its own calls).
    pub(super) statements: u64,
    /// Checks answered from a lease.
    pub(super) local: u64,
    /// Nanoseconds from the start to this process's last answer.
    pub(super) span_ns: u64,
}

impl Counts {
    pub(super) fn line(&self) -> String {
        format!(
            "scale-result decisions={} allowed={} errors={} statements={} local={} span_ns={}",
            self.decisions, self.allowed, self.errors, self.statements, self.local, self.span_ns
        )
    }

    pub(super) fn parse(out: &str) -> Option<Counts> {
        let line = out.lines().find_map(|l| l.strip_prefix("scale-result "))?;
        let field = |name: &str| -> Option<u64> {
            line.split(' ')
                .find_map(|f| f.strip_prefix(name)?.strip_prefix('='))?
                .parse()
                .ok()
        };
        Some(Counts {
            decisions: field("decisions")?,
            allowed: field("allowed")?,
            errors: field("errors")?,
            statements: field("statements")?,
            local: field("local")?,
            span_ns: field("span_ns")?,
        })
    }
}

/// Runs the worker `spec` describes and prints its counts.
pub async fn run(spec: &str) -> Result<(), BenchError> {
    let spec = Spec::decode(spec)?;
    let counts = work(&spec).await?;
    println!("{}", counts.line());
    Ok(())
}

async fn work(spec: &Spec) -> Result<Counts, BenchError> {
    // The server's own store timeout would count a loaded machine's slow calls as errors.
    let timeout = Duration::from_secs(2);
    let mut postgres = None;
    let store: Arc<dyn DynSettle> = match spec.backend {
        Backend::Redis => Arc::new(
            RedisStore::builder(spec.urls[0].as_str())
                .timeout(timeout)
                .build()
                .await?,
        ),
        Backend::Cluster => Arc::new(
            RedisStore::builder(spec.urls[0].as_str())
                .cluster(spec.urls.iter().cloned())
                .per_node(spec.per_node)
                .timeout(timeout)
                .build()
                .await?,
        ),
        Backend::Postgres => {
            let store = PostgresStore::builder(spec.urls[0].as_str())
                .table(spec.table.as_str())
                .timeout(timeout)
                .build()
                .await?;
            postgres = Some(store.clone());
            Arc::new(store)
        }
    };
    store.ready_dyn().await?;
    let leased = spec
        .lease
        .then(|| Arc::new(Leased::new(Arc::clone(&store))));
    let decider: Arc<dyn DynSettle> = match &leased {
        Some(leased) => Arc::clone(leased) as Arc<dyn DynSettle>,
        None => store,
    };
    let statements_before = postgres.as_ref().map_or(0, |p| p.stats().statements());
    let clock = MonotonicClock::new();
    let end = spec.start + Nanos::new((spec.seconds * 1e9) as u64);
    while clock.now() < spec.start {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    let totals = Arc::new([AtomicU64::new(0), AtomicU64::new(0), AtomicU64::new(0)]);
    // When the last answer came, by the same clock as the start.
    let last = Arc::new(AtomicU64::new(spec.start.as_u64()));
    let policy = spec.scenario.policy()?;
    let tasks: Vec<_> = (0..spec.workers)
        .map(|worker| {
            let (decider, totals, last) =
                (Arc::clone(&decider), Arc::clone(&totals), Arc::clone(&last));
            let scenario = spec.scenario;
            let prefix = format!("bench:scale:{}", spec.run);
            let mut seed = (spec.process as u64) << 32 | worker as u64 | 1;
            tokio::spawn(async move {
                let hot = format!("{prefix}:{}", scenario.name());
                let (mut decisions, mut allowed, mut errors) = (0, 0, 0);
                while clock.now() < end {
                    let key = match scenario {
                        Scenario::PerUser => {
                            seed ^= seed << 13;
                            seed ^= seed >> 7;
                            seed ^= seed << 17;
                            format!("{prefix}:u{}", seed % super::USERS)
                        }
                        _ => hot.clone(),
                    };
                    let check = [Check::new(policy, key.as_bytes(), 1).named(scenario.name())];
                    match decider.decide(&check).await {
                        Ok(v) => {
                            decisions += 1;
                            allowed += u64::from(v.allowed());
                        }
                        Err(_) => errors += 1,
                    }
                }
                for (total, n) in totals.iter().zip([decisions, allowed, errors]) {
                    total.fetch_add(n, Ordering::Relaxed);
                }
                last.fetch_max(clock.now().as_u64(), Ordering::Relaxed);
            })
        })
        .collect();
    for task in tasks {
        task.await?;
    }
    let local = match &leased {
        Some(leased) => {
            leased.close().await;
            leased.stats().local_decisions()
        }
        None => 0,
    };
    let statements = postgres
        .as_ref()
        .map_or(0, |p| p.stats().statements() - statements_before);
    Ok(Counts {
        decisions: totals[0].load(Ordering::Relaxed),
        allowed: totals[1].load(Ordering::Relaxed),
        errors: totals[2].load(Ordering::Relaxed),
        statements,
        local,
        span_ns: last.load(Ordering::Relaxed) - spec.start.as_u64(),
    })
}
