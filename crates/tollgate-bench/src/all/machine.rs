//! What `tollgate-bench all` says about the machine it ran on: the figures mean nothing without it.

use std::time::Duration;

use crate::report::{Align, Table};

/// The machine, read once before the run; `load_after` once after.
pub(super) struct Machine {
    cores: usize,
    cpu: String,
    memory: String,
    kernel: String,
    load_before: String,
}

impl Machine {
    pub(super) fn read() -> Machine {
        Machine {
            cores: std::thread::available_parallelism().map_or(0, |n| n.get()),
            cpu: proc_field("/proc/cpuinfo", "model name").unwrap_or_else(unknown),
            memory: proc_field("/proc/meminfo", "MemTotal")
                .and_then(|kb| kb.trim_end_matches(" kB").trim().parse::<f64>().ok())
                .map_or_else(unknown, |kb| format!("{:.1} GiB", kb / 1024.0 / 1024.0)),
            kernel: std::fs::read_to_string("/proc/sys/kernel/osrelease")
                .map_or_else(|_| unknown(), |s| s.trim().to_owned()),
            load_before: load(),
        }
    }

    /// The machine as a two-column table, with what else the run found out: the stores'
    /// versions, and the load average after it.
    pub(super) fn table(&self, redis: &str, postgres: &str, took: Duration) -> Table {
        let rows = [
            ("CPU", format!("{} ({} cores)", self.cpu, self.cores)),
            ("memory", self.memory.clone()),
            ("kernel", self.kernel.clone()),
            ("Redis", redis.to_owned()),
            ("PostgreSQL", postgres.to_owned()),
            (
                "load average (1, 5, 15 min)",
                format!("{} before, {} after", self.load_before, load()),
            ),
            ("the run took", minutes(took)),
        ];
        Table::new(
            &[("", Align::Left), ("", Align::Left)],
            rows.into_iter()
                .map(|(name, value)| vec![name.to_owned(), value]),
        )
    }
}

fn unknown() -> String {
    "unknown".into()
}

/// The value of the first `name: value` line of a `/proc` file.
fn proc_field(path: &str, name: &str) -> Option<String> {
    let text = std::fs::read_to_string(path).ok()?;
    text.lines().find_map(|line| {
        let (key, value) = line.split_once(':')?;
        (key.trim() == name).then(|| value.trim().to_owned())
    })
}

/// The three load averages.
fn load() -> String {
    std::fs::read_to_string("/proc/loadavg").map_or_else(
        |_| unknown(),
        |s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "),
    )
}

/// `m:ss`.
pub(super) fn minutes(d: Duration) -> String {
    let s = d.as_secs();
    format!("{}:{:02}", s / 60, s % 60)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_what_linux_reports() {
        let machine = Machine::read();
        if cfg!(target_os = "linux") {
            assert!(machine.cores > 0);
            assert!(machine.memory.ends_with("GiB"), "{}", machine.memory);
            assert_eq!(machine.load_before.split(' ').count(), 3);
        }
        assert_eq!(minutes(Duration::from_secs(125)), "2:05");
    }
}
