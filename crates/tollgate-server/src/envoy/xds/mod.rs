//! Configuration over xDS (`[grpc.xds]`): Envoy's rules from a management server (Envoy
//! Gateway's, say) rather than a directory, as envoyproxy/ratelimit's `GRPC_XDS_SOTW` config
//! type takes them: the resource type `RateLimitConfig`
//! ([`TYPE_URL`]) over an aggregated (ADS), state-of-the-world stream.
//!
//! Each response holds every config; it is loaded as a directory of files would be
//! (`convert`, the file loader's checks and messages) and put in force through the same
//! [`Envoy::reload`] the directory watcher uses (buckets of unchanged rules kept), then ACKed;
//! a refused one is NACKed and the running config stays (`stream`). A broken stream is opened
//! again after envoyproxy/ratelimit's backoff, the connection retried every `retry_interval`
//! meanwhile (`connect`, `tls`).
//!
//! Memory: a response is at most `max_message_size` bytes (gRPC refuses a larger one, which
//! breaks the stream) and at most [`MAX_RESOURCES`] resources (more are NACKed); one response
//! is handled at a time.

mod connect;
mod convert;
pub mod settings;
mod stream;
pub mod tls;

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::oneshot;
use tokio_util::sync::CancellationToken;

pub use convert::TYPE_URL;
pub use settings::{Backoff, MAX_RESOURCES, XdsSettings, XdsTls};

use super::Envoy;
use settings::random;
use stream::{Ended, State};

/// Keeps `envoy` configured from the management server `settings` name until `stop`;
/// `first` is told once the first response has been handled (put in force or refused).
pub(crate) async fn run(
    envoy: Arc<Envoy>,
    settings: XdsSettings,
    merge_domains: bool,
    first: oneshot::Sender<()>,
    stop: CancellationToken,
) {
    let url = settings.url();
    tracing::info!(
        %url,
        node_id = %settings.node_id,
        tls = settings.tls.is_some(),
        "starting the xDS client for rate-limit configs"
    );
    let mut state = State {
        version: String::new(),
        first: Some(first),
    };
    let mut attempt = 0;
    loop {
        let connected = tokio::select! {
            () = stop.cancelled() => return,
            connected = connect::connect(&settings) => connected,
        };
        let channel = match connected {
            Ok(channel) => channel,
            Err(error) => {
                tracing::warn!(
                    %url,
                    %error,
                    "cannot connect to the xDS management server; trying again"
                );
                // gRPC's linear backoff with jitter 0.5, as upstream dials.
                let wait = settings.retry_interval.mul_f64(0.5 + random());
                if !pause(wait, &stop).await {
                    return;
                }
                continue;
            }
        };
        tracing::info!(%url, "connected to the xDS management server");
        match stream::run(channel, &settings, merge_domains, &envoy, &mut state, &stop).await {
            Ended::Shutdown => return,
            Ended::Broken { error, responded } => {
                if responded {
                    attempt = 0;
                }
                let wait = settings.backoff.delay(attempt, random());
                attempt = attempt.saturating_add(1);
                tracing::warn!(
                    %url,
                    %error,
                    retry_in = ?wait,
                    "the xDS stream ended; the running config stays in force"
                );
                if !pause(wait, &stop).await {
                    return;
                }
            }
        }
    }
}

/// Waits `wait`, or less if `stop` comes first (then `false`).
async fn pause(wait: Duration, stop: &CancellationToken) -> bool {
    tokio::select! {
        () = stop.cancelled() => false,
        () = tokio::time::sleep(wait) => true,
    }
}
