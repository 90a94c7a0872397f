//! A connection's own commands: `HELLO`, `AUTH`, `CLIENT`.

use super::{Session, Shared, arity};
use crate::resp::codec::Reply;

/// `HELLO [protover [AUTH user password] [SETNAME name]]`: the handshake of RESP3 clients.
pub(super) fn hello(shared: &Shared, session: &mut Session, args: &[&[u8]]) -> Reply {
    let mut resp3 = session.resp3;
    let mut rest = &args[1..];
    if let Some((version, tail)) = rest.split_first() {
        match std::str::from_utf8(version)
            .ok()
            .and_then(|v| v.parse::<i64>().ok())
        {
            Some(2) => resp3 = false,
            Some(3) => resp3 = true,
            Some(_) => return Reply::Error("NOPROTO unsupported protocol version".into()),
            None => return Reply::err("Protocol version is not an integer or out of range"),
        }
        rest = tail;
    }
    let mut name = None;
    let mut authenticated = session.authenticated;
    while let Some((option, tail)) = rest.split_first() {
        match (option.to_ascii_lowercase().as_slice(), tail) {
            (b"auth", [user, password, more @ ..]) => {
                if !shared.password_matches(user, password) {
                    return wrong_password();
                }
                authenticated = true;
                rest = more;
            }
            (b"setname", [client, more @ ..]) => {
                if let Err(reply) = check_name(client) {
                    return reply;
                }
                name = Some(client.to_vec());
                rest = more;
            }
            _ => {
                return Reply::err(format!(
                    "Syntax error in HELLO option '{}'",
                    String::from_utf8_lossy(option)
                ));
            }
        }
    }
    if !authenticated {
        return Reply::Error(
            "NOAUTH HELLO must be called with the client already authenticated, otherwise the \
             HELLO <proto> AUTH <user> <pass> option can be used to authenticate the client and \
             select the RESP protocol version at the same time"
                .into(),
        );
    }
    session.resp3 = resp3;
    session.authenticated = authenticated;
    if name.is_some() {
        session.name = name;
    }
    Reply::Map(vec![
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
    ])
}

impl Shared {
    /// Whether `user` and `password` authenticate. Without a password set, the default user
    /// takes any (as Redis's `nopass` default user does), so a client configured with one still
    /// connects.
    fn password_matches(&self, user: &[u8], password: &[u8]) -> bool {
        if self.password.is_none() {
            return user == b"default";
        }
        // Compared in constant time, so that timing does not tell how much of a guess is right.
        let same = |a: &[u8], b: &[u8]| {
            a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
        };
        user == b"default"
            && self
                .password
                .as_ref()
                .is_some_and(|p| same(p.as_bytes(), password))
    }
}

fn wrong_password() -> Reply {
    Reply::Error("WRONGPASS invalid username-password pair or user is disabled.".into())
}

pub(super) fn auth(shared: &Shared, session: &mut Session, args: &[&[u8]]) -> Reply {
    let (user, password): (&[u8], &[u8]) = match args {
        [_, password] => {
            // Redis refuses the password-only form when no password is set.
            if shared.password.is_none() {
                return Reply::err(
                    "AUTH <password> called without any password configured for the default \
                     user. Are you sure your configuration is correct?",
                );
            }
            (b"default", password)
        }
        [_, user, password] => (user, password),
        _ => return arity("auth"),
    };
    if shared.password_matches(user, password) {
        session.authenticated = true;
        Reply::Simple("OK")
    } else {
        wrong_password()
    }
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
