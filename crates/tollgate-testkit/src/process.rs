//! Child processes: finding binaries, picking free ports, spawning servers that die with the
//! test process, stopping them without leaving zombies, and reading their logs.
//!
//! Every child is spawned with `PR_SET_PDEATHSIG = SIGKILL`, so a test process that dies
//! abruptly (abort, SIGKILL, a nextest timeout) takes its servers with it. The kernel sends that
//! signal when the *thread* that forked the child exits, not the process; so all children are
//! forked by one spawner thread that lives as long as the process, and a handle created on a
//! short-lived thread (a `OnceLock` initialiser, `spawn_blocking`) keeps its server.

use std::{
    env,
    fs::{self, File, OpenOptions},
    io::{self, Read, Seek, SeekFrom},
    net::TcpListener,
    os::unix::{fs::PermissionsExt, process::CommandExt},
    path::{Path, PathBuf},
    process::{Child, Command, ExitStatus, Stdio},
    sync::{OnceLock, mpsc},
    thread,
    time::{Duration, Instant},
};

use crate::TestkitError;

/// The effective user id: PostgreSQL refuses to run as root, so the kit must know.
#[allow(unsafe_code)]
pub(crate) fn euid() -> u32 {
    // SAFETY: geteuid has no preconditions, touches no memory we own and cannot fail.
    unsafe { libc::geteuid() }
}

/// Looks for an executable `name` in each directory of `PATH`, then in `extra_dirs`.
pub(crate) fn find_binary(name: &str, extra_dirs: &[&str]) -> Option<PathBuf> {
    let path_dirs = env::var_os("PATH")
        .map(|p| env::split_paths(&p).collect::<Vec<_>>())
        .unwrap_or_default();
    path_dirs
        .into_iter()
        .chain(extra_dirs.iter().map(PathBuf::from))
        .map(|dir| dir.join(name))
        .find(|candidate| is_executable(candidate))
}

pub(crate) fn is_executable(path: &Path) -> bool {
    fs::metadata(path).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// A port nobody listens on right now. Another process may take it before our server binds
/// it; callers detect that ([`PORT_IN_USE`]) and try another.
pub(crate) fn free_port() -> Result<u16, TestkitError> {
    let listener = TcpListener::bind(("127.0.0.1", 0))
        .map_err(|e| TestkitError::io("binding 127.0.0.1:0 to find a free port", e))?;
    listener
        .local_addr()
        .map(|addr| addr.port())
        .map_err(|e| TestkitError::io("reading the address of a free port", e))
}

/// What both redis-server and postgres log (strerror of `EADDRINUSE`) when another process
/// took the port between [`free_port`] and their `bind`.
pub(crate) const PORT_IN_USE: &str = "Address already in use";

/// Why a server launch failed: a lost race for the port is retried on another one.
pub(crate) enum LaunchError {
    PortTaken,
    Failed(TestkitError),
}

impl From<TestkitError> for LaunchError {
    fn from(e: TestkitError) -> Self {
        Self::Failed(e)
    }
}

/// How many ports a server start tries before giving up: only a race with other processes
/// makes a port fail, so a few are plenty.
pub(crate) const PORT_ATTEMPTS: usize = 5;

type SpawnRequest = (Command, mpsc::SyncSender<io::Result<Child>>);

/// Spawns `cmd` from the process-lifetime spawner thread, with `PR_SET_PDEATHSIG` set.
fn spawn_child(mut cmd: Command) -> io::Result<Child> {
    die_with_parent(&mut cmd);
    static SPAWNER: OnceLock<Option<mpsc::Sender<SpawnRequest>>> = OnceLock::new();
    let spawner = SPAWNER.get_or_init(|| {
        let (tx, rx) = mpsc::channel::<SpawnRequest>();
        thread::Builder::new()
            .name("tollgate-testkit-spawner".into())
            .spawn(move || {
                for (mut cmd, reply) in rx {
                    let _ = reply.send(cmd.spawn());
                }
            })
            .ok()
            .map(|_| tx)
    });
    let Some(spawner) = spawner else {
        // No spawner thread: the child then dies with the calling thread, which is still the
        // test's own thread in the common case.
        return cmd.spawn();
    };
    let (reply_tx, reply_rx) = mpsc::sync_channel(1);
    let spawner_gone = || io::Error::other("the test kit's spawner thread is gone");
    spawner.send((cmd, reply_tx)).map_err(|_| spawner_gone())?;
    reply_rx.recv().map_err(|_| spawner_gone())?
}

#[allow(unsafe_code)]
fn die_with_parent(cmd: &mut Command) {
    // 0 disables the orphan check below rather than failing: pids always fit in pid_t.
    let parent = libc::pid_t::try_from(std::process::id()).unwrap_or(0);
    // SAFETY: the closure runs in the forked child before exec, where only async-signal-safe
    // calls are allowed. prctl and getppid are plain system calls (async-signal-safe), and the
    // errors are built from errno without allocating. std runs pre_exec closures after it has
    // applied `uid`/`gid`, so the credential change cannot clear the death signal.
    unsafe {
        cmd.pre_exec(move || {
            // prctl is variadic: pass every argument at the width the kernel reads.
            let (signal, unused): (libc::c_ulong, libc::c_ulong) = (libc::SIGKILL as _, 0);
            if libc::prctl(libc::PR_SET_PDEATHSIG, signal, unused, unused, unused) == -1 {
                return Err(io::Error::last_os_error());
            }
            // If the parent died between fork and prctl, no signal will ever come: give up.
            if parent != 0 && libc::getppid() != parent {
                return Err(io::Error::from_raw_os_error(libc::ESRCH));
            }
            Ok(())
        });
    }
}

/// A child process we own. Dropping it kills it (SIGKILL) and reaps it.
#[derive(Debug)]
pub(crate) struct ServerProcess {
    child: Child,
}

impl ServerProcess {
    pub(crate) fn spawn(cmd: Command, what: &str) -> Result<Self, TestkitError> {
        spawn_child(cmd)
            .map(|child| Self { child })
            .map_err(|source| TestkitError::Spawn {
                what: what.to_owned(),
                source,
            })
    }

    pub(crate) fn pid(&self) -> u32 {
        self.child.id()
    }

    /// `Some` once the process has exited (and is reaped).
    pub(crate) fn exit_status(&mut self) -> io::Result<Option<ExitStatus>> {
        self.child.try_wait()
    }

    /// Sends `signal` unless the process is already reaped.
    #[allow(unsafe_code)]
    pub(crate) fn signal(&mut self, signal: libc::c_int) -> io::Result<()> {
        if self.child.try_wait()?.is_some() {
            return Ok(());
        }
        let pid = libc::pid_t::try_from(self.child.id()).map_err(io::Error::other)?;
        // SAFETY: kill has no memory-safety preconditions. The child is not reaped (try_wait
        // just said so, and we hold it mutably), so its pid cannot have been recycled.
        if unsafe { libc::kill(pid, signal) } == -1 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    /// SIGKILL and reap.
    pub(crate) fn kill(&mut self) -> io::Result<()> {
        if self.child.try_wait()?.is_none() {
            self.child.kill()?;
            self.child.wait()?;
        }
        Ok(())
    }

    /// `signal`, then up to `grace` for the process to exit on its own, then SIGKILL; reaped
    /// either way.
    pub(crate) fn shutdown(&mut self, signal: libc::c_int, grace: Duration) -> io::Result<()> {
        self.signal(signal)?;
        let mut deadline = Deadline::after(grace);
        while self.child.try_wait()?.is_none() {
            if deadline.expired() {
                return self.kill();
            }
            deadline.pause();
        }
        Ok(())
    }
}

impl Drop for ServerProcess {
    fn drop(&mut self) {
        let _ = self.kill();
    }
}

/// Runs a helper command to completion with its output appended to `log`; kills it after
/// `timeout`.
pub(crate) fn run(
    mut cmd: Command,
    what: &str,
    log: &Path,
    timeout: Duration,
) -> Result<(), TestkitError> {
    let from = log_len(log);
    let out = open_log(log)?;
    let err = out
        .try_clone()
        .map_err(|e| TestkitError::io(format!("duplicating {}", log.display()), e))?;
    cmd.stdin(Stdio::null()).stdout(out).stderr(err);
    let mut process = ServerProcess::spawn(cmd, what)?;
    let mut deadline = Deadline::after(timeout);
    let failed = |status: String| TestkitError::CommandFailed {
        command: what.to_owned(),
        status,
        log: log.to_owned(),
        log_tail: log_tail(log, from),
    };
    loop {
        let status = process
            .exit_status()
            .map_err(|e| TestkitError::io(format!("waiting for {what}"), e))?;
        match status {
            Some(status) if status.success() => return Ok(()),
            Some(status) => return Err(failed(status.to_string())),
            None if deadline.expired() => {
                let _ = process.kill();
                return Err(failed(format!("still running after {timeout:?}; killed")));
            }
            None => deadline.pause(),
        }
    }
}

/// Opens a log file for appending, so that a restarted server keeps its earlier lines.
pub(crate) fn open_log(path: &Path) -> Result<File, TestkitError> {
    OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .map_err(|e| TestkitError::io(format!("opening log file {}", path.display()), e))
}

/// The current length of a log, to read only what a new process writes after it.
pub(crate) fn log_len(path: &Path) -> u64 {
    fs::metadata(path).map(|m| m.len()).unwrap_or(0)
}

/// The log written since byte `from`, as text.
pub(crate) fn log_since(path: &Path, from: u64) -> String {
    let mut bytes = Vec::new();
    let read = File::open(path).and_then(|mut file| {
        file.seek(SeekFrom::Start(from))?;
        file.read_to_end(&mut bytes)
    });
    match read {
        Ok(_) => String::from_utf8_lossy(&bytes).into_owned(),
        Err(e) => format!("(could not read {}: {e})", path.display()),
    }
}

/// The last lines written since byte `from`: enough to see why a server failed.
pub(crate) fn log_tail(path: &Path, from: u64) -> String {
    const MAX_BYTES: u64 = 8 * 1024;
    const MAX_LINES: usize = 40;
    let from = from.max(log_len(path).saturating_sub(MAX_BYTES));
    let text = log_since(path, from);
    let lines: Vec<&str> = text.lines().collect();
    let tail = lines[lines.len().saturating_sub(MAX_LINES)..].join("\n");
    if tail.trim().is_empty() {
        "(empty)".to_owned()
    } else {
        tail
    }
}

/// A readiness deadline that polls often at first (servers usually come up in milliseconds)
/// and backs off to 50 ms.
#[derive(Debug)]
pub(crate) struct Deadline {
    start: Instant,
    timeout: Duration,
    pause: Duration,
}

impl Deadline {
    pub(crate) fn after(timeout: Duration) -> Self {
        Self {
            start: Instant::now(),
            timeout,
            pause: Duration::from_millis(2),
        }
    }

    pub(crate) fn expired(&self) -> bool {
        self.start.elapsed() >= self.timeout
    }

    pub(crate) fn elapsed(&self) -> Duration {
        self.start.elapsed()
    }

    pub(crate) fn pause(&mut self) {
        thread::sleep(self.pause);
        self.pause = (self.pause * 2).min(Duration::from_millis(50));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_binaries_on_path_or_in_extra_dirs() {
        assert!(find_binary("sh", &[]).is_some());
        assert_eq!(find_binary("tollgate-no-such-binary", &["/usr/bin"]), None);
    }

    #[test]
    fn a_missing_binary_says_how_to_install_it() {
        let err = TestkitError::MissingBinary {
            binary: "redis-server",
            searched: "PATH".into(),
            install_hint: "apt-get install -y redis-server",
        };
        let message = err.to_string();
        assert!(message.contains("`redis-server` not found"), "{message}");
        assert!(
            message.contains("apt-get install -y redis-server"),
            "{message}"
        );
    }

    #[test]
    fn run_reports_failure_with_the_output_tail() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("out.log");
        let mut cmd = Command::new("sh");
        cmd.args(["-c", "echo first; echo oops >&2; exit 3"]);
        let err = run(cmd, "sh -c ...", &log, Duration::from_secs(10)).unwrap_err();
        let TestkitError::CommandFailed { log_tail, .. } = &err else {
            panic!("{err}");
        };
        assert_eq!(log_tail, "first\noops");

        let mut cmd = Command::new("sleep");
        cmd.arg("10");
        let err = run(cmd, "sleep 10", &log, Duration::from_millis(100)).unwrap_err();
        assert!(err.to_string().contains("killed"), "{err}");
    }
}
