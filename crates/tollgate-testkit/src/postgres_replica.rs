//! A PostgreSQL primary with a hot standby streaming from it, for tests and benchmarks of a
//! failover: the primary killed, the standby promoted, clients that list both hosts following.
//!
//! The primary is a throwaway server as [`TestPostgres`](crate::TestPostgres) starts one (its
//! template's `pg_hba.conf` trusts replication from 127.0.0.1, and `wal_level`,
//! `max_wal_senders` and `hot_standby` are at their defaults: `replica`, 10, on); the standby is
//! `pg_basebackup -R` of it, on another free port. Synchronous replication is set on the
//! primary's command line only, so the standby, once promoted, does not wait for a standby of
//! its own that does not exist.

use std::os::unix::process::CommandExt;
use std::process::Command;
use std::time::Duration;

use crate::TestkitError;
use crate::postgres::{Durability, OwnedPostgres, Seed};
use crate::process::{self, Deadline};

/// How long a promotion may take before it is an error.
const PROMOTE_TIMEOUT: Duration = Duration::from_secs(30);

/// Whether a commit on the primary waits for the standby.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Replication {
    /// The standby follows as fast as it can: a commit returns before the standby has it, so
    /// the last commits before the primary dies are lost with it (the primary runs with
    /// `synchronous_commit=off`, as the kit's servers do).
    Asynchronous,
    /// `synchronous_standby_names='*'` and `synchronous_commit=on` on the primary: a commit
    /// returns once the standby has flushed it, so a promotion loses no commit that was
    /// answered. Sessions that set `synchronous_commit=off` themselves (the PostgreSQL store
    /// unless built with `synchronous_commit(true)`) still commit asynchronously.
    Synchronous,
}

/// A primary and a hot standby streaming from it, both on free 127.0.0.1 ports with `trust`
/// authentication (user `postgres`, database `postgres`), with `fsync` off (the kit's servers
/// trade durability on disk for speed; a killed process loses nothing the kernel holds).
/// Dropping the handle stops both and removes their directories.
#[derive(Debug)]
pub struct TestPostgresReplica {
    primary: OwnedPostgres,
    standby: OwnedPostgres,
    replication: Replication,
    promoted: bool,
}

impl TestPostgresReplica {
    /// Starts the primary, takes a base backup of it, starts the standby on it and waits
    /// until the standby accepts read-only connections.
    pub fn start(replication: Replication) -> Result<Self, TestkitError> {
        let primary_settings = match replication {
            Replication::Asynchronous => Vec::new(),
            Replication::Synchronous => vec![
                "synchronous_standby_names=*".to_owned(),
                "synchronous_commit=on".to_owned(),
            ],
        };
        let primary = OwnedPostgres::start_from(
            process::free_port,
            Durability::Fast,
            false,
            Seed::Template,
            primary_settings,
        )?;
        let standby = OwnedPostgres::start_from(
            process::free_port,
            Durability::Fast,
            false,
            Seed::BaseBackup(primary.port),
            Vec::new(),
        )?;
        Ok(Self {
            primary,
            standby,
            replication,
            promoted: false,
        })
    }

    /// How commits reach the standby.
    pub fn replication(&self) -> Replication {
        self.replication
    }

    /// Both servers, the primary first, as clients that follow a failover list them:
    /// `postgres://postgres@127.0.0.1:P1,127.0.0.1:P2/postgres?target_session_attrs=read-write`.
    /// A client tries the hosts in turn and keeps the first that accepts writes.
    pub fn url(&self) -> String {
        format!(
            "postgres://postgres@127.0.0.1:{},127.0.0.1:{}/postgres?target_session_attrs=read-write",
            self.primary.port, self.standby.port
        )
    }

    /// The primary alone: `postgres://postgres@127.0.0.1:P1/postgres`.
    pub fn primary_url(&self) -> &str {
        &self.primary.url
    }

    /// The standby alone (read-only until promoted).
    pub fn standby_url(&self) -> &str {
        &self.standby.url
    }

    /// The primary's port.
    pub fn primary_port(&self) -> u16 {
        self.primary.port
    }

    /// The standby's port.
    pub fn standby_port(&self) -> u16 {
        self.standby.port
    }

    /// Kills the primary as a crash would (SIGQUIT: an immediate shutdown, every backend gone
    /// at once with no checkpoint; SIGKILL if it lingers) and waits for it to exit. Its
    /// clients' connections close; the standby, which lost its upstream, stays read-only
    /// until [`promote`](Self::promote). Killing a killed primary does nothing.
    pub fn kill_primary(&mut self) -> Result<(), TestkitError> {
        self.primary.stop()
    }

    /// Whether the primary still runs.
    pub fn primary_runs(&self) -> bool {
        self.primary.process.is_some()
    }

    /// Promotes the standby (`pg_ctl promote -w`) and waits until it accepts writes (its lock
    /// file says "ready"). Promoting it twice does nothing.
    pub fn promote(&mut self) -> Result<(), TestkitError> {
        if self.promoted {
            return Ok(());
        }
        let standby = &self.standby;
        let mut pg_ctl = Command::new(standby.bin.dir.join("pg_ctl"));
        pg_ctl
            .arg("promote")
            .arg("-D")
            .arg(&standby.data)
            .args(["-w", "-t", &PROMOTE_TIMEOUT.as_secs().to_string()])
            .current_dir(standby.dir.path());
        if let Some(user) = standby.run_as {
            pg_ctl.uid(user.uid).gid(user.gid);
        }
        let what = format!("pg_ctl promote ({})", standby.what());
        let log = standby.dir.path().join("setup.log");
        process::run(
            pg_ctl,
            &what,
            &log,
            PROMOTE_TIMEOUT + Duration::from_secs(5),
        )?;
        // pg_ctl returns once the control file says "in production", a moment before the
        // server takes writes: ask it until it has left recovery.
        let mut deadline = Deadline::after(PROMOTE_TIMEOUT);
        while self.in_recovery(&self.standby) != Some(false) {
            if deadline.expired() {
                return Err(TestkitError::NotReady {
                    what: format!("{} promoted", standby.what()),
                    waited: deadline.elapsed(),
                    log: standby.log.clone(),
                    log_tail: process::log_tail(&standby.log, 0),
                });
            }
            deadline.pause();
        }
        self.promoted = true;
        Ok(())
    }

    /// `pg_is_in_recovery()` on `server`, through its own `psql`; `None` when it does not
    /// answer.
    fn in_recovery(&self, server: &OwnedPostgres) -> Option<bool> {
        let out = Command::new(server.bin.dir.join("psql"))
            .args(["-h", "127.0.0.1", "-p", &server.port.to_string()])
            .args(["-U", "postgres", "-d", "postgres", "-XAtc"])
            .arg("SELECT pg_is_in_recovery()")
            .output()
            .ok()?;
        match String::from_utf8_lossy(&out.stdout).trim() {
            "t" => Some(true),
            "f" => Some(false),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_standby_streams_and_is_promoted() {
        let mut pair = TestPostgresReplica::start(Replication::Asynchronous).unwrap();
        let standby_signal = pair.standby.data.join("standby.signal");
        assert!(standby_signal.is_file());
        assert_eq!(pair.in_recovery(&pair.standby), Some(true));
        assert_eq!(pair.in_recovery(&pair.primary), Some(false));
        assert!(pair.url().contains(&format!(
            "127.0.0.1:{},127.0.0.1:{}/postgres?target_session_attrs=read-write",
            pair.primary_port(),
            pair.standby_port()
        )));
        pair.kill_primary().unwrap();
        assert!(!pair.primary_runs());
        assert_eq!(pair.in_recovery(&pair.primary), None, "killed");
        pair.promote().unwrap();
        assert!(!standby_signal.exists(), "promotion removes standby.signal");
        assert_eq!(pair.in_recovery(&pair.standby), Some(false));
        pair.promote().unwrap();
    }
}
