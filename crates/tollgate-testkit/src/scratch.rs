//! The servers' temporary directories: where they go, and sweeping up the ones that test
//! processes killed outright (SIGKILL, a nextest timeout, Ctrl-C) never removed.
//!
//! Each directory holds an `owner` file naming the test process (pid and start time, so that a
//! recycled pid does not count). Creating a directory first removes the kit's directories whose
//! owner is gone; their servers died with it (`PR_SET_PDEATHSIG`).

use std::{
    env,
    ffi::CString,
    fs,
    mem::MaybeUninit,
    os::unix::{ffi::OsStrExt, fs::MetadataExt},
    path::{Path, PathBuf},
};

use tempfile::TempDir;

use crate::{TestkitError, process};

const OWNER_FILE: &str = "owner";
/// tmpfs is used for PostgreSQL data only while it has this much room to spare.
const TMPFS_MIN_AVAILABLE: u64 = 1 << 30;

/// A fresh directory `<base>/<prefix>XXXXXX` that removes itself on drop.
pub(crate) fn tempdir(base: &Path, prefix: &str) -> Result<TempDir, TestkitError> {
    sweep(base, prefix);
    let dir = tempfile::Builder::new()
        .prefix(prefix)
        .tempdir_in(base)
        .map_err(|e| TestkitError::io(format!("creating a directory in {}", base.display()), e))?;
    if let Some(owner) = process_identity(std::process::id()) {
        let path = dir.path().join(OWNER_FILE);
        fs::write(&path, owner)
            .map_err(|e| TestkitError::io(format!("writing {}", path.display()), e))?;
    }
    Ok(dir)
}

/// Where PostgreSQL data directories go: `/dev/shm` (tmpfs) when `TMPDIR` is not set and it has
/// room, since copying the template's ~1000 files and running on RAM is several times faster
/// than on many CI disks; otherwise the temporary directory.
pub(crate) fn data_base() -> PathBuf {
    let shm = Path::new("/dev/shm");
    if env::var_os("TMPDIR").is_none()
        && available_bytes(shm).is_some_and(|bytes| bytes >= TMPFS_MIN_AVAILABLE)
    {
        shm.to_owned()
    } else {
        env::temp_dir()
    }
}

#[allow(unsafe_code)]
fn available_bytes(path: &Path) -> Option<u64> {
    let path = CString::new(path.as_os_str().as_bytes()).ok()?;
    let mut stat = MaybeUninit::<libc::statvfs>::uninit();
    // SAFETY: `path` is NUL-terminated and outlives the call; `stat` is a valid out-pointer
    // that statvfs fills completely when it returns 0, and it is read only then.
    let stat = unsafe {
        if libc::statvfs(path.as_ptr(), stat.as_mut_ptr()) != 0 {
            return None;
        }
        stat.assume_init()
    };
    (stat.f_bavail as u64).checked_mul(stat.f_frsize as u64)
}

/// `<pid> <start time in clock ticks since boot>`, from `/proc/<pid>/stat`.
fn process_identity(pid: u32) -> Option<String> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // "pid (comm) state ppid ...": comm may hold anything, so count fields after the last ')'.
    // Field 22, the start time, is the 20th after it.
    let (_, rest) = stat.rsplit_once(')')?;
    let start_time = rest.split_whitespace().nth(19)?;
    Some(format!("{pid} {start_time}"))
}

/// Removes `<base>/<prefix>*` directories whose owner file is ours (same user) and names a
/// process that no longer runs. Best effort: anything unexpected is left alone.
fn sweep(base: &Path, prefix: &str) {
    let Ok(entries) = fs::read_dir(base) else {
        return;
    };
    let euid = process::euid();
    for entry in entries.flatten() {
        if !entry.file_name().as_bytes().starts_with(prefix.as_bytes()) {
            continue;
        }
        let owner_path = entry.path().join(OWNER_FILE);
        let Ok(meta) = fs::symlink_metadata(&owner_path) else {
            continue; // being created, or not one of ours
        };
        if !meta.is_file() || meta.uid() != euid {
            continue;
        }
        let Ok(owner) = fs::read_to_string(&owner_path) else {
            continue;
        };
        let Some(pid) = owner.split(' ').next().and_then(|p| p.parse().ok()) else {
            continue;
        };
        if process_identity(pid).as_deref() != Some(owner.trim()) {
            let _ = fs::remove_dir_all(entry.path());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sweeps_directories_of_dead_owners_only() {
        let base = tempfile::tempdir().unwrap();
        let prefix = "tollgate-sweep-test-";
        let live = tempdir(base.path(), prefix).unwrap();
        let dead = tempdir(base.path(), prefix).unwrap().keep();
        // A start time that cannot match: this pid "was" some earlier process.
        fs::write(dead.join(OWNER_FILE), format!("{} 0", std::process::id())).unwrap();
        let unowned = base.path().join(format!("{prefix}unowned"));
        fs::create_dir(&unowned).unwrap();
        let other_prefix = tempfile::Builder::new()
            .prefix("someone-else-")
            .tempdir_in(base.path())
            .unwrap()
            .keep();
        fs::write(other_prefix.join(OWNER_FILE), "1 0").unwrap();

        sweep(base.path(), prefix);
        assert!(live.path().exists());
        assert!(!dead.exists());
        assert!(unowned.exists());
        assert!(other_prefix.exists());
    }

    #[test]
    fn identifies_this_process() {
        let me = process_identity(std::process::id()).unwrap();
        assert!(me.starts_with(&format!("{} ", std::process::id())));
        assert_eq!(process_identity(std::process::id()), Some(me));
    }
}
