//! No crate of the workspace has an import circle among sibling modules, at any depth (the rule
//! is `tollgate_testkit::modules`'s): a new `use` that closes a loop fails here, naming the
//! files and the line of each step.

use std::path::Path;

use tollgate_testkit::modules::ModuleGraph;

/// The workspace's crates, every one checked; a crate added to `crates/` is checked too.
const CRATES: [&str; 5] = [
    "tollgate",
    "tollgate-bench",
    "tollgate-instructions",
    "tollgate-server",
    "tollgate-testkit",
];

#[test]
fn no_crate_has_modules_naming_each_other_in_a_circle() {
    let workspace = Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .and_then(Path::parent)
        .expect("the test kit sits in crates/ of the workspace");
    let mut crates: Vec<String> = std::fs::read_dir(workspace.join("crates"))
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.join("Cargo.toml").is_file() && path.join("src").is_dir())
        .map(|path| path.file_name().unwrap().to_string_lossy().into_owned())
        .collect();
    crates.sort();
    for known in CRATES {
        assert!(crates.iter().any(|c| c == known), "{known} in {crates:?}");
    }
    let mut refused = Vec::new();
    for name in &crates {
        let graph = ModuleGraph::read(&workspace.join("crates").join(name).join("src")).unwrap();
        assert!(
            !graph.siblings(&[]).is_empty() || name == "tollgate-instructions",
            "{name} has modules"
        );
        let circles = graph.circles();
        let report: Vec<String> = circles.iter().map(ToString::to_string).collect();
        if !circles.is_empty() {
            refused.push(format!("{name}:\n{}", report.join("\n")));
        }
    }
    assert!(
        refused.is_empty(),
        "modules naming each other in a circle (move what both need where both can name it):\n{}",
        refused.join("\n")
    );
}
