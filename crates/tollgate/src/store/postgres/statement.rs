//! The decision statements: each method sends its statement (with the retries), reads the rows
//! it answers, and replays them into decisions.

use std::sync::atomic::Ordering;

use tokio::time::Instant;
use tokio_postgres::types::ToSql;

use super::batch::Queued;
use super::call::{Call, Units, garbage, tat_of};
use super::error::store_error;
use super::retry::Failure;
use super::windows;
use super::{Inner, Isolation};
use crate::algorithm::gcra::Gcra;
use crate::store::Check;
use crate::{Decision, Nanos, Policy, StoreError, Verdict};

impl Inner {
    /// Decides `decisions`, some with a window among their checks: one call of `decide_any`
    /// per decision, in order. (Windows are not coalesced into set statements as token buckets
    /// are: each decision is its own call.)
    pub(super) async fn decide_windows(
        &self,
        deadline: Instant,
        decisions: &[Vec<Queued>],
    ) -> Result<Vec<Verdict>, StoreError> {
        let mut verdicts = Vec::with_capacity(decisions.len());
        for decision in decisions {
            let call = windows::AnyCall::new(
                decision
                    .iter()
                    .map(|q| (q.bucket.as_slice(), &q.units, q.cost)),
            );
            let now_param = self.now_param()?;
            let params: [&(dyn ToSql + Sync); 6] = [
                &call.keys,
                &call.kinds,
                &call.a,
                &call.b,
                &call.cost,
                &now_param,
            ];
            let row = match self
                .run(deadline, self.retry.max_attempts, |conn| async move {
                    conn.client.query_one(&conn.decide_any, &params).await
                })
                .await
            {
                Ok(row) => row,
                Err(Failure::Store(e)) => return Err(e),
                Err(Failure::GaveUp(e)) => {
                    let policies: Vec<(Policy, u64)> =
                        decision.iter().map(|q| (q.units.policy, q.cost)).collect();
                    verdicts.extend(self.gave_up([&policies[..]], e)?);
                    continue;
                }
            };
            let reply: Vec<i64> = row
                .try_get(0)
                .map_err(|e| StoreError::Incompatible(Box::new(e)))?;
            verdicts.push(call.replay(&reply)?);
        }
        Ok(verdicts)
    }

    /// Decides `decisions` in order with one call of the decide function.
    pub(super) async fn decide_by_function(
        &self,
        deadline: Instant,
        decisions: &[Vec<Queued>],
    ) -> Result<Vec<Verdict>, StoreError> {
        let checks: Vec<Vec<Check<'_>>> = decisions
            .iter()
            .map(|d| d.iter().map(Queued::check).collect())
            .collect();
        let call = Call::new(checks.iter().map(|c| &c[..]))?;
        match self.call(deadline, &call).await {
            Ok(verdicts) => Ok(verdicts),
            Err(Failure::Store(e)) => Err(e),
            Err(Failure::GaveUp(e)) => {
                let policies: Vec<Vec<(Policy, u64)>> = decisions
                    .iter()
                    .map(|d| d.iter().map(|q| (q.units.policy, q.cost)).collect())
                    .collect();
                self.gave_up(policies.iter().map(Vec::as_slice), e)
            }
        }
    }

    /// One check with cost >= 1 on the row `bucket`: the single upsert; asked `again` once
    /// when the row changed under the statement (see [`answer`]).
    pub(super) async fn take(
        &self,
        deadline: Instant,
        units: &Units,
        bucket: &[u8],
        cost: u64,
        again: bool,
    ) -> Result<Decision, StoreError> {
        let cost_param = i64::try_from(cost).unwrap_or(i64::MAX);
        let now_param = self.now_param()?;
        let params: [&(dyn ToSql + Sync); 5] =
            [&bucket, &cost_param, &units.t, &units.tau, &now_param];
        let row = match self
            .run(deadline, self.retry.max_attempts, |conn| async move {
                conn.client.query_one(&conn.decide_one, &params).await
            })
            .await
        {
            Ok(row) => row,
            Err(Failure::Store(e)) => return Err(e),
            Err(Failure::GaveUp(e)) => {
                return self
                    .gave_up([&[(units.policy, cost)][..]], e)?
                    .pop()
                    .and_then(|v| v.decisions.into_iter().next())
                    .ok_or_else(|| StoreError::incompatible("no decision"));
            }
        };
        let read = |i: usize| {
            row.try_get::<_, Option<i64>>(i)
                .map_err(|e| StoreError::Incompatible(Box::new(e)))
        };
        let (now, taken, seen) = (read(0)?.unwrap_or(0), read(1)?, read(2)?);
        match answer(units, bucket, cost, now, taken, seen)? {
            Some(decision) => Ok(decision),
            // Asked again, the statement reads a clock and a snapshot from after the
            // transactions it waited for.
            None if again => Box::pin(self.take(deadline, units, bucket, cost, false)).await,
            None => Ok(stale_denial(units, cost, now, seen)?),
        }
    }

    /// Single checks on distinct buckets, each cost >= 1: one statement for all.
    ///
    /// Under SERIALIZABLE, one attempt: `None` when it failed to serialize, and the caller
    /// decides the batch with the decide function instead, with the usual retries. One
    /// conflicting row fails a whole set, and a set retried as a set meets the same storm again
    /// (in a benchmark race of first calls on fresh keys, a set of 22 ran out of retries); the
    /// decide function locks its rows before it decides. With the fallback, such give-ups came
    /// as rarely as on the decide function alone (one batch in four runs either way).
    pub(super) async fn take_set(
        &self,
        deadline: Instant,
        checks: &[&Queued],
    ) -> Result<Option<Vec<Decision>>, StoreError> {
        let keys: Vec<&[u8]> = checks.iter().map(|q| q.bucket.as_slice()).collect();
        let costs: Vec<i64> = checks
            .iter()
            .map(|q| i64::try_from(q.cost).unwrap_or(i64::MAX))
            .collect();
        let t: Vec<i64> = checks.iter().map(|q| q.units.t).collect();
        let tau: Vec<i64> = checks.iter().map(|q| q.units.tau).collect();
        let now_param = self.now_param()?;
        let params: [&(dyn ToSql + Sync); 5] = [&keys, &costs, &t, &tau, &now_param];
        let attempts = match self.isolation {
            Isolation::ReadCommitted => self.retry.max_attempts,
            Isolation::Serializable => 1,
        };
        let rows = match self
            .run(deadline, attempts, |conn| async move {
                conn.client.query(&conn.decide_set, &params).await
            })
            .await
        {
            Ok(rows) => rows,
            Err(Failure::Store(e)) => return Err(e),
            Err(Failure::GaveUp(_)) if self.isolation == Isolation::Serializable => {
                return Ok(None);
            }
            Err(Failure::GaveUp(e)) => {
                let policies: Vec<[(Policy, u64); 1]> =
                    checks.iter().map(|q| [(q.units.policy, q.cost)]).collect();
                return Ok(Some(
                    self.gave_up(policies.iter().map(|p| &p[..]), e)?
                        .into_iter()
                        .flat_map(|v| v.decisions)
                        .collect(),
                ));
            }
        };
        if rows.len() != checks.len() {
            return Err(StoreError::incompatible(
                "the statement answered a different number of checks",
            ));
        }
        let mut decisions = Vec::with_capacity(checks.len());
        for (row, q) in rows.iter().zip(checks) {
            let read = |i: usize| {
                row.try_get::<_, Option<i64>>(i)
                    .map_err(|e| StoreError::Incompatible(Box::new(e)))
            };
            let decision = match answer(
                &q.units,
                &q.bucket,
                q.cost,
                read(0)?.unwrap_or(0),
                read(1)?,
                read(2)?,
            )? {
                Some(decision) => decision,
                // Rare: the row changed under the statement. Asked again alone.
                None => {
                    self.take(deadline, &q.units, &q.bucket, q.cost, true)
                        .await?
                }
            };
            decisions.push(decision);
        }
        Ok(Some(decisions))
    }

    /// Cost 0: reads the row `bucket`, and writes nothing but a rebase to new numbers.
    pub(super) async fn peek(
        &self,
        deadline: Instant,
        units: &Units,
        bucket: &[u8],
    ) -> Result<Decision, StoreError> {
        let now_param = self.now_param()?;
        let params: [&(dyn ToSql + Sync); 4] = [&bucket, &now_param, &units.t, &units.tau];
        let row = self
            .run(deadline, self.retry.max_attempts, |conn| async move {
                conn.client.query_one(&conn.peek_one, &params).await
            })
            .await
            .map_err(|f| match f {
                Failure::Store(e) => e,
                Failure::GaveUp(e) => {
                    self.stats.gave_up.fetch_add(1, Ordering::Relaxed);
                    store_error(e)
                }
            })?;
        let read = |i: usize| {
            row.try_get::<_, Option<i64>>(i)
                .map_err(|e| StoreError::Incompatible(Box::new(e)))
        };
        let now_us = read(0)?.unwrap_or(0);
        let tat = tat_of(read(1)?.unwrap_or(0), now_us)
            .ok_or_else(|| garbage(&[bucket.to_vec()], Some(0)))?;
        let now = micros(now_us);
        Ok(Gcra::new(&units.policy)
            .decide(tat, now, 0)?
            .decision(false))
    }

    /// One call of the decide function.
    async fn call(&self, deadline: Instant, call: &Call) -> Result<Vec<Verdict>, Failure> {
        let now_param = self.now_param()?;
        let params: [&(dyn ToSql + Sync); 7] = [
            &call.keys,
            &now_param,
            &call.sizes,
            &call.idx,
            &call.t,
            &call.tau,
            &call.cost,
        ];
        let row = self
            .run(deadline, self.retry.max_attempts, |conn| async move {
                conn.client.query_one(&conn.decide_many, &params).await
            })
            .await?;
        let reply: Vec<i64> = row
            .try_get(0)
            .map_err(|e| StoreError::Incompatible(Box::new(e)))?;
        Ok(call.replay(&reply)?)
    }
}

/// The decision of one upsert of cost `cost` (>= 1): `taken` is the tat it wrote, or `None`
/// when it denied, and then `seen` the tat of its snapshot. The decision is replayed with
/// [`Gcra`] and checked against what was written.
///
/// `None` when the statement denied a check its own snapshot allows: another transaction
/// changed the row between the statement's start (its snapshot, and the time it read) and the
/// row's lock. The denial may then be an artefact of that earlier time (the other transaction
/// decided at a later one, and took tokens the statement's time had not yet made), so the
/// caller asks again.
fn answer(
    units: &Units,
    bucket: &[u8],
    cost: u64,
    now: i64,
    taken: Option<i64>,
    seen: Option<i64>,
) -> Result<Option<Decision>, StoreError> {
    let now_us = now;
    let now = micros(now);
    let gcra = Gcra::new(&units.policy);
    let Some(taken) = taken else {
        // The statement never decides on a tat this version never writes: report it.
        let seen = tat_of(seen.unwrap_or(0), now_us)
            .ok_or_else(|| garbage(&[bucket.to_vec()], Some(0)))?;
        let outcome = gcra.decide(seen, now, cost)?;
        return Ok((!outcome.allowed()).then(|| outcome.decision(false)));
    };
    // The upsert wrote max(tat, now) + cost × t: replaying from max(tat, now) gives the same
    // decision.
    let cost_param = i64::try_from(cost).unwrap_or(i64::MAX);
    let held = micros(taken.saturating_sub(cost_param.saturating_mul(units.t)));
    let outcome = gcra.decide(held, now, cost)?;
    if !outcome.allowed() || outcome.new_tat() != micros(taken) {
        return Err(StoreError::incompatible(
            "the statement and tollgate's model disagree",
        ));
    }
    Ok(Some(outcome.decision(true)))
}

/// A denial by a row that changed under the statement, asked twice: the snapshot cannot say by
/// how much, but the next token is at least one emission interval away.
fn stale_denial(
    units: &Units,
    cost: u64,
    now: i64,
    seen: Option<i64>,
) -> Result<Decision, StoreError> {
    let outcome = Gcra::new(&units.policy).decide(micros(seen.unwrap_or(0)), micros(now), cost)?;
    let decided = outcome.decision(false);
    Ok(Decision::exact(
        false,
        decided.limit(),
        0,
        units.policy.emission_nanos(),
        Nanos::from(decided.reset_after()),
    ))
}

fn micros(us: i64) -> Nanos {
    Nanos::new(u64::try_from(us).unwrap_or(0).saturating_mul(1000))
}
