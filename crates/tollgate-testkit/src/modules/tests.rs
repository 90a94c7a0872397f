//! The rule on small made-up crates: what is a step between siblings, what is not, and what a
//! circle's message names.

use super::*;

fn sources(files: &[(&str, &str)]) -> ModuleGraph {
    ModuleGraph::from_sources(Path::new("src"), files.iter().copied())
}

fn names(graph: &ModuleGraph) -> Vec<(Vec<String>, Vec<String>)> {
    graph
        .circles()
        .into_iter()
        .map(|c| (c.parent().to_vec(), c.names().to_vec()))
        .collect()
}

fn strings(words: &[&str]) -> Vec<String> {
    words.iter().map(|w| (*w).to_owned()).collect()
}

#[test]
fn siblings_naming_each_other_deep_down_are_a_circle_named_by_files() {
    let graph = sources(&[
        ("lib.rs", "mod store;"),
        ("store/mod.rs", "mod redis;"),
        ("store/redis/mod.rs", "mod plan;\nmod script;"),
        ("store/redis/plan.rs", "use super::script::Script;"),
        (
            "store/redis/script.rs",
            "fn f() {}\n/// Built from a [`Plan`](crate::store::redis::plan::Plan).\nstruct S;",
        ),
    ]);
    let circles = graph.circles();
    assert_eq!(circles.len(), 1, "{circles:?}");
    assert_eq!(circles[0].parent(), ["store", "redis"]);
    assert_eq!(
        circles[0].to_string(),
        "src/store/redis/plan.rs -> src/store/redis/script.rs -> src/store/redis/plan.rs\n    \
         src/store/redis/plan.rs:1 names super::script::Script\n    \
         src/store/redis/script.rs:2 names crate::store::redis::plan::Plan"
    );
}

#[test]
fn a_child_naming_its_parent_or_a_parent_its_child_is_no_step() {
    let graph = sources(&[
        ("lib.rs", "mod middleware;\npub use middleware::Layer;"),
        (
            "middleware/mod.rs",
            "mod layer;\nmod service;\npub use layer::Layer;\npub struct Shared;\nfn f(_: service::S) {}",
        ),
        (
            "middleware/layer.rs",
            "use super::Shared;\npub struct Layer;",
        ),
        (
            "middleware/service.rs",
            "use super::Shared;\nuse crate::middleware::Shared as Same;\npub struct S;",
        ),
    ]);
    assert_eq!(names(&graph), []);
    assert_eq!(
        graph.siblings(&["middleware"]),
        BTreeMap::from([
            ("layer".to_owned(), BTreeSet::new()),
            ("service".to_owned(), BTreeSet::new()),
        ])
    );
}

#[test]
fn a_name_the_parent_only_re_exports_leads_to_the_sibling() {
    let graph = sources(&[
        ("lib.rs", "mod middleware;"),
        (
            "middleware/mod.rs",
            "mod layer;\nmod service;\npub use self::service::{Service, Future as Pending};",
        ),
        ("middleware/layer.rs", "pub struct Layer(super::Service);"),
        (
            "middleware/service.rs",
            "pub struct Service;\npub struct Future;\nfn f(_: crate::middleware::layer::Layer) {}",
        ),
    ]);
    assert_eq!(
        names(&graph),
        [(strings(&["middleware"]), strings(&["layer", "service"]))]
    );
}

#[test]
fn a_folder_stands_for_its_files_and_a_longer_loop_is_found_whole() {
    let graph = sources(&[
        ("lib.rs", "mod cli;\nmod all;\nmod servers;\nmod tls;"),
        ("cli.rs", "use crate::servers::Servers;"),
        ("all/mod.rs", "mod steps;"),
        ("all/steps.rs", "use crate::tls;"),
        (
            "servers.rs",
            "/// Started by [`crate::all::run`].\nstruct Servers;",
        ),
        ("tls.rs", "fn f() { crate::cli::parse(); }"),
    ]);
    let circles = graph.circles();
    assert_eq!(
        names(&graph),
        [(vec![], strings(&["all", "tls", "cli", "servers"]))]
    );
    assert!(
        circles[0]
            .to_string()
            .starts_with("src/all/ -> src/tls.rs -> src/cli.rs -> src/servers.rs -> src/all/\n"),
        "{}",
        circles[0]
    );
    assert!(
        circles[0]
            .to_string()
            .contains("src/all/steps.rs:1 names crate::tls")
    );
}

#[test]
fn inline_modules_are_siblings_too_and_their_super_is_their_file() {
    let graph = sources(&[
        ("lib.rs", "mod a;\nmod b;"),
        (
            "a.rs",
            "pub fn f() {}\n#[cfg(test)]\nmod tests {\n    use super::*;\n    use crate::b::g;\n}",
        ),
        ("b.rs", "pub fn g() {}\nfn h() { crate::a::f(); }"),
    ]);
    let circles = graph.circles();
    assert_eq!(names(&graph), [(vec![], strings(&["a", "b"]))]);
    assert_eq!(
        circles[0].to_string(),
        "src/a.rs -> src/b.rs -> src/a.rs\n    src/a.rs:5 names crate::b::g\n    \
         src/b.rs:2 names crate::a::f"
    );
    let inline = sources(&[(
        "lib.rs",
        "mod one {\n    pub fn f() { super::two::g(); }\n}\nmod two {\n    pub fn g() { super::one::f(); }\n}",
    )]);
    assert_eq!(
        inline.circles()[0].to_string(),
        "src/lib.rs (mod one on line 1) -> src/lib.rs (mod two on line 4) -> src/lib.rs (mod one on line 1)\n    \
         src/lib.rs:2 names super::two::g\n    src/lib.rs:5 names super::one::f"
    );
}

#[test]
fn comments_strings_and_other_crates_are_not_mentions() {
    let graph = sources(&[
        ("lib.rs", "mod a;\nmod b;"),
        ("a.rs", "use crate::b::g;"),
        (
            "b.rs",
            "// crate::a::f would be a circle\nconst S: &str = \"crate::a::f\";\nuse a::f;\nuse ::a::f as g;",
        ),
    ]);
    assert_eq!(names(&graph), []);
    assert_eq!(
        graph.siblings(&[]),
        BTreeMap::from([
            ("a".to_owned(), BTreeSet::from(["b".to_owned()])),
            ("b".to_owned(), BTreeSet::new()),
        ])
    );
}

#[test]
fn read_finds_the_files_of_a_folder() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("src");
    std::fs::create_dir_all(src.join("clock")).unwrap();
    std::fs::write(src.join("lib.rs"), "mod clock;\nmod nanos;").unwrap();
    std::fs::write(src.join("clock.rs"), "mod coarse;").unwrap();
    std::fs::write(src.join("clock/coarse.rs"), "use crate::nanos::Nanos;").unwrap();
    std::fs::write(
        src.join("nanos.rs"),
        "use crate::clock::Clock;\npub struct Nanos;",
    )
    .unwrap();
    std::fs::write(src.join("notes.txt"), "crate::nanos").unwrap();
    let circles = ModuleGraph::read(&src).unwrap().circles();
    assert_eq!(circles.len(), 1);
    let clock = format!("{}/clock.rs + {}/clock/", src.display(), src.display());
    let nanos = format!("{}/nanos.rs", src.display());
    assert!(
        circles[0]
            .to_string()
            .starts_with(&format!("{clock} -> {nanos} -> {clock}\n")),
        "{}",
        circles[0]
    );
}
