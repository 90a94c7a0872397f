//! Baseline 2: the client computes, with several commands and no atomicity: `HMGET tokens ts`,
//! the refill in the client, `HMSET tokens max(tokens - cost, 0) ts now` (always, allowed or
//! not), then `EXPIRE`. Three round trips; concurrent clients read the same tokens and each
//! spend them, which is the over-grant the publication measured.

use redis::aio::ConnectionManager;

use super::bucket::{self, COST, Limit, TOKENS, TS};
use crate::{BenchError, clock};

/// A shared multiplexed connection; cloned into each worker.
#[derive(Clone)]
pub(crate) struct MultiBaseline {
    conn: ConnectionManager,
}

impl MultiBaseline {
    pub(crate) fn new(conn: ConnectionManager) -> MultiBaseline {
        MultiBaseline { conn }
    }

    /// One check of one token on `key`.
    pub(crate) async fn check(&mut self, key: &str, limit: Limit) -> Result<bool, BenchError> {
        let now_ms = clock::unix_ms();
        let (tokens, ts): (Option<String>, Option<String>) = redis::cmd("HMGET")
            .arg(key)
            .arg(TOKENS)
            .arg(TS)
            .query_async(&mut self.conn)
            .await?;
        let (tokens, _ts) =
            bucket::refill(limit, now_ms, (bucket::field(tokens), bucket::field(ts)));
        let allowed = tokens >= COST;
        // As published: written whether allowed or not, `ts` set to this client's `now` even if
        // another client already stored a later one, and a denial's fraction of a token lost.
        let () = redis::cmd("HMSET")
            .arg(key)
            .arg(TOKENS)
            .arg((tokens - COST).max(0.0))
            .arg(TS)
            .arg(now_ms)
            .query_async(&mut self.conn)
            .await?;
        let _: i64 = redis::cmd("EXPIRE")
            .arg(key)
            .arg(limit.ttl_ms().div_ceil(1000))
            .query_async(&mut self.conn)
            .await?;
        Ok(allowed)
    }
}
