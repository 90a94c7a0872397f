//! The translation as a whole: upstream's defaults, Envoy Gateway's environment, refusals.

use super::doc::Value;
use super::*;

fn env(vars: &[(&str, &str)]) -> Env {
    Env::new(vars.iter().map(|(k, v)| ((*k).into(), (*v).into())))
}

fn doc_of(vars: &[(&str, &str)]) -> Doc {
    translate(&env(vars)).unwrap().0
}

fn refused(vars: &[(&str, &str)]) -> EnvError {
    translate(&env(vars)).unwrap_err()
}

fn s(v: &str) -> Option<Value> {
    Some(Value::Str(v.to_owned()))
}

#[test]
fn upstreams_defaults() {
    let d = doc_of(&[]);
    assert_eq!(d.get("http", "listen").cloned(), s("0.0.0.0:8080"));
    assert_eq!(d.get("grpc", "listen").cloned(), s("0.0.0.0:8081"));
    assert_eq!(d.get("admin", "listen").cloned(), s("127.0.0.1:6070"));
    assert_eq!(
        d.get("grpc", "config_dir").cloned(),
        s("/srv/runtime_data/current/config")
    );
    assert_eq!(d.get("grpc", "charge").cloned(), s("per_descriptor"));
    assert_eq!(
        d.get("grpc", "near_limit_ratio").cloned(),
        Some(Value::Float(0.8))
    );
    assert_eq!(d.get("grpc", "max_connection_age").cloned(), s("86400s"));
    assert_eq!(d.get("store", "timeout").cloned(), s("10s"));
    assert_eq!(
        d.get("store", "url").cloned(),
        s("redis+unix:///var/run/nutcracker/ratelimit.sock")
    );
    assert_eq!(d.get("log", "format").cloned(), s("text"));
    assert!(d.get("tracing", "enabled").is_none());
    assert!(d.get("grpc.xds", "url").is_none());
    let (_, filter, notes) = translate(&env(&[])).unwrap();
    assert_eq!(filter, "warn");
    // USE_STATSD is true by default upstream: said once.
    assert_eq!(notes.len(), 1, "{notes:?}");
    assert!(
        notes[0].starts_with("USE_STATSD=true is ignored"),
        "{notes:?}"
    );
}

/// What Envoy Gateway's `resource.go` sets (paths as it sets them).
const GATEWAY: &[(&str, &str)] = &[
    ("RUNTIME_ROOT", "/data"),
    ("RUNTIME_SUBDIRECTORY", "ratelimit"),
    ("RUNTIME_IGNOREDOTFILES", "true"),
    ("RUNTIME_WATCH_ROOT", "false"),
    ("LOG_LEVEL", "info"),
    ("USE_STATSD", "false"),
    ("CONFIG_TYPE", "GRPC_XDS_SOTW"),
    ("CONFIG_GRPC_XDS_SERVER_URL", "envoy-gateway:18001"),
    ("CONFIG_GRPC_XDS_NODE_ID", "envoy-ratelimit"),
    ("GRPC_SERVER_USE_TLS", "true"),
    ("GRPC_SERVER_TLS_CERT", "/certs/tls.crt"),
    ("GRPC_SERVER_TLS_KEY", "/certs/tls.key"),
    ("GRPC_SERVER_TLS_CA_CERT", "/certs/ca.crt"),
    ("CONFIG_GRPC_XDS_SERVER_USE_TLS", "true"),
    ("CONFIG_GRPC_XDS_CLIENT_TLS_CERT", "/certs/tls.crt"),
    ("CONFIG_GRPC_XDS_CLIENT_TLS_KEY", "/certs/tls.key"),
    ("CONFIG_GRPC_XDS_SERVER_TLS_CACERT", "/certs/ca.crt"),
    ("FORCE_START_WITHOUT_INITIAL_CONFIG", "true"),
    ("REDIS_SOCKET_TYPE", "tcp"),
    ("REDIS_URL", "redis.redis-system.svc.cluster.local:6379"),
    ("TRACING_ENABLED", "true"),
    ("TRACING_SERVICE_NAME", "envoy-ratelimit"),
    ("TRACING_SERVICE_NAMESPACE", "envoy-gateway-system"),
    ("TRACING_SAMPLING_RATE", "1.0"),
    ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://otel:4318"),
];

#[test]
fn envoy_gateways_environment() {
    let (d, filter, notes) = translate(&env(GATEWAY)).unwrap();
    assert_eq!(filter, "info");
    assert_eq!(d.get("grpc.xds", "url").cloned(), s("envoy-gateway:18001"));
    assert_eq!(d.get("grpc.xds", "node_id").cloned(), s("envoy-ratelimit"));
    assert_eq!(
        d.get("grpc.xds", "force_start_without_initial_config")
            .cloned(),
        Some(Value::Bool(true))
    );
    assert_eq!(d.get("grpc.xds", "retry_interval").cloned(), s("3s"));
    assert_eq!(d.get("grpc.xds", "backoff_max").cloned(), s("60s"));
    assert_eq!(d.get("grpc.xds.tls", "ca").cloned(), s("/certs/ca.crt"));
    assert_eq!(d.get("grpc.xds.tls", "cert").cloned(), s("/certs/tls.crt"));
    assert_eq!(d.get("grpc.tls", "cert").cloned(), s("/certs/tls.crt"));
    // Not read upstream: the server does not ask for Envoy's certificate.
    assert!(d.get("grpc.tls", "client_ca").is_none());
    assert!(
        notes
            .iter()
            .any(|n| n.starts_with("GRPC_SERVER_TLS_CA_CERT is ignored"))
    );
    assert!(d.get("grpc", "config_dir").is_none());
    assert_eq!(
        d.get("store", "url").cloned(),
        s("redis://redis.redis-system.svc.cluster.local:6379")
    );
    assert_eq!(d.get("tracing", "endpoint").cloned(), s("http://otel:4318"));
    assert_eq!(
        d.get("tracing", "service_name").cloned(),
        s("envoy-ratelimit")
    );
    assert_eq!(
        d.get("tracing", "sampling_rate").cloned(),
        Some(Value::Float(1.0))
    );
    assert_eq!(d.get("tracing", "protocol").cloned(), s("http"));
    // The TOML reads back.
    let _: toml::Table = toml::from_str(&d.render()).unwrap();
}

/// Variables set, the variable named, words of the reason.
type Refusal<'a> = (&'a [(&'a str, &'a str)], &'a str, &'a str);

#[test]
fn refused_variables_name_themselves() {
    let cases: &[Refusal<'_>] = &[
        (&[("BACKEND_TYPE", "memcache")], "BACKEND_TYPE", "memcache"),
        (
            &[("REDIS_PERSECOND", "true")],
            "REDIS_PERSECOND",
            "per-second",
        ),
        (
            &[("REDIS_TYPE", "SENTINEL")],
            "REDIS_SOCKET_TYPE",
            "sentinels are reached over TCP",
        ),
        (
            &[
                ("REDIS_TYPE", "SENTINEL"),
                ("REDIS_SOCKET_TYPE", "tcp"),
                ("REDIS_URL", "s1:26379"),
            ],
            "REDIS_URL",
            "MASTER_NAME,HOST:PORT",
        ),
        (&[("CACHE_KEY_PREFIX", "a_")], "CACHE_KEY_PREFIX", "prefix"),
        (&[("QUOTA_MODE", "true")], "QUOTA_MODE", "quota_mode"),
        (
            &[("CONFIG_TYPE", "ADS")],
            "CONFIG_TYPE",
            "FILE or GRPC_XDS_SOTW",
        ),
        (&[("LOG_LEVEL", "loud")], "LOG_LEVEL", "not a log level"),
        (&[("PORT", "80808")], "PORT", "not a port"),
        (&[("SHADOW_MODE", "yes")], "SHADOW_MODE", "not a boolean"),
        (&[("REDIS_TIMEOUT", "0")], "REDIS_TIMEOUT", "at least 1ms"),
        (
            &[("GRPC_SERVER_USE_TLS", "1")],
            "GRPC_SERVER_TLS_CERT",
            "is empty",
        ),
        (
            &[("USE_PROMETHEUS", "true")],
            "USE_STATSD, USE_PROMETHEUS",
            "more than one stats sink",
        ),
        (
            &[("REDIS_POOL_ON_EMPTY_BEHAVIOR", "create")],
            "REDIS_POOL_ON_EMPTY_BEHAVIOR",
            "WAIT",
        ),
    ];
    for (vars, variable, words) in cases {
        let e = refused(vars);
        assert_eq!(e.variable, *variable, "{vars:?}: {e}");
        assert!(
            e.message.to_lowercase().contains(&words.to_lowercase()),
            "{vars:?}: {e}"
        );
    }
}

#[test]
fn a_refusal_of_the_config_reader_names_the_variables() {
    let refused = |vars: &[(&str, &str)]| match load(&env(vars)) {
        Err(e) => e,
        Ok(_) => panic!("{vars:?} was taken"),
    };
    let e = refused(&[("NEAR_LIMIT_RATIO", "0")]);
    assert_eq!(e.variable, "NEAR_LIMIT_RATIO");
    assert!(e.message.contains("grpc.near_limit_ratio"), "{e}");
    let e = refused(&[
        ("REDIS_SOCKET_TYPE", "tcp"),
        ("REDIS_URL", "localhost:6380"),
        ("REDIS_TLS", "true"),
        ("REDIS_TLS_CLIENT_CERT", "/certs/tls.crt"),
    ]);
    assert_eq!(e.variable, "REDIS_TLS, REDIS_TLS_CLIENT_CERT", "{e}");
    assert!(e.message.contains("needs its key"), "{e}");
}

#[test]
fn upstreams_zero_durations_and_the_socket_resolve() {
    let loaded = load(&env(&[
        ("GRPC_MAX_CONNECTION_AGE", "0"),
        ("GRPC_MAX_CONNECTION_AGE_GRACE", "0"),
        ("GRPC_UDS", "/run/ratelimit.sock"),
    ]))
    .unwrap();
    let grpc = loaded.settings.grpc.expect("gRPC is on");
    assert_eq!(grpc.listen, None);
    assert_eq!(grpc.unix_socket, Some("/run/ratelimit.sock".into()));
    assert!(
        loaded.settings.grpc_listener.limits.max_age > std::time::Duration::from_secs(86_400 * 365)
    );
    assert!(loaded.settings.config.is_none(), "no file to watch");
    // TLS is not served on the socket: refused, naming the variables.
    let e = load(&env(&[
        ("GRPC_UDS", "/run/ratelimit.sock"),
        ("GRPC_SERVER_USE_TLS", "true"),
        ("GRPC_SERVER_TLS_CERT", "/certs/tls.crt"),
        ("GRPC_SERVER_TLS_KEY", "/certs/tls.key"),
    ]))
    .unwrap_err();
    assert!(e.variable.contains("GRPC_SERVER_USE_TLS"), "{e}");
    assert!(e.message.contains("Unix socket"), "{e}");
}

#[test]
fn go_values_reach_the_keys() {
    let d = doc_of(&[
        ("SHADOW_MODE", "T"),
        ("STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT", "1"),
        ("GRPC_MAX_CONNECTION_AGE", "1h30m"),
        ("GRPC_MAX_CONNECTION_AGE_GRACE", "0"),
        ("HOST", "::1"),
        ("PORT", "0x1F90"),
        ("GRPC_UDS", "/tmp/rl.sock"),
        ("LOG_FORMAT", "JSON"),
        ("RESPONSE_DYNAMIC_METADATA", "true"),
    ]);
    assert_eq!(
        d.get("grpc", "shadow_mode").cloned(),
        Some(Value::Bool(true))
    );
    assert_eq!(d.get("grpc", "charge").cloned(), s("all_or_nothing"));
    assert_eq!(d.get("grpc", "max_connection_age").cloned(), s("5400s"));
    assert_eq!(
        d.get("grpc", "max_connection_age_grace").cloned(),
        s("100years")
    );
    assert_eq!(d.get("http", "listen").cloned(), s("[::1]:8080"));
    assert_eq!(d.get("grpc", "unix_socket").cloned(), s("/tmp/rl.sock"));
    assert!(d.get("grpc", "listen").is_none());
    assert_eq!(d.get("log", "format").cloned(), s("json"));
    assert_eq!(
        d.get("grpc", "response_dynamic_metadata").cloned(),
        Some(Value::Bool(true))
    );
}

#[test]
fn the_program_name_or_the_flag_asks_for_it() {
    assert!(requested(&["/bin/ratelimit"]));
    assert!(requested(&["ratelimit", "ignored"]));
    assert!(requested(&["tollgate", FLAG]));
    assert!(!requested(&["tollgate"]));
    assert!(!requested(&["/bin/ratelimit-x"]));
    assert!(!requested(&["tollgate", "serve", FLAG]));
}

/// docs/envoy.md's table has a row for every variable of upstream's settings.go.
#[test]
fn the_docs_table_lists_every_variable() {
    let docs = include_str!("../../../../docs/envoy.md");
    let section = docs
        .split("## The environment of envoyproxy/ratelimit")
        .nth(1)
        .expect("docs/envoy.md has the section");
    for (name, _, _) in vars::VARIABLES {
        assert!(
            section.contains(&format!("`{name}`")),
            "docs/envoy.md misses {name}"
        );
    }
}

/// Upstream's ratio sampler takes any number: from 1 up it samples everything, from 0 down
/// nothing; an empty exporter protocol is its default, HTTP. NaN has no meaning there.
#[test]
fn tracing_values_take_upstreams_meaning() {
    let rate = |v: &str| {
        doc_of(&[("TRACING_ENABLED", "true"), ("TRACING_SAMPLING_RATE", v)])
            .get("tracing", "sampling_rate")
            .cloned()
    };
    assert_eq!(rate("2.5"), Some(Value::Float(1.0)));
    assert_eq!(rate("-1"), Some(Value::Float(0.0)));
    assert_eq!(rate("0.25"), Some(Value::Float(0.25)));
    let e = refused(&[
        ("TRACING_ENABLED", "true"),
        ("TRACING_SAMPLING_RATE", "NaN"),
    ]);
    assert_eq!(e.variable, "TRACING_SAMPLING_RATE", "{e}");
    let d = doc_of(&[
        ("TRACING_ENABLED", "true"),
        ("TRACING_EXPORTER_PROTOCOL", ""),
    ]);
    assert_eq!(d.get("tracing", "protocol").cloned(), s("http"));
}

#[test]
fn use_prometheus_is_the_exporter_and_a_bad_mapping_names_its_variable() {
    let (d, _, notes) = translate(&env(&[
        ("USE_STATSD", "false"),
        ("USE_PROMETHEUS", "true"),
        ("PROMETHEUS_ADDR", ":19001"),
        ("PROMETHEUS_RESPONSE_TIME_AS_MILLISECONDS", "true"),
    ]))
    .unwrap();
    assert_eq!(
        d.get("grpc.prometheus", "listen").cloned(),
        s("0.0.0.0:19001")
    );
    assert_eq!(d.get("grpc.prometheus", "path").cloned(), s("/metrics"));
    assert!(d.get("grpc.prometheus", "mapper").is_none());
    assert!(
        notes
            .iter()
            .any(|n| n.starts_with("PROMETHEUS_RESPONSE_TIME_AS_MILLISECONDS=true is ignored"))
    );
    // Without USE_PROMETHEUS there is no exporter, and its variables are noted.
    let (d, _, notes) = translate(&env(&[("PROMETHEUS_ADDR", ":19001")])).unwrap();
    assert!(d.get("grpc.prometheus", "listen").is_none());
    assert!(
        notes
            .iter()
            .any(|n| n.starts_with("PROMETHEUS_ADDR is ignored"))
    );

    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("conf.yaml");
    std::fs::write(
        &file,
        "mappings:\n- {match: a.b, name: x, labels: {k: v}, typo: 1}\n",
    )
    .unwrap();
    let vars = [
        ("USE_STATSD", "false"),
        ("USE_PROMETHEUS", "true"),
        ("PROMETHEUS_MAPPER_YAML", file.to_str().unwrap()),
    ];
    let e = load(&env(&vars)).unwrap_err();
    assert_eq!(e.variable, "PROMETHEUS_MAPPER_YAML", "{e}");
    assert!(e.message.contains("mappings[0].typo: unknown key"), "{e}");
}

/// A relative path in a variable is opened from the working directory, as upstream opens it,
/// not from a directory of the generated config's.
#[test]
fn relative_paths_stay_relative_to_the_working_directory() {
    let loaded = load(&env(&[
        ("USE_STATSD", "false"),
        ("GRPC_UDS", "run/ratelimit.sock"),
    ]))
    .unwrap();
    let grpc = loaded.settings.grpc.expect("gRPC is on");
    assert_eq!(
        grpc.unix_socket.as_deref(),
        Some(std::path::Path::new("run/ratelimit.sock"))
    );
}

/// Of the SDK's two endpoint variables the traces-only one wins, as the exporter reads them:
/// the general one is then not made `[tracing] endpoint` over it.
#[test]
fn the_traces_only_endpoint_variable_is_left_to_the_exporter() {
    let general = [
        ("TRACING_ENABLED", "true"),
        ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://otel:4318"),
    ];
    assert_eq!(
        doc_of(&general).get("tracing", "endpoint").cloned(),
        s("http://otel:4318")
    );
    let both = [
        general[0],
        general[1],
        (
            "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
            "http://traces:4318/v1/traces",
        ),
    ];
    assert!(doc_of(&both).get("tracing", "endpoint").is_none());
}

/// Upstream asks for no client certificate without GRPC_CLIENT_TLS_CACERT: a SAN alone checks
/// nothing there, and is noted rather than refused here.
#[test]
fn a_client_san_without_a_ca_is_noted() {
    let (d, _, notes) = translate(&env(&[
        ("GRPC_SERVER_USE_TLS", "true"),
        ("GRPC_SERVER_TLS_CERT", "/certs/tls.crt"),
        ("GRPC_SERVER_TLS_KEY", "/certs/tls.key"),
        ("GRPC_CLIENT_TLS_SAN", "envoy"),
    ]))
    .unwrap();
    assert!(d.get("grpc.tls", "client_san").is_none());
    assert!(
        notes
            .iter()
            .any(|n| n.starts_with("GRPC_CLIENT_TLS_SAN is ignored")),
        "{notes:?}"
    );
}
