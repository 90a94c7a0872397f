//! Redis calls counted by Redis itself: `INFO commandstats` before and after a cell.
//!
//! Redis counts every command it executes, *including the commands a Lua script runs*
//! (`redis.call('HMGET', ...)` inside an `EVALSHA` shows up as one `evalsha` and one `hmget`).
//! So a delta gives two figures:
//!
//! - [`CommandDelta::commands`]: everything Redis executed, script bodies included: the work
//!   Redis does;
//! - [`CommandDelta::client_calls`]: the commands clients sent: the round trips. When scripts ran
//!   in the window, only script invocations and commands a script cannot run count, since the
//!   approaches that use scripts send nothing else; without scripts, every command counts.
//!
//! The `INFO` calls that take the snapshots are left out of both. Redis also counts the time
//! each command took to execute (`usec`, parsing and replying excluded):
//! [`CommandDelta::client_usec`] is that of the commands clients sent, script bodies
//! included, which is Redis's time per decision.

use std::collections::BTreeMap;

use redis::aio::ConnectionLike;

use crate::BenchError;

/// Commands that run a script: what a scripted approach sends.
const SCRIPT_COMMANDS: &[&str] = &[
    "eval",
    "evalsha",
    "eval_ro",
    "evalsha_ro",
    "fcall",
    "fcall_ro",
];

/// Commands no script can run, so they were always sent by a client.
const CLIENT_ONLY: &[&str] = &[
    "multi", "exec", "watch", "unwatch", "discard", "hello", "auth", "wait",
];

/// Commands a snapshot or connection set-up issues, not part of any decision.
const IGNORED: &[&str] = &["info"];

/// Calls and microseconds of one command.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Count {
    calls: u64,
    usec: u64,
}

/// Calls and time per command, from one `INFO commandstats`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CommandStats {
    calls: BTreeMap<String, Count>,
}

impl CommandStats {
    /// Parses the text of `INFO commandstats` (lines `cmdstat_<name>:calls=N,usec=...`).
    /// Subcommands keep their `|` name (`client|setinfo`, `script|load`).
    pub fn parse(text: &str) -> Result<CommandStats, BenchError> {
        let mut calls = BTreeMap::new();
        for line in text.lines().map(str::trim) {
            let Some(rest) = line.strip_prefix("cmdstat_") else {
                continue; // the `# Commandstats` header, blank lines
            };
            let (name, fields) = rest.split_once(':').ok_or_else(|| {
                BenchError::Reply(format!("commandstats line without ':': {line}"))
            })?;
            let field = |field: &str| -> Result<u64, BenchError> {
                fields
                    .split(',')
                    .find_map(|f| f.strip_prefix(field)?.strip_prefix('='))
                    .ok_or_else(|| {
                        BenchError::Reply(format!("commandstats line without {field}: {line}"))
                    })?
                    .parse::<u64>()
                    .map_err(|e| BenchError::Reply(format!("commandstats {field} in {line}: {e}")))
            };
            let count = Count {
                calls: field("calls")?,
                usec: field("usec")?,
            };
            calls.insert(name.to_ascii_lowercase(), count);
        }
        Ok(CommandStats { calls })
    }

    /// Reads the current counts from Redis.
    pub async fn fetch(conn: &mut impl ConnectionLike) -> Result<CommandStats, BenchError> {
        let text: String = redis::cmd("INFO")
            .arg("commandstats")
            .query_async(conn)
            .await?;
        CommandStats::parse(&text)
    }

    /// The calls made between `before` and `self`. A command whose count went down (someone
    /// ran `CONFIG RESETSTAT`) is an error: the figures would be meaningless.
    pub fn since(&self, before: &CommandStats) -> Result<CommandDelta, BenchError> {
        let mut calls = BTreeMap::new();
        for (name, &after) in &self.calls {
            let earlier = before.calls.get(name).copied().unwrap_or_default();
            let went_back = || {
                BenchError::Reply(format!(
                    "commandstats went back for {name} ({} -> {} calls): stats were reset",
                    earlier.calls, after.calls
                ))
            };
            let n = Count {
                calls: after
                    .calls
                    .checked_sub(earlier.calls)
                    .ok_or_else(went_back)?,
                usec: after.usec.checked_sub(earlier.usec).ok_or_else(went_back)?,
            };
            if n.calls > 0 && !IGNORED.contains(&name.as_str()) {
                calls.insert(name.clone(), n);
            }
        }
        Ok(CommandDelta { calls })
    }
}

/// Calls and time per command between two snapshots, without the snapshots' own `INFO`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CommandDelta {
    calls: BTreeMap<String, Count>,
}

impl CommandDelta {
    /// Calls of one command (lowercase, e.g. `evalsha`).
    pub fn get(&self, name: &str) -> u64 {
        self.calls.get(name).map_or(0, |c| c.calls)
    }

    /// Every command Redis executed, including those run inside scripts.
    pub fn commands(&self) -> u64 {
        self.calls.values().map(|c| c.calls).sum()
    }

    /// The commands clients sent (see the module docs for how script bodies are told apart).
    pub fn client_calls(&self) -> u64 {
        self.sent().map(|c| c.calls).sum()
    }

    /// The microseconds Redis spent executing the commands clients sent: a script's time
    /// includes the commands it ran, which are not counted again.
    pub fn client_usec(&self) -> u64 {
        self.sent().map(|c| c.usec).sum()
    }

    fn sent(&self) -> impl Iterator<Item = &Count> {
        let scripts = SCRIPT_COMMANDS.iter().any(|c| self.get(c) > 0);
        self.calls
            .iter()
            .filter(move |(name, _)| {
                !scripts
                    || SCRIPT_COMMANDS.contains(&name.as_str())
                    || CLIENT_ONLY.contains(&name.as_str())
                    || name.starts_with("script|")
                    || name.starts_with("client|")
            })
            .map(|(_, count)| count)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const BEFORE: &str = "# Commandstats\r\n\
        cmdstat_evalsha:calls=10,usec=100,usec_per_call=10.00,rejected_calls=0,failed_calls=0\r\n\
        cmdstat_hmget:calls=10,usec=20,usec_per_call=2.00,rejected_calls=0,failed_calls=0\r\n\
        cmdstat_info:calls=3,usec=30,usec_per_call=10.00,rejected_calls=0,failed_calls=0\r\n\
        \r\n";

    const AFTER: &str = "# Commandstats\r\n\
        cmdstat_evalsha:calls=110,usec=1100,usec_per_call=10.00,rejected_calls=0,failed_calls=0\r\n\
        cmdstat_hmget:calls=110,usec=20,usec_per_call=2.00,rejected_calls=0,failed_calls=0\r\n\
        cmdstat_hmset:calls=100,usec=20,usec_per_call=2.00,rejected_calls=0,failed_calls=0\r\n\
        cmdstat_pexpire:calls=100,usec=20,usec_per_call=2.00,rejected_calls=0,failed_calls=0\r\n\
        cmdstat_script|load:calls=1,usec=20,usec_per_call=2.00,rejected_calls=0,failed_calls=0\r\n\
        cmdstat_info:calls=4,usec=30,usec_per_call=10.00,rejected_calls=0,failed_calls=0\r\n";

    #[test]
    fn parses_calls_per_command_including_subcommands() {
        let stats = CommandStats::parse(AFTER).unwrap();
        let delta = stats.since(&CommandStats::default()).unwrap();
        assert_eq!(delta.get("evalsha"), 110);
        assert_eq!(delta.get("script|load"), 1);
        assert_eq!(delta.get("info"), 0, "INFO is never counted");
        assert_eq!(delta.get("missing"), 0);
    }

    #[test]
    fn script_bodies_count_as_commands_but_not_as_client_calls() {
        let before = CommandStats::parse(BEFORE).unwrap();
        let after = CommandStats::parse(AFTER).unwrap();
        let delta = after.since(&before).unwrap();
        assert_eq!(delta.commands(), 100 + 100 + 100 + 100 + 1);
        assert_eq!(
            delta.client_calls(),
            100 + 1,
            "evalsha and script load only"
        );
        assert_eq!(
            delta.client_usec(),
            1000 + 20,
            "the scripts' time holds their bodies'"
        );
    }

    #[test]
    fn without_scripts_every_command_is_a_client_call() {
        let text = "cmdstat_watch:calls=5,usec=1\ncmdstat_hmget:calls=5,usec=1\n\
                    cmdstat_multi:calls=5,usec=1\ncmdstat_exec:calls=5,usec=1\n\
                    cmdstat_pexpire:calls=4,usec=1\ncmdstat_info:calls=9,usec=1\n";
        let delta = CommandStats::parse(text)
            .unwrap()
            .since(&CommandStats::default())
            .unwrap();
        assert_eq!(delta.client_calls(), 24);
        assert_eq!(delta.commands(), 24);
        assert_eq!(delta.client_usec(), 5, "every command's own time");
    }

    #[test]
    fn malformed_lines_and_resets_are_errors() {
        assert!(CommandStats::parse("cmdstat_get\n").is_err());
        assert!(CommandStats::parse("cmdstat_get:usec=5\n").is_err());
        assert!(CommandStats::parse("cmdstat_get:calls=5\n").is_err());
        assert!(CommandStats::parse("cmdstat_get:calls=x,usec=5\n").is_err());
        let before = CommandStats::parse(AFTER).unwrap();
        let after = CommandStats::parse(BEFORE).unwrap();
        assert!(after.since(&before).is_err());
    }
}
