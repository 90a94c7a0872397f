//! What a PostgreSQL run measured, the store's goals judged on it, and its report.

mod document;
mod goals;
mod reading;

use std::time::Duration;

use super::{Approach, Isolation, Race, Scenario};
use crate::report::{Goal, per};

/// One run of the PostgreSQL benchmark.
#[derive(Debug, Clone)]
pub struct PostgresReport {
    /// Unique to the run; part of its schema's name.
    pub run_id: String,
    /// `server_version`.
    pub server_version: String,
    /// `fsync` and `synchronous_commit`: what a commit costs on this server.
    pub durability: String,
    /// The machine's CPUs and load average when the run started.
    pub host_at_start: String,
    /// The same when it ended.
    pub host_at_end: String,
    /// Measured time per cell.
    pub seconds_per_cell: f64,
    /// The connection counts measured.
    pub connections: Vec<usize>,
    /// The isolation levels measured.
    pub isolations: Vec<Isolation>,
    /// Keys of the many_keys scenario.
    pub keys: usize,
    /// One per scenario × isolation × connections × approach, in the order run.
    pub cells: Vec<Cell>,
    /// One per isolation × approach.
    pub over_grant: Vec<OverGrant>,
    /// Flaw (a), one per isolation × approach.
    pub race: Vec<Race>,
    /// Flaw (b), one per approach.
    pub rounding: Vec<Rounding>,
}

/// One approach under one scenario at one isolation and connection count.
#[derive(Debug, Clone)]
pub struct Cell {
    /// The load shape.
    pub scenario: Scenario,
    /// The isolation level.
    pub isolation: Isolation,
    /// The approach.
    pub approach: Approach,
    /// Connections, and as many concurrent workers.
    pub connections: usize,
    /// Calls answered (allowed or refused).
    pub decisions: u64,
    /// Calls allowed.
    pub allowed: u64,
    /// Calls that ended in an error (after any retries).
    pub errors: u64,
    /// Of the errors, duplicate keys (SQLSTATE 23505).
    pub duplicate_key: u64,
    /// Of the errors, serialization failures that outlived the retries (40001).
    pub serialization: u64,
    /// Of the errors, tollgate's calls that ran past the store's timeout.
    pub timeouts: u64,
    /// tollgate's store's statements that still failed to serialize after every attempt (each
    /// fails every check it decided).
    pub gave_up: u64,
    /// Attempts that failed to serialize and were run again.
    pub retried: u64,
    /// Statements sent to PostgreSQL, attempts included: the function's calls, tollgate's
    /// single upserts and batched calls of its decide function.
    pub statements: u64,
    /// From the first call to the last answer.
    pub elapsed: Duration,
    /// CPU time of the benchmark process during the cell (the clients, and tollgate's store,
    /// which runs inside it; not PostgreSQL's), where the OS reports it.
    pub client_cpu: Option<Duration>,
    /// Median latency of a call as its caller sees it, retries and errors included.
    pub p50: Duration,
    /// 99th percentile latency of a call.
    pub p99: Duration,
}

impl Cell {
    /// Answered calls per second.
    pub fn decisions_per_sec(&self) -> f64 {
        per(self.decisions as f64, self.elapsed.as_secs_f64())
    }

    /// Statements per call (answered or failed): below 1 when calls share statements.
    pub fn statements_per_call(&self) -> f64 {
        per(
            self.statements as f64,
            (self.decisions + self.errors) as f64,
        )
    }

    /// Client CPU microseconds per call (answered or failed).
    pub fn client_cpu_per_call(&self) -> Option<f64> {
        self.client_cpu.map(|cpu| {
            per(
                cpu.as_secs_f64() * 1e6,
                (self.decisions + self.errors) as f64,
            )
        })
    }
}

/// The over-grant test of one approach at one isolation: many workers on one small bucket.
#[derive(Debug, Clone)]
pub struct OverGrant {
    /// The isolation level.
    pub isolation: Isolation,
    /// The approach.
    pub approach: Approach,
    /// Concurrent workers, all on one key.
    pub workers: usize,
    /// Connections: one per worker for the function, tollgate's store's for tollgate.
    pub connections: usize,
    /// How long they ran.
    pub seconds: f64,
    /// Bucket capacity.
    pub capacity: u64,
    /// Tokens per second.
    pub rate: u64,
    /// Calls answered.
    pub decisions: u64,
    /// Calls allowed.
    pub allowed: u64,
    /// Calls that failed.
    pub errors: u64,
    /// Of those, tollgate's calls that ran past the store's timeout.
    pub timeouts: u64,
    /// tollgate's store's statements that gave up on 40001.
    pub gave_up: u64,
    /// Attempts retried after a serialization failure.
    pub retried: u64,
}

impl OverGrant {
    /// The most an exact limiter may allow: `capacity + rate × seconds`.
    pub fn max_allowed(&self) -> u64 {
        self.capacity + (self.rate as f64 * self.seconds).floor() as u64
    }

    /// `allowed / max_allowed - 1`: 0 when exact, positive when too many got through,
    /// negative when too few did.
    pub fn over_grant(&self) -> f64 {
        self.allowed as f64 / self.max_allowed() as f64 - 1.0
    }
}

/// Flaw (b): a steady schedule of calls on one key, against the exact expectation.
#[derive(Debug, Clone)]
pub struct Rounding {
    /// The approach.
    pub approach: Approach,
    /// Bucket capacity.
    pub capacity: u64,
    /// Tokens per second.
    pub rate: u64,
    /// The time between calls after the burst.
    pub interval: Duration,
    /// Calls spending the burst, back to back.
    pub burst_calls: u64,
    /// Of those, allowed.
    pub burst_allowed: u64,
    /// Calls on the schedule after the burst.
    pub calls: u64,
    /// Of those, allowed.
    pub allowed: u64,
    /// What an exact token bucket allows of them, at the times they were sent.
    pub expected: u64,
    /// Calls that failed.
    pub errors: u64,
}

impl PostgresReport {
    /// The cell of `approach` under `scenario` at `isolation` with `connections`.
    pub fn cell(
        &self,
        scenario: Scenario,
        isolation: Isolation,
        approach: Approach,
        connections: usize,
    ) -> Option<&Cell> {
        self.cells.iter().find(|c| {
            c.scenario == scenario
                && c.isolation == isolation
                && c.approach == approach
                && c.connections == connections
        })
    }

    /// The over-grant test of `approach` at `isolation`.
    pub fn over_grant_of(&self, isolation: Isolation, approach: Approach) -> Option<&OverGrant> {
        self.over_grant
            .iter()
            .find(|o| o.isolation == isolation && o.approach == approach)
    }

    /// The race of `approach` at `isolation`.
    pub fn race_of(&self, isolation: Isolation, approach: Approach) -> Option<&Race> {
        self.race
            .iter()
            .find(|r| r.isolation == isolation && r.approach == approach)
    }

    /// The rounding schedule of `approach`.
    pub fn rounding_of(&self, approach: Approach) -> Option<&Rounding> {
        self.rounding.iter().find(|r| r.approach == approach)
    }

    /// The store's goals, judged on this run.
    pub fn goals(&self) -> Vec<Goal> {
        goals::judge(self)
    }
}
