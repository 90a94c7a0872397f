//! Who is being limited: per policy, the keys with the most denied (and allowed) decisions
//! over the last minute and the last hour, in bounded memory, for `GET /v1/top` and
//! `tollgate top`.
//!
//! Each configured policy has one [`Summary`], each Envoy domain one, and the client's own
//! numbers (inline policies, `CL.THROTTLE`, `THROTTLE`) share one, [`INLINE`]: how many
//! summaries there are follows the config, never what clients send. A summary keeps, per kind
//! of decision and per window, Space-Saving summaries of `capacity` keys
//! ([`space_saving`]) over slices of the window ([`windows`]), merged when read.
//!
//! **Error bound.** One decision in `sample_every` is recorded, counting `sample_every`
//! ([`sample`]). Over a window holding `N` recorded decisions of a kind, counted `S = N ×
//! sample_every`, a listed key's `count` is at least its estimated count and at most `error`
//! above it, with `error <= S / capacity`; every key estimated above `S / capacity` is listed.
//! The estimate is within `sample_error` ([`sample::error`]) of the true count, but for odds
//! below one in a million; at `sample_every = 1` it is the true count.
//!
//! **Memory bound.** A summary holds at most 20 × `capacity` counters (2 kinds × 2 windows ×
//! 5 slices), each at most its key (at most 1,024 bytes, the bucket bound; 33 bytes for an
//! Envoy key digested) and about 170 bytes, plus its buffers (`summary.rs`); in total, that
//! times the policies, the domains, and one.
//!
//! Reloads: a policy (or domain) that stays keeps its summary, its numbers changed or not, as
//! its buckets keep their state; one removed drops it; a renamed one starts anew.

#[cfg(test)]
mod accuracy;
pub mod sample;
pub mod space_saving;
pub mod summary;
pub mod windows;

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use arc_swap::ArcSwap;
use tokio_util::sync::CancellationToken;
use tollgate::Clock;

pub use summary::{By, Summary};
pub use windows::Window;

/// The name of the summary shared by inline policies and the client-chosen numbers of
/// `CL.THROTTLE` and `THROTTLE`.
pub const INLINE: &str = "(inline)";

/// The keys a summary lists per slice, unless `[top] capacity` says otherwise.
pub const DEFAULT_CAPACITY: usize = 1000;

/// One decision in how many a summary records, unless `[top] sample_every` says otherwise:
/// chosen by measurement (docs/performance.md), for a hot memory check's added cost to stay
/// within 5 ns.
pub const DEFAULT_SAMPLE_EVERY: u32 = 64;

/// The most `[top] sample_every` may be.
pub const MAX_SAMPLE_EVERY: u32 = 1 << 20;

/// The most `[top] capacity` may be.
pub const MAX_CAPACITY: usize = 100_000;

/// How often the buffers are drained and the windows moved on.
pub const TICK: Duration = Duration::from_secs(1);

/// What a summary summarizes.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub enum Subject {
    /// A configured policy.
    Policy(Arc<str>),
    /// The client's own numbers.
    Inline,
    /// An Envoy domain.
    Domain(String),
}

/// Every summary of a server.
pub struct Top {
    capacity: usize,
    sample_every: u32,
    clock: Arc<dyn Clock>,
    policies: Mutex<HashMap<Arc<str>, Arc<Summary>>>,
    domains: ArcSwap<HashMap<String, Arc<Summary>>>,
    inline: Arc<Summary>,
}

impl Top {
    /// Summaries of `capacity` keys (1 to [`MAX_CAPACITY`]) recording one decision in
    /// `sample_every` (1 to [`MAX_SAMPLE_EVERY`]), their time read from `clock`.
    pub fn new(capacity: usize, sample_every: u32, clock: Arc<dyn Clock>) -> Top {
        let capacity = capacity.clamp(1, MAX_CAPACITY);
        let sample_every = sample_every.clamp(1, MAX_SAMPLE_EVERY);
        Top {
            capacity,
            sample_every,
            inline: Arc::new(Summary::new(capacity, sample_every, Arc::clone(&clock))),
            clock,
            policies: Mutex::default(),
            domains: ArcSwap::default(),
        }
    }

    /// The keys each summary lists.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// One decision in how many each summary records.
    pub fn sample_every(&self) -> u32 {
        self.sample_every
    }

    /// Policy `name`'s summary, made at its first use.
    pub fn policy(&self, name: &Arc<str>) -> Arc<Summary> {
        let mut policies = self.policies.lock().unwrap_or_else(PoisonError::into_inner);
        let summary = policies.entry(Arc::clone(name)).or_insert_with(|| {
            Arc::new(Summary::new(
                self.capacity,
                self.sample_every,
                Arc::clone(&self.clock),
            ))
        });
        Arc::clone(summary)
    }

    /// Drops the summaries of policies not named in `names`.
    pub fn keep_policies<'a>(&self, names: impl Iterator<Item = &'a str>) {
        let names: std::collections::HashSet<&str> = names.collect();
        let mut kept = self.policies.lock().unwrap_or_else(PoisonError::into_inner);
        kept.retain(|name, _| names.contains(&**name));
    }

    /// Keeps a summary for each of `domains` (those already kept stay as they are), and none
    /// for any other.
    pub fn keep_domains<'a>(&self, domains: impl Iterator<Item = &'a str>) {
        let old = self.domains.load();
        let new = domains
            .map(|d| {
                let summary = old.get(d).cloned().unwrap_or_else(|| {
                    Arc::new(Summary::new(
                        self.capacity,
                        self.sample_every,
                        Arc::clone(&self.clock),
                    ))
                });
                (d.to_owned(), summary)
            })
            .collect();
        self.domains.store(Arc::new(new));
    }

    /// The summary shared by the client's own numbers.
    pub fn inline(&self) -> &Arc<Summary> {
        &self.inline
    }

    /// `subject`'s summary, if there is one.
    pub fn get(&self, subject: &Subject) -> Option<Arc<Summary>> {
        match subject {
            Subject::Policy(name) => self
                .policies
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .get(name)
                .cloned(),
            Subject::Inline => Some(Arc::clone(&self.inline)),
            Subject::Domain(domain) => self.domain(domain),
        }
    }

    /// Envoy domain `domain`'s summary, if it is configured.
    pub fn domain(&self, domain: &str) -> Option<Arc<Summary>> {
        self.domains.load().get(domain).cloned()
    }

    /// Every summary: the policies' by name, then the inline one, then the domains' by name.
    pub fn all(&self) -> Vec<(Subject, Arc<Summary>)> {
        let mut all: Vec<(Subject, Arc<Summary>)> = self
            .policies
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
            .map(|(name, s)| (Subject::Policy(Arc::clone(name)), Arc::clone(s)))
            .collect();
        all.push((Subject::Inline, Arc::clone(&self.inline)));
        all.extend(
            self.domains
                .load()
                .iter()
                .map(|(d, s)| (Subject::Domain(d.clone()), Arc::clone(s))),
        );
        all.sort_by(|a, b| a.0.cmp(&b.0));
        all
    }

    /// Drains every summary's buffers and moves its windows on, every [`TICK`], until
    /// `shutdown`.
    pub async fn run(self: Arc<Self>, shutdown: CancellationToken) {
        let mut tick = tokio::time::interval(TICK);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = tick.tick() => {}
                () = shutdown.cancelled() => return,
            }
            for (_, summary) in self.all() {
                summary.drain();
            }
        }
    }
}
