//! The TCP peer of a request, which failed authentications are counted under.

use std::net::{IpAddr, Ipv4Addr};

/// The TCP peer of the connection a request came on, in its extensions: failed
/// authentications are counted under its address.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Peer(pub IpAddr);

impl Peer {
    /// The peer of `request`; a request served by another server than tollgate's (a router
    /// embedded elsewhere) has none, and counts under `0.0.0.0`.
    pub fn of(extensions: &http::Extensions) -> IpAddr {
        extensions
            .get::<Peer>()
            .map_or(IpAddr::V4(Ipv4Addr::UNSPECIFIED), |peer| peer.0)
    }
}
