//! One policy's (or Envoy domain's) summary: its denied and its allowed decisions, each over
//! the last minute and hour ([`Windows`]), and the buffers that keep the summaries' work off
//! the decision path.
//!
//! One decision in `sample_every` is recorded ([`super::sample`]: a thread-local
//! countdown, no lock on the common path) and counts `sample_every`. A recorded decision
//! only appends its key to a small buffer, one of [`SHARDS`] picked by the thread (so threads
//! seldom wait for each other); the summaries take the buffers' records when the ticker drains
//! them (each second, see [`super::Top::run`]) and before a read, never on a decision's
//! thread. A full buffer drops what comes next until drained, counting it
//! ([`Summary::dropped`]). A buffer holds at most [`BATCH_RECORDS`] records and
//! [`BATCH_BYTES`] bytes of keys (plus one key), so the buffers add at most `SHARDS ×
//! (BATCH_BYTES + MAX_KEY_BYTES + BATCH_RECORDS × 8)` bytes (about 600 KiB) to a summary. A
//! record is counted at the time it is drained: up to a second (the ticker's interval) late.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use tollgate::Clock;

use super::sample;
use super::space_saving::SpaceSaving;
use super::windows::{Window, Windows};

/// The buffers of a summary.
pub const SHARDS: usize = 8;

/// The most records a buffer holds between the ticker's drains (more are dropped, and
/// counted as dropped): at one in 64 sampled, 8 buffers take 500,000 decisions a second.
pub const BATCH_RECORDS: usize = 1024;

/// The most bytes of keys a buffer holds between the ticker's drains (one key more may end
/// past it).
pub const BATCH_BYTES: usize = 64 * 1024;

/// The longest key a bucket takes (a longer one is stored as its digest).
const MAX_KEY_BYTES: usize = 1024;

/// Which decisions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum By {
    /// Denied ones (a shadow policy's: those it would have denied).
    Denied = 0,
    /// Allowed ones.
    Allowed = 1,
}

impl By {
    /// Its name in `GET /v1/top`.
    pub fn as_str(self) -> &'static str {
        match self {
            By::Denied => "denied",
            By::Allowed => "allowed",
        }
    }

    fn of(denied: bool) -> By {
        if denied { By::Denied } else { By::Allowed }
    }
}

/// Records waiting for the summaries: the keys end to end, and where each ends.
#[derive(Default)]
struct Batch {
    keys: Vec<u8>,
    records: Vec<(u32, By)>,
}

/// The windows of both kinds.
struct Kinds {
    denied: Windows,
    allowed: Windows,
}

impl Kinds {
    fn of(&mut self, by: By) -> &mut Windows {
        match by {
            By::Denied => &mut self.denied,
            By::Allowed => &mut self.allowed,
        }
    }
}

/// A policy's heavy hitters.
pub struct Summary {
    capacity: usize,
    sample_every: u32,
    clock: Arc<dyn Clock>,
    shards: [Mutex<Batch>; SHARDS],
    kinds: Mutex<Kinds>,
    /// Per [`By`]: decisions dropped because their buffer was full.
    dropped: [AtomicU64; 2],
}

/// The thread's buffer, handed out in turn as threads first record.
fn shard() -> usize {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    thread_local! {
        static SHARD: usize = NEXT.fetch_add(1, Ordering::Relaxed) % SHARDS;
    }
    SHARD.with(|s| *s)
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Summary {
    /// An empty summary of `capacity` keys per slice recording one decision in `sample_every`
    /// (every one at 0 or 1), its time read from `clock`.
    pub fn new(capacity: usize, sample_every: u32, clock: Arc<dyn Clock>) -> Summary {
        Summary {
            capacity,
            sample_every: sample_every.max(1),
            clock,
            shards: std::array::from_fn(|_| Mutex::default()),
            kinds: Mutex::new(Kinds {
                denied: Windows::new(capacity),
                allowed: Windows::new(capacity),
            }),
            dropped: [AtomicU64::new(0), AtomicU64::new(0)],
        }
    }

    /// Counts a decision of `key`, `denied` or allowed: one in `sample_every` is recorded, and
    /// counts `sample_every`.
    #[inline]
    pub fn record(&self, key: &[u8], denied: bool) {
        if sample::sampled(self.sample_every) {
            self.keep(key, denied);
        }
    }

    /// Appends a recorded decision to the thread's buffer; drops it when the buffer is full
    /// (the ticker empties the buffers each second), counting it in [`dropped`](Self::dropped).
    /// A decision never waits for the summaries' own work: that is the ticker's and the reads'.
    fn keep(&self, key: &[u8], denied: bool) {
        let by = By::of(denied);
        let mut batch = lock(&self.shards[shard()]);
        if batch.records.len() >= BATCH_RECORDS || batch.keys.len() >= BATCH_BYTES {
            drop(batch);
            self.dropped[by as usize].fetch_add(u64::from(self.sample_every), Ordering::Relaxed);
            return;
        }
        batch.keys.extend_from_slice(key);
        // A key is at most MAX_KEY_BYTES and a buffer takes none past BATCH_BYTES.
        let end = u32::try_from(batch.keys.len()).unwrap_or(u32::MAX);
        batch.records.push((end, by));
    }

    /// Hands every buffer to the summaries, and moves them to the current time. A buffer that
    /// was used is replaced by one of its full size, allocated here, so that the decisions'
    /// appends never grow it; one unused stays empty.
    pub fn drain(&self) {
        let batches = self.shards.each_ref().map(|s| {
            let used = !lock(s).records.is_empty();
            let spare = if used {
                Batch {
                    keys: Vec::with_capacity(BATCH_BYTES + MAX_KEY_BYTES),
                    records: Vec::with_capacity(BATCH_RECORDS),
                }
            } else {
                Batch::default()
            };
            std::mem::replace(&mut *lock(s), spare)
        });
        self.absorb(batches);
    }

    /// Decisions of `by` not counted since the start, because their buffer was full (each
    /// recorded one stands for `sample_every`): a listed key's true count may be up to this
    /// much above what its count says.
    pub fn dropped(&self, by: By) -> u64 {
        self.dropped[by as usize].load(Ordering::Relaxed)
    }

    /// The keys of `by` decisions over `window`, merged from its slices.
    pub fn read(&self, window: Window, by: By) -> SpaceSaving {
        self.drain();
        lock(&self.kinds).of(by).read(window)
    }

    /// How many decisions one recorded stands for.
    pub fn sample_every(&self) -> u32 {
        self.sample_every
    }

    /// Its capacity: the most keys a read lists.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// The counters its slices hold: at most 20 × the capacity.
    pub fn entries(&self) -> usize {
        let kinds = lock(&self.kinds);
        kinds.denied.entries() + kinds.allowed.entries()
    }

    /// The bytes its slices and buffers hold.
    pub fn bytes(&self) -> usize {
        let buffers: usize = self
            .shards
            .iter()
            .map(|s| {
                let b = lock(s);
                b.keys.capacity() + b.records.capacity() * std::mem::size_of::<(u32, By)>()
            })
            .sum();
        let kinds = lock(&self.kinds);
        buffers + kinds.denied.bytes() + kinds.allowed.bytes()
    }

    /// Moves the windows to now, then counts `batches` in the open slices.
    fn absorb<const N: usize>(&self, batches: [Batch; N]) {
        let now = self.clock.now().as_duration();
        let mut kinds = lock(&self.kinds);
        kinds.denied.advance(now);
        kinds.allowed.advance(now);
        for batch in &batches {
            let mut start = 0;
            for &(end, by) in &batch.records {
                let end = end as usize;
                if let Some(key) = batch.keys.get(start..end) {
                    kinds.of(by).record(key, u64::from(self.sample_every));
                }
                start = end;
            }
        }
    }
}
