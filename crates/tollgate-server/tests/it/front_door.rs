//! Issue 46: one front door into the decision core. Read from the source, the core
//! (`src/limiter`) imports no protocol crate (neither `envoy_types` nor axum, hyper, tonic) nor
//! the server's options; and the front ends (`src/api`, `src/envoy`, `src/resp`, and `src/web`,
//! the HTTP plumbing two of them share) name none of the rules the core keeps: the key bound,
//! the switch of client-chosen numbers, the strikes of failed authentications, the
//! reservations' insides, the store call and its rounds. A new mention fails here, naming the
//! file and the word.

use std::path::{Path, PathBuf};

/// What the core must not name (identifiers, or a path for the options).
const NOT_IN_THE_CORE: [&str; 6] = [
    "envoy_types",
    "axum",
    "hyper",
    "tonic",
    "crate::options",
    "descriptors",
];

/// What only the core may name: each is a rule written there once.
const ONLY_IN_THE_CORE: [&str; 15] = [
    // The key bound.
    "MAX_KEY_BYTES",
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

/// The Rust files under `dir`, depth first.
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

/// `text` without its comments (line comments, doc comments included) and string literals:
/// what the code names, not what it says.
fn code(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    // A string may go on over several lines.
    let (mut in_string, mut escaped) = (false, false);
    for line in text.lines() {
        let mut chars = line.chars().peekable();
        while let Some(c) = chars.next() {
            if in_string {
                match (escaped, c) {
                    (false, '\\') => escaped = true,
                    (false, '"') => in_string = false,
                    _ => escaped = false,
                }
                continue;
            }
            match c {
                '"' => in_string = true,
                '/' if chars.peek() == Some(&'/') => break,
                // A character literal of a quote or an escape (`'"'`, `'\\'`) is no string.
                '\'' if matches!(chars.peek(), Some('"' | '\\')) => {
                    if chars.next() == Some('\\') {
                        chars.next();
                    }
                    chars.next();
                }
                c => out.push(c),
            }
        }
        escaped = false;
        out.push('\n');
    }
    out
}

/// Whether `code` names `word`: a path (with `::`) as written, else an identifier whole.
fn names(code: &str, word: &str) -> bool {
    if word.contains("::") {
        return code.contains(word);
    }
    code.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .any(|token| token == word)
}

/// Each `(file, word)` of `words` that the code of the files under `dirs` names.
fn mentions(src: &Path, dirs: &[&str], words: &[&str]) -> Vec<(String, String)> {
    let mut found = Vec::new();
    for dir in dirs {
        for file in files(&src.join(dir)) {
            let code = code(&std::fs::read_to_string(&file).unwrap());
            for word in words {
                if names(&code, word) {
                    let name = file.strip_prefix(src).unwrap().display().to_string();
                    found.push((name, (*word).to_owned()));
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
fn the_core_imports_no_protocol_crate_nor_the_options() {
    assert_eq!(
        mentions(&src(), &["limiter"], &NOT_IN_THE_CORE),
        vec![],
        "the core naming a protocol crate or the options"
    );
}

#[test]
fn no_front_end_names_a_rule_of_the_core() {
    let front_ends = ["api", "envoy", "resp", "web"];
    assert_eq!(
        mentions(&src(), &front_ends, &ONLY_IN_THE_CORE),
        vec![],
        "a front end naming what only the core may"
    );
}

#[test]
fn the_checks_see_code_and_not_comments() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("api")).unwrap();
    let file = dir.path().join("api/check.rs");
    std::fs::write(
        &file,
        "// MAX_KEY_BYTES in a comment is fine\nlet n = limiter::MAX_KEY_BYTES; // and here\n\
         let q = ['\"', '\\\\']; let r = ask_store;\n\
         let m = \"or in a string: Strikes \\\n Penalty\"; let c = MonotonicClock::new();\n",
    )
    .unwrap();
    assert_eq!(
        mentions(dir.path(), &["api"], &ONLY_IN_THE_CORE),
        vec![
            ("api/check.rs".to_owned(), "MAX_KEY_BYTES".to_owned()),
            ("api/check.rs".to_owned(), "ask_store".to_owned())
        ]
    );
    std::fs::write(&file, "/// a doc that names MAX_KEY_BYTES\nfn f() {}\n").unwrap();
    assert_eq!(mentions(dir.path(), &["api"], &ONLY_IN_THE_CORE), vec![]);
    // `tonic` is not `MonotonicClock`; a path is found as written.
    std::fs::write(
        &file,
        "use tollgate::MonotonicClock;\nuse crate::options::X;\n",
    )
    .unwrap();
    assert_eq!(
        mentions(dir.path(), &["api"], &NOT_IN_THE_CORE),
        vec![("api/check.rs".to_owned(), "crate::options".to_owned())]
    );
}
