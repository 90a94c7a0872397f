//! Reading the config directory: every file below it (links followed, dot-named entries
//! skipped), sorted by path, within bounds on their number and size, each through the server's
//! one file reader ([`crate::files`]): an entry that is not a regular file or a directory (a
//! FIFO, a device) refuses the directory, naming it.

use std::path::{Path, PathBuf};

use super::LoadError;

/// The most files the directory may hold.
pub const MAX_FILES: usize = 10_000;

/// The most bytes all files together may hold.
pub const MAX_TOTAL_BYTES: usize = 64 << 20;

/// The deepest directory nesting read.
const MAX_DEPTH: usize = 16;

/// The files of a directory and their contents, sorted by path: what a reload compares.
pub type Snapshot = Vec<(PathBuf, Vec<u8>)>;

/// Every file under `dir`.
pub fn read_dir(dir: &Path) -> Result<Snapshot, LoadError> {
    let mut files = Vec::new();
    let mut total = 0;
    walk(dir, 0, &mut files, &mut total)?;
    files.sort_by(|a, b| a.0.cmp(&b.0));
    Ok(files)
}

fn walk(
    dir: &Path,
    depth: usize,
    files: &mut Snapshot,
    total: &mut usize,
) -> Result<(), LoadError> {
    let fail = |path: &Path, what: &str, e: std::io::Error| LoadError {
        file: Some(path.to_owned()),
        message: format!("cannot {what}: {e}"),
    };
    let entries = std::fs::read_dir(dir).map_err(|e| fail(dir, "read the directory", e))?;
    for entry in entries {
        let entry = entry.map_err(|e| fail(dir, "read the directory", e))?;
        if entry.file_name().as_encoded_bytes().starts_with(b".") {
            continue;
        }
        let path = entry.path();
        // Following links: a ConfigMap's files are links into its current version.
        let meta = std::fs::metadata(&path).map_err(|e| fail(&path, "read", e))?;
        if meta.is_dir() {
            if depth + 1 >= MAX_DEPTH {
                return Err(LoadError {
                    file: Some(path),
                    message: format!("directories nested more than {MAX_DEPTH} deep"),
                });
            }
            walk(&path, depth + 1, files, total)?;
        } else {
            if files.len() >= MAX_FILES {
                return Err(LoadError {
                    file: Some(dir.to_owned()),
                    message: format!("more than {MAX_FILES} files"),
                });
            }
            // Through the one file reader: what is not a regular file (a FIFO, a device, a
            // socket) is refused by path and reason rather than waited on or skipped unsaid, and
            // one file cannot exceed its own cap.
            let bytes = crate::files::read(&path, crate::files::Kind::EnvoyYaml).map_err(|e| {
                LoadError {
                    file: Some(path.clone()),
                    message: e.why.to_string(),
                }
            })?;
            *total += bytes.len();
            if *total > MAX_TOTAL_BYTES {
                return Err(LoadError {
                    file: Some(path),
                    message: format!(
                        "the files hold more than {} MiB together",
                        MAX_TOTAL_BYTES >> 20
                    ),
                });
            }
            files.push((path, bytes.to_vec()));
        }
    }
    Ok(())
}
