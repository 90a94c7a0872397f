//! What a memory run measured, the goals it is held to, and the medians across rounds.

mod document;

use std::collections::BTreeMap;
use std::time::Duration;

use super::contenders::Contender;
use crate::report::{Goal, median, per, thousands};

/// The goal: tollgate's checks/s at least this multiple of governor's, on every row.
pub const GOAL_RATIO: f64 = 1.5;

/// The goal: a check on the hot key, on 1 thread, within this many nanoseconds.
pub const GOAL_HOT_NS: f64 = 40.0;

/// The goal: the summary of who is denied and allowed (`GET /v1/top`) adds at most
/// this many nanoseconds to a check, on every row.
pub const GOAL_TOP_NS: f64 = 5.0;

/// One run of `run_memory`.
#[derive(Debug, Clone, PartialEq)]
pub struct MemoryReport {
    /// Requested length of a timed run, seconds.
    pub seconds_per_run: f64,
    /// Length of the untimed calibration of each cell before the rounds, seconds.
    pub warmup_seconds: f64,
    /// Rounds: every cell ran once per round.
    pub rounds: usize,
    /// The scenarios, by the distinct keys their checks spread over: 1 (the hot key), the
    /// middle one, the large one.
    pub scenarios: Vec<usize>,
    /// Thread counts each scenario ran with.
    pub threads: Vec<usize>,
    /// Cores the process could use.
    pub cores: usize,
    /// Every timed run, in the order run (round by round, then scenario, threads, contender).
    pub runs: Vec<Run>,
    /// Memory per key, on the large scenario's keys.
    pub footprint: Footprint,
    /// Checks made while timing, every thread, calibration and warm-ups included.
    pub checks: u64,
    /// Of [`MemoryReport::checks`], those denied (or failed): 0 when every check took the
    /// allow path, as the policy means it to.
    pub denied: u64,
    /// Precharges: one per key per limiter, before timing.
    pub precharges: u64,
    /// Precharges denied.
    pub precharges_denied: u64,
    /// ns per memory load that depends on the one before, over 64 MB: the floor under a check
    /// over many keys (`None`: not measured).
    pub load_ns: Option<f64>,
}

/// One cell (scenario, threads, contender) timed for one round.
#[derive(Debug, Clone, PartialEq)]
pub struct Run {
    /// Distinct keys of the scenario (1: the hot key).
    pub keys: usize,
    /// Threads checking at once.
    pub threads: usize,
    /// What was timed.
    pub contender: Contender,
    /// 1-based.
    pub round: usize,
    /// Timed checks, all threads together.
    pub checks: u64,
    /// Wall time of the timed checks.
    pub elapsed: Duration,
    /// CPU time the rest of the machine used during the run (warm-up included), from
    /// `/proc/stat` in 10 ms ticks; `None` where it cannot be read. Near zero when the run had
    /// the cores to itself; otherwise its threads waited for a core, and its time shows it.
    pub others_cpu: Option<Duration>,
}

impl Run {
    /// Wall time ÷ checks of every thread, in nanoseconds: with 2 threads, `1e9 ÷ this` is
    /// the checks/s of both together.
    pub fn ns_per_check(&self) -> f64 {
        per(self.elapsed.as_nanos() as f64, self.checks as f64)
    }
}

/// A scenario at a thread count: each contender's median ns per check across rounds.
#[derive(Debug, Clone, PartialEq)]
pub struct Row {
    /// Distinct keys of the scenario (1: the hot key).
    pub keys: usize,
    /// Threads checking at once.
    pub threads: usize,
    /// Each contender's median ns per check, for those that ran.
    pub medians: BTreeMap<Contender, f64>,
}

impl Row {
    /// The median ns per check of `contender`; `None` if it did not run.
    pub fn ns(&self, contender: Contender) -> Option<f64> {
        self.medians.get(&contender).copied()
    }

    /// `contender`'s checks/s ÷ governor's on the same clock (governor's time ÷ its time):
    /// above 1, it is faster. `None` for a contender without a rival.
    pub fn ratio(&self, contender: Contender) -> Option<f64> {
        let (ours, governor) = (self.ns(contender)?, self.ns(contender.rival()?)?);
        (ours > 0.0).then(|| governor / ours)
    }

    /// `hot key, 1 thread`, `100k keys, 2 threads`.
    pub fn label(&self) -> String {
        cell_label(self.keys, self.threads)
    }
}

/// Memory held per key, by the large scenario's limiters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Footprint {
    /// Distinct keys each limiter holds.
    pub keys: usize,
    /// tollgate's tables: [`tollgate::MemoryStore::allocated_bytes`] once the keys are in.
    pub tollgate_tables: u64,
    /// Resident memory the process gained while tollgate's store took the keys; `None` where
    /// it cannot be read (outside Linux).
    pub tollgate_rss: Option<u64>,
    /// Resident memory the process gained while governor's limiter took the same keys.
    pub governor_rss: Option<u64>,
}

impl Footprint {
    /// `bytes` per key held.
    pub fn per_key(&self, bytes: u64) -> f64 {
        per(bytes as f64, self.keys as f64)
    }
}

/// `hot key, 1 thread`, `100k keys, 2 threads`.
pub(crate) fn cell_label(keys: usize, threads: usize) -> String {
    let s = if threads == 1 { "" } else { "s" };
    format!("{}, {threads} thread{s}", scenario_name(keys))
}

/// `hot key`, `100k keys`, `1M keys`, `12,345 keys`.
pub(crate) fn scenario_name(keys: usize) -> String {
    match keys {
        1 => "hot key".into(),
        _ if keys.is_multiple_of(1_000_000) => format!("{}M keys", keys / 1_000_000),
        _ if keys.is_multiple_of(1_000) => format!("{}k keys", keys / 1_000),
        _ => format!("{} keys", thousands(keys as f64)),
    }
}

impl MemoryReport {
    /// The runs of one cell, in round order.
    pub fn runs_of(
        &self,
        keys: usize,
        threads: usize,
        contender: Contender,
    ) -> impl Iterator<Item = &Run> {
        self.runs
            .iter()
            .filter(move |r| r.keys == keys && r.threads == threads && r.contender == contender)
    }

    /// The median ns per check of one cell across rounds; `None` if it did not run.
    pub fn ns_per_check(&self, keys: usize, threads: usize, contender: Contender) -> Option<f64> {
        median(
            self.runs_of(keys, threads, contender)
                .map(Run::ns_per_check)
                .collect(),
        )
    }

    /// CPU time other processes used during the timed runs ÷ the runs' wall time: 0 on a
    /// quiet machine, 1 when they kept a whole core busy. `None` where it cannot be read.
    pub fn others_cpu_share(&self) -> Option<f64> {
        let others: Option<Vec<Duration>> = self.runs.iter().map(|r| r.others_cpu).collect();
        let others: Duration = others?.into_iter().sum();
        let wall: Duration = self.runs.iter().map(|r| r.elapsed).sum();
        (!wall.is_zero()).then(|| others.as_secs_f64() / wall.as_secs_f64())
    }

    /// A row per scenario and thread count, in report order, whether it ran or not.
    pub fn rows(&self) -> Vec<Row> {
        self.scenarios
            .iter()
            .flat_map(|&keys| self.threads.iter().map(move |&threads| (keys, threads)))
            .map(|(keys, threads)| {
                let ns = |contender| self.ns_per_check(keys, threads, contender);
                Row {
                    keys,
                    threads,
                    medians: Contender::ALL
                        .into_iter()
                        .filter_map(|c| Some((c, ns(c)?)))
                        .collect(),
                }
            })
            .collect()
    }

    /// The goals of the issue, judged on this run: on every row, each of tollgate's entry
    /// points at [`GOAL_RATIO`]× the checks/s of governor on the same clock; on the hot key at
    /// 1 thread, each within [`GOAL_HOT_NS`]; and every check allowed, without which the
    /// figures time the wrong path.
    pub fn goals(&self) -> Vec<Goal> {
        let rows = self.rows();
        let tollgate = Contender::TOLLGATE;
        let mut goals = Vec::new();
        for row in &rows {
            for (contender, rival) in tollgate.iter().filter_map(|&c| Some((c, c.rival()?))) {
                let goal = format!(
                    "{}: {} ≥ {GOAL_RATIO}× {}'s checks/s",
                    row.label(),
                    contender.call(),
                    rival.call()
                );
                goals.push(
                    match (row.ns(contender), row.ns(rival), row.ratio(contender)) {
                        (Some(ours), Some(governor), Some(ratio)) => Goal {
                            goal,
                            measured: format!(
                                "{ours:.1} vs {governor:.1} ns per check: {ratio:.2}×"
                            ),
                            met: Some(ratio >= GOAL_RATIO),
                        },
                        _ => Goal::unmeasured(goal, "not run"),
                    },
                );
            }
        }
        let hot = rows.iter().find(|r| r.keys == 1 && r.threads == 1);
        for contender in tollgate {
            let goal = format!("hot key, 1 thread: {} ≤ {GOAL_HOT_NS} ns", contender.call());
            goals.push(match hot.and_then(|r| r.ns(contender)) {
                Some(ns) => Goal {
                    goal,
                    measured: format!("{ns:.1} ns per check (median of {} rounds)", self.rounds),
                    met: Some(ns <= GOAL_HOT_NS),
                },
                None => Goal::unmeasured(goal, "not run"),
            });
        }
        for row in &rows {
            let (on, off) = (Contender::TollgateLimiterTop, Contender::TollgateLimiter);
            let goal = format!(
                "{}: the top summary adds ≤ {GOAL_TOP_NS} ns to {}",
                row.label(),
                off.call()
            );
            goals.push(match (row.ns(on), row.ns(off)) {
                (Some(on), Some(off)) => Goal {
                    goal,
                    measured: format!("{on:.1} vs {off:.1} ns per check: {:+.1} ns", on - off),
                    met: Some(on - off <= GOAL_TOP_NS),
                },
                _ => Goal::unmeasured(goal, "not run"),
            });
        }
        goals.push(Goal {
            goal: "every check allowed (the policy keeps every timed check on the allow path)"
                .into(),
            measured: format!(
                "{} of {} checks denied while timing (calibration and warm-ups included); \
                 {} of {} precharges",
                thousands(self.denied as f64),
                thousands(self.checks as f64),
                thousands(self.precharges_denied as f64),
                thousands(self.precharges as f64)
            ),
            met: Some(self.checks > 0 && self.denied == 0 && self.precharges_denied == 0),
        });
        goals
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(keys: usize, threads: usize, contender: Contender, round: usize, ns: u64) -> Run {
        Run {
            keys,
            threads,
            contender,
            round,
            checks: 1000,
            elapsed: Duration::from_nanos(1000 * ns),
            others_cpu: Some(Duration::from_nanos(250 * ns)),
        }
    }

    fn report(runs: Vec<Run>) -> MemoryReport {
        MemoryReport {
            seconds_per_run: 0.1,
            warmup_seconds: 0.1,
            rounds: 3,
            scenarios: vec![1, 100_000],
            threads: vec![1, 2],
            cores: 2,
            runs,
            footprint: Footprint {
                keys: 1000,
                tollgate_tables: 94_000,
                tollgate_rss: Some(100_000),
                governor_rss: None,
            },
            checks: 10,
            denied: 0,
            precharges: 4,
            precharges_denied: 0,
            load_ns: None,
        }
    }

    #[test]
    fn medians_ratios_and_goals_per_row() {
        use Contender::*;
        let mut runs = Vec::new();
        for (round, slow) in [(1, 0), (2, 500), (3, 0)] {
            // A bad round for governor moves no median.
            runs.push(run(1, 1, TollgateLimiter, round, 20));
            runs.push(run(1, 1, TollgateStore, round, 45));
            runs.push(run(1, 1, Governor, round, 60 + slow));
            runs.push(run(1, 1, TollgateLimiterTsc, round, 10));
            runs.push(run(1, 1, TollgateStoreTsc, round, 30));
            runs.push(run(1, 1, GovernorTsc, round, 40));
            runs.push(run(1, 1, KeyWalk, round, 1));
        }
        let report = report(runs);
        let rows = report.rows();
        assert_eq!(rows.len(), 4);
        assert_eq!(rows[0].label(), "hot key, 1 thread");
        assert_eq!(rows[3].label(), "100k keys, 2 threads");
        assert_eq!(rows[0].ns(Governor), Some(60.0));
        assert_eq!(rows[0].ratio(TollgateLimiter), Some(3.0));
        assert_eq!(rows[0].ratio(TollgateStore), Some(60.0 / 45.0));
        assert_eq!(rows[1].ratio(TollgateLimiter), None);
        assert_eq!(report.others_cpu_share(), Some(0.25));

        // Each against governor on its own clock.
        assert_eq!(rows[0].ratio(TollgateLimiterTsc), Some(4.0));
        assert_eq!(rows[0].ratio(GovernorTsc), None);

        let goals = report.goals();
        let met: Vec<Option<bool>> = goals.iter().map(|g| g.met).collect();
        // Six goals a row (the coarse clock's did not run), then the hot key's six, then the
        // top summary's one a row (not run), then one.
        let mut expected = vec![Some(true), Some(false), Some(true), Some(false), None, None];
        expected.extend([None; 18]);
        expected.extend([Some(true), Some(false), Some(true), Some(true), None, None]);
        expected.extend([None; 4]);
        expected.push(Some(true));
        assert_eq!(met, expected, "{goals:#?}");
        assert_eq!(
            goals[0].goal,
            "hot key, 1 thread: `MemoryLimiter::check` (Instant) ≥ 1.5× governor `check_key` \
             (Instant)'s checks/s"
        );
        assert_eq!(goals[0].measured, "20.0 vs 60.0 ns per check: 3.00×");
        assert_eq!(
            goals[3].goal,
            "hot key, 1 thread: `MemoryStore::check` (TSC) ≥ 1.5× governor `check_key` (TSC)'s \
             checks/s"
        );
        assert_eq!(goals[3].measured, "30.0 vs 40.0 ns per check: 1.33×");
        assert_eq!(
            goals[24].goal,
            "hot key, 1 thread: `MemoryLimiter::check` (Instant) ≤ 40 ns"
        );
        assert_eq!(goals[25].measured, "45.0 ns per check (median of 3 rounds)");
        assert_eq!(goals[25].met, Some(false));
    }

    #[test]
    fn a_denied_check_fails_the_run() {
        let report = MemoryReport {
            denied: 1,
            ..report(Vec::new())
        };
        assert_eq!(report.goals().last().and_then(|g| g.met), Some(false));
        let report = MemoryReport {
            precharges_denied: 1,
            ..report
        };
        assert_eq!(report.goals().last().and_then(|g| g.met), Some(false));
    }

    #[test]
    fn a_check_over_many_keys_is_put_in_dependent_loads() {
        let runs = vec![
            run(100_000, 1, Contender::TollgateLimiterTsc, 1, 400),
            run(100_000, 1, Contender::GovernorTsc, 1, 500),
        ];
        let measured = MemoryReport {
            load_ns: Some(100.0),
            ..report(runs)
        };
        let intro = measured.report().intro.join(" ");
        assert!(
            intro.contains(
                "took 100.0 ns here: at 100k keys, one thread, a check was 4.0 such loads \
                 through `MemoryLimiter::check` (TSC) and 5.0 through governor (TSC)"
            ),
            "{intro}"
        );
        let unmeasured = MemoryReport {
            load_ns: None,
            ..measured
        };
        assert!(!unmeasured.report().intro.join(" ").contains("one before"));
    }

    #[test]
    fn scenarios_are_named_by_their_keys() {
        assert_eq!(scenario_name(1), "hot key");
        assert_eq!(scenario_name(2_000), "2k keys");
        assert_eq!(scenario_name(1_000_000), "1M keys");
        assert_eq!(scenario_name(12_345), "12,345 keys");
    }
}
