//! The store: upstream's Redis settings (`REDIS_*`, `BACKEND_TYPE`, `CACHE_KEY_PREFIX`) as
//! `[store]`.

use std::fmt::Write as _;

use super::doc::{Doc, Value};
use super::{Env, EnvError, Notes, ignored};

/// `[store]` from the Redis variables.
pub(super) fn store(env: &Env, doc: &mut Doc, notes: &mut Notes) -> Result<(), EnvError> {
    let backend = env.string("BACKEND_TYPE")?;
    match backend.as_str() {
        "redis" | "" => {}
        "memcache" => {
            return Err(EnvError::new(
                "BACKEND_TYPE",
                "memcache is not a store of tollgate's: its counters cannot be incremented \
                 atomically with a check; use Redis (BACKEND_TYPE=redis)",
            ));
        }
        other => {
            return Err(EnvError::new(
                "BACKEND_TYPE",
                format!("{other:?} is not a backend: redis, as upstream takes (or memcache)"),
            ));
        }
    }
    ignored(
        env,
        &[
            "MEMCACHE_HOST_PORT",
            "MEMCACHE_MAX_IDLE_CONNS",
            "MEMCACHE_SRV",
            "MEMCACHE_SRV_REFRESH",
            "MEMCACHE_TLS",
            "MEMCACHE_TLS_CLIENT_CERT",
            "MEMCACHE_TLS_CLIENT_KEY",
            "MEMCACHE_TLS_CACERT",
            "MEMCACHE_TLS_SKIP_HOSTNAME_VERIFICATION",
        ],
        "the backend is Redis",
        notes,
    );
    if !env.string("CACHE_KEY_PREFIX")?.is_empty() {
        return Err(EnvError::new(
            "CACHE_KEY_PREFIX",
            "is set, and tollgate's keys have a prefix of their own (`tollgate:v3:`), which a \
             second prefix would not keep apart from another tollgate's; give each service \
             sharing a Redis its own domains, or its own DB (`redis://HOST:PORT/DB`)",
        ));
    }
    if env.bool("REDIS_PERSECOND")? {
        return Err(EnvError::new(
            "REDIS_PERSECOND",
            "is true, and tollgate keeps every limit in one store: a second Redis for the \
             per-second limits is not supported",
        ));
    }
    ignored(
        env,
        &[
            "REDIS_PERSECOND_SOCKET_TYPE",
            "REDIS_PERSECOND_TYPE",
            "REDIS_PERSECOND_URL",
            "REDIS_PERSECOND_POOL_SIZE",
            "REDIS_PERSECOND_AUTH",
            "REDIS_PERSECOND_TLS",
            "REDIS_PERSECOND_SENTINEL_AUTH",
            "REDIS_PERSECOND_PIPELINE_WINDOW",
            "REDIS_PERSECOND_PIPELINE_LIMIT",
            "REDIS_PERSECOND_CLUSTER_PIPELINE_PARALLELISM",
            "REDIS_PERSECOND_TIMEOUT",
            "REDIS_PERSECOND_POOL_ON_EMPTY_BEHAVIOR",
        ],
        "REDIS_PERSECOND is not true",
        notes,
    );
    let on_empty = env
        .string("REDIS_POOL_ON_EMPTY_BEHAVIOR")?
        .to_ascii_uppercase();
    if on_empty == "CREATE" || on_empty == "ERROR" {
        return Err(EnvError::new(
            "REDIS_POOL_ON_EMPTY_BEHAVIOR",
            format!("{on_empty} is refused, as upstream refuses it: remove it or set WAIT"),
        ));
    }
    ignored(
        env,
        &[
            "REDIS_POOL_SIZE",
            "REDIS_POOL_ON_EMPTY_BEHAVIOR",
            "REDIS_PIPELINE_WINDOW",
            "REDIS_PIPELINE_LIMIT",
            "REDIS_CLUSTER_PIPELINE_PARALLELISM",
        ],
        "tollgate multiplexes its calls over one connection per node and batches them itself",
        notes,
    );
    ignored(
        env,
        &[
            "REDIS_STARTUP_INITIAL_INTERVAL",
            "REDIS_STARTUP_MAX_INTERVAL",
            "REDIS_STARTUP_MAX_ELAPSED_TIME",
        ],
        "tollgate waits for Redis a few seconds at start, then serves and reconnects in the \
         background, answering by its fail policy meanwhile",
        notes,
    );
    ignored(
        env,
        &["REDIS_HEALTH_CHECK_ACTIVE_CONNECTION"],
        "/healthcheck does not ask the store (`/readyz` on the admin port does)",
        notes,
    );
    ignored(
        env,
        &["EXPIRATION_JITTER_MAX_SECONDS"],
        "it spreads only when keys expire, never what a key counts",
        notes,
    );
    ignored(
        env,
        &["LOCAL_CACHE_SIZE_IN_BYTES"],
        "tollgate's Redis store keeps its own bounded cache of keys over their limit, which \
         answers as Redis would",
        notes,
    );
    let timeout = env.duration("REDIS_TIMEOUT")?;
    if timeout < std::time::Duration::from_millis(1) {
        return Err(EnvError::new(
            "REDIS_TIMEOUT",
            format!("{timeout:?}: tollgate bounds every store call by at least 1ms"),
        ));
    }
    doc.set(
        "store",
        "timeout",
        Value::duration(timeout),
        &["REDIS_TIMEOUT"],
    );
    let url = url(env, notes)?;
    doc.set(
        "store",
        "url",
        Value::Str(url),
        &[
            "REDIS_URL",
            "REDIS_SOCKET_TYPE",
            "REDIS_TYPE",
            "REDIS_AUTH",
            "REDIS_TLS",
        ],
    );
    tls(env, doc, notes)
}

/// The Redis TLS files, as `[store.tls]`.
fn tls(env: &Env, doc: &mut Doc, notes: &mut Notes) -> Result<(), EnvError> {
    const FILES: [(&str, &str); 3] = [
        ("REDIS_TLS_CACERT", "ca"),
        ("REDIS_TLS_CLIENT_CERT", "cert"),
        ("REDIS_TLS_CLIENT_KEY", "key"),
    ];
    if !env.bool("REDIS_TLS")? {
        ignored(
            env,
            &[
                "REDIS_TLS_CACERT",
                "REDIS_TLS_CLIENT_CERT",
                "REDIS_TLS_CLIENT_KEY",
                "REDIS_TLS_SKIP_HOSTNAME_VERIFICATION",
            ],
            "REDIS_TLS is not true",
            notes,
        );
        return Ok(());
    }
    for (name, key) in FILES {
        let path = env.string(name)?;
        if !path.is_empty() {
            doc.set("store.tls", key, Value::Str(path), &[name, "REDIS_TLS"]);
        }
    }
    if env.bool("REDIS_TLS_SKIP_HOSTNAME_VERIFICATION")? {
        doc.set(
            "store.tls",
            "skip_hostname_verification",
            Value::Bool(true),
            &["REDIS_TLS_SKIP_HOSTNAME_VERIFICATION"],
        );
    }
    Ok(())
}

/// The store URL of `REDIS_SOCKET_TYPE`, `REDIS_TYPE`, `REDIS_URL`, `REDIS_AUTH`, `REDIS_TLS`.
/// The URL's text is never quoted in a refusal: it may hold a password.
fn url(env: &Env, notes: &mut Notes) -> Result<String, EnvError> {
    let socket = env.string("REDIS_SOCKET_TYPE")?.to_ascii_lowercase();
    let kind = env.string("REDIS_TYPE")?.to_ascii_lowercase();
    let url = env.string("REDIS_URL")?;
    let auth = env.string("REDIS_AUTH")?;
    let tls = env.bool("REDIS_TLS")?;
    match kind.as_str() {
        "single" | "cluster" => {}
        "sentinel" => {
            if socket == "unix" {
                return Err(EnvError::new(
                    "REDIS_SOCKET_TYPE",
                    "unix with REDIS_TYPE=SENTINEL: sentinels are reached over TCP",
                ));
            }
            return sentinel_url(
                &url,
                tls,
                credentials(&auth),
                &env.string("REDIS_SENTINEL_AUTH")?,
            );
        }
        _ => {
            return Err(EnvError::new(
                "REDIS_TYPE",
                "is not a Redis type: SINGLE, CLUSTER or SENTINEL, in any case",
            ));
        }
    }
    ignored(
        env,
        &["REDIS_SENTINEL_AUTH"],
        "REDIS_TYPE is not SENTINEL",
        notes,
    );
    let credentials = credentials(&auth);
    match socket.as_str() {
        "unix" => {
            if kind == "cluster" {
                return Err(EnvError::new(
                    "REDIS_SOCKET_TYPE",
                    "unix with REDIS_TYPE=CLUSTER: a Redis Cluster's nodes are reached over TCP",
                ));
            }
            if tls {
                return Err(EnvError::new(
                    "REDIS_TLS",
                    "true with REDIS_SOCKET_TYPE=unix: TLS is for Redis over TCP",
                ));
            }
            unix_url(&url, credentials)
        }
        "tcp" => {
            let urls: Vec<String> = url
                .split(',')
                .map(|item| tcp_url(item.trim(), tls, credentials.as_ref()))
                .collect::<Result<_, _>>()?;
            if kind == "single" && urls.len() > 1 {
                return Err(EnvError::new(
                    "REDIS_URL",
                    "names several nodes, and REDIS_TYPE is SINGLE (a list is for CLUSTER)",
                ));
            }
            Ok(urls.join(","))
        }
        other => Err(EnvError::new(
            "REDIS_SOCKET_TYPE",
            format!("{other:?} is not a socket type: tcp or unix"),
        )),
    }
}

/// `redis[s]+sentinel://[USER:PASSWORD@]HOST:PORT,.../MASTER[?sentinel_username=U&
/// sentinel_password=P]` of upstream's `REDIS_URL` for Sentinel, `MASTER,HOST:PORT,...`:
/// `REDIS_AUTH` is Redis's own credentials, `REDIS_SENTINEL_AUTH` the sentinels' (each
/// `user:password` or a password alone), and `REDIS_TLS` speaks TLS to both.
fn sentinel_url(
    url: &str,
    tls: bool,
    redis_auth: Option<(Option<&str>, &str)>,
    sentinel_auth: &str,
) -> Result<String, EnvError> {
    let mut items = url.split(',').map(str::trim);
    let master = items.next().unwrap_or_default();
    let sentinels: Vec<&str> = items.collect();
    if master.is_empty() || master.contains(':') || sentinels.is_empty() {
        return Err(EnvError::new(
            "REDIS_URL",
            "with REDIS_TYPE=SENTINEL is the master's name, then the sentinels: \
             MASTER_NAME,HOST:PORT[,HOST:PORT...]",
        ));
    }
    if sentinels
        .iter()
        .any(|s| s.is_empty() || s.contains(['/', '@', '?', '#']))
    {
        return Err(EnvError::new(
            "REDIS_URL",
            "names a sentinel that is not HOST:PORT (with REDIS_TYPE=SENTINEL)",
        ));
    }
    let scheme = if tls {
        "rediss+sentinel"
    } else {
        "redis+sentinel"
    };
    let mut out = format!("{scheme}://");
    if let Some((user, pass)) = redis_auth {
        let _ = write!(out, "{}:{}@", encode(user.unwrap_or("")), encode(pass));
    }
    let _ = write!(out, "{}/{}", sentinels.join(","), encode(master));
    if let Some((user, pass)) = credentials(sentinel_auth) {
        let mut query = Vec::new();
        if let Some(user) = user {
            query.push(format!("sentinel_username={}", encode(user)));
        }
        query.push(format!("sentinel_password={}", encode(pass)));
        let _ = write!(out, "?{}", query.join("&"));
    }
    Ok(out)
}

/// `REDIS_AUTH` as upstream splits it: `user:password`, or a password alone.
fn credentials(auth: &str) -> Option<(Option<&str>, &str)> {
    if auth.is_empty() {
        return None;
    }
    Some(match auth.split_once(':') {
        Some((user, pass)) => (Some(user), pass),
        None => (None, auth),
    })
}

/// `redis+unix:///PATH`, the credentials in the query as the Redis client reads them there.
fn unix_url(path: &str, credentials: Option<(Option<&str>, &str)>) -> Result<String, EnvError> {
    if path.is_empty() {
        return Err(EnvError::new(
            "REDIS_URL",
            "is empty: give the Redis socket's path",
        ));
    }
    let absolute = std::path::absolute(path).map_err(|e| {
        EnvError::new(
            "REDIS_URL",
            format!("the socket's path cannot be made absolute: {e}"),
        )
    })?;
    let mut out = String::from("redis+unix://");
    for c in absolute.to_string_lossy().split('/') {
        if !c.is_empty() {
            out.push('/');
            out.push_str(&encode(c));
        }
    }
    let mut query = Vec::new();
    if let Some((user, pass)) = credentials {
        if let Some(user) = user {
            query.push(format!("user={}", encode(user)));
        }
        query.push(format!("pass={}", encode(pass)));
    }
    if !query.is_empty() {
        out.push('?');
        out.push_str(&query.join("&"));
    }
    Ok(out)
}

/// `redis[s]://[USER:PASSWORD@]HOST:PORT` of `item` (`HOST:PORT`, or a `redis://` URL).
fn tcp_url(
    item: &str,
    tls: bool,
    credentials: Option<&(Option<&str>, &str)>,
) -> Result<String, EnvError> {
    let scheme = if tls { "rediss" } else { "redis" };
    let rest = match item.split_once("://") {
        Some(("redis" | "rediss", rest)) => rest,
        Some(_) => {
            return Err(EnvError::new(
                "REDIS_URL",
                "has a scheme other than redis:// or rediss://; give HOST:PORT",
            ));
        }
        None => item,
    };
    if rest.is_empty() {
        return Err(EnvError::new("REDIS_URL", "names no host: give HOST:PORT"));
    }
    let mut out = format!("{scheme}://");
    if let Some((user, pass)) = credentials
        && !rest.contains('@')
    {
        let _ = write!(out, "{}:{}@", encode(user.unwrap_or("")), encode(pass));
    }
    out.push_str(rest);
    Ok(out)
}

/// Percent-encodes all but URL-unreserved characters.
fn encode(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for b in text.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(char::from(b));
        } else {
            let _ = write!(out, "%{b:02X}");
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(vars: &[(&str, &str)]) -> Env {
        Env::new(vars.iter().map(|(k, v)| ((*k).into(), (*v).into())))
    }

    fn url_of(vars: &[(&str, &str)]) -> Result<String, EnvError> {
        url(&env(vars), &mut Vec::new())
    }

    #[test]
    fn the_default_is_upstreams_unix_socket() {
        assert_eq!(
            url_of(&[]).unwrap(),
            "redis+unix:///var/run/nutcracker/ratelimit.sock"
        );
        assert_eq!(
            url_of(&[("REDIS_URL", "/run/r s.sock"), ("REDIS_AUTH", "u:p@ss")]).unwrap(),
            "redis+unix:///run/r%20s.sock?user=u&pass=p%40ss"
        );
    }

    #[test]
    fn sentinel_takes_the_master_then_the_sentinels_and_each_sides_auth() {
        let sentinel = |extra: &[(&'static str, &'static str)]| {
            let mut v = vec![
                ("REDIS_SOCKET_TYPE", "tcp"),
                ("REDIS_TYPE", "SENTINEL"),
                ("REDIS_URL", "mymaster, s1:26379,s2:26380"),
            ];
            v.extend_from_slice(extra);
            url_of(&v)
        };
        assert_eq!(
            sentinel(&[]).unwrap(),
            "redis+sentinel://s1:26379,s2:26380/mymaster"
        );
        assert_eq!(
            sentinel(&[
                ("REDIS_AUTH", "app:p@ss"),
                ("REDIS_SENTINEL_AUTH", "watch:s3cret"),
                ("REDIS_TLS", "true"),
            ])
            .unwrap(),
            "rediss+sentinel://app:p%40ss@s1:26379,s2:26380/mymaster\
             ?sentinel_username=watch&sentinel_password=s3cret"
        );
        assert_eq!(
            sentinel(&[("REDIS_SENTINEL_AUTH", "only")]).unwrap(),
            "redis+sentinel://s1:26379,s2:26380/mymaster?sentinel_password=only"
        );
        for bad in ["mymaster", "s1:26379,s2:26379", ",s1:1", "m,s1:1/x"] {
            let e = url_of(&[
                ("REDIS_SOCKET_TYPE", "tcp"),
                ("REDIS_TYPE", "sentinel"),
                ("REDIS_URL", bad),
            ])
            .unwrap_err();
            assert!(e.to_string().contains("REDIS_URL"), "{bad}: {e}");
        }
        let e = url_of(&[("REDIS_TYPE", "sentinel"), ("REDIS_URL", "m,s:1")]).unwrap_err();
        assert!(e.to_string().contains("REDIS_SOCKET_TYPE"), "{e}");
    }

    #[test]
    fn tcp_urls_take_auth_and_tls() {
        let tcp = [("REDIS_SOCKET_TYPE", "tcp"), ("REDIS_URL", "redis:6379")];
        assert_eq!(url_of(&tcp).unwrap(), "redis://redis:6379");
        let with = |extra: &[(&'static str, &'static str)]| {
            let mut v = tcp.to_vec();
            v.extend_from_slice(extra);
            url_of(&v)
        };
        assert_eq!(
            with(&[("REDIS_AUTH", "secret")]).unwrap(),
            "redis://:secret@redis:6379"
        );
        assert_eq!(
            with(&[("REDIS_AUTH", "me:s/cret"), ("REDIS_TLS", "true")]).unwrap(),
            "rediss://me:s%2Fcret@redis:6379"
        );
        assert_eq!(
            url_of(&[
                ("REDIS_SOCKET_TYPE", "TCP"),
                ("REDIS_TYPE", "cluster"),
                ("REDIS_URL", "a:1, b:2")
            ])
            .unwrap(),
            "redis://a:1,redis://b:2"
        );
    }

    #[test]
    fn refusals_name_the_variable_and_never_the_url() {
        let refused = |vars: &[(&str, &str)]| url_of(vars).unwrap_err();
        let e = refused(&[
            ("REDIS_SOCKET_TYPE", "tcp"),
            ("REDIS_TYPE", "sentinel"),
            ("REDIS_URL", "h:1/hunter2"),
            ("REDIS_AUTH", "hunter2"),
        ]);
        assert_eq!(e.variable, "REDIS_URL");
        assert!(!e.to_string().contains("hunter2"), "{e}");
        assert_eq!(
            refused(&[("REDIS_SOCKET_TYPE", "udp")]).variable,
            "REDIS_SOCKET_TYPE"
        );
        assert_eq!(
            refused(&[("REDIS_TYPE", "CLUSTER")]).variable,
            "REDIS_SOCKET_TYPE"
        );
        let e = refused(&[
            ("REDIS_SOCKET_TYPE", "tcp"),
            ("REDIS_URL", "a:1,b:2"),
            ("REDIS_AUTH", "hunter2"),
        ]);
        assert_eq!(e.variable, "REDIS_URL");
        assert!(!e.to_string().contains("hunter2"), "{e}");
    }
}
