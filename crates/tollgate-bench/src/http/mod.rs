//! The cost of tollgate's tower middleware over a bare axum handler, on the memory store, and
//! of `tollgate serve` answering checks by a policy's name, in plaintext and over TLS.
//!
//! The servers run in this process on `127.0.0.1`: the bare handler (and the same sending the
//! middleware's headers), the same router behind `TollgateLayer` keyed by client IP and (with
//! `--keys` > 0) keyed by an API key header, and `tollgate serve` on its own listener, in
//! plaintext and over TLS (a throwaway CA and certificate, made with `openssl`), and beside the
//! server its floors: a JSON endpoint answering the server's requests in the server's shape
//! without deciding (`bare_json`), on `axum::serve` and on the server's listener machinery. A
//! load generator in the same process keeps `--connections` keep-alive connections busy on one
//! server at a time. Client and servers share the machine's cores, so a run measures both; the
//! variants alternate (bare, tollgate, tollgate_keys, bare, ...) for `--rounds`, so that drift of
//! the machine hits each alike, and the report gives each variant's median across rounds and
//! the ratio to the bare handler. The goal is 0.95× (0.9× before). The server's ratio is also
//! given to `bare_json`, the part of its cost that is its own, and `bare_json`'s to bare, what
//! the server's goal leaves for the limiter.

mod json;
pub(crate) mod load;
mod measure;
mod report;
pub(crate) mod server;
mod variant;

use std::path::PathBuf;

pub use report::{Comparison, HttpReport, Run, Summary};
pub use server::{POLICY_NAME, allow_all};
pub use variant::{GOAL_RATIO, GOAL_TOP_CPU, Variant};

use crate::BenchError;
use crate::args::seconds;
use crate::tls::Certificates;
use measure::measure;
use server::Server;

/// Arguments of the HTTP benchmark.
#[derive(clap::Args, Debug, Clone)]
pub struct HttpBenchArgs {
    /// seconds per run (one variant, one round)
    #[arg(long, default_value = "3")]
    pub seconds: f64,
    /// keep-alive connections of the load generator, one worker each
    #[arg(long, default_value = "64")]
    pub connections: usize,
    /// rounds: each variant runs once per round, in turn
    #[arg(long, default_value = "3")]
    pub rounds: usize,
    /// distinct x-api-key values for the keyed variant; 0 leaves that variant out
    #[arg(long, default_value = "1000")]
    pub keys: usize,
    /// seconds of unrecorded load on each variant before the rounds; 0 skips it
    #[arg(long, default_value = "0.5")]
    pub warmup: f64,
    /// directory to write http.md and http.svg to
    #[arg(long, default_value = "bench-report")]
    pub out: PathBuf,
}

impl Default for HttpBenchArgs {
    fn default() -> HttpBenchArgs {
        HttpBenchArgs {
            seconds: 3.0,
            connections: 64,
            rounds: 3,
            keys: 1000,
            warmup: 0.5,
            out: PathBuf::from("bench-report"),
        }
    }
}

/// Starts the servers (`tollgate serve` among them, in plaintext as [`Variant::Server`] and
/// over TLS as [`Variant::ServerTls`]), runs the rounds, stops the servers, writes `http.md`
/// and `http.svg` to `args.out`, and returns the report. Progress goes to stderr, a line per
/// run.
///
/// A request the middleware rejects, or one that fails, does not stop the run: it is counted,
/// and the report's last goal is then not met.
pub async fn run_http(args: &HttpBenchArgs) -> Result<HttpReport, BenchError> {
    run_http_with(args, &Variant::ALL).await
}

/// [`run_http`] with only `variants` (in report order whatever their order here; the keyed one
/// only with `--keys` above 0). [`Variant::ServerTls`] makes a throwaway CA and certificate
/// with the `openssl` command.
pub async fn run_http_with(
    args: &HttpBenchArgs,
    variants: &[Variant],
) -> Result<HttpReport, BenchError> {
    let run_time = seconds(args.seconds, "--seconds")?;
    if args.connections == 0 {
        return Err(BenchError::Args("--connections must be at least 1".into()));
    }
    if args.rounds == 0 {
        return Err(BenchError::Args("--rounds must be at least 1".into()));
    }
    let warmup = if args.warmup == 0.0 {
        None
    } else {
        Some(seconds(args.warmup, "--warmup")?)
    };
    let variants: Vec<Variant> = Variant::ALL
        .into_iter()
        .filter(|v| variants.contains(v))
        .filter(|v| *v != Variant::TollgateKeys || args.keys > 0)
        .collect();
    let certificates = if variants.contains(&Variant::ServerTls) {
        Some(Certificates::make("http")?)
    } else {
        None
    };
    let mut servers: Vec<Server> = Vec::with_capacity(variants.len());
    for &variant in &variants {
        match Server::start(variant, certificates.as_ref()).await {
            Ok(server) => servers.push(server),
            Err(e) => {
                stop(servers).await?;
                return Err(e);
            }
        }
    }
    // What the TLS variant's handshake settles on, for the report; a server that cannot
    // complete one fails here, before any round.
    let mut tls = None;
    for server in &servers {
        if let Some(client) = &server.tls {
            match client.describe(server.addr).await {
                Ok(described) => tls = Some(described),
                Err(e) => {
                    stop(servers).await?;
                    return Err(e);
                }
            }
        }
    }
    let mut report = HttpReport {
        seconds_per_run: args.seconds,
        connections: args.connections,
        rounds: args.rounds,
        keys: args.keys,
        warmup_seconds: if warmup.is_some() { args.warmup } else { 0.0 },
        cores: std::thread::available_parallelism().map_or(1, |n| n.get()),
        tls,
        runs: Vec::new(),
    };
    let measured = measure(args, run_time, warmup, &servers, &mut report).await;
    // Stop the servers even when a run failed, then report the first failure.
    let stopped = stop(servers).await;
    measured?;
    stopped?;
    report.report().write(&args.out)?;
    Ok(report)
}

/// Stops every server; the first failure, if any.
async fn stop(servers: Vec<Server>) -> Result<(), BenchError> {
    let mut stopped = Ok(());
    for server in servers {
        let result = server.stop().await;
        stopped = stopped.and(result);
    }
    stopped
}
