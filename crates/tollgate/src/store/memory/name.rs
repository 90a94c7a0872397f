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
//! in the 29 bytes a stored key holds without allocating.

use std::cell::RefCell;
use std::rc::Rc;

use crate::store::{Check, MAX_NAME_LEN};
use crate::{Algorithm, CheckError, Policy};

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

    /// The prefix of `check`'s bucket.
    pub(crate) fn of_check(check: &Check<'_>) -> Result<Prefix, CheckError> {
        Prefix::of(&check.policy, check.name)
    }

    /// The prefix of buckets named by `policy`'s numbers.
    pub(crate) fn numbers(policy: &Policy) -> Prefix {
        Prefix::clone(&Prefix::shared_numbers(policy))
    }

    /// The prefix of buckets named by `policy`'s numbers, as this thread keeps it: what
    /// `MemoryStore::check` asks at every check, and then hashes or compares at once.
    ///
    /// Encoding the three varints costs more than the rest of a check on a known key, so each
    /// thread keeps the prefix of the last policy it encoded, and a caller checking under one
    /// policy at a time (the common case) encodes it once per thread and then compares five
    /// numbers per check. The prefix is shared, not copied: a copy written
    /// just before the key is compared makes the comparison's loads wait for the stores (store
    /// forwarding fails; docs/performance.md, "The memory store").
    pub(crate) fn shared_numbers(policy: &Policy) -> Rc<Prefix> {
        let encode = || {
            let (len, words) = number_words(policy);
            let mut bytes = [0; INLINE_PREFIX];
            bytes[..16].copy_from_slice(&words[0].to_le_bytes());
            bytes[16..32].copy_from_slice(&words[1].to_le_bytes());
            Rc::new(Prefix::Inline { len, bytes })
        };
        // A check while the thread's locals are torn down (from another local's destructor)
        // encodes its own.
        LAST_NUMBERS
            .try_with(|last| {
                if let Some((seen, prefix)) = &*last.borrow()
                    && seen == policy
                {
                    return Rc::clone(prefix);
                }
                let prefix = encode();
                *last.borrow_mut() = Some((*policy, Rc::clone(&prefix)));
                prefix
            })
            .unwrap_or_else(|_| encode())
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
        let mut p = Prefix::Inline {
            len: 0,
            bytes: [0; INLINE_PREFIX],
        };
        p.push(&[tag, algorithm_byte(policy)]);
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

    #[inline]
    pub(crate) fn as_bytes(&self) -> &[u8] {
        match self {
            Prefix::Inline { len, bytes } => &bytes[..usize::from(*len)],
            Prefix::Heap(bytes) => bytes,
        }
    }
}

thread_local! {
    /// The last policy this thread encoded with [`Prefix::shared_numbers`], and its prefix.
    /// (Borrowed only within `shared_numbers`, which calls nothing that borrows it again.)
    static LAST_NUMBERS: RefCell<Option<(Policy, Rc<Prefix>)>> = const { RefCell::new(None) };
}

/// The prefix of buckets named by `policy`'s numbers, as its length and two little-endian
/// words: a tag, the algorithm and three varints.
fn number_words(policy: &Policy) -> (u8, [u128; 2]) {
    let mut words = [u128::from(algorithm_byte(policy)) << 8, 0];
    let mut len = 2;
    for n in [
        policy.capacity(),
        policy.refill(),
        policy.period_nanos().as_u64(),
    ] {
        let (varint, n_len) = varint(n);
        // `len` is 2 to 22 here and a varint at most 10 bytes: the two words hold it.
        if len < 16 {
            words[0] |= varint << (8 * len);
            words[1] |= varint >> (128 - 8 * len);
        } else {
            words[1] |= varint << (8 * (len - 16));
        }
        len += n_len;
    }
    (len as u8, words)
}

fn algorithm_byte(policy: &Policy) -> u8 {
    match policy.algorithm() {
        Algorithm::TokenBucket => 0,
        Algorithm::FixedWindow => 1,
        Algorithm::SlidingWindowLog => 2,
        Algorithm::SlidingWindowCounter => 3,
    }
}

/// `n` as a varint (seven bits a byte, low first, the top bit set on all but the last), in
/// the low bytes of a word; and its length, 1 to 10 bytes. Without a loop over the bytes: the
/// low 56 bits are spread into eight bytes of seven bits in three halving steps (28-bit
/// halves into 32-bit lanes, 14 into 16, 7 into 8), a dozen instructions where moving each
/// group by itself took two dozen, three times per `MemoryStore::check`.
#[inline]
fn varint(n: u64) -> (u128, usize) {
    let len = (64 - (n | 1).leading_zeros()).div_ceil(7) as usize;
    let mut low = n & 0x00ff_ffff_ffff_ffff;
    low = (low & 0x0fff_ffff) | ((low & 0x00ff_ffff_f000_0000) << 4);
    low = (low & 0x0000_3fff_0000_3fff) | ((low & 0x0fff_c000_0fff_c000) << 2);
    low = (low & 0x007f_007f_007f_007f) | ((low & 0x3f80_3f80_3f80_3f80) << 1);
    if len <= 8 {
        // The continuation bits, on every byte but the last, in 64-bit arithmetic: a 128-bit
        // shift by a variable amount is a handful of instructions more, for the common case.
        let more = 0x8080_8080_8080_8080_u64 & ((1 << (8 * (len - 1))) - 1);
        return (u128::from(low | more), len);
    }
    let high = (n >> 56) & 0x7f | (n >> 63) << 8;
    let more = 0x8080_8080_8080_8080_8080_u128 & ((1 << (8 * (len - 1))) - 1);
    (u128::from(low) | u128::from(high) << 64 | more, len)
}

/// A bucket's stored key in its two parts, as a check has them: its prefix, then the user's
/// key. Hashed and compared part by part, never copied together but to insert a new key.
#[derive(Clone, Copy)]
pub(crate) struct BucketKey<'a> {
    pub(crate) prefix: &'a [u8],
    pub(crate) key: &'a [u8],
}

impl<'a> BucketKey<'a> {
    /// Whether the bucket is named by a policy name (whose numbers may change under it) rather
    /// than by its numbers: its prefix's tag.
    #[inline]
    pub(crate) fn is_named(&self) -> bool {
        self.prefix.first() == Some(&1)
    }

    #[inline]
    pub(crate) fn new(prefix: &'a Prefix, key: &'a [u8]) -> BucketKey<'a> {
        BucketKey {
            prefix: prefix.as_bytes(),
            key,
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
                    let prefix = Prefix::of(p, name).unwrap();
                    seen.insert([prefix.as_bytes(), key].concat());
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
    fn numbers_are_three_varints() {
        let expect = |policy: &Policy| {
            let mut bytes = vec![0, algorithm_byte(policy)];
            for mut n in [
                policy.capacity(),
                policy.refill(),
                policy.period_nanos().as_u64(),
            ] {
                loop {
                    let low = (n & 0x7f) as u8;
                    n >>= 7;
                    if n == 0 {
                        bytes.push(low);
                        break;
                    }
                    bytes.push(low | 0x80);
                }
            }
            bytes
        };
        let s = Duration::from_secs(1);
        let policies = [
            Policy::token_bucket(1, 1, Duration::from_nanos(1)).unwrap(),
            Policy::token_bucket(10, 10, s).unwrap(),
            Policy::token_bucket(u64::from(u32::MAX), 1000, s).unwrap(),
            Policy::token_bucket(1 << 40, 1 << 40, Duration::from_secs(1 << 20)).unwrap(),
            // A period of 2^57 ns and more: a varint of nine bytes.
            Policy::token_bucket(1 << 40, 1 << 40, Duration::from_secs(1 << 28)).unwrap(),
            Policy::fixed_window(127, Duration::from_millis(128)).unwrap(),
        ];
        // Each policy encoded afresh, then again from the thread's last one, then after
        // another policy: the same bytes every time.
        for _ in 0..2 {
            for policy in policies {
                for _ in 0..2 {
                    assert_eq!(Prefix::numbers(&policy).as_bytes(), expect(&policy));
                }
            }
        }
    }

    #[test]
    fn varints_of_every_length_and_its_edges() {
        let reference = |mut n: u64| {
            let mut bytes = Vec::new();
            loop {
                let low = (n & 0x7f) as u8;
                n >>= 7;
                if n == 0 {
                    bytes.push(low);
                    return bytes;
                }
                bytes.push(low | 0x80);
            }
        };
        let mut values = vec![0, u64::MAX, 0x5555_5555_5555_5555, 0xaaaa_aaaa_aaaa_aaaa];
        for bit in 0..64 {
            values.extend([1 << bit, (1 << bit) - 1, (1 << bit) + 1, !(1 << bit)]);
        }
        for n in values {
            let (word, len) = varint(n);
            let expected = reference(n);
            assert_eq!(len, expected.len(), "{n:#x}");
            assert_eq!(&word.to_le_bytes()[..len], expected, "{n:#x}");
            assert_eq!(word >> (8 * len), 0, "{n:#x}: bytes past the varint");
        }
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
