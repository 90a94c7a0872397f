//! CPU contention: busy-loop processes, one per core but one, started for the busy runs and
//! killed when dropped. They are processes of their own, not threads of this one, so that the
//! kernel shares the cores between them and the benchmark as it would share a host's cores
//! with a neighbour, and this process's CPU figures stay its own.

use std::process::{Child, Command, Stdio};

use crate::BenchError;

/// The running busy loops.
pub(super) struct Busy(Vec<Child>);

impl Busy {
    /// Starts one busy loop per core but one (at least one).
    pub(super) fn start() -> Result<Busy, BenchError> {
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        let mut busy = Busy(Vec::new());
        for _ in 0..cores.saturating_sub(1).max(1) {
            let child = Command::new("sh")
                .args(["-c", "while :; do :; done"])
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .map_err(|e| BenchError::Args(format!("cannot start a busy loop (sh): {e}")))?;
            busy.0.push(child);
        }
        Ok(busy)
    }

    /// How many loops run.
    pub(super) fn count(&self) -> usize {
        self.0.len()
    }
}

impl Drop for Busy {
    fn drop(&mut self) {
        for child in &mut self.0 {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}
