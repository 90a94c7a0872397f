//! What the store did during a cell, as it counts it: on every Redis master, the script calls
//! clients sent and the time they took (`INFO commandstats`) and the CPU the server used
//! (`INFO cpu`). PostgreSQL's statements are counted by the processes' stores instead.

use redis::aio::MultiplexedConnection;

use super::Backend;
use super::worker::Spec;
use crate::BenchError;
use crate::commandstats::CommandStats;

/// Every master's counters at one moment.
pub(super) struct Snapshot {
    masters: Vec<(CommandStats, f64)>,
    postgres: bool,
}

/// The difference of two snapshots.
pub(super) struct Delta {
    pub(super) calls: u64,
    pub(super) usec: u64,
    pub(super) cpu: Option<f64>,
}

impl Snapshot {
    pub(super) async fn take(spec: &Spec) -> Result<Snapshot, BenchError> {
        if spec.backend == Backend::Postgres {
            return Ok(Snapshot {
                masters: Vec::new(),
                postgres: true,
            });
        }
        let mut masters = Vec::new();
        for url in &spec.urls {
            let mut conn = redis::Client::open(url.as_str())?
                .get_multiplexed_async_connection()
                .await?;
            let replication = info(&mut conn, "replication").await?;
            if replication.lines().any(|l| l.trim() == "role:master") {
                let stats = CommandStats::fetch(&mut conn).await?;
                masters.push((stats, cpu(&info(&mut conn, "cpu").await?)));
            }
        }
        Ok(Snapshot {
            masters,
            postgres: false,
        })
    }

    pub(super) fn since(&self, before: &Snapshot) -> Result<Delta, BenchError> {
        let (mut calls, mut usec, mut cpu) = (0, 0, 0.0);
        for ((after, cpu_after), (earlier, cpu_before)) in self.masters.iter().zip(&before.masters)
        {
            let delta = after.since(earlier)?;
            calls += delta.client_calls();
            usec += delta.client_usec();
            cpu += cpu_after - cpu_before;
        }
        Ok(Delta {
            calls,
            usec,
            cpu: (!self.postgres).then_some(cpu),
        })
    }
}

async fn info(conn: &mut MultiplexedConnection, section: &str) -> Result<String, BenchError> {
    Ok(redis::cmd("INFO").arg(section).query_async(conn).await?)
}

/// `used_cpu_sys + used_cpu_user` of `INFO cpu`, in seconds.
fn cpu(info: &str) -> f64 {
    info.lines()
        .filter_map(|l| {
            let (name, value) = l.trim().split_once(':')?;
            matches!(name, "used_cpu_sys" | "used_cpu_user").then(|| value.parse::<f64>().ok())?
        })
        .sum()
}

#[cfg(test)]
mod tests {
    #[test]
    fn cpu_adds_user_and_system() {
        let info = "# CPU\r\nused_cpu_sys:1.5\r\nused_cpu_user:2.25\r\nused_cpu_sys_children:9\r\n";
        assert_eq!(super::cpu(info), 3.75);
    }
}
