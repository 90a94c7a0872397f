//! A connection's own commands: `HELLO`, `CLIENT`, `SELECT`, `RESET` (`AUTH` is in
//! [`super::auth`]).

use super::auth::{Access, WrongPass, access, login};
use super::name::arity;
use super::{Session, Shared};
use crate::resp::codec::Reply;

/// `HELLO [protover [AUTH user password] [SETNAME name]]`, read.
pub(super) struct Hello<'a> {
    /// The protocol asked for: `Some(true)` for RESP3, `None` to keep the connection's.
    resp3: Option<bool>,
    /// Its options, in order; an unknown one comes last (answered once those before it ran).
    options: Vec<HelloOption<'a>>,
}

/// One of `HELLO`'s options.
enum HelloOption<'a> {
    /// `AUTH user password`.
    Auth(&'a [u8], &'a [u8]),
    /// `SETNAME name`.
    SetName(&'a [u8]),
    /// An option it does not have, or one short of its arguments.
    Unknown(&'a [u8]),
}

impl<'a> Hello<'a> {
    /// Reads `args` (the command's name first), or the error to answer.
    pub(super) fn parse(args: &[&'a [u8]]) -> Result<Hello<'a>, Reply> {
        let mut resp3 = None;
        let mut rest = &args[1..];
        if let Some((version, tail)) = rest.split_first() {
            resp3 = match std::str::from_utf8(version)
                .ok()
                .and_then(|v| v.parse::<i64>().ok())
            {
                Some(2) => Some(false),
                Some(3) => Some(true),
                Some(_) => return Err(Reply::Error("NOPROTO unsupported protocol version".into())),
                None => {
                    return Err(Reply::err(
                        "Protocol version is not an integer or out of range",
                    ));
                }
            };
            rest = tail;
        }
        let mut options = Vec::new();
        while let Some((option, tail)) = rest.split_first() {
            match (option.to_ascii_lowercase().as_slice(), tail) {
                (b"auth", [name, password, more @ ..]) => {
                    options.push(HelloOption::Auth(name, password));
                    rest = more;
                }
                (b"setname", [client, more @ ..]) => {
                    options.push(HelloOption::SetName(client));
                    rest = more;
                }
                _ => {
                    options.push(HelloOption::Unknown(option));
                    break;
                }
            }
        }
        Ok(Hello { resp3, options })
    }
}

/// `HELLO`: the handshake of RESP3 clients. Its options run in order, each `AUTH` proving who
/// the connection is, until one is refused.
pub(super) fn hello(
    shared: &Shared,
    session: &mut Session,
    hello: &Hello<'_>,
) -> Result<Reply, WrongPass> {
    let resp3 = hello.resp3.unwrap_or(session.resp3);
    let mut name = None;
    let mut user = None;
    for option in &hello.options {
        match option {
            HelloOption::Auth(who, password) => {
                user = Some(login(shared, session, Some(who), password).map_err(WrongPass)?);
            }
            HelloOption::SetName(client) => {
                if let Err(reply) = check_name(client) {
                    return Ok(reply);
                }
                name = Some(client.to_vec());
            }
            HelloOption::Unknown(option) => {
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

/// `CLIENT <subcommand>`, read.
pub(super) enum Client<'a> {
    /// `CLIENT SETNAME name` (empty: none).
    SetName(&'a [u8]),
    /// `CLIENT GETNAME`.
    GetName,
    /// `CLIENT ID`.
    Id,
    /// `CLIENT SETINFO LIB-NAME|LIB-VER value`: taken, and forgotten.
    SetInfo,
}

impl<'a> Client<'a> {
    /// Reads `args` (the command's name first), or the error to answer.
    pub(super) fn parse(args: &[&'a [u8]]) -> Result<Client<'a>, Reply> {
        let Some(sub) = args.get(1) else {
            return Err(arity("client"));
        };
        match (sub.to_ascii_lowercase().as_slice(), &args[2..]) {
            (b"setname", [name]) => check_name(name).map(|()| Client::SetName(name)),
            (b"getname", []) => Ok(Client::GetName),
            (b"id", []) => Ok(Client::Id),
            (b"setinfo", [attribute, _]) => {
                if attribute.eq_ignore_ascii_case(b"lib-name")
                    || attribute.eq_ignore_ascii_case(b"lib-ver")
                {
                    Ok(Client::SetInfo)
                } else {
                    Err(Reply::err(format!(
                        "Unrecognized option '{}'",
                        String::from_utf8_lossy(attribute)
                    )))
                }
            }
            (b"setname" | b"getname" | b"id" | b"setinfo", _) => Err(Reply::err(format!(
                "wrong number of arguments for 'client|{}' command",
                String::from_utf8_lossy(sub).to_ascii_lowercase()
            ))),
            _ => Err(Reply::err(format!(
                "unknown subcommand '{}'. Try CLIENT HELP.",
                String::from_utf8_lossy(sub)
            ))),
        }
    }
}

/// `CLIENT`.
pub(super) fn client(session: &mut Session, client: &Client<'_>) -> Reply {
    match client {
        Client::SetName(name) => {
            session.name = (!name.is_empty()).then(|| name.to_vec());
            Reply::Simple("OK")
        }
        Client::GetName => session.name.clone().map_or(Reply::Null, Reply::Bulk),
        Client::Id => Reply::Integer(session.id as i64),
        Client::SetInfo => Reply::Simple("OK"),
    }
}

/// `RESET`: the connection as it was when it opened, but for its id.
pub(super) fn reset(session: &mut Session) -> Reply {
    session.resp3 = false;
    session.name = None;
    session.user = None;
    Reply::Simple("RESET")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hello_keeps_its_options_in_order_with_one_it_lacks_last() {
        let args: [&[u8]; 8] = [
            b"HELLO", b"3", b"AUTH", b"u", b"p", b"SETNAME", b"n", b"NOPE",
        ];
        let Ok(hello) = Hello::parse(&args) else {
            panic!("HELLO was not read");
        };
        assert_eq!(hello.resp3, Some(true));
        assert!(matches!(
            hello.options[..],
            [
                HelloOption::Auth(b"u", b"p"),
                HelloOption::SetName(b"n"),
                HelloOption::Unknown(b"NOPE")
            ]
        ));
        // An option short of its arguments is one it lacks, answered in its turn.
        let Ok(short) = Hello::parse(&[b"HELLO", b"2", b"AUTH", b"u"]) else {
            panic!("HELLO was not read");
        };
        assert_eq!(short.resp3, Some(false));
        assert!(matches!(short.options[..], [HelloOption::Unknown(b"AUTH")]));
        assert!(Hello::parse(&[b"HELLO", b"4"]).is_err());
    }
}
