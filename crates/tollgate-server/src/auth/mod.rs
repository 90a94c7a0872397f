//! Who may do what: named bearer tokens with scopes (`[auth]`), checked here for every front
//! end, each of which only finds the secret in its protocol (HTTP's `Authorization`, gRPC's
//! metadata, RESP's `AUTH`) and words the refusal in it.
//!
//! Without tokens everything is open, as before `[auth]` existed. Once one is configured,
//! every request needs a token ([`Auth::bearer`]), and each endpoint needs a [`Scope`]:
//! `check` to decide, `read` to look at buckets and policies, `admin` to reset or refund and
//! for the server's own pages. The table reloads with the config file ([`Auth::reload`]).
//!
//! ```
//! use tollgate_server::auth::{Auth, Refusal, Scope, Secret, Token, Tokens};
//! let metrics = tollgate_server::metrics::Metrics::new().unwrap();
//! let app = Token::new("app", Secret::new(b"s3cret"), [Scope::Check].into_iter().collect());
//! let auth = Auth::new(Tokens::new(vec![app]).unwrap(), &metrics);
//! let grant = auth.bearer(Some(b"Bearer s3cret")).unwrap();
//! assert!(grant.allows(Scope::Check).is_ok());
//! assert!(matches!(grant.allows(Scope::Admin), Err(Refusal::Forbidden { .. })));
//! assert!(matches!(auth.bearer(None), Err(Refusal::Missing)));
//! ```

mod secret;
mod strikes;
mod tokens;

use std::fmt;
use std::sync::Arc;

use arc_swap::ArcSwap;
use prometheus::IntCounter;

pub use secret::Secret;
pub use strikes::{MAX_RESP_FAILURES, Strikes, delay};
pub use tokens::{Scope, Scopes, Token, Tokens};

use crate::metrics::Metrics;

/// The front ends, as the failure counter labels them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Frontend {
    /// HTTP/JSON (and Envoy's `/json`, `/rlconfig`).
    Http,
    /// Envoy's gRPC service.
    Grpc,
    /// The Redis protocol.
    Resp,
}

impl Frontend {
    fn label(self) -> &'static str {
        match self {
            Frontend::Http => "http",
            Frontend::Grpc => "grpc",
            Frontend::Resp => "resp",
        }
    }
}

/// What a request may do.
#[derive(Debug, Clone)]
pub enum Grant {
    /// No token is configured: everything.
    Open,
    /// What the token's scopes allow.
    Token {
        /// Its name.
        name: Arc<str>,
        /// Its scopes.
        scopes: Scopes,
    },
}

impl Grant {
    /// Whether `scope` is allowed.
    pub fn allows(&self, scope: Scope) -> Result<(), Refusal> {
        match self {
            Grant::Open => Ok(()),
            Grant::Token { scopes, .. } if scopes.contains(scope) => Ok(()),
            Grant::Token { name, .. } => Err(Refusal::Forbidden {
                token: Arc::clone(name),
                scope,
            }),
        }
    }

    /// The token's name; `None` when no token is configured.
    pub fn token_name(&self) -> Option<&str> {
        match self {
            Grant::Open => None,
            Grant::Token { name, .. } => Some(name),
        }
    }

    fn of(token: &Token) -> Grant {
        Grant::Token {
            name: Arc::clone(&token.name),
            scopes: token.scopes,
        }
    }
}

/// Why a request is refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// No token was given where one is required.
    Missing,
    /// The token given is no configured token's.
    Wrong,
    /// The token lacks the scope.
    Forbidden {
        /// The token's name.
        token: Arc<str>,
        /// The scope it lacks.
        scope: Scope,
    },
}

impl Refusal {
    /// Whether the client is unknown (HTTP 401) rather than known and not allowed (403).
    pub fn is_unauthenticated(&self) -> bool {
        !matches!(self, Refusal::Forbidden { .. })
    }
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Refusal::Missing => f.write_str("this server requires a token: none was given"),
            Refusal::Wrong => f.write_str("the token given is not one this server knows"),
            Refusal::Forbidden { token, scope } => write!(
                f,
                "the token {token:?} lacks the {scope} scope this request needs"
            ),
        }
    }
}

/// The tokens in force, and the count of failed authentications.
pub struct Auth {
    tokens: ArcSwap<Tokens>,
    /// Failures over HTTP, gRPC and RESP.
    failures: (IntCounter, IntCounter, IntCounter),
}

impl Auth {
    /// Checks against `tokens`, counting failures in `metrics`.
    pub fn new(tokens: Tokens, metrics: &Metrics) -> Auth {
        Auth {
            tokens: ArcSwap::from_pointee(tokens),
            failures: (
                metrics.auth_failures(Frontend::Http.label()),
                metrics.auth_failures(Frontend::Grpc.label()),
                metrics.auth_failures(Frontend::Resp.label()),
            ),
        }
    }

    /// Puts `tokens` in force for the next requests (a reload).
    pub fn reload(&self, tokens: Tokens) {
        self.tokens.store(Arc::new(tokens));
    }

    /// The tokens in force now.
    pub fn tokens(&self) -> Arc<Tokens> {
        self.tokens.load_full()
    }

    /// Whether requests need a token.
    pub fn required(&self) -> bool {
        !self.tokens.load().is_empty()
    }

    /// What a request with `authorization` (`Bearer <secret>`, the value of HTTP's header or
    /// gRPC's metadata; `None` if absent) may do.
    pub fn bearer(&self, authorization: Option<&[u8]>) -> Result<Grant, Refusal> {
        let tokens = self.tokens.load();
        if tokens.is_empty() {
            return Ok(Grant::Open);
        }
        let value = authorization.ok_or(Refusal::Missing)?;
        // The scheme is case-insensitive (RFC 9110); the secret is what follows the spaces.
        let secret = match value.get(..7) {
            Some(scheme) if scheme.eq_ignore_ascii_case(b"bearer ") => value[7..].trim_ascii(),
            _ => return Err(Refusal::Wrong),
        };
        tokens
            .proved_by(secret)
            .map(Grant::of)
            .ok_or(Refusal::Wrong)
    }

    /// Counts a request of `frontend` refused for want of a valid token.
    pub fn failed(&self, frontend: Frontend) {
        let (http, grpc, resp) = &self.failures;
        match frontend {
            Frontend::Http => http.inc(),
            Frontend::Grpc => grpc.inc(),
            Frontend::Resp => resp.inc(),
        }
    }
}

impl fmt::Debug for Auth {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Auth")
            .field("tokens", &self.tokens.load())
            .finish_non_exhaustive()
    }
}
