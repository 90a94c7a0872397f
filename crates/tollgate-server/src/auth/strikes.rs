//! Failed authentications per client address, across connections and front ends: the one
//! place a guesser is slowed down and then shut out.
//!
//! Each wrong secret from an address is answered a step later than the one before it
//! ([`delay`]), and at the [`BLOCK_AFTER`]th the address is refused for [`BLOCK_FOR`]: every
//! request from it that needs a token is answered "too many failed authentications" (HTTP
//! `429` with `Retry-After`, gRPC `RESOURCE_EXHAUSTED`, RESP `-ERR`) without its secret being
//! looked at, so a right guess made meanwhile is not told apart from a wrong one. An address
//! that stops failing is forgotten after [`FORGET_AFTER`], and a block's end starts it afresh.
//! A success does not wipe an address's failures: one valid token must not buy another's
//! guesses.
//!
//! The address is the TCP peer's (an IPv4 address, or an IPv6 /64, which one host commonly
//! holds whole): clients behind one proxy or NAT share it, and so share its failures. The
//! table holds at most [`MAX_ADDRESSES`]; when full, the address that failed longest ago
//! makes room. Time is tokio's, so tests can pause it.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use tokio::time::Instant;

/// Failures from one address that block it.
pub const BLOCK_AFTER: u32 = 20;

/// How long a blocked address is refused.
pub const BLOCK_FOR: Duration = Duration::from_secs(60);

/// How long an address's failures are remembered after its last one.
pub const FORGET_AFTER: Duration = Duration::from_secs(600);

/// The most addresses whose failures are remembered.
pub const MAX_ADDRESSES: usize = 16_384;

/// How much later each failure after the first is answered than the one before it.
const STEP: Duration = Duration::from_millis(10);

/// The longest a failure is held back.
const MAX_DELAY: Duration = Duration::from_secs(1);

/// The address a client's failures are counted under: its IPv4 address (an IPv4-mapped IPv6
/// one as IPv4), or its IPv6 /64.
pub fn client_address(peer: IpAddr) -> IpAddr {
    match peer.to_canonical() {
        IpAddr::V6(v6) => IpAddr::V6((u128::from(v6) & !((1u128 << 64) - 1)).into()),
        v4 => v4,
    }
}

/// What a failure costs its address.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Penalty {
    /// Its answer is held back this long.
    Delay(Duration),
    /// The address is refused for this long.
    Blocked(Duration),
}

#[derive(Debug, Clone, Copy)]
struct Record {
    failures: u32,
    last: Instant,
    blocked_until: Option<Instant>,
}

/// The failures of every address (see the module's docs).
#[derive(Debug)]
pub struct Strikes {
    table: Mutex<HashMap<IpAddr, Record>>,
    /// When the latest block ends, in nanoseconds since `epoch` (0: no address was ever
    /// blocked). Past it, which is nearly always, asking whether an address is blocked takes no
    /// lock (every authenticated request asks), however long ago a block was served.
    blocks_end: AtomicU64,
    epoch: Instant,
}

impl Default for Strikes {
    fn default() -> Strikes {
        Strikes {
            table: Mutex::default(),
            blocks_end: AtomicU64::new(0),
            epoch: Instant::now(),
        }
    }
}

impl Strikes {
    /// How much longer `peer`'s address is refused, if it is.
    pub fn blocked(&self, peer: IpAddr) -> Option<Duration> {
        let blocks_end = self.blocks_end.load(Ordering::Acquire);
        if blocks_end == 0 {
            return None;
        }
        let now = Instant::now();
        if self.since_epoch(now) >= blocks_end {
            return None;
        }
        let address = client_address(peer);
        let mut table = self.table.lock().unwrap_or_else(PoisonError::into_inner);
        let record = table.get(&address)?;
        match record.blocked_until {
            Some(until) if until > now => Some(until - now),
            // A block served starts the address afresh.
            Some(_) => {
                table.remove(&address);
                None
            }
            None => None,
        }
    }

    /// Counts a failure from `peer`; what it costs.
    pub fn strike(&self, peer: IpAddr) -> Penalty {
        let address = client_address(peer);
        let now = Instant::now();
        let mut table = self.table.lock().unwrap_or_else(PoisonError::into_inner);
        if table.len() >= MAX_ADDRESSES && !table.contains_key(&address) {
            make_room(&mut table, now);
        }
        let record = table.entry(address).or_insert(Record {
            failures: 0,
            last: now,
            blocked_until: None,
        });
        // A block served, or failures long past, start the address afresh (`blocked` does not
        // look at a served block while no block is in force).
        if record.blocked_until.is_some_and(|until| until <= now) {
            record.blocked_until = None;
            record.failures = 0;
        }
        if now.saturating_duration_since(record.last) > FORGET_AFTER {
            record.failures = 0;
        }
        record.failures = record.failures.saturating_add(1);
        record.last = now;
        if record.failures >= BLOCK_AFTER {
            let until = *record.blocked_until.get_or_insert(now + BLOCK_FOR);
            self.blocks_end
                .fetch_max(self.since_epoch(until), Ordering::Release);
            return Penalty::Blocked(until.saturating_duration_since(now));
        }
        Penalty::Delay(delay(record.failures))
    }

    /// `at` in nanoseconds since the table was made, at least 1 (0 is "never blocked").
    fn since_epoch(&self, at: Instant) -> u64 {
        let nanos = at.saturating_duration_since(self.epoch).as_nanos();
        u64::try_from(nanos).unwrap_or(u64::MAX).max(1)
    }

    /// How many addresses are remembered.
    pub fn len(&self) -> usize {
        self.table
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .len()
    }

    /// Whether no address is remembered.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Drops the forgotten addresses, or else the one that failed longest ago.
fn make_room(table: &mut HashMap<IpAddr, Record>, now: Instant) {
    let before = table.len();
    table.retain(|_, r| {
        now.saturating_duration_since(r.last) <= FORGET_AFTER
            || r.blocked_until.is_some_and(|until| until > now)
    });
    if table.len() < before {
        return;
    }
    if let Some(oldest) = table.iter().min_by_key(|(_, r)| r.last).map(|(a, _)| *a) {
        table.remove(&oldest);
    }
}

/// How long the `failures`-th failure of an address is held back: nothing for the first (a
/// typo), then a step more for each, up to a second.
pub fn delay(failures: u32) -> Duration {
    STEP.saturating_mul(failures.saturating_sub(1))
        .min(MAX_DELAY)
}

#[cfg(test)]
mod tests {
    use std::net::{Ipv4Addr, Ipv6Addr};

    use super::*;

    fn v4(last: u8) -> IpAddr {
        IpAddr::V4(Ipv4Addr::new(192, 0, 2, last))
    }

    #[test]
    fn each_failure_waits_a_step_longer_up_to_a_bound() {
        assert_eq!(delay(1), Duration::ZERO);
        assert_eq!(delay(2), STEP);
        assert_eq!(delay(10), STEP * 9);
        assert_eq!(delay(u32::MAX), MAX_DELAY);
    }

    #[tokio::test(start_paused = true)]
    async fn an_address_is_slowed_then_blocked_and_others_are_untouched() {
        let strikes = Strikes::default();
        for n in 1..BLOCK_AFTER {
            assert_eq!(strikes.strike(v4(1)), Penalty::Delay(delay(n)));
        }
        assert_eq!(strikes.blocked(v4(1)), None);
        assert_eq!(strikes.strike(v4(1)), Penalty::Blocked(BLOCK_FOR));
        assert_eq!(strikes.blocked(v4(1)), Some(BLOCK_FOR));
        // Another address's first failure is a typo's.
        assert_eq!(strikes.strike(v4(2)), Penalty::Delay(Duration::ZERO));
        assert_eq!(strikes.blocked(v4(2)), None);
        tokio::time::advance(BLOCK_FOR - Duration::from_secs(1)).await;
        assert_eq!(strikes.blocked(v4(1)), Some(Duration::from_secs(1)));
        tokio::time::advance(Duration::from_secs(1)).await;
        assert_eq!(strikes.blocked(v4(1)), None, "the block ends");
        assert_eq!(strikes.strike(v4(1)), Penalty::Delay(Duration::ZERO));
    }

    #[tokio::test(start_paused = true)]
    async fn failures_are_forgotten_after_a_quiet_while() {
        let strikes = Strikes::default();
        for _ in 1..BLOCK_AFTER {
            strikes.strike(v4(1));
        }
        tokio::time::advance(FORGET_AFTER + Duration::from_secs(1)).await;
        assert_eq!(strikes.strike(v4(1)), Penalty::Delay(Duration::ZERO));
    }

    #[test]
    fn ipv6_counts_by_64_and_mapped_ipv4_as_ipv4() {
        let a: IpAddr = "2001:db8:1:2::1".parse().unwrap();
        let b: IpAddr = "2001:db8:1:2:ffff::9".parse().unwrap();
        let other: IpAddr = "2001:db8:1:3::1".parse().unwrap();
        assert_eq!(client_address(a), client_address(b));
        assert_ne!(client_address(a), client_address(other));
        let mapped = IpAddr::V6(Ipv4Addr::new(192, 0, 2, 1).to_ipv6_mapped());
        assert_eq!(client_address(mapped), v4(1));
    }

    #[tokio::test(start_paused = true)]
    async fn the_table_is_bounded_and_the_least_recent_address_makes_room() {
        let strikes = Strikes::default();
        strikes.strike(v4(1));
        tokio::time::advance(Duration::from_millis(1)).await;
        for i in 1..MAX_ADDRESSES {
            let ip = IpAddr::V6(Ipv6Addr::from((i as u128) << 64));
            strikes.strike(ip);
        }
        assert_eq!(strikes.len(), MAX_ADDRESSES);
        strikes.strike(v4(2));
        assert_eq!(strikes.len(), MAX_ADDRESSES);
        // v4(1) failed first, so it made room: its next failure is a first one again.
        assert_eq!(strikes.strike(v4(2)), Penalty::Delay(STEP));
        let table = strikes.table.lock().unwrap();
        assert!(!table.contains_key(&v4(1)));
    }
}
