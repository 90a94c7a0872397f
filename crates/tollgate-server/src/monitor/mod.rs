//! `tollgate top`: who is being limited, in a terminal, refreshed every second like `top`.
//!
//! It reads the admin listener (`--url`) with a `read` token (`--token-file`, or
//! `TOLLGATE_TOKEN`): `GET /v1/top` for each policy's top denied keys, and `GET /v1/status`
//! for the decisions each policy made, whose differences between two refreshes are the rates
//! shown. A server without `/v1/status` still shows its policies (`GET /v1/policies`) and their
//! keys, without rates. `q` or Ctrl-C quits and gives the terminal back as it was; `--once`
//! prints one table and exits, for scripts.

mod client;
mod table;
mod tty;

use std::collections::HashMap;
use std::path::PathBuf;
use std::time::Duration;

use http::StatusCode;
use serde_json::Value;
use std::io::Read;

use client::Client;
use table::{Row, Screen};

/// How often the table is drawn again.
pub const REFRESH: Duration = Duration::from_secs(1);

/// What `tollgate top` is asked for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MonitorOptions {
    /// The admin listener, `http://HOST:PORT` or `https://...`.
    pub url: String,
    /// The file holding the token; without one, `TOLLGATE_TOKEN`.
    pub token_file: Option<PathBuf>,
    /// The CA to trust for `https` (else the system's roots).
    pub ca: Option<PathBuf>,
    /// `1m` or `1h`.
    pub window: String,
    /// The most keys shown per policy.
    pub limit: usize,
    /// Print one table and exit.
    pub once: bool,
}

/// Why `tollgate top` stopped.
#[derive(Debug, thiserror::Error)]
pub enum MonitorError {
    /// The URL, the CA or the token cannot be used.
    #[error("{0}")]
    Url(String),
    /// The server did not answer.
    #[error("{0}")]
    Request(String),
    /// The server refused (a token without `read`, say): its words.
    #[error("{0}")]
    Refused(String),
}

/// Cumulative decisions per policy, and when the server counted them.
#[derive(Default)]
struct Counted {
    now_ms: u64,
    by_policy: HashMap<String, (u64, u64)>,
}

/// Shows the table until `q`, Ctrl-C, or (with `--once`) at once.
pub async fn run(options: MonitorOptions) -> Result<(), MonitorError> {
    let token = match &options.token_file {
        Some(path) => Some(
            std::fs::read_to_string(path)
                .map_err(|e| MonitorError::Url(format!("--token-file {}: {e}", path.display())))?
                .trim_end()
                .to_owned(),
        ),
        None => std::env::var("TOLLGATE_TOKEN").ok(),
    };
    let client = Client::new(&options.url, token, options.ca.as_deref())?;
    let mut last = Counted::default();
    if options.once {
        let screen = fetch(&client, &options, &mut last).await?;
        print!("{}", table::render(&screen));
        return Ok(());
    }
    // The handlers are in place before the terminal changes: a signal at any time after
    // quits through the guard, which gives the terminal back.
    let stop = stopped()?;
    let mut stop = std::pin::pin!(stop);
    let _terminal = tty::RawTerminal::enter();
    let (quit_tx, mut quit) = tokio::sync::mpsc::channel::<()>(1);
    // A thread of its own blocks on the terminal; it ends with the process.
    std::thread::spawn(move || {
        let mut byte = [0u8; 1];
        while let Ok(1) = std::io::stdin().read(&mut byte) {
            if matches!(byte[0], b'q' | b'Q') {
                let _ = quit_tx.blocking_send(());
                return;
            }
        }
    });
    loop {
        let fetched = tokio::select! {
            fetched = fetch(&client, &options, &mut last) => fetched,
            _ = quit.recv() => return Ok(()),
            () = stop.as_mut() => return Ok(()),
        };
        let text = match fetched {
            Ok(screen) => table::render(&screen),
            Err(e) => format!(
                "tollgate top  {}\n\n{}\n(trying again every second; q quits)\n",
                table::printable(&options.url),
                table::printable(&e.to_string())
            ),
        };
        // Home, clear, draw; raw mode keeps "\n" from returning the carriage.
        print!("\x1b[H\x1b[2J{}", text.replace('\n', "\r\n"));
        let _ = std::io::Write::flush(&mut std::io::stdout());
        tokio::select! {
            () = tokio::time::sleep(REFRESH) => {}
            _ = quit.recv() => return Ok(()),
            () = stop.as_mut() => return Ok(()),
        }
    }
}

/// Resolves at the first SIGINT (Ctrl-C), SIGTERM, SIGHUP or SIGQUIT, whose handlers are in
/// place once this returns (so none of them ends the process with the terminal still raw).
fn stopped() -> Result<impl Future<Output = ()>, MonitorError> {
    use tokio::signal::unix::{SignalKind, signal};
    let handle = |kind: SignalKind| {
        signal(kind).map_err(|e| MonitorError::Request(format!("cannot handle signals: {e}")))
    };
    let mut int = handle(SignalKind::interrupt())?;
    let mut term = handle(SignalKind::terminate())?;
    let mut hup = handle(SignalKind::hangup())?;
    let mut quit = handle(SignalKind::quit())?;
    Ok(async move {
        tokio::select! {
            _ = int.recv() => {}
            _ = term.recv() => {}
            _ = hup.recv() => {}
            _ = quit.recv() => {}
        }
    })
}

/// `GET path` as JSON: `Err` with the server's words for a 404 (not served here) and `Ok`
/// with the value of a 200; a refusal is the error.
async fn json(client: &Client, path: &str) -> Result<Result<Value, String>, MonitorError> {
    let (status, body) = client.get(path).await?;
    let value: Result<Value, _> = serde_json::from_slice(&body);
    if status == StatusCode::NOT_FOUND {
        let detail = value
            .ok()
            .and_then(|v| v["detail"].as_str().map(str::to_owned));
        return Ok(Err(detail.unwrap_or_else(|| format!("GET {path}: 404"))));
    }
    let value =
        value.map_err(|e| MonitorError::Request(format!("GET {path}: {status}, not JSON: {e}")))?;
    if !status.is_success() {
        let detail = value["detail"].as_str().unwrap_or("no detail");
        return Err(MonitorError::Refused(format!(
            "GET {path}: {status}: {detail}"
        )));
    }
    Ok(Ok(value))
}

/// One screen: the policies (from `/v1/status`, else `/v1/policies`), their rates since
/// `last`, and every summary's top denied keys.
async fn fetch(
    client: &Client,
    options: &MonitorOptions,
    last: &mut Counted,
) -> Result<Screen, MonitorError> {
    let mut notes = Vec::new();
    let status = json(client, "/v1/status").await?;
    let (policies, now) = match &status {
        Ok(status) => (
            status["policies"].clone(),
            Some(status["now_ms"].as_u64().unwrap_or(0)),
        ),
        Err(_) => {
            notes.push("rates: this server does not serve GET /v1/status".to_owned());
            // A port that serves neither is not an operators' one (a data port beside an
            // admin listener, whose 404 says where they moved): said, not an empty table.
            let listed = json(client, "/v1/policies")
                .await?
                .map_err(MonitorError::Refused)?;
            (listed["policies"].clone(), None)
        }
    };
    let mut counted = Counted {
        now_ms: now.unwrap_or(0),
        by_policy: HashMap::new(),
    };
    let mut limits: HashMap<String, (String, Option<(f64, f64)>)> = HashMap::new();
    for p in policies.as_array().into_iter().flatten() {
        let Some(name) = p["name"].as_str() else {
            continue;
        };
        let rates = match (p["allowed"].as_u64(), p["denied"].as_u64(), now) {
            (Some(allowed), Some(denied), Some(now)) => {
                counted.by_policy.insert(name.to_owned(), (allowed, denied));
                let before = last.by_policy.get(name).copied();
                let secs = now.saturating_sub(last.now_ms) as f64 / 1000.0;
                before.filter(|_| secs > 0.0).map(|(a, d)| {
                    let per_s = |now: u64, then: u64| now.saturating_sub(then) as f64 / secs;
                    (per_s(allowed, a), per_s(denied, d))
                })
            }
            _ => None,
        };
        limits.insert(name.to_owned(), (limit(p), rates));
    }
    *last = counted;
    let path = format!(
        "/v1/top?window={}&by=denied&limit={}",
        options.window, options.limit
    );
    let top = json(client, &path).await?;
    let mut rows = Vec::new();
    match top {
        Ok(top) => {
            for s in top["summaries"].as_array().into_iter().flatten() {
                let (name, known) = match (s["policy"].as_str(), s["domain"].as_str()) {
                    (Some(policy), _) => (policy.to_owned(), limits.remove(policy)),
                    (None, Some(domain)) => (format!("domain {domain}"), None),
                    (None, None) => continue,
                };
                let (limit, rates) = known.unwrap_or_default();
                let keys = s["keys"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .map(|k| {
                        let key = k["key"].as_str().unwrap_or_default().to_owned();
                        (
                            key,
                            k["count"].as_u64().unwrap_or(0),
                            k["error"].as_u64().unwrap_or(0),
                        )
                    })
                    .collect();
                rows.push(Row {
                    name,
                    limit,
                    rates,
                    keys,
                });
            }
        }
        Err(_) => notes
            .push("keys: this server does not summarize them ([top] enabled = false)".to_owned()),
    }
    // Policies without a summary (none are kept, or it came since): their line alone.
    let mut rest: Vec<_> = limits.into_iter().collect();
    rest.sort_by(|a, b| a.0.cmp(&b.0));
    for (name, (limit, rates)) in rest {
        rows.push(Row {
            name,
            limit,
            rates,
            keys: Vec::new(),
        });
    }
    Ok(Screen {
        url: options.url.clone(),
        window: options.window.clone(),
        rows,
        notes,
    })
}

/// A policy's limit as the table shows it: `capacity/period`, and the refill where it is not
/// the capacity (`100 +10/1s`).
fn limit(policy: &Value) -> String {
    let capacity = policy["capacity"].as_u64().unwrap_or(0);
    let period = period(policy["period_ms"].as_u64().unwrap_or(0));
    match policy["refill"].as_u64() {
        Some(refill) if refill != capacity => format!("{capacity} +{refill}/{period}"),
        _ => format!("{capacity}/{period}"),
    }
}

/// `ms` in the largest unit that divides it: `1h`, `90s`, `250ms`.
fn period(ms: u64) -> String {
    for (unit, name) in [
        (86_400_000, "d"),
        (3_600_000, "h"),
        (60_000, "m"),
        (1_000, "s"),
    ] {
        if ms >= unit && ms.is_multiple_of(unit) {
            return format!("{}{name}", ms / unit);
        }
    }
    format!("{ms}ms")
}
