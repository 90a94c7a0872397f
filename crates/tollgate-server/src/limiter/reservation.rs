//! The reservations `POST /v1/reserve` hands out: signed tokens, committed at most once.
//!
//! A reservation travels to the client and back as an opaque string: what was reserved (each
//! policy's name or numbers and its cost, the key, whether the store took it or the fail policy
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
use tollgate::store::settle::Adjustment;
use tollgate::{Algorithm, Nanos, Policy};

/// How long a reservation may wait for its commit, by default.
pub const DEFAULT_TTL: Duration = Duration::from_secs(600);

/// The format's version, first byte of every token (3: the owner was added; 4: several
/// policies, each with its cost).
const VERSION: u8 = 4;
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
    /// The buckets reserved, one per policy (at most 255), in the request's order.
    pub buckets: Vec<ReservedBucket>,
    /// The buckets' key.
    pub key: Vec<u8>,
    /// The name of the `[auth]` token that reserved it, which alone may commit it; `None`
    /// when the server had no tokens.
    pub owner: Option<String>,
}

/// One policy's part of a reservation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReservedBucket {
    /// The policy reserved under: an inline one's numbers, or a named one's at the time.
    pub policy: Policy,
    /// The configured policy's name; `None` for an inline policy.
    pub name: Option<String>,
    /// The tokens reserved.
    pub cost: u64,
    /// Whether the store took them (not the fail policy's answer while it was down, nor a
    /// shadow policy's that denied, which the enforced ones were decided without): a commit
    /// gives tokens back only then.
    pub paid: bool,
}

/// Why a commit's `used` amounts were refused (nothing is settled).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum UsedError {
    /// One amount for policies that reserved different costs: it cannot say what each used.
    #[error(
        "the reservation's policies reserved different costs ({0}): give used as an object \
         with each policy's amount"
    )]
    NeedsEach(String),
    /// Another number of amounts than the reservation has buckets.
    #[error("{given} used amounts for a reservation of {reserved} policies")]
    Count {
        /// The buckets reserved.
        reserved: usize,
        /// The amounts given.
        given: usize,
    },
    /// An amount above its reservation plus the policy's capacity (of the bucket at `index`).
    #[error(
        "used {used} exceeds the {reserved} reserved plus the capacity {capacity} of {name:?}: \
         a commit puts a bucket at most one capacity into debt, so used must be at most \
         {most}; nothing was settled"
    )]
    OverDebtCap {
        /// The bucket's position.
        index: usize,
        /// Its policy's name.
        name: String,
        /// The amount used.
        used: u64,
        /// What it reserved.
        reserved: u64,
        /// Its policy's capacity now.
        capacity: u64,
        /// The most `used` may be.
        most: u64,
    },
}

impl Reserved {
    /// What committing `used` (one amount per bucket, in order) does to each bucket, under
    /// the capacities the buckets' policies have now (`capacities`, in order; a reload may
    /// have changed them), named `names`: the difference given back, or taken without a
    /// denial, at most one capacity into debt (the library's rule,
    /// [`Adjustment::commit_within`]).
    pub fn adjustments(
        &self,
        used: &[u64],
        capacities: &[u64],
        names: &[&str],
    ) -> Result<Vec<Adjustment>, UsedError> {
        let n = self.buckets.len();
        if (used.len(), capacities.len(), names.len()) != (n, n, n) {
            return Err(UsedError::Count {
                reserved: n,
                given: used.len(),
            });
        }
        (0..n)
            .map(|index| {
                let bucket = &self.buckets[index];
                Adjustment::commit_within(bucket.cost, used[index], capacities[index], bucket.paid)
                    .map_err(|most| UsedError::OverDebtCap {
                        index,
                        name: names[index].to_owned(),
                        used: used[index],
                        reserved: bucket.cost,
                        capacity: capacities[index],
                        most,
                    })
            })
            .collect()
    }

    /// One `used` for every bucket, refused when they reserved different costs.
    pub fn used_alike(&self, used: u64, names: &[&str]) -> Result<Vec<u64>, UsedError> {
        let first = self.buckets.first().map(|b| b.cost);
        if self.buckets.iter().any(|b| Some(b.cost) != first) {
            let costs: Vec<String> = self
                .buckets
                .iter()
                .zip(names)
                .map(|(b, name)| format!("{name} {}", b.cost))
                .collect();
            return Err(UsedError::NeedsEach(costs.join(", ")));
        }
        Ok(vec![used; self.buckets.len()])
    }
}

/// Why a token was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum OpenError {
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
        let mut bytes = Vec::with_capacity(64 + 64 * reserved.buckets.len() + reserved.key.len());
        bytes.push(VERSION);
        bytes.extend_from_slice(&reserved.id);
        bytes.extend_from_slice(&reserved.expires.as_u64().to_be_bytes());
        // Token names are at most 64 bytes (the config refuses longer ones).
        short_text(&mut bytes, reserved.owner.as_deref().unwrap_or(""));
        // A request names at most 16 policies.
        bytes.push(u8::try_from(reserved.buckets.len()).unwrap_or(u8::MAX));
        for bucket in reserved.buckets.iter().take(usize::from(u8::MAX)) {
            bytes.push(algorithm_code(bucket.policy.algorithm()));
            for n in [
                bucket.policy.capacity(),
                bucket.policy.refill(),
                Nanos::from(bucket.policy.period()).as_u64(),
                bucket.cost,
            ] {
                bytes.extend_from_slice(&n.to_be_bytes());
            }
            bytes.push(u8::from(bucket.paid));
            // Policy names are at most 64 bytes too.
            short_text(&mut bytes, bucket.name.as_deref().unwrap_or(""));
        }
        bytes.extend_from_slice(&reserved.key);
        let mac = hmac::sign(&self.key, &bytes);
        bytes.extend_from_slice(mac.as_ref());
        URL_SAFE_NO_PAD.encode(bytes)
    }

    /// The reservation `token` holds, if this server signed it and it has not expired at `now`.
    pub fn open(&self, token: &str, now: Nanos) -> Result<Reserved, OpenError> {
        let bytes = URL_SAFE_NO_PAD
            .decode(token)
            .map_err(|_| OpenError::Unknown)?;
        let split = bytes
            .len()
            .checked_sub(MAC_BYTES)
            .ok_or(OpenError::Unknown)?;
        let (signed, mac) = bytes.split_at(split);
        hmac::verify(&self.key, signed, mac).map_err(|_| OpenError::Unknown)?;
        let reserved = parse(signed).ok_or(OpenError::Unknown)?;
        if now >= reserved.expires {
            return Err(OpenError::Expired);
        }
        Ok(reserved)
    }
}

/// A length byte and up to 255 bytes of `text`.
fn short_text(bytes: &mut Vec<u8>, text: &str) {
    let text = &text.as_bytes()[..text.len().min(usize::from(u8::MAX))];
    bytes.push(u8::try_from(text.len()).unwrap_or(u8::MAX));
    bytes.extend_from_slice(text);
}

/// Text written by [`short_text`]: `None` when empty.
fn read_short_text(bytes: &[u8]) -> Option<(Option<String>, &[u8])> {
    let (&len, rest) = bytes.split_first()?;
    let (text, rest) = rest.split_at_checked(usize::from(len))?;
    let text = match text {
        [] => None,
        text => Some(String::from_utf8(text.to_vec()).ok()?),
    };
    Some((text, rest))
}

/// Reads a signed payload (its signature checked already).
fn parse(bytes: &[u8]) -> Option<Reserved> {
    let (&version, rest) = bytes.split_first()?;
    if version != VERSION {
        return None;
    }
    let (id, rest) = rest.split_first_chunk::<ID_BYTES>()?;
    let (expires, rest) = rest.split_first_chunk::<8>()?;
    let (owner, rest) = read_short_text(rest)?;
    let (&count, mut rest) = rest.split_first()?;
    let mut buckets = Vec::with_capacity(usize::from(count));
    for _ in 0..count {
        let (&algorithm, tail) = rest.split_first()?;
        rest = tail;
        let mut numbers = [0u64; 4];
        for n in &mut numbers {
            let (chunk, tail) = rest.split_first_chunk::<8>()?;
            *n = u64::from_be_bytes(*chunk);
            rest = tail;
        }
        let [capacity, refill, period, cost] = numbers;
        let (&paid, tail) = rest.split_first()?;
        let (name, tail) = read_short_text(tail)?;
        rest = tail;
        let period = Duration::from_nanos(period);
        let policy = match algorithm {
            0 => Policy::token_bucket(capacity, refill, period).ok()?,
            _ => return None,
        };
        buckets.push(ReservedBucket {
            policy,
            name,
            cost,
            paid: paid == 1,
        });
    }
    Some(Reserved {
        id: *id,
        expires: Nanos::new(u64::from_be_bytes(*expires)),
        buckets,
        key: rest.to_vec(),
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
            buckets: vec![
                ReservedBucket {
                    policy: Policy::token_bucket(10, 10, Duration::from_secs(1)).unwrap(),
                    name: Some("api".into()),
                    cost: 4,
                    paid: true,
                },
                ReservedBucket {
                    policy: Policy::token_bucket(5_000, 5_000, Duration::from_secs(60)).unwrap(),
                    name: Some("tokens".into()),
                    cost: 2_000,
                    paid: true,
                },
            ],
            key: b"alice".to_vec(),
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
            Err(OpenError::Expired)
        );
    }

    #[test]
    fn a_commit_settles_each_bucket_its_own_amount_or_nothing() {
        let r = reserved();
        let names = ["api", "tokens"];
        assert_eq!(
            r.adjustments(&[1, 1_200], &[10, 5_000], &names),
            Ok(vec![Adjustment::Refund(3), Adjustment::Refund(800)])
        );
        assert!(matches!(
            r.used_alike(1_200, &names),
            Err(UsedError::NeedsEach(costs)) if costs == "api 4, tokens 2000"
        ));
        // At most one capacity into debt, under the capacity of now.
        assert!(r.adjustments(&[14, 0], &[10, 5_000], &names).is_ok());
        assert!(matches!(
            r.adjustments(&[15, 0], &[10, 5_000], &names),
            Err(UsedError::OverDebtCap {
                index: 0,
                most: 14,
                ..
            })
        ));
    }

    #[test]
    fn forged_altered_or_foreign_tokens_are_refused() {
        let signer = Signer::new(Some(b"secret")).unwrap();
        let token = signer.sign(&reserved());
        let now = Nanos::new(1);
        // Another secret.
        let other = Signer::new(Some(b"other")).unwrap();
        assert_eq!(other.open(&token, now), Err(OpenError::Unknown));
        // Any byte changed (a larger cost, a later expiry, another key).
        let mut bytes = URL_SAFE_NO_PAD.decode(&token).unwrap();
        for i in 0..bytes.len() {
            bytes[i] ^= 1;
            let altered = URL_SAFE_NO_PAD.encode(&bytes);
            assert_eq!(
                signer.open(&altered, now),
                Err(OpenError::Unknown),
                "byte {i}"
            );
            bytes[i] ^= 1;
        }
        for junk in ["", "x", "not base64!", &"A".repeat(100)] {
            assert_eq!(signer.open(junk, now), Err(OpenError::Unknown));
        }
    }
}
