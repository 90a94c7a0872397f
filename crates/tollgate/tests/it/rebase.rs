//! A change of a named bucket's numbers keeps its level (issue 44, point 2), against exact
//! rational arithmetic: for any two policies and any state, after the change `remaining` is
//! `min(old level, new capacity)` (0 in debt), `retry_after` is what the new pace needs from
//! that level, a bucket not in debt never waits longer than the new policy's own worst case,
//! and a rate as high or higher never lengthens a wait.

use std::time::Duration;

use num_bigint::BigInt;
use num_rational::BigRational;
use num_traits::{Signed, ToPrimitive, Zero};
use proptest::prelude::*;
use tollgate::algorithm::gcra::{Gcra, MAX_DEBT};
use tollgate::{Check, ManualClock, MemoryStore, Nanos, Policy};

fn rat(n: u64) -> BigRational {
    BigRational::from_integer(BigInt::from(n))
}

fn nanos(d: Duration) -> u64 {
    Nanos::from(d).as_u64()
}

/// Policies from a token a nanosecond to bursts that take years to refill.
fn policies() -> impl Strategy<Value = Policy> {
    (
        prop_oneof![1u64..=10, 1u64..=1_000_000],
        prop_oneof![1u64..=10, 1u64..=1_000_000],
        prop_oneof![
            1u64..=1_000_000,
            1u64..=100_000_000_000,
            1u64..=100_000_000_000_000_000
        ],
    )
        .prop_filter_map("valid", |(c, r, p)| {
            Policy::token_bucket(c, r, Duration::from_nanos(p)).ok()
        })
}

/// The old level in tokens of a bucket whose `tat` is `backlog` past now under `policy`.
fn level(policy: &Policy, backlog: u64) -> BigRational {
    let (t, tau) = (nanos(policy.emission_interval()), nanos(policy.tolerance()));
    (rat(tau) - rat(backlog)) / rat(t)
}

/// The exact wait for `cost` tokens from `level` at a token every `t` nanoseconds, rounded up.
fn wait(level: &BigRational, cost: u64, t: u64) -> u64 {
    let missing = rat(cost) - level;
    if missing.is_positive() {
        (missing * rat(t))
            .ceil()
            .to_integer()
            .to_u64()
            .expect("fits")
    } else {
        0
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2048))]

    #[test]
    fn a_change_of_numbers_keeps_the_level(
        old in policies(),
        new in policies(),
        share in 0u64..=1000,
        idle in 0u64..=1_000_000_000,
        cost in 1u64..=1_000_000,
    ) {
        let t = nanos(old.emission_interval());
        let (t_new, tau_new) = (nanos(new.emission_interval()), nanos(new.tolerance()));
        // Any state short of full down to the deepest debt a charge leaves (tat <= now + 2 tau,
        // and MAX_DEBT), in steps of a thousandth. (A full bucket, tat <= now, is a key never
        // seen, which every store drops: full under any numbers, below.)
        let backlog = ((u128::from(deepest_of(&old)) * u128::from(share) / 1000) as u64).max(1);
        let now = Nanos::new(1 << 61);
        let tat = now + Nanos::new(backlog);
        let (from, to) = (Gcra::new(&old), Gcra::new(&new));
        let rebased = to.rebase(&from, tat, now);
        let full = now - Nanos::new(idle);
        prop_assert_eq!(to.rebase(&from, full, now), full, "a full bucket is as never seen");

        // The level kept, capped at the new capacity; a debt kept up to what a bucket of the
        // new numbers can owe after any charge.
        let before = level(&old, backlog);
        let most_debt = rat(deepest_of(&new) - tau_new) / rat(t_new);
        let kept = before.clone().min(rat(new.capacity())).max(-most_debt);
        let peek = to.decide(rebased, now, 0).unwrap().decision(false);
        let expected_remaining = if kept.is_negative() {
            0
        } else {
            kept.floor().to_integer().to_u64().unwrap()
        };
        prop_assert_eq!(peek.remaining(), expected_remaining);

        let cost = cost.min(new.capacity());
        let got = nanos(to.decide(rebased, now, cost).unwrap().decision(false).retry_after());
        prop_assert_eq!(got, wait(&kept, cost, t_new), "the new pace from the kept level");
        if !before.is_negative() {
            prop_assert!(got <= cost * t_new, "longer than the new policy's own worst case");
        }
        if t_new <= t && cost <= old.capacity() {
            let was = nanos(from.decide(tat, now, cost).unwrap().decision(false).retry_after());
            prop_assert!(got <= was, "a higher rate lengthened a wait: {} > {}", got, was);
        }
        // Back under the old numbers: never a token more than it held; unless the change
        // filled it (a level at or above the new capacity), as a full bucket is a key never
        // seen, which every store drops.
        if kept >= rat(new.capacity()) {
            return Ok(());
        }
        let back = from.rebase(&to, rebased, now);
        let again = from.decide(back, now, 0).unwrap().decision(false).remaining();
        prop_assert!(BigRational::from_integer(again.into()) <= before.max(BigRational::zero()));
    }

    /// The memory store's named buckets carry their level over a change, as the pure rebase
    /// says.
    #[test]
    fn the_memory_store_keeps_the_level_of_a_named_bucket(
        old in policies(),
        new in policies(),
        spent in 0u64..=1_000_000,
        later in 0u64..=10_000_000_000,
    ) {
        let start = Nanos::new(1 << 60);
        let clock = ManualClock::new(start);
        let store = MemoryStore::builder().clock(clock.clone()).build();
        let spent = spent.min(old.capacity());
        let check = |policy: Policy, cost| Check::new(policy, b"k", cost).named("api");
        let run = |c: Check<'_>| store.decide_sync(&[c]).unwrap().decisions()[0];
        prop_assert!(run(check(old, spent)).allowed());
        let (from, to) = (Gcra::new(&old), Gcra::new(&new));
        let tat = from.decide(Nanos::ZERO, start, spent).unwrap().new_tat();
        let now = start + Nanos::new(later);
        clock.set(now);
        let expected = to.decide(to.rebase(&from, tat, now), now, 0).unwrap().decision(false);
        prop_assert_eq!(run(check(new, 0)), expected);
    }
}

fn deepest_of(policy: &Policy) -> u64 {
    let tau = nanos(policy.tolerance());
    tau.max((2 * u128::from(tau)).min(u128::from(MAX_DEBT.as_u64())) as u64)
}
