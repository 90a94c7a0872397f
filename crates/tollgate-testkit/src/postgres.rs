//! A throwaway PostgreSQL per test: a copy of a cached, initdb'ed template data directory, served
//! by a `postgres` postmaster that is our direct child, with durability switched off for speed.
//!
//! initdb takes seconds; copying its result takes a fraction of that. So the first start on a
//! machine builds `$TMPDIR/tollgate-testkit-<uid>/pg<major>-template` (in a sibling directory,
//! renamed into place, so racing test processes never see half of one) and every start copies
//! it with `cp -a`, into `/dev/shm` when it can (see [`scratch::data_base`]).
//!
//! PostgreSQL refuses to run as root: when the tests run as root, initdb and postgres run as the
//! `postgres` system user and the directories are handed to it.

use std::{
    fs,
    io::ErrorKind,
    net::TcpStream,
    os::unix::{
        fs::{DirBuilderExt, MetadataExt, PermissionsExt},
        process::CommandExt,
    },
    path::{Path, PathBuf},
    process::{Command, Stdio},
    sync::OnceLock,
    time::Duration,
};

use tempfile::TempDir;

use crate::{
    TestkitError,
    process::{self, Deadline, LaunchError, PORT_ATTEMPTS, PORT_IN_USE, ServerProcess},
    scratch,
    tls::{self, TlsFiles},
    url::{self, Url},
};

const URL_VAR: &str = "TOLLGATE_DATABASE_URL";
const INSTALL_HINT: &str = "apt-get install -y postgresql";
const READY_TIMEOUT: Duration = Duration::from_secs(30);
/// An immediate shutdown takes milliseconds; past this the postmaster gets SIGKILL.
const STOP_GRACE: Duration = Duration::from_secs(5);
const INITDB_TIMEOUT: Duration = Duration::from_secs(120);
const COPY_TIMEOUT: Duration = Duration::from_secs(60);

/// A throwaway PostgreSQL, or the one `TOLLGATE_DATABASE_URL` names.
///
/// The server listens on 127.0.0.1 at a free port with `trust` authentication (user `postgres`,
/// database `postgres`), `fsync`, `synchronous_commit` and `full_page_writes` off and
/// `max_connections=200`; its data directory, socket and `postgres.log` live in a temporary
/// directory. Dropping the handle shuts it down (immediate mode, then SIGKILL after a grace
/// period) and removes the directory.
///
/// When `TOLLGATE_DATABASE_URL` is set (and not blank) no process is started: [`url`](Self::url)
/// is that URL and [`stop`](Self::stop) / [`restart`](Self::restart) fail with
/// [`TestkitError::External`].
#[derive(Debug)]
pub struct TestPostgres {
    inner: Inner,
}

#[derive(Debug)]
enum Inner {
    Owned(Box<OwnedPostgres>),
    External { url: String, port: u16 },
}

impl TestPostgres {
    /// Starts a PostgreSQL server (waiting until it accepts connections), unless
    /// `TOLLGATE_DATABASE_URL` names one to use instead.
    pub fn start() -> Result<Self, TestkitError> {
        Self::from_env_value(url::env_value(URL_VAR)?)
    }

    /// A throwaway PostgreSQL as production runs one, for benchmarks: `fsync`,
    /// `synchronous_commit` and `full_page_writes` at their defaults (on), its data directory
    /// on disk (the temporary directory, never `/dev/shm`). `TOLLGATE_DATABASE_URL` is not
    /// read: a benchmark that wants another server is given its URL.
    pub fn start_durable() -> Result<Self, TestkitError> {
        OwnedPostgres::start(process::free_port, Durability::Durable).map(|owned| Self {
            inner: Inner::Owned(Box::new(owned)),
        })
    }

    /// A throwaway PostgreSQL that also serves TLS (`ssl=on`; clients may still connect
    /// without it), with a certificate for `localhost` and `127.0.0.1` signed by a CA of its
    /// own ([`ca_cert`](Self::ca_cert)). `TOLLGATE_DATABASE_URL` is not consulted: a test of
    /// TLS needs the CA's file.
    pub fn start_tls() -> Result<Self, TestkitError> {
        OwnedPostgres::start_with(process::free_port, Durability::Fast, true).map(|owned| Self {
            inner: Inner::Owned(Box::new(owned)),
        })
    }

    /// The CA certificate (PEM) that signed the server's, for a server from
    /// [`start_tls`](Self::start_tls).
    pub fn ca_cert(&self) -> Option<&Path> {
        match &self.inner {
            Inner::Owned(owned) => owned.tls.as_ref().map(|tls| tls.ca.as_path()),
            Inner::External { .. } => None,
        }
    }

    /// [`start`](Self::start) with the variable's value passed in, so tests can cover both
    /// paths without mutating the process environment.
    pub(crate) fn from_env_value(value: Option<String>) -> Result<Self, TestkitError> {
        if let Some(url) = url::non_blank(value) {
            let parsed = Url::parse(&url)?;
            if !matches!(parsed.scheme.as_str(), "postgres" | "postgresql") {
                return Err(TestkitError::InvalidUrl {
                    url,
                    reason: format!("{URL_VAR} must be a postgres:// URL"),
                });
            }
            let port = parsed.port.unwrap_or(5432);
            return Ok(Self {
                inner: Inner::External { url, port },
            });
        }
        OwnedPostgres::start(process::free_port, Durability::Fast).map(|owned| Self {
            inner: Inner::Owned(Box::new(owned)),
        })
    }

    /// `postgres://postgres@127.0.0.1:PORT/postgres`, or the external URL as given.
    pub fn url(&self) -> &str {
        match &self.inner {
            Inner::Owned(owned) => &owned.url,
            Inner::External { url, .. } => url,
        }
    }

    /// The TCP port (5432 for an external URL without one).
    pub fn port(&self) -> u16 {
        match &self.inner {
            Inner::Owned(owned) => owned.port,
            Inner::External { port, .. } => *port,
        }
    }

    /// Shuts the server down at once (SIGQUIT: immediate mode, no checkpoint, as in a crash;
    /// SIGKILL if it lingers) and waits for the postmaster to exit. The data directory stays.
    /// Stopping a stopped server does nothing.
    ///
    /// As in a crash, the last commits can be lost: the server runs with
    /// `synchronous_commit=off`. A test that needs them after [`restart`](Self::restart) sets
    /// `synchronous_commit = on` in the session that commits them.
    pub fn stop(&mut self) -> Result<(), TestkitError> {
        self.owned("stop")?.stop()
    }

    /// Starts the server again on the same port and data directory (stopping it first if it
    /// runs) and waits until it accepts connections, after crash recovery; data flushed before
    /// the stop survives (see [`stop`](Self::stop)). Fails if another process took the port
    /// meanwhile.
    pub fn restart(&mut self) -> Result<(), TestkitError> {
        let owned = self.owned("restart")?;
        owned.stop()?;
        owned.launch().map_err(|e| match e {
            LaunchError::Failed(e) => e,
            LaunchError::PortTaken => TestkitError::NotReady {
                what: format!("{} (another process took the port)", owned.what()),
                waited: Duration::ZERO,
                log: owned.log.clone(),
                log_tail: process::log_tail(&owned.log, 0),
            },
        })
    }

    /// Whether the kit started (and will stop) this server.
    pub fn is_owned(&self) -> bool {
        matches!(self.inner, Inner::Owned(_))
    }

    /// The postmaster's process id while it runs; `None` when stopped or external.
    pub fn pid(&self) -> Option<u32> {
        match &self.inner {
            Inner::Owned(owned) => owned.process.as_ref().map(ServerProcess::pid),
            Inner::External { .. } => None,
        }
    }

    /// The temporary directory holding `data/`, the socket directory and `postgres.log`;
    /// `None` when external.
    pub fn dir(&self) -> Option<&Path> {
        match &self.inner {
            Inner::Owned(owned) => Some(owned.dir.path()),
            Inner::External { .. } => None,
        }
    }

    /// The directory of the PostgreSQL binaries the server runs, where tests find a matching
    /// `psql`; `None` when external.
    pub fn bin_dir(&self) -> Option<&Path> {
        match &self.inner {
            Inner::Owned(owned) => Some(&owned.bin.dir),
            Inner::External { .. } => None,
        }
    }

    fn owned(&mut self, action: &'static str) -> Result<&mut OwnedPostgres, TestkitError> {
        match &mut self.inner {
            Inner::Owned(owned) => Ok(owned),
            Inner::External { .. } => Err(TestkitError::External {
                what: "PostgreSQL",
                var: URL_VAR,
                action,
            }),
        }
    }
}

/// Whether commits wait for the disk.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Durability {
    /// Tests: `fsync`, `synchronous_commit` and `full_page_writes` off, data on tmpfs if it can.
    Fast,
    /// Benchmarks: as PostgreSQL ships, on disk.
    Durable,
}

/// Where a server's data directory comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Seed {
    /// A copy of the cached initdb'ed template: a new, empty server.
    Template,
    /// `pg_basebackup -R` of the server on this 127.0.0.1 port: a hot standby streaming from it.
    BaseBackup(u16),
}

#[derive(Debug)]
pub(crate) struct OwnedPostgres {
    durability: Durability,
    pub(crate) process: Option<ServerProcess>,
    pub(crate) port: u16,
    pub(crate) url: String,
    pub(crate) bin: PgBin,
    pub(crate) run_as: Option<User>,
    pub(crate) data: PathBuf,
    /// Settings passed as `-c NAME=VALUE` beyond the kit's own, last so that they win.
    settings: Vec<String>,
    /// `None` when the temporary directory's path is too long for a Unix socket.
    socket_dir: Option<PathBuf>,
    pub(crate) log: PathBuf,
    /// The server's certificate and key, and its CA's, when it serves TLS.
    tls: Option<TlsFiles>,
    pub(crate) dir: TempDir,
}

impl OwnedPostgres {
    /// Starts on a port from `pick_port`, trying another when a different process takes it
    /// first.
    fn start(
        pick_port: impl FnMut() -> Result<u16, TestkitError>,
        durability: Durability,
    ) -> Result<Self, TestkitError> {
        Self::start_with(pick_port, durability, false)
    }

    /// [`start`](Self::start), serving TLS too if `tls`.
    fn start_with(
        pick_port: impl FnMut() -> Result<u16, TestkitError>,
        durability: Durability,
        tls: bool,
    ) -> Result<Self, TestkitError> {
        Self::start_from(pick_port, durability, tls, Seed::Template, Vec::new())
    }

    /// [`start_with`](Self::start_with) on a data directory from `seed`, with `settings`
    /// (`NAME=VALUE`) on its command line.
    pub(crate) fn start_from(
        mut pick_port: impl FnMut() -> Result<u16, TestkitError>,
        durability: Durability,
        tls: bool,
        seed: Seed,
        settings: Vec<String>,
    ) -> Result<Self, TestkitError> {
        let bin = PgBin::find()?;
        let run_as = if process::euid() == 0 {
            Some(User::postgres()?)
        } else {
            None
        };
        let template = ensure_template(&bin, run_as)?;
        let base = match durability {
            Durability::Fast => scratch::data_base(),
            Durability::Durable => std::env::temp_dir(),
        };
        let dir = scratch::tempdir(&base, "tollgate-pg-")?;
        if let Some(user) = run_as {
            user.chown(dir.path())?;
        }
        let data = dir.path().join("data");
        let setup_log = dir.path().join("setup.log");
        match seed {
            Seed::Template => {
                let mut cp = Command::new("cp");
                cp.arg("-a").arg(&template).arg(&data);
                let what = format!("cp -a {} {}", template.display(), data.display());
                process::run(cp, &what, &setup_log, COPY_TIMEOUT)?;
            }
            Seed::BaseBackup(port) => {
                // -R writes standby.signal and primary_conninfo; -X stream copies the WAL
                // written meanwhile; a fast checkpoint starts at once.
                let mut backup = Command::new(bin.dir.join("pg_basebackup"));
                backup
                    .args(["-h", "127.0.0.1", "-p", &port.to_string(), "-U", "postgres"])
                    .arg("-D")
                    .arg(&data)
                    .args(["-R", "-X", "stream", "-c", "fast", "--no-sync"])
                    .current_dir(dir.path());
                if let Some(user) = run_as {
                    backup.uid(user.uid).gid(user.gid);
                }
                let what = format!("pg_basebackup -p {port} -D {}", data.display());
                process::run(backup, &what, &setup_log, COPY_TIMEOUT)?;
            }
        }

        let socket_dir = dir.path().join("sock");
        // sun_path holds 108 bytes, including ".s.PGSQL.65535" and a NUL.
        let socket_dir = (socket_dir.as_os_str().len() + 16 <= 107).then_some(socket_dir);
        if let Some(socket_dir) = &socket_dir {
            fs::create_dir(socket_dir)
                .map_err(|e| TestkitError::io(format!("creating {}", socket_dir.display()), e))?;
            if let Some(user) = run_as {
                user.chown(socket_dir)?;
            }
        }
        let tls = if tls {
            let files = tls::make_certificates(dir.path())?;
            // PostgreSQL refuses a key that others may read, and must own it to read it.
            fs::set_permissions(&files.key, fs::Permissions::from_mode(0o600))
                .map_err(|e| TestkitError::io("restricting the server's TLS key", e))?;
            if let Some(user) = run_as {
                user.chown(&files.key)?;
                user.chown(&files.cert)?;
            }
            Some(files)
        } else {
            None
        };
        let mut owned = Self {
            tls,
            durability,
            settings,
            process: None,
            port: 0,
            url: String::new(),
            log: dir.path().join("postgres.log"),
            bin,
            run_as,
            data,
            socket_dir,
            dir,
        };
        for _ in 0..PORT_ATTEMPTS {
            owned.port = pick_port()?;
            owned.url = format!("postgres://postgres@127.0.0.1:{}/postgres", owned.port);
            match owned.launch() {
                Ok(()) => return Ok(owned),
                Err(LaunchError::PortTaken) => continue,
                Err(LaunchError::Failed(e)) => return Err(e),
            }
        }
        Err(TestkitError::NotReady {
            what: format!("postgres (every one of {PORT_ATTEMPTS} free ports was taken)"),
            waited: Duration::ZERO,
            log: owned.log.clone(),
            log_tail: process::log_tail(&owned.log, 0),
        })
    }

    pub(crate) fn what(&self) -> String {
        format!("postgres on port {}", self.port)
    }

    pub(crate) fn stop(&mut self) -> Result<(), TestkitError> {
        if let Some(mut process) = self.process.take() {
            process
                .shutdown(libc::SIGQUIT, STOP_GRACE)
                .map_err(|e| TestkitError::io(format!("stopping {}", self.what()), e))?;
        }
        Ok(())
    }

    fn launch(&mut self) -> Result<(), LaunchError> {
        let log_from = process::log_len(&self.log);
        let log = process::open_log(&self.log)?;
        let log_err = log
            .try_clone()
            .map_err(|e| TestkitError::io("duplicating the PostgreSQL log file", e))?;
        // The postmaster itself is our child (not `pg_ctl start`), so its pid is ours to signal.
        let mut cmd = Command::new(self.bin.dir.join("postgres"));
        cmd.arg("-D")
            .arg(&self.data)
            .arg("-p")
            .arg(self.port.to_string())
            .args(["-c", "listen_addresses=127.0.0.1"])
            .args(["-c", "max_connections=200"])
            // Dynamic shared memory in files under the data directory, not in /dev/shm: if
            // the postmaster is SIGKILLed, removing the directory removes them too.
            .args(["-c", "dynamic_shared_memory_type=mmap"]);
        if let Some(tls) = &self.tls {
            cmd.args(["-c", "ssl=on"])
                .arg("-c")
                .arg(format!("ssl_cert_file={}", tls.cert.display()))
                .arg("-c")
                .arg(format!("ssl_key_file={}", tls.key.display()));
        }
        if self.durability == Durability::Fast {
            cmd.args(["-c", "fsync=off"])
                .args(["-c", "synchronous_commit=off"])
                .args(["-c", "full_page_writes=off"]);
        }
        for setting in &self.settings {
            cmd.arg("-c").arg(setting);
        }
        match &self.socket_dir {
            Some(socket_dir) => cmd.arg("-k").arg(socket_dir),
            None => cmd.args(["-c", "unix_socket_directories="]),
        };
        cmd.current_dir(self.dir.path())
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(log_err);
        if let Some(user) = self.run_as {
            cmd.uid(user.uid).gid(user.gid);
        }
        let mut process = ServerProcess::spawn(cmd, &self.what())?;
        let result = self.wait_ready(&mut process, log_from);
        match result {
            Ok(()) => self.process = Some(process),
            // Give a postmaster that did start a chance to release its shared memory.
            Err(_) => {
                let _ = process.shutdown(libc::SIGQUIT, STOP_GRACE);
            }
        }
        result
    }

    fn wait_ready(&self, process: &mut ServerProcess, log_from: u64) -> Result<(), LaunchError> {
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
            // What `pg_ctl start -w` checks: the lock file names our postmaster and says
            // "ready", which it writes once it accepts connections. The connect is a cheap
            // second opinion.
            if postmaster_ready(&self.data, process.pid())
                && TcpStream::connect_timeout(
                    &([127, 0, 0, 1], self.port).into(),
                    Duration::from_secs(1),
                )
                .is_ok()
            {
                return Ok(());
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

impl Drop for OwnedPostgres {
    fn drop(&mut self) {
        // Before the fields drop: the postmaster must be gone before its directory is removed.
        let _ = self.stop();
    }
}

/// Reads `postmaster.pid`: line 1 is the postmaster's pid, line 8 its status ("ready" also
/// on a hot standby that takes read-only connections).
fn postmaster_ready(data: &Path, pid: u32) -> bool {
    let Ok(text) = fs::read_to_string(data.join("postmaster.pid")) else {
        return false;
    };
    let lines: Vec<&str> = text.lines().map(str::trim).collect();
    lines.first() == Some(&pid.to_string().as_str()) && lines.get(7) == Some(&"ready")
}

/// Where the PostgreSQL server binaries are, and their major version.
#[derive(Debug, Clone)]
pub(crate) struct PgBin {
    pub(crate) dir: PathBuf,
    major: u32,
}

impl PgBin {
    fn find() -> Result<Self, TestkitError> {
        static FOUND: OnceLock<PgBin> = OnceLock::new();
        if let Some(found) = FOUND.get() {
            return Ok(found.clone());
        }
        let missing = |binary| TestkitError::MissingBinary {
            binary,
            searched: "PATH and /usr/lib/postgresql/*/bin".into(),
            install_hint: INSTALL_HINT,
        };
        let dir = find_bin_dir().ok_or_else(|| missing("initdb and postgres"))?;
        let postgres = dir.join("postgres");
        let out = Command::new(&postgres)
            .arg("--version")
            .output()
            .map_err(|source| TestkitError::Spawn {
                what: format!("{} --version", postgres.display()),
                source,
            })?;
        // "postgres (PostgreSQL) 15.8 (Debian 15.8-0+deb12u1)"
        let text = String::from_utf8_lossy(&out.stdout);
        let major = text
            .split_once("(PostgreSQL) ")
            .and_then(|(_, version)| version.split(['.', ' ', '\n']).next())
            .and_then(|major| major.trim().parse().ok())
            .ok_or_else(|| TestkitError::CommandFailed {
                command: format!("{} --version", postgres.display()),
                status: format!("unrecognised output {:?}", text.trim()),
                log: PathBuf::new(),
                log_tail: String::from_utf8_lossy(&out.stderr).into_owned(),
            })?;
        Ok(FOUND.get_or_init(|| Self { dir, major }).clone())
    }
}

/// `initdb` on PATH (resolving symlinks, so that `postgres` is found beside the real one), else
/// the newest `/usr/lib/postgresql/<version>/bin`, where Debian and Ubuntu keep the server
/// binaries out of PATH.
fn find_bin_dir() -> Option<PathBuf> {
    let has_server = |dir: &Path| {
        process::is_executable(&dir.join("initdb")) && process::is_executable(&dir.join("postgres"))
    };
    let on_path = process::find_binary("initdb", &[])
        .and_then(|initdb| fs::canonicalize(initdb).ok())
        .and_then(|initdb| initdb.parent().map(Path::to_owned))
        .filter(|dir| has_server(dir));
    if on_path.is_some() {
        return on_path;
    }
    let mut versions: Vec<(Vec<u32>, PathBuf)> = fs::read_dir("/usr/lib/postgresql")
        .ok()?
        .filter_map(|entry| {
            let entry = entry.ok()?;
            let name = entry.file_name();
            let version = name
                .to_str()?
                .split('.')
                .map(|part| part.parse().ok())
                .collect::<Option<Vec<u32>>>()?;
            let bin = entry.path().join("bin");
            has_server(&bin).then_some((version, bin))
        })
        .collect();
    versions.sort();
    versions.pop().map(|(_, bin)| bin)
}

/// The account PostgreSQL runs as when the tests run as root.
#[derive(Debug, Clone, Copy)]
pub(crate) struct User {
    pub(crate) uid: u32,
    pub(crate) gid: u32,
}

impl User {
    fn postgres() -> Result<Self, TestkitError> {
        let passwd = fs::read_to_string("/etc/passwd")
            .map_err(|e| TestkitError::io("reading /etc/passwd", e))?;
        passwd
            .lines()
            .find_map(|line| {
                // name:password:uid:gid:...
                let mut fields = line.split(':');
                if fields.next()? != "postgres" {
                    return None;
                }
                let _password = fields.next()?;
                let uid = fields.next()?.parse().ok()?;
                let gid = fields.next()?.parse().ok()?;
                Some(Self { uid, gid })
            })
            .ok_or(TestkitError::NoPostgresUser)
    }

    fn chown(self, path: &Path) -> Result<(), TestkitError> {
        std::os::unix::fs::chown(path, Some(self.uid), Some(self.gid))
            .map_err(|e| TestkitError::io(format!("handing {} to postgres", path.display()), e))
    }
}

/// The initdb'ed template data directory for this major version, built on first use.
fn ensure_template(bin: &PgBin, run_as: Option<User>) -> Result<PathBuf, TestkitError> {
    let cache = cache_dir()?;
    let template = cache.join(format!("pg{}-template", bin.major));
    if template_is_complete(&template) {
        return Ok(template);
    }
    if fs::symlink_metadata(&template).is_ok() {
        // Damaged (say, a tmp cleaner took some files): move it out of the way, then rebuild.
        let trash = scratch::tempdir(&cache, "stale-template-")?;
        let _ = fs::rename(&template, trash.path().join("old"));
    }
    let build = scratch::tempdir(&cache, &format!("pg{}-template.build-", bin.major))?;
    if let Some(user) = run_as {
        user.chown(build.path())?;
    }
    let data = build.path().join("data");
    let log = build.path().join("initdb.log");
    let mut initdb = Command::new(bin.dir.join("initdb"));
    initdb
        .arg("-D")
        .arg(&data)
        .args(["--auth=trust", "-U", "postgres", "--no-sync", "-E", "UTF8"])
        .arg("--no-locale")
        .current_dir(build.path());
    if let Some(user) = run_as {
        initdb.uid(user.uid).gid(user.gid);
    }
    let what = format!("initdb -D {}", data.display());
    if let Err(e) = process::run(initdb, &what, &log, INITDB_TIMEOUT) {
        // Keep the build directory: its initdb.log is what the error points at.
        let _ = build.keep();
        return Err(e);
    }
    match fs::rename(&data, &template) {
        Ok(()) => Ok(template),
        // Another test process finished its template first; theirs is as good as ours.
        Err(_) if template_is_complete(&template) => Ok(template),
        Err(e) => Err(TestkitError::io(
            format!("moving the template into place at {}", template.display()),
            e,
        )),
    }
}

fn template_is_complete(template: &Path) -> bool {
    template.join("PG_VERSION").is_file() && template.join("global/pg_control").is_file()
}

/// `$TMPDIR/tollgate-testkit-<euid>`, shared by all test processes of one user. World-readable
/// so that the `postgres` user can reach the template when the tests run as root.
fn cache_dir() -> Result<PathBuf, TestkitError> {
    let euid = process::euid();
    let dir = std::env::temp_dir().join(format!("tollgate-testkit-{euid}"));
    let io_err = |e| {
        TestkitError::io(
            format!("preparing the cache directory {}", dir.display()),
            e,
        )
    };
    match fs::DirBuilder::new().mode(0o755).create(&dir) {
        Ok(()) => fs::set_permissions(&dir, fs::Permissions::from_mode(0o755)).map_err(io_err)?,
        Err(e) if e.kind() == ErrorKind::AlreadyExists => {}
        Err(e) => return Err(io_err(e)),
    }
    // In a shared /tmp another user could have planted this path; never build inside theirs.
    let meta = fs::symlink_metadata(&dir).map_err(io_err)?;
    if !meta.is_dir() || meta.uid() != euid {
        return Err(io_err(std::io::Error::other(
            "it exists but is not a directory owned by the current user; remove it",
        )));
    }
    Ok(dir)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn env_value_names_an_external_server() {
        let own = TestPostgres::from_env_value(None).unwrap();
        let mut external = TestPostgres::from_env_value(Some(own.url().to_owned())).unwrap();
        assert!(own.is_owned() && !external.is_owned());
        assert_eq!((external.url(), external.port()), (own.url(), own.port()));
        assert_eq!(
            (external.pid(), external.dir(), external.bin_dir()),
            (None, None, None)
        );
        for result in [external.stop(), external.restart()] {
            let err = result.unwrap_err();
            assert!(matches!(err, TestkitError::External { .. }), "{err}");
            assert!(err.to_string().contains(URL_VAR), "{err}");
        }
        drop(external);
        let pid = own.pid().unwrap();
        assert!(Path::new(&format!("/proc/{pid}")).exists());
    }

    #[test]
    fn env_value_must_be_a_postgres_url() {
        let external = TestPostgres::from_env_value(Some("postgresql://u@db/x".into())).unwrap();
        assert_eq!(external.port(), 5432);
        let err = TestPostgres::from_env_value(Some("redis://127.0.0.1:1".into())).unwrap_err();
        assert!(matches!(err, TestkitError::InvalidUrl { .. }), "{err}");
    }

    #[test]
    fn a_port_taken_by_another_server_is_replaced_by_a_free_one() {
        let occupant = std::net::TcpListener::bind(("127.0.0.1", 0)).unwrap();
        let taken = occupant.local_addr().unwrap().port();
        let mut picks = [taken, 0].into_iter();
        let pg = OwnedPostgres::start(
            || match picks.next() {
                Some(0) | None => process::free_port(),
                Some(port) => Ok(port),
            },
            Durability::Fast,
        )
        .unwrap();
        assert_ne!(pg.port, taken);
        assert!(fs::read_to_string(&pg.log).unwrap().contains(PORT_IN_USE));
    }

    #[test]
    fn reads_the_lock_file_like_pg_ctl() {
        let dir = tempfile::tempdir().unwrap();
        let write = |status: &str| {
            let text =
                format!("4242\n/data\n1700000000\n5433\n/sock\n127.0.0.1\n  1 2\n{status}\n");
            fs::write(dir.path().join("postmaster.pid"), text).unwrap();
        };
        assert!(!postmaster_ready(dir.path(), 4242));
        write("starting");
        assert!(!postmaster_ready(dir.path(), 4242));
        write("ready   ");
        assert!(postmaster_ready(dir.path(), 4242));
        assert!(!postmaster_ready(dir.path(), 4243));
    }
}
