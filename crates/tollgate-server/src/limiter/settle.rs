//! The core's entrances for reservations: `reserve` (a check that hands out a signed
//! reservation of what it took) and `commit` (what was used of it, settled once), with every
//! rule of theirs: token buckets only, the owner alone commits, at most one capacity of debt.

use std::time::Duration;

use tollgate::store::settle::Once;
use tollgate::{Algorithm, CheckError, Nanos, StoreError};

use super::amounts::{Amount, by_policy};
use super::reservation::{Reserved, ReservedBucket, UsedError};
use super::{Ask, CommitError, DecideError, Limiter, Outcome, Part};

/// A check's outcome, and when allowed, the reservation to commit.
pub struct Reservation {
    /// The check's outcome.
    pub outcome: Outcome,
    /// The signed reservation, when the check was allowed.
    pub token: Option<String>,
}

/// What a commit says was used.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Used {
    /// One amount, for every policy of the reservation (which must have reserved alike).
    One(u64),
    /// One amount per policy, by name.
    Each(Vec<(String, Amount)>),
}

impl Limiter {
    /// Decides `ask` as [`check`](Limiter::check) does and, when allowed, signs what it took
    /// into a reservation that only `owner` (the `[auth]` token's name; `None` without tokens)
    /// may commit. Token-bucket policies only: a window cannot tell which window a returned
    /// token was taken in.
    pub async fn reserve(
        &self,
        ask: Ask<'_>,
        owner: Option<&str>,
    ) -> Result<Reservation, DecideError> {
        let (entries, over_capacity) = self.validate(&ask)?;
        if let Some(window) = entries
            .iter()
            .find(|e| e.policy.algorithm() != Algorithm::TokenBucket)
        {
            return Err(DecideError::NotTokenBucket {
                name: window.name.to_string(),
            });
        }
        let outcome = self
            .decide_entries(entries, ask.key, &ask.cost, over_capacity)
            .await?;
        if !outcome.allowed() {
            return Ok(Reservation {
                outcome,
                token: None,
            });
        }
        let Ok(id) = self.signer().id() else {
            // The tokens stay taken: a reservation that cannot be handed out is one dropped.
            return Err(DecideError::Unavailable(
                "no random id could be made for the reservation".to_owned(),
            ));
        };
        let buckets = outcome
            .parts
            .iter()
            .enumerate()
            .map(|(i, part)| ReservedBucket {
                policy: part.entry.policy,
                name: part.entry.named.then(|| part.entry.name.to_string()),
                cost: ask.cost.of(i),
                // A fail policy's answer took nothing, nor did a shadow that denied (the
                // enforced policies were decided without it): nothing to give back there.
                paid: outcome.paid && !part.shadow_denied,
            })
            .collect();
        let reserved = Reserved {
            id,
            expires: self.now() + Nanos::from(self.reservation_ttl()),
            buckets,
            key: ask.key.to_vec(),
            owner: owner.map(str::to_owned),
        };
        let token = Some(self.signer().sign(&reserved));
        Ok(Reservation { outcome, token })
    }

    /// Commits the reservation `token` by `committer` (the `[auth]` token's name; `None`
    /// without tokens), `used` of it: each bucket is given back what it reserved beyond what
    /// it used, or charged the rest without a denial, at most one capacity into debt, under
    /// its policy's numbers of now (a reload may have changed them); once, on every server
    /// sharing the store. The outcome is the buckets' state.
    pub async fn commit(
        &self,
        token: &str,
        used: Used,
        committer: Option<&str>,
    ) -> Result<Outcome, CommitError> {
        let now = self.now();
        let reserved = self
            .signer()
            .open(token, now)
            .map_err(|refused| CommitError::Conflict(refused.to_string()))?;
        owned_by(&reserved, committer)?;
        let live = self.live();
        let mut entries = Vec::with_capacity(reserved.buckets.len());
        for bucket in &reserved.buckets {
            entries.push(match &bucket.name {
                None => live.inline_entry(bucket.policy),
                Some(name) => match live.entry(name) {
                    Some(entry) if entry.policy.algorithm() == Algorithm::TokenBucket => entry,
                    _ => {
                        return Err(CommitError::Conflict(format!(
                            "the policy {name:?} is no longer a configured token bucket"
                        )));
                    }
                },
            });
        }
        let names: Vec<&str> = entries.iter().map(|e| &*e.name).collect();
        let used_field = |message: String| CommitError::Used {
            field: "used".to_owned(),
            message,
        };
        let (used, by_name) = match used {
            Used::One(n) => (
                reserved
                    .used_alike(n, &names)
                    .map_err(|r| used_field(r.to_string()))?,
                false,
            ),
            Used::Each(_) if reserved.buckets.iter().any(|b| b.name.is_none()) => {
                return Err(used_field(
                    "an inline policy's reservation takes used as a number".to_owned(),
                ));
            }
            Used::Each(each) => (
                by_policy("used", "reservation's", &names, &each).map_err(|e| {
                    CommitError::Used {
                        field: e.field,
                        message: e.message,
                    }
                })?,
                true,
            ),
        };
        let capacities: Vec<u64> = entries.iter().map(|e| e.policy.capacity()).collect();
        // A larger `used` than the debt cap allows is refused and nothing is settled, so the
        // reservation can still be committed with a sound number.
        let adjustments = reserved
            .adjustments(&used, &capacities, &names)
            .map_err(|refused| {
                let field = match (&refused, by_name) {
                    (UsedError::OverDebtCap { index, .. }, true) => {
                        format!("used.{}", names[*index])
                    }
                    _ => "used".to_owned(),
                };
                CommitError::Used {
                    field,
                    message: refused.to_string(),
                }
            })?;
        let settlement: Vec<_> = entries
            .iter()
            .map(|entry| entry.check(&reserved.key, 0))
            .zip(adjustments)
            .collect();
        // The id is remembered a minute past the expiry, so a replay can never outlive it.
        let once = Once::new(
            &reserved.id,
            Duration::from(reserved.expires - now) + Duration::from_secs(60),
        );
        let verdict = match self.settle(Some(once), &settlement).await {
            Ok(verdict) if verdict.decisions().len() == entries.len() => verdict,
            Ok(_) => {
                return Err(CommitError::Store(DecideError::Unavailable(
                    "the store answered no bucket".to_owned(),
                )));
            }
            Err(StoreError::Check(CheckError::AlreadySettled)) => {
                return Err(CommitError::Conflict(
                    "the reservation was committed already (here or on another server)".to_owned(),
                ));
            }
            Err(e) => return Err(CommitError::Store(DecideError::from(e))),
        };
        let parts = entries
            .into_iter()
            .zip(verdict.decisions())
            .map(|(entry, &decision)| Part {
                entry,
                decision,
                shadow_denied: false,
            })
            .collect();
        Ok(Outcome {
            parts,
            paid: true,
            over_capacity: false,
        })
    }
}

/// Whether `committer` may commit `reserved`. A reservation made with a token is committed by
/// that token alone; one made without a token (before `[auth]` was on) by no token: whoever
/// made it is unknown, so no token can be said to be its owner.
fn owned_by(reserved: &Reserved, committer: Option<&str>) -> Result<(), CommitError> {
    match (&reserved.owner, committer) {
        (Some(owner), Some(committer)) if committer != owner.as_str() => {
            Err(CommitError::Forbidden(format!(
                "the reservation was made with the token {owner:?}: only it may commit it"
            )))
        }
        (None, Some(_)) => Err(CommitError::Forbidden(
            "the reservation was made before this server asked for tokens ([auth]): no token \
             may commit it; it lapses at its expiry, its tokens spent"
                .to_owned(),
        )),
        _ => Ok(()),
    }
}
