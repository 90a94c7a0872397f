//! A gRPC client of Envoy's rate-limit service, built from the Envoy v3 types, and config
//! directories to start servers with.

use std::net::SocketAddr;
use std::path::Path;

use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::Entry;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
use envoy_types::pb::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};
use envoy_types::pb::google::protobuf::UInt64Value;
use tonic::transport::Channel;

/// A client of the server at `addr`.
pub async fn client(addr: SocketAddr) -> RateLimitServiceClient<Channel> {
    RateLimitServiceClient::connect(format!("http://{addr}"))
        .await
        .expect("connect to the gRPC listener")
}

/// A descriptor of `entries` (key, value).
pub fn descriptor(entries: &[(&str, &str)]) -> RateLimitDescriptor {
    RateLimitDescriptor {
        entries: entries
            .iter()
            .map(|(key, value)| Entry {
                key: (*key).to_owned(),
                value: (*value).to_owned(),
            })
            .collect(),
        ..Default::default()
    }
}

/// `descriptor` with its own hits_addend.
pub fn with_hits(mut descriptor: RateLimitDescriptor, hits: u64) -> RateLimitDescriptor {
    descriptor.hits_addend = Some(UInt64Value { value: hits });
    descriptor
}

/// A request to `domain` of `descriptors`.
pub fn request(domain: &str, descriptors: Vec<RateLimitDescriptor>) -> RateLimitRequest {
    RateLimitRequest {
        domain: domain.to_owned(),
        descriptors,
        hits_addend: 0,
    }
}

/// Asks, and expects an answer (not a gRPC error).
pub async fn ask(
    client: &mut RateLimitServiceClient<Channel>,
    request: RateLimitRequest,
) -> RateLimitResponse {
    client
        .should_rate_limit(request)
        .await
        .expect("ShouldRateLimit answers")
        .into_inner()
}

/// The response's codes: overall, then each descriptor's, as `OK` / `OVER`.
pub fn codes(response: &RateLimitResponse) -> (String, Vec<String>) {
    let name = |c: i32| match Code::try_from(c) {
        Ok(Code::Ok) => "OK".to_owned(),
        Ok(Code::OverLimit) => "OVER".to_owned(),
        _ => format!("code {c}"),
    };
    (
        name(response.overall_code),
        response.statuses.iter().map(|s| name(s.code)).collect(),
    )
}

/// Writes `files` (name, contents) into `dir`.
pub fn write(dir: &Path, files: &[(&str, &str)]) {
    for (name, text) in files {
        // Written aside and renamed in, as editors and ConfigMap updates do: a reload never
        // reads half a file.
        let tmp = dir.join(format!(".{name}.tmp"));
        std::fs::write(&tmp, text).expect("write a config file");
        std::fs::rename(&tmp, dir.join(name)).expect("rename a config file in place");
    }
}

/// 64 concurrent gRPC clients spread over `servers` asking `request` for 3 s: the allowed
/// answers, the other answers (errors), and the wall-clock seconds (since the epoch) of the
/// first call and the last answer.
pub async fn hammer(servers: &[SocketAddr], request: RateLimitRequest) -> (u64, u64, (f64, f64)) {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicU64, Ordering};
    let mut clients = Vec::new();
    for addr in servers {
        clients.push(client(*addr).await);
    }
    let counts: Arc<[AtomicU64; 2]> = Arc::default();
    use tollgate::{Clock, MonotonicClock, Nanos};
    // The clock reads the epoch once and counts from there: wall-clock seconds, monotonic.
    let clock = MonotonicClock::new();
    let wall = move || std::time::Duration::from(clock.now()).as_secs_f64();
    let start = wall();
    let deadline = clock.now() + Nanos::new(3_000_000_000);
    let tasks: Vec<_> = (0..64)
        .map(|i| {
            let mut client = clients[i % clients.len()].clone();
            let (request, counts) = (request.clone(), Arc::clone(&counts));
            tokio::spawn(async move {
                while clock.now() < deadline {
                    match client.should_rate_limit(request.clone()).await {
                        Ok(r) if r.get_ref().overall_code == Code::Ok as i32 => {
                            counts[0].fetch_add(1, Ordering::Relaxed);
                        }
                        Ok(_) => {}
                        Err(_) => {
                            counts[1].fetch_add(1, Ordering::Relaxed);
                        }
                    }
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.expect("a client task panicked");
    }
    let end = wall();
    (
        counts[0].load(Ordering::Relaxed),
        counts[1].load(Ordering::Relaxed),
        (start, end),
    )
}

/// The most a fixed window of `limit` per `unit_secs` allows between `start` and `end`
/// (seconds since the epoch): `limit` in every window the interval touches.
pub fn fixed_window_bound(limit: u64, unit_secs: u64, (start, end): (f64, f64)) -> u64 {
    let first = start as u64 / unit_secs;
    let last = end as u64 / unit_secs;
    limit * (last - first + 1)
}

/// A scratch directory holding `files` in `envoy/` and a `tollgate.toml` whose `[grpc]`
/// section names that directory and adds `grpc`; the directory, and the TOML file's path.
pub fn configured(grpc: &str, files: &[(&str, &str)]) -> (tempfile::TempDir, std::path::PathBuf) {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let envoy = dir.path().join("envoy");
    std::fs::create_dir(&envoy).expect("the Envoy directory");
    write(&envoy, files);
    let path = dir.path().join("tollgate.toml");
    std::fs::write(&path, format!("[grpc]\nconfig_dir = \"envoy\"\n{grpc}\n"))
        .expect("the TOML file");
    (dir, path)
}
