//! The Space-Saving summary (Metwally, Agrawal and El Abbadi, 2005): the heaviest keys of a
//! stream in `capacity` counters, each count an overestimate by at most its `error`, and a
//! merge of summaries (of disjoint streams) that keeps those guarantees.
//!
//! Fed `N` decisions, a summary of capacity `m` promises, whatever the stream:
//! - a listed key's true count is within `[count - error, count]`, and `error <= N / m`;
//! - a key not listed was seen at most [`floor`](SpaceSaving::floor) `<= N / m` times, so every
//!   key seen more than `N / m` times is listed.
//!
//! A key not listed is counted by the smallest counter, which it takes over: its count is
//! that counter's plus its own, and that counter's count becomes its error. The counters stay
//! in their slots; a binary min-heap of slot numbers (the smallest count at the root) finds the
//! smallest, and a map from key to slot the key's counter, so a record hashes its key once and
//! moves at most `log m` slot numbers; the records arrive in batches off the decision path (see
//! `summary.rs`).

use std::collections::HashMap;
use std::sync::Arc;

/// One key's counter.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Counter {
    /// The key, as its bucket is keyed.
    pub key: Arc<[u8]>,
    /// The estimate: never below the true count.
    pub count: u64,
    /// At most this much above the true count.
    pub error: u64,
}

/// A Space-Saving summary of at most `capacity` keys.
#[derive(Debug, Clone)]
pub struct SpaceSaving {
    capacity: usize,
    /// The counters, each in its slot for as long as its key is listed.
    slots: Vec<Counter>,
    /// Slot numbers, a min-heap by their counts.
    heap: Vec<usize>,
    /// Each slot's place in `heap`.
    at: Vec<usize>,
    /// Each listed key's slot.
    place: HashMap<Arc<[u8]>, usize>,
}

impl SpaceSaving {
    /// An empty summary of `capacity` counters (at least 1).
    pub fn new(capacity: usize) -> SpaceSaving {
        SpaceSaving {
            capacity: capacity.max(1),
            slots: Vec::new(),
            heap: Vec::new(),
            at: Vec::new(),
            place: HashMap::new(),
        }
    }

    /// Counts `weight` more decisions of `key`.
    pub fn record(&mut self, key: &[u8], weight: u64) {
        if let Some(&slot) = self.place.get(key) {
            let counter = &mut self.slots[slot];
            counter.count = counter.count.saturating_add(weight);
            self.sift_down(self.at[slot]);
            return;
        }
        let key: Arc<[u8]> = Arc::from(key);
        if self.slots.len() < self.capacity {
            self.push(Counter {
                key,
                count: weight,
                error: 0,
            });
            return;
        }
        // Full: the key takes over the smallest counter, whose count becomes its error.
        let slot = self.heap[0];
        let smallest = self.slots[slot].count;
        self.place.remove(&self.slots[slot].key);
        self.place.insert(Arc::clone(&key), slot);
        self.slots[slot] = Counter {
            key,
            count: smallest.saturating_add(weight),
            error: smallest,
        };
        self.sift_down(0);
    }

    /// The most a key not listed may have been seen: the smallest count when every counter is
    /// taken, else 0 (nothing was ever dropped).
    pub fn floor(&self) -> u64 {
        if self.slots.len() == self.capacity {
            self.slots[self.heap[0]].count
        } else {
            0
        }
    }

    /// How many keys are listed (at most the capacity).
    pub fn len(&self) -> usize {
        self.slots.len()
    }

    /// Whether nothing was counted.
    pub fn is_empty(&self) -> bool {
        self.slots.is_empty()
    }

    /// The most keys it lists.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// The bytes it holds on the heap (its counters, its map and its keys), as allocated: at
    /// most `capacity × (key + 16 + 2 × (32 + 16) + 58)` bytes (the vectors' and the map's
    /// spare room included).
    pub fn bytes(&self) -> usize {
        let counters = self.slots.capacity() * std::mem::size_of::<Counter>()
            + (self.heap.capacity() + self.at.capacity()) * std::mem::size_of::<usize>();
        // A hash table of n places holds n entries and n control bytes, in at most twice the
        // places it was asked for.
        let slot = std::mem::size_of::<(Arc<[u8]>, usize)>() + 1;
        let map = self.place.capacity().next_power_of_two() * 8 / 7 * slot;
        // An `Arc<[u8]>` holds two counts before its bytes.
        let keys: usize = self.slots.iter().map(|c| c.key.len() + 16).sum();
        counters + map + keys
    }

    /// The counters, most counted first (ties by key, so that the order is stable).
    pub fn top(&self) -> Vec<Counter> {
        let mut all = self.slots.clone();
        all.sort_unstable_by(|a, b| b.count.cmp(&a.count).then_with(|| a.key.cmp(&b.key)));
        all
    }

    /// The summary of the streams `parts` summarize together, in `capacity` counters.
    ///
    /// A key's count is the sum of its counts where listed and of the others' floors (all it
    /// can have been seen there), its error likewise: both bounds carry over. The largest
    /// `capacity` counts are kept; a key dropped has a count below every one kept, so below
    /// the new floor; and at most `N` is counted in the `capacity` kept (each part's listed
    /// counts add up to at most its `N`), so the floor is at most `N / capacity` again.
    pub fn merge(parts: &[&SpaceSaving], capacity: usize) -> SpaceSaving {
        let floors: u64 = parts.iter().map(|p| p.floor()).sum();
        // Per key: its counts, its errors, and the floors of the parts that list it.
        let mut sums: HashMap<Arc<[u8]>, (u64, u64, u64)> = HashMap::new();
        for part in parts {
            let floor = part.floor();
            for c in &part.slots {
                let sum = sums.entry(Arc::clone(&c.key)).or_default();
                sum.0 = sum.0.saturating_add(c.count);
                sum.1 = sum.1.saturating_add(c.error);
                sum.2 += floor;
            }
        }
        let mut all: Vec<Counter> = sums
            .into_iter()
            .map(|(key, (count, error, listed))| {
                let unlisted = floors - listed;
                Counter {
                    key,
                    count: count.saturating_add(unlisted),
                    error: error.saturating_add(unlisted),
                }
            })
            .collect();
        let capacity = capacity.max(1);
        if all.len() > capacity {
            all.select_nth_unstable_by(capacity - 1, |a, b| {
                b.count.cmp(&a.count).then_with(|| a.key.cmp(&b.key))
            });
            all.truncate(capacity);
        }
        let mut merged = SpaceSaving {
            capacity,
            place: HashMap::with_capacity(all.len()),
            slots: Vec::with_capacity(all.len()),
            heap: Vec::with_capacity(all.len()),
            at: Vec::with_capacity(all.len()),
        };
        for counter in all {
            merged.push(counter);
        }
        merged
    }

    /// Lists `counter` in a new slot (there is room).
    fn push(&mut self, counter: Counter) {
        let slot = self.slots.len();
        self.place.insert(Arc::clone(&counter.key), slot);
        self.slots.push(counter);
        self.at.push(self.heap.len());
        self.heap.push(slot);
        self.sift_up(self.heap.len() - 1);
    }

    fn count_at(&self, i: usize) -> u64 {
        self.slots[self.heap[i]].count
    }

    fn sift_up(&mut self, mut i: usize) {
        while i > 0 {
            let parent = (i - 1) / 2;
            if self.count_at(parent) <= self.count_at(i) {
                break;
            }
            self.swap(i, parent);
            i = parent;
        }
    }

    fn sift_down(&mut self, mut i: usize) {
        loop {
            let (left, right) = (2 * i + 1, 2 * i + 2);
            let mut least = i;
            if left < self.heap.len() && self.count_at(left) < self.count_at(least) {
                least = left;
            }
            if right < self.heap.len() && self.count_at(right) < self.count_at(least) {
                least = right;
            }
            if least == i {
                return;
            }
            self.swap(i, least);
            i = least;
        }
    }

    fn swap(&mut self, a: usize, b: usize) {
        self.heap.swap(a, b);
        self.at[self.heap[a]] = a;
        self.at[self.heap[b]] = b;
    }
}

#[cfg(test)]
mod tests {
    use super::SpaceSaving;

    #[test]
    fn a_key_not_listed_takes_over_the_smallest_counter() {
        let mut s = SpaceSaving::new(2);
        s.record(b"a", 3);
        s.record(b"b", 1);
        assert_eq!(s.floor(), 1);
        s.record(b"c", 1);
        let top = s.top();
        assert_eq!(&*top[0].key, b"a");
        assert_eq!((top[0].count, top[0].error), (3, 0));
        assert_eq!(&*top[1].key, b"c");
        assert_eq!((top[1].count, top[1].error), (2, 1));
        assert_eq!(s.len(), 2);
    }

    #[test]
    fn a_merge_adds_counts_and_charges_the_floors_of_the_parts_that_do_not_list_a_key() {
        let mut a = SpaceSaving::new(2);
        a.record(b"x", 5);
        a.record(b"y", 2);
        let mut b = SpaceSaving::new(2);
        b.record(b"x", 1);
        b.record(b"z", 4);
        let merged = SpaceSaving::merge(&[&a, &b], 2);
        let top = merged.top();
        // x: 5 + 1; z: 4 + a's floor 2 (error 2); y: 2 + b's floor 1 = 3, dropped.
        assert_eq!(&*top[0].key, b"x");
        assert_eq!((top[0].count, top[0].error), (6, 0));
        assert_eq!(&*top[1].key, b"z");
        assert_eq!((top[1].count, top[1].error), (6, 2));
        assert_eq!(merged.floor(), 6);
    }
}
