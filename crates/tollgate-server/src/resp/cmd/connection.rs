//! A connection's own commands: `HELLO`, `AUTH`, `CLIENT`; and who the connection is
//! (`[resp] password`, `[auth]` tokens) and may do.

use super::{After, Session, Shared, arity};
use crate::auth::{Frontend, MAX_RESP_FAILURES, Scope, Scopes, Token, delay};
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

/// A wrong user or password.
pub(super) struct WrongPass;

/// `HELLO [protover [AUTH user password] [SETNAME name]]`: the handshake of RESP3 clients.
pub(super) fn hello(
    shared: &Shared,
    session: &mut Session,
    args: &[&[u8]],
) -> Result<Reply, WrongPass> {
    let mut resp3 = session.resp3;
    let mut rest = &args[1..];
    if let Some((version, tail)) = rest.split_first() {
        match std::str::from_utf8(version)
            .ok()
            .and_then(|v| v.parse::<i64>().ok())
        {
            Some(2) => resp3 = false,
            Some(3) => resp3 = true,
            Some(_) => return Ok(Reply::Error("NOPROTO unsupported protocol version".into())),
            None => {
                return Ok(Reply::err(
                    "Protocol version is not an integer or out of range",
                ));
            }
        }
        rest = tail;
    }
    let mut name = None;
    let mut user = None;
    while let Some((option, tail)) = rest.split_first() {
        match (option.to_ascii_lowercase().as_slice(), tail) {
            (b"auth", [name, password, more @ ..]) => {
                user = Some(login(shared, Some(name), password).ok_or(WrongPass)?);
                rest = more;
            }
            (b"setname", [client, more @ ..]) => {
                if let Err(reply) = check_name(client) {
                    return Ok(reply);
                }
                name = Some(client.to_vec());
                rest = more;
            }
            _ => {
                return Ok(Reply::err(format!(
                    "Syntax error in HELLO option '{}'",
                    String::from_utf8_lossy(option)
                )));
            }
        }
    }
    if let Some(user) = user {
        session.user = Some(user);
    }
    if matches!(access(shared, session), Access::Anonymous) {
        return Ok(Reply::Error(
            "NOAUTH HELLO must be called with the client already authenticated, otherwise the \
             HELLO <proto> AUTH <user> <pass> option can be used to authenticate the client and \
             select the RESP protocol version at the same time"
                .into(),
        ));
    }
    session.resp3 = resp3;
    if name.is_some() {
        session.name = name;
    }
    Ok(Reply::Map(vec![
        (Reply::text("server"), Reply::text("tollgate")),
        (
            Reply::text("version"),
            Reply::text(env!("CARGO_PKG_VERSION")),
        ),
        (
            Reply::text("proto"),
            Reply::Integer(if resp3 { 3 } else { 2 }),
        ),
        (Reply::text("id"), Reply::Integer(session.id as i64)),
        (Reply::text("mode"), Reply::text("standalone")),
        (Reply::text("role"), Reply::text("master")),
        (Reply::text("modules"), Reply::Array(Vec::new())),
    ]))
}

/// Who `user` (`None`: `AUTH <password>`, which names no user) proves to be with `password`.
///
/// `[resp] password` is the user `default`'s. `AUTH <password>` is also taken as any token's
/// secret, so that clients that only know the one-argument form can use a token. Without a
/// password or tokens, the user `default` takes any password (as Redis's `nopass` default
/// user does), so a client configured with one still connects.
fn login(shared: &Shared, user: Option<&[u8]>, password: &[u8]) -> Option<User> {
    let tokens = shared.limiter.auth().tokens();
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

/// The answer to a wrong `AUTH` (or `HELLO ... AUTH`): Redis's `WRONGPASS`, counted, held
/// back a little longer each time on this connection, and the connection closed at the
/// [`MAX_RESP_FAILURES`]th.
pub(super) async fn wrong_pass(shared: &Shared, session: &mut Session) -> (Reply, After) {
    shared.limiter.auth().failed(Frontend::Resp);
    session.failures = session.failures.saturating_add(1);
    let wait = delay(session.failures);
    if !wait.is_zero() {
        tokio::time::sleep(wait).await;
    }
    let reply =
        Reply::Error("WRONGPASS invalid username-password pair or user is disabled.".into());
    if session.failures >= MAX_RESP_FAILURES {
        tracing::info!(
            failures = session.failures,
            "a RESP connection failed AUTH too often; closed"
        );
        return (reply, After::Close);
    }
    (reply, After::Continue)
}

/// `AUTH [user] password`.
pub(super) fn auth(
    shared: &Shared,
    session: &mut Session,
    args: &[&[u8]],
) -> Result<Reply, WrongPass> {
    let (user, password): (Option<&[u8]>, &[u8]) = match args {
        [_, password] => {
            // Redis refuses the password-only form when no password is set.
            if shared.password.is_none() && !shared.limiter.auth().required() {
                return Ok(Reply::err(
                    "AUTH <password> called without any password configured for the default \
                     user. Are you sure your configuration is correct?",
                ));
            }
            (None, password)
        }
        [_, user, password] => (Some(user), password),
        _ => return Ok(arity("auth")),
    };
    session.user = Some(login(shared, user, password).ok_or(WrongPass)?);
    Ok(Reply::Simple("OK"))
}

fn check_name(name: &[u8]) -> Result<(), Reply> {
    if name.iter().any(|&b| !(b'!'..=b'~').contains(&b)) {
        return Err(Reply::err(
            "Client names cannot contain spaces, newlines or special characters.",
        ));
    }
    Ok(())
}

pub(super) fn client(session: &mut Session, args: &[&[u8]]) -> Reply {
    let Some(sub) = args.get(1) else {
        return arity("client");
    };
    match (sub.to_ascii_lowercase().as_slice(), &args[2..]) {
        (b"setname", [name]) => match check_name(name) {
            Ok(()) => {
                session.name = (!name.is_empty()).then(|| name.to_vec());
                Reply::Simple("OK")
            }
            Err(reply) => reply,
        },
        (b"getname", []) => session.name.clone().map_or(Reply::Null, Reply::Bulk),
        (b"id", []) => Reply::Integer(session.id as i64),
        (b"setinfo", [attribute, _]) => {
            if attribute.eq_ignore_ascii_case(b"lib-name")
                || attribute.eq_ignore_ascii_case(b"lib-ver")
            {
                Reply::Simple("OK")
            } else {
                Reply::err(format!(
                    "Unrecognized option '{}'",
                    String::from_utf8_lossy(attribute)
                ))
            }
        }
        (b"setname" | b"getname" | b"id" | b"setinfo", _) => Reply::err(format!(
            "wrong number of arguments for 'client|{}' command",
            String::from_utf8_lossy(sub).to_ascii_lowercase()
        )),
        _ => Reply::err(format!(
            "unknown subcommand '{}'. Try CLIENT HELP.",
            String::from_utf8_lossy(sub)
        )),
    }
}
