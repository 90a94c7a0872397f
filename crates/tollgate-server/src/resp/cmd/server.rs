//! What clients ask of the server: `COMMAND`, `INFO`, `CONFIG GET`.

use std::time::Duration;

use tollgate::Clock;

use std::sync::atomic::Ordering;

use super::Shared;
use super::name::{COMMANDS, Name};
use crate::resp::codec::Reply;

/// `COMMAND`, read.
pub(super) enum CommandQuery<'a> {
    /// `COMMAND`: every command, in Redis 7's ten-field form.
    All,
    /// `COMMAND COUNT`.
    Count,
    /// `COMMAND DOCS`: none documented, an empty map, which redis-cli takes as "no hints".
    Docs,
    /// `COMMAND INFO name ...`.
    Info(&'a [&'a [u8]]),
}

impl<'a> CommandQuery<'a> {
    /// Reads `args` (the command's name first), or the error to answer.
    pub(super) fn parse(args: &'a [&'a [u8]]) -> Result<CommandQuery<'a>, Reply> {
        match args.get(1).map(|s| s.to_ascii_lowercase()) {
            None => Ok(CommandQuery::All),
            Some(sub) if sub == b"count" => Ok(CommandQuery::Count),
            Some(sub) if sub == b"docs" => Ok(CommandQuery::Docs),
            Some(sub) if sub == b"info" => Ok(CommandQuery::Info(&args[2..])),
            Some(sub) => Err(Reply::err(format!(
                "unknown subcommand '{}'. Try COMMAND HELP.",
                String::from_utf8_lossy(&sub)
            ))),
        }
    }
}

/// `COMMAND`: what each command is, as Redis 7 describes its own.
pub(super) fn command(query: &CommandQuery<'_>) -> Reply {
    let info = |(_, name, arity, flags): &(Name, &str, i64, &[&str])| {
        let is_key = name.contains("throttle") || *name == "tollgate.check";
        let key = if *name == "tollgate.check" { 2 } else { 1 };
        Reply::Array(vec![
            Reply::text(*name),
            Reply::Integer(*arity),
            Reply::Array(flags.iter().map(|f| Reply::text(*f)).collect()),
            Reply::Integer(if is_key { key } else { 0 }),
            Reply::Integer(if is_key { key } else { 0 }),
            Reply::Integer(i64::from(is_key)),
            Reply::Array(Vec::new()),
            Reply::Array(Vec::new()),
            Reply::Array(Vec::new()),
            Reply::Array(Vec::new()),
        ])
    };
    match query {
        CommandQuery::All => Reply::Array(COMMANDS.iter().map(info).collect()),
        CommandQuery::Count => Reply::Integer(COMMANDS.len() as i64),
        CommandQuery::Docs => Reply::Map(Vec::new()),
        CommandQuery::Info(names) => Reply::Array(
            names
                .iter()
                .map(|name| {
                    let name = String::from_utf8_lossy(name).to_ascii_lowercase();
                    COMMANDS
                        .iter()
                        .find(|c| c.1 == name)
                        .map_or(Reply::Null, info)
                })
                .collect(),
        ),
    }
}

/// `INFO [section ...]`: the sections clients and tools read (`server`, `clients`, `stats`),
/// all of them without a section named (or with `all`, `default`, `everything`), as Redis
/// words them; a section this server does not have is left out, as Redis leaves it.
pub(super) fn info(shared: &Shared, sections: &[&[u8]]) -> Reply {
    let wanted = |name: &str| {
        sections.is_empty()
            || sections.iter().any(|s| {
                s.eq_ignore_ascii_case(name.as_bytes())
                    || [&b"all"[..], b"default", b"everything"]
                        .iter()
                        .any(|all| s.eq_ignore_ascii_case(all))
            })
    };
    let mut text = String::new();
    if wanted("server") {
        let uptime = Duration::from(shared.clock.now() - shared.started).as_secs();
        text.push_str(&format!(
            "# Server\r\nredis_version:7.2.0\r\ntollgate_version:{}\r\nredis_mode:standalone\r\n\
             process_id:{}\r\ntcp_port:{}\r\nuptime_in_seconds:{uptime}\r\n",
            env!("CARGO_PKG_VERSION"),
            std::process::id(),
            shared.port,
        ));
    }
    if wanted("clients") {
        push_section(&mut text, "Clients");
        text.push_str(&format!(
            "connected_clients:{}\r\n",
            shared.connected.load(Ordering::Relaxed)
        ));
    }
    if wanted("stats") {
        push_section(&mut text, "Stats");
        text.push_str(&format!(
            "total_connections_received:{}\r\ntotal_commands_processed:{}\r\n",
            shared.next_id.load(Ordering::Relaxed) - 1,
            shared.commands.load(Ordering::Relaxed),
        ));
    }
    Reply::text(text)
}

/// A section's heading, after a blank line when one comes before it, as Redis separates them.
fn push_section(text: &mut String, name: &str) {
    if !text.is_empty() {
        text.push_str("\r\n");
    }
    text.push_str(&format!("# {name}\r\n"));
}

/// `CONFIG GET parameter ...`, read: redis-benchmark and some clients read the server's
/// persistence settings at start. Other subcommands are refused.
pub(super) struct ConfigGet<'a>(&'a [&'a [u8]]);

impl<'a> ConfigGet<'a> {
    /// Reads `args` (the command's name first), or the error to answer.
    pub(super) fn parse(args: &'a [&'a [u8]]) -> Result<ConfigGet<'a>, Reply> {
        match args.get(1) {
            Some(sub) if sub.eq_ignore_ascii_case(b"get") => Ok(ConfigGet(&args[2..])),
            _ => Err(Reply::err(
                "tollgate answers CONFIG GET only (save, appendonly)",
            )),
        }
    }
}

/// `CONFIG GET`: nothing is saved to disk by this server. Other parameters are not exposed.
pub(super) fn config(get: &ConfigGet<'_>) -> Reply {
    Reply::Map(
        get.0
            .iter()
            .filter_map(|p| match p.to_ascii_lowercase().as_slice() {
                b"save" => Some(("save", "")),
                b"appendonly" => Some(("appendonly", "no")),
                _ => None,
            })
            .map(|(k, v)| (Reply::text(k), Reply::text(v)))
            .collect(),
    )
}
