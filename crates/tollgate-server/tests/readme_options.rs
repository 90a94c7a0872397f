//! Issue 18, point 5: the README's table of `tollgate serve` options is what `--help` says.
//! Every option of `--help` has a row, every row names a real option, and each default the
//! README gives is the one `--help` prints (`[default: X]`), or, for an option whose default
//! depends on the store, the numbers its help text gives.

use std::collections::BTreeMap;
use std::process::Command;

/// An option of `--help`: whether it takes a value, its `[default: …]`, and its text.
#[derive(Debug, Default)]
struct HelpOption {
    takes_value: bool,
    default: Option<String>,
    text: String,
}

fn help_options() -> BTreeMap<String, HelpOption> {
    let output = Command::new(env!("CARGO_BIN_EXE_tollgate"))
        .args(["serve", "--help"])
        .output()
        .expect("tollgate serve --help runs");
    assert!(output.status.success());
    let help = String::from_utf8(output.stdout).expect("UTF-8 help");
    let mut options = BTreeMap::new();
    let mut current: Option<String> = None;
    for line in help.lines() {
        let trimmed = line.trim_start();
        let flag = trimmed
            .strip_prefix("-h, ")
            .unwrap_or(trimmed)
            .strip_prefix("--")
            .filter(|_| line.starts_with("  "));
        if let Some(flag) = flag.filter(|_| !line.starts_with("          ")) {
            let name = flag
                .split_whitespace()
                .next()
                .unwrap_or_default()
                .to_owned();
            let option = HelpOption {
                takes_value: flag.contains('<'),
                ..HelpOption::default()
            };
            options.insert(name.clone(), option);
            current = Some(name);
            continue;
        }
        let Some(option) = current.as_ref().and_then(|name| options.get_mut(name)) else {
            continue;
        };
        if let Some(default) = trimmed
            .strip_prefix("[default: ")
            .and_then(|d| d.strip_suffix(']'))
        {
            option.default = Some(default.to_owned());
        } else {
            option.text.push_str(trimmed);
            option.text.push(' ');
        }
    }
    options.remove("help");
    options
}

/// The README's rows: each option it names, with the default it gives.
fn readme_rows() -> Vec<(String, String)> {
    let readme = include_str!("../../../README.md");
    let mut rows = Vec::new();
    for line in readme.lines().filter(|l| l.starts_with("| `--")) {
        let cells: Vec<&str> = line.split(" | ").collect();
        let names: Vec<String> = cells[0]
            .trim_start_matches("| ")
            .split(", ")
            .map(|n| {
                n.trim_matches('`')
                    .trim_start_matches("--")
                    .split_whitespace()
                    .next()
                    .unwrap_or_default()
                    .to_owned()
            })
            .collect();
        let defaults: Vec<&str> = cells[1].split(", ").collect();
        for (i, name) in names.iter().enumerate() {
            // A row of several options gives a default each, or one for all.
            let default = defaults.get(i).or(defaults.first()).copied().unwrap_or("");
            rows.push((name.clone(), default.to_owned()));
        }
    }
    rows
}

/// A default as written in the README: backticks and thousands separators dropped.
fn normalized(default: &str) -> String {
    let bare = default.trim().trim_matches('`');
    if bare.chars().all(|c| c.is_ascii_digit() || c == ',') {
        bare.replace(',', "")
    } else {
        bare.to_owned()
    }
}

#[test]
fn the_readme_option_table_is_what_help_says() {
    let help = help_options();
    let rows = readme_rows();
    assert!(
        help.len() >= 10,
        "too few options parsed from --help: {help:?}"
    );
    for name in help.keys() {
        assert!(
            rows.iter().any(|(row, _)| row == name),
            "`--{name}` is in `tollgate serve --help` but not in the README's table"
        );
    }
    for (name, default) in &rows {
        let option = help
            .get(name)
            .unwrap_or_else(|| panic!("the README's table names `--{name}`, which --help lacks"));
        match (&option.default, option.takes_value) {
            (Some(expected), _) => assert_eq!(
                normalized(default),
                *expected,
                "`--{name}`: the README says {default:?}, --help says [default: {expected}]"
            ),
            (None, false) => assert_eq!(
                default, "off",
                "`--{name}` is a flag: the README's default should be `off`, not {default:?}"
            ),
            (None, true) => {
                // A default that depends on the store: each number the README gives is one
                // the help text gives.
                let numbers = default
                    .split(|c: char| !c.is_ascii_digit())
                    .filter(|n| !n.is_empty());
                let mut any = false;
                for n in numbers {
                    any = true;
                    assert!(
                        option.text.contains(&format!("{n} ")),
                        "`--{name}`: the README's default {default:?} has {n}, --help says: {}",
                        option.text
                    );
                }
                assert!(any, "`--{name}`: no default in the README ({default:?})");
            }
        }
    }
}

#[test]
fn a_wrong_default_would_be_caught() {
    // The comparison the test above makes, on a default the README could get wrong.
    assert_ne!(normalized("`60`"), "50");
    assert_eq!(normalized("2,097,152"), "2097152");
    assert_eq!(normalized("`read-committed`"), "read-committed");
}
