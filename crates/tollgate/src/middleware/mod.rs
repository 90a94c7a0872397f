//! Rate limiting for tower services — axum, hyper, tonic — on any store.
//!
//! [`TollgateLayer`] decides every request on one shared limiter before calling the service:
//! allowed requests go through with the `RateLimit-Policy` and `RateLimit` headers (IETF
//! draft) added; denied ones get `429 Too Many Requests` with `Retry-After` (whole seconds,
//! rounded up, never 0) and an `application/problem+json` body, or, for gRPC requests, the
//! status `RESOURCE_EXHAUSTED`. A request that costs more than a policy's capacity can never pass:
//! it gets `400` naming the cost and the limit (gRPC `INVALID_ARGUMENT`), which clients do not
//! retry. When the store fails, the fail policy applies (allow, deny with 503, or a local
//! limiter); a failure never becomes a 500.
//!
//! Keys come from a [`KeyExtractor`]: the client address ([`ClientIp`], trusting
//! `X-Forwarded-For` or `Forwarded` only from configured proxies, IPv6 grouped by /64; the peer
//! address from axum's `ConnectInfo`, tonic's `TcpConnectInfo` through
//! [`ClientIp::peer_addr`], or a hyper server's [`PeerAddrLayer`]), a
//! [`Header`] such as an API key, or any closure. Policies can differ per key ([`Tiers`],
//! [`TierTable`]), several can apply at once, and requests can cost more than one token, each
//! policy its own ([`cost_for`](TollgateLayerBuilder::cost_for)): requests per minute and
//! tokens per minute in one layer.
//!
//! ```
//! use std::net::SocketAddr;
//! use std::time::Duration;
//! use axum::{Router, routing::get};
//! use tollgate::middleware::{ClientIp, TollgateLayer};
//! use tollgate::{MemoryStore, Policy};
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let layer = TollgateLayer::builder(MemoryStore::new())
//!     .policy("api", Policy::token_bucket(5, 1, Duration::from_secs(1))?) // burst 5, 1/s
//!     .key(ClientIp::new().trust(["127.0.0.1/32".parse()?])) // behind a local proxy
//!     .build()?;
//! let app: Router = Router::new().route("/hello", get(|| async { "hello" })).layer(layer);
//! // axum::serve(listener, app.into_make_service_with_connect_info::<SocketAddr>())
//! # let _ = app.into_make_service_with_connect_info::<SocketAddr>();
//! # Ok(())
//! # }
//! ```

mod body;
mod cost;
mod key;
mod layer;
mod net;
mod peer;
mod response;
mod service;
mod shared;
mod tiers;

pub use body::{BoxError, TollgateBody};
pub use ipnet::IpNet;
pub use key::{ClientIp, ForwardedHeader, Header, KeyExtractor, MissingKey};
pub use layer::{LayerError, TollgateLayer, TollgateLayerBuilder};
pub use peer::{PeerAddr, PeerAddrLayer};
pub use response::{Rejection, RejectionKind};
pub use service::{ResponseFuture, Tollgate};
pub use tiers::{NamedPolicy, TierTable, Tiers};
