//! The PostgreSQL run as a [`Report`]: the goals and what stands beside them, a table per
//! scenario, the over-grant test, the function's two flaws with tollgate beside, and a chart
//! of decisions/s per scenario and isolation.

use super::{Cell, PostgresReport, reading};
use crate::postgres::IsolationNames;
use crate::postgres::{Approach, Scenario, function, race};
use crate::report::Align::{Left, Right};
use crate::report::{Chart, Group, Report, Section, Table, micros, percent, small, thousands};

impl PostgresReport {
    /// The report as written to `postgres.md` and `postgres.svg`.
    pub fn report(&self) -> Report {
        let goals = self.goals();
        let mut sections = Vec::new();
        let beside = reading::beside_the_goals(self, &goals);
        if !beside.is_empty() {
            sections.push(Section::text("Beside the goals", beside));
        }
        sections.extend(
            Scenario::ALL
                .into_iter()
                .filter(|&s| self.cells.iter().any(|c| c.scenario == s))
                .map(|s| self.scenario(s)),
        );
        sections.extend(self.over_grant_section());
        sections.extend(self.race_section());
        sections.extend(self.rounding_section());
        Report {
            name: "postgres",
            title: "PostgreSQL: tollgate beside a PL/pgSQL function per call".into(),
            intro: vec![format!(
                "Run `{}` against PostgreSQL {} ({}), {} s per cell, {} connections, at {}; the \
                 machine: {} at the start, {} at the end. Both approaches ran in the same \
                 process against the same server, one cell at a time, in tables of their own in \
                 a schema made for the run: only the ratios mean anything.",
                self.run_id,
                self.server_version,
                self.durability,
                self.seconds_per_cell,
                list(&self.connections),
                list(&self.isolations.iter().map(|i| i.sql()).collect::<Vec<_>>()),
                self.host_at_start,
                self.host_at_end.rsplit(", ").next().unwrap_or_default(),
            )],
            goals,
            sections,
            notes: notes(),
            charts: self.charts(),
        }
    }

    fn scenario(&self, scenario: Scenario) -> Section {
        // Per isolation and connection count, the cells in the order run, each beside the
        // function's.
        let rows = self.isolations.iter().flat_map(|&isolation| {
            self.connections.iter().flat_map(move |&c| {
                let function = self.cell(scenario, isolation, Approach::Function, c);
                self.cells
                    .iter()
                    .filter(move |x| {
                        x.scenario == scenario && x.isolation == isolation && x.connections == c
                    })
                    .map(move |cell| row(cell, function))
            })
        });
        let columns = [
            ("isolation", Left),
            ("connections", Right),
            ("approach", Left),
            ("decisions/s", Right),
            ("× function", Right),
            ("p50 µs", Right),
            ("p99 µs", Right),
            ("errors", Right),
            ("retried attempts", Right),
            ("statements/call", Right),
            ("client CPU µs/call", Right),
        ];
        let heading = format!("{scenario}: {}", scenario.describe(self.keys));
        Section::table(heading, Vec::new(), Table::new(&columns, rows))
    }

    fn over_grant_section(&self) -> Option<Section> {
        let first = self.over_grant.first()?;
        let rows = self.over_grant.iter().map(|o| {
            vec![
                o.isolation.sql().to_owned(),
                o.approach.to_string(),
                o.connections.to_string(),
                thousands(o.decisions as f64),
                o.allowed.to_string(),
                errors(o.errors, 0, 0, o.timeouts, o.gave_up),
                thousands(o.retried as f64),
                percent(o.over_grant()),
            ]
        });
        let columns = [
            ("isolation", Left),
            ("approach", Left),
            ("connections", Right),
            ("decisions", Right),
            ("allowed", Right),
            ("errors", Right),
            ("retried attempts", Right),
            ("over_grant", Right),
        ];
        let text = vec![
            format!(
                "over_grant = allowed / {} - 1; the function's errors here are its first calls' \
                 duplicate keys and, under SERIALIZABLE, calls that still failed to serialize \
                 after {} attempts. How the function goes wrong depends on the isolation:",
                first.max_allowed(),
                function::MAX_ATTEMPTS
            ),
            "- At READ COMMITTED callers queue on the row lock, and the function sets \
             `ts = now()`, the time its *transaction started* — before it waited for the lock — \
             while it measures the refill as `clock_timestamp() - ts`. So each caller is \
             refilled for the time since the previous caller started waiting, not since the \
             previous call: with n callers in the queue every stretch of time is counted about \
             n times over, and once a wait is longer than half a token's interval, \
             `tk - 1 + refill` rounds back up to `tk` and the bucket stops draining. (Setting \
             `ts = clock_timestamp()` instead removes this, and leaves flaw (b).)\n\
             - At SERIALIZABLE concurrent updates of the row fail with 40001 instead, and every \
             refused call writes tk = -1 and moves ts to now, so the refill between two calls \
             (a fraction of a token) rounds to nothing (flaw (b)): it under-grants."
                .into(),
        ];
        let heading = format!(
            "Over-grant: burst {}, {}/s, cost 1, {} workers on one key, {} s (at most {} may be \
             allowed)",
            first.capacity,
            first.rate,
            first.workers,
            first.seconds,
            first.max_allowed()
        );
        Some(Section::table(heading, text, Table::new(&columns, rows)))
    }

    fn race_section(&self) -> Option<Section> {
        if self.race.is_empty() {
            return None;
        }
        let rows = self.race.iter().map(|r| {
            vec![
                r.isolation.sql().to_owned(),
                r.approach.to_string(),
                thousands(r.calls as f64),
                thousands(r.allowed as f64),
                errors(
                    r.errors,
                    r.duplicate_key,
                    r.serialization,
                    r.timeouts,
                    r.gave_up,
                ),
                thousands(r.duplicate_key as f64),
                thousands(r.retried as f64),
            ]
        });
        let columns = [
            ("isolation", Left),
            ("approach", Left),
            ("calls", Right),
            ("allowed", Right),
            ("errors", Right),
            ("duplicate key (23505)", Right),
            ("retried attempts", Right),
        ];
        Some(Section::table(
            format!(
                "Flaw (a) of the function, tollgate beside: concurrent first calls, {} workers × \
                 {} fresh keys",
                race::WORKERS,
                race::KEYS
            ),
            vec![
                "Every worker calls every key once, all in the same order, starting together, \
                 under the function's default limit (2/s, 60 s window: 120 tokens, so every call \
                 should be allowed). The function's UPDATE finds no row in each racer, each \
                 INSERTs, and all but one fail on the primary key (23505); under SERIALIZABLE \
                 PostgreSQL reports that collision as a serialization failure (40001), which the \
                 function's client retries."
                    .into(),
            ],
            Table::new(&columns, rows),
        ))
    }

    fn rounding_section(&self) -> Option<Section> {
        let first = self.rounding.first()?;
        let rows = self.rounding.iter().map(|r| {
            vec![
                r.approach.to_string(),
                format!("{} of {}", r.burst_allowed, r.burst_calls),
                r.calls.to_string(),
                r.allowed.to_string(),
                r.expected.to_string(),
                r.errors.to_string(),
            ]
        });
        let columns = [
            ("approach", Left),
            ("burst allowed", Right),
            ("calls after the burst", Right),
            ("allowed", Right),
            ("exact token bucket", Right),
            ("errors", Right),
        ];
        let interval = first.interval.as_secs_f64();
        let refill = first.rate as f64 * interval;
        Some(Section::table(
            "Flaw (b) of the function, tollgate beside: refill rounded to whole tokens",
            vec![
                format!(
                    "A bucket of {}, {} tokens/s; the burst spent by {} calls back to back, then \
                     a call every {} ms for {} calls. Each call of the function adds {} × \
                     {interval:.1} s = {refill:.1} of a token, rounds `tk - 1 + {refill:.1}` to \
                     a whole token and moves `ts` to now: the fraction is lost on every call. \
                     The exact expectation is an exact token bucket at the times the calls were \
                     sent.",
                    first.capacity,
                    first.rate,
                    first.burst_calls,
                    first.interval.as_millis(),
                    first.calls,
                    first.rate,
                ),
                "Called less often, the same rounding goes the other way (arithmetic, not \
                 measured here): at a call every 300 ms each adds 0.6, `tk - 1 + 0.6` rounds back \
                 to `tk`, and a bucket that is not empty never drains: every call is allowed."
                    .into(),
            ],
            Table::new(&columns, rows),
        ))
    }

    /// Decisions/s, a panel per scenario and isolation (a hot key under SERIALIZABLE and many
    /// keys at READ COMMITTED differ by orders of magnitude), a group per connection count.
    fn charts(&self) -> Vec<Chart> {
        let approaches: Vec<Approach> = Approach::ALL
            .into_iter()
            .filter(|a| self.cells.iter().any(|c| c.approach == *a))
            .collect();
        let panels = Scenario::ALL
            .into_iter()
            .flat_map(|s| self.isolations.iter().map(move |&i| (s, i)))
            .filter(|&(s, i)| {
                self.cells
                    .iter()
                    .any(|c| c.scenario == s && c.isolation == i)
            });
        panels
            .map(|(scenario, isolation)| Chart {
                title: format!("{scenario}, {}", isolation.sql()),
                y_label: "decisions/s (higher is better)".into(),
                series: approaches.iter().map(ToString::to_string).collect(),
                groups: self
                    .connections
                    .iter()
                    .map(|&c| Group {
                        label: format!("{c} connection{}", if c == 1 { "" } else { "s" }),
                        values: approaches
                            .iter()
                            .map(|&a| {
                                self.cell(scenario, isolation, a, c)
                                    .map(Cell::decisions_per_sec)
                            })
                            .collect(),
                    })
                    .collect(),
            })
            .collect()
    }
}

fn list<T: ToString>(items: &[T]) -> String {
    items
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(", ")
}

fn row(cell: &Cell, function: Option<&Cell>) -> Vec<String> {
    let vs = match function {
        Some(f) if f.decisions_per_sec() > 0.0 => {
            format!("{:.2}", cell.decisions_per_sec() / f.decisions_per_sec())
        }
        _ => "–".into(),
    };
    vec![
        cell.isolation.sql().to_owned(),
        cell.connections.to_string(),
        cell.approach.to_string(),
        thousands(cell.decisions_per_sec()),
        vs,
        micros(cell.p50),
        micros(cell.p99),
        errors(
            cell.errors,
            cell.duplicate_key,
            cell.serialization,
            cell.timeouts,
            cell.gave_up,
        ),
        thousands(cell.retried as f64),
        small(cell.statements_per_call()),
        cell.client_cpu_per_call()
            .map_or_else(|| "–".into(), |us| format!("{us:.1}")),
    ]
}

/// `0`, or the count with what is known of its causes: `12 (10 × 40001, 2 × 23505)`, and
/// how many of tollgate's statements gave up on 40001 (each fails all the checks it decided).
fn errors(
    errors: u64,
    duplicate_key: u64,
    serialization: u64,
    timeouts: u64,
    gave_up: u64,
) -> String {
    let mut causes = Vec::new();
    if serialization > 0 {
        causes.push(format!("{} × 40001", thousands(serialization as f64)));
    }
    if duplicate_key > 0 {
        causes.push(format!("{} × 23505", thousands(duplicate_key as f64)));
    }
    if timeouts > 0 {
        let s = if timeouts == 1 { "" } else { "s" };
        causes.push(format!("{} timeout{s}", thousands(timeouts as f64)));
    }
    let other = errors.saturating_sub(serialization + duplicate_key + timeouts);
    if other > 0 && !causes.is_empty() {
        causes.push(format!("{} other", thousands(other as f64)));
    }
    let mut text = if causes.is_empty() {
        thousands(errors as f64)
    } else {
        format!("{} ({})", thousands(errors as f64), causes.join(", "))
    };
    if gave_up > 0 {
        text.push_str(&format!(
            "; {} statements gave up on 40001",
            thousands(gave_up as f64)
        ));
    }
    text
}

fn notes() -> Vec<String> {
    let [limits, latency, statements, cpu, connections] = [
        "Limits are the function's parameters, given to tollgate as the same bucket: capacity = \
         window_seconds × refill_per_sec, refill_per_sec per second. Throughput cells use \
         1,000,000/s with a 1,000 s window (a bucket of a billion tokens), so every call is \
         allowed and both approaches write on every call.",
        "Latency is per call as the caller sees it, retries and failures included; percentiles \
         by nearest rank, at most 1.6% high.",
        "**statements/call** counts what was sent to PostgreSQL per call: the function's calls, \
         retries included; tollgate's statements (a single upsert, or one call of its decide \
         function for a batch of waiting checks) from its store's own count. Below 1, calls \
         shared statements (and transactions).",
        "**client CPU µs/call** is the CPU time of the benchmark process during the cell (user \
         and system, all threads, in 10 ms ticks) per call: the clients' work, and for tollgate \
         the store's, which runs in the caller's process. PostgreSQL's own CPU is not in it.",
        "Each cell runs for its time with n workers: the function's have a connection each, \
         tollgate's and tollgate-sync's n tasks share one store of n connections. The \
         over-grant test gives tollgate's store as many connections as the largest cell. \
         Connections are opened (and statements prepared) before a cell's clock starts.",
    ]
    .map(String::from);
    let decisions = format!(
        "**decisions/s** counts answered calls (allowed or refused); a call that ended in an \
         error is not a decision. **errors** are calls that failed after any retries, with the \
         SQLSTATEs counted: 40001 (serialization failure, the function gave up after {} \
         attempts, tollgate after its 10) and 23505 (duplicate key). **retried attempts** are \
         attempts that failed to serialize and were run again, by the function's client or \
         inside tollgate's store.",
        function::MAX_ATTEMPTS
    );
    let approaches = Approach::ALL.map(|a| format!("**{a}**: {}.", a.describe()));
    let reading = [limits, decisions, latency, statements, cpu, connections];
    approaches.into_iter().chain(reading).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_name_their_causes() {
        assert_eq!(errors(0, 0, 0, 0, 0), "0");
        assert_eq!(errors(5, 0, 0, 0, 0), "5");
        assert_eq!(errors(12, 2, 10, 0, 0), "12 (10 × 40001, 2 × 23505)");
        assert_eq!(
            errors(13, 2, 10, 0, 0),
            "13 (10 × 40001, 2 × 23505, 1 other)"
        );
        assert_eq!(errors(4, 0, 0, 4, 0), "4 (4 timeouts)");
        assert_eq!(
            errors(9, 0, 0, 4, 5),
            "9 (4 timeouts, 5 other); 5 statements gave up on 40001"
        );
    }
}
