//! The Redis protocol front end (`[resp] listen`, `--resp-listen`): redis-cell's
//! `CL.THROTTLE`, throttlecrab's `THROTTLE` and `TOLLGATE.CHECK` for the configured policies,
//! on any store, to clients that speak RESP2 or RESP3.
//!
//! Each connection reads whatever arrives, answers every whole request in it in order (a
//! pipeline's replies go out in one write, or in writes of 64 KiB for a long one), and keeps at
//! most [`MAX_PENDING`] bytes of a request not yet whole: a longer one, or one that is not RESP,
//! is answered with a protocol error and the connection closes, as Redis does. A connection
//! idle for the idle timeout (or whose client stops reading its replies for as long) is
//! closed, and so is one silent for the request timeout after it opens, or whose command
//! stays half-sent that long; at most the configured number are open at once (more are told
//! `-ERR max number of clients reached`, as Redis tells them, and closed). So a connection
//! holds at most about 16 + 66 + 64 KiB plus one reply.
//!
//! What a connection says, apart from its socket, is a [`Conversation`]: bytes in, the replies'
//! bytes out, one request at a time.

mod cmd;
pub mod codec;
mod conversation;
mod redis_cell;

use std::io;
use std::sync::Arc;
use std::time::Duration;

use std::pin::Pin;
use std::task::Poll;

use tokio::io::{AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::auth::Secret;
use crate::limiter::Limiter;
use crate::net::ListenerSettings;
use crate::net::accept::{Accepted, Acceptor, Admitted, OverCap, REFUSAL_TIME};
use crate::net::limits::{self, ConnLimits};
use crate::net::stream::Stream;
use crate::net::tls::Tls;
pub use cmd::Shared;
pub use conversation::{Answered, Conversation};

/// The longest bulk string or inline command line.
pub const MAX_ARGUMENT: usize = 64 * 1024;
/// The most bytes of an unfinished request a connection holds: an argument and its framing.
pub const MAX_PENDING: usize = MAX_ARGUMENT + 1024;
/// Bytes read at a time.
const READ_CHUNK: usize = 16 * 1024;
/// Replies are written out once this many bytes of them are waiting, even in the middle of a
/// pipeline: a client that sends many small commands and reads nothing cannot make a
/// connection hold more.
const FLUSH_AT: usize = 64 * 1024;

/// The RESP listener's settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RespSettings {
    /// `AUTH`'s password (the user `default`'s), if clients must give one.
    pub password: Option<Secret>,
    /// The listener's connection limits and TLS.
    pub listener: ListenerSettings,
}

impl Default for RespSettings {
    fn default() -> RespSettings {
        RespSettings {
            password: None,
            listener: ListenerSettings::plain(limits::RESP),
        }
    }
}

/// Serves RESP on `acceptor` until `shutdown`; connections open then are closed after the
/// request in hand.
pub async fn serve(
    mut acceptor: Acceptor,
    limiter: Arc<Limiter>,
    settings: RespSettings,
    tls: Option<Arc<Tls>>,
    shutdown: CancellationToken,
) -> io::Result<()> {
    let port = acceptor.local_addr()?.port();
    let shared = Arc::new(Shared::new(limiter, settings.password.clone(), port));
    let limits = settings.listener.limits;
    loop {
        let accepted = tokio::select! {
            () = shutdown.cancelled() => return Ok(()),
            accepted = acceptor.accept() => accepted,
        };
        match accepted {
            Accepted::Admitted(admitted) => {
                let shared = Arc::clone(&shared);
                let shutdown = shutdown.clone();
                let tls = tls.clone();
                let timed_out = acceptor.metrics().timed_out.clone();
                tokio::spawn(async move {
                    let Admitted {
                        stream,
                        place,
                        peer,
                    } = admitted;
                    // The handshake and the first command share the request timeout.
                    let opened = Instant::now();
                    let open = Stream::open(stream, tls.as_deref());
                    let first = limits.request_timeout.min(limits::NEVER);
                    let Ok(Ok(stream)) = tokio::time::timeout(first, open).await else {
                        timed_out.inc();
                        return;
                    };
                    // A connection's failure (a reset, a broken pipe) is the client's to see.
                    if let Ok(Ended::TimedOut) =
                        connection(stream, &shared, peer, &limits, opened, shutdown).await
                    {
                        timed_out.inc();
                    }
                    drop(place);
                });
            }
            Accepted::OverCap(refusal) => {
                let tls = tls.clone();
                tokio::spawn(tokio::time::timeout(REFUSAL_TIME, async move {
                    let OverCap { stream, .. } = refusal;
                    if let Ok(mut stream) = Stream::open(stream, tls.as_deref()).await {
                        // As Redis says it when `maxclients` is reached.
                        let _ = stream
                            .write_all(b"-ERR max number of clients reached\r\n")
                            .await;
                        let _ = stream.shutdown().await;
                    }
                }));
            }
        }
    }
}

/// Why a connection ended.
enum Ended {
    /// The client closed it, asked to, or the server stopped.
    Closed,
    /// It stayed silent, or stalled a command, too long.
    TimedOut,
}

async fn connection(
    mut stream: Stream,
    shared: &Shared,
    peer: std::net::IpAddr,
    conn: &ConnLimits,
    opened: Instant,
    shutdown: CancellationToken,
) -> io::Result<Ended> {
    use bytes::BufMut;

    let _connected = shared.connect();
    let mut conversation = Conversation::new(shared, peer);
    let mut input: Vec<u8> = Vec::with_capacity(READ_CHUNK);
    let mut output: Vec<u8> = Vec::with_capacity(4096);
    // One timer and one cancellation waiter for the connection's life, not one of each per
    // read: registering them is most of what a request costs the runtime. The connection is
    // idle from when its replies are out; the timer is moved on only when it fires early.
    // Until its first command, and while a command is half-read, it has the request timeout;
    // between commands, the idle timeout. A timeout too long to add to a time never comes
    // (as `tokio::time::timeout` treats it).
    let idle = conn.idle_timeout;
    let deadline =
        |since: Instant, waiting: Duration| since.checked_add(waiting).unwrap_or_else(far_future);
    // The time the connection must show progress by is `since` + `waiting`.
    let (mut since, mut waiting) = (opened, conn.request_timeout);
    // Until the first command is whole, the connection counts as one with a command half-read.
    let mut half_read_since = Some(opened);
    let mut timer_at = deadline(since, waiting);
    let idle_timer = tokio::time::sleep_until(timer_at);
    let cancelled = shutdown.cancelled();
    tokio::pin!(idle_timer, cancelled);
    loop {
        // Read straight into the buffer, at most a chunk at a time.
        input.reserve(READ_CHUNK);
        let mut room = (&mut input).limit(READ_CHUNK);
        let read = tokio::select! {
            biased;
            () = &mut cancelled => return Ok(Ended::Closed),
            read = stream.read_buf(&mut room) => read,
            () = &mut idle_timer => {
                timer_at = deadline(since, waiting);
                if timer_at <= Instant::now() {
                    return Ok(Ended::TimedOut);
                }
                idle_timer.as_mut().reset(timer_at);
                continue;
            }
        };
        if read? == 0 {
            return Ok(Ended::Closed);
        }
        let mut consumed = 0;
        let mut close = false;
        while !close {
            match conversation.answer(&input[consumed..], &mut output).await {
                Answered::Incomplete => break,
                Answered::Broken => close = true,
                Answered::Request { used, close: last } => {
                    consumed += used;
                    close = last;
                    if output.len() >= FLUSH_AT && !flush(&mut stream, &mut output, idle).await? {
                        return Ok(Ended::TimedOut);
                    }
                }
            }
        }
        input.drain(..consumed);
        if !flush(&mut stream, &mut output, idle).await? {
            return Ok(Ended::TimedOut);
        }
        if close {
            stream.shutdown().await?;
            return Ok(Ended::Closed);
        }
        // Between commands the connection may idle; a command half-read must be whole within
        // the request timeout of its first bytes, however slowly the rest trickles in.
        let now = Instant::now();
        (since, waiting) = if input.is_empty() {
            half_read_since = None;
            (now, idle)
        } else {
            (*half_read_since.get_or_insert(now), conn.request_timeout)
        };
        if deadline(since, waiting) < timer_at {
            timer_at = deadline(since, waiting);
            idle_timer.as_mut().reset(timer_at);
        }
        // A connection that once held a large request or reply does not keep its memory.
        if input.capacity() > 2 * READ_CHUNK && input.len() <= READ_CHUNK {
            input.shrink_to(READ_CHUNK);
        }
        if output.capacity() > 2 * FLUSH_AT {
            output.shrink_to(4096);
        }
    }
}

/// About thirty years from now: later than any connection lives, still a valid time.
fn far_future() -> Instant {
    Instant::now() + Duration::from_secs(30 * 365 * 86_400)
}

/// Writes out the replies waiting in `output`; `false` when the client has not taken them
/// within `idle` (it stopped reading: the connection is dropped).
async fn flush(stream: &mut Stream, output: &mut Vec<u8>, idle: Duration) -> io::Result<bool> {
    if output.is_empty() {
        return Ok(true);
    }
    // Usually the socket takes it all at once: then no timer is made.
    let written = std::future::poll_fn(|cx| {
        Poll::Ready(match Pin::new(&mut *stream).poll_write(cx, output) {
            Poll::Ready(written) => written,
            Poll::Pending => Ok(0),
        })
    })
    .await?;
    if written == output.len() {
        output.clear();
        return push(stream, idle).await;
    }
    output.drain(..written);
    match tokio::time::timeout(idle, stream.write_all(output)).await {
        Ok(written) => {
            written?;
            output.clear();
            push(stream, idle).await
        }
        Err(_) => Ok(false),
    }
}

/// Pushes out what the stream holds back (TLS records rustls buffered); `false` when the client
/// has not taken it within `idle`. Plain TCP has nothing to push: no timer is made then.
async fn push(stream: &mut Stream, idle: Duration) -> io::Result<bool> {
    let pushed = std::future::poll_fn(|cx| {
        Poll::Ready(match Pin::new(&mut *stream).poll_flush(cx) {
            Poll::Ready(done) => done.map(|()| true),
            Poll::Pending => Ok(false),
        })
    })
    .await?;
    if pushed {
        return Ok(true);
    }
    match tokio::time::timeout(idle, stream.flush()).await {
        Ok(flushed) => flushed.map(|()| true),
        Err(_) => Ok(false),
    }
}
