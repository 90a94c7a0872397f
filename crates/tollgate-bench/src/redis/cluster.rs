//! The Redis Cluster cell: tollgate's store alone on a cluster (the baselines' clients are not
//! cluster-aware), with what each master spent on it, so that the capacity model has a figure
//! for a cluster and not only for one node.
//!
//! In a cluster a call declares keys of one hash slot. On Redis 7 the store batches the
//! decisions of every slot of one node in one call (the script declares one key and
//! `allow-cross-slot-keys`); per slot, as before Redis 7 or with `per_node(false)`, it batches
//! only the decisions of one user key together: per user, every decision is its own call. Each
//! scenario runs both ways, side by side, beside the single node's batched cells.

use std::time::Duration;

use redis::aio::MultiplexedConnection;
use tokio::task::JoinSet;
use tollgate::{Check, RedisStore, Store};

use super::Scenario;
use super::tollgate::TollgateRedis;
use crate::BenchError;
use crate::clock::Stopwatch;
use crate::commandstats::CommandStats;
use crate::report::per;

/// One scenario at one concurrency on a Redis Cluster.
#[derive(Debug, Clone)]
pub struct ClusterCell {
    /// The load shape (allow-all limits only).
    pub scenario: Scenario,
    /// Concurrent workers.
    pub concurrency: usize,
    /// Whether the store batched per node (else per slot).
    pub per_node: bool,
    /// Checks answered.
    pub decisions: u64,
    /// Checks that failed.
    pub errors: u64,
    /// Wall time of the cell.
    pub elapsed: Duration,
    /// What each master executed meanwhile.
    pub nodes: Vec<NodeCell>,
}

/// One master's share of a cluster cell.
#[derive(Debug, Clone)]
pub struct NodeCell {
    /// The node's URL.
    pub node: String,
    /// Commands clients sent it (script calls).
    pub client_calls: u64,
    /// Microseconds it spent executing them (`INFO commandstats`).
    pub redis_usec: u64,
}

impl ClusterCell {
    /// Answered checks per second.
    pub fn decisions_per_sec(&self) -> f64 {
        per(self.decisions as f64, self.elapsed.as_secs_f64())
    }

    /// Calls per check asked, over every node.
    pub fn calls_per_decision(&self) -> f64 {
        let calls: u64 = self.nodes.iter().map(|n| n.client_calls).sum();
        per(calls as f64, (self.decisions + self.errors) as f64)
    }

    /// Redis microseconds per check asked, over every node.
    pub fn redis_micros_per_decision(&self) -> f64 {
        let usec: u64 = self.nodes.iter().map(|n| n.redis_usec).sum();
        per(usec as f64, (self.decisions + self.errors) as f64)
    }
}

/// Runs `scenario` with `concurrency` workers for `duration` on the cluster of `urls` (every
/// node of it; replicas are told apart and left out of the figures), batched per node or per
/// slot. Keys are the run's own; with allow-all limits their TTLs end within milliseconds, so
/// nothing is left to delete.
pub(crate) async fn run(
    urls: &[String],
    run_id: &str,
    scenario: Scenario,
    concurrency: usize,
    duration: Duration,
    per_node: bool,
) -> Result<ClusterCell, BenchError> {
    let store = RedisStore::builder(urls[0].as_str())
        .cluster(urls.iter().cloned())
        .per_node(per_node)
        .build()
        .await?;
    let per_node = store.batches_per_node();
    let policy = TollgateRedis::policy(scenario.limit())?;
    let mut masters = Vec::new();
    for url in urls {
        let mut conn = redis::Client::open(url.as_str())?
            .get_multiplexed_async_connection()
            .await?;
        if is_master(&mut conn).await? {
            let before = CommandStats::fetch(&mut conn).await?;
            masters.push((url.clone(), conn, before));
        }
    }
    let mode = if per_node { "node" } else { "slot" };
    let keys = scenario.keys(
        &format!("bench:cluster:{run_id}:{scenario}:{mode}"),
        concurrency,
    );
    let start = Stopwatch::start();
    let mut tasks = JoinSet::new();
    for key in keys {
        let store = store.clone();
        tasks.spawn(async move {
            let (mut decisions, mut errors) = (0_u64, 0_u64);
            while start.elapsed() < duration {
                match store.decide(&[Check::new(policy, key.as_bytes(), 1)]).await {
                    Ok(_) => decisions += 1,
                    Err(_) => errors += 1,
                }
            }
            (decisions, errors)
        });
    }
    let (mut decisions, mut errors) = (0, 0);
    while let Some(worker) = tasks.join_next().await {
        let (d, e) = worker?;
        decisions += d;
        errors += e;
    }
    let elapsed = start.elapsed();
    let mut nodes = Vec::new();
    for (node, mut conn, before) in masters {
        let delta = CommandStats::fetch(&mut conn).await?.since(&before)?;
        nodes.push(NodeCell {
            node,
            client_calls: delta.client_calls(),
            redis_usec: delta.client_usec(),
        });
    }
    Ok(ClusterCell {
        scenario,
        concurrency,
        per_node,
        decisions,
        errors,
        elapsed,
        nodes,
    })
}

async fn is_master(conn: &mut MultiplexedConnection) -> Result<bool, BenchError> {
    let info: String = redis::cmd("INFO")
        .arg("replication")
        .query_async(conn)
        .await?;
    Ok(info.lines().any(|l| l.trim() == "role:master"))
}
