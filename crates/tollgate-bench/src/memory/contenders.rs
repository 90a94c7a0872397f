//! What is timed: tollgate's store through its two entry points, governor's keyed limiter, and
//! the loop alone; each built holding the scenario's keys, every bucket deep in debt.

use std::fmt;
use std::hint::black_box;
use std::num::{NonZeroU32, NonZeroUsize};
use std::sync::atomic::AtomicU64;
use std::time::Duration;

use governor::{DefaultKeyedRateLimiter, Quota, RateLimiter};
use tollgate::{MemoryLimiter, MemoryStore, Policy};

use super::timing::timed_checks;
use crate::BenchError;

/// Refill per second, for both limiters.
const RATE: NonZeroU32 = NonZeroU32::new(1000).unwrap();
/// Tokens taken from every key before timing: 1000 s of refill at [`RATE`], so that no run,
/// however long, brings a bucket back to full (see [`policy`]).
const PRECHARGE: NonZeroU32 = NonZeroU32::new(1_000_000).unwrap();

/// Which implementation a measurement is of.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Contender {
    /// [`MemoryLimiter::check`]: the store bound to its policy once.
    TollgateLimiter,
    /// [`MemoryStore::check`]: the policy's numbers encoded at every check.
    TollgateStore,
    /// governor's `DefaultKeyedRateLimiter<String>::check_key`.
    Governor,
    /// The loop alone (pick a key, read a byte of it): the floor under every other figure.
    KeyWalk,
}

impl Contender {
    /// Every contender, in report order.
    pub const ALL: [Contender; 4] = [
        Contender::TollgateLimiter,
        Contender::TollgateStore,
        Contender::Governor,
        Contender::KeyWalk,
    ];

    /// Its name in the report and on stderr.
    pub fn name(self) -> &'static str {
        match self {
            Contender::TollgateLimiter => "tollgate_limiter",
            Contender::TollgateStore => "tollgate_store",
            Contender::Governor => "governor",
            Contender::KeyWalk => "key_walk",
        }
    }

    /// The call it times, in the report's words.
    pub fn call(self) -> &'static str {
        match self {
            Contender::TollgateLimiter => "`MemoryLimiter::check`",
            Contender::TollgateStore => "`MemoryStore::check`",
            Contender::Governor => "governor `check_key`",
            Contender::KeyWalk => "the key walk alone",
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

/// A store holding `keys`, each charged [`PRECHARGE`] tokens, and its limiter for `policy`.
pub(super) fn tollgate_holding(
    keys: &[String],
    policy: &Policy,
    tally: &mut Tally,
) -> Result<(MemoryStore, MemoryLimiter), BenchError> {
    // Room for every key, so that the cap never interferes with the measurement.
    let store = MemoryStore::builder()
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

/// governor's keyed limiter holding `keys`, each charged [`PRECHARGE`] tokens.
pub(super) fn governor_holding(
    keys: &[String],
    tally: &mut Tally,
) -> DefaultKeyedRateLimiter<String> {
    let governor = RateLimiter::keyed(quota());
    for key in keys {
        // `Err` would be a cost above the burst, which `u32::MAX` rules out; counted all the same.
        let allowed = matches!(governor.check_key_n(key, PRECHARGE), Ok(Ok(())));
        tally.checks += 1;
        tally.denied += u64::from(!allowed);
    }
    governor
}

/// The limiters of one scenario, each holding its keys.
pub(super) struct Contenders {
    pub(super) store: MemoryStore,
    pub(super) policy: Policy,
    pub(super) limiter: MemoryLimiter,
    pub(super) governor: DefaultKeyedRateLimiter<String>,
}

impl Contenders {
    /// Both limiters, built holding `keys`.
    pub(super) fn holding(
        keys: &[String],
        policy: &Policy,
        tally: &mut Tally,
    ) -> Result<Contenders, BenchError> {
        let (store, limiter) = tollgate_holding(keys, policy, tally)?;
        Ok(Contenders {
            store,
            policy: *policy,
            limiter,
            governor: governor_holding(keys, tally),
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
            Contender::KeyWalk => timed!(Contender::KeyWalk),
        }
    }

    /// One check of cost 1 by `contender` on `key`: whether it was allowed (a store error
    /// counts as a denial).
    #[inline(always)]
    fn check(&self, contender: Contender, key: &String) -> bool {
        match contender {
            Contender::TollgateLimiter => self
                .limiter
                .check(key.as_bytes(), 1)
                .is_ok_and(|d| d.allowed()),
            Contender::TollgateStore => self
                .store
                .check(&self.policy, key.as_bytes(), 1)
                .is_ok_and(|d| d.allowed()),
            Contender::Governor => self.governor.check_key(key).is_ok(),
            // Reads the key's last byte, as hashing it would, and decides nothing.
            Contender::KeyWalk => black_box(key.as_bytes().last().copied()).is_some(),
        }
    }
}
