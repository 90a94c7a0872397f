//! The commands this server knows, by name: the one table of names, arities and flags (which
//! `COMMAND` lists), and Redis's words for a wrong number of arguments.

use crate::resp::codec::Reply;

/// A command this server knows, by name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Name {
    /// `CL.THROTTLE`.
    ClThrottle,
    /// `THROTTLE`.
    Throttle,
    /// `TOLLGATE.CHECK`.
    TollgateCheck,
    /// `PING`.
    Ping,
    /// `ECHO`.
    Echo,
    /// `QUIT`.
    Quit,
    /// `HELLO`.
    Hello,
    /// `AUTH`.
    Auth,
    /// `CLIENT`.
    Client,
    /// `SELECT`.
    Select,
    /// `COMMAND`.
    Command,
    /// `INFO`.
    Info,
    /// `RESET`.
    Reset,
    /// `CONFIG`.
    Config,
    /// None of them.
    Unknown,
}

/// Each command's name, arity (negative: at least) and flags, as `COMMAND` lists them.
pub(super) const COMMANDS: [(Name, &str, i64, &[&str]); 14] = [
    (Name::ClThrottle, "cl.throttle", -5, &["write", "fast"]),
    (Name::Throttle, "throttle", -5, &["write", "fast"]),
    (
        Name::TollgateCheck,
        "tollgate.check",
        -3,
        &["write", "fast"],
    ),
    (Name::Ping, "ping", -1, &["fast"]),
    (Name::Echo, "echo", 2, &["fast"]),
    (Name::Quit, "quit", -1, &["fast"]),
    (Name::Hello, "hello", -1, &["noauth", "fast"]),
    (Name::Auth, "auth", -2, &["noauth", "fast"]),
    (Name::Client, "client", -2, &[]),
    (Name::Select, "select", 2, &["fast"]),
    (Name::Command, "command", -1, &[]),
    (Name::Info, "info", -1, &[]),
    (Name::Reset, "reset", 1, &["noauth", "fast"]),
    (Name::Config, "config", -2, &[]),
];

impl Name {
    /// The command `name` names, in any case.
    pub(super) fn of(name: &[u8]) -> Name {
        COMMANDS
            .iter()
            .find(|(_, known, ..)| name.eq_ignore_ascii_case(known.as_bytes()))
            .map_or(Name::Unknown, |(name, ..)| *name)
    }

    /// Its name in lower case, as Redis's replies name a command.
    pub(super) fn as_str(self) -> &'static str {
        COMMANDS
            .iter()
            .find(|(name, ..)| *name == self)
            .map_or("", |(_, text, ..)| text)
    }
}

/// Redis's words for a command given too few or too many arguments.
pub(super) fn arity(name: &str) -> Reply {
    Reply::err(format!("wrong number of arguments for '{name}' command"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_command_is_found_by_its_name_in_any_case() {
        for (name, text, ..) in COMMANDS {
            assert_eq!(Name::of(text.to_ascii_uppercase().as_bytes()), name);
            assert_eq!(Name::of(text.as_bytes()), name);
            assert_eq!(name.as_str(), text);
        }
        assert_eq!(Name::of(b"cl.throttled"), Name::Unknown);
        assert_eq!(Name::of(b""), Name::Unknown);
    }
}
