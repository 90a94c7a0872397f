//! The algorithms against exact reference models, over random sequences of (advance, cost).
//!
//! The token-bucket model is the textbook bucket in exact rational arithmetic: tokens refill
//! continuously at `rate`, capped at the capacity. Fed the rate of the *rounded* emission
//! interval, GCRA must agree with it on every field of every decision. Fed the exact rate
//! `refill / period`, it bounds what may ever be allowed: the rounding may only under-grant.

use std::time::Duration;

use num_bigint::BigInt;
use num_rational::BigRational;
use num_traits::{ToPrimitive, Zero};
use proptest::prelude::*;
use tollgate::algorithm::{BucketState, evaluate, gcra::Gcra};
use tollgate::{CheckError, Decision, ManualClock, MemoryStore, Nanos, Policy};

fn rat(n: u64) -> BigRational {
    BigRational::from_integer(BigInt::from(n))
}

fn ceil_u64(r: &BigRational) -> u64 {
    r.ceil().to_integer().to_u64().expect("fits")
}

fn floor_u64(r: &BigRational) -> u64 {
    r.floor().to_integer().to_u64().expect("fits")
}

/// The token bucket in exact arithmetic.
struct Bucket {
    capacity: BigRational,
    /// Tokens per nanosecond.
    rate: BigRational,
    tokens: BigRational,
    last: u64,
}

impl Bucket {
    fn new(capacity: u64, rate: BigRational) -> Bucket {
        Bucket {
            capacity: rat(capacity),
            rate,
            tokens: rat(capacity),
            last: 0,
        }
    }

    fn decide(&mut self, now: u64, cost: u64) -> Result<Decision, CheckError> {
        let capacity = self.capacity.to_integer().to_u64().expect("fits");
        if cost > capacity {
            return Err(CheckError::CostExceedsCapacity { cost, capacity });
        }
        let refilled = &self.tokens + rat(now - self.last) * &self.rate;
        self.tokens = refilled.min(self.capacity.clone());
        self.last = now;
        let allowed = cost == 0 || self.tokens >= rat(cost);
        // A peek says when one token would be there.
        let wanted = rat(cost.max(1));
        let mut retry = BigRational::zero();
        if self.tokens < wanted {
            retry = (&wanted - &self.tokens) / &self.rate;
        }
        if allowed {
            self.tokens -= rat(cost);
        }
        let reset = (&self.capacity - &self.tokens) / &self.rate;
        Ok(Decision::new(
            allowed,
            capacity,
            // In debt (after a charge), no whole token is left.
            floor_u64(&self.tokens.clone().max(BigRational::zero())),
            Duration::from_nanos(ceil_u64(&retry)),
            Duration::from_nanos(ceil_u64(&reset)),
        ))
    }
}

impl Bucket {
    /// Refills to `now`, then gives back `n` tokens, never above the capacity.
    fn refund(&mut self, now: u64, n: u64) {
        self.refill(now);
        self.tokens = (&self.tokens + rat(n)).min(self.capacity.clone());
    }

    /// Refills to `now`, then takes `n` tokens whatever it holds: it may go below zero, to
    /// minus its capacity at most (a bucket deeper than that stays as it is).
    fn charge(&mut self, now: u64, n: u64) {
        self.refill(now);
        let floor = -self.capacity.clone();
        if self.tokens > floor {
            self.tokens = (&self.tokens - rat(n)).max(floor);
        }
    }

    fn refill(&mut self, now: u64) {
        let refilled = &self.tokens + rat(now - self.last) * &self.rate;
        self.tokens = refilled.min(self.capacity.clone());
        self.last = now;
    }
}

/// One step of a sequence with settlements.
#[derive(Debug, Clone, Copy)]
enum Op {
    Decide(u64),
    Refund(u64),
    Charge(u64),
}

fn ops(policy: Policy) -> impl Strategy<Value = Vec<(u64, Op)>> {
    let period = Nanos::from(policy.period()).as_u64();
    let capacity = policy.capacity();
    prop::collection::vec(
        (
            prop_oneof![Just(0u64), 0..period / 4 + 1, 0..2 * period],
            prop_oneof![
                4 => (0..=capacity).prop_map(Op::Decide),
                2 => (0..=2 * capacity).prop_map(Op::Refund),
                1 => (0..=2 * capacity).prop_map(Op::Charge),
            ],
        ),
        1..80,
    )
}

fn policy_and_ops() -> impl Strategy<Value = (Policy, Vec<(u64, Op)>)> {
    policies().prop_flat_map(|p| (Just(p), ops(p)))
}

fn policies() -> impl Strategy<Value = Policy> {
    (1u64..=20, 1u64..=20, 1u64..=5_000_000_000).prop_filter_map("valid", |(c, r, p)| {
        Policy::token_bucket(c, r, Duration::from_nanos(p)).ok()
    })
}

fn steps(policy: Policy) -> impl Strategy<Value = Vec<(u64, u64)>> {
    let period = Nanos::from(policy.period()).as_u64();
    let capacity = policy.capacity();
    prop::collection::vec(
        (
            prop_oneof![Just(0u64), 0..period / 4 + 1, 0..2 * period],
            prop_oneof![3 => 0..=capacity, 1 => Just(capacity + 1)],
        ),
        1..80,
    )
}

fn policy_and_steps() -> impl Strategy<Value = (Policy, Vec<(u64, u64)>)> {
    policies().prop_flat_map(|p| (Just(p), steps(p)))
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// GCRA and the exact bucket at GCRA's own (rounded) rate agree on every decision.
    #[test]
    fn gcra_equals_the_exact_bucket((policy, steps) in policy_and_steps()) {
        let t = Nanos::from(policy.emission_interval()).as_u64();
        let mut model = Bucket::new(policy.capacity(), BigRational::new(1.into(), t.into()));
        let gcra = Gcra::new(&policy);
        let mut tat = Nanos::ZERO;
        let mut now = 1_000_000_000_000u64;
        model.last = now;
        for (advance, cost) in steps {
            now += advance;
            let expected = model.decide(now, cost);
            let got = gcra.decide(tat, Nanos::new(now), cost).map(|o| {
                if o.allowed() {
                    tat = o.new_tat();
                }
                o.decision(true)
            });
            prop_assert_eq!(got, expected, "at {} cost {}", now, cost);
        }
    }

    /// The memory store decides exactly as the pure function does.
    #[test]
    fn memory_store_equals_the_exact_bucket((policy, steps) in policy_and_steps()) {
        let t = Nanos::from(policy.emission_interval()).as_u64();
        let start = 1_000_000_000_000u64;
        let clock = ManualClock::new(Nanos::new(start));
        let store = MemoryStore::builder().clock(clock.clone()).build();
        let mut model = Bucket::new(policy.capacity(), BigRational::new(1.into(), t.into()));
        model.last = start;
        let mut now = start;
        for (advance, cost) in steps {
            now += advance;
            clock.set(Nanos::new(now));
            let expected = model.decide(now, cost);
            let got = store.check(&policy, b"k", cost).map_err(|e| match e {
                tollgate::StoreError::Check(c) => c,
                other => panic!("memory store failed: {other}"),
            });
            prop_assert_eq!(got, expected, "at {} cost {}", now, cost);
        }
    }

    /// Over any interval, allowed cost never exceeds a full bucket plus the exact refill.
    #[test]
    fn never_over_grants_at_the_exact_rate((policy, steps) in policy_and_steps()) {
        let gcra = Gcra::new(&policy);
        let (refill, period) = (policy.refill(), Nanos::from(policy.period()).as_u64());
        let mut tat = Nanos::ZERO;
        let mut now = 0u64;
        let mut allowed: Vec<(u64, u64)> = Vec::new();
        for (advance, cost) in steps {
            now += advance;
            if let Ok(o) = gcra.decide(tat, Nanos::new(now), cost)
                && o.allowed() {
                    tat = o.new_tat();
                    allowed.push((now, cost));
                }
        }
        for (i, &(t0, _)) in allowed.iter().enumerate() {
            let mut sum = 0;
            for &(t1, cost) in &allowed[i..] {
                sum += cost;
                let bound = rat(policy.capacity()) + rat(refill) * rat(t1 - t0) / rat(period);
                prop_assert!(rat(sum) <= bound, "{} allowed in [{}, {}]", sum, t0, t1);
            }
        }
    }

    /// With refunds and charges in the sequence, GCRA still equals the exact bucket (which
    /// never holds more than its capacity) on every decision.
    #[test]
    fn refunds_and_charges_equal_the_exact_bucket((policy, ops) in policy_and_ops()) {
        let t = Nanos::from(policy.emission_interval()).as_u64();
        let mut model = Bucket::new(policy.capacity(), BigRational::new(1.into(), t.into()));
        let gcra = Gcra::new(&policy);
        let mut tat = Nanos::ZERO;
        let mut now = 1_000_000_000_000u64;
        model.last = now;
        for (advance, op) in ops {
            now += advance;
            let at = Nanos::new(now);
            match op {
                Op::Decide(cost) => {
                    let expected = model.decide(now, cost);
                    let got = gcra.decide(tat, at, cost).map(|o| {
                        if o.allowed() {
                            tat = o.new_tat();
                        }
                        o.decision(true)
                    });
                    prop_assert_eq!(got, expected, "at {} cost {}", now, cost);
                }
                Op::Refund(n) => {
                    model.refund(now, n);
                    tat = gcra.refund(tat, at, n);
                }
                Op::Charge(n) => {
                    model.charge(now, n);
                    tat = gcra.charge(tat, at, n);
                }
            }
        }
    }

    /// Over any interval, tokens allowed minus tokens refunded never exceed a full bucket plus
    /// the exact refill, refunds in the sequence or not.
    #[test]
    fn refunds_never_over_grant_at_the_exact_rate((policy, ops) in policy_and_ops()) {
        let gcra = Gcra::new(&policy);
        let (refill, period) = (policy.refill(), Nanos::from(policy.period()).as_u64());
        let mut tat = Nanos::ZERO;
        let mut now = 0u64;
        // (time, tokens allowed (+) or refunded (-)), refunds counted as what the bucket took
        // back: the tokens (or fraction of one) it was short of full, at most the amount.
        let mut flow: Vec<(u64, BigRational)> = Vec::new();
        let t = Nanos::from(policy.emission_interval()).as_u64();
        for (advance, op) in ops {
            now += advance;
            let at = Nanos::new(now);
            match op {
                Op::Decide(cost) => {
                    if let Ok(o) = gcra.decide(tat, at, cost)
                        && o.allowed() {
                            tat = o.new_tat();
                            flow.push((now, rat(cost)));
                        }
                }
                Op::Refund(n) => {
                    let before = tat;
                    tat = gcra.refund(tat, at, n);
                    let back = rat(before.as_u64().saturating_sub(tat.as_u64())) / rat(t);
                    flow.push((now, -back));
                }
                // Charges are the debt term of the bound; this property is about refunds.
                Op::Charge(_) => {}
            }
        }
        for (i, (t0, _)) in flow.iter().enumerate() {
            let mut sum = BigRational::zero();
            for (t1, tokens) in &flow[i..] {
                sum += tokens;
                let bound = rat(policy.capacity()) + rat(refill) * rat(t1 - t0) / rat(period);
                prop_assert!(sum <= bound, "{} net allowed in [{}, {}]", sum, t0, t1);
            }
        }
    }

    /// The sliding log allows exactly what a brute-force count over the window allows.
    #[test]
    fn sliding_log_is_exact(
        limit in 1u64..10,
        window in 10u64..1_000,
        steps in prop::collection::vec((0u64..400, 0u64..4), 1..100),
    ) {
        let policy = Policy::sliding_window_log(limit, Duration::from_nanos(window)).unwrap();
        let mut state = BucketState::new(&policy);
        let mut log: Vec<(u64, u64)> = Vec::new();
        let mut now = 10_000u64;
        for (advance, cost) in steps {
            now += advance;
            let outcome = evaluate(&policy, &state, Nanos::new(now), cost);
            if cost > limit {
                prop_assert!(outcome.is_err());
                continue;
            }
            let outcome = outcome.unwrap();
            let used: u64 = log.iter().filter(|(ts, _)| ts + window > now).map(|(_, c)| c).sum();
            prop_assert_eq!(outcome.allowed(), cost == 0 || used + cost <= limit);
            if outcome.allowed() {
                outcome.apply(&mut state);
                if cost > 0 {
                    log.push((now, cost));
                }
            }
        }
    }

    /// Fixed windows count per epoch-aligned window.
    #[test]
    fn fixed_window_counts_per_window(
        limit in 1u64..10,
        window in 10u64..1_000,
        steps in prop::collection::vec((0u64..400, 0u64..4), 1..100),
    ) {
        let policy = Policy::fixed_window(limit, Duration::from_nanos(window)).unwrap();
        let mut state = BucketState::new(&policy);
        let mut counted: Vec<(u64, u64)> = Vec::new();
        let mut now = 10_000u64;
        for (advance, cost) in steps {
            now += advance;
            let Ok(outcome) = evaluate(&policy, &state, Nanos::new(now), cost) else {
                prop_assert!(cost > limit);
                continue;
            };
            let used: u64 = counted.iter().filter(|(w, _)| *w == now / window).map(|(_, c)| c).sum();
            prop_assert_eq!(outcome.allowed(), cost == 0 || used + cost <= limit);
            if outcome.allowed() {
                outcome.apply(&mut state);
                counted.push((now / window, cost));
            }
        }
    }
}
