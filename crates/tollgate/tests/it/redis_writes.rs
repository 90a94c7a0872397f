//! What `bucket.lua` writes: each bucket's value (its tat and the numbers it was decided under)
//! and TTL, against a fresh decision of the pure GCRA. The script formats a value and a TTL once
//! for a run of buckets left alike; buckets at one tat under different numbers, and buckets
//! between them in other states, must each get their own. The client's replay cannot see a
//! wrong write: it replays from what it reads next.
#![cfg(feature = "redis")]

use crate::rebase_ports::{MICROSECOND, micros};

use std::time::Duration;

use tollgate::algorithm::gcra::Gcra;
use tollgate::{Check, Clock, ManualClock, Nanos, Policy, RedisStore, Store};
use tollgate_testkit::{TestRedis, command_calls, redis_cmd};

/// A token every 10 s, `capacity` of them.
fn every_ten_seconds(capacity: u64) -> Policy {
    Policy::token_bucket(capacity, 1, Duration::from_secs(10)).unwrap()
}

fn key_of(user: &str) -> String {
    format!("tollgate:v3:{{{user}}}:tb:=api")
}

/// `policy`'s numbers as the script writes them after a tat.
fn tail(policy: Policy) -> String {
    format!(
        "{} {}",
        micros(policy.emission_interval()),
        micros(policy.tolerance())
    )
}

#[tokio::test]
async fn buckets_alike_and_not_are_each_written_as_decided_taken_first() {
    each_bucket_is_written_as_decided(true).await;
}

#[tokio::test]
async fn buckets_alike_and_not_are_each_written_as_decided_read_by_mget() {
    each_bucket_is_written_as_decided(false).await;
}

async fn each_bucket_is_written_as_decided(take_first: bool) {
    let redis = TestRedis::start().unwrap();
    let clock = ManualClock::new(Nanos::new(1_700_000_000_123_456_000));
    let store = RedisStore::builder(redis.url())
        .test_clock(clock.clone())
        .deny_cache(false)
        .coalesce(false)
        .build()
        .await
        .unwrap();
    // One emission interval (10 s), two capacities: absent buckets taken once under either end
    // at the same tat, with different tails. A third policy reaches that tat by its own numbers.
    let (four, eight) = (every_ten_seconds(4), every_ten_seconds(8));
    let twenty = Policy::token_bucket(4, 1, Duration::from_secs(20)).unwrap();
    if !take_first {
        // Lone buckets that keep existing: the store learns to read them with its one `MGET`.
        let plenty = every_ten_seconds(100);
        let warm = [
            Check::new(plenty, b"warm", 1).named("a"),
            Check::new(plenty, b"warm", 1).named("b"),
        ];
        for _ in 0..40 {
            assert!(store.decide(&warm).await.unwrap().allowed());
        }
    }
    let now = clock.now().as_u64() / 1000;
    // Two buckets that exist: 20 s into `four` (the run's tat moves between the alike ones), and
    // 50 s into `eight`'s numbers, read under `four`'s (a rebase).
    let existing = [
        ("held", now + 20_000_000, four),
        ("other", now + 50_000_000, eight),
    ];
    for (user, tat, under) in existing {
        let value = format!("{tat} {}", tail(under));
        redis_cmd(
            redis.port(),
            &[b"SET", key_of(user).as_bytes(), value.as_bytes()],
        )
        .unwrap();
    }
    // (user, policy, cost, the tat the bucket holds before in µs (0: absent), the numbers it was
    // written under).
    let buckets: [(&str, Policy, u64, u64, Policy); 8] = [
        ("a", four, 1, 0, four),
        ("b", eight, 1, 0, eight),
        ("held", four, 1, now + 20_000_000, four),
        ("c", four, 1, 0, four),
        ("d", eight, 1, 0, eight),
        ("e", twenty, 1, 0, twenty),
        ("f", four, 2, 0, four),
        ("other", four, 1, now + 50_000_000, eight),
    ];
    let checks: Vec<Check<'_>> = buckets
        .iter()
        .map(|&(user, policy, cost, _, _)| Check::new(policy, user.as_bytes(), cost).named("api"))
        .collect();
    // One decision of eight checks: one run of the script.
    redis_cmd(redis.port(), &[b"CONFIG", b"RESETSTAT"]).unwrap();
    let verdict = store.decide(&checks).await.unwrap();
    assert!(verdict.allowed());
    let reads = command_calls(redis.port(), "mget").unwrap();
    assert_eq!(reads == 0, take_first, "{reads} MGETs");

    let at = Nanos::new(now * 1000);
    for (&(user, policy, cost, before, was), decision) in buckets.iter().zip(verdict.decisions()) {
        let gcra = Gcra::new(&policy);
        let tat = gcra.rebase_in(&Gcra::new(&was), Nanos::new(before * 1000), at, MICROSECOND);
        let outcome = gcra.decide(tat, at, cost).unwrap();
        assert!(outcome.allowed(), "{user}");
        assert_eq!(
            decision.remaining(),
            outcome.decision(true).remaining(),
            "{user}"
        );
        let tat = outcome.new_tat().as_u64() / 1000;
        let key = key_of(user);
        let stored = redis_cmd(redis.port(), &[b"GET", key.as_bytes()]).unwrap();
        assert_eq!(
            stored.as_str(),
            Some(format!("{tat} {}", tail(policy)).as_str()),
            "{user}"
        );
        // Until the bucket is full again, plus the minute of slack an injected clock gets (the
        // time since the call is milliseconds; the buckets' TTLs are 10 s apart or more).
        let ttl = (tat - now).div_ceil(1000) + 60_000;
        let left = redis_cmd(redis.port(), &[b"PTTL", key.as_bytes()]).unwrap();
        let left = u64::try_from(left.as_int().expect("an integer")).expect("a TTL");
        assert!(
            (ttl - 1_000..=ttl).contains(&left),
            "{user}: PTTL {left}, {ttl} written"
        );
        // Read again, by the script and the client's replay: what was written is the state.
        let peek = Check::new(policy, user.as_bytes(), 0).named("api");
        let again = store.decide(&[peek]).await.unwrap().decisions()[0];
        let expected = gcra.decide(outcome.new_tat(), at, 0).unwrap();
        assert_eq!(
            again.remaining(),
            expected.decision(false).remaining(),
            "{user}"
        );
    }
}
