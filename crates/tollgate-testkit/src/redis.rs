//! A throwaway `redis-server` per test, on a free loopback port, with nothing persisted.

use std::{
    path::{Path, PathBuf},
    process::{Command, Stdio},
    sync::OnceLock,
    time::Duration,
};

use tempfile::TempDir;

use crate::{
    Reply, TestkitError,
    process::{self, Deadline, LaunchError, PORT_ATTEMPTS, PORT_IN_USE, ServerProcess},
    resp, scratch, tls,
    url::{self, Url},
};

const URL_VAR: &str = "TOLLGATE_REDIS_URL";
const INSTALL_HINT: &str = "apt-get install -y redis-server";
const READY_TIMEOUT: Duration = Duration::from_secs(10);

/// A throwaway `redis-server`, or the one `TOLLGATE_REDIS_URL` names.
///
/// The server binds 127.0.0.1 on a free port, keeps its files and log in a temporary directory,
/// persists nothing (`save ""`, no AOF) and allows `DEBUG` from loopback. Dropping the handle
/// kills the server and removes the directory.
///
/// When `TOLLGATE_REDIS_URL` is set (and not blank) no process is started: [`url`](Self::url)
/// is that URL and [`stop`](Self::stop) / [`restart`](Self::restart) fail with
/// [`TestkitError::External`].
#[derive(Debug)]
pub struct TestRedis {
    inner: Inner,
}

/// The TLS side of a server from [`TestRedis::start_tls`].
#[derive(Debug)]
struct Tls {
    url: String,
    ca: PathBuf,
}

/// What a server of the kit's own listens on besides plain TCP.
#[derive(Debug)]
enum Also {
    Nothing,
    /// TLS, from [`TestRedis::start_tls`].
    Tls(Tls),
    /// A Unix socket, from [`TestRedis::start_unix`].
    Unix(PathBuf),
}

#[derive(Debug)]
enum Inner {
    Owned {
        // Declared before `dir`: the server dies before its directory is removed.
        // Boxed: an external server holds a URL only.
        server: Box<RedisServer>,
        url: String,
        /// What it listens on besides plain TCP.
        also: Also,
        dir: TempDir,
    },
    External {
        url: String,
        port: u16,
    },
}

impl TestRedis {
    /// Starts a `redis-server` (waiting until it answers `PING`), unless `TOLLGATE_REDIS_URL`
    /// names one to use instead.
    pub fn start() -> Result<Self, TestkitError> {
        Self::from_env_value(url::env_value(URL_VAR)?)
    }

    /// [`start`](Self::start) with the variable's value passed in, so tests can cover both
    /// paths without mutating the process environment.
    pub(crate) fn from_env_value(value: Option<String>) -> Result<Self, TestkitError> {
        if let Some(url) = url::non_blank(value) {
            let parsed = Url::parse(&url)?;
            if parsed.scheme != "redis" {
                return Err(TestkitError::InvalidUrl {
                    url,
                    reason: format!("{URL_VAR} must be a redis:// URL"),
                });
            }
            let port = parsed.port.unwrap_or(6379);
            return Ok(Self {
                inner: Inner::External { url, port },
            });
        }
        let dir = scratch::tempdir(&std::env::temp_dir(), "tollgate-redis-")?;
        let server = RedisServer::start(dir.path().to_owned(), Vec::new(), process::free_port)?;
        Ok(Self {
            inner: Inner::Owned {
                url: server.url(),
                server: Box::new(server),
                also: Also::Nothing,
                dir,
            },
        })
    }

    /// Starts a `redis-server` that also listens on a Unix socket, always (`TOLLGATE_REDIS_URL`
    /// is not consulted): [`unix_socket`](Self::unix_socket) is its path, readable by this user
    /// only. [`url`](Self::url) stays TCP, for the kit's probes and [`cmd`](Self::cmd).
    pub fn start_unix() -> Result<Self, TestkitError> {
        let dir = scratch::tempdir(&std::env::temp_dir(), "tollgate-redis-")?;
        let socket = dir.path().join("redis.sock");
        let args = vec![
            "--unixsocket".to_owned(),
            socket.to_string_lossy().into_owned(),
            "--unixsocketperm".to_owned(),
            "700".to_owned(),
        ];
        let server = RedisServer::start(dir.path().to_owned(), args, process::free_port)?;
        Ok(Self {
            inner: Inner::Owned {
                url: server.url(),
                server: Box::new(server),
                also: Also::Unix(socket),
                dir,
            },
        })
    }

    /// The Unix socket of a server from [`start_unix`](Self::start_unix).
    pub fn unix_socket(&self) -> Option<&Path> {
        match &self.inner {
            Inner::Owned {
                also: Also::Unix(socket),
                ..
            } => Some(socket),
            _ => None,
        }
    }

    /// Starts a `redis-server` that also speaks TLS, always (`TOLLGATE_REDIS_URL` is not
    /// consulted): [`tls_url`](Self::tls_url) is `rediss://localhost:PORT`, served with a
    /// certificate signed by a throwaway CA whose certificate is [`ca_file`](Self::ca_file).
    /// [`url`](Self::url) stays plain TCP, for the kit's probes and [`cmd`](Self::cmd).
    pub fn start_tls() -> Result<Self, TestkitError> {
        Self::start_tls_with(None)
    }

    /// [`start_tls`](Self::start_tls), refusing TLS clients without a certificate signed by
    /// the CA whose certificate (PEM) is `client_ca` (`tls-auth-clients yes`).
    pub fn start_tls_requiring_clients(client_ca: &Path) -> Result<Self, TestkitError> {
        Self::start_tls_with(Some(client_ca))
    }

    fn start_tls_with(client_ca: Option<&Path>) -> Result<Self, TestkitError> {
        let dir = scratch::tempdir(&std::env::temp_dir(), "tollgate-redis-")?;
        let files = tls::make_certificates(dir.path())?;
        let tls_port = process::free_port()?;
        let path = |p: &Path| p.to_string_lossy().into_owned();
        let args = vec![
            "--tls-port".to_owned(),
            tls_port.to_string(),
            "--tls-cert-file".to_owned(),
            path(&files.cert),
            "--tls-key-file".to_owned(),
            path(&files.key),
            "--tls-ca-cert-file".to_owned(),
            path(client_ca.unwrap_or(&files.ca)),
            // Unless asked, clients prove nothing: the test is of the client verifying the
            // server.
            "--tls-auth-clients".to_owned(),
            if client_ca.is_some() { "yes" } else { "no" }.to_owned(),
        ];
        let server = RedisServer::start(dir.path().to_owned(), args, process::free_port)?;
        Ok(Self {
            inner: Inner::Owned {
                url: server.url(),
                server: Box::new(server),
                also: Also::Tls(Tls {
                    url: format!("rediss://localhost:{tls_port}"),
                    ca: files.ca,
                }),
                dir,
            },
        })
    }

    /// `rediss://localhost:PORT` for a server from [`start_tls`](Self::start_tls).
    pub fn tls_url(&self) -> Option<&str> {
        match &self.inner {
            Inner::Owned {
                also: Also::Tls(tls),
                ..
            } => Some(&tls.url),
            _ => None,
        }
    }

    /// The CA certificate (PEM) a client must trust to reach [`tls_url`](Self::tls_url).
    pub fn ca_file(&self) -> Option<&Path> {
        match &self.inner {
            Inner::Owned {
                also: Also::Tls(tls),
                ..
            } => Some(&tls.ca),
            _ => None,
        }
    }

    /// `redis://127.0.0.1:PORT`, or the external URL as given.
    pub fn url(&self) -> &str {
        match &self.inner {
            Inner::Owned { url, .. } | Inner::External { url, .. } => url,
        }
    }

    /// The TCP port (6379 for an external URL without one).
    pub fn port(&self) -> u16 {
        match &self.inner {
            Inner::Owned { server, .. } => server.port,
            Inner::External { port, .. } => *port,
        }
    }

    /// Kills the server with SIGKILL and waits for it to exit: Redis dies, as in a crash,
    /// with all its data. Stopping a stopped server does nothing.
    pub fn stop(&mut self) -> Result<(), TestkitError> {
        self.owned("stop")?.stop()
    }

    /// Starts the server again on the same port (stopping it first if it runs) and waits until
    /// it answers `PING`. It starts empty. Fails if another process took the port meanwhile.
    pub fn restart(&mut self) -> Result<(), TestkitError> {
        self.owned("restart")?.restart()
    }

    /// Whether the kit started (and will kill) this server.
    pub fn is_owned(&self) -> bool {
        matches!(self.inner, Inner::Owned { .. })
    }

    /// The server's process id while it runs; `None` when stopped or external.
    pub fn pid(&self) -> Option<u32> {
        match &self.inner {
            Inner::Owned { server, .. } => server.pid(),
            Inner::External { .. } => None,
        }
    }

    /// The temporary directory holding the server's files and `redis.log`; `None` when
    /// external.
    pub fn dir(&self) -> Option<&Path> {
        match &self.inner {
            Inner::Owned { dir, .. } => Some(dir.path()),
            Inner::External { .. } => None,
        }
    }

    /// Sends one command on a fresh connection: [`redis_cmd`](crate::redis_cmd) on
    /// [`url`](Self::url).
    pub fn cmd(&self, args: &[&[u8]]) -> Result<Reply, TestkitError> {
        crate::redis_cmd(self.url(), args)
    }

    fn owned(&mut self, action: &'static str) -> Result<&mut RedisServer, TestkitError> {
        match &mut self.inner {
            Inner::Owned { server, .. } => Ok(server),
            Inner::External { .. } => Err(TestkitError::External {
                what: "Redis",
                var: URL_VAR,
                action,
            }),
        }
    }
}

/// One `redis-server` process: a server of its own, or one node of a cluster.
#[derive(Debug)]
pub(crate) struct RedisServer {
    process: Option<ServerProcess>,
    port: u16,
    binary: PathBuf,
    dir: PathBuf,
    log: PathBuf,
    extra_args: Vec<String>,
    /// Set for a Sentinel (boxed: most servers are not).
    sentinel: Option<Box<SentinelMode>>,
}

/// What a Sentinel runs with besides a plain server's arguments.
#[derive(Debug)]
struct SentinelMode {
    /// Its config file: the server runs with `--sentinel`, and rewrites the file.
    config: PathBuf,
    /// The password the kit's probes give (its `requirepass`).
    password: Option<String>,
}

impl RedisServer {
    /// Starts a server whose files live in `dir`, on a port from `pick_port`, trying another
    /// port when a different process takes it first.
    pub(crate) fn start(
        dir: PathBuf,
        extra_args: Vec<String>,
        pick_port: impl FnMut() -> Result<u16, TestkitError>,
    ) -> Result<Self, TestkitError> {
        Self::start_with(dir, extra_args, None, pick_port)
    }

    /// Starts a Sentinel (`redis-server CONFIG --sentinel`) whose config file is `config`,
    /// asking for `password` (its `requirepass`) when given.
    pub(crate) fn start_sentinel(
        dir: PathBuf,
        config: PathBuf,
        password: Option<String>,
        pick_port: impl FnMut() -> Result<u16, TestkitError>,
    ) -> Result<Self, TestkitError> {
        let sentinel = SentinelMode { config, password };
        Self::start_with(dir, Vec::new(), Some(Box::new(sentinel)), pick_port)
    }

    fn start_with(
        dir: PathBuf,
        extra_args: Vec<String>,
        sentinel: Option<Box<SentinelMode>>,
        mut pick_port: impl FnMut() -> Result<u16, TestkitError>,
    ) -> Result<Self, TestkitError> {
        let binary = process::find_binary("redis-server", &["/usr/local/bin", "/usr/bin"])
            .ok_or_else(|| TestkitError::MissingBinary {
                binary: "redis-server",
                searched: "PATH, /usr/local/bin and /usr/bin".into(),
                install_hint: INSTALL_HINT,
            })?;
        let mut server = Self {
            process: None,
            port: 0,
            log: dir.join("redis.log"),
            binary,
            dir,
            extra_args,
            sentinel,
        };
        for _ in 0..PORT_ATTEMPTS {
            server.port = pick_port()?;
            match server.launch() {
                Ok(()) => return Ok(server),
                Err(LaunchError::PortTaken) => continue,
                Err(LaunchError::Failed(e)) => return Err(e),
            }
        }
        Err(TestkitError::NotReady {
            what: format!("redis-server (every one of {PORT_ATTEMPTS} free ports was taken)"),
            waited: Duration::ZERO,
            log: server.log.clone(),
            log_tail: process::log_tail(&server.log, 0),
        })
    }

    /// `redis://127.0.0.1:PORT`, with the password when the server asks for one.
    pub(crate) fn url(&self) -> String {
        match self.sentinel.as_ref().and_then(|s| s.password.as_ref()) {
            Some(password) => format!("redis://:{password}@127.0.0.1:{}", self.port),
            None => format!("redis://127.0.0.1:{}", self.port),
        }
    }

    pub(crate) fn pid(&self) -> Option<u32> {
        self.process.as_ref().map(ServerProcess::pid)
    }

    pub(crate) fn port(&self) -> u16 {
        self.port
    }

    /// Sends `signal` (SIGSTOP, SIGCONT) to the running server; nothing when it is stopped.
    pub(crate) fn signal(&mut self, signal: libc::c_int) -> Result<(), TestkitError> {
        let what = self.what();
        match &mut self.process {
            Some(process) => process
                .signal(signal)
                .map_err(|e| TestkitError::io(format!("signalling {what}"), e)),
            None => Ok(()),
        }
    }

    pub(crate) fn stop(&mut self) -> Result<(), TestkitError> {
        if let Some(mut process) = self.process.take() {
            process
                .kill()
                .map_err(|e| TestkitError::io(format!("killing {}", self.what()), e))?;
        }
        Ok(())
    }

    pub(crate) fn restart(&mut self) -> Result<(), TestkitError> {
        self.stop()?;
        match self.launch() {
            Ok(()) => Ok(()),
            Err(LaunchError::Failed(e)) => Err(e),
            Err(LaunchError::PortTaken) => Err(TestkitError::NotReady {
                what: format!("{} (another process took the port)", self.what()),
                waited: Duration::ZERO,
                log: self.log.clone(),
                log_tail: process::log_tail(&self.log, 0),
            }),
        }
    }

    fn what(&self) -> String {
        format!("redis-server on port {}", self.port)
    }

    fn launch(&mut self) -> Result<(), LaunchError> {
        let log_from = process::log_len(&self.log);
        let log = process::open_log(&self.log)?;
        let log_err = log
            .try_clone()
            .map_err(|e| TestkitError::io("duplicating the Redis log file", e))?;
        let mut cmd = Command::new(&self.binary);
        if let Some(sentinel) = &self.sentinel {
            // Sentinel reads (and rewrites) a file of its own, named first.
            cmd.arg(&sentinel.config).arg("--sentinel");
        }
        cmd.arg("--port")
            .arg(self.port.to_string())
            .args(["--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
            .args(["--daemonize", "no", "--logfile", ""])
            .arg("--dir")
            .arg(&self.dir);
        if redis_major(&self.binary) >= Some(7) {
            // Redis 7 refuses DEBUG by default; fault tests use DEBUG SLEEP.
            cmd.args(["--enable-debug-command", "local"]);
        }
        cmd.args(&self.extra_args)
            .current_dir(&self.dir)
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(log_err);
        let mut process = ServerProcess::spawn(cmd, &self.what())?;
        let result = self.wait_ready(&mut process, log_from);
        if result.is_ok() {
            self.process = Some(process);
        }
        // On failure `process` drops here: killed and reaped.
        result
    }

    fn wait_ready(&self, process: &mut ServerProcess, log_from: u64) -> Result<(), LaunchError> {
        let url = Url::parse(&self.url())?;
        let probe_timeout = Duration::from_secs(1);
        let mut deadline = Deadline::after(READY_TIMEOUT);
        loop {
            let status = process
                .exit_status()
                .map_err(|e| TestkitError::io(format!("waiting for {}", self.what()), e))?;
            if let Some(status) = status {
                if process::log_since(&self.log, log_from).contains(PORT_IN_USE) {
                    return Err(LaunchError::PortTaken);
                }
                return Err(LaunchError::Failed(TestkitError::Exited {
                    what: self.what(),
                    status,
                    log: self.log.clone(),
                    log_tail: process::log_tail(&self.log, log_from),
                }));
            }
            if let Ok(Reply::Status(pong)) = resp::command(&url, &[b"PING"], probe_timeout)
                && pong == "PONG"
            {
                // A PONG may come from whoever won the race for the port.
                match server_pid(&url, probe_timeout) {
                    Some(pid) if pid == process.pid() => return Ok(()),
                    Some(_) => return Err(LaunchError::PortTaken),
                    None => {}
                }
            }
            if deadline.expired() {
                return Err(LaunchError::Failed(TestkitError::NotReady {
                    what: self.what(),
                    waited: deadline.elapsed(),
                    log: self.log.clone(),
                    log_tail: process::log_tail(&self.log, log_from),
                }));
            }
            deadline.pause();
        }
    }
}

/// The `process_id` from `INFO server`.
fn server_pid(url: &Url, timeout: Duration) -> Option<u32> {
    let info = resp::command(url, &[b"INFO", b"server"], timeout).ok()?;
    info.as_str()?
        .lines()
        .find_map(|line| line.strip_prefix("process_id:"))
        .and_then(|pid| pid.trim().parse().ok())
}

/// The major version of a redis-server binary, asked once per process.
fn redis_major(binary: &Path) -> Option<u32> {
    static MAJOR: OnceLock<Option<u32>> = OnceLock::new();
    *MAJOR.get_or_init(|| {
        let out = Command::new(binary).arg("--version").output().ok()?;
        // "Redis server v=7.0.15 sha=..."
        let text = String::from_utf8_lossy(&out.stdout);
        let version = text.split_whitespace().find_map(|w| w.strip_prefix("v="))?;
        version.split('.').next()?.parse().ok()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn env_value_names_an_external_server() {
        let own = TestRedis::from_env_value(None).unwrap();
        assert!(own.is_owned());

        let mut external = TestRedis::from_env_value(Some(own.url().to_owned())).unwrap();
        assert!(!external.is_owned());
        assert_eq!((external.url(), external.port()), (own.url(), own.port()));
        assert_eq!((external.pid(), external.dir()), (None, None));
        assert_eq!(
            external.cmd(&[b"PING"]).unwrap(),
            Reply::Status("PONG".into())
        );
        for result in [external.stop(), external.restart()] {
            let err = result.unwrap_err();
            assert!(matches!(err, TestkitError::External { .. }), "{err}");
            assert!(err.to_string().contains(URL_VAR), "{err}");
        }
        drop(external);
        // Dropping the external handle left the server alone.
        assert_eq!(own.cmd(&[b"PING"]).unwrap(), Reply::Status("PONG".into()));
    }

    #[test]
    fn a_port_taken_by_another_server_is_replaced_by_a_free_one() {
        let occupant = TestRedis::start().unwrap();
        let dir = tempfile::tempdir().unwrap();
        let mut picks = [occupant.port(), 0].into_iter();
        let server = RedisServer::start(dir.path().to_owned(), Vec::new(), || match picks.next() {
            Some(0) | None => process::free_port(),
            Some(port) => Ok(port),
        })
        .unwrap();
        // Seen either in the log of the redis-server that lost, or (usually, since the
        // occupant answers first) as a PONG from a server with another pid.
        assert_ne!(server.port(), occupant.port());
        assert_eq!(
            occupant.cmd(&[b"PING"]).unwrap(),
            Reply::Status("PONG".into())
        );
        let url = Url::parse(&server.url()).unwrap();
        assert_eq!(server_pid(&url, Duration::from_secs(1)), server.pid());
    }

    #[test]
    fn blank_env_value_means_start_our_own() {
        assert!(
            TestRedis::from_env_value(Some("  ".into()))
                .unwrap()
                .is_owned()
        );
    }

    #[test]
    fn env_value_must_be_a_redis_url() {
        for bad in ["localhost:6379", "postgres://x@127.0.0.1/db"] {
            let err = TestRedis::from_env_value(Some(bad.into())).unwrap_err();
            assert!(matches!(err, TestkitError::InvalidUrl { .. }), "{err}");
        }
    }
}
