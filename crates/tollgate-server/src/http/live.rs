//! What a reload may change while the server runs: the named policies, whether inline
//! policies are allowed, and each policy's metric counters (looked up once per config).

use std::collections::HashMap;
use std::sync::Arc;

use tollgate::Policy;

use super::problem::Problem;
use super::request::Target;
use crate::config::Policies;
use crate::metrics::{INLINE, Metrics, PolicyCounters};

/// The policies in force.
pub struct Live {
    /// The configured policies.
    pub policies: Policies,
    /// Whether clients may send their own numbers.
    pub inline_policies: bool,
    counters: HashMap<Arc<str>, PolicyCounters>,
    inline: PolicyCounters,
    inline_name: Arc<str>,
}

/// One policy of a request, resolved.
#[derive(Clone)]
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
}

impl Live {
    /// `policies` in force, their counters in `metrics`.
    pub fn new(policies: Policies, inline_policies: bool, metrics: &Metrics) -> Live {
        let counters = policies
            .iter()
            .map(|p| (Arc::clone(&p.name), metrics.policy(&p.name)))
            .collect();
        Live {
            policies,
            inline_policies,
            counters,
            inline: metrics.policy(INLINE),
            inline_name: INLINE.into(),
        }
    }

    /// The policies `target` asks for, or the problem to answer: an unknown name (`400`
    /// naming `policy` or `policies`), an inline policy where they are refused (`403`).
    pub fn resolve(&self, target: &Target) -> Result<Vec<Entry>, Problem> {
        match target {
            Target::Inline(policy) => {
                if !self.inline_policies {
                    return Err(Problem::inline_refused());
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
    pub fn inline_entry(&self, policy: Policy) -> Entry {
        Entry {
            name: Arc::clone(&self.inline_name),
            named: false,
            policy,
            shadow: false,
            counters: self.inline.clone(),
        }
    }

    /// The configured policy `name`.
    pub fn entry(&self, name: &str) -> Option<Entry> {
        let p = self.policies.get(name)?;
        Some(Entry {
            name: Arc::clone(&p.name),
            named: true,
            policy: p.policy,
            shadow: p.shadow,
            counters: self.counters.get(name)?.clone(),
        })
    }

    /// The problem for a name that is not configured, listing (some of) those that are.
    pub fn unknown(&self, field: &'static str, name: &str) -> Problem {
        const SHOWN: usize = 10;
        let known: Vec<&str> = self.policies.iter().take(SHOWN).map(|p| &*p.name).collect();
        let known = match (known.len(), self.policies.len()) {
            (0, _) => "this server has no configured policies".to_owned(),
            (n, total) if total > n => format!("configured: {}, ...", known.join(", ")),
            _ => format!("configured: {}", known.join(", ")),
        };
        Problem::invalid_field(field, format!("no policy named {name:?} ({known})"))
    }
}
