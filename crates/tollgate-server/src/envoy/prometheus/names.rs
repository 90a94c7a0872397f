//! The statsd names envoyproxy/ratelimit emits for what the Envoy front end counts:
//! `ratelimit.service.rate_limit.KEY.total_hits` (and `over_limit`, `near_limit`,
//! `within_limit`, `shadow_mode`) per descriptor key, whose `KEY` is the domain and the
//! descriptors' `key_value` path, sanitized as upstream's `SanitizeStatName` does;
//! `ratelimit.service.config_load_success` / `config_load_error`;
//! `ratelimit_server.ShouldRateLimit.total_requests`; and
//! `ratelimit.service.call.should_rate_limit.redis_error` / `service_error`.

use std::sync::LazyLock;
use std::sync::atomic::Ordering;

use prometheus::core::Collector;
use regex::Regex;

use crate::envoy::metrics::EnvoyMetrics;

/// Each counter under its statsd name, with its value.
pub(super) fn statsd_counters(metrics: &EnvoyMetrics) -> Vec<(String, u64)> {
    let mut out = Vec::new();
    for (outcome, family) in metrics.hit_families() {
        for collected in family.collect() {
            for metric in collected.get_metric() {
                let label = |name: &str| {
                    metric
                        .get_label()
                        .iter()
                        .find(|pair| pair.name() == name)
                        .map_or("", |pair| pair.value())
                };
                let (domain, key) = (label("domain"), label("key"));
                let stat = if key.is_empty() {
                    sanitize(domain)
                } else {
                    sanitize(&format!("{domain}.{key}"))
                };
                // Counters count whole hits.
                #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
                let value = metric.get_counter().get_value() as u64;
                out.push((
                    format!("ratelimit.service.rate_limit.{stat}.{outcome}"),
                    value,
                ));
            }
        }
    }
    for (ok, name) in [(true, "config_load_success"), (false, "config_load_error")] {
        out.push((format!("ratelimit.service.{name}"), metrics.loads(ok)));
    }
    let calls = &metrics.calls;
    for (name, count) in [
        (
            "ratelimit_server.ShouldRateLimit.total_requests",
            &calls.total,
        ),
        (
            "ratelimit.service.call.should_rate_limit.redis_error",
            &calls.store_errors,
        ),
        (
            "ratelimit.service.call.should_rate_limit.service_error",
            &calls.service_errors,
        ),
    ] {
        out.push((name.to_owned(), count.load(Ordering::Relaxed)));
    }
    out
}

/// A dotted IPv4 address (Go's `\d` is ASCII digits).
static IPV4: LazyLock<Option<Regex>> =
    LazyLock::new(|| Regex::new(r"[0-9]{1,3}\.[0-9]{1,3}\.[0-9]{1,3}\.[0-9]{1,3}").ok());

/// `:` and `|` (statsd's separators) as `_`, and the dots of an IPv4 address as `_`, so that an
/// address is one component of the name.
fn sanitize(key: &str) -> String {
    let key = key.replace([':', '|'], "_");
    match IPV4.as_ref() {
        Some(ipv4) => ipv4
            .replace_all(&key, |c: &regex::Captures<'_>| c[0].replace('.', "_"))
            .into_owned(),
        None => key,
    }
}

#[cfg(test)]
mod tests {
    use super::sanitize;

    #[test]
    fn addresses_and_separators_are_one_component() {
        assert_eq!(
            sanitize("edge.remote_address_10.0.0.1.path_/a:b|c"),
            "edge.remote_address_10_0_0_1.path_/a_b_c"
        );
        assert_eq!(sanitize("d.k_v"), "d.k_v");
    }
}
