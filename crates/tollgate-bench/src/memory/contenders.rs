//! What is timed: tollgate's store through its two entry points, governor's keyed limiter, and
//! the loop alone; each built holding the scenario's keys, every bucket deep in debt. Each
//! limiter runs on three clocks: `std::time::Instant`, the time-stamp counter (`quanta`), and
//! tollgate's `CoarseClock` (a time a thread writes once a millisecond), which governor reads
//! through [`GovernorCoarse`].

use std::fmt;
use std::hint::black_box;
use std::num::{NonZeroU32, NonZeroUsize};
use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use std::time::Duration;

use governor::clock::{
    Clock as GovernorClock, MonotonicClock as GovernorInstant, QuantaClock as GovernorTsc,
};
use governor::middleware::NoOpMiddleware;
use governor::state::keyed::DefaultKeyedStateStore;
use governor::{Quota, RateLimiter};
use tollgate::{
    Clock, CoarseClock, MemoryLimiter, MemoryStore, MonotonicClock, Policy, QuantaClock,
};

use tollgate_server::top::Summary;

use super::timing::timed_checks;
use crate::BenchError;

/// Refill per second, for both limiters.
const RATE: NonZeroU32 = NonZeroU32::new(1000).unwrap();
/// Tokens taken from every key before timing: 1000 s of refill at [`RATE`], so that no run,
/// however long, brings a bucket back to full (see [`policy`]).
const PRECHARGE: NonZeroU32 = NonZeroU32::new(1_000_000).unwrap();

/// Which implementation a measurement is of, and at which clock.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Contender {
    /// [`MemoryLimiter::check`]: the store bound to its policy once, on [`MonotonicClock`].
    TollgateLimiter,
    /// [`MemoryStore::check`]: the policy's numbers encoded at every check, on
    /// [`MonotonicClock`].
    TollgateStore,
    /// governor's keyed limiter (`DashMap`) `check_key`, on its `MonotonicClock`.
    Governor,
    /// [`MemoryLimiter::check`] on [`QuantaClock`].
    TollgateLimiterTsc,
    /// [`MemoryStore::check`] on [`QuantaClock`].
    TollgateStoreTsc,
    /// governor's keyed limiter (`DashMap`) `check_key`, on its `QuantaClock`.
    GovernorTsc,
    /// [`MemoryLimiter::check`] on [`CoarseClock`].
    TollgateLimiterCoarse,
    /// [`MemoryStore::check`] on [`CoarseClock`].
    TollgateStoreCoarse,
    /// governor's keyed limiter (`DashMap`) `check_key`, on the same [`CoarseClock`].
    GovernorCoarse,
    /// [`MemoryLimiter::check`] on [`MonotonicClock`], its key then recorded in a summary of
    /// who is denied and allowed (`GET /v1/top`), as the server records each decision: the
    /// summary's cost beside [`Contender::TollgateLimiter`], the same check without it.
    TollgateLimiterTop,
    /// The loop alone (pick a key, read a byte of it): the floor under every other figure.
    KeyWalk,
}

impl Contender {
    /// Every contender, in report order.
    pub const ALL: [Contender; 11] = [
        Contender::TollgateLimiter,
        Contender::TollgateStore,
        Contender::Governor,
        Contender::TollgateLimiterTsc,
        Contender::TollgateStoreTsc,
        Contender::GovernorTsc,
        Contender::TollgateLimiterCoarse,
        Contender::TollgateStoreCoarse,
        Contender::GovernorCoarse,
        Contender::TollgateLimiterTop,
        Contender::KeyWalk,
    ];

    /// tollgate's contenders, each held to the goals against its [`rival`](Contender::rival).
    pub const TOLLGATE: [Contender; 6] = [
        Contender::TollgateLimiter,
        Contender::TollgateStore,
        Contender::TollgateLimiterTsc,
        Contender::TollgateStoreTsc,
        Contender::TollgateLimiterCoarse,
        Contender::TollgateStoreCoarse,
    ];

    /// Its name in the report and on stderr.
    pub fn name(self) -> &'static str {
        match self {
            Contender::TollgateLimiter => "tollgate_limiter",
            Contender::TollgateStore => "tollgate_store",
            Contender::Governor => "governor",
            Contender::TollgateLimiterTsc => "tollgate_limiter_tsc",
            Contender::TollgateStoreTsc => "tollgate_store_tsc",
            Contender::GovernorTsc => "governor_tsc",
            Contender::TollgateLimiterCoarse => "tollgate_limiter_coarse",
            Contender::TollgateStoreCoarse => "tollgate_store_coarse",
            Contender::GovernorCoarse => "governor_coarse",
            Contender::TollgateLimiterTop => "tollgate_limiter_top",
            Contender::KeyWalk => "key_walk",
        }
    }

    /// The call it times, in the report's words, with its clock.
    pub fn call(self) -> &'static str {
        match self {
            Contender::TollgateLimiter => "`MemoryLimiter::check` (Instant)",
            Contender::TollgateStore => "`MemoryStore::check` (Instant)",
            Contender::Governor => "governor `check_key` (Instant)",
            Contender::TollgateLimiterTsc => "`MemoryLimiter::check` (TSC)",
            Contender::TollgateStoreTsc => "`MemoryStore::check` (TSC)",
            Contender::GovernorTsc => "governor `check_key` (TSC)",
            Contender::TollgateLimiterCoarse => "`MemoryLimiter::check` (coarse)",
            Contender::TollgateStoreCoarse => "`MemoryStore::check` (coarse)",
            Contender::GovernorCoarse => "governor `check_key` (coarse)",
            Contender::TollgateLimiterTop => "`MemoryLimiter::check` + top summary (Instant)",
            Contender::KeyWalk => "the key walk alone",
        }
    }

    /// The clock it reads: `Instant` (`std::time::Instant`: tollgate's `MonotonicClock`,
    /// governor's `MonotonicClock`), `TSC` (the time-stamp counter through `quanta`:
    /// tollgate's `QuantaClock`, governor's `QuantaClock`) or `coarse` (one tollgate
    /// `CoarseClock` read by both); `none` for the key walk.
    pub fn clock(self) -> &'static str {
        match self {
            Contender::TollgateLimiter
            | Contender::TollgateStore
            | Contender::Governor
            | Contender::TollgateLimiterTop => "Instant",
            Contender::TollgateLimiterTsc
            | Contender::TollgateStoreTsc
            | Contender::GovernorTsc => "TSC",
            Contender::TollgateLimiterCoarse
            | Contender::TollgateStoreCoarse
            | Contender::GovernorCoarse => "coarse",
            Contender::KeyWalk => "none",
        }
    }

    /// The governor limiter on the same clock, which a tollgate contender is compared with;
    /// `None` for governor's own and the key walk.
    pub fn rival(self) -> Option<Contender> {
        match self {
            Contender::TollgateLimiter | Contender::TollgateStore => Some(Contender::Governor),
            Contender::TollgateLimiterTsc | Contender::TollgateStoreTsc => {
                Some(Contender::GovernorTsc)
            }
            Contender::TollgateLimiterCoarse | Contender::TollgateStoreCoarse => {
                Some(Contender::GovernorCoarse)
            }
            Contender::Governor
            | Contender::GovernorTsc
            | Contender::GovernorCoarse
            | Contender::TollgateLimiterTop
            | Contender::KeyWalk => None,
        }
    }
}

impl fmt::Display for Contender {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Checks made and checks denied.
#[derive(Debug, Default)]
pub(super) struct Tally {
    pub(super) checks: u64,
    pub(super) denied: u64,
}

/// The policy on tollgate's side: a burst of `u32::MAX`, refilled at [`RATE`] per second.
///
/// Charged [`PRECHARGE`] tokens, a bucket is about 1000 s in debt and still far from empty, so
/// every timed check is allowed and takes the compare-and-swap write path on both sides, and
/// tollgate never sweeps a benchmarked key as idle (a key whose bucket is full again is
/// dropped when new keys arrive).
pub(super) fn policy() -> Result<Policy, BenchError> {
    Ok(Policy::token_bucket(
        u64::from(u32::MAX),
        u64::from(RATE.get()),
        Duration::from_secs(1),
    )?)
}

/// The same policy on governor's side.
fn quota() -> Quota {
    Quota::per_second(RATE).allow_burst(NonZeroU32::MAX)
}

/// governor's keyed limiter on the clock `C`.
pub(super) type Governor<C> = RateLimiter<
    String,
    DefaultKeyedStateStore<String>,
    C,
    NoOpMiddleware<<C as GovernorClock>::Instant>,
>;

/// A store on `clock` holding `keys`, each charged [`PRECHARGE`] tokens, and its limiter for
/// `policy`.
pub(super) fn tollgate_holding<C: Clock>(
    keys: &[String],
    policy: &Policy,
    clock: C,
    tally: &mut Tally,
) -> Result<(MemoryStore<C>, MemoryLimiter<C>), BenchError> {
    // Room for every key, so that the cap never interferes with the measurement.
    let store = MemoryStore::builder()
        .clock(clock)
        .max_keys(NonZeroUsize::new(keys.len().saturating_mul(2)).unwrap_or(NonZeroUsize::MIN))
        .build();
    let limiter = store.limiter(policy);
    for key in keys {
        let decision = limiter.check(key.as_bytes(), u64::from(PRECHARGE.get()))?;
        tally.checks += 1;
        tally.denied += u64::from(!decision.allowed());
    }
    Ok((store, limiter))
}

/// governor's keyed limiter on `clock` holding `keys`, each charged [`PRECHARGE`] tokens. The
/// clock is explicit: governor's `DefaultClock` changes with its `quanta` feature.
pub(super) fn governor_holding<C: GovernorClock>(
    keys: &[String],
    clock: C,
    tally: &mut Tally,
) -> Governor<C> {
    let governor = RateLimiter::dashmap_with_clock(quota(), clock);
    for key in keys {
        // `Err` would be a cost above the burst, which `u32::MAX` rules out; counted all the same.
        let allowed = matches!(governor.check_key_n(key, PRECHARGE), Ok(Ok(())));
        tally.checks += 1;
        tally.denied += u64::from(!allowed);
    }
    governor
}

/// The limiters of one scenario on one clock, each holding its keys.
pub(super) struct OnClock<C: Clock, G: GovernorClock> {
    pub(super) store: MemoryStore<C>,
    pub(super) limiter: MemoryLimiter<C>,
    pub(super) governor: Governor<G>,
}

impl<C: Clock, G: GovernorClock> OnClock<C, G> {
    /// Both limiters on their clocks, built holding `keys`.
    pub(super) fn holding(
        keys: &[String],
        policy: &Policy,
        (clock, governor_clock): (C, G),
        tally: &mut Tally,
    ) -> Result<OnClock<C, G>, BenchError> {
        let (store, limiter) = tollgate_holding(keys, policy, clock, tally)?;
        Ok(OnClock {
            store,
            limiter,
            governor: governor_holding(keys, governor_clock, tally),
        })
    }
}

/// The limiters of one scenario, each holding its keys, on both clocks.
pub(super) struct Contenders {
    pub(super) policy: Policy,
    /// The summary [`Contender::TollgateLimiterTop`] records in.
    pub(super) top: Arc<Summary>,
    pub(super) instant: OnClock<MonotonicClock, GovernorInstant>,
    pub(super) tsc: OnClock<QuantaClock, GovernorTsc>,
    pub(super) coarse: OnClock<CoarseClock, GovernorCoarse>,
}

/// A summary of who is denied and allowed, as the server keeps one per policy (its default
/// capacity and sampling).
pub(super) fn summary() -> Arc<Summary> {
    Arc::new(Summary::new(
        tollgate_server::top::DEFAULT_CAPACITY,
        tollgate_server::top::DEFAULT_SAMPLE_EVERY,
        Arc::new(MonotonicClock::new()),
    ))
}

/// The clocks of [`Contenders::instant`].
pub(super) fn instant_clocks() -> (MonotonicClock, GovernorInstant) {
    (MonotonicClock::new(), GovernorInstant)
}

/// The clocks of [`Contenders::tsc`].
pub(super) fn tsc_clocks() -> (QuantaClock, GovernorTsc) {
    (QuantaClock::new(), GovernorTsc::default())
}

/// The clocks of [`Contenders::coarse`]: one [`CoarseClock`] (at its default millisecond),
/// read by both.
pub(super) fn coarse_clocks() -> (CoarseClock, GovernorCoarse) {
    let clock = CoarseClock::new();
    (clock.clone(), GovernorCoarse(clock))
}

/// tollgate's [`CoarseClock`] as a governor clock, so that governor reads the very time
/// tollgate's coarse contenders do (governor's own clock of this kind, `QuantaUpkeepClock`,
/// allows one per process).
#[derive(Debug, Clone)]
pub(super) struct GovernorCoarse(CoarseClock);

impl GovernorClock for GovernorCoarse {
    type Instant = governor::nanos::Nanos;

    #[inline]
    fn now(&self) -> governor::nanos::Nanos {
        governor::nanos::Nanos::from(self.0.now().as_u64())
    }
}

impl Contenders {
    /// Every limiter, built holding `keys`.
    pub(super) fn holding(
        keys: &[String],
        policy: &Policy,
        tally: &mut Tally,
    ) -> Result<Contenders, BenchError> {
        Ok(Contenders {
            policy: *policy,
            top: summary(),
            instant: OnClock::holding(keys, policy, instant_clocks(), tally)?,
            tsc: OnClock::holding(keys, policy, tsc_clocks(), tally)?,
            coarse: OnClock::holding(keys, policy, coarse_clocks(), tally)?,
        })
    }

    /// `warm` untimed then `iters` timed checks by `contender` on each of `threads` threads;
    /// the wall time of the timed ones. Denials (warm-up included) are added to `denied`.
    pub(super) fn time(
        &self,
        contender: Contender,
        keys: &[String],
        threads: usize,
        warm: u64,
        iters: u64,
        denied: &AtomicU64,
    ) -> Duration {
        // The contender is fixed at compile time in each loop, so that each is monomorphized
        // and inlined as a caller's own code would be, with no dispatch per check.
        macro_rules! timed {
            ($which:expr) => {
                timed_checks(keys, threads, warm, iters, denied, &|key: &String| {
                    self.check($which, key)
                })
            };
        }
        match contender {
            Contender::TollgateLimiter => timed!(Contender::TollgateLimiter),
            Contender::TollgateStore => timed!(Contender::TollgateStore),
            Contender::Governor => timed!(Contender::Governor),
            Contender::TollgateLimiterTsc => timed!(Contender::TollgateLimiterTsc),
            Contender::TollgateStoreTsc => timed!(Contender::TollgateStoreTsc),
            Contender::GovernorTsc => timed!(Contender::GovernorTsc),
            Contender::TollgateLimiterCoarse => timed!(Contender::TollgateLimiterCoarse),
            Contender::TollgateStoreCoarse => timed!(Contender::TollgateStoreCoarse),
            Contender::GovernorCoarse => timed!(Contender::GovernorCoarse),
            Contender::TollgateLimiterTop => timed!(Contender::TollgateLimiterTop),
            Contender::KeyWalk => timed!(Contender::KeyWalk),
        }
    }

    /// One check of cost 1 by `contender` on `key`: whether it was allowed (a store error
    /// counts as a denial).
    #[inline(always)]
    fn check(&self, contender: Contender, key: &String) -> bool {
        let (instant, tsc, coarse) = (&self.instant, &self.tsc, &self.coarse);
        match contender {
            Contender::TollgateLimiter => instant
                .limiter
                .check(key.as_bytes(), 1)
                .is_ok_and(|d| d.allowed()),
            Contender::TollgateStore => instant
                .store
                .check(&self.policy, key.as_bytes(), 1)
                .is_ok_and(|d| d.allowed()),
            Contender::Governor => instant.governor.check_key(key).is_ok(),
            Contender::TollgateLimiterTsc => tsc
                .limiter
                .check(key.as_bytes(), 1)
                .is_ok_and(|d| d.allowed()),
            Contender::TollgateStoreTsc => tsc
                .store
                .check(&self.policy, key.as_bytes(), 1)
                .is_ok_and(|d| d.allowed()),
            Contender::GovernorTsc => tsc.governor.check_key(key).is_ok(),
            Contender::TollgateLimiterCoarse => coarse
                .limiter
                .check(key.as_bytes(), 1)
                .is_ok_and(|d| d.allowed()),
            Contender::TollgateStoreCoarse => coarse
                .store
                .check(&self.policy, key.as_bytes(), 1)
                .is_ok_and(|d| d.allowed()),
            Contender::GovernorCoarse => coarse.governor.check_key(key).is_ok(),
            Contender::TollgateLimiterTop => {
                let allowed = instant
                    .limiter
                    .check(key.as_bytes(), 1)
                    .is_ok_and(|d| d.allowed());
                self.top.record(key.as_bytes(), !allowed);
                allowed
            }
            // Reads the key's last byte, as hashing it would, and decides nothing.
            Contender::KeyWalk => black_box(key.as_bytes().last().copied()).is_some(),
        }
    }
}
