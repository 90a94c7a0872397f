//! Scratch directories: a benchmark's throwaway files (configs, certificates), removed when
//! their handle drops.

use tempfile::TempDir;

use crate::BenchError;

/// A scratch directory for one benchmark's files.
pub(crate) fn scratch(bench: &str) -> Result<TempDir, BenchError> {
    tempfile::Builder::new()
        .prefix(&format!("tollgate-bench-{bench}-"))
        .tempdir()
        .map_err(|source| BenchError::Write {
            path: std::env::temp_dir(),
            source,
        })
}
