//! `CL.THROTTLE` with a negative among its numbers, which redis-cell 0.5.0 takes as they come
//! (it checks none of them): a negative `max_burst`, a negative emission interval (`count` or
//! `period` negative, not both) or a negative `quantity` run through its arithmetic all the same.
//! Those requests are answered with the module's reply, worked out here from the key's bucket as
//! it stands, and never change the bucket: where the module would move the bucket's time back
//! (giving tokens back) or write one in the past, tollgate takes and gives nothing.

use std::time::Duration;

use tollgate::Policy;

use super::{seconds, whole_micros};

/// A `CL.THROTTLE` with a negative `max_burst`, emission interval or `quantity`: the numbers of
/// the module's arithmetic, in nanoseconds, wrapped as it wraps them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(in crate::resp) struct Degenerate<'a> {
    /// The key.
    pub(in crate::resp) key: &'a [u8],
    /// `max_burst + 1`.
    limit: i64,
    /// `T = period / count`.
    emission: i64,
    /// `τ = T × limit`.
    tolerance: i64,
    /// `T × quantity`: how far the request moves the bucket's time.
    increment: i64,
}

impl<'a> Degenerate<'a> {
    /// The numbers of `CL.THROTTLE key max_burst ... quantity` whose emission interval is
    /// `emission` nanoseconds, in the module's i64 arithmetic, which was built without overflow
    /// checks: it wraps.
    pub(super) fn new(key: &'a [u8], max_burst: i64, emission: i64, quantity: i64) -> Self {
        let limit = max_burst.wrapping_add(1);
        Degenerate {
            key,
            limit,
            emission,
            tolerance: emission.wrapping_mul(limit),
            increment: emission.wrapping_mul(quantity),
        }
    }

    /// The bucket these numbers make when only the quantity is negative (`None` when the burst
    /// or the rate is): the look at the key's bucket is taken under them, as a bucket is read
    /// under the numbers it is asked with (tollgate keeps its level across a change of them).
    pub(in crate::resp) fn policy(&self) -> Option<Policy> {
        let (limit, emission) = (
            u64::try_from(self.limit).ok()?,
            u64::try_from(self.emission).ok()?,
        );
        (limit >= 1 && emission >= 1 && self.tolerance >= 0)
            .then(|| Policy::token_bucket(limit, 1, Duration::from_nanos(emission)).ok())
            .flatten()
    }

    /// The module's reply for a key whose bucket is full again in `ttl` nanoseconds (0 for a
    /// key it does not hold): limited when `max(tat, now) + increment − τ` is after now;
    /// otherwise allowed, and the module then writes the new time with the rest of the wait as
    /// its expiry, which Redis refuses below −1 ms (the module answers that error).
    pub(in crate::resp) fn reply(&self, ttl: i128) -> Result<[i64; 5], String> {
        let (emission, tolerance) = (i128::from(self.emission), i128::from(self.tolerance));
        let increment = i128::from(self.increment);
        let diff = tolerance - ttl - increment;
        let (limited, retry_after, ttl) = if diff < 0 {
            let retry_after = if increment <= tolerance {
                -diff
            } else {
                -1_000_000_000
            };
            (true, retry_after, ttl)
        } else {
            let ttl = ttl + increment;
            // Redis's RM_SetExpire takes −1 ms as "no expiry" and refuses anything lower.
            if ttl / 1_000_000 < -1 {
                return Err("Cell error: Error while setting key expire".to_owned());
            }
            (false, -1_000_000_000, ttl)
        };
        let next = tolerance - ttl;
        let remaining = if next > -emission {
            (whole_micros(next) as f64 / whole_micros(emission) as f64) as i64
        } else {
            0
        };
        Ok([
            i64::from(limited),
            self.limit,
            remaining,
            seconds(retry_after),
            seconds(ttl),
        ])
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::args;
    use super::super::{Parsed, Throttle};

    /// The module's reply to a command with a negative among its numbers, for a key whose
    /// bucket is full again in `ttl_s` seconds.
    fn degenerate(line: &str, ttl_s: i128) -> Result<[i64; 5], String> {
        match Throttle::parse(&args(line)) {
            Ok(Parsed::Degenerate(d)) => d.reply(ttl_s * 1_000_000_000),
            other => panic!("{line}: {other:?}"),
        }
    }

    #[test]
    fn each_negative_argument_is_answered_as_the_module_answers_it() {
        // Worked out by hand through the module's rate_limit (0.5.0), a fresh key first.
        // max_burst −1: τ = 0 < T, limited; the wait is −1 as the increment exceeds τ.
        assert_eq!(degenerate("CL.THROTTLE k -1 1 60", 0), Ok([1, 0, 0, -1, 0]));
        assert_eq!(
            degenerate("CL.THROTTLE k -5 1 60", 0),
            Ok([1, -4, 0, -1, 0])
        );
        // A look (quantity 0) at τ = 0 is allowed.
        assert_eq!(
            degenerate("CL.THROTTLE k -1 1 60 0", 0),
            Ok([0, 0, 0, -1, 0])
        );
        // count or period negative: T = −60 s, τ = −360 s.
        assert_eq!(degenerate("CL.THROTTLE k 5 -1 60", 0), Ok([1, 6, 0, -1, 0]));
        assert_eq!(degenerate("CL.THROTTLE k 5 1 -60", 0), Ok([1, 6, 0, -1, 0]));
        // max_burst 0 and T = −60 s: allowed, and the expiry of −60 s is refused by Redis.
        assert_eq!(
            degenerate("CL.THROTTLE k 0 -1 60", 0),
            Err("Cell error: Error while setting key expire".to_owned())
        );
        // A negative quantity: allowed, the bucket's time moved back 60 s. On a fresh key
        // that is an expiry in the past, refused; on a key 100 s from full, 40 s remain.
        assert_eq!(
            degenerate("CL.THROTTLE k 5 1 60 -1", 0),
            Err("Cell error: Error while setting key expire".to_owned())
        );
        assert_eq!(
            degenerate("CL.THROTTLE k 5 1 60 -1", 100),
            Ok([0, 6, 5, -1, 40])
        );
        // Both negative make a positive rate: the module's 1 per 60 s, a bucket like any.
        assert!(matches!(
            Throttle::parse(&args("CL.THROTTLE k 5 -1 -60")),
            Ok(Parsed::Bucket(_))
        ));
    }
}
