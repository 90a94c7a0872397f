//! [`Key`]: a key stored inline when short, so most entries cost no allocation of their own.
//!
//! A stored key is a bucket's name (its policy's name, or its numbers: 9 to 14 bytes for
//! common policies) followed by the client's key, so 30 bytes inline hold a user id or an IPv4
//! address under any policy.

/// Bytes stored inside the key itself; longer keys go to the heap.
const INLINE: usize = 30;

/// An owned key of 32 bytes: inline up to 30 bytes, boxed above.
#[derive(Clone, PartialEq, Eq)]
pub(crate) enum Key {
    Inline { len: u8, bytes: [u8; INLINE] },
    Heap(Box<[u8]>),
}

impl Key {
    pub(crate) fn new(key: &[u8]) -> Key {
        match u8::try_from(key.len()) {
            Ok(len) if key.len() <= INLINE => {
                let mut bytes = [0; INLINE];
                bytes[..key.len()].copy_from_slice(key);
                Key::Inline { len, bytes }
            }
            _ => Key::Heap(key.into()),
        }
    }

    #[inline]
    pub(crate) fn as_bytes(&self) -> &[u8] {
        match self {
            Key::Inline { len, bytes } => &bytes[..usize::from(*len)],
            Key::Heap(bytes) => bytes,
        }
    }

    /// The bytes allocated for a key too long to be inline.
    pub(crate) fn heap_bytes(&self) -> usize {
        match self {
            Key::Inline { .. } => 0,
            Key::Heap(bytes) => bytes.len(),
        }
    }

    /// Whether this is `key`. Every check on a known key makes this comparison once: a short
    /// key is compared in a few overlapping words, inline, rather than by a call to `memcmp`.
    #[inline]
    pub(crate) fn is(&self, key: &[u8]) -> bool {
        let stored = self.as_bytes();
        let n = stored.len();
        if n != key.len() {
            return false;
        }
        // The offsets of each arm cover every byte of its lengths.
        match n {
            0 => true,
            1..4 => chunks_eq::<1>(stored, key, &[0, n / 2, n - 1]),
            4..8 => chunks_eq::<4>(stored, key, &[0, n - 4]),
            8..=16 => chunks_eq::<8>(stored, key, &[0, n - 8]),
            17..=32 => chunks_eq::<8>(stored, key, &[0, 8, n - 16, n - 8]),
            _ => stored == key,
        }
    }
}

/// Whether `a` and `b` agree on the `N` bytes at each offset in `at`.
#[inline]
fn chunks_eq<const N: usize>(a: &[u8], b: &[u8], at: &[usize]) -> bool {
    let chunk = |s: &[u8], i: usize| -> [u8; N] { s[i..i + N].try_into().expect("N bytes") };
    at.iter().all(|&i| chunk(a, i) == chunk(b, i))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_short_and_long_keys() {
        assert_eq!(std::mem::size_of::<Key>(), 32);
        for len in [0, 1, 21, 29, 30, 31, 300] {
            let key: Vec<u8> = (0..len).map(|i| i as u8).collect();
            assert_eq!(Key::new(&key).as_bytes(), &key[..]);
        }
        assert!(matches!(Key::new(&[7; 30]), Key::Inline { .. }));
        assert!(matches!(Key::new(&[7; 31]), Key::Heap(_)));
    }

    #[test]
    fn a_key_is_only_its_own_bytes() {
        for len in 0..40 {
            let key: Vec<u8> = (0..len).map(|i| i as u8 + 1).collect();
            let stored = Key::new(&key);
            assert!(stored.is(&key), "length {len}");
            // Any one byte changed, anywhere, is another key; so is any other length.
            for at in 0..len {
                let mut other = key.clone();
                other[at] ^= 0x80;
                assert!(!stored.is(&other), "length {len}, byte {at}");
            }
            if len > 0 {
                assert!(!stored.is(&key[..len - 1]));
            }
            assert!(!stored.is(&[key.as_slice(), &[0]].concat()));
        }
    }
}
