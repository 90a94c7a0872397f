//! Redis behind Sentinel: which node is the primary, asked of the sentinels, and a connection
//! to it that follows a failover.
//!
//! **Discovery.** The sentinels are asked in the URL's order, `SENTINEL
//! get-master-addr-by-name MASTER_NAME`; the first that names a node that says it is the
//! primary (`ROLE` answers `master`, as the Sentinel client specification asks: a sentinel may
//! lag behind a failover) wins. Building the store needs one such answer: a URL whose host
//! names do not resolve, a master name no sentinel that answered knows, and credentials a
//! sentinel refused are a [`StoreError::Config`]; no sentinel answering, or none naming a node
//! that says it is the primary, is asked again 10 times, 200 ms apart (each question bounded by
//! the store timeout, at least 1 s), then is a transient error.
//!
//! **Following.** The store holds one connection to the primary at a time (shared by every
//! call, as for one Redis). It asks the sentinels again
//!
//! - when a sentinel announces `+switch-master` for this name (a task stays subscribed to one
//!   sentinel at a time, moving to the next when its connection fails);
//! - when a call fails: Redis answers `READONLY` (the node was turned into a replica), the
//!   connection is lost, or the call timed out (a primary that froze);
//! - and once a second in any case, so that a message missed while no sentinel was reachable
//!   costs at most a second.
//!
//! When the sentinels name another node and it says it is the primary, the store connects to
//! it and later calls go there. The scripts are loaded on the new primary by the first call
//! that meets `NOSCRIPT`. Calls in flight on the old connection at the switch fail (a store
//! error, answered by the caller's fail policy) and are never sent again: one that reached the
//! old primary may have been applied there, and sending it again could charge twice.
//! Meanwhile every call is still bounded by the store's timeout.

use std::sync::{Arc, Weak};
use std::time::Duration;

use futures_util::StreamExt;
use parking_lot::RwLock;
use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::{ConnectionInfo, IntoConnectionInfo, RedisConnectionInfo, Value};
use tokio::sync::Notify;
use tokio::task::JoinHandle;

use super::error::setup_error;
use super::sentinel_url::{Auth, SentinelUrl};
use crate::StoreError;

/// How often the sentinels are asked even when nothing happened.
const PERIOD: Duration = Duration::from_secs(1);
/// The least time between two discoveries that failures ask for.
const PAUSE: Duration = Duration::from_millis(100);
/// How many times building asks the sentinels before it gives up on a transient failure.
const STARTING_TRIES: u32 = 10;

/// What a connection needs besides its address.
#[derive(Clone)]
pub(crate) struct Settings {
    pub(crate) url: SentinelUrl,
    /// The TLS files of the store's own, for both sides.
    #[cfg(feature = "redis-tls")]
    pub(crate) tls: Option<super::RedisTls>,
    /// The store's bound on one call: connections and answers get at least this.
    pub(crate) timeout: Duration,
}

impl Settings {
    /// The bound on one question to a sentinel or a node while discovering.
    fn ask_within(&self) -> Duration {
        self.timeout.max(Duration::from_secs(1))
    }

    /// A client of `host:port` with `auth`, over TLS when the URL says so.
    fn client(
        &self,
        host: &str,
        port: u16,
        auth: &Auth,
        db: i64,
    ) -> redis::RedisResult<redis::Client> {
        let scheme = if self.url.tls { "rediss" } else { "redis" };
        let host = if host.contains(':') {
            format!("[{host}]")
        } else {
            host.to_owned()
        };
        let mut redis = RedisConnectionInfo::default().set_db(db);
        if let Some(user) = &auth.username {
            redis = redis.set_username(user);
        }
        if let Some(password) = &auth.password {
            redis = redis.set_password(password);
        }
        let info: ConnectionInfo = format!("{scheme}://{host}:{port}")
            .as_str()
            .into_connection_info()?
            .set_redis_settings(redis);
        #[cfg(feature = "redis-tls")]
        if let Some(tls) = &self.tls {
            return super::tls::client(info, tls);
        }
        redis::Client::open(info)
    }

    /// A client of a sentinel.
    fn sentinel(&self, host: &str, port: u16) -> redis::RedisResult<redis::Client> {
        self.client(host, port, &self.url.sentinel, 0)
    }

    /// A client of a Redis node, with Redis's own credentials and the URL's DB.
    fn node(&self, host: &str, port: u16) -> redis::RedisResult<redis::Client> {
        self.client(host, port, &self.url.redis, self.url.db)
    }
}

/// What asking every sentinel found, when no primary came of it.
#[derive(Default)]
struct Asked {
    /// Sentinels that answered.
    answered: usize,
    /// Sentinels that said they know no master of that name.
    unknown: usize,
    /// The first failure that can never pass (a sentinel refused the credentials).
    never: Option<String>,
    /// The last failure that may pass.
    last: Option<String>,
}

/// Asks the sentinels which node is the primary, verifying that it says so.
async fn discover(settings: &Settings) -> Result<(String, u16), StoreError> {
    let mut asked = Asked::default();
    let within = settings.ask_within();
    for (host, port) in &settings.url.sentinels {
        let at = format!("the sentinel at {host}:{port}");
        let reply = async {
            let client = settings.sentinel(host, *port)?;
            let mut conn = client
                .get_multiplexed_async_connection_with_config(&config(within))
                .await?;
            redis::cmd("SENTINEL")
                .arg("get-master-addr-by-name")
                .arg(&settings.url.master)
                .query_async::<Value>(&mut conn)
                .await
        };
        let reply = match tokio::time::timeout(within, reply).await {
            Ok(Ok(reply)) => reply,
            Ok(Err(e)) => {
                match setup_error(e) {
                    StoreError::Config(why) => {
                        asked.never.get_or_insert(format!(
                            "{at}: {why} (the sentinels' user and password are the URL's \
                             sentinel_username and sentinel_password)"
                        ));
                    }
                    other => asked.last = Some(format!("{at}: {other}")),
                }
                continue;
            }
            Err(_) => {
                asked.last = Some(format!("{at} did not answer within {within:?}"));
                continue;
            }
        };
        asked.answered += 1;
        let Some((node_host, node_port)) = address(&reply) else {
            asked.unknown += 1;
            continue;
        };
        match role(settings, &node_host, node_port).await {
            Ok(role) if role == "master" => return Ok((node_host, node_port)),
            Ok(role) => {
                asked.last = Some(format!(
                    "{at} names {node_host}:{node_port} as the primary, which says it is a \
                     {role} (a failover under way)"
                ));
            }
            Err(e @ StoreError::Config(_)) => return Err(e),
            Err(e) => {
                asked.last = Some(format!(
                    "{at} names {node_host}:{node_port} as the primary: {e}"
                ));
            }
        }
    }
    Err(asked.error(&settings.url.master))
}

impl Asked {
    fn error(self, master: &str) -> StoreError {
        if let Some(never) = self.never {
            return StoreError::Config(never);
        }
        if self.answered > 0 && self.unknown == self.answered {
            return StoreError::Config(format!(
                "no sentinel that answered ({} of them) knows a master named {master:?}: check \
                 the name after the hosts in the URL (their `sentinel monitor NAME ...`)",
                self.answered
            ));
        }
        let why = self.last.unwrap_or_else(|| "no sentinel answered".into());
        StoreError::Unavailable(
            format!("Redis Sentinel named no primary for {master:?}: {why}").into(),
        )
    }
}

/// `[host, port]` from `get-master-addr-by-name`; `None` for nil (an unknown name).
fn address(reply: &Value) -> Option<(String, u16)> {
    let Value::Array(items) = reply else {
        return None;
    };
    let text = |v: &Value| match v {
        Value::BulkString(b) => String::from_utf8(b.clone()).ok(),
        Value::SimpleString(s) => Some(s.clone()),
        _ => None,
    };
    let host = text(items.first()?)?;
    let port = text(items.get(1)?)?.parse().ok()?;
    Some((host, port))
}

/// What the node at `host:port` says it is (`ROLE`).
async fn role(settings: &Settings, host: &str, port: u16) -> Result<String, StoreError> {
    let within = settings.ask_within();
    let ask = async {
        let client = settings.node(host, port)?;
        let mut conn = client
            .get_multiplexed_async_connection_with_config(&config(within))
            .await?;
        redis::cmd("ROLE").query_async::<Value>(&mut conn).await
    };
    let reply = tokio::time::timeout(within, ask)
        .await
        .map_err(|_| StoreError::Timeout(within))?
        .map_err(setup_error)?;
    match reply {
        Value::Array(items) => match items.first() {
            Some(Value::BulkString(b)) => Ok(String::from_utf8_lossy(b).into_owned()),
            Some(Value::SimpleString(s)) => Ok(s.clone()),
            _ => Err(StoreError::incompatible("ROLE answered no role")),
        },
        _ => Err(StoreError::incompatible("ROLE answered no array")),
    }
}

fn config(within: Duration) -> redis::AsyncConnectionConfig {
    redis::AsyncConnectionConfig::new()
        .set_connection_timeout(Some(within))
        .set_response_timeout(Some(within))
}

/// The primary's connection, switched when the sentinels name another.
struct Current {
    address: (String, u16),
    connection: ConnectionManager,
}

struct Shared {
    settings: Settings,
    current: RwLock<Current>,
    /// Woken by a failed call or a `+switch-master`: ask the sentinels now.
    wake: Notify,
}

/// The connection to the primary behind Sentinel, and the tasks that follow it. Dropping it
/// (with the last clone of the store) stops the tasks.
pub(crate) struct Follower {
    shared: Arc<Shared>,
    tasks: [JoinHandle<()>; 2],
}

impl Drop for Follower {
    fn drop(&mut self) {
        for task in &self.tasks {
            task.abort();
        }
    }
}

impl Follower {
    /// Discovers the primary and connects to it, then follows it.
    pub(crate) async fn start(settings: Settings) -> Result<Follower, StoreError> {
        // A failover under way, or sentinels slow to answer, pass: asked again for a while.
        let mut tries = STARTING_TRIES;
        let address = loop {
            match discover(&settings).await {
                Err(e) if e.is_transient() && tries > 1 => {
                    tries -= 1;
                    tokio::time::sleep(PAUSE * 2).await;
                }
                found => break found?,
            }
        };
        let connection = connect(&settings, &address)?;
        tracing::info!(
            "Redis Sentinel: the primary of {:?} is {}:{}",
            settings.url.master,
            address.0,
            address.1
        );
        let shared = Arc::new(Shared {
            settings,
            current: RwLock::new(Current {
                address,
                connection,
            }),
            wake: Notify::new(),
        });
        let tasks = [
            tokio::spawn(follow(Arc::downgrade(&shared))),
            tokio::spawn(listen(Arc::downgrade(&shared))),
        ];
        Ok(Follower { shared, tasks })
    }

    /// The connection to the primary as last discovered.
    pub(crate) fn connection(&self) -> ConnectionManager {
        self.shared.current.read().connection.clone()
    }

    /// Told of a call's failure: a transient one (`READONLY`, a connection lost, a timeout) may
    /// mean the primary moved, so the sentinels are asked now.
    pub(crate) fn failed(&self, e: &StoreError) {
        if e.is_transient() {
            self.shared.wake.notify_one();
        }
    }
}

/// A connection to the node at `address` (connecting lazily, and again by itself when it is
/// lost).
fn connect(settings: &Settings, address: &(String, u16)) -> Result<ConnectionManager, StoreError> {
    let client = settings
        .node(&address.0, address.1)
        .map_err(|e| StoreError::Config(format!("the Redis Sentinel URL cannot be used: {e}")))?;
    let config = ConnectionManagerConfig::new()
        .set_connection_timeout(Some(settings.timeout.max(Duration::from_millis(200))))
        .set_response_timeout(Some(settings.timeout.max(Duration::from_secs(1))))
        .set_number_of_retries(1)
        .set_min_delay(Duration::from_millis(10))
        .set_max_delay(Duration::from_millis(200));
    ConnectionManager::new_lazy_with_config(client, config).map_err(setup_error)
}

/// Asks the sentinels when woken or once a [`PERIOD`], and switches to the primary they name.
async fn follow(shared: Weak<Shared>) {
    loop {
        let Some(strong) = shared.upgrade() else {
            return;
        };
        let woken = tokio::time::timeout(PERIOD, strong.wake.notified())
            .await
            .is_ok();
        if let Ok(address) = discover(&strong.settings).await {
            switch(&strong, address);
        }
        drop(strong);
        if woken {
            // A burst of failed calls asks once, not once each.
            tokio::time::sleep(PAUSE).await;
        }
    }
}

/// Makes `address` the primary's, unless it already is.
fn switch(shared: &Shared, address: (String, u16)) {
    if shared.current.read().address == address {
        return;
    }
    let connection = match connect(&shared.settings, &address) {
        Ok(connection) => connection,
        Err(e) => {
            tracing::warn!("Redis Sentinel: cannot connect to the new primary: {e}");
            return;
        }
    };
    let mut current = shared.current.write();
    tracing::warn!(
        "Redis Sentinel: the primary of {:?} moved from {}:{} to {}:{}",
        shared.settings.url.master,
        current.address.0,
        current.address.1,
        address.0,
        address.1
    );
    *current = Current {
        address,
        connection,
    };
}

/// Stays subscribed to `+switch-master` on one sentinel at a time, waking [`follow`] when the
/// primary of this name moves.
async fn listen(shared: Weak<Shared>) {
    let mut next = 0;
    loop {
        let Some(strong) = shared.upgrade() else {
            return;
        };
        let sentinels = &strong.settings.url.sentinels;
        let (host, port) = sentinels[next % sentinels.len()].clone();
        next += 1;
        let settings = strong.settings.clone();
        drop(strong);
        let subscribed = async {
            let client = settings.sentinel(&host, port).ok()?;
            let within = settings.ask_within();
            let mut pubsub = tokio::time::timeout(within, client.get_async_pubsub())
                .await
                .ok()?
                .ok()?;
            tokio::time::timeout(within, pubsub.subscribe("+switch-master"))
                .await
                .ok()?
                .ok()?;
            Some(pubsub)
        };
        if let Some(pubsub) = subscribed.await {
            let mut messages = pubsub.into_on_message();
            // "+switch-master NAME OLD_HOST OLD_PORT NEW_HOST NEW_PORT"
            while let Some(message) = messages.next().await {
                let payload = message.get_payload_bytes();
                let name = payload.split(|&b| b == b' ').next().unwrap_or_default();
                match shared.upgrade() {
                    Some(strong) if name == strong.settings.url.master.as_bytes() => {
                        strong.wake.notify_one();
                    }
                    Some(_) => {}
                    None => return,
                }
            }
        }
        // The sentinel went away (or never answered): try the next one a moment later.
        tokio::time::sleep(PAUSE).await;
    }
}
