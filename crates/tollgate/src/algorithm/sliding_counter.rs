//! The sliding-window counter: the weighted two-window approximation.
//!
//! Windows are aligned to the UNIX epoch. At `elapsed` into the current window the estimate is
//! `previous × (window - elapsed) / window + current`, compared in integers
//! (`previous × (window - elapsed) + current × window <= limit × window`). It assumes the
//! previous window's requests were spread evenly: when they were bunched at its end, up to
//! nearly twice the limit can pass in one sliding window; when at its start, fewer than the limit.
//! Use [`sliding_log`](super::sliding_log) when that matters.
//!
//! **A limit that changes.** A new limit applies to the counts already taken. A new width (the
//! state remembers the width it counted with): the counts taken under the old width are
//! *carried*: they keep sliding out on the old width's schedule, their estimate rounded up
//! (capped at the new limit) added to the estimate of the counts the new width takes from then
//! on. So a change forgets no count sooner than the old width would have, and holds none
//! longer: a limit as high or higher never lengthens a wait, whatever the widths (3 per 1.2 s
//! changed to 3 per 0.7 s, a denial's wait stays 0.8 s), and a lowered one applies to them as
//! to any count. (Rounded up, they charge whole requests: beside a fraction of the new width's
//! estimate, less than one request more than the exact sum.) Carried counts are gone within two
//! old widths; while they slide out, a wait is found by bisection over the two schedules,
//! exact to the clock's unit. A second change while they
//! still slide out puts them, as their estimate rounded up and capped at the limit, in the
//! new width's current window (held until that window's successor ends), and carries the
//! counts of the width it leaves.

use crate::{CheckError, Decision, Nanos, Policy};

/// The counts of one key. `Default` is a key never seen. Opaque: its layout is the stores'
/// business, and may change without a major version.
///
/// ```
/// use std::time::Duration;
/// use tollgate::algorithm::sliding_counter::{decide, SlidingCounterState};
/// use tollgate::{Nanos, Policy};
///
/// let policy = Policy::sliding_window_counter(2, Duration::from_secs(1))?;
/// let mut state = SlidingCounterState::default();
/// for now in [100, 200] {
///     let outcome = decide(&policy, state, Nanos::new(now), 1)?;
///     assert!(outcome.allowed());
///     state = outcome.new_state();
/// }
/// assert!(!decide(&policy, state, Nanos::new(300), 1)?.allowed());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SlidingCounterState {
    /// `now / window` of the current window.
    pub(crate) window: u64,
    /// Cost taken in the window before it.
    pub(crate) previous: u64,
    /// Cost taken in it.
    pub(crate) current: u64,
    /// The window's width, in the clock's unit, when the counts were taken (0: never written).
    pub(crate) width: u64,
    /// The counts taken under the width before the last change, still sliding out on its
    /// schedule (`Carried::default()`: none).
    pub(crate) carried: Carried,
}

/// Counts taken under an earlier width, frozen: they take no more cost and slide out as
/// windows of that width would have let them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Carried {
    /// `now / width` of the window they were last counted in.
    pub(crate) window: u64,
    /// Cost taken in the window before it.
    pub(crate) previous: u64,
    /// Cost taken in it.
    pub(crate) current: u64,
    /// Their width, in the clock's unit (0: none carried).
    pub(crate) width: u64,
}

impl Carried {
    /// The estimate at `now` scaled by the width: `previous × (width - elapsed) + current ×
    /// width` in its window, `current × (width - elapsed)` in the next, 0 after (and both
    /// counts weighed fully while the clock reads before its window).
    fn scaled(&self, now: u64) -> u128 {
        let w = self.width;
        if w == 0 {
            return 0;
        }
        let index = now / w;
        if index < self.window {
            return (wide(self.previous) + wide(self.current)) * wide(w);
        }
        let elapsed = wide(now - index * w);
        match index - self.window {
            0 => wide(self.previous) * (wide(w) - elapsed) + wide(self.current) * wide(w),
            1 => wide(self.current) * (wide(w) - elapsed),
            _ => 0,
        }
    }

    /// The estimate at `now`, rounded up: the whole count it still charges.
    fn count(&self, now: u64) -> u64 {
        match self.width {
            0 => 0,
            w => narrow(self.scaled(now).div_ceil(wide(w))),
        }
    }

    /// When the counts have slid out (0 when there are none).
    fn end(&self) -> u64 {
        let windows = if self.current > 0 {
            2
        } else if self.previous > 0 {
            1
        } else {
            0
        };
        (self.window.saturating_add(windows)).saturating_mul(self.width)
    }
}

impl SlidingCounterState {
    /// Whether the state at `now` is the same as a key never seen; `width` is the policy's,
    /// for a state never written.
    pub(crate) fn is_idle(&self, width: u64, now: Nanos) -> bool {
        let width = if self.width == 0 { width } else { self.width };
        ((self.previous == 0 && self.current == 0) || self.window + 1 < now.as_u64() / width)
            && self.carried.scaled(now.as_u64()) == 0
    }
}

/// The result of evaluating one check, before anyone writes.
///
/// ```
/// use std::time::Duration;
/// use tollgate::algorithm::sliding_counter::{decide, SlidingCounterState};
/// use tollgate::{Nanos, Policy};
///
/// let policy = Policy::sliding_window_counter(100, Duration::from_secs(60))?;
/// let outcome = decide(&policy, SlidingCounterState::default(), Nanos::new(1), 30)?;
/// assert!(outcome.allowed());
/// assert_eq!(outcome.decision(true).remaining(), 70);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SlidingCounterOutcome {
    limit: u64,
    width: u64,
    elapsed: u64,
    now: u64,
    /// The carried counts' whole estimate at `now`, capped at the limit.
    carried: u64,
    state: SlidingCounterState,
    cost: u64,
    allowed: bool,
}

/// Evaluates taking `cost` at `now` (refused past [`MAX_NOW`](crate::algorithm::gcra::MAX_NOW)).
pub fn decide(
    policy: &Policy,
    state: SlidingCounterState,
    now: Nanos,
    cost: u64,
) -> Result<SlidingCounterOutcome, CheckError> {
    crate::algorithm::gcra::check_now(now)?;
    let limit = policy.capacity();
    if cost > limit {
        return Err(CheckError::CostExceedsCapacity {
            cost,
            capacity: limit,
        });
    }
    let width = policy.period_nanos().as_u64();
    let index = now.as_u64() / width;
    let state = carry_over(state, width, limit, now);
    // The carried counts' whole count now; none left once it is 0 (it rounds their estimate up).
    let carried = state.carried.count(now.as_u64());
    let state = SlidingCounterState {
        carried: if carried == 0 {
            Carried::default()
        } else {
            state.carried
        },
        ..state
    };
    let (state, elapsed) = if index < state.window {
        // The clock stepped back: weigh the previous window fully (the most conservative view).
        (state, 0)
    } else {
        let rolled = match index - state.window {
            0 => state,
            1 => SlidingCounterState {
                window: index,
                previous: state.current,
                current: 0,
                ..state
            },
            _ => SlidingCounterState {
                window: index,
                previous: 0,
                current: 0,
                ..state
            },
        };
        (rolled, now.as_u64() - index * width)
    };
    let outcome = SlidingCounterOutcome {
        limit,
        width,
        elapsed,
        now: now.as_u64(),
        carried: carried.min(limit),
        state,
        cost,
        allowed: true,
    };
    Ok(SlidingCounterOutcome {
        allowed: cost == 0 || outcome.weighted(state.current + cost) <= wide(limit) * wide(width),
        ..outcome
    })
}

/// The state under a new width: the counts of the old width are carried, and counts carried
/// from an earlier change become, as their estimate at `now` rounded up and capped at `limit`,
/// the count of the new width's current window.
fn carry_over(
    state: SlidingCounterState,
    width: u64,
    limit: u64,
    now: Nanos,
) -> SlidingCounterState {
    if state.width == width || state.width == 0 {
        return SlidingCounterState { width, ..state };
    }
    SlidingCounterState {
        window: now.as_u64() / width,
        previous: 0,
        current: state.carried.count(now.as_u64()).min(limit),
        width,
        carried: Carried {
            window: state.window,
            previous: state.previous,
            current: state.current,
            width: state.width,
        },
    }
}

fn wide(n: u64) -> u128 {
    u128::from(n)
}

fn narrow(n: u128) -> u64 {
    u64::try_from(n).unwrap_or(u64::MAX)
}

impl SlidingCounterOutcome {
    /// `carried × window + previous × (window - elapsed) + current × window`: the estimate
    /// scaled by `window`.
    fn weighted(&self, current: u64) -> u128 {
        wide(self.carried) * wide(self.width)
            + wide(self.state.previous) * wide(self.width - self.elapsed)
            + wide(current) * wide(self.width)
    }

    /// Whether the estimate has room for the cost.
    pub fn allowed(&self) -> bool {
        self.allowed
    }

    /// The state to store when the cost is taken.
    pub fn new_state(&self) -> SlidingCounterState {
        SlidingCounterState {
            current: self.state.current + self.cost,
            ..self.state
        }
    }

    /// The shortest wait until the estimate has room for the cost, or for one token when the
    /// check is a peek (cost 0); zero when it has room now.
    fn wait(&self) -> u64 {
        let probe = self.cost.max(1);
        let (limit, w, e) = (wide(self.limit), wide(self.width), wide(self.elapsed));
        let (p, c, cost) = (
            wide(self.state.previous),
            wide(self.state.current),
            wide(probe),
        );
        if self.weighted(self.state.current.saturating_add(probe)) <= limit * w {
            0
        } else if self.carried > 0 {
            self.wait_with_carried(probe)
        } else if c + cost <= limit {
            // Within this window, once enough of `previous` has slid out:
            // p × (w - e') <= (limit - c - cost) × w (p > 0, or the cost would fit).
            let at = w - ((limit - c - cost) * w / p).min(w);
            narrow(at - e)
        } else {
            // In the next window, where `current` becomes `previous` (non-zero here).
            let at = w - ((limit - cost) * w / c).min(w);
            narrow(w - e + at)
        }
    }

    /// [`wait`](Self::wait) while carried counts slide out beside the window's: both
    /// estimates only fall as time passes, so the first instant with room is found by
    /// bisection, between now (no room) and when both have slid out (room: `probe <= limit`).
    fn wait_with_carried(&self, probe: u64) -> u64 {
        let (limit, w, e) = (wide(self.limit), wide(self.width), wide(self.elapsed));
        let (p, c) = (wide(self.state.previous), wide(self.state.current));
        let fits = |d: u64| {
            let carried = wide(self.state.carried.count(self.now + d).min(self.limit));
            // The window's estimate `d` later: its previous window slides out, then its
            // current one.
            let x = e + wide(d);
            let counted = if x < w {
                p * (w - x) + c * w
            } else if x < 2 * w {
                c * (2 * w - x)
            } else {
                0
            };
            (carried + wide(probe)) * w + counted <= limit * w
        };
        let (mut no, mut yes) = (
            0,
            (2 * self.width - self.elapsed).max(self.state.carried.end().saturating_sub(self.now)),
        );
        while yes - no > 1 {
            let mid = no + (yes - no) / 2;
            if fits(mid) {
                yes = mid;
            } else {
                no = mid;
            }
        }
        yes
    }

    /// The decision, with the cost `taken` or not.
    pub fn decision(&self, taken: bool) -> Decision {
        let current = if taken && self.allowed {
            self.new_state().current
        } else {
            self.state.current
        };
        let room = (wide(self.limit) * wide(self.width)).saturating_sub(self.weighted(current));
        let reset_after = if current > 0 {
            2 * self.width - self.elapsed
        } else if self.state.previous > 0 {
            self.width - self.elapsed
        } else {
            0
        };
        let reset_after = reset_after.max(self.state.carried.end().saturating_sub(self.now));
        Decision::exact(
            self.allowed,
            self.limit,
            narrow(room / wide(self.width)),
            // A peek (cost 0) is allowed, and says when a cost of 1 would be.
            Nanos::new(self.wait()),
            Nanos::new(reset_after),
        )
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    const MS: u64 = 1_000_000;

    #[test]
    fn weighs_the_previous_window() {
        let p = Policy::sliding_window_counter(10, Duration::from_secs(1)).unwrap();
        let mut state = SlidingCounterState::default();
        // (at ms, cost, allowed, remaining, retry ms, reset ms)
        let steps = [
            (5_000, 10, true, 0, 0, 2000),
            // Next window, 25% in: estimate 10 × 0.75 = 7.5, room for 2.
            (6_250, 2, true, 0, 0, 1750),
            // 9.5 used; one more needs previous weight <= 7: at 300 ms.
            (6_250, 1, false, 0, 50, 1750),
            (6_250, 0, true, 0, 50, 1750),
            (6_300, 1, true, 0, 0, 1700),
        ];
        for (at, cost, allowed, remaining, retry, reset) in steps {
            let o = decide(&p, state, Nanos::new(at * MS), cost).unwrap();
            let d = o.decision(true);
            assert_eq!(
                (d.allowed(), d.remaining(), d.retry_after(), d.reset_after()),
                (
                    allowed,
                    remaining,
                    Duration::from_millis(retry),
                    Duration::from_millis(reset)
                ),
                "at {at}"
            );
            if o.allowed() {
                state = o.new_state();
            }
        }
        // Over the current window's own room (3 + 8 > 10): wait into the next window, where
        // 3 × (1 s - e) <= 2 × 1 s once e >= 333_333_334 ns.
        let o = decide(&p, state, Nanos::new(6_300 * MS), 8).unwrap();
        assert_eq!(
            o.decision(false).retry_after(),
            Duration::from_nanos(700 * MS + 333_333_334)
        );
    }

    fn counter(limit: u64, width_ms: u64) -> Policy {
        Policy::sliding_window_counter(limit, Duration::from_millis(width_ms)).unwrap()
    }

    #[test]
    fn a_new_width_carries_the_counts_on_their_schedule() {
        let second = counter(10, 1_000);
        let minute = counter(10, 60_000);
        let spent = decide(
            &second,
            SlidingCounterState::default(),
            Nanos::new(5_000 * MS),
            8,
        )
        .unwrap()
        .new_state();
        // At 6.5 s the estimate under 1 s windows is 8 × 0.5 = 4: room for 6 under the minute.
        let o = decide(&minute, spent, Nanos::new(6_500 * MS), 7).unwrap();
        assert!(!o.allowed());
        let d = o.decision(false);
        assert_eq!(d.remaining(), 6);
        // The 8 slide out of the second's windows as they would have: all gone at 7 s.
        assert_eq!(d.reset_after(), Duration::from_millis(500));
        // 7 fits once the estimate is 3: 8 × (1 s - e) <= 3 × 1 s at e = 625 ms.
        assert_eq!(d.retry_after(), Duration::from_millis(125));
        let changed = decide(&minute, spent, Nanos::new(6_500 * MS), 6).unwrap();
        assert!(changed.allowed());
        let changed = changed.new_state();
        assert_eq!((changed.current, changed.carried.width), (6, 1_000 * MS));
        // At 7 s the carried counts are gone (and no longer written); the minute's 6 stay.
        let later = decide(&minute, changed, Nanos::new(7_000 * MS), 4).unwrap();
        assert!(later.allowed());
        assert_eq!(later.new_state().carried, Carried::default());
        // Carried counts above a lowered limit charge the limit: the whole window denies.
        let three = counter(3, 60_000);
        let o = decide(&three, spent, Nanos::new(5_000 * MS), 0).unwrap();
        assert_eq!(o.decision(false).remaining(), 0);
        // Room for one once they charge 2: 8 × (1 s - e) <= 2 × 1 s in the next second, at 6.75 s.
        assert_eq!(
            o.decision(false).retry_after(),
            Duration::from_millis(1_750)
        );
    }

    /// Issue 44: under 3 per 1.2 s, a denial waited 0.8 s; the width narrowed to 3 per 0.7 s
    /// (a higher rate), the counts went into the new width's current window, which slid them
    /// out over two 0.7 s windows: the wait became 1.4 s.
    #[test]
    fn a_narrower_window_never_lengthens_a_wait() {
        let before = counter(3, 1_200);
        let after = counter(3, 700);
        // 1,202.4 s starts a 1.2 s window; 1.6 s later, 1,204 s starts a 0.7 s one.
        let start = Nanos::new(1_202_400 * MS);
        let spent = decide(&before, SlidingCounterState::default(), start, 3)
            .unwrap()
            .new_state();
        let now = start + Nanos::new(1_600 * MS);
        let denied = decide(&before, spent, now, 3).unwrap();
        assert!(!denied.allowed());
        assert_eq!(
            denied.decision(false).retry_after(),
            Duration::from_millis(800)
        );
        let narrowed = decide(&after, spent, now, 3).unwrap();
        assert!(
            !narrowed.allowed(),
            "a narrower window handed out a fresh burst"
        );
        let d = narrowed.decision(false);
        assert_eq!(
            (d.remaining(), d.retry_after()),
            (1, Duration::from_millis(800))
        );
        let wait = Nanos::from(d.retry_after());
        assert!(
            !decide(&after, spent, now + wait - Nanos::new(1), 3)
                .unwrap()
                .allowed()
        );
        assert!(decide(&after, spent, now + wait, 3).unwrap().allowed());
        // Taking the room left writes the carried counts; they still free it at 0.8 s.
        let taken = decide(&after, spent, now, 1).unwrap();
        assert!(taken.allowed());
        let o = decide(&after, taken.new_state(), now, 2).unwrap();
        assert!(!o.allowed());
        assert_eq!(o.decision(false).retry_after(), Duration::from_millis(800));
    }

    /// Random counts taken under one policy, then its numbers changed: at any later time the
    /// old counts charge exactly what they charged under the old numbers (rounded up, capped at
    /// the new limit): nothing forgotten, nothing held longer. So, limit not lowered, no wait
    /// is longer than the old numbers gave (whatever the widths, and so whenever the rate is
    /// not lowered); and every wait answered is exact, before and after more is taken.
    #[test]
    fn a_change_keeps_the_old_counts_on_their_schedule() {
        use proptest::prelude::*;
        use proptest::test_runner::{Config, TestRunner};

        let width = prop_oneof![6u64..5_000, 1_000_000u64..3_000_000_000];
        let policy = (1u64..=6, width.clone());
        let scenario = (policy.clone(), policy, 0u64..1_000_000_000_000).prop_flat_map(
            |((l0, w0), (l1, w1), start)| {
                let longest = w0.max(w1) * 5 / 2;
                (
                    Just(((l0, w0), (l1, w1), start)),
                    prop::collection::vec((0..=w0, 0..=l0), 1..12),
                    prop::collection::vec(0..=longest, 1..12),
                    prop::collection::vec((0..=longest / 4, 0..=l1), 0..12),
                )
            },
        );
        let mut runner = TestRunner::new(Config::with_cases(2_000));
        runner
            .run(
                &scenario,
                |(((l0, w0), (l1, w1), start), before, probes, after)| {
                    let old = Policy::sliding_window_counter(l0, Duration::from_nanos(w0)).unwrap();
                    let new = Policy::sliding_window_counter(l1, Duration::from_nanos(w1)).unwrap();
                    let mut now = Nanos::new(start);
                    let mut state = SlidingCounterState::default();
                    for (advance, cost) in before {
                        now = now + Nanos::new(advance);
                        let o = decide(&old, state, now, cost).unwrap();
                        if o.allowed() {
                            state = o.new_state();
                        }
                    }
                    // The change, written (a peek's new state is what a grant would write).
                    let changed = decide(&new, state, now, 0).unwrap().new_state();
                    for probe in probes {
                        let at = now + Nanos::new(probe);
                        let was = decide(&old, state, at, 0).unwrap().decision(false);
                        let is = decide(&new, changed, at, 0).unwrap().decision(false);
                        let charged = (l0 - was.remaining()).min(l1);
                        prop_assert_eq!(is.remaining(), l1 - charged, "at +{}", probe);
                        for cost in 1..=l0.min(l1) {
                            let was = decide(&old, state, at, cost).unwrap().decision(false);
                            let is = decide(&new, changed, at, cost).unwrap();
                            let wait = Nanos::from(is.decision(false).retry_after());
                            if l1 >= l0 {
                                prop_assert!(
                                    wait <= Nanos::from(was.retry_after()),
                                    "cost {} at +{}: {:?} after, {:?} before",
                                    cost,
                                    probe,
                                    wait,
                                    was.retry_after()
                                );
                            }
                            prop_assert_eq!(is.allowed(), wait == Nanos::ZERO);
                            if wait > Nanos::ZERO {
                                let early = decide(&new, changed, at + wait - Nanos::new(1), cost);
                                prop_assert!(
                                    !early.unwrap().allowed(),
                                    "cost {} at +{}",
                                    cost,
                                    probe
                                );
                                prop_assert!(
                                    decide(&new, changed, at + wait, cost).unwrap().allowed()
                                );
                            }
                        }
                    }
                    // Taking more under the new numbers: every wait answered is still exact.
                    let mut state = changed;
                    for (advance, cost) in after {
                        now = now + Nanos::new(advance);
                        let o = decide(&new, state, now, cost).unwrap();
                        let wait = Nanos::from(o.decision(false).retry_after());
                        if wait > Nanos::ZERO && cost > 0 {
                            prop_assert!(!o.allowed());
                            prop_assert!(
                                !decide(&new, state, now + wait - Nanos::new(1), cost)
                                    .unwrap()
                                    .allowed()
                            );
                            prop_assert!(decide(&new, state, now + wait, cost).unwrap().allowed());
                        } else if o.allowed() {
                            state = o.new_state();
                        }
                    }
                    Ok(())
                },
            )
            .unwrap();
    }

    #[test]
    fn retry_after_is_enough_and_not_too_much() {
        let p = Policy::sliding_window_counter(7, Duration::from_millis(300)).unwrap();
        let mut state = SlidingCounterState::default();
        let mut now = Nanos::new(1_000 * MS + 17);
        for cost in [3, 5, 7, 1, 2, 6, 4, 7, 7, 1] {
            let o = decide(&p, state, now, cost).unwrap();
            if !o.allowed() {
                let wait = Nanos::from(o.decision(false).retry_after());
                let before = decide(&p, state, now + wait - Nanos::new(1), cost).unwrap();
                assert!(!before.allowed(), "allowed 1 ns before retry_after");
                now = now + wait;
            }
            let o = decide(&p, state, now, cost).unwrap();
            assert!(o.allowed(), "denied after retry_after");
            state = o.new_state();
        }
    }
}
