//! Redis Cluster faults under load, through the server: a master killed while its replica
//! takes over, and the slot of the key under load migrated to another master (`ASK` while it
//! moves, `MOVED` after). The figures of `faults.rs`: every wait within the timeout, failures
//! only while the slot has no master, decisions again after, and the exact bound (plus one
//! burst where the replica had not received the last writes).

use crate::support;

use std::sync::Mutex;

use support::Tollgate;
use support::faults::{FAULT_AT, bound_for, under_load_for};
use tollgate_testkit::{Reply, TestRedisCluster, redis_cmd};

const CAPACITY: usize = 10;

fn body(key: &str) -> String {
    format!(
        r#"{{"key": "{key}", "capacity": {CAPACITY}, "refill": {CAPACITY}, "period_ms": 1000}}"#
    )
}

fn serve(cluster: &TestRedisCluster) -> Tollgate {
    Tollgate::start(&[
        "--store",
        &cluster.urls().join(","),
        "--on-store-error",
        "deny",
        "--store-timeout-ms",
        "100",
    ])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_master_killed_while_its_replica_takes_over() {
    let mut cluster = TestRedisCluster::start_with_replicas(3, 1).expect("start a cluster");
    let server = serve(&cluster);
    let key = format!("failover-{}", std::process::id());
    let master = cluster.master_of(key.as_bytes()).expect("the key's master");
    let seconds = 6.0;
    let cluster_ref = Mutex::new(&mut cluster);
    let figures = under_load_for(
        seconds,
        server.addr,
        &body(&key),
        async {
            cluster_ref
                .lock()
                .unwrap()
                .kill(master)
                .expect("kill the master")
        },
        async {},
    )
    .await;
    let promoted = cluster.master_of(key.as_bytes());
    eprintln!(
        "{} (master {master} killed at {FAULT_AT} s; now served by {promoted:?})",
        figures.line("redis cluster master killed, replica promoted")
    );
    assert!(
        figures.longest_wait() <= 0.6,
        "a request waited {:.3} s",
        figures.longest_wait()
    );
    assert!(promoted.is_some_and(|p| p != master), "a replica took over");
    // Failures only while the slot had no master: from the kill until about two node
    // timeouts and an election later.
    assert_eq!(
        figures.failed_outside(2.5),
        0,
        "failures outside the failover"
    );
    assert!(
        figures.decided_after(seconds - 1.0) > 0,
        "the store decided again after the failover"
    );
    // The replica may lack the last writes (replication is asynchronous): one more burst.
    let bound = bound_for(CAPACITY, seconds) + CAPACITY;
    assert!(
        figures.allowed() <= bound,
        "{} allowed, the bound is {bound}",
        figures.allowed()
    );
}

/// The node id of the node on `port`.
fn node_id(port: u16) -> Vec<u8> {
    match redis_cmd(port, &[b"CLUSTER", b"MYID"]) {
        Ok(Reply::Bulk(id)) => id,
        other => panic!("CLUSTER MYID on {port}: {other:?}"),
    }
}

/// Moves `slot` from the master on `from` to the one on `to`, keys and all: importing and
/// migrating, `MIGRATE`, then the new owner told to every master, the old one first (the
/// harder order for clients; see below).
fn migrate_slot(slot: &[u8], from: u16, to: u16, masters: &[u16]) {
    let (from_id, to_id) = (node_id(from), node_id(to));
    let ok = |reply: Result<Reply, _>, what: &str| match reply {
        Ok(Reply::Status(_)) | Ok(Reply::Bulk(_)) => {}
        other => panic!("{what}: {other:?}"),
    };
    ok(
        redis_cmd(to, &[b"CLUSTER", b"SETSLOT", slot, b"IMPORTING", &from_id]),
        "IMPORTING",
    );
    ok(
        redis_cmd(from, &[b"CLUSTER", b"SETSLOT", slot, b"MIGRATING", &to_id]),
        "MIGRATING",
    );
    let to_port = to.to_string();
    loop {
        let keys = match redis_cmd(from, &[b"CLUSTER", b"GETKEYSINSLOT", slot, b"100"]) {
            Ok(Reply::Array(keys)) => keys,
            other => panic!("GETKEYSINSLOT: {other:?}"),
        };
        if keys.is_empty() {
            break;
        }
        let mut args: Vec<&[u8]> = vec![
            b"MIGRATE",
            b"127.0.0.1",
            to_port.as_bytes(),
            b"",
            b"0",
            b"5000",
            b"KEYS",
        ];
        let names: Vec<Vec<u8>> = keys
            .into_iter()
            .filter_map(|k| match k {
                Reply::Bulk(k) => Some(k),
                _ => None,
            })
            .collect();
        args.extend(names.iter().map(Vec::as_slice));
        ok(redis_cmd(from, &args), "MIGRATE");
    }
    // The old owner first, then the new, then the rest: the order some tools use (the
    // documentation tells the new owner first). Until the new owner is told, the old one
    // answers MOVED to it and it, still importing, answers MOVED back; the store makes a
    // call the cluster client could not follow again, after a moment. The 10 ms between the
    // two (a tool's next command on a busy network) put requests under load in that moment.
    let rest = masters.iter().copied().filter(|&p| p != from && p != to);
    for port in [from, to].into_iter().chain(rest) {
        ok(
            redis_cmd(port, &[b"CLUSTER", b"SETSLOT", slot, b"NODE", &to_id]),
            "SETSLOT NODE",
        );
        if port == from {
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_keys_slot_migrated_under_load() {
    let cluster = TestRedisCluster::start(3).expect("start a cluster");
    if !cluster.is_owned() {
        return; // an external cluster's slots are not ours to move
    }
    let server = serve(&cluster);
    let key = format!("migrate-{}", std::process::id());
    let from = cluster.master_of(key.as_bytes()).expect("the key's master");
    let masters: Vec<u16> = cluster
        .urls()
        .iter()
        .filter_map(|u| u.rsplit(':').next()?.parse().ok())
        .collect();
    let to = *masters
        .iter()
        .find(|&&p| p != from)
        .expect("another master");
    let slot = match redis_cmd(from, &[b"CLUSTER", b"KEYSLOT", key.as_bytes()]) {
        Ok(Reply::Integer(slot)) => slot.to_string(),
        other => panic!("KEYSLOT: {other:?}"),
    };
    let figures = under_load_for(
        3.5,
        server.addr,
        &body(&key),
        async { migrate_slot(slot.as_bytes(), from, to, &masters) },
        async {},
    )
    .await;
    eprintln!(
        "{} (slot {slot} moved from {from} to {to})",
        figures.line("redis cluster slot migrated under load")
    );
    assert_eq!(
        cluster.master_of(key.as_bytes()),
        Some(to),
        "the slot moved"
    );
    assert!(figures.longest_wait() <= 0.6);
    assert_eq!(
        figures.failed(),
        0,
        "redirections are followed, not failures"
    );
    // The bucket moved with its slot: no burst is lost or gained.
    let bound = bound_for(CAPACITY, 3.5);
    assert!(
        figures.allowed() <= bound,
        "{} allowed, the bound is {bound}",
        figures.allowed()
    );
}
