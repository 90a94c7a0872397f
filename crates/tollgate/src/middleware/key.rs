//! Where a request's key comes from: [`KeyExtractor`], with a blanket impl for closures, the
//! client's address ([`ClientIp`], trusting forwarding headers only from trusted proxies) and a
//! header ([`Header`], e.g. an API key).

use std::fmt;
use std::net::{IpAddr, SocketAddr};
use std::num::NonZeroUsize;
use std::sync::Arc;

use http::HeaderName;
use http::request::Parts;

use ipnet::IpNet;

use super::net;

/// Extracts the rate-limit key of a request.
///
/// Any `Fn(&Parts) -> Option<K>` where `K: Into<Vec<u8>>` is one:
///
/// ```
/// use http::request::Parts;
/// use tollgate::middleware::KeyExtractor;
///
/// let by_tenant = |parts: &Parts| {
///     parts.uri.path().strip_prefix("/tenants/")?.split('/').next().map(str::to_owned)
/// };
/// let (parts, ()) = http::Request::get("/tenants/acme/users").body(()).unwrap().into_parts();
/// assert_eq!(by_tenant.extract(&parts), Some(b"acme".to_vec()));
/// ```
pub trait KeyExtractor: Send + Sync + 'static {
    /// The key of the request, or `None` when it has none (the layer's
    /// `on_missing_key`, a [`MissingKey`], decides what then).
    fn extract(&self, parts: &Parts) -> Option<Vec<u8>>;
}

impl<F, K> KeyExtractor for F
where
    F: Fn(&Parts) -> Option<K> + Send + Sync + 'static,
    K: Into<Vec<u8>>,
{
    fn extract(&self, parts: &Parts) -> Option<Vec<u8>> {
        self(parts).map(Into::into)
    }
}

/// The value of a request header, such as an API key.
///
/// ```
/// use http::HeaderName;
/// use tollgate::middleware::{Header, KeyExtractor};
///
/// let api_key = Header::new(HeaderName::from_static("x-api-key"));
/// let (parts, ()) = http::Request::get("/").header("x-api-key", "k-123").body(()).unwrap().into_parts();
/// assert_eq!(api_key.extract(&parts), Some(b"k-123".to_vec()));
/// let (anonymous, ()) = http::Request::get("/").body(()).unwrap().into_parts();
/// assert_eq!(api_key.extract(&anonymous), None); // no key: see `on_missing_key`
/// ```
#[derive(Debug, Clone)]
pub struct Header {
    name: HeaderName,
}

impl Header {
    /// Keys requests by the header `name`; a request without it has no key.
    pub fn new(name: HeaderName) -> Header {
        Header { name }
    }
}

impl KeyExtractor for Header {
    fn extract(&self, parts: &Parts) -> Option<Vec<u8>> {
        let value = parts.headers.get(&self.name)?.as_bytes();
        (!value.is_empty()).then(|| value.to_vec())
    }
}

/// Which header trusted proxies record the client in.
///
/// ```
/// use std::net::SocketAddr;
/// use tollgate::middleware::{ClientIp, ForwardedHeader};
///
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let client_ip = ClientIp::new()
///     .trust(["10.0.0.0/8".parse()?])
///     .header(ForwardedHeader::Forwarded); // RFC 7239, as Envoy or HAProxy can write it
/// let mut request = http::Request::get("/").header("forwarded", "for=198.51.100.17;proto=https");
/// request.extensions_mut().unwrap().insert("10.1.2.3:443".parse::<SocketAddr>()?);
/// let (parts, ()) = request.body(())?.into_parts();
/// assert_eq!(client_ip.client(&parts), Some("198.51.100.17".parse()?));
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum ForwardedHeader {
    /// `X-Forwarded-For: client, proxy1, proxy2`.
    #[default]
    XForwardedFor,
    /// `Forwarded: for=client, for=proxy1` (RFC 7239).
    Forwarded,
}

/// The client's IP address: the peer of the connection, or, when the peer is a trusted proxy,
/// the client that the proxies recorded in a forwarding header.
///
/// The header is walked from the right (the hop nearest to us) and the first address that is
/// not a trusted proxy is the client: entries further left were written by the client itself
/// and could be anything. With no trusted proxies (the default) headers are ignored entirely.
/// IPv6 clients are grouped by prefix (default /64, what one subscriber usually gets), so
/// rotating through one's own addresses does not multiply one's budget.
///
/// The peer address is read from the request's extensions, where the server put it:
///
/// - **axum**: `ConnectInfo<SocketAddr>` (feature `axum`), when the app is served with
///   `app.into_make_service_with_connect_info::<SocketAddr>()`;
/// - **hyper**: a bare `SocketAddr`, which the `PeerAddrLayer` of this module inserts
///   for each connection;
/// - **tonic**, or any server that records it in a type of its own: [`peer_addr`](Self::peer_addr)
///   says where: `ClientIp::new().peer_addr(|parts|
///   parts.extensions.get::<tonic::transport::server::TcpConnectInfo>()?.remote_addr())`.
///   Over TLS tonic records `TlsConnectInfo<TcpConnectInfo>` instead: read it too, with
///   `.or_else(|| parts.extensions.get::<TlsConnectInfo<TcpConnectInfo>>()?.get_ref().remote_addr())`.
///
/// A request without one has no key: the layer answers `400` naming the fix, and logs it once
/// (at error level, with `tracing`) on the first such request, also when
/// [`MissingKey::Allow`] lets it through unlimited. No layer can know
/// its server before requests arrive, so the first request is the earliest it can tell.
///
/// ```
/// use std::net::SocketAddr;
/// use tollgate::middleware::{ClientIp, KeyExtractor};
///
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// // Behind a load balancer at 10.0.0.5, which appends the client to X-Forwarded-For.
/// let client_ip = ClientIp::new().trust(["10.0.0.5/32".parse()?]);
/// let mut request = http::Request::get("/").header("x-forwarded-for", "6.6.6.6, 203.0.113.9");
/// request.extensions_mut().unwrap().insert("10.0.0.5:40000".parse::<SocketAddr>()?);
/// let (parts, ()) = request.body(())?.into_parts();
/// // The rightmost hop the balancer did not write itself; 6.6.6.6 is the client's own claim.
/// assert_eq!(client_ip.client(&parts), Some("203.0.113.9".parse()?));
/// assert_eq!(client_ip.extract(&parts), Some(b"ip:203.0.113.9".to_vec()));
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct ClientIp {
    trusted: Vec<IpNet>,
    /// The number of proxies in front, when they are counted rather than known by address.
    hops: Option<NonZeroUsize>,
    header: ForwardedHeader,
    ipv6_prefix: u8,
    /// Where the peer address is, when the server keeps it in a type of its own.
    peer: Option<Arc<PeerFn>>,
}

type PeerFn = dyn Fn(&Parts) -> Option<SocketAddr> + Send + Sync;

impl Default for ClientIp {
    fn default() -> ClientIp {
        ClientIp {
            trusted: Vec::new(),
            hops: None,
            header: ForwardedHeader::XForwardedFor,
            ipv6_prefix: 64,
            peer: None,
        }
    }
}

impl fmt::Debug for ClientIp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ClientIp")
            .field("trusted", &self.trusted)
            .field("hops", &self.hops)
            .field("header", &self.header)
            .field("ipv6_prefix", &self.ipv6_prefix)
            .field("peer_addr", &self.peer.as_ref().map(|_| "custom"))
            .finish()
    }
}

impl ClientIp {
    /// The peer's address, trusting no proxy.
    pub fn new() -> ClientIp {
        ClientIp::default()
    }

    /// Trusts the proxies in `nets` to report the client in the forwarding header: blocks
    /// such as `"10.0.0.0/8".parse()?` (an address alone is `IpNet::from(addr)`, or
    /// `"127.0.0.1/32"`); an IPv4-mapped IPv6 block counts as the IPv4 block it maps.
    pub fn trust(mut self, nets: impl IntoIterator<Item = IpNet>) -> ClientIp {
        self.trusted
            .extend(nets.into_iter().map(net::canonical_net));
        self
    }

    /// Trusts the `hops` proxies in front of the server, known by their number rather than
    /// their addresses (a cloud load balancer whose addresses change): the peer is the
    /// nearest, each proxy appends the address it was connected from, so the client is the
    /// `hops`-th entry from the right of the forwarding header (the farthest one when it
    /// holds fewer). The address trust of [`trust`](Self::trust) is then not consulted.
    ///
    /// Only sound when nothing reaches the server but through those proxies: a client that
    /// connects directly writes the header itself.
    ///
    /// ```
    /// use std::net::SocketAddr;
    /// use std::num::NonZeroUsize;
    /// use tollgate::middleware::ClientIp;
    ///
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// // A CDN in front of a load balancer: two proxies.
    /// let client_ip = ClientIp::new().trust_hops(NonZeroUsize::new(2).unwrap());
    /// let mut request = http::Request::get("/")
    ///     .header("x-forwarded-for", "6.6.6.6, 203.0.113.9, 198.51.100.1");
    /// request.extensions_mut().unwrap().insert("10.0.0.5:40000".parse::<SocketAddr>()?);
    /// let (parts, ()) = request.body(())?.into_parts();
    /// // 198.51.100.1 is the CDN's edge, written by the load balancer; the CDN wrote the client.
    /// assert_eq!(client_ip.client(&parts), Some("203.0.113.9".parse()?));
    /// # Ok(())
    /// # }
    /// ```
    pub fn trust_hops(mut self, hops: NonZeroUsize) -> ClientIp {
        self.hops = Some(hops);
        self
    }

    /// Reads `header` from trusted proxies (default `X-Forwarded-For`).
    pub fn header(mut self, header: ForwardedHeader) -> ClientIp {
        self.header = header;
        self
    }

    /// Groups IPv6 clients by their first `bits` bits (default 64; 128 keys each address).
    pub fn ipv6_prefix(mut self, bits: u8) -> ClientIp {
        self.ipv6_prefix = bits.min(128);
        self
    }

    /// Reads the peer address with `peer` instead of from axum's `ConnectInfo` or a bare
    /// `SocketAddr`: for servers that record it in a type of their own, as tonic does.
    ///
    /// ```
    /// use std::net::SocketAddr;
    /// use tollgate::middleware::{ClientIp, KeyExtractor};
    ///
    /// // What a server of one's own records per connection (tonic's is `TcpConnectInfo`:
    /// // `parts.extensions.get::<tonic::transport::server::TcpConnectInfo>()?.remote_addr()`).
    /// #[derive(Clone)]
    /// struct Connection { remote: SocketAddr }
    ///
    /// let client_ip = ClientIp::new()
    ///     .peer_addr(|parts| parts.extensions.get::<Connection>().map(|c| c.remote));
    /// let mut request = http::Request::new(());
    /// request.extensions_mut().insert(Connection { remote: "192.0.2.7:5000".parse().unwrap() });
    /// let (parts, ()) = request.into_parts();
    /// assert_eq!(client_ip.extract(&parts), Some(b"ip:192.0.2.7".to_vec()));
    /// ```
    pub fn peer_addr(
        mut self,
        peer: impl Fn(&Parts) -> Option<SocketAddr> + Send + Sync + 'static,
    ) -> ClientIp {
        self.peer = Some(Arc::new(peer));
        self
    }

    /// The peer of the connection, from what the server put in the request's extensions.
    pub(crate) fn peer(&self, parts: &Parts) -> Option<SocketAddr> {
        if let Some(peer) = &self.peer {
            return peer(parts);
        }
        #[cfg(feature = "axum")]
        if let Some(axum::extract::ConnectInfo(addr)) = parts
            .extensions
            .get::<axum::extract::ConnectInfo<SocketAddr>>()
        {
            return Some(*addr);
        }
        parts.extensions.get::<SocketAddr>().copied()
    }

    fn is_trusted(&self, ip: IpAddr) -> bool {
        let ip = net::canonical(ip);
        self.trusted.iter().any(|net| net.contains(&ip))
    }

    /// The client's address (before grouping), or `None` without a peer address or when a
    /// trusted hop recorded something that is not an address.
    pub fn client(&self, parts: &Parts) -> Option<IpAddr> {
        let peer = net::canonical(self.peer(parts)?.ip());
        if self.hops.is_none() && !self.is_trusted(peer) {
            return Some(peer);
        }
        let values = |name| {
            parts
                .headers
                .get_all(name)
                .iter()
                .filter_map(|v| v.to_str().ok())
        };
        let hops = match self.header {
            ForwardedHeader::XForwardedFor => net::x_forwarded_for(values("x-forwarded-for")),
            ForwardedHeader::Forwarded => net::forwarded(values("forwarded")),
        };
        if let Some(count) = self.hops {
            // The peer is the first proxy; the other `count - 1` wrote the entries to the
            // right of the client's.
            return match hops.len().checked_sub(count.get()) {
                Some(at) => net::parse_hop(hops[at]),
                None => hops
                    .first()
                    .map_or(Some(peer), |farthest| net::parse_hop(farthest)),
            };
        }
        let mut client = peer;
        for hop in hops.iter().rev() {
            client = net::parse_hop(hop)?;
            if !self.is_trusted(client) {
                return Some(client);
            }
        }
        // Every hop is a trusted proxy: the farthest one is the client.
        Some(client)
    }
}

impl KeyExtractor for ClientIp {
    fn extract(&self, parts: &Parts) -> Option<Vec<u8>> {
        Some(match self.client(parts)? {
            IpAddr::V4(v4) => ipv4_key(v4),
            v6 @ IpAddr::V6(_) => {
                let group = net::mask(v6, self.ipv6_prefix);
                format!("ip:{group}/{}", self.ipv6_prefix).into_bytes()
            }
        })
    }
}

/// `ip:` and the dotted quad, written by hand: through `format!` it was a tenth of the
/// middleware's own time per request.
fn ipv4_key(ip: std::net::Ipv4Addr) -> Vec<u8> {
    let mut key = Vec::with_capacity(18);
    key.extend_from_slice(b"ip:");
    for (i, octet) in ip.octets().into_iter().enumerate() {
        if i > 0 {
            key.push(b'.');
        }
        if octet >= 100 {
            key.push(b'0' + octet / 100);
        }
        if octet >= 10 {
            key.push(b'0' + octet / 10 % 10);
        }
        key.push(b'0' + octet % 10);
    }
    key
}

/// What to do with a request that has no key.
///
/// ```
/// use http::HeaderName;
/// use tollgate::middleware::{Header, MissingKey, TollgateLayer};
/// use tollgate::{MemoryStore, Policy};
///
/// // Limit callers by API key; requests without one (health checks) pass unlimited.
/// let layer = TollgateLayer::builder(MemoryStore::new())
///     .policy("api", Policy::per_second(100)?)
///     .key(Header::new(HeaderName::from_static("x-api-key")))
///     .on_missing_key(MissingKey::Allow)
///     .build()?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum MissingKey {
    /// Answer 400 (gRPC `INVALID_ARGUMENT`): the request cannot be accounted for (the default).
    #[default]
    Reject,
    /// Let it through unlimited, e.g. for health checks without an API key.
    Allow,
}

#[cfg(test)]
mod tests {
    #[test]
    fn trusted_hops_count_from_the_right_and_stop_at_the_farthest() {
        let hops = |n| ClientIp::new().trust_hops(NonZeroUsize::new(n).unwrap());
        let xff = |v| parts("10.0.0.5:1", &[("x-forwarded-for", v)]);
        let client = |ip: &ClientIp, p| ip.client(p).map(|a| a.to_string());
        let three = xff("6.6.6.6, 203.0.113.9, 198.51.100.1");
        assert_eq!(client(&hops(1), &three).as_deref(), Some("198.51.100.1"));
        assert_eq!(client(&hops(2), &three).as_deref(), Some("203.0.113.9"));
        assert_eq!(client(&hops(3), &three).as_deref(), Some("6.6.6.6"));
        // Fewer entries than proxies: the farthest one.
        assert_eq!(client(&hops(5), &three).as_deref(), Some("6.6.6.6"));
        // No header: the peer itself.
        let bare = parts("10.0.0.5:1", &[]);
        assert_eq!(client(&hops(2), &bare).as_deref(), Some("10.0.0.5"));
        // A hop that is not an address: no client, no key.
        let unknown = xff("unknown");
        assert_eq!(client(&hops(1), &unknown), None);
        // The Forwarded header counts the same way.
        let forwarded = parts(
            "10.0.0.5:1",
            &[("forwarded", "for=192.0.2.60, for=198.51.100.17")],
        );
        let ip = hops(2).header(ForwardedHeader::Forwarded);
        assert_eq!(client(&ip, &forwarded).as_deref(), Some("192.0.2.60"));
        // Address trust is not consulted: the peer need not be in a trusted block.
        let ip = hops(1).trust(["192.168.0.0/16".parse().unwrap()]);
        assert_eq!(client(&ip, &three).as_deref(), Some("198.51.100.1"));
    }

    #[test]
    fn ipv4_keys_are_dotted_quads() {
        for ip in [
            "0.0.0.0",
            "9.10.99.100",
            "255.255.255.255",
            "10.1.2.3",
            "192.168.100.7",
        ] {
            let parsed: std::net::Ipv4Addr = ip.parse().unwrap();
            assert_eq!(super::ipv4_key(parsed), format!("ip:{ip}").into_bytes());
        }
    }

    use super::*;

    fn parts(peer: &str, headers: &[(&str, &str)]) -> Parts {
        let mut request = http::Request::get("/").body(()).unwrap();
        request
            .extensions_mut()
            .insert(peer.parse::<SocketAddr>().unwrap());
        for (name, value) in headers {
            request.headers_mut().append(
                HeaderName::from_bytes(name.as_bytes()).unwrap(),
                value.parse().unwrap(),
            );
        }
        request.into_parts().0
    }

    fn trusting(nets: &[&str]) -> ClientIp {
        ClientIp::new().trust(nets.iter().map(|n| n.parse().unwrap()))
    }

    fn key(extractor: &impl KeyExtractor, parts: &Parts) -> Option<String> {
        extractor
            .extract(parts)
            .map(|k| String::from_utf8(k).unwrap())
    }

    #[test]
    fn without_trusted_proxies_headers_are_ignored() {
        let p = parts("198.51.100.7:5000", &[("x-forwarded-for", "1.2.3.4")]);
        assert_eq!(
            key(&ClientIp::new(), &p).as_deref(),
            Some("ip:198.51.100.7")
        );
    }

    #[test]
    fn an_untrusted_peer_cannot_choose_its_key() {
        let p = parts("198.51.100.7:5000", &[("x-forwarded-for", "1.2.3.4")]);
        let ip = trusting(&["10.0.0.0/8"]);
        assert_eq!(key(&ip, &p).as_deref(), Some("ip:198.51.100.7"));
    }

    #[test]
    fn behind_trusted_proxies_the_rightmost_untrusted_hop_is_the_client() {
        let ip = trusting(&["10.0.0.0/8", "127.0.0.1/32"]);
        // The client's own (spoofed) entry is left of the address the first proxy saw.
        let p = parts(
            "127.0.0.1:80",
            &[
                ("x-forwarded-for", "6.6.6.6, 203.0.113.9"),
                ("x-forwarded-for", "10.1.2.3"),
            ],
        );
        assert_eq!(key(&ip, &p).as_deref(), Some("ip:203.0.113.9"));
        // All hops trusted: the farthest is the client.
        let p = parts("127.0.0.1:80", &[("x-forwarded-for", "10.9.9.9, 10.1.2.3")]);
        assert_eq!(key(&ip, &p).as_deref(), Some("ip:10.9.9.9"));
        // No header: the proxy itself.
        let p = parts("127.0.0.1:80", &[]);
        assert_eq!(key(&ip, &p).as_deref(), Some("ip:127.0.0.1"));
        // A trusted proxy that wrote garbage next to us: no key rather than a wrong one.
        let p = parts(
            "127.0.0.1:80",
            &[("x-forwarded-for", "203.0.113.9, garbage")],
        );
        assert_eq!(key(&ip, &p), None);
    }

    #[test]
    fn the_forwarded_header_when_configured() {
        let ip = trusting(&["127.0.0.1/32"]).header(ForwardedHeader::Forwarded);
        let p = parts(
            "127.0.0.1:80",
            &[
                ("x-forwarded-for", "6.6.6.6"),
                ("forwarded", r#"for="[2001:db8:1:2::99]:4711";proto=https"#),
            ],
        );
        assert_eq!(key(&ip, &p).as_deref(), Some("ip:2001:db8:1:2::/64"));
    }

    #[test]
    fn ipv6_clients_are_grouped_by_prefix() {
        let a = parts("[2001:db8:1:2::1]:5000", &[]);
        let b = parts("[2001:db8:1:2:ffff::9]:5000", &[]);
        let c = parts("[2001:db8:1:3::1]:5000", &[]);
        let ip = ClientIp::new();
        assert_eq!(key(&ip, &a), key(&ip, &b));
        assert_ne!(key(&ip, &a), key(&ip, &c));
        let exact = ClientIp::new().ipv6_prefix(128);
        assert_ne!(key(&exact, &a), key(&exact, &b));
        // A dual-stack socket's IPv4-mapped peer is plain IPv4.
        let mapped = parts("[::ffff:192.0.2.1]:5000", &[]);
        assert_eq!(key(&ip, &mapped).as_deref(), Some("ip:192.0.2.1"));
    }

    #[test]
    fn headers_and_closures_key_requests() {
        let api = Header::new(HeaderName::from_static("x-api-key"));
        let p = parts("192.0.2.1:1", &[("x-api-key", "k-123")]);
        assert_eq!(key(&api, &p).as_deref(), Some("k-123"));
        assert_eq!(key(&api, &parts("192.0.2.1:1", &[])), None);
        let by_path = |parts: &Parts| Some(parts.uri.path().to_owned());
        assert_eq!(key(&by_path, &p).as_deref(), Some("/"));
    }

    #[test]
    fn no_peer_address_no_key() {
        let (parts, ()) = http::Request::get("/").body(()).unwrap().into_parts();
        assert_eq!(ClientIp::new().extract(&parts), None);
    }
}
