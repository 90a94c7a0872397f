//! The approaches, their connections, and one worker's check.

use std::fmt;
use std::time::Duration;

use redis::aio::ConnectionManager;
use tollgate::Policy;

use super::baseline_lua::LuaBaseline;
use super::baseline_multi::MultiBaseline;
use super::baseline_watch::WatchBaseline;
use super::bucket::Limit;
use super::floor::Floor;
use super::tollgate::TollgateRedis;
use crate::BenchError;

/// A way to run a token bucket in Redis.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, clap::ValueEnum)]
pub enum Approach {
    /// tollgate's `RedisStore` with its defaults (deny cache and coalescing on).
    Tollgate,
    /// A Lua script per request (`EVALSHA`).
    Lua,
    /// Client-side calculation with `HMGET` / `HMSET` / `EXPIRE`.
    Multi,
    /// Optimistic locking with `WATCH` / `MULTI` / `EXEC`.
    Watch,
    /// Not a limiter: the floor of a batched script (`TIME`, one `MGET`, a `PSETEX` a
    /// decision, a fixed answer), batched as tollgate's store batches. What any script that
    /// reads and writes a bucket per decision costs Redis.
    Floor,
}

impl Approach {
    /// Every approach, in report order.
    pub const ALL: [Approach; 5] = [
        Approach::Tollgate,
        Approach::Lua,
        Approach::Multi,
        Approach::Watch,
        Approach::Floor,
    ];

    /// The name used in arguments, keys and the report.
    pub fn name(self) -> &'static str {
        match self {
            Approach::Tollgate => "tollgate",
            Approach::Lua => "lua",
            Approach::Multi => "multi",
            Approach::Watch => "watch",
            Approach::Floor => "floor",
        }
    }

    /// One line on how the approach works.
    pub fn describe(self) -> &'static str {
        match self {
            Approach::Tollgate => "tollgate RedisStore (GCRA script, deny cache, batching)",
            Approach::Lua => "Lua script per request (EVALSHA), shared multiplexed connection",
            Approach::Multi => "HMGET + client math + HMSET + EXPIRE, not atomic",
            Approach::Watch => "WATCH / HMGET / MULTI..EXEC, ≤ 20 attempts, connection per worker",
            Approach::Floor => {
                "not a limiter: a script of TIME, one MGET of the batch's keys and a SET ... PX a \
                 key, answering allowed, batched as tollgate's store batches (≤ 256 a call, 2 \
                 calls in flight)"
            }
        }
    }

    /// Whether it decides: the floor answers every check allowed, so it is left out of the
    /// over-grant test.
    pub fn decides(self) -> bool {
        self != Approach::Floor
    }
}

impl fmt::Display for Approach {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Every approach's connections, made once per run, as a long-running service would.
pub(crate) struct Setup {
    client: redis::Client,
    lua: LuaBaseline,
    multi: MultiBaseline,
    tollgate: TollgateRedis,
    floor: Floor,
}

impl Setup {
    pub(crate) async fn connect(url: &str, timeout: Option<Duration>) -> Result<Setup, BenchError> {
        let client = redis::Client::open(url)?;
        // Each baseline gets its own manager, as two unrelated services would have.
        let lua = LuaBaseline::load(ConnectionManager::new(client.clone()).await?).await?;
        let multi = MultiBaseline::new(ConnectionManager::new(client.clone()).await?);
        let tollgate = TollgateRedis::connect(url, timeout).await?;
        let floor = Floor::load(ConnectionManager::new(client.clone()).await?).await?;
        Ok(Setup {
            client,
            lua,
            multi,
            tollgate,
            floor,
        })
    }

    /// One worker per key, connected and ready before the cell's clock starts.
    pub(crate) async fn workers(
        &self,
        approach: Approach,
        keys: Vec<String>,
        limit: Limit,
    ) -> Result<Vec<Worker>, BenchError> {
        let policy = TollgateRedis::policy(limit)?;
        let mut workers = Vec::with_capacity(keys.len());
        for key in keys {
            let kind = match approach {
                Approach::Tollgate => Kind::Tollgate(self.tollgate.clone(), policy),
                Approach::Lua => Kind::Lua(self.lua.clone()),
                Approach::Multi => Kind::Multi(self.multi.clone()),
                Approach::Watch => Kind::Watch(WatchBaseline::connect(&self.client).await?),
                Approach::Floor => Kind::Floor(self.floor.clone()),
            };
            workers.push(Worker { key, limit, kind });
        }
        Ok(workers)
    }
}

/// One worker: its key, its limit, its handle on the approach.
pub(crate) struct Worker {
    key: String,
    limit: Limit,
    kind: Kind,
}

enum Kind {
    Tollgate(TollgateRedis, Policy),
    Lua(LuaBaseline),
    Multi(MultiBaseline),
    Watch(WatchBaseline),
    Floor(Floor),
}

impl Worker {
    /// One check of one token: allowed or not.
    pub(crate) async fn check(&mut self) -> Result<bool, BenchError> {
        match &mut self.kind {
            Kind::Tollgate(store, policy) => store.check(&self.key, *policy).await,
            Kind::Lua(lua) => lua.check(&self.key, self.limit).await,
            Kind::Multi(multi) => multi.check(&self.key, self.limit).await,
            Kind::Watch(watch) => watch.check(&self.key, self.limit).await,
            Kind::Floor(floor) => floor.check(&self.key, self.limit).await,
        }
    }
}
