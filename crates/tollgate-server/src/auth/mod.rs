//! Who may do what: named bearer tokens with scopes (`[auth]`), checked here for every front
//! end, each of which only finds the secret in its protocol (HTTP's `Authorization`, gRPC's
//! metadata, RESP's `AUTH`) and words the refusal in it.
//!
//! Without tokens everything is open, as before `[auth]` existed. Once one is configured,
//! every request needs a token ([`Auth::admit`]), and each endpoint needs a [`Scope`]:
//! `check` to decide, `read` to look at buckets and policies, `admin` to reset or refund and
//! for the server's own pages. The table reloads with the config file ([`Auth::reload`]).
//!
//! Wrong secrets are counted per client address across every connection and front end
//! ([`Strikes`]): each is answered later than the last, and past a threshold the address is
//! refused for a while ([`AuthError::Blocked`]).
//!
//! ```
//! use tollgate_server::auth::{Auth, Caller, Frontend, AuthError, Scope, Secret, Token, Tokens};
//! let metrics = tollgate_server::metrics::Metrics::new().unwrap();
//! let secret = b"s3cret-s3cret-s3cret";
//! let app = Token::new("app", Secret::new(secret), [Scope::Check].into_iter().collect());
//! let auth = Auth::new(Tokens::new(vec![app]).unwrap(), &metrics);
//! let caller = Caller::new(Frontend::Http, [192, 0, 2, 1].into());
//! let bearer = Some(&b"Bearer s3cret-s3cret-s3cret"[..]);
//! let grant = auth.admit(caller, bearer, Some(Scope::Check)).unwrap();
//! assert!(grant.allows(Scope::Check).is_ok());
//! assert!(matches!(auth.admit(caller, bearer, Some(Scope::Admin)), Err(AuthError::Forbidden { .. })));
//! assert!(matches!(auth.admit(caller, None, None), Err(AuthError::Missing)));
//! let guess = Some(&b"Bearer guess"[..]);
//! assert!(matches!(auth.admit(caller, guess, None), Err(AuthError::Wrong { .. })));
//! ```

mod secret;
mod strikes;
mod tokens;

use std::fmt;
use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwap;
use prometheus::IntCounter;

pub use secret::Secret;
pub use strikes::{
    BLOCK_AFTER, BLOCK_FOR, FORGET_AFTER, MAX_ADDRESSES, Penalty, Strikes, client_address, delay,
};
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

/// Who presents a secret: the front end, and the TCP peer's address.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Caller {
    /// The front end it came through.
    pub frontend: Frontend,
    /// The TCP peer's address (a proxy's, for clients behind one).
    pub address: IpAddr,
}

impl Caller {
    /// `address`, through `frontend`.
    pub fn new(frontend: Frontend, address: IpAddr) -> Caller {
        Caller { frontend, address }
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
    pub fn allows(&self, scope: Scope) -> Result<(), AuthError> {
        match self {
            Grant::Open => Ok(()),
            Grant::Token { scopes, .. } if scopes.contains(scope) => Ok(()),
            Grant::Token { name, .. } => Err(AuthError::Forbidden {
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
pub enum AuthError {
    /// No token was given where one is required.
    Missing,
    /// The secret given is no configured token's; the answer is held back `delay` (the
    /// address's failures so far, [`Strikes`]).
    Wrong {
        /// How long to hold the answer back.
        delay: Duration,
    },
    /// The address failed too often: it is refused, its secret unchecked, for `retry_after`.
    Blocked {
        /// How much longer the address is refused.
        retry_after: Duration,
    },
    /// The token lacks the scope.
    Forbidden {
        /// The token's name.
        token: Arc<str>,
        /// The scope it lacks.
        scope: Scope,
    },
}

impl AuthError {
    /// Whether the client is unknown (HTTP 401) rather than known and not allowed (403).
    pub fn is_unauthenticated(&self) -> bool {
        matches!(self, AuthError::Missing | AuthError::Wrong { .. })
    }

    /// This refusal, once its answer has been held back as long as it must be.
    pub async fn held_back(self) -> AuthError {
        if let AuthError::Wrong { delay } = self
            && !delay.is_zero()
        {
            tokio::time::sleep(delay).await;
        }
        self
    }
}

impl fmt::Display for AuthError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AuthError::Missing => f.write_str("this server requires a token: none was given"),
            AuthError::Wrong { .. } => f.write_str("the token given is not one this server knows"),
            AuthError::Blocked { retry_after } => write!(
                f,
                "too many failed authentications from this address; it is refused for {}s more",
                whole_seconds(*retry_after)
            ),
            AuthError::Forbidden { token, scope } => write!(
                f,
                "the token {token:?} lacks the {scope} scope this request needs"
            ),
        }
    }
}

/// `wait` in whole seconds, rounded up, at least 1: a client that waits this long is let in.
pub fn whole_seconds(wait: Duration) -> u64 {
    wait.as_secs()
        .saturating_add(u64::from(wait.subsec_nanos() > 0))
        .max(1)
}

/// The tokens in force, the failures per address, and the count of failed authentications.
pub struct Auth {
    tokens: ArcSwap<Tokens>,
    strikes: Strikes,
    /// Failures over HTTP, gRPC and RESP.
    failures: (IntCounter, IntCounter, IntCounter),
    /// Refusals of blocked addresses over HTTP, gRPC and RESP.
    blocked: (IntCounter, IntCounter, IntCounter),
}

impl Auth {
    /// Checks against `tokens`, counting failures in `metrics`.
    pub fn new(tokens: Tokens, metrics: &Metrics) -> Auth {
        Auth {
            tokens: ArcSwap::from_pointee(tokens),
            strikes: Strikes::default(),
            failures: (
                metrics.auth_failures(Frontend::Http.label()),
                metrics.auth_failures(Frontend::Grpc.label()),
                metrics.auth_failures(Frontend::Resp.label()),
            ),
            blocked: (
                metrics.auth_blocked(Frontend::Http.label()),
                metrics.auth_blocked(Frontend::Grpc.label()),
                metrics.auth_blocked(Frontend::Resp.label()),
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

    /// The one gate every front end's request passes: what `caller`, presenting
    /// `authorization` (`Bearer <secret>`, the value of HTTP's header or gRPC's metadata;
    /// `None` when it presents nothing, as a Redis connection that has not authenticated), may
    /// do, if that includes `scope` (`None`: whatever its token allows, checked later per
    /// route). Without tokens everything is open. A missing secret is counted; a wrong one is
    /// counted and struck against the address ([`attempt`](Auth::attempt)), and its refusal
    /// carries the delay to hold the answer back by ([`AuthError::held_back`]); a blocked
    /// address is refused unchecked.
    pub fn admit(
        &self,
        caller: Caller,
        authorization: Option<&[u8]>,
        scope: Option<Scope>,
    ) -> Result<Grant, AuthError> {
        if !self.required() {
            return Ok(Grant::Open);
        }
        let Some(value) = authorization else {
            return Err(self.missing(caller));
        };
        // The scheme is case-insensitive (RFC 9110); the secret is what follows the spaces.
        let secret = match value.get(..7) {
            Some(scheme) if scheme.eq_ignore_ascii_case(b"bearer ") => value[7..].trim_ascii(),
            _ => b"",
        };
        let grant = self.attempt(caller, |tokens| tokens.proved_by(secret).map(Grant::of))?;
        if let Some(scope) = scope {
            grant.allows(scope)?;
        }
        Ok(grant)
    }

    /// The refusal of a request from `caller` that presents no secret where one is needed,
    /// counted. No secret is no guess: nothing is struck, but a blocked address is still told
    /// it is blocked.
    pub fn missing(&self, caller: Caller) -> AuthError {
        match self.strikes.blocked(caller.address) {
            Some(retry_after) => {
                self.count(&self.blocked, caller.frontend);
                AuthError::Blocked { retry_after }
            }
            None => {
                self.count(&self.failures, caller.frontend);
                AuthError::Missing
            }
        }
    }

    /// `prove`'s answer under the tokens in force (a token, a user, whatever a front end's
    /// form of authentication yields), or the refusal: the one path every secret a client
    /// presents goes through. A blocked address is refused before `prove` runs; `None` from it
    /// is a failure, counted and struck against `caller`'s address.
    pub fn attempt<T>(
        &self,
        caller: Caller,
        prove: impl FnOnce(&Tokens) -> Option<T>,
    ) -> Result<T, AuthError> {
        if let Some(retry_after) = self.strikes.blocked(caller.address) {
            self.count(&self.blocked, caller.frontend);
            return Err(AuthError::Blocked { retry_after });
        }
        if let Some(proved) = prove(&self.tokens.load()) {
            return Ok(proved);
        }
        self.count(&self.failures, caller.frontend);
        match self.strikes.strike(caller.address) {
            Penalty::Delay(delay) => Err(AuthError::Wrong { delay }),
            Penalty::Blocked(retry_after) => {
                tracing::warn!(
                    address = %client_address(caller.address),
                    failures = BLOCK_AFTER,
                    "an address failed authentication too often; refused for {}s",
                    retry_after.as_secs()
                );
                Err(AuthError::Blocked { retry_after })
            }
        }
    }

    fn count(&self, counters: &(IntCounter, IntCounter, IntCounter), frontend: Frontend) {
        let (http, grpc, resp) = counters;
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
