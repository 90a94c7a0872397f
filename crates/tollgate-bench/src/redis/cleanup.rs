//! Deleting a run's keys, and only those: `SCAN` by the run's patterns, then `UNLINK`.

use redis::aio::MultiplexedConnection;

use crate::BenchError;

/// Deletes every key of run `run_id` (the baselines' hashes and tollgate's buckets); returns how
/// many.
pub(crate) async fn delete_run(
    conn: &mut MultiplexedConnection,
    run_id: &str,
) -> Result<u64, BenchError> {
    let patterns = [
        format!("bench:*:{run_id}:*"),
        // tollgate's layout wraps the user key in a hash tag: `tollgate:v3:{<key>}:tb:...`.
        format!("tollgate:v3:{{bench:tollgate:{run_id}:*"),
    ];
    let mut deleted = 0;
    for pattern in &patterns {
        let mut cursor: u64 = 0;
        loop {
            let (next, keys): (u64, Vec<Vec<u8>>) = redis::cmd("SCAN")
                .arg(cursor)
                .arg("MATCH")
                .arg(pattern)
                .arg("COUNT")
                .arg(1000)
                .query_async(conn)
                .await?;
            if !keys.is_empty() {
                let n: u64 = redis::cmd("UNLINK").arg(&keys).query_async(conn).await?;
                deleted += n;
            }
            if next == 0 {
                break;
            }
            cursor = next;
        }
    }
    Ok(deleted)
}
