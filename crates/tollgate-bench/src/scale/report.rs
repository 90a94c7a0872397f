//! The scale report: every cell side by side, and the goals of leases and per-node batching
//! judged on them.

use super::{Backend, ScaleCell, Scenario};
use crate::report::{Align, Chart, Goal, Group, Report, Section, Table, small, thousands};

/// What a scale run measured.
#[derive(Debug, Clone)]
pub struct ScaleReport {
    /// Every cell, in the order run.
    pub cells: Vec<ScaleCell>,
    /// Server processes per cell.
    pub processes: usize,
    /// Workers per process.
    pub workers: usize,
    /// Seconds per cell.
    pub seconds: f64,
}

impl ScaleReport {
    fn find(&self, backend: Backend, scenario: Scenario, lease: bool) -> Option<&ScaleCell> {
        self.cells
            .iter()
            .find(|c| c.backend == backend && c.scenario == scenario && c.lease == lease)
    }

    fn find_batching(&self, scenario: Scenario, per_node: bool) -> Option<&ScaleCell> {
        self.cells.iter().find(|c| {
            c.backend == Backend::Cluster
                && c.scenario == scenario
                && !c.lease
                && c.per_node == per_node
        })
    }

    /// The goals of issue 30, judged on this run.
    pub fn goals(&self) -> Vec<Goal> {
        let mut goals = Vec::new();
        let hot = self.find(Backend::Redis, Scenario::Hot, true);
        let hot_plain = self.find(Backend::Redis, Scenario::Hot, false);
        goals.push(match hot {
            Some(c) => at_most(
                "Hot key, one Redis, leases: at most 0.001 store calls per decision",
                c.calls_per_decision(),
                0.001,
            ),
            None => Goal::unmeasured("Hot key, leases: calls per decision", "not run"),
        });
        let cpu = |c: Option<&ScaleCell>| c.and_then(ScaleCell::cpu_micros_per_decision);
        goals.push(match (cpu(hot_plain), cpu(hot)) {
            (Some(plain), Some(leased)) => {
                let ratio = plain / leased.max(f64::MIN_POSITIVE);
                Goal {
                    goal: "Hot key, one Redis: Redis CPU per decision at least 20× lower with \
                           leases"
                        .into(),
                    measured: format!(
                        "{:.1}× ({} µs without, {} µs with)",
                        ratio,
                        small(plain),
                        small(leased)
                    ),
                    met: Some(ratio >= 20.0),
                }
            }
            _ => Goal::unmeasured("Hot key: Redis CPU with and without leases", "not run"),
        });
        for backend in [Backend::Redis, Backend::Postgres] {
            if let Some(c) = self.find(backend, Scenario::Limit, true) {
                let bound = c.bound().unwrap_or(0);
                goals.push(Goal::over_grant(
                    format!(
                        "Hot key at the limit on {}, leases on (burst 10, 10/s, {} s, {} workers \
                         per server): never above the bound",
                        backend.name(),
                        c.seconds,
                        self.workers
                    ),
                    bound,
                    c.allowed(),
                    c.errors(),
                ));
            }
        }
        if let Some(c) = self.find(Backend::Redis, Scenario::LimitLarge, true) {
            let bound = c.bound().unwrap_or(1);
            let share = c.allowed() as f64 / bound as f64;
            goals.push(Goal {
                goal: "At the limit with demand above it, leases on: allowed at least 97% of the \
                       bound, never above it"
                    .into(),
                measured: format!("{} of {} ({:.1}%)", c.allowed(), bound, share * 100.0),
                met: Some(share >= 0.97 && c.allowed() <= bound),
            });
            goals.push(Goal {
                goal: "At the limit, leases on: no server gets less than half its fair share"
                    .into(),
                measured: format!(
                    "the least got {:.0}% of its fair share",
                    c.min_fair_share() * 100.0
                ),
                met: Some(c.min_fair_share() >= 0.5),
            });
        }
        match self.find_batching(Scenario::PerUser, true) {
            Some(c) => {
                goals.push(at_most(
                    "Redis Cluster, per_user, batched per node: Redis time per decision at most \
                     3 µs",
                    c.store_micros_per_decision(),
                    3.0,
                ));
                goals.push(at_most(
                    "Redis Cluster, per_user, batched per node: at most 0.1 calls per decision",
                    c.calls_per_decision(),
                    0.1,
                ));
            }
            None => goals.push(Goal::unmeasured("Redis Cluster per node", "not run")),
        }
        goals.push(match self.find(Backend::Postgres, Scenario::Hot, true) {
            Some(c) => at_most(
                "PostgreSQL hot row, leases: at most 0.01 statements per decision",
                c.calls_per_decision(),
                0.01,
            ),
            None => Goal::unmeasured("PostgreSQL hot row with leases", "not run"),
        });
        goals
    }

    /// The report.
    pub fn report(&self) -> Report {
        let rows = self.cells.iter().map(|c| {
            let bound = c.bound();
            vec![
                c.backend.name().to_owned(),
                c.scenario.name().to_owned(),
                mode(c),
                thousands(c.decisions_per_sec()),
                small(c.calls_per_decision()),
                if c.backend == Backend::Postgres {
                    "–".to_owned()
                } else {
                    small(c.store_micros_per_decision())
                },
                c.cpu_micros_per_decision()
                    .map_or_else(|| "–".to_owned(), small),
                bound.map_or_else(
                    || thousands(c.allowed() as f64),
                    |b| format!("{} / {}", c.allowed(), b),
                ),
                format!("{:.0}%", c.min_fair_share() * 100.0),
                c.errors().to_string(),
            ]
        });
        let table = Table::new(
            &[
                ("store", Align::Left),
                ("scenario", Align::Left),
                ("mode", Align::Left),
                ("decisions/s", Align::Right),
                ("store calls / decision", Align::Right),
                ("store µs / decision", Align::Right),
                ("store CPU µs / decision", Align::Right),
                ("allowed (/ bound)", Align::Right),
                ("least share", Align::Right),
                ("errors", Align::Right),
            ],
            rows,
        );
        let chart = Chart {
            title: "Store calls per decision".into(),
            y_label: "calls per decision".into(),
            series: vec!["per decision".into(), "leased / per node".into()],
            groups: self.pairs(),
        };
        Report {
            name: "scale",
            title: "Several servers on one store: leases and per-node batching".into(),
            intro: vec![format!(
                "{} server processes per cell, each building the store stack `tollgate serve` \
                 builds and driving it with {} workers for {} s, from one start instant; no \
                 network front end, so what is measured is the store's share. The store counts \
                 its own work: script calls, their execution time (`INFO commandstats`) and CPU \
                 (`INFO cpu`) on every Redis master; the PostgreSQL store its statements.",
                self.processes, self.workers, self.seconds
            )],
            goals: self.goals(),
            sections: vec![Section::table("Every cell", Vec::new(), table)],
            notes: vec![
                "hot: one key of 100,000,000 tokens refilled at 1,000,000/s, far above the demand; limit: burst 10, \
                 10/s (the seed's exactness test); limit_large: burst 1,000, 1,000/s, large \
                 enough to lease; per_user: 100,000 users, each far below its limit."
                    .into(),
                "allowed / bound: the bound is a full bucket plus the refill over the cell; \
                 least share: the process that allowed least, over an even split."
                    .into(),
                "Leases never over-grant: their tokens are paid in the store before they are \
                 handed out. What they hold at the end of a cell goes back when the processes \
                 close their stores."
                    .into(),
            ],
            charts: vec![chart],
        }
    }

    /// Calls per decision of each scenario, without and with leases (per slot and per node on
    /// the cluster).
    fn pairs(&self) -> Vec<Group> {
        let mut groups: Vec<Group> = Vec::new();
        for c in &self.cells {
            let label = format!("{} {}", c.backend.name(), c.scenario.name());
            let leased = c.lease || (c.scenario == Scenario::PerUser && c.per_node);
            let index = usize::from(leased);
            match groups.iter_mut().find(|g| g.label == label) {
                Some(group) => group.values[index] = Some(c.calls_per_decision()),
                None => {
                    let mut values = vec![None, None];
                    values[index] = Some(c.calls_per_decision());
                    groups.push(Group { label, values });
                }
            }
        }
        groups
    }
}

fn mode(c: &ScaleCell) -> String {
    let lease = if c.lease { "leased" } else { "per decision" };
    if c.backend == Backend::Cluster {
        let batching = if c.per_node { "per node" } else { "per slot" };
        format!("{lease}, {batching}")
    } else {
        lease.to_owned()
    }
}

fn at_most(goal: &str, measured: f64, most: f64) -> Goal {
    Goal {
        goal: goal.into(),
        measured: small(measured),
        met: Some(measured <= most),
    }
}
