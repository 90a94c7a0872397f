//! The JSON floor of the server's variants: `POST /v1/check` as any JSON endpoint on axum
//! answers it, with the server's request and the server's answer, but no decision.
//!
//! The body is read whole, parsed with serde (borrowing from the body where it can), and
//! answered with a body of the server's shape, serialized by serde, and the `RateLimit`
//! headers of an allow-all bucket. The numbers are fixed: whatever `tollgate serve` spends
//! beyond this on a check (resolving the policy, deciding, counting, its own listener) is
//! the server's own cost over a JSON endpoint.

use std::borrow::Cow;

use axum::Router;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use bytes::Bytes;
use serde::{Deserialize, Serialize};

/// The server's request body: `{"policy": ..., "key": ...}`.
#[derive(Deserialize)]
struct CheckBody<'a> {
    /// Borrowed from the body unless it holds an escape.
    #[serde(borrow)]
    policy: Cow<'a, str>,
    #[serde(borrow)]
    key: Cow<'a, str>,
}

/// The server's answer to an allowed check of a named policy.
#[derive(Serialize)]
struct Answer<'a> {
    allowed: bool,
    limit: u64,
    remaining: u64,
    reset_after_ms: u64,
    retry_after_ms: u64,
    policy: &'a str,
}

/// The router of [`Variant::BareJson`](super::Variant::BareJson), on whatever serves it.
pub(crate) fn router() -> Router {
    Router::new().route("/v1/check", post(check))
}

/// Parses the check and answers it as an allow-all bucket would, echoing its policy: a body
/// that is not such a check is answered `400`, as the server answers it.
async fn check(body: Bytes) -> Response {
    let Ok(check) = serde_json::from_slice::<CheckBody<'_>>(&body) else {
        return StatusCode::BAD_REQUEST.into_response();
    };
    if check.key.is_empty() {
        return StatusCode::BAD_REQUEST.into_response();
    }
    let answer = Answer {
        allowed: true,
        limit: 1_000_000_000,
        remaining: 999_999_999,
        reset_after_ms: 1,
        retry_after_ms: 0,
        policy: &check.policy,
    };
    let Ok(json) = serde_json::to_vec(&answer) else {
        return StatusCode::INTERNAL_SERVER_ERROR.into_response();
    };
    (
        [
            (
                header::CONTENT_TYPE,
                HeaderValue::from_static("application/json"),
            ),
            (
                header::HeaderName::from_static("ratelimit-policy"),
                HeaderValue::from_static("\"allow_all\";q=1000000000;w=1"),
            ),
            (
                header::HeaderName::from_static("ratelimit"),
                HeaderValue::from_static("\"allow_all\";r=999999999;t=1"),
            ),
        ],
        json,
    )
        .into_response()
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::BodyExt;

    async fn answer(body: &'static str) -> (StatusCode, Option<String>, String) {
        let response = check(Bytes::from_static(body.as_bytes())).await;
        let status = response.status();
        let ratelimit = response
            .headers()
            .get("ratelimit")
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        let body = response.into_body().collect().await.unwrap().to_bytes();
        (status, ratelimit, String::from_utf8(body.to_vec()).unwrap())
    }

    #[tokio::test]
    async fn a_check_is_answered_in_the_servers_shape() {
        let (status, ratelimit, body) = answer(r#"{"policy":"allow_all","key":"key-00001"}"#).await;
        assert_eq!(status, StatusCode::OK);
        assert_eq!(ratelimit.as_deref(), Some("\"allow_all\";r=999999999;t=1"));
        assert_eq!(
            body,
            r#"{"allowed":true,"limit":1000000000,"remaining":999999999,"reset_after_ms":1,"retry_after_ms":0,"policy":"allow_all"}"#
        );
        // An escape in a field is parsed too (owned, not borrowed).
        let (status, _, body) = answer(r#"{"policy":"a\u0062c","key":"k"}"#).await;
        assert_eq!(status, StatusCode::OK);
        assert!(body.ends_with(r#""policy":"abc"}"#), "{body}");
    }

    #[tokio::test]
    async fn what_is_not_a_check_is_refused() {
        for body in [
            "",
            "{",
            r#"{"policy":"allow_all"}"#,
            r#"{"policy":"p","key":""}"#,
        ] {
            assert_eq!(answer(body).await.0, StatusCode::BAD_REQUEST, "{body}");
        }
    }
}
