//! Baseline 1: a Lua script per request (`SCRIPT LOAD` once, `EVALSHA` per call), over one
//! shared multiplexed connection. One round trip, atomic. The script is `baseline.lua`.

use redis::aio::ConnectionManager;

use super::bucket::{COST, Limit};
use crate::{BenchError, clock};

const SCRIPT: &str = include_str!("baseline.lua");

/// The loaded script on a shared connection; cloned into each worker.
#[derive(Clone)]
pub(crate) struct LuaBaseline {
    conn: ConnectionManager,
    sha: String,
}

impl LuaBaseline {
    /// Loads the script once (`SCRIPT LOAD`), as the published client does at start-up.
    pub(crate) async fn load(mut conn: ConnectionManager) -> Result<LuaBaseline, BenchError> {
        let sha: String = redis::cmd("SCRIPT")
            .arg("LOAD")
            .arg(SCRIPT)
            .query_async(&mut conn)
            .await?;
        Ok(LuaBaseline { conn, sha })
    }

    /// One check of one token on `key`.
    pub(crate) async fn check(&mut self, key: &str, limit: Limit) -> Result<bool, BenchError> {
        let (allowed, _retry_after_ms): (i64, i64) = redis::cmd("EVALSHA")
            .arg(&self.sha)
            .arg(1)
            .arg(key)
            .arg(clock::unix_ms())
            .arg(limit.rate)
            .arg(limit.burst)
            .arg(COST)
            .arg(limit.ttl_ms())
            .query_async(&mut self.conn)
            .await?;
        Ok(allowed == 1)
    }
}
