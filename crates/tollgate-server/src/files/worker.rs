//! The thread files are read on once the server serves: one, of its own, so that a read that
//! blocks (a hung network file system) holds up neither a request nor SIGTERM. Work waits in a
//! short queue; a caller waits at most [`READ_TIMEOUT`] for its answer, and a full queue (the
//! thread stuck on an earlier read) is an answer at once.

use std::fmt;
use std::sync::mpsc::{SyncSender, TrySendError, sync_channel};
use std::sync::{Mutex, OnceLock, PoisonError};
use std::time::Duration;

/// The longest a caller waits for work on the reader's thread.
pub const READ_TIMEOUT: Duration = Duration::from_secs(5);

/// Work queued at most: every watcher's poll, a few times over.
const QUEUE: usize = 64;

type Job = Box<dyn FnOnce() + Send>;

/// The work could not be done in time: the reader's thread is busy with (stuck on) a read, or
/// could not be started.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stuck;

impl fmt::Display for Stuck {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "reading the files took longer than {}s (a file on a hung file system?); the state \
             in force stays",
            READ_TIMEOUT.as_secs()
        )
    }
}

impl std::error::Error for Stuck {}

fn queue() -> Option<SyncSender<Job>> {
    static QUEUE_IN: OnceLock<Option<Mutex<SyncSender<Job>>>> = OnceLock::new();
    QUEUE_IN
        .get_or_init(|| {
            let (send, receive) = sync_channel::<Job>(QUEUE);
            let started = std::thread::Builder::new()
                .name("tollgate-files".to_owned())
                .spawn(move || {
                    while let Ok(job) = receive.recv() {
                        job();
                    }
                });
            match started {
                Ok(_) => Some(Mutex::new(send)),
                Err(e) => {
                    tracing::error!(error = %e, "the thread that reads files cannot start");
                    None
                }
            }
        })
        .as_ref()
        .map(|send| send.lock().unwrap_or_else(PoisonError::into_inner).clone())
}

/// `work`'s answer, computed on the reader's thread; [`Stuck`] if it is not back within
/// [`READ_TIMEOUT`] (the work goes on, and its answer is dropped).
pub async fn off_workers<T: Send + 'static>(
    work: impl FnOnce() -> T + Send + 'static,
) -> Result<T, Stuck> {
    let (answer, answered) = tokio::sync::oneshot::channel();
    let job: Job = Box::new(move || {
        let _ = answer.send(work());
    });
    match queue().ok_or(Stuck)?.try_send(job) {
        Ok(()) => {}
        Err(TrySendError::Full(_) | TrySendError::Disconnected(_)) => return Err(Stuck),
    }
    match tokio::time::timeout(READ_TIMEOUT, answered).await {
        Ok(Ok(answer)) => Ok(answer),
        Ok(Err(_)) | Err(_) => Err(Stuck),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn work_that_never_ends_is_given_up_on() {
        let (_hold, stuck) = std::sync::mpsc::channel::<()>();
        let waited = off_workers(move || {
            // Blocks until the test ends: a read on a hung file system.
            let _ = stuck.recv();
        })
        .await;
        assert_eq!(waited, Err(Stuck));
    }
}
