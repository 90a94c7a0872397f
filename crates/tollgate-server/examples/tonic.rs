//! tollgate's middleware in front of a gRPC service (tonic): past its limit a client gets the
//! status `RESOURCE_EXHAUSTED`.
//!
//! ```sh
//! cargo run --release --example tonic     # the gRPC health service on 127.0.0.1:50051
//! grpcurl -plaintext 127.0.0.1:50051 grpc.health.v1.Health/Check   # 3 pass, then limited
//! ```

use std::error::Error;
use std::net::SocketAddr;
use std::time::Duration;

use tokio_util::sync::CancellationToken;
use tollgate::middleware::{ClientIp, TollgateLayer};
use tollgate::{MemoryStore, Policy};
use tonic::transport::Server;
use tonic::transport::server::TcpConnectInfo;

/// Serves the gRPC health service on `listener`, limited per peer IP to a burst of 3 refilled
/// at 1 per second, until `shutdown` is cancelled.
pub async fn serve(
    listener: tokio::net::TcpListener,
    shutdown: CancellationToken,
) -> Result<(), Box<dyn Error + Send + Sync>> {
    let limit = TollgateLayer::builder(MemoryStore::new())
        .policy("grpc", Policy::token_bucket(3, 1, Duration::from_secs(1))?)
        // The peer as tonic records it; `.trust([...])` would read X-Forwarded-For from proxies.
        .key(
            ClientIp::new()
                .peer_addr(|parts| parts.extensions.get::<TcpConnectInfo>()?.remote_addr()),
        )
        .build()?;
    let (_reporter, health) = tonic_health::server::health_reporter();
    let incoming = tonic::transport::server::TcpIncoming::from(listener);
    Server::builder()
        .layer(limit)
        .add_service(health)
        .serve_with_incoming_shutdown(incoming, shutdown.cancelled_owned())
        .await?;
    Ok(())
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn Error + Send + Sync>> {
    let addr: SocketAddr = "127.0.0.1:50051".parse()?;
    let listener = tokio::net::TcpListener::bind(addr).await?;
    println!("gRPC health service on {addr}, 3 calls per peer, then 1 per second");
    serve(listener, CancellationToken::new()).await
}
