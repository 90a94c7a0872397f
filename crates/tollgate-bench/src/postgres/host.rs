//! The machine the run shares: its CPUs and load average, reported because a benchmark on a
//! busy machine measures the machine too.

/// "2 CPUs, load average 4.77" (what Linux's `/proc/loadavg` says over the last minute), or
/// just the CPUs where there is no such file.
pub(crate) fn describe() -> String {
    let cpus = std::thread::available_parallelism().map_or(1, usize::from);
    let load = std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|l| l.split_whitespace().next().map(str::to_owned));
    match load {
        Some(load) => format!("{cpus} CPUs, load average {load}"),
        None => format!("{cpus} CPUs"),
    }
}
