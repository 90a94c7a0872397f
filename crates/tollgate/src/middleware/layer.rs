//! [`TollgateLayer`] and its builder: the store, the policies, where keys and costs come from,
//! and what to answer when a request cannot be decided.

use std::any::Any;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use bytes::Bytes;
use http::Response;
use http::request::Parts;
use tower_layer::Layer;

use super::body::{BoxError, hook_body};
use super::cost::Costs;
use super::key::{ClientIp, KeyExtractor, MissingKey};
use super::response::Rejection;
use super::service::Tollgate;
use super::shared::{RejectFn, Shared};
use super::tiers::{NamedPolicy, Tiers};
use crate::store::guarded::{FailPolicy, Guarded};
use crate::store::settle::{DynSettle, Settle};
use crate::{Policy, Store};

/// Turns the layer's guarded store into the settling store `cost_after` commits on (set only
/// where the store can settle).
type MakeSettle<S> = dyn FnOnce(Arc<Guarded<S>>) -> Arc<dyn DynSettle>;

/// A tower layer that rate-limits requests: axum, hyper and tonic services. Cheap to clone;
/// every service it makes shares one limiter.
///
/// Named after the crate, as tower_governor's `GovernorLayer`, so that it does not clash with
/// tower's own `tower::limit::RateLimitLayer` (a fixed rate for the whole service, no keys).
///
/// ```
/// use axum::{Router, routing::get};
/// use tollgate::middleware::{ClientIp, TollgateLayer};
/// use tollgate::{MemoryStore, Policy};
///
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let per_ip = TollgateLayer::builder(MemoryStore::new())
///     .policy("ip", Policy::per_second(10)?.burst(20)?)
///     .key(ClientIp::new())
///     .build()?;
/// let app: Router = Router::new().route("/", get(|| async { "hello" })).layer(per_ip);
/// // axum::serve(listener, app.into_make_service_with_connect_info::<std::net::SocketAddr>())
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct TollgateLayer {
    shared: Arc<Shared>,
}

/// Configures a [`TollgateLayer`]: made by [`TollgateLayer::builder`], each method returns it
/// for the next.
///
/// ```
/// use std::time::Duration;
/// use http::HeaderName;
/// use tollgate::middleware::{Header, MissingKey, TollgateLayer};
/// use tollgate::store::guarded::FailPolicy;
/// use tollgate::{MemoryStore, Policy};
///
/// let layer = TollgateLayer::builder(MemoryStore::new())
///     .policy("second", Policy::per_second(10)?)       // both at once: 10/s and 1,000/h
///     .policy("hour", Policy::per_hour(1_000)?)
///     .key(Header::new(HeaderName::from_static("x-api-key")))
///     .on_missing_key(MissingKey::Allow)               // health checks carry no key
///     .cost(|parts| if parts.method == http::Method::POST { 5 } else { 1 })
///     .on_store_error(FailPolicy::Allow)
///     .timeout(Duration::from_millis(20))
///     .build()?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct TollgateLayerBuilder<S> {
    store: S,
    on_store_error: FailPolicy,
    timeout: Duration,
    key: Box<dyn KeyExtractor>,
    client_ip: Option<ClientIp>,
    policies: Vec<NamedPolicy>,
    tiers: Option<Box<dyn Tiers>>,
    costs: Costs,
    on_missing_key: MissingKey,
    legacy_headers: bool,
    max_wait: Duration,
    reject: Option<Box<RejectFn>>,
    /// Set by the first `cost_after`: how the layer's store becomes one that settles.
    make_settle: Option<Box<MakeSettle<S>>>,
}

/// Why a layer could not be built.
///
/// ```
/// use tollgate::middleware::{LayerError, TollgateLayer};
/// use tollgate::{MemoryStore, Policy};
///
/// let twice = TollgateLayer::builder(MemoryStore::new())
///     .policy("api", Policy::per_second(10)?)
///     .policy("api", Policy::per_hour(1_000)?)
///     .build();
/// assert_eq!(twice.err(), Some(LayerError::DuplicateName("api".into())));
/// # Ok::<(), tollgate::PolicyError>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum LayerError {
    /// No policy was given.
    #[error("a rate-limit layer needs at least one policy")]
    NoPolicy,
    /// Two policies share a name (and so their buckets and headers would collide).
    #[error("two policies are named {0:?}")]
    DuplicateName(String),
    /// A policy's name is empty or longer than [`MAX_NAME_LEN`](crate::store::MAX_NAME_LEN)
    /// bytes (it names the policy's buckets in the store).
    #[error("a policy name must be 1 to 128 bytes long, not {0:?}")]
    InvalidName(String),
    /// `cost_after` gives tokens back, which only a token bucket can take (a window cannot
    /// tell which window they were taken in).
    #[error("cost_after needs token-bucket policies; {0:?} is a window")]
    CostAfterNeedsTokenBucket(String),
    /// [`cost_for`](TollgateLayerBuilder::cost_for) or
    /// [`cost_after_for`](TollgateLayerBuilder::cost_after_for) names no policy of the layer
    /// (nor, with [`tiers`](TollgateLayerBuilder::tiers), possibly one of theirs).
    #[error("a cost is given for {0:?}, which is not one of the layer's policies")]
    UnknownPolicy(String),
    /// The store cannot decide this policy (a window longer than its keys can live, a rate
    /// beyond its clock): every request would be refused.
    #[error("the store cannot decide the policy {policy:?}: {reason}")]
    Unsupported {
        /// The policy's name.
        policy: String,
        /// Why, as the store says it.
        reason: crate::PolicyError,
    },
    /// A `timeout` of zero: every decision would time out and be answered by the fail policy
    /// (failing open, nothing would be limited).
    #[error(
        "timeout is 0: every decision would time out and be answered by the fail policy; give \
         the longest a decision may wait"
    )]
    ZeroTimeout,
}

impl TollgateLayer {
    /// A layer deciding on `store`; add at least one [`policy`](TollgateLayerBuilder::policy).
    pub fn builder<S: Store>(store: S) -> TollgateLayerBuilder<S> {
        TollgateLayerBuilder {
            store,
            on_store_error: FailPolicy::Allow,
            timeout: Duration::from_millis(50),
            key: Box::new(ClientIp::new()),
            client_ip: Some(ClientIp::new()),
            policies: Vec::new(),
            tiers: None,
            costs: Costs::default(),
            on_missing_key: MissingKey::Reject,
            legacy_headers: false,
            max_wait: Duration::ZERO,
            reject: None,
            make_settle: None,
        }
    }
}

impl<S: Store> TollgateLayerBuilder<S> {
    /// Adds a policy, named `name` in headers and bucket keys. Several policies are decided
    /// together (10/s *and* 1000/h): a request passes only if every one allows it.
    pub fn policy(mut self, name: &str, policy: Policy) -> Self {
        self.policies.push(NamedPolicy::new(name, policy));
        self
    }

    /// Where keys come from (default: [`ClientIp::new`], the peer address).
    pub fn key<K: KeyExtractor>(mut self, key: K) -> Self {
        self.client_ip = (&key as &dyn Any).downcast_ref::<ClientIp>().cloned();
        self.key = Box::new(key);
        self
    }

    /// Per-key policies (tiers) that replace the default ones for the keys they name.
    pub fn tiers(mut self, tiers: impl Tiers) -> Self {
        self.tiers = Some(Box::new(tiers));
        self
    }

    /// The cost of a request to each policy that has no [`cost_for`](Self::cost_for) of its
    /// own (default 1; 0 lets it through without charging, as a peek).
    pub fn cost(mut self, cost: impl Fn(&Parts) -> u64 + Send + Sync + 'static) -> Self {
        self.costs.default = Box::new(cost);
        self
    }

    /// The cost of a request to the policy named `policy` (a layer policy's, or a tier's of
    /// that name), in place of [`cost`](Self::cost): requests per minute cost 1 while tokens
    /// per minute cost the tokens a call may use. The request passes only if every policy has
    /// room for its own cost.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::middleware::TollgateLayer;
    /// use tollgate::{MemoryStore, Policy};
    ///
    /// let layer = TollgateLayer::builder(MemoryStore::new())
    ///     .policy("requests", Policy::per_minute(60)?) // costs 1, the default
    ///     .policy("bytes", Policy::token_bucket(1 << 20, 1 << 20, Duration::from_secs(60))?)
    ///     .cost_for("bytes", |parts| {
    ///         parts.headers.get("content-length")
    ///             .and_then(|v| v.to_str().ok()?.parse().ok())
    ///             .unwrap_or(0)
    ///     })
    ///     .build()?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn cost_for(
        mut self,
        policy: &str,
        cost: impl Fn(&Parts) -> u64 + Send + Sync + 'static,
    ) -> Self {
        self.costs.of(policy).before = Some(Box::new(cost));
        self
    }

    /// What to answer when the store fails or is slow (default [`FailPolicy::Allow`]):
    /// `Deny` answers 503, never 500.
    pub fn on_store_error(mut self, policy: FailPolicy) -> Self {
        self.on_store_error = policy;
        self
    }

    /// The bound on one decision (default 50 ms), on top of the store's own; zero is refused
    /// by [`build`](Self::build).
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// What to do with a request without a key (default [`MissingKey::Reject`]).
    pub fn on_missing_key(mut self, on_missing_key: MissingKey) -> Self {
        self.on_missing_key = on_missing_key;
        self
    }

    /// Also send `X-RateLimit-Limit`, `-Remaining` and `-Reset` (seconds from now) for the
    /// most restrictive policy (default off).
    pub fn legacy_headers(mut self, on: bool) -> Self {
        self.legacy_headers = on;
        self
    }

    /// Instead of answering 429, hold a request whose tokens arrive within `max_wait` until they
    /// do (as nginx's `limit_req` without `nodelay`); default zero: never wait.
    pub fn max_wait(mut self, max_wait: Duration) -> Self {
        self.max_wait = max_wait;
        self
    }

    /// Builds the layer's own answers (429, 503, 400) with `reject` instead of the default
    /// problem+json. It sees why ([`Rejection::kind`]), which policy denied and its decision
    /// ([`Rejection::policy`], [`Rejection::decision`]) and the request's parts, and returns a
    /// response with any body: a `String`, axum's `Body` (`.into_response()`), any
    /// `http_body::Body` of `Bytes`. The layer adds `Retry-After` unless the hook set it, and
    /// the `RateLimit` headers.
    ///
    /// ```
    /// use http::{Response, StatusCode};
    /// use tollgate::middleware::TollgateLayer;
    /// use tollgate::{MemoryStore, Policy};
    ///
    /// let layer = TollgateLayer::builder(MemoryStore::new())
    ///     .policy("api", Policy::per_second(10)?)
    ///     .rejection(|rejection, parts| {
    ///         let french = parts.headers.get("accept-language")
    ///             .is_some_and(|lang| lang.as_bytes().starts_with(b"fr"));
    ///         let text = if french { "Trop de requêtes" } else { "Too many requests" };
    ///         let mut response = Response::new(text.to_owned());
    ///         *response.status_mut() = match rejection.retry_after() {
    ///             Some(_) => StatusCode::TOO_MANY_REQUESTS, // or 503: Retry-After is added
    ///             None => StatusCode::BAD_REQUEST,
    ///         };
    ///         response
    ///     })
    ///     .build()?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// The body is generic, as axum's `Response<B>` and tower-http's layers take any
    /// `http_body::Body`, rather than one type the caller must name (and add a crate for);
    /// it is boxed once per rejection.
    pub fn rejection<F, B>(mut self, reject: F) -> Self
    where
        F: Fn(&Rejection, &Parts) -> Response<B> + Send + Sync + 'static,
        B: http_body::Body<Data = Bytes> + Send + 'static,
        B::Error: Into<BoxError>,
    {
        self.reject = Some(Box::new(move |rejection, parts| {
            reject(rejection, parts).map(hook_body)
        }));
        self
    }

    /// As [`rejection`](Self::rejection), for a hook that answers anything axum turns into a
    /// response: a status and a string, `Json`, a tuple with headers (feature `axum`).
    ///
    /// ```
    /// use axum::Json;
    /// use axum::http::StatusCode;
    /// use tollgate::middleware::TollgateLayer;
    /// use tollgate::{MemoryStore, Policy};
    ///
    /// let layer = TollgateLayer::builder(MemoryStore::new())
    ///     .policy("api", Policy::per_second(10)?)
    ///     .rejection_with(|rejection, _parts| {
    ///         let body = serde_json::json!({ "error": "slow down", "policy": rejection.policy() });
    ///         (StatusCode::TOO_MANY_REQUESTS, Json(body))
    ///     })
    ///     .build()?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    #[cfg(feature = "axum")]
    pub fn rejection_with<F, R>(self, reject: F) -> Self
    where
        F: Fn(&Rejection, &Parts) -> R + Send + Sync + 'static,
        R: axum::response::IntoResponse,
    {
        self.rejection(move |rejection, parts| reject(rejection, parts).into_response())
    }

    /// The layer. Refused when a policy is unnamed or named twice, a cost names no policy,
    /// the timeout is zero, or the store cannot decide a policy (a sliding window longer than
    /// Redis keeps keys, say): a layer that would refuse every request is never built.
    /// Policies chosen per key by [`tiers`](Self::tiers) are known only per request: each is
    /// checked against the store on every request (a comparison of numbers), and one the store
    /// cannot decide is logged once at error level, naming it, and answered as the store
    /// unavailable (`503`). With tiers, a cost for a name the layer's own policies lack is
    /// taken as a tier's and not refused.
    pub fn build(self) -> Result<TollgateLayer, LayerError> {
        if self.policies.is_empty() {
            return Err(LayerError::NoPolicy);
        }
        for (i, p) in self.policies.iter().enumerate() {
            if p.name.is_empty() || p.name.len() > crate::store::MAX_NAME_LEN {
                return Err(LayerError::InvalidName(p.name.to_string()));
            }
            if self.costs.reads_after(&p.name)
                && p.policy.algorithm() != crate::Algorithm::TokenBucket
            {
                return Err(LayerError::CostAfterNeedsTokenBucket(p.name.to_string()));
            }
            if self.policies[..i].iter().any(|q| q.name == p.name) {
                return Err(LayerError::DuplicateName(p.name.to_string()));
            }
            self.store
                .supports(&p.policy)
                .map_err(|reason| LayerError::Unsupported {
                    policy: p.name.to_string(),
                    reason,
                })?;
        }
        if self.tiers.is_none()
            && let Some(unknown) = self
                .costs
                .names()
                .find(|name| !self.policies.iter().any(|p| &*p.name == *name))
        {
            return Err(LayerError::UnknownPolicy(unknown.to_owned()));
        }
        let timeout = crate::NonZeroDuration::new(self.timeout).ok_or(LayerError::ZeroTimeout)?;
        let store = Arc::new(Guarded::new(self.store, self.on_store_error).timeout(timeout));
        let settle = self.make_settle.map(|make| make(Arc::clone(&store)));
        Ok(TollgateLayer {
            shared: Arc::new(Shared {
                store,
                settle,
                key: self.key,
                client_ip: self.client_ip,
                no_peer_logged: AtomicBool::new(false),
                policy_header: super::response::policy_header(&self.policies),
                policies: self.policies.into(),
                tiers: self.tiers,
                unsupported_logged: Default::default(),
                costs: self.costs,
                on_missing_key: self.on_missing_key,
                legacy_headers: self.legacy_headers,
                max_wait: self.max_wait,
                reject: self.reject,
            }),
        })
    }
}

impl<S: Settle> TollgateLayerBuilder<S> {
    /// Charges the actual cost, known only from the response (an LLM call's tokens, rows,
    /// bytes), to every policy without a [`cost_for`](TollgateLayerBuilder::cost_for) of its
    /// own: [`cost`](TollgateLayerBuilder::cost) is reserved before the inner service runs,
    /// then `cost_after` reads the response (a header or an extension the handler set) and
    /// the difference is given back, or taken without a denial (see
    /// [`Reservation`](crate::store::settle)). A response it answers `None` for keeps the
    /// reserved charge, as does a failed service. A policy with a cost of its own reads its
    /// actual cost with [`cost_after_for`](Self::cost_after_for), or keeps what it reserved.
    ///
    /// A request dropped between its reservation and its response (the client went away, the
    /// server shut down) keeps its whole reserved charge: the commit happens only when the
    /// inner service answers.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::middleware::TollgateLayer;
    /// use tollgate::{MemoryStore, Policy};
    ///
    /// // 100,000 LLM tokens a minute per client; reserve 4,000 per call, charge what it used.
    /// let layer = TollgateLayer::builder(MemoryStore::new())
    ///     .policy("llm", Policy::token_bucket(100_000, 100_000, Duration::from_secs(60))?)
    ///     .cost(|_| 4_000)
    ///     .cost_after(|response| {
    ///         response.headers.get("x-llm-tokens")?.to_str().ok()?.parse().ok()
    ///     })
    ///     .build()?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn cost_after(
        mut self,
        cost: impl Fn(&http::response::Parts) -> Option<u64> + Send + Sync + 'static,
    ) -> Self {
        self.costs.default_after = Some(Box::new(cost));
        self.settling()
    }

    /// Charges the policy named `policy` the actual cost `cost` reads from the response,
    /// in place of what [`cost_for`](TollgateLayerBuilder::cost_for) reserved: requests per
    /// minute and tokens per minute in one layer, the request charged 1 and the tokens what the
    /// call used.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::middleware::TollgateLayer;
    /// use tollgate::{MemoryStore, Policy};
    ///
    /// let layer = TollgateLayer::builder(MemoryStore::new())
    ///     .policy("requests", Policy::per_minute(60)?)
    ///     .policy("tokens", Policy::token_bucket(100_000, 100_000, Duration::from_secs(60))?)
    ///     .cost_for("tokens", |_| 4_000) // reserved before the call
    ///     .cost_after_for("tokens", |response| {
    ///         response.headers.get("x-llm-tokens")?.to_str().ok()?.parse().ok()
    ///     })
    ///     .build()?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn cost_after_for(
        mut self,
        policy: &str,
        cost: impl Fn(&http::response::Parts) -> Option<u64> + Send + Sync + 'static,
    ) -> Self {
        self.costs.of(policy).after = Some(Box::new(cost));
        self.settling()
    }

    /// Commits go to the layer's store, which settles.
    fn settling(mut self) -> Self {
        let make: Box<MakeSettle<S>> = Box::new(|store| store as Arc<dyn DynSettle>);
        self.make_settle = Some(make);
        self
    }
}

impl<S> Layer<S> for TollgateLayer {
    type Service = Tollgate<S>;

    fn layer(&self, inner: S) -> Tollgate<S> {
        Tollgate::new(inner, Arc::clone(&self.shared))
    }
}
