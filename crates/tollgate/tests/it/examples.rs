//! The library's examples, run against the stores they name (their `main` reads the store's
//! address from the environment; here the test kit's server stands in).
#![cfg(feature = "redis")]

use std::time::Duration;

use tollgate::{ManualClock, Nanos, RedisStore};
use tollgate_testkit::TestRedis;

#[allow(dead_code, unreachable_pub)]
#[path = "../../examples/llm_reserve_commit.rs"]
mod llm_reserve_commit;

/// Issue 43: requests and tokens reserved together commit one request and the tokens used.
#[tokio::test]
async fn llm_reserve_commit_charges_each_policy_its_own_use() {
    let redis = TestRedis::start().expect("start redis-server");
    // A clock that stands still: at 10,000 tokens a minute one comes back every 6 ms.
    let store = RedisStore::builder(redis.url())
        .test_clock(ManualClock::new(Nanos::new(1_700_000_000_000_000_000)))
        .timeout(Duration::from_secs(2))
        .build()
        .await
        .unwrap();
    let left = llm_reserve_commit::run(&store, b"alice").await.unwrap();
    assert_eq!(
        left,
        [
            Some((59, 8_800)),
            Some((58, 4_900)),
            Some((57, 900)),
            None, // 4,000 tokens do not fit in 900
        ]
    );
}
