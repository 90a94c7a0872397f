//! Addresses: the blocks of trusted proxies (the `ipnet` crate's [`IpNet`]), prefix grouping,
//! and the hops of `X-Forwarded-For` / `Forwarded` headers.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use std::str::FromStr;

use ipnet::{IpNet, Ipv4Net};

/// Trusted blocks kept as they are compared: an IPv4-mapped IPv6 block (`::ffff:10.0.0.0/104`)
/// as the IPv4 block it maps (`10.0.0.0/8`), host bits cleared, since a peer's address is
/// compared after [`canonical`] makes a mapped one IPv4.
pub(crate) fn canonical_net(net: IpNet) -> IpNet {
    let net = net.trunc();
    match net {
        IpNet::V6(v6) => match (v6.network().to_ipv4_mapped(), v6.prefix_len()) {
            (Some(v4), prefix @ 96..) => {
                Ipv4Net::new(v4, prefix - 96).map_or(net, |v4| IpNet::V4(v4).trunc())
            }
            _ => net,
        },
        v4 => v4,
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
    fn mapped_blocks_compare_as_ipv4() {
        let net = |s: &str| canonical_net(s.parse().unwrap());
        assert_eq!(net("::ffff:10.0.0.0/104"), net("10.0.0.0/8"));
        assert_eq!(net("10.1.2.3/8"), net("10.0.0.0/8"), "host bits cleared");
        let v6 = net("2001:db8::/32");
        assert!(v6.contains(&canonical(ip("2001:db8:ffff::1"))));
        assert!(net("10.0.0.0/8").contains(&canonical(ip("::ffff:10.1.1.1"))));
        assert!(!net("10.0.0.0/8").contains(&canonical(ip("::a00:1"))));
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

    proptest::proptest! {
        #[test]
        fn any_header_splits_into_its_hops_and_never_panics(
            values in proptest::collection::vec(".{0,80}", 0..4)
        ) {
            let refs = values.iter().map(String::as_str);
            let commas: usize = values.iter().map(|v| v.matches(',').count() + 1).sum();
            let hops = x_forwarded_for(refs.clone());
            proptest::prop_assert_eq!(hops.len(), commas);
            let elements = forwarded(refs);
            proptest::prop_assert_eq!(elements.len(), commas);
            for hop in hops.into_iter().chain(elements) {
                let _ = parse_hop(hop);
            }
        }

        #[test]
        fn every_address_form_parses_back(
            v4 in proptest::arbitrary::any::<u32>(),
            v6 in proptest::arbitrary::any::<u128>(),
            port in proptest::arbitrary::any::<u16>(),
        ) {
            let v4 = IpAddr::V4(Ipv4Addr::from(v4));
            let v6 = IpAddr::V6(Ipv6Addr::from(v6));
            for (text, want) in [
                (v4.to_string(), v4),
                (format!("{v4}:{port}"), v4),
                (format!("\"{v4}:{port}\""), v4),
                (v6.to_string(), v6),
                (format!("[{v6}]"), v6),
                (format!("[{v6}]:{port}"), v6),
                (format!("\"[{v6}]:{port}\""), v6),
            ] {
                proptest::prop_assert_eq!(parse_hop(&text), Some(canonical(want)), "{}", text);
            }
        }
    }
}
