//! Every parser of what clients and operators send, on any input: the HTTP JSON bodies, the
//! TOML config file, the Envoy YAML directory and Envoy's JSON requests. Random bytes, and
//! good inputs mutated (bytes flipped, cut, repeated), never panic, and every refusal says
//! where: a field, a file, a line. (The RESP decoder's are in `resp_decoder.rs`, the
//! forwarding headers' in the library's `middleware::net`.)

use std::path::Path;

use proptest::prelude::*;
use tollgate_server::api::request::CheckRequest;
use tollgate_server::config::Config;
use tollgate_server::descriptors::config::EnvoyConfig;

const BODIES: [&str; 4] = [
    r#"{"key": "alice", "capacity": 10, "refill": 10, "period_ms": 1000, "cost": 1}"#,
    r#"{"policy": "api", "key": "alice", "cost": 2}"#,
    r#"{"policies": ["api", "per_hour"], "key": "bob"}"#,
    r#"{"key": "k", "capacity": 1, "refill": 1, "period_ms": 1, "cost": 0}"#,
];

const TOML: &str = r#"
[store]
url = "memory"
timeout = "50ms"
on_error = "allow"

[http]
listen = "127.0.0.1:8080"
inline_policies = false

[grpc]
listen = "127.0.0.1:8081"
algorithm = "token_bucket"
near_limit_ratio = 0.8

[grpc.domains.edge]
algorithm = "fixed_window"

[policies.api]
capacity = 10
refill = 10
period = "1s"
"#;

const YAML: &str = "\
domain: edge
descriptors:
  - key: remote_address
    rate_limit: {unit: minute, requests_per_unit: 100}
  - key: client
    value: 'a*'
    share_threshold: true
    descriptors:
      - key: path
        rate_limit:
          name: p
          unit: second
          requests_per_unit: 0x10
          replaces: [{name: q}]
    metadata: {owner: x}
  - key: base
    rate_limit: &r {unit: hour, requests_per_unit: 5}
  - key: merged
    rate_limit: {<<: *r, unlimited: false}
";

/// `text` mutated: each (position, byte, kind) flips a byte, removes one, or repeats a run.
fn mutate(text: &[u8], edits: &[(usize, u8, u8)]) -> Vec<u8> {
    let mut bytes = text.to_vec();
    for &(at, byte, kind) in edits {
        if bytes.is_empty() {
            bytes.push(byte);
            continue;
        }
        let at = at % bytes.len();
        match kind % 3 {
            0 => bytes[at] = byte,
            1 => {
                bytes.remove(at);
            }
            _ => {
                let run: Vec<u8> = bytes[at..(at + 8).min(bytes.len())].to_vec();
                bytes.splice(at..at, run);
            }
        }
    }
    bytes
}

fn edits() -> impl Strategy<Value = Vec<(usize, u8, u8)>> {
    prop::collection::vec((any::<usize>(), any::<u8>(), any::<u8>()), 1..8)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn http_bodies_never_panic_and_name_a_field(
        which in 0..BODIES.len(),
        edits in edits(),
        random in prop::collection::vec(any::<u8>(), 0..200),
    ) {
        for body in [mutate(BODIES[which].as_bytes(), &edits), random] {
            if let Err(problem) = CheckRequest::parse(&body) {
                prop_assert!(!problem.detail().is_empty());
            }
        }
    }

    #[test]
    fn toml_files_never_panic_and_name_the_file(
        edits in edits(),
        random in prop::collection::vec(any::<u8>(), 0..300),
    ) {
        let path = Path::new("hostile.toml");
        for text in [mutate(TOML.as_bytes(), &edits), random] {
            if let Err(e) = Config::from_bytes(path, &text) {
                prop_assert!(e.to_string().starts_with("hostile.toml"), "{}", e);
            }
        }
    }

    #[test]
    fn envoy_yaml_never_panics_and_names_the_file(
        edits in edits(),
        random in prop::collection::vec(any::<u8>(), 0..300),
    ) {
        for text in [mutate(YAML.as_bytes(), &edits), random] {
            let files = vec![(Path::new("dir/edge.yaml").to_owned(), text)];
            if let Err(e) = EnvoyConfig::load(&files, false) {
                prop_assert!(e.to_string().starts_with("dir/edge.yaml: "), "{}", e);
            }
        }
    }
}

#[test]
fn the_unmutated_inputs_are_good() {
    for body in BODIES {
        CheckRequest::parse(body.as_bytes()).expect("a good body");
    }
    Config::from_bytes(Path::new("good.toml"), TOML.as_bytes()).expect("a good file");
    let files = vec![(Path::new("edge.yaml").to_owned(), YAML.as_bytes().to_vec())];
    EnvoyConfig::load(&files, false).expect("a good directory");
}
