//! The connection to the management server: TCP, then TLS when `[grpc.xds.tls]` is there (the
//! files read again each time), under HTTP/2 with keepalive pings so that a server gone without
//! closing its connection is noticed. One connector does both, for tonic's channel.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use hyper_util::rt::TokioIo;
use rustls::pki_types::ServerName;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;
use tonic::transport::{Channel, Endpoint, Uri};

use super::settings::XdsSettings;

/// The longest a connection (TCP and TLS handshakes) may take.
pub(super) const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// How often the connection is pinged, and how long a ping may go unanswered before it counts
/// as broken: every 5 minutes, the most often a gRPC server accepts by default (grpc-go's
/// enforcement policy answers more frequent pings with `GOAWAY`, which would break the stream).
const KEEPALIVE: (Duration, Duration) = (Duration::from_secs(300), Duration::from_secs(20));

/// A byte stream, plain or TLS.
trait Io: AsyncRead + AsyncWrite + Send + Unpin {}

impl<T: AsyncRead + AsyncWrite + Send + Unpin> Io for T {}

/// Opens the channel to the management server, or says why not (every cause, outermost first).
pub(super) async fn connect(settings: &XdsSettings) -> Result<Channel, String> {
    let tls = match &settings.tls {
        Some(tls) => {
            let files = tls.clone();
            let config = crate::files::off_workers(move || super::tls::client_config(&files))
                .await
                .map_err(|stuck| stuck.to_string())?
                .map_err(|e| e.to_string())?;
            let name = tls
                .server_name
                .clone()
                .unwrap_or_else(|| settings.host.clone());
            let name = ServerName::try_from(name.clone())
                .map_err(|e| format!("grpc.xds.tls.server_name {name:?} is not a name: {e}"))?;
            Some((Arc::new(config), name))
        }
        None => None,
    };
    let scheme = if tls.is_some() { "https" } else { "http" };
    let endpoint = Endpoint::from_shared(format!("{scheme}://{}", settings.url()))
        .map_err(|e| chain(&e))?
        .http2_keep_alive_interval(KEEPALIVE.0)
        .keep_alive_timeout(KEEPALIVE.1);
    let connector = Connector {
        host: settings.host.clone(),
        port: settings.port,
        tls: tls.map(|(config, name)| (tokio_rustls::TlsConnector::from(config), name)),
    };
    endpoint
        .connect_with_connector(connector)
        .await
        .map_err(|e| chain(&e))
}

/// `error` and its sources, outermost first: tonic's own words ("transport error") say
/// nothing of the cause.
pub(super) fn chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        let words = cause.to_string();
        if !text.ends_with(&words) {
            text.push_str(": ");
            text.push_str(&words);
        }
        source = cause.source();
    }
    text
}

/// Connects to the management server, TCP then TLS.
#[derive(Clone)]
struct Connector {
    host: String,
    port: u16,
    tls: Option<(tokio_rustls::TlsConnector, ServerName<'static>)>,
}

type Connecting = Pin<Box<dyn Future<Output = io::Result<TokioIo<Box<dyn Io>>>> + Send>>;

impl tower_service::Service<Uri> for Connector {
    type Response = TokioIo<Box<dyn Io>>;
    type Error = io::Error;
    type Future = Connecting;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, _: Uri) -> Connecting {
        let this = self.clone();
        Box::pin(async move {
            tokio::time::timeout(CONNECT_TIMEOUT, this.open())
                .await
                .unwrap_or_else(|_| {
                    Err(io::Error::new(
                        io::ErrorKind::TimedOut,
                        format!("no connection within {CONNECT_TIMEOUT:?}"),
                    ))
                })
        })
    }
}

impl Connector {
    async fn open(self) -> io::Result<TokioIo<Box<dyn Io>>> {
        let tcp = TcpStream::connect((self.host.as_str(), self.port)).await?;
        tcp.set_nodelay(true)?;
        let io: Box<dyn Io> = match self.tls {
            None => Box::new(tcp),
            Some((connector, name)) => Box::new(connector.connect(name, tcp).await?),
        };
        Ok(TokioIo::new(io))
    }
}
