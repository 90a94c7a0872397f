//! The server's front ends stand apart: the three of them (HTTP, Envoy's gRPC, RESP) never
//! name one another, each standing on the decision core alone; and the top-level modules form
//! no circle. Mentions are read from the source by `tollgate_testkit::modules` (its rule: paths
//! from `crate::`, `super::` or `self::`, in code and in doc links alike, followed through
//! re-exports). A new import that breaks either fails here, naming it. The test kit's own test
//! looks for circles at every depth of every crate.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use tollgate_testkit::modules::ModuleGraph;

/// The front ends, which may share the core but not each other.
const FRONT_ENDS: [&str; 3] = ["api", "envoy", "resp"];

/// The mentions of one front end by another.
fn crossings(top: &BTreeMap<String, BTreeSet<String>>) -> Vec<(String, String)> {
    let mut found = Vec::new();
    for from in FRONT_ENDS {
        for to in top.get(from).into_iter().flatten() {
            if FRONT_ENDS.contains(&to.as_str()) {
                found.push((from.to_owned(), to.clone()));
            }
        }
    }
    found
}

#[test]
fn the_modules_point_one_way_and_the_front_ends_stand_apart() {
    let graph = ModuleGraph::read(&Path::new(env!("CARGO_MANIFEST_DIR")).join("src")).unwrap();
    let top = graph.siblings(&[]);
    for module in ["limiter", "api", "envoy", "resp", "app", "cli"] {
        assert!(top.contains_key(module), "{module} in {top:?}");
    }
    let circles: Vec<String> = graph
        .circles()
        .iter()
        .filter(|circle| circle.parent().is_empty())
        .map(ToString::to_string)
        .collect();
    assert!(
        circles.is_empty(),
        "top-level modules naming each other in a circle:\n{}",
        circles.join("\n")
    );
    assert_eq!(crossings(&top), vec![], "a front end naming another");
}

#[test]
fn the_crossing_check_catches_a_front_end_naming_another() {
    let graph = ModuleGraph::from_sources(
        Path::new("src"),
        [
            ("lib.rs", "mod api;\nmod limiter;\nmod resp;\nmod web;"),
            (
                "api/mod.rs",
                "use crate::limiter::Limiter;\nuse crate::{web, resp::codec};",
            ),
            ("limiter.rs", "use crate::web;"),
            ("resp/mod.rs", "pub mod codec;"),
            ("web.rs", ""),
        ],
    );
    let top = graph.siblings(&[]);
    assert_eq!(
        top["api"],
        BTreeSet::from(["limiter".into(), "web".into(), "resp".into()])
    );
    assert_eq!(crossings(&top), vec![("api".into(), "resp".into())]);
}
