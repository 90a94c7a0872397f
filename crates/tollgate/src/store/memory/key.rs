//! [`Key`]: a key stored inline when short, so most entries cost no allocation of their own.

/// Bytes stored inside the key itself; longer keys go to the heap.
const INLINE: usize = 22;

/// An owned key of 24 bytes: inline up to 22 bytes (most user ids, IPs and API keys), boxed above.
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

    pub(crate) fn as_bytes(&self) -> &[u8] {
        match self {
            Key::Inline { len, bytes } => &bytes[..usize::from(*len)],
            Key::Heap(bytes) => bytes,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_short_and_long_keys() {
        assert_eq!(std::mem::size_of::<Key>(), 24);
        for len in [0, 1, 21, 22, 23, 300] {
            let key: Vec<u8> = (0..len).map(|i| i as u8).collect();
            assert_eq!(Key::new(&key).as_bytes(), &key[..]);
        }
        assert!(matches!(Key::new(&[7; 22]), Key::Inline { .. }));
        assert!(matches!(Key::new(&[7; 23]), Key::Heap(_)));
    }
}
