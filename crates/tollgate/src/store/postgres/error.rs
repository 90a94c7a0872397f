//! PostgreSQL's failures, classified: the database is down or busy (transient: the fail policy
//! answers until it is back), or it answered what this program does not understand
//! (incompatible: a schema or a configuration that disagrees with it); and the failures that
//! say the schema is gone, after which a connection is made again (and the schema with it).

use tokio_postgres::error::SqlState;

use crate::StoreError;

pub(crate) fn is_missing_schema(e: &tokio_postgres::Error) -> bool {
    matches!(
        e.code(),
        Some(
            &SqlState::UNDEFINED_TABLE
                | &SqlState::UNDEFINED_FUNCTION
                | &SqlState::INVALID_SCHEMA_NAME
        )
    )
}

/// A failure of the database, classified, with what the server said: tokio-postgres displays
/// an error the server sent as a bare "db error", which would hide a serialization failure or
/// a missing table from the logs.
///
/// Never going to work (in the server's own words): authentication refused (SQLSTATE 28000,
/// 28P01: no such role, a wrong password, no `pg_hba.conf` entry), no such database (3D000), a
/// password the server asks for and the URL does not give, and a server that does not answer
/// as PostgreSQL does. Where a connection is made ([`connect_error`]) that is a
/// [`StoreError::Config`], which [`Store::ready`](crate::Store::ready) answers so that a
/// program can refuse to start; anywhere else, and for a decision whose connection was made
/// again (the pool maps it, see `Pool::get`), the store was built and served, and it is an
/// outage the fail policy answers.
///
/// Transient (the fail policy answers until the database is back): no answer at all (a
/// connection refused, closed or timed out), and the SQLSTATE classes that say the server
/// cannot serve now: 08 connection exception, 40 transaction rollback (conflicts left after
/// the retries), 53 insufficient resources, 55 object not in prerequisite state (a lock not
/// available), 57 operator intervention (shutdown, recovery), 58 system error, and 25006 (a
/// read-only transaction: a standby not yet promoted). Any other error
/// the server sends (a missing table or function, a type or syntax error, a permission
/// refused) is a schema or a configuration that disagrees with this program: incompatible.
pub(crate) fn store_error(e: tokio_postgres::Error) -> StoreError {
    outage(connect_error(e))
}

/// A failure to make a connection: settings that can never work are a
/// [`StoreError::Config`] (see [`store_error`]).
pub(crate) fn connect_error(e: tokio_postgres::Error) -> StoreError {
    let Some(db) = e.as_db_error() else {
        return match never_works(&e) {
            Some(message) => StoreError::Config(message),
            None => StoreError::Unavailable(Box::new(e)),
        };
    };
    let code = db.code().code();
    if matches!(code, "28000" | "28P01" | "3D000") {
        // The server's words name the thing: `database "x" does not exist`, `password
        // authentication failed for user "x"`, `role "x" does not exist`.
        return StoreError::Config(format!("{} (SQLSTATE {code})", db.message()));
    }
    let message = format!("{}: {} (SQLSTATE {code})", db.severity(), db.message());
    // 25006: a read-only transaction, as on a standby that a failover has not promoted yet.
    if matches!(code.get(..2), Some("08" | "40" | "53" | "55" | "57" | "58")) || code == "25006" {
        StoreError::Unavailable(message.into())
    } else {
        StoreError::Incompatible(message.into())
    }
}

/// `e` as a decision answers it: settings that can never work, met once the store serves,
/// are an outage in the same words.
pub(crate) fn outage(e: StoreError) -> StoreError {
    match e {
        StoreError::Config(why) => StoreError::Unavailable(why.into()),
        e => e,
    }
}

/// What is wrong, when a failure that is not the server's own error can never pass: the
/// connection settings lack what the driver needs (a host, a user, a password the server asks
/// for), TLS that the URL requires and the server does not offer or proves with a certificate
/// not trusted, or the server answered what PostgreSQL never sends. tokio-postgres says which only
/// in its display (its kinds are private) and the cause.
fn never_works(e: &tokio_postgres::Error) -> Option<String> {
    let what = e.to_string();
    let cause = std::error::Error::source(e).map(ToString::to_string);
    let detail = cause.as_deref().unwrap_or("");
    match what.as_str() {
        "invalid configuration" | "invalid connection string" if detail == "password missing" => {
            Some("the PostgreSQL server asks for a password and the URL gives none".into())
        }
        "invalid configuration" | "invalid connection string" => Some(format!(
            "the PostgreSQL connection settings are incomplete: {}",
            if detail.is_empty() { &what } else { detail }
        )),
        "authentication error" => Some(format!(
            "the PostgreSQL server refused the authentication: {}",
            if detail.is_empty() { &what } else { detail }
        )),
        "error performing TLS handshake" if detail == "server does not support TLS" => Some(
            "the PostgreSQL server does not offer TLS, and the URL's sslmode requires it".into(),
        ),
        // rustls's words: "invalid peer certificate: UnknownIssuer", "...: NotValidForName".
        "error performing TLS handshake" if detail.starts_with("invalid peer certificate") => {
            Some(format!(
                "the PostgreSQL server's TLS certificate is not trusted ({detail}): check \
                 sslrootcert, and that the URL's host is one the certificate names"
            ))
        }
        "unexpected message from server" | "error parsing response from server" => Some(format!(
            "the server does not answer as PostgreSQL does ({what}): is this the PostgreSQL \
             host and port?"
        )),
        _ => None,
    }
}
