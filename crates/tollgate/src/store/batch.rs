//! Batching: concurrent decisions share calls to the store.
//!
//! A call costs a store far more to start (parse, plan or enter the script, commit, write the
//! reply, the system calls) than one more decision inside it costs, and each call is a round
//! trip for the client. So decisions that arrive while calls are in flight wait in a queue, and
//! the next call decides everything waiting, up to `max_batch`, in arrival order: exactly as if
//! they had come one by one, with the state of a bucket carried from one decision to the next
//! (so a hot key's checks are coalesced, and a thousand users' checks share a call). In
//! PostgreSQL this also takes a hot row's lock once per batch rather than once per caller.
//!
//! Queues are *lanes*. Most stores have one lane for every key; Redis Cluster has one per node
//! (one per user key where calls must stay in one hash slot). A lane runs at most `depth` calls
//! at once, few so that batches fill. Where a lane is a whole store, two: the store has the
//! next batch to work on while the last reply travels back. Where a lane is a cluster node,
//! one: the node has the other lanes' and the other servers' calls to work on meanwhile (the
//! Redis store's `max_in_flight`). A decision that finds its lane idle makes its call at once,
//! itself: a quiet store adds no wait and no task.
//!
//! A store whose transactions conflict when they overlap on a row (PostgreSQL at SERIALIZABLE)
//! names each item's rows ([`Runner::rows`]): calls in flight at once then never share a row.
//! An item whose row is in a call in flight waits for the next call (and so does every later
//! item on that row, which keeps each row's arrival order); items on other rows go ahead of it.
//! So one process's calls on a hot row follow each other instead of failing to serialize.
//!
//! Other calls run on spawned tasks, so a caller that gives up (its timeout, a dropped request)
//! never strands the decisions queued behind it; and a decision whose caller has gone by the
//! time its batch is taken is dropped unanswered, so it charges nothing.

use std::collections::VecDeque;
use std::future::Future;
use std::sync::Arc;

use foldhash::HashMap;
use parking_lot::Mutex;
use tokio::sync::oneshot;

use crate::StoreError;

/// Decides a batch of items in one call, answering each, in order.
pub(crate) trait Runner: Send + Sync + 'static {
    type Item: Send + 'static;
    type Answer: Send + 'static;

    fn run<'a>(
        &'a self,
        items: &'a [Self::Item],
    ) -> impl Future<Output = Result<Vec<Self::Answer>, StoreError>> + Send + 'a;

    /// The call a caller makes itself when its lane was idle. Its caller bounds its own wait,
    /// so a runner may leave out the bound it puts on the calls the batcher's tasks make (a
    /// timer each); by default, [`run`](Runner::run).
    fn run_in_place<'a>(
        &'a self,
        items: &'a [Self::Item],
    ) -> impl Future<Output = Result<Vec<Self::Answer>, StoreError>> + Send + 'a {
        self.run(items)
    }

    /// Pushes a hash of each row `item` writes, when calls in flight at once must not share a
    /// row; by default none, and calls share rows freely. (Two rows with one hash only make
    /// an item wait for a call it did not need to wait for.)
    fn rows(&self, _item: &Self::Item, _rows: &mut Vec<u64>) {}
}

struct Waiter<R: Runner> {
    item: R::Item,
    reply: oneshot::Sender<Result<R::Answer, StoreError>>,
}

/// A call made by its caller in place (the lane was idle); when it ends, however it ends (its
/// caller may give up mid-call), its place in flight goes to whatever queued meanwhile.
struct Slot<'a, R: Runner> {
    batcher: &'a Arc<Batcher<R>>,
    lane: &'a [u8],
    rows: Vec<u64>,
}

impl<R: Runner> Drop for Slot<'_, R> {
    fn drop(&mut self) {
        let mut lanes = self.batcher.lanes.lock();
        if let Some(entry) = lanes.get_mut(self.lane) {
            entry.unclaim(&self.rows);
        }
        self.batcher.release(&mut lanes, self.lane);
    }
}

struct Lane<R: Runner> {
    queue: VecDeque<Waiter<R>>,
    in_flight: usize,
    /// The rows of the calls in flight ([`Runner::rows`]), each with its number of calls.
    claimed: HashMap<u64, usize>,
}

impl<R: Runner> Lane<R> {
    fn claim(&mut self, rows: &[u64]) {
        for &row in rows {
            *self.claimed.entry(row).or_default() += 1;
        }
    }

    fn unclaim(&mut self, rows: &[u64]) {
        for row in rows {
            if let Some(calls) = self.claimed.get_mut(row) {
                *calls -= 1;
                if *calls == 0 {
                    self.claimed.remove(row);
                }
            }
        }
    }
}

/// The lanes of waiting decisions.
pub(crate) struct Batcher<R: Runner> {
    runner: Arc<R>,
    lanes: Mutex<HashMap<Box<[u8]>, Lane<R>>>,
    max_batch: usize,
    depth: usize,
}

impl<R: Runner> Batcher<R> {
    pub(crate) fn new(runner: Arc<R>, max_batch: usize, depth: usize) -> Batcher<R> {
        Batcher {
            runner,
            lanes: Mutex::new(HashMap::default()),
            max_batch,
            depth,
        }
    }

    /// Decides `item` in a call of lane `lane`, with whatever else waits there.
    pub(crate) async fn submit(
        self: &Arc<Self>,
        lane: &[u8],
        item: R::Item,
    ) -> Result<R::Answer, StoreError> {
        // `Err((item, its rows))`: the lane was idle, and this caller makes the call itself, sparing a
        // task and the hops between threads; whoever queues meanwhile is driven after it (see
        // `Slot`).
        let queued = {
            let mut lanes = self.lanes.lock();
            match lanes.get_mut(lane) {
                Some(entry) => {
                    let (reply, answer) = oneshot::channel();
                    entry.queue.push_back(Waiter { item, reply });
                    if entry.in_flight < self.depth {
                        entry.in_flight += 1;
                        tokio::spawn(Arc::clone(self).drive(lane.into()));
                    }
                    Ok(answer)
                }
                None => {
                    let mut idle = Lane {
                        queue: VecDeque::new(),
                        in_flight: 1,
                        claimed: HashMap::default(),
                    };
                    let mut rows = Vec::new();
                    self.runner.rows(&item, &mut rows);
                    idle.claim(&rows);
                    lanes.insert(lane.into(), idle);
                    Err((item, rows))
                }
            }
        };
        let answer = match queued {
            Ok(answer) => answer,
            Err((item, rows)) => {
                let _slot = Slot {
                    batcher: self,
                    lane,
                    rows,
                };
                let mut answers = self
                    .runner
                    .run_in_place(std::slice::from_ref(&item))
                    .await?;
                return answers
                    .pop()
                    .ok_or_else(|| StoreError::incompatible("the call answered no decision"));
            }
        };
        answer.await.unwrap_or_else(|_| {
            Err(StoreError::Unavailable(
                "the call deciding this check was dropped".into(),
            ))
        })
    }

    /// The next call's items, in arrival order, up to `max_batch`, leaving queued those whose
    /// row a call in flight holds, and every later one on such a row; their rows in `rows`.
    fn take_batch(&self, entry: &mut Lane<R>, rows: &mut Vec<u64>) -> Vec<Waiter<R>> {
        let mut batch = Vec::with_capacity(entry.queue.len().min(self.max_batch));
        // The items passed over, in order; they go back in front of the rest of the queue,
        // which stays where it is (for a runner without rows, always: nothing is passed over).
        let mut left = VecDeque::new();
        let mut waiting_rows: Vec<u64> = Vec::new();
        let mut item_rows = Vec::new();
        while batch.len() < self.max_batch {
            let Some(waiter) = entry.queue.pop_front() else {
                break;
            };
            if waiter.reply.is_closed() {
                continue;
            }
            item_rows.clear();
            self.runner.rows(&waiter.item, &mut item_rows);
            let held = |row: &u64| entry.claimed.contains_key(row) || waiting_rows.contains(row);
            if item_rows.iter().any(held) {
                waiting_rows.extend_from_slice(&item_rows);
                left.push_back(waiter);
            } else {
                rows.extend_from_slice(&item_rows);
                batch.push(waiter);
            }
        }
        if !left.is_empty() {
            left.append(&mut entry.queue);
            entry.queue = left;
        }
        batch
    }

    /// Gives up one of `lane`'s calls in flight: to a new driver when decisions wait,
    /// otherwise for good, forgetting the lane when it was the last.
    fn release(self: &Arc<Self>, lanes: &mut HashMap<Box<[u8]>, Lane<R>>, lane: &[u8]) {
        let Some(entry) = lanes.get_mut(lane) else {
            return;
        };
        if !entry.queue.is_empty()
            && let Ok(runtime) = tokio::runtime::Handle::try_current()
        {
            runtime.spawn(Arc::clone(self).drive(lane.into()));
            return;
        }
        entry.in_flight -= 1;
        if entry.in_flight == 0 {
            lanes.remove(lane);
        }
    }

    /// Runs calls for `lane` until its queue is empty; the last to leave forgets the lane.
    ///
    /// After answering a batch, the driver lets a turn of the scheduler pass before it takes
    /// the next: the callers just answered are ready to run, and a busy caller's next decision
    /// comes at once. Still holding its place in flight, the driver makes them queue for its
    /// next call rather than each start a call of their own with whatever little is queued
    /// (under load, a batch split in small calls costs the store a call's start-up per piece).
    async fn drive(self: Arc<Self>, lane: Box<[u8]>) {
        let mut answered = false;
        // The rows of this driver's call in flight.
        let mut rows = Vec::new();
        loop {
            if answered {
                tokio::task::yield_now().await;
            }
            let batch: Vec<Waiter<R>> = {
                let mut lanes = self.lanes.lock();
                let Some(entry) = lanes.get_mut(&lane) else {
                    return;
                };
                entry.unclaim(&rows);
                rows.clear();
                let batch = self.take_batch(entry, &mut rows);
                if batch.is_empty() {
                    if entry.queue.is_empty() {
                        self.release(&mut lanes, &lane);
                    } else {
                        // Everything queued waits for a row another call holds: that call's
                        // driver takes it when it ends.
                        entry.in_flight -= 1;
                    }
                    return;
                }
                entry.claim(&rows);
                batch
            };
            answered = true;
            let (items, replies): (Vec<R::Item>, Vec<_>) =
                batch.into_iter().map(|w| (w.item, w.reply)).unzip();
            match self.runner.run(&items).await {
                Ok(answers) => {
                    for (reply, answer) in replies.into_iter().zip(answers) {
                        // A caller that gave up meanwhile has dropped its receiver.
                        let _ = reply.send(Ok(answer));
                    }
                }
                Err(error) => {
                    for reply in replies {
                        let _ = reply.send(Err(error.replicate()));
                    }
                }
            }
        }
    }
}

impl StoreError {
    /// The same error for another waiter of a failed batch.
    pub(crate) fn replicate(&self) -> StoreError {
        match self {
            StoreError::Check(e) => StoreError::Check(e.clone()),
            StoreError::Full { max_keys } => StoreError::Full {
                max_keys: *max_keys,
            },
            StoreError::Timeout(d) => StoreError::Timeout(*d),
            StoreError::Unavailable(e) => StoreError::Unavailable(e.to_string().into()),
            StoreError::Incompatible(e) => StoreError::Incompatible(e.to_string().into()),
            StoreError::Config(e) => StoreError::Config(e.clone()),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::Duration;

    use super::*;

    /// Answers each item with its batch's number and size, slowly enough for a queue to form.
    struct Counting {
        calls: AtomicUsize,
        running: AtomicUsize,
        most_running: AtomicUsize,
    }

    impl Runner for Counting {
        type Item = u32;
        type Answer = (usize, usize, u32);

        async fn run(&self, items: &[u32]) -> Result<Vec<(usize, usize, u32)>, StoreError> {
            let call = self.calls.fetch_add(1, Ordering::SeqCst);
            let now = self.running.fetch_add(1, Ordering::SeqCst) + 1;
            self.most_running.fetch_max(now, Ordering::SeqCst);
            tokio::time::sleep(Duration::from_millis(20)).await;
            self.running.fetch_sub(1, Ordering::SeqCst);
            Ok(items.iter().map(|&i| (call, items.len(), i)).collect())
        }
    }

    fn counting() -> Arc<Counting> {
        Arc::new(Counting {
            calls: AtomicUsize::new(0),
            running: AtomicUsize::new(0),
            most_running: AtomicUsize::new(0),
        })
    }

    // One thread: tasks run in the order they were spawned, so arrival order is known.
    #[tokio::test(flavor = "current_thread")]
    async fn waiting_items_share_calls_within_the_depth_and_keep_arrival_order() {
        let runner = counting();
        let batcher = Arc::new(Batcher::new(Arc::clone(&runner), 64, 2));
        let mut tasks = Vec::new();
        for i in 0..100u32 {
            let batcher = Arc::clone(&batcher);
            tasks.push(tokio::spawn(async move { batcher.submit(b"", i).await }));
            // Lets the task queue its item before the next is spawned.
            tokio::task::yield_now().await;
        }
        let mut answers = Vec::new();
        for task in tasks {
            answers.push(task.await.unwrap().unwrap());
        }
        for (i, &(_, _, item)) in answers.iter().enumerate() {
            assert_eq!(item, i as u32, "every item answered with its own answer");
        }
        let calls = runner.calls.load(Ordering::SeqCst);
        assert!(calls < 100, "items shared calls: {calls} calls");
        assert!(runner.most_running.load(Ordering::SeqCst) <= 2);
        assert!(answers.iter().all(|&(_, size, _)| size <= 64));
        // Within a call, items keep their order; calls are numbered in the order they started.
        assert!(answers.windows(2).all(|w| w[0].0 <= w[1].0));
        // The last driver looks at the queue once more, a turn after its last answer.
        tokio::task::yield_now().await;
        assert!(batcher.lanes.lock().is_empty(), "an idle lane is forgotten");
    }

    // One thread: the order in which tasks run is known.
    #[tokio::test(flavor = "current_thread")]
    async fn callers_just_answered_join_the_next_call_whole() {
        let runner = counting();
        let batcher = Arc::new(Batcher::new(Arc::clone(&runner), 64, 1));
        let mut tasks = Vec::new();
        for i in 0..4u32 {
            let batcher = Arc::clone(&batcher);
            // Each caller asks twice, the second time as soon as it is answered.
            tasks.push(tokio::spawn(async move {
                let first = batcher.submit(b"", i).await.unwrap();
                let second = batcher.submit(b"", 10 + i).await.unwrap();
                (first, second)
            }));
        }
        let mut sizes = std::collections::BTreeMap::new();
        for task in tasks {
            let ((call_a, size_a, _), (call_b, size_b, _)) = task.await.unwrap();
            sizes.insert(call_a, size_a);
            sizes.insert(call_b, size_b);
        }
        // 0 alone (the lane was idle); 1, 2, 3 queued behind it, with 0's second; then the
        // seconds of 1, 2 and 3 together, rather than 1's alone and then 2's and 3's.
        assert_eq!(sizes.into_values().collect::<Vec<_>>(), [1, 4, 3]);
        assert_eq!(runner.calls.load(Ordering::SeqCst), 3);
    }

    /// Items are `(row, sequence)`; records which rows each call in flight holds.
    struct Rows {
        held: parking_lot::Mutex<Vec<u32>>,
        shared: AtomicUsize,
        calls: AtomicUsize,
    }

    impl Runner for Rows {
        type Item = (u32, u32);
        type Answer = usize;

        async fn run(&self, items: &[(u32, u32)]) -> Result<Vec<usize>, StoreError> {
            let call = self.calls.fetch_add(1, Ordering::SeqCst);
            let mut rows: Vec<u32> = items.iter().map(|&(row, _)| row).collect();
            rows.dedup();
            {
                let mut held = self.held.lock();
                if rows.iter().any(|r| held.contains(r)) {
                    self.shared.fetch_add(1, Ordering::SeqCst);
                }
                held.extend(&rows);
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
            self.held.lock().retain(|r| !rows.contains(r));
            Ok(vec![call; items.len()])
        }

        fn rows(&self, &(row, _): &(u32, u32), rows: &mut Vec<u64>) {
            rows.push(u64::from(row));
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn calls_in_flight_never_share_a_row_and_each_row_keeps_its_order() {
        let runner = Arc::new(Rows {
            held: parking_lot::Mutex::new(Vec::new()),
            shared: AtomicUsize::new(0),
            calls: AtomicUsize::new(0),
        });
        let batcher = Arc::new(Batcher::new(Arc::clone(&runner), 8, 2));
        // 16 callers, each asking 20 times in turn: row 0 is hot (every even caller), the odd
        // callers each have a row of their own.
        let tasks: Vec<_> = (0..16u32)
            .map(|caller| {
                let batcher = Arc::clone(&batcher);
                tokio::spawn(async move {
                    let row = if caller % 2 == 0 { 0 } else { caller };
                    let mut calls = Vec::new();
                    for sequence in 0..20 {
                        calls.push(batcher.submit(b"", (row, sequence)).await.unwrap());
                    }
                    calls
                })
            })
            .collect();
        for task in tasks {
            let calls = task.await.unwrap();
            // A caller's later item never went in an earlier call than its former one.
            assert!(calls.windows(2).all(|w| w[0] < w[1]), "{calls:?}");
        }
        assert_eq!(
            runner.shared.load(Ordering::SeqCst),
            0,
            "two calls held a row"
        );
        assert!(
            runner.calls.load(Ordering::SeqCst) < 320,
            "items still share calls"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert!(batcher.lanes.lock().is_empty(), "an idle lane is forgotten");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn lanes_run_independently() {
        let runner = counting();
        let batcher = Arc::new(Batcher::new(Arc::clone(&runner), 64, 1));
        let a = tokio::spawn({
            let batcher = Arc::clone(&batcher);
            async move { batcher.submit(b"a", 1).await }
        });
        let b = tokio::spawn({
            let batcher = Arc::clone(&batcher);
            async move { batcher.submit(b"b", 2).await }
        });
        a.await.unwrap().unwrap();
        b.await.unwrap().unwrap();
        assert_eq!(runner.most_running.load(Ordering::SeqCst), 2);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_caller_that_left_is_not_decided() {
        let runner = counting();
        let batcher = Arc::new(Batcher::new(Arc::clone(&runner), 64, 1));
        let first = tokio::spawn({
            let batcher = Arc::clone(&batcher);
            async move { batcher.submit(b"", 1).await }
        });
        tokio::time::sleep(Duration::from_millis(5)).await;
        // Queued behind the first call, then abandoned before its batch is taken.
        let left = tokio::time::timeout(Duration::from_millis(1), batcher.submit(b"", 2)).await;
        assert!(left.is_err());
        first.await.unwrap().unwrap();
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert_eq!(
            runner.calls.load(Ordering::SeqCst),
            1,
            "nothing left to decide"
        );
    }
}
