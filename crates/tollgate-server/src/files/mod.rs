//! The one reader of every file the server reads after it starts: the config file, token
//! secrets, TLS certificates, keys and client CAs, and the Envoy YAML files.
//!
//! Each is opened non-blocking (so a FIFO at the path cannot make the open wait for a writer),
//! and the opened file is looked at ([`std::fs::File::metadata`], an `fstat`) before a byte is
//! read: what is not a regular file (a FIFO, a device, a directory, a socket) is refused by
//! path and reason, and so is a file larger than its kind's cap ([`Kind::cap`]). The read
//! itself stops one byte past the cap, in case the file grows meanwhile (`/dev/zero` behind a
//! symlink swapped in after the look is still bounded).
//!
//! Certificates, keys and CAs are kept by path and by what `fstat` says of the file (device,
//! inode, length, modification and change times): several listeners sharing one certificate,
//! polled four times a second, read it once per change ([`read`]). Secrets are not kept: they
//! are read only when the config is, and the server holds nothing of them but a digest.
//!
//! [`off_workers`] runs such work on one thread of its own, never on the async workers that
//! serve requests, and gives up waiting after [`READ_TIMEOUT`]: a read stuck on a hung network
//! file system leaves the state in force serving, and cannot hold up SIGTERM (the thread is
//! not one the runtime waits for at shutdown).

mod worker;

use std::collections::HashMap;
use std::fmt;
use std::fs::{File, Metadata};
use std::io::Read;
use std::os::unix::fs::{FileTypeExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::{Arc, LazyLock, Mutex, PoisonError};

use prometheus::{IntCounterVec, Opts};

pub use worker::{READ_TIMEOUT, Stuck, off_workers};

/// What a file is for: each kind has its own cap, and its own word in refusals.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Kind {
    /// The TOML config file.
    Config,
    /// A token's `secret_file`.
    Secret,
    /// A listener's certificate chain.
    Certificate,
    /// A listener's private key.
    Key,
    /// A listener's client CA bundle.
    ClientCa,
    /// One YAML file of the Envoy config directory.
    EnvoyYaml,
    /// The statsd-to-Prometheus mapping file (`[grpc.prometheus] mapper`).
    StatsdMapper,
}

impl Kind {
    /// The most bytes a file of this kind may hold: the config file 16 MiB, each Envoy YAML
    /// file 16 MiB (the
    /// directory's files 64 MiB together), a secret 4 KiB (a token is a line), a certificate
    /// chain, key or CA bundle 1 MiB (hundreds of certificates), a statsd mapping file 1 MiB
    /// (a thousand mappings, the most it may hold, take a few hundred KiB).
    pub const fn cap(self) -> u64 {
        match self {
            Kind::Secret => 4 << 10,
            Kind::Certificate | Kind::Key | Kind::ClientCa | Kind::StatsdMapper => 1 << 20,
            Kind::Config | Kind::EnvoyYaml => 16 << 20,
        }
    }

    /// Its label in `tollgate_file_refusals_total`.
    pub const fn label(self) -> &'static str {
        match self {
            Kind::Config => "config",
            Kind::Secret => "secret",
            Kind::Certificate => "certificate",
            Kind::Key => "key",
            Kind::ClientCa => "client_ca",
            Kind::EnvoyYaml => "envoy_yaml",
            Kind::StatsdMapper => "statsd_mapper",
        }
    }

    fn noun(self) -> &'static str {
        match self {
            Kind::Config => "config file",
            Kind::Secret => "secret file",
            Kind::Certificate => "certificate file",
            Kind::Key => "key file",
            Kind::ClientCa => "client CA file",
            Kind::EnvoyYaml => "Envoy config file",
            Kind::StatsdMapper => "statsd mapping file",
        }
    }

    /// Whether its contents are kept between reads (see the module's docs): certificates and
    /// keys, which several listeners share and poll; never a secret, of which the server keeps
    /// only a digest.
    fn cached(self) -> bool {
        matches!(self, Kind::Certificate | Kind::Key | Kind::ClientCa)
    }
}

/// A file refused or unreadable: its path, its kind and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileError {
    /// The path, as it was given.
    pub path: PathBuf,
    /// What it was read for.
    pub kind: Kind,
    /// Why.
    pub why: Why,
}

/// Why a file was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Why {
    /// Not a regular file: what it is (`a FIFO (named pipe)`, `a directory`, ...).
    NotRegular(&'static str),
    /// Larger than its kind's cap, in bytes.
    TooLarge(u64),
    /// It could not be opened or read: the error.
    Io(String),
}

impl fmt::Display for Why {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Why::NotRegular(what) => write!(f, "it must be a regular file; this is {what}"),
            Why::TooLarge(cap) => write!(f, "it is larger than {}, the most read", size(*cap)),
            Why::Io(e) => write!(f, "cannot read it: {e}"),
        }
    }
}

impl fmt::Display for FileError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (noun, path) = (self.kind.noun(), self.path.display());
        match &self.why {
            Why::Io(e) => write!(f, "cannot read the {noun} {path}: {e}"),
            why => write!(f, "the {noun} {path} is refused: {why}"),
        }
    }
}

impl std::error::Error for FileError {}

/// Files refused, by kind, since the start: counted here, and registered in every server's
/// metrics.
pub(crate) fn refusals() -> &'static IntCounterVec {
    static REFUSALS: LazyLock<IntCounterVec> = LazyLock::new(|| {
        let counter = IntCounterVec::new(
            Opts::new(
                "tollgate_file_refusals_total",
                "Files refused when read (not a regular file, over the kind's size \
                 cap, unreadable), by kind; the state in force stays.",
            ),
            &["kind"],
        )
        .expect("a valid metric definition");
        for kind in [
            Kind::Config,
            Kind::Secret,
            Kind::Certificate,
            Kind::Key,
            Kind::ClientCa,
            Kind::EnvoyYaml,
        ] {
            counter.with_label_values(&[kind.label()]);
        }
        counter
    });
    &REFUSALS
}

/// What `fstat` says of a file's version: a change of any of them is a new version.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Stamp {
    dev: u64,
    ino: u64,
    len: u64,
    mtime: (i64, i64),
    ctime: (i64, i64),
}

impl Stamp {
    fn of(meta: &Metadata) -> Stamp {
        Stamp {
            dev: meta.dev(),
            ino: meta.ino(),
            len: meta.len(),
            mtime: (meta.mtime(), meta.mtime_nsec()),
            ctime: (meta.ctime(), meta.ctime_nsec()),
        }
    }
}

/// The most files kept (certificates, keys, CAs, the config and Envoy's files; never a secret):
/// every listener's three fit many times over.
const MAX_KEPT: usize = 1024;

/// The most bytes kept: four listeners' largest certificate chains, keys and CAs, and more.
const MAX_KEPT_BYTES: usize = 16 << 20;

/// The files kept, and their bytes together. Past either bound all are dropped (the files in
/// use are read again at the next poll): paths a reload stopped naming do not pile up.
#[derive(Default)]
struct Kept {
    files: HashMap<(PathBuf, Kind), Version>,
    bytes: usize,
}

/// A file's version and what it held.
type Version = (Stamp, Arc<[u8]>);

impl Kept {
    fn insert(&mut self, key: (PathBuf, Kind), stamp: Stamp, bytes: Arc<[u8]>) {
        if let Some((_, old)) = self.files.remove(&key) {
            self.bytes -= old.len();
        }
        if self.files.len() >= MAX_KEPT || self.bytes + bytes.len() > MAX_KEPT_BYTES {
            self.files.clear();
            self.bytes = 0;
        }
        self.bytes += bytes.len();
        self.files.insert(key, (stamp, bytes));
    }
}

fn kept() -> &'static Mutex<Kept> {
    static KEPT: LazyLock<Mutex<Kept>> = LazyLock::new(Mutex::default);
    &KEPT
}

/// The bytes of the file at `path`, read as a file of `kind` (see the module's docs), or why
/// it is refused; a refusal is counted. Blocking: call it on [`off_workers`]' thread once the
/// server serves.
pub fn read(path: &Path, kind: Kind) -> Result<Arc<[u8]>, FileError> {
    read_uncounted(path, kind).inspect_err(|e| {
        refusals().with_label_values(&[e.kind.label()]).inc();
    })
}

fn read_uncounted(path: &Path, kind: Kind) -> Result<Arc<[u8]>, FileError> {
    let refuse = |why: Why| FileError {
        path: path.to_owned(),
        kind,
        why,
    };
    let io = |e: std::io::Error| refuse(Why::Io(e.to_string()));
    let file = File::options()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)
        .map_err(io)?;
    let meta = file.metadata().map_err(io)?;
    if let Some(what) = not_regular(&meta) {
        return Err(refuse(Why::NotRegular(what)));
    }
    let too_large = || refuse(Why::TooLarge(kind.cap()));
    if meta.len() > kind.cap() {
        return Err(too_large());
    }
    let stamp = Stamp::of(&meta);
    let key = (path.to_owned(), kind);
    if kind.cached() {
        let kept = kept().lock().unwrap_or_else(PoisonError::into_inner);
        if let Some((at, bytes)) = kept.files.get(&key)
            && *at == stamp
        {
            return Ok(Arc::clone(bytes));
        }
    }
    let mut bytes = Vec::with_capacity(usize::try_from(meta.len()).unwrap_or(0));
    file.take(kind.cap() + 1)
        .read_to_end(&mut bytes)
        .map_err(io)?;
    if bytes.len() as u64 > kind.cap() {
        return Err(too_large());
    }
    let bytes: Arc<[u8]> = bytes.into();
    if kind.cached() {
        kept()
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(key, stamp, Arc::clone(&bytes));
    }
    Ok(bytes)
}

/// What the file is, if not a regular file.
fn not_regular(meta: &Metadata) -> Option<&'static str> {
    let kind = meta.file_type();
    if kind.is_file() {
        None
    } else if kind.is_dir() {
        Some("a directory")
    } else if kind.is_fifo() {
        Some("a FIFO (named pipe)")
    } else if kind.is_char_device() {
        Some("a character device")
    } else if kind.is_block_device() {
        Some("a block device")
    } else if kind.is_socket() {
        Some("a socket")
    } else {
        Some("not a regular file")
    }
}

/// `4 KiB`, `1 MiB`.
pub(crate) fn size(bytes: u64) -> String {
    if bytes >= 1 << 20 {
        format!("{} MiB", bytes >> 20)
    } else {
        format!("{} KiB", bytes >> 10)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fifo_a_device_and_a_directory_are_refused_by_path_and_reason() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("fifo");
        let made = std::process::Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap();
        assert!(made.success());
        // Nobody writes to it: a blocking open would wait here for good.
        let e = read(&fifo, Kind::Secret).unwrap_err();
        assert_eq!(
            e.to_string(),
            format!(
                "the secret file {} is refused: it must be a regular file; this is a FIFO (named pipe)",
                fifo.display()
            )
        );
        let e = read(Path::new("/dev/zero"), Kind::Certificate).unwrap_err();
        assert_eq!(e.why, Why::NotRegular("a character device"));
        let e = read(dir.path(), Kind::Key).unwrap_err();
        assert_eq!(e.why, Why::NotRegular("a directory"));
    }

    #[test]
    fn a_file_over_its_kinds_cap_is_refused_before_it_is_read() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("secret");
        std::fs::write(&path, vec![b'a'; 4097]).unwrap();
        let e = read(&path, Kind::Secret).unwrap_err();
        assert_eq!(e.why.to_string(), "it is larger than 4 KiB, the most read");
        std::fs::write(&path, vec![b'a'; 4096]).unwrap();
        assert_eq!(read(&path, Kind::Secret).unwrap().len(), 4096);
        // The same file, as a certificate, has a cap of its own.
        assert_eq!(read(&path, Kind::Certificate).unwrap().len(), 4096);
    }

    #[test]
    fn a_kept_file_is_read_again_once_it_changes() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("cert.pem");
        std::fs::write(&path, "one").unwrap();
        let first = read(&path, Kind::Certificate).unwrap();
        let again = read(&path, Kind::Certificate).unwrap();
        assert!(
            Arc::ptr_eq(&first, &again),
            "an unchanged file is not read twice"
        );
        std::fs::write(&path, "two, longer").unwrap();
        assert_eq!(&*read(&path, Kind::Certificate).unwrap(), b"two, longer");
    }
}
