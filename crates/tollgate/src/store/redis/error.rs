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
pub(crate) fn store_error(e: RedisError) -> StoreError {
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
