//! The server's connections: accepted TCP, through TLS when the server has a certificate (and
//! requires a client certificate when it has a client CA). A handshake that fails is recorded,
//! so that a test can see the server refused a client.

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, watch};
use tokio_rustls::TlsAcceptor;
use tokio_rustls::server::TlsStream;
use tonic::codegen::tokio_stream::Stream;
use tonic::transport::server::Connected;

use super::service::{Shared, stopped};

/// An accepted connection.
pub(super) enum Conn {
    Plain(TcpStream),
    Tls(Box<TlsStream<TcpStream>>),
}

impl Connected for Conn {
    type ConnectInfo = ();

    fn connect_info(&self) {}
}

impl AsyncRead for Conn {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Conn::Plain(s) => Pin::new(s).poll_read(cx, buf),
            Conn::Tls(s) => Pin::new(s).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for Conn {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Conn::Plain(s) => Pin::new(s).poll_write(cx, buf),
            Conn::Tls(s) => Pin::new(s).poll_write(cx, buf),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Conn::Plain(s) => Pin::new(s).poll_flush(cx),
            Conn::Tls(s) => Pin::new(s).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Conn::Plain(s) => Pin::new(s).poll_shutdown(cx),
            Conn::Tls(s) => Pin::new(s).poll_shutdown(cx),
        }
    }
}

/// The connections, as tonic's server reads them.
pub(super) struct Incoming(mpsc::Receiver<Conn>);

impl Stream for Incoming {
    type Item = io::Result<Conn>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        self.0.poll_recv(cx).map(|c| c.map(Ok))
    }
}

/// Accepts on `listener` until `stopping`; the listener is closed when this returns.
pub(super) fn accept(
    listener: TcpListener,
    tls: Option<Arc<rustls::ServerConfig>>,
    shared: Arc<Shared>,
    mut stopping: watch::Receiver<bool>,
) -> Incoming {
    let (conns, incoming) = mpsc::channel(16);
    tokio::spawn(async move {
        loop {
            let tcp = tokio::select! {
                () = stopped(&mut stopping) => return,
                accepted = listener.accept() => match accepted {
                    Ok((tcp, _)) => tcp,
                    Err(_) => continue,
                },
            };
            let conns = conns.clone();
            let tls = tls.clone();
            let shared = Arc::clone(&shared);
            tokio::spawn(async move {
                let conn = match tls {
                    None => Conn::Plain(tcp),
                    Some(config) => match TlsAcceptor::from(config).accept(tcp).await {
                        Ok(tls) => Conn::Tls(Box::new(tls)),
                        Err(e) => {
                            shared.lock().handshake_failures.push(e.to_string());
                            return;
                        }
                    },
                };
                let _ = conns.send(conn).await;
            });
        }
    });
    Incoming(incoming)
}
