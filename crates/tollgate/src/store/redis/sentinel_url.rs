//! `redis+sentinel://` and `rediss+sentinel://` URLs: the sentinels to ask, the name of the
//! primary they watch, and the credentials of each side.
//!
//! `redis+sentinel://[USER:PASSWORD@]HOST[:PORT][,HOST[:PORT]...]/MASTER_NAME[/DB]
//! [?sentinel_username=U&sentinel_password=P]`: the user information is Redis's own (the
//! primary's, as in a `redis://` URL), the query the sentinels' (envoyproxy/ratelimit's
//! `REDIS_AUTH` and `REDIS_SENTINEL_AUTH`); a port left out is Sentinel's 26379.
//! `rediss+sentinel://` speaks TLS to the sentinels and to Redis alike.

use crate::StoreError;

/// Sentinel's default port.
const SENTINEL_PORT: u16 = 26379;

/// Whether `url` names Redis through Sentinel.
pub(crate) fn is_sentinel(url: &str) -> bool {
    url.starts_with("redis+sentinel://") || url.starts_with("rediss+sentinel://")
}

/// A user and password, either optional.
#[derive(Clone, Default, PartialEq, Eq)]
pub(crate) struct Auth {
    pub(crate) username: Option<String>,
    pub(crate) password: Option<String>,
}

/// A parsed Sentinel URL.
#[derive(Clone, PartialEq, Eq)]
pub(crate) struct SentinelUrl {
    pub(crate) tls: bool,
    /// Host and port of each sentinel, in the URL's order (the order they are asked in).
    pub(crate) sentinels: Vec<(String, u16)>,
    pub(crate) master: String,
    pub(crate) db: i64,
    /// Redis's own credentials.
    pub(crate) redis: Auth,
    /// The sentinels' credentials.
    pub(crate) sentinel: Auth,
}

impl std::fmt::Debug for SentinelUrl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Passwords are never printed.
        f.debug_struct("SentinelUrl")
            .field("tls", &self.tls)
            .field("sentinels", &self.sentinels)
            .field("master", &self.master)
            .field("db", &self.db)
            .finish_non_exhaustive()
    }
}

const SHAPE: &str = "redis+sentinel://[USER:PASSWORD@]HOST:PORT[,HOST:PORT...]/MASTER_NAME[/DB]\
                     [?sentinel_username=U&sentinel_password=P]";

impl SentinelUrl {
    /// Parses `url`, saying what is wrong (never quoting a password).
    pub(crate) fn parse(url: &str) -> Result<SentinelUrl, StoreError> {
        let bad = |why: &str| StoreError::Config(format!("the Redis Sentinel URL {why} ({SHAPE})"));
        let (tls, rest) = if let Some(rest) = url.strip_prefix("rediss+sentinel://") {
            (true, rest)
        } else if let Some(rest) = url.strip_prefix("redis+sentinel://") {
            (false, rest)
        } else {
            return Err(bad(
                "must start with redis+sentinel:// or rediss+sentinel://",
            ));
        };
        if rest.contains('#') {
            return Err(bad("takes no fragment (`#...`)"));
        }
        let (rest, query) = rest.split_once('?').unwrap_or((rest, ""));
        let (authority, path) = rest.split_once('/').unwrap_or((rest, ""));
        let (userinfo, hosts) = match authority.rsplit_once('@') {
            Some((userinfo, hosts)) => (Some(userinfo), hosts),
            None => (None, authority),
        };
        let redis = match userinfo {
            None => Auth::default(),
            Some(info) => {
                let (user, password) = info.split_once(':').unwrap_or((info, ""));
                Auth {
                    username: Some(decode(user, "user")?).filter(|u| !u.is_empty()),
                    password: Some(decode(password, "password")?).filter(|p| !p.is_empty()),
                }
            }
        };
        let mut sentinels = Vec::new();
        for host in hosts.split(',') {
            sentinels.push(host_port(host.trim()).ok_or_else(|| {
                bad(&format!(
                    "names a sentinel {host:?} that is not HOST or HOST:PORT"
                ))
            })?);
        }
        let mut parts = path.split('/');
        let master = decode(parts.next().unwrap_or_default(), "master name")?;
        if master.is_empty() {
            return Err(bad(
                "names no master (the name the sentinels monitor it under)",
            ));
        }
        let db = match parts.next() {
            None | Some("") => 0,
            Some(db) => db
                .parse::<i64>()
                .ok()
                .filter(|db| *db >= 0)
                .ok_or_else(|| bad(&format!("has a DB index {db:?} that is not a number")))?,
        };
        if parts.next().is_some() {
            return Err(bad("has a path longer than /MASTER_NAME/DB"));
        }
        let mut sentinel = Auth::default();
        for pair in query.split('&').filter(|p| !p.is_empty()) {
            let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
            let value = Some(decode(value, key)?).filter(|v| !v.is_empty());
            match key {
                "sentinel_username" => sentinel.username = value,
                "sentinel_password" => sentinel.password = value,
                _ => {
                    return Err(bad(&format!(
                        "has a parameter {key:?}; it takes sentinel_username and \
                         sentinel_password"
                    )));
                }
            }
        }
        Ok(SentinelUrl {
            tls,
            sentinels,
            master,
            db,
            redis,
            sentinel,
        })
    }
}

/// `host`, `host:port`, `[v6]` or `[v6]:port`.
fn host_port(text: &str) -> Option<(String, u16)> {
    let (host, port) = if let Some(v6) = text.strip_prefix('[') {
        let (host, tail) = v6.split_once(']')?;
        match tail {
            "" => (host, None),
            tail => (host, Some(tail.strip_prefix(':')?)),
        }
    } else {
        match text.rsplit_once(':') {
            Some((host, port)) => (host, Some(port)),
            None => (text, None),
        }
    };
    let port = match port {
        None => SENTINEL_PORT,
        Some(port) => port.parse().ok().filter(|p| *p != 0)?,
    };
    (!host.is_empty()).then(|| (host.to_owned(), port))
}

/// Percent-decoding (`%40` is `@`); `what` names the part in the error, never its value.
fn decode(text: &str, what: &str) -> Result<String, StoreError> {
    let bad = || {
        StoreError::Config(format!(
            "the Redis Sentinel URL's {what} has a malformed %-escape or is not UTF-8"
        ))
    };
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = bytes.get(i + 1..i + 3).ok_or_else(bad)?;
            let hex = std::str::from_utf8(hex).map_err(|_| bad())?;
            out.push(u8::from_str_radix(hex, 16).map_err(|_| bad())?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).map_err(|_| bad())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_part_is_read() {
        let url = SentinelUrl::parse(
            "rediss+sentinel://app:p%40ss@s1:26380,[::1],s3/my-primary/2\
             ?sentinel_username=watch&sentinel_password=s3cret",
        )
        .unwrap();
        assert!(url.tls);
        assert_eq!(
            url.sentinels,
            [
                ("s1".to_owned(), 26380),
                ("::1".to_owned(), 26379),
                ("s3".to_owned(), 26379)
            ]
        );
        assert_eq!((url.master.as_str(), url.db), ("my-primary", 2));
        assert_eq!(url.redis.username.as_deref(), Some("app"));
        assert_eq!(url.redis.password.as_deref(), Some("p@ss"));
        assert_eq!(url.sentinel.username.as_deref(), Some("watch"));
        assert_eq!(url.sentinel.password.as_deref(), Some("s3cret"));
        assert!(!format!("{url:?}").contains("s3cret"));

        let plain = SentinelUrl::parse("redis+sentinel://127.0.0.1:5000/m").unwrap();
        assert!(!plain.tls);
        assert_eq!(plain.db, 0);
        assert!(plain.redis == Auth::default());
        assert!(plain.sentinel == Auth::default());
        let password_only = SentinelUrl::parse("redis+sentinel://:pw@h/m").unwrap();
        assert_eq!(password_only.redis.username, None);
        assert_eq!(password_only.redis.password.as_deref(), Some("pw"));
    }

    #[test]
    fn what_is_wrong_is_said_without_the_password() {
        for (url, says) in [
            ("redis+sentinel://h1,h2", "names no master"),
            ("redis+sentinel://h1/", "names no master"),
            ("redis+sentinel://h1:x/m", "\"h1:x\""),
            ("redis+sentinel://h1,,h2/m", "\"\""),
            ("redis+sentinel://h/m/x", "DB index \"x\""),
            ("redis+sentinel://h/m/1/2", "path longer"),
            (
                "redis+sentinel://h/m?password=hunter2",
                "parameter \"password\"",
            ),
            ("redis+sentinel://h/m#insecure", "no fragment"),
            ("redis+sentinel://:%zz@h/m", "password has a malformed"),
        ] {
            let e = SentinelUrl::parse(url).unwrap_err().to_string();
            assert!(e.contains(says), "{url}: {e}");
            assert!(!e.contains("hunter2"), "{e}");
        }
        assert!(is_sentinel("rediss+sentinel://h/m"));
        assert!(!is_sentinel("redis://h/m"));
    }
}
