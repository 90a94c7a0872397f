//! Issue 50's goals beside the ratios: the server's CPU per request and p99 over the bare
//! handler's, and what the `RateLimit` headers alone cost a bare handler.

use super::super::variant::Variant;
use super::HttpReport;
use crate::report::Goal;

/// The server's CPU per request at most this multiple of the bare handler's.
pub(super) const GOAL_SERVER_CPU: f64 = 1.12;
/// The server's p99 at most this much above the bare handler's, in seconds.
pub(super) const GOAL_SERVER_P99_ADDED: f64 = 100e-6;
/// The bare handler sending the two `RateLimit` headers at least this share of its
/// requests/s without them.
pub(super) const GOAL_HEADERS_RATIO: f64 = 0.98;

impl HttpReport {
    /// The server's CPU and p99 goals (when it ran) and the headers' (when `bare_headers` ran).
    pub(super) fn cost_goals(&self) -> Vec<Goal> {
        let mut goals = Vec::new();
        if let (Some(server), Some(bare)) =
            (self.summary(Variant::Server), self.summary(Variant::Bare))
        {
            let goal = format!(
                "server: CPU per request ≤ {GOAL_SERVER_CPU}× the bare handler's (load \
                 generator included)"
            );
            goals.push(match (server.cpu_per_request, bare.cpu_per_request) {
                (Some(s), Some(b)) if b > 0.0 => Goal {
                    goal,
                    measured: format!("{:.1} vs {:.1} µs: {:.3}×", s * 1e6, b * 1e6, s / b),
                    met: Some(s / b <= GOAL_SERVER_CPU),
                },
                _ => Goal {
                    goal,
                    measured: "CPU per request not measured".into(),
                    met: None,
                },
            });
            let added = server.p99.as_secs_f64() - bare.p99.as_secs_f64();
            goals.push(Goal {
                goal: format!(
                    "server: p99 ≤ the bare handler's + {:.0} µs",
                    GOAL_SERVER_P99_ADDED * 1e6
                ),
                measured: format!(
                    "{:.0} vs {:.0} µs: {:+.0} µs",
                    server.p99.as_secs_f64() * 1e6,
                    bare.p99.as_secs_f64() * 1e6,
                    added * 1e6
                ),
                met: Some(added <= GOAL_SERVER_P99_ADDED),
            });
        }
        if let Some(c) = self.compare(Variant::BareHeaders) {
            goals.push(Goal {
                goal: format!(
                    "bare_headers: ≥ {GOAL_HEADERS_RATIO}× the bare handler's requests/s (the \
                     headers' bytes alone, nothing decided)"
                ),
                measured: format!(
                    "{:.3}× (per round: {})",
                    c.ratio,
                    super::ratios(&c.round_ratios)
                ),
                met: Some(c.ratio >= GOAL_HEADERS_RATIO),
            });
        }
        goals
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::super::Run;
    use super::*;

    /// One second of `responses`, at `cpu_us` of CPU a request and a p99 of `p99_us`.
    fn run(variant: Variant, responses: u64, cpu_us: u64, p99_us: u64) -> Run {
        Run {
            variant,
            round: 1,
            responses,
            non_200: 0,
            errors: 0,
            with_ratelimit: 0,
            elapsed: Duration::from_secs(1),
            p50: Duration::from_micros(p99_us / 2),
            p99: Duration::from_micros(p99_us),
            cpu: Some(Duration::from_micros(cpu_us * responses)),
            others_cpu: Some(Duration::ZERO),
        }
    }

    fn report(runs: Vec<Run>) -> HttpReport {
        HttpReport {
            seconds_per_run: 1.0,
            connections: 64,
            rounds: 1,
            keys: 1000,
            warmup_seconds: 0.0,
            cores: 2,
            tls: None,
            runs,
        }
    }

    #[test]
    fn the_servers_cpu_and_p99_and_the_headers_ratio_are_judged() {
        let met = report(vec![
            run(Variant::Bare, 100_000, 17, 500),
            run(Variant::BareHeaders, 99_000, 17, 500),
            run(Variant::Server, 90_000, 19, 600),
        ]);
        let goals = met.cost_goals();
        let judged: Vec<Option<bool>> = goals.iter().map(|g| g.met).collect();
        assert_eq!(judged, [Some(true), Some(true), Some(true)], "{goals:?}");
        assert!(
            goals[0].measured.contains("19.0 vs 17.0 µs: 1.118×"),
            "{goals:?}"
        );
        assert!(goals[1].measured.contains("+100 µs"), "{goals:?}");

        let missed = report(vec![
            run(Variant::Bare, 100_000, 17, 500),
            run(Variant::BareHeaders, 97_000, 17, 500),
            run(Variant::Server, 72_000, 23, 850),
        ]);
        let judged: Vec<Option<bool>> = missed.cost_goals().iter().map(|g| g.met).collect();
        assert_eq!(judged, [Some(false), Some(false), Some(false)]);
        // Without the server, only the headers' goal.
        let middleware = report(vec![
            run(Variant::Bare, 100_000, 17, 500),
            run(Variant::BareHeaders, 99_000, 17, 500),
        ]);
        assert_eq!(middleware.cost_goals().len(), 1);
    }
}
