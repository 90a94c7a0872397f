//! [`BucketKey`]: what a bucket is stored under, its name and then the user's key.
//!
//! Every bucket of a store lives in one table, so the name of the bucket's policy is part of
//! the stored key:
//!
//! ```text
//! named:   0x01  algorithm  len(name)  name  key
//! unnamed: 0x00  algorithm  varint(capacity)  varint(refill)  varint(period_ns)  key
//! ```
//!
//! Each prefix delimits itself (a length, or varints), so two different buckets never share
//! a stored key, whatever bytes their names and keys hold. A short policy and a short key fit
//! in the 22 bytes a stored key holds without allocating.

use crate::store::{Check, MAX_NAME_LEN};
use crate::{Algorithm, CheckError, Policy};

/// Bytes held on the stack; longer bucket keys (a long name or key) go to the heap.
const STACK: usize = 64;

/// Prefix bytes held inline: a tag, the algorithm and three varints of up to 10 bytes fit, as
/// does a name of up to 37 bytes; a longer name goes to the heap. (Small, because an unnamed
/// check builds its prefix at every decision.)
const INLINE_PREFIX: usize = 40;

/// A bucket's prefix (its name or numbers), built once per policy.
#[derive(Clone)]
pub(crate) enum Prefix {
    Inline { len: u8, bytes: [u8; INLINE_PREFIX] },
    Heap(Box<[u8]>),
}

impl Prefix {
    /// The prefix of the buckets of `policy`, named `name` or by its numbers.
    pub(crate) fn of(policy: &Policy, name: Option<&str>) -> Result<Prefix, CheckError> {
        match name {
            Some(name) => Prefix::named(policy, name),
            None => Ok(Prefix::numbers(policy)),
        }
    }

    /// The prefix of buckets named by `policy`'s numbers.
    pub(crate) fn numbers(policy: &Policy) -> Prefix {
        let mut p = Prefix::start(policy, 0);
        for n in [policy.capacity(), policy.refill(), policy.period().as_u64()] {
            p.varint(n);
        }
        p
    }

    /// The prefix of buckets named `name` (1 to [`MAX_NAME_LEN`] bytes).
    pub(crate) fn named(policy: &Policy, name: &str) -> Result<Prefix, CheckError> {
        let len = u8::try_from(name.len())
            .ok()
            .filter(|&n| n > 0 && usize::from(n) <= MAX_NAME_LEN)
            .ok_or(CheckError::InvalidName { index: 0 })?;
        let head = Prefix::start(policy, 1);
        if 3 + name.len() <= INLINE_PREFIX {
            let mut p = head;
            p.push(&[len]);
            p.push(name.as_bytes());
            return Ok(p);
        }
        Ok(Prefix::Heap(
            [head.as_bytes(), &[len], name.as_bytes()].concat().into(),
        ))
    }

    fn start(policy: &Policy, tag: u8) -> Prefix {
        let algorithm = match policy.algorithm() {
            Algorithm::TokenBucket => 0,
            Algorithm::FixedWindow => 1,
            Algorithm::SlidingWindowLog => 2,
            Algorithm::SlidingWindowCounter => 3,
        };
        let mut p = Prefix::Inline {
            len: 0,
            bytes: [0; INLINE_PREFIX],
        };
        p.push(&[tag, algorithm]);
        p
    }

    /// Appends to an inline prefix (callers stay within [`INLINE_PREFIX`]).
    fn push(&mut self, more: &[u8]) {
        if let Prefix::Inline { len, bytes } = self {
            let at = usize::from(*len);
            bytes[at..at + more.len()].copy_from_slice(more);
            *len += more.len() as u8;
        }
    }

    fn varint(&mut self, mut n: u64) {
        loop {
            let low = (n & 0x7f) as u8;
            n >>= 7;
            if n == 0 {
                self.push(&[low]);
                return;
            }
            self.push(&[low | 0x80]);
        }
    }

    #[inline]
    pub(crate) fn as_bytes(&self) -> &[u8] {
        match self {
            Prefix::Inline { len, bytes } => &bytes[..usize::from(*len)],
            Prefix::Heap(bytes) => bytes,
        }
    }
}

/// A bucket's stored key: its prefix, then the user's key.
pub(crate) enum BucketKey {
    Stack { len: u8, bytes: [u8; STACK] },
    Heap(Vec<u8>),
}

impl BucketKey {
    #[inline]
    pub(crate) fn new(prefix: &Prefix, key: &[u8]) -> BucketKey {
        let prefix = prefix.as_bytes();
        let len = prefix.len() + key.len();
        if len <= STACK {
            let mut bytes = [0; STACK];
            bytes[..prefix.len()].copy_from_slice(prefix);
            bytes[prefix.len()..len].copy_from_slice(key);
            BucketKey::Stack {
                len: len as u8,
                bytes,
            }
        } else {
            BucketKey::Heap([prefix, key].concat())
        }
    }

    /// The stored key of `check`'s bucket.
    pub(crate) fn of(check: &Check<'_>) -> Result<BucketKey, CheckError> {
        Ok(BucketKey::new(
            &Prefix::of(&check.policy, check.name)?,
            check.key,
        ))
    }

    #[inline]
    pub(crate) fn as_bytes(&self) -> &[u8] {
        match self {
            BucketKey::Stack { len, bytes } => &bytes[..usize::from(*len)],
            BucketKey::Heap(bytes) => bytes,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;
    use std::time::Duration;

    use super::*;

    #[test]
    fn names_numbers_and_keys_never_collide() {
        let s = Duration::from_secs(1);
        let policies = [
            Policy::token_bucket(10, 10, s).unwrap(),
            Policy::token_bucket(1, 1, s).unwrap(),
            Policy::token_bucket(1, 1, Duration::from_nanos(1_000_000_001)).unwrap(),
            Policy::fixed_window(10, s).unwrap(),
        ];
        let names = [None, Some("a"), Some("ab"), Some("\u{1}a")];
        let keys: [&[u8]; 5] = [b"", b"b", b"ab", b"\x01a", &[0x80; 70]];
        let mut seen = HashSet::new();
        let mut count = 0;
        for p in &policies {
            for name in names {
                for key in keys {
                    let k = BucketKey::new(&Prefix::of(p, name).unwrap(), key);
                    seen.insert(k.as_bytes().to_vec());
                    count += 1;
                }
            }
        }
        // Named buckets ignore the numbers of one algorithm: the token-bucket policies share
        // their named buckets.
        let named_shared = 2 * 3 * keys.len();
        assert_eq!(seen.len(), count - named_shared);
    }

    #[test]
    fn short_policies_and_keys_fit_inline() {
        let p = Policy::token_bucket(10, 10, Duration::from_secs(1)).unwrap();
        let prefix = Prefix::of(&p, None).unwrap();
        assert_eq!(prefix.as_bytes().len(), 9);
        assert_eq!(Prefix::of(&p, Some("api")).unwrap().as_bytes().len(), 6);
        assert!(Prefix::of(&p, Some("")).is_err());
        assert!(Prefix::of(&p, Some(&"x".repeat(MAX_NAME_LEN + 1))).is_err());
        let long = "x".repeat(MAX_NAME_LEN);
        assert_eq!(
            Prefix::of(&p, Some(&long)).unwrap().as_bytes().len(),
            3 + MAX_NAME_LEN
        );
    }
}
