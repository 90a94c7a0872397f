//! The Envoy config directory loads as envoyproxy/ratelimit loads it: every load error it
//! raises, with its words and the file at fault; domains merged or refused; what loads, and
//! how `/rlconfig` prints it.

use std::path::{Path, PathBuf};

use tollgate_server::descriptors::config::EnvoyConfig;

/// A directory holding `files` (name, contents).
fn dir(files: &[(&str, &str)]) -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("a temporary directory");
    for (name, text) in files {
        let path = dir.path().join(name);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).expect("subdirectory");
        }
        std::fs::write(path, text).expect("write a config file");
    }
    dir
}

fn load(files: &[(&str, &str)], merge: bool) -> (tempfile::TempDir, Result<EnvoyConfig, String>) {
    let d = dir(files);
    let loaded = EnvoyConfig::load_dir(d.path(), merge).map_err(|e| e.to_string());
    (d, loaded)
}

/// The error of loading `files`, with the directory's path replaced by `DIR`.
fn error(files: &[(&str, &str)], merge: bool) -> String {
    let (d, loaded) = load(files, merge);
    let e = loaded.expect_err("the files are refused");
    e.replace(&d.path().display().to_string(), "DIR")
}

const BASIC: &str = "\
domain: test-domain
descriptors:
  - key: key1
    value: value1
    descriptors:
      - key: subkey1
        rate_limit:
          unit: second
          requests_per_unit: 5
";

#[test]
fn every_load_error_names_its_file_in_envoyproxy_ratelimits_words() {
    let cases: &[(&str, &str, &str)] = &[
        (
            "empty domain",
            "descriptors:\n  - key: a\n",
            "config file cannot have empty domain",
        ),
        (
            "an empty file",
            "# nothing yet\n",
            "config file cannot have empty domain",
        ),
        (
            "an empty key",
            "domain: d\ndescriptors:\n  - value: value1\n",
            "descriptor has empty key",
        ),
        (
            "a duplicate descriptor",
            "domain: test-domain\ndescriptors:\n  - key: key1\n    value: value1\n  - key: key1\n    value: value1\n",
            "duplicate descriptor composite key 'test-domain.key1_value1'",
        ),
        (
            "a duplicate nested descriptor",
            "domain: d\ndescriptors:\n  - key: a\n    descriptors:\n      - key: b\n      - key: b\n",
            "duplicate descriptor composite key 'd.a.b'",
        ),
        (
            "an unknown unit",
            "domain: d\ndescriptors:\n  - key: a\n    rate_limit:\n      unit: foo\n      requests_per_unit: 1\n",
            "invalid rate limit unit 'foo'",
        ),
        (
            "no unit",
            "domain: d\ndescriptors:\n  - key: a\n    rate_limit:\n      requests_per_unit: 1\n",
            "invalid rate limit unit ''",
        ),
        (
            "a misspelled key",
            "domain: d\ndescriptors:\n  - key: a\n    ratelimit:\n      unit: second\n",
            "config error, unknown key 'ratelimit'",
        ),
        (
            "a misspelled nested key",
            "domain: d\ndescriptors:\n  - key: a\n    rate_limit:\n      unit: second\n      requestsperunit: 3\n",
            "config error, unknown key 'requestsperunit'",
        ),
        (
            "a key that is not a string",
            "0.25: test-domain\n",
            "config error, key is not of type string: 0.25",
        ),
        (
            "a boolean key (YAML 1.1)",
            "domain: d\nyes: 1\n",
            "config error, key is not of type string: true",
        ),
        (
            "a list of non-maps",
            "domain: d\ndescriptors:\n  - a\n  - b\n",
            "config error, yaml file contains list of type other than map: a",
        ),
        (
            "a float value",
            "domain: d\ndescriptors:\n  - key: a\n    value: 1.5\n",
            "error checking config",
        ),
        (
            "replaces naming itself",
            "domain: d\ndescriptors:\n  - key: a\n    rate_limit:\n      name: self\n      unit: second\n      requests_per_unit: 1\n      replaces:\n        - name: self\n",
            "replaces should not contain name of same descriptor",
        ),
        (
            "an empty replaces entry",
            "domain: d\ndescriptors:\n  - key: a\n    rate_limit:\n      unit: second\n      requests_per_unit: 1\n      replaces:\n        - name:\n",
            "should not have an empty replaces entry",
        ),
        (
            "unlimited with a unit",
            "domain: d\ndescriptors:\n  - key: a\n    rate_limit:\n      unlimited: true\n      unit: day\n",
            "should not specify rate limit unit when unlimited",
        ),
        (
            "share_threshold without a wildcard",
            "domain: d\ndescriptors:\n  - key: a\n    value: b\n    share_threshold: true\n",
            "share_threshold can only be used with wildcard values (containing '*'), but found key 'a_b'",
        ),
        (
            "broken YAML",
            "'''\n",
            "error loading config file: yaml: line",
        ),
        (
            "a list at the top",
            "- domain: d\n",
            "error loading config file: yaml: unmarshal errors:\n  line 1: cannot unmarshal !!seq into map[interface {}]interface {}",
        ),
        (
            "a string where a number goes",
            "domain: d\ndescriptors:\n  - key: a\n    rate_limit:\n      unit: second\n      requests_per_unit: lots\n",
            "error loading config file: yaml: unmarshal errors:\n  line 6: cannot unmarshal !!str `lots` into uint32",
        ),
        (
            "a negative number",
            "domain: d\ndescriptors:\n  - key: a\n    rate_limit:\n      unit: second\n      requests_per_unit: -1\n",
            "line 6: cannot unmarshal !!int `-1` into uint32",
        ),
        (
            "a string where a list goes",
            "domain: d\ndescriptors: everything-else\n",
            "line 2: cannot unmarshal !!str `everyth...` into []config.YamlDescriptor",
        ),
        (
            "a word where a boolean goes",
            "domain: d\ndescriptors:\n  - key: a\n    shadow_mode: sometimes\n",
            "line 4: cannot unmarshal !!str `sometimes` into bool",
        ),
    ];
    for (what, text, expected) in cases {
        let message = error(&[("config.yaml", text)], false);
        assert!(
            message.starts_with("DIR/config.yaml: "),
            "{what}: the error names the file: {message:?}"
        );
        assert!(
            message.contains(expected),
            "{what}: expected {expected:?} in {message:?}"
        );
    }
}

#[test]
fn yaml_reads_as_yaml_v2_reads_it_and_hostile_files_are_refused() {
    // Merge keys, Go's integer prefixes, scalar metadata keys, a key given twice (the last
    // value counts).
    let good = "\
domain: y
descriptors:
  - key: a
    metadata: {1: one, yes: true, ~: none}
    rate_limit: &base {unit: second, requests_per_unit: 0o17}
  - key: b
    value: 1.5
    value: ok
    rate_limit: {<<: *base, requests_per_unit: 0X10}
";
    let (_d, loaded) = load(&[("y.yaml", good)], false);
    assert_eq!(
        loaded.expect("loads").dump(),
        "y.a: unit=SECOND requests_per_unit=15, shadow_mode: false, quota_mode: false\n\
         y.b_ok: unit=SECOND requests_per_unit=16, shadow_mode: false, quota_mode: false\n"
    );
    // Nesting far deeper than a stack would follow, and a text bomb, are load errors.
    let deep = "domain: d\ndescriptors:\n".to_owned() + &"- ".repeat(50_000) + "x\n";
    let message = error(&[("deep.yaml", &deep)], false);
    assert!(message.contains("nested more than 128 deep"), "{message}");
    let long = "x".repeat(100_000);
    let bomb = format!(
        "domain: &a {long}\ndescriptors: [{}]\n",
        "{key: *a}, ".repeat(1_000)
    );
    let message = error(&[("bomb.yaml", &bomb)], false);
    assert!(message.contains("MiB of text"), "{message}");
    // A stray file that is not a map says what it holds.
    let message = error(&[("README", "hello")], false);
    assert!(
        message
            .contains("line 1: cannot unmarshal !!str `hello` into map[interface {}]interface {}"),
        "{message}"
    );
}

#[test]
fn a_domain_in_two_files_is_refused_unless_merged() {
    let two = "domain: test-domain\ndescriptors:\n  - key: key2\n    rate_limit:\n      unit: minute\n      requests_per_unit: 20\n";
    assert_eq!(
        error(&[("a.yaml", BASIC), ("b.yaml", two)], false),
        "DIR/b.yaml: duplicate domain 'test-domain' in config file"
    );
    let (_d, merged) = load(&[("a.yaml", BASIC), ("b.yaml", two)], true);
    let merged = merged.expect("merged");
    assert_eq!(merged.domains(), 1);
    assert_eq!(
        merged.dump(),
        "test-domain.key1_value1.subkey1: unit=SECOND requests_per_unit=5, shadow_mode: false, quota_mode: false\n\
         test-domain.key2: unit=MINUTE requests_per_unit=20, shadow_mode: false, quota_mode: false\n"
    );
    // Merging adds top-level descriptors; the same one in two files is still a duplicate,
    // blamed on the later file.
    assert_eq!(
        error(&[("a.yaml", BASIC), ("b.yaml", BASIC)], true),
        "DIR/b.yaml: duplicate descriptor composite key 'test-domain.key1_value1'"
    );
}

#[test]
fn every_key_loads_and_the_dump_lists_every_limit() {
    let full = "\
domain: full
descriptors:
  - key: a
    value: '1'
    shadow_mode: yes
    detailed_metric: true
    value_to_metric: false
    metadata:
      owner: team-a
      nested: {deep: [1, 2.5]}
    rate_limit:
      name: a-limit
      unit: Hour
      requests_per_unit: 0x10
      replaces:
        - name: b-limit
  - key: b
    quota_mode: on
    rate_limit:
      name: b-limit
      unit: week
      requests_per_unit: 7
  - key: c
    value: 'pre*'
    share_threshold: true
    rate_limit:
      unlimited: true
  - key: d
    descriptors:
      - key: e
        rate_limit: {unit: month, requests_per_unit: 1}
      - key: f
        rate_limit: {unit: YEAR, requests_per_unit: 2}
";
    let (_d, loaded) = load(&[("full.yaml", full)], false);
    let loaded = loaded.expect("every key loads");
    assert_eq!(
        loaded.dump(),
        "full.a_1: unit=HOUR requests_per_unit=16, shadow_mode: true, quota_mode: false\n\
         full.b: unit=WEEK requests_per_unit=7, shadow_mode: false, quota_mode: true\n\
         full.c_pre*: unit=UNKNOWN requests_per_unit=0, shadow_mode: false, quota_mode: false\n\
         full.d.e: unit=MONTH requests_per_unit=1, shadow_mode: false, quota_mode: false\n\
         full.d.f: unit=YEAR requests_per_unit=2, shadow_mode: false, quota_mode: false\n"
    );
}

#[test]
fn subdirectories_load_and_dot_entries_do_not() {
    let other = "domain: other\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1}\n";
    // As Kubernetes mounts a ConfigMap: the files live in a dot-named directory too.
    let (d, loaded) = load(
        &[
            ("a.yaml", BASIC),
            ("sub/other.yaml", other),
            ("..2026_11_25/a.yaml", BASIC),
            (".hidden.yaml", BASIC),
        ],
        false,
    );
    let loaded = loaded.expect("loads once each");
    assert_eq!((loaded.files(), loaded.domains()), (2, 2));
    drop(d);
    let empty = tempfile::tempdir().expect("a temporary directory");
    let none = EnvoyConfig::load_dir(empty.path(), false).expect("an empty directory loads");
    assert_eq!((none.files(), none.domains()), (0, 0));
    let missing: PathBuf = empty.path().join("missing");
    let e = EnvoyConfig::load_dir(Path::new(&missing), false).expect_err("no directory");
    assert!(e.to_string().contains("cannot read the directory"), "{e}");
}
