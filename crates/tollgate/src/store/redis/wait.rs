//! Durability on request: `WAIT numreplicas timeout` behind every script call that writes, on
//! the same connection, so that a decision is answered only once `numreplicas` replicas hold
//! what it wrote ([`RedisStoreBuilder::wait_for_replicas`](super::RedisStoreBuilder::wait_for_replicas)).
//!
//! Redis replicates asynchronously: a primary that dies takes with it what it had not yet sent,
//! and the buckets it held roll back on the replica promoted in its place (an over-grant). A
//! decision whose `WAIT` is acknowledged by `numreplicas` replicas survives the death of the
//! primary as long as one of them is promoted (Sentinel promotes the replica that holds most).
//! `WAIT` counts the writes of the connection up to it, which includes the script sent just
//! before it in the same pipeline (and any other call sent before it on the shared connection).
//!
//! When fewer replicas acknowledge within the timeout, the call's decisions are a store error,
//! answered by the fail policy, although Redis has applied them and the write may still survive
//! (it reached the primary, and perhaps a replica after the timeout): failing closed denies a
//! decision that may have been charged, failing open allows one that may not have been.

use std::time::Duration;

use redis::{Cmd, Value};

use crate::StoreError;

/// `WAIT replicas timeout` after each write.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Wait {
    pub(crate) replicas: u32,
    pub(crate) timeout: Duration,
}

impl Wait {
    /// Refuses what can never work: a timeout of zero (to Redis, wait for ever), one that
    /// reaches the store's `timeout` (every slow acknowledgement would be a store timeout
    /// instead of the shortfall it is), and zero replicas (nothing to wait for).
    pub(crate) fn check(&self, timeout: Duration) -> Result<(), StoreError> {
        if self.replicas == 0 {
            return Err(StoreError::Config(
                "RedisStoreBuilder::wait_for_replicas asks for 0 replicas: there is nothing to \
                 wait for; leave durability off instead"
                    .into(),
            ));
        }
        if self.timeout < Duration::from_millis(1) {
            return Err(StoreError::Config(
                "RedisStoreBuilder::wait_for_replicas has a timeout under 1 ms: Redis reads a \
                 WAIT timeout of 0 as waiting for ever"
                    .into(),
            ));
        }
        if self.timeout >= timeout {
            return Err(StoreError::Config(format!(
                "the wait timeout ({:?}) is not shorter than the store timeout ({timeout:?}): \
                 a decision must be answered within the store timeout, its WAIT included; give \
                 a wait timeout below it",
                self.timeout
            )));
        }
        Ok(())
    }

    /// `cmd`, then `WAIT`, in one pipeline on `conn`: the script's reply, or its error, or a
    /// [`NOREPLICAS`](is_shortfall) error when fewer replicas acknowledged.
    pub(crate) async fn query(
        &self,
        cmd: &Cmd,
        conn: &mut impl redis::aio::ConnectionLike,
    ) -> redis::RedisResult<Value> {
        let millis = u64::try_from(self.timeout.as_millis()).unwrap_or(u64::MAX);
        let mut pipe = redis::pipe();
        // Errors are read one by one: the script's (NOSCRIPT above all) keeps its kind.
        pipe.ignore_errors()
            .add_command(cmd.clone())
            .cmd("WAIT")
            .arg(self.replicas)
            .arg(millis);
        let replies: Vec<Value> = pipe.query_async(conn).await?;
        let mut replies = replies.into_iter();
        let (Some(reply), Some(acked)) = (replies.next(), replies.next()) else {
            return Err(shortfall("WAIT was not answered".into()));
        };
        let reply = reply.extract_error()?;
        match acked.extract_error()? {
            Value::Int(n) if n >= i64::from(self.replicas) => Ok(reply),
            Value::Int(n) => Err(shortfall(format!(
                "{n} of the {} replicas asked for acknowledged the write within {millis} ms \
                 (WAIT); it was applied on the primary and may or may not survive a failover",
                self.replicas
            ))),
            other => Err(shortfall(format!("WAIT answered {other:?}"))),
        }
    }
}

/// Redis's own code for too few replicas (`min-replicas-to-write`): transient, as a failover.
fn shortfall(detail: String) -> redis::RedisError {
    redis::make_extension_error("NOREPLICAS".into(), Some(detail))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_wait_that_could_never_work_is_refused_naming_both_timeouts() {
        let store = Duration::from_millis(50);
        let wait = |replicas, ms| Wait {
            replicas,
            timeout: Duration::from_millis(ms),
        };
        assert!(wait(1, 49).check(store).is_ok());
        let e = wait(1, 50).check(store).unwrap_err().to_string();
        assert!(e.contains("wait timeout (50ms)"), "{e}");
        assert!(e.contains("store timeout (50ms)"), "{e}");
        assert!(wait(0, 10).check(store).is_err());
        assert!(wait(1, 0).check(store).is_err());
    }

    #[test]
    fn a_shortfall_is_transient() {
        let e = super::super::error::store_error(shortfall("0 of 1".into()));
        assert_eq!(e.kind(), crate::error::ErrorKind::Unavailable, "{e}");
    }
}
