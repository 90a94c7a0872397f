//! [`Tollgate`], the service a `TollgateLayer` wraps around another:
//! it decides each request on the shared store before (and instead of) calling the inner one.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::task::{Context, Poll};
use std::time::Duration;

use http::request::Parts;
use http::{Request, Response};
use tower_service::Service;

use super::body::TollgateBody;
use super::key::MissingKey;
use super::response::{self, NO_PEER_ADDR, Rejection, RejectionKind};
use super::shared::Shared;
use super::tiers::NamedPolicy;
use crate::store::settle::Adjustment;
use crate::{Algorithm, Check, CheckError, Decision, StoreError, Verdict};

/// A rate-limited service: what `TollgateLayer` wraps around the
/// inner one. Clones share the layer's limiter.
///
/// ```
/// use http::{Request, Response};
/// use tollgate::middleware::{Tollgate, TollgateLayer};
/// use tollgate::{MemoryStore, Policy};
/// use tower::{Layer, ServiceExt, service_fn};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let layer = TollgateLayer::builder(MemoryStore::new())
///     .policy("api", Policy::per_minute(2)?)
///     .key(|parts: &http::request::Parts| parts.headers.get("x-user").map(|v| v.as_bytes().to_vec()))
///     .build()?;
/// let hello = service_fn(|_: Request<()>| async {
///     Ok::<_, std::convert::Infallible>(Response::new(String::from("hello")))
/// });
/// let service: Tollgate<_> = layer.layer(hello);
/// let as_ann = || Request::get("/").header("x-user", "ann").body(()).unwrap();
/// for _ in 0..2 {
///     assert_eq!(service.clone().oneshot(as_ann()).await?.status(), 200);
/// }
/// let third = service.oneshot(as_ann()).await?;
/// assert_eq!(third.status(), 429);
/// assert_eq!(third.headers()["retry-after"], "30"); // a token every 30 s
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct Tollgate<S> {
    inner: S,
    shared: Arc<Shared>,
}

impl<S> Tollgate<S> {
    pub(crate) fn new(inner: S, shared: Arc<Shared>) -> Tollgate<S> {
        Tollgate { inner, shared }
    }
}

/// The future of a [`Tollgate`] call: the inner service's response with the `RateLimit`
/// headers, or the layer's own answer: what `call` returns, awaited as any future.
///
/// ```
/// use http::{Request, Response};
/// use tollgate::middleware::TollgateLayer;
/// use tollgate::{MemoryStore, Policy};
/// use tower::{Layer, Service, ServiceExt, service_fn};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let layer = TollgateLayer::builder(MemoryStore::new())
///     .policy("api", Policy::per_second(10)?)
///     .key(|_: &http::request::Parts| Some("everyone"))
///     .build()?;
/// let mut service = layer.layer(service_fn(|_: Request<()>| async {
///     Ok::<_, std::convert::Infallible>(Response::new(String::new()))
/// }));
/// let future = service.ready().await?.call(Request::new(())); // a `ResponseFuture`
/// let response = future.await?;
/// assert_eq!(response.headers()["ratelimit"], "\"api\";r=9;t=1");
/// # Ok(())
/// # }
/// ```
pub struct ResponseFuture<T, E> {
    inner: Pin<Box<dyn Future<Output = Result<T, E>> + Send>>,
}

impl<T, E> Future for ResponseFuture<T, E> {
    type Output = Result<T, E>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        self.inner.as_mut().poll(cx)
    }
}

impl<S, ReqBody, ResBody> Service<Request<ReqBody>> for Tollgate<S>
where
    S: Service<Request<ReqBody>, Response = Response<ResBody>> + Clone + Send + 'static,
    S::Future: Send + 'static,
    ReqBody: Send + 'static,
    ResBody: Send + 'static,
{
    type Response = Response<TollgateBody<ResBody>>;
    type Error = S::Error;
    type Future = ResponseFuture<Self::Response, S::Error>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<ReqBody>) -> Self::Future {
        // The inner service was polled ready; its clone may not be (tower's usual swap).
        let clone = self.inner.clone();
        let inner = std::mem::replace(&mut self.inner, clone);
        let shared = Arc::clone(&self.shared);
        ResponseFuture {
            inner: Box::pin(handle(shared, inner, request)),
        }
    }
}

/// How a request was decided.
enum Outcome {
    /// Allowed; `paid` unless a fail policy allowed it (the store took nothing, so nothing
    /// may be given back).
    Pass(Option<Decided>, bool),
    Reject(RejectionKind, Option<Decided>),
}

/// A request's policies and their decisions, and what the request reserved of each when a
/// policy reads its actual cost from the response.
struct Decided {
    policies: Arc<[NamedPolicy]>,
    decisions: Vec<Decision>,
    key: Vec<u8>,
    /// One per policy, kept only for a commit after the response.
    reserved: Option<Vec<u64>>,
}

async fn handle<S, ReqBody, ResBody>(
    shared: Arc<Shared>,
    mut inner: S,
    request: Request<ReqBody>,
) -> Result<Response<TollgateBody<ResBody>>, S::Error>
where
    S: Service<Request<ReqBody>, Response = Response<ResBody>>,
{
    let (parts, body) = request.into_parts();
    let grpc = response::is_grpc(&parts.headers);
    let (mut response, state) = match decide(&shared, &parts).await {
        Outcome::Pass(mut state, paid) => {
            let mut response = inner.call(Request::from_parts(parts, body)).await?;
            if let Some(decided) = &mut state
                && decided.reserved.is_some()
            {
                response = commit(&shared, response, decided, paid).await;
            }
            (response.map(TollgateBody::inner), state)
        }
        Outcome::Reject(kind, state) => {
            let denied_by = state.as_ref().and_then(|decided| {
                let (named, decision) = decided
                    .policies
                    .iter()
                    .zip(&decided.decisions)
                    .filter(|(_, d)| !d.allowed())
                    .max_by_key(|(_, d)| d.retry_after())?;
                Some((Arc::clone(&named.name), *decision))
            });
            let no_peer_addr = kind == RejectionKind::MissingKey && peer_missing(&shared, &parts);
            let rejection = Rejection {
                kind,
                grpc,
                denied_by,
                no_peer_addr,
            };
            let response = match &shared.reject {
                Some(reject) => {
                    let mut response = reject(&rejection, &parts).map(TollgateBody::hook);
                    rejection.add_retry_after(response.headers_mut());
                    response
                }
                None => rejection.default_response().map(TollgateBody::own),
            };
            (response, state)
        }
    };
    if let Some(Decided {
        policies,
        decisions,
        ..
    }) = state
    {
        let built = Arc::ptr_eq(&policies, &shared.policies).then_some(&shared.policy_header);
        response::add_headers(
            response.headers_mut(),
            &policies,
            built.and_then(Option::as_ref),
            &decisions,
            shared.legacy_headers,
        );
    }
    Ok(response)
}

/// Commits the actual cost each policy reads from `response` (those that read one) on the
/// buckets that reserved theirs, and puts what the buckets hold after it in `decided`, for
/// the headers. A response a policy reads nothing from, or a commit that fails, keeps that
/// policy's reserved charge: the safe side. A cost beyond the reservation is taken, at most
/// one capacity into debt.
async fn commit<B>(
    shared: &Shared,
    response: Response<B>,
    decided: &mut Decided,
    paid: bool,
) -> Response<B> {
    let (Some(store), Some(reserved)) = (&shared.settle, &decided.reserved) else {
        return response;
    };
    let (parts, body) = response.into_parts();
    let mut settled_at = Vec::new();
    let mut adjustments = Vec::new();
    for (i, (named, &cost)) in decided.policies.iter().zip(reserved).enumerate() {
        // A window cannot take tokens back (a tier may choose one): it keeps its charge, and
        // the token buckets of the request are still settled.
        if named.policy.algorithm() != Algorithm::TokenBucket {
            continue;
        }
        let Some(used) = shared
            .costs
            .after(&named.name)
            .and_then(|read| read(&parts))
        else {
            continue;
        };
        // The most a commit takes is one capacity of debt (the one rule of commits): more is
        // charged up to it (the request already ran; keeping only the estimate would charge less).
        let capacity = named.policy.capacity();
        let adjustment = Adjustment::commit_within(cost, used, capacity, paid)
            .unwrap_or_else(|most| Adjustment::commit(cost, most, paid));
        if !adjustment.is_nothing() {
            settled_at.push(i);
            let bucket = Check::new(named.policy, &decided.key, cost).named(&named.name);
            adjustments.push((bucket, adjustment));
        }
    }
    if !adjustments.is_empty()
        && let Ok(verdict) = store.settle_dyn(None, &adjustments).await
        && verdict.decisions.len() == settled_at.len()
    {
        // The headers describe the buckets after the settlement, not the reservation.
        for (i, after) in settled_at.into_iter().zip(verdict.decisions) {
            decided.decisions[i] = after;
        }
    }
    Response::from_parts(parts, body)
}

/// Whether the key is the client's address and the server gave none; logs it the first time.
fn peer_missing(shared: &Shared, parts: &Parts) -> bool {
    let missing = shared
        .client_ip
        .as_ref()
        .is_some_and(|ip| ip.peer(parts).is_none());
    if missing
        && !shared.no_peer_logged.load(Ordering::Relaxed)
        && !shared.no_peer_logged.swap(true, Ordering::Relaxed)
    {
        // A server that gives no request an address limits nothing: say so where the
        // operator looks, once, rather than in every 400 alone.
        tracing::error!(
            "a request reached the rate limiter without a client address (if every request \
             does, none is limited by it): {NO_PEER_ADDR}"
        );
    }
    missing
}

/// The most tier policies logged as ones the store cannot decide: names come from the
/// application's tiers, perhaps one per key, and the record of them must stay bounded.
const MAX_LOGGED_TIERS: usize = 1_024;

/// Whether the store can decide a policy a tier chose (the layer's own were checked when it
/// was built); one it cannot is logged once, naming it.
fn tier_supported(shared: &Shared, named: &NamedPolicy) -> bool {
    let Err(reason) = shared.store.supports_dyn(&named.policy) else {
        return true;
    };
    let mut logged = shared.unsupported_logged.lock();
    if logged.len() < MAX_LOGGED_TIERS && logged.insert(named.clone()) {
        tracing::error!(
            policy = %named.name,
            "a tier's policy cannot be decided by the store, so its requests are refused \
             as the store unavailable: {reason}"
        );
    }
    false
}

async fn decide(shared: &Shared, parts: &Parts) -> Outcome {
    let Some(key) = shared.key.extract(parts) else {
        return match shared.on_missing_key {
            MissingKey::Allow => {
                // Let through unlimited, but never silently for want of a client address.
                peer_missing(shared, parts);
                Outcome::Pass(None, true)
            }
            MissingKey::Reject => Outcome::Reject(RejectionKind::MissingKey, None),
        };
    };
    let policies = match shared
        .tiers
        .as_ref()
        .and_then(|tiers| tiers.policies(&key, parts))
    {
        Some(tier) => {
            if !tier.iter().all(|p| tier_supported(shared, p)) {
                return Outcome::Reject(RejectionKind::StoreUnavailable, None);
            }
            tier
        }
        None => Arc::clone(&shared.policies),
    };
    let reserved = shared.settle.is_some().then(|| {
        policies
            .iter()
            .map(|p| shared.costs.before(&p.name, parts))
            .collect::<Vec<u64>>()
    });
    // Each bucket is named by its policy's name, and keyed by the client's key alone: so every
    // policy of one client shares a Redis Cluster hash slot, and a check of several of them is
    // one atomic call there too.
    let cost = |i: usize, p: &NamedPolicy| match &reserved {
        Some(costs) => costs[i],
        None => shared.costs.before(&p.name, parts),
    };
    let outcome = if let [one] = &policies[..] {
        // The common case, without the lists.
        let checks = [Check::new(one.policy, &key, cost(0, one)).named(&one.name)];
        decide_checks(shared, &checks, &policies).await
    } else {
        let checks: Vec<Check<'_>> = policies
            .iter()
            .enumerate()
            .map(|(i, p)| Check::new(p.policy, &key, cost(i, p)).named(&p.name))
            .collect();
        decide_checks(shared, &checks, &policies).await
    };
    let decided = |decisions| Decided {
        policies,
        decisions,
        key,
        reserved,
    };
    match outcome {
        Decisions::Pass(decisions, paid) => Outcome::Pass(Some(decided(decisions)), paid),
        Decisions::Reject(kind, Some(decisions)) => Outcome::Reject(kind, Some(decided(decisions))),
        Decisions::Reject(kind, None) => Outcome::Reject(kind, None),
    }
}

/// What deciding a request's checks came to.
enum Decisions {
    Pass(Vec<Decision>, bool),
    Reject(RejectionKind, Option<Vec<Decision>>),
}

/// Decides `checks` (one per policy of `policies`), waiting for tokens up to `max_wait`.
async fn decide_checks(
    shared: &Shared,
    checks: &[Check<'_>],
    policies: &[NamedPolicy],
) -> Decisions {
    let mut waited = Duration::ZERO;
    loop {
        let verdict: Verdict = match shared.store.decide_dyn(checks).await {
            Ok(verdict) => verdict,
            // The store refuses a cost above a capacity (it can never pass): the answer names
            // the policy, found only then.
            Err(StoreError::Check(CheckError::CostExceedsCapacity { cost, capacity })) => {
                let named = checks
                    .iter()
                    .zip(policies)
                    .find(|(c, _)| c.cost() > c.policy().capacity())
                    .map(|(_, named)| Arc::clone(&named.name));
                let kind = match named {
                    Some(policy) => RejectionKind::CostExceedsCapacity {
                        policy,
                        cost,
                        capacity,
                    },
                    None => RejectionKind::StoreUnavailable,
                };
                return Decisions::Reject(kind, None);
            }
            // A store that failed (and the fail policy is to deny), or cannot decide these
            // policies: unavailable, never a 500.
            Err(_) => return Decisions::Reject(RejectionKind::StoreUnavailable, None),
        };
        if verdict.allowed() {
            let paid = !verdict.by_fail_policy;
            return Decisions::Pass(verdict.decisions, paid);
        }
        let wait = verdict.retry_after();
        if waited + wait > shared.max_wait {
            let retry_after = verdict
                .most_restrictive()
                .map_or(Duration::ZERO, Decision::retry_after)
                .max(wait);
            return Decisions::Reject(
                RejectionKind::Limited { retry_after },
                Some(verdict.decisions),
            );
        }
        // The tokens arrive within the wait we may still spend: hold the request, then ask
        // again (someone else may have taken them meanwhile).
        tokio::time::sleep(wait).await;
        waited += wait;
    }
}
