//! Any clock reading, over the whole `u64` range, on every algorithm (issue 43, point 4): a
//! reading past `MAX_NOW` is refused with `ClockOutOfRange` and changes nothing; any other is
//! decided. Nothing hangs (a reading at or past 2^63 ns once set a memory cell's lock bit, on
//! which the next check of the key spun forever), nothing panics, and a refused reading leaves
//! every bucket as a store that never saw it has it.

use std::sync::mpsc;
use std::time::Duration;

use proptest::prelude::*;
use tollgate::algorithm::gcra::MAX_NOW;
use tollgate::algorithm::{BucketState, evaluate};
use tollgate::store::settle::Adjustment;
use tollgate::{
    Check, CheckError, ErrorKind, ManualClock, MemoryStore, Nanos, Policy, StoreError, Verdict,
};

/// Readings everywhere, and around the edges: `MAX_NOW`, 2^63 (a cell's lock bit), `u64::MAX`.
fn readings() -> impl Strategy<Value = u64> {
    let max = MAX_NOW.as_u64();
    prop_oneof![
        any::<u64>(),
        0..=max,
        max - 1_000_000..=max + 1_000_000,
        (1u64 << 63) - 1_000..=(1u64 << 63) + 1_000,
        u64::MAX - 1_000..=u64::MAX,
        Just(0),
        Just(max),
        Just(max + 1),
        Just(1 << 63),
        Just(u64::MAX),
    ]
}

fn policy(algorithm: u8) -> Policy {
    let period = Duration::from_millis(700);
    match algorithm {
        0 => Policy::token_bucket(3, 2, period),
        1 => Policy::fixed_window(3, period),
        2 => Policy::sliding_window_log(3, period),
        _ => Policy::sliding_window_counter(3, period),
    }
    .unwrap()
}

/// What a store does at one reading.
#[derive(Debug, Clone, Copy)]
enum Op {
    /// A check named by the policy's numbers.
    Check(u8, u64),
    /// A check of a named bucket (its numbers may change: another cell in memory).
    Named(u8, u64),
    /// Two policies of one key together.
    Both(u8, u8, u64),
    /// A charge (true) or a refund of a token bucket.
    Settle(bool, u64),
}

fn ops() -> impl Strategy<Value = Op> {
    prop_oneof![
        (0u8..4, 0u64..=3).prop_map(|(a, c)| Op::Check(a, c)),
        (0u8..4, 0u64..=3).prop_map(|(a, c)| Op::Named(a, c)),
        (0u8..4, 0u8..4, 0u64..=3).prop_map(|(a, b, c)| Op::Both(a, b, c)),
        (any::<bool>(), 0u64..=4).prop_map(|(charge, n)| Op::Settle(charge, n)),
    ]
}

fn run(store: &MemoryStore<ManualClock>, op: Op) -> Result<Verdict, StoreError> {
    match op {
        Op::Check(a, cost) => store.decide_sync(&[Check::new(policy(a), b"k", cost)]),
        Op::Named(a, cost) => store.decide_sync(&[Check::new(policy(a), b"k", cost).named("n")]),
        Op::Both(a, b, cost) => store.decide_sync(&[
            Check::new(policy(a), b"k", cost).named("x"),
            Check::new(policy(b), b"k", cost).named("y"),
        ]),
        Op::Settle(charge, n) => {
            let adjustment = if charge {
                Adjustment::Charge(n)
            } else {
                Adjustment::Refund(n)
            };
            store.settle_sync(None, &[(Check::new(policy(0), b"k", 0), adjustment)])
        }
    }
}

/// Runs `f` on a thread of its own, failing the test if it does not return within a few
/// seconds (a check that hangs spins forever: the thread is left to it).
fn within<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    rx.recv_timeout(Duration::from_secs(10))
        .expect("a decision hung (or panicked) at this clock reading")
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// The pure algorithms: refused past `MAX_NOW`, decided up to it.
    #[test]
    fn every_algorithm_decides_or_refuses_any_reading(
        steps in prop::collection::vec((readings(), 0u8..4, 0u64..=3), 1..40),
    ) {
        let mut states: Vec<BucketState> = (0..4).map(|a| BucketState::new(&policy(a))).collect();
        for (now, algorithm, cost) in steps {
            let p = policy(algorithm);
            let state = &mut states[usize::from(algorithm)];
            match evaluate(&p, state, Nanos::new(now), cost) {
                Ok(outcome) => {
                    prop_assert!(now <= MAX_NOW.as_u64(), "decided at {}", now);
                    if outcome.allowed() && cost > 0 {
                        outcome.apply(state);
                    }
                }
                Err(CheckError::ClockOutOfRange { now: at, max }) => {
                    prop_assert!(now > MAX_NOW.as_u64());
                    prop_assert_eq!(Nanos::from(at).as_u64(), now);
                    prop_assert_eq!(Nanos::from(max), MAX_NOW);
                }
                Err(other) => prop_assert!(false, "{}", other),
            }
        }
    }

    /// The memory store, every algorithm, named or not, one bucket or two, settlements: a store
    /// that sees every reading answers as one that saw only those in range, and refuses the
    /// others.
    #[test]
    fn the_memory_store_decides_or_refuses_any_reading(
        steps in prop::collection::vec((readings(), ops()), 1..40),
    ) {
        let (all, valid) = within(move || {
            let (clock, in_range) = (ManualClock::new(Nanos::ZERO), ManualClock::new(Nanos::ZERO));
            let all = MemoryStore::builder().clock(clock.clone()).build();
            let valid = MemoryStore::builder().clock(in_range.clone()).build();
            let mut answers = (Vec::new(), Vec::new());
            for (now, op) in steps {
                clock.set(Nanos::new(now));
                let got = run(&all, op);
                if now > MAX_NOW.as_u64() {
                    let refused = matches!(
                        &got,
                        Err(e @ StoreError::Check(CheckError::ClockOutOfRange { .. }))
                            if e.kind() == ErrorKind::Incompatible && !e.is_transient()
                    );
                    answers.0.push(format!("refused: {refused}"));
                    answers.1.push("refused: true".to_owned());
                } else {
                    in_range.set(Nanos::new(now));
                    answers.0.push(format!("{got:?}"));
                    answers.1.push(format!("{:?}", run(&valid, op)));
                }
            }
            answers
        });
        prop_assert_eq!(all, valid);
    }
}

/// Issue 43, point 4: a check at 2^63 ns wrote a `tat` with the cell's lock bit set, and the
/// next check of that key spun forever in a release build. Now both are refused, and the key
/// is decided as before at a reading in range.
#[test]
fn a_reading_at_2_pow_63_is_refused_and_the_next_check_returns() {
    let verdicts = within(|| {
        let clock = ManualClock::new(Nanos::new(1 << 63));
        let store = MemoryStore::builder().clock(clock.clone()).build();
        let check = [Check::new(policy(0), b"k", 1)];
        let first = store.decide_sync(&check);
        let second = store.decide_sync(&check);
        clock.set(Nanos::new(1_700_000_000_000_000_000));
        (first, second, store.decide_sync(&check))
    });
    for refused in [verdicts.0, verdicts.1] {
        let error = refused.unwrap_err();
        assert!(
            matches!(error, StoreError::Check(CheckError::ClockOutOfRange { .. })),
            "{error}"
        );
        assert!(
            error.to_string().contains("9223372036.854775808s"),
            "{error}"
        );
    }
    assert_eq!(verdicts.2.unwrap().decisions()[0].remaining(), 2);
}
