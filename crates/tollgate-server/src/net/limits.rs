//! What a listener allows its connections: how many at once, from one address, and how long
//! each may stay silent, take over a request, or live.

use std::time::Duration;

/// A listener's connection limits (`[http]`, `[grpc]`, `[resp]` and `[admin]` each have their
/// own).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConnLimits {
    /// Connections open at once; one more is refused at once, with a reason.
    pub max_connections: usize,
    /// Connections open at once from one client address (an IPv6 client's /64); `None`: no
    /// cap but the listener's.
    pub max_connections_per_ip: Option<usize>,
    /// How long a new connection may stay silent (and take over its TLS handshake and its
    /// first request's head), and how long a request's body or a RESP command may stall
    /// mid-way.
    pub request_timeout: Duration,
    /// How long a connection may stay idle between requests.
    pub idle_timeout: Duration,
    /// HTTP only: after this long a connection is asked to go away (HTTP/2 `GOAWAY`, HTTP/1.1
    /// `Connection: close`), so that clients spread over servers added since.
    pub max_age: Duration,
    /// HTTP only: how long the requests in flight get to finish after `max_age`.
    pub max_age_grace: Duration,
    /// HTTP/2 only: a `PING` is sent after this long without a frame from the client, and the
    /// connection closed if its ack does not come within [`KEEPALIVE_TIMEOUT`].
    pub keepalive_interval: Duration,
}

/// `at` + `d`, or a time later than any connection lives when that is past the end of time (a
/// timeout of `"10000000000000000000s"` is one that never comes, not a panic).
pub fn after(at: tokio::time::Instant, d: Duration) -> tokio::time::Instant {
    at.checked_add(d.min(NEVER))
        .or_else(|| at.checked_add(NEVER))
        .unwrap_or(at)
}

/// A timeout that never comes: about thirty years.
pub const NEVER: Duration = Duration::from_secs(30 * 365 * 86_400);

/// How long an HTTP/2 keep-alive `PING` waits for its ack.
pub const KEEPALIVE_TIMEOUT: Duration = Duration::from_secs(20);

/// The defaults of a listener: `max_connections` open at once, `idle` between requests.
pub const fn defaults(max_connections: usize, idle: Duration) -> ConnLimits {
    ConnLimits {
        max_connections,
        max_connections_per_ip: None,
        request_timeout: Duration::from_secs(10),
        idle_timeout: idle,
        // As envoyproxy/ratelimit's `GRPC_MAX_CONNECTION_AGE` and `..._AGE_GRACE`.
        max_age: Duration::from_secs(24 * 3600),
        max_age_grace: Duration::from_secs(3600),
        keepalive_interval: Duration::from_secs(60),
    }
}

/// The HTTP and admin listeners' defaults.
pub const HTTP: ConnLimits = defaults(10_000, Duration::from_secs(60));
/// The gRPC listener's defaults: Envoy keeps a few long-lived connections.
pub const GRPC: ConnLimits = defaults(10_000, Duration::from_secs(300));
/// The RESP listener's defaults.
pub const RESP: ConnLimits = defaults(4096, Duration::from_secs(300));

/// What a config file sets of a listener's limits; `None` where it is silent.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ConnGiven {
    /// `max_connections`.
    pub max_connections: Option<usize>,
    /// `max_connections_per_ip`.
    pub max_connections_per_ip: Option<usize>,
    /// `request_timeout`.
    pub request_timeout: Option<Duration>,
    /// `idle_timeout`.
    pub idle_timeout: Option<Duration>,
    /// `max_connection_age`.
    pub max_age: Option<Duration>,
    /// `max_connection_age_grace`.
    pub max_age_grace: Option<Duration>,
    /// `keepalive_interval`.
    pub keepalive_interval: Option<Duration>,
}

impl ConnLimits {
    /// These limits with what `given` sets in their place.
    pub fn with(self, given: &ConnGiven) -> ConnLimits {
        ConnLimits {
            max_connections: given.max_connections.unwrap_or(self.max_connections),
            max_connections_per_ip: given.max_connections_per_ip.or(self.max_connections_per_ip),
            request_timeout: given.request_timeout.unwrap_or(self.request_timeout),
            idle_timeout: given.idle_timeout.unwrap_or(self.idle_timeout),
            max_age: given.max_age.unwrap_or(self.max_age),
            max_age_grace: given.max_age_grace.unwrap_or(self.max_age_grace),
            keepalive_interval: given.keepalive_interval.unwrap_or(self.keepalive_interval),
        }
    }
}
