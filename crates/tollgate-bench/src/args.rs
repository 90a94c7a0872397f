//! Checks of the arguments the benchmarks share.

use std::time::Duration;

use crate::BenchError;

/// `value` seconds as a duration; an error naming the argument `name` unless it is a positive,
/// finite number.
pub(crate) fn seconds(value: f64, name: &str) -> Result<Duration, BenchError> {
    Duration::try_from_secs_f64(value)
        .ok()
        .filter(|d| !d.is_zero())
        .ok_or_else(|| BenchError::Args(format!("{name} must be a positive number of seconds")))
}
