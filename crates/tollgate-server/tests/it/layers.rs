//! The server's modules point one way: read from the source, every top-level module's
//! mentions of another (`crate::name`, in code and in doc links alike) form no circle, and the
//! three front ends (HTTP, Envoy's gRPC, RESP) never name one another: each stands on the
//! decision core alone. A new import that breaks either fails here, naming it.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// The front ends, which may share the core but not each other.
const FRONT_ENDS: [&str; 3] = ["api", "envoy", "resp"];

/// Each top-level module of `src` (a file or a folder; `lib.rs` and `main.rs`, the roots,
/// aside) and the other top-level modules its files name.
fn graph(src: &Path) -> BTreeMap<String, BTreeSet<String>> {
    let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let mut stack = vec![src.to_owned()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                stack.push(path);
                continue;
            }
            if path.extension().is_none_or(|e| e != "rs") {
                continue;
            }
            let relative = path.strip_prefix(src).unwrap();
            let top = relative
                .components()
                .next()
                .unwrap()
                .as_os_str()
                .to_string_lossy()
                .trim_end_matches(".rs")
                .to_owned();
            if top == "lib" || top == "main" {
                continue;
            }
            let named = mentions(&std::fs::read_to_string(&path).unwrap());
            let edges = graph.entry(top.clone()).or_default();
            edges.extend(named.into_iter().filter(|m| *m != top));
        }
    }
    graph
}

/// The modules `text` names after `crate::`, alone (`crate::limiter::Limiter`) or in a group
/// (`crate::{http, resp}`).
fn mentions(text: &str) -> BTreeSet<String> {
    let mut named = BTreeSet::new();
    for (at, _) in text.match_indices("crate::") {
        let rest = &text[at + "crate::".len()..];
        if let Some(group) = rest.strip_prefix('{') {
            let group = &group[..group.find('}').unwrap_or(group.len())];
            for item in group.split(',') {
                let name = item.trim().split("::").next().unwrap_or("");
                if !name.is_empty() {
                    named.insert(name.to_owned());
                }
            }
        } else {
            let end = rest
                .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                .unwrap_or(rest.len());
            named.insert(rest[..end].to_owned());
        }
    }
    named
}

/// A circle of modules, if there is one.
fn circle(graph: &BTreeMap<String, BTreeSet<String>>) -> Option<Vec<String>> {
    fn visit(
        node: &str,
        graph: &BTreeMap<String, BTreeSet<String>>,
        path: &mut Vec<String>,
        done: &mut BTreeSet<String>,
    ) -> Option<Vec<String>> {
        if let Some(at) = path.iter().position(|n| n == node) {
            let mut circle = path[at..].to_vec();
            circle.push(node.to_owned());
            return Some(circle);
        }
        if done.contains(node) {
            return None;
        }
        path.push(node.to_owned());
        for next in graph.get(node).into_iter().flatten() {
            if let Some(circle) = visit(next, graph, path, done) {
                return Some(circle);
            }
        }
        path.pop();
        done.insert(node.to_owned());
        None
    }
    let mut done = BTreeSet::new();
    graph
        .keys()
        .find_map(|node| visit(node, graph, &mut Vec::new(), &mut done))
}

/// The mentions of one front end by another.
fn crossings(graph: &BTreeMap<String, BTreeSet<String>>) -> Vec<(String, String)> {
    let mut found = Vec::new();
    for from in FRONT_ENDS {
        for to in graph.get(from).into_iter().flatten() {
            if FRONT_ENDS.contains(&to.as_str()) {
                found.push((from.to_owned(), to.clone()));
            }
        }
    }
    found
}

#[test]
fn the_modules_point_one_way_and_the_front_ends_stand_apart() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let graph = graph(&src);
    for module in ["limiter", "api", "envoy", "resp", "app", "cli"] {
        assert!(graph.contains_key(module), "{module} in {graph:?}");
    }
    assert_eq!(
        circle(&graph),
        None,
        "modules naming each other in a circle"
    );
    assert_eq!(crossings(&graph), vec![], "a front end naming another");
}

#[test]
fn the_checks_catch_a_circle_and_a_crossing() {
    let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let text = "use crate::limiter::Limiter;\nuse crate::{web, resp::codec};\n";
    graph.insert("http".into(), mentions(text));
    assert_eq!(
        graph["http"],
        BTreeSet::from(["limiter".into(), "web".into(), "resp".into()])
    );
    assert_eq!(crossings(&graph), vec![("http".into(), "resp".into())]);
    graph.insert("limiter".into(), BTreeSet::from(["web".into()]));
    assert_eq!(circle(&graph), None);
    graph.insert("web".into(), BTreeSet::from(["limiter".into()]));
    let found = circle(&graph).expect("limiter -> web -> limiter");
    assert_eq!(found.first(), found.last());
    assert!(found.contains(&"web".to_owned()), "{found:?}");
}
