use super::{MAX_MAPPINGS, Mapped, Mapper, MetricType};

fn metric(name: &str, labels: &[(&str, &str)]) -> Mapped {
    Mapped::Metric {
        name: name.to_owned(),
        labels: labels
            .iter()
            .map(|(l, v)| ((*l).to_owned(), (*v).to_owned()))
            .collect(),
        help: None,
    }
}

fn counter(mapper: &Mapper, name: &str) -> Mapped {
    mapper.map(name, MetricType::Counter)
}

/// Envoy Gateway's shapes: a glob for two-level keys, a regex for deeper ones.
const GATEWAY_LIKE: &str = r#"
mappings:
  - match: "ratelimit.service.rate_limit.*.*.total_hits"
    name: "hits"
    timer_type: "histogram"
    labels:
      domain: "$1"
      key1: "$2"
  - match: "ratelimit\\.service\\.rate_limit\\.([^\\.]*)\\.([^\\.]*)\\.([^\\.]*)(\\..*)?\\.total_hits"
    match_type: regex
    name: "hits"
    labels:
      domain: "$1"
      key1: "$2"
      key2: "${3}"
  - match: "ratelimit.service.config_load_success"
    name: "loads"
    match_metric_type: counter
"#;

#[test]
fn globs_take_one_component_and_regexes_the_rest() {
    let m = Mapper::parse(GATEWAY_LIKE).unwrap();
    assert_eq!(
        counter(&m, "ratelimit.service.rate_limit.edge.route_a.total_hits"),
        metric("hits", &[("domain", "edge"), ("key1", "route_a")])
    );
    assert_eq!(
        counter(
            &m,
            "ratelimit.service.rate_limit.edge.r_a.m_b.x_c.total_hits"
        ),
        metric(
            "hits",
            &[("domain", "edge"), ("key1", "r_a"), ("key2", "m_b")]
        )
    );
    assert_eq!(
        counter(&m, "ratelimit.service.config_load_success"),
        metric("loads", &[])
    );
    // `match_metric_type: counter` does not take a gauge: the gauge keeps its own name.
    assert_eq!(
        m.map("ratelimit.service.config_load_success", MetricType::Gauge),
        metric("ratelimit_service_config_load_success", &[])
    );
}

#[test]
fn the_first_match_wins_and_globs_come_before_regexes() {
    let m = Mapper::parse(
        "mappings:\n\
         - {match: 'a\\..*', match_type: regex, name: by_regex}\n\
         - {match: 'a.*', name: first_glob_$1}\n\
         - {match: 'a.b', name: second_glob}\n",
    )
    .unwrap();
    assert_eq!(counter(&m, "a.b"), metric("first_glob_b", &[]));
    assert_eq!(counter(&m, "a.b.c"), metric("by_regex", &[]));
}

#[test]
fn regexes_are_searched_not_anchored() {
    let m =
        Mapper::parse("mappings:\n- {match: 'hits$', match_type: regex, name: hits}\n").unwrap();
    assert_eq!(counter(&m, "x.y.hits"), metric("hits", &[]));
    assert_eq!(counter(&m, "x.hits.y"), metric("x_hits_y", &[]));
}

#[test]
fn drop_drops_and_the_rest_keep_an_escaped_name() {
    let m = Mapper::parse(
        "defaults: {match_type: glob}\nmappings:\n- {match: 'noise.*', action: drop}\n",
    )
    .unwrap();
    assert_eq!(counter(&m, "noise.x"), Mapped::Drop);
    assert_eq!(
        counter(&m, "ratelimit.service.rate_limit.my-domain.k_v.over_limit"),
        metric("ratelimit_service_rate_limit_my_domain_k_v_over_limit", &[])
    );
    assert_eq!(counter(&m, "9lives.x"), metric("_9lives_x", &[]));
}

#[test]
fn upstreams_default_mapping_parses_and_names_as_the_dashboards_read() {
    let m = Mapper::upstream_default();
    assert_eq!(m.globs.len() + m.regexes.len(), 15);
    assert_eq!(
        counter(&m, "ratelimit.service.rate_limit.d.k_v.near_limit"),
        metric(
            "ratelimit_service_rate_limit_near_limit",
            &[("domain", "d"), ("key1", "k_v")]
        )
    );
    assert_eq!(
        counter(&m, "ratelimit.service.config_load_error"),
        metric("ratelimit_service_config_load_error", &[])
    );
    assert_eq!(
        counter(&m, "ratelimit_server.ShouldRateLimit.total_requests"),
        metric(
            "ratelimit_service_total_requests",
            &[("grpc_method", "ShouldRateLimit")]
        )
    );
    assert_eq!(
        counter(&m, "ratelimit.service.call.should_rate_limit.redis_error"),
        metric(
            "ratelimit_service_should_rate_limit_error",
            &[("err_type", "redis_error")]
        )
    );
}

#[test]
fn a_bad_file_is_refused_naming_the_mapping_and_key() {
    for (text, said) in [
        (
            "mappings:\n- {match: a.b, name: x}\n- {match: a.c, nmae: y}\n",
            "line 3: mappings[1].nmae: unknown key",
        ),
        (
            "mappings:\n- {match: a.b, name: x, match_type: fuzzy}\n",
            "mappings[0].match_type: \"fuzzy\" is not a match type",
        ),
        (
            "mappings:\n- {match: a.b, name: x, action: keep}\n",
            "mappings[0].action: \"keep\" is not an action",
        ),
        (
            "mappings:\n- {match: 'a.b(', match_type: regex, name: x}\n",
            "mappings[0].match: not a regex",
        ),
        (
            "mappings:\n- {match: 'a.b/c', name: x}\n",
            "mappings[0].match: \"a.b/c\" is not a glob",
        ),
        (
            "mappings:\n- {match: a.b}\n",
            "mappings[0].name: is missing",
        ),
        ("mappings:\n- {name: x}\n", "mappings[0].match: is missing"),
        (
            "mappings:\n- {match: a.b, name: 'a.b'}\n",
            "mappings[0].name: \"a.b\" is not a metric name",
        ),
        (
            "mappings:\n- {match: a.b, name: x, labels: {0k: v}}\n",
            "mappings[0].labels.0k: is not a label name",
        ),
        (
            "mappings:\n- {match: a.b, name: x, labels: [a]}\n",
            "mappings[0].labels: must be a map",
        ),
        (
            "mappings:\n- {match: a.b, name: x, match_metric_type: histo}\n",
            "mappings[0].match_metric_type: \"histo\"",
        ),
        ("mappings:\n- a\n", "mappings[0]: must be a map"),
        ("mapings: []\n", "unknown key `mapings`"),
        ("defaults: {glob: 1}\n", "defaults.glob: unknown key"),
        ("mappings: [\n", "not YAML"),
    ] {
        let e = Mapper::parse(text).unwrap_err().to_string();
        assert!(e.contains(said), "{text:?}: {e}");
    }
    let many = format!(
        "mappings:\n{}",
        "- {match: a.b, name: x}\n".repeat(MAX_MAPPINGS + 1)
    );
    let e = Mapper::parse(&many).unwrap_err().to_string();
    assert!(e.contains("more than the 1000 allowed"), "{e}");
}

#[test]
fn a_name_that_maps_to_no_prometheus_name_is_dropped() {
    let m =
        Mapper::parse("mappings:\n- {match: '(.*)', match_type: regex, name: 'x_$1'}\n").unwrap();
    assert_eq!(counter(&m, "a_b"), metric("x_a_b", &[]));
    assert_eq!(counter(&m, "a.b"), Mapped::Drop);
}
