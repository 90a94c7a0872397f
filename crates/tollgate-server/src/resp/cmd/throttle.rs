//! The rate limiters: redis-cell's `CL.THROTTLE`, throttlecrab's `THROTTLE`, and
//! `TOLLGATE.CHECK` for the configured policies.

use std::time::Duration;

use tollgate::{Check, Decision, Policy};

use super::{Shared, THROTTLE_BUCKET, arity};
use crate::limiter::{Ask, Cost, DecideError, KeyError, MAX_KEY_BYTES, Target};
use crate::metrics::PolicyCounters;
use crate::resp::cell::{self, Degenerate, Parsed, Throttle};
use crate::resp::codec::Reply;

/// The refusal of a client-chosen limit where the operator turned those off.
fn chosen_limits_refused(shared: &Shared) -> Option<String> {
    (!shared.limiter.live().inline_allowed()).then(|| {
        "limits chosen by the client are turned off on this server (http.inline_policies = \
         false); use TOLLGATE.CHECK <policy> <key> [cost] with a configured policy"
            .to_owned()
    })
}

/// redis-cell's `CL.THROTTLE key max_burst count period [quantity]`, answered as the module
/// answers (see [`cell`]).
pub(super) async fn cl_throttle(shared: &Shared, args: &[&[u8]]) -> Reply {
    if let Some(refused) = chosen_limits_refused(shared) {
        return Reply::Error(format!("Cell error: {refused}"));
    }
    let throttle = match Throttle::parse(args) {
        Ok(Parsed::Bucket(throttle)) => throttle,
        Ok(Parsed::Degenerate(numbers)) => return degenerate(shared, &numbers).await,
        Err(line) => return Reply::Error(line),
    };
    if throttle.key.len() > MAX_KEY_BYTES {
        return Reply::Error(format!(
            "Cell error: the key is longer than {MAX_KEY_BYTES} bytes"
        ));
    }
    // A quantity above the limit is answered from a look at the bucket: nothing is taken.
    let cost = if throttle.exceeds_limit() {
        0
    } else {
        throttle.quantity
    };
    let check = [Check::new(throttle.policy, throttle.key, cost).named(cell::BUCKET)];
    match decide_one(shared, &check, &shared.cell).await {
        Ok(decision) => {
            let reply = throttle.reply(&decision);
            Reply::Array(reply.into_iter().map(Reply::Integer).collect())
        }
        Err(e) => Reply::Error(format!("Cell error: {e}")),
    }
}

/// A `CL.THROTTLE` with a negative among its numbers: the module's reply from a look at the
/// key's bucket (how long until it is full), which takes nothing. The look is under the
/// command's own numbers when only its quantity is negative; else under a bucket of one token a
/// second, under which a bucket is read as holding at most one token (the look takes nothing,
/// but, as any check under other numbers, rebases the bucket: never to more tokens).
async fn degenerate(shared: &Shared, numbers: &Degenerate<'_>) -> Reply {
    if numbers.key.len() > MAX_KEY_BYTES {
        return Reply::Error(format!(
            "Cell error: the key is longer than {MAX_KEY_BYTES} bytes"
        ));
    }
    let look = numbers
        .policy()
        .map_or_else(|| Policy::token_bucket(1, 1, Duration::from_secs(1)), Ok);
    let Ok(look) = look else {
        return Reply::Error("Cell error: no policy to look at the bucket with".to_owned());
    };
    let check = [Check::new(look, numbers.key, 0).named(cell::BUCKET)];
    match decide_one(shared, &check, &shared.cell).await {
        Ok(decision) => match numbers.reply(decision.reset_after().as_nanos() as i128) {
            Ok(reply) => {
                // The look counted nothing; a limited answer is a denial like any.
                if reply[0] == 1 {
                    shared.cell.denied.inc();
                }
                Reply::Array(reply.into_iter().map(Reply::Integer).collect())
            }
            Err(line) => Reply::Error(line),
        },
        Err(e) => Reply::Error(format!("Cell error: {e}")),
    }
}

/// throttlecrab's `THROTTLE key max_burst count_per_period period [quantity]`: its reply's
/// shape, `[allowed (1 when allowed), limit (= max_burst), remaining, reset_after, retry_after]`
/// in seconds, on tollgate's token bucket (capacity `max_burst`, `count_per_period` tokens per
/// `period` seconds).
pub(super) async fn throttle(shared: &Shared, args: &[&[u8]]) -> Reply {
    if args.len() != 5 && args.len() != 6 {
        return arity("throttle");
    }
    if let Some(refused) = chosen_limits_refused(shared) {
        return Reply::err(refused);
    }
    let number = |i: usize, what: &str| -> Result<i64, Reply> {
        std::str::from_utf8(args[i])
            .ok()
            .and_then(|s| s.parse().ok())
            .ok_or_else(|| Reply::err(format!("invalid {what}")))
    };
    let parsed = (|| {
        let burst = number(2, "max_burst")?;
        let count = number(3, "count_per_period")?;
        let period = number(4, "period")?;
        let quantity = if args.len() == 6 {
            number(5, "quantity")?
        } else {
            1
        };
        Ok((burst, count, period, quantity))
    })();
    let (burst, count, period, quantity) = match parsed {
        Ok(numbers) => numbers,
        Err(reply) => return reply,
    };
    if quantity < 0 {
        return Reply::err(format!("negative quantity: {quantity}"));
    }
    if burst <= 0 || count <= 0 || period <= 0 {
        return Reply::err(
            "invalid rate limit: max_burst, count_per_period and period must be positive",
        );
    }
    if args[1].len() > MAX_KEY_BYTES {
        return Reply::err(format!("the key is longer than {MAX_KEY_BYTES} bytes"));
    }
    let policy = match Policy::token_bucket(
        burst as u64,
        count as u64,
        Duration::from_secs(period as u64),
    ) {
        Ok(policy) => policy,
        Err(e) => return Reply::err(format!("invalid rate limit: {e}")),
    };
    let quantity = quantity as u64;
    let over = quantity > policy.capacity();
    let check =
        [Check::new(policy, args[1], if over { 0 } else { quantity }).named(THROTTLE_BUCKET)];
    match decide_one(shared, &check, &shared.throttle).await {
        Ok(d) => {
            let allowed = d.allowed() && !over;
            let retry = match (allowed, over) {
                (true, _) => 0,
                (false, true) => -1,
                (false, false) => d.retry_after_secs() as i64,
            };
            Reply::Array(vec![
                Reply::Integer(i64::from(allowed)),
                Reply::Integer(burst),
                Reply::Integer(d.remaining() as i64),
                Reply::Integer(d.reset_after_secs() as i64),
                Reply::Integer(retry),
            ])
        }
        Err(e) => Reply::err(e),
    }
}

/// `TOLLGATE.CHECK policy key [cost]`: a configured policy by name, answered
/// `[allowed, limit, remaining, retry_after_ms, reset_after_ms]`.
pub(super) async fn tollgate_check(shared: &Shared, args: &[&[u8]]) -> Reply {
    let (policy, key, cost) = match args {
        [_, policy, key] => (policy, key, 1),
        [_, policy, key, cost] => {
            match std::str::from_utf8(cost)
                .ok()
                .and_then(|c| c.parse::<u64>().ok())
            {
                Some(cost) => (policy, key, cost),
                None => {
                    return Reply::err("cost must be an integer from 0 to 18446744073709551615");
                }
            }
        }
        _ => return arity("tollgate.check"),
    };
    let ask = Ask {
        target: Target::Named {
            names: vec![String::from_utf8_lossy(policy).into_owned()],
            listed: false,
        },
        key,
        cost: Cost::All(cost),
    };
    match shared.limiter.check(ask).await {
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

/// Decides one check, counting its outcome under `counters`.
async fn decide_one(
    shared: &Shared,
    check: &[Check<'_>; 1],
    counters: &PolicyCounters,
) -> Result<Decision, String> {
    match shared.limiter.ask_store(check).await {
        Ok(verdict) => {
            let decision = verdict.decisions()[0];
            if decision.allowed() && check[0].cost() > 0 {
                counters.allowed.inc();
            } else if !decision.allowed() {
                counters.denied.inc();
            }
            Ok(decision)
        }
        Err(e) => {
            counters.error.inc();
            Err(match DecideError::from(e) {
                DecideError::Unavailable(e) => format!("the store is unavailable: {e}"),
                e => e.to_string(),
            })
        }
    }
}
