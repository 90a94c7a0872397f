//! Issue 46: one front door into the decision core. Read from the source, the core
//! (`src/limiter`) names no protocol crate (neither `envoy_types` nor axum, hyper, tonic, http)
//! nor the server's options or Envoy's descriptor rules; and the front ends (`src/api`,
//! `src/envoy`, `src/resp`, and `src/web`, the HTTP plumbing two of them share) name none of
//! the rules the core keeps: the key bound, the switch of client-chosen numbers, the strikes of
//! failed authentications, the reservations' insides, the store call, its rounds and counts.
//! Code is read by the test kit's lexer (`tollgate_testkit::modules`): comments, doc comments
//! and literals do not count. A new mention fails here, naming the file, the line and the word.

use std::path::{Path, PathBuf};

use tollgate_testkit::modules::{ModuleGraph, identifiers};

/// The crates the core must not name.
const NOT_IN_THE_CORE: [&str; 5] = ["envoy_types", "axum", "hyper", "tonic", "http"];

/// The server's modules the core must not name.
const NOT_NAMED_BY_THE_CORE: [&str; 6] = ["options", "descriptors", "api", "envoy", "resp", "web"];

/// What only the core may name: each is a rule written there once.
const ONLY_IN_THE_CORE: [&str; 16] = [
    // The bounds on what a request may ask.
    "MAX_KEY_BYTES",
    "MAX_POLICIES_PER_CHECK",
    // The switch of client-chosen numbers (its refusal).
    "inline_policies",
    // The strikes of failed authentications.
    "Strikes",
    "strike",
    "Penalty",
    // The reservations' insides: signing, ownership, the debt cap, the commit's adjustments.
    "Signer",
    "Reserved",
    "ReservedBucket",
    "adjustments",
    "used_alike",
    "commit_within",
    // The store call, its rounds, and the per-policy counts of their outcomes.
    "ask_store",
    "Rounds",
    "decide_entries",
    "PolicyCounters",
];

/// The Rust files under `dir`, sorted.
fn files(dir: &Path) -> Vec<PathBuf> {
    let mut found = Vec::new();
    let mut stack = vec![dir.to_owned()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                stack.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                found.push(path);
            }
        }
    }
    found.sort();
    found
}

/// Each `file:line word` of `words` that the code under `dirs` of `src` names.
fn mentions(src: &Path, dirs: &[&str], words: &[&str]) -> Vec<String> {
    let mut found = Vec::new();
    for dir in dirs {
        for file in files(&src.join(dir)) {
            let name = file.strip_prefix(src).unwrap().display().to_string();
            let source = std::fs::read_to_string(&file).unwrap();
            for (line, identifier) in identifiers(&source) {
                if words.contains(&identifier.as_str()) {
                    found.push(format!("{name}:{line} {identifier}"));
                }
            }
        }
    }
    found
}

fn src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

#[test]
fn the_core_names_no_protocol_crate_nor_the_options_nor_a_front_end() {
    assert_eq!(
        mentions(&src(), &["limiter"], &NOT_IN_THE_CORE),
        Vec::<String>::new(),
        "the core naming a protocol crate"
    );
    let graph = ModuleGraph::read(&src()).unwrap();
    let core = graph.siblings(&[]).remove("limiter").unwrap_or_default();
    let named: Vec<&String> = core
        .iter()
        .filter(|m| NOT_NAMED_BY_THE_CORE.contains(&m.as_str()))
        .collect();
    assert_eq!(named, Vec::<&String>::new(), "the core naming {named:?}");
}

#[test]
fn no_front_end_names_a_rule_of_the_core() {
    let front_ends = ["api", "envoy", "resp", "web"];
    assert_eq!(
        mentions(&src(), &front_ends, &ONLY_IN_THE_CORE),
        Vec::<String>::new(),
        "a front end naming what only the core may"
    );
}

#[test]
fn the_checks_see_code_and_not_comments_or_strings() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("api")).unwrap();
    std::fs::write(
        dir.path().join("api/check.rs"),
        "// MAX_KEY_BYTES in a comment is fine\n/// and in a doc: Strikes\n\
         let n = limiter::MAX_KEY_BYTES; /* Penalty */\n\
         let m = \"in a string: Strikes \\\n Penalty\"; let c = MonotonicClock::new();\n",
    )
    .unwrap();
    assert_eq!(
        mentions(dir.path(), &["api"], &ONLY_IN_THE_CORE),
        vec!["api/check.rs:3 MAX_KEY_BYTES".to_owned()]
    );
    // `tonic` is not `MonotonicClock`.
    assert_eq!(
        mentions(dir.path(), &["api"], &NOT_IN_THE_CORE),
        Vec::<String>::new()
    );
}
