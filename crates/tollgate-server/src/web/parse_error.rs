//! The answer hyper gives a request it cannot parse, made a problem like every other error.
//!
//! hyper's HTTP/1 server answers a malformed request line or header (400), a URI too long (414)
//! or headers too large (431) itself, before any service sees the request, with an empty body,
//! and hyper 1 offers no hook to change that answer (`Server::on_error` in its `h1::role` fixes
//! the status and nothing else). So each connection's IO is wrapped, and exactly that answer,
//! as hyper writes it, is rewritten on its way out: hyper's head, with its `content-length: 0`
//! replaced by the problem's type and length, then the `application/problem+json` body. Every
//! answer of the server's own to those statuses is a problem already (with a body, so never
//! `content-length: 0`); HTTP/2 errors are stream resets, not answers, and pass as they are.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use axum::http::StatusCode;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use super::problem::Problem;

/// A connection whose parse-error answers are problems.
pub(super) struct ProblemOnParseError<T> {
    io: T,
    /// The rewritten answer, and how much of it is written.
    pending: Vec<u8>,
    written: usize,
}

impl<T> ProblemOnParseError<T> {
    /// Wraps `io`.
    pub(super) fn new(io: T) -> ProblemOnParseError<T> {
        ProblemOnParseError {
            io,
            pending: Vec::new(),
            written: 0,
        }
    }
}

/// The problem for hyper's own answer `head`, if it is one: a complete HTTP/1.1 head of status
/// 400, 414 or 431 with `content-length: 0` and `connection: close`.
fn rewrite(head: &[u8]) -> Option<Vec<u8>> {
    let text = std::str::from_utf8(head).ok()?;
    let rest = text.strip_prefix("HTTP/1.1 ")?.strip_suffix("\r\n\r\n")?;
    let (status, detail) = match rest.get(..3)? {
        "400" => (
            StatusCode::BAD_REQUEST,
            "the request line or a header field is not valid HTTP/1.1 (a method, URI, version \
             or header that cannot be parsed, or bytes outside what HTTP allows)",
        ),
        "414" => (
            StatusCode::URI_TOO_LONG,
            "the request's URI is longer than the server reads",
        ),
        "431" => (
            StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE,
            "the request's line and header fields are larger than the server reads",
        ),
        _ => return None,
    };
    let lines: Vec<&str> = rest.split("\r\n").collect();
    let is = |wanted: &str| lines.iter().any(|l| l.eq_ignore_ascii_case(wanted));
    if !is("content-length: 0") || !is("connection: close") {
        return None;
    }
    let body = Problem::http(status, detail).body();
    let mut answer = String::from("HTTP/1.1 ");
    for line in lines {
        if line.eq_ignore_ascii_case("content-length: 0") {
            answer.push_str("content-type: application/problem+json\r\n");
            answer.push_str(&format!("content-length: {}", body.len()));
        } else {
            answer.push_str(line);
        }
        answer.push_str("\r\n");
    }
    answer.push_str("\r\n");
    answer.push_str(&body);
    Some(answer.into_bytes())
}

impl<T: AsyncWrite + Unpin> ProblemOnParseError<T> {
    /// Writes out the rewritten answer, if one is pending.
    fn drain(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        while self.written < self.pending.len() {
            let n = ready!(Pin::new(&mut self.io).poll_write(cx, &self.pending[self.written..]))?;
            if n == 0 {
                return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
            }
            self.written += n;
        }
        self.pending = Vec::new();
        self.written = 0;
        Poll::Ready(Ok(()))
    }

    /// Takes `buf` as hyper's parse-error answer, if it is one: its problem is written instead
    /// (now or at the flush hyper asks next), and all of `buf` counts as written.
    fn take(&mut self, cx: &mut Context<'_>, buf: &[u8]) -> Option<Poll<io::Result<usize>>> {
        let answer = rewrite(buf)?;
        self.pending = answer;
        self.written = 0;
        Some(match self.drain(cx) {
            Poll::Ready(Err(e)) => Poll::Ready(Err(e)),
            _ => Poll::Ready(Ok(buf.len())),
        })
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for ProblemOnParseError<T> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_read(cx, buf)
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for ProblemOnParseError<T> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        ready!(self.drain(cx))?;
        if let Some(taken) = self.take(cx, buf) {
            return taken;
        }
        Pin::new(&mut self.io).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        ready!(self.drain(cx))?;
        // hyper writes a head as one buffer: the first that is not empty.
        if let Some(first) = bufs.iter().find(|b| !b.is_empty())
            && let Some(taken) = self.take(cx, first)
        {
            return taken;
        }
        Pin::new(&mut self.io).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        ready!(self.drain(cx))?;
        Pin::new(&mut self.io).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        ready!(self.drain(cx))?;
        Pin::new(&mut self.io).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_hypers_own_answers_are_rewritten() {
        let hyper = b"HTTP/1.1 414 URI Too Long\r\nconnection: close\r\ncontent-length: 0\r\ndate: Thu, 26 Nov 2026 17:05:23 GMT\r\n\r\n";
        let answer = String::from_utf8(rewrite(hyper).unwrap()).unwrap();
        let (head, body) = answer.split_once("\r\n\r\n").unwrap();
        assert_eq!(
            head,
            format!(
                "HTTP/1.1 414 URI Too Long\r\nconnection: close\r\ncontent-type: \
                 application/problem+json\r\ncontent-length: {}\r\ndate: Thu, 26 Nov 2026 \
                 17:05:23 GMT",
                body.len()
            )
        );
        let body: serde_json::Value = serde_json::from_str(body).unwrap();
        assert_eq!(body["status"], 414);
        assert_eq!(body["type"], "urn:tollgate:problem:uri-too-long");
        // A body follows, or the connection stays open, or another status: not hyper's.
        for other in [
            &b"HTTP/1.1 400 Bad Request\r\nconnection: close\r\ncontent-length: 0\r\n\r\n{}"[..],
            b"HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\n\r\n",
            b"HTTP/1.1 404 Not Found\r\nconnection: close\r\ncontent-length: 0\r\n\r\n",
            b"\x00\x00\x12\x04\x00\x00\x00\x00\x00",
        ] {
            assert_eq!(rewrite(other), None);
        }
    }
}
