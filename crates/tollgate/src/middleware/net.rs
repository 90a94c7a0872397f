//! Addresses: CIDR blocks of trusted proxies, prefix grouping, and the hops of
//! `X-Forwarded-For` / `Forwarded` headers.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::str::FromStr;

/// A block of addresses, such as `10.0.0.0/8` or `2001:db8::/32`; a bare address is a block of
/// one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IpNet {
    addr: IpAddr,
    prefix: u8,
}

/// Why a CIDR block could not be parsed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "{input:?} is not an address or CIDR block (such as 10.0.0.0/8 or 2001:db8::/32): {reason}"
)]
pub struct IpNetError {
    input: String,
    reason: &'static str,
}

impl IpNet {
    /// The block of `prefix` leading bits of `addr`.
    pub fn new(addr: IpAddr, prefix: u8) -> Result<IpNet, IpNetError> {
        if prefix > max_prefix(addr) {
            return Err(IpNetError {
                input: format!("{addr}/{prefix}"),
                reason: "the prefix is longer than the address",
            });
        }
        Ok(IpNet {
            addr: mask(addr, prefix),
            prefix,
        })
    }

    /// Whether `ip` is in the block (an IPv4-mapped IPv6 address counts as IPv4).
    pub fn contains(&self, ip: IpAddr) -> bool {
        let ip = canonical(ip);
        matches!(
            (self.addr, ip),
            (IpAddr::V4(_), IpAddr::V4(_)) | (IpAddr::V6(_), IpAddr::V6(_))
        ) && mask(ip, self.prefix) == self.addr
    }
}

impl FromStr for IpNet {
    type Err = IpNetError;

    fn from_str(s: &str) -> Result<IpNet, IpNetError> {
        let error = |reason| IpNetError {
            input: s.to_owned(),
            reason,
        };
        let (addr, prefix) = match s.trim().split_once('/') {
            Some((addr, prefix)) => (addr, Some(prefix)),
            None => (s.trim(), None),
        };
        let addr = canonical(IpAddr::from_str(addr).map_err(|_| error("not an IP address"))?);
        let prefix = match prefix {
            Some(p) => p.parse().map_err(|_| error("the prefix is not a number"))?,
            None => max_prefix(addr),
        };
        IpNet::new(addr, prefix).map_err(|e| error(e.reason))
    }
}

impl fmt::Display for IpNet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.addr, self.prefix)
    }
}

fn max_prefix(addr: IpAddr) -> u8 {
    match addr {
        IpAddr::V4(_) => 32,
        IpAddr::V6(_) => 128,
    }
}

/// IPv4-mapped IPv6 addresses (`::ffff:192.0.2.1`, what a dual-stack socket reports) as IPv4.
pub(crate) fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(IpAddr::V6(v6), IpAddr::V4),
        v4 => v4,
    }
}

/// `ip` with all but its first `prefix` bits cleared.
pub(crate) fn mask(ip: IpAddr, prefix: u8) -> IpAddr {
    match ip {
        IpAddr::V4(v4) => {
            let bits = u32::from(v4);
            let kept = u32::MAX
                .checked_shl(32 - u32::from(prefix.min(32)))
                .unwrap_or(0);
            IpAddr::V4(Ipv4Addr::from(bits & kept))
        }
        IpAddr::V6(v6) => {
            let bits = u128::from(v6);
            let kept = u128::MAX
                .checked_shl(128 - u32::from(prefix.min(128)))
                .unwrap_or(0);
            IpAddr::V6(Ipv6Addr::from(bits & kept))
        }
    }
}

/// One hop of a forwarding header: an address, optionally with a port (`192.0.2.1:4711`,
/// `[2001:db8::1]:4711`), or, in `Forwarded`, a quoted form of those. `None` for anything else
/// (`unknown`, obfuscated identifiers, garbage).
pub(crate) fn parse_hop(hop: &str) -> Option<IpAddr> {
    let hop = hop.trim().trim_matches('"');
    if let Ok(ip) = IpAddr::from_str(hop) {
        return Some(canonical(ip));
    }
    if let Ok(addr) = SocketAddr::from_str(hop) {
        return Some(canonical(addr.ip()));
    }
    // `[2001:db8::1]` without a port.
    let bracketed = hop.strip_prefix('[')?.strip_suffix(']')?;
    Ipv6Addr::from_str(bracketed)
        .ok()
        .map(|v6| canonical(IpAddr::V6(v6)))
}

/// The hops of `X-Forwarded-For` values, in order (left = farthest from us).
pub(crate) fn x_forwarded_for<'h>(values: impl Iterator<Item = &'h str>) -> Vec<&'h str> {
    values.flat_map(|v| v.split(',')).map(str::trim).collect()
}

/// The `for=` hops of `Forwarded` values (RFC 7239), in order. An element without `for=`
/// yields an empty hop, which parses as no address.
pub(crate) fn forwarded<'h>(values: impl Iterator<Item = &'h str>) -> Vec<&'h str> {
    values
        .flat_map(|v| v.split(','))
        .map(|element| {
            element
                .split(';')
                .filter_map(|pair| pair.split_once('='))
                .find(|(name, _)| name.trim().eq_ignore_ascii_case("for"))
                .map_or("", |(_, value)| value.trim())
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn blocks_contain_their_addresses_only() {
        let net: IpNet = "10.0.0.0/8".parse().unwrap();
        assert!(net.contains(ip("10.255.1.2")));
        assert!(!net.contains(ip("11.0.0.1")));
        assert!(net.contains(ip("::ffff:10.1.1.1")), "IPv4-mapped");
        assert!(!net.contains(ip("::a00:1")), "not the same family");
        let one: IpNet = "127.0.0.1".parse().unwrap();
        assert!(one.contains(ip("127.0.0.1")) && !one.contains(ip("127.0.0.2")));
        let v6: IpNet = "2001:db8::/32".parse().unwrap();
        assert!(v6.contains(ip("2001:db8:ffff::1")));
        let all: IpNet = "0.0.0.0/0".parse().unwrap();
        assert!(all.contains(ip("203.0.113.9")));
    }

    #[test]
    fn bad_blocks_say_what_is_wrong() {
        for bad in ["10.0.0.0/33", "10.0.0/8", "host", "10.0.0.0/x", "::/129"] {
            let err = bad.parse::<IpNet>().unwrap_err().to_string();
            assert!(err.contains(bad), "{err}");
        }
    }

    #[test]
    fn masking_groups_by_prefix() {
        assert_eq!(mask(ip("2001:db8:1:2:3:4:5:6"), 64), ip("2001:db8:1:2::"));
        assert_eq!(mask(ip("192.0.2.77"), 24), ip("192.0.2.0"));
        assert_eq!(mask(ip("192.0.2.77"), 0), ip("0.0.0.0"));
        assert_eq!(mask(ip("::1"), 128), ip("::1"));
    }

    #[test]
    fn hops_parse_with_ports_brackets_and_quotes() {
        assert_eq!(parse_hop(" 192.0.2.1 "), Some(ip("192.0.2.1")));
        assert_eq!(parse_hop("192.0.2.1:4711"), Some(ip("192.0.2.1")));
        assert_eq!(parse_hop("\"[2001:db8::1]:4711\""), Some(ip("2001:db8::1")));
        assert_eq!(parse_hop("[2001:db8::1]"), Some(ip("2001:db8::1")));
        assert_eq!(parse_hop("unknown"), None);
        assert_eq!(parse_hop("_hidden"), None);
        assert_eq!(parse_hop(""), None);
    }

    #[test]
    fn forwarded_headers_split_into_hops() {
        let xff = x_forwarded_for(["1.1.1.1, 2.2.2.2", "3.3.3.3"].into_iter());
        assert_eq!(xff, ["1.1.1.1", "2.2.2.2", "3.3.3.3"]);
        let fwd = forwarded(
            [r#"for=192.0.2.60;proto=http;by=203.0.113.43, For="[2001:db8:cafe::17]:4711""#]
                .into_iter(),
        );
        assert_eq!(fwd, ["192.0.2.60", r#""[2001:db8:cafe::17]:4711""#]);
        assert_eq!(forwarded(["proto=https"].into_iter()), [""]);
    }
}
