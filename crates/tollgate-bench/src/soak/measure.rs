//! The soak's measurement: calls paced at a steady rate, a fault in the middle of each period,
//! and what the process holds at each period's end.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::Entry;
use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitRequest;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
use tonic::transport::Endpoint;

use super::{Held, Period, SoakArgs, SoakReport};
use crate::BenchError;
use crate::clock::Stopwatch;
use crate::stats::Histogram;

/// The faults, in turn, one per period.
const FAULTS: [&str; 3] = [
    "CLIENT KILL TYPE normal",
    "CLIENT PAUSE 300 ALL",
    "SCRIPT FLUSH",
];

/// What one period's calls saw.
#[derive(Default)]
struct Tally {
    latencies: Histogram,
    ok: u64,
    over: u64,
    errors: u64,
}

/// Runs the soak against the gRPC server at `addr` deciding on `args.redis`: the report.
pub(super) async fn measure(args: &SoakArgs, addr: SocketAddr) -> Result<SoakReport, BenchError> {
    let periods = args.seconds.div_ceil(args.period) as usize;
    let redis = redis::Client::open(args.redis.as_str())?;
    let channel = Endpoint::from_shared(format!("http://{addr}"))
        .map_err(|e| BenchError::Args(format!("the gRPC address {addr}: {e}")))?
        .connect()
        .await
        .map_err(|e| BenchError::Args(format!("cannot connect to {addr}: {e}")))?;
    // Warm up (connections, scripts), then count what the process holds.
    let mut warm = RateLimitServiceClient::new(channel.clone());
    for i in 0..100 {
        let _ = warm.should_rate_limit(request(i)).await;
    }
    let before = Held::now();
    let tallies: Arc<Mutex<Vec<Tally>>> =
        Arc::new(Mutex::new((0..periods).map(|_| Tally::default()).collect()));
    let clock = Stopwatch::start();
    let total = Duration::from_secs(args.seconds);
    let period = Duration::from_secs(args.period);
    // Each task sends one call per `interval`, at its own offset: `rate` calls a second.
    let interval = Duration::from_secs_f64(args.concurrency as f64 / args.rate as f64);
    let tasks: Vec<_> = (0..args.concurrency)
        .map(|worker| {
            let mut client = RateLimitServiceClient::new(channel.clone());
            let tallies = Arc::clone(&tallies);
            let offset = interval.mul_f64(worker as f64 / args.concurrency as f64);
            tokio::spawn(async move {
                let mut next = offset;
                let mut n = worker;
                while next < total {
                    if let Some(wait) = next.checked_sub(clock.elapsed()) {
                        tokio::time::sleep(wait).await;
                    }
                    n = n.wrapping_add(7_919);
                    let started = clock.elapsed();
                    let answer = client.should_rate_limit(request(n)).await;
                    let took = clock.elapsed().saturating_sub(started);
                    let index = (started.as_nanos() / period.as_nanos()) as usize;
                    let mut tallies = tallies.lock().unwrap_or_else(|e| e.into_inner());
                    if let Some(tally) = tallies.get_mut(index) {
                        tally.latencies.record(took);
                        match answer {
                            Ok(r) if r.get_ref().overall_code == Code::Ok as i32 => tally.ok += 1,
                            Ok(_) => tally.over += 1,
                            Err(_) => tally.errors += 1,
                        }
                    }
                    next += interval;
                }
            })
        })
        .collect();
    // A fault in the middle of each period, and what the process holds at its end.
    let mut held = Vec::with_capacity(periods);
    let mut faults = Vec::with_capacity(periods);
    for p in 0..periods {
        let middle = period.mul_f64(p as f64 + 0.5);
        if let Some(wait) = middle.checked_sub(clock.elapsed()) {
            tokio::time::sleep(wait).await;
        }
        let fault = FAULTS[p % FAULTS.len()];
        let injected = inject(&redis, fault).await;
        faults.push(match injected {
            Ok(()) => fault.to_owned(),
            Err(e) => format!("{fault} (failed: {e})"),
        });
        let end = (period * (p as u32 + 1)).min(total);
        if let Some(wait) = end.checked_sub(clock.elapsed()) {
            tokio::time::sleep(wait).await;
        }
        held.push(Held::now());
    }
    for task in tasks {
        task.await
            .map_err(|e| BenchError::Args(format!("a soak worker failed: {e}")))?;
    }
    drop(warm);
    // Let the connections and tasks of the run wind down before the last count.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let after = Held::now();
    let tallies = std::mem::take(&mut *tallies.lock().unwrap_or_else(|e| e.into_inner()));
    let rows: Vec<Period> = tallies
        .into_iter()
        .zip(faults)
        .zip(held)
        .enumerate()
        .map(|(i, ((t, fault), held))| {
            let ms = |q| {
                t.latencies
                    .quantile(q)
                    .map_or(f64::NAN, |d| d.as_secs_f64() * 1e3)
            };
            let row = Period {
                index: i + 1,
                fault,
                calls: t.latencies.count(),
                ok: t.ok,
                over: t.over,
                errors: t.errors,
                p50_ms: ms(0.5),
                p99_ms: ms(0.99),
                max_ms: ms(1.0),
                held,
            };
            eprintln!("{}", row.line());
            row
        })
        .collect();
    let report = SoakReport {
        seconds: args.seconds,
        period: args.period,
        rate: args.rate,
        before,
        after,
        periods: rows,
    };
    Ok(report)
}

/// A call for user `n` of the benchmark's domain.
fn request(n: usize) -> RateLimitRequest {
    RateLimitRequest {
        domain: "bench".to_owned(),
        descriptors: vec![RateLimitDescriptor {
            entries: vec![Entry {
                key: "user".to_owned(),
                value: (n % 10_000).to_string(),
            }],
            ..Default::default()
        }],
        hits_addend: 0,
    }
}

/// Sends the fault's command to Redis (on a connection of its own, which `CLIENT KILL TYPE
/// normal` also ends).
async fn inject(redis: &redis::Client, fault: &str) -> Result<(), redis::RedisError> {
    let mut conn = redis.get_multiplexed_async_connection().await?;
    let mut words = fault.split_whitespace();
    let mut cmd = redis::cmd(words.next().unwrap_or("PING"));
    for word in words {
        cmd.arg(word);
    }
    match cmd.query_async::<redis::Value>(&mut conn).await {
        Ok(_) => Ok(()),
        // Killing every normal client kills this one too, before it hears the answer.
        Err(e) if fault.starts_with("CLIENT KILL") && e.is_io_error() => Ok(()),
        Err(e) => Err(e),
    }
}
