//! The reservations `POST /v1/reserve` hands out: signed tokens, committed at most once.
//!
//! A reservation travels to the client and back as an opaque string: what was reserved (the
//! policy's name or numbers, the key, the cost, whether the store took it or the fail policy
//! allowed it), an id and an expiry, signed with HMAC-SHA256 under the
//! server's secret, and base64url-encoded. So the server keeps nothing per reservation, and a
//! client cannot mint one (a forged or altered token fails the signature) nor stretch one (the
//! expiry is signed). What a signature cannot stop, a replay of the same token, the store stops:
//! the commit settles under the reservation's id at most once, on every server sharing the
//! store (see [`Once`](tollgate::store::settle::Once)).
//!
//! A reservation made with a token (`[auth]`) names it, signed like the rest, and only that
//! token may commit it: a `check` token cannot give back or charge another's reservation.
//!
//! Servers that share a store must share the secret (`TOLLGATE_RESERVATION_SECRET`) to accept
//! each other's reservations; without one, each process makes its own at start, and its
//! reservations are committed on it alone.

use std::time::Duration;

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use ring::hmac;
use ring::rand::{SecureRandom, SystemRandom};
use tollgate::{Algorithm, Nanos, Policy};

/// How long a reservation may wait for its commit, by default.
pub const DEFAULT_TTL: Duration = Duration::from_secs(600);

/// The format's version, first byte of every token (3: the owner was added).
const VERSION: u8 = 3;
/// Bytes of a reservation's id.
pub const ID_BYTES: usize = 16;
/// The signature's length (HMAC-SHA256).
const MAC_BYTES: usize = 32;

/// What a reservation holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reserved {
    /// Unique per reservation: the commit is settled once under it.
    pub id: [u8; ID_BYTES],
    /// When the reservation lapses, in nanoseconds since the UNIX epoch.
    pub expires: Nanos,
    /// The policy reserved under: an inline one's numbers, or a named one's at the time.
    pub policy: Policy,
    /// The configured policy's name; `None` for an inline policy.
    pub name: Option<String>,
    /// Whether the store took the tokens (not the fail policy's answer while it was down): a
    /// commit gives tokens back only then.
    pub paid: bool,
    /// The bucket's key.
    pub key: String,
    /// The tokens reserved.
    pub cost: u64,
    /// The name of the `[auth]` token that reserved it, which alone may commit it; `None`
    /// when the server had no tokens.
    pub owner: Option<String>,
}

/// Why a token was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Refused {
    /// Not a reservation of this server's: malformed, forged, altered or signed under another
    /// secret.
    #[error("not a reservation this server signed (malformed, altered, or under another secret)")]
    Unknown,
    /// Past its expiry.
    #[error("the reservation has expired")]
    Expired,
}

/// Signs and checks reservations.
pub struct Signer {
    key: hmac::Key,
    random: SystemRandom,
}

impl Signer {
    /// A signer with `secret`, or with a secret made at random.
    pub fn new(secret: Option<&[u8]>) -> Result<Signer, ring::error::Unspecified> {
        let random = SystemRandom::new();
        let key = match secret {
            Some(secret) => hmac::Key::new(hmac::HMAC_SHA256, secret),
            None => hmac::Key::generate(hmac::HMAC_SHA256, &random)?,
        };
        Ok(Signer { key, random })
    }

    /// A fresh reservation id.
    pub fn id(&self) -> Result<[u8; ID_BYTES], ring::error::Unspecified> {
        let mut id = [0; ID_BYTES];
        self.random.fill(&mut id)?;
        Ok(id)
    }

    /// The token of `reserved`.
    pub fn sign(&self, reserved: &Reserved) -> String {
        let name = reserved.name.as_deref().unwrap_or("");
        let mut bytes = Vec::with_capacity(64 + name.len() + reserved.key.len());
        bytes.push(VERSION);
        bytes.extend_from_slice(&reserved.id);
        bytes.extend_from_slice(&reserved.expires.as_u64().to_be_bytes());
        bytes.push(algorithm_code(reserved.policy.algorithm()));
        for n in [
            reserved.policy.capacity(),
            reserved.policy.refill(),
            Nanos::from(reserved.policy.period()).as_u64(),
            reserved.cost,
        ] {
            bytes.extend_from_slice(&n.to_be_bytes());
        }
        bytes.push(u8::from(reserved.paid));
        // Names are at most 64 bytes (the config refuses longer ones).
        bytes.push(u8::try_from(name.len()).unwrap_or(u8::MAX));
        bytes.extend_from_slice(&name.as_bytes()[..name.len().min(255)]);
        // Token names are at most 64 bytes too.
        let owner = reserved.owner.as_deref().unwrap_or("");
        bytes.push(u8::try_from(owner.len()).unwrap_or(u8::MAX));
        bytes.extend_from_slice(&owner.as_bytes()[..owner.len().min(255)]);
        bytes.extend_from_slice(reserved.key.as_bytes());
        let mac = hmac::sign(&self.key, &bytes);
        bytes.extend_from_slice(mac.as_ref());
        URL_SAFE_NO_PAD.encode(bytes)
    }

    /// The reservation `token` holds, if this server signed it and it has not expired at `now`.
    pub fn open(&self, token: &str, now: Nanos) -> Result<Reserved, Refused> {
        let bytes = URL_SAFE_NO_PAD
            .decode(token)
            .map_err(|_| Refused::Unknown)?;
        let split = bytes.len().checked_sub(MAC_BYTES).ok_or(Refused::Unknown)?;
        let (signed, mac) = bytes.split_at(split);
        hmac::verify(&self.key, signed, mac).map_err(|_| Refused::Unknown)?;
        let reserved = parse(signed).ok_or(Refused::Unknown)?;
        if now >= reserved.expires {
            return Err(Refused::Expired);
        }
        Ok(reserved)
    }
}

/// Reads a signed payload (its signature checked already).
fn parse(bytes: &[u8]) -> Option<Reserved> {
    let (&version, rest) = bytes.split_first()?;
    if version != VERSION {
        return None;
    }
    let (id, rest) = rest.split_first_chunk::<ID_BYTES>()?;
    let (expires, rest) = rest.split_first_chunk::<8>()?;
    let (&algorithm, rest) = rest.split_first()?;
    let mut numbers = [0u64; 4];
    let mut rest = rest;
    for n in &mut numbers {
        let (chunk, tail) = rest.split_first_chunk::<8>()?;
        *n = u64::from_be_bytes(*chunk);
        rest = tail;
    }
    let [capacity, refill, period, cost] = numbers;
    let (&paid, rest) = rest.split_first()?;
    let (&name_len, rest) = rest.split_first()?;
    let (name, rest) = rest.split_at_checked(usize::from(name_len))?;
    let name = match name {
        [] => None,
        name => Some(String::from_utf8(name.to_vec()).ok()?),
    };
    let (&owner_len, rest) = rest.split_first()?;
    let (owner, rest) = rest.split_at_checked(usize::from(owner_len))?;
    let owner = match owner {
        [] => None,
        owner => Some(String::from_utf8(owner.to_vec()).ok()?),
    };
    let period = Duration::from_nanos(period);
    let policy = match algorithm {
        0 => Policy::token_bucket(capacity, refill, period).ok()?,
        _ => return None,
    };
    Some(Reserved {
        id: *id,
        expires: Nanos::new(u64::from_be_bytes(*expires)),
        policy,
        name,
        paid: paid == 1,
        key: String::from_utf8(rest.to_vec()).ok()?,
        cost,
        owner,
    })
}

fn algorithm_code(algorithm: Algorithm) -> u8 {
    match algorithm {
        Algorithm::TokenBucket => 0,
        Algorithm::FixedWindow => 1,
        Algorithm::SlidingWindowLog => 2,
        Algorithm::SlidingWindowCounter => 3,
        // `Algorithm` may grow (it is non-exhaustive); a token of an algorithm this table does
        // not know decodes as no reservation at all, as 0-3 other than 0 already do.
        _ => u8::MAX,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reserved() -> Reserved {
        Reserved {
            id: [7; ID_BYTES],
            expires: Nanos::new(2_000),
            policy: Policy::token_bucket(10, 10, Duration::from_secs(1)).unwrap(),
            name: Some("api".into()),
            paid: true,
            key: "alice".into(),
            cost: 4,
            owner: Some("billing".into()),
        }
    }

    #[test]
    fn a_signed_reservation_opens_until_it_expires() {
        let signer = Signer::new(Some(b"secret")).unwrap();
        let token = signer.sign(&reserved());
        assert_eq!(signer.open(&token, Nanos::new(1_999)), Ok(reserved()));
        assert_eq!(
            signer.open(&token, Nanos::new(2_000)),
            Err(Refused::Expired)
        );
    }

    #[test]
    fn forged_altered_or_foreign_tokens_are_refused() {
        let signer = Signer::new(Some(b"secret")).unwrap();
        let token = signer.sign(&reserved());
        let now = Nanos::new(1);
        // Another secret.
        let other = Signer::new(Some(b"other")).unwrap();
        assert_eq!(other.open(&token, now), Err(Refused::Unknown));
        // Any byte changed (a larger cost, a later expiry, another key).
        let mut bytes = URL_SAFE_NO_PAD.decode(&token).unwrap();
        for i in 0..bytes.len() {
            bytes[i] ^= 1;
            let altered = URL_SAFE_NO_PAD.encode(&bytes);
            assert_eq!(
                signer.open(&altered, now),
                Err(Refused::Unknown),
                "byte {i}"
            );
            bytes[i] ^= 1;
        }
        for junk in ["", "x", "not base64!", &"A".repeat(100)] {
            assert_eq!(signer.open(junk, now), Err(Refused::Unknown));
        }
    }
}
