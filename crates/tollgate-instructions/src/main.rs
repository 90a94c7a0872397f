//! The hot paths, each run alone for `scripts/instructions`, which counts their instructions
//! under `valgrind --tool=callgrind`, collecting only inside [`measured`].
//!
//! `tollgate-instructions list` names the paths; `tollgate-instructions PATH N` sets the path
//! up, warms it up, then runs it `N` times inside [`measured`]. The count is instructions, not
//! time: the same on a busy machine, so that CI can hold it to a baseline. Every path decides
//! on a bucket no run can empty, so that each operation takes the same branches however slowly
//! it runs under valgrind.
//!
//! Each path drives the code as its users do, in process and without a socket: `memory_check`
//! the memory store; `redis_batch_encode` the Redis store's encoding of one call; `resp_parse`
//! the RESP decoder; `http_check` the server's router (`App::router`) without hyper;
//! `resp_throttle` the server's Redis-protocol front end from a request's bytes to its reply's
//! (`resp::Conversation`, what each of the listener's connections runs), on a connection that
//! authenticated with `[resp] password`; `middleware_check` the library's `TollgateLayer`
//! keyed by a header, on a service that answers at once, to the response with its `RateLimit`
//! headers.

#![forbid(unsafe_code)]

use std::convert::Infallible;
use std::hint::black_box;
use std::net::{IpAddr, Ipv4Addr};
use std::path::Path;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::http::{HeaderName, Method, Request, Response, header};
use http_body_util::{BodyExt as _, Empty};
use tollgate::middleware::{Header, TollgateLayer};
use tollgate::store::redis::bench::BatchEncoder;
use tollgate::{Check, MemoryStore, Policy};
use tollgate_server::App;
use tollgate_server::config::Config;
use tollgate_server::resp::codec::{self, Limits};
use tollgate_server::resp::{Answered, Conversation, Shared};
use tollgate_server::settings::{Overrides, Settings};
use tower::{Layer as _, ServiceExt as _};

/// The paths, with what one operation is.
const PATHS: [(&str, &str); 6] = [
    ("memory_check", "MemoryStore::check of one hot key"),
    (
        "redis_batch_encode",
        "16 decisions of distinct keys encoded as one EVALSHA, packed in RESP",
    ),
    (
        "resp_parse",
        "one CL.THROTTLE command decoded from its multibulk bytes",
    ),
    (
        "http_check",
        "POST /v1/check by policy name through the server's router, memory store, in process",
    ),
    (
        "resp_throttle",
        "one CL.THROTTLE answered by the server's RESP front end, bytes to bytes, memory store",
    ),
    (
        "middleware_check",
        "one request through TollgateLayer keyed by a header, memory store, RateLimit headers",
    ),
];

/// Operations run before counting: first allocations, tables growing, lazy statics.
const WARM_UP: u64 = 1000;

/// A bucket no run empties: 10^9 tokens refilled at 10^9 per second (the HTTP benchmark's).
fn allow_all() -> Policy {
    Policy::token_bucket(1_000_000_000, 1_000_000_000, Duration::from_secs(1))
        .expect("a valid policy")
}

/// Runs `paths` (warm-up and counted run): callgrind's `--toggle-collect` names this function,
/// so only what happens inside it is counted.
#[inline(never)]
fn measured(run: impl FnOnce()) {
    run();
}

/// Runs `op` [`WARM_UP`] times on `runtime`, then `n` times inside [`measured`].
fn warm_then_measure(runtime: &tokio::runtime::Runtime, n: u64, mut op: impl AsyncFnMut()) {
    runtime.block_on(async {
        for _ in 0..WARM_UP {
            op().await;
        }
    });
    measured(|| {
        runtime.block_on(async {
            for _ in 0..n {
                op().await;
            }
        });
    });
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.iter().map(String::as_str).collect::<Vec<_>>()[..] {
        ["list"] => {
            for (path, what) in PATHS {
                println!("{path}\t{what}");
            }
            ExitCode::SUCCESS
        }
        [path, n] => match run(path, n) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => fail(&e),
        },
        _ => fail("usage: tollgate-instructions list | tollgate-instructions PATH N"),
    }
}

fn fail(message: &str) -> ExitCode {
    eprintln!("tollgate-instructions: {message}");
    ExitCode::from(2)
}

fn run(path: &str, n: &str) -> Result<(), String> {
    let n: u64 = n.parse().map_err(|e| format!("N: {e}"))?;
    match path {
        "memory_check" => memory_check(n),
        "redis_batch_encode" => redis_batch_encode(n),
        "resp_parse" => resp_parse(n),
        "http_check" => http_check(n),
        "resp_throttle" => resp_throttle(n),
        "middleware_check" => middleware_check(n),
        _ => return Err(format!("no path {path} (`list` names them)")),
    }
    Ok(())
}

fn memory_check(n: u64) {
    let store = MemoryStore::new();
    let policy = allow_all();
    let op = || {
        let decision = store.check(&policy, black_box(b"key-00001"), 1);
        assert!(decision.expect("a memory check").allowed());
    };
    (0..WARM_UP).for_each(|_| op());
    measured(|| (0..n).for_each(|_| op()));
}

fn redis_batch_encode(n: u64) {
    let encoder = BatchEncoder::new();
    let policy = allow_all();
    let keys: Vec<String> = (0..16).map(|i| format!("key-{i:05}")).collect();
    let checks: Vec<[Check<'_>; 1]> = keys
        .iter()
        .map(|key| [Check::new(policy, key.as_bytes(), 1).named("api")])
        .collect();
    let decisions: Vec<&[Check<'_>]> = checks.iter().map(|c| &c[..]).collect();
    let mut out = Vec::new();
    let mut op = || {
        out.clear();
        encoder
            .encode(black_box(&decisions), &mut out)
            .expect("checks the Redis store takes");
        black_box(&out);
    };
    (0..WARM_UP).for_each(|_| op());
    measured(|| (0..n).for_each(|_| op()));
}

fn resp_parse(n: u64) {
    let request = b"*6\r\n$11\r\nCL.THROTTLE\r\n$9\r\nkey-00001\r\n$2\r\n15\r\n$2\r\n30\r\n$2\r\n60\r\n$1\r\n1\r\n";
    let limits = Limits::default();
    let op = || {
        let (args, used) = codec::decode(black_box(request), &limits)
            .expect("RESP")
            .expect("a whole request");
        assert_eq!(used, request.len());
        black_box(args);
    };
    (0..WARM_UP).for_each(|_| op());
    measured(|| (0..n).for_each(|_| op()));
}

/// The server's state on the memory store, with the policy `allow_all` ([`allow_all`]) and
/// `more` of the config file, and the runtime it runs on.
fn server(more: &str) -> (tokio::runtime::Runtime, App) {
    let policy = allow_all();
    let config = format!(
        "[policies.allow_all]\ncapacity = {}\nrefill = {}\nperiod = \"{}ns\"\n{more}",
        policy.capacity(),
        policy.refill(),
        policy.period().as_nanos()
    );
    let config = Config::parse(Path::new("instructions.toml"), &config).expect("a valid config");
    let settings = Settings::resolve(Overrides::default(), Some(&config));
    // One thread: everything a request does happens inside `measured`, on this thread.
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    let app = runtime
        .block_on(App::open(settings))
        .expect("the server's state on the memory store");
    (runtime, app)
}

fn http_check(n: u64) {
    let (runtime, app) = server("");
    let router = app.router();
    let body = axum::body::Bytes::from_static(br#"{"policy":"allow_all","key":"key-00001"}"#);
    let op = || async {
        let request = Request::builder()
            .method(Method::POST)
            .uri("/v1/check")
            .header(header::CONTENT_TYPE, "application/json")
            .body(Body::from(body.clone()))
            .expect("a request");
        let response = router.clone().oneshot(request).await.expect("infallible");
        assert!(response.status().is_success(), "{}", response.status());
        black_box(response.into_body().collect().await.expect("a body"));
    };
    warm_then_measure(&runtime, n, op);
}

/// A connection that authenticated with the password, as a client with one does once: each
/// operation is its command admitted under scope `check`.
fn resp_throttle(n: u64) {
    let (runtime, app) = server("[resp]\npassword = \"instructions\"\n");
    let password = app.settings().resp.password.clone();
    let shared = Shared::new(Arc::clone(app.limiter()), password, 0);
    let mut conversation = Conversation::new(&shared, IpAddr::V4(Ipv4Addr::LOCALHOST));
    let mut output = Vec::with_capacity(4096);
    let auth = b"*2\r\n$4\r\nAUTH\r\n$12\r\ninstructions\r\n";
    let answered = runtime.block_on(conversation.answer(auth, &mut output));
    assert_eq!(
        (answered, &output[..]),
        (
            Answered::Request {
                used: auth.len(),
                close: false
            },
            &b"+OK\r\n"[..]
        )
    );
    // allow_all's numbers in redis-cell's words: 10^9 + 1 tokens, 10^9 a second.
    let request = b"*6\r\n$11\r\nCL.THROTTLE\r\n$9\r\nkey-00001\r\n$10\r\n1000000000\r\n$10\r\n1000000000\r\n$1\r\n1\r\n$1\r\n1\r\n";
    let op = async || {
        output.clear();
        let answered = conversation.answer(black_box(request), &mut output).await;
        assert_eq!(
            answered,
            Answered::Request {
                used: request.len(),
                close: false
            }
        );
        // Allowed (0), with the bucket full again by the time of the next.
        assert!(output.starts_with(b"*5\r\n:0\r\n"), "{output:?}");
        black_box(&output);
    };
    warm_then_measure(&runtime, n, op);
}

/// The layer as a user builds it (the defaults: RateLimit headers on, fail open) on a service
/// that answers at once with an empty body, each request keyed by its `x-api-key`.
fn middleware_check(n: u64) {
    let x_api_key = HeaderName::from_static("x-api-key");
    let layer = TollgateLayer::builder(MemoryStore::new())
        .policy("allow_all", allow_all())
        .key(Header::new(x_api_key.clone()))
        .build()
        .expect("a valid layer");
    let service = layer.layer(tower::service_fn(|_: Request<()>| async {
        Ok::<_, Infallible>(Response::new(Empty::<axum::body::Bytes>::new()))
    }));
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    let op = || async {
        let request = Request::builder()
            .uri("/hello")
            .header(&x_api_key, "key-00001")
            .body(())
            .expect("a request");
        let response = service.clone().oneshot(request).await.expect("infallible");
        assert!(response.status().is_success(), "{}", response.status());
        assert!(response.headers().contains_key("ratelimit"));
        black_box(response);
    };
    warm_then_measure(&runtime, n, op);
}
