//! The Redis store against a local 3-master Redis Cluster started by the test kit: the
//! conformance suite (buckets spread over slots on every node, MOVED followed by the client),
//! and the one thing a cluster cannot do atomically.
#![cfg(feature = "redis")]

use crate::conformance;

use std::time::Duration;

use conformance::Harness;
use tollgate::{
    Check, CheckError, Clock, ManualClock, Nanos, Policy, RedisStore, Store, StoreError,
};
use tollgate_testkit::TestRedisCluster;

struct Cluster {
    _cluster: TestRedisCluster,
    clock: ManualClock,
    store: RedisStore,
}

impl Harness for Cluster {
    type S = RedisStore;

    fn store(&self) -> &Self::S {
        &self.store
    }

    fn advance(&self, by: Duration) {
        self.clock.advance(by);
    }

    fn now(&self) -> Nanos {
        self.clock.now()
    }

    fn resolution(&self) -> Nanos {
        Nanos::new(1000)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cluster_decides_like_the_model() {
    let cluster = TestRedisCluster::start(3).expect("start a 3-master cluster");
    let clock = ManualClock::new(Nanos::new(1_700_000_000_000_000_000));
    let store = RedisStore::builder("")
        .cluster(cluster.urls())
        .test_clock(clock.clone())
        .timeout(Duration::from_secs(2))
        .build()
        .await
        .expect("connect to the cluster");
    let h = Cluster {
        _cluster: cluster,
        clock,
        store,
    };
    // Checks of different keys in one call span slots: refused, never half-decided.
    let p = Policy::token_bucket(5, 5, Duration::from_secs(1)).unwrap();
    let cross = [Check::new(p, b"user", 1), Check::new(p, b"global", 1)];
    assert!(matches!(
        h.store.decide(&cross).await,
        Err(StoreError::Check(CheckError::Unsupported(_)))
    ));
    // The per-user + global case of the suite is such a call: run the rest.
    conformance::burst_then_deny(&h).await;
    conformance::refill_after_retry_after(&h).await;
    conformance::peek_and_denial_take_nothing(&h).await;
    conformance::cost_over_capacity_is_an_error(&h).await;
    conformance::keys_and_policies_are_separate_buckets(&h).await;
    conformance::awkward_keys_never_collide(&h).await;
    conformance::duplicate_bucket_is_an_error(&h).await;
    conformance::idle_keys_behave_as_new(&h).await;
    conformance::windows_decide_like_the_model(&h).await;
    conformance::numbers_change_under_a_named_bucket(&h).await;
    conformance::names_separate_buckets(&h).await;
    conformance::window_numbers_change_under_a_named_bucket(&h).await;
    conformance::a_narrower_counter_never_lengthens_a_wait(&h).await;
    conformance::all_settlement_cases(&h).await;
    // Several policies of one key share a slot: atomic in a cluster too.
    let second = Policy::token_bucket(3, 3, Duration::from_secs(1)).unwrap();
    let hour = Policy::token_bucket(4, 4, Duration::from_secs(3600)).unwrap();
    let both = [
        Check::new(second, b"multi", 3),
        Check::new(hour, b"multi", 3),
    ];
    assert!(h.store.decide(&both).await.unwrap().allowed());
    // 333_334 µs per token, rounded up: three tokens take a little over 1 s.
    h.advance(Duration::from_secs(2));
    let v = h.store.decide(&both).await.unwrap();
    assert!(!v.allowed(), "the hourly bucket holds 1 of 3");
    let alone = [Check::new(second, b"multi", 3)];
    assert!(
        h.store.decide(&alone).await.unwrap().allowed(),
        "the per-second bucket was not charged"
    );
    // Policies of other algorithms on that key share its slot too.
    let log = Policy::sliding_window_log(2, Duration::from_secs(60)).unwrap();
    let window = Policy::fixed_window(5, Duration::from_secs(60)).unwrap();
    let mixed = |cost| {
        [
            Check::new(log, b"multi", cost),
            Check::new(window, b"multi", cost),
        ]
    };
    assert!(h.store.decide(&mixed(2)).await.unwrap().allowed());
    let v = h.store.decide(&mixed(1)).await.unwrap();
    assert!(!v.allowed(), "the log is full");
    assert_eq!(
        v.decisions()[1].remaining(),
        3,
        "the window was not charged"
    );
}
