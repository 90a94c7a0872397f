//! `[top]` as the file sets it: whether the summaries of who is limited are kept, and how many
//! keys each lists, and one decision in how many they record.

use super::file::TopFile;
use super::policies::FaultAt;
use super::{ConfigError, checked};
use crate::top::{MAX_CAPACITY, MAX_SAMPLE_EVERY};

/// What `[top]` sets; `None` where it is silent.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TopConfig {
    /// `enabled`.
    pub enabled: Option<bool>,
    /// `capacity`, 1 to [`MAX_CAPACITY`].
    pub capacity: Option<usize>,
    /// `sample_every`, 1 to [`MAX_SAMPLE_EVERY`].
    pub sample_every: Option<u32>,
}

/// `[top]`, checked.
pub(super) fn given(file: TopFile, refuse: &FaultAt<'_>) -> Result<TopConfig, ConfigError> {
    let capacity = checked(
        file.capacity,
        "top.capacity",
        &|n: &u64| {
            usize::try_from(*n)
                .ok()
                .filter(|n| (1..=MAX_CAPACITY).contains(n))
                .ok_or_else(|| format!("must be from 1 to {MAX_CAPACITY} keys, got {n}"))
        },
        refuse,
    )?;
    let sample_every = checked(
        file.sample_every,
        "top.sample_every",
        &|n: &u64| {
            u32::try_from(*n)
                .ok()
                .filter(|n| (1..=MAX_SAMPLE_EVERY).contains(n))
                .ok_or_else(|| {
                    format!("must be from 1 to {MAX_SAMPLE_EVERY} (one decision in N), got {n}")
                })
        },
        refuse,
    )?;
    Ok(TopConfig {
        enabled: file.enabled,
        capacity,
        sample_every,
    })
}
