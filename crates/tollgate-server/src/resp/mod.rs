//! The Redis protocol front end (`[resp] listen`, `--resp-listen`): redis-cell's
//! `CL.THROTTLE`, throttlecrab's `THROTTLE` and `TOLLGATE.CHECK` for the configured policies,
//! on any store, to clients that speak RESP2 or RESP3.
//!
//! Each connection reads whatever arrives, answers every whole request in it in order (a
//! pipeline's replies go out in one write, or in writes of 64 KiB for a long one), and keeps at
//! most [`MAX_PENDING`] bytes of a request not yet whole: a longer one, or one that is not RESP,
//! is answered with a protocol error and the connection closes, as Redis does. A connection
//! idle for the idle timeout (or whose client stops reading its replies for as long) is
//! closed; at most the configured number are open at once (more wait in the kernel's backlog).
//! So a connection holds at most about 16 + 66 + 64 KiB plus one reply.

mod cell;
mod cmd;
pub mod codec;

use std::io;
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::auth::Secret;
use crate::limiter::Limiter;
use cmd::{After, Session, Shared};
use codec::{Limits, Reply};

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
/// Connections open at once, by default.
pub const DEFAULT_MAX_CONNECTIONS: usize = 4096;
/// How long a connection may stay silent, by default.
pub const DEFAULT_IDLE_TIMEOUT: Duration = Duration::from_secs(300);

/// The RESP listener's settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RespSettings {
    /// `AUTH`'s password (the user `default`'s), if clients must give one.
    pub password: Option<Secret>,
    /// Connections silent this long are closed.
    pub idle_timeout: Duration,
    /// Connections open at once.
    pub max_connections: usize,
}

impl Default for RespSettings {
    fn default() -> RespSettings {
        RespSettings {
            password: None,
            idle_timeout: DEFAULT_IDLE_TIMEOUT,
            max_connections: DEFAULT_MAX_CONNECTIONS,
        }
    }
}

/// Serves RESP on `listener` until `shutdown`; connections open then are closed after the
/// request in hand.
pub async fn serve(
    listener: TcpListener,
    limiter: Arc<Limiter>,
    settings: RespSettings,
    shutdown: CancellationToken,
) -> io::Result<()> {
    let port = listener.local_addr()?.port();
    let shared = Arc::new(Shared::new(limiter, settings.password.clone(), port));
    let slots = Arc::new(Semaphore::new(settings.max_connections.max(1)));
    loop {
        let Ok(slot) = Arc::clone(&slots).acquire_owned().await else {
            return Ok(());
        };
        let accepted = tokio::select! {
            () = shutdown.cancelled() => return Ok(()),
            accepted = listener.accept() => accepted,
        };
        let stream = match accepted {
            Ok((stream, _)) => stream,
            Err(e) => {
                tracing::debug!(error = %e, "RESP accept failed");
                tokio::time::sleep(Duration::from_millis(5)).await;
                continue;
            }
        };
        let _ = stream.set_nodelay(true);
        let shared = Arc::clone(&shared);
        let shutdown = shutdown.clone();
        let idle = settings.idle_timeout;
        tokio::spawn(async move {
            let _slot = slot;
            // A connection's failure (a reset, a broken pipe) is the client's to see.
            let _ = connection(stream, &shared, idle, shutdown).await;
        });
    }
}

async fn connection(
    mut stream: TcpStream,
    shared: &Shared,
    idle: Duration,
    shutdown: CancellationToken,
) -> io::Result<()> {
    use bytes::BufMut;

    let limits = Limits {
        max_bulk: MAX_ARGUMENT,
        max_inline: MAX_ARGUMENT,
        ..Limits::default()
    };
    let _connected = shared.connect();
    let mut session = Session::new(shared);
    let mut input: Vec<u8> = Vec::with_capacity(READ_CHUNK);
    let mut output: Vec<u8> = Vec::with_capacity(4096);
    // One timer and one cancellation waiter for the connection's life, not one of each per
    // read: registering them is most of what a request costs the runtime. The connection is
    // idle from when its replies are out; the timer is moved on only when it fires early.
    // A timeout too long to add to a time never comes (as `tokio::time::timeout` treats it).
    let deadline = |since: Instant| since.checked_add(idle).unwrap_or_else(far_future);
    let mut idle_since = Instant::now();
    let idle_timer = tokio::time::sleep_until(deadline(idle_since));
    let cancelled = shutdown.cancelled();
    tokio::pin!(idle_timer, cancelled);
    loop {
        // Read straight into the buffer, at most a chunk at a time.
        input.reserve(READ_CHUNK);
        let mut room = (&mut input).limit(READ_CHUNK);
        let read = tokio::select! {
            biased;
            () = &mut cancelled => return Ok(()),
            read = stream.read_buf(&mut room) => read,
            () = &mut idle_timer => {
                let deadline = deadline(idle_since);
                if deadline <= Instant::now() {
                    return Ok(());
                }
                idle_timer.as_mut().reset(deadline);
                continue;
            }
        };
        if read? == 0 {
            return Ok(());
        }
        let mut consumed = 0;
        let mut close = false;
        while !close {
            let request = match codec::decode(&input[consumed..], &limits) {
                Ok(Some(request)) => request,
                Ok(None) if input.len() - consumed > MAX_PENDING => {
                    Reply::err("Protocol error: too big request")
                        .encode(&mut output, session.resp3);
                    close = true;
                    break;
                }
                Ok(None) => break,
                Err(e) => {
                    Reply::err(format!("Protocol error: {}", e.0))
                        .encode(&mut output, session.resp3);
                    close = true;
                    break;
                }
            };
            let (args, used) = request;
            let frame = &input[consumed..consumed + used];
            let args = args.resolve(frame);
            consumed += used;
            if args.is_empty() {
                continue;
            }
            let (reply, after) = cmd::execute(shared, &mut session, &args).await;
            reply.encode(&mut output, session.resp3);
            close = after == After::Close;
            if output.len() >= FLUSH_AT && !flush(&mut stream, &mut output, idle).await? {
                return Ok(());
            }
        }
        input.drain(..consumed);
        if !flush(&mut stream, &mut output, idle).await? {
            return Ok(());
        }
        if close {
            return stream.shutdown().await;
        }
        idle_since = Instant::now();
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
async fn flush(stream: &mut TcpStream, output: &mut Vec<u8>, idle: Duration) -> io::Result<bool> {
    if output.is_empty() {
        return Ok(true);
    }
    // Usually the socket takes it all at once: then no timer is made.
    let written = match stream.try_write(output) {
        Ok(n) => n,
        Err(e) if e.kind() == io::ErrorKind::WouldBlock => 0,
        Err(e) => return Err(e),
    };
    if written == output.len() {
        output.clear();
        return Ok(true);
    }
    output.drain(..written);
    match tokio::time::timeout(idle, stream.write_all(output)).await {
        Ok(written) => {
            written?;
            output.clear();
            Ok(true)
        }
        Err(_) => Ok(false),
    }
}
