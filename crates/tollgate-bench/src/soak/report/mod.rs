//! What a soak run measured: each period's calls and latency, and what the process held before,
//! at each period's end, and after.

mod document;

/// What the process holds: resident memory, open file descriptors, live tokio tasks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Held {
    /// Resident memory, KiB (Linux `/proc/self/status`).
    pub rss_kib: u64,
    /// Open file descriptors (`/proc/self/fd`).
    pub fds: usize,
    /// Tasks alive on the runtime.
    pub tasks: usize,
}

impl Held {
    /// What this process holds now.
    pub fn now() -> Held {
        let rss_kib = std::fs::read_to_string("/proc/self/status")
            .ok()
            .and_then(|s| {
                s.lines()
                    .find_map(|l| l.strip_prefix("VmRSS:"))
                    .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            })
            .unwrap_or(0);
        let fds = std::fs::read_dir("/proc/self/fd").map_or(0, |d| d.count());
        let tasks =
            tokio::runtime::Handle::try_current().map_or(0, |h| h.metrics().num_alive_tasks());
        Held {
            rss_kib,
            fds,
            tasks,
        }
    }
}

/// One period of the run.
#[derive(Debug, Clone, PartialEq)]
pub struct Period {
    /// 1-based.
    pub index: usize,
    /// The fault injected in its middle.
    pub fault: String,
    /// Calls made.
    pub calls: u64,
    /// Answered OK.
    pub ok: u64,
    /// Answered OVER_LIMIT.
    pub over: u64,
    /// Failed (the fail policy `deny`'s `UNAVAILABLE`, or no answer).
    pub errors: u64,
    /// Median latency, ms.
    pub p50_ms: f64,
    /// 99th percentile, ms.
    pub p99_ms: f64,
    /// Longest, ms.
    pub max_ms: f64,
    /// What the process held at its end.
    pub held: Held,
}

impl Period {
    /// The row on one line, for stderr.
    pub fn line(&self) -> String {
        format!(
            "period {}: {} calls, {} OK, {} over, {} failed; p50 {:.2} ms, p99 {:.2} ms, max {:.1} ms; \
             RSS {} KiB, {} fds, {} tasks; fault: {}",
            self.index,
            self.calls,
            self.ok,
            self.over,
            self.errors,
            self.p50_ms,
            self.p99_ms,
            self.max_ms,
            self.held.rss_kib,
            self.held.fds,
            self.held.tasks,
            self.fault
        )
    }
}

/// The whole run.
#[derive(Debug, Clone, PartialEq)]
pub struct SoakReport {
    /// Seconds the run lasted.
    pub seconds: u64,
    /// Seconds per period.
    pub period: u64,
    /// Calls per second.
    pub rate: u64,
    /// What the process held after the warm-up.
    pub before: Held,
    /// What it held after the run wound down.
    pub after: Held,
    /// Every period.
    pub periods: Vec<Period>,
}
