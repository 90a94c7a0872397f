//! Why a request was not decided, in the limiter's own terms: each front end turns it into
//! its protocol's answer (HTTP's problem+json, a Redis error, a gRPC status) at its edge.

use std::fmt;

use tollgate::{CheckError, StoreError};

use super::KeyError;

/// Why a request was not decided.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DecideError {
    /// No configured policy has the name the request gives in `field` (`policy` or
    /// `policies`); the message lists (some of) those that are configured.
    UnknownPolicy {
        /// The request's field.
        field: &'static str,
        /// What is wrong, for a person.
        message: String,
    },
    /// The request carries its own numbers, and this server takes configured policies only.
    InlineRefused,
    /// The list of policies is empty, too long, or names one twice: `message` says which.
    Policies(String),
    /// An inline policy the store cannot decide: `field` names the number to change
    /// (`capacity`, `refill`, `period`).
    Unsupported {
        /// The policy's number at fault.
        field: &'static str,
        /// What is wrong, for a person.
        message: String,
    },
    /// The cost exceeds a policy's capacity: it can never be allowed.
    CostExceedsCapacity(String),
    /// The key is empty or too long (the core's one key rule, [`super::check_key`]).
    Key(KeyError),
    /// The store refused the key.
    InvalidKey(String),
    /// A reservation names a window, which cannot give tokens back.
    NotTokenBucket {
        /// The policy's name.
        name: String,
    },
    /// The store failed and the fail policy is to deny, or it answered what cannot be used.
    Unavailable(String),
}

impl From<StoreError> for DecideError {
    fn from(error: StoreError) -> DecideError {
        match error {
            StoreError::Check(e @ CheckError::CostExceedsCapacity { .. }) => {
                DecideError::CostExceedsCapacity(e.to_string())
            }
            StoreError::Check(e) => DecideError::InvalidKey(e.to_string()),
            e => DecideError::Unavailable(e.to_string()),
        }
    }
}

impl fmt::Display for DecideError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DecideError::UnknownPolicy { message, .. }
            | DecideError::Unsupported { message, .. }
            | DecideError::Policies(message)
            | DecideError::CostExceedsCapacity(message)
            | DecideError::InvalidKey(message)
            | DecideError::Unavailable(message) => f.write_str(message),
            DecideError::Key(KeyError { len: 0, .. }) => f.write_str("key must not be empty"),
            DecideError::Key(KeyError { len, most }) => {
                write!(f, "key is {len} bytes long; at most {most} are accepted")
            }
            DecideError::NotTokenBucket { name } => write!(
                f,
                "{name:?} is a window: reservations need a token bucket (a window cannot tell \
                 which window a returned token was taken in)"
            ),
            DecideError::InlineRefused => f.write_str(
                "limits chosen by the client are turned off on this server \
                 (http.inline_policies = false)",
            ),
        }
    }
}

impl std::error::Error for DecideError {}

/// Why a commit settled nothing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CommitError {
    /// The reservation cannot be committed (any more): not this server's, expired, committed
    /// already, or its policy is no longer a configured token bucket.
    Conflict(String),
    /// The caller is not the reservation's owner.
    Forbidden(String),
    /// The amounts used are refused: `field` names the one at fault (`used`, `used.tokens`).
    Used {
        /// The request's field.
        field: String,
        /// What is wrong, for a person.
        message: String,
    },
    /// The store did not settle it.
    Store(DecideError),
}

impl fmt::Display for CommitError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CommitError::Conflict(message)
            | CommitError::Forbidden(message)
            | CommitError::Used { message, .. } => f.write_str(message),
            CommitError::Store(e) => e.fmt(f),
        }
    }
}

impl std::error::Error for CommitError {}

/// Why a [`Limiter`](super::Limiter) could not be built.
#[derive(Debug, thiserror::Error)]
pub enum BuildError {
    /// The system's random source failed (reservations are signed with a random secret).
    #[error("the system's random source failed")]
    Random,
    /// The metrics could not be registered.
    #[error("the metrics could not be registered: {0}")]
    Metrics(#[from] prometheus::Error),
}
