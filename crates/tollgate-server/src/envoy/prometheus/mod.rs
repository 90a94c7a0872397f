//! envoyproxy/ratelimit's Prometheus exporter (`USE_PROMETHEUS`, `[grpc.prometheus]`): on a
//! listener of its own, at its path, the Envoy front end's counters under the statsd names
//! upstream emits (`names`), turned into Prometheus names and labels by a
//! statsd_exporter-style mapping ([`mapper`]: the file `PROMETHEUS_MAPPER_YAML` names, or
//! upstream's default), in the Prometheus text format (`text`).
//!
//! The series are those of [`EnvoyMetrics`](super::metrics::EnvoyMetrics), whose count is
//! bounded there; what each statsd name maps to is kept between scrapes, at most
//! [`MAX_CACHED`] names (past that the cache starts over).

pub mod mapper;
mod names;
mod text;

use std::collections::HashMap;
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use std::sync::{Arc, Mutex, PoisonError};

use axum::Router;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;

use super::Envoy;
use mapper::{Mapped, Mapper, MetricType};

/// Where the exporter listens unless told (upstream's `PROMETHEUS_ADDR` default `:9090`).
pub const DEFAULT_LISTEN: SocketAddr =
    SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, 9090));

/// The path it serves unless told (upstream's `PROMETHEUS_PATH`).
pub const DEFAULT_PATH: &str = "/metrics";

/// The most statsd names whose mapping is kept between scrapes.
pub const MAX_CACHED: usize = 100_000;

/// The exporter's settings (`[grpc.prometheus]`).
#[derive(Debug, Clone, PartialEq)]
pub struct PrometheusSettings {
    /// Where it listens.
    pub listen: SocketAddr,
    /// The one path it serves.
    pub path: String,
    /// The mapping: the file's (`mapper`), or upstream's default.
    pub mapper: Arc<Mapper>,
}

/// Whether `path` can be served: it starts with `/` and has no characters of a route pattern,
/// a query or a fragment.
pub fn check_path(path: &str) -> Result<(), String> {
    let bad = |c: char| matches!(c, '{' | '}' | '*' | '?' | '#') || c.is_whitespace();
    if !path.starts_with('/') || path.contains(bad) {
        return Err(format!(
            "{path:?} is not a path to serve (it starts with `/`, without `{{`, `}}`, `*`, `?`, \
             `#` or spaces)"
        ));
    }
    Ok(())
}

/// The exporter's state: the front end it reads, the mapping, and what names mapped to.
struct Exporter {
    envoy: Arc<Envoy>,
    mapper: Arc<Mapper>,
    cache: Mutex<HashMap<String, Mapped>>,
}

/// The exporter's one route, `settings.path`.
pub fn router(envoy: Arc<Envoy>, settings: &PrometheusSettings) -> Router {
    let exporter = Arc::new(Exporter {
        envoy,
        mapper: Arc::clone(&settings.mapper),
        cache: Mutex::default(),
    });
    Router::new().route(
        &settings.path,
        get(move || {
            let exporter = Arc::clone(&exporter);
            async move { scrape(exporter).await }
        }),
    )
}

/// Maps and writes the counters, off the async workers (a mapping of a thousand regexes over
/// every series is work).
async fn scrape(exporter: Arc<Exporter>) -> Response {
    match tokio::task::spawn_blocking(move || exporter.render()).await {
        Ok(body) => ([(header::CONTENT_TYPE, text::CONTENT_TYPE)], body).into_response(),
        Err(_) => StatusCode::INTERNAL_SERVER_ERROR.into_response(),
    }
}

impl Exporter {
    fn render(&self) -> String {
        let counters = names::statsd_counters(self.envoy.metrics());
        let mut families = text::Families::default();
        let mut cache = self.cache.lock().unwrap_or_else(PoisonError::into_inner);
        for (statsd, value) in counters {
            let mapped = match cache.get(&statsd) {
                Some(mapped) => mapped.clone(),
                None => {
                    let mapped = self.mapper.map(&statsd, MetricType::Counter);
                    if cache.len() >= MAX_CACHED {
                        cache.clear();
                    }
                    cache.insert(statsd, mapped.clone());
                    mapped
                }
            };
            if let Mapped::Metric { name, labels, help } = mapped {
                families.add_counter(name, labels, help, value);
            }
        }
        drop(cache);
        families.render()
    }
}
