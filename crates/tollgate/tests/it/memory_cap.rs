//! The memory store's key cap under a flood of distinct keys, and idle keys being dropped.

use std::num::NonZeroUsize;
use std::time::Duration;

use tollgate::{CheckError, ManualClock, MemoryStore, Nanos, Policy, StoreError};

fn key(i: u64) -> Vec<u8> {
    format!("flood:{i}").into_bytes()
}

#[test]
fn the_cap_holds_and_live_keys_keep_working() {
    let clock = ManualClock::new(Nanos::new(1_000_000_000_000));
    let store = MemoryStore::builder()
        .clock(clock.clone())
        .max_keys(NonZeroUsize::new(10_000).unwrap())
        .shards(16)
        .build();
    let policy = Policy::token_bucket(5, 1, Duration::from_secs(1)).unwrap();
    let mut full = 0;
    for i in 0..50_000 {
        match store.check(&policy, key(i), 1) {
            Ok(d) => assert!(d.allowed()),
            Err(StoreError::Full { max_keys }) => {
                assert_eq!(max_keys, 10_000);
                full += 1;
            }
            Err(other) => panic!("{other}"),
        }
        assert!(store.len() <= 10_000);
    }
    assert_eq!(
        full, 40_000,
        "every key past the cap is refused, none evicted live"
    );
    assert!(StoreError::Full { max_keys: 1 }.is_transient());
    // A held key still has its own bucket: 4 left of 5.
    assert_eq!(store.check(&policy, key(0), 1).unwrap().remaining(), 3);

    // Five seconds on, every bucket is full again: idle, so new keys take their places.
    clock.advance(Duration::from_secs(5));
    for i in 50_000..60_000 {
        assert!(store.check(&policy, key(i), 1).unwrap().allowed());
        assert!(store.len() <= 10_000);
    }
}

#[test]
fn idle_keys_are_dropped_as_new_keys_arrive() {
    let clock = ManualClock::new(Nanos::new(1_000_000_000_000));
    let store = MemoryStore::builder()
        .clock(clock.clone())
        .shards(16)
        .build();
    let policy = Policy::token_bucket(5, 5, Duration::from_secs(1)).unwrap();
    for i in 0..100_000 {
        store.check(&policy, key(i), 1).unwrap();
    }
    assert_eq!(store.len(), 100_000);
    clock.advance(Duration::from_secs(1));
    for i in 100_000..200_000 {
        store.check(&policy, key(i), 1).unwrap();
    }
    // Each shard is swept when it doubles; the first generation is gone, not kept beside the second.
    assert!(store.len() < 150_000, "{} keys held", store.len());
    // A dropped key is a new key: a full bucket.
    assert_eq!(store.check(&policy, key(7), 0).unwrap().remaining(), 5);
}

#[test]
fn a_peek_on_a_new_key_leaves_nothing_to_keep() {
    let clock = ManualClock::new(Nanos::new(1_000_000_000_000));
    let store = MemoryStore::builder()
        .clock(clock)
        .max_keys(NonZeroUsize::new(100).unwrap())
        .shards(1)
        .build();
    let policy = Policy::token_bucket(5, 5, Duration::from_secs(1)).unwrap();
    // Peeks insert full buckets, which are idle at once: a flood of them never fills the store.
    for i in 0..10_000 {
        assert!(store.check(&policy, key(i), 0).unwrap().allowed());
    }
    assert!(store.len() <= 100);
}

#[test]
fn a_cost_over_capacity_takes_no_room() {
    let clock = ManualClock::new(Nanos::new(1_000_000_000_000));
    let store = MemoryStore::builder()
        .clock(clock)
        .max_keys(NonZeroUsize::new(1).unwrap())
        .shards(1)
        .build();
    let policy = Policy::token_bucket(5, 1, Duration::from_secs(1)).unwrap();
    assert!(store.check(&policy, key(0), 1).unwrap().allowed());
    // The store is full of a live key. A check that can never pass is a bad request whatever the
    // store holds: it says so, rather than "full", and holds no key.
    let err = store.check(&policy, key(1), 6).unwrap_err();
    assert!(
        matches!(
            err,
            StoreError::Check(CheckError::CostExceedsCapacity {
                cost: 6,
                capacity: 5
            })
        ),
        "{err}"
    );
    assert_eq!(store.len(), 1);
}

/// A client that sends its own numbers with every request (an inline policy
/// per request) used to make the store allocate a table per policy, never freed and not
/// counted by the cap: about 5 KB per request. Every policy now shares the store's tables, so
/// such a flood only adds keys, and the cap bounds them in bytes.
#[test]
fn a_flood_of_distinct_policies_is_bounded_by_the_cap() {
    let clock = ManualClock::new(Nanos::new(1_000_000_000_000));
    let max_keys = 10_000;
    let store = MemoryStore::builder()
        .clock(clock.clone())
        .max_keys(NonZeroUsize::new(max_keys).unwrap())
        .shards(32)
        .build();
    let honest = Policy::token_bucket(5, 5, Duration::from_secs(1)).unwrap();
    let empty = store.allocated_bytes();
    assert!(store.check(&honest, b"honest", 1).unwrap().allowed());
    let mut honest_allowed = 1;
    for i in 0..200_000u64 {
        let inline = Policy::token_bucket(1 + i, 1, Duration::from_secs(1)).unwrap();
        match store.check(&inline, b"attacker", 1) {
            Ok(_) | Err(StoreError::Full { .. }) => {}
            Err(other) => panic!("{other}"),
        }
        if i % 20_000 == 0 && store.check(&honest, b"honest", 1).unwrap().allowed() {
            honest_allowed += 1;
        }
    }
    assert!(store.len() <= max_keys);
    // The honest client was served exactly: 5 of its 10 checks in the same instant.
    assert_eq!(honest_allowed, 5);
    // 40 bytes a slot and a control byte, at most 8/7 × 2 slots per key (a shard's table is at
    // most 7/8 full and doubles as it grows): under 94 bytes per key.
    let bytes = store.allocated_bytes() - empty;
    println!("{bytes} bytes for {} keys", store.len());
    assert!(
        bytes <= max_keys * 94,
        "{bytes} bytes held for {} keys",
        store.len()
    );
    // Once every bucket is full again, they are all idle: a new flood finds room.
    clock.advance(Duration::from_secs(3600));
    let fresh = Policy::token_bucket(3, 3, Duration::from_secs(1)).unwrap();
    assert!(store.check(&fresh, b"newcomer", 1).unwrap().allowed());
}

/// A sliding counter whose width changed under its name keeps the old width's counts out of its
/// slot while they slide out: `allocated_bytes` counts their 64 bytes then, and not after the
/// first write once they are gone.
#[test]
fn allocated_bytes_counts_a_counters_carried_counts_while_they_last() {
    let clock = ManualClock::new(Nanos::new(1_000_000_000_000));
    let store = MemoryStore::builder()
        .clock(clock.clone())
        .shards(1)
        .build();
    let second = Policy::sliding_window_counter(10, Duration::from_secs(1)).unwrap();
    let minute = Policy::sliding_window_counter(10, Duration::from_secs(60)).unwrap();
    let before = store.named_limiter("api", &second).unwrap();
    let after = store.named_limiter("api", &minute).unwrap();
    assert!(before.check(b"alice", 1).unwrap().allowed());
    let plain = store.allocated_bytes();
    // Changed to a minute: the second's count is carried, in 64 bytes of its own.
    assert!(after.check(b"alice", 1).unwrap().allowed());
    assert_eq!(store.allocated_bytes(), plain + 64);
    // Two seconds on, it has slid out; the next charge frees it, the minute's counts stay.
    clock.advance(Duration::from_secs(2));
    let decision = after.check(b"alice", 1).unwrap();
    assert_eq!(decision.remaining(), 8);
    assert_eq!(store.allocated_bytes(), plain);
}

/// Ids of settlements done once have their own cap, apart from the key cap (issue 27, point 5:
/// they shared it, and a flood made honest commits fail with `Full`). Past it, the id that
/// expires first is forgotten, and a settlement that may be of a forgotten id refunds nothing
/// but still charges.
#[test]
fn settled_ids_have_their_own_cap_and_a_forgotten_one_never_refunds() {
    use tollgate::Check;
    use tollgate::store::settle::{Adjustment, Once};

    let clock = ManualClock::new(Nanos::new(1_000_000_000_000));
    let store = MemoryStore::builder()
        .clock(clock.clone())
        .max_keys(NonZeroUsize::new(2).unwrap())
        .max_settled(NonZeroUsize::new(4).unwrap())
        .build();
    let policy = Policy::token_bucket(10, 10, Duration::from_secs(1)).unwrap();
    let bucket = Check::new(policy, b"m", 0).named("r");
    let once = |id: &'static [u8], secs| Once::new(id, Duration::from_secs(secs));
    let settle =
        |id, secs, adjustment| store.settle_sync(Some(once(id, secs)), &[(bucket, adjustment)]);
    assert!(
        store
            .decide_sync(&[Check::new(policy, b"m", 10).named("r")])
            .unwrap()
            .allowed()
    );
    let ids: [&[u8]; 8] = [b"0", b"1", b"2", b"3", b"4", b"5", b"6", b"7"];
    for (i, id) in ids.into_iter().enumerate() {
        settle(id, 10 + i as u64, Adjustment::Refund(0)).expect("never full");
    }
    // "0" was forgotten: a replay refunds nothing.
    let replay = settle(b"0", 10, Adjustment::Refund(5)).unwrap();
    assert_eq!(replay.decisions()[0].remaining(), 0, "refunded twice");
    // "1" was forgotten too: a charge still counts (three tokens of debt).
    let charged = settle(b"1", 11, Adjustment::Charge(3)).unwrap();
    assert_eq!(
        charged.decisions()[0].retry_after(),
        Duration::from_millis(400)
    );
    // An id expiring after every forgotten one settles in full, once: 5 back pay the debt
    // of 3 and leave 2.
    let fresh = settle(b"fresh", 60, Adjustment::Refund(5)).unwrap();
    assert_eq!(fresh.decisions()[0].remaining(), 2);
    assert!(matches!(
        settle(b"fresh", 60, Adjustment::Refund(5)),
        Err(StoreError::Check(CheckError::AlreadySettled))
    ));
}
