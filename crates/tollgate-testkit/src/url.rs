//! Just enough URL parsing for `redis://` and `postgres://` URLs named by the environment: the
//! kit needs their host, port and (for a Redis command sent on its own) credentials and
//! database, and must not pull in a URL crate for that.

use crate::TestkitError;

/// The parts of `scheme://[user[:password]@]host[:port][/path]` the kit uses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Url {
    pub(crate) scheme: String,
    pub(crate) user: Option<String>,
    pub(crate) password: Option<String>,
    /// Without the brackets of an IPv6 literal.
    pub(crate) host: String,
    pub(crate) port: Option<u16>,
    /// After the first `/` of the path, before any `?` or `#`.
    pub(crate) path: String,
}

impl Url {
    pub(crate) fn parse(url: &str) -> Result<Self, TestkitError> {
        let invalid = |reason: &str| TestkitError::InvalidUrl {
            url: url.to_owned(),
            reason: reason.to_owned(),
        };
        let (scheme, rest) = url
            .split_once("://")
            .ok_or_else(|| invalid("expected scheme://host:port"))?;
        let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
        let (authority, after) = rest.split_at(end);
        let path = after
            .strip_prefix('/')
            .map(|p| p.split(['?', '#']).next().unwrap_or_default())
            .unwrap_or_default();
        let (userinfo, hosts) = match authority.rsplit_once('@') {
            Some((userinfo, hosts)) => (Some(userinfo), hosts),
            None => (None, authority),
        };
        let (user, password) = match userinfo {
            None => (None, None),
            Some(info) => {
                let (user, password) = match info.split_once(':') {
                    Some((user, password)) => (user, Some(password)),
                    None => (info, None),
                };
                let user = Some(percent_decode(user).ok_or_else(|| invalid("bad %-escape"))?)
                    .filter(|u| !u.is_empty());
                let password = password
                    .map(|p| percent_decode(p).ok_or_else(|| invalid("bad %-escape")))
                    .transpose()?;
                (user, password)
            }
        };
        // libpq allows `host1:port1,host2:port2`; the first host is the one the kit reports.
        let first = hosts.split(',').next().unwrap_or_default();
        let (host, port) = if let Some(v6) = first.strip_prefix('[') {
            let (host, tail) = v6
                .split_once(']')
                .ok_or_else(|| invalid("unclosed [ in host"))?;
            (host, tail.strip_prefix(':'))
        } else {
            match first.rsplit_once(':') {
                Some((host, port)) => (host, Some(port)),
                None => (first, None),
            }
        };
        let port = match port.filter(|p| !p.is_empty()) {
            None => None,
            Some(port) => Some(port.parse().map_err(|_| invalid("bad port"))?),
        };
        Ok(Self {
            scheme: scheme.to_ascii_lowercase(),
            user,
            password,
            host: host.to_owned(),
            port,
            path: path.to_owned(),
        })
    }
}

fn percent_decode(s: &str) -> Option<String> {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = s.get(i + 1..i + 3)?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

/// The value of an environment variable that may name an external server; unset and empty
/// both mean "start our own".
pub(crate) fn env_value(var: &'static str) -> Result<Option<String>, TestkitError> {
    match std::env::var_os(var) {
        None => Ok(None),
        Some(value) => value
            .into_string()
            .map(Some)
            .map_err(|value| TestkitError::InvalidUrl {
                url: value.to_string_lossy().into_owned(),
                reason: format!("{var} is not valid UTF-8"),
            }),
    }
}

/// Treats a blank value as unset.
pub(crate) fn non_blank(value: Option<String>) -> Option<String> {
    value.filter(|v| !v.trim().is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_urls_the_kit_meets() {
        let url = Url::parse("redis://127.0.0.1:6380").unwrap();
        assert_eq!(
            (url.scheme.as_str(), url.host.as_str(), url.port),
            ("redis", "127.0.0.1", Some(6380))
        );
        assert_eq!(
            (url.user, url.password, url.path),
            (None, None, String::new())
        );

        let url = Url::parse("redis://:p%40ss@localhost/3").unwrap();
        assert_eq!(url.user, None);
        assert_eq!(url.password.as_deref(), Some("p@ss"));
        assert_eq!((url.host.as_str(), url.port), ("localhost", None));
        assert_eq!(url.path, "3");

        let url = Url::parse("postgresql://me:pw@[::1]:5433/db?sslmode=disable").unwrap();
        assert_eq!(url.user.as_deref(), Some("me"));
        assert_eq!((url.host.as_str(), url.port), ("::1", Some(5433)));
        assert_eq!(url.path, "db");

        let url = Url::parse("postgres://u@h1:5001,h2:5002/db").unwrap();
        assert_eq!((url.host.as_str(), url.port), ("h1", Some(5001)));
    }

    #[test]
    fn rejects_what_it_cannot_read() {
        for bad in [
            "127.0.0.1:6379",
            "redis://host:notaport",
            "redis://[::1:6379",
            "redis://:%zz@h",
        ] {
            assert!(Url::parse(bad).is_err(), "{bad}");
        }
    }
}
