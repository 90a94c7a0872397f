//! The HTTP listener: counts connections for the metrics, and holds at most a set number open
//! (past it, new connections wait in the kernel's backlog until one closes), so that no number
//! of clients can grow the server's memory without bound.

use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::metrics::Metrics;

/// The most HTTP connections open at once, by default.
pub const DEFAULT_MAX_CONNECTIONS: usize = 10_000;

/// A listener that counts and caps its connections.
pub struct Counted {
    listener: TcpListener,
    slots: Arc<Semaphore>,
    metrics: Arc<Metrics>,
}

impl Counted {
    /// Accepts on `listener`, at most `max` connections open at once.
    pub fn new(listener: TcpListener, max: usize, metrics: Arc<Metrics>) -> Counted {
        Counted {
            listener,
            slots: Arc::new(Semaphore::new(max.max(1))),
            metrics,
        }
    }
}

impl axum::serve::Listener for Counted {
    type Io = Connection;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Connection, SocketAddr) {
        // The semaphore is never closed, so this waits for a slot rather than failing.
        let slot = loop {
            if let Ok(slot) = Arc::clone(&self.slots).acquire_owned().await {
                break slot;
            }
        };
        let (stream, addr) = loop {
            match self.listener.accept().await {
                Ok(accepted) => break accepted,
                // Out of file descriptors, or a connection reset before it was accepted: wait
                // a moment (the former does not fix itself at once) and go on.
                Err(e) => {
                    tracing::debug!(error = %e, "accept failed");
                    tokio::time::sleep(std::time::Duration::from_millis(5)).await;
                }
            }
        };
        let _ = stream.set_nodelay(true);
        self.metrics.connections.inc();
        self.metrics.connections_total.inc();
        let connection = Connection {
            stream,
            _slot: slot,
            metrics: Arc::clone(&self.metrics),
        };
        (connection, addr)
    }

    fn local_addr(&self) -> io::Result<SocketAddr> {
        self.listener.local_addr()
    }
}

/// An accepted connection; closing it frees its slot.
pub struct Connection {
    stream: TcpStream,
    _slot: OwnedSemaphorePermit,
    metrics: Arc<Metrics>,
}

impl Drop for Connection {
    fn drop(&mut self) {
        self.metrics.connections.dec();
    }
}

impl AsyncRead for Connection {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_read(cx, buf)
    }
}

impl AsyncWrite for Connection {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.stream).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.stream).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_shutdown(cx)
    }
}
