//! The failover runs as a [`Report`]: a row per run, and the goals: decisions exact again within
//! the failover's own time and a second, no over-grant where commits wait for the replica, and
//! the over-grant where they do not, reported and explained.

use std::time::Duration;

use super::{FailPolicy, Seen};
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
    /// What answered the decisions the store could not make.
    pub fail_policy: FailPolicy,
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
    /// The run on one line, for stderr.
    pub fn line(&self) -> String {
        let s = &self.seen;
        format!(
            "failover {} ({}, {}, fail policy {}): decides again {:.2} s after the fault \
             (failover {:.2} s), {} answered by the fail policy ({} allowed), over-grant {} \
             of {} allowed, {:.0} decisions/s before, {:.0} after",
            self.store,
            self.durability,
            self.load,
            self.fail_policy.name(),
            s.exact_again,
            self.failover_s,
            s.fail_policy,
            s.fail_policy_allowed,
            s.over_grant,
            s.allowed,
            s.rate_before,
            s.rate_after
        )
    }

    /// Whether decisions were exact again within the failover's time and a second.
    fn in_time(&self) -> bool {
        self.seen.exact_again <= self.failover_s + 1.0
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
                r.fail_policy.name().into(),
                format!("{:.2}", r.failover_s),
                format!("{:.2}", s.exact_again),
                s.fail_policy.to_string(),
                s.fail_policy_allowed.to_string(),
                s.allowed.to_string(),
                s.over_grant.to_string(),
                format!("{:.0}", s.rate_before),
                format!("{:.0}", s.rate_after),
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
            ("decides again after s", Right),
            ("fail-policy answers", Right),
            ("of them allowed", Right),
            ("store allowed", Right),
            ("over-grant", Right),
            ("decisions/s before", Right),
            ("decisions/s after", Right),
            ("slowest ms", Right),
        ];
        Report {
            name: "failover",
            title: "Failover: what a replica's promotion costs a rate limiter".into(),
            intro: vec![format!(
                "{} clients decide one token each, one decision after the other, on one hot key \
                 (100 tokens, 10 a second) or on 256 keys (5 tokens, 1 a second each): at the \
                 limit, so a bucket that rolls back shows as tokens granted twice. {} s of load, \
                 the fault, and {} s more once the store decides again; the store's timeout is \
                 {} ms, its deny cache off (every decision goes to the store). Each run starts \
                 its own topology from the test kit.",
                self.clients,
                self.seconds,
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
                    r.store, r.durability, r.load, r.seen.exact_again
                )
            })
            .collect();
        let latest = self
            .runs
            .iter()
            .max_by(|a, b| a.seen.exact_again.total_cmp(&b.seen.exact_again));
        if let Some(latest) = latest {
            goals.push(Goal {
                goal: "Decisions exact again within the failover's own time + 1 s".into(),
                measured: if late.is_empty() {
                    format!(
                        "every run; the latest {:.2} s after its fault, whose failover took {:.2} s",
                        latest.seen.exact_again, latest.failover_s
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
            goals.push(Goal {
                goal: "With durability (commits wait for the replica): 0 over-grant".into(),
                measured: format!("{over} tokens over {} runs", durable.len()),
                met: Some(over == 0),
            });
        }
        for r in self.runs.iter().filter(|r| !r.durable) {
            goals.push(Goal {
                goal: format!(
                    "Without durability, the over-grant reported: {}, {}, {}",
                    r.store, r.fault, r.load
                ),
                measured: format!(
                    "{} over the bound, of {} tokens allowed (why: below)",
                    r.seen.over_grant, r.seen.allowed
                ),
                // The goal is the figure, reported: any figure meets it.
                met: Some(true),
            });
        }
        let deny_allows: u64 = self
            .runs
            .iter()
            .filter(|r| r.fail_policy == FailPolicy::Deny)
            .map(|r| r.seen.fail_policy_allowed)
            .sum();
        if self.runs.iter().any(|r| r.fail_policy == FailPolicy::Deny) {
            goals.push(Goal {
                goal: "Fail policy `deny`: no decision allowed by the fail policy".into(),
                measured: format!("{deny_allows} allowed"),
                met: Some(deny_allows == 0),
            });
        }
        goals
    }
}

fn notes() -> Vec<String> {
    vec![
        "*failover s*: the fault as the run injects it, the wait for the promotion included \
         (PostgreSQL: the kill and `pg_ctl promote -w` until the standby takes writes)."
            .into(),
        "*decides again after s*: from the fault to the end of the last decision the store could \
         not make; from then on it made every one, for a second at least. Its decisions are exact \
         again from then: on the promoted replica's buckets, which may be behind."
            .into(),
        "*fail-policy answers*: decisions the store could not make (an error, or its timeout), \
         answered by the fail policy: allowed under `open`, denied under `deny`. They are not in \
         *store allowed* nor in the over-grant."
            .into(),
        "*over-grant*: per key, the most by which the tokens the store allowed from any instant \
         (the start of a 100 ms slice) to the end exceed the exact bound over that time, \
         capacity + rate × time; summed over the keys. It is the writes the failover lost: \
         commits answered by the old primary that had not reached the replica, whose tokens the \
         promoted replica grants again. Where a commit waits for the replica there are none; \
         where it does not, at most the tokens granted in the replica's lag before the fault, \
         less what the bucket refilled while the store could not decide (a failover longer than \
         `capacity / rate` shows none: the bucket would have been full again anyway)."
            .into(),
        "*decisions/s*: the store's own decisions per second before the fault (after a 0.3 s \
         warm-up) and from 0.3 s after it decides again to the end."
            .into(),
    ]
}
