//! The memory run as a [`Report`]: the goals, time per check beside governor's per row, memory
//! per key, every round, and a chart of checks/s per row.

use super::{MemoryReport, Row, Run, scenario_name};
use crate::memory::Contender;
use crate::report::Align::{Left, Right};
use crate::report::{Chart, Group, Report, Section, Table, thousands};

/// The contenders of a line of the time table: tollgate's limiter and store, and governor, on
/// one clock. The chart shows them all, clock by clock (the key walk alone would dwarf them).
const BY_CLOCK: [[Contender; 3]; 3] = [
    [
        Contender::TollgateLimiter,
        Contender::TollgateStore,
        Contender::Governor,
    ],
    [
        Contender::TollgateLimiterTsc,
        Contender::TollgateStoreTsc,
        Contender::GovernorTsc,
    ],
    [
        Contender::TollgateLimiterCoarse,
        Contender::TollgateStoreCoarse,
        Contender::GovernorCoarse,
    ],
];

impl MemoryReport {
    /// The report as written to `memory.md` and `memory.svg`.
    pub fn report(&self) -> Report {
        let scenarios: Vec<String> = self.scenarios.iter().map(|&k| scenario_name(k)).collect();
        let threads: Vec<String> = self.threads.iter().map(ToString::to_string).collect();
        Report {
            name: "memory",
            title: "Memory store: tollgate beside governor".into(),
            intro: vec![format!(
                "One check of cost 1 on a key that already has a bucket, as a server makes it, \
                 in this process: {} on {} threads, {} rounds of about {} s per cell (the cells \
                 in turn within each round), the median per cell; {} cores, shared with \
                 whatever else the machine runs.",
                scenarios.join(", "),
                threads.join(" and "),
                self.rounds,
                self.seconds_per_run,
                self.cores
            )]
            .into_iter()
            .chain(self.loads_per_check())
            .chain(self.others_cpu_share().map(|share| {
                format!(
                    "While the runs were timed, other processes used {:.0}% of a core on \
                     average (a core shared with them slows the runs of 2 threads most).",
                    share * 100.0
                )
            }))
            .collect(),
            goals: self.goals(),
            sections: vec![self.times(), self.bytes(), self.every_round()],
            notes: self.notes(),
            charts: vec![self.chart()],
        }
    }

    /// The large scenario's checks at one thread in dependent loads, when measured.
    fn loads_per_check(&self) -> Option<String> {
        let load = self.load_ns.filter(|&ns| ns > 0.0)?;
        let keys = *self.scenarios.last()?;
        let loads = |contender| Some(self.ns_per_check(keys, 1, contender)? / load);
        Some(format!(
            "A memory load that depends on the one before, over 64 MB, took {load:.1} ns here: at \
             {}, one thread, a check was {:.1} such loads through `MemoryLimiter::check` (TSC) \
             and {:.1} through governor (TSC), reading the caller's key (its `String`, then its \
             bytes) two of them for both. Over many keys a ratio is bounded by how many loads \
             each chains.",
            scenario_name(keys),
            loads(Contender::TollgateLimiterTsc)?,
            loads(Contender::GovernorTsc)?,
        ))
    }

    fn times(&self) -> Section {
        let columns = [
            ("scenario", Left),
            ("threads", Right),
            ("clock", Left),
            ("tollgate limiter ns", Right),
            ("tollgate store ns", Right),
            ("governor ns", Right),
            ("ratio limiter", Right),
            ("ratio store", Right),
            ("key walk ns", Right),
        ];
        let rows = self.rows().into_iter().flat_map(|row| {
            BY_CLOCK.map(|[limiter, store, governor]| {
                vec![
                    scenario_name(row.keys),
                    row.threads.to_string(),
                    limiter.clock().into(),
                    ns(row.ns(limiter)),
                    ns(row.ns(store)),
                    ns(row.ns(governor)),
                    ratio(&row, limiter),
                    ratio(&row, store),
                    ns(row.ns(Contender::KeyWalk)),
                ]
            })
        });
        Section::table(
            "Time per check",
            vec![format!(
                "Nanoseconds per check at aggregate throughput (wall time ÷ the checks of every \
                 thread, so that 1e9 ÷ ns is the checks/s of all threads together), median of \
                 {} rounds. Each line is one clock, read by every limiter on it: `Instant` \
                 (`std::time::Instant`), `TSC` (the time-stamp counter through `quanta`) or \
                 `coarse` (one tollgate `CoarseClock`, a time a thread writes once a \
                 millisecond). \
                 ratio = tollgate checks/s ÷ governor checks/s on the same clock: above 1, \
                 tollgate is faster.",
                self.rounds
            )],
            Table::new(&columns, rows),
        )
    }

    fn bytes(&self) -> Section {
        let f = &self.footprint;
        let per_key = |bytes: Option<u64>| {
            bytes.map_or_else(|| "not measured".into(), |b| format!("{:.1}", f.per_key(b)))
        };
        let megabytes = |bytes: Option<u64>| {
            bytes.map_or_else(
                || "not measured".into(),
                |b| format!("{:.1}", b as f64 / 1e6),
            )
        };
        let columns = [
            ("limiter", Left),
            ("measured by", Left),
            ("bytes per key", Right),
            ("MB in all", Right),
        ];
        let tollgate = "tollgate `MemoryStore`";
        let governor = "governor keyed `RateLimiter<String>` (`DashMap`, `MonotonicClock`)";
        let gained = "resident memory gained";
        let rows = [
            (
                tollgate,
                "its tables (`allocated_bytes()`)",
                Some(f.tollgate_tables),
            ),
            (tollgate, gained, f.tollgate_rss),
            (governor, gained, f.governor_rss),
        ]
        .map(|(limiter, how, bytes)| {
            vec![limiter.into(), how.into(), per_key(bytes), megabytes(bytes)]
        });
        Section::table(
            "Memory per key",
            vec![format!(
                "{} distinct keys, `user:0` to `user:{}`, each charged once into a fresh \
                 limiter of each kind; these limiters then serve the {} scenario.",
                thousands(f.keys as f64),
                f.keys.saturating_sub(1),
                scenario_name(f.keys)
            )],
            Table::new(&columns, rows),
        )
    }

    fn every_round(&self) -> Section {
        let columns = [
            ("scenario", Left),
            ("threads", Right),
            ("contender", Left),
            ("ns per check, round by round", Right),
            ("others' CPU s, round by round", Right),
        ];
        let rows = self.rows().into_iter().flat_map(|row| {
            Contender::ALL.map(|contender| {
                let runs: Vec<&Run> = self.runs_of(row.keys, row.threads, contender).collect();
                let each = |f: &dyn Fn(&Run) -> String| {
                    runs.iter().map(|r| f(r)).collect::<Vec<_>>().join(", ")
                };
                vec![
                    scenario_name(row.keys),
                    row.threads.to_string(),
                    contender.to_string(),
                    each(&|r| format!("{:.1}", r.ns_per_check())),
                    each(&|r| {
                        r.others_cpu
                            .map_or_else(|| "–".into(), |d| format!("{:.2}", d.as_secs_f64()))
                    }),
                ]
            })
        });
        Section::table(
            "Every round",
            vec![
                "The spread across rounds shows how much the machine moved during the run; \
                 others' CPU is the CPU time the rest of the machine used during each run (from \
                 `/proc/stat`, in 10 ms ticks): judge the figures on runs where it is near 0."
                    .into(),
            ],
            Table::new(&columns, rows),
        )
    }

    fn notes(&self) -> Vec<String> {
        let mut notes: Vec<String> = Contender::ALL
            .iter()
            .map(|&c| format!("**{c}**: {}.", describe(c)))
            .collect();
        notes.extend([
            "The keys are `String`s such as `user:42`, built before anything is timed. Over many \
             keys a xorshift walk (the same for every contender) picks the next one, so that \
             caches see a spread of clients rather than a sequential scan. With 2 threads each \
             thread walks its own half of the keys (odd or even indices); on the hot key both \
             hammer the same bucket."
                .to_owned(),
            "The policy is the same on both sides: a burst of `u32::MAX` refilled at 1000 per \
             second (governor `Quota::per_second(1000).allow_burst(u32::MAX)`, tollgate \
             `Policy::token_bucket(u32::MAX, 1000, 1 s)`). Every key is first charged 1,000,000 \
             tokens, which puts its bucket about 1000 s in debt: every timed check is allowed \
             and takes the compare-and-swap write path on both sides, and tollgate never sweeps \
             a benchmarked key as idle. The last goal counts the denials to show it."
                .to_owned(),
            format!(
                "Timing: before the rounds, each cell runs untimed, doubling its checks until a \
                 run lasts {} s, which sets its checks per run for about {} s. Each timed run \
                 first makes a twentieth of its checks untimed (the cell before it evicted this \
                 one's tables from the caches), then its threads start together at a barrier; \
                 the wall time ends when the last thread is done. The cells run in turn within \
                 each round, so that drift of the machine hits every contender alike.",
                self.warmup_seconds, self.seconds_per_run
            ),
            "Clocks: on `Instant` lines, tollgate's `MonotonicClock` and governor's \
             `clock::MonotonicClock`, both `std::time::Instant`; on `TSC` lines, tollgate's \
             `QuantaClock` (feature `quanta`) and governor's `clock::QuantaClock`, both the \
             time-stamp counter read through `quanta` and scaled to nanoseconds; on `coarse` \
             lines, one tollgate `CoarseClock` (its default resolution, 1 ms), which governor \
             reads through a `clock::Clock` of the benchmark's (`GovernorCoarse`): the same \
             load of the same time for both. Each governor \
             limiter is built with `RateLimiter::dashmap_with_clock` and its clock named, as \
             governor's `quanta` feature (on here) changes its `DefaultClock`. Memory per key \
             is measured on the `Instant` limiters."
                .to_owned(),
            "Memory per key: the process's resident memory (from its page tables, \
             `/proc/self/smaps_rollup`; not measured outside Linux) before and after a limiter \
             takes the keys, ÷ the keys, measured the same way for both. It includes what the \
             allocator keeps around the data (block headers, freed memory not returned to the \
             system), which `allocated_bytes()` (tollgate's tables alone) does not. governor \
             also holds a copy of every key as its own `String`; tollgate stores a short key \
             inside its slot. tollgate is measured first: what its tables freed as they grew \
             may stay resident and be reused by governor's allocations, which can only make \
             governor's figure smaller."
                .to_owned(),
        ]);
        notes
    }

    /// Checks/s per row, aggregate over threads, for each contender but the key walk.
    fn chart(&self) -> Chart {
        Chart {
            title: format!("Checks per second, median of {} rounds", self.rounds),
            y_label: "checks/s (higher is better)".into(),
            series: BY_CLOCK
                .iter()
                .flatten()
                .map(|c| c.call().replace('`', ""))
                .collect(),
            groups: self
                .rows()
                .into_iter()
                .map(|row| Group {
                    label: row.label(),
                    values: BY_CLOCK
                        .iter()
                        .flatten()
                        .map(|&c| row.ns(c).filter(|ns| *ns > 0.0).map(|ns| 1e9 / ns))
                        .collect(),
                })
                .collect(),
        }
    }
}

/// What `contender` times, for the notes.
fn describe(contender: Contender) -> &'static str {
    match contender {
        Contender::TollgateLimiter => {
            "`MemoryLimiter::check(key, 1)`, the store bound to its policy once, as a server \
             does for a configured limit"
        }
        Contender::TollgateStore => {
            "`MemoryStore::check(key, &policy, 1)`, which also encodes the policy's numbers \
             into the bucket's name at every check"
        }
        Contender::Governor => {
            "governor 0.10's keyed limiter (`RateLimiter::dashmap_with_clock` on \
             `clock::MonotonicClock`), `check_key(&key)`: a `DashMap` with std's `RandomState`"
        }
        Contender::TollgateLimiterTsc => {
            "`MemoryLimiter::check(key, 1)` on a store built with `.clock(QuantaClock::new())`"
        }
        Contender::TollgateStoreTsc => {
            "`MemoryStore::check(key, &policy, 1)` on a store built with \
             `.clock(QuantaClock::new())`"
        }
        Contender::GovernorTsc => "governor's keyed limiter as above, on `clock::QuantaClock`",
        Contender::TollgateLimiterCoarse => {
            "`MemoryLimiter::check(key, 1)` on a store built with `.clock(CoarseClock::new())`"
        }
        Contender::TollgateStoreCoarse => {
            "`MemoryStore::check(key, &policy, 1)` on a store built with \
             `.clock(CoarseClock::new())`"
        }
        Contender::GovernorCoarse => {
            "governor's keyed limiter as above, on the same `CoarseClock` (`GovernorCoarse`)"
        }
        Contender::TollgateLimiterTop => {
            "`MemoryLimiter::check(key, 1)` as `tollgate_limiter`, then \
             `Summary::record(key, denied)`: the server's record of each decision in its policy's \
             summary of who is denied and allowed (`GET /v1/top`, the default 1,000 keys, one decision in `DEFAULT_SAMPLE_EVERY` = 64 recorded); the \
             difference from `tollgate_limiter` is the summary's cost per check"
        }
        Contender::KeyWalk => {
            "the loop alone (pick the next key, read its last byte): the floor under every \
             other figure"
        }
    }
}

/// Nanoseconds with one decimal, `–` for a cell that did not run.
fn ns(value: Option<f64>) -> String {
    value.map_or_else(|| "–".into(), |ns| format!("{ns:.1}"))
}

/// `row`'s ratio for `contender` with two decimals, `–` when it cannot be taken.
fn ratio(row: &Row, contender: Contender) -> String {
    row.ratio(contender)
        .map_or_else(|| "–".into(), |r| format!("{r:.2}"))
}
