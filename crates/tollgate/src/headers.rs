//! The IETF rate-limit headers (draft-ietf-httpapi-ratelimit-headers), as HTTP front ends send
//! them: `RateLimit-Policy: "api";q=100;w=10` describes a policy, `RateLimit: "api";r=42;t=3`
//! the state of the client's bucket under it. Both are structured-field lists (RFC 9651) whose
//! items are the policy's name, a string.
//!
//! For a token bucket, the quota `q` is the capacity and the window `w` the time an empty bucket
//! takes to fill again (whole seconds, rounded up, at least 1); `r` is the whole tokens left and
//! `t` the seconds until the bucket is full again, rounded up.
//!
//! ```
//! use std::time::Duration;
//! use tollgate::{headers, MemoryStore, Policy};
//!
//! let policy = Policy::token_bucket(10, 10, Duration::from_secs(1))?;
//! let decision = MemoryStore::new().check(&policy, b"alice", 1)?;
//! assert_eq!(headers::rate_limit_policy("api", &policy), r#""api";q=10;w=1"#);
//! assert_eq!(headers::rate_limit("api", &decision), r#""api";r=9;t=1"#);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use std::fmt::Write;

use crate::{Decision, Policy};

/// The `RateLimit-Policy` item for `policy`, named `name`.
pub fn rate_limit_policy(name: &str, policy: &Policy) -> String {
    let mut out = String::with_capacity(name.len() + 24);
    // Writing to a String cannot fail.
    let _ = write_rate_limit_policy(&mut out, name, policy);
    out
}

/// The `RateLimit` item for `decision`, under the policy named `name`.
pub fn rate_limit(name: &str, decision: &Decision) -> String {
    let mut out = String::with_capacity(name.len() + 24);
    // Writing to a String cannot fail.
    let _ = write_rate_limit(&mut out, name, decision);
    out
}

/// Appends [`rate_limit_policy`] to `out`: a front end builds a header of several items in one
/// buffer. Fails only as `out` does.
pub(crate) fn write_rate_limit_policy(
    out: &mut (impl Write + ?Sized),
    name: &str,
    policy: &Policy,
) -> std::fmt::Result {
    push_sf_string(out, name)?;
    out.write_str(";q=")?;
    push_u64(out, policy.capacity())?;
    out.write_str(";w=")?;
    push_u64(out, window_secs(policy))
}

/// Appends [`rate_limit`] to `out`. Fails only as `out` does.
pub(crate) fn write_rate_limit(
    out: &mut (impl Write + ?Sized),
    name: &str,
    decision: &Decision,
) -> std::fmt::Result {
    push_sf_string(out, name)?;
    out.write_str(";r=")?;
    push_u64(out, decision.remaining())?;
    out.write_str(";t=")?;
    push_u64(out, decision.reset_after_secs())
}

/// `n` in decimal: `itoa` rather than `write!`, whose formatting machinery was most of the cost
/// of a header (the server's `/v1/check` formats six numbers an answer).
fn push_u64(out: &mut (impl Write + ?Sized), n: u64) -> std::fmt::Result {
    out.write_str(itoa::Buffer::new().format(n))
}

/// The time for an empty bucket to fill: `capacity` emission intervals, in whole seconds rounded
/// up; never 0, which the draft reserves for no window at all.
pub fn window_secs(policy: &Policy) -> u64 {
    let nanos = u128::from(policy.capacity()) * u128::from(policy.emission_nanos().as_u64());
    u64::try_from(nanos.div_ceil(1_000_000_000))
        .unwrap_or(u64::MAX)
        .max(1)
}

/// `name` as a structured-field string: quoted, with `"` and `\` escaped. Strings may hold only
/// printable ASCII, so anything else is replaced by `?` rather than producing an invalid header.
fn push_sf_string(out: &mut (impl Write + ?Sized), name: &str) -> std::fmt::Result {
    out.write_char('"')?;
    // The usual name (letters, digits, `_`, `-`, `.`) needs no escape: written whole.
    if name
        .bytes()
        .all(|b| matches!(b, b' '..=b'~') && b != b'"' && b != b'\\')
    {
        out.write_str(name)?;
        return out.write_char('"');
    }
    for c in name.chars() {
        match c {
            '"' | '\\' => {
                out.write_char('\\')?;
                out.write_char(c)?;
            }
            ' '..='~' => out.write_char(c)?,
            _ => out.write_char('?')?,
        }
    }
    out.write_char('"')
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn window_is_the_time_to_fill_rounded_up() {
        let slow = Policy::token_bucket(100, 1, Duration::from_secs(3)).unwrap();
        assert_eq!(window_secs(&slow), 300);
        // 10 tokens at 1000/s fill in 10 ms: the draft's window is whole seconds, at least 1.
        let fast = Policy::token_bucket(10, 1000, Duration::from_secs(1)).unwrap();
        assert_eq!(window_secs(&fast), 1);
        // 3 tokens at 2 per second: 1.5 s, rounded up.
        let odd = Policy::token_bucket(3, 2, Duration::from_secs(1)).unwrap();
        assert_eq!(window_secs(&odd), 2);
    }

    #[test]
    fn names_are_escaped_structured_field_strings() {
        let p = Policy::token_bucket(5, 5, Duration::from_secs(1)).unwrap();
        assert_eq!(rate_limit_policy(r#"a"b\c"#, &p), r#""a\"b\\c";q=5;w=1"#);
        assert_eq!(rate_limit_policy("é\n", &p), r#""??";q=5;w=1"#);
    }

    #[test]
    fn a_denial_reports_the_time_until_full() {
        let d = Decision::new(
            false,
            10,
            0,
            Duration::from_millis(100),
            Duration::from_millis(1_000_001),
        );
        assert_eq!(rate_limit("x", &d), r#""x";r=0;t=1001"#);
    }
}
