//! The last config loads, good and refused, for the console, newest first, at most
//! [`MAX_LOADS`] kept: the config file at start and at each reload, and Envoy's rules, from
//! their directory (at start and at each reload) or over xDS (each version received).

use std::collections::VecDeque;
use std::sync::Mutex;

/// The most loads kept: older ones are forgotten.
pub(super) const MAX_LOADS: usize = 20;

/// The longest error message, note or source kept of a load, in bytes; a longer one is cut
/// (at a character boundary) and ends with `…`. A load keeps at most [`MAX_NOTES`] notes.
pub(super) const MAX_ERROR_BYTES: usize = 4096;

/// The most notes kept of a load (the settings a reload leaves for a restart are fewer).
pub(super) const MAX_NOTES: usize = 16;

/// One load of a config.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Load {
    /// When, in milliseconds since the UNIX epoch.
    pub(super) at_ms: u64,
    /// What was read: the config file's path, the Envoy directory's, or `xDS version "V"`.
    pub(super) source: String,
    /// What started it: `start`, `SIGHUP`, `the file changed` (the config file), `the files
    /// changed` (the Envoy directory) or `xDS`.
    pub(super) trigger: &'static str,
    /// Why it was refused (the running config then stayed in force); `None` when it was put in
    /// force.
    pub(super) error: Option<String>,
    /// What of a load put in force is not: settings that take effect on restart only, a part
    /// refused while the rest applied.
    pub(super) notes: Vec<String>,
}

/// The last loads, newest first.
#[derive(Debug, Default)]
pub struct Loads {
    kept: Mutex<VecDeque<Load>>,
}

impl Loads {
    /// Notes a load of `source` at `at_ms`, put in force (`Ok`, with what of it is not) or
    /// refused with its error.
    pub fn record(
        &self,
        at_ms: u64,
        source: impl Into<String>,
        trigger: &'static str,
        result: Result<Vec<String>, String>,
    ) {
        let (error, mut notes) = match result {
            Ok(notes) => (None, notes),
            Err(error) => (Some(cut(error)), Vec::new()),
        };
        notes.truncate(MAX_NOTES);
        let load = Load {
            at_ms,
            source: cut(source.into()),
            trigger,
            error,
            notes: notes.into_iter().map(cut).collect(),
        };
        let mut kept = self.kept.lock().unwrap_or_else(|e| e.into_inner());
        kept.push_front(load);
        kept.truncate(MAX_LOADS);
    }

    /// The loads kept, newest first.
    pub(super) fn newest_first(&self) -> Vec<Load> {
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
                Ok(Vec::new())
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

    #[test]
    fn sources_and_notes_are_cut_too() {
        let loads = Loads::default();
        let long = "v".repeat(10 * MAX_ERROR_BYTES);
        let notes = vec![long.clone(); 2 * MAX_NOTES];
        loads.record(0, format!("xDS version {long:?}"), "xDS", Ok(notes));
        let load = &loads.newest_first()[0];
        assert!(
            load.source.len() <= MAX_ERROR_BYTES,
            "{}",
            load.source.len()
        );
        assert_eq!(load.notes.len(), MAX_NOTES);
        assert!(load.notes.iter().all(|n| n.len() <= MAX_ERROR_BYTES));
    }
}
