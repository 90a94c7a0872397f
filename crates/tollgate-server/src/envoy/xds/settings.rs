//! `[grpc.xds]` resolved: where the management server is, who tollgate says it is, how it
//! talks to it, and how long it waits before trying again. Defaults are envoyproxy/ratelimit's.

use std::collections::BTreeMap;
use std::hash::{BuildHasher, Hasher};
use std::path::PathBuf;
use std::time::Duration;

/// `node_id` when none is given (`CONFIG_GRPC_XDS_NODE_ID`'s default).
pub const DEFAULT_NODE_ID: &str = "default";

/// `max_message_size` when none is given: gRPC's own limit on a received message, which
/// envoyproxy/ratelimit keeps unless `XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES` is set.
pub const DEFAULT_MAX_MESSAGE_SIZE: usize = 4 << 20;

/// The largest `max_message_size` accepted: a response is held whole while it is decoded.
pub const MAX_MESSAGE_SIZE: usize = 256 << 20;

/// The most resources one response may carry: as many as a config directory may hold files
/// ([`MAX_FILES`](crate::descriptors::config::MAX_FILES)); more is refused (NACKed).
pub const MAX_RESOURCES: usize = crate::descriptors::config::MAX_FILES;

/// `retry_interval` when none is given (`CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL`).
pub const DEFAULT_RETRY_INTERVAL: Duration = Duration::from_secs(3);

/// The backoff when none is given (`XDS_CLIENT_BACKOFF_*`).
pub const DEFAULT_BACKOFF: Backoff = Backoff {
    initial: Duration::from_secs(10),
    max: Duration::from_secs(60),
    factor: 0.5,
    jitter: true,
};

/// Configuration over xDS: `[grpc.xds]`.
#[derive(Debug, Clone, PartialEq)]
pub struct XdsSettings {
    /// The management server's host.
    pub host: String,
    /// Its port.
    pub port: u16,
    /// The node id tollgate gives (the management server's snapshots are keyed by it).
    pub node_id: String,
    /// The node's metadata, each value a string.
    pub node_metadata: BTreeMap<String, String>,
    /// gRPC metadata sent with the stream (lowercase names).
    pub headers: BTreeMap<String, String>,
    /// The largest response accepted, in bytes.
    pub max_message_size: usize,
    /// Serve at once, before the first config arrives (requests are answered with an error
    /// meanwhile); without, the server starts listening only once the first response has
    /// been handled.
    pub force_start_without_initial_config: bool,
    /// The wait between attempts to connect (jittered by ±50%).
    pub retry_interval: Duration,
    /// The wait before a new stream once one has ended.
    pub backoff: Backoff,
    /// TLS to the management server; `None`: plain text.
    pub tls: Option<XdsTls>,
}

impl XdsSettings {
    /// `url` as the management server's `host:port` (`[::1]:18000` for an IPv6 address).
    pub fn parse_url(url: &str) -> Result<(String, u16), String> {
        let (host, port) = url.rsplit_once(':').ok_or_else(|| {
            format!(
                "{url:?} is not host:port (write the management server as \"envoy-gateway:18001\")"
            )
        })?;
        let port = port
            .parse::<u16>()
            .ok()
            .filter(|p| *p != 0)
            .ok_or_else(|| format!("{url:?} has no valid port (1 to 65535) after its last ':'"))?;
        let host = host
            .strip_prefix('[')
            .and_then(|h| h.strip_suffix(']'))
            .unwrap_or(host);
        if host.is_empty() || host.contains(['/', ' ', '[', ']']) {
            return Err(format!(
                "{url:?} has no valid host before its port (write host:port, no scheme)"
            ));
        }
        Ok((host.to_owned(), port))
    }

    /// The `host:port` it connects to, as given.
    pub fn url(&self) -> String {
        if self.host.contains(':') {
            format!("[{}]:{}", self.host, self.port)
        } else {
            format!("{}:{}", self.host, self.port)
        }
    }
}

/// `[grpc.xds.tls]`: files are read again at each connection (a rotated certificate is used
/// from the next one).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct XdsTls {
    /// The CA the server's certificate must chain to; `None`: the system's roots.
    pub ca: Option<PathBuf>,
    /// Tollgate's client certificate (with `key`: mutual TLS).
    pub cert: Option<PathBuf>,
    /// Its private key.
    pub key: Option<PathBuf>,
    /// The name the server's certificate must carry; `None`: the URL's host.
    pub server_name: Option<String>,
}

/// envoyproxy/ratelimit's backoff between streams (jpillora/backoff as it configures it): the
/// `n`th wait is `initial × factor^n`, jittered uniformly between `initial` and that, and kept
/// within `[initial, max]`. A factor above 0 and at most 1 (its default, 0.5) makes every
/// wait `initial`; 0 or less counts as 2.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Backoff {
    /// The first wait, and the least.
    pub initial: Duration,
    /// The most.
    pub max: Duration,
    /// The growth per attempt (`XDS_CLIENT_BACKOFF_RANDOM_FACTOR`); 0 or less counts as 2.
    pub factor: f64,
    /// Whether waits are jittered.
    pub jitter: bool,
}

impl Backoff {
    /// The wait before attempt `attempt` (from 0), `random` uniform in `[0, 1)`.
    pub fn delay(&self, attempt: u32, random: f64) -> Duration {
        if self.initial >= self.max {
            return self.max;
        }
        let factor = if self.factor <= 0.0 { 2.0 } else { self.factor };
        let min = self.initial.as_secs_f64();
        let mut wait = min * factor.powi(i32::try_from(attempt).unwrap_or(i32::MAX));
        if self.jitter {
            wait = random * (wait - min) + min;
        }
        if !wait.is_finite() || wait >= self.max.as_secs_f64() {
            return self.max;
        }
        Duration::from_secs_f64(wait).max(self.initial)
    }
}

/// A number uniform in `[0, 1)` for jitter: the standard library's per-use random hash keys
/// are enough, nothing here is a secret.
pub(crate) fn random() -> f64 {
    let bits = std::collections::hash_map::RandomState::new()
        .build_hasher()
        .finish();
    (bits >> 11) as f64 / (1u64 << 53) as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_are_host_and_port() {
        assert_eq!(
            XdsSettings::parse_url("envoy-gateway:18001"),
            Ok(("envoy-gateway".to_owned(), 18001))
        );
        assert_eq!(
            XdsSettings::parse_url("[::1]:18000"),
            Ok(("::1".to_owned(), 18000))
        );
        for bad in [
            "envoy-gateway",
            "host:0",
            "host:99999",
            ":80",
            "http://h:1/x",
        ] {
            assert!(XdsSettings::parse_url(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn backoff_grows_as_upstream_and_stays_within_bounds() {
        // Upstream's defaults: the factor 0.5 never grows the wait.
        for attempt in 0..10 {
            assert_eq!(DEFAULT_BACKOFF.delay(attempt, 0.9), Duration::from_secs(10));
        }
        let growing = Backoff {
            initial: Duration::from_secs(1),
            max: Duration::from_secs(30),
            factor: 2.0,
            jitter: false,
        };
        let waits: Vec<u64> = (0..7).map(|a| growing.delay(a, 0.0).as_secs()).collect();
        assert_eq!(waits, [1, 2, 4, 8, 16, 30, 30]);
        let jittered = Backoff {
            jitter: true,
            ..growing
        };
        assert_eq!(jittered.delay(3, 0.0), Duration::from_secs(1));
        assert_eq!(jittered.delay(3, 0.5), Duration::from_millis(4500));
        assert_eq!(jittered.delay(u32::MAX, 0.5), Duration::from_secs(30));
    }

    #[test]
    fn random_is_within_its_range() {
        for _ in 0..1000 {
            let r = random();
            assert!((0.0..1.0).contains(&r), "{r}");
        }
    }
}
