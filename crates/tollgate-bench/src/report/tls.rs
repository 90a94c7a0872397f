//! What TLS costs a front end: its figures over TLS divided by the same front end's in
//! plaintext, measured in the same rounds. The HTTP and gRPC reports both show it, as one
//! table built here.

use super::numbers::{per, thousands};
use super::{Align, Table};

/// One front end's medians across its rounds: throughput and latency percentiles (each
/// benchmark in its own units, the same for both sides of a comparison).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Medians {
    /// Requests or decisions per second.
    pub per_sec: f64,
    /// Median latency.
    pub p50: f64,
    /// 99th percentile latency.
    pub p99: f64,
}

/// A front end over TLS beside itself in plaintext.
#[derive(Debug, Clone, PartialEq)]
pub struct TlsCost {
    /// In plaintext.
    pub plaintext: Medians,
    /// Over TLS.
    pub tls: Medians,
    /// Each round's throughput over TLS divided by plaintext's in the same round: runs seconds
    /// apart, so each pair sees the same state of the machine.
    pub round_ratios: Vec<f64>,
}

impl TlsCost {
    /// Throughput over TLS / in plaintext (below 1: TLS serves fewer).
    pub fn throughput(&self) -> f64 {
        per(self.tls.per_sec, self.plaintext.per_sec)
    }

    /// Median latency over TLS / in plaintext (above 1: TLS answers later).
    pub fn p50(&self) -> f64 {
        per(self.tls.p50, self.plaintext.p50)
    }

    /// 99th percentile over TLS / in plaintext.
    pub fn p99(&self) -> f64 {
        per(self.tls.p99, self.plaintext.p99)
    }
}

/// The table of `rows`, each a front end (named in a column headed `what`) and its cost;
/// throughput is counted in `rate` (`requests/s`, `decisions/s`).
pub(crate) fn table(what: &str, rate: &str, rows: &[(String, TlsCost)]) -> Table {
    let plaintext = format!("plaintext {rate}");
    let tls = format!("TLS {rate}");
    let columns = [
        (what, Align::Left),
        (plaintext.as_str(), Align::Right),
        (tls.as_str(), Align::Right),
        ("throughput TLS / plaintext", Align::Right),
        ("per round", Align::Right),
        ("p50 TLS / plaintext", Align::Right),
        ("p99 TLS / plaintext", Align::Right),
    ];
    let rows = rows.iter().map(|(name, cost)| {
        vec![
            name.clone(),
            thousands(cost.plaintext.per_sec),
            thousands(cost.tls.per_sec),
            format!("{:.3}", cost.throughput()),
            cost.round_ratios
                .iter()
                .map(|r| format!("{r:.3}"))
                .collect::<Vec<_>>()
                .join(", "),
            format!("{:.3}", cost.p50()),
            format!("{:.3}", cost.p99()),
        ]
    });
    Table::new(&columns, rows)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_ratios_divide_tls_by_plaintext() {
        let cost = TlsCost {
            plaintext: Medians {
                per_sec: 100_000.0,
                p50: 400.0,
                p99: 1_000.0,
            },
            tls: Medians {
                per_sec: 80_000.0,
                p50: 500.0,
                p99: 1_500.0,
            },
            round_ratios: vec![0.8, 0.75],
        };
        assert!((cost.throughput() - 0.8).abs() < 1e-12);
        assert!((cost.p50() - 1.25).abs() < 1e-12);
        assert!((cost.p99() - 1.5).abs() < 1e-12);
        let table = table("front end", "requests/s", &[("server".into(), cost)]);
        assert_eq!(table.columns[1].name, "plaintext requests/s");
        assert_eq!(
            table.rows[0],
            [
                "server",
                "100,000",
                "80,000",
                "0.800",
                "0.800, 0.750",
                "1.250",
                "1.500"
            ]
        );
    }
}
