//! Each protocol's pair of servers, started for the whole benchmark: the bare one and
//! tollgate's, and how to open the workers' clients to each.
//!
//! HTTP reuses the HTTP benchmark's servers (its bare axum handler and `tollgate serve`'s
//! listener), RESP the RESP benchmark's (tollgate's listener, and a plain `redis-server`),
//! gRPC the gRPC benchmark's server on the memory store beside a bare tonic service that
//! answers every `ShouldRateLimit` with `OK`.

use std::net::SocketAddr;

use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_server::{
    RateLimitService, RateLimitServiceServer,
};
use envoy_types::pb::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tonic::transport::server::TcpIncoming;
use tonic::{Request, Response, Status};

use super::clients::{Grpc, Http, KEYS, Resp, RespCommand};
use super::pace::{self, Outcome};
use super::report::Protocol;
use crate::http::Variant;
use crate::http::load::Requests;
use crate::http::server::Server as HttpServer;
use crate::resp::peers::Peer;
use crate::{BenchError, servers};

/// HTTP/2 connections the gRPC calls share, as the gRPC benchmark's default.
const GRPC_CONNECTIONS: usize = 4;

/// One server of a pair: what it is and where.
#[derive(Debug, Clone)]
pub(super) enum Endpoint {
    Http(SocketAddr, Variant),
    Grpc(SocketAddr),
    Resp(SocketAddr, RespCommand),
}

impl Endpoint {
    /// Opens `connections` clients (every connection open before the run starts), and offers
    /// them `rate` requests a second for `duration`.
    pub(super) async fn run(
        &self,
        connections: usize,
        rate: u32,
        duration: std::time::Duration,
    ) -> Result<Outcome, BenchError> {
        match *self {
            Endpoint::Http(addr, variant) => {
                let requests = Requests::new(addr, KEYS, variant)?;
                let mut callers = Vec::with_capacity(connections);
                for _ in 0..connections {
                    callers.push(Http::connect(addr, requests.clone()).await?);
                }
                pace::run(callers, rate, duration).await
            }
            Endpoint::Grpc(addr) => {
                let channels = Grpc::channels(addr, GRPC_CONNECTIONS.min(connections)).await?;
                let callers = (0..connections)
                    .map(|i| Grpc::new(channels[i % channels.len()].clone()))
                    .collect();
                pace::run(callers, rate, duration).await
            }
            Endpoint::Resp(addr, command) => {
                let mut callers = Vec::with_capacity(connections);
                for _ in 0..connections {
                    callers.push(Resp::connect(addr, command).await?);
                }
                pace::run(callers, rate, duration).await
            }
        }
    }
}

/// A protocol's two servers, running until [`Pair::stop`].
pub(super) struct Pair {
    pub(super) protocol: Protocol,
    pub(super) bare: Endpoint,
    pub(super) tollgate: Endpoint,
    shutdown: CancellationToken,
    http: Vec<HttpServer>,
    tasks: Vec<JoinHandle<Result<(), BenchError>>>,
    _peer: Option<Peer>,
    _config: Option<servers::EnvoyConfig>,
}

impl Pair {
    /// Starts `protocol`'s pair in this process (and `redis-server` for RESP); an error
    /// (`redis-server` missing) means the pair is not measured.
    pub(super) async fn start(protocol: Protocol) -> Result<Pair, BenchError> {
        // The endpoints are set by `serve`; a pair it could not finish is stopped, not returned.
        let mut pair = Pair {
            protocol,
            bare: Endpoint::Grpc(SocketAddr::from(([127, 0, 0, 1], 0))),
            tollgate: Endpoint::Grpc(SocketAddr::from(([127, 0, 0, 1], 0))),
            shutdown: CancellationToken::new(),
            http: Vec::new(),
            tasks: Vec::new(),
            _peer: None,
            _config: None,
        };
        match pair.serve().await {
            Ok(()) => Ok(pair),
            Err(e) => {
                // What did start stops before the error is reported.
                let _ = pair.stop().await;
                Err(e)
            }
        }
    }

    /// Starts the servers into `self`, which stops them if one fails.
    async fn serve(&mut self) -> Result<(), BenchError> {
        let pair = self;
        let shutdown = pair.shutdown.clone();
        match pair.protocol {
            Protocol::Http => {
                let bare = HttpServer::start(Variant::Bare, None).await?;
                pair.bare = Endpoint::Http(bare.addr, Variant::Bare);
                pair.http.push(bare);
                let server = HttpServer::start(Variant::Server, None).await?;
                pair.tollgate = Endpoint::Http(server.addr, Variant::Server);
                pair.http.push(server);
            }
            Protocol::Grpc => {
                let incoming = TcpIncoming::bind(SocketAddr::from(([127, 0, 0, 1], 0)))?
                    .with_nodelay(Some(true));
                pair.bare = Endpoint::Grpc(incoming.local_addr()?);
                let serve = tonic::transport::Server::builder()
                    .add_service(RateLimitServiceServer::new(Allow))
                    .serve_with_incoming_shutdown(incoming, shutdown.clone().cancelled_owned());
                pair.tasks.push(tokio::spawn(async move {
                    serve
                        .await
                        .map_err(|e| BenchError::Args(format!("the bare tonic server: {e}")))
                }));
                let config = servers::EnvoyConfig::write()?;
                let server = servers::grpc("memory", &config, None, &shutdown).await?;
                pair.tollgate = Endpoint::Grpc(server.addr);
                pair.tasks.push(tokio::spawn(server.finished()));
                pair._config = Some(config);
            }
            Protocol::Resp => {
                let peer = Peer::redis().map_err(|why| {
                    BenchError::Args(format!("no redis-server to answer PING: {why}"))
                })?;
                pair.bare = Endpoint::Resp(peer.addr, RespCommand::Ping);
                pair._peer = Some(peer);
                let addr = servers::resp(&shutdown).await?;
                pair.tollgate = Endpoint::Resp(addr, RespCommand::Throttle);
            }
        }
        Ok(())
    }

    /// Stops the servers, and reports the first that ended badly.
    pub(super) async fn stop(self) -> Result<(), BenchError> {
        self.shutdown.cancel();
        let mut stopped = Ok(());
        for server in self.http {
            stopped = stopped.and(server.stop().await);
        }
        for task in self.tasks {
            stopped = stopped.and(task.await?);
        }
        stopped
    }
}

/// The bare gRPC service: `OK` to every call, without reading it.
struct Allow;

#[tonic::async_trait]
impl RateLimitService for Allow {
    async fn should_rate_limit(
        &self,
        _: Request<RateLimitRequest>,
    ) -> Result<Response<RateLimitResponse>, Status> {
        Ok(Response::new(RateLimitResponse {
            overall_code: Code::Ok as i32,
            ..Default::default()
        }))
    }
}
