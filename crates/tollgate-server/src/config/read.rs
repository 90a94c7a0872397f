//! Reading the config file within bounds: only a regular file, and only up to
//! [`MAX_FILE_BYTES`], refused before a byte of it is read. The same rules hold at start, on
//! reload and in `tollgate config check`.

use std::fs::{File, Metadata};
use std::io::Read;
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
use std::path::Path;

use super::ConfigError;

/// The largest config file read: 16 MiB. A file of [`MAX_POLICIES`](crate::limiter::MAX_POLICIES)
/// policies written out in full takes well under 1 MiB; what is larger is a mistake (a log or a
/// dump at the config path), and reading it would cost the server memory it needs for deciding.
pub const MAX_FILE_BYTES: u64 = 16 << 20;

/// The bytes of the config file at `path`, or why it is refused.
pub(crate) fn read(path: &Path) -> Result<Vec<u8>, ConfigError> {
    let unreadable = |e: &std::io::Error| ConfigError::unreadable(path, e);
    // Looked at before it is opened: opening a FIFO would wait for a writer.
    check(path, &std::fs::metadata(path).map_err(|e| unreadable(&e))?)?;
    // Non-blocking, and looked at again once open, in case it was swapped for a FIFO or a
    // device meanwhile; the read stops one byte past the cap in case it grew.
    let file = File::options()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)
        .map_err(|e| unreadable(&e))?;
    let meta = file.metadata().map_err(|e| unreadable(&e))?;
    check(path, &meta)?;
    let mut bytes = Vec::with_capacity(usize::try_from(meta.len()).unwrap_or(0));
    file.take(MAX_FILE_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| unreadable(&e))?;
    if bytes.len() as u64 > MAX_FILE_BYTES {
        return Err(too_large(path));
    }
    Ok(bytes)
}

/// Refuses what is not a regular file, or is larger than [`MAX_FILE_BYTES`].
fn check(path: &Path, meta: &Metadata) -> Result<(), ConfigError> {
    let kind = meta.file_type();
    let what = if kind.is_file() {
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
    };
    if let Some(what) = what {
        return Err(refused(
            path,
            format!("the config file must be a regular file; this is {what}"),
        ));
    }
    if meta.len() > MAX_FILE_BYTES {
        return Err(too_large(path));
    }
    Ok(())
}

pub(super) fn too_large(path: &Path) -> ConfigError {
    refused(
        path,
        format!(
            "the config file is larger than {} MiB, the most that is read",
            MAX_FILE_BYTES >> 20
        ),
    )
}

fn refused(path: &Path, message: String) -> ConfigError {
    ConfigError {
        file: path.to_owned(),
        at: None,
        field: String::new(),
        message,
    }
}
