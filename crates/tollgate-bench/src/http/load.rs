//! The load generator: `connections` keep-alive HTTP/1.1 connections (plaintext or TLS), one
//! hyper client connection per worker task, each sending `GET /hello` (or the server's
//! `POST /v1/check`) and reading the whole response, one at a time, until the run's time is up
//! (closed-loop, as `wrk` does).
//!
//! It runs on the same runtime as the servers: on a small machine the client's own cost is part
//! of every run, which is why the variants alternate and only their ratio is reported.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::client::conn::http1::{self, SendRequest};
use hyper::header::{CONTENT_TYPE, HOST, HeaderName, HeaderValue};
use hyper::{Method, Request, StatusCode, Uri};
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;
use tokio::task::{JoinHandle, JoinSet};

use super::server::{POLICY_NAME, X_API_KEY};
use super::variant::Variant;
use crate::BenchError;
use crate::clock::{self, Stopwatch};
use crate::stats::Histogram;
use crate::tls::TlsClient;

/// The header the middleware adds to every response it lets through.
static RATELIMIT: HeaderName = HeaderName::from_static("ratelimit");

/// What every request carries. The middleware's variants get the same requests, `x-api-key`
/// included (only the keyed variant reads it), so the client and the HTTP parsing cost the same
/// in every run; the server's variants, and the JSON endpoints beside them, post a check of the
/// same keys instead.
#[derive(Clone)]
pub(crate) struct Requests {
    uri: Uri,
    host: HeaderValue,
    keys: Arc<[HeaderValue]>,
    /// For the server: one `/v1/check` body per key.
    checks: Option<Arc<[Bytes]>>,
}

impl Requests {
    /// `GET /hello` to `addr` (or the server's `POST /v1/check`), with `keys` distinct API keys
    /// (at least one).
    pub(crate) fn new(
        addr: SocketAddr,
        keys: usize,
        variant: Variant,
    ) -> Result<Requests, BenchError> {
        let invalid = |e: &dyn std::fmt::Display| BenchError::Args(format!("request: {e}"));
        let keys: Vec<HeaderValue> = (0..keys.max(1))
            .map(|i| HeaderValue::try_from(format!("key-{i:05}")))
            .collect::<Result<_, _>>()
            .map_err(|e| invalid(&e))?;
        let checks = variant.takes_checks().then(|| {
            (0..keys.len())
                .map(|i| {
                    Bytes::from(format!(
                        "{{\"policy\":\"{POLICY_NAME}\",\"key\":\"key-{i:05}\"}}"
                    ))
                })
                .collect()
        });
        Ok(Requests {
            uri: Uri::from_static(if checks.is_some() {
                "/v1/check"
            } else {
                "/hello"
            }),
            host: HeaderValue::try_from(addr.to_string()).map_err(|e| invalid(&e))?,
            keys: keys.into(),
            checks,
        })
    }

    /// The `n`th request of a worker; `n` walks the keys so that all of them are used.
    pub(crate) fn build(&self, n: usize) -> Request<Full<Bytes>> {
        let mut request = match &self.checks {
            Some(bodies) => {
                let mut post = Request::new(Full::new(bodies[n % bodies.len()].clone()));
                *post.method_mut() = Method::POST;
                post.headers_mut()
                    .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
                post
            }
            None => Request::new(Full::new(Bytes::new())),
        };
        *request.uri_mut() = self.uri.clone();
        let headers = request.headers_mut();
        headers.insert(HOST, self.host.clone());
        if self.checks.is_none() {
            headers.insert(X_API_KEY.clone(), self.keys[n % self.keys.len()].clone());
        }
        request
    }
}

/// What one run measured, or one worker's share of it.
#[derive(Debug, Default)]
pub(crate) struct Tally {
    /// Latency of each exchange, from sending the request to the end of the response body
    /// (failed exchanges included).
    pub(crate) histogram: Histogram,
    /// Responses read to the end, whatever their status.
    pub(crate) responses: u64,
    /// Responses whose status was not 200.
    pub(crate) non_200: u64,
    /// Responses carrying the `RateLimit` header (evidence the middleware decided them).
    pub(crate) with_ratelimit: u64,
    /// Exchanges that failed at the transport (connection reset, malformed response, ...).
    pub(crate) errors: u64,
    /// The first status other than 200, or the first error, for the progress line.
    pub(crate) first_problem: Option<String>,
    /// From the first request sent to the last response read.
    pub(crate) elapsed: Duration,
    /// CPU time the whole process (load generator and servers) used meanwhile, if known.
    pub(crate) cpu: Option<Duration>,
    /// CPU time the rest of the machine used meanwhile, if known.
    pub(crate) others_cpu: Option<Duration>,
}

impl Tally {
    fn merge(&mut self, other: Tally) {
        self.histogram.merge(&other.histogram);
        self.responses += other.responses;
        self.non_200 += other.non_200;
        self.with_ratelimit += other.with_ratelimit;
        self.errors += other.errors;
        self.first_problem = self.first_problem.take().or(other.first_problem);
    }

    fn problem(&mut self, problem: impl FnOnce() -> String) {
        if self.first_problem.is_none() {
            self.first_problem = Some(problem());
        }
    }
}

/// Loads `addr` (over TLS with `tls`) with `connections` workers for `duration`. Every
/// connection is open (its TLS handshake done) before the clock starts, and closed (its task
/// ended) before this returns, so runs do not overlap.
pub(crate) async fn run(
    addr: SocketAddr,
    tls: Option<&TlsClient>,
    requests: &Requests,
    connections: usize,
    duration: Duration,
) -> Result<Tally, BenchError> {
    let mut opened = Vec::with_capacity(connections);
    for _ in 0..connections {
        opened.push(connect(addr, tls).await?);
    }
    let cpu = clock::process_cpu();
    let machine = clock::machine_cpu();
    let start = Stopwatch::start();
    let mut workers = JoinSet::new();
    for (worker, connection) in opened.into_iter().enumerate() {
        let walk = KeyWalk {
            next: worker,
            stride: connections,
        };
        workers.spawn(drive(
            connection,
            addr,
            tls.cloned(),
            requests.clone(),
            walk,
            start,
            duration,
        ));
    }
    let mut tally = Tally::default();
    let mut drivers = Vec::with_capacity(connections);
    while let Some(done) = workers.join_next().await {
        let (worker, driver) = done?;
        tally.merge(worker);
        drivers.push(driver);
    }
    tally.elapsed = start.elapsed();
    tally.cpu = cpu
        .zip(clock::process_cpu())
        .map(|(a, b)| b.saturating_sub(a));
    let machine = machine
        .zip(clock::machine_cpu())
        .map(|(a, b)| b.saturating_sub(a));
    tally.others_cpu = machine
        .zip(tally.cpu)
        .map(|(m, ours)| m.saturating_sub(ours));
    // The senders are dropped: each connection shuts down and its task ends.
    for driver in drivers {
        // A connection that broke was already counted as an error by its worker.
        let _ = driver.await?;
    }
    Ok(tally)
}

/// One client connection: the handle to send on, and the task that drives its I/O.
pub(crate) struct Connection {
    pub(crate) sender: SendRequest<Full<Bytes>>,
    pub(crate) driver: JoinHandle<Result<(), hyper::Error>>,
}

pub(crate) async fn connect(
    addr: SocketAddr,
    tls: Option<&TlsClient>,
) -> Result<Connection, BenchError> {
    match tls {
        Some(tls) => start(tls.connect(addr).await?).await,
        None => {
            let tcp = TcpStream::connect(addr).await?;
            tcp.set_nodelay(true)?;
            start(tcp).await
        }
    }
}

/// HTTP/1.1 on an open connection, its I/O driven by a task of its own.
async fn start<T>(io: T) -> Result<Connection, BenchError>
where
    T: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let (sender, connection) = http1::handshake(TokioIo::new(io)).await?;
    Ok(Connection {
        sender,
        driver: tokio::spawn(connection),
    })
}

/// Which key a worker sends next: worker `w` of `c` sends keys `w, w + c, w + 2c, ...` (modulo
/// the number of keys), so the workers together cycle through all of them.
struct KeyWalk {
    next: usize,
    stride: usize,
}

impl KeyWalk {
    fn advance(&mut self) -> usize {
        let n = self.next;
        self.next = self.next.wrapping_add(self.stride);
        n
    }
}

/// Sends requests one after another until `duration` has passed since `start`; no request
/// starts after that. After a transport error the worker reconnects once and goes on, or stops
/// if it cannot.
async fn drive(
    mut connection: Connection,
    addr: SocketAddr,
    tls: Option<TlsClient>,
    requests: Requests,
    mut keys: KeyWalk,
    start: Stopwatch,
    duration: Duration,
) -> (Tally, JoinHandle<Result<(), hyper::Error>>) {
    let mut tally = Tally::default();
    loop {
        let request = requests.build(keys.advance());
        let call = Stopwatch::start();
        let outcome = exchange(&mut connection.sender, request).await;
        tally.histogram.record(call.elapsed());
        match outcome {
            Ok((status, with_ratelimit)) => {
                tally.responses += 1;
                tally.with_ratelimit += u64::from(with_ratelimit);
                if status != StatusCode::OK {
                    tally.non_200 += 1;
                    tally.problem(|| format!("status {status}"));
                }
            }
            Err(e) => {
                tally.errors += 1;
                tally.problem(|| e.to_string());
                match connect(addr, tls.as_ref()).await {
                    Ok(fresh) => connection = fresh,
                    Err(e) => {
                        tally.problem(|| e.to_string());
                        return (tally, connection.driver);
                    }
                }
            }
        }
        if start.elapsed() >= duration {
            return (tally, connection.driver);
        }
    }
}

/// One request and its whole response: the status, and whether it had a `RateLimit` header.
pub(crate) async fn exchange(
    sender: &mut SendRequest<Full<Bytes>>,
    request: Request<Full<Bytes>>,
) -> Result<(StatusCode, bool), hyper::Error> {
    sender.ready().await?;
    let response = sender.send_request(request).await?;
    let status = response.status();
    let with_ratelimit = response.headers().contains_key(&RATELIMIT);
    // Reading the body to its end is what frees the connection for the next request.
    response.into_body().collect().await?;
    Ok((status, with_ratelimit))
}
