//! [`Settle`] for the PostgreSQL store: one statement per settlement (`settle.sql`), with the
//! same retries of serialization failures as a decision, and one `DELETE` to reset.

use std::sync::atomic::Ordering;

use tokio_postgres::types::ToSql;

use super::PostgresStore;
use super::call::{self, Units};
use super::retry::Failure;
use crate::algorithm::gcra::Gcra;
use crate::store::Check;
use crate::store::settle::{self, Adjustment, Once, Settle};
use crate::{CheckError, Nanos, StoreError, Verdict};

/// `amount × t` stays below 2^52, as for Redis: it covers any backlog and reaches the debt cap.
const MAX_SPAN: i64 = 1 << 52;

impl Settle for PostgresStore {
    async fn settle(
        &self,
        once: Option<Once<'_>>,
        adjustments: &[(Check<'_>, Adjustment)],
    ) -> Result<Verdict, StoreError> {
        settle::validate(once, adjustments)?;
        if adjustments.is_empty() {
            return Ok(Verdict::new(Vec::new()));
        }
        let inner = &self.inner;
        let mut keys = Vec::with_capacity(adjustments.len());
        let mut units: Vec<Units> = Vec::with_capacity(adjustments.len());
        let (mut t, mut tau, mut charge, mut amount) =
            (Vec::new(), Vec::new(), Vec::new(), Vec::new());
        for (check, adjustment) in adjustments {
            let u = Units::of(&check.policy)?;
            let (is_charge, n) = match *adjustment {
                Adjustment::Refund(n) => (false, n),
                Adjustment::Charge(n) => (true, n),
            };
            keys.push(call::bucket_key(check));
            t.push(u.t);
            tau.push(u.tau);
            charge.push(is_charge);
            amount.push(
                i64::try_from(n)
                    .unwrap_or(i64::MAX)
                    .min(MAX_SPAN / u.t.max(1)),
            );
            units.push(u);
        }
        let now_param = inner.now_param()?;
        let id: Option<&[u8]> = once.map(|o| o.id);
        let ttl: i64 = once.map_or(0, |o| i64::try_from(o.ttl.as_micros()).unwrap_or(i64::MAX));
        let params: [&(dyn ToSql + Sync); 8] =
            [&keys, &t, &charge, &amount, &now_param, &id, &ttl, &tau];
        let deadline = super::retry::deadline_after(inner.timeout);
        let rows = inner
            .run(deadline, inner.retry.max_attempts, |conn| async move {
                conn.client.query(&conn.settle, &params).await
            })
            .await;
        // Tokens given back make a cached denial of these buckets wrong.
        if let Some(cache) = &inner.deny_cache {
            for key in &keys {
                cache.forget(key);
            }
        }
        let rows = match rows {
            Ok(rows) => rows,
            Err(Failure::Store(e)) => return Err(e),
            Err(Failure::GaveUp(e)) => {
                inner.stats.gave_up.fetch_add(1, Ordering::Relaxed);
                return Err(super::error::store_error(e));
            }
        };
        if rows.len() != keys.len() {
            return Err(StoreError::incompatible(
                "the settle statement answered a different number of buckets",
            ));
        }
        let incompatible = |e| StoreError::Incompatible(Box::new(e));
        let us = |us: i64| Nanos::new(u64::try_from(us).unwrap_or(0).saturating_mul(1000));
        let mut decisions = Vec::with_capacity(rows.len());
        for (row, u) in rows.iter().zip(&units) {
            let now: i64 = row.try_get(0).map_err(incompatible)?;
            let ok: bool = row.try_get(1).map_err(incompatible)?;
            let garbage: bool = row.try_get(3).map_err(incompatible)?;
            if garbage {
                return Err(call::garbage(&keys, None));
            }
            if !ok {
                return Err(CheckError::AlreadySettled.into());
            }
            let tat: Option<i64> = row.try_get(2).map_err(incompatible)?;
            let tat =
                tat.ok_or_else(|| StoreError::incompatible("a settled bucket without a state"))?;
            decisions.push(
                Gcra::new(&u.policy)
                    .evaluate(us(tat), us(now), 0)
                    .decision(false),
            );
        }
        Ok(Verdict::new(decisions))
    }

    async fn reset(&self, buckets: &[Check<'_>]) -> Result<(), StoreError> {
        Check::validate_all(buckets)?;
        let inner = &self.inner;
        let mut keys = Vec::with_capacity(buckets.len());
        for check in buckets {
            call::validate(check)?;
            keys.push(call::bucket_key(check));
        }
        let params: [&(dyn ToSql + Sync); 1] = [&keys];
        let deadline = super::retry::deadline_after(inner.timeout);
        let done = inner
            .run(deadline, inner.retry.max_attempts, |conn| async move {
                conn.client.execute(&conn.reset, &params).await
            })
            .await;
        if let Some(cache) = &inner.deny_cache {
            for key in &keys {
                cache.forget(key);
            }
        }
        match done {
            Ok(_) => Ok(()),
            Err(Failure::Store(e)) => Err(e),
            Err(Failure::GaveUp(e)) => Err(super::error::store_error(e)),
        }
    }
}
