//! Redis's failures, classified: the store is down or busy (transient: the fail policy answers
//! until it is back), or it answered what this program does not understand (incompatible: a bug
//! or a misconfiguration, reported as such).

use redis::{ErrorKind, RedisError, ServerErrorKind};

use crate::StoreError;

/// Transient: no answer (I/O, a timeout, a connection refused or dropped, no node for a slot),
/// and the server's "not now" (`LOADING`, `TRYAGAIN`, `CLUSTERDOWN`, `MASTERDOWN`,
/// `READONLY` during a failover, `MOVED`/`ASK` the client could not follow, `BUSY` with another
/// script, `OOM`, `NOREPLICAS`), and a reply the client cannot parse (a connection cut in the
/// middle of one). Incompatible: an error running the script, a value of another type under a
/// bucket's key (`WRONGTYPE`: another program wrote it), a refused permission (`NOPERM`, a
/// failed authentication), a reply of another type than the script returns.
///
/// Settings that can never work (a password Redis asks for and the URL does not give,
/// `NOAUTH`; credentials refused, `WRONGPASS` or a failed `AUTH`; a DB index the server does
/// not have, `SELECT`: `DB index is out of range`; a URL the client cannot use; a TLS
/// certificate not trusted or not for the URL's host) are said in plain words, as an outage:
/// this is a failure of a store that was built and served (a password changed under it, a
/// certificate replaced, found when it connects again), which the fail policy answers.
/// [`setup_error`] says the same as a [`StoreError::Config`] where the store is built or
/// probed.
pub(crate) fn store_error(e: RedisError) -> StoreError {
    match never_works(&e) {
        Some(why) => StoreError::Unavailable(why.into()),
        None => classify(e),
    }
}

/// A failure met while the store is built, or probed by [`Store::ready`](crate::Store::ready)
/// (which a program asks before it serves): settings that can never work are a
/// [`StoreError::Config`], so that it can refuse to start; anything else as [`store_error`].
pub(crate) fn setup_error(e: RedisError) -> StoreError {
    match never_works(&e) {
        Some(why) => StoreError::Config(why),
        None => classify(e),
    }
}

/// Transient or incompatible, for a failure that is not about the settings.
fn classify(e: RedisError) -> StoreError {
    let transient = match e.kind() {
        ErrorKind::Server(kind) => matches!(
            kind,
            ServerErrorKind::BusyLoading
                | ServerErrorKind::TryAgain
                | ServerErrorKind::ClusterDown
                | ServerErrorKind::MasterDown
                | ServerErrorKind::ReadOnly
                | ServerErrorKind::Moved
                | ServerErrorKind::Ask
                | ServerErrorKind::ExecAbort
        ),
        ErrorKind::Extension => matches!(e.code(), Some("BUSY" | "OOM" | "NOREPLICAS")),
        ErrorKind::UnexpectedReturnType
        | ErrorKind::AuthenticationFailed
        | ErrorKind::InvalidClientConfig => false,
        _ => true,
    };
    if transient {
        StoreError::Unavailable(Box::new(e))
    } else {
        StoreError::Incompatible(Box::new(e))
    }
}

/// What is wrong, when `e` says the connection settings can never work.
fn never_works(e: &RedisError) -> Option<String> {
    let redis_said = || {
        e.detail()
            .map(|d| format!(" (Redis: {d})"))
            .unwrap_or_default()
    };
    match (e.kind(), e.code()) {
        (ErrorKind::AuthenticationFailed, _) | (_, Some("WRONGPASS")) => Some(format!(
            "Redis refused the user or password in the URL{}",
            redis_said()
        )),
        (_, Some("NOAUTH")) => Some(
            "Redis asks for a password and the URL gives none \
             (redis://:PASSWORD@HOST:PORT or redis://USER:PASSWORD@HOST:PORT)"
                .into(),
        ),
        (ErrorKind::InvalidClientConfig, _) => Some(format!("the Redis URL cannot be used: {e}")),
        // The client's words for a refused `SELECT`, with the server's after them.
        _ if e.to_string().contains("refused to switch database") => Some(format!(
            "the Redis server has no such DB index as the URL names: {} (a server has \
             `databases` of them, 16 by default, numbered from 0)",
            e.detail().unwrap_or("SELECT refused")
        )),
        // rustls's words: "invalid peer certificate: UnknownIssuer", "...: NotValidForName".
        _ if e.to_string().contains("invalid peer certificate") => Some(format!(
            "the Redis server's TLS certificate is not trusted ({e}): check that the CA that \
             signed it is among the system's root certificates (or in the file SSL_CERT_FILE \
             names), and that the URL's host is one the certificate names"
        )),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use redis::{ErrorKind, RedisError, ServerErrorKind};

    use super::{setup_error, store_error};
    use crate::error::ErrorKind as Kind;

    #[test]
    fn settings_that_can_never_work_are_config_errors_where_the_store_is_set_up() {
        let select: RedisError = (
            ServerErrorKind::ResponseError.into(),
            "Redis server refused to switch database",
            "DB index is out of range".to_owned(),
        )
            .into();
        let e = setup_error(select);
        assert_eq!(e.kind(), Kind::Config);
        assert!(e.to_string().contains("no such DB index"), "{e}");
        assert!(e.to_string().contains("DB index is out of range"), "{e}");
        let auth = || -> RedisError {
            (
                ErrorKind::AuthenticationFailed,
                "Password authentication failed",
            )
                .into()
        };
        assert_eq!(setup_error(auth()).kind(), Kind::Config);
        // After the store was built, the same refusal is an outage, in the same words.
        let later = store_error(auth());
        assert_eq!(later.kind(), Kind::Unavailable, "{later}");
        assert!(
            later.to_string().contains("refused the user or password"),
            "{later}"
        );
        let down =
            || -> RedisError { std::io::Error::from(std::io::ErrorKind::ConnectionRefused).into() };
        assert_eq!(setup_error(down()).kind(), Kind::Unavailable);
        assert_eq!(store_error(down()).kind(), Kind::Unavailable);
    }
}
