//! What a reload may change while the server runs: the named policies, whether inline
//! policies are allowed, and each policy's entry (its metric counters and its
//! `RateLimit-Policy` header, built once per config rather than once per request).

use std::collections::HashMap;
use std::sync::Arc;

use axum::http::HeaderValue;
use tollgate::{Check, Policy, headers};

use super::{DecideError, Policies, Target};
use crate::metrics::{INLINE, Metrics, PolicyCounters};

/// The policies in force.
pub struct Live {
    /// The configured policies.
    pub policies: Policies,
    /// Whether clients may send their own numbers.
    pub inline_policies: bool,
    entries: HashMap<Arc<str>, Arc<Entry>>,
    inline: PolicyCounters,
    inline_name: Arc<str>,
}

/// One policy of a request, resolved.
pub struct Entry {
    /// The name its buckets go by (`inline` for an inline policy, whose buckets are named by
    /// their numbers).
    pub name: Arc<str>,
    /// Whether it is configured (its name names its buckets).
    pub named: bool,
    /// Its numbers.
    pub policy: Policy,
    /// Never denies.
    pub shadow: bool,
    /// Its metrics.
    pub counters: PolicyCounters,
    /// Its `RateLimit-Policy` header.
    pub policy_header: Option<HeaderValue>,
}

impl Entry {
    fn new(
        name: Arc<str>,
        named: bool,
        policy: Policy,
        shadow: bool,
        counters: PolicyCounters,
    ) -> Entry {
        // Names are letters, digits, `_`, `-` and `.`, quoted: always valid header text.
        let policy_header = HeaderValue::try_from(headers::rate_limit_policy(&name, &policy)).ok();
        Entry {
            name,
            named,
            policy,
            shadow,
            counters,
            policy_header,
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
    /// `policies` in force, their counters in `metrics`.
    pub fn new(policies: Policies, inline_policies: bool, metrics: &Metrics) -> Live {
        let entries = policies
            .iter()
            .map(|p| {
                let entry = Entry::new(
                    Arc::clone(&p.name),
                    true,
                    p.policy,
                    p.shadow,
                    metrics.policy(&p.name),
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
        }
    }

    /// The policies `target` asks for, or why not: an unknown name, or an inline policy where
    /// they are refused.
    pub fn resolve(&self, target: &Target) -> Result<Vec<Arc<Entry>>, DecideError> {
        match target {
            Target::Inline(policy) => {
                if !self.inline_policies {
                    return Err(DecideError::InlineRefused);
                }
                Ok(vec![self.inline_entry(*policy)])
            }
            Target::Named { names, listed } => names
                .iter()
                .map(|name| {
                    let field = if *listed { "policies" } else { "policy" };
                    self.entry(name).ok_or_else(|| self.unknown(field, name))
                })
                .collect(),
        }
    }

    /// An inline policy's entry (allowed here or not: a commit of a reservation taken before
    /// a reload turned them off still settles).
    pub fn inline_entry(&self, policy: Policy) -> Arc<Entry> {
        Arc::new(Entry::new(
            Arc::clone(&self.inline_name),
            false,
            policy,
            false,
            self.inline.clone(),
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
