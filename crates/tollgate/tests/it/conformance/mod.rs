//! The store conformance suite: every store must decide exactly as the pure model does.
//!
//! A store under test comes with a manual clock ([`Harness::advance`]). Each case drives the
//! store and a [`Model`] (the pure `decide_all` over local states) with the same checks at the
//! same times and compares every decision. Cases use their own keys, so one store can run them
//! all. `conformance_tests!(harness_expr)` expands one `#[tokio::test]` per case.

#![allow(dead_code, unreachable_pub)]

use std::collections::HashMap;
use std::time::Duration;

use proptest::prelude::*;

use tollgate::algorithm::gcra::Gcra;
use tollgate::algorithm::{BucketState, decide_all};
use tollgate::store::settle::{Adjustment, Once, Settle, reserve};
use tollgate::{Algorithm, Check, CheckError, Decision, Nanos, Policy, Store, StoreError, Verdict};

/// A store with a clock the test moves.
pub trait Harness {
    type S: Store;
    fn store(&self) -> &Self::S;
    /// Moves the store's clock forward.
    fn advance(&self, by: Duration);
    /// The store's clock now.
    fn now(&self) -> Nanos;
    /// The unit of the store's clock (Redis counts in microseconds): the model rounds the
    /// emission interval and the period up to it ([`Policy::at_resolution`]), reads time in
    /// whole units, and rounds the waits it answers up to whole units, as the store does (a
    /// sliding counter's retry falls between ticks; a clock in units first reads it at the
    /// next whole unit).
    fn resolution(&self) -> Nanos {
        Nanos::new(1)
    }
}

/// What names a bucket besides its key: its policy's name and algorithm, or its numbers.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum Name {
    Named(String, Algorithm),
    Numbers(Policy),
}

fn bucket(c: &Check<'_>) -> (Name, Vec<u8>) {
    let name = match c.name() {
        Some(n) => Name::Named(n.to_owned(), c.policy().algorithm()),
        None => Name::Numbers(*c.policy()),
    };
    (name, c.key().to_vec())
}

/// The pure model: the algorithms over a map of states, each with the numbers it was last
/// written under (a named bucket's may change: its state is then rebased, and written so).
#[derive(Default)]
pub struct Model {
    states: HashMap<(Name, Vec<u8>), (BucketState, Policy)>,
}

impl Model {
    /// The state of `c`'s bucket as a bucket of `policy` (its numbers at the store's unit),
    /// rebased as the store does in its unit.
    fn state(&self, c: &Check<'_>, policy: &Policy, now: Nanos, unit: Nanos) -> BucketState {
        match self.states.get(&bucket(c)) {
            Some((BucketState::TokenBucket(tat), under))
                if policy.algorithm() == Algorithm::TokenBucket =>
            {
                let tat = Gcra::new(policy).rebase_in(&Gcra::new(under), *tat, now, unit);
                BucketState::TokenBucket(tat)
            }
            Some((state, _)) => state.clone(),
            None => BucketState::new(policy),
        }
    }
}

impl Model {
    pub fn decide(
        &mut self,
        checks: &[Check<'_>],
        now: Nanos,
        unit: Nanos,
    ) -> Result<Verdict, CheckError> {
        let now = Nanos::new(now.as_u64() / unit.as_u64() * unit.as_u64());
        let policies: Vec<Policy> = checks
            .iter()
            .map(|c| c.policy().at_resolution(unit.as_duration()))
            .collect();
        for (index, c) in checks.iter().enumerate() {
            if checks[..index].iter().any(|d| d.same_bucket(c)) {
                return Err(CheckError::DuplicateBucket { index });
            }
        }
        let mut states: Vec<BucketState> = checks
            .iter()
            .zip(&policies)
            .map(|(c, p)| self.state(c, p, now, unit))
            .collect();
        let pairs: Vec<_> = policies
            .iter()
            .zip(checks)
            .map(|(p, c)| (p, c.cost()))
            .collect();
        let verdict = decide_all(&pairs, &mut states, now)?;
        for ((c, s), p) in checks.iter().zip(states).zip(&policies) {
            self.states.insert(bucket(c), (s, *p));
        }
        let whole = |d: Duration| {
            let n = Nanos::from(d).as_u64();
            Duration::from_nanos(n.div_ceil(unit.as_u64()) * unit.as_u64())
        };
        let decisions = verdict.decisions().iter().map(|d| {
            let (retry, reset) = (whole(d.retry_after()), whole(d.reset_after()));
            Decision::new(d.allowed(), d.limit(), d.remaining(), retry, reset)
        });
        Ok(Verdict::new(decisions.collect()))
    }
}

impl Model {
    /// Refunds and charges, as [`Settle::settle`] without a once-id.
    pub fn settle(
        &mut self,
        adjustments: &[(Check<'_>, Adjustment)],
        now: Nanos,
        unit: Nanos,
    ) -> Verdict {
        let now = Nanos::new(now.as_u64() / unit.as_u64() * unit.as_u64());
        let mut decisions = Vec::new();
        for (c, adjustment) in adjustments {
            let policy = c.policy().at_resolution(unit.as_duration());
            let gcra = Gcra::new(&policy);
            let tat = match self.state(c, &policy, now, unit) {
                BucketState::TokenBucket(tat) => tat,
                _ => Nanos::ZERO,
            };
            let tat = match *adjustment {
                Adjustment::Refund(n) => gcra.refund(tat, now, n),
                Adjustment::Charge(n) => gcra.charge(tat, now, n),
            };
            self.states
                .insert(bucket(c), (BucketState::TokenBucket(tat), policy));
            let d = gcra.decide(tat, now, 0).unwrap().decision(false);
            let n = Nanos::from(d.reset_after()).as_u64();
            let reset = Duration::from_nanos(n.div_ceil(unit.as_u64()) * unit.as_u64());
            decisions.push(Decision::new(
                d.allowed(),
                d.limit(),
                d.remaining(),
                d.retry_after(),
                reset,
            ));
        }
        Verdict::new(decisions)
    }

    pub fn reset(&mut self, checks: &[Check<'_>]) {
        for c in checks {
            self.states.remove(&bucket(c));
        }
    }
}

/// Drives a store and the model side by side.
pub struct Driver<'h, H: Harness> {
    pub h: &'h H,
    pub model: Model,
}

impl<'h, H: Harness> Driver<'h, H> {
    pub fn new(h: &'h H) -> Self {
        Driver {
            h,
            model: Model::default(),
        }
    }

    /// Decides on both and asserts they agree; returns the store's verdict.
    pub async fn decide(&mut self, checks: &[Check<'_>]) -> Result<Verdict, StoreError> {
        let expected = self.model.decide(checks, self.h.now(), self.h.resolution());
        let got = self.h.store().decide(checks).await;
        match (&got, &expected) {
            (Ok(g), Ok(e)) => assert_eq!(g, e, "store and model disagree on {checks:?}"),
            (Err(StoreError::Check(g)), Err(e)) => assert_eq!(g, e),
            _ => panic!("store answered {got:?}, model {expected:?} for {checks:?}"),
        }
        got
    }

    /// One check; asserts agreement and returns whether it was allowed.
    pub async fn check(&mut self, policy: Policy, key: &[u8], cost: u64) -> bool {
        let v = self
            .decide(&[Check::new(policy, key, cost)])
            .await
            .expect("store failed");
        v.allowed()
    }

    /// One check of the bucket named `name`; asserts agreement and returns the decision.
    pub async fn named(
        &mut self,
        name: &str,
        policy: Policy,
        key: &[u8],
        cost: u64,
    ) -> tollgate::Decision {
        let v = self
            .decide(&[Check::new(policy, key, cost).named(name)])
            .await
            .expect("store failed");
        v.decisions()[0]
    }
}

impl<H: Harness> Driver<'_, H>
where
    H::S: Settle,
{
    /// Settles on both and asserts they agree.
    pub async fn settle(&mut self, adjustments: &[(Check<'_>, Adjustment)]) -> Verdict {
        let expected = self
            .model
            .settle(adjustments, self.h.now(), self.h.resolution());
        let got = self
            .h
            .store()
            .settle(None, adjustments)
            .await
            .expect("settle failed");
        assert_eq!(got, expected, "store and model disagree on {adjustments:?}");
        got
    }

    pub async fn reset(&mut self, checks: &[Check<'_>]) {
        self.model.reset(checks);
        self.h.store().reset(checks).await.expect("reset failed");
    }
}

/// Policies as (limit, width in ns), and steps of (which policy, advance in ns, cost).
pub type Changes = (Vec<(u64, u64)>, Vec<(usize, u64, u64)>);

/// [`Changes`] for one named sliding counter whose numbers change under it: widths of both
/// scales, so a change carries counts that slide out over a few steps or over many.
pub fn changing_counter() -> impl Strategy<Value = Changes> {
    let policy = (
        1u64..=6,
        prop_oneof![1_000u64..50_000, 1_000_000u64..3_000_000_000],
    );
    prop::collection::vec(policy, 2..4).prop_flat_map(|policies| {
        let widest = policies.iter().map(|&(_, w)| w).max().unwrap_or(1_000);
        let step = (
            0..policies.len(),
            prop_oneof![Just(0u64), 0..1_000u64, 0..=widest * 3 / 2],
            0..=7u64,
        );
        (Just(policies), prop::collection::vec(step, 1..48))
    })
}

pub fn per_second(capacity: u64, refill: u64) -> Policy {
    Policy::token_bucket(capacity, refill, Duration::from_secs(1)).unwrap()
}

pub async fn burst_then_deny<H: Harness>(h: &H) {
    let mut d = Driver::new(h);
    let p = per_second(10, 10);
    for _ in 0..10 {
        assert!(d.check(p, b"conf:burst", 1).await);
    }
    assert!(!d.check(p, b"conf:burst", 1).await);
}

pub async fn refill_after_retry_after<H: Harness>(h: &H) {
    let mut d = Driver::new(h);
    let p = per_second(3, 3);
    for _ in 0..3 {
        assert!(d.check(p, b"conf:refill", 1).await);
    }
    let v = d.decide(&[Check::new(p, b"conf:refill", 2)]).await.unwrap();
    assert!(!v.allowed());
    let wait = v.retry_after();
    h.advance(wait - Duration::from_nanos(1));
    assert!(!d.check(p, b"conf:refill", 2).await);
    h.advance(Duration::from_nanos(1));
    assert!(d.check(p, b"conf:refill", 2).await);
    h.advance(Duration::from_secs(5));
    assert!(d.check(p, b"conf:refill", 3).await);
}

pub async fn peek_and_denial_take_nothing<H: Harness>(h: &H) {
    let mut d = Driver::new(h);
    let p = per_second(5, 1);
    assert!(d.check(p, b"conf:peek", 0).await);
    assert!(d.check(p, b"conf:peek", 3).await);
    assert!(d.check(p, b"conf:peek", 0).await);
    assert!(!d.check(p, b"conf:peek", 3).await);
    assert!(d.check(p, b"conf:peek", 2).await);
    assert!(d.check(p, b"conf:peek", 0).await);
}

pub async fn cost_over_capacity_is_an_error<H: Harness>(h: &H) {
    let mut d = Driver::new(h);
    let p = per_second(5, 5);
    let err = d
        .decide(&[Check::new(p, b"conf:over", 6)])
        .await
        .unwrap_err();
    assert!(!err.is_transient());
    assert!(d.check(p, b"conf:over", 5).await, "the error took nothing");
}

pub async fn keys_and_policies_are_separate_buckets<H: Harness>(h: &H) {
    let mut d = Driver::new(h);
    let (a, b) = (per_second(2, 1), per_second(3, 1));
    assert!(d.check(a, b"conf:sep", 2).await);
    assert!(!d.check(a, b"conf:sep", 1).await);
    assert!(d.check(b, b"conf:sep", 3).await, "same key, other policy");
    assert!(d.check(a, b"conf:sep2", 2).await, "same policy, other key");
}

pub async fn awkward_keys_never_collide<H: Harness>(h: &H) {
    let mut d = Driver::new(h);
    let p = per_second(1, 1);
    let long = vec![b'x'; 1024];
    let keys: [&[u8]; 9] = [
        b"conf:k",
        b"conf:k ",
        b"conf:{k}",
        b"conf:k:1",
        b"conf:k\n1",
        b"conf:\x00\xff",
        b"",
        b"conf:\xe2\x82\xac",
        &long,
    ];
    for key in keys {
        assert!(d.check(p, key, 1).await, "first use of {key:?}");
    }
    for key in keys {
        assert!(!d.check(p, key, 1).await, "second use of {key:?}");
    }
}

pub async fn several_policies_all_or_nothing<H: Harness>(h: &H) {
    let mut d = Driver::new(h);
    let second = per_second(3, 3);
    let hour = Policy::token_bucket(4, 4, Duration::from_secs(3600)).unwrap();
    let checks = |cost| {
        [
            Check::new(second, b"conf:multi", cost),
            Check::new(hour, b"conf:multi", cost),
        ]
    };
    assert!(d.decide(&checks(2)).await.unwrap().allowed());
    // 1 left per second, 2 per hour: the per-second bucket denies, the hourly one is not charged.
    assert!(!d.decide(&checks(2)).await.unwrap().allowed());
    h.advance(Duration::from_secs(1));
    assert!(d.decide(&checks(2)).await.unwrap().allowed());
    h.advance(Duration::from_secs(1));
    let v = d.decide(&checks(1)).await.unwrap();
    assert!(!v.allowed(), "the hourly budget is spent");
    assert_eq!(
        v.decisions()[0].remaining(),
        3,
        "per-second bucket untouched"
    );
    // Per-user and global: different keys decided together.
    let user = [
        Check::new(second, b"conf:user", 1),
        Check::new(second, b"conf:global", 3),
    ];
    assert!(d.decide(&user).await.unwrap().allowed());
    assert!(!d.decide(&user).await.unwrap().allowed());
    assert!(
        d.check(second, b"conf:user", 2).await,
        "the user was not charged"
    );
}

pub async fn duplicate_bucket_is_an_error<H: Harness>(h: &H) {
    let mut d = Driver::new(h);
    let p = per_second(3, 3);
    let checks = [Check::new(p, b"conf:dup", 1), Check::new(p, b"conf:dup", 1)];
    assert!(d.decide(&checks).await.is_err());
}

pub async fn windows_decide_like_the_model<H: Harness>(h: &H) {
    let mut d = Driver::new(h);
    let w = Duration::from_millis(700);
    let policies = [
        Policy::fixed_window(4, w).unwrap(),
        Policy::sliding_window_log(4, w).unwrap(),
        Policy::sliding_window_counter(4, w).unwrap(),
    ];
    for p in policies {
        for step in 0..40u64 {
            d.check(p, b"conf:window", step % 3).await;
            h.advance(Duration::from_millis(37 * (step % 5)));
        }
    }
}

/// A named bucket keeps its level when its numbers change, capped at the new capacity, and
/// refills at the new pace from there: no fresh burst, never more than the new capacity.
pub async fn numbers_change_under_a_named_bucket<H: Harness>(h: &H) {
    let mut d = Driver::new(h);
    let key = b"conf:renamed";
    let slow = Policy::token_bucket(10, 1, Duration::from_secs(60)).unwrap();
    let fast = per_second(20, 20);
    assert!(d.named("api", slow, key, 10).await.allowed());
    // Raised to 20 per second: the spent bucket is still spent...
    let d1 = d.named("api", fast, key, 1).await;
    assert!(
        !d1.allowed(),
        "a change of numbers handed out a fresh burst"
    );
    assert_eq!(d1.remaining(), 0);
    // ...and refills at the new pace from where it stood: a token in 50 ms, not in a minute.
    assert!(d1.retry_after() <= Duration::from_millis(50));
    h.advance(d1.retry_after());
    assert!(d.named("api", fast, key, 1).await.allowed());
    h.advance(Duration::from_secs(1));
    let d2 = d.named("api", fast, key, 0).await;
    assert_eq!(d2.remaining(), 20, "full again, at the new capacity");
    assert!(d.named("api", fast, key, 15).await.allowed());
    // Lowered to 3: the bucket holds 5, capped at 3; it never holds more.
    let small = per_second(3, 3);
    assert_eq!(d.named("api", small, key, 0).await.remaining(), 3);
    h.advance(Duration::from_secs(60));
    assert_eq!(d.named("api", small, key, 0).await.remaining(), 3);
    // Back and forth under a spent bucket: never a token more than the level.
    assert!(d.named("api", small, key, 3).await.allowed());
    for policy in [fast, small, slow, fast] {
        assert_eq!(d.named("api", policy, key, 0).await.remaining(), 0);
    }
    // The unnamed bucket of the same numbers is another bucket.
    assert!(d.check(slow, key, 10).await);
}

/// Issue 44, point 2: under 3 per 30 s a denied key was told 9,956 ms; the limit raised to 6
/// every 10 s, it was told 20,804 ms. A raised limit never lengthens a wait: the level is
/// kept and refills at the new pace, so the wait is `ceil(9,956 ms × t' / t)`.
pub async fn a_raised_limit_never_lengthens_a_wait<H: Harness>(h: &H) {
    let mut d = Driver::new(h);
    let key = b"conf:raised";
    let before = Policy::token_bucket(3, 3, Duration::from_secs(30)).unwrap();
    let after = Policy::token_bucket(6, 6, Duration::from_secs(10)).unwrap();
    assert!(d.named("api", before, key, 3).await.allowed());
    h.advance(Duration::from_millis(44));
    let denied = d.named("api", before, key, 1).await;
    assert!(!denied.allowed());
    assert_eq!(denied.retry_after(), Duration::from_millis(9_956));
    let raised = d.named("api", after, key, 1).await;
    assert!(!raised.allowed(), "a raised limit handed out a fresh burst");
    assert_eq!(raised.remaining(), 0);
    // 9,956 ms × (10 s / 6) / 10 s, rounded up to the store's unit.
    let expected = Duration::from_nanos(1_659_333_334);
    assert!(
        raised.retry_after() <= denied.retry_after(),
        "a raised limit lengthened the wait: {:?}",
        raised.retry_after()
    );
    assert!(
        raised.retry_after() >= expected
            && raised.retry_after() - expected < Duration::from_micros(2)
    );
    h.advance(raised.retry_after());
    assert!(d.named("api", after, key, 1).await.allowed());
}

/// Named buckets are separate from each other and from unnamed ones.
pub async fn names_separate_buckets<H: Harness>(h: &H) {
    let mut d = Driver::new(h);
    let p = per_second(2, 1);
    let key = b"conf:names";
    assert!(d.named("a", p, key, 2).await.allowed());
    assert!(!d.named("a", p, key, 1).await.allowed());
    assert!(d.named("b", p, key, 2).await.allowed(), "another name");
    assert!(d.check(p, key, 2).await, "no name");
    // Two names of one key in one call: all or nothing.
    let both = [
        Check::new(p, key, 1).named("c"),
        Check::new(p, key, 1).named("a"),
    ];
    assert!(!d.decide(&both).await.unwrap().allowed());
    assert_eq!(
        d.named("c", p, key, 0).await.remaining(),
        2,
        "c was not charged"
    );
    // The same name twice in one call is one bucket named twice.
    let twice = [
        Check::new(p, key, 1).named("d"),
        Check::new(per_second(5, 5), key, 1).named("d"),
    ];
    assert!(matches!(
        d.h.store().decide(&twice).await,
        Err(StoreError::Check(CheckError::DuplicateBucket { index: 1 }))
    ));
    let bad = [Check::new(p, key, 1).named("")];
    assert!(matches!(
        d.h.store().decide(&bad).await,
        Err(StoreError::Check(CheckError::InvalidName { .. }))
    ));
}

/// Windows keep their counts when a named policy's numbers change.
pub async fn window_numbers_change_under_a_named_bucket<H: Harness>(h: &H) {
    let mut d = Driver::new(h);
    let key = b"conf:window-renamed";
    let pairs = [
        (
            Policy::fixed_window(6, Duration::from_secs(2)).unwrap(),
            Policy::fixed_window(3, Duration::from_millis(300)).unwrap(),
        ),
        (
            Policy::sliding_window_counter(6, Duration::from_secs(2)).unwrap(),
            Policy::sliding_window_counter(4, Duration::from_millis(300)).unwrap(),
        ),
        (
            Policy::sliding_window_log(6, Duration::from_secs(2)).unwrap(),
            Policy::sliding_window_log(3, Duration::from_millis(300)).unwrap(),
        ),
    ];
    for (a, b) in pairs {
        for step in 0..30u64 {
            let p = if step % 7 < 4 { a } else { b };
            d.named("w", p, key, step % 3).await;
            h.advance(Duration::from_millis(41 * (step % 4)));
        }
    }
}

/// A fixed window's limit raised by narrowing its width (10 per 10 s to 10 per 7 s): the count
/// of the old window ends with it, never with a later window of the new width, so a denial
/// waits no longer than it did (it once waited until the 7 s window's end, 4 s later).
pub async fn a_narrower_window_never_lengthens_a_wait<H: Harness>(h: &H) {
    let mut d = Driver::new(h);
    let key = b"conf:narrower";
    let ten = Policy::fixed_window(10, Duration::from_secs(10)).unwrap();
    let seven = Policy::fixed_window(10, Duration::from_secs(7)).unwrap();
    // To 1 s past a multiple of 70 s, where windows of both widths begin.
    let now = Nanos::from(Duration::from_secs(70)).as_u64();
    let past = h.now().as_u64() % now;
    h.advance(Duration::from_nanos(now - past + 1_000_000_000));
    assert!(d.named("w", ten, key, 6).await.allowed());
    h.advance(Duration::from_secs(7));
    assert!(d.named("w", seven, key, 1).await.allowed());
    h.advance(Duration::from_secs(1));
    let denied = d.named("w", seven, key, 5).await;
    assert!(!denied.allowed());
    assert_eq!(denied.retry_after(), Duration::from_secs(1));
    h.advance(denied.retry_after());
    assert!(d.named("w", seven, key, 5).await.allowed());
}

/// Issue 44: a sliding counter's limit raised by narrowing its width (3 per 1.2 s to 3 per
/// 0.7 s). The counts taken under 1.2 s slide out as 1.2 s windows would have let them, beside
/// the new width's: a denial waits 0.8 s, as it did before (it once waited 1.4 s, its counts
/// moved into a 0.7 s window and the one after it). Then more is taken under the new width.
pub async fn a_narrower_counter_never_lengthens_a_wait<H: Harness>(h: &H) {
    let mut d = Driver::new(h);
    let key = b"conf:narrower-counter";
    let before = Policy::sliding_window_counter(3, Duration::from_millis(1_200)).unwrap();
    let after = Policy::sliding_window_counter(3, Duration::from_millis(700)).unwrap();
    // To 1.2 s past a multiple of 8.4 s: a 1.2 s window begins, and a 0.7 s one 1.6 s later.
    let cycle = Nanos::from(Duration::from_millis(8_400)).as_u64();
    let past = h.now().as_u64() % cycle;
    h.advance(Duration::from_nanos(cycle - past + 1_200_000_000));
    assert!(d.named("c", before, key, 3).await.allowed());
    h.advance(Duration::from_millis(1_600));
    let denied = d.named("c", before, key, 3).await;
    assert!(!denied.allowed());
    assert_eq!(denied.retry_after(), Duration::from_millis(800));
    let narrowed = d.named("c", after, key, 3).await;
    assert!(
        !narrowed.allowed(),
        "a narrower window handed out a fresh burst"
    );
    assert_eq!(narrowed.remaining(), 1);
    assert_eq!(narrowed.retry_after(), Duration::from_millis(800));
    // The room left is taken under the new width; the old counts still free theirs at 0.8 s.
    assert!(d.named("c", after, key, 1).await.allowed());
    let full = d.named("c", after, key, 2).await;
    assert!(!full.allowed());
    assert_eq!(full.retry_after(), Duration::from_millis(800));
    h.advance(Duration::from_millis(799));
    assert!(!d.named("c", after, key, 2).await.allowed());
    h.advance(Duration::from_millis(1));
    assert!(d.named("c", after, key, 2).await.allowed());
    // Back to 1.2 s: the 0.7 s counts are carried in turn; the clock runs past all of them.
    for _ in 0..8 {
        d.named("c", before, key, 1).await;
        h.advance(Duration::from_millis(300));
    }
}

/// Reserve an estimate, commit what was used: the difference comes back, or is taken as debt.
pub async fn reservations_refunds_and_resets<H: Harness>(h: &H)
where
    H::S: Settle,
{
    let mut d = Driver::new(h);
    let budget = Policy::token_bucket(100, 100, Duration::from_secs(10)).unwrap();
    let key = b"conf:llm";
    let estimate = [Check::new(budget, key, 60).named("llm")];
    // The reservation is a decision like any other (the model decides it too).
    d.model.decide(&estimate, h.now(), h.resolution()).unwrap();
    let (verdict, reservation) = reserve(h.store(), &estimate).await.unwrap();
    assert!(verdict.allowed());
    assert_eq!(verdict.decisions()[0].remaining(), 40);
    // Used 25: 35 come back.
    let refund = [(
        Check::new(budget, key, 0).named("llm"),
        Adjustment::Refund(35),
    )];
    d.model.settle(&refund, h.now(), h.resolution());
    let after = reservation.unwrap().commit(h.store(), 25).await.unwrap();
    assert_eq!(after.decisions()[0].remaining(), 75);
    assert_eq!(d.named("llm", budget, key, 0).await.remaining(), 75);
    // Over the estimate: taken without a denial, into debt.
    let over = [(
        Check::new(budget, key, 0).named("llm"),
        Adjustment::Charge(120),
    )];
    let v = d.settle(&over).await;
    assert_eq!(v.decisions()[0].remaining(), 0);
    assert!(!d.named("llm", budget, key, 1).await.allowed(), "in debt");
    // 45 tokens of debt: four seconds refill 40 of them, not yet enough for one token; a
    // refund pays the rest.
    h.advance(Duration::from_secs(4));
    assert!(!d.named("llm", budget, key, 1).await.allowed());
    let back = [(
        Check::new(budget, key, 0).named("llm"),
        Adjustment::Refund(50),
    )];
    d.settle(&back).await;
    assert!(d.named("llm", budget, key, 1).await.allowed());
    // A refund never fills past the capacity.
    let lots = [(
        Check::new(budget, key, 0).named("llm"),
        Adjustment::Refund(1_000_000),
    )];
    assert_eq!(d.settle(&lots).await.decisions()[0].remaining(), 100);
    // Several buckets at once, and a reset.
    let second = per_second(5, 5);
    assert!(d.named("s", second, key, 5).await.allowed());
    assert!(d.named("llm", budget, key, 30).await.allowed());
    let both = [
        (Check::new(second, key, 0).named("s"), Adjustment::Refund(2)),
        (
            Check::new(budget, key, 0).named("llm"),
            Adjustment::Charge(10),
        ),
    ];
    let v = d.settle(&both).await;
    assert_eq!(
        (v.decisions()[0].remaining(), v.decisions()[1].remaining()),
        (2, 60)
    );
    d.reset(&[Check::new(second, key, 0).named("s")]).await;
    assert_eq!(d.named("s", second, key, 0).await.remaining(), 5);
    assert_eq!(
        d.named("llm", budget, key, 0).await.remaining(),
        60,
        "untouched"
    );
    // Cancel gives everything back.
    let estimate = [Check::new(second, key, 4).named("s")];
    d.model.decide(&estimate, h.now(), h.resolution()).unwrap();
    let (_, reservation) = reserve(h.store(), &estimate).await.unwrap();
    d.model.settle(
        &[(estimate[0], Adjustment::Refund(4))],
        h.now(),
        h.resolution(),
    );
    reservation.unwrap().cancel(h.store()).await.unwrap();
    assert_eq!(d.named("s", second, key, 0).await.remaining(), 5);
}

/// A settlement under a once-id happens at most once.
pub async fn a_settlement_happens_at_most_once<H: Harness>(h: &H)
where
    H::S: Settle,
{
    let mut d = Driver::new(h);
    let p = per_second(10, 1);
    let key = b"conf:once";
    assert!(d.named("o", p, key, 8).await.allowed());
    let refund = [(Check::new(p, key, 0).named("o"), Adjustment::Refund(5))];
    let once = Once::new(b"reservation-1", Duration::from_secs(600));
    d.model.settle(&refund, h.now(), h.resolution());
    let first = h.store().settle(Some(once), &refund).await.unwrap();
    assert_eq!(first.decisions()[0].remaining(), 7);
    let again = h.store().settle(Some(once), &refund).await.unwrap_err();
    assert!(matches!(
        again,
        StoreError::Check(CheckError::AlreadySettled)
    ));
    assert_eq!(
        d.named("o", p, key, 0).await.remaining(),
        7,
        "nothing changed"
    );
    // Windows cannot take refunds.
    let w = Policy::fixed_window(5, Duration::from_secs(1)).unwrap();
    let refused = [(Check::new(w, key, 0), Adjustment::Refund(1))];
    assert!(matches!(
        h.store().settle(None, &refused).await,
        Err(StoreError::Check(CheckError::Unsupported(_)))
    ));
}

/// Requests per minute and tokens per minute reserved together commit what each used: one
/// request and 1,200 tokens, never 1,200 of each (issue 43, point 1: the requests bucket was
/// charged 1,200). One `used` for both, a wrong count, a debt past the cap: refused, nothing
/// settled.
pub async fn a_commit_charges_each_bucket_its_own_use<H: Harness>(h: &H)
where
    H::S: Settle,
{
    let mut d = Driver::new(h);
    let rpm = Policy::token_bucket(60, 60, Duration::from_secs(60)).unwrap();
    let tpm = Policy::token_bucket(10_000, 10_000, Duration::from_secs(60)).unwrap();
    let key = b"conf:rpm-tpm";
    let estimate = [
        Check::new(rpm, key, 1).named("requests"),
        Check::new(tpm, key, 2_000).named("tokens"),
    ];
    d.model.decide(&estimate, h.now(), h.resolution()).unwrap();
    let (verdict, reservation) = reserve(h.store(), &estimate).await.unwrap();
    assert!(verdict.allowed());
    let reservation = reservation.unwrap();
    assert_eq!(reservation.reserved().collect::<Vec<_>>(), [1, 2_000]);
    // Each refusal settles nothing and hands the reservation back.
    let refused = reservation.commit(h.store(), 1_200).await.unwrap_err();
    assert!(
        matches!(
            refused.error(),
            StoreError::Check(CheckError::CommitNeedsEach)
        ),
        "{refused:?}"
    );
    let reservation = refused.into_reservation().expect("handed back");
    let refused = reservation.commit_each(h.store(), &[1]).await.unwrap_err();
    assert!(
        matches!(
            refused.error(),
            StoreError::Check(CheckError::UsedCount {
                reserved: 2,
                given: 1
            })
        ),
        "{refused:?}"
    );
    let reservation = refused.into_reservation().expect("handed back");
    let refused = reservation
        .commit_each(h.store(), &[62, 0])
        .await
        .unwrap_err();
    assert!(
        matches!(
            refused.error(),
            StoreError::Check(CheckError::UsedOverDebtCap {
                index: 0,
                used: 62,
                most: 61
            })
        ),
        "{refused:?}"
    );
    let reservation = refused.into_reservation().expect("handed back");
    assert_eq!(d.named("requests", rpm, key, 0).await.remaining(), 59);
    assert_eq!(d.named("tokens", tpm, key, 0).await.remaining(), 8_000);
    d.model.settle(
        &[(estimate[1], Adjustment::Refund(800))],
        h.now(),
        h.resolution(),
    );
    let after = reservation
        .commit_each(h.store(), &[1, 1_200])
        .await
        .unwrap();
    assert_eq!(after.decisions()[0].remaining(), 59, "one request");
    assert_eq!(after.decisions()[1].remaining(), 8_800, "1,200 tokens");
    assert_eq!(d.named("requests", rpm, key, 0).await.remaining(), 59);
    assert_eq!(d.named("tokens", tpm, key, 0).await.remaining(), 8_800);
    // The largest `used` allowed, one capacity into debt, is taken.
    let estimate = [Check::new(rpm, key, 1).named("requests")];
    d.model.decide(&estimate, h.now(), h.resolution()).unwrap();
    let (_, reservation) = reserve(h.store(), &estimate).await.unwrap();
    d.model.settle(
        &[(estimate[0], Adjustment::Charge(60))],
        h.now(),
        h.resolution(),
    );
    let after = reservation.unwrap().commit(h.store(), 61).await.unwrap();
    assert_eq!(after.decisions()[0].remaining(), 0);
    assert!(!d.named("requests", rpm, key, 1).await.allowed(), "in debt");
}

/// A settlement's id and time to live have one range on every store (issue 43, point 6: a ttl
/// Redis could not hold was `Incompatible` there and accepted in memory): each edge value gets
/// the same answer everywhere, and a refused one settles nothing.
pub async fn once_bounds_are_the_same_on_every_store<H: Harness>(h: &H)
where
    H::S: Settle,
{
    use tollgate::store::settle::{MAX_ONCE_ID, MAX_ONCE_TTL, MIN_ONCE_TTL};
    let mut d = Driver::new(h);
    let p = per_second(10, 1);
    let key = b"conf:once-bounds";
    assert!(d.named("ob", p, key, 5).await.allowed());
    let refund = [(Check::new(p, key, 0).named("ob"), Adjustment::Refund(1))];
    let nanosecond = Duration::from_nanos(1);
    let long_id = [b'i'; MAX_ONCE_ID + 1];
    let cases: [(&[u8], Duration, bool); 9] = [
        (b"ttl-zero", Duration::ZERO, false),
        (b"ttl-one-ns", nanosecond, false),
        (b"ttl-under-min", MIN_ONCE_TTL - nanosecond, false),
        (b"ttl-min", MIN_ONCE_TTL, true),
        (b"ttl-max", MAX_ONCE_TTL, true),
        (b"ttl-past-max", MAX_ONCE_TTL + nanosecond, false),
        (b"", Duration::from_secs(1), false),
        (&long_id[..MAX_ONCE_ID], Duration::from_secs(1), true),
        (&long_id, Duration::from_secs(1), false),
    ];
    let mut remaining = 5;
    for (id, ttl, accepted) in cases {
        let answer = h.store().settle(Some(Once::new(id, ttl)), &refund).await;
        if accepted {
            d.model.settle(&refund, h.now(), h.resolution());
            remaining += 1;
            let verdict = answer.unwrap_or_else(|e| panic!("ttl {ttl:?}, id {id:?}: {e}"));
            assert_eq!(verdict.decisions()[0].remaining(), remaining);
            // Remembered: the same id again is refused (not checked for the 1 ms ttl, which
            // Redis counts on its own clock: it may be over before the second call).
            if ttl >= Duration::from_secs(1) {
                let again = h.store().settle(Some(Once::new(id, ttl)), &refund).await;
                assert!(matches!(
                    again,
                    Err(StoreError::Check(CheckError::AlreadySettled))
                ));
            }
        } else {
            assert!(
                matches!(answer, Err(StoreError::Check(CheckError::InvalidOnce(_)))),
                "ttl {ttl:?}, id {id:?}: {answer:?}"
            );
        }
        assert_eq!(d.named("ob", p, key, 0).await.remaining(), remaining);
    }
}

/// A peek (cost 0) is always allowed, and its `retry_after` says when a cost of 1 would be:
/// at an empty bucket, and at one in debt (issue 28, point 8: it said 0).
pub async fn a_peek_says_when_the_next_token_comes<H: Harness>(h: &H)
where
    H::S: Settle,
{
    let mut d = Driver::new(h);
    let p = per_second(4, 4); // a token every 250 ms
    let key = b"conf:peek-wait";
    let peek = |d: tollgate::Decision| (d.allowed(), d.remaining(), d.retry_after());
    let ms = Duration::from_millis;
    assert_eq!(peek(d.named("p", p, key, 0).await), (true, 4, ms(0)));
    assert!(d.named("p", p, key, 4).await.allowed());
    assert_eq!(peek(d.named("p", p, key, 0).await), (true, 0, ms(250)));
    h.advance(ms(100));
    assert_eq!(peek(d.named("p", p, key, 0).await), (true, 0, ms(150)));
    // Two tokens of debt: 500 ms to pay them, then 150 ms to the next token.
    d.settle(&[(Check::new(p, key, 0).named("p"), Adjustment::Charge(2))])
        .await;
    assert_eq!(peek(d.named("p", p, key, 0).await), (true, 0, ms(650)));
    h.advance(ms(650));
    assert_eq!(peek(d.named("p", p, key, 0).await), (true, 1, ms(0)));
    assert!(d.named("p", p, key, 1).await.allowed());
}

/// The same for windows: when the window ends (fixed), when the oldest grant leaves (log),
/// when enough of the previous window has slid out (counter).
pub async fn a_window_peek_says_when_the_next_token_comes<H: Harness>(h: &H) {
    let mut d = Driver::new(h);
    let ms = Duration::from_millis;
    let second = Duration::from_secs(1);
    // Start on a whole second, where windows begin.
    let into = h.now().as_u64() % 1_000_000_000;
    if into > 0 {
        h.advance(Duration::from_nanos(1_000_000_000 - into));
    }
    let peek = |d: tollgate::Decision| (d.allowed(), d.remaining(), d.retry_after());

    let fixed = Policy::fixed_window(2, second).unwrap();
    assert!(d.named("f", fixed, b"conf:peek-fw", 2).await.allowed());
    h.advance(ms(300));
    let got = peek(d.named("f", fixed, b"conf:peek-fw", 0).await);
    assert_eq!(got, (true, 0, ms(700)));

    let log = Policy::sliding_window_log(2, second).unwrap();
    assert!(d.named("l", log, b"conf:peek-sl", 1).await.allowed());
    h.advance(ms(200));
    assert!(d.named("l", log, b"conf:peek-sl", 1).await.allowed());
    h.advance(ms(100));
    // The first grant leaves the window 1 s after it was made.
    let got = peek(d.named("l", log, b"conf:peek-sl", 0).await);
    assert_eq!(got, (true, 0, ms(700)));

    // On a window's start again.
    h.advance(ms(400));
    let counter = Policy::sliding_window_counter(2, second).unwrap();
    assert!(d.named("c", counter, b"conf:peek-sc", 2).await.allowed());
    h.advance(ms(1250));
    // 250 ms into the next window the estimate is 2 × 0.75 = 1.5: one more fits once the
    // previous window weighs 1 or less, at 500 ms.
    let got = peek(d.named("c", counter, b"conf:peek-sc", 0).await);
    assert_eq!(got, (true, 0, ms(250)));

    // A token bucket peeked beside a window (one call of Redis's general script).
    let bucket = per_second(4, 4);
    assert!(d.named("b", bucket, b"conf:peek-mix", 4).await.allowed());
    assert!(d.named("f", fixed, b"conf:peek-mix", 2).await.allowed());
    let both = [
        Check::new(bucket, b"conf:peek-mix", 0).named("b"),
        Check::new(fixed, b"conf:peek-mix", 0).named("f"),
    ];
    let v = d.decide(&both).await.unwrap();
    assert!(v.allowed());
    let waits = (
        v.decisions()[0].retry_after(),
        v.decisions()[1].retry_after(),
    );
    assert_eq!(waits, (ms(250), ms(750)));
}

/// A charge puts a bucket at most one capacity into debt in total, however large or many the
/// charges (issue 27, point 5: a `used` of 2^64 - 1 blocked a key for 71 years), and never
/// lifts a bucket spent further under larger numbers.
pub async fn a_charge_puts_a_bucket_at_most_one_capacity_into_debt<H: Harness>(h: &H)
where
    H::S: Settle,
{
    let mut d = Driver::new(h);
    let p = per_second(4, 4); // a token every 250 ms
    let key = b"conf:debt";
    let ms = Duration::from_millis;
    let charge = |n| [(Check::new(p, key, 0).named("debt"), Adjustment::Charge(n))];
    d.settle(&charge(u64::MAX)).await;
    // Four tokens of debt: 1 s to pay them, 250 ms more to the next token.
    assert_eq!(d.named("debt", p, key, 0).await.retry_after(), ms(1250));
    for _ in 0..3 {
        d.settle(&charge(3)).await;
    }
    assert_eq!(d.named("debt", p, key, 0).await.retry_after(), ms(1250));
    h.advance(ms(1250));
    assert!(d.named("debt", p, key, 1).await.allowed());

    // Spent under a slower policy of the same name, then charged under these numbers: the
    // bucket is rebased first (spent: 0 tokens), and the charge is one token of debt at this
    // pace, two tokens' wait (500 ms) before one passes; not the ten minutes the slower
    // policy would take.
    let slow = Policy::token_bucket(10, 1, Duration::from_secs(60)).unwrap();
    assert!(d.named("deep", slow, key, 10).await.allowed());
    let deep = [(Check::new(p, key, 0).named("deep"), Adjustment::Charge(1))];
    d.settle(&deep).await;
    let wait = d.named("deep", p, key, 0).await.retry_after();
    assert_eq!(wait, ms(500));
}

pub async fn idle_keys_behave_as_new<H: Harness>(h: &H) {
    let mut d = Driver::new(h);
    let p = per_second(2, 2);
    assert!(d.check(p, b"conf:idle", 2).await);
    h.advance(Duration::from_secs(3600));
    assert!(d.check(p, b"conf:idle", 2).await);
    assert!(!d.check(p, b"conf:idle", 1).await);
}

/// `conformance_tests!(harness)` runs every case; `conformance_tests!(harness; token_bucket)`
/// the token-bucket cases only, for a store that decides no window algorithm.
#[macro_export]
macro_rules! conformance_tests {
    ($harness:expr) => {
        $crate::conformance_tests!($harness; token_bucket);
        $crate::conformance_tests!(@cases $harness; windows_decide_like_the_model,
            window_numbers_change_under_a_named_bucket, a_window_peek_says_when_the_next_token_comes,
            a_narrower_window_never_lengthens_a_wait, a_narrower_counter_never_lengthens_a_wait);
    };
    ($harness:expr; token_bucket) => {
        $crate::conformance_tests!(@cases $harness;
            burst_then_deny, refill_after_retry_after, peek_and_denial_take_nothing,
            cost_over_capacity_is_an_error, keys_and_policies_are_separate_buckets,
            awkward_keys_never_collide, several_policies_all_or_nothing,
            duplicate_bucket_is_an_error, idle_keys_behave_as_new,
            numbers_change_under_a_named_bucket, a_raised_limit_never_lengthens_a_wait,
            names_separate_buckets,
            reservations_refunds_and_resets, a_settlement_happens_at_most_once,
            a_peek_says_when_the_next_token_comes,
            a_charge_puts_a_bucket_at_most_one_capacity_into_debt,
            a_commit_charges_each_bucket_its_own_use, once_bounds_are_the_same_on_every_store);
    };
    (@cases $harness:expr; $($case:ident),*) => {
        $(
            #[tokio::test]
            async fn $case() {
                let harness = $harness;
                $crate::conformance::$case(&harness).await;
            }
        )*
    };
}

/// Every token-bucket case in turn on one store (for stores that are slow to set up).
pub async fn all_token_bucket_cases<H: Harness>(h: &H) {
    burst_then_deny(h).await;
    refill_after_retry_after(h).await;
    peek_and_denial_take_nothing(h).await;
    cost_over_capacity_is_an_error(h).await;
    keys_and_policies_are_separate_buckets(h).await;
    awkward_keys_never_collide(h).await;
    several_policies_all_or_nothing(h).await;
    duplicate_bucket_is_an_error(h).await;
    idle_keys_behave_as_new(h).await;
    numbers_change_under_a_named_bucket(h).await;
    a_raised_limit_never_lengthens_a_wait(h).await;
    names_separate_buckets(h).await;
}

/// The settlement cases in turn on one store.
pub async fn all_settlement_cases<H: Harness>(h: &H)
where
    H::S: Settle,
{
    reservations_refunds_and_resets(h).await;
    a_settlement_happens_at_most_once(h).await;
    a_peek_says_when_the_next_token_comes(h).await;
    a_charge_puts_a_bucket_at_most_one_capacity_into_debt(h).await;
    a_commit_charges_each_bucket_its_own_use(h).await;
    once_bounds_are_the_same_on_every_store(h).await;
}
