//! `tollgate bench all`: every benchmark in one run, on throwaway servers it starts and stops
//! itself, then one index (`index.md`) that describes the machine, links every report, and
//! lists every goal of every benchmark, met or not.
//!
//! Each benchmark runs as its own command line would (`tollgate bench redis --redis URL ...`),
//! parsed by the same parser, so the index can print the command that reproduces each one.
//! A benchmark that fails is reported in the index, and the run goes on; the command exits
//! non-zero at the end if any failed.

use std::io::{IsTerminal, Write as _};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use tokio::time::Instant;

use clap::{Parser, ValueEnum};
use tollgate_bench::report::{Align, Section, Table};
use tollgate_bench::{BenchError, Goal, Report};
use tollgate_testkit::{Reply, TestPostgres, TestRedis, TestRedisCluster, redis_cmd};

use super::machine::{Machine, minutes};
use crate::ServeError;
use crate::cli::{AllArgs, BenchName, Cli, Command};

/// One benchmark of the run: its arguments after `tollgate bench`, and about how long it
/// takes (for the progress line only).
struct Step {
    args: Vec<String>,
    estimate: Duration,
}

/// How one step ended.
struct Done {
    step: Step,
    took: Duration,
    report: Result<Report, String>,
}

pub(super) async fn run(args: AllArgs) -> Result<(), ServeError> {
    let machine = Machine::read();
    let started = Instant::now();
    // The throwaway servers live until the end of the run; a URL given is used as it is.
    let (redis_url, _redis) = match &args.redis {
        Some(url) => (url.clone(), None),
        None => {
            let redis = TestRedis::start().map_err(unavailable("Redis"))?;
            (redis.url().to_owned(), Some(redis))
        }
    };
    let (postgres_url, _postgres) = match &args.postgres {
        Some(url) => (url.clone(), None),
        None => {
            // Commits wait for the disk, as in production: the PostgreSQL benchmark compares
            // what each approach's commits cost.
            let postgres = TestPostgres::start_durable().map_err(unavailable("PostgreSQL"))?;
            (postgres.url().to_owned(), Some(postgres))
        }
    };
    let (cluster_urls, _cluster) = if args.cluster.is_empty() {
        let cluster = TestRedisCluster::start(3).map_err(unavailable("Redis Cluster"))?;
        (cluster.urls().join(","), Some(cluster))
    } else {
        (args.cluster.join(","), None)
    };
    let steps = steps(&args, &redis_url, &postgres_url, &cluster_urls);
    let progress = Progress::start(&steps);
    let mut done = Vec::new();
    for (i, step) in steps.into_iter().enumerate() {
        progress.at(i);
        let began = Instant::now();
        let report = run_step(&step).await.map_err(|e| e.to_string());
        if let Err(e) = &report {
            progress.say(&format!("{}: failed: {e}", step.args[0]));
        }
        done.push(Done {
            took: began.elapsed(),
            step,
            report,
        });
    }
    progress.finish();
    let versions = (
        redis_version(&redis_url).await,
        postgres_version(&postgres_url).await,
    );
    let index = index(&args, &machine, &versions, &done, started.elapsed());
    index.write(&args.out)?;
    println!("{}", index.to_markdown());
    eprintln!(
        "tollgate bench all: reports and their index written to {}",
        args.out.join("index.md").display()
    );
    let failed: Vec<&str> = done
        .iter()
        .filter(|d| d.report.is_err())
        .map(|d| d.step.args[0].as_str())
        .collect();
    if failed.is_empty() {
        Ok(())
    } else {
        Err(BenchError::Args(format!("these benchmarks failed: {}", failed.join(", "))).into())
    }
}

fn unavailable(what: &'static str) -> impl Fn(tollgate_testkit::TestkitError) -> ServeError {
    move |e| BenchError::Args(format!("could not start a throwaway {what}: {e}")).into()
}

/// The run's benchmarks, in order: each one's arguments, full or `--quick`.
fn steps(args: &AllArgs, redis: &str, postgres: &str, cluster: &str) -> Vec<Step> {
    // Each benchmark's store arguments; its arguments and about how long it takes (seconds)
    // in a full run, then in a quick one.
    type Plan<'a> = (
        BenchName,
        Vec<&'a str>,
        (&'a [&'a str], u64),
        (&'a [&'a str], u64),
    );
    let plans: Vec<Plan<'_>> = vec![
        (
            BenchName::Memory,
            vec![],
            (&[], 120),
            (
                &[
                    "--keys",
                    "100000",
                    "--seconds",
                    "0.05",
                    "--rounds",
                    "1",
                    "--warmup",
                    "0.02",
                ],
                10,
            ),
        ),
        (
            BenchName::Redis,
            vec!["--redis", redis, "--cluster", cluster],
            (&[], 150),
            (
                &[
                    "--seconds",
                    "0.3",
                    "--concurrency",
                    "1,64",
                    "--over-grant-seconds",
                    "1",
                ],
                20,
            ),
        ),
        (
            BenchName::Postgres,
            vec!["--postgres", postgres],
            (&[], 150),
            (
                &[
                    "--seconds",
                    "0.3",
                    "--connections",
                    "1,8",
                    "--keys",
                    "10000",
                    "--over-grant-seconds",
                    "1",
                ],
                25,
            ),
        ),
        (
            BenchName::Http,
            vec![],
            (&[], 50),
            (&["--seconds", "0.5", "--rounds", "1", "--warmup", "0.2"], 5),
        ),
        (
            BenchName::Resp,
            vec![],
            (&[], 60),
            (&["--requests", "20000", "--rounds", "1"], 10),
        ),
        (
            BenchName::Grpc,
            vec!["--redis", redis],
            (&[], 30),
            (&["--seconds", "1", "--rounds", "1"], 5),
        ),
        (
            BenchName::Soak,
            vec!["--redis", redis],
            // The soak benchmark's own default is ten minutes; `all` takes two.
            (&["--seconds", "120", "--period", "30"], 125),
            (&["--seconds", "10", "--period", "5", "--rate", "500"], 12),
        ),
    ];
    let out = args.out.to_string_lossy().into_owned();
    plans
        .into_iter()
        .filter(|(name, ..)| args.only.is_empty() || args.only.contains(name))
        .map(|(name, store, full, quick)| {
            let (extra, secs) = if args.quick { quick } else { full };
            let mut argv = vec![bench_name(name)];
            argv.extend(store.into_iter().map(str::to_owned));
            argv.extend(extra.iter().map(|a| (*a).to_owned()));
            argv.extend(["--out".to_owned(), out.clone()]);
            Step {
                args: argv,
                estimate: Duration::from_secs(secs),
            }
        })
        .collect()
}

/// The benchmark's subcommand: the name `--only` takes it by, which clap derives from both.
fn bench_name(name: BenchName) -> String {
    name.to_possible_value()
        .map_or_else(String::new, |v| v.get_name().to_owned())
}

/// Runs one step through the command-line parser, as `tollgate bench ARGS` would.
async fn run_step(step: &Step) -> Result<Report, ServeError> {
    let argv = ["tollgate", "bench"]
        .into_iter()
        .chain(step.args.iter().map(String::as_str));
    let cli = Cli::try_parse_from(argv).map_err(|e| BenchError::Args(e.to_string()))?;
    let Some(Command::Bench(target)) = cli.command else {
        return Err(BenchError::Args("not a benchmark".into()).into());
    };
    // Boxed: `run` is the dispatcher that calls this module, so its future holds this one.
    let (report, _) = Box::pin(super::run(target)).await?;
    Ok(report)
}

/// `redis_version` from `INFO server`.
async fn redis_version(url: &str) -> String {
    let url = url.to_owned();
    let info = tokio::task::spawn_blocking(move || redis_cmd(url.as_str(), &[b"INFO", b"server"]))
        .await
        .ok()
        .and_then(Result::ok);
    let Some(Reply::Bulk(text)) = info else {
        return "unknown".into();
    };
    String::from_utf8_lossy(&text)
        .lines()
        .find_map(|l| l.strip_prefix("redis_version:"))
        .map_or_else(|| "unknown".into(), |v| v.trim().to_owned())
}

/// `server_version`.
async fn postgres_version(url: &str) -> String {
    let Ok((client, connection)) = tokio_postgres::connect(url, tokio_postgres::NoTls).await else {
        return "unknown".into();
    };
    let connection = tokio::spawn(connection);
    let version = client
        .query_one("SHOW server_version", &[])
        .await
        .ok()
        .and_then(|row| row.try_get::<_, String>(0).ok())
        .unwrap_or_else(|| "unknown".into());
    drop(client);
    let _ = connection.await;
    version
}

/// The index: the machine, every goal of every report (each prefixed by its benchmark), and
/// a table of the reports with the command that reproduces each.
fn index(
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
    let started_by = |given: &Option<String>| match given {
        Some(_) => "given by --redis/--postgres",
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
            format!("`tollgate bench {}`", d.step.args.join(" ")),
            minutes(d.took),
        ]
    });
    Report {
        name: "index",
        title: "tollgate's benchmarks, every one in one run".into(),
        intro: vec![
            format!(
                "`tollgate bench all{}` (tollgate {}). Every benchmark ran on this machine, one \
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
                    started_by(&args.redis),
                    started_by(&args.postgres)
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

/// A progress line on stderr: on a terminal, a bar redrawn every second; otherwise one line
/// per benchmark as it starts.
struct Progress {
    at: Arc<AtomicUsize>,
    names: Vec<String>,
    terminal: bool,
    ticker: Option<tokio::task::JoinHandle<()>>,
}

impl Progress {
    fn start(steps: &[Step]) -> Progress {
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

    fn at(&self, i: usize) {
        self.at.store(i, Ordering::Relaxed);
        if !self.terminal {
            eprintln!(
                "tollgate bench all: [{}/{}] {}",
                i + 1,
                self.names.len(),
                self.names[i]
            );
        }
    }

    fn say(&self, what: &str) {
        eprintln!(
            "{}tollgate bench all: {what}",
            if self.terminal { "\r\x1b[K" } else { "" }
        );
    }

    fn finish(self) {
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

    #[test]
    fn quick_steps_name_their_stores_and_out_dir() {
        let args = AllArgs {
            quick: true,
            out: "reports".into(),
            redis: None,
            postgres: None,
            cluster: vec![],
            only: vec![BenchName::Redis, BenchName::Soak],
        };
        let steps = steps(&args, "redis://r", "postgres://p", "redis://c1,redis://c2");
        let argv: Vec<String> = steps.iter().map(|s| s.args.join(" ")).collect();
        assert_eq!(argv.len(), 2);
        let redis = "redis --redis redis://r --cluster redis://c1,redis://c2 --seconds 0.3";
        assert!(argv[0].starts_with(redis), "{argv:?}");
        assert!(argv[1].ends_with("--rate 500 --out reports"), "{argv:?}");
        // Every step's arguments, of every benchmark, full or quick, parse as the command
        // line would.
        let every = |quick| AllArgs {
            quick,
            only: vec![],
            ..args.clone()
        };
        let all: Vec<Step> = [every(false), every(true)]
            .iter()
            .flat_map(|a| super::steps(a, "redis://r", "postgres://p", "redis://c"))
            .collect();
        assert_eq!(all.len(), 2 * BenchName::value_variants().len());
        for step in steps.iter().chain(&all) {
            let parsed = Cli::try_parse_from(
                ["tollgate", "bench"]
                    .into_iter()
                    .chain(step.args.iter().map(String::as_str)),
            );
            assert!(parsed.is_ok(), "{:?}: {parsed:?}", step.args);
        }
    }

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
        assert!(md.contains("`tollgate bench memory --out reports`"), "{md}");
    }
}
