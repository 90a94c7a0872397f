//! The Redis key layout.
//!
//! ```text
//! tollgate:v1:{<escaped user key>}:<kind>:<capacity>:<refill>:<period_ns>
//! ```
//!
//! - `<kind>` names the algorithm, and so the type and shape of the value (see `decide.lua`):
//!   `tb` token bucket (a string), `fw` fixed window (a string), `sl` sliding-window log (a
//!   list), `sc` sliding-window counter (a string). For windows, `<capacity>` and `<refill>`
//!   are both the limit and `<period_ns>` is the window.
//! - `v1` versions the layout: a future change of the stored value moves to `v2` and never reads
//!   a `v1` value as something else.
//! - The user key is the hash tag, so every policy of one key lands in one Redis Cluster slot and
//!   a check of several policies of one key is one atomic script there too.
//! - The user key is percent-escaped: `%`, `{`, `}`, and every byte outside printable ASCII
//!   (space, newline, control bytes, non-ASCII). The escaped key holds no `}`, so the hash tag
//!   always ends where the user key ends, and escaping is injective: two different user keys
//!   never share a bucket, whatever braces, colons or binary they carry.
//! - The policy is part of the name: the same key under two policies is two buckets, and a
//!   policy that changes starts fresh buckets instead of reading state kept under other terms.

use std::io::Write;

use crate::{Algorithm, Policy};

/// The prefix of every key tollgate writes.
pub(crate) const PREFIX: &str = "tollgate:v1:";

/// The Redis key of the bucket of `key` under `policy`.
pub(crate) fn bucket_key(policy: &Policy, key: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(PREFIX.len() + key.len() + 48);
    out.extend_from_slice(PREFIX.as_bytes());
    out.push(b'{');
    escape_into(key, &mut out);
    out.push(b'}');
    let kind = match policy.algorithm() {
        Algorithm::TokenBucket => "tb",
        Algorithm::FixedWindow => "fw",
        Algorithm::SlidingWindowLog => "sl",
        Algorithm::SlidingWindowCounter => "sc",
    };
    // Writing into a Vec cannot fail.
    let _ = write!(
        out,
        ":{kind}:{}:{}:{}",
        policy.capacity(),
        policy.refill(),
        policy.period().as_u64()
    );
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

    fn policy() -> Policy {
        Policy::token_bucket(10, 5, Duration::from_secs(1)).unwrap()
    }

    #[test]
    fn layout_is_versioned_and_tagged_by_the_user_key() {
        assert_eq!(
            bucket_key(&policy(), b"alice"),
            b"tollgate:v1:{alice}:tb:10:5:1000000000"
        );
        assert_eq!(
            bucket_key(&policy(), b"a}b{c% \n\xff"),
            b"tollgate:v1:{a%7Db%7Bc%25%20%0A%FF}:tb:10:5:1000000000"
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
        .map(|p| bucket_key(&p.unwrap(), b"alice"));
        assert_eq!(
            keys,
            [
                b"tollgate:v1:{alice}:fw:7:7:1000000000".to_vec(),
                b"tollgate:v1:{alice}:sl:7:7:1000000000".to_vec(),
                b"tollgate:v1:{alice}:sc:7:7:1000000000".to_vec(),
            ]
        );
    }

    #[test]
    fn different_keys_never_collide() {
        let keys: [&[u8]; 10] = [
            b"a", b"a ", b"a%20", b"{a}", b"%7Ba%7D", b"a:tb", b"a}:tb", b"", b"\x00", b"%00",
        ];
        let encoded: HashSet<_> = keys.iter().map(|k| bucket_key(&policy(), k)).collect();
        assert_eq!(encoded.len(), keys.len());
    }
}
