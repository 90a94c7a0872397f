//! The failover runs as a [`Report`]: a row per run, and the goals: the store answering again
//! within the failover's own time and a second; with the replica made to lag, no over-grant
//! where commits wait for it, and some where they do not (the control: the lag was made); the
//! `deny` fail policy allowing nothing.

use std::time::Duration;

use super::Seen;
use crate::report::Align::{Left, Right};
use crate::report::{Goal, Report, Section, Table};

/// One failover, measured.
#[derive(Debug, Clone, PartialEq)]
pub struct Run {
    /// The store (`PostgreSQL`, `Redis Sentinel`).
    pub store: &'static str,
    /// What was done to the primary.
    pub fault: &'static str,
    /// How writes reach the replica, in words.
    pub durability: &'static str,
    /// Whether an answered write is on the replica before its answer.
    pub durable: bool,
    /// The load, in words.
    pub load: &'static str,
    /// Whether `tollgate::store::guarded::FailPolicy::Deny` answered the decisions the store
    /// could not make (else `Allow`).
    pub deny: bool,
    /// Seconds the failover itself took: the kill and the promotion waited for.
    pub failover_s: f64,
    /// What the clients saw.
    pub seen: Seen,
    /// On Redis, what the primary spent per decision before the fault.
    pub redis: Option<RedisCost>,
}

/// What Redis spent per decision (`INFO commandstats` of the primary, from the start of the
/// load to the fault).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RedisCost {
    /// Commands clients sent (`EVALSHA`, `WAIT`) per decision.
    pub calls: f64,
    /// Microseconds Redis spent executing them, per decision.
    pub us: f64,
}

impl Run {
    /// The fail policy's name in the server's configuration.
    fn fail_policy(&self) -> &'static str {
        if self.deny { "deny" } else { "open" }
    }

    /// The over-grant, and its range when failed calls may have charged more.
    fn over_grant(&self) -> String {
        let s = &self.seen;
        if s.over_grant_high > s.over_grant {
            format!("{}–{}", s.over_grant, s.over_grant_high)
        } else {
            s.over_grant.to_string()
        }
    }

    /// The run on one line, for stderr.
    pub fn line(&self) -> String {
        let s = &self.seen;
        format!(
            "failover {} ({}, {}, fail policy {}): answers again {:.2} s after the fault, \
             exact again {:.2} s (failover {:.2} s), {} answered by the fail policy ({} \
             allowed), over-grant {} of {} allowed, {:.0} decisions/s before, {:.0} after",
            self.store,
            self.durability,
            self.load,
            self.fail_policy(),
            s.answers_again,
            s.exact_again,
            self.failover_s,
            s.fail_policy,
            s.fail_policy_allowed,
            self.over_grant(),
            s.allowed,
            s.rate_before,
            s.rate_after
        )
    }

    /// Whether the store answered again within the failover's time and a second.
    fn in_time(&self) -> bool {
        self.seen.answers_again <= self.failover_s + 1.0
    }
}

/// Every run of `tollgate-bench failover`.
#[derive(Debug, Clone, PartialEq)]
pub struct FailoverReport {
    /// Clients deciding at once.
    pub clients: usize,
    /// Seconds of load before each fault, and after the store decides again.
    pub seconds: f64,
    /// The store's timeout: the longest a decision waits before the fail policy answers.
    pub timeout: Duration,
    /// How far behind the replicas were made to fall before the fault.
    pub lag: Duration,
    /// Every run, in order.
    pub runs: Vec<Run>,
}

impl FailoverReport {
    /// The report as written to `failover.md`.
    pub fn report(&self) -> Report {
        let rows = self.runs.iter().map(|r| {
            let s = &r.seen;
            vec![
                r.store.into(),
                r.fault.into(),
                r.durability.into(),
                r.load.into(),
                r.fail_policy().into(),
                format!("{:.2}", r.failover_s),
                format!("{:.2}", s.answers_again),
                format!("{:.2}", s.exact_again),
                s.fail_policy.to_string(),
                s.fail_policy_allowed.to_string(),
                s.allowed.to_string(),
                r.over_grant(),
                format!("{:.0}", s.rate_before),
                format!("{:.0}", s.rate_after),
                format!("{:.2}", s.p50_ms),
                format!("{:.2}", s.p99_ms),
                format!("{:.0}", s.slowest_ms),
            ]
        });
        let columns = [
            ("store", Left),
            ("fault", Left),
            ("writes reach the replica", Left),
            ("load", Left),
            ("fail policy", Left),
            ("failover s", Right),
            ("answers again after s", Right),
            ("exact again after s", Right),
            ("fail-policy answers", Right),
            ("of them allowed", Right),
            ("store allowed", Right),
            ("over-grant", Right),
            ("decisions/s before", Right),
            ("decisions/s after", Right),
            ("p50 ms before", Right),
            ("p99 ms before", Right),
            ("slowest ms", Right),
        ];
        Report {
            name: "failover",
            title: "Failover: what a replica's promotion costs a rate limiter".into(),
            intro: vec![format!(
                "{} clients decide one token each, one decision after the other, on one hot key \
                 (100 tokens, 10 a second) or on 256 keys (5 tokens, 1 a second each): at the \
                 limit, so a bucket that rolls back shows as tokens granted twice. {} s of load, \
                 the replicas made to lag for {} ms (PostgreSQL: the primary's WAL sender \
                 stopped; Redis: the primary drops its replicas' links, which come back within \
                 a second), the fault, and {} s more once the store answers again; the store's \
                 timeout is {} ms, its deny cache off (every decision goes to the store), \
                 `tollgate::store::guarded::Guarded` answering what it cannot. Each run starts \
                 its own topology from the test kit.",
                self.clients,
                self.seconds,
                self.lag.as_millis(),
                self.seconds,
                self.timeout.as_millis()
            )],
            goals: self.goals(),
            sections: vec![
                Section::table("Each run", Vec::new(), Table::new(&columns, rows)),
                self.durability_cost(),
            ],
            notes: notes(),
            charts: Vec::new(),
        }
    }

    /// The Redis runs' decisions before the fault, durability off and on side by side.
    fn durability_cost(&self) -> Section {
        let rows = self.runs.iter().filter_map(|r| {
            let cost = r.redis?;
            Some(vec![
                r.durability.into(),
                r.fault.into(),
                r.load.into(),
                format!("{:.0}", r.seen.rate_before),
                format!("{:.3}", cost.calls),
                format!("{:.2}", cost.us),
            ])
        });
        let columns = [
            ("Redis writes", Left),
            ("run", Left),
            ("load", Left),
            ("decisions/s", Right),
            ("Redis calls/decision", Right),
            ("Redis µs/decision", Right),
        ];
        Section::table(
            "What durability costs a decision on Redis",
            vec![
                "Before each fault: the store's decisions per second, and the commands clients \
                 sent the primary (`EVALSHA`, and `WAIT` with durability) and the time Redis \
                 spent executing them (`INFO commandstats`), per decision."
                    .into(),
            ],
            Table::new(&columns, rows),
        )
    }

    fn goals(&self) -> Vec<Goal> {
        let mut goals = Vec::new();
        let late: Vec<String> = self
            .runs
            .iter()
            .filter(|r| !r.in_time())
            .map(|r| {
                format!(
                    "{} ({}, {}): {:.2} s",
                    r.store, r.durability, r.load, r.seen.answers_again
                )
            })
            .collect();
        let latest = self
            .runs
            .iter()
            .max_by(|a, b| a.seen.answers_again.total_cmp(&b.seen.answers_again));
        if let Some(latest) = latest {
            goals.push(Goal {
                goal: "The store answers again within the failover's own time + 1 s".into(),
                measured: if late.is_empty() {
                    format!(
                        "every run; the latest {:.2} s after its fault, whose failover took {:.2} s",
                        latest.seen.answers_again, latest.failover_s
                    )
                } else {
                    format!("late: {}", late.join("; "))
                },
                met: Some(late.is_empty()),
            });
        }
        let durable: Vec<&Run> = self.runs.iter().filter(|r| r.durable).collect();
        if durable.is_empty() {
            goals.push(Goal::unmeasured(
                "With durability: 0 over-grant",
                "no run waited for the replica",
            ));
        } else {
            let over: u64 = durable.iter().map(|r| r.seen.over_grant).sum();
            let high: u64 = durable.iter().map(|r| r.seen.over_grant_high).sum();
            goals.push(Goal {
                goal: "With durability (writes wait for the replica), the replica behind: 0 \
                       over-grant from the store's answers"
                    .into(),
                measured: format!(
                    "{over} tokens over {} runs ({high} counting every failed call as charged)",
                    durable.len()
                ),
                met: Some(over == 0),
            });
        }
        // The control: without durability the lag made must show, or the goal above proves
        // nothing.
        for r in self.runs.iter().filter(|r| !r.durable && !r.deny) {
            goals.push(Goal {
                goal: format!(
                    "Control, without durability the lag shows (over-grant > 0): {}, {}, {}",
                    r.store, r.fault, r.load
                ),
                measured: format!(
                    "{} over the bound, of {} tokens allowed",
                    r.over_grant(),
                    r.seen.allowed
                ),
                met: Some(r.seen.over_grant > 0),
            });
        }
        let deny: Vec<&Run> = self.runs.iter().filter(|r| r.deny).collect();
        if !deny.is_empty() {
            let allowed: u64 = deny
                .iter()
                .map(|r| r.seen.fail_policy_allowed + r.seen.guard_failed_open)
                .sum();
            let errors: u64 = deny.iter().map(|r| r.seen.guard_errors).sum();
            goals.push(Goal {
                goal: "Fail policy `deny`: the store failed, and the policy allowed nothing".into(),
                measured: format!("{errors} calls failed, {allowed} allowed by the policy"),
                met: Some(errors > 0 && allowed == 0),
            });
        }
        goals
    }
}

fn notes() -> Vec<String> {
    vec![
        "*failover s*: the fault as the run injects it, the lag made and the wait for the \
         promotion included (PostgreSQL: the kit's `pg_ctl promote -w` and its `psql` polls until \
         the standby takes writes)."
            .into(),
        "*answers again after s*: from the fault to the end of the last decision the store could \
         not make; from then on it made every one, for a second at least. *exact again after s*: \
         from the fault to the end of the last 10 ms window in which the over-grant grew (0 when \
         there was none): the tokens the promoted replica grants again come after the store \
         answers again."
            .into(),
        "*fail-policy answers*: decisions from the fault on that the store could not make (an \
         error, or its timeout), answered by `Guarded`'s fail policy: allowed under `open`, \
         denied under `deny`. They are not in *store allowed*."
            .into(),
        "*over-grant*: per key, the most by which the tokens the store allowed in any window of \
         10 ms slices (by the start of their decisions) exceed capacity + rate × (the window + \
         the slowest decision, when its charge may have fallen); summed over the keys. It is the \
         writes the failover lost: grants answered by the old primary that had not reached the \
         replica, granted again by the promoted one. A range's top counts every failed call as \
         a grant too: a call can charge and still fail (a commit whose answer died with its \
         connection, a write whose `WAIT` fell short). The lag the run makes is what an \
         asynchronous replica loses; less what the bucket refilled while the store could not \
         decide (a failover longer than `capacity / rate` shows none)."
            .into(),
        "*p50/p99 ms before*: how long the store's decisions took before the fault (after the \
         warm-up), to 0.02 ms: the latency durability adds is the difference between runs."
            .into(),
        "*decisions/s*: the store's own decisions per second before the fault (after a 0.3 s \
         warm-up) and from 0.3 s after it answers again to the end."
            .into(),
    ]
}
