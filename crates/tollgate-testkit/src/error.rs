//! Errors. Every failure to provide a server is an error the test reports: a missing binary is
//! never a silent skip, and a server that does not come up says why from the tail of its log.

use std::{io, path::PathBuf, process::ExitStatus, time::Duration};

/// Why the test kit could not provide (or control) a server.
#[derive(Debug, thiserror::Error)]
pub enum TestkitError {
    /// A server binary is not installed where the kit looks for it.
    #[error("`{binary}` not found (searched {searched}); install it with `{install_hint}`")]
    MissingBinary {
        /// The binary looked for, e.g. `redis-server`.
        binary: &'static str,
        /// Where it was looked for.
        searched: String,
        /// The command that installs it on Debian/Ubuntu.
        install_hint: &'static str,
    },
    /// PostgreSQL refuses to run as root and there is no `postgres` user to run it as.
    #[error(
        "running as root, and PostgreSQL refuses to run as root, but /etc/passwd has no `postgres` \
         user to run it as; create one with `useradd --system --no-create-home postgres` \
         (or `apt-get install -y postgresql`, which creates it)"
    )]
    NoPostgresUser,
    /// A process could not be spawned at all.
    #[error("could not spawn {what}: {source}")]
    Spawn {
        /// What was being spawned.
        what: String,
        /// The spawn error.
        #[source]
        source: io::Error,
    },
    /// A server process exited while the kit waited for it to become ready.
    #[error("{what} exited during startup ({status}); last lines of {}:\n{log_tail}", log.display())]
    Exited {
        /// The server, e.g. `redis-server on port 41234`.
        what: String,
        /// How it exited.
        status: ExitStatus,
        /// Its log file.
        log: PathBuf,
        /// The last lines of its log file.
        log_tail: String,
    },
    /// A server did not become ready in time.
    #[error("{what} was not ready after {waited:?}; last lines of {}:\n{log_tail}", log.display())]
    NotReady {
        /// The server, e.g. `redis-server on port 41234`.
        what: String,
        /// How long the kit waited.
        waited: Duration,
        /// Its log file.
        log: PathBuf,
        /// The last lines of its log file.
        log_tail: String,
    },
    /// A helper command (initdb, cp, `redis-cli --cluster create`) failed.
    #[error("`{command}` failed ({status}); last lines of {}:\n{log_tail}", log.display())]
    CommandFailed {
        /// The command line, shortened.
        command: String,
        /// How it exited.
        status: String,
        /// Where its output went.
        log: PathBuf,
        /// The last lines of that output.
        log_tail: String,
    },
    /// The server was named by an environment variable: the kit does not own its process, so it
    /// cannot stop or restart it.
    #[error("{what} is an external server named by {var}; the test kit cannot {action} it")]
    External {
        /// The server, e.g. `Redis`.
        what: &'static str,
        /// The environment variable that named it.
        var: &'static str,
        /// What was asked, e.g. `stop`.
        action: &'static str,
    },
    /// A URL (from the environment or passed in by a test) is not one the kit understands.
    #[error("invalid URL `{url}`: {reason}")]
    InvalidUrl {
        /// The URL as given.
        url: String,
        /// What is wrong with it.
        reason: String,
    },
    /// The caller asked for something the kit cannot build, e.g. a cluster of 2 masters.
    #[error("{0}")]
    InvalidRequest(String),
    /// A Redis server answered something that is not RESP, or closed the connection mid-reply.
    #[error("Redis protocol error: {0}")]
    Protocol(String),
    /// A WebDriver command failed, or `chromedriver` answered what the kit does not understand.
    #[error("WebDriver: {0}")]
    WebDriver(String),
    /// A file-system or socket operation failed.
    #[error("{context}: {source}")]
    Io {
        /// What the kit was doing.
        context: String,
        /// The underlying error.
        #[source]
        source: io::Error,
    },
}

impl TestkitError {
    pub(crate) fn io(context: impl Into<String>, source: io::Error) -> Self {
        Self::Io {
            context: context.into(),
            source,
        }
    }
}
