//! The run's benchmarks: each one's command line, full or `--quick`.

use std::time::Duration;

use clap::ValueEnum;

use super::stores::Store;
use super::{AllArgs, BenchName};

/// One benchmark of the run: its arguments after `tollgate-bench`, and about how long it
/// takes (for the progress line only).
pub(super) struct Step {
    pub(super) args: Vec<String>,
    pub(super) estimate: Duration,
}

/// The run's benchmarks, in order: each one's arguments, full or `--quick`, each given the
/// stores its plan needs at `redis`, `postgres` and `cluster`.
pub(super) fn steps(args: &AllArgs, redis: &str, postgres: &str, cluster: &str) -> Vec<Step> {
    let url = |store| match store {
        Store::Redis => redis,
        Store::Cluster => cluster,
        Store::Postgres => postgres,
    };
    let out = args.out.to_string_lossy().into_owned();
    plans()
        .into_iter()
        .filter(|(name, ..)| args.only.is_empty() || args.only.contains(name))
        .map(|(name, stores, full, quick)| {
            let (extra, secs) = if args.quick { quick } else { full };
            let mut argv = vec![bench_name(name)];
            for &store in stores {
                argv.extend([store.option().to_owned(), url(store).to_owned()]);
            }
            argv.extend(extra.iter().map(|a| (*a).to_owned()));
            argv.extend(["--out".to_owned(), out.clone()]);
            Step {
                args: argv,
                estimate: Duration::from_secs(secs),
            }
        })
        .collect()
}

/// Each benchmark's stores (every one its command line takes: `all` starts them for it); its
/// arguments and about how long it takes (seconds) in a full run, then in a quick one.
type Plan = (
    BenchName,
    &'static [Store],
    (&'static [&'static str], u64),
    (&'static [&'static str], u64),
);

/// Every benchmark's plan.
fn plans() -> Vec<Plan> {
    vec![
        (
            BenchName::Memory,
            &[],
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
            &[Store::Redis, Store::Cluster],
            (&[], 175),
            (
                &[
                    "--seconds",
                    "0.3",
                    "--concurrency",
                    "1,64",
                    "--over-grant-seconds",
                    "1",
                ],
                22,
            ),
        ),
        (
            BenchName::Postgres,
            &[Store::Postgres],
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
            &[],
            (&[], 90),
            (&["--seconds", "0.5", "--rounds", "1", "--warmup", "0.2"], 7),
        ),
        (
            BenchName::Resp,
            &[],
            (&[], 60),
            (&["--requests", "20000", "--rounds", "1"], 10),
        ),
        (
            BenchName::Grpc,
            &[Store::Redis],
            (&[], 30),
            (&["--seconds", "1", "--rounds", "1"], 5),
        ),
        (
            BenchName::Soak,
            &[Store::Redis],
            // The soak benchmark's own default is ten minutes; `all` takes two.
            (&["--seconds", "120", "--period", "30"], 125),
            (&["--seconds", "4", "--period", "2", "--rate", "500"], 6),
        ),
        (
            BenchName::Tail,
            &[],
            (&[], 80),
            (&["--seconds", "0.5", "--rounds", "1"], 8),
        ),
        (
            BenchName::Scale,
            &[Store::Redis, Store::Cluster, Store::Postgres],
            (&[], 60),
            (
                &["--seconds", "0.2", "--workers", "4", "--processes", "2"],
                20,
            ),
        ),
        (
            // Its topologies are its own (a primary and a replica per run): it takes no store.
            BenchName::Failover,
            &[],
            (&[], 150),
            (
                &[
                    "--seconds",
                    "0.3",
                    "--clients",
                    "16",
                    "--loads",
                    "hot",
                    "--faults",
                    "kill",
                ],
                30,
            ),
        ),
    ]
}

/// The arguments `--quick` gives the benchmark named `name` (as its subcommand), beside its
/// stores.
pub(crate) fn quick_args(name: &str) -> Vec<&'static str> {
    plans()
        .into_iter()
        .find(|(bench, ..)| bench_name(*bench) == name)
        .map_or_else(Vec::new, |(_, _, _, (quick, _))| quick.to_vec())
}

/// The stores the benchmark named `name` runs against.
pub(super) fn needs(name: BenchName) -> &'static [Store] {
    plans()
        .into_iter()
        .find(|(bench, ..)| *bench == name)
        .map_or(&[], |(_, stores, ..)| stores)
}

/// The benchmark's subcommand: the name `--only` takes it by, which clap derives from both.
fn bench_name(name: BenchName) -> String {
    name.to_possible_value()
        .map_or_else(String::new, |v| v.get_name().to_owned())
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;
    use crate::benchmark::OneBenchmark;

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
            let parsed = OneBenchmark::try_parse_from(
                std::iter::once("tollgate-bench").chain(step.args.iter().map(String::as_str)),
            );
            assert!(parsed.is_ok(), "{:?}: {parsed:?}", step.args);
        }
    }
}
