//! The soak run as a [`Report`]: a row per period, and what the process held before and after.

use super::SoakReport;
use crate::report::Align::{Left, Right};
use crate::report::{Report, Section, Table};

impl SoakReport {
    /// The report as written to `soak.md`.
    pub fn report(&self) -> Report {
        let (b, a) = (self.before, self.after);
        let held = [
            ("RSS (KiB)", b.rss_kib, a.rss_kib),
            ("open file descriptors", b.fds as u64, a.fds as u64),
            ("live tasks", b.tasks as u64, a.tasks as u64),
        ]
        .map(|(what, before, after)| vec![what.into(), before.to_string(), after.to_string()]);
        let held = Table::new(&[("held", Left), ("before", Right), ("after", Right)], held);
        let periods = self.periods.iter().map(|p| {
            vec![
                p.index.to_string(),
                format!("`{}`", p.fault),
                p.calls.to_string(),
                p.ok.to_string(),
                p.over.to_string(),
                p.errors.to_string(),
                format!("{:.2}", p.p50_ms),
                format!("{:.2}", p.p99_ms),
                format!("{:.1}", p.max_ms),
                p.held.rss_kib.to_string(),
                p.held.fds.to_string(),
                p.held.tasks.to_string(),
            ]
        });
        let columns = [
            ("period", Right),
            ("fault", Left),
            ("calls", Right),
            ("OK", Right),
            ("over", Right),
            ("failed", Right),
            ("p50 ms", Right),
            ("p99 ms", Right),
            ("max ms", Right),
            ("RSS KiB", Right),
            ("fds", Right),
            ("tasks", Right),
        ];
        Report {
            name: "soak",
            title: "Soak: gRPC ShouldRateLimit on Redis, a fault every period".into(),
            intro: vec![format!(
                "{} calls/s for {} s, periods of {} s, a fault in the middle of each (in turn: \
                 `CLIENT KILL TYPE normal`, `CLIENT PAUSE 300 ALL`, `SCRIPT FLUSH`); the fail \
                 policy answers what the store cannot.",
                self.rate, self.seconds, self.period
            )],
            goals: Vec::new(),
            sections: vec![
                Section::table(
                    "What the process held, after the warm-up and after the run",
                    Vec::new(),
                    held,
                ),
                Section::table("Each period", Vec::new(), Table::new(&columns, periods)),
            ],
            notes: Vec::new(),
            charts: Vec::new(),
        }
    }
}
