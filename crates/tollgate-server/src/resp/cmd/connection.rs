//! A connection's own commands: `HELLO`, `CLIENT` (`AUTH` is in [`super::auth`]).

use super::auth::{Access, WrongPass, access, login};
use super::{Session, Shared, arity};
use crate::resp::codec::Reply;

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
                user = Some(login(shared, session, Some(name), password).map_err(WrongPass)?);
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
