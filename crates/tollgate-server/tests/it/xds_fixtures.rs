//! `RateLimitConfig` resources shaped as Envoy Gateway's xDS translator emits them (its
//! `internal/xds/translator/testdata/out/ratelimit-config` goldens), written afresh for these
//! tests: one domain per listener (`first-listener`), a route's descriptor keyed and valued by
//! the route's name, below it `rule-N-match-M` descriptors (valued by their own name for an
//! exact header match, empty for a distinct one — each value its own bucket), the
//! `rule-N-match--1` of a rule without matches, `masked_remote_address` valued by a CIDR,
//! shared policies in a domain of their own (`namespace/policy`, keyed
//! `namespace/policy/rule/N`), `MONTH` and `YEAR` units, shadow mode down a whole branch, and
//! `detailed_metric`.

use envoy_types::pb::ratelimit::config::ratelimit::v3::{
    RateLimitConfig, RateLimitDescriptor, RateLimitPolicy, RateLimitUnit,
};

/// The listener's domain.
pub const LISTENER: &str = "first-listener";

/// A shared policy's domain.
pub const SHARED: &str = "team-a/shared-policy";

/// A descriptor `key` = `value` with `children`.
pub fn node(key: &str, value: &str, children: Vec<RateLimitDescriptor>) -> RateLimitDescriptor {
    RateLimitDescriptor {
        key: key.to_owned(),
        value: value.to_owned(),
        descriptors: children,
        ..RateLimitDescriptor::default()
    }
}

/// A leaf `key` = `value` limited to `n` per `unit`.
pub fn leaf(key: &str, value: &str, n: u32, unit: RateLimitUnit) -> RateLimitDescriptor {
    RateLimitDescriptor {
        key: key.to_owned(),
        value: value.to_owned(),
        rate_limit: Some(RateLimitPolicy {
            unit: unit as i32,
            requests_per_unit: n,
            ..RateLimitPolicy::default()
        }),
        ..RateLimitDescriptor::default()
    }
}

/// A route's descriptor, as the translator keys it.
pub fn route(name: &str, rules: Vec<RateLimitDescriptor>) -> RateLimitDescriptor {
    node(name, name, rules)
}

/// A resource named and domained `domain`, as the translator names them.
pub fn config(domain: &str, descriptors: Vec<RateLimitDescriptor>) -> RateLimitConfig {
    RateLimitConfig {
        name: domain.to_owned(),
        domain: domain.to_owned(),
        descriptors,
    }
}

/// `descriptor` and all below it in shadow mode, as the translator marks a shadowed rule.
pub fn shadowed(mut descriptor: RateLimitDescriptor) -> RateLimitDescriptor {
    descriptor.shadow_mode = true;
    descriptor.descriptors = descriptor.descriptors.into_iter().map(shadowed).collect();
    descriptor
}

/// The listener's config, `exact` requests a minute for the exact header match of
/// `first-route`: that route's exact match, its distinct match (each user its own bucket, 2 an
/// hour), a rule without matches (`rule-1-match--1`), a masked remote address; a second route
/// by MONTH and YEAR, with `detailed_metric`; a third whose rule is shadowed.
pub fn listener(exact: u32) -> RateLimitConfig {
    let mut yearly = leaf("rule-0-match-1", "rule-0-match-1", 1, RateLimitUnit::Year);
    yearly.detailed_metric = true;
    config(
        LISTENER,
        vec![
            route(
                "first-route",
                vec![
                    leaf(
                        "rule-0-match-0",
                        "rule-0-match-0",
                        exact,
                        RateLimitUnit::Minute,
                    ),
                    leaf("rule-0-match-1", "", 2, RateLimitUnit::Hour),
                    leaf("rule-1-match--1", "rule-1-match--1", 4, RateLimitUnit::Day),
                    leaf(
                        "masked_remote_address",
                        "127.0.0.1/32",
                        1,
                        RateLimitUnit::Hour,
                    ),
                ],
            ),
            route(
                "second-route",
                vec![
                    leaf("rule-0-match-0", "rule-0-match-0", 2, RateLimitUnit::Month),
                    yearly,
                ],
            ),
            route(
                "third-route",
                vec![shadowed(node(
                    "rule-0-match-0",
                    "rule-0-match-0",
                    vec![leaf(
                        "masked_remote_address",
                        "0.0.0.0/0",
                        1,
                        RateLimitUnit::Minute,
                    )],
                ))],
            ),
        ],
    )
}

/// A shared policy: one bucket per distinct header value across every route it applies to.
pub fn shared(n: u32) -> RateLimitConfig {
    config(
        SHARED,
        vec![node(
            &format!("{SHARED}/rule/0"),
            &format!("{SHARED}/rule/0"),
            vec![leaf("rule-0-match-0", "", n, RateLimitUnit::Minute)],
        )],
    )
}
