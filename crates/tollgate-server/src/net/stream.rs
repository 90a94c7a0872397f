//! A connection as a front end reads and writes it: plain TCP, TLS over it, or a Unix socket.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpStream, UnixStream};
use tokio_rustls::server::TlsStream;

use super::tls::Tls;

/// A connection as accepted, before any handshake.
pub enum Conn {
    /// Over TCP.
    Tcp(TcpStream),
    /// Over a Unix socket.
    Unix(UnixStream),
}

/// A connection, plain or over TLS.
pub enum Stream {
    /// Plain TCP.
    Plain(TcpStream),
    /// TLS (boxed: its buffers make it large).
    Tls(Box<TlsStream<TcpStream>>),
    /// A Unix socket.
    Unix(UnixStream),
}

impl Stream {
    /// `conn` as the listener serves it: handshaken when `tls` is set (TCP only: a Unix
    /// listener with TLS is refused at start).
    pub async fn open(conn: Conn, tls: Option<&Tls>) -> io::Result<Stream> {
        Ok(match (conn, tls) {
            (Conn::Tcp(stream), None) => Stream::Plain(stream),
            (Conn::Tcp(stream), Some(tls)) => Stream::Tls(Box::new(tls.accept(stream).await?)),
            (Conn::Unix(stream), None) => Stream::Unix(stream),
            (Conn::Unix(_), Some(_)) => {
                return Err(io::Error::other("TLS over a Unix socket is not served"));
            }
        })
    }
}

macro_rules! either {
    ($self:ident, $s:ident => $e:expr) => {
        match $self.get_mut() {
            Stream::Plain($s) => {
                let $s = Pin::new($s);
                $e
            }
            Stream::Tls($s) => {
                let $s = Pin::new($s.as_mut());
                $e
            }
            Stream::Unix($s) => {
                let $s = Pin::new($s);
                $e
            }
        }
    };
}

impl AsyncRead for Stream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        either!(self, s => s.poll_read(cx, buf))
    }
}

impl AsyncWrite for Stream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        either!(self, s => s.poll_write(cx, buf))
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        either!(self, s => s.poll_write_vectored(cx, bufs))
    }

    fn is_write_vectored(&self) -> bool {
        match self {
            Stream::Plain(s) => s.is_write_vectored(),
            Stream::Tls(s) => s.is_write_vectored(),
            Stream::Unix(s) => s.is_write_vectored(),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        either!(self, s => s.poll_flush(cx))
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        either!(self, s => s.poll_shutdown(cx))
    }
}
