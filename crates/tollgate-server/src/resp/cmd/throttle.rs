//! The rate limiters: redis-cell's `CL.THROTTLE`, throttlecrab's `THROTTLE`, and
//! `TOLLGATE.CHECK` for the configured policies. Each asks the core once
//! ([`Limiter::check`]) and words its answer as the server it stands in for does; the rules (the
//! key, numbers of the client's where they are turned off, a cost above the capacity) are the
//! core's.

use std::time::Duration;

use tollgate::{Decision, Policy};

use super::name::arity;
use crate::limiter::{Ask, Cost, DecideError, KeyError, Limiter, Target};
use crate::resp::codec::Reply;
use crate::resp::redis_cell::{self, Degenerate, Parsed, Throttle};

/// The bucket name every `THROTTLE` key goes by.
const THROTTLE_BUCKET: &str = "throttle";

/// redis-cell's `CL.THROTTLE`, answered as the module answers (see [`redis_cell`]).
pub(super) async fn cl_throttle(limiter: &Limiter, parsed: &Parsed<'_>) -> Reply {
    let answer = match parsed {
        Parsed::Bucket(throttle) => cell_bucket(limiter, throttle).await,
        Parsed::Degenerate(numbers) => cell_degenerate(limiter, numbers).await,
    };
    answer.unwrap_or_else(|e| Reply::Error(format!("Cell error: {e}")))
}

/// A `CL.THROTTLE` whose numbers make a bucket. A quantity above its limit is answered from a
/// look at the bucket (the core's rule for the client's numbers): nothing is taken.
async fn cell_bucket(limiter: &Limiter, throttle: &Throttle<'_>) -> Result<Reply, String> {
    let asked = chosen(
        limiter,
        throttle.policy,
        redis_cell::BUCKET,
        throttle.key,
        throttle.quantity,
    );
    let (decision, _, over_capacity) = asked.await?;
    Ok(integers(throttle.reply(&decision, over_capacity)))
}

/// A `CL.THROTTLE` with a negative among its numbers: the module's reply from a look at the
/// key's bucket (how long until it is full), which takes nothing. The look is under the
/// command's own numbers when only its quantity is negative; else under a bucket of one token a
/// second, under which a bucket is read as holding at most one token (the look takes nothing,
/// but, as any check under other numbers, rebases the bucket: never to more tokens).
///
/// No bucket holds these numbers, so the request is asked of the core as one costing more than
/// the bucket's capacity, which the core answers with a look and counts as denied.
async fn cell_degenerate(limiter: &Limiter, numbers: &Degenerate<'_>) -> Result<Reply, String> {
    let look = numbers
        .policy()
        .map_or_else(|| Policy::token_bucket(1, 1, Duration::from_secs(1)), Ok)
        .map_err(|_| "no policy to look at the bucket with".to_owned())?;
    // Above any capacity: a capacity is `max_burst + 1` of an i64, or 1.
    let (decision, ..) = chosen(limiter, look, redis_cell::BUCKET, numbers.key, u64::MAX).await?;
    let ttl = decision.reset_after().as_nanos() as i128;
    // The module's own error lines come with their "Cell error: " already.
    Ok(numbers.reply(ttl).map_or_else(Reply::Error, integers))
}

/// throttlecrab's `THROTTLE key max_burst count_per_period period [quantity]`, read: a token
/// bucket of capacity `max_burst`, `count_per_period` tokens per `period` seconds.
pub(super) struct Throttlecrab<'a> {
    key: &'a [u8],
    policy: Policy,
    /// `max_burst`, as the reply gives it back.
    burst: i64,
    quantity: u64,
}

impl<'a> Throttlecrab<'a> {
    /// Reads `args` (the command's name first), or the error to answer (as throttlecrab words
    /// it), in the order throttlecrab finds them.
    pub(super) fn parse(args: &[&'a [u8]]) -> Result<Throttlecrab<'a>, Reply> {
        if args.len() != 5 && args.len() != 6 {
            return Err(arity("throttle"));
        }
        let number = |i: usize, what: &str| -> Result<i64, Reply> {
            std::str::from_utf8(args[i])
                .ok()
                .and_then(|s| s.parse().ok())
                .ok_or_else(|| Reply::err(format!("invalid {what}")))
        };
        let burst = number(2, "max_burst")?;
        let count = number(3, "count_per_period")?;
        let period = number(4, "period")?;
        let quantity = if args.len() == 6 {
            number(5, "quantity")?
        } else {
            1
        };
        if quantity < 0 {
            return Err(Reply::err(format!("negative quantity: {quantity}")));
        }
        if burst <= 0 || count <= 0 || period <= 0 {
            return Err(Reply::err(
                "invalid rate limit: max_burst, count_per_period and period must be positive",
            ));
        }
        let policy = Policy::token_bucket(
            burst as u64,
            count as u64,
            Duration::from_secs(period as u64),
        )
        .map_err(|e| Reply::err(format!("invalid rate limit: {e}")))?;
        Ok(Throttlecrab {
            key: args[1],
            policy,
            burst,
            quantity: quantity as u64,
        })
    }
}

/// throttlecrab's `THROTTLE`: its reply's shape, `[allowed (1 when allowed), limit (=
/// max_burst), remaining, reset_after, retry_after]` in seconds, on tollgate's token bucket.
pub(super) async fn throttle(limiter: &Limiter, throttle: &Throttlecrab<'_>) -> Reply {
    let asked = chosen(
        limiter,
        throttle.policy,
        THROTTLE_BUCKET,
        throttle.key,
        throttle.quantity,
    );
    let (d, allowed, over_capacity) = match asked.await {
        Ok(answer) => answer,
        Err(e) => return Reply::err(e),
    };
    let retry = match (allowed, over_capacity) {
        (true, _) => 0,
        (false, true) => -1,
        (false, false) => d.retry_after_secs() as i64,
    };
    Reply::Array(vec![
        Reply::Integer(i64::from(allowed)),
        Reply::Integer(throttle.burst),
        Reply::Integer(d.remaining() as i64),
        Reply::Integer(d.reset_after_secs() as i64),
        Reply::Integer(retry),
    ])
}

/// `quantity` tokens of `key`'s bucket named `bucket`, under the client's `policy`: the
/// decision, whether the request is allowed, and whether the quantity exceeds the capacity
/// (then the decision is a look); or the refusal, worded for both commands.
async fn chosen(
    limiter: &Limiter,
    policy: Policy,
    bucket: &'static str,
    key: &[u8],
    quantity: u64,
) -> Result<(Decision, bool, bool), String> {
    let ask = Ask {
        target: Target::Chosen { policy, bucket },
        key,
        cost: Cost::All(quantity),
    };
    match limiter.check(ask).await {
        Ok(outcome) => Ok((
            outcome.shown().decision,
            outcome.allowed(),
            outcome.over_capacity,
        )),
        Err(e) => Err(refusal(e)),
    }
}

/// Why the core did not decide a `CL.THROTTLE` or `THROTTLE`, in the words they have always
/// answered with (`CL.THROTTLE` puts "Cell error: " before them, as redis-cell does).
fn refusal(e: DecideError) -> String {
    match e {
        DecideError::Key(KeyError { most, .. }) => format!("the key is longer than {most} bytes"),
        DecideError::InlineRefused => {
            "limits chosen by the client are turned off on this server (http.inline_policies = \
             false); use TOLLGATE.CHECK <policy> <key> [cost] with a configured policy"
                .to_owned()
        }
        DecideError::Unavailable(e) => format!("the store is unavailable: {e}"),
        e => e.to_string(),
    }
}

/// `TOLLGATE.CHECK policy key [cost]`, read.
pub(super) struct TollgateCheck<'a> {
    policy: &'a [u8],
    key: &'a [u8],
    cost: u64,
}

impl<'a> TollgateCheck<'a> {
    /// Reads `args` (the command's name first), or the error to answer.
    pub(super) fn parse(args: &[&'a [u8]]) -> Result<TollgateCheck<'a>, Reply> {
        let (policy, key, cost) = match args {
            [_, policy, key] => (policy, key, 1),
            [_, policy, key, cost] => {
                match std::str::from_utf8(cost)
                    .ok()
                    .and_then(|c| c.parse::<u64>().ok())
                {
                    Some(cost) => (policy, key, cost),
                    None => {
                        return Err(Reply::err(
                            "cost must be an integer from 0 to 18446744073709551615",
                        ));
                    }
                }
            }
            _ => return Err(arity("tollgate.check")),
        };
        Ok(TollgateCheck { policy, key, cost })
    }
}

/// `TOLLGATE.CHECK`: a configured policy by name, answered `[allowed, limit, remaining,
/// retry_after_ms, reset_after_ms]`.
pub(super) async fn tollgate_check(limiter: &Limiter, check: &TollgateCheck<'_>) -> Reply {
    let ask = Ask {
        target: Target::Named {
            names: vec![String::from_utf8_lossy(check.policy).into_owned()],
            listed: false,
        },
        key: check.key,
        cost: Cost::All(check.cost),
    };
    match limiter.check(ask).await {
        Ok(outcome) => {
            let shown = &outcome.shown().decision;
            Reply::Array(vec![
                Reply::Integer(i64::from(outcome.allowed())),
                Reply::Integer(shown.limit() as i64),
                Reply::Integer(shown.remaining() as i64),
                Reply::Integer(shown.retry_after_ms() as i64),
                Reply::Integer(shown.reset_after_ms() as i64),
            ])
        }
        Err(DecideError::Key(KeyError { most, .. })) => {
            Reply::err(format!("the key must be 1 to {most} bytes"))
        }
        Err(e) => Reply::err(e.to_string()),
    }
}

/// An array of integers.
fn integers(numbers: [i64; 5]) -> Reply {
    Reply::Array(numbers.into_iter().map(Reply::Integer).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cores_refusals_keep_the_words_of_the_commands() {
        let long = DecideError::Key(KeyError { len: 9, most: 8 });
        assert_eq!(refusal(long), "the key is longer than 8 bytes");
        assert!(refusal(DecideError::InlineRefused).starts_with(
            "limits chosen by the client are turned off on this server (http.inline_policies = \
             false); use TOLLGATE.CHECK"
        ));
        assert_eq!(
            refusal(DecideError::Unavailable("timed out".into())),
            "the store is unavailable: timed out"
        );
    }
}
