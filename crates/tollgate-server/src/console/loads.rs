//! The last config loads, good and refused, for the console, newest first, at most
//! [`MAX_LOADS`] kept: the config file at start and at each reload, and Envoy's rules, from
//! their directory (at start and at each reload) or over xDS (each version received).

use std::collections::VecDeque;
use std::sync::Mutex;

/// The most loads kept: older ones are forgotten.
pub const MAX_LOADS: usize = 20;

/// The longest error message kept of a refused load, in bytes; a longer one is cut (at a
/// character boundary) and ends with `…`. With [`MAX_LOADS`], the history holds at most about
/// 80 KiB of messages whatever the files say.
pub const MAX_ERROR_BYTES: usize = 4096;

/// One load of a config.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Load {
    /// When, in milliseconds since the UNIX epoch.
    pub at_ms: u64,
    /// What was read: the config file's path, the Envoy directory's, or `xDS version "V"`.
    pub source: String,
    /// What started it: `start`, `SIGHUP`, `the file changed` (the config file), `the files
    /// changed` (the Envoy directory) or `xDS`.
    pub trigger: &'static str,
    /// Why it was refused (the running config then stayed in force); `None` when it was put in
    /// force.
    pub error: Option<String>,
}

/// The last loads, newest first.
#[derive(Debug, Default)]
pub struct Loads {
    kept: Mutex<VecDeque<Load>>,
}

impl Loads {
    /// Notes a load of `source` at `at_ms`, put in force (`Ok`) or refused with its error.
    pub fn record(
        &self,
        at_ms: u64,
        source: impl Into<String>,
        trigger: &'static str,
        result: Result<(), String>,
    ) {
        let load = Load {
            at_ms,
            source: source.into(),
            trigger,
            error: result.err().map(cut),
        };
        let mut kept = self.kept.lock().unwrap_or_else(|e| e.into_inner());
        kept.push_front(load);
        kept.truncate(MAX_LOADS);
    }

    /// The loads kept, newest first.
    pub fn newest_first(&self) -> Vec<Load> {
        let kept = self.kept.lock().unwrap_or_else(|e| e.into_inner());
        kept.iter().cloned().collect()
    }
}

/// `message`, at most [`MAX_ERROR_BYTES`] long.
fn cut(mut message: String) -> String {
    if message.len() > MAX_ERROR_BYTES {
        let mut end = MAX_ERROR_BYTES - '…'.len_utf8();
        while !message.is_char_boundary(end) {
            end -= 1;
        }
        message.truncate(end);
        message.push('…');
    }
    message
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_the_last_twenty_newest_first() {
        let loads = Loads::default();
        for i in 0..25u64 {
            let result = if i % 2 == 0 {
                Ok(())
            } else {
                Err(format!("line {i}"))
            };
            loads.record(i, "tollgate.toml", "the file changed", result);
        }
        let kept = loads.newest_first();
        assert_eq!(kept.len(), MAX_LOADS);
        assert_eq!(kept[0].at_ms, 24);
        assert_eq!(kept[0].error, None);
        assert_eq!(kept[1].error.as_deref(), Some("line 23"));
        assert_eq!(kept[MAX_LOADS - 1].at_ms, 5);
    }

    #[test]
    fn a_long_error_is_cut_at_a_character_boundary() {
        let loads = Loads::default();
        loads.record(0, "f", "SIGHUP", Err("é".repeat(MAX_ERROR_BYTES)));
        let error = loads.newest_first()[0].error.clone().unwrap();
        assert!(error.len() <= MAX_ERROR_BYTES, "{}", error.len());
        assert!(error.ends_with("é…"), "{error}");
    }
}
