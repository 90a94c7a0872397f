//! [`Key`]: a bucket's stored key, inline when short, so most entries cost no allocation of
//! their own.
//!
//! A stored key is a bucket's name (its policy's name, or its numbers: 9 to 14 bytes for
//! common policies) followed by the client's key, so 29 bytes inline hold a user id or an IPv4
//! address under any policy. It remembers where the name ends: a check hashes and compares the
//! two parts as it has them ([`BucketKey`]), never copying them together.

use super::name::BucketKey;

/// Bytes stored inside the key itself; longer keys go to the heap.
const INLINE: usize = 29;

/// An owned key of 32 bytes: inline up to 29 bytes, boxed above. `split` is the length of
/// the bucket's prefix (at most 3 + [`MAX_NAME_LEN`](crate::store::MAX_NAME_LEN) bytes).
#[derive(Clone, PartialEq, Eq)]
pub(crate) enum Key {
    Inline {
        len: u8,
        split: u8,
        bytes: [u8; INLINE],
    },
    Heap {
        split: u8,
        bytes: Box<[u8]>,
    },
}

impl Key {
    pub(crate) fn new(name: BucketKey<'_>) -> Key {
        let len = name.prefix.len() + name.key.len();
        let split = u8::try_from(name.prefix.len()).expect("a prefix is at most 131 bytes");
        match u8::try_from(len) {
            Ok(len) if usize::from(len) <= INLINE => {
                let mut bytes = [0; INLINE];
                bytes[..usize::from(split)].copy_from_slice(name.prefix);
                bytes[usize::from(split)..usize::from(len)].copy_from_slice(name.key);
                Key::Inline { len, split, bytes }
            }
            _ => Key::Heap {
                split,
                bytes: [name.prefix, name.key].concat().into(),
            },
        }
    }

    /// The two parts again.
    #[inline]
    pub(crate) fn name(&self) -> BucketKey<'_> {
        let (split, bytes) = match self {
            Key::Inline { len, split, bytes } => (*split, &bytes[..usize::from(*len)]),
            Key::Heap { split, bytes } => (*split, &bytes[..]),
        };
        let (prefix, key) = bytes.split_at(usize::from(split));
        BucketKey { prefix, key }
    }

    /// The bytes allocated for a key too long to be inline.
    pub(crate) fn heap_bytes(&self) -> usize {
        match self {
            Key::Inline { .. } => 0,
            Key::Heap { bytes, .. } => bytes.len(),
        }
    }

    /// Whether this is `name`. Every check on a known key makes this comparison once.
    #[inline]
    pub(crate) fn is(&self, name: BucketKey<'_>) -> bool {
        let stored = self.name();
        short_eq(stored.prefix, name.prefix) && short_eq(stored.key, name.key)
    }
}

/// `a == b`, for short slices compared in a few overlapping words, inline, rather than by a
/// call to `memcmp`.
#[inline(always)]
fn short_eq(a: &[u8], b: &[u8]) -> bool {
    let n = a.len();
    if n != b.len() {
        return false;
    }
    // The offsets of each arm cover every byte of its lengths.
    match n {
        0 => true,
        1..4 => chunks_eq::<1, 3>(a, b, [0, n / 2, n - 1]),
        4..8 => chunks_eq::<4, 2>(a, b, [0, n - 4]),
        8..=16 => chunks_eq::<8, 2>(a, b, [0, n - 8]),
        17..=32 => chunks_eq::<8, 4>(a, b, [0, 8, n - 16, n - 8]),
        _ => a == b,
    }
}

/// Whether `a` and `b` agree on the `N` bytes at each offset in `at`. Unrolled by hand: an
/// iterator's `all` here was left as a call on the hot path.
#[inline(always)]
fn chunks_eq<const N: usize, const K: usize>(a: &[u8], b: &[u8], at: [usize; K]) -> bool {
    let chunk = |s: &[u8], i: usize| -> [u8; N] { s[i..i + N].try_into().expect("N bytes") };
    let mut equal = true;
    for i in at {
        equal &= chunk(a, i) == chunk(b, i);
    }
    equal
}

#[cfg(test)]
mod tests {
    use super::*;

    fn name<'a>(prefix: &'a [u8], key: &'a [u8]) -> BucketKey<'a> {
        BucketKey { prefix, key }
    }

    #[test]
    fn round_trips_short_and_long_keys() {
        assert_eq!(std::mem::size_of::<Key>(), 32);
        for len in [0, 1, 21, 28, 29, 30, 300] {
            let key: Vec<u8> = (0..len).map(|i| i as u8).collect();
            for split in [0, len.min(9)] {
                let stored = Key::new(name(&key[..split], &key[split..]));
                assert_eq!(stored.name().prefix, &key[..split]);
                assert_eq!(stored.name().key, &key[split..]);
            }
        }
        assert!(matches!(Key::new(name(b"p", &[7; 28])), Key::Inline { .. }));
        assert!(matches!(Key::new(name(b"p", &[7; 29])), Key::Heap { .. }));
    }

    #[test]
    fn a_key_is_only_its_own_bytes() {
        for len in 0..40 {
            let key: Vec<u8> = (0..len).map(|i| i as u8 + 1).collect();
            let stored = Key::new(name(b"prefix", &key));
            assert!(stored.is(name(b"prefix", &key)), "length {len}");
            // Any one byte changed, anywhere, is another key; so is any other length, and
            // the same bytes split elsewhere.
            for at in 0..len {
                let mut other = key.clone();
                other[at] ^= 0x80;
                assert!(
                    !stored.is(name(b"prefix", &other)),
                    "length {len}, byte {at}"
                );
            }
            if len > 0 {
                assert!(!stored.is(name(b"prefix", &key[..len - 1])));
            }
            assert!(!stored.is(name(b"prefix", &[key.as_slice(), &[0]].concat())));
            assert!(!stored.is(name(b"prefi", &[b"x", key.as_slice()].concat())));
        }
    }
}
