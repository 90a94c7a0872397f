//! The stores `all` starts: each benchmark's plan names the stores it runs against, and the run
//! starts those of the benchmarks it runs (and no other), unless given their URLs. A step is
//! handed a store only by the option its plan names it with, so what `all` starts and what a
//! benchmark is given cannot drift apart.

use clap::ValueEnum;

use super::steps::needs;
use super::stores::Store;
use super::{AllArgs, BenchName};

/// The stores the run starts: those the benchmarks it runs (every one, or those of `--only`)
/// need and whose URLs it was not given.
pub(super) fn to_start(args: &AllArgs) -> Vec<Store> {
    let chosen = |name: &BenchName| args.only.is_empty() || args.only.contains(name);
    let needed: Vec<Store> = BenchName::value_variants()
        .iter()
        .filter(|name| chosen(name))
        .flat_map(|name| needs(*name).iter().copied())
        .collect();
    Store::ALL
        .into_iter()
        .filter(|store| needed.contains(store) && !store.given(args))
        .collect()
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    use super::super::steps::steps;
    use super::super::stores::Store;
    use super::*;
    use crate::benchmark::OneBenchmark;

    fn only(names: &[BenchName]) -> AllArgs {
        AllArgs {
            quick: true,
            out: "reports".into(),
            redis: None,
            postgres: None,
            cluster: vec![],
            only: names.to_vec(),
        }
    }

    /// For every benchmark `--only` takes: every store option its own command line has, its
    /// plan names, `all --only` it starts, and its step is given a URL of that store (as the
    /// run builds them: empty for a store not started).
    #[test]
    fn only_starts_every_store_each_benchmark_takes() {
        let command = OneBenchmark::command();
        for &name in BenchName::value_variants() {
            let args = only(&[name]);
            let sub = name.to_possible_value().unwrap().get_name().to_owned();
            let options: Vec<Store> = Store::ALL
                .into_iter()
                .filter(|store| {
                    command
                        .find_subcommand(&sub)
                        .unwrap()
                        .get_arguments()
                        .any(|a| a.get_long() == Some(&store.option()[2..]))
                })
                .collect();
            assert_eq!(needs(name), options.as_slice(), "{sub}'s stores");
            let started = to_start(&args);
            assert_eq!(started, options, "`all --only {sub}` starts");
            let url = |store, url: &'static str| {
                if started.contains(&store) { url } else { "" }
            };
            let steps = steps(
                &args,
                url(Store::Redis, "redis://r"),
                url(Store::Postgres, "postgres://p"),
                url(Store::Cluster, "redis://c"),
            );
            assert_eq!(steps.len(), 1, "{sub}");
            let argv = &steps[0].args;
            for store in Store::ALL {
                let at = argv.iter().position(|a| a == store.option());
                match at {
                    Some(at) => assert!(!argv[at + 1].is_empty(), "{argv:?}"),
                    None => assert!(!options.contains(&store), "{store:?} in {argv:?}"),
                }
            }
        }
    }

    #[test]
    fn every_store_of_a_full_run_is_started_unless_given() {
        assert_eq!(to_start(&only(&[])), Store::ALL);
        assert_eq!(to_start(&only(&[BenchName::Memory, BenchName::Http])), []);
        let given = AllArgs {
            redis: Some("redis://r".into()),
            cluster: vec!["redis://c".into()],
            ..only(&[BenchName::Scale])
        };
        assert_eq!(to_start(&given), [Store::Postgres]);
    }
}
