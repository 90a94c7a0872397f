//! A request's body, read whole up to a bound: what a client sends can never grow a
//! connection's memory past it.

use axum::body::{Body, Bytes};
use http_body_util::{BodyExt, LengthLimitError, Limited};

use super::BodyStalled;
use super::problem::Problem;

/// The longest body accepted, in bytes.
pub const MAX_BODY_BYTES: usize = 64 * 1024;

/// The body, or the problem to answer: too long, or not readable.
pub async fn read(body: Body) -> Result<Bytes, Problem> {
    match Limited::new(body, MAX_BODY_BYTES).collect().await {
        Ok(collected) => Ok(collected.to_bytes()),
        Err(e) if e.is::<LengthLimitError>() => Err(Problem::body_too_large(MAX_BODY_BYTES)),
        Err(e) if stalled(&*e).is_some() => Err(Problem::request_timeout(e.to_string())),
        Err(e) => Err(Problem::malformed_body(format!(
            "the body could not be read: {e}"
        ))),
    }
}

/// The [`BodyStalled`] somewhere in `e`'s chain (axum wraps the body's own error).
fn stalled<'a>(e: &'a (dyn std::error::Error + 'static)) -> Option<&'a BodyStalled> {
    let mut at = Some(e);
    while let Some(e) = at {
        if let Some(stalled) = e.downcast_ref::<BodyStalled>() {
            return Some(stalled);
        }
        at = e.source();
    }
    None
}

/// Reads `body` to its end, or to [`MAX_BODY_BYTES`], and drops it: for an answer that needs
/// nothing of it but must not be sent before it arrived.
pub async fn drain(body: Body) -> Result<(), Problem> {
    read(body).await.map(drop)
}
