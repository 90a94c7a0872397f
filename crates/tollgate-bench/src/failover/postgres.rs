//! PostgreSQL's failover: a primary and a streaming standby (the test kit's), the store on the
//! URL that lists both with `target_session_attrs=read-write`, the primary killed and the
//! standby promoted (`pg_ctl promote`), with commits waiting for the standby or not.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use tollgate::PostgresStore;
use tollgate_testkit::{Replication, TestPostgresReplica};

use super::driver::{Load, drive};
use super::{Run, STORE_TIMEOUT};
use crate::BenchError;

/// One run: a fresh pair, `load` on it, the primary killed and the standby promoted.
pub(super) async fn run(
    replication: Replication,
    load: &Load,
    load_name: &'static str,
    before: Duration,
    after: Duration,
) -> Result<Run, BenchError> {
    let pair = tokio::task::spawn_blocking(move || TestPostgresReplica::start(replication))
        .await?
        .map_err(|e| BenchError::Args(format!("could not start PostgreSQL and a standby: {e}")))?;
    let synchronous = replication == Replication::Synchronous;
    // Synchronous, the store's sessions commit as the server says (on, to the standby);
    // otherwise as the store does by default (`synchronous_commit = off`).
    let store = PostgresStore::builder(pair.url())
        .timeout(STORE_TIMEOUT)
        .synchronous_commit(synchronous)
        // Every decision to the database, a denial too: the failover's to meet.
        .deny_cache(false)
        .build()
        .await?;
    // The fault kills and promotes; the pair lives on until the run is measured.
    let pair = Arc::new(Mutex::new(pair));
    let faulted = Arc::clone(&pair);
    let seen = drive(store, load, before, after, move || {
        let mut pair = faulted.lock().unwrap_or_else(|e| e.into_inner());
        pair.kill_primary()
            .and_then(|()| pair.promote())
            .map_err(|e| BenchError::Args(format!("the failover failed: {e}")))
    })
    .await?;
    drop(pair);
    Ok(Run {
        redis: None,
        store: "PostgreSQL",
        fault: "primary killed, standby promoted",
        durability: if synchronous {
            "synchronous standby, `synchronous_commit` on"
        } else {
            "asynchronous standby, `synchronous_commit` off"
        },
        durable: synchronous,
        load: load_name,
        fail_policy: load.fail_policy,
        failover_s: seen.fault_took,
        seen,
    })
}
