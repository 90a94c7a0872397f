//! The last minute and the last hour, each kept as slices: a summary per slice (15 seconds
//! for the minute, 15 minutes for the hour), of which the last four closed ones and the open
//! one are kept, and merged when read. So a window read covers the last 60 to 75 seconds (or
//! minutes): the four slices before the open one, and the open one so far.
//!
//! A minute slice that closes is merged into the open hour slice, so a decision is recorded
//! once (into the open minute slice); the hour is read with the open minute slice added.
//! Each window holds at most 5 summaries, so a [`Windows`] at most 10.

use std::collections::VecDeque;
use std::time::Duration;

use super::space_saving::SpaceSaving;

/// A minute slice.
pub const MINUTE_SLICE: Duration = Duration::from_secs(15);

/// An hour slice.
pub const HOUR_SLICE: Duration = Duration::from_secs(15 * 60);

/// The closed slices a window keeps beside the open one.
pub const CLOSED: u64 = 4;

/// How many minute slices make an hour slice.
const PER_HOUR_SLICE: u64 = HOUR_SLICE.as_secs() / MINUTE_SLICE.as_secs();

/// Which window to read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Window {
    /// The last minute (60 to 75 seconds).
    Minute,
    /// The last hour (60 to 75 minutes).
    Hour,
}

impl Window {
    /// Its name in `GET /v1/top`.
    pub fn as_str(self) -> &'static str {
        match self {
            Window::Minute => "1m",
            Window::Hour => "1h",
        }
    }
}

/// A window's slices: the open one (numbered by its start, in slices since the epoch) and the
/// closed ones kept.
#[derive(Debug)]
struct Slices {
    open: u64,
    current: SpaceSaving,
    closed: VecDeque<(u64, SpaceSaving)>,
}

impl Slices {
    fn new(capacity: usize) -> Slices {
        Slices {
            open: 0,
            current: SpaceSaving::new(capacity),
            closed: VecDeque::new(),
        }
    }

    /// Opens slice `now` if it is later than the open one: the open one is closed (and its
    /// number returned, to find it in `closed`) unless empty, and slices too old to be read
    /// are dropped.
    fn open(&mut self, now: u64) -> Option<u64> {
        if now <= self.open {
            return None;
        }
        let capacity = self.current.capacity();
        let done = std::mem::replace(&mut self.current, SpaceSaving::new(capacity));
        let closed = (!done.is_empty()).then(|| {
            self.closed.push_back((self.open, done));
            self.open
        });
        self.open = now;
        while self.closed.front().is_some_and(|(n, _)| *n + CLOSED < now) {
            self.closed.pop_front();
        }
        closed
    }

    /// The summaries a read merges: the open one and the closed ones kept.
    fn parts(&self) -> impl Iterator<Item = &SpaceSaving> {
        std::iter::once(&self.current).chain(self.closed.iter().map(|(_, s)| s))
    }

    fn bytes(&self) -> usize {
        self.parts().map(SpaceSaving::bytes).sum()
    }

    fn entries(&self) -> usize {
        self.parts().map(SpaceSaving::len).sum()
    }
}

/// One kind of decision (denied, or allowed) of one policy, over the last minute and hour.
#[derive(Debug)]
pub struct Windows {
    minute: Slices,
    hour: Slices,
}

impl Windows {
    /// Empty windows of summaries of `capacity` keys.
    pub fn new(capacity: usize) -> Windows {
        Windows {
            minute: Slices::new(capacity),
            hour: Slices::new(capacity),
        }
    }

    /// Counts `weight` decisions of `key` (one recorded at one in `weight`) in the open slice.
    pub fn record(&mut self, key: &[u8], weight: u64) {
        self.minute.current.record(key, weight);
    }

    /// Moves to `now` (since the epoch): a minute slice that closes is merged into its hour
    /// slice.
    pub fn advance(&mut self, now: Duration) {
        let minute = now.as_secs() / MINUTE_SLICE.as_secs();
        if let Some(closed) = self.minute.open(minute) {
            self.hour.open(closed / PER_HOUR_SLICE);
            if let Some((_, slice)) = self.minute.closed.iter().find(|(n, _)| *n == closed) {
                let capacity = slice.capacity();
                self.hour.current = SpaceSaving::merge(&[&self.hour.current, slice], capacity);
            }
        }
        self.hour.open(now.as_secs() / HOUR_SLICE.as_secs());
    }

    /// `window`'s summary, its slices merged (call [`advance`](Self::advance) first).
    pub fn read(&self, window: Window) -> SpaceSaving {
        let capacity = self.minute.current.capacity();
        let parts: Vec<&SpaceSaving> = match window {
            Window::Minute => self.minute.parts().collect(),
            Window::Hour => self
                .hour
                .parts()
                .chain(std::iter::once(&self.minute.current))
                .collect(),
        };
        SpaceSaving::merge(&parts, capacity)
    }

    /// The bytes its summaries hold.
    pub fn bytes(&self) -> usize {
        self.minute.bytes() + self.hour.bytes()
    }

    /// The counters its summaries hold (at most 10 × the capacity).
    pub fn entries(&self) -> usize {
        self.minute.entries() + self.hour.entries()
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::{Window, Windows};

    fn count(w: &Windows, window: Window, key: &[u8]) -> u64 {
        w.read(window)
            .top()
            .iter()
            .find(|c| &*c.key == key)
            .map_or(0, |c| c.count)
    }

    #[test]
    fn a_decision_leaves_the_minute_after_60_to_75_seconds_and_the_hour_after_60_to_75_minutes() {
        let mut w = Windows::new(10);
        let t0 = Duration::from_secs(1_800_000_000);
        w.advance(t0);
        w.record(b"a", 1);
        w.record(b"a", 1);
        for (at, minute, hour) in [
            (0, 2, 2),
            (14, 2, 2),
            (59, 2, 2),
            (74, 2, 2),
            (75, 0, 2),
            (4_499, 0, 2),
            (4_500, 0, 0),
        ] {
            w.advance(t0 + Duration::from_secs(at));
            assert_eq!(count(&w, Window::Minute, b"a"), minute, "at {at} s");
            assert_eq!(count(&w, Window::Hour, b"a"), hour, "at {at} s");
        }
        assert!(w.entries() <= 10 * 10);
    }

    #[test]
    fn the_hour_counts_each_decision_once_across_slices() {
        let mut w = Windows::new(10);
        let t0 = Duration::from_secs(1_800_000_000);
        for s in 0..600 {
            w.advance(t0 + Duration::from_secs(s));
            w.record(b"k", 1);
        }
        assert_eq!(count(&w, Window::Hour, b"k"), 600);
        assert!(count(&w, Window::Minute, b"k") >= 60);
        assert!(count(&w, Window::Minute, b"k") <= 75);
    }
}
