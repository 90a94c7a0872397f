//! Who a connection is and what it may do: `AUTH` (Redis 6's `AUTH user password` and the
//! one-argument form), `[resp] password` (the user `default`, scope `check`) and the `[auth]`
//! tokens, whose scopes are looked up at each command so that a reload applies to connections
//! already open; and, before any command runs, whether this connection may run it
//! ([`admit`]).

use super::name::Name;
use super::{After, Session, Shared};
use crate::auth::{AuthError, Caller, Frontend, Scope, Scopes, Token, Tokens};
use crate::resp::codec::Reply;

/// Who a connection authenticated as.
pub(super) enum User {
    /// The user `default`, by `[resp] password`: it may decide (scope `check`).
    Password,
    /// An `[auth]` token, whose scopes are looked up afresh at each command (a reload may have
    /// changed them, or its secret).
    Token(Token),
    /// The user `default` of a server that asked for no password when it authenticated, as a
    /// Redis `nopass` user: nothing once authentication is required.
    Nopass,
}

/// What a connection may do now.
pub(super) enum Access {
    /// Everything: no password and no token is configured.
    Open,
    /// Nothing but authenticate.
    Anonymous,
    /// What these scopes allow.
    Scopes(Scopes),
}

/// What `session` may do under the password and the tokens in force now.
pub(super) fn access(shared: &Shared, session: &Session) -> Access {
    let auth = shared.limiter.auth();
    if shared.password.is_none() && !auth.required() {
        return Access::Open;
    }
    match &session.user {
        Some(User::Password) => Access::Scopes([Scope::Check].into_iter().collect()),
        Some(User::Token(token)) => auth
            .tokens()
            .scopes_now(token)
            .map_or(Access::Anonymous, Access::Scopes),
        Some(User::Nopass) | None => Access::Anonymous,
    }
}

/// Whether `session` may run the command `name`, or the refusal to answer, in Redis's words.
/// A connection may always authenticate, say goodbye or start over (`AUTH`, `HELLO`, `QUIT`,
/// `RESET`); anything else needs it to have authenticated where that is required (an anonymous
/// attempt is counted as a failed authentication), and the rate limiters need scope `check`.
pub(super) fn admit(shared: &Shared, session: &Session, name: Name) -> Result<(), Reply> {
    let needs = match name {
        Name::Auth | Name::Hello | Name::Quit | Name::Reset => return Ok(()),
        Name::ClThrottle | Name::Throttle | Name::TollgateCheck => Some(Scope::Check),
        _ => None,
    };
    match access(shared, session) {
        Access::Open => Ok(()),
        Access::Anonymous => {
            shared
                .limiter
                .auth()
                .missing(Caller::new(Frontend::Resp, session.peer));
            Err(Reply::Error("NOAUTH Authentication required.".into()))
        }
        Access::Scopes(scopes) => match needs {
            Some(scope) if !scopes.contains(scope) => {
                // Redis 7.0's words for a command the user's ACL does not allow.
                Err(Reply::Error(format!(
                    "NOPERM this user has no permissions to run the '{}' command",
                    name.as_str()
                )))
            }
            _ => Ok(()),
        },
    }
}

/// A wrong user or password, or an address refused for failing too often.
pub(super) struct WrongPass(pub(super) AuthError);

/// Who `user` (`None`: `AUTH <password>`, which names no user) proves to be with `password`,
/// through the one path every secret takes ([`crate::auth::Auth::attempt`]): a wrong one is
/// counted against the connection's address, and a blocked address is refused unchecked.
pub(super) fn login(
    shared: &Shared,
    session: &Session,
    user: Option<&[u8]>,
    password: &[u8],
) -> Result<User, AuthError> {
    let caller = Caller::new(Frontend::Resp, session.peer);
    shared
        .limiter
        .auth()
        .attempt(caller, |tokens| prove(shared, tokens, user, password))
}

/// Who `user` proves to be with `password` under `tokens`.
///
/// `[resp] password` is the user `default`'s. `AUTH <password>` is also taken as any token's
/// secret, so that clients that only know the one-argument form can use a token. Without a
/// password or tokens, the user `default` takes any password (as Redis's `nopass` default
/// user does), so a client configured with one still connects.
fn prove(shared: &Shared, tokens: &Tokens, user: Option<&[u8]>, password: &[u8]) -> Option<User> {
    let default = user.is_none_or(|u| u == b"default");
    if default && let Some(secret) = &shared.password {
        if secret.matches(password) {
            return Some(User::Password);
        }
    } else if default && tokens.is_empty() {
        return Some(User::Nopass);
    }
    let token = match user {
        None => tokens.proved_by(password),
        Some(user) => tokens.login(user, password),
    };
    token.map(|t| User::Token(t.clone()))
}

/// The answer to a wrong `AUTH` (or `HELLO ... AUTH`): Redis's `WRONGPASS`, held back a little
/// longer for each failure from the address; once the address failed too often, `-ERR` saying
/// so, and the connection closed.
pub(super) async fn wrong_pass(refusal: AuthError) -> (Reply, After) {
    match refusal.held_back().await {
        blocked @ AuthError::Blocked { .. } => (Reply::err(blocked.to_string()), After::Close),
        _ => (
            Reply::Error("WRONGPASS invalid username-password pair or user is disabled.".into()),
            After::Continue,
        ),
    }
}

/// `AUTH [user] password` (`user`: `None` for the one-argument form).
pub(super) fn auth(
    shared: &Shared,
    session: &mut Session,
    user: Option<&[u8]>,
    password: &[u8],
) -> Result<Reply, WrongPass> {
    // Redis refuses the password-only form when no password is set.
    if user.is_none() && shared.password.is_none() && !shared.limiter.auth().required() {
        return Ok(Reply::err(
            "AUTH <password> called without any password configured for the default user. \
             Are you sure your configuration is correct?",
        ));
    }
    session.user = Some(login(shared, session, user, password).map_err(WrongPass)?);
    Ok(Reply::Simple("OK"))
}
