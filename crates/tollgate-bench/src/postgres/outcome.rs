//! What one call of either approach came to, and the counts a cell keeps of them. A failed call
//! is data here, not a [`BenchError`](crate::BenchError): it is counted, by SQLSTATE when it
//! has one, and the run goes on.

use std::error::Error as _;
use std::time::Duration;

use tokio_postgres::error::SqlState;

use crate::stats::Histogram;

/// One call: allowed or not (or failed), how many of its attempts failed to serialize and
/// were run again first, and how many statements it sent (0 when its store counts them).
#[derive(Debug)]
pub(crate) struct Checked {
    pub(crate) outcome: Result<bool, CallError>,
    pub(crate) retried: u32,
    pub(crate) statements: u32,
}

/// Why a call failed.
#[derive(Debug)]
pub(crate) enum CallError {
    /// The function's call failed in PostgreSQL (or on the way there).
    Db(tokio_postgres::Error),
    /// tollgate's store answered an error.
    Store(tollgate::StoreError),
    /// An answer the benchmark cannot read.
    Reply(String),
}

impl CallError {
    /// The error's SQLSTATE, when PostgreSQL gave one. tollgate's store reports the server's
    /// errors as text ("ERROR: ... (SQLSTATE 40001)"), and hands a batch's error to each of
    /// its waiters as text, so the code is read from the text too; older text without it is
    /// recognised by the messages PostgreSQL sends with the two codes the report counts.
    pub(crate) fn sqlstate(&self) -> Option<SqlState> {
        match self {
            CallError::Db(e) => e.code().cloned(),
            CallError::Store(e) => {
                let mut source = e.source();
                while let Some(s) = source {
                    if let Some(pg) = s.downcast_ref::<tokio_postgres::Error>() {
                        return pg.code().cloned();
                    }
                    source = s.source();
                }
                let text = e.to_string();
                if let Some(code) = text
                    .split_once("(SQLSTATE ")
                    .and_then(|(_, rest)| rest.get(..5))
                {
                    Some(SqlState::from_code(code))
                } else if text.contains("duplicate key value violates unique constraint") {
                    Some(SqlState::UNIQUE_VIOLATION)
                } else if text.contains("could not serialize access") {
                    Some(SqlState::T_R_SERIALIZATION_FAILURE)
                } else {
                    None
                }
            }
            CallError::Reply(_) => None,
        }
    }
}

impl std::fmt::Display for CallError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            // tokio-postgres's Display says only "db error"; the server's message is its source.
            CallError::Db(e) => match e.as_db_error() {
                Some(db) => write!(f, "{} ({})", db.message(), db.code().code()),
                None => write!(f, "{e}"),
            },
            CallError::Store(e) => write!(f, "{e}"),
            CallError::Reply(e) => f.write_str(e),
        }
    }
}

/// The counts of a set of calls (one worker's, then a cell's).
#[derive(Debug, Default)]
pub(crate) struct Tally {
    pub(crate) histogram: Histogram,
    /// Calls answered (allowed or refused).
    pub(crate) decisions: u64,
    pub(crate) allowed: u64,
    /// Calls that ended in an error.
    pub(crate) errors: u64,
    /// Of those, duplicate keys (SQLSTATE 23505).
    pub(crate) duplicate_key: u64,
    /// Of those, serialization failures (40001) that outlived the retries.
    pub(crate) serialization: u64,
    /// Of those, tollgate's calls that ran past the store's timeout.
    pub(crate) timeouts: u64,
    /// Attempts that failed to serialize and were run again (calls that ended well included).
    pub(crate) retried: u64,
    /// Statements sent to PostgreSQL, attempts included.
    pub(crate) statements: u64,
    /// tollgate's store's calls (statements) that gave up on 40001; each fails every check it
    /// decided.
    pub(crate) gave_up: u64,
    pub(crate) first_error: Option<String>,
}

impl Tally {
    /// Counts one call that took `latency`.
    pub(crate) fn record(&mut self, checked: Checked, latency: Duration) {
        self.histogram.record(latency);
        self.retried += u64::from(checked.retried);
        self.statements += u64::from(checked.statements);
        match checked.outcome {
            Ok(allowed) => {
                self.decisions += 1;
                self.allowed += u64::from(allowed);
            }
            Err(e) => {
                self.errors += 1;
                if matches!(e, CallError::Store(tollgate::StoreError::Timeout(_))) {
                    self.timeouts += 1;
                }
                match e.sqlstate() {
                    Some(SqlState::UNIQUE_VIOLATION) => self.duplicate_key += 1,
                    Some(SqlState::T_R_SERIALIZATION_FAILURE) => self.serialization += 1,
                    _ => {}
                }
                if self.first_error.is_none() {
                    self.first_error = Some(e.to_string());
                }
            }
        }
    }

    pub(crate) fn merge(&mut self, other: Tally) {
        self.histogram.merge(&other.histogram);
        self.decisions += other.decisions;
        self.allowed += other.allowed;
        self.errors += other.errors;
        self.duplicate_key += other.duplicate_key;
        self.serialization += other.serialization;
        self.timeouts += other.timeouts;
        self.retried += other.retried;
        self.statements += other.statements;
        self.gave_up += other.gave_up;
        self.first_error = self.first_error.take().or(other.first_error);
    }

    /// ` (first error: ...)` for a progress line, or nothing.
    pub(crate) fn first_error_note(&self) -> String {
        self.first_error
            .as_ref()
            .map(|e| format!(" (first error: {e})"))
            .unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_are_counted_by_sqlstate() {
        let mut tally = Tally::default();
        let ok = |allowed| Checked {
            outcome: Ok(allowed),
            retried: 2,
            statements: 3,
        };
        tally.record(ok(true), Duration::from_micros(5));
        tally.record(ok(false), Duration::from_micros(7));
        let dup = tollgate::StoreError::Unavailable(
            "db error: ERROR: duplicate key value violates unique constraint \"x_pkey\"".into(),
        );
        let conflict = tollgate::StoreError::Unavailable(
            "ERROR: could not serialize access due to concurrent update (SQLSTATE 40001)".into(),
        );
        assert_eq!(
            CallError::Store(conflict).sqlstate(),
            Some(SqlState::T_R_SERIALIZATION_FAILURE)
        );
        tally.record(
            Checked {
                outcome: Err(CallError::Store(dup)),
                retried: 0,
                statements: 0,
            },
            Duration::from_micros(9),
        );
        tally.record(
            Checked {
                outcome: Err(CallError::Reply("?".into())),
                retried: 9,
                statements: 10,
            },
            Duration::from_micros(9),
        );
        let late = tollgate::StoreError::Timeout(Duration::from_millis(100));
        tally.record(
            Checked {
                outcome: Err(CallError::Store(late)),
                retried: 0,
                statements: 0,
            },
            Duration::from_millis(100),
        );
        assert_eq!(
            (tally.decisions, tally.allowed, tally.errors, tally.retried),
            (2, 1, 3, 13)
        );
        assert_eq!(
            (tally.duplicate_key, tally.serialization, tally.timeouts),
            (1, 0, 1)
        );
        assert_eq!(tally.histogram.count(), 5);
        assert_eq!(tally.statements, 16);
        assert!(tally.first_error_note().contains("duplicate key"));
    }
}
