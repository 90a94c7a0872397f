//! The conformance suite against a real Redis (started by the test kit), with time injected
//! into the script so the store and the model read the same clock.
#![cfg(feature = "redis")]

use crate::conformance;

use std::time::Duration;

use conformance::Harness;
use tollgate::{Clock, ManualClock, Nanos, RedisStore};
use tollgate_testkit::TestRedis;

struct Redis {
    _server: TestRedis,
    clock: ManualClock,
    store: RedisStore,
}

impl Redis {
    async fn start(deny_cache: bool, coalesce: bool) -> Redis {
        let server = TestRedis::start().expect("start redis-server");
        let clock = ManualClock::new(Nanos::new(1_700_000_000_000_000_000));
        let store = RedisStore::builder(server.url())
            .test_clock(clock.clone())
            .deny_cache(deny_cache)
            .coalesce(coalesce)
            .timeout(Duration::from_secs(2))
            .build()
            .await
            .expect("connect");
        Redis {
            _server: server,
            clock,
            store,
        }
    }
}

impl Harness for Redis {
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

mod plain {
    use super::*;
    conformance_tests!(Redis::start(false, false).await);
}

mod with_deny_cache_and_coalescing {
    use super::*;
    conformance_tests!(Redis::start(true, true).await);
}
