//! Envoy's rule of which denials deny: when a descriptor is over its limit, and when the
//! request is (the core's rounds ask it as they go, and the answer shows it).

use super::plan::Part;

/// Whether the descriptor of `part` is over its limit, `denied` telling which buckets are.
pub(super) fn over_limit(part: &Part, denied: &[bool]) -> bool {
    match part {
        Part::Counted {
            bucket,
            negative: false,
            ..
        } => denied[*bucket],
        _ => false,
    }
}

/// Whether the request is over, by envoyproxy/ratelimit's rule: a descriptor over its limit
/// that is neither in shadow nor in quota mode, or every quota descriptor over (one in shadow
/// mode never is). Under the server-wide shadow switch (`global_shadow`), never.
pub(super) fn request_over(parts: &[Part], denied: &[bool], global_shadow: bool) -> bool {
    if global_shadow {
        return false;
    }
    let (mut quota, mut quota_over) = (0usize, 0usize);
    for part in parts {
        let Part::Counted { limit, .. } = part else {
            continue;
        };
        let over = over_limit(part, denied) && !limit.rule.shadow_mode;
        if limit.rule.quota_mode {
            quota += 1;
            quota_over += usize::from(over);
        } else if over {
            return true;
        }
    }
    quota > 0 && quota == quota_over
}
