//! Resident memory, read around building a limiter: what holding the keys costs the process,
//! whatever the allocator and the data structure, measured the same way for every contender.

/// The process's resident memory in bytes, counted from its page tables
/// (`/proc/self/smaps_rollup`, Linux 4.14 and later); `None` elsewhere.
///
/// Not `/proc/self/statm` or `VmRSS`: those are counters the kernel may update lazily (per
/// thread, every 64 page faults, before Linux 6.2), while the rollup walks the pages present.
pub(super) fn resident_bytes() -> Option<u64> {
    let rollup = std::fs::read_to_string("/proc/self/smaps_rollup").ok()?;
    let kib: u64 = rollup
        .lines()
        .find_map(|line| line.strip_prefix("Rss:"))?
        .trim()
        .strip_suffix("kB")?
        .trim()
        .parse()
        .ok()?;
    kib.checked_mul(1024)
}

/// What `build` returns, and how many bytes of resident memory the process gained while it
/// ran (0 if it shrank; `None` where resident memory cannot be read).
pub(super) fn grown<T>(build: impl FnOnce() -> T) -> (T, Option<u64>) {
    let before = resident_bytes();
    let built = build();
    let after = resident_bytes();
    (built, before.zip(after).map(|(b, a)| a.saturating_sub(b)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn touching_memory_shows_where_linux_reports_it() {
        if resident_bytes().is_none() {
            return;
        }
        // 64 MiB, every page written: above glibc's mmap threshold, so fresh pages.
        let (block, grew) = grown(|| vec![1u8; 64 << 20]);
        let grew = grew.unwrap();
        assert!(grew >= 60 << 20, "{grew}");
        // Generous above: tests of other modules may run beside this one, in this process.
        assert!(grew < 128 << 20, "{grew}");
        drop(block);
    }
}
