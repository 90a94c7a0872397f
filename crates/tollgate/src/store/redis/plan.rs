//! What a script call sends: each bucket once, where every check points among them, and which
//! buckets `bucket.lua` takes first (see its header): those that one check of the call charges
//! and no other names, sent first with what their check takes.

use std::sync::atomic::{AtomicI32, Ordering};

use super::encoded::{Encoded, Take, checks};

/// Calls with at most this many checks find repeated buckets by comparing them with the
/// buckets before: cheaper than hashing until the comparisons add up.
const PLAN_WITHOUT_HASHING: usize = 8;

pub(crate) struct Plan<'a> {
    /// The buckets, each once: those taken first, then the others in the order first met.
    pub(crate) keys: Vec<&'a [u8]>,
    /// The index in `keys` of every check (decisions flattened).
    pub(crate) slots: Vec<usize>,
    /// The buckets a single check charges, by index in `keys`, with what that check takes
    /// (cost × t, µs) and its policy's numbers (t, tau): taken first or not, whether the call found them absent tells
    /// [`TakeFirst`] what taking first is worth.
    pub(crate) lone: Vec<(usize, Take)>,
    /// Whether the lone buckets are taken first: then they are the first keys, in order.
    pub(crate) taken_first: bool,
}

impl<'a> Plan<'a> {
    /// Each bucket once, in the order first met; `lone` found for `bucket.lua` only
    /// (`buckets_only`), and none taken first.
    pub(crate) fn new<D: AsRef<[Encoded]>>(decisions: &'a [D], buckets_only: bool) -> Plan<'a> {
        let count = decisions.iter().map(|d| d.as_ref().len()).sum::<usize>();
        let mut keys: Vec<&[u8]> = Vec::with_capacity(count);
        let slots: Vec<usize> = if count <= PLAN_WITHOUT_HASHING {
            checks(decisions)
                .map(|check| {
                    let bucket = check.bucket.as_slice();
                    keys.iter().position(|&k| k == bucket).unwrap_or_else(|| {
                        keys.push(bucket);
                        keys.len() - 1
                    })
                })
                .collect()
        } else {
            let mut index: foldhash::HashMap<&[u8], usize> = foldhash::HashMap::default();
            checks(decisions)
                .map(|check| {
                    *index.entry(&check.bucket).or_insert_with(|| {
                        keys.push(&check.bucket);
                        keys.len() - 1
                    })
                })
                .collect()
        };
        let mut lone = Vec::new();
        if buckets_only {
            // Per bucket: the takes of the checks naming it, None once a second one does.
            let mut take: Vec<Option<Option<Take>>> = vec![None; keys.len()];
            for (check, &k) in checks(decisions).zip(&slots) {
                take[k] = match take[k] {
                    None => Some(check.take()),
                    Some(_) => Some(None),
                };
            }
            lone = take
                .iter()
                .enumerate()
                .filter_map(|(k, take)| Some((k, (*take)??)))
                .collect();
        }
        Plan {
            keys,
            slots,
            lone,
            taken_first: false,
        }
    }

    /// Puts the lone buckets first, in the order first met, with what their checks take:
    /// `bucket.lua` takes them first.
    pub(crate) fn take_first(&mut self) {
        if self.lone.is_empty() || self.taken_first {
            return;
        }
        // Where each bucket goes: the lone ones first, the others after, each in order.
        let mut moved = vec![usize::MAX; self.keys.len()];
        for (to, &(from, _)) in self.lone.iter().enumerate() {
            moved[from] = to;
        }
        let mut next = self.lone.len();
        for to in &mut moved {
            if *to == usize::MAX {
                *to = next;
                next += 1;
            }
        }
        let mut keys: Vec<&[u8]> = vec![&[]; self.keys.len()];
        for (from, key) in self.keys.iter().enumerate() {
            keys[moved[from]] = key;
        }
        self.keys = keys;
        for slot in &mut self.slots {
            *slot = moved[*slot];
        }
        for (to, lone) in self.lone.iter_mut().enumerate() {
            lone.0 = to;
        }
        self.taken_first = true;
    }

    /// What the buckets taken first take, in the order of `keys` (none when not taken first).
    pub(crate) fn takes(&self) -> &[(usize, Take)] {
        if self.taken_first { &self.lone } else { &[] }
    }
}

/// Whether the calls of one Redis (or of one slot: every bucket declared) take their lone
/// buckets first. Per node a bucket is read with a command of its own anyway, so taking first
/// never costs a command more there, nor in a call of one bucket; with several buckets
/// declared, the others are read by one `MGET`, and a lone bucket that exists costs its own
/// command where it shared the `MGET`. Taken first while at least about two in three lone
/// buckets are absent (the common case: users who come back after their bucket filled and
/// expired), learnt from what calls read. A Redis that refuses (older than 7.0) is not asked
/// again until the store is built again (a restart after an upgrade).
pub(crate) struct TakeFirst(AtomicI32);

/// The bounds of the score: how long a change of the traffic takes to turn it.
const SCORE: i32 = 64;

/// The score of a Redis that cannot take first (before 7.0: no `NX` with `GET`), for good.
const REFUSED: i32 = i32::MIN;

impl TakeFirst {
    pub(crate) fn new() -> TakeFirst {
        TakeFirst(AtomicI32::new(SCORE / 8))
    }

    pub(crate) fn worth(&self) -> bool {
        self.0.load(Ordering::Relaxed) > 0
    }

    /// A call found `absent` lone buckets absent and `present` not: +1 each absent, -2 each
    /// present, within the bounds.
    pub(crate) fn learn(&self, absent: usize, present: usize) {
        let count = |n: usize| i64::try_from(n).unwrap_or(i64::MAX / 4);
        let most = 2 * i64::from(SCORE);
        let change = (count(absent) - 2 * count(present)).clamp(-most, most);
        let change = i32::try_from(change).expect("within ±128");
        if change != 0 {
            // A lost race changes nothing that matters: the score is a guess.
            let _ = self
                .0
                .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |s| {
                    (s != REFUSED).then(|| (s + change).clamp(-SCORE, SCORE))
                });
        }
    }

    /// The script could not take first: this Redis is older than 7.0.
    pub(crate) fn refused(&self) {
        self.0.store(REFUSED, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::{Check, Policy};

    /// Few checks are planned by comparing, many by hashing: both send each bucket once, in
    /// the order first met, and point every check at its own.
    #[test]
    fn calls_of_few_and_of_many_checks_are_planned_alike() {
        let policy = Policy::token_bucket(10, 1, Duration::from_secs(1)).unwrap();
        let keys: [&[u8]; 3] = [b"a", b"b", b"c"];
        for n in [1, 5, PLAN_WITHOUT_HASHING, PLAN_WITHOUT_HASHING + 1, 40] {
            // Single checks on a, b, c, a, b, c, ..., and one decision of two checks.
            let mut decisions: Vec<Vec<Encoded>> = (0..n)
                .map(|i| vec![Encoded::new(&Check::new(policy, keys[i % 3], 1)).unwrap()])
                .collect();
            decisions.push(vec![
                Encoded::new(&Check::new(policy, b"d", 1)).unwrap(),
                Encoded::new(&Check::new(policy, b"a", 1)).unwrap(),
            ]);
            let plan = Plan::new(&decisions, false);
            let distinct = n.min(3);
            let mut expected: Vec<Vec<u8>> = keys[..distinct]
                .iter()
                .map(|k| Encoded::new(&Check::new(policy, k, 1)).unwrap().bucket)
                .collect();
            expected.push(decisions[n][0].bucket.clone());
            assert_eq!(plan.keys, expected, "{n} checks");
            let mut want: Vec<usize> = (0..n).map(|i| i % 3).collect();
            want.extend([distinct, 0]);
            assert_eq!(plan.slots, want, "{n} checks");
            assert!(plan.lone.is_empty(), "not asked for");
        }
    }

    /// Lone buckets (one check, with a cost) go first with what they take, the others keep
    /// their order after them, and every check still points at its own bucket.
    #[test]
    fn lone_buckets_are_taken_first_and_checks_follow_them() {
        let second = Duration::from_secs(1);
        // t = 100,000 µs and 250,000 µs.
        let ten = Policy::token_bucket(10, 10, second).unwrap();
        let four = Policy::token_bucket(4, 4, second).unwrap();
        let enc = |policy, key: &[u8], cost| Encoded::new(&Check::new(policy, key, cost)).unwrap();
        let decisions = vec![
            vec![enc(ten, b"hot", 1)],
            vec![enc(ten, b"alice", 2)],
            vec![enc(ten, b"hot", 1)],
            vec![enc(ten, b"peek", 0)],
            vec![enc(ten, b"bob", 1), enc(four, b"carol", 3)],
        ];
        let mut plan = Plan::new(&decisions, true);
        let bucket = |d: usize, c: usize| decisions[d][c].bucket.as_slice();
        // First met: hot, alice, peek, bob, carol; lone: alice, bob, carol.
        let (t10, t4) = ((100_000, 1_000_000), (250_000, 1_000_000));
        let take = |took, (t, tau)| (took, t, tau);
        assert_eq!(
            plan.lone,
            [
                (1, take(200_000, t10)),
                (3, take(100_000, t10)),
                (4, take(750_000, t4))
            ]
        );
        assert!(plan.takes().is_empty(), "none taken first until asked");
        let before: Vec<&[u8]> = plan.slots.iter().map(|&k| plan.keys[k]).collect();
        plan.take_first();
        assert_eq!(
            plan.keys,
            [
                bucket(1, 0),
                bucket(4, 0),
                bucket(4, 1),
                bucket(0, 0),
                bucket(3, 0)
            ]
        );
        assert_eq!(
            plan.takes(),
            [
                (0, take(200_000, t10)),
                (1, take(100_000, t10)),
                (2, take(750_000, t4))
            ]
        );
        let after: Vec<&[u8]> = plan.slots.iter().map(|&k| plan.keys[k]).collect();
        assert_eq!(before, after);
        assert_eq!(plan.slots, [3, 0, 3, 4, 1, 2]);
    }

    #[test]
    fn taking_first_stops_when_lone_buckets_exist_and_comes_back() {
        let guess = TakeFirst::new();
        assert!(guess.worth(), "absent until seen otherwise");
        guess.learn(0, 5);
        assert!(!guess.worth());
        // Two absent for one present is not enough to come back from there.
        guess.learn(20, 10);
        assert!(!guess.worth());
        guess.learn(40, 0);
        assert!(guess.worth());
        // Bounded: a long run of absent buckets turns within a few calls.
        guess.learn(10_000, 0);
        guess.learn(0, 40);
        guess.learn(0, 40);
        assert!(!guess.worth());
        // A large batch counts by its share: four in five absent stays worth it.
        guess.learn(64, 0);
        guess.learn(200, 50);
        assert!(guess.worth());
        // A Redis that refuses is never asked again.
        guess.learn(64, 0);
        assert!(guess.worth());
        guess.refused();
        guess.learn(10_000, 0);
        assert!(!guess.worth());
    }
}
