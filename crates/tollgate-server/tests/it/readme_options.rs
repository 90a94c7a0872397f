//! What the docs say is what the program does. The table of `tollgate serve`
//! options in docs/configuration.md (section "`tollgate serve` options"; it lived in the README
//! until the README became a front door) is checked against the real binary's
//! `tollgate serve --help`:
//!
//! - every long option `--help` lists has a row, and every option a row names exists;
//! - where `--help` prints `[default: X]`, the page's default is X (backticks and thousands
//!   separators aside: `2,097,152` is `2097152`);
//! - a flag without a default is `off` on the page;
//! - an option whose default depends on the store has no `[default: …]`; its help text says
//!   `(default: 50 for Redis and memory, 100 for PostgreSQL)`, and the page must give the same
//!   value for the same stores: `50 (Redis, memory), 100 (PostgreSQL)`.
//!
//! `a_docs_table_that_disagrees_with_help_is_caught` shows each check failing on a page edited
//! to be wrong.

use std::collections::{BTreeMap, BTreeSet};
use std::process::Command;

/// The page that holds the options table, as compiled in: editing it rebuilds this test.
const PAGE: &str = include_str!("../../../../docs/configuration.md");

/// The heading of the table's section.
const SECTION: &str = "\n## `tollgate serve` options\n";

/// An option of `--help`.
#[derive(Debug, Default)]
struct HelpOption {
    /// `--name <VALUE>` rather than a flag.
    takes_value: bool,
    /// What `[default: …]` says.
    default: Option<String>,
    /// The description, on one line.
    text: String,
}

/// `tollgate serve --help`, from the binary this package builds.
fn serve_help() -> String {
    let output = Command::new(env!("CARGO_BIN_EXE_tollgate"))
        .args(["serve", "--help"])
        .output()
        .expect("tollgate serve --help runs");
    assert!(
        output.status.success(),
        "tollgate serve --help failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout).expect("the help is UTF-8")
}

/// The long options of clap's long help: an option's line is indented by 2 to 6 spaces and starts
/// with `--name` (or `-h, --name`); its description and `[default: …]` follow, indented more.
fn parse_help(help: &str) -> BTreeMap<String, HelpOption> {
    let mut options = BTreeMap::new();
    let mut current: Option<String> = None;
    for line in help.lines() {
        let trimmed = line.trim_start();
        let indent = line.len() - trimmed.len();
        if (2..=6).contains(&indent) {
            let spec = trimmed
                .split_once(", ")
                .filter(|(short, _)| short.starts_with('-') && !short.starts_with("--"))
                .map_or(trimmed, |(_, long)| long);
            if let Some(spec) = spec.strip_prefix("--") {
                let name = spec
                    .split_whitespace()
                    .next()
                    .unwrap_or_default()
                    .to_owned();
                let option = HelpOption {
                    takes_value: spec.contains('<'),
                    ..HelpOption::default()
                };
                options.insert(name.clone(), option);
                current = Some(name);
                continue;
            }
        }
        let Some(option) = current.as_ref().and_then(|name| options.get_mut(name)) else {
            continue;
        };
        match trimmed
            .strip_prefix("[default: ")
            .and_then(|d| d.strip_suffix(']'))
        {
            Some(default) => option.default = Some(default.to_owned()),
            None if !trimmed.is_empty() => {
                option.text.push_str(trimmed);
                option.text.push(' ');
            }
            None => {}
        }
    }
    options
}

/// A row of the page's options table.
#[derive(Debug)]
struct Row {
    /// The options it names, without `--` and placeholders: `postgres-schema`, `postgres-table`.
    names: Vec<String>,
    /// Its default cell, as written.
    default: String,
    /// The whole row, for messages.
    line: String,
}

/// Splits a Markdown table row into its cells, ignoring `|` inside backticks.
fn cells(line: &str) -> Vec<String> {
    let mut cells = Vec::new();
    let mut cell = String::new();
    let mut in_code = false;
    for c in line.trim().trim_start_matches('|').chars() {
        match c {
            '`' => {
                in_code = !in_code;
                cell.push(c);
            }
            '|' if !in_code => cells.push(std::mem::take(&mut cell).trim().to_owned()),
            _ => cell.push(c),
        }
    }
    if !cell.trim().is_empty() {
        cells.push(cell.trim().to_owned());
    }
    cells
}

/// The rows of the options table in the page's section [`SECTION`] (rows that start with
/// "| `--"), or an error saying what is missing.
fn parse_page(page: &str) -> Result<Vec<Row>, String> {
    let start = page
        .find(SECTION)
        .ok_or_else(|| format!("docs/configuration.md has no section {:?}", SECTION.trim()))?;
    let section = &page[start + 1..];
    let section = &section[..section[1..]
        .find("\n## ")
        .map_or(section.len(), |end| end + 1)];
    let mut rows = Vec::new();
    for line in section.lines().filter(|l| l.starts_with("| `--")) {
        let cells = cells(line);
        let [names, default, ..] = cells.as_slice() else {
            return Err(format!(
                "a row of the options table without a default: {line:?}"
            ));
        };
        let names = names
            .split('`')
            .filter_map(|span| span.strip_prefix("--"))
            .map(|spec| {
                spec.split_whitespace()
                    .next()
                    .unwrap_or_default()
                    .to_owned()
            })
            .collect();
        rows.push(Row {
            names,
            default: default.clone(),
            line: line.to_owned(),
        });
    }
    if rows.is_empty() {
        return Err(format!(
            "no options table (rows starting with \"| `--\") under {:?}",
            SECTION.trim()
        ));
    }
    Ok(rows)
}

/// A default as written on the page or in `--help`: backticks dropped, and thousands separators
/// dropped from a number (`2,097,152` is `2097152`).
fn normalized(default: &str) -> String {
    let bare = default.trim().replace('`', "");
    let groups: Vec<&str> = bare.split(',').collect();
    let separated = groups.len() > 1
        && (1..=3).contains(&groups[0].len())
        && groups.iter().all(|g| g.chars().all(|c| c.is_ascii_digit()))
        && groups[1..].iter().all(|g| g.len() == 3);
    if separated { groups.concat() } else { bare }
}

/// The store names of a list such as "Redis, memory" or "Redis and memory", lowercased.
fn stores(list: &str) -> BTreeSet<String> {
    list.split(',')
        .flat_map(|part| part.split(" and "))
        .map(|store| store.trim().to_lowercase())
        .filter(|store| !store.is_empty())
        .collect()
}

/// Per-store defaults as the page writes them, `50 (Redis, memory), 100 (PostgreSQL)`: each
/// store and its value. `None` when the text is not of that form.
fn page_per_store(default: &str) -> Option<BTreeMap<String, String>> {
    let mut map = BTreeMap::new();
    let mut rest = default.trim();
    while !rest.is_empty() {
        let (value, after) = rest.split_once('(')?;
        let (list, after) = after.split_once(')')?;
        let value = normalized(value);
        if value.is_empty() {
            return None;
        }
        for store in stores(list) {
            map.insert(store, value.clone());
        }
        rest = after.trim_start().trim_start_matches(',').trim_start();
    }
    (!map.is_empty()).then_some(map)
}

/// Per-store defaults as `--help` writes them, `(default: 50 for Redis and memory, 100 for
/// PostgreSQL)`: each store and its value. `None` when the help text gives none.
fn help_per_store(text: &str) -> Option<BTreeMap<String, String>> {
    let (_, after) = text.split_once("(default: ")?;
    let (list, _) = after.split_once(')')?;
    let mut map = BTreeMap::new();
    // "50 for Redis and memory, 100 for PostgreSQL": a new item starts with a value and " for ".
    let mut items: Vec<String> = Vec::new();
    for part in list.split(", ") {
        match items.last_mut() {
            Some(last) if !part.contains(" for ") => {
                last.push_str(", ");
                last.push_str(part);
            }
            _ => items.push(part.to_owned()),
        }
    }
    for item in items {
        let (value, list) = item.split_once(" for ")?;
        for store in stores(list) {
            map.insert(store, normalized(value));
        }
    }
    (!map.is_empty()).then_some(map)
}

/// Everything on which the page's table and `--help` disagree, one message each, naming the
/// option and quoting both.
fn disagreements(help: &BTreeMap<String, HelpOption>, rows: &[Row]) -> Vec<String> {
    let mut problems = Vec::new();
    for name in help.keys().filter(|name| *name != "help") {
        if !rows.iter().any(|row| row.names.contains(name)) {
            let option = &help[name];
            problems.push(format!(
                "`--{name}` is in `tollgate serve --help` ({:?}, default {:?}) but has no row in \
                 the options table of docs/configuration.md",
                option.text.trim(),
                option.default
            ));
        }
    }
    for row in rows {
        if row.names.is_empty() {
            problems.push(format!("a row names no option: {:?}", row.line));
            continue;
        }
        // A row of several options gives one default each ("`tollgate`, `buckets`"), or one
        // for all of them.
        let split: Vec<&str> = row.default.split(", ").collect();
        let defaults: Vec<&str> = if row.names.len() == 1 {
            vec![row.default.as_str()]
        } else if split.len() == row.names.len() {
            split
        } else if split.len() == 1 {
            vec![row.default.as_str(); row.names.len()]
        } else {
            problems.push(format!(
                "the row {:?} names {} options but gives {} defaults",
                row.line,
                row.names.len(),
                split.len()
            ));
            continue;
        };
        for (name, page) in row.names.iter().zip(defaults) {
            let Some(option) = help.get(name) else {
                problems.push(format!(
                    "the row {:?} names `--{name}`, which `tollgate serve --help` does not \
                     list",
                    row.line
                ));
                continue;
            };
            if let Some(problem) = disagreement(name, option, page) {
                problems.push(problem);
            }
        }
    }
    problems
}

/// How the page's default `page` for `--name` disagrees with `--help`, if it does.
fn disagreement(name: &str, option: &HelpOption, page: &str) -> Option<String> {
    let text = option.text.trim();
    match (&option.default, option.takes_value) {
        (Some(help), _) => (normalized(page) != normalized(help)).then(|| {
            format!(
                "`--{name}`: the page's default is {page:?}, `tollgate serve --help` says \
                 [default: {help}]"
            )
        }),
        (None, false) => (normalized(page) != "off").then(|| {
            format!(
                "`--{name}` is a flag, off unless given (`--help`: {text:?}): the page's \
                 default should be `off`, not {page:?}"
            )
        }),
        // A listener that is off unless given an address.
        (None, true) if text.contains("off unless given") => {
            (normalized(page) != "off").then(|| {
                format!(
                    "`--{name}` is off unless given (`--help`: {text:?}): the page's default \
                     should be `off`, not {page:?}"
                )
            })
        }
        // An option unset unless given, or named by its environment variable.
        (None, true) if text.contains("[env: ") => {
            let var = text.split("[env: ").nth(1)?.split('=').next()?;
            let expected = format!("none (`{var}`)");
            (normalized(page) != normalized(&expected)).then(|| {
                format!(
                    "`--{name}` has no default but the environment's {var}: the page's \
                     default should be {expected:?}, not {page:?}"
                )
            })
        }
        (None, true) => match (help_per_store(text), page_per_store(page)) {
            (Some(help), Some(ours)) if help == ours => None,
            (Some(help), _) => Some(format!(
                "`--{name}`: the page's default is {page:?}, `tollgate serve --help` says \
                 {text:?} (per store: {help:?})"
            )),
            (None, _) => Some(format!(
                "`--{name}`: `tollgate serve --help` gives no default ({text:?}), the page's \
                 is {page:?}; give one in the help, or check this option here"
            )),
        },
    }
}

#[test]
fn the_docs_option_table_is_what_help_says() {
    let help_text = serve_help();
    let help = parse_help(&help_text);
    // The parser found every long option the help mentions, wherever it mentions one.
    let mentioned: BTreeSet<&str> = help_text
        .split(|c: char| !(c.is_ascii_alphanumeric() || c == '-'))
        .filter_map(|word| word.strip_prefix("--"))
        .filter(|name| !name.is_empty())
        .collect();
    let parsed: BTreeSet<&str> = help.keys().map(String::as_str).collect();
    assert_eq!(
        mentioned, parsed,
        "the options parsed from `tollgate serve --help` are not those it mentions:\n{help_text}"
    );
    for expected in [
        "listen",
        "store",
        "store-timeout-ms",
        "postgres-connections",
    ] {
        assert!(
            parsed.contains(expected),
            "no --{expected} in:\n{help_text}"
        );
    }

    let rows = parse_page(PAGE).unwrap_or_else(|e| panic!("{e}"));
    let problems = disagreements(&help, &rows);
    assert!(
        problems.is_empty(),
        "docs/configuration.md's `tollgate serve` options table disagrees with \
         `tollgate serve --help`:\n- {}",
        problems.join("\n- ")
    );
}

#[test]
fn a_docs_table_that_disagrees_with_help_is_caught() {
    let help = parse_help(&serve_help());
    // (what to change on the page, into what, the option a message must name)
    let edits = [
        ("| 2,097,152 |", "| 2,000,000 |", "--max-keys"),
        ("| `127.0.0.1:8080` |", "| `0.0.0.0:8080` |", "--listen"),
        ("100 (PostgreSQL)", "200 (PostgreSQL)", "--store-timeout-ms"),
        ("50 (Redis, memory)", "50 (Redis)", "--store-timeout-ms"),
        (
            "50 (Redis, memory), 100 (PostgreSQL)",
            "`50`",
            "--store-timeout-ms",
        ),
        (
            "`tollgate`, `buckets`",
            "`tollgate`, `bucket`",
            "--postgres-table",
        ),
        (
            "| `--postgres-unlogged` | off |",
            "| `--postgres-unlogged` | on |",
            "--postgres-unlogged",
        ),
        (
            "| `--postgres-connections` | 4 |",
            "| `--postgres-conns` | 4 |",
            "--postgres-conns",
        ),
        (
            "| `--postgres-connections` | 4 |",
            "| `--max-keys` | 2097152 |",
            "--postgres-connections",
        ),
    ];
    for (from, to, option) in edits {
        // The edit must land in the table: the rest of the page says some of these too.
        let start = PAGE.find(SECTION).expect("the section");
        let at = PAGE[start..]
            .find(from)
            .map(|i| start + i)
            .unwrap_or_else(|| {
                panic!("the options table no longer has {from:?}: update this test")
            });
        let edited = format!("{}{to}{}", &PAGE[..at], &PAGE[at + from.len()..]);
        let rows = parse_page(&edited).unwrap_or_else(|e| panic!("{e}"));
        let problems = disagreements(&help, &rows);
        assert!(
            problems.iter().any(|p| p.contains(&format!("`{option}`"))),
            "a page with {to:?} instead of {from:?} passed, or no message named `{option}`: \
             {problems:#?}"
        );
    }
    assert!(parse_page(&PAGE.replace(SECTION, "\n## Serving\n")).is_err());
    // A table that lost a row is caught too.
    let row = PAGE
        .lines()
        .find(|l| l.starts_with("| `--max-keys`"))
        .expect("a --max-keys row");
    let rows = parse_page(&PAGE.replace(&format!("{row}\n"), "")).unwrap();
    assert!(
        disagreements(&help, &rows)
            .iter()
            .any(|p| p.contains("`--max-keys`") && p.contains("has no row"))
    );
}

#[test]
fn defaults_are_compared_as_written() {
    assert_eq!(normalized("2,097,152"), "2097152");
    assert_eq!(normalized("`read-committed`"), "read-committed");
    assert_eq!(normalized("`tollgate`"), "tollgate");
    assert_ne!(normalized("`60`"), "50");
    let page = page_per_store("50 (Redis, memory), 100 (PostgreSQL)").unwrap();
    let help = help_per_store("The bound (default: 50 for Redis and memory, 100 for PostgreSQL) ");
    assert_eq!(Some(page.clone()), help);
    assert_eq!(page["memory"], "50");
    assert_eq!(page["postgresql"], "100");
    assert_eq!(page_per_store("`50`"), None);
    assert_eq!(help_per_store("The bound on one store call"), None);
    assert_eq!(cells("| `a|b` | c |"), ["`a|b`".to_owned(), "c".to_owned()]);
}
