//! The store's side of batching ([`Batcher`](crate::store::batch::Batcher)): the checks
//! waiting for a call, and which statement decides which decisions of a batch.

use std::future::Future;
use std::hash::BuildHasher;
use std::sync::atomic::Ordering;

use tokio::time::Instant;

use super::call::{self, Units};
use super::retry::deadline_after;
use super::{Inner, Isolation};
use crate::store::Check;
use crate::store::batch::Runner;
use crate::store::deny_cache::Refill;
use crate::{CheckError, Nanos, StoreError, Verdict};

/// One check waiting for a call: owned, validated, its row key formatted once.
#[derive(Clone)]
pub(super) struct Queued {
    key: Box<[u8]>,
    name: Option<Box<str>>,
    pub(super) cost: u64,
    pub(super) units: Units,
    pub(super) bucket: Vec<u8>,
}

impl Queued {
    pub(super) fn new(check: &Check<'_>) -> Result<Queued, CheckError> {
        Ok(Queued {
            key: check.key.into(),
            name: check.name.map(Into::into),
            cost: check.cost,
            units: call::validate(check)?,
            bucket: call::bucket_key(check),
        })
    }

    pub(super) fn check(&self) -> Check<'_> {
        let check = Check::new(self.units.policy, &self.key, self.cost);
        match &self.name {
            Some(name) => check.named(name),
            None => check,
        }
    }
}

/// Whether `decisions` are single checks with a cost on distinct buckets, which one set-based
/// upsert decides (`decide_set.sql`); anything else (several checks decided together, a
/// bucket twice, a peek) takes the decide function, as does a set that failed to serialize
/// (see `take_set`).
fn set_of_singles(decisions: &[Vec<Queued>]) -> bool {
    let mut buckets = std::collections::HashSet::with_capacity(decisions.len());
    decisions
        .iter()
        .all(|d| matches!(&d[..], [q] if q.cost > 0 && buckets.insert(q.bucket.as_slice())))
}

impl Runner for Inner {
    type Item = Vec<Queued>;
    type Answer = Verdict;

    fn run<'a>(
        &'a self,
        items: &'a [Vec<Queued>],
    ) -> impl Future<Output = Result<Vec<Verdict>, StoreError>> + Send + 'a {
        self.decide_batch(items)
    }

    /// Under SERIALIZABLE, two transactions that overlap in time and write one row fail to
    /// serialize: calls in flight at once never share a row, so a hot row's calls follow each
    /// other and only another process's calls can conflict with them. At READ COMMITTED the
    /// row's lock orders them with no failure, and the next call may as well wait on it in
    /// the database.
    fn rows(&self, item: &Vec<Queued>, rows: &mut Vec<u64>) {
        if self.isolation == Isolation::Serializable {
            rows.extend(item.iter().map(|q| self.row_hasher.hash_one(&q.bucket)));
        }
    }
}

impl Inner {
    /// Decides `decisions`, answering them in order: token buckets as
    /// [`decide_token_buckets`](Self::decide_token_buckets) does, decisions with a window one
    /// `decide_any` call each.
    pub(super) async fn decide_batch(
        &self,
        decisions: &[Vec<Queued>],
    ) -> Result<Vec<Verdict>, StoreError> {
        let sent = self.local_now();
        let deadline = deadline_after(self.timeout);
        let windowed: Vec<bool> = decisions
            .iter()
            .map(|d| d.iter().any(|q| !q.units.is_token_bucket()))
            .collect();
        if windowed.iter().all(|w| !w) {
            return self.decide_token_buckets(sent, deadline, decisions).await;
        }
        if windowed.iter().all(|w| *w) {
            return self.decide_windows(deadline, decisions).await;
        }
        // A batch of both: the token-bucket decisions keep their set statement, and only the
        // decisions with a window go one call each. Decisions of one batch came concurrently,
        // and a window's bucket is never a token bucket's, so neither order is owed.
        let (windows, buckets): (Vec<_>, Vec<_>) =
            decisions.iter().zip(&windowed).partition(|(_, w)| **w);
        let windows: Vec<Vec<Queued>> = windows.into_iter().map(|(d, _)| d.clone()).collect();
        let buckets: Vec<Vec<Queued>> = buckets.into_iter().map(|(d, _)| d.clone()).collect();
        let mut by_buckets = self
            .decide_token_buckets(sent, deadline, &buckets)
            .await?
            .into_iter();
        let mut by_windows = self.decide_windows(deadline, &windows).await?.into_iter();
        windowed
            .iter()
            .map(|&w| {
                if w {
                    by_windows.next()
                } else {
                    by_buckets.next()
                }
                .ok_or_else(|| {
                    StoreError::incompatible("the store answered a different number of decisions")
                })
            })
            .collect()
    }

    /// Decides `decisions` of token buckets only: a lone single check is one statement, a set
    /// of single checks one set statement, anything else one call of the decide function.
    /// Records single checks' denials in the deny cache.
    async fn decide_token_buckets(
        &self,
        sent: Nanos,
        deadline: Instant,
        decisions: &[Vec<Queued>],
    ) -> Result<Vec<Verdict>, StoreError> {
        let verdicts = match decisions {
            [one] if one.len() == 1 => {
                let q = &one[0];
                let decision = if q.cost == 0 {
                    self.peek(deadline, &q.units, &q.bucket).await?
                } else {
                    self.take(deadline, &q.units, &q.bucket, q.cost, true)
                        .await?
                };
                vec![Verdict::new(vec![decision])]
            }
            _ if set_of_singles(decisions) => {
                let checks: Vec<&Queued> = decisions.iter().map(|d| &d[0]).collect();
                match self.take_set(deadline, &checks).await? {
                    Some(decided) => decided
                        .into_iter()
                        .map(|decision| Verdict::new(vec![decision]))
                        .collect(),
                    None => {
                        self.stats.retries.fetch_add(1, Ordering::Relaxed);
                        self.decide_by_function(deadline, decisions).await?
                    }
                }
            }
            _ => self.decide_by_function(deadline, decisions).await?,
        };
        if verdicts.len() != decisions.len() {
            return Err(StoreError::incompatible(
                "the store answered a different number of decisions",
            ));
        }
        if let Some(cache) = &self.deny_cache {
            for (queued, verdict) in decisions.iter().zip(&verdicts) {
                if let ([q], [decision]) = (&queued[..], &verdict.decisions[..]) {
                    // A token bucket's denial stands until its retry_after: no token comes
                    // sooner.
                    cache.record(
                        &q.bucket,
                        &q.units.policy,
                        q.cost,
                        Refill::Every(q.units.policy.emission_nanos()),
                        sent,
                        decision.retry_after(),
                        decision,
                    );
                }
            }
        }
        Ok(verdicts)
    }
}
