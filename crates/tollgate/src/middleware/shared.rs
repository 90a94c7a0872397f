//! What every service of one layer shares, built by the layer and read by each service: the
//! store, the policies, where keys and costs come from, and what to answer when a request
//! cannot be decided.

use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use http::Response;
use http::request::Parts;

use super::body::HookBody;
use super::cost::Costs;
use super::key::{ClientIp, KeyExtractor, MissingKey};
use super::response::Rejection;
use super::tiers::{NamedPolicy, Tiers};
use crate::DynStore;
use crate::store::settle::DynSettle;

/// A rejection hook, its body boxed (the body is erased so that the service's type does not
/// name the hook's).
pub(crate) type RejectFn = dyn Fn(&Rejection, &Parts) -> Response<HookBody> + Send + Sync;

/// What every service of one layer shares: one limiter, never a budget per clone or per
/// connection.
pub(crate) struct Shared {
    pub(crate) store: Arc<dyn DynStore>,
    pub(crate) key: Box<dyn KeyExtractor>,
    /// The key when it is a [`ClientIp`]: to tell a server that gives no peer address (every
    /// request keyless) from a request without a key.
    pub(crate) client_ip: Option<ClientIp>,
    /// Whether that misconfiguration was logged (once per layer).
    pub(crate) no_peer_logged: AtomicBool,
    pub(crate) policies: Arc<[NamedPolicy]>,
    /// The `RateLimit-Policy` header of `policies`, built once.
    pub(crate) policy_header: Option<http::HeaderValue>,
    pub(crate) tiers: Option<Box<dyn Tiers>>,
    /// What a request costs each policy.
    pub(crate) costs: Costs,
    /// The store `cost_after` commits on, when any policy reads its actual cost.
    pub(crate) settle: Option<Arc<dyn DynSettle>>,
    /// The tiers' policies the store cannot decide that were logged already, so that each is
    /// logged once (bounded: see `service::MAX_LOGGED_TIERS`).
    pub(crate) unsupported_logged: parking_lot::Mutex<std::collections::HashSet<NamedPolicy>>,
    pub(crate) on_missing_key: MissingKey,
    pub(crate) legacy_headers: bool,
    pub(crate) max_wait: Duration,
    pub(crate) reject: Option<Box<RejectFn>>,
}
