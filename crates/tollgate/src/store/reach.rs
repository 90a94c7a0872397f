//! What a networked store's builder checks before it hands out a store that could never
//! answer: that the host names it was given resolve.
//!
//! A store that is down is an outage, which the caller's fail policy answers until it is back.
//! A name that does not exist is a typo (or a name never published), and no outage ends it:
//! served with a fail-open policy, it would turn limiting off without a word. So a builder
//! refuses it with [`StoreError::Config`], but only when the resolver *answered* that the name
//! does not exist: a resolver that is slow or unreachable says nothing about the name, and a
//! URL of several hosts is refused only when none of them resolves.

use std::net::IpAddr;
use std::time::Duration;

use crate::StoreError;

/// What became of one name.
enum Lookup {
    /// It resolves (or is an address already).
    Resolves,
    /// The resolver answered that no such name exists: its words.
    NoSuchName(String),
    /// No answer to go by (a resolver down or slow): the name may well exist.
    Unknown,
}

/// Resolves each `(host, port)` of a store's URL (`what` names the store), each within
/// `within`: [`StoreError::Config`] when every one of them is a name the resolver says does not
/// exist; `Ok` as soon as one resolves, or when any of them could not be looked up.
pub(crate) async fn some_host_resolves(
    what: &str,
    hosts: &[(String, u16)],
    within: Duration,
) -> Result<(), StoreError> {
    let mut missing = Vec::new();
    for (host, port) in hosts {
        match lookup(host, *port, within).await {
            Lookup::Resolves | Lookup::Unknown => return Ok(()),
            Lookup::NoSuchName(said) => missing.push(format!("{host:?} ({said})")),
        }
    }
    if missing.is_empty() {
        return Ok(());
    }
    let names = if missing.len() == 1 {
        format!("the {what} host name {} does not resolve", missing[0])
    } else {
        format!(
            "none of the {what} host names resolves: {}",
            missing.join(", ")
        )
    };
    Err(StoreError::Config(format!(
        "{names}: a typo, or a name not published; fix the host in the URL"
    )))
}

async fn lookup(host: &str, port: u16, within: Duration) -> Lookup {
    // An address needs no resolver (an IPv6 one may come in brackets).
    if host
        .trim_start_matches('[')
        .trim_end_matches(']')
        .parse::<IpAddr>()
        .is_ok()
    {
        return Lookup::Resolves;
    }
    match tokio::time::timeout(within, tokio::net::lookup_host((host, port))).await {
        Ok(Ok(mut addrs)) => match addrs.next() {
            Some(_) => Lookup::Resolves,
            None => Lookup::NoSuchName("no address".into()),
        },
        Ok(Err(e)) if no_such_name(&e) => Lookup::NoSuchName(e.to_string()),
        Ok(Err(_)) | Err(_) => Lookup::Unknown,
    }
}

/// Whether `getaddrinfo` answered that the name has no address: `EAI_NONAME` or `EAI_NODATA`,
/// which the standard library passes on only as text (`gai_strerror`'s, in the C locale a
/// Rust program keeps): glibc's and musl's words. A temporary failure (`EAI_AGAIN`: "Temporary
/// failure in name resolution", "Try again") is not one.
fn no_such_name(e: &std::io::Error) -> bool {
    let said = e.to_string();
    [
        "Name or service not known",
        "No address associated with hostname",
        "Name does not resolve",
        "Name has no usable address",
    ]
    .iter()
    .any(|words| said.contains(words))
}

#[cfg(test)]
mod tests {
    use super::*;

    const WITHIN: Duration = Duration::from_secs(5);

    fn hosts(names: &[&str]) -> Vec<(String, u16)> {
        names.iter().map(|n| ((*n).to_owned(), 6379)).collect()
    }

    #[tokio::test]
    async fn a_name_that_does_not_exist_is_a_config_error_naming_it() {
        // `.invalid` is reserved never to exist (RFC 2606).
        let refused = some_host_resolves("Redis", &hosts(&["nonexistent.invalid"]), WITHIN).await;
        let Err(StoreError::Config(why)) = refused else {
            panic!("a name that does not exist was taken: {refused:?}");
        };
        assert!(why.contains("\"nonexistent.invalid\""), "{why}");
        assert!(why.contains("does not resolve"), "{why}");
    }

    #[tokio::test]
    async fn several_hosts_are_refused_only_when_none_resolves() {
        let one_good = hosts(&["nonexistent.invalid", "localhost"]);
        assert!(some_host_resolves("Redis", &one_good, WITHIN).await.is_ok());
        let none = hosts(&["a.invalid", "b.invalid"]);
        let Err(StoreError::Config(why)) = some_host_resolves("Redis", &none, WITHIN).await else {
            panic!("no host resolves, and it was taken");
        };
        assert!(
            why.starts_with("none of the Redis host names resolves"),
            "{why}"
        );
        assert!(why.contains("\"b.invalid\""), "{why}");
    }

    #[tokio::test]
    async fn addresses_need_no_resolver() {
        let addresses = hosts(&["127.0.0.1", "[::1]", "::1"]);
        for one in addresses.chunks(1) {
            assert!(some_host_resolves("Redis", one, WITHIN).await.is_ok());
        }
    }
}
