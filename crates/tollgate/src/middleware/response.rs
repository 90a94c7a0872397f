//! What the layer answers: the `RateLimit` headers on every response, and its own responses —
//! 429, 503, 400 — as `application/problem+json`, or as a gRPC status for gRPC requests.

use std::sync::Arc;
use std::time::Duration;

use http::header::{CONTENT_TYPE, RETRY_AFTER};
use http::{HeaderMap, HeaderName, HeaderValue, Response, StatusCode};

use super::tiers::NamedPolicy;
use crate::{Decision, headers};

static RATELIMIT_POLICY: HeaderName = HeaderName::from_static("ratelimit-policy");
static RATELIMIT: HeaderName = HeaderName::from_static("ratelimit");
static X_LIMIT: HeaderName = HeaderName::from_static("x-ratelimit-limit");
static X_REMAINING: HeaderName = HeaderName::from_static("x-ratelimit-remaining");
static X_RESET: HeaderName = HeaderName::from_static("x-ratelimit-reset");
static GRPC_STATUS: HeaderName = HeaderName::from_static("grpc-status");
static GRPC_MESSAGE: HeaderName = HeaderName::from_static("grpc-message");

/// Why the layer answered instead of the service: what the layer builder's `rejection` hook
/// matches on.
///
/// ```
/// use std::time::Duration;
/// use http::StatusCode;
/// use tollgate::middleware::RejectionKind;
///
/// fn status(kind: &RejectionKind) -> StatusCode {
///     match kind {
///         RejectionKind::Limited { .. } => StatusCode::TOO_MANY_REQUESTS,
///         RejectionKind::CostExceedsCapacity { .. } => StatusCode::UNPROCESSABLE_ENTITY,
///         RejectionKind::MissingKey => StatusCode::UNAUTHORIZED, // an API key is required
///         _ => StatusCode::SERVICE_UNAVAILABLE,
///     }
/// }
/// let limited = RejectionKind::Limited { retry_after: Duration::from_millis(2_500) };
/// assert_eq!(status(&limited), 429);
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum RejectionKind {
    /// A policy denied: the same request is allowed after `retry_after` (unless someone else
    /// takes the tokens). `Retry-After` says it in whole seconds, rounded up, at least 1.
    Limited {
        /// The shortest wait after which the request would be allowed.
        retry_after: Duration,
    },
    /// The request costs more than a policy's capacity: it can never pass, so the answer is
    /// `400` (gRPC `INVALID_ARGUMENT`), not a `429` that clients retry.
    CostExceedsCapacity {
        /// The policy's name.
        policy: Arc<str>,
        /// What the request costs it.
        cost: u64,
        /// Its capacity.
        capacity: u64,
    },
    /// The store failed and the fail policy is to deny.
    StoreUnavailable,
    /// The request has no key (no client address, no API key header).
    MissingKey,
}

/// A request the layer refuses, as handed to a custom `rejection` hook of the layer builder
/// (with the request's parts).
///
/// ```
/// use http::{Response, StatusCode};
/// use tollgate::middleware::{RejectionKind, TollgateLayer};
/// use tollgate::{MemoryStore, Policy};
///
/// let layer = TollgateLayer::builder(MemoryStore::new())
///     .policy("api", Policy::per_second(10)?)
///     .rejection(|rejection, _parts| match rejection.kind() {
///         RejectionKind::Limited { .. } => Response::builder()
///             .status(StatusCode::TOO_MANY_REQUESTS)
///             .body(format!("{} is exhausted", rejection.policy().unwrap_or("a policy")))
///             .unwrap(),
///         // The missing key, the store unavailable: the default problem+json.
///         _ => rejection.default_response(),
///     })
///     .build()?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone)]
pub struct Rejection {
    pub(crate) kind: RejectionKind,
    pub(crate) grpc: bool,
    /// The policy that denied, and its decision (for [`RejectionKind::Limited`]).
    pub(crate) denied_by: Option<(Arc<str>, Decision)>,
    /// The key is [`ClientIp`](super::ClientIp)'s and the server gave no peer address: a
    /// server set up without one, which the default answer names the fix for.
    pub(crate) no_peer_addr: bool,
}

impl Rejection {
    /// A rejection for `kind`, of a plain HTTP request: what the layer hands its hook, made
    /// by hand to unit-test the layer builder's `rejection` hook.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::Decision;
    /// use tollgate::middleware::{Rejection, RejectionKind};
    ///
    /// let wait = Duration::from_secs(3);
    /// let rejection = Rejection::new(RejectionKind::Limited { retry_after: wait })
    ///     .denied_by("api", Decision::new(false, 10, 0, wait, Duration::from_secs(30)));
    /// assert_eq!(rejection.policy(), Some("api"));
    /// assert_eq!(rejection.default_response().status(), 429);
    /// assert_eq!(rejection.default_response().headers()["retry-after"], "3");
    /// ```
    pub fn new(kind: RejectionKind) -> Rejection {
        Rejection {
            kind,
            grpc: false,
            denied_by: None,
            no_peer_addr: false,
        }
    }

    /// This rejection, of a gRPC request (answered with a gRPC status) when `grpc`.
    pub fn grpc(mut self, grpc: bool) -> Rejection {
        self.grpc = grpc;
        self
    }

    /// This rejection, denied by the policy `policy` with `decision`.
    pub fn denied_by(mut self, policy: &str, decision: Decision) -> Rejection {
        self.denied_by = Some((policy.into(), decision));
        self
    }

    /// Why.
    pub fn kind(&self) -> &RejectionKind {
        &self.kind
    }

    /// The name of the policy that denied (the one with the longest wait, when several
    /// did); `None` unless the request was [`Limited`](RejectionKind::Limited).
    pub fn policy(&self) -> Option<&str> {
        self.denied_by.as_ref().map(|(name, _)| &**name)
    }

    /// That policy's decision: its limit, what is left, when to retry.
    pub fn decision(&self) -> Option<&Decision> {
        self.denied_by.as_ref().map(|(_, decision)| decision)
    }

    /// Whether the request is gRPC (`content-type: application/grpc...`).
    pub fn is_grpc(&self) -> bool {
        self.grpc
    }

    /// When to retry: the wait for [`Limited`](RejectionKind::Limited), a second for
    /// [`StoreUnavailable`](RejectionKind::StoreUnavailable), none otherwise (retrying
    /// changes nothing). The answer's `Retry-After` says it in whole seconds, rounded up, at
    /// least 1.
    pub fn retry_after(&self) -> Option<Duration> {
        match self.kind {
            RejectionKind::Limited { retry_after } => Some(retry_after),
            RejectionKind::StoreUnavailable => Some(Duration::from_secs(1)),
            _ => None,
        }
    }

    /// [`retry_after`](Self::retry_after) as `Retry-After` says it.
    fn retry_after_secs(&self) -> Option<u64> {
        self.retry_after().map(whole_seconds)
    }

    /// The default answer: a problem+json document with the matching status (429, 503, 400),
    /// or a gRPC status (`RESOURCE_EXHAUSTED`, `UNAVAILABLE`, `INVALID_ARGUMENT`), with
    /// `Retry-After`. A `String` body, so a hook can change it in place:
    /// `*response.body_mut() = "slow down".into()`.
    pub fn default_response(&self) -> Response<String> {
        let (status, grpc_code, kind, title, detail) = match &self.kind {
            RejectionKind::Limited { retry_after } => (
                StatusCode::TOO_MANY_REQUESTS,
                8,
                "rate-limited",
                "Too many requests",
                format!(
                    "the rate limit is exhausted; retry in {} s",
                    whole_seconds(*retry_after)
                ),
            ),
            RejectionKind::CostExceedsCapacity {
                policy,
                cost,
                capacity,
            } => (
                StatusCode::BAD_REQUEST,
                3,
                "cost-exceeds-capacity",
                "Request too costly",
                format!(
                    "cost {cost} exceeds the capacity {capacity} of the policy {policy:?}: \
                     it can never be allowed"
                ),
            ),
            RejectionKind::StoreUnavailable => (
                StatusCode::SERVICE_UNAVAILABLE,
                14,
                "store-unavailable",
                "Rate limiting is unavailable",
                "the rate-limit store did not answer; retry shortly".to_owned(),
            ),
            RejectionKind::MissingKey if self.no_peer_addr => (
                StatusCode::BAD_REQUEST,
                3,
                "missing-key",
                "No rate-limit key",
                NO_PEER_ADDR.to_owned(),
            ),
            RejectionKind::MissingKey => (
                StatusCode::BAD_REQUEST,
                3,
                "missing-key",
                "No rate-limit key",
                "the request carries nothing to rate-limit it by (client address or key header)"
                    .to_owned(),
            ),
        };
        let mut response = if self.grpc {
            // A trailers-only gRPC response: HTTP 200, the status in the headers.
            let mut r = Response::new(String::new());
            let h = r.headers_mut();
            h.insert(CONTENT_TYPE, HeaderValue::from_static("application/grpc"));
            h.insert(GRPC_STATUS.clone(), HeaderValue::from(grpc_code));
            if let Ok(message) = HeaderValue::try_from(grpc_message(&detail)) {
                h.insert(GRPC_MESSAGE.clone(), message);
            }
            r
        } else {
            let body = format!(
                r#"{{"type":"urn:tollgate:problem:{kind}","title":"{title}","status":{},"detail":{}}}"#,
                status.as_u16(),
                json_string(&detail)
            );
            let mut r = Response::new(body);
            *r.status_mut() = status;
            r.headers_mut().insert(
                CONTENT_TYPE,
                HeaderValue::from_static("application/problem+json"),
            );
            r
        };
        self.add_retry_after(response.headers_mut());
        response
    }

    /// Sets `Retry-After` on an answer for this rejection, unless it has one (a rejection
    /// hook's own).
    pub(crate) fn add_retry_after(&self, headers: &mut HeaderMap) {
        if let (Some(secs), false) = (self.retry_after_secs(), headers.contains_key(RETRY_AFTER)) {
            headers.insert(RETRY_AFTER, HeaderValue::from(secs));
        }
    }
}

/// `d` in whole seconds, rounded up, at least 1: a denial never says 0.
fn whole_seconds(d: Duration) -> u64 {
    crate::Nanos::from(d).as_secs_ceil().max(1)
}

/// `text` percent-encoded as gRPC's `grpc-message` must be: bytes outside printable ASCII,
/// and `%` itself (a policy's name may hold either).
fn grpc_message(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for &b in text.as_bytes() {
        if (0x20..=0x7e).contains(&b) && b != b'%' {
            out.push(char::from(b));
        } else {
            let _ = std::fmt::Write::write_fmt(&mut out, format_args!("%{b:02X}"));
        }
    }
    out
}

/// `text` as a JSON string: a policy's name in a detail may hold quotes or backslashes.
fn json_string(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 2);
    out.push('"');
    for c in text.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if u32::from(c) < 0x20 => {
                let _ =
                    std::fmt::Write::write_fmt(&mut out, format_args!("\\u{:04x}", u32::from(c)));
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// The detail of the `400` when [`ClientIp`](super::ClientIp) finds no peer address: no
/// request can have one, so it names the fix for each server.
pub(crate) const NO_PEER_ADDR: &str = "the server gives the rate limiter no client address: \
     with axum, serve `app.into_make_service_with_connect_info::<SocketAddr>()` and enable \
     tollgate's feature `axum`; with tonic, key by `ClientIp::new().peer_addr(|parts| \
     parts.extensions.get::<TcpConnectInfo>()?.remote_addr())` (over TLS, \
     `TlsConnectInfo<TcpConnectInfo>`); with hyper, wrap the service in \
     `PeerAddrLayer::new(peer)` for each connection";

/// The `RateLimit-Policy` header of `policies` (one item each). It is the same on every
/// response under them: the layer builds its own policies' once.
pub(crate) fn policy_header(policies: &[NamedPolicy]) -> Option<HeaderValue> {
    let mut text = String::with_capacity(32 * policies.len());
    for (i, named) in policies.iter().enumerate() {
        if i > 0 {
            text.push_str(", ");
        }
        // Writing to a String cannot fail.
        let _ = headers::write_rate_limit_policy(&mut text, &named.name, &named.policy);
    }
    // Built from numbers and escaped printable names: always valid header text.
    HeaderValue::try_from(text).ok()
}

/// Header text written on the stack, then copied once into the header's own allocation:
/// a `RateLimit` value is a few dozen bytes, and a `String` for it would be a second
/// allocation on every response.
struct StackText {
    bytes: [u8; 256],
    len: usize,
}

impl std::fmt::Write for StackText {
    fn write_str(&mut self, s: &str) -> std::fmt::Result {
        let end = self.len + s.len();
        let room = self.bytes.get_mut(self.len..end).ok_or(std::fmt::Error)?;
        room.copy_from_slice(s.as_bytes());
        self.len = end;
        Ok(())
    }
}

/// The `RateLimit` header of `decisions` under `policies` (one item each).
fn state_header(policies: &[NamedPolicy], decisions: &[Decision]) -> Option<HeaderValue> {
    fn write(
        out: &mut impl std::fmt::Write,
        policies: &[NamedPolicy],
        decisions: &[Decision],
    ) -> std::fmt::Result {
        for (i, (named, decision)) in policies.iter().zip(decisions).enumerate() {
            if i > 0 {
                out.write_str(", ")?;
            }
            headers::write_rate_limit(out, &named.name, decision)?;
        }
        Ok(())
    }
    let mut stack = StackText {
        bytes: [0; 256],
        len: 0,
    };
    if write(&mut stack, policies, decisions).is_ok() {
        return HeaderValue::from_bytes(&stack.bytes[..stack.len]).ok();
    }
    // Many policies, or long names.
    let mut text = String::new();
    let _ = write(&mut text, policies, decisions);
    HeaderValue::try_from(text).ok()
}

/// Adds the `RateLimit-Policy` (`policy`, when the caller has it built already) and
/// `RateLimit` headers (one item per policy) and, if asked, the legacy `X-RateLimit-*` ones
/// (for the most restrictive policy; `Reset` in seconds from now). An inner layer's headers
/// already on the response are kept: the lists get this layer's items after theirs.
pub(crate) fn add_headers(
    headers: &mut HeaderMap,
    policies: &[NamedPolicy],
    policy: Option<&HeaderValue>,
    decisions: &[Decision],
    legacy: bool,
) {
    let policy = match policy {
        Some(built) => Some(built.clone()),
        None => policy_header(policies),
    };
    if let (Some(p), Some(s)) = (policy, state_header(policies, decisions)) {
        append_items(headers, &RATELIMIT_POLICY, p);
        append_items(headers, &RATELIMIT, s);
    }
    let strictest = decisions.iter().min_by_key(|d| {
        (
            d.allowed(),
            d.remaining(),
            std::cmp::Reverse(d.retry_after()),
        )
    });
    if let (true, Some(d)) = (legacy, strictest) {
        // The legacy fields hold one number each: of two stacked layers, the one with fewer
        // tokens left speaks for both (an inner layer's values stay when they are stricter).
        let inner_remaining = headers
            .get(&X_REMAINING)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse::<u64>().ok());
        if inner_remaining.is_none_or(|inner| d.remaining() < inner) {
            headers.insert(X_LIMIT.clone(), HeaderValue::from(d.limit()));
            headers.insert(X_REMAINING.clone(), HeaderValue::from(d.remaining()));
            headers.insert(X_RESET.clone(), HeaderValue::from(d.reset_after_secs()));
        }
    }
}

/// Sets the list field `name` to `items`, after the items already there. `RateLimit-Policy`
/// and `RateLimit` are structured-field lists (draft-ietf-httpapi-ratelimit-headers, RFC 9651
/// section 3.1): lists combine by concatenation, so when layers are stacked (a global layer
/// around a per-route one) each adds its policies' items and none hides another's. One line
/// rather than several: many clients read only the first line of a field.
fn append_items(headers: &mut HeaderMap, name: &HeaderName, items: HeaderValue) {
    let mut lines = headers.get_all(name).iter().peekable();
    if lines.peek().is_none() {
        headers.insert(name.clone(), items);
        return;
    }
    let mut merged = Vec::with_capacity(items.len() + 64);
    for line in lines {
        merged.extend_from_slice(line.as_bytes());
        merged.extend_from_slice(b", ");
    }
    merged.extend_from_slice(items.as_bytes());
    // Two valid header values joined by ", " are a valid header value; keep ours otherwise.
    let merged = HeaderValue::from_bytes(&merged).unwrap_or(items);
    headers.insert(name.clone(), merged);
}

/// Whether a request is gRPC, by its content type.
pub(crate) fn is_grpc(headers: &HeaderMap) -> bool {
    headers
        .get(CONTENT_TYPE)
        .is_some_and(|v| v.as_bytes().starts_with(b"application/grpc"))
}
