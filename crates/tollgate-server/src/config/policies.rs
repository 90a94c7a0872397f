//! `[policies.NAME]`: the named policies, checked and built.

use std::collections::BTreeMap;
use std::ops::Range;

use tollgate::{Policy, PolicyError};
use toml::Spanned;

use super::ConfigError;
use super::file::{AlgorithmName, PolicyFile};
use crate::limiter::{MAX_POLICIES, NamedPolicy, Policies};

/// The longest policy name (a bucket's name in every store).
const MAX_NAME: usize = 64;

/// The file's `[policies.*]`, checked: each refusal made by `refuse`, each policy's place
/// found by `locate`.
pub(super) fn compile(
    file: Option<Spanned<BTreeMap<String, Spanned<PolicyFile>>>>,
    refuse: &FaultAt<'_>,
    locate: &dyn Fn(usize) -> (usize, usize),
) -> Result<Policies, ConfigError> {
    let Some(file) = file else {
        return Ok(Policies::default());
    };
    let span = file.span();
    let file = file.into_inner();
    if file.len() > MAX_POLICIES {
        return Err(refuse(
            Some(span),
            "policies",
            format!(
                "{} policies; at most {MAX_POLICIES} are allowed",
                file.len()
            ),
        ));
    }
    let mut policies = Policies::default();
    for (name, p) in file {
        let field = format!("policies.{name}");
        let span = p.span();
        check_name(&name).map_err(|e| refuse(Some(span.clone()), &field, e))?;
        let (policy, shadow, lease) =
            compile_one(p.get_ref()).map_err(|(span, key, message)| {
                refuse(Some(span), &format!("{field}.{key}"), message)
            })?;
        policies.insert(NamedPolicy {
            name: name.into(),
            policy,
            shadow,
            lease,
            defined_at: locate(span.start),
        });
    }
    Ok(policies)
}

/// A name fit for a store key, a metrics label and a header: letters, digits, `_`, `-`, `.`.
fn check_name(name: &str) -> Result<(), String> {
    if name.is_empty() || name.len() > MAX_NAME {
        return Err(format!(
            "a policy's name must be 1 to {MAX_NAME} characters, got {}",
            name.len()
        ));
    }
    if let Some(c) = name
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.')))
    {
        return Err(format!(
            "{c:?} in the name {name:?}: a policy's name may hold ASCII letters and digits, `_`, `-` \
             and `.`"
        ));
    }
    // These name the buckets of client-chosen numbers (HTTP's inline policies, CL.THROTTLE,
    // THROTTLE): a configured policy of the same name would share their buckets and series.
    if matches!(name, "inline" | "cl.throttle" | "throttle") {
        return Err(format!(
            "{name:?} names the buckets of limits clients choose themselves; choose another name"
        ));
    }
    Ok(())
}

type Fault = (Range<usize>, &'static str, String);

/// Makes the error for a span of the file, a field and a message.
pub(super) type FaultAt<'a> = dyn Fn(Option<Range<usize>>, &str, String) -> ConfigError + 'a;

/// A policy's numbers, whether it is in shadow, and whether it is leased.
fn compile_one(p: &PolicyFile) -> Result<(Policy, bool, bool), Fault> {
    let capacity = *p.capacity.get_ref();
    if capacity == 0 {
        return Err((
            p.capacity.span(),
            "capacity",
            "must be at least 1, got 0".to_owned(),
        ));
    }
    let period = super::duration(p.period.get_ref()).map_err(|e| (p.period.span(), "period", e))?;
    let algorithm = p
        .algorithm
        .as_ref()
        .map_or(AlgorithmName::TokenBucket, |a| *a.get_ref());
    let built = match algorithm {
        AlgorithmName::TokenBucket => {
            let refill = p.refill.as_ref().map_or(capacity, |r| *r.get_ref());
            if refill == 0 {
                let span = p.refill.as_ref().map(Spanned::span).unwrap_or_default();
                return Err((span, "refill", "must be at least 1, got 0".to_owned()));
            }
            Policy::token_bucket(capacity, refill, period)
        }
        window => {
            if let Some(refill) = &p.refill {
                return Err((
                    refill.span(),
                    "refill",
                    "a window policy has no refill: its count starts afresh each `period`; \
                     remove `refill`, or use algorithm = \"token_bucket\""
                        .to_owned(),
                ));
            }
            match window {
                AlgorithmName::FixedWindow => Policy::fixed_window(capacity, period),
                AlgorithmName::SlidingLog => Policy::sliding_window_log(capacity, period),
                _ => Policy::sliding_window_counter(capacity, period),
            }
        }
    };
    let policy = built.map_err(|e| refusal(p, &e))?;
    let lease = p.lease.as_ref().is_some_and(|l| *l.get_ref());
    if lease && algorithm != AlgorithmName::TokenBucket {
        let span = p.lease.as_ref().map(Spanned::span).unwrap_or_default();
        return Err((
            span,
            "lease",
            "only a token bucket can be leased: a window cannot take back what a lease did \
             not spend; remove `lease`, or use algorithm = \"token_bucket\""
                .to_owned(),
        ));
    }
    Ok((policy, p.shadow, lease))
}

/// The library's refusal, pointed at the key it is about.
fn refusal(p: &PolicyFile, e: &PolicyError) -> Fault {
    // Without `refill`, a bucket refills its capacity each period: a refill too fast is the
    // capacity's, and a refill too slow the period's, the numbers the file gave.
    let unsaid = "with no `refill`, the bucket refills its whole capacity each `period`: ";
    match (e, &p.refill) {
        (PolicyError::RateTooHigh { .. }, None) => {
            (p.capacity.span(), "capacity", format!("{unsaid}{e}"))
        }
        (PolicyError::RefillTooSlow { .. }, None) => {
            (p.period.span(), "period", format!("{unsaid}{e}"))
        }
        _ => match e.field() {
            "refill" => (
                p.refill.as_ref().map_or(p.capacity.span(), Spanned::span),
                "refill",
                e.to_string(),
            ),
            "period" => (p.period.span(), "period", e.to_string()),
            _ => (p.capacity.span(), "capacity", e.to_string()),
        },
    }
}
