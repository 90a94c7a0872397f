//! Redis's port of the rebase (`rebase.lua`: exact in doubles by a long division) against
//! `Gcra::rebase_in`: a bucket written under one policy's numbers, read under another's by each
//! script that reads token buckets (`bucket.lua`, `decide.lua`, `settle.lua`), is written back
//! with the tat the pure function gives, for numbers up to the store's bounds (2^52 µs).
#![cfg(feature = "redis")]

use crate::rebase_ports::{MICROSECOND, fresh_key, micros, policies};

use std::sync::OnceLock;
use std::time::Duration;

use proptest::prelude::*;
use tollgate::algorithm::gcra::{Gcra, MAX_DEBT};
use tollgate::store::settle::{Adjustment, Settle};
use tollgate::{Check, Clock, ManualClock, Nanos, Policy, RedisStore, Store};
use tollgate_testkit::{TestRedis, redis_cmd};

fn redis() -> &'static TestRedis {
    static REDIS: OnceLock<TestRedis> = OnceLock::new();
    REDIS.get_or_init(|| TestRedis::start().expect("start redis-server"))
}

proptest! {
    // Each case is a few Redis round trips.
    #![proptest_config(ProptestConfig::with_cases(96))]

    #[test]
    fn every_script_rebases_as_the_pure_function(
        old in policies(),
        new in policies(),
        share in 1u64..=1000,
        script in 0u8..3,
    ) {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a runtime");
        let checked = runtime.block_on(async {
            let clock = ManualClock::new(Nanos::new(1_700_000_000_123_456_000));
            let store = RedisStore::builder(redis().url())
                .test_clock(clock.clone())
                .deny_cache(false)
                .coalesce(false)
                .timeout(Duration::from_secs(2))
                .build()
                .await
                .expect("connect");
            if store.supports(&old).is_err() || store.supports(&new).is_err() {
                return None;
            }
            let (o, n) = (old.at_resolution(MICROSECOND.as_duration()), new.at_resolution(MICROSECOND.as_duration()));
            let (t, tau) = (micros(o.emission_interval()), micros(o.tolerance()));
            let most = tau.max((2 * tau).min(MAX_DEBT.as_u64() / 1000));
            let backlog = (u128::from(most) * u128::from(share) / 1000).max(1) as u64;
            let now = clock.now().as_u64() / 1000;
            let key = fresh_key();
            let redis_key = format!("tollgate:v3:{{{key}}}:tb:=api");
            let value = format!("{} {t} {tau}", now + backlog);
            redis_cmd(redis().port(), &[b"SET", redis_key.as_bytes(), value.as_bytes()]).unwrap();
            let check = Check::new(new, key.as_bytes(), 0).named("api");
            match script {
                // bucket.lua: token buckets only.
                0 => {
                    store.decide(&[check]).await.expect("decided");
                }
                // decide.lua: a window beside it.
                1 => {
                    let window = Policy::fixed_window(5, Duration::from_secs(1)).unwrap();
                    let beside = Check::new(window, key.as_bytes(), 0).named("w");
                    store.decide(&[check, beside]).await.expect("decided");
                }
                // settle.lua: a refund of nothing.
                _ => {
                    store.settle(None, &[(check, Adjustment::Refund(0))]).await.expect("settled");
                }
            }
            let expected = Gcra::new(&n).rebase_in(
                &Gcra::new(&o),
                Nanos::new((now + backlog) * 1000),
                Nanos::new(now * 1000),
                MICROSECOND,
            );
            let stored = redis_cmd(redis().port(), &[b"GET", redis_key.as_bytes()]).unwrap();
            let want = (expected.as_u64() > now * 1000).then(|| {
                format!(
                    "{} {} {}",
                    expected.as_u64() / 1000,
                    micros(n.emission_interval()),
                    micros(n.tolerance())
                )
            });
            Some((stored.as_str().map(str::to_owned), want))
        });
        if let Some((stored, want)) = checked {
            // Rebased to full, the key is gone: a full bucket is a key never seen.
            prop_assert_eq!(stored, want);
        }
    }
}
