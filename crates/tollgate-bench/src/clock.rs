//! The one module that reads the ambient clocks.
//!
//! The workspace's `.clippy.toml` forbids `Instant::now` and `SystemTime::now`, so that nothing on
//! tollgate's decision path reads time behind its injected `Clock`. A benchmark has to: it times
//! every call, and the published baselines take `now_ms` from the client's wall clock by design.
//! Everything in this crate that needs the time asks this module.
#![allow(clippy::disallowed_methods)]

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// A running timer.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Stopwatch(Instant);

impl Stopwatch {
    /// Starts timing now.
    pub(crate) fn start() -> Stopwatch {
        Stopwatch(Instant::now())
    }

    /// The time since [`Stopwatch::start`].
    pub(crate) fn elapsed(&self) -> Duration {
        self.0.elapsed()
    }
}

/// The wall clock in milliseconds since the UNIX epoch, as the baselines' clients send it.
pub(crate) fn unix_ms() -> u64 {
    let since = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or(Duration::ZERO);
    u64::try_from(since.as_millis()).unwrap_or(u64::MAX)
}

/// CPU time this process has used so far, user and system, all threads (from `/proc/self/stat`,
/// in ticks of 10 ms: `USER_HZ` is 100 on Linux). `None` where there is no such file.
pub(crate) fn process_cpu() -> Option<Duration> {
    cpu_of("self")
}

/// [`process_cpu`] of the process `pid` (`self`, or a number).
pub(crate) fn cpu_of(pid: &str) -> Option<Duration> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) is in parentheses and may hold spaces: count from after it.
    let rest = &stat[stat.rfind(')')? + 1..];
    let mut fields = rest.split_whitespace();
    // Fields 3 .. 13 come first; utime and stime are fields 14 and 15.
    let utime: u64 = fields.nth(11)?.parse().ok()?;
    let stime: u64 = fields.next()?.parse().ok()?;
    Some(Duration::from_millis((utime + stime) * 10))
}

/// CPU time every process of the machine has used so far (all cores; idle and I/O wait
/// excluded), from `/proc/stat`, in the same 10 ms ticks. Beside [`process_cpu`] it tells how
/// much of the machine other work took during a measurement. `None` where there is no such file.
pub(crate) fn machine_cpu() -> Option<Duration> {
    let stat = std::fs::read_to_string("/proc/stat").ok()?;
    let total = stat.lines().next()?.strip_prefix("cpu ")?;
    // user nice system idle iowait irq softirq steal (guest time is already in user).
    let fields: Vec<u64> = total
        .split_whitespace()
        .take(8)
        .map(str::parse)
        .collect::<Result<_, _>>()
        .ok()?;
    let busy = match fields[..] {
        [user, nice, system, _idle, _iowait, irq, softirq, steal] => {
            user + nice + system + irq + softirq + steal
        }
        _ => return None,
    };
    Some(Duration::from_millis(busy * 10))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn process_cpu_grows_with_work_where_linux_reports_it() {
        let Some(before) = process_cpu() else { return };
        // Work until the process has been given 50 ms of CPU, however long a busy machine takes
        // to give them (CI runs other tests beside this one: 100 ms of wall time once brought
        // 40 ms), up to a bound that only a process_cpu that never grows reaches.
        let mut x = 0u64;
        let watch = Stopwatch::start();
        let mut after = before;
        while after < before + Duration::from_millis(50)
            && watch.elapsed() < Duration::from_secs(20)
        {
            for _ in 0..100_000 {
                x = std::hint::black_box(x.wrapping_mul(31).wrapping_add(7));
            }
            after = process_cpu().unwrap();
        }
        assert!(
            after >= before + Duration::from_millis(50),
            "{before:?} {after:?}"
        );
        // The machine's busy time includes this process's.
        assert!(
            machine_cpu().is_some_and(|m| m >= after),
            "{:?}",
            machine_cpu()
        );
    }
}
