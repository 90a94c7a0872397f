//! The servers measured: the same `GET /hello` handler, bare or behind tollgate's middleware,
//! and `tollgate serve` on its own listener answering `POST /v1/check` by a policy's name, in
//! plaintext and over TLS.

use std::fmt;

/// The middleware's goal: with it, at least this fraction of the bare handler's requests/s
/// (raised from 0.9 once the middleware reached it).
pub const GOAL_RATIO: f64 = 0.95;

/// What serves `GET /hello`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Variant {
    /// The bare axum handler: the throughput the others are a ratio of.
    Bare,
    /// The bare handler answering with the two `RateLimit` headers the middleware adds, fixed:
    /// what sending them costs, without deciding anything.
    BareHeaders,
    /// Behind `TollgateLayer` on the memory store, keyed by the client IP (`ConnectInfo`).
    Tollgate,
    /// The same, keyed by the `x-api-key` header, which the load spreads over many keys.
    TollgateKeys,
    /// `tollgate serve` on its own HTTP listener (memory store, a configured policy):
    /// `POST /v1/check` with `{"policy": "allow_all", "key": ...}`, the keys spread as for
    /// `tollgate_keys`.
    Server,
    /// The same server with its listener over TLS (`[http.tls]`), HTTP/1.1 by ALPN: what TLS
    /// costs beside [`Variant::Server`].
    ServerTls,
    /// The same server in plaintext with `[top] enabled = false`: what the summaries of who is
    /// denied and allowed (`GET /v1/top`, on by default) cost beside [`Variant::Server`].
    ServerTopOff,
}

/// The summaries' goal: the server with them (the default) uses at most this fraction more
/// CPU per request than with `[top] enabled = false`.
pub const GOAL_TOP_CPU: f64 = 0.05;

impl Variant {
    /// Every variant, in report order.
    pub const ALL: [Variant; 7] = [
        Variant::Bare,
        Variant::BareHeaders,
        Variant::Tollgate,
        Variant::TollgateKeys,
        Variant::Server,
        Variant::ServerTls,
        Variant::ServerTopOff,
    ];

    /// The variants served in this process by axum, without `tollgate serve`: what
    /// [`run_http_with`](super::run_http_with) runs when the server's are not wanted.
    pub const MIDDLEWARE: [Variant; 4] = [
        Variant::Bare,
        Variant::BareHeaders,
        Variant::Tollgate,
        Variant::TollgateKeys,
    ];

    /// The name used in the report.
    pub fn name(self) -> &'static str {
        match self {
            Variant::Bare => "bare",
            Variant::BareHeaders => "bare_headers",
            Variant::Tollgate => "tollgate",
            Variant::TollgateKeys => "tollgate_keys",
            Variant::Server => "server",
            Variant::ServerTls => "server_tls",
            Variant::ServerTopOff => "server_top_off",
        }
    }

    /// One line on what serves the requests.
    pub fn describe(self) -> &'static str {
        match self {
            Variant::Bare => "axum Router, GET /hello returning a static body",
            Variant::BareHeaders => {
                "the same handler, adding fixed RateLimit-Policy and RateLimit headers as long as \
                 the middleware's"
            }
            Variant::Tollgate => {
                "the same behind TollgateLayer, MemoryStore, keyed by client IP (ConnectInfo)"
            }
            Variant::TollgateKeys => {
                "the same behind TollgateLayer, MemoryStore, keyed by the x-api-key header"
            }
            Variant::Server => {
                "tollgate serve on its own HTTP listener, memory store: POST /v1/check \
                 {\"policy\": \"allow_all\", \"key\": ...}"
            }
            Variant::ServerTls => {
                "the same server, its listener over TLS ([http.tls], rustls, a P-256 \
                 certificate), HTTP/1.1 by ALPN"
            }
            Variant::ServerTopOff => {
                "the same server in plaintext with [top] enabled = false: no summary of who is \
                 denied and allowed"
            }
        }
    }

    /// The share of the bare handler's requests/s it should reach; `None` for the references.
    pub fn goal(self) -> Option<f64> {
        match self {
            Variant::Bare | Variant::BareHeaders => None,
            Variant::Tollgate | Variant::TollgateKeys => Some(GOAL_RATIO),
            // The server parses a JSON body and writes one: more work than a middleware in
            // front of a static handler.
            Variant::Server => Some(0.8),
            // Compared with the server in plaintext, not held to this goal.
            Variant::ServerTls | Variant::ServerTopOff => None,
        }
    }

    /// Whether it is `tollgate serve` (answering `POST /v1/check`), in plaintext or TLS.
    pub fn is_server(self) -> bool {
        matches!(
            self,
            Variant::Server | Variant::ServerTls | Variant::ServerTopOff
        )
    }

    /// Whether the middleware is in front of the handler.
    pub fn is_limited(self) -> bool {
        !matches!(self, Variant::Bare | Variant::BareHeaders)
    }
}

impl fmt::Display for Variant {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}
