//! [`Settle`] for the Redis store: one run of `settle.lua` per settlement, and `DEL` to reset.

use std::fmt::Write;

use redis::{Script, Value};

use super::encoded::MICROSECOND;
use super::error::store_error;
use super::keys::{bucket_key, tag_prefix};
use super::script;
use super::{Connection, RedisStore};
use crate::algorithm::gcra::Gcra;
use crate::store::Check;
use crate::store::settle::{self, Adjustment, Once, Settle};
use crate::{CheckError, Decision, Nanos, Policy, StoreError, Verdict};

/// Lua's doubles are exact below 2^53: `amount × t` is capped at 2^52 (see `settle.lua`).
const MAX_SPAN: u64 = 1 << 52;

/// How long an id made for a settlement is remembered: longer than any resend of it.
const RESEND_WINDOW: std::time::Duration = std::time::Duration::from_secs(10);

/// Ids for the settlements of a cluster store: a random 64-bit prefix per store and a counter,
/// unique across processes without a random source per call.
pub(super) struct SettleIds {
    prefix: [u8; 16],
    counter: std::sync::atomic::AtomicU64,
}

impl SettleIds {
    pub(super) fn new() -> SettleIds {
        use std::hash::{BuildHasher, Hasher};
        // The standard library seeds each thread's first RandomState from the system's random
        // source (later ones count up from it): two hashes make 128 bits no other process has.
        let mut prefix = [0; 16];
        for (half, salt) in prefix.chunks_mut(8).zip([0u8, 1]) {
            let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
            hasher.write_u32(std::process::id());
            hasher.write_u8(salt);
            half.copy_from_slice(&hasher.finish().to_le_bytes());
        }
        SettleIds {
            prefix,
            counter: std::sync::atomic::AtomicU64::new(0),
        }
    }

    fn next(&self) -> [u8; 24] {
        let n = self
            .counter
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let mut id = [0; 24];
        id[..16].copy_from_slice(&self.prefix);
        id[16..].copy_from_slice(&n.to_le_bytes());
        id
    }
}

impl RedisStore {
    async fn run(&self, cmd: &redis::Cmd, lua: &Script) -> Result<Value, StoreError> {
        let wait = self.inner.scripts.wait.as_ref();
        let run = async {
            match self.inner.connection.clone() {
                Connection::Single(mut c) => script::query(lua, cmd, &mut c, false, wait).await,
                Connection::Cluster(mut c) => script::query(lua, cmd, &mut c, true, wait).await,
                Connection::Sentinel(f) => {
                    script::query(lua, cmd, &mut f.connection(), false, wait).await
                }
            }
            .map_err(store_error)
        };
        let timeout = self.inner.timeout;
        let result = tokio::time::timeout(timeout, run)
            .await
            .unwrap_or(Err(StoreError::Timeout(timeout)));
        if let (Err(e), Connection::Sentinel(f)) = (&result, &self.inner.connection) {
            f.failed(e);
        }
        result
    }

    fn same_slot(&self, checks: &[Check<'_>]) -> Result<(), CheckError> {
        if self.inner.is_cluster() && checks.iter().any(|c| c.key != checks[0].key) {
            return Err(CheckError::Unsupported(
                "in Redis Cluster, the buckets of one call must share a key (one hash slot)",
            ));
        }
        Ok(())
    }
}

fn micros_policies(policies: &[Policy]) -> impl Iterator<Item = Gcra> + '_ {
    policies.iter().map(Gcra::new)
}

impl Settle for RedisStore {
    async fn settle(
        &self,
        once: Option<Once<'_>>,
        adjustments: &[(Check<'_>, Adjustment)],
    ) -> Result<Verdict, StoreError> {
        settle::validate(once, adjustments)?;
        if adjustments.is_empty() {
            return Ok(Verdict::new(Vec::new()));
        }
        let checks: Vec<Check<'_>> = adjustments.iter().map(|(c, _)| *c).collect();
        self.same_slot(&checks)?;
        // The cluster client sends a command again when its connection broke before the reply
        // came, which would give a refund twice: there every settlement runs under an id, so a
        // resent one finds it done.
        let auto_id;
        let (once, resent_is_done) = match once {
            None if self.inner.is_cluster() => {
                auto_id = self.inner.settle_ids.next();
                let ttl = RESEND_WINDOW.max(2 * self.inner.timeout);
                (Some(Once { id: &auto_id, ttl }), true)
            }
            once => (once, false),
        };
        let script = &self.inner.scripts.settle;
        let mut cmd = redis::cmd("EVALSHA");
        cmd.arg(script.get_hash())
            .arg(checks.len() + usize::from(once.is_some()));
        let mut keys = Vec::with_capacity(checks.len());
        for check in &checks {
            let key = bucket_key(check);
            cmd.arg(&key);
            keys.push(key);
        }
        if let Some(once) = once {
            let mut key = tag_prefix(checks[0].key);
            key.extend_from_slice(b":once:");
            let mut hex = String::with_capacity(2 * once.id.len());
            for b in once.id {
                let _ = write!(hex, "{b:02x}");
            }
            key.extend_from_slice(hex.as_bytes());
            cmd.arg(key);
        }
        match self.inner.inject_time {
            true => {
                let now = self.inner.local_now();
                script::check_now(now)?;
                cmd.arg(now.as_u64() / 1000)
            }
            false => cmd.arg(""),
        };
        match once {
            // Rounded up: an id is never forgotten before its time (validated to a year at
            // most, so it fits).
            Some(once) => {
                cmd.arg(u64::try_from(once.ttl.as_nanos().div_ceil(1_000_000)).unwrap_or(u64::MAX))
            }
            None => cmd.arg(""),
        };
        let micros: Vec<Policy> = checks
            .iter()
            .map(|c| c.policy.resolved(MICROSECOND))
            .collect();
        for ((_, adjustment), policy) in adjustments.iter().zip(&micros) {
            let t = policy.emission_nanos().as_u64() / 1000;
            let tau = policy.tolerance_nanos().as_u64() / 1000;
            let (charge, amount) = match *adjustment {
                Adjustment::Refund(n) => (0, n),
                Adjustment::Charge(n) => (1, n),
            };
            cmd.arg(t)
                .arg(tau)
                .arg(charge)
                .arg(amount.min(MAX_SPAN / t.max(1)));
        }
        let reply = self.run(&cmd, script).await;
        // Tokens given back make a cached denial of these buckets wrong (and one taken, stale).
        if let Some(cache) = &self.inner.deny_cache {
            for key in &keys {
                cache.forget(key);
            }
        }
        let reply = reply?;
        let numbers: Vec<i64> = match reply {
            Value::Array(items) => items
                .into_iter()
                .map(|v| match v {
                    Value::Int(n) => Ok(n),
                    _ => Err(StoreError::incompatible("malformed reply from settle.lua")),
                })
                .collect::<Result<_, _>>()?,
            _ => return Err(StoreError::incompatible("malformed reply from settle.lua")),
        };
        if let [-2, k] = numbers[..] {
            let key = usize::try_from(k - 1).ok().and_then(|k| keys.get(k));
            return Err(StoreError::incompatible(format!(
                "the Redis key {:?} holds a value this version of tollgate never writes \
                 (garbage, out of range, or of another type): nothing was settled, and the key \
                 now expires like a bucket of its policy",
                String::from_utf8_lossy(key.map_or(&[][..], Vec::as_slice))
            )));
        }
        if numbers == [-1] {
            if resent_is_done {
                // Our own id: the first send was applied and its reply lost. Answer the state.
                let peeks: Vec<Check<'_>> =
                    checks.iter().map(|c| Check { cost: 0, ..*c }).collect();
                return crate::Store::decide(self, &peeks).await;
            }
            return Err(CheckError::AlreadySettled.into());
        }
        let us = |us: i64| Nanos::new(u64::try_from(us).unwrap_or(0).saturating_mul(1000));
        let (&now, tats) = numbers
            .split_first()
            .filter(|(_, tats)| tats.len() == micros.len())
            .ok_or_else(|| StoreError::incompatible("malformed reply from settle.lua"))?;
        let decisions: Vec<Decision> = micros_policies(&micros)
            .zip(tats)
            .map(|(gcra, &tat)| gcra.evaluate(us(tat), us(now), 0).decision(false))
            .collect();
        Ok(Verdict::new(decisions))
    }

    async fn reset(&self, buckets: &[Check<'_>]) -> Result<(), StoreError> {
        Check::validate_all(buckets)?;
        for check in buckets {
            let key = bucket_key(check);
            if let Some(cache) = &self.inner.deny_cache {
                cache.forget(&key);
            }
            let mut cmd = redis::cmd("DEL");
            cmd.arg(key);
            self.run(&cmd, &self.inner.scripts.settle).await?;
        }
        Ok(())
    }
}
