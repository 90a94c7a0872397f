//! What a reload may change while the server runs: the named policies, whether inline
//! policies are allowed, and each policy's entry (its metric counters, looked up once per
//! config rather than once per request).

use std::collections::HashMap;
use std::sync::Arc;

use arc_swap::ArcSwap;
use bytes::Bytes;
use tollgate::{Check, Policy, headers};

use super::{DecideError, Policies, Target};
use crate::metrics::{INLINE, Metrics, PolicyCounters};
use crate::top::{Summary, Top};

/// The policies in force.
pub struct Live {
    /// The configured policies.
    pub policies: Policies,
    /// Whether clients may send their own numbers.
    inline_policies: bool,
    entries: HashMap<Arc<str>, Arc<Entry>>,
    inline: PolicyCounters,
    inline_name: Arc<str>,
    /// The counters of [`Target::Chosen`]'s bucket names, looked up at their first request
    /// (a handful of names, fixed in the front ends' code).
    chosen: ArcSwap<Vec<(&'static str, Arc<str>, PolicyCounters)>>,
    metrics: Arc<Metrics>,
    /// The summary the client's own numbers share, when the summaries are on.
    inline_top: Option<Arc<Summary>>,
}

/// One policy of a request, resolved.
pub struct Entry {
    /// The name its buckets go by (`inline` for an inline policy, whose buckets are named by
    /// their numbers).
    pub name: Arc<str>,
    /// Whether its name names its buckets (a configured policy's does, and a
    /// [`Target::Chosen`] bucket's; an inline policy's buckets go by their numbers).
    pub named: bool,
    /// Whether it is a configured policy (checked against the store when the config was
    /// read; the client's numbers are checked at each request).
    pub configured: bool,
    /// Its numbers.
    pub policy: Policy,
    /// Never denies.
    pub shadow: bool,
    /// Its metrics.
    pub counters: PolicyCounters,
    /// Its IETF `RateLimit-Policy` item (`"api";q=10;w=1`), written once per config for a
    /// configured policy rather than at every answer (shared bytes, which an answer's header
    /// takes without a copy); empty for a [`Target::Chosen`] bucket, whose front ends send no
    /// headers.
    pub policy_item: Bytes,
    /// Where its decisions' keys are counted (`GET /v1/top`), when the summaries are on.
    pub top: Option<Arc<Summary>>,
}

impl Entry {
    fn new(
        name: Arc<str>,
        (named, configured): (bool, bool),
        policy: Policy,
        shadow: bool,
        (counters, top): (PolicyCounters, Option<Arc<Summary>>),
    ) -> Entry {
        let policy_item = match (named, configured) {
            (true, false) => Bytes::new(),
            _ => Bytes::from(headers::rate_limit_policy(&name, &policy)),
        };
        Entry {
            name,
            named,
            configured,
            policy,
            shadow,
            counters,
            policy_item,
            top,
        }
    }
}

impl Entry {
    /// The check of `cost` tokens of `key` under this policy: a configured policy's buckets go
    /// by its name, an inline one's by its numbers.
    pub fn check<'a>(&'a self, key: &'a [u8], cost: u64) -> Check<'a> {
        let check = Check::new(self.policy, key, cost);
        if self.named {
            check.named(&self.name)
        } else {
            check
        }
    }
}

impl Live {
    /// `policies` in force, their counters in `metrics`, their keys in `top`'s summaries.
    pub fn new(
        policies: Policies,
        inline_policies: bool,
        metrics: &Arc<Metrics>,
        top: Option<&Top>,
    ) -> Live {
        let entries = policies
            .iter()
            .map(|p| {
                let entry = Entry::new(
                    Arc::clone(&p.name),
                    (true, true),
                    p.policy,
                    p.shadow,
                    (metrics.policy(&p.name), top.map(|t| t.policy(&p.name))),
                );
                (Arc::clone(&p.name), Arc::new(entry))
            })
            .collect();
        Live {
            policies,
            inline_policies,
            entries,
            inline: metrics.policy(INLINE),
            inline_name: INLINE.into(),
            chosen: ArcSwap::from_pointee(Vec::new()),
            metrics: Arc::clone(metrics),
            inline_top: top.map(|t| Arc::clone(t.inline())),
        }
    }

    /// Whether clients may send their own numbers (`http.inline_policies`), for those who ask;
    /// the core refuses them itself ([`Live::resolve`]).
    pub fn inline_allowed(&self) -> bool {
        self.inline_policies
    }

    /// The policies `target` asks for, or why not: an unknown name, or numbers of the
    /// client's where they are refused.
    pub fn resolve(&self, target: &Target) -> Result<Vec<Arc<Entry>>, DecideError> {
        if target.chosen_by_client() && !self.inline_policies {
            return Err(DecideError::InlineRefused);
        }
        match target {
            Target::Inline(policy) => Ok(vec![self.inline_entry(*policy)]),
            Target::Chosen { policy, bucket } => Ok(vec![self.chosen_entry(*policy, bucket)]),
            Target::Named { names, listed } => names
                .iter()
                .map(|name| {
                    let field = if *listed { "policies" } else { "policy" };
                    self.entry(name).ok_or_else(|| self.unknown(field, name))
                })
                .collect(),
        }
    }

    /// The entry of a bucket named `bucket` under the client's `policy`.
    fn chosen_entry(&self, policy: Policy, bucket: &'static str) -> Arc<Entry> {
        let known = self
            .chosen
            .load()
            .iter()
            .find(|(b, ..)| *b == bucket)
            .cloned();
        let (_, name, counters) = known.unwrap_or_else(|| {
            // The first request of this kind: its counters are looked up once, and kept.
            let made = (
                bucket,
                Arc::<str>::from(bucket),
                self.metrics.policy(bucket),
            );
            self.chosen.rcu(|kept| {
                let mut kept = Vec::clone(kept);
                if kept.iter().all(|(b, ..)| *b != bucket) {
                    kept.push(made.clone());
                }
                kept
            });
            made
        });
        let top = self.inline_top.clone();
        Arc::new(Entry::new(
            name,
            (true, false),
            policy,
            false,
            (counters, top),
        ))
    }

    /// An inline policy's entry (allowed here or not: a commit of a reservation taken before
    /// a reload turned them off still settles).
    pub fn inline_entry(&self, policy: Policy) -> Arc<Entry> {
        Arc::new(Entry::new(
            Arc::clone(&self.inline_name),
            (false, false),
            policy,
            false,
            (self.inline.clone(), self.inline_top.clone()),
        ))
    }

    /// The configured policy `name`.
    pub fn entry(&self, name: &str) -> Option<Arc<Entry>> {
        self.entries.get(name).cloned()
    }

    /// The refusal of a name that is not configured, listing (some of) those that are.
    pub fn unknown(&self, field: &'static str, name: &str) -> DecideError {
        const SHOWN: usize = 10;
        let known: Vec<&str> = self.policies.iter().take(SHOWN).map(|p| &*p.name).collect();
        let known = match (known.len(), self.policies.len()) {
            (0, _) => "this server has no configured policies".to_owned(),
            (n, total) if total > n => format!("configured: {}, ...", known.join(", ")),
            _ => format!("configured: {}", known.join(", ")),
        };
        DecideError::UnknownPolicy {
            field,
            message: format!("no policy named {name:?} ({known})"),
        }
    }
}
