//! The servers measured: the same `GET /hello` handler, bare or behind tollgate's middleware,
//! `tollgate serve` on its own listener answering `POST /v1/check` by a policy's name, in
//! plaintext and over TLS, and the floors beside the server: a JSON endpoint answering the same
//! requests without deciding, on axum and on the server's listener.

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
    /// A JSON endpoint on `axum::serve`: `POST /v1/check` read whole, parsed with serde and
    /// answered in the server's JSON with its headers, fixed numbers, no decision. The floor of
    /// [`Variant::Server`]: what any JSON endpoint with that request and answer costs.
    BareJson,
    /// [`Variant::BareJson`]'s router on `tollgate serve`'s listener machinery
    /// (`tollgate_server::web::serve`: the connection caps, timeouts, flood guard and problem
    /// layer), with the HTTP listener's default limits: what that machinery adds to a JSON
    /// endpoint, without the server's routes or limiter.
    BareJsonListener,
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
    pub const ALL: [Variant; 9] = [
        Variant::Bare,
        Variant::BareHeaders,
        Variant::BareJson,
        Variant::BareJsonListener,
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
            Variant::BareJson => "bare_json",
            Variant::BareJsonListener => "bare_json_listener",
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
            Variant::BareJson => {
                "axum Router, POST /v1/check: the body read (Bytes), parsed with serde (borrowed), \
                 answered with the server's JSON (serde_json) and RateLimit headers, fixed \
                 numbers, no decision"
            }
            Variant::BareJsonListener => {
                "bare_json's router on tollgate serve's listener machinery \
                 (tollgate_server::web::serve: connection caps, timeouts, flood guard, problem \
                 layer; the HTTP listener's default limits), no limiter"
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
            Variant::Bare
            | Variant::BareHeaders
            | Variant::BareJson
            | Variant::BareJsonListener => None,
            Variant::Tollgate | Variant::TollgateKeys => Some(GOAL_RATIO),
            // The server parses a JSON body and writes one: more work than a middleware in
            // front of a static handler (issue 50's goal; 0.8 before).
            Variant::Server => Some(0.85),
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

    /// Whether it answers the server's requests (`POST /v1/check` with a JSON body): the
    /// server's variants and the JSON floors beside them.
    pub fn takes_checks(self) -> bool {
        self.is_server() || matches!(self, Variant::BareJson | Variant::BareJsonListener)
    }

    /// Whether the middleware (or the server's limiter) decides its requests.
    pub fn is_limited(self) -> bool {
        !matches!(
            self,
            Variant::Bare | Variant::BareHeaders | Variant::BareJson | Variant::BareJsonListener
        )
    }
}

impl fmt::Display for Variant {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}
