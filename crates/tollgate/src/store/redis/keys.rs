//! The Redis key layout.
//!
//! ```text
//! tollgate:v3:{<escaped user key>}:<kind>:=<escaped policy name>
//! tollgate:v3:{<escaped user key>}:<kind>:#<capacity>:<refill>:<period_ns>
//! ```
//!
//! - A bucket is named by its policy's name (`=`), or by its numbers when the check has no
//!   name (`#`): never by the numbers of a named policy, which are read at each decision, so
//!   they can change under the bucket and its state carries over.
//! - `<kind>` names the algorithm, and so the type and shape of the value (see `decide.lua`):
//!   `tb` token bucket (a string), `fw` fixed window (a string), `sl` sliding-window log (a
//!   list), `sc` sliding-window counter (a string). For windows, `<capacity>` and `<refill>`
//!   are both the limit and `<period_ns>` is the window.
//! - `v3` versions the layout: `v1` named every bucket by its numbers and stored windows
//!   without their width; `v2` stored a token bucket's `tat` without the numbers it was
//!   written under, so a change of a named policy's numbers could not keep its level. A change of the stored value or the name moves to the next version
//!   and never reads an older value as something else; older keys are ignored and expire by
//!   their TTLs. A value that only gains a form keeps the version when this version reads every
//!   older value as it was written and an older version reads the new form as garbage (a
//!   decision that fails as incompatible, nothing taken), never as something else: a sliding
//!   counter's carried counts (eight numbers instead of four, written only after a change of
//!   its width, for at most two of its old windows; see `decide.lua`).
//! - The user key is the hash tag, so every policy of one key lands in one Redis Cluster slot and
//!   a check of several policies of one key is one atomic script there too.
//! - The user key and the name are percent-escaped: `%`, `{`, `}`, and every byte outside
//!   printable ASCII (space, newline, control bytes, non-ASCII). The escaped key holds no `}`,
//!   so the hash tag always ends where the user key ends, and escaping is injective: two
//!   different buckets never share a key, whatever braces, colons or binary they carry.

use crate::{Algorithm, Check};

/// The prefix of every bucket's key.
pub(crate) const PREFIX: &str = "tollgate:v3:";

/// The layout this version writes, recorded under [`LAYOUT_KEY`] (without a TTL) so that
/// servers of two versions on one Redis notice each other.
pub(crate) const LAYOUT: &str = "v3";

/// Where the layout is recorded.
pub(crate) const LAYOUT_KEY: &str = "tollgate:layout";

/// `tollgate:v3:{<escaped user key>}`: what every key of `key`'s hash slot starts with.
pub(crate) fn tag_prefix(key: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(PREFIX.len() + key.len() + 64);
    out.extend_from_slice(PREFIX.as_bytes());
    out.push(b'{');
    escape_into(key, &mut out);
    out.push(b'}');
    out
}

/// The Redis key of `check`'s bucket.
pub(crate) fn bucket_key(check: &Check<'_>) -> Vec<u8> {
    let policy = &check.policy;
    let mut out = tag_prefix(check.key);
    let kind = match policy.algorithm() {
        Algorithm::TokenBucket => "tb",
        Algorithm::FixedWindow => "fw",
        Algorithm::SlidingWindowLog => "sl",
        Algorithm::SlidingWindowCounter => "sc",
    };
    match check.name {
        Some(name) => {
            out.push(b':');
            out.extend_from_slice(kind.as_bytes());
            out.extend_from_slice(b":=");
            escape_into(name.as_bytes(), &mut out);
        }
        // Every unnamed check formats its numbers: without `fmt`'s machinery.
        None => {
            let mut digits = itoa::Buffer::new();
            out.push(b':');
            out.extend_from_slice(kind.as_bytes());
            out.extend_from_slice(b":#");
            out.extend_from_slice(digits.format(policy.capacity()).as_bytes());
            out.push(b':');
            out.extend_from_slice(digits.format(policy.refill()).as_bytes());
            out.push(b':');
            out.extend_from_slice(digits.format(policy.period_nanos().as_u64()).as_bytes());
        }
    }
    out
}

fn escape_into(key: &[u8], out: &mut Vec<u8>) {
    const HEX: &[u8; 16] = b"0123456789ABCDEF";
    for &b in key {
        if b.is_ascii_graphic() && !matches!(b, b'%' | b'{' | b'}') {
            out.push(b);
        } else {
            out.extend_from_slice(&[b'%', HEX[usize::from(b >> 4)], HEX[usize::from(b & 15)]]);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;
    use std::time::Duration;

    use super::*;
    use crate::Policy;

    fn policy() -> Policy {
        Policy::token_bucket(10, 5, Duration::from_secs(1)).unwrap()
    }

    fn key(name: Option<&str>, key: &[u8]) -> Vec<u8> {
        let check = Check::new(policy(), key, 1);
        bucket_key(&match name {
            Some(name) => check.named(name),
            None => check,
        })
    }

    #[test]
    fn layout_is_versioned_and_tagged_by_the_user_key() {
        assert_eq!(
            key(None, b"alice"),
            b"tollgate:v3:{alice}:tb:#10:5:1000000000"
        );
        assert_eq!(
            key(None, b"a}b{c% \n\xff"),
            b"tollgate:v3:{a%7Db%7Bc%25%20%0A%FF}:tb:#10:5:1000000000"
        );
        assert_eq!(key(Some("api"), b"alice"), b"tollgate:v3:{alice}:tb:=api");
        assert_eq!(
            key(Some("per hour"), b"alice"),
            b"tollgate:v3:{alice}:tb:=per%20hour"
        );
    }

    #[test]
    fn a_named_bucket_does_not_follow_its_numbers() {
        let other = Policy::token_bucket(99, 1, Duration::from_secs(60)).unwrap();
        assert_eq!(
            bucket_key(&Check::new(other, b"alice", 1).named("api")),
            key(Some("api"), b"alice")
        );
    }

    #[test]
    fn each_algorithm_has_its_own_tag() {
        let s = Duration::from_secs(1);
        let keys = [
            Policy::fixed_window(7, s),
            Policy::sliding_window_log(7, s),
            Policy::sliding_window_counter(7, s),
        ]
        .map(|p| bucket_key(&Check::new(p.unwrap(), b"alice", 1)));
        assert_eq!(
            keys,
            [
                b"tollgate:v3:{alice}:fw:#7:7:1000000000".to_vec(),
                b"tollgate:v3:{alice}:sl:#7:7:1000000000".to_vec(),
                b"tollgate:v3:{alice}:sc:#7:7:1000000000".to_vec(),
            ]
        );
    }

    #[test]
    fn different_buckets_never_collide() {
        let keys: [&[u8]; 10] = [
            b"a", b"a ", b"a%20", b"{a}", b"%7Ba%7D", b"a:tb", b"a}:tb", b"", b"\x00", b"%00",
        ];
        let names = [
            None,
            Some("x"),
            Some("x:"),
            Some("#10:5:1000000000"),
            Some("%23"),
        ];
        let encoded: HashSet<_> = names
            .iter()
            .flat_map(|&n| keys.iter().map(move |k| key(n, k)))
            .collect();
        assert_eq!(encoded.len(), keys.len() * names.len());
    }
}
