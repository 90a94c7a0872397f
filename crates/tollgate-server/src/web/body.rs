//! A request's body, read whole up to a bound: what a client sends can never grow a
//! connection's memory past it.

use axum::body::{Body, Bytes};
use bytes::BytesMut;
use http_body_util::BodyExt;

use super::BodyStalled;
use super::problem::Problem;

/// The longest body accepted, in bytes.
pub const MAX_BODY_BYTES: usize = 64 * 1024;

/// The body, or the problem to answer: too long, or not readable.
///
/// Read frame by frame rather than by `http_body_util`'s `collect`, which queues every chunk
/// in a list it allocates: the usual body is one chunk (it came with the request's head),
/// taken as it is; only a body of several is copied into one.
pub async fn read(mut body: Body) -> Result<Bytes, Problem> {
    let mut read = Read::One(Bytes::new());
    let mut len = 0;
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(|e| unreadable(&e))?;
        // Trailers say nothing the answer needs.
        let Ok(data) = frame.into_data() else {
            continue;
        };
        // An empty chunk adds nothing, and joining it would copy the body for nothing: over
        // HTTP/2 a client that streams its body often ends it with an empty DATA frame.
        if data.is_empty() {
            continue;
        }
        len += data.len();
        if len > MAX_BODY_BYTES {
            return Err(Problem::body_too_large(MAX_BODY_BYTES));
        }
        read = match read {
            // No chunk yet (every chunk taken is non-empty).
            Read::One(first) if first.is_empty() => Read::One(data),
            Read::One(first) => {
                let mut joined = BytesMut::with_capacity(len);
                joined.extend_from_slice(&first);
                joined.extend_from_slice(&data);
                Read::Joined(joined)
            }
            Read::Joined(mut joined) => {
                joined.extend_from_slice(&data);
                Read::Joined(joined)
            }
        };
    }
    Ok(match read {
        Read::One(bytes) => bytes,
        Read::Joined(joined) => joined.freeze(),
    })
}

/// A body read so far: at most one chunk, as it came, or several copied into one.
enum Read {
    One(Bytes),
    Joined(BytesMut),
}

/// The problem of a body that failed: it stalled (`408`), or could not be read.
fn unreadable(e: &axum::Error) -> Problem {
    if stalled(e).is_some() {
        Problem::request_timeout(e.to_string())
    } else {
        Problem::malformed_body(format!("the body could not be read: {e}"))
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
