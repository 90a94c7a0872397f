//! tonic's connector for the TLS runs: each connection the channel opens is a TCP connection
//! to the server and a rustls handshake offering ALPN `h2`, whatever the URI says.

use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::task::{Context, Poll};

use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;
use tokio_rustls::client::TlsStream;
use tonic::transport::Uri;

use crate::BenchError;
use crate::tls::TlsClient;

/// Dials `addr` over TLS.
#[derive(Clone)]
pub(super) struct Dial {
    pub(super) client: TlsClient,
    pub(super) addr: SocketAddr,
}

impl tower_service::Service<Uri> for Dial {
    type Response = TokioIo<TlsStream<TcpStream>>;
    type Error = BenchError;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, BenchError>> + Send>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), BenchError>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, _: Uri) -> Self::Future {
        let Dial { client, addr } = self.clone();
        Box::pin(async move { Ok(TokioIo::new(client.connect(addr).await?)) })
    }
}
