//! `TestRedisCluster` against real cluster-enabled redis-servers.

use std::path::Path;

use tollgate_testkit::{Reply, TestRedisCluster, redis_cmd};

#[test]
fn three_masters_form_a_healthy_cluster_and_drop_cleans_up() {
    let cluster = TestRedisCluster::start(3).unwrap();
    assert!(cluster.is_owned());
    let urls = cluster.urls();
    assert_eq!(urls.len(), 3);
    for url in &urls {
        let info = redis_cmd(url, &[b"CLUSTER", b"INFO"]).unwrap();
        let info = info.as_str().unwrap();
        for line in [
            "cluster_state:ok",
            "cluster_known_nodes:3",
            "cluster_size:3",
            "cluster_slots_assigned:16384",
        ] {
            assert!(info.lines().any(|l| l.trim() == line), "{url}: {info}");
        }
    }

    // A key is served by the node owning its slot and redirected by the others.
    let mut answers = Vec::new();
    for url in &urls {
        answers.push(redis_cmd(url, &[b"SET", b"{user:1}:tokens", b"5"]).unwrap());
    }
    let served = answers.iter().filter(|r| **r == Reply::Status("OK".into()));
    assert_eq!(served.count(), 1, "{answers:?}");
    let moved = answers
        .iter()
        .filter(|r| matches!(r, Reply::Error(e) if e.starts_with("MOVED")));
    assert_eq!(moved.count(), 2, "{answers:?}");

    let pids = cluster.pids();
    let dir = cluster.dir().unwrap().to_owned();
    assert_eq!(pids.len(), 3);
    drop(cluster);
    for pid in pids {
        assert!(
            !Path::new(&format!("/proc/{pid}")).exists(),
            "node {pid} survived"
        );
    }
    assert!(!dir.exists());
}
