//! Documentation a newcomer can walk. The README is a front door — at most
//! [`MAX_README_LINES`] lines, every page under `docs/` linked from it, no benchmark table (the
//! tables and their dates live in docs/performance.md) — and every relative link of the README
//! and the pages leads somewhere: to a file that exists and, when it names a section, to a
//! heading of that file. Each check is also shown failing on a text made wrong.
//!
//! Beside them, a claim of docs/security.md that only a running program can show: the store's
//! password is never printed.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::support::{Tollgate, write};

/// The most lines the README may have.
const MAX_README_LINES: usize = 250;

/// The repository's root.
fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Every file under `docs/`, as a path from the root (`docs/server.md`).
fn doc_files() -> Vec<String> {
    fn walk(dir: &Path, from: &Path, out: &mut Vec<String>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                walk(&path, from, out);
            } else {
                let relative = path.strip_prefix(from).unwrap();
                out.push(relative.to_str().unwrap().replace('\\', "/"));
            }
        }
    }
    let mut files = Vec::new();
    walk(&root().join("docs"), &root(), &mut files);
    files.sort();
    files
}

/// The Markdown pages whose links are checked: the README and every page under `docs/`.
fn pages() -> Vec<(String, String)> {
    let mut pages = vec![("README.md".to_owned(), read(&root().join("README.md")))];
    for file in doc_files().into_iter().filter(|f| f.ends_with(".md")) {
        let text = read(&root().join(&file));
        pages.push((file, text));
    }
    pages
}

/// The lines of `markdown` that are prose: fenced code blocks dropped, and inline code spans
/// blanked (so that `[default: X]` in backticks is not read as a link).
fn prose(markdown: &str) -> Vec<String> {
    let mut lines = Vec::new();
    let mut fenced = false;
    for line in markdown.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if fenced {
            continue;
        }
        let mut out = String::with_capacity(line.len());
        let mut in_code = false;
        for c in line.chars() {
            if c == '`' {
                in_code = !in_code;
                out.push(c);
            } else {
                out.push(if in_code { ' ' } else { c });
            }
        }
        lines.push(out);
    }
    lines
}

/// The targets of the inline links `[text](target)` in `markdown`'s prose.
fn links(markdown: &str) -> Vec<String> {
    let mut targets = Vec::new();
    for line in prose(markdown) {
        let mut rest = line.as_str();
        while let Some(at) = rest.find("](") {
            let after = &rest[at + 2..];
            let Some(end) = after.find(')') else { break };
            targets.push(after[..end].trim().to_owned());
            rest = &after[end..];
        }
    }
    targets
}

/// The anchors GitHub gives the headings of `markdown`: lowercased, every character that is not
/// a letter, a digit, a space, `-` or `_` dropped, spaces made `-`; a repeated one gets `-1`,
/// `-2`, ...
fn anchors(markdown: &str) -> BTreeSet<String> {
    let mut anchors = BTreeSet::new();
    let mut fenced = false;
    for line in markdown.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        let Some(heading) = line.strip_prefix('#').filter(|_| !fenced) else {
            continue;
        };
        let text = heading.trim_start_matches('#');
        if !text.starts_with(' ') {
            continue;
        }
        let slug: String = text
            .trim()
            .to_lowercase()
            .chars()
            .filter(|c| c.is_alphanumeric() || matches!(c, ' ' | '-' | '_'))
            .map(|c| if c == ' ' { '-' } else { c })
            .collect();
        let mut unique = slug.clone();
        let mut n = 0;
        while anchors.contains(&unique) {
            n += 1;
            unique = format!("{slug}-{n}");
        }
        anchors.insert(unique);
    }
    anchors
}

/// What is wrong with the relative links of the page at `file` (a path from the root), whose
/// text is `text`: a target that does not exist, or a section its file does not have.
fn link_problems(file: &str, text: &str) -> Vec<String> {
    let dir = Path::new(file).parent().unwrap_or(Path::new(""));
    let mut problems = Vec::new();
    for target in links(text) {
        if target.contains("://") || target.starts_with("mailto:") {
            continue;
        }
        let (path, anchor) = target.split_once('#').unwrap_or((&target, ""));
        let (resolved, linked_text) = if path.is_empty() {
            (root().join(file), Some(text.to_owned()))
        } else {
            let resolved = root().join(dir).join(path);
            if !resolved.exists() {
                problems.push(format!(
                    "{file}: the link ({target}) leads to {}, which does not exist",
                    resolved.display()
                ));
                continue;
            }
            let linked_text =
                (resolved.is_file() && path.ends_with(".md")).then(|| read(&resolved));
            (resolved, linked_text)
        };
        if anchor.is_empty() {
            continue;
        }
        match linked_text {
            Some(linked) if anchors(&linked).contains(anchor) => {}
            Some(_) => problems.push(format!(
                "{file}: the link ({target}) names a section that {} has no heading for",
                resolved.display()
            )),
            None => problems.push(format!(
                "{file}: the link ({target}) names a section of a file that is not Markdown"
            )),
        }
    }
    problems
}

/// Whether a table row holds a figure: a digit outside its link targets. A benchmark table is
/// made of figures; the README's own tables (of pages and what they hold) need none.
fn has_figure(row: &str) -> bool {
    let mut text = String::new();
    let mut rest = row;
    while let Some(at) = rest.find("](") {
        text.push_str(&rest[..at]);
        rest = rest[at..].find(')').map_or("", |end| &rest[at + end + 1..]);
    }
    text.push_str(rest);
    text.chars().any(|c| c.is_ascii_digit())
}

/// What keeps `readme` from being a front door to the pages `docs` (paths from the root).
fn front_door_problems(readme: &str, docs: &[String]) -> Vec<String> {
    let mut problems = Vec::new();
    let lines = readme.lines().count();
    if lines > MAX_README_LINES {
        problems.push(format!(
            "README.md has {lines} lines, more than {MAX_README_LINES}: move the detail into a \
             page under docs/ and link it"
        ));
    }
    let linked: BTreeSet<String> = links(readme)
        .iter()
        .map(|t| t.split('#').next().unwrap_or_default().to_owned())
        .collect();
    for doc in docs {
        if !linked.contains(doc) {
            problems.push(format!("README.md does not link {doc}"));
        }
    }
    for row in prose(readme)
        .iter()
        .filter(|l| l.trim_start().starts_with('|'))
        .filter(|l| !l.chars().all(|c| matches!(c, '|' | '-' | ':' | ' ')))
    {
        if has_figure(row) {
            problems.push(format!(
                "README.md has a table with figures, which belong in docs/performance.md with \
                 their date and machine: {row:?}"
            ));
        }
    }
    problems
}

#[test]
fn the_readme_is_a_front_door() {
    let docs = doc_files();
    for page in [
        "docs/server.md",
        "docs/configuration.md",
        "docs/envoy.md",
        "docs/redis-cell.md",
        "docs/reliability.md",
        "docs/security.md",
        "docs/operations.md",
        "docs/performance.md",
        "docs/capacity.md",
    ] {
        assert!(docs.iter().any(|d| d == page), "{page} is missing");
    }
    let problems = front_door_problems(&read(&root().join("README.md")), &docs);
    assert!(problems.is_empty(), "\n- {}", problems.join("\n- "));
}

#[test]
fn every_relative_link_resolves() {
    let pages = pages();
    assert!(pages.len() >= 10, "{} pages", pages.len());
    let mut problems = Vec::new();
    let mut count = 0;
    for (file, text) in &pages {
        count += links(text).len();
        problems.extend(link_problems(file, text));
    }
    assert!(
        count > 50,
        "only {count} links found: is the link reader broken?"
    );
    assert!(problems.is_empty(), "\n- {}", problems.join("\n- "));
}

#[test]
fn the_docs_checks_catch_what_they_should() {
    let readme = read(&root().join("README.md"));
    let docs = doc_files();

    let long = format!("{readme}{}", "more\n".repeat(MAX_README_LINES));
    let problems = front_door_problems(&long, &docs);
    assert!(problems.iter().any(|p| p.contains("lines")), "{problems:?}");

    let unlinked = readme.replace("](docs/security.md)", "](https://example.com/security)");
    assert_ne!(unlinked, readme);
    let problems = front_door_problems(&unlinked, &docs);
    assert!(
        problems
            .iter()
            .any(|p| p.contains("does not link docs/security.md")),
        "{problems:?}"
    );

    // A benchmark table brought back from the performance page.
    let performance = read(&root().join("docs/performance.md"));
    let table: String = performance
        .lines()
        .skip_while(|l| !l.starts_with("| scenario | threads |"))
        .take_while(|l| l.starts_with('|'))
        .map(|l| format!("{l}\n"))
        .collect();
    assert!(
        table.lines().count() > 3,
        "no memory table in performance.md"
    );
    let problems = front_door_problems(&format!("{readme}\n{table}"), &docs);
    assert!(
        problems.iter().any(|p| p.contains("table with figures")),
        "{problems:?}"
    );
    assert!(!has_figure(
        "| [docs/server.md](docs/server.md) | the server |"
    ));
    assert!(has_figure("| tollgate | 1 | 87,116 |"));

    // Links: a missing file, a missing section, a section that exists, one in the same page.
    let page = "[a](missing.md) [b](server.md#no-such-section) [c](server.md#reservations-and-buckets) \
                [d](#a-heading) `[e](not-a-link.md)`\n\n## A heading\n";
    let problems = link_problems("docs/test.md", page);
    assert_eq!(problems.len(), 2, "{problems:#?}");
    assert!(problems[0].contains("(missing.md)"), "{problems:?}");
    assert!(problems[1].contains("no-such-section"), "{problems:?}");
    let anchors = anchors(
        "# Replacing envoyproxy/ratelimit\n## `tollgate serve` options\n## Cases, each a test\n\
         ## Cases, each a test\n```\n# not a heading\n```\n",
    );
    let expected: BTreeSet<String> = [
        "replacing-envoyproxyratelimit",
        "tollgate-serve-options",
        "cases-each-a-test",
        "cases-each-a-test-1",
    ]
    .map(String::from)
    .into();
    assert_eq!(anchors, expected);
}

/// docs/security.md: where the server names its store, the URL's user and password are `***`.
#[test]
fn the_store_password_is_not_printed() {
    let dir = tempfile::tempdir().unwrap();
    // A policy the Redis store cannot decide, so that `config check` names the store.
    let file = write(
        dir.path(),
        "t.toml",
        "[store]\nurl = \"redis://admin:hunter2@127.0.0.1:1\"\n[policies.api]\n\
         algorithm = \"sliding_counter\"\ncapacity = 100000000\nperiod = \"1d\"\n",
    );
    let out = Command::new(env!("CARGO_BIN_EXE_tollgate"))
        .args(["config", "check"])
        .arg(&file)
        .output()
        .unwrap();
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!out.status.success(), "{said}");
    assert!(said.contains("redis at redis://***@127.0.0.1:1"), "{said}");
    assert!(
        !said.contains("hunter2") && !said.contains("admin"),
        "{said}"
    );

    // The banner of a server on a store that does not answer (it serves anyway).
    let server = Tollgate::start(&["--store", "redis://admin:hunter2@127.0.0.1:1"]);
    assert!(
        server.banner.contains("redis at redis://***@127.0.0.1:1"),
        "{}",
        server.banner
    );
    assert!(!server.banner.contains("hunter2"), "{}", server.banner);
}

/// `cargo test` at the workspace's root tests the library too (its members by default hold
/// every crate but the benchmarks'), and `cargo run` still finds one binary to run there.
#[test]
fn plain_cargo_test_tests_the_library_and_cargo_run_starts_the_server() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let manifest: toml::Table = std::fs::read_to_string(root.join("Cargo.toml"))
        .unwrap()
        .parse()
        .unwrap();
    let defaults: Vec<&str> = manifest["workspace"]["default-members"]
        .as_array()
        .expect("default-members")
        .iter()
        .filter_map(|m| m.as_str())
        .collect();
    for member in [
        "crates/tollgate",
        "crates/tollgate-server",
        "crates/tollgate-testkit",
    ] {
        assert!(defaults.contains(&member), "{member} in {defaults:?}");
    }
    let binaries: Vec<&str> = defaults
        .iter()
        .filter(|m| {
            let cargo = std::fs::read_to_string(root.join(m).join("Cargo.toml")).unwrap();
            cargo.contains("[[bin]]") || root.join(m).join("src/main.rs").exists()
        })
        .copied()
        .collect();
    assert_eq!(
        binaries,
        ["crates/tollgate-server"],
        "cargo run needs one binary"
    );
}
