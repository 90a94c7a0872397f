//! The Redis store: one atomic Lua script per decision, at Redis's clock.
//!
//! Each call is one `EVALSHA` of `decide.lua`, reloaded by the client when Redis answers
//! `NOSCRIPT` (after a `SCRIPT FLUSH` or a restart). The script decides every
//! [`Algorithm`], each branch a port of its pure function in
//! [`algorithm`](crate::algorithm) in integer microseconds: the token bucket
//! ([`gcra`](crate::algorithm::gcra)), the fixed window, the sliding-window log and the
//! sliding-window counter. Several checks of one call, whatever their algorithms, are decided
//! all or nothing in that one script run. Time is Redis's own `TIME`, so every process sharing
//! the Redis shares one clock; periods and windows are rounded up to whole microseconds
//! ([`Policy::at_resolution`]), so rounding only under-grants.
//!
//! What a bucket costs in Redis (the key layout is in `keys.rs`, the values in `decide.lua`):
//!
//! | algorithm       | value                                         | TTL                         |
//! |-----------------|-----------------------------------------------|-----------------------------|
//! | token bucket    | string: the theoretical arrival time          | until the bucket is full    |
//! | fixed window    | string: window index and count                | until the window ends       |
//! | sliding counter | string: window index, previous and current    | until the next window ends  |
//! | sliding log     | list: one element per grant (time, and cost when above 1) | until the newest grant leaves the window |
//!
//! Idle keys vanish by themselves. Measured with `MEMORY USAGE` (Redis 7.0), a string bucket
//! takes about 100 bytes; a sliding log about 200 bytes with two grants and 1.2 KB with 100,
//! and the script reads all of it on each decision of that key, so a log's cost grows with its
//! limit ([`MAX_LOG_LIMIT`](crate::MAX_LOG_LIMIT) bounds it); the other three are
//! constant.
//!
//! Lua's numbers are doubles, so a policy whose numbers could pass 2^52 is refused with
//! [`CheckError::Unsupported`]: a token bucket taking longer than about 142 years to refill, and
//! a sliding counter whose limit × window in microseconds reaches 2^51 (its estimate multiplies
//! them), such as more than 26,000 per day.
//!
//! Concurrent calls share one multiplexed connection (pipelined: no pool, no head-of-line
//! wait for a free connection); the connection is re-established by itself when Redis
//! returns. Two optional layers keep a hot key cheap, both exact:
//!
//! - a **deny cache**: a bucket known to deny cost `c` until `t` is answered locally until `t`;
//!   for windows, the script also says how long the whole answer stands (a sliding log's
//!   remaining grows when its oldest entry leaves, a sliding counter's as the previous window
//!   slides out), and the cache repeats it no longer than that;
//! - **coalescing**: concurrent single checks of one bucket wait for the call in flight and are
//!   then decided together by one script run, in arrival order.
//!
//! Every call is bounded by a timeout (default 50 ms); a store error is transient, so the
//! caller's fail policy applies ([`Guarded`](crate::store::guarded::Guarded)).
//!
//! With Redis Cluster, every policy of one key shares a hash slot (the key is the hash tag), so
//! checking several policies of one key is atomic. Checks of *different* keys in one call would
//! span slots: the cluster store refuses them with [`CheckError::Unsupported`].

mod keys;
mod script;

use std::sync::Arc;
use std::time::Duration;

use redis::Script;
use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::cluster_async::ClusterConnection;

use super::coalesce::{Batcher, Coalescer};
use super::deny_cache::{DenyCache, Refill};
use super::{BoxFuture, Check, Store};
use crate::{
    Algorithm, CheckError, Clock, Decision, MonotonicClock, Nanos, Policy, StoreError, Verdict,
};
use script::{Call, Reply};

/// The default bound on one call.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_millis(50);

#[derive(Clone)]
enum Connection {
    Single(ConnectionManager),
    Cluster(ClusterConnection),
}

/// Configures a [`RedisStore`].
pub struct RedisStoreBuilder {
    urls: Vec<String>,
    timeout: Duration,
    deny_cache: bool,
    coalesce: bool,
    max_batch: usize,
    test_clock: Option<Arc<dyn Clock>>,
}

/// A store in Redis or Redis Cluster. Cheap to clone: clones share the connection and caches.
#[derive(Clone)]
pub struct RedisStore {
    inner: Arc<Inner>,
}

struct Inner {
    connection: Connection,
    script: Script,
    timeout: Duration,
    /// The local clock: deadlines of the deny cache, and the script's time in tests.
    clock: Arc<dyn Clock>,
    inject_time: bool,
    deny_cache: Option<DenyCache>,
    coalescer: Option<Arc<Coalescer>>,
}

impl RedisStore {
    /// A store on one Redis (`redis://host:port/db`), or on a cluster when given several node
    /// URLs through [`RedisStoreBuilder::cluster`].
    pub fn builder(url: impl Into<String>) -> RedisStoreBuilder {
        RedisStoreBuilder {
            urls: vec![url.into()],
            timeout: DEFAULT_TIMEOUT,
            deny_cache: true,
            coalesce: true,
            max_batch: 256,
            test_clock: None,
        }
    }

    /// A store on one Redis with the defaults. It connects lazily: a Redis that is down now
    /// makes calls fail (transiently) until it is up.
    pub async fn connect(url: &str) -> Result<RedisStore, StoreError> {
        RedisStore::builder(url).build().await
    }
}

impl RedisStoreBuilder {
    /// Treats the URLs as the seed nodes of a Redis Cluster.
    pub fn cluster(mut self, urls: impl IntoIterator<Item = impl Into<String>>) -> Self {
        self.urls = urls.into_iter().map(Into::into).collect();
        if self.urls.len() == 1 {
            // One URL and `cluster()`: still a cluster client, discovering the others.
            self.urls.push(self.urls[0].clone());
        }
        self
    }

    /// The bound on one call (default 50 ms).
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// Whether to answer known denials locally (default on).
    pub fn deny_cache(mut self, on: bool) -> Self {
        self.deny_cache = on;
        self
    }

    /// Whether to decide concurrent checks of one bucket in one call (default on).
    pub fn coalesce(mut self, on: bool) -> Self {
        self.coalesce = on;
        self
    }

    /// The most checks one coalesced call decides (default 256).
    pub fn max_batch(mut self, max_batch: usize) -> Self {
        self.max_batch = max_batch;
        self
    }

    /// Decides at `clock` instead of Redis's `TIME`: for tests that move time by hand. Never in
    /// production: processes with different clocks would disagree about every bucket.
    pub fn test_clock(mut self, clock: impl Clock) -> Self {
        self.test_clock = Some(Arc::new(clock));
        self
    }

    /// Connects (lazily for a single Redis; a cluster must answer to be discovered).
    pub async fn build(self) -> Result<RedisStore, StoreError> {
        let unavailable = |e: redis::RedisError| StoreError::Unavailable(Box::new(e));
        let connection = if self.urls.len() > 1 {
            let client = redis::cluster::ClusterClient::builder(self.urls.clone())
                .connection_timeout(self.timeout.max(Duration::from_millis(500)))
                .response_timeout(self.timeout.max(Duration::from_secs(1)))
                .retries(2)
                .build()
                .map_err(unavailable)?;
            Connection::Cluster(client.get_async_connection().await.map_err(unavailable)?)
        } else {
            let client = redis::Client::open(self.urls[0].as_str()).map_err(unavailable)?;
            let config = ConnectionManagerConfig::new()
                .set_connection_timeout(Some(self.timeout.max(Duration::from_millis(200))))
                .set_response_timeout(Some(self.timeout.max(Duration::from_secs(1))))
                .set_number_of_retries(1)
                .set_min_delay(Duration::from_millis(10))
                .set_max_delay(Duration::from_millis(200));
            Connection::Single(
                ConnectionManager::new_lazy_with_config(client, config).map_err(unavailable)?,
            )
        };
        let inject_time = self.test_clock.is_some();
        Ok(RedisStore {
            inner: Arc::new(Inner {
                connection,
                script: script::script(),
                timeout: self.timeout,
                clock: self
                    .test_clock
                    .unwrap_or_else(|| Arc::new(MonotonicClock::new())),
                inject_time,
                deny_cache: self.deny_cache.then(|| DenyCache::new(1 << 16)),
                coalescer: self
                    .coalesce
                    .then(|| Arc::new(Coalescer::new(self.max_batch))),
            }),
        })
    }
}

impl Inner {
    fn is_cluster(&self) -> bool {
        matches!(self.connection, Connection::Cluster(_))
    }

    /// The local time; with an injected clock, in whole microseconds as the script reads it,
    /// so that the deny cache and the script agree to the unit.
    fn local_now(&self) -> Nanos {
        let now = self.clock.now();
        if self.inject_time {
            Nanos::new(now.as_u64() / 1000 * 1000)
        } else {
            now
        }
    }

    /// One script call, bounded by the timeout.
    async fn run(&self, call: &Call) -> Result<Vec<Reply>, StoreError> {
        let now_us = self.inject_time.then(|| self.local_now().as_u64() / 1000);
        let script = &self.script;
        let run = async {
            match self.connection.clone() {
                Connection::Single(mut c) => call.run(script, &mut c, now_us).await,
                Connection::Cluster(mut c) => call.run(script, &mut c, now_us).await,
            }
        };
        tokio::time::timeout(self.timeout, run)
            .await
            .unwrap_or(Err(StoreError::Timeout(self.timeout)))
    }

    async fn decide_one(self: &Arc<Self>, check: &Check<'_>) -> Result<Decision, StoreError> {
        // Refuse what can never be decided before touching caches or the network.
        script::params(&check.policy)?;
        if check.cost > check.policy.capacity() {
            return Err(CheckError::CostExceedsCapacity {
                cost: check.cost,
                capacity: check.policy.capacity(),
            }
            .into());
        }
        let bucket = keys::bucket_key(&check.policy, check.key);
        if let Some(cache) = &self.deny_cache {
            if let Some(denied) = cache.get(&bucket, check.cost, self.local_now()) {
                return Ok(denied);
            }
        }
        match &self.coalescer {
            Some(coalescer) => {
                let checked = coalescer.check(self, bucket, check.policy, check.key, check.cost);
                tokio::time::timeout(self.timeout, checked)
                    .await
                    .unwrap_or(Err(StoreError::Timeout(self.timeout)))
            }
            None => {
                let mut decisions = Arc::clone(self)
                    .decide_batch(check.policy, check.key.into(), vec![check.cost])
                    .await?;
                decisions.pop().ok_or_else(|| {
                    StoreError::Unavailable("the tollgate script returned no decision".into())
                })
            }
        }
    }

    async fn decide_many(&self, checks: &[Check<'_>]) -> Result<Verdict, StoreError> {
        for (index, check) in checks.iter().enumerate() {
            if checks[..index]
                .iter()
                .any(|c| c.policy == check.policy && c.key == check.key)
            {
                return Err(CheckError::DuplicateBucket { index }.into());
            }
        }
        if self.is_cluster() && checks.iter().any(|c| c.key != checks[0].key) {
            return Err(CheckError::Unsupported(
                "in Redis Cluster, the checks of one call must share a key (one hash slot)",
            )
            .into());
        }
        let call = Call::new([checks])?;
        let mut replies = self.run(&call).await?;
        replies.pop().map(|r| r.verdict).ok_or_else(|| {
            StoreError::Unavailable("the tollgate script returned no verdict".into())
        })
    }
}

impl Batcher for Inner {
    fn decide_batch(
        self: Arc<Self>,
        policy: Policy,
        key: Arc<[u8]>,
        costs: Vec<u64>,
    ) -> BoxFuture<'static, Result<Vec<Decision>, StoreError>> {
        Box::pin(async move {
            let checks: Vec<[Check<'_>; 1]> = costs
                .iter()
                .map(|&cost| [Check::new(policy, &key, cost)])
                .collect();
            let call = Call::new(checks.iter().map(|c| &c[..]))?;
            let sent = self.local_now();
            let replies = self.run(&call).await?;
            let answers: Vec<(Decision, Duration)> = replies
                .into_iter()
                .filter_map(|r| r.verdict.decisions.into_iter().zip(r.holds).next())
                .collect();
            if let Some(cache) = &self.deny_cache {
                let bucket = keys::bucket_key(&policy, &key);
                let refill = match policy.algorithm() {
                    Algorithm::TokenBucket => Refill::Every(
                        policy
                            .at_resolution(script::MICROSECOND)
                            .emission_interval(),
                    ),
                    Algorithm::FixedWindow => Refill::AtWindowEnd,
                    Algorithm::SlidingWindowLog | Algorithm::SlidingWindowCounter => {
                        Refill::Sliding
                    }
                };
                for ((decision, hold), cost) in answers.iter().zip(&costs) {
                    cache.record(&bucket, *cost, refill, sent, *hold, decision);
                }
            }
            Ok(answers.into_iter().map(|(d, _)| d).collect())
        })
    }
}

impl Store for RedisStore {
    async fn decide(&self, checks: &[Check<'_>]) -> Result<Verdict, StoreError> {
        match checks {
            [] => Ok(Verdict { decisions: vec![] }),
            [one] => Ok(Verdict {
                decisions: vec![self.inner.decide_one(one).await?],
            }),
            _ => self.inner.decide_many(checks).await,
        }
    }

    async fn ready(&self) -> Result<(), StoreError> {
        let ping = async {
            let cmd = redis::cmd("PING");
            let reply: Result<String, _> = match self.inner.connection.clone() {
                Connection::Single(mut c) => cmd.query_async(&mut c).await,
                Connection::Cluster(mut c) => cmd.query_async(&mut c).await,
            };
            reply
                .map(drop)
                .map_err(|e| StoreError::Unavailable(Box::new(e)))
        };
        tokio::time::timeout(self.inner.timeout, ping)
            .await
            .unwrap_or(Err(StoreError::Timeout(self.inner.timeout)))
    }

    fn name(&self) -> &'static str {
        "redis"
    }
}
