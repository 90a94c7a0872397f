//! Reading the config file within bounds, through the server's one file reader
//! ([`crate::files`]): only a regular file, and only up to [`MAX_FILE_BYTES`], refused before a
//! byte of it is read. The same rules hold at start, on reload and in `tollgate config check`.

use std::path::Path;
use std::sync::Arc;

use super::ConfigError;
use crate::files::{self, Kind, Why};

/// The largest config file read: 16 MiB. A file of [`MAX_POLICIES`](crate::limiter::MAX_POLICIES)
/// policies written out in full takes well under 1 MiB; what is larger is a mistake (a log or a
/// dump at the config path), and reading it would cost the server memory it needs for deciding.
pub const MAX_FILE_BYTES: u64 = Kind::Config.cap();

/// The bytes of the config file at `path`, or why it is refused.
pub(crate) fn read(path: &Path) -> Result<Arc<[u8]>, ConfigError> {
    files::read(path, Kind::Config).map_err(|e| match e.why {
        Why::NotRegular(what) => refused(
            path,
            format!("the config file must be a regular file; this is {what}"),
        ),
        Why::TooLarge(_) => too_large(path),
        Why::Io(error) => refused(path, format!("cannot read the config file: {error}")),
    })
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
