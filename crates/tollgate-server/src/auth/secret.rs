//! A token's secret, held only as its SHA-256 digest: the server never keeps the secret
//! itself, never prints it, and compares a presented one without telling, by its timing, how
//! much of it was right or how long the real one is.

use std::fmt;

use ring::digest::{SHA256, SHA256_OUTPUT_LEN, digest};

/// A secret, as its digest.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret {
    digest: [u8; SHA256_OUTPUT_LEN],
}

impl Secret {
    /// The secret `bytes` are.
    pub fn new(bytes: &[u8]) -> Secret {
        let mut out = [0u8; SHA256_OUTPUT_LEN];
        out.copy_from_slice(digest(&SHA256, bytes).as_ref());
        Secret { digest: out }
    }

    /// Whether `presented` is this secret. Both sides are hashed to the same length first, and
    /// every byte of the digests is compared, so the time taken depends on neither the secret's
    /// length nor on where a guess goes wrong.
    pub fn matches(&self, presented: &[u8]) -> bool {
        let presented = Secret::new(presented);
        let differ = self
            .digest
            .iter()
            .zip(presented.digest.iter())
            .fold(0u8, |acc, (a, b)| acc | (a ^ b));
        std::hint::black_box(differ) == 0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Secret(<redacted>)")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matches_itself_only_and_never_shows() {
        let secret = Secret::new(b"hunter2");
        assert!(secret.matches(b"hunter2"));
        assert!(!secret.matches(b"hunter3"));
        assert!(!secret.matches(b"hunter2 "));
        assert!(!secret.matches(b""));
        assert_eq!(format!("{secret:?}"), "Secret(<redacted>)");
    }
}
