//! A request's arguments read into a [`Command`], once: its name looked up ([`Name::of`]; an
//! unknown one answered here in Redis's words), its arity checked and its arguments parsed by
//! the command's family. What a command then does is [`super::apply`]'s.

use super::connection::{Client, Hello};
use super::server::{CommandQuery, ConfigGet};
use super::throttle::{Throttlecrab, TollgateCheck};
use crate::resp::codec::Reply;
use crate::resp::redis_cell;

use super::name::{Name, arity};

/// A request, read.
pub(super) enum Command<'a> {
    /// redis-cell's `CL.THROTTLE key max_burst count period [quantity]`.
    ClThrottle(redis_cell::Parsed<'a>),
    /// throttlecrab's `THROTTLE key max_burst count_per_period period [quantity]`.
    Throttle(Throttlecrab<'a>),
    /// `TOLLGATE.CHECK policy key [cost]`.
    TollgateCheck(TollgateCheck<'a>),
    /// `PING [message]`.
    Ping(Option<&'a [u8]>),
    /// `ECHO message`.
    Echo(&'a [u8]),
    /// `QUIT`.
    Quit,
    /// `HELLO [protover [AUTH user password] [SETNAME name]]`.
    Hello(Hello<'a>),
    /// `AUTH [user] password`.
    Auth {
        /// The user; `None`: the one-argument form.
        user: Option<&'a [u8]>,
        /// The password.
        password: &'a [u8],
    },
    /// `CLIENT <subcommand>`.
    Client(Client<'a>),
    /// `SELECT 0` (the only database).
    Select,
    /// `COMMAND [COUNT | DOCS | INFO name ...]`.
    Commands(CommandQuery<'a>),
    /// `INFO [section ...]`.
    Info(&'a [&'a [u8]]),
    /// `RESET`.
    Reset,
    /// `CONFIG GET parameter ...`.
    Config(ConfigGet<'a>),
}

impl<'a> Command<'a> {
    /// Reads `args` (the command's name first, which is `name`), or the error to answer.
    pub(super) fn parse(name: Name, args: &'a [&'a [u8]]) -> Result<Command<'a>, Reply> {
        let wrong_arity = || arity(name.as_str());
        Ok(match name {
            Name::ClThrottle => {
                Command::ClThrottle(redis_cell::Throttle::parse(args).map_err(Reply::Error)?)
            }
            Name::Throttle => Command::Throttle(Throttlecrab::parse(args)?),
            Name::TollgateCheck => Command::TollgateCheck(TollgateCheck::parse(args)?),
            Name::Ping => match args {
                [_] => Command::Ping(None),
                [_, message] => Command::Ping(Some(message)),
                _ => return Err(wrong_arity()),
            },
            Name::Echo => match args {
                [_, message] => Command::Echo(message),
                _ => return Err(wrong_arity()),
            },
            // As Redis 7 reads them, whatever follows.
            Name::Quit => Command::Quit,
            Name::Reset => Command::Reset,
            Name::Hello => Command::Hello(Hello::parse(args)?),
            Name::Auth => match args {
                [_, password] => Command::Auth {
                    user: None,
                    password,
                },
                [_, user, password] => Command::Auth {
                    user: Some(user),
                    password,
                },
                _ => return Err(wrong_arity()),
            },
            Name::Client => Command::Client(Client::parse(args)?),
            Name::Select => match args {
                [_, db] => match std::str::from_utf8(db)
                    .ok()
                    .and_then(|d| d.parse::<i64>().ok())
                {
                    Some(0) => Command::Select,
                    Some(_) => return Err(Reply::err("DB index is out of range")),
                    None => return Err(Reply::err("value is not an integer or out of range")),
                },
                _ => return Err(wrong_arity()),
            },
            Name::Command => Command::Commands(CommandQuery::parse(args)?),
            Name::Info => Command::Info(&args[1..]),
            Name::Config => Command::Config(ConfigGet::parse(args)?),
            Name::Unknown => return Err(unknown(args)),
        })
    }
}

/// Redis 7's words for a command it does not know (`commandCheckExistence`): the name as
/// `'%.128s'`, then each argument as `'%.*s' ` with the precision what is left of 128 bytes,
/// added while the list is under 128 bytes. Both are C strings there, cut at a NUL, and cut by
/// byte, so the reply echoes raw bytes; the encoder turns CR and LF into spaces, as Redis does.
fn unknown(args: &[&[u8]]) -> Reply {
    const BUDGET: usize = 128;
    let c_string = |arg: &[u8], most: usize| -> Vec<u8> {
        let end = arg.iter().position(|&b| b == 0).unwrap_or(arg.len());
        arg[..end.min(most)].to_vec()
    };
    let mut beginning = Vec::new();
    for arg in &args[1..] {
        if beginning.len() >= BUDGET {
            break;
        }
        let most = BUDGET - beginning.len();
        beginning.push(b'\'');
        beginning.extend(c_string(arg, most));
        beginning.extend_from_slice(b"' ");
    }
    let mut line = b"ERR unknown command '".to_vec();
    line.extend(c_string(args[0], BUDGET));
    line.extend_from_slice(b"', with args beginning with: ");
    line.extend(beginning);
    Reply::RawError(line)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The error a request is answered with when read.
    fn refused(args: &[&[u8]]) -> Reply {
        match Command::parse(Name::of(args[0]), args) {
            Err(reply) => reply,
            Ok(_) => panic!("{args:?} was read"),
        }
    }

    #[test]
    fn arity_and_unknown_names_are_answered_when_read() {
        let wrong = |name: &str| {
            Reply::Error(format!(
                "ERR wrong number of arguments for '{name}' command"
            ))
        };
        assert_eq!(refused(&[b"PING", b"a", b"b"]), wrong("ping"));
        assert_eq!(refused(&[b"echo"]), wrong("echo"));
        assert_eq!(refused(&[b"Throttle", b"k", b"1"]), wrong("throttle"));
        assert_eq!(refused(&[b"TOLLGATE.CHECK", b"p"]), wrong("tollgate.check"));
        assert_eq!(refused(&[b"AUTH"]), wrong("auth"));
        assert_eq!(refused(&[b"CLIENT"]), wrong("client"));
        assert_eq!(
            refused(&[b"CL.THROTTLE", b"k", b"1"]),
            Reply::Error(
                "Cell error: Usage: cl.throttle <key> <max_burst> <count per period> <period> \
                 [<quantity>]"
                    .into()
            )
        );
        assert_eq!(
            refused(&[b"NOPE", b"x"]),
            Reply::RawError(b"ERR unknown command 'NOPE', with args beginning with: 'x' ".to_vec())
        );
    }
}
