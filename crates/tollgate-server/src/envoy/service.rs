//! The gRPC service: `envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit`, the
//! standard health service (`grpc.health.v1.Health`) and server reflection
//! (`grpc.reflection.v1` and `v1alpha`, so `grpcurl` needs no .proto files), on a listener of
//! their own.
//!
//! With `[auth]` tokens, `ShouldRateLimit` needs a token with the `check` scope and reflection
//! a token with any scope (it lists what the port serves); health stays open for probes.

use std::io;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_server::{
    RateLimitService, RateLimitServiceServer,
};
use envoy_types::pb::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};
use tokio_util::sync::CancellationToken;
use tonic::service::Routes;
use tonic::{Request, Response, Status};

use super::Envoy;
use super::ratelimit::{self, EnvoyError};
use crate::auth::{AuthError, Caller, Frontend};
use crate::traces;
use crate::web::Peer;

/// The largest request accepted, in bytes: [`ratelimit::MAX_DESCRIPTORS`] descriptors of a few
/// entries each fit many times over.
pub const MAX_REQUEST_BYTES: usize = 64 * 1024;

/// The encoded `FileDescriptorSet` of `rls.proto` and every file it imports, compiled by
/// `build.rs` from the protos under `proto/` (those envoy-types generated the server's types
/// from).
pub const RLS_DESCRIPTOR_SET: &[u8] =
    include_bytes!(concat!(env!("OUT_DIR"), "/rls_descriptor_set.bin"));

/// The name the health service reports under, besides the server as a whole (`""`), as
/// envoyproxy/ratelimit names it.
const HEALTH_NAME: &str = "ratelimit";

/// The rate-limit service's full name, as its spans are named (`SERVICE/ShouldRateLimit`).
const SERVICE: &str = "envoy.service.ratelimit.v3.RateLimitService";

struct RateLimiter {
    envoy: Arc<Envoy>,
}

#[tonic::async_trait]
impl RateLimitService for RateLimiter {
    async fn should_rate_limit(
        &self,
        request: Request<RateLimitRequest>,
    ) -> Result<Response<RateLimitResponse>, Status> {
        let span = self.envoy.limiter().traces().map(|traces| {
            let span = traces.grpc_call(request.metadata(), SERVICE, "ShouldRateLimit");
            span.set(traces::text("domain", &request.get_ref().domain));
            span.set(traces::count(
                "descriptors",
                request.get_ref().descriptors.len(),
            ));
            span
        });
        let answered = traces::within(span.as_ref(), self.answer(&request)).await;
        if let Some(span) = span {
            match &answered {
                Ok(response) => span.set(traces::text(
                    "overall_code",
                    Code::try_from(response.overall_code)
                        .unwrap_or(Code::Unknown)
                        .as_str_name(),
                )),
                Err(status) => span.fail(status.message()),
            }
            span.end();
        }
        answered.map(Response::new)
    }
}

impl RateLimiter {
    /// The call authorized and answered.
    async fn answer(
        &self,
        request: &Request<RateLimitRequest>,
    ) -> Result<RateLimitResponse, Status> {
        let metrics = self.envoy.metrics();
        metrics.calls.total.fetch_add(1, Ordering::Relaxed);
        authorize(&self.envoy, request).await?;
        let loaded = self.envoy.loaded();
        ratelimit::should_rate_limit(
            self.envoy.limiter(),
            &loaded,
            self.envoy.metrics(),
            request.get_ref(),
        )
        .await
        .map_err(|error| {
            error.count(metrics);
            match error {
                EnvoyError::Invalid(message) => Status::invalid_argument(message),
                EnvoyError::Unavailable(message) => Status::unavailable(message),
                EnvoyError::NoConfig => Status::unknown(ratelimit::NO_CONFIG),
            }
        })
    }
}

/// Refuses a call without a configured token in its `authorization` metadata
/// (`Bearer <secret>`: `UNAUTHENTICATED`, a wrong one held back a little longer each time from
/// its address; `RESOURCE_EXHAUSTED` once the address failed too often) or whose token lacks
/// the scope the request needs (`PERMISSION_DENIED`).
async fn authorize(envoy: &Envoy, request: &Request<RateLimitRequest>) -> Result<(), Status> {
    let header = request
        .metadata()
        .get("authorization")
        .map(|v| v.as_bytes());
    let caller = Caller::new(Frontend::Grpc, Peer::of(request.extensions()));
    let scope = super::scope_of(request.get_ref());
    match envoy.limiter().auth().admit(caller, header, Some(scope)) {
        Ok(_) => Ok(()),
        Err(refusal) => Err(status(refusal.held_back().await)),
    }
}

/// `refusal` in gRPC's words.
fn status(refusal: AuthError) -> Status {
    match refusal {
        AuthError::Missing | AuthError::Wrong { .. } => {
            Status::unauthenticated(refusal.to_string())
        }
        AuthError::Blocked { .. } => Status::resource_exhausted(refusal.to_string()),
        AuthError::Forbidden { .. } => Status::permission_denied(refusal.to_string()),
    }
}

/// Reflection's gate: with `[auth]` tokens, a token with any scope (what the port serves is
/// for those who may use it).
#[derive(Clone)]
struct Reflection(Arc<Envoy>);

impl crate::web::auth::Guard for Reflection {
    fn refuse(&self, request: &mut axum::extract::Request) -> Option<crate::web::auth::Denial> {
        if !request.uri().path().starts_with("/grpc.reflection.") {
            return None;
        }
        let header = request
            .headers()
            .get(axum::http::header::AUTHORIZATION)
            .map(|v| v.as_bytes());
        let caller = Caller::new(Frontend::Grpc, Peer::of(request.extensions()));
        let refusal = self.0.limiter().auth().admit(caller, header, None).err()?;
        Some(Box::pin(async move {
            use axum::response::IntoResponse;
            status(refusal.held_back().await)
                .into_http::<axum::body::Body>()
                .into_response()
        }))
    }
}

/// Serves the rate-limit and health services on `listener` until `shutdown`, then returns
/// once the calls in flight are answered.
pub async fn serve(
    listener: crate::web::Listener,
    envoy: Arc<Envoy>,
    shutdown: CancellationToken,
) -> io::Result<()> {
    let (reporter, health) = tonic_health::server::health_reporter();
    reporter
        .set_service_status(HEALTH_NAME, tonic_health::ServingStatus::Serving)
        .await;
    reporter
        .set_serving::<RateLimitServiceServer<RateLimiter>>()
        .await;
    let rls = RateLimitServiceServer::new(RateLimiter {
        envoy: Arc::clone(&envoy),
    })
    .max_decoding_message_size(MAX_REQUEST_BYTES);
    // Each version lists every service on the port, the other version's reflection included.
    let reflection = || {
        tonic_reflection::server::Builder::configure()
            .register_encoded_file_descriptor_set(RLS_DESCRIPTOR_SET)
            .register_encoded_file_descriptor_set(tonic_health::pb::FILE_DESCRIPTOR_SET)
            .register_encoded_file_descriptor_set(tonic_reflection::pb::v1::FILE_DESCRIPTOR_SET)
            .register_encoded_file_descriptor_set(
                tonic_reflection::pb::v1alpha::FILE_DESCRIPTOR_SET,
            )
            .include_reflection_service(false)
    };
    let (v1, v1alpha) = match (reflection().build_v1(), reflection().build_v1alpha()) {
        (Ok(v1), Ok(v1alpha)) => (v1, v1alpha),
        (Err(e), _) | (_, Err(e)) => {
            return Err(io::Error::other(format!(
                "the gRPC reflection service cannot be built from the compiled descriptors: {e}"
            )));
        }
    };
    let router = Routes::new(health)
        .add_service(rls)
        .add_service(v1)
        .add_service(v1alpha)
        .prepare()
        .into_axum_router()
        .layer(crate::web::auth::Gate::new(Reflection(envoy)));
    crate::web::serve(listener, router, shutdown).await
}
