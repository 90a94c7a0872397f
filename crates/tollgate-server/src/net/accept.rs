//! Accepting connections under a listener's caps: at most `max_connections` open at once and
//! at most `max_connections_per_ip` from one address. A connection over a cap is accepted and
//! handed back as a [`OverCap`], so that the front end tells the client why in its own protocol
//! and closes it, rather than leaving it in the kernel's backlog where an honest client would
//! wait behind it. Failed accepts (out of file descriptors, most often) are counted, logged at
//! `warn` at most once a [`WARN_EVERY`], and followed by a short back-off.

use std::collections::HashMap;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use prometheus::{IntCounter, IntGauge};
use tokio::net::{TcpListener, UnixListener};

use super::stream::Conn;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::time::Instant;

use super::limits::ConnLimits;
use crate::metrics::Metrics;

/// Connections being refused at once; past it, one over a cap is closed without a word (a
/// refusal writes one short answer, so these are brief).
pub const REFUSING_AT_ONCE: usize = 256;
/// The longest a refused connection is held to be told why.
pub const REFUSAL_TIME: Duration = Duration::from_secs(1);
/// Failed accepts are logged at most this often (the rest are counted).
pub const WARN_EVERY: Duration = Duration::from_secs(10);

/// Which cap a refused connection is over.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Over {
    /// The listener's `max_connections`.
    Listener,
    /// `max_connections_per_ip`.
    Address,
}

impl Over {
    /// The metrics label, and the config key the operator can raise.
    pub fn key(self) -> &'static str {
        match self {
            Over::Listener => "max_connections",
            Over::Address => "max_connections_per_ip",
        }
    }
}

/// What [`Acceptor::accept`] hands back.
pub enum Accepted {
    /// Under every cap: serve it. Dropping it frees its place.
    Admitted(Admitted),
    /// Over a cap: tell the client (within [`REFUSAL_TIME`]) and close.
    OverCap(OverCap),
}

/// A connection under the caps.
pub struct Admitted {
    /// The connection.
    pub stream: Conn,
    /// Its place under the caps, freed when the connection is dropped.
    pub place: Place,
    /// The TCP peer's address: failed authentications are counted under it.
    pub peer: IpAddr,
}

/// A connection over a cap.
pub struct OverCap {
    /// The connection.
    pub stream: Conn,
    /// The cap it is over.
    pub over: Over,
    _refusing: OwnedSemaphorePermit,
}

/// A connection's place under its listener's caps.
pub struct Place {
    _slot: OwnedSemaphorePermit,
    address: Option<(IpAddr, Arc<PerAddress>)>,
    open: IntGauge,
}

impl Drop for Place {
    fn drop(&mut self) {
        self.open.dec();
        if let Some((ip, counts)) = &self.address {
            counts.leave(*ip);
        }
    }
}

/// The address a client's connections are counted under: its IPv4 address (an IPv4-mapped
/// IPv6 one as IPv4), or its IPv6 /64, which one host commonly holds whole (as its failed
/// authentications are).
fn client(peer: IpAddr) -> IpAddr {
    crate::auth::client_address(peer)
}

/// Connections open per client address; an entry exists only while one is open, so there are
/// never more than the listener's `max_connections`.
struct PerAddress {
    max: usize,
    open: Mutex<HashMap<IpAddr, usize>>,
}

impl PerAddress {
    fn enter(&self, ip: IpAddr) -> bool {
        let mut open = self.open.lock().unwrap_or_else(PoisonError::into_inner);
        let n = open.entry(ip).or_insert(0);
        if *n >= self.max {
            return false;
        }
        *n += 1;
        true
    }

    fn leave(&self, ip: IpAddr) {
        let mut open = self.open.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(n) = open.get_mut(&ip) {
            *n -= 1;
            if *n == 0 {
                open.remove(&ip);
            }
        }
    }
}

/// A listener's series.
#[derive(Clone)]
pub struct ListenerMetrics {
    open: IntGauge,
    accepted: IntCounter,
    refused: [IntCounter; 2],
    accept_errors: IntCounter,
    /// Connections closed for staying silent or idle too long, or stalling a request.
    pub timed_out: IntCounter,
}

impl ListenerMetrics {
    /// The series of the listener named `listener` (`http`, `grpc`, `resp`, `admin`).
    pub fn new(metrics: &Metrics, listener: &str) -> ListenerMetrics {
        let c = &metrics.connections;
        ListenerMetrics {
            open: c.open.with_label_values(&[listener]),
            accepted: c.accepted.with_label_values(&[listener]),
            refused: [Over::Listener, Over::Address]
                .map(|over| c.refused.with_label_values(&[listener, over.key()])),
            accept_errors: c.accept_errors.with_label_values(&[listener]),
            timed_out: c.timed_out.with_label_values(&[listener]),
        }
    }
}

/// A listener with its caps.
pub struct Acceptor {
    listener: Listening,
    name: &'static str,
    slots: Arc<Semaphore>,
    refusing: Arc<Semaphore>,
    per_address: Option<Arc<PerAddress>>,
    metrics: ListenerMetrics,
    last_warned: Option<Instant>,
    unlogged_errors: u64,
}

/// What an [`Acceptor`] accepts on.
enum Listening {
    Tcp(TcpListener),
    Unix(UnixListener),
}

impl Acceptor {
    /// Accepts on `listener` (named `name` in logs and metrics) under `limits`.
    pub fn new(
        listener: TcpListener,
        name: &'static str,
        limits: &ConnLimits,
        metrics: &Metrics,
    ) -> Acceptor {
        Acceptor::on(Listening::Tcp(listener), name, limits, metrics)
    }

    /// Accepts on the Unix socket `listener` under `limits`; its clients have no address, so
    /// `max_connections_per_ip` does not apply (`max_connections` does).
    pub fn unix(
        listener: UnixListener,
        name: &'static str,
        limits: &ConnLimits,
        metrics: &Metrics,
    ) -> Acceptor {
        let limits = ConnLimits {
            max_connections_per_ip: None,
            ..*limits
        };
        Acceptor::on(Listening::Unix(listener), name, &limits, metrics)
    }

    fn on(
        listener: Listening,
        name: &'static str,
        limits: &ConnLimits,
        metrics: &Metrics,
    ) -> Acceptor {
        Acceptor {
            listener,
            name,
            slots: Arc::new(Semaphore::new(limits.max_connections.max(1))),
            refusing: Arc::new(Semaphore::new(REFUSING_AT_ONCE)),
            per_address: limits.max_connections_per_ip.map(|max| {
                Arc::new(PerAddress {
                    max: max.max(1),
                    open: Mutex::new(HashMap::new()),
                })
            }),
            metrics: ListenerMetrics::new(metrics, name),
            last_warned: None,
            unlogged_errors: 0,
        }
    }

    /// Where it listens (a Unix socket has no such address).
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        match &self.listener {
            Listening::Tcp(listener) => listener.local_addr(),
            Listening::Unix(_) => Err(io::Error::other("a Unix socket has no IP address")),
        }
    }

    /// The listener's series.
    pub fn metrics(&self) -> &ListenerMetrics {
        &self.metrics
    }

    /// The next connection, admitted or to be refused. Never fails: a failed accept is
    /// logged and counted, and accepting goes on after a short back-off.
    pub async fn accept(&mut self) -> Accepted {
        let mut backoff = Duration::from_millis(5);
        loop {
            let accepted = match &self.listener {
                Listening::Tcp(listener) => listener.accept().await.map(|(stream, peer)| {
                    let _ = stream.set_nodelay(true);
                    (Conn::Tcp(stream), peer.ip())
                }),
                // A local client: failed authentications count under the loopback address.
                Listening::Unix(listener) => listener
                    .accept()
                    .await
                    .map(|(stream, _)| (Conn::Unix(stream), IpAddr::from([127, 0, 0, 1]))),
            };
            match accepted {
                Ok((stream, peer)) => {
                    if let Some(accepted) = self.admit(stream, peer) {
                        return accepted;
                    }
                }
                Err(e) => {
                    self.failed(&e);
                    // Out of file descriptors does not fix itself at once.
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(Duration::from_secs(1));
                }
            }
        }
    }

    /// `None`: over a cap with too many refusals under way already, so closed at once.
    fn admit(&mut self, stream: Conn, peer: IpAddr) -> Option<Accepted> {
        self.metrics.accepted.inc();
        let over = match Arc::clone(&self.slots).try_acquire_owned() {
            Err(_) => Err(Over::Listener),
            Ok(slot) => match &self.per_address {
                Some(counts) if !counts.enter(client(peer)) => Err(Over::Address),
                counts => Ok((slot, counts.clone().map(|c| (client(peer), c)))),
            },
        };
        match over {
            Ok((slot, address)) => {
                self.metrics.open.inc();
                let place = Place {
                    _slot: slot,
                    address,
                    open: self.metrics.open.clone(),
                };
                Some(Accepted::Admitted(Admitted {
                    stream,
                    place,
                    peer,
                }))
            }
            Err(over) => {
                self.metrics.refused[over as usize].inc();
                let refusing = Arc::clone(&self.refusing).try_acquire_owned().ok()?;
                Some(Accepted::OverCap(OverCap {
                    stream,
                    over,
                    _refusing: refusing,
                }))
            }
        }
    }

    fn failed(&mut self, e: &io::Error) {
        self.metrics.accept_errors.inc();
        let now = Instant::now();
        if self
            .last_warned
            .is_some_and(|at| now.duration_since(at) < WARN_EVERY)
        {
            self.unlogged_errors += 1;
            return;
        }
        tracing::warn!(
            listener = self.name,
            error = %e,
            since_last_logged = self.unlogged_errors,
            "accepting a connection failed (out of file descriptors? raise `ulimit -n`, or \
             lower max_connections); retrying"
        );
        self.last_warned = Some(now);
        self.unlogged_errors = 0;
    }
}
