//! The servers measured: the same `GET /hello` handler, bare or behind tollgate's middleware.

use std::fmt;

/// What serves `GET /hello`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Variant {
    /// The bare axum handler: the throughput the others are a ratio of.
    Bare,
    /// Behind `RateLimitLayer` on the memory store, keyed by the client IP (`ConnectInfo`).
    Tollgate,
    /// The same, keyed by the `x-api-key` header, which the load spreads over many keys.
    TollgateKeys,
}

impl Variant {
    /// Every variant, in report order.
    pub const ALL: [Variant; 3] = [Variant::Bare, Variant::Tollgate, Variant::TollgateKeys];

    /// The name used in the report.
    pub fn name(self) -> &'static str {
        match self {
            Variant::Bare => "bare",
            Variant::Tollgate => "tollgate",
            Variant::TollgateKeys => "tollgate_keys",
        }
    }

    /// One line on what serves the requests.
    pub fn describe(self) -> &'static str {
        match self {
            Variant::Bare => "axum Router, GET /hello returning a static body",
            Variant::Tollgate => {
                "the same behind RateLimitLayer, MemoryStore, keyed by client IP (ConnectInfo)"
            }
            Variant::TollgateKeys => {
                "the same behind RateLimitLayer, MemoryStore, keyed by the x-api-key header"
            }
        }
    }

    /// Whether the middleware is in front of the handler.
    pub fn is_limited(self) -> bool {
        self != Variant::Bare
    }
}

impl fmt::Display for Variant {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}
