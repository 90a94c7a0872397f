//! Baseline 3: optimistic locking. `WATCH key`, `HMGET`, compute in the client, then
//! `MULTI` / (`HMSET` when allowed) / `PEXPIRE` / `EXEC` in one round trip; when `EXEC` aborts
//! because another client touched the key, start over, at most 20 attempts, then the check is an
//! error. `WATCH` belongs to a connection, so each worker has its own.

use redis::Value;
use redis::aio::MultiplexedConnection;

use super::bucket::{self, COST, Limit, TOKENS, TS};
use crate::{BenchError, clock};

/// As published.
const MAX_ATTEMPTS: u32 = 20;

/// One worker's dedicated connection.
pub(crate) struct WatchBaseline {
    conn: MultiplexedConnection,
}

impl WatchBaseline {
    /// Opens the worker's own connection.
    pub(crate) async fn connect(client: &redis::Client) -> Result<WatchBaseline, BenchError> {
        Ok(WatchBaseline {
            conn: client.get_multiplexed_async_connection().await?,
        })
    }

    /// One check of one token on `key`.
    pub(crate) async fn check(&mut self, key: &str, limit: Limit) -> Result<bool, BenchError> {
        for _ in 0..MAX_ATTEMPTS {
            let now_ms = clock::unix_ms();
            let () = redis::cmd("WATCH")
                .arg(key)
                .query_async(&mut self.conn)
                .await?;
            let (tokens, ts): (Option<String>, Option<String>) = redis::cmd("HMGET")
                .arg(key)
                .arg(TOKENS)
                .arg(TS)
                .query_async(&mut self.conn)
                .await?;
            let (tokens, _ts) =
                bucket::refill(limit, now_ms, (bucket::field(tokens), bucket::field(ts)));
            let allowed = tokens >= COST;
            let mut tx = redis::pipe();
            tx.atomic();
            if allowed {
                // `ts = now` as in the multi-command client; the Lua script's `max(now, ts)`
                // fix is not part of this approach.
                tx.cmd("HMSET")
                    .arg(key)
                    .arg(TOKENS)
                    .arg(tokens - COST)
                    .arg(TS)
                    .arg(now_ms)
                    .ignore();
            }
            tx.cmd("PEXPIRE").arg(key).arg(limit.ttl_ms()).ignore();
            // EXEC answers nil when a watched key changed: nothing was applied, try again.
            let exec: Value = tx.query_async(&mut self.conn).await?;
            if !matches!(exec, Value::Nil) {
                return Ok(allowed);
            }
        }
        Err(BenchError::Contention {
            attempts: MAX_ATTEMPTS,
        })
    }
}
