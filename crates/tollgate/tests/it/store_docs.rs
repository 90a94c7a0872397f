//! Every public struct, enum and trait of `tollgate::store` has an example in its doc comment
//! (issue 29, point 13): a new type without one fails here, naming it. The examples themselves
//! are compiled and run by the doc tests.

use std::path::{Path, PathBuf};

/// The Rust files under `dir`, recursively.
fn sources(dir: &Path, found: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            sources(&path, found);
        } else if path.extension().is_some_and(|e| e == "rs") {
            found.push(path);
        }
    }
}

/// The public items of `text` (struct, enum, trait) whose doc comment holds no code block.
fn undocumented(text: &str) -> Vec<String> {
    let lines: Vec<&str> = text.lines().collect();
    let mut missing = Vec::new();
    for (i, line) in lines.iter().enumerate() {
        let item = line.trim_start();
        if !["pub struct ", "pub enum ", "pub trait "]
            .iter()
            .any(|start| item.starts_with(start))
        {
            continue;
        }
        let mut has_example = false;
        for above in lines[..i].iter().rev().map(|l| l.trim_start()) {
            if above.starts_with("#[") || above.starts_with("#![") {
                continue;
            }
            let Some(doc) = above.strip_prefix("///") else {
                break;
            };
            has_example |= doc.trim_start().starts_with("```");
        }
        if !has_example {
            missing.push(item.trim_end_matches(" {").to_owned());
        }
    }
    missing
}

#[test]
fn every_public_store_type_has_a_doc_example() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/store");
    let mut files = Vec::new();
    sources(&root, &mut files);
    let mut missing = Vec::new();
    let mut counted = 0;
    for file in &files {
        let text = std::fs::read_to_string(file).unwrap();
        counted += text
            .lines()
            .map(str::trim_start)
            .filter(|l| {
                ["pub struct ", "pub enum ", "pub trait "]
                    .iter()
                    .any(|s| l.starts_with(s))
            })
            .count();
        for item in undocumented(&text) {
            missing.push(format!(
                "{}: {item}",
                file.strip_prefix(&root).unwrap().display()
            ));
        }
    }
    assert!(
        counted >= 20,
        "found only {counted} public types: is the path right?"
    );
    assert!(
        missing.is_empty(),
        "without a doc example:\n{}",
        missing.join("\n")
    );
}

#[test]
fn the_scan_sees_a_missing_example() {
    let text = "/// Documented.\n///\n/// ```\n/// ```\n#[derive(Debug)]\npub struct A;\n\n/// Words only.\npub enum B {}\n";
    assert_eq!(undocumented(text), ["pub enum B {}"]);
}
