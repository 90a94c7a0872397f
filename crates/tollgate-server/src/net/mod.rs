//! What every listener shares, below the front ends: accepting under caps ([`accept`]), the
//! limits themselves ([`limits`]), TLS ([`tls`]), the stream a front end serves
//! ([`stream`]), and a guard against HTTP/2 control-frame floods ([`frame_flood`]).

pub mod accept;
pub mod frame_flood;
pub mod limits;
pub mod stream;
pub mod tls;

/// A listener's settings: its limits and its TLS.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListenerSettings {
    /// Its connection limits.
    pub limits: limits::ConnLimits,
    /// Its TLS files, if it serves TLS.
    pub tls: Option<tls::TlsFiles>,
}

impl ListenerSettings {
    /// Plain, with `limits`.
    pub fn plain(limits: limits::ConnLimits) -> ListenerSettings {
        ListenerSettings { limits, tls: None }
    }
}
