//! [`PeerAddrLayer`]: the peer address for servers that do not record one, plain hyper's
//! connection loop first among them.

use std::net::SocketAddr;
use std::task::{Context, Poll};

use http::Request;
use tower_layer::Layer;
use tower_service::Service;

/// Puts a connection's peer address into each of its requests' extensions (as a bare
/// `SocketAddr`), where [`ClientIp`](super::ClientIp) reads it: for a plain hyper server,
/// whose connection loop knows the peer but whose requests do not carry it. axum (with
/// `into_make_service_with_connect_info`) and tonic record it themselves.
///
/// One layer per connection, outside the [`TollgateLayer`](super::TollgateLayer):
///
/// ```
/// use std::convert::Infallible;
/// use http::{Request, Response};
/// use hyper_util::rt::TokioIo;
/// use hyper_util::service::TowerToHyperService;
/// use tollgate::middleware::{PeerAddrLayer, TollgateLayer};
/// use tollgate::{MemoryStore, Policy};
/// use tower::{Layer, service_fn};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let limit = TollgateLayer::builder(MemoryStore::new())
///     .policy("ip", Policy::per_second(10)?)
///     .build()?; // keyed by ClientIp, the default
/// let app = service_fn(|_: Request<hyper::body::Incoming>| async {
///     Ok::<_, Infallible>(Response::new(String::from("hello")))
/// });
/// let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
/// # let addr = listener.local_addr()?;
/// # tokio::spawn(async move { let _ = tokio::net::TcpStream::connect(addr).await; });
/// loop {
///     let (stream, peer) = listener.accept().await?;
///     let service = PeerAddrLayer::new(peer).layer(limit.layer(app.clone()));
///     tokio::spawn(
///         hyper::server::conn::http1::Builder::new()
///             .serve_connection(TokioIo::new(stream), TowerToHyperService::new(service)),
///     );
/// #   break;
/// }
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone, Copy)]
pub struct PeerAddrLayer {
    peer: SocketAddr,
}

impl PeerAddrLayer {
    /// A layer giving every request the peer address `peer`.
    pub fn new(peer: SocketAddr) -> PeerAddrLayer {
        PeerAddrLayer { peer }
    }
}

impl<S> Layer<S> for PeerAddrLayer {
    type Service = PeerAddr<S>;

    fn layer(&self, inner: S) -> PeerAddr<S> {
        PeerAddr {
            inner,
            peer: self.peer,
        }
    }
}

/// The service of a [`PeerAddrLayer`]: calls the inner one with the peer address in the
/// request's extensions.
///
/// ```
/// use http::{Request, Response};
/// use tollgate::middleware::{PeerAddr, PeerAddrLayer};
/// use tower::{Layer, ServiceExt, service_fn};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let echo = service_fn(|request: Request<()>| async move {
///     let peer = request.extensions().get::<std::net::SocketAddr>().copied();
///     Ok::<_, std::convert::Infallible>(Response::new(format!("{peer:?}")))
/// });
/// let service: PeerAddr<_> = PeerAddrLayer::new("192.0.2.1:4000".parse()?).layer(echo);
/// let response = service.oneshot(Request::new(())).await?;
/// assert_eq!(response.body(), "Some(192.0.2.1:4000)");
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone)]
pub struct PeerAddr<S> {
    inner: S,
    peer: SocketAddr,
}

impl<S, B> Service<Request<B>> for PeerAddr<S>
where
    S: Service<Request<B>>,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = S::Future;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut request: Request<B>) -> S::Future {
        request.extensions_mut().insert(self.peer);
        self.inner.call(request)
    }
}
