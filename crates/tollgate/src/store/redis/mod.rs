//! The Redis store: one atomic Lua script per decision, at Redis's clock.
//!
//! Each call is one `EVALSHA`, reloaded by the client when Redis answers `NOSCRIPT` (after a
//! `SCRIPT FLUSH` or a restart). `decide.lua` decides every [`Algorithm`](crate::Algorithm),
//! each branch a port of its pure function in [`algorithm`](crate::algorithm) in integer
//! microseconds: the token bucket ([`gcra`](crate::algorithm::gcra)), the fixed window, the
//! sliding-window log and the sliding-window counter. Several checks of one decision, whatever
//! their algorithms, are decided all or nothing in that one script run. Calls whose checks are
//! all token buckets (the common case) run `bucket.lua` instead, the same GCRA cut down to what
//! only Redis can do (read every bucket in one `MGET`, decide in order, write what changed, and
//! answer the values it read and the decisions it did not take); the client replays those
//! decisions from the values read with the same pure function to answer remaining, retry and
//! reset, and refuses a reply its replay disagrees with. Time is Redis's own `TIME`, so every
//! process sharing the Redis shares one clock; periods and windows are rounded up to whole
//! microseconds
//! (the emission interval and the period rounded up to whole microseconds), so rounding only
//! under-grants.
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
//! wait for a free connection; waiting for replicas, each call has a connection of its own
//! instead, see [`wait_for_replicas`](RedisStoreBuilder::wait_for_replicas)); the connection is
//! re-established by itself when Redis returns. Two optional layers keep a hot key cheap, both exact:
//!
//! - a **deny cache**: a bucket known to deny cost `c` until `t` is answered locally until `t`;
//!   for windows, the script also says how long the whole answer stands (a sliding log's
//!   remaining grows when its oldest entry leaves, a sliding counter's as the previous window
//!   slides out), and the cache repeats it no longer than that;
//! - **batching**: decisions that arrive while calls are in flight wait, and the next call
//!   decides all of them, up to [`max_batch`](RedisStoreBuilder::max_batch), in one script run,
//!   in arrival order. On one Redis a batch mixes every key (a thousand users' checks share a
//!   call). In a cluster of Redis 7, a batch mixes the keys of one node: each node has its own
//!   queue, and the script declares one key and `allow-cross-slot-keys` to reach the others
//!   (see "Redis Cluster" below). Checks
//!   of one hot key are thereby coalesced: one run decides them in order, carrying the bucket's
//!   state from one to the next. A quiet store sends each decision at once.
//!
//! Every decision is bounded by a timeout (default 50 ms) from the moment it is asked, queueing
//! included; a store error is transient, so the caller's fail policy applies
//! ([`Guarded`](crate::store::guarded::Guarded)).
//!
//! With Redis Cluster, every policy of one key shares a hash slot (the key is the hash tag), so
//! checking several policies of one key is atomic. Checks of *different* keys in one call would
//! span slots: the cluster store refuses them with [`CheckError::Unsupported`].
//!
//! **Redis Cluster, batched per node.** The store reads which node serves each slot
//! (`CLUSTER SLOTS`) and queues each decision with the others of its node; one script call
//! decides a node's batch. A call may declare keys of one slot only, so it declares its first
//! bucket and passes the others as arguments, which Redis 7 serves when the script says
//! `#!lua flags=allow-cross-slot-keys` and its node serves them. Such keys are not redirected:
//! a bucket whose slot moved (or is migrating, and its key is not there) makes the script fail
//! with "Script attempted to access a non local key" at its reads, before it decides anything
//! (what it had already created, taking a lone bucket first, it deletes again before it
//! answers), so the call decided and wrote nothing; the store then reads the slot map again
//! and decides that batch per slot (one call for each slot's decisions, following `MOVED` and
//! `ASK` as every per-slot call does). Each decision is thus decided exactly once. Where the
//! scripts cannot be loaded with the flag (Redis before 7.0), or with
//! [`per_node(false)`](RedisStoreBuilder::per_node), each key has its own queue and calls are per
//! slot; the store logs (with `tracing`, at info) which it uses when it starts.

//!
//! **Redis Sentinel.** `redis+sentinel://[USER:PASSWORD@]HOST:26379[,HOST:26379...]/MASTER_NAME[/DB]`
//! (and `rediss+sentinel://`, TLS to the sentinels and to Redis, [`RedisTls`] applying to both)
//! names a primary that Sentinel watches: the user information is Redis's own, and the
//! sentinels' credentials are the query's `sentinel_username` and `sentinel_password`. The store
//! asks the sentinels for the primary, checks that it says so (`ROLE`), and follows it when it
//! moves: on the sentinels' `+switch-master`, on a call that fails (`READONLY`, a connection
//! lost, a timeout), and once a second. Building refuses what can never work
//! ([`StoreError::Config`]): sentinel host names none of which resolves, a master name unknown to
//! every sentinel that answers, credentials a sentinel refuses; no sentinel answering (asked
//! again 200 ms apart for 5 s, each question within 500 ms) is a transient error. Until the new primary is in use, calls fail within the timeout and the
//! fail policy answers them; a call is never sent twice, and the scripts are loaded on the new
//! primary by the first call that meets `NOSCRIPT`.
//!
//! What a failover does to the rest, the primary being asynchronously replicated (unless
//! [`wait_for_replicas`](RedisStoreBuilder::wait_for_replicas) says otherwise):
//!
//! - **the deny cache** holds facts about the old primary's buckets, and keeps them until their
//!   deadlines: where the new primary rolled a bucket back, a cached denial denies what it would
//!   allow (an under-grant, for at most the denial's retry time), never the reverse, since only
//!   denials are cached;
//! - **batching**: a batch in flight at the switch fails whole (every decision of it answered by
//!   the fail policy); it may have been applied on the old primary or not, and is not sent again;
//! - **leases** (`tollgate-server`'s `lease = true`, [`Leased`](crate::store::lease::Leased)):
//!   the tokens a lease holds were paid on the old primary; if that payment rolled back, the
//!   bucket on the new primary holds them again while the lease still spends them: the rollback's
//!   over-grant includes them, at most the leases outstanding (each at most an eighth of the
//!   bucket). A return that fails at the switch is lost, an under-grant.
//!
//! Without waiting for replicas, what the old primary had not yet sent its replicas when it died
//! is lost, and the buckets it charged are charged again: one more burst at most per bucket, for
//! the writes of the last moment before the failure.

// Not API: the instruction-count benchmark's way in (tollgate-instructions), behind a feature
// of its own and hidden from the docs.
#[cfg(feature = "__bench")]
#[doc(hidden)]
pub mod bench;
mod connect;
mod encoded;
mod error;
mod keys;
mod nodes;
mod plan;
mod pool;
mod script;
mod sentinel;
mod sentinel_url;
mod settle;
#[cfg(feature = "redis-tls")]
mod tls;
mod wait;

use std::sync::Arc;
use std::time::Duration;

use redis::IntoConnectionInfo;
use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::cluster_async::ClusterConnection;

use super::batch::{Batcher, Runner};
use super::deny_cache::DenyCache;
use super::{Check, Store};
use crate::{CheckError, Clock, MonotonicClock, Nanos, StoreError, Verdict};
use encoded::Encoded;
use plan::TakeFirst;
use script::{Keys, Reply, Scripts};
#[cfg(feature = "redis-tls")]
pub use tls::RedisTls;
use wait::{Durable, Wait};

/// Records this version's layout unless one is recorded, and answers the one recorded.
const LAYOUT_SCRIPT: &str =
    "redis.call('SET', KEYS[1], ARGV[1], 'NX') return redis.call('GET', KEYS[1])";

/// The default bound on one call.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_millis(50);

#[derive(Clone)]
enum Connection {
    Single(ConnectionManager),
    Cluster(ClusterConnection),
    /// The primary behind Redis Sentinel, followed across failovers.
    Sentinel(Arc<sentinel::Follower>),
}

/// Configures a [`RedisStore`].
///
/// ```
/// use std::time::Duration;
/// use tollgate::RedisStore;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), tollgate::StoreError> {
/// // A single Redis connects lazily: building tries one connection, and a Redis that is down
/// // is no error.
/// let store = RedisStore::builder("redis://127.0.0.1:6379/2")
///     .timeout(Duration::from_millis(20))
///     .max_batch(128)
///     .deny_cache(false)
///     .build()
///     .await?;
/// # drop(store);
/// # Ok(())
/// # }
/// ```
pub struct RedisStoreBuilder {
    urls: Vec<String>,
    timeout: Duration,
    deny_cache: bool,
    batch: bool,
    max_batch: usize,
    /// `None`: 2 calls per queue, or 1 per node on a cluster batched per node.
    max_in_flight: Option<usize>,
    test_clock: Option<Arc<dyn Clock>>,
    per_node: bool,
    wait: Option<Wait>,
    #[cfg(feature = "redis-tls")]
    tls: Option<RedisTls>,
}

/// A store in Redis or Redis Cluster. Cheap to clone: clones share the connection, the queues
/// and the caches.
///
/// ```no_run
/// use std::time::Duration;
/// use tollgate::{Check, Policy, RedisStore, Store};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let store = RedisStore::connect("redis://127.0.0.1:6379").await?;
/// let (second, hour) = (Policy::per_second(10)?, Policy::per_hour(1_000)?);
/// // Both buckets in one script run: both charged, or neither.
/// let verdict = store
///     .decide(&[Check::new(second, b"alice", 1), Check::new(hour, b"alice", 1)])
///     .await?;
/// if !verdict.allowed() {
///     println!("retry after {:?}", verdict.retry_after());
/// }
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct RedisStore {
    inner: Arc<Inner>,
    batcher: Option<Arc<Batcher<Inner>>>,
}

struct Inner {
    connection: Connection,
    scripts: Scripts,
    /// Whether calls with every key declared take their lone buckets first.
    take_first: TakeFirst,
    timeout: Duration,
    /// The local clock: deadlines of the deny cache, and the script's time in tests.
    clock: Arc<dyn Clock>,
    inject_time: bool,
    deny_cache: Option<DenyCache>,
    /// Ids for settlements that came without one (used in a cluster only).
    settle_ids: settle::SettleIds,
    /// The node of each slot, when a cluster's calls are batched per node.
    nodes: Option<nodes::Nodes>,
    /// Durability mode's connections, one per call (`pool.rs`).
    durable: Option<Durable>,
}

impl RedisStore {
    /// A store on one Redis (`redis://host:port/db`), on the primary behind Redis Sentinel
    /// (`redis+sentinel://host:26379,host:26379/MASTER_NAME`, see [the module](crate::store::redis)), or
    /// on a cluster when given several node URLs through [`RedisStoreBuilder::cluster`].
    pub fn builder(url: impl Into<String>) -> RedisStoreBuilder {
        RedisStoreBuilder {
            urls: vec![url.into()],
            timeout: DEFAULT_TIMEOUT,
            deny_cache: true,
            batch: true,
            max_batch: 256,
            max_in_flight: None,
            test_clock: None,
            per_node: true,
            wait: None,
            #[cfg(feature = "redis-tls")]
            tls: None,
        }
    }

    /// A store on one Redis with the defaults. Building tries one connection, to refuse
    /// settings that can never work; a Redis that is down now makes calls fail (transiently)
    /// until it is up.
    ///
    /// # Cancel safety
    ///
    /// As [`RedisStoreBuilder::build`]'s: dropped, it leaves nothing behind.
    pub async fn connect(url: impl Into<String>) -> Result<RedisStore, StoreError> {
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

    /// TLS of its own for the `rediss://` URLs: a CA, a client certificate, host names left
    /// unchecked ([`RedisTls`]). Given for a URL that is not `rediss://`, building refuses it.
    #[cfg(feature = "redis-tls")]
    pub fn tls(mut self, tls: RedisTls) -> Self {
        self.tls = Some(tls);
        self
    }

    /// The bound on one decision, from the moment it is asked (default 50 ms).
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// Whether to answer known denials locally (default on).
    pub fn deny_cache(mut self, on: bool) -> Self {
        self.deny_cache = on;
        self
    }

    /// Whether concurrent decisions share script calls (default on). Off, every decision is its
    /// own call.
    pub fn coalesce(mut self, on: bool) -> Self {
        self.batch = on;
        self
    }

    /// The most decisions one call decides (default 256). A call blocks Redis while it runs:
    /// about a microsecond or two per token-bucket decision.
    pub fn max_batch(mut self, max_batch: usize) -> Self {
        self.max_batch = max_batch;
        self
    }

    /// How many calls of one queue may be in flight at once. By default 2 on one Redis (and on
    /// a cluster called per slot): the next batch reaches Redis while the last reply travels
    /// back. On a cluster batched per node, 1 per node: a server already has a call in flight
    /// to every node at once, and a node has the other servers' calls to work on while a reply
    /// travels; one call at a time fills batches about 1.6× as large (0.63–0.65× the calls, and
    /// less of a node's time per decision, measured with three servers; one server alone sending
    /// a hot key to one node loses some throughput: docs/performance.md, "One call in flight per
    /// node"). While a slot moves, a node's call that meets it is decided again per slot, those
    /// calls going out together.
    pub fn max_in_flight(mut self, calls: usize) -> Self {
        self.max_in_flight = Some(calls);
        self
    }

    /// Whether a cluster's calls decide the checks of every slot of one node (default on, where
    /// the cluster runs Redis 7.0 or later); off, a call decides the checks of one key. No
    /// effect on one Redis.
    pub fn per_node(mut self, on: bool) -> Self {
        self.per_node = on;
        self
    }

    /// Durability on request (off by default): every script call that writes (each decision
    /// call, batched or not, and each settlement) is followed on its connection by
    /// `WAIT replicas timeout`, and its decisions are answered only once `replicas` replicas
    /// acknowledged the write. When fewer do within `timeout`, the decisions it allowed are a
    /// transient store error (the fail policy answers them), although the primary applied them:
    /// failing closed then denies what may have been charged, failing open allows what may not
    /// have been. The decisions it denied wrote nothing, and are answered as denials.
    ///
    /// Redis reads nothing more from a connection while a `WAIT` on it is pending, so each call
    /// gets a connection of its own from a small pool: [`max_in_flight`](Self::max_in_flight)
    /// connections for decisions (a decision waits for one within the timeout, which with
    /// [`coalesce(false)`](Self::coalesce) is every decision beyond that many at once) and 2
    /// for settlements and [`Store::ready`]. A call that ends without its answer (its timeout)
    /// closes its connection, and the `WAIT` pending on it with it. [`Store::ready`] sends a
    /// `WAIT` too, and is a [`StoreError::Config`] when the primary has fewer replicas connected
    /// than `replicas` (every decision would fail): a server refuses to start on it.
    ///
    /// Without it, Redis replicates asynchronously and a primary that dies takes its last
    /// writes with it: the buckets they charged roll back on the replica promoted in its place,
    /// and the tokens they granted are granted again (an over-grant). With it, a decision
    /// answered from the store survives the failover that promotes a replica holding it.
    ///
    /// `timeout` must be at least 1 ms and below the store's [`timeout`](Self::timeout), which
    /// still bounds the whole decision; building refuses otherwise, naming both, and refuses
    /// the option for a Redis Cluster (`WAIT` would reach a node other than the one a call
    /// wrote on).
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::RedisStore;
    ///
    /// let builder = RedisStore::builder("redis://127.0.0.1:6379")
    ///     .timeout(Duration::from_millis(100))
    ///     .wait_for_replicas(1, Duration::from_millis(50));
    /// # drop(builder);
    /// ```
    pub fn wait_for_replicas(mut self, replicas: u32, timeout: Duration) -> Self {
        self.wait = Some(Wait { replicas, timeout });
        self
    }

    /// Decides at `clock` instead of Redis's `TIME`: for tests that move time by hand. Never in
    /// production: processes with different clocks would disagree about every bucket (feature
    /// `test-util`).
    #[cfg(feature = "test-util")]
    pub fn test_clock(mut self, clock: impl Clock) -> Self {
        self.test_clock = Some(Arc::new(clock));
        self
    }

    /// Connects (lazily for a single Redis; a cluster must answer to be discovered).
    ///
    /// Fails with [`StoreError::Config`] when no URL is given (an empty
    /// [`cluster`](RedisStoreBuilder::cluster) list) or a URL does not parse, and with a
    /// transient error when a cluster cannot be reached to be discovered. A `timeout`,
    /// `max_batch` or `max_in_flight` of zero is a [`StoreError::Config`] naming it: a zero
    /// timeout would hand every decision to the fail policy (failing open, limiting nothing).
    ///
    /// Settings that can never work are a [`StoreError::Config`] too, found here rather than
    /// left to the fail policy: host names the resolver says do not exist (of several seed
    /// nodes, when none resolves), a `rediss://` URL on a system whose root certificates
    /// cannot be read or hold none, and what one connection tried now (within the timeout, at
    /// least 1 s) is refused for: a certificate not trusted or not for the host, a password
    /// or DB index refused. A Redis that does not answer now is no error: calls fail
    /// transiently until it does.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::{RedisStore, StoreError};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// let refused = RedisStore::builder("redis://127.0.0.1:6379")
    ///     .timeout(Duration::ZERO)
    ///     .build()
    ///     .await;
    /// let Err(StoreError::Config(why)) = refused else { panic!("a zero timeout was accepted") };
    /// assert!(why.starts_with("RedisStoreBuilder::timeout is 0"), "{why}");
    /// # }
    /// ```
    ///
    /// # Cancel safety
    ///
    /// Dropped before it answers, it leaves nothing behind: no store exists yet, and the
    /// connections a cluster's discovery opened close with it. Building writes nothing to
    /// Redis (loading the scripts changes no bucket), so building again is the same.
    pub async fn build(self) -> Result<RedisStore, StoreError> {
        crate::store::refuse_zero_settings(
            "RedisStoreBuilder",
            self.timeout,
            self.max_batch,
            // Unset, a default applies below, which is never zero.
            self.max_in_flight.unwrap_or(1),
        )?;
        if let Some(wait) = &self.wait {
            wait.check(self.timeout)?;
            if self.urls.len() > 1 {
                return Err(StoreError::Config(
                    "RedisStoreBuilder::wait_for_replicas is for one Redis (or Sentinel), not a \
                     Redis Cluster"
                        .into(),
                ));
            }
        }
        let sentinel_url = match &self.urls[..] {
            [url] if sentinel_url::is_sentinel(url) => Some(sentinel_url::SentinelUrl::parse(url)?),
            urls if urls.iter().any(|u| sentinel_url::is_sentinel(u)) => {
                return Err(StoreError::Config(
                    "a Redis Sentinel URL names the sentinels of one primary: it is no seed \
                     node of a Redis Cluster"
                        .into(),
                ));
            }
            _ => None,
        };
        if self.urls.is_empty() || self.urls.iter().any(String::is_empty) {
            return Err(StoreError::Config(
                "no Redis URL given (a cluster needs at least one seed node)".into(),
            ));
        }
        let unavailable = error::setup_error;
        let config_error = |e: redis::RedisError| {
            StoreError::Config(format!(
                "the Redis URL cannot be used: {}",
                e.detail()
                    .unwrap_or("it does not parse (redis://[[USER]:PASSWORD@]HOST[:PORT][/DB])")
            ))
        };
        // What must answer within the time allowed to reach Redis.
        let reach = self.timeout.max(Duration::from_secs(1));
        let mut scripts = Scripts::new();
        scripts.wait = self.wait;
        if let Some(url) = sentinel_url {
            let follower = self.follow(url, reach).await?;
            let connection = Connection::Sentinel(Arc::new(follower));
            return Ok(self.store(connection, scripts, None, None));
        }
        let infos = self
            .urls
            .iter()
            .map(|url| url.as_str().into_connection_info())
            .collect::<Result<Vec<_>, _>>()
            .map_err(config_error)?;
        connect::hosts_resolve(&infos, reach).await?;
        self.check_tls(connect::any_tls(&infos), "rediss://", self.urls.len() > 1)?;
        let mut nodes = None;
        let mut single = None;
        let connection = if self.urls.len() > 1 {
            let builder = redis::cluster::ClusterClient::builder(self.urls.clone())
                .connection_timeout(self.timeout.max(Duration::from_millis(500)))
                .response_timeout(self.timeout.max(Duration::from_secs(1)))
                .retries(2);
            #[cfg(feature = "redis-tls")]
            let builder = match &self.tls {
                Some(tls) => builder.certs(tls.certificates()?),
                None => builder,
            };
            let client = builder.build().map_err(config_error)?;
            let mut conn = client.get_async_connection().await.map_err(unavailable)?;
            if self.per_node {
                nodes = per_node(&scripts, &mut conn).await?;
            } else {
                tracing::info!("Redis Cluster: one script call per hash slot (per_node off)");
            }
            Connection::Cluster(conn)
        } else {
            #[cfg(feature = "redis-tls")]
            let client = match &self.tls {
                Some(tls) => tls::client(self.urls[0].as_str(), tls),
                None => redis::Client::open(self.urls[0].as_str()),
            }
            .map_err(config_error)?;
            #[cfg(not(feature = "redis-tls"))]
            let client = redis::Client::open(self.urls[0].as_str()).map_err(config_error)?;
            connect::first_connection(&client, reach).await?;
            single = Some(client.clone());
            let config = ConnectionManagerConfig::new()
                .set_connection_timeout(Some(self.timeout.max(Duration::from_millis(200))))
                .set_response_timeout(Some(self.timeout.max(Duration::from_secs(1))))
                .set_number_of_retries(1)
                .set_min_delay(Duration::from_millis(10))
                .set_max_delay(Duration::from_millis(200));
            Connection::Single(
                ConnectionManager::new_lazy_with_config(client, config).map_err(config_error)?,
            )
        };
        Ok(self.store(connection, scripts, nodes, single))
    }

    /// Checks the TLS settings against the URL (`tls`: it asks for TLS, as `scheme` says;
    /// `cluster`: it names several nodes), and loads the system's root certificates when TLS
    /// has no CA of its own.
    fn check_tls(&self, tls: bool, scheme: &str, cluster: bool) -> Result<(), StoreError> {
        #[cfg(feature = "redis-tls")]
        let own_ca = match &self.tls {
            Some(settings) if !tls => {
                return Err(StoreError::Config(format!(
                    "TLS settings ({settings:?}) are given, and the Redis URL is not {scheme}"
                )));
            }
            Some(settings) if settings.skips_hostnames() && cluster => {
                return Err(StoreError::Config(
                    "skipping host name verification is for one Redis, not a cluster".into(),
                ));
            }
            Some(settings) => settings.has_ca(),
            None => false,
        };
        #[cfg(not(feature = "redis-tls"))]
        let (own_ca, _, _) = (false, scheme, cluster);
        if tls && !own_ca {
            connect::trust_roots()?;
        }
        Ok(())
    }

    /// Checks a Sentinel URL's settings and finds its primary.
    async fn follow(
        &self,
        url: sentinel_url::SentinelUrl,
        reach: Duration,
    ) -> Result<sentinel::Follower, StoreError> {
        crate::store::reach::some_host_resolves("Redis Sentinel", &url.sentinels, reach).await?;
        #[cfg(not(feature = "redis-tls"))]
        if url.tls {
            return Err(StoreError::Config(
                "the Redis URL asks for TLS (rediss+sentinel://), and this build of tollgate has \
                 no TLS for Redis (feature redis-tls)"
                    .into(),
            ));
        }
        self.check_tls(url.tls, "rediss+sentinel://", false)?;
        sentinel::Follower::start(sentinel::Settings {
            url,
            #[cfg(feature = "redis-tls")]
            tls: self.tls.clone(),
            timeout: self.timeout,
        })
        .await
    }

    /// The store over `connection` (`single`: one Redis's client, for durability mode).
    fn store(
        self,
        connection: Connection,
        scripts: Scripts,
        nodes: Option<nodes::Nodes>,
        single: Option<redis::Client>,
    ) -> RedisStore {
        let inject_time = self.test_clock.is_some();
        let depth = self
            .max_in_flight
            .unwrap_or(if nodes.is_some() { 1 } else { 2 });
        let within = self.timeout.max(Duration::from_secs(1));
        let durable = self.wait.map(|_| Durable {
            decide: pool::Pool::new(depth, within),
            settle: pool::Pool::new(wait::SETTLE_CONNECTIONS, within),
            single,
        });
        let inner = Arc::new(Inner {
            connection,
            scripts,
            take_first: TakeFirst::new(),
            timeout: self.timeout,
            clock: self
                .test_clock
                .unwrap_or_else(|| Arc::new(MonotonicClock::new())),
            inject_time,
            deny_cache: self.deny_cache.then(|| DenyCache::new(1 << 16)),
            settle_ids: settle::SettleIds::new(),
            nodes,
            durable,
        });
        let batcher = self
            .batch
            .then(|| Arc::new(Batcher::new(Arc::clone(&inner), self.max_batch, depth)));
        RedisStore { inner, batcher }
    }
}

/// Loads the scripts batched per node on every node and reads the slot map; `None` (calls per
/// slot) when a node refuses the scripts (Redis before 7.0 knows no flags). Says which at info.
async fn per_node(
    scripts: &Scripts,
    conn: &mut ClusterConnection,
) -> Result<Option<nodes::Nodes>, StoreError> {
    for script in scripts.per_node() {
        // SCRIPT LOAD goes to every node.
        if let Err(e) = script.load_async(conn).await {
            if e.kind() == redis::ErrorKind::Io || e.is_timeout() || e.is_connection_dropped() {
                return Err(error::setup_error(e));
            }
            tracing::info!(
                "Redis Cluster: one script call per hash slot (a node refuses scripts with \
                 `allow-cross-slot-keys`, which need Redis 7.0: {e})"
            );
            return Ok(None);
        }
    }
    let nodes = nodes::Nodes::read(conn).await?;
    tracing::info!("Redis Cluster: one script call per node (allow-cross-slot-keys)");
    Ok(Some(nodes))
}

/// Whether `layout`, read from Redis, is the one this version writes.
fn same_layout(layout: &str) -> Result<(), StoreError> {
    if layout != keys::LAYOUT {
        return Err(StoreError::incompatible(format!(
            "this Redis holds tollgate layout {layout:?} ({}), this tollgate writes {:?}: \
             servers of two versions would keep separate buckets; upgrade them together",
            keys::LAYOUT_KEY,
            keys::LAYOUT
        )));
    }
    Ok(())
}

impl Inner {
    /// [`Store::ready`] in durability mode: the layout script (`layout`) on a connection of
    /// `pool`, then `WAIT`; fewer replicas acknowledging than asked is not ready, and fewer
    /// connected to the primary than asked a [`StoreError::Config`] (see [`Wait::not_ready`]).
    async fn ready_durable(
        &self,
        pool: &pool::Pool,
        wait: &Wait,
        layout: &redis::Cmd,
    ) -> Result<(), StoreError> {
        // Its caller, `ready`, tells the follower how it ended (`Inner::observe`).
        async {
            let mut lent = self.lend(pool).await?;
            let conn = lent.connection();
            let read: String = layout.query_async(conn).await.map_err(error::setup_error)?;
            same_layout(&read)?;
            let millis = u64::try_from(wait.timeout.as_millis()).unwrap_or(u64::MAX);
            let acked: i64 = redis::cmd("WAIT")
                .arg(wait.replicas)
                .arg(millis)
                .query_async(conn)
                .await
                .map_err(error::setup_error)?;
            if acked >= i64::from(wait.replicas) {
                lent.keep();
                return Ok(());
            }
            let info: String = redis::cmd("INFO")
                .arg("replication")
                .query_async(conn)
                .await
                .map_err(error::setup_error)?;
            lent.keep();
            let connected = info
                .lines()
                .find_map(|l| l.strip_prefix("connected_slaves:"))
                .and_then(|n| n.trim().parse().ok());
            Err(wait.not_ready(acked, connected))
        }
        .await
    }

    /// A connection of `pool` to the primary, of its own for one call (durability mode).
    async fn lend<'p>(&self, pool: &'p pool::Pool) -> Result<pool::Lent<'p>, StoreError> {
        let lent = match (&self.connection, &self.durable) {
            (Connection::Sentinel(f), _) => {
                let (at, client) = f.primary();
                pool.get(&at, client).await
            }
            (
                _,
                Some(Durable {
                    single: Some(client),
                    ..
                }),
            ) => pool.get("", || Ok(client.clone())).await,
            _ => {
                return Err(StoreError::incompatible(
                    "durability mode without one Redis or Sentinel",
                ));
            }
        };
        lent.map_err(error::store_error)
    }

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

    /// One call of the decision script on `conn` (see [`script::run`]).
    async fn script<D: AsRef<[Encoded]>>(
        &self,
        conn: &mut impl redis::aio::ConnectionLike,
        cluster: bool,
        keys_as: Keys,
        now_us: Option<u64>,
        decisions: &[D],
    ) -> Result<Option<Vec<Reply>>, StoreError> {
        script::run(
            &self.scripts,
            conn,
            cluster,
            keys_as,
            &self.take_first,
            now_us,
            decisions,
        )
        .await
    }

    /// One script call deciding `decisions` in order, bounded by the timeout unless its caller
    /// bounds it (`bounded` false); what it denies goes to the deny cache.
    async fn call(
        &self,
        decisions: &[Vec<Encoded>],
        bounded: bool,
    ) -> Result<Vec<Reply>, StoreError> {
        let sent = self.local_now();
        if self.inject_time {
            script::check_now(sent)?;
        }
        let now_us = self.inject_time.then(|| sent.as_u64() / 1000);
        let run = async {
            if let Some(durable) = &self.durable {
                let mut lent = self.lend(&durable.decide).await?;
                let replies = self
                    .script(lent.connection(), false, Keys::Declared, now_us, decisions)
                    .await?
                    .ok_or_else(|| StoreError::incompatible("the script refused its keys"))?;
                lent.keep();
                return Ok(replies);
            }
            match self.connection.clone() {
                Connection::Single(mut c) => self
                    .script(&mut c, false, Keys::Declared, now_us, decisions)
                    .await?
                    .ok_or_else(|| StoreError::incompatible("the script refused its keys")),
                Connection::Cluster(mut c) => match &self.nodes {
                    Some(nodes) => {
                        let per_node = self.script(&mut c, true, Keys::PerNode, now_us, decisions);
                        match per_node.await? {
                            Some(replies) => Ok(replies),
                            None => {
                                nodes.refresh(&mut c).await;
                                self.per_slot(&c, now_us, decisions).await
                            }
                        }
                    }
                    None => self
                        .script(&mut c, true, Keys::Declared, now_us, decisions)
                        .await?
                        .ok_or_else(|| StoreError::incompatible("the script refused its keys")),
                },
                Connection::Sentinel(f) => self
                    .script(
                        &mut f.connection(),
                        false,
                        Keys::Declared,
                        now_us,
                        decisions,
                    )
                    .await?
                    .ok_or_else(|| StoreError::incompatible("the script refused its keys")),
            }
        };
        let replies = self
            .observe(async {
                if bounded {
                    tokio::time::timeout(self.timeout, run)
                        .await
                        .unwrap_or(Err(StoreError::Timeout(self.timeout)))
                } else {
                    run.await
                }
            })
            .await?;
        if replies.len() != decisions.len() {
            return Err(StoreError::incompatible(
                "the tollgate script answered a different number of decisions",
            ));
        }
        if let Some(cache) = &self.deny_cache {
            // Only single checks are looked up in the cache, so only they are recorded.
            for (checks, reply) in decisions.iter().zip(&replies) {
                if let ([check], [decision], [hold]) =
                    (&checks[..], &reply.verdict.decisions[..], &reply.holds[..])
                {
                    cache.record(
                        &check.bucket,
                        &check.policy,
                        check.cost,
                        check.refill,
                        sent,
                        *hold,
                        decision,
                    );
                }
            }
        }
        Ok(replies)
    }
}

impl Inner {
    /// Runs `call`, and behind Sentinel tells the follower how it ended: a failure that may
    /// mean the primary moved asks the sentinels, and so does a call dropped before it ended
    /// (its caller timed out).
    async fn observe<T>(
        &self,
        call: impl std::future::Future<Output = Result<T, StoreError>>,
    ) -> Result<T, StoreError> {
        let Connection::Sentinel(follower) = &self.connection else {
            return call.await;
        };
        let watch = follower.watch();
        let result = call.await;
        watch.done();
        if let Err(e) = &result {
            follower.failed(e);
        }
        result
    }

    /// Decides `decisions`, whose call per node met a bucket its node does not serve, with one
    /// call per slot: the decisions of one slot in one call, in order (those of different
    /// slots share no bucket, so their order between them does not matter, and the calls go
    /// out together: a node's queue, one call at a time, waits for one round trip, not one per
    /// slot of its batch).
    async fn per_slot(
        &self,
        conn: &ClusterConnection,
        now_us: Option<u64>,
        decisions: &[Vec<Encoded>],
    ) -> Result<Vec<Reply>, StoreError> {
        // Every check of a decision shares its key's slot (`encode`).
        let slots: Vec<u16> = decisions
            .iter()
            .map(|d| d.first().map_or(0, |c| nodes::slot(&c.bucket)))
            .collect();
        let mut groups: Vec<Vec<usize>> = Vec::new();
        let mut done = vec![false; decisions.len()];
        for first in 0..decisions.len() {
            if done[first] {
                continue;
            }
            let group: Vec<usize> = (first..decisions.len())
                .filter(|&i| slots[i] == slots[first])
                .collect();
            for &i in &group {
                done[i] = true;
            }
            groups.push(group);
        }
        let calls = groups.iter().map(|group| {
            let mut conn = conn.clone();
            async move {
                let batch: Vec<&Vec<Encoded>> = group.iter().map(|&i| &decisions[i]).collect();
                let answers = self
                    .script(&mut conn, true, Keys::Declared, now_us, &batch)
                    .await?
                    .ok_or_else(|| StoreError::incompatible("the script refused its keys"))?;
                if answers.len() != group.len() {
                    return Err(StoreError::incompatible(
                        "the tollgate script answered a different number of decisions",
                    ));
                }
                Ok(answers)
            }
        });
        let answered = futures_util::future::try_join_all(calls).await?;
        let mut replies: Vec<Option<Reply>> = decisions.iter().map(|_| None).collect();
        for (group, answers) in groups.iter().zip(answered) {
            for (&i, answer) in group.iter().zip(answers) {
                replies[i] = Some(answer);
            }
        }
        Ok(replies.into_iter().flatten().collect())
    }
}

impl Runner for Inner {
    type Item = Vec<Encoded>;
    type Answer = Reply;

    fn run<'a>(
        &'a self,
        items: &'a [Vec<Encoded>],
    ) -> impl std::future::Future<Output = Result<Vec<Reply>, StoreError>> + Send + 'a {
        self.call(items, true)
    }

    /// `RedisStore::decide` bounds the wait of its caller, who makes this call.
    fn run_in_place<'a>(
        &'a self,
        items: &'a [Vec<Encoded>],
    ) -> impl std::future::Future<Output = Result<Vec<Reply>, StoreError>> + Send + 'a {
        self.call(items, false)
    }
}

impl RedisStore {
    /// Checks what can never be decided (on a cluster when `cluster`) before touching caches
    /// or the network.
    fn encode(checks: &[Check<'_>], cluster: bool) -> Result<Vec<Encoded>, CheckError> {
        Check::validate_all(checks)?;
        if cluster && checks.iter().any(|c| c.key != checks[0].key) {
            return Err(CheckError::Unsupported(
                "in Redis Cluster, the checks of one call must share a key (one hash slot)",
            ));
        }
        checks.iter().map(Encoded::new).collect()
    }
}

impl RedisStore {
    /// Whether this store decides a cluster's checks in one call per node (Redis 7.0 and
    /// [`per_node`](RedisStoreBuilder::per_node) on), rather than one per hash slot; false on
    /// one Redis.
    pub fn batches_per_node(&self) -> bool {
        self.inner.nodes.is_some()
    }

    /// Whether this store can decide `policy` (its numbers within the store's range), without
    /// a store at hand: what [`Store::supports`] answers, for checking a config file.
    pub fn supports_policy(policy: &crate::Policy) -> Result<(), crate::PolicyError> {
        encoded::params(policy).map(drop)
    }
}

impl Store for RedisStore {
    async fn decide(&self, checks: &[Check<'_>]) -> Result<Verdict, StoreError> {
        if checks.is_empty() {
            return Ok(Verdict::new(Vec::new()));
        }
        let encoded = RedisStore::encode(checks, self.inner.is_cluster())?;
        if let (Some(cache), [check]) = (&self.inner.deny_cache, &encoded[..])
            && let Some(denied) = cache.get(
                &check.bucket,
                &check.policy,
                check.cost,
                self.inner.local_now(),
            )
        {
            return Ok(Verdict::new(vec![denied]));
        }
        let reply = match &self.batcher {
            Some(batcher) => {
                // One Redis: one queue for every key. A cluster: a queue per node, or per key
                // when calls are per slot.
                let node = self
                    .inner
                    .nodes
                    .as_ref()
                    .map(|nodes| nodes.node_of(nodes::slot(&encoded[0].bucket)));
                let lane: &[u8] = match (&node, self.inner.is_cluster()) {
                    (Some(node), _) => node,
                    (None, true) => checks[0].key,
                    (None, false) => b"",
                };
                let timeout = self.inner.timeout;
                tokio::time::timeout(timeout, batcher.submit(lane, encoded))
                    .await
                    .unwrap_or(Err(StoreError::Timeout(timeout)))?
            }
            None => self
                .inner
                .call(std::slice::from_ref(&encoded), true)
                .await?
                .pop()
                .ok_or_else(|| StoreError::incompatible("the tollgate script answered nothing"))?,
        };
        if let Some(why) = reply.garbage {
            return Err(StoreError::incompatible(why));
        }
        if let Some(why) = reply.unsure {
            return Err(wait::short_error(&why));
        }
        Ok(reply.verdict)
    }

    /// Asks Redis, and checks that the layout this version writes is the one its other
    /// servers write: the key `tollgate:layout` holds it (set by the first server to ask).
    /// Servers of two layouts would keep separate buckets on one Redis, so a server that finds
    /// another layout there is not ready ([`StoreError::Incompatible`]) until they agree.
    /// Credentials refused or a DB index the server lacks are a [`StoreError::Config`] here
    /// (a decision meets them as an outage). Waiting for replicas, the layout's write is
    /// followed by `WAIT`: too few replicas acknowledging is not ready, and a primary with
    /// fewer replicas connected than asked a [`StoreError::Config`].
    async fn ready(&self) -> Result<(), StoreError> {
        let ping = async {
            let mut cmd = redis::cmd("EVAL");
            cmd.arg(LAYOUT_SCRIPT)
                .arg(1)
                .arg(keys::LAYOUT_KEY)
                .arg(keys::LAYOUT);
            if let (Some(durable), Some(wait)) = (&self.inner.durable, &self.inner.scripts.wait) {
                return self.inner.ready_durable(&durable.settle, wait, &cmd).await;
            }
            let reply: Result<String, _> = match self.inner.connection.clone() {
                Connection::Single(mut c) => cmd.query_async(&mut c).await,
                Connection::Cluster(mut c) => cmd.query_async(&mut c).await,
                Connection::Sentinel(f) => cmd.query_async(&mut f.connection()).await,
            };
            // Settings that can never work are said as such here, where a program asks
            // before it serves; a decision answers them as an outage.
            let layout = reply.map_err(error::setup_error)?;
            same_layout(&layout)
        };
        self.inner
            .observe(async {
                tokio::time::timeout(self.inner.timeout, ping)
                    .await
                    .unwrap_or(Err(StoreError::Timeout(self.inner.timeout)))
            })
            .await
    }

    fn name(&self) -> &'static str {
        "redis"
    }

    fn supports(&self, policy: &crate::Policy) -> Result<(), crate::PolicyError> {
        RedisStore::supports_policy(policy)
    }
}
