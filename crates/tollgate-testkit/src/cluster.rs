//! A throwaway Redis Cluster: N cluster-enabled `redis-server`s joined by
//! `redis-cli --cluster create`, masters only or with replicas (which take over a master that
//! dies, within about a second: the nodes' timeout is short).

use std::{net::TcpListener, path::Path, process::Command, time::Duration};

use tempfile::TempDir;

use crate::{
    Reply, TestkitError,
    process::{self, Deadline},
    redis::RedisServer,
    resp, scratch,
    url::{self, Url},
};

const URLS_VAR: &str = "TOLLGATE_REDIS_CLUSTER_URLS";
const CREATE_TIMEOUT: Duration = Duration::from_secs(60);
const READY_TIMEOUT: Duration = Duration::from_secs(30);
/// Redis listens for the cluster bus on the client port plus this.
const BUS_PORT_OFFSET: u16 = 10_000;
/// How long a node gets to answer a question about the cluster.
const SHORT: Duration = Duration::from_secs(1);

/// A throwaway Redis Cluster of `masters` masters and no replicas, or the one
/// `TOLLGATE_REDIS_CLUSTER_URLS` (comma-separated `redis://` URLs) names.
///
/// [`start`](Self::start) returns once every node's `CLUSTER INFO` says `cluster_state:ok` and
/// knows all the others. Dropping the handle kills every node and removes their directory.
#[derive(Debug)]
pub struct TestRedisCluster {
    inner: Inner,
}

#[derive(Debug)]
enum Inner {
    Owned {
        // Declared before `dir`: the nodes die before their directory is removed.
        nodes: Vec<RedisServer>,
        dir: TempDir,
    },
    External {
        urls: Vec<String>,
    },
}

impl TestRedisCluster {
    /// Starts a cluster of `masters` (at least 3, as Redis Cluster requires) nodes, unless
    /// `TOLLGATE_REDIS_CLUSTER_URLS` names one, in which case `masters` is not checked.
    pub fn start(masters: usize) -> Result<Self, TestkitError> {
        Self::from_env_value(url::env_value(URLS_VAR)?, masters)
    }

    /// Starts `masters` masters with `replicas` replicas each (always kit-started: a test
    /// that kills masters needs its own cluster). A master that dies is replaced by one of its
    /// replicas after about a second.
    pub fn start_with_replicas(masters: usize, replicas: usize) -> Result<Self, TestkitError> {
        Self::start_owned(masters, replicas)
    }

    pub(crate) fn from_env_value(
        value: Option<String>,
        masters: usize,
    ) -> Result<Self, TestkitError> {
        let urls: Vec<String> = url::non_blank(value)
            .unwrap_or_default()
            .split(',')
            .map(str::trim)
            .filter(|u| !u.is_empty())
            .map(str::to_owned)
            .collect();
        if !urls.is_empty() {
            for url in &urls {
                if Url::parse(url)?.scheme != "redis" {
                    return Err(TestkitError::InvalidUrl {
                        url: url.clone(),
                        reason: format!("{URLS_VAR} must list redis:// URLs"),
                    });
                }
            }
            return Ok(Self {
                inner: Inner::External { urls },
            });
        }
        Self::start_owned(masters, 0)
    }

    fn start_owned(masters: usize, replicas: usize) -> Result<Self, TestkitError> {
        if masters < 3 {
            return Err(TestkitError::InvalidRequest(format!(
                "a Redis Cluster needs at least 3 masters, not {masters}"
            )));
        }
        let dir = scratch::tempdir(&std::env::temp_dir(), "tollgate-redis-cluster-")?;
        let count = masters * (1 + replicas);
        // With replicas, a short node timeout makes a failover take about a second.
        let timeout = if replicas > 0 { "1000" } else { "5000" };
        let mut nodes = Vec::with_capacity(count);
        for i in 0..count {
            let node_dir = dir.path().join(format!("node-{i}"));
            std::fs::create_dir(&node_dir)
                .map_err(|e| TestkitError::io(format!("creating {}", node_dir.display()), e))?;
            let args = [
                "--cluster-enabled",
                "yes",
                "--cluster-config-file",
                "nodes.conf",
                "--cluster-node-timeout",
                timeout,
                // A replica syncs at once rather than 5 s later: one that never synced cannot
                // take over.
                "--repl-diskless-sync-delay",
                "0",
            ];
            let args = args.map(str::to_owned).to_vec();
            nodes.push(RedisServer::start(node_dir, args, free_port_with_bus)?);
        }
        create_cluster(&nodes, replicas, dir.path())?;
        let log = dir.path().join("cluster-create.log");
        wait_until_ok(&nodes, &log)?;
        wait_until_replicas_synced(&nodes, &log)?;
        Ok(Self {
            inner: Inner::Owned { nodes, dir },
        })
    }

    /// One `redis://127.0.0.1:PORT` URL per node, or the external URLs as given.
    pub fn urls(&self) -> Vec<String> {
        match &self.inner {
            Inner::Owned { nodes, .. } => nodes.iter().map(RedisServer::url).collect(),
            Inner::External { urls } => urls.clone(),
        }
    }

    /// Whether the kit started (and will kill) the nodes.
    pub fn is_owned(&self) -> bool {
        matches!(self.inner, Inner::Owned { .. })
    }

    /// The nodes' process ids; empty when external.
    pub fn pids(&self) -> Vec<u32> {
        match &self.inner {
            Inner::Owned { nodes, .. } => nodes.iter().filter_map(RedisServer::pid).collect(),
            Inner::External { .. } => Vec::new(),
        }
    }

    /// The port of the master serving `key` now; `None` when no node answers.
    pub fn master_of(&self, key: &[u8]) -> Option<u16> {
        let nodes = self.urls();
        for url in &nodes {
            let Ok(url) = Url::parse(url) else { continue };
            let slot = match resp::command(&url, &[b"CLUSTER", b"KEYSLOT", key], SHORT) {
                Ok(Reply::Integer(slot)) => slot,
                _ => continue,
            };
            let Ok(Reply::Bulk(text)) = resp::command(&url, &[b"CLUSTER", b"NODES"], SHORT) else {
                continue;
            };
            // `<id> <ip:port@bus> <flags> <master> <ping> <pong> <epoch> <link> <slots>...`
            for line in String::from_utf8_lossy(&text).lines() {
                let fields: Vec<&str> = line.split_whitespace().collect();
                let (Some(addr), Some(flags)) = (fields.get(1), fields.get(2)) else {
                    continue;
                };
                if !flags.split(',').any(|f| f == "master") || flags.contains("fail") {
                    continue;
                }
                let serves = fields.iter().skip(8).any(|range| {
                    let (from, to) = range.split_once('-').unwrap_or((range, range));
                    matches!((from.parse::<i64>(), to.parse::<i64>()), (Ok(a), Ok(b)) if a <= slot && slot <= b)
                });
                if serves {
                    let port = addr.split('@').next()?.rsplit(':').next()?.parse().ok()?;
                    return Some(port);
                }
            }
        }
        None
    }

    /// Kills the kit-started node on `port` (as in a crash).
    pub fn kill(&mut self, port: u16) -> Result<(), TestkitError> {
        match &mut self.inner {
            Inner::Owned { nodes, .. } => match nodes.iter_mut().find(|n| n.port() == port) {
                Some(node) => node.stop(),
                None => Err(TestkitError::InvalidRequest(format!(
                    "no node of this cluster listens on port {port}"
                ))),
            },
            Inner::External { .. } => Err(TestkitError::InvalidRequest(
                "an external cluster's nodes cannot be killed here".into(),
            )),
        }
    }

    /// The temporary directory holding one `node-N` directory per node; `None` when external.
    pub fn dir(&self) -> Option<&Path> {
        match &self.inner {
            Inner::Owned { dir, .. } => Some(dir.path()),
            Inner::External { .. } => None,
        }
    }
}

/// A free port whose cluster bus port (+10000) is free too.
fn free_port_with_bus() -> Result<u16, TestkitError> {
    for _ in 0..50 {
        let port = process::free_port()?;
        let Some(bus) = port.checked_add(BUS_PORT_OFFSET) else {
            continue;
        };
        if TcpListener::bind(("127.0.0.1", bus)).is_ok() {
            return Ok(port);
        }
    }
    Err(TestkitError::InvalidRequest(
        "found no free port whose cluster bus port (+10000) was free too".into(),
    ))
}

fn create_cluster(nodes: &[RedisServer], replicas: usize, dir: &Path) -> Result<(), TestkitError> {
    let redis_cli =
        process::find_binary("redis-cli", &["/usr/local/bin", "/usr/bin"]).ok_or_else(|| {
            TestkitError::MissingBinary {
                binary: "redis-cli",
                searched: "PATH, /usr/local/bin and /usr/bin".into(),
                install_hint: "apt-get install -y redis-server redis-tools",
            }
        })?;
    let mut cmd = Command::new(&redis_cli);
    cmd.args(["--cluster", "create"]);
    for node in nodes {
        cmd.arg(format!("127.0.0.1:{}", node.port()));
    }
    cmd.args(["--cluster-replicas", &replicas.to_string(), "--cluster-yes"])
        .current_dir(dir);
    let what = format!("redis-cli --cluster create ({} nodes)", nodes.len());
    process::run(cmd, &what, &dir.join("cluster-create.log"), CREATE_TIMEOUT)
}

/// Waits until every node reports `cluster_state:ok` and knows all the nodes: only then are
/// all slots served everywhere and a client's first `CLUSTER SLOTS` complete.
fn wait_until_ok(nodes: &[RedisServer], create_log: &Path) -> Result<(), TestkitError> {
    let mut deadline = Deadline::after(READY_TIMEOUT);
    let known = format!("cluster_known_nodes:{}", nodes.len());
    let mut pending = nodes.iter();
    let mut node = pending.next();
    while let Some(current) = node {
        let url = Url::parse(&current.url())?;
        let info = resp::command(&url, &[b"CLUSTER", b"INFO"], Duration::from_secs(1));
        let ok = match &info {
            Ok(Reply::Bulk(text)) => {
                let text = String::from_utf8_lossy(text);
                let has = |line: &str| text.lines().any(|l| l.trim() == line);
                has("cluster_state:ok") && has(&known)
            }
            _ => false,
        };
        if ok {
            node = pending.next();
            continue;
        }
        if deadline.expired() {
            return Err(TestkitError::NotReady {
                what: format!(
                    "Redis Cluster node {} (CLUSTER INFO: {info:?})",
                    current.url()
                ),
                waited: deadline.elapsed(),
                log: create_log.to_owned(),
                log_tail: process::log_tail(create_log, 0),
            });
        }
        deadline.pause();
    }
    Ok(())
}

/// Waits until every replica's link to its master is up (its first sync done): only then can
/// it take over a master that dies.
fn wait_until_replicas_synced(nodes: &[RedisServer], log: &Path) -> Result<(), TestkitError> {
    let mut deadline = Deadline::after(READY_TIMEOUT);
    for node in nodes {
        let url = Url::parse(&node.url())?;
        loop {
            let info = resp::command(&url, &[b"INFO", b"replication"], SHORT);
            let synced = match &info {
                Ok(Reply::Bulk(text)) => {
                    let text = String::from_utf8_lossy(text);
                    let has = |line: &str| text.lines().any(|l| l.trim() == line);
                    has("role:master") || has("master_link_status:up")
                }
                _ => false,
            };
            if synced {
                break;
            }
            if deadline.expired() {
                return Err(TestkitError::NotReady {
                    what: format!("the replica {} (INFO replication: {info:?})", node.url()),
                    waited: deadline.elapsed(),
                    log: log.to_owned(),
                    log_tail: process::log_tail(log, 0),
                });
            }
            deadline.pause();
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn env_value_lists_the_nodes_of_an_external_cluster() {
        let value = " redis://127.0.0.1:7000, redis://127.0.0.1:7001 ,,".to_owned();
        let cluster = TestRedisCluster::from_env_value(Some(value), 3).unwrap();
        assert!(!cluster.is_owned());
        assert_eq!(
            cluster.urls(),
            ["redis://127.0.0.1:7000", "redis://127.0.0.1:7001"]
        );
        assert!(cluster.pids().is_empty());
        assert!(cluster.dir().is_none());
    }

    #[test]
    fn env_value_must_list_redis_urls() {
        let err = TestRedisCluster::from_env_value(Some("127.0.0.1:7000".into()), 3).unwrap_err();
        assert!(matches!(err, TestkitError::InvalidUrl { .. }), "{err}");
    }

    #[test]
    fn fewer_than_three_masters_is_refused() {
        let err = TestRedisCluster::from_env_value(None, 2).unwrap_err();
        assert!(matches!(err, TestkitError::InvalidRequest(_)), "{err}");
    }
}
