//! Redis behind Sentinel: which node is the primary, asked of the sentinels, and a connection
//! to it that follows a failover.
//!
//! **Discovery.** The sentinels are asked all at once, `SENTINEL get-master-addr-by-name
//! MASTER_NAME`, the one that last answered first; the first that names a node that says it is
//! the primary (`ROLE` answers `master`, as the Sentinel client specification asks: a sentinel
//! may lag behind a failover) wins. Each question is bounded by [`ASK_WITHIN`], not by the
//! store timeout: a sentinel that does not answer costs a discovery at most that. Building the
//! store needs one such answer: a master name no sentinel that answered knows, and credentials
//! a sentinel refused are a [`StoreError::Config`]; no sentinel answering, or none naming a
//! node that says it is the primary, is asked again 200 ms apart for [`START_WITHIN`], then is
//! a transient error.
//!
//! **Following.** The store holds one connection to the primary at a time (shared by every
//! call, as for one Redis). It asks the sentinels again
//!
//! - when a sentinel announces `+switch-master` for this name (a task stays subscribed to one
//!   sentinel at a time, moving to the next when its connection fails or it does not answer a
//!   `PING` after [`LIVENESS`] of silence);
//! - when a call fails in a way that says the primary may have moved: Redis answers `READONLY`
//!   (the node was turned into a replica), the connection is lost, or the call timed out (a
//!   primary that froze), also a call dropped by its caller's timeout;
//! - and once a second in any case, so that a message missed while no sentinel was reachable
//!   costs at most a second: this asks the last good sentinel on a connection kept open, and
//!   `ROLE` only of a node other than the one followed.
//!
//! When the sentinels name another node and it says it is the primary, the store connects to
//! it and later calls go there. The scripts are loaded on the new primary by the first call
//! that meets `NOSCRIPT`. Calls in flight on the old connection at the switch fail (a store
//! error, answered by the caller's fail policy) and are never sent again: one that reached the
//! old primary may have been applied there, and sending it again could charge twice.
//! Meanwhile every call is still bounded by the store's timeout.

use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt;
use futures_util::stream::FuturesUnordered;
use parking_lot::RwLock;
use redis::aio::{ConnectionManager, ConnectionManagerConfig, MultiplexedConnection};
use redis::{
    ConnectionInfo, ErrorKind, IntoConnectionInfo, RedisConnectionInfo, ServerErrorKind, Value,
};
use tokio::sync::Notify;
use tokio::task::JoinHandle;
use tokio::time::Instant;

use super::error::setup_error;
use super::sentinel_url::{Auth, SentinelUrl};
use crate::StoreError;

/// How often the sentinels are asked even when nothing happened.
const PERIOD: Duration = Duration::from_secs(1);
/// The least time between two discoveries that failures ask for.
const PAUSE: Duration = Duration::from_millis(100);
/// The bound on one question while discovering (to a sentinel, or `ROLE` to the node it
/// names), connecting included: fixed, not the store's timeout, so that a sentinel that does
/// not answer costs a discovery at most this.
const ASK_WITHIN: Duration = Duration::from_millis(500);
/// How long building asks the sentinels again (200 ms apart) before it gives up on a
/// transient failure.
const START_WITHIN: Duration = Duration::from_secs(5);
/// How long the `+switch-master` subscription may stay silent before its sentinel is asked a
/// `PING` (one that does not answer within [`ASK_WITHIN`] is left for the next).
const LIVENESS: Duration = Duration::from_secs(3);

/// What a connection needs besides its address.
#[derive(Clone)]
pub(crate) struct Settings {
    pub(crate) url: SentinelUrl,
    /// The TLS files of the store's own, for both sides.
    #[cfg(feature = "redis-tls")]
    pub(crate) tls: Option<super::RedisTls>,
    /// The store's bound on one call: the primary's connection gets at least this.
    pub(crate) timeout: Duration,
}

impl Settings {
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

/// What discovery keeps between rounds: the sentinel that last named the primary (asked first,
/// as the Sentinel client specification asks) and a connection to it, so that the periodic
/// question opens none.
#[derive(Default)]
struct Sentinels {
    /// Its index in the URL's list.
    last_good: usize,
    /// The connection to it, while it works.
    kept: Option<MultiplexedConnection>,
}

/// What one sentinel's answer came to.
enum Answer {
    /// It named a node that says it is the primary (or the node already followed, trusted).
    Primary((String, u16)),
    /// It knows no master of that name.
    Unknown,
    /// It answered, and the node it named is not (or could not be checked to be) the primary.
    Named(String),
    /// It did not answer.
    Silent(String),
    /// A failure that can never pass (credentials refused).
    Never(String),
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

/// Asks the sentinel at `index` (on `kept`, its connection, if any) which node is the primary,
/// and checks with `ROLE` that the node says so, unless it is `trusted`. Each question is
/// bounded by [`ASK_WITHIN`]. Gives back the connection when the sentinel answered.
async fn ask(
    settings: &Settings,
    index: usize,
    kept: Option<MultiplexedConnection>,
    trusted: Option<&(String, u16)>,
) -> (usize, Option<MultiplexedConnection>, Answer) {
    let (host, port) = &settings.url.sentinels[index];
    let at = format!("the sentinel at {host}:{port}");
    let question = async {
        let mut conn = match kept {
            Some(conn) => conn,
            None => {
                settings
                    .sentinel(host, *port)?
                    .get_multiplexed_async_connection_with_config(&config())
                    .await?
            }
        };
        let reply = redis::cmd("SENTINEL")
            .arg("get-master-addr-by-name")
            .arg(&settings.url.master)
            .query_async::<Value>(&mut conn)
            .await?;
        Ok::<_, redis::RedisError>((reply, conn))
    };
    let (reply, conn) = match tokio::time::timeout(ASK_WITHIN, question).await {
        Ok(Ok(answered)) => answered,
        Ok(Err(e)) => {
            let answer = match setup_error(e) {
                StoreError::Config(why) => Answer::Never(format!(
                    "{at}: {why} (the sentinels' user and password are the URL's \
                     sentinel_username and sentinel_password)"
                )),
                other => Answer::Silent(format!("{at}: {other}")),
            };
            return (index, None, answer);
        }
        Err(_) => {
            let answer = Answer::Silent(format!("{at} did not answer within {ASK_WITHIN:?}"));
            return (index, None, answer);
        }
    };
    let Some(named) = address(&reply) else {
        return (index, Some(conn), Answer::Unknown);
    };
    if trusted == Some(&named) {
        return (index, Some(conn), Answer::Primary(named));
    }
    let (node_host, node_port) = &named;
    let answer = match role(settings, node_host, *node_port).await {
        Ok(role) if role == "master" => Answer::Primary(named),
        Ok(role) => Answer::Named(format!(
            "{at} names {node_host}:{node_port} as the primary, which says it is a {role} (a \
             failover under way)"
        )),
        Err(StoreError::Config(why)) => Answer::Never(why),
        Err(e) => Answer::Named(format!(
            "{at} names {node_host}:{node_port} as the primary: {e}"
        )),
    };
    (index, Some(conn), answer)
}

/// Asks every sentinel at once, the last good one first, which node is the primary; the first
/// named node that says it is the primary wins (a node `trusted` needs not say so). Bounded by
/// two questions' [`ASK_WITHIN`].
async fn discover(
    settings: &Settings,
    sentinels: &mut Sentinels,
    trusted: Option<&(String, u16)>,
) -> Result<(String, u16), StoreError> {
    let count = settings.url.sentinels.len();
    let first = sentinels.last_good % count;
    let mut kept = sentinels.kept.take();
    let mut asking: FuturesUnordered<_> = (0..count)
        .map(|i| (first + i) % count)
        .map(|index| {
            let conn = if index == first { kept.take() } else { None };
            ask(settings, index, conn, trusted)
        })
        .collect();
    let mut asked = Asked::default();
    while let Some((index, conn, answer)) = asking.next().await {
        if index == first {
            sentinels.kept = conn.clone();
        }
        match answer {
            Answer::Primary(address) => {
                sentinels.last_good = index;
                sentinels.kept = conn;
                return Ok(address);
            }
            Answer::Unknown => {
                asked.answered += 1;
                asked.unknown += 1;
            }
            Answer::Named(why) => {
                asked.answered += 1;
                asked.last = Some(why);
            }
            Answer::Silent(why) => asked.last = Some(why),
            Answer::Never(why) => {
                asked.never.get_or_insert(why);
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
    let ask = async {
        let client = settings.node(host, port)?;
        let mut conn = client
            .get_multiplexed_async_connection_with_config(&config())
            .await?;
        redis::cmd("ROLE").query_async::<Value>(&mut conn).await
    };
    let reply = tokio::time::timeout(ASK_WITHIN, ask)
        .await
        .map_err(|_| StoreError::Timeout(ASK_WITHIN))?
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

fn config() -> redis::AsyncConnectionConfig {
    redis::AsyncConnectionConfig::new()
        .set_connection_timeout(Some(ASK_WITHIN))
        .set_response_timeout(Some(ASK_WITHIN))
}

/// The primary's connection, switched when the sentinels name another.
struct Current {
    address: (String, u16),
    connection: ConnectionManager,
}

struct Shared {
    settings: Settings,
    current: RwLock<Current>,
    /// Woken by a call that met a sign of a move, or by a `+switch-master`: ask the sentinels
    /// now.
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
        let deadline = Instant::now() + START_WITHIN;
        let mut sentinels = Sentinels::default();
        let address = loop {
            match discover(&settings, &mut sentinels, None).await {
                Err(e) if e.is_transient() && Instant::now() + PAUSE * 2 < deadline => {
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
        // The tasks hold the shared state; dropping the follower aborts them.
        let tasks = [
            tokio::spawn(follow(shared.clone(), sentinels)),
            tokio::spawn(listen(shared.clone())),
        ];
        Ok(Follower { shared, tasks })
    }

    /// The connection to the primary as last discovered.
    pub(crate) fn connection(&self) -> ConnectionManager {
        self.shared.current.read().connection.clone()
    }

    /// The primary's address as last discovered, as `host:port` (durability mode's pool keys
    /// its connections by it), and a client of it.
    pub(crate) fn primary(&self) -> (String, impl FnOnce() -> redis::RedisResult<redis::Client>) {
        let (host, port) = self.shared.current.read().address.clone();
        let at = format!("{host}:{port}");
        let shared = Arc::clone(&self.shared);
        (at, move || shared.settings.node(&host, port))
    }

    /// Told of a call's failure: one that may mean the primary moved (`READONLY`: the node was
    /// turned into a replica; the connection lost or refused; a timeout: a primary that froze)
    /// asks the sentinels now. Other errors (`NOREPLICAS`, `BUSY`, `OOM`, a script error)
    /// come from a primary that answered, and ask nothing.
    pub(crate) fn failed(&self, e: &StoreError) {
        if may_have_moved(e) {
            self.shared.wake.notify_one();
        }
    }

    /// A guard that asks the sentinels if it is dropped before [`Watch::done`]: a call dropped
    /// by its caller (who timed out) reports its timeout so.
    pub(crate) fn watch(&self) -> Watch<'_> {
        Watch(Some(self))
    }
}

/// See [`Follower::watch`].
pub(crate) struct Watch<'a>(Option<&'a Follower>);

impl Watch<'_> {
    /// The call ended (and its error, if any, was told to [`Follower::failed`]).
    pub(crate) fn done(mut self) {
        self.0 = None;
    }
}

impl Drop for Watch<'_> {
    fn drop(&mut self) {
        if let Some(follower) = self.0 {
            follower.shared.wake.notify_one();
        }
    }
}

/// Whether `e` is a sign that the primary may have moved.
fn may_have_moved(e: &StoreError) -> bool {
    match e {
        StoreError::Timeout(_) => true,
        StoreError::Unavailable(e) => e.downcast_ref::<redis::RedisError>().is_some_and(|e| {
            e.kind() == ErrorKind::Server(ServerErrorKind::ReadOnly)
                || e.code() == Some("READONLY")
                || e.is_io_error()
                || e.is_connection_dropped()
                || e.is_connection_refusal()
                || e.is_timeout()
        }),
        _ => false,
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
///
/// The periodic question goes to the last good sentinel on its kept connection, and a node it
/// names that is the one followed is not asked `ROLE`: nothing happened, so nothing is opened.
/// When it names another node, or does not answer, every sentinel is asked. When woken (a
/// call met a sign of a move), every sentinel is asked and every node named must say it is
/// the primary: the one followed may just have been turned into a replica.
async fn follow(shared: Arc<Shared>, mut sentinels: Sentinels) {
    let settings = &shared.settings;
    loop {
        let woken = tokio::time::timeout(PERIOD, shared.wake.notified())
            .await
            .is_ok();
        let current = shared.current.read().address.clone();
        let found = if woken {
            discover(settings, &mut sentinels, None).await
        } else {
            let kept = sentinels.kept.take();
            match ask(settings, sentinels.last_good, kept, Some(&current)).await {
                (_, conn, Answer::Primary(address)) => {
                    sentinels.kept = conn;
                    Ok(address)
                }
                (_, conn, _) => {
                    sentinels.kept = conn;
                    discover(settings, &mut sentinels, Some(&current)).await
                }
            }
        };
        if let Ok(address) = found {
            switch(&shared, address);
        }
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
/// primary of this name moves. A subscription silent for [`LIVENESS`] asks its sentinel a
/// `PING`; one that does not answer (frozen, or cut off without the connection closing) is
/// left for the next sentinel.
async fn listen(shared: Arc<Shared>) {
    let settings = &shared.settings;
    let sentinels = &settings.url.sentinels;
    let mut next = 0;
    loop {
        let (host, port) = &sentinels[next % sentinels.len()];
        next += 1;
        let subscribed = async {
            let client = settings.sentinel(host, *port).ok()?;
            let mut pubsub = tokio::time::timeout(ASK_WITHIN, client.get_async_pubsub())
                .await
                .ok()?
                .ok()?;
            tokio::time::timeout(ASK_WITHIN, pubsub.subscribe("+switch-master"))
                .await
                .ok()?
                .ok()?;
            Some(pubsub.split())
        };
        if let Some((mut sink, mut messages)) = subscribed.await {
            loop {
                match tokio::time::timeout(LIVENESS, messages.next()).await {
                    // "+switch-master NAME OLD_HOST OLD_PORT NEW_HOST NEW_PORT"
                    Ok(Some(message)) => {
                        let payload = message.get_payload_bytes();
                        let name = payload.split(|&b| b == b' ').next().unwrap_or_default();
                        if name == settings.url.master.as_bytes() {
                            shared.wake.notify_one();
                        }
                    }
                    Ok(None) => break,
                    Err(_) => {
                        let ping = tokio::time::timeout(ASK_WITHIN, sink.ping::<Value>()).await;
                        if !matches!(ping, Ok(Ok(_))) {
                            tracing::debug!(
                                "Redis Sentinel: the sentinel at {host}:{port} did not answer a \
                                 PING; subscribing to the next"
                            );
                            break;
                        }
                    }
                }
            }
        }
        // The sentinel went away (or never answered): try the next one a moment later.
        tokio::time::sleep(PAUSE).await;
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use redis::{ErrorKind, RedisError, ServerErrorKind};

    use super::may_have_moved;
    use crate::StoreError;
    use crate::store::redis::error::store_error;

    #[test]
    fn only_signs_of_a_move_ask_the_sentinels() {
        let server = |code: &str| -> StoreError {
            let e: RedisError = redis::make_extension_error(code.to_owned(), Some("x".into()));
            store_error(e)
        };
        // The primary answered: it did not move.
        for code in ["NOREPLICAS", "BUSY", "OOM"] {
            let e = server(code);
            assert!(e.is_transient() && !may_have_moved(&e), "{code}: {e}");
        }
        let readonly: RedisError = (
            ServerErrorKind::ReadOnly.into(),
            "You can't write against a read only replica.",
        )
            .into();
        assert!(may_have_moved(&store_error(readonly)));
        let lost: RedisError = std::io::Error::from(std::io::ErrorKind::ConnectionReset).into();
        assert!(may_have_moved(&store_error(lost)));
        assert!(may_have_moved(&StoreError::Timeout(Duration::from_millis(
            50
        ))));
        let script: RedisError = (ErrorKind::UnexpectedReturnType, "no").into();
        assert!(!may_have_moved(&store_error(script)));
    }
}
