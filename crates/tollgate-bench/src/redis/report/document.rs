//! The Redis run as a [`Report`]: the goals, a table and a chart of decisions/s per scenario,
//! the over-grant test, and how to read them.

use super::{Approach, Scenario};
use super::{Cell, RedisReport};
use crate::report::Align::{Left, Right};
use crate::report::{Chart, Group, Report, Section, Table, micros, percent, small, thousands};

impl RedisReport {
    /// The report as written to `redis.md` and `redis.svg`.
    pub fn report(&self) -> Report {
        let scenarios: Vec<Scenario> = Scenario::ALL
            .into_iter()
            .filter(|s| self.cells.iter().any(|c| c.scenario == *s))
            .collect();
        let mut sections: Vec<Section> = scenarios.iter().map(|&s| self.scenario(s)).collect();
        sections.extend(self.over_grant_section());
        sections.extend(self.cluster_section());
        Report {
            name: "redis",
            title: "Redis: tollgate beside three published token-bucket approaches and a script's floor"
                .into(),
            intro: vec![format!(
                "Run `{}` against Redis {}, {} s per cell, concurrency {}. Every approach ran in \
                 the same process against the same Redis, one cell at a time: only the ratios \
                 mean anything.",
                self.run_id,
                self.redis_version,
                self.seconds_per_cell,
                self.concurrency
                    .iter()
                    .map(usize::to_string)
                    .collect::<Vec<_>>()
                    .join(", ")
            )],
            goals: self.goals(),
            sections,
            notes: notes(),
            charts: scenarios.iter().map(|&s| self.chart(s)).collect(),
        }
    }

    fn scenario(&self, scenario: Scenario) -> Section {
        // Each concurrency's cells in the order run, each beside the Lua baseline's
        // decisions/s and MULTI's Redis time.
        let rows = self.concurrency.iter().flat_map(|&c| {
            let lua = self.cell(scenario, Approach::Lua, c);
            let multi = self.cell(scenario, Approach::Multi, c);
            self.cells
                .iter()
                .filter(move |x| x.scenario == scenario && x.concurrency == c)
                .map(move |cell| row(cell, lua, multi))
        });
        let columns = [
            ("c", Right),
            ("approach", Left),
            ("decisions/s", Right),
            ("× lua", Right),
            ("p50 µs", Right),
            ("p99 µs", Right),
            ("calls/decision", Right),
            ("commands/decision", Right),
            ("allowed", Right),
            ("errors", Right),
            ("Redis µs/decision", Right),
            ("Redis × multi", Right),
        ];
        let heading = format!("{scenario}: {}", scenario.describe());
        Section::table(heading, Vec::new(), Table::new(&columns, rows))
    }

    /// Each cluster cell per master, beside the same cell on the single node.
    fn cluster_section(&self) -> Option<Section> {
        let first = self.cluster.first()?;
        let mut rows = Vec::new();
        for cell in &self.cluster {
            let mode = if cell.per_node {
                "per node"
            } else {
                "per slot"
            };
            for node in &cell.nodes {
                rows.push(vec![
                    format!("{} c={} {mode}", cell.scenario, cell.concurrency),
                    node.node.clone(),
                    thousands(node.client_calls as f64),
                    thousands(node.redis_usec as f64),
                ]);
            }
            let single = self.cell(cell.scenario, Approach::Tollgate, cell.concurrency);
            rows.push(vec![
                format!(
                    "**{} c={} {mode}, all masters**",
                    cell.scenario, cell.concurrency
                ),
                format!(
                    "{} decisions/s; {} calls and {:.2} Redis µs per decision (one node: {} \
                     and {})",
                    thousands(cell.decisions_per_sec()),
                    small(cell.calls_per_decision()),
                    cell.redis_micros_per_decision(),
                    single.map_or("–".into(), |s| small(s.calls_per_decision())),
                    single.map_or("–".into(), |s| format!(
                        "{:.2}",
                        s.redis_micros_per_decision()
                    )),
                ),
                thousands(cell.nodes.iter().map(|n| n.client_calls).sum::<u64>() as f64),
                thousands(cell.nodes.iter().map(|n| n.redis_usec).sum::<u64>() as f64),
            ]);
        }
        let columns = [
            ("cell", Left),
            ("master", Left),
            ("script calls", Right),
            ("Redis µs", Right),
        ];
        Some(Section::table(
            format!("Redis Cluster: tollgate on {} masters", first.nodes.len()),
            vec![
                "Per node (Redis 7): one call decides the queued decisions of every slot of a \
                 node (the script declares one key and `allow-cross-slot-keys`). Per slot (Redis \
                 before 7.0, or `per_node(false)`): a call stays in one hash slot, so the store \
                 batches only one user key's decisions together, and per user every decision is \
                 a call of its own. The baselines' clients are not cluster-aware; tollgate ran \
                 alone."
                    .into(),
            ],
            Table::new(&columns, rows),
        ))
    }

    fn over_grant_section(&self) -> Option<Section> {
        let first = self.over_grant.first()?;
        let rows = self.over_grant.iter().map(|o| {
            vec![
                o.approach.to_string(),
                thousands(o.decisions as f64),
                o.allowed.to_string(),
                thousands(o.errors as f64),
                percent(o.over_grant()),
            ]
        });
        let columns = [
            ("approach", Left),
            ("decisions", Right),
            ("allowed", Right),
            ("errors", Right),
            ("over_grant", Right),
        ];
        let heading = format!(
            "Over-grant: burst {}, {}/s, cost 1, {} workers on one key, {} s (at most {} may be \
             allowed)",
            first.burst,
            first.rate,
            first.workers,
            first.seconds,
            first.max_allowed()
        );
        Some(Section::table(
            heading,
            Vec::new(),
            Table::new(&columns, rows),
        ))
    }

    /// Decisions/s under `scenario`: a group per concurrency, a bar per approach.
    fn chart(&self, scenario: Scenario) -> Chart {
        let approaches: Vec<Approach> = Approach::ALL
            .into_iter()
            .filter(|a| self.cells.iter().any(|c| c.approach == *a))
            .collect();
        Chart {
            title: format!("{scenario}: {}", scenario.describe()),
            y_label: "decisions/s (higher is better)".into(),
            series: approaches.iter().map(ToString::to_string).collect(),
            groups: self
                .concurrency
                .iter()
                .map(|&c| Group {
                    label: format!("c={c}"),
                    values: approaches
                        .iter()
                        .map(|&a| self.cell(scenario, a, c).map(Cell::decisions_per_sec))
                        .collect(),
                })
                .collect(),
        }
    }
}

fn row(cell: &Cell, lua: Option<&Cell>, multi: Option<&Cell>) -> Vec<String> {
    let vs_lua = match lua {
        Some(l) if l.decisions_per_sec() > 0.0 => {
            format!("{:.2}", cell.decisions_per_sec() / l.decisions_per_sec())
        }
        _ => "–".into(),
    };
    vec![
        cell.concurrency.to_string(),
        cell.approach.to_string(),
        thousands(cell.decisions_per_sec()),
        vs_lua,
        micros(cell.p50),
        micros(cell.p99),
        small(cell.calls_per_decision()),
        small(cell.commands_per_decision()),
        thousands(cell.allowed as f64),
        thousands(cell.errors as f64),
        format!("{:.2}", cell.redis_micros_per_decision()),
        match multi.map(Cell::redis_micros_per_decision) {
            Some(m) if m > 0.0 => format!("{:.2}", cell.redis_micros_per_decision() / m),
            _ => "–".into(),
        },
    ]
}

fn notes() -> Vec<String> {
    let approaches = Approach::ALL.map(|a| format!("**{a}**: {}.", a.describe()));
    let reading = [
        "**calls/decision**: commands the clients sent (round trips), from `INFO commandstats` \
         before and after the cell, per check asked (errors included). Redis also counts the \
         commands a script runs; **commands/decision** includes those (the Lua baseline's \
         HMGET/HMSET/PEXPIRE, tollgate's TIME/MGET/SET), the `INFO` calls excluded from both.",
        "**Redis µs/decision**: the time Redis spent executing the commands the clients sent \
         (`usec` of `INFO commandstats`, a script's time holding the commands it ran), per check \
         asked: Redis's CPU for the decisions themselves, without reading requests and writing \
         replies. **Redis × multi** divides it by MULTI's in the same scenario and concurrency \
         (three native commands a decision, no script).",
        "**floor** is not a limiter: it answers every check allowed and is left out of the \
         over-grant test. It is every command a batched script needs (TIME, one MGET, a SET ... \
         PX a decision) and nothing else, batched as tollgate's store batches, so its Redis × \
         multi is the part of tollgate's that any such script pays (entering the script, its \
         commands, one bucket's write a decision) and the difference tollgate's script's own \
         body. Compare them at like calls/decision: the batches form from the load, and a larger \
         batch spreads a call's fixed cost over more decisions.",
        "Latency is per check as the caller sees it (a tollgate check answered by the deny cache \
         never reaches Redis); percentiles by nearest rank, at most 1.6% high.",
        "The baselines take `now_ms` from the client's clock; tollgate uses Redis's `TIME`.",
    ];
    approaches
        .into_iter()
        .chain(reading.map(String::from))
        .collect()
}
