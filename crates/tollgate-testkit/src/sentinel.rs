//! A throwaway Redis Sentinel topology: a primary, its replicas and the sentinels watching
//! them, each a `redis-server` on a free loopback port, tuned to fail over within a few seconds
//! (`down-after-milliseconds` 1000), for tests and benchmarks of failover.

use std::{fmt::Write as _, path::Path, time::Duration};

use tempfile::TempDir;

use crate::{
    Reply, TestkitError,
    process::{self, Deadline},
    redis::RedisServer,
    resp, scratch,
    url::Url,
};

/// The name the sentinels monitor the primary under.
const MASTER_NAME: &str = "tollgate";
/// How long a node may be silent before a sentinel thinks it down.
const DOWN_AFTER_MS: u32 = 1000;
/// Sentinel's `failover-timeout`: how long a failover may take before another is tried.
const FAILOVER_TIMEOUT_MS: u32 = 3000;
/// How long the topology gets to form: replicas in sync, sentinels knowing each other.
const READY_TIMEOUT: Duration = Duration::from_secs(30);
/// How long a node gets to answer the kit.
const SHORT: Duration = Duration::from_secs(1);

/// A primary with replicas behind Redis Sentinel, every process started by the kit (a test
/// that kills the primary needs its own topology, so no environment variable names one).
///
/// [`start`](Self::start) returns once every replica is in sync and every sentinel knows the
/// primary, each replica and the other sentinels: from then on, a primary that dies or stops
/// answering is replaced by a replica within a few seconds (`down-after-milliseconds` 1000,
/// then the sentinels' vote; a quorum of a majority of the sentinels). Dropping the handle
/// kills every process and removes their directory.
///
/// ```no_run
/// use std::time::Duration;
/// use tollgate_testkit::SentinelSet;
///
/// let mut set = SentinelSet::start(1, 3)?;
/// println!("{}", set.url()); // redis+sentinel://127.0.0.1:P1,127.0.0.1:P2,127.0.0.1:P3/tollgate
/// let old = set.primary_port();
/// set.kill_primary()?;
/// let new = set.wait_for_new_primary(Duration::from_secs(30))?;
/// assert_ne!(old, new);
/// # Ok::<(), tollgate_testkit::TestkitError>(())
/// ```
#[derive(Debug)]
pub struct SentinelSet {
    // `nodes` and `sentinels` are declared before `dir`: the processes die before their
    // directory is removed.
    /// The first primary first, then the replicas.
    nodes: Vec<RedisServer>,
    sentinels: Vec<RedisServer>,
    /// The index in `nodes` of the node the kit last saw promoted.
    primary: usize,
    password: Option<String>,
    dir: TempDir,
}

impl SentinelSet {
    /// Starts a primary, `replicas` replicas (at least 1: a failover needs one to promote) and
    /// `sentinels` sentinels (at least 1; 3 as deployed, with a quorum of 2).
    pub fn start(replicas: usize, sentinels: usize) -> Result<Self, TestkitError> {
        Self::start_with(replicas, sentinels, None)
    }

    /// [`start`](Self::start), the sentinels asking their clients for `password`
    /// (`requirepass`; they give it to each other with `sentinel sentinel-pass`). The Redis
    /// nodes ask for none.
    pub fn start_with_sentinel_password(
        replicas: usize,
        sentinels: usize,
        password: &str,
    ) -> Result<Self, TestkitError> {
        Self::start_with(replicas, sentinels, Some(password.to_owned()))
    }

    fn start_with(
        replicas: usize,
        sentinels: usize,
        password: Option<String>,
    ) -> Result<Self, TestkitError> {
        if replicas == 0 || sentinels == 0 {
            return Err(TestkitError::InvalidRequest(format!(
                "a Sentinel topology needs a replica and a sentinel at least, not {replicas} \
                 replicas and {sentinels} sentinels"
            )));
        }
        if password.as_deref().is_some_and(|p| {
            p.is_empty() || !p.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
        }) {
            return Err(TestkitError::InvalidRequest(
                "a sentinel password for the kit is letters, digits and dashes".into(),
            ));
        }
        let dir = scratch::tempdir(&std::env::temp_dir(), "tollgate-redis-sentinel-")?;
        let mut nodes = Vec::with_capacity(1 + replicas);
        for i in 0..=replicas {
            let node_dir = subdir(dir.path(), &format!("node-{i}"))?;
            // A replica syncs at once rather than 5 s later: one that never synced cannot be
            // promoted.
            let mut args = vec!["--repl-diskless-sync-delay".to_owned(), "0".to_owned()];
            if let Some(primary) = nodes.first().map(RedisServer::port) {
                args.extend([
                    "--replicaof".into(),
                    "127.0.0.1".into(),
                    primary.to_string(),
                ]);
            }
            nodes.push(RedisServer::start(node_dir, args, process::free_port)?);
        }
        let primary_port = nodes[0].port();
        let quorum = sentinels / 2 + 1;
        let mut watchers = Vec::with_capacity(sentinels);
        for i in 0..sentinels {
            let sentinel_dir = subdir(dir.path(), &format!("sentinel-{i}"))?;
            let config = sentinel_dir.join("sentinel.conf");
            let mut text = String::new();
            let _ = writeln!(
                text,
                "sentinel monitor {MASTER_NAME} 127.0.0.1 {primary_port} {quorum}"
            );
            let _ = writeln!(
                text,
                "sentinel down-after-milliseconds {MASTER_NAME} {DOWN_AFTER_MS}"
            );
            let _ = writeln!(
                text,
                "sentinel failover-timeout {MASTER_NAME} {FAILOVER_TIMEOUT_MS}"
            );
            let _ = writeln!(text, "sentinel parallel-syncs {MASTER_NAME} 1");
            if let Some(password) = &password {
                let _ = writeln!(text, "requirepass {password}");
                let _ = writeln!(text, "sentinel sentinel-pass {password}");
            }
            std::fs::write(&config, text)
                .map_err(|e| TestkitError::io(format!("writing {}", config.display()), e))?;
            watchers.push(RedisServer::start_sentinel(
                sentinel_dir,
                config,
                password.clone(),
                process::free_port,
            )?);
        }
        let set = Self {
            nodes,
            sentinels: watchers,
            primary: 0,
            password,
            dir,
        };
        set.wait_formed()?;
        Ok(set)
    }

    /// `redis+sentinel://127.0.0.1:P1,127.0.0.1:P2,.../tollgate`, with
    /// `?sentinel_password=...` when the sentinels ask for one.
    pub fn url(&self) -> String {
        let hosts: Vec<String> = self
            .sentinels
            .iter()
            .map(|s| format!("127.0.0.1:{}", s.port()))
            .collect();
        let mut url = format!("redis+sentinel://{}/{MASTER_NAME}", hosts.join(","));
        if let Some(password) = &self.password {
            let _ = write!(url, "?sentinel_password={password}");
        }
        url
    }

    /// The name the sentinels know the primary by.
    pub fn master_name(&self) -> &str {
        MASTER_NAME
    }

    /// The port of the primary: the first node until
    /// [`wait_for_new_primary`](Self::wait_for_new_primary) sees another promoted.
    pub fn primary_port(&self) -> u16 {
        self.nodes[self.primary].port()
    }

    /// `redis://127.0.0.1:PORT` of the primary (as [`primary_port`](Self::primary_port)).
    pub fn primary_url(&self) -> String {
        self.nodes[self.primary].url()
    }

    /// The ports of every Redis node, the first started as primary first.
    pub fn node_ports(&self) -> Vec<u16> {
        self.nodes.iter().map(RedisServer::port).collect()
    }

    /// The ports of the sentinels.
    pub fn sentinel_ports(&self) -> Vec<u16> {
        self.sentinels.iter().map(RedisServer::port).collect()
    }

    /// The directory holding every process's files and `redis.log`.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// Kills the primary with SIGKILL, as in a crash: what it had not yet sent its replicas is
    /// lost.
    pub fn kill_primary(&mut self) -> Result<(), TestkitError> {
        self.nodes[self.primary].stop()
    }

    /// Stops the primary with SIGSTOP: its connections stay open and nothing answers, as a
    /// machine that froze. Past `down-after-milliseconds` the sentinels promote a replica.
    pub fn pause_primary(&mut self) -> Result<(), TestkitError> {
        self.nodes[self.primary].signal(libc::SIGSTOP)
    }

    /// Resumes every paused node with SIGCONT: an old primary wakes up still believing it is
    /// the primary until the sentinels turn it into a replica of the new one (it then drops
    /// its data for the new primary's).
    pub fn resume_old_primary(&mut self) -> Result<(), TestkitError> {
        for node in &mut self.nodes {
            node.signal(libc::SIGCONT)?;
        }
        Ok(())
    }

    /// Waits until a majority of the sentinels name a primary other than
    /// [`primary_port`](Self::primary_port) and that node says it is a master (`ROLE`);
    /// returns its port, which [`primary_port`](Self::primary_port) then answers.
    pub fn wait_for_new_primary(&mut self, timeout: Duration) -> Result<u16, TestkitError> {
        let old = self.primary_port();
        let mut deadline = Deadline::after(timeout);
        loop {
            let named: Vec<u16> = self.sentinels.iter().filter_map(master_addr).collect();
            let majority = self.sentinels.len() / 2 + 1;
            for &port in &named {
                if port == old || named.iter().filter(|&&p| p == port).count() < majority {
                    continue;
                }
                if let Some(index) = self.nodes.iter().position(|n| n.port() == port)
                    && role(&self.nodes[index]).as_deref() == Some("master")
                {
                    self.primary = index;
                    return Ok(port);
                }
            }
            if deadline.expired() {
                return Err(TestkitError::NotReady {
                    what: format!(
                        "a new primary in place of 127.0.0.1:{old} (the sentinels name {named:?})"
                    ),
                    waited: deadline.elapsed(),
                    log: self.sentinel_log(),
                    log_tail: process::log_tail(&self.sentinel_log(), 0),
                });
            }
            deadline.pause();
        }
    }

    /// Whether the primary has every other live node as a replica, online and holding all it
    /// wrote (`INFO replication`: each replica's offset equals the primary's).
    pub fn replica_in_sync(&self) -> Result<bool, TestkitError> {
        let url = Url::parse(&self.nodes[self.primary].url())?;
        let info = resp::command(&url, &[b"INFO", b"replication"], SHORT)?;
        let text = info.as_str().unwrap_or_default();
        let field = |name: &str| {
            text.lines()
                .find_map(|l| l.strip_prefix(name))
                .map(str::trim)
                .map(str::to_owned)
        };
        let Some(offset) = field("master_repl_offset:") else {
            return Ok(false);
        };
        let live = self
            .nodes
            .iter()
            .enumerate()
            .filter(|(i, n)| *i != self.primary && n.pid().is_some())
            .count();
        let replicas: Vec<String> = (0..live)
            .filter_map(|i| field(&format!("slave{i}:")))
            .collect();
        Ok(replicas.len() == live
            && replicas.iter().all(|r| {
                r.split(',').any(|kv| kv == "state=online")
                    && r.split(',').any(|kv| kv == format!("offset={offset}"))
            }))
    }

    /// Waits until [`replica_in_sync`](Self::replica_in_sync).
    pub fn wait_replica_in_sync(&self, timeout: Duration) -> Result<(), TestkitError> {
        let mut deadline = Deadline::after(timeout);
        while !self.replica_in_sync().unwrap_or(false) {
            if deadline.expired() {
                let log = self.dir.path().join("node-0").join("redis.log");
                return Err(TestkitError::NotReady {
                    what: "the replicas in sync with the primary".into(),
                    waited: deadline.elapsed(),
                    log_tail: process::log_tail(&log, 0),
                    log,
                });
            }
            deadline.pause();
        }
        Ok(())
    }

    /// Sends one command to the primary ([`primary_url`](Self::primary_url)).
    pub fn cmd_primary(&self, args: &[&[u8]]) -> Result<Reply, TestkitError> {
        crate::redis_cmd(&self.primary_url(), args)
    }

    /// Sends one command to a sentinel (`index` in [`sentinel_ports`](Self::sentinel_ports)).
    pub fn cmd_sentinel(&self, index: usize, args: &[&[u8]]) -> Result<Reply, TestkitError> {
        let sentinel = self
            .sentinels
            .get(index)
            .ok_or_else(|| TestkitError::InvalidRequest(format!("no sentinel number {index}")))?;
        crate::redis_cmd(&sentinel.url(), args)
    }

    fn sentinel_log(&self) -> std::path::PathBuf {
        self.dir.path().join("sentinel-0").join("redis.log")
    }

    /// Waits until the replicas are in sync and each sentinel knows the primary, its replicas
    /// and the other sentinels (they find each other through the primary, every 2 s): a
    /// sentinel that knows no other cannot win the vote a failover needs.
    fn wait_formed(&self) -> Result<(), TestkitError> {
        self.wait_replica_in_sync(READY_TIMEOUT)?;
        let mut deadline = Deadline::after(READY_TIMEOUT);
        let (replicas, others) = (self.nodes.len() - 1, self.sentinels.len() - 1);
        let count = |sentinel: &RedisServer, what: &[u8]| {
            let url = Url::parse(&sentinel.url()).ok()?;
            match resp::command(&url, &[b"SENTINEL", what, MASTER_NAME.as_bytes()], SHORT) {
                Ok(Reply::Array(items)) => Some(items.len()),
                _ => None,
            }
        };
        loop {
            let formed = self.sentinels.iter().all(|s| {
                master_addr(s) == Some(self.primary_port())
                    && count(s, b"REPLICAS") == Some(replicas)
                    && count(s, b"SENTINELS") == Some(others)
            });
            if formed {
                return Ok(());
            }
            if deadline.expired() {
                return Err(TestkitError::NotReady {
                    what: format!(
                        "{} sentinels knowing the primary, its {replicas} replicas and each other",
                        self.sentinels.len()
                    ),
                    waited: deadline.elapsed(),
                    log: self.sentinel_log(),
                    log_tail: process::log_tail(&self.sentinel_log(), 0),
                });
            }
            deadline.pause();
        }
    }
}

fn subdir(parent: &Path, name: &str) -> Result<std::path::PathBuf, TestkitError> {
    let dir = parent.join(name);
    std::fs::create_dir(&dir)
        .map_err(|e| TestkitError::io(format!("creating {}", dir.display()), e))?;
    Ok(dir)
}

/// The port of the primary `sentinel` names (`SENTINEL get-master-addr-by-name`).
fn master_addr(sentinel: &RedisServer) -> Option<u16> {
    let url = Url::parse(&sentinel.url()).ok()?;
    let args: &[&[u8]] = &[
        b"SENTINEL",
        b"get-master-addr-by-name",
        MASTER_NAME.as_bytes(),
    ];
    match resp::command(&url, args, SHORT).ok()? {
        Reply::Array(items) => items.get(1)?.as_str()?.parse().ok(),
        _ => None,
    }
}

/// What `node` says it is (`ROLE`: `master`, `slave`); `None` when it does not answer.
fn role(node: &RedisServer) -> Option<String> {
    let url = Url::parse(&node.url()).ok()?;
    match resp::command(&url, &[b"ROLE"], SHORT).ok()? {
        Reply::Array(items) => items.first()?.as_str().map(str::to_owned),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_killed_primary_is_replaced_by_its_replica() {
        let mut set = SentinelSet::start(1, 3).unwrap();
        let old = set.primary_port();
        assert_eq!(
            set.cmd_primary(&[b"SET", b"k", b"v"]).unwrap(),
            Reply::Status("OK".into())
        );
        set.wait_replica_in_sync(Duration::from_secs(10)).unwrap();
        set.kill_primary().unwrap();
        let new = set.wait_for_new_primary(Duration::from_secs(60)).unwrap();
        assert_ne!(new, old);
        assert_eq!(set.primary_port(), new);
        // What the old primary had sent its replica survived.
        assert_eq!(
            set.cmd_primary(&[b"GET", b"k"]).unwrap(),
            Reply::Bulk(b"v".to_vec())
        );
    }

    #[test]
    fn sentinels_with_a_password_refuse_clients_without_it() {
        let set = SentinelSet::start_with_sentinel_password(1, 1, "s3cret").unwrap();
        assert!(set.url().ends_with("/tollgate?sentinel_password=s3cret"));
        let port = set.sentinel_ports()[0];
        let bare = crate::redis_cmd(&format!("redis://127.0.0.1:{port}"), &[b"PING"]).unwrap();
        assert!(
            matches!(bare, Reply::Error(ref e) if e.starts_with("NOAUTH")),
            "{bare:?}"
        );
        assert_eq!(
            set.cmd_sentinel(0, &[b"PING"]).unwrap(),
            Reply::Status("PONG".into())
        );
    }

    #[test]
    fn a_topology_needs_a_replica_and_a_sentinel() {
        for (replicas, sentinels) in [(0, 3), (1, 0)] {
            let err = SentinelSet::start(replicas, sentinels).unwrap_err();
            assert!(matches!(err, TestkitError::InvalidRequest(_)), "{err}");
        }
    }
}
