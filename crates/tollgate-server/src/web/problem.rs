//! Error answers as `application/problem+json` (RFC 9457): a machine-readable `type`, the HTTP
//! `status`, a human `detail`, and, for bad input, the `field` at fault. Every error the server
//! returns goes through here, so none of them is a bare status or a trace.

use std::borrow::Cow;

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::json;

use crate::auth::AuthError;
use crate::limiter::DecideError;

/// An error answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    status: StatusCode,
    kind: &'static str,
    title: &'static str,
    detail: String,
    field: Option<Cow<'static, str>>,
    retry_after_secs: Option<u64>,
}

impl Problem {
    /// 400: `field` of the request is missing, mistyped or out of range.
    pub fn invalid_field(
        field: impl Into<Cow<'static, str>>,
        detail: impl Into<String>,
    ) -> Problem {
        Problem {
            status: StatusCode::BAD_REQUEST,
            kind: "invalid-field",
            title: "A field of the request is invalid",
            detail: detail.into(),
            field: Some(field.into()),
            retry_after_secs: None,
        }
    }

    /// 400: the body is not JSON, or not a JSON object, or cannot be read.
    pub fn malformed_body(detail: impl Into<String>) -> Problem {
        Problem {
            status: StatusCode::BAD_REQUEST,
            kind: "malformed-body",
            title: "The request body is not a JSON object",
            detail: detail.into(),
            field: Some(Cow::Borrowed("body")),
            retry_after_secs: None,
        }
    }

    /// 413: the body is longer than `limit` bytes.
    pub fn body_too_large(limit: usize) -> Problem {
        Problem {
            status: StatusCode::PAYLOAD_TOO_LARGE,
            kind: "body-too-large",
            title: "The request body is too large",
            detail: format!("the body is longer than {limit} bytes"),
            field: Some(Cow::Borrowed("body")),
            retry_after_secs: None,
        }
    }

    /// 503: the store failed and the fail policy is to deny.
    pub fn store_unavailable(detail: impl Into<String>) -> Problem {
        Problem {
            status: StatusCode::SERVICE_UNAVAILABLE,
            kind: "store-unavailable",
            title: "The rate-limit store is unavailable",
            detail: detail.into(),
            field: None,
            retry_after_secs: Some(1),
        }
    }

    /// 503: no Envoy config is loaded yet (configuration over xDS, before its first version).
    pub fn no_config(detail: impl Into<String>) -> Problem {
        Problem {
            status: StatusCode::SERVICE_UNAVAILABLE,
            kind: "no-config",
            title: "No rate-limit configuration is loaded yet",
            detail: detail.into(),
            field: None,
            retry_after_secs: Some(1),
        }
    }

    /// 409: a reservation that cannot be committed (unknown, forged, expired, or committed
    /// already); nothing changed.
    pub fn reservation_conflict(detail: impl Into<String>) -> Problem {
        Problem {
            status: StatusCode::CONFLICT,
            kind: "reservation-conflict",
            title: "The reservation cannot be committed",
            detail: detail.into(),
            field: Some(Cow::Borrowed("reservation")),
            retry_after_secs: None,
        }
    }

    /// 503: the listener holds as many connections as `cap` allows; the connection closes.
    pub fn too_many_connections(cap: &str) -> Problem {
        Problem {
            status: StatusCode::SERVICE_UNAVAILABLE,
            kind: "too-many-connections",
            title: "Too many connections",
            detail: format!("the server holds its {cap} open already; try again shortly"),
            field: None,
            retry_after_secs: Some(1),
        }
    }

    /// 403: the token may not do this to this resource (another token's reservation).
    pub fn forbidden(detail: impl Into<String>) -> Problem {
        Problem {
            status: StatusCode::FORBIDDEN,
            kind: "forbidden",
            title: "The token does not allow this request",
            detail: detail.into(),
            field: Some(Cow::Borrowed("reservation")),
            retry_after_secs: None,
        }
    }

    /// 408: the request's body stalled for longer than the listener's `request_timeout`.
    pub fn request_timeout(detail: impl Into<String>) -> Problem {
        Problem {
            status: StatusCode::REQUEST_TIMEOUT,
            kind: "request-timeout",
            title: "The request took too long to arrive",
            detail: detail.into(),
            field: Some(Cow::Borrowed("body")),
            retry_after_secs: None,
        }
    }

    /// What is wrong, for a person.
    pub fn detail(&self) -> &str {
        &self.detail
    }

    /// The field of the request at fault, if one is.
    pub fn field(&self) -> Option<&str> {
        self.field.as_deref()
    }

    /// 404 for a path the server does not serve.
    pub fn not_found(path: &str) -> Problem {
        Problem {
            status: StatusCode::NOT_FOUND,
            kind: "not-found",
            title: "No such resource",
            detail: format!("nothing is served at {path}"),
            field: None,
            retry_after_secs: None,
        }
    }

    /// 404: the thing `field` names does not exist (`detail` says which, and what does).
    pub fn unknown(field: &'static str, detail: impl Into<String>) -> Problem {
        Problem {
            detail: detail.into(),
            field: Some(Cow::Borrowed(field)),
            ..Problem::not_found("")
        }
    }

    /// 404 on the data port for a path the admin listener at `admin` serves.
    pub fn moved_to_admin(path: &str, admin: &str) -> Problem {
        Problem {
            detail: format!(
                "{path} is served on the admin listener ({admin}), not on this port ([admin] \
                 listen in the config file)"
            ),
            ..Problem::not_found(path)
        }
    }

    /// 405 for a known path asked with the wrong method.
    pub fn method_not_allowed(method: &str, path: &str) -> Problem {
        Problem {
            status: StatusCode::METHOD_NOT_ALLOWED,
            kind: "method-not-allowed",
            title: "Method not allowed",
            detail: format!("{path} does not answer {method}"),
            field: None,
            retry_after_secs: None,
        }
    }

    /// An error of HTTP itself, answered before any endpoint sees the request (hyper's parse
    /// errors) or by an extractor's rejection: its status, and what went wrong.
    pub fn http(status: StatusCode, detail: impl Into<String>) -> Problem {
        let (kind, title) = match status {
            StatusCode::BAD_REQUEST => ("bad-request", "The request cannot be read"),
            StatusCode::URI_TOO_LONG => ("uri-too-long", "The request's URI is too long"),
            StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE => (
                "headers-too-large",
                "The request's header fields are too large",
            ),
            StatusCode::UNSUPPORTED_MEDIA_TYPE => (
                "unsupported-media-type",
                "The request body's type is not served",
            ),
            s if s.is_server_error() => ("server-error", "The server failed to answer"),
            _ => ("http-error", "The request cannot be answered"),
        };
        Problem {
            status,
            kind,
            title,
            detail: detail.into(),
            field: None,
            retry_after_secs: None,
        }
    }

    /// The HTTP status.
    pub fn status(&self) -> StatusCode {
        self.status
    }

    /// The JSON body.
    pub fn body(&self) -> String {
        let mut body = json!({
            "type": format!("urn:tollgate:problem:{}", self.kind),
            "title": self.title,
            "status": self.status.as_u16(),
            "detail": self.detail,
        });
        if let Some(field) = &self.field {
            body["field"] = field.as_ref().into();
        }
        body.to_string()
    }
}

/// The longest text body of another error answer taken in as a problem's detail.
const MAX_DETAIL_BYTES: usize = 4096;

/// Makes an error answer of plain text or of no body a problem: an extractor's rejection (a
/// path that is not UTF-8 once decoded, say) keeps its status and headers, and its text becomes
/// the detail. An answer in JSON (a problem, or a 429's decision) or gRPC stays as it is.
/// Layered on every router, so that no error leaves as bare text.
pub async fn ensure_problem(response: Response) -> Response {
    if !needs_problem(&response) {
        return response;
    }
    let status = response.status();
    let (mut parts, body) = response.into_parts();
    let text = axum::body::to_bytes(body, MAX_DETAIL_BYTES)
        .await
        .map(|bytes| String::from_utf8_lossy(&bytes).trim().to_owned())
        .unwrap_or_default();
    let detail = if text.is_empty() {
        status.canonical_reason().unwrap_or("error").to_owned()
    } else {
        text
    };
    let mut problem = Problem::http(status, detail).into_response();
    parts.headers.remove(header::CONTENT_LENGTH);
    parts.headers.remove(header::CONTENT_TYPE);
    problem.headers_mut().extend(parts.headers);
    problem
}

/// Marks an error answer whose bare form is its protocol's (envoyproxy/ratelimit's
/// `/healthcheck`: a `500` with no body): [`ensure_problem`] leaves it as it is.
#[derive(Debug, Clone, Copy)]
pub struct AsIs;

/// Whether [`ensure_problem`] would rewrite `response`: an error answer of plain text or of no
/// body, unless marked [`AsIs`].
pub fn needs_problem(response: &Response) -> bool {
    if response.extensions().get::<AsIs>().is_some() {
        return false;
    }
    let status = response.status();
    let plain = response
        .headers()
        .get(header::CONTENT_TYPE)
        .is_none_or(|t| t.as_bytes().starts_with(b"text/plain"));
    (status.is_client_error() || status.is_server_error()) && plain
}

impl From<DecideError> for Problem {
    /// 400 naming the field at fault, 403 for an inline policy where they are refused, 503
    /// when the store failed and the fail policy is to deny.
    fn from(error: DecideError) -> Problem {
        let detail = error.to_string();
        match error {
            DecideError::UnknownPolicy { field, .. } => Problem::invalid_field(field, detail),
            DecideError::Unsupported { field, .. } => {
                Problem::invalid_field(http_field(field), detail)
            }
            DecideError::CostExceedsCapacity(_) => Problem::invalid_field("cost", detail),
            DecideError::InvalidKey(_) | DecideError::Key(_) => {
                Problem::invalid_field("key", detail)
            }
            DecideError::NotTokenBucket { .. } => Problem::invalid_field("policy", detail),
            DecideError::Policies(_) => Problem::invalid_field("policies", detail),
            DecideError::InlineRefused => Problem {
                status: StatusCode::FORBIDDEN,
                kind: "inline-policies-refused",
                title: "This server takes configured policies only",
                detail: "inline policies (capacity, refill, period_ms) are turned off on this \
                         server (http.inline_policies = false); name a configured policy with \
                         \"policy\", see GET /v1/policies"
                    .to_owned(),
                field: Some(Cow::Borrowed("policy")),
                retry_after_secs: None,
            },
            DecideError::Unavailable(_) => Problem::store_unavailable(detail),
        }
    }
}

impl From<AuthError> for Problem {
    /// 401 for a missing or wrong token (with `WWW-Authenticate: Bearer`), 403 for a token
    /// without the scope, 429 with `Retry-After` for an address that failed too often.
    fn from(refusal: AuthError) -> Problem {
        if let AuthError::Blocked { retry_after } = refusal {
            return Problem {
                status: StatusCode::TOO_MANY_REQUESTS,
                kind: "too-many-failed-authentications",
                title: "Too many failed authentications from this address",
                detail: refusal.to_string(),
                field: None,
                retry_after_secs: Some(crate::auth::whole_seconds(retry_after)),
            };
        }
        let (status, kind, title) = if refusal.is_unauthenticated() {
            (
                StatusCode::UNAUTHORIZED,
                "unauthenticated",
                "A valid bearer token is required",
            )
        } else {
            (
                StatusCode::FORBIDDEN,
                "forbidden",
                "The token does not allow this request",
            )
        };
        Problem {
            status,
            kind,
            title,
            detail: refusal.to_string(),
            field: None,
            retry_after_secs: None,
        }
    }
}

impl IntoResponse for Problem {
    fn into_response(self) -> Response {
        let mut response = (self.status, self.body()).into_response();
        let headers = response.headers_mut();
        headers.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/problem+json"),
        );
        if self.status == StatusCode::UNAUTHORIZED {
            // RFC 6750: the scheme a client should answer the challenge with.
            headers.insert(
                header::WWW_AUTHENTICATE,
                HeaderValue::from_static("Bearer realm=\"tollgate\""),
            );
        }
        if let Some(secs) = self.retry_after_secs {
            headers.insert(header::RETRY_AFTER, HeaderValue::from(secs));
        }
        response
    }
}

/// The HTTP API's name of a policy's number (`Policy`'s errors name `period`, which the API
/// takes in milliseconds, as `period_ms`).
pub fn http_field(field: &'static str) -> &'static str {
    match field {
        "period" => "period_ms",
        other => other,
    }
}
