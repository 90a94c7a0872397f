//! [`Repoll`]: a connection's future that takes the wake-ups it gives itself while it runs
//! by polling again, rather than through the runtime.
//!
//! hyper's HTTP/1 connection hands a request's body to the handler through a channel of one
//! chunk: the connection sends the chunk (the bytes came with the head) and waits for room,
//! the handler, polled next in the same task, takes it, and that wakes the connection's task
//! while it runs. tokio reschedules a task woken during its own poll as a *yield*: to the back
//! of the run queue, waking an idle worker thread to share the work, a `futex` wake and wait
//! (a context switch on two cores) for every request with a body, and sometimes the other
//! worker steals the connection. Polling again at once is what the runtime would have done
//! when nothing else is queued, minus the wake-up of another thread; otherwise the connection
//! goes ahead of the queued tasks, once.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll, Wake, Waker};

/// Polls of `F` per poll of the task: one more for a wake-up given during the first, and a
/// wake-up during the last goes to the runtime. hyper yields by waking its task after 16
/// rounds of work, so it now yields after up to 32, still a bound.
const AGAIN: usize = 2;

/// `F` is being polled.
const RUNNING: u8 = 1;
/// `F` was woken since its poll began.
const WOKEN: u8 = 2;

/// Wraps `F` (pinned on the heap: hyper's connection is not `Unpin`).
pub(super) struct Repoll<F> {
    inner: Pin<Box<F>>,
    flag: Arc<Flag>,
    waker: Waker,
    /// The task's waker as last given to `flag`, to give it again only when it changes.
    task: Option<Waker>,
}

/// The waker `F` sees.
struct Flag {
    /// [`RUNNING`] and [`WOKEN`]. One word, so that a wake-up and the end of a poll are
    /// ordered: the poll's swap sees the wake-up's mark, or the wake-up sees the poll ended.
    state: AtomicU8,
    /// The task's own waker, for wake-ups from outside a poll.
    task: Mutex<Option<Waker>>,
}

impl Wake for Flag {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        if self.state.fetch_or(WOKEN, Ordering::AcqRel) & RUNNING != 0 {
            // The poll under way sees the mark as it ends, and polls again.
            return;
        }
        // Woken by reference under the lock, rather than cloned: a tokio waker schedules its
        // task and never calls back here.
        if let Some(task) = &*self.task.lock().unwrap_or_else(PoisonError::into_inner) {
            task.wake_by_ref();
        }
    }
}

impl<F: Future> Repoll<F> {
    pub(super) fn new(inner: F) -> Repoll<F> {
        let flag = Arc::new(Flag {
            state: AtomicU8::new(0),
            task: Mutex::new(None),
        });
        Repoll {
            inner: Box::pin(inner),
            waker: Waker::from(Arc::clone(&flag)),
            flag,
            task: None,
        }
    }

    /// The wrapped future (to ask a connection to shut down).
    pub(super) fn inner(&mut self) -> Pin<&mut F> {
        self.inner.as_mut()
    }
}

impl<F: Future> Future for Repoll<F> {
    type Output = F::Output;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let this = self.get_mut();
        if !this.task.as_ref().is_some_and(|t| t.will_wake(cx.waker())) {
            this.task = Some(cx.waker().clone());
            *this
                .flag
                .task
                .lock()
                .unwrap_or_else(PoisonError::into_inner) = Some(cx.waker().clone());
        }
        for _ in 0..AGAIN {
            // A wake-up before this store woke the task, which is polling now anyway.
            this.flag.state.store(RUNNING, Ordering::Release);
            let polled = this
                .inner
                .as_mut()
                .poll(&mut Context::from_waker(&this.waker));
            let state = this.flag.state.swap(0, Ordering::AcqRel);
            if polled.is_ready() {
                return polled;
            }
            if state & WOKEN == 0 {
                return Poll::Pending;
            }
        }
        // Woken by itself this often in a row: let the runtime run other tasks first.
        cx.waker().wake_by_ref();
        Poll::Pending
    }
}

#[cfg(test)]
mod tests {
    use std::future::Future;
    use std::pin::Pin;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::task::{Context, Poll, Wake, Waker};

    use super::{AGAIN, Repoll};

    /// Counts the wake-ups the runtime would get.
    struct Count(AtomicUsize);

    impl Wake for Count {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    /// Wakes itself during its first `left` polls, then is ready with its count of polls; with
    /// `elsewhere`, from another thread (as a handler's task on another worker would).
    struct SelfWaking {
        left: usize,
        polls: usize,
        elsewhere: bool,
    }

    impl SelfWaking {
        fn new(left: usize) -> SelfWaking {
            SelfWaking {
                left,
                polls: 0,
                elsewhere: false,
            }
        }
    }

    impl Future for SelfWaking {
        type Output = usize;

        fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<usize> {
            self.polls += 1;
            if self.left == 0 {
                return Poll::Ready(self.polls);
            }
            self.left -= 1;
            if self.elsewhere {
                let waker = cx.waker().clone();
                std::thread::spawn(move || waker.wake()).join().unwrap();
            } else {
                cx.waker().wake_by_ref();
            }
            Poll::Pending
        }
    }

    fn poll<F: Future>(future: &mut Repoll<F>, waker: &Waker) -> Poll<F::Output> {
        Pin::new(future).poll(&mut Context::from_waker(waker))
    }

    #[test]
    fn a_wake_up_during_a_poll_is_a_poll_again_not_a_reschedule() {
        let count = Arc::new(Count(AtomicUsize::new(0)));
        let waker = Waker::from(Arc::clone(&count));
        let mut future = Repoll::new(SelfWaking::new(1));
        assert_eq!(poll(&mut future, &waker), Poll::Ready(2));
        assert_eq!(count.0.load(Ordering::SeqCst), 0);
    }

    #[test]
    fn a_future_that_keeps_waking_itself_still_yields_to_the_runtime() {
        let count = Arc::new(Count(AtomicUsize::new(0)));
        let waker = Waker::from(Arc::clone(&count));
        let mut future = Repoll::new(SelfWaking::new(usize::MAX));
        assert!(poll(&mut future, &waker).is_pending());
        // It was polled AGAIN times, then handed the wake-up to the runtime.
        assert_eq!(count.0.load(Ordering::SeqCst), 1);
        assert!(poll(&mut future, &waker).is_pending());
        assert_eq!(count.0.load(Ordering::SeqCst), 2);
        assert_eq!(future.inner.polls, 2 * AGAIN);
    }

    #[test]
    fn a_wake_up_from_another_thread_during_a_poll_is_a_poll_again() {
        let count = Arc::new(Count(AtomicUsize::new(0)));
        let waker = Waker::from(Arc::clone(&count));
        let mut future = Repoll::new(SelfWaking {
            elsewhere: true,
            ..SelfWaking::new(1)
        });
        assert_eq!(poll(&mut future, &waker), Poll::Ready(2));
        assert_eq!(count.0.load(Ordering::SeqCst), 0);
    }

    #[test]
    fn a_wake_up_reaches_the_waker_of_the_last_poll() {
        let first = Arc::new(Count(AtomicUsize::new(0)));
        let second = Arc::new(Count(AtomicUsize::new(0)));
        let mut future = Repoll::new(std::future::pending::<()>());
        assert!(poll(&mut future, &Waker::from(Arc::clone(&first))).is_pending());
        assert!(poll(&mut future, &Waker::from(Arc::clone(&second))).is_pending());
        future.waker.wake_by_ref();
        assert_eq!(first.0.load(Ordering::SeqCst), 0);
        assert_eq!(second.0.load(Ordering::SeqCst), 1);
    }

    #[test]
    fn a_wake_up_from_outside_a_poll_reaches_the_task() {
        struct Pending;
        impl Future for Pending {
            type Output = ();
            fn poll(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<()> {
                Poll::Pending
            }
        }
        let count = Arc::new(Count(AtomicUsize::new(0)));
        let waker = Waker::from(Arc::clone(&count));
        let mut future = Repoll::new(Pending);
        assert!(poll(&mut future, &waker).is_pending());
        assert_eq!(count.0.load(Ordering::SeqCst), 0);
        // As the I/O driver would, from another thread.
        let inner = future.waker.clone();
        std::thread::spawn(move || inner.wake()).join().unwrap();
        assert_eq!(count.0.load(Ordering::SeqCst), 1);
    }
}
