//! The run's index: the machine, every goal of every report, and the reports.

use std::time::Duration;

use super::machine::{Machine, minutes};
use super::{AllArgs, Done};
use crate::report::{Align, Section, Table};
use crate::{Goal, Report};

/// The index: the machine, every goal of every report (each prefixed by its benchmark), and
/// a table of the reports with the command that reproduces each.
pub(super) fn index(
    args: &AllArgs,
    machine: &Machine,
    (redis, postgres): &(String, String),
    done: &[Done],
    took: Duration,
) -> Report {
    let mut goals = Vec::new();
    for d in done {
        let name = &d.step.args[0];
        match &d.report {
            Ok(report) => goals.extend(report.goals.iter().map(|g| Goal {
                goal: format!("**{name}**: {}", g.goal),
                ..g.clone()
            })),
            Err(e) => goals.push(Goal::unmeasured(
                format!("**{name}**: every goal"),
                format!("the benchmark failed: {e}"),
            )),
        }
    }
    let count = |met: Option<bool>| goals.iter().filter(|g| g.met == met).count();
    let summary = format!(
        "{} goals: {} met, {} not met, {} not measured.",
        goals.len(),
        count(Some(true)),
        count(Some(false)),
        count(None)
    );
    let started_by = |given: &Option<String>, version: &str| match given {
        Some(_) => "given by --redis/--postgres",
        None if version == "not used" => "not used by these benchmarks",
        None => "throwaway, started by the run",
    };
    let rows = done.iter().map(|d| {
        let name = &d.step.args[0];
        let link = match &d.report {
            Ok(report) => format!("[{name}]({}.md)", report.name),
            Err(e) => format!("{name}: **failed** ({e})"),
        };
        vec![
            link,
            format!("`tollgate-bench {}`", d.step.args.join(" ")),
            minutes(d.took),
        ]
    });
    Report {
        name: "index",
        title: "tollgate's benchmarks, every one in one run".into(),
        intro: vec![
            format!(
                "`tollgate-bench all{}` (tollgate {}). Every benchmark ran on this machine, one \
                 after the other, beside the approaches it is compared with: only the ratios \
                 within one report mean anything.{}",
                if args.quick { " --quick" } else { "" },
                env!("CARGO_PKG_VERSION"),
                if args.quick {
                    " **A quick run**: every benchmark was cut short; its figures are for \
                     checking that everything runs, not for quoting."
                } else {
                    ""
                }
            ),
            summary,
        ],
        goals,
        sections: vec![
            Section::table(
                "The machine",
                vec![format!(
                    "Redis {}; PostgreSQL {}.",
                    started_by(&args.redis, redis),
                    started_by(&args.postgres, postgres)
                )],
                machine.table(redis, postgres, took),
            ),
            Section::table(
                "The reports",
                vec![],
                Table::new(
                    &[
                        ("report", Align::Left),
                        ("command", Align::Left),
                        ("took", Align::Right),
                    ],
                    rows,
                ),
            ),
        ],
        notes: vec![],
        charts: vec![],
    }
}

#[cfg(test)]
mod tests {
    use super::super::steps::steps;
    use super::*;

    #[test]
    fn the_index_lists_every_goal_and_a_failed_benchmark() {
        let args = AllArgs {
            quick: false,
            out: "reports".into(),
            redis: None,
            postgres: Some("postgres://p".into()),
            cluster: vec![],
            only: vec![],
        };
        let steps = steps(&args, "redis://r", "postgres://p", "redis://c");
        let mut done = Vec::new();
        for (i, step) in steps.into_iter().take(2).enumerate() {
            let report = if i == 0 {
                Ok(Report {
                    name: "memory",
                    title: "t".into(),
                    intro: vec![],
                    goals: vec![
                        Goal {
                            goal: "fast".into(),
                            measured: "yes".into(),
                            met: Some(true),
                        },
                        Goal {
                            goal: "faster".into(),
                            measured: "no".into(),
                            met: Some(false),
                        },
                    ],
                    sections: vec![],
                    notes: vec![],
                    charts: vec![],
                })
            } else {
                Err("Redis | went away".to_owned())
            };
            done.push(Done {
                step,
                took: Duration::from_secs(61),
                report,
            });
        }
        let machine = Machine::read();
        let index = index(
            &args,
            &machine,
            &("7.0".into(), "15".into()),
            &done,
            Duration::from_secs(122),
        );
        let md = index.to_markdown();
        assert!(
            md.contains("3 goals: 1 met, 1 not met, 1 not measured."),
            "{md}"
        );
        assert!(md.contains("**memory**: faster"), "{md}");
        assert!(md.contains("[memory](memory.md)"), "{md}");
        assert!(
            md.contains("redis: **failed** (Redis \\| went away)"),
            "{md}"
        );
        assert!(md.contains("given by --redis/--postgres"), "{md}");
        assert!(md.contains("`tollgate-bench memory --out reports`"), "{md}");
    }
}
