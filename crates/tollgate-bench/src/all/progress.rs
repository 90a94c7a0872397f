//! The run's progress on stderr.

use std::io::{IsTerminal, Write as _};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use tokio::time::Instant;

use super::machine::minutes;
use super::steps::Step;

/// A progress line on stderr: on a terminal, a bar redrawn every second; otherwise one line
/// per benchmark as it starts.
pub(super) struct Progress {
    at: Arc<AtomicUsize>,
    names: Vec<String>,
    terminal: bool,
    ticker: Option<tokio::task::JoinHandle<()>>,
}

impl Progress {
    pub(super) fn start(steps: &[Step]) -> Progress {
        let at = Arc::new(AtomicUsize::new(0));
        let names: Vec<String> = steps.iter().map(|s| s.args[0].clone()).collect();
        let terminal = std::io::stderr().is_terminal();
        let ticker = terminal.then(|| {
            let estimates: Vec<Duration> = steps.iter().map(|s| s.estimate).collect();
            let (at, names) = (Arc::clone(&at), names.clone());
            tokio::spawn(async move {
                let started = Instant::now();
                let mut step_started = (0, Instant::now());
                let mut tick = tokio::time::interval(Duration::from_secs(1));
                loop {
                    tick.tick().await;
                    let i = at.load(Ordering::Relaxed);
                    if i != step_started.0 {
                        step_started = (i, Instant::now());
                    }
                    let line = bar(&estimates, i, step_started.1.elapsed(), started.elapsed());
                    let name = names.get(i).map_or("", String::as_str);
                    eprint!("\r\x1b[K{line} {name}");
                    let _ = std::io::stderr().flush();
                }
            })
        });
        Progress {
            at,
            names,
            terminal,
            ticker,
        }
    }

    pub(super) fn at(&self, i: usize) {
        self.at.store(i, Ordering::Relaxed);
        if !self.terminal {
            eprintln!(
                "tollgate-bench all: [{}/{}] {}",
                i + 1,
                self.names.len(),
                self.names[i]
            );
        }
    }

    pub(super) fn say(&self, what: &str) {
        eprintln!(
            "{}tollgate-bench all: {what}",
            if self.terminal { "\r\x1b[K" } else { "" }
        );
    }

    pub(super) fn finish(self) {
        if let Some(ticker) = self.ticker {
            ticker.abort();
            eprintln!();
        }
    }
}

/// `[#####-----] 3/7 1:20 of ~4:00`: the share of the estimated time done, counting the
/// current step at most as its estimate.
fn bar(estimates: &[Duration], at: usize, in_step: Duration, elapsed: Duration) -> String {
    let total: Duration = estimates.iter().sum();
    let done: Duration = estimates[..at.min(estimates.len())]
        .iter()
        .sum::<Duration>()
        + in_step.min(estimates.get(at).copied().unwrap_or_default());
    let width = 30;
    let filled = if total.is_zero() {
        0
    } else {
        (width as f64 * done.as_secs_f64() / total.as_secs_f64()).round() as usize
    };
    format!(
        "[{}{}] {}/{} {} of ~{}",
        "#".repeat(filled.min(width)),
        "-".repeat(width - filled.min(width)),
        (at + 1).min(estimates.len()),
        estimates.len(),
        minutes(elapsed),
        minutes(total.max(elapsed))
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_bar_fills_with_the_estimates_done() {
        let estimates = [Duration::from_secs(10), Duration::from_secs(30)];
        let start = bar(&estimates, 0, Duration::ZERO, Duration::ZERO);
        assert!(
            start.starts_with(&format!("[{}]", "-".repeat(30))),
            "{start}"
        );
        // The first step over its estimate counts as done, no more.
        let late = bar(
            &estimates,
            0,
            Duration::from_secs(60),
            Duration::from_secs(60),
        );
        assert!(
            late.starts_with(&format!("[{}{}]", "#".repeat(8), "-".repeat(22))),
            "{late}"
        );
        assert!(late.ends_with("1/2 1:00 of ~1:00"), "{late}");
    }
}
