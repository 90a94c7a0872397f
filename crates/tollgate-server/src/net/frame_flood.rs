//! A guard on HTTP/2 connections against control-frame floods: a client that sends more
//! `PING`s or `SETTINGS` (each of which the server must acknowledge) than [`MAX_PER_SECOND`]
//! in a second is answered `GOAWAY` with `ENHANCE_YOUR_CALM`, as gRPC servers answer it, and
//! the connection is closed. hyper acknowledges every such frame itself, without a limit.
//!
//! The guard reads the frames' 9-byte headers as they pass, in both directions: the client's
//! to count, the server's to know where a frame ends, so that its own `GOAWAY` goes out
//! between two of the server's frames. A connection that does not begin with the HTTP/2
//! preface (HTTP/1.1) is passed through untouched.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll, Waker, ready};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::Instant;

/// The most `PING` and `SETTINGS` frames (acks not counted) a client may send in a second.
pub const MAX_PER_SECOND: u32 = 100;

const PREFACE: &[u8; 24] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
const HEADERS: u8 = 0x1;
const SETTINGS: u8 = 0x4;
const PING: u8 = 0x6;
const ACK: u8 = 0x1;
const ENHANCE_YOUR_CALM: u32 = 0xb;

/// Where a direction of the byte stream is among the frames.
#[derive(Debug, Default)]
struct Frames {
    header: [u8; 9],
    have: usize,
    skip: usize,
}

impl Frames {
    /// Follows `bytes`; calls `frame(type, flags, stream)` on each whole header.
    fn follow(&mut self, mut bytes: &[u8], mut frame: impl FnMut(u8, u8, u32)) {
        while !bytes.is_empty() {
            if self.skip > 0 {
                let n = self.skip.min(bytes.len());
                self.skip -= n;
                bytes = &bytes[n..];
                continue;
            }
            let n = (9 - self.have).min(bytes.len());
            self.header[self.have..self.have + n].copy_from_slice(&bytes[..n]);
            self.have += n;
            bytes = &bytes[n..];
            if self.have == 9 {
                let h = self.header;
                self.skip = usize::from(h[0]) << 16 | usize::from(h[1]) << 8 | usize::from(h[2]);
                let stream = u32::from_be_bytes([h[5], h[6], h[7], h[8]]) & 0x7fff_ffff;
                frame(h[3], h[4], stream);
                self.have = 0;
            }
        }
    }

    /// Whether the stream is between two frames.
    fn between(&self) -> bool {
        self.have == 0 && self.skip == 0
    }

    /// Bytes until the stream is at least one step nearer the end of its frame: the rest of
    /// the header, or of the payload.
    fn to_boundary(&self) -> usize {
        match (self.have, self.skip) {
            (0, skip) => skip,
            (have, _) => 9 - have,
        }
    }
}

/// What the guard knows of the connection.
#[derive(Debug)]
enum State {
    /// Reading the first bytes: `n` of the preface matched so far.
    Preface(usize),
    /// HTTP/1.1: not looked at.
    Plain,
    /// HTTP/2, counted.
    H2,
    /// Flooded: the `GOAWAY` is going out (`sent` bytes of it so far).
    Calming { goaway: [u8; 17], sent: usize },
    /// The `GOAWAY` is out: the connection ends.
    Closed,
}

/// `io` with the guard.
#[derive(Debug)]
pub struct FloodGuard<S> {
    io: S,
    state: State,
    client: Frames,
    server: Frames,
    last_stream: u32,
    window: Instant,
    in_window: u32,
    /// The reader waiting for the server to reach the end of a frame, so that the `GOAWAY`
    /// goes out.
    reader: Option<Waker>,
}

impl<S> FloodGuard<S> {
    /// Guards `io`.
    pub fn new(io: S) -> FloodGuard<S> {
        FloodGuard {
            io,
            state: State::Preface(0),
            client: Frames::default(),
            server: Frames::default(),
            last_stream: 0,
            window: Instant::now(),
            in_window: 0,
            reader: None,
        }
    }

    /// Follows bytes the client sent; true once it floods.
    fn read(&mut self, bytes: &[u8]) -> bool {
        let mut rest = bytes;
        if let State::Preface(matched) = self.state {
            let n = (PREFACE.len() - matched).min(rest.len());
            if rest[..n] != PREFACE[matched..matched + n] {
                self.state = State::Plain;
                return false;
            }
            rest = &rest[n..];
            self.state = if matched + n == PREFACE.len() {
                State::H2
            } else {
                State::Preface(matched + n)
            };
        }
        if !matches!(self.state, State::H2) {
            return false;
        }
        let (mut control, mut last) = (0u32, self.last_stream);
        self.client.follow(rest, |kind, flags, stream| {
            if (kind == PING || kind == SETTINGS) && flags & ACK == 0 {
                control += 1;
            }
            if kind == HEADERS {
                last = last.max(stream);
            }
        });
        if control > 0 {
            let now = Instant::now();
            if now.duration_since(self.window).as_secs() >= 1 {
                self.window = now;
                self.in_window = 0;
            }
            self.in_window = self.in_window.saturating_add(control);
        }
        let flooded = self.in_window > MAX_PER_SECOND;
        // The streams of a read that flooded never reach the server: the GOAWAY names only
        // those it has seen.
        if !flooded {
            self.last_stream = last;
        }
        flooded
    }

    fn calm(&mut self) {
        let mut goaway = [0u8; 17];
        // Length 8, type GOAWAY (7), no flags, stream 0; the last stream; the error code.
        goaway[..9].copy_from_slice(&[0, 0, 8, 7, 0, 0, 0, 0, 0]);
        goaway[9..13].copy_from_slice(&self.last_stream.to_be_bytes());
        goaway[13..].copy_from_slice(&ENHANCE_YOUR_CALM.to_be_bytes());
        self.state = State::Calming { goaway, sent: 0 };
    }
}

impl<S: AsyncWrite + Unpin> FloodGuard<S> {
    /// Writes the `GOAWAY` once the server is between frames; ready when it is out.
    fn poll_goaway(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        loop {
            let State::Calming { goaway, sent } = &mut self.state else {
                return Poll::Ready(Ok(()));
            };
            if *sent == goaway.len() {
                ready!(Pin::new(&mut self.io).poll_flush(cx))?;
                // A FIN after it, so the client reads the GOAWAY before the connection goes.
                let _ = ready!(Pin::new(&mut self.io).poll_shutdown(cx));
                self.state = State::Closed;
                if let Some(reader) = self.reader.take() {
                    reader.wake();
                }
                return Poll::Ready(Ok(()));
            }
            let n = ready!(Pin::new(&mut self.io).poll_write(cx, &goaway[*sent..]))?;
            if n == 0 {
                return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
            }
            *sent += n;
        }
    }
}

fn calmed() -> io::Error {
    io::Error::new(
        io::ErrorKind::ConnectionAborted,
        "too many PING or SETTINGS frames: GOAWAY ENHANCE_YOUR_CALM",
    )
}

impl<S: AsyncRead + AsyncWrite + Unpin> AsyncRead for FloodGuard<S> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        match this.state {
            State::Closed => return Poll::Ready(Err(calmed())),
            State::Calming { .. } => {
                if this.server.between() {
                    ready!(this.poll_goaway(cx))?;
                    return Poll::Ready(Err(calmed()));
                }
                // Woken when the server's writes reach the end of their frame.
                this.reader = Some(cx.waker().clone());
                return Poll::Pending;
            }
            _ => {}
        }
        let before = buf.filled().len();
        ready!(Pin::new(&mut this.io).poll_read(cx, buf))?;
        let flooded = this.read(&buf.filled()[before..]);
        if flooded {
            // What was read is dropped: the server answers no more of the flood.
            buf.set_filled(before);
            this.calm();
            if this.server.between() {
                ready!(this.poll_goaway(cx))?;
                return Poll::Ready(Err(calmed()));
            }
            this.reader = Some(cx.waker().clone());
            return Poll::Pending;
        }
        Poll::Ready(Ok(()))
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin> AsyncWrite for FloodGuard<S> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        match this.state {
            State::Closed => return Poll::Ready(Err(calmed())),
            State::Calming { .. } if this.server.between() => {
                ready!(this.poll_goaway(cx))?;
                return Poll::Ready(Err(calmed()));
            }
            _ => {}
        }
        // Calming, the server's writes stop at the end of the frame under way.
        let calming = matches!(this.state, State::Calming { .. });
        let buf = match calming {
            true => &buf[..buf.len().min(this.server.to_boundary())],
            false => buf,
        };
        let n = ready!(Pin::new(&mut this.io).poll_write(cx, buf))?;
        if !matches!(this.state, State::Plain | State::Preface(_)) {
            this.server.follow(&buf[..n], |_, _, _| {});
        }
        if calming
            && this.server.between()
            && let Some(reader) = this.reader.take()
        {
            reader.wake();
        }
        Poll::Ready(Ok(n))
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if matches!(this.state, State::Calming { .. }) && this.server.between() {
            ready!(this.poll_goaway(cx))?;
        }
        Pin::new(&mut this.io).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_shutdown(cx)
    }
}
