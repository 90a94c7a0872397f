//! The run's own schema, `tollgate_bench_<run id>`: the baseline's table and function and
//! tollgate's table live there, created at the start of a run and dropped (with everything in
//! it) at the end, so a run starts from empty tables and never touches anything else.

use tokio_postgres::{Client, NoTls};

use super::limit::Limit;
use super::scenario::HOT;
use crate::BenchError;

/// tollgate's table in the run's schema.
pub(crate) const TABLE: &str = "tollgate_buckets";

/// Where the approaches connect and which schema they use.
#[derive(Debug, Clone)]
pub(crate) struct Target {
    pub(crate) url: String,
    pub(crate) schema: String,
    /// Whether tollgate's table is UNLOGGED (`--tollgate-unlogged`).
    pub(crate) unlogged: bool,
}

/// The server's version and the settings that decide what a commit costs.
#[derive(Debug, Clone)]
pub(crate) struct Server {
    pub(crate) version: String,
    pub(crate) fsync: String,
    pub(crate) synchronous_commit: String,
}

/// An administrative connection for setting up and tearing down a run.
pub(crate) struct Database {
    client: Client,
    target: Target,
}

impl Database {
    /// Connects; the run's schema is named after `run_id` (lowercase hex), so it is a plain
    /// identifier that needs no quoting rules beyond the double quotes it gets.
    pub(crate) async fn connect(
        url: &str,
        run_id: &str,
        unlogged: bool,
    ) -> Result<Database, BenchError> {
        if !run_id
            .chars()
            .all(|c| c.is_ascii_digit() || c.is_ascii_lowercase())
        {
            return Err(BenchError::Args(format!("bad run id {run_id:?}")));
        }
        let (client, connection) = tokio_postgres::connect(url, NoTls).await?;
        tokio::spawn(async move {
            let _ = connection.await;
        });
        Ok(Database {
            client,
            target: Target {
                url: url.to_owned(),
                schema: format!("tollgate_bench_{run_id}"),
                unlogged,
            },
        })
    }

    pub(crate) fn target(&self) -> &Target {
        &self.target
    }

    pub(crate) async fn server(&self) -> Result<Server, BenchError> {
        let row = self
            .client
            .query_one(
                "SELECT current_setting('server_version'), current_setting('fsync'), \
                 current_setting('synchronous_commit')",
                &[],
            )
            .await?;
        Ok(Server {
            version: row.try_get(0)?,
            fsync: row.try_get(1)?,
            synchronous_commit: row.try_get(2)?,
        })
    }

    /// Creates the schema and installs the baseline's table and function in it. tollgate's
    /// store creates its own table on first use, as it does for its users.
    pub(crate) async fn create(&self) -> Result<(), BenchError> {
        let schema = &self.target.schema;
        self.client
            .batch_execute(&format!(
                "CREATE SCHEMA \"{schema}\";\n{}",
                include_str!("function.sql").replace("@schema@", schema)
            ))
            .await?;
        Ok(())
    }

    /// Creates the baseline's rows for the many_keys keys `k0..k{keys-1}` and the hot key, each
    /// a full bucket of `limit`, as its INSERT would have created them.
    pub(crate) async fn precreate_function_keys(
        &self,
        keys: usize,
        limit: Limit,
    ) -> Result<u64, BenchError> {
        let keys = i64::try_from(keys).map_err(|_| BenchError::Args("--keys too large".into()))?;
        let capacity = i64::try_from(limit.capacity()).unwrap_or(i64::MAX);
        let rows = self
            .client
            .execute(
                &format!(
                    r#"INSERT INTO "{}".rate_limiting_token_bucket (id, tk, ts)
                       SELECT 'k' || i, $1::bigint, clock_timestamp()
                       FROM generate_series(0::bigint, $2::bigint - 1) AS i
                       UNION ALL SELECT $3::text, $1::bigint, clock_timestamp()"#,
                    self.target.schema
                ),
                &[&capacity, &keys, &HOT],
            )
            .await?;
        Ok(rows)
    }

    /// Refreshes the planner's statistics on both tables once their rows exist.
    pub(crate) async fn analyze(&self) -> Result<(), BenchError> {
        let schema = &self.target.schema;
        self.client
            .batch_execute(&format!(
                "ANALYZE \"{schema}\".rate_limiting_token_bucket; ANALYZE \"{schema}\".\"{TABLE}\";"
            ))
            .await?;
        Ok(())
    }

    /// Drops the run's schema and everything in it.
    pub(crate) async fn drop_schema(&self) -> Result<(), BenchError> {
        self.client
            .batch_execute(&format!(
                "DROP SCHEMA IF EXISTS \"{}\" CASCADE",
                self.target.schema
            ))
            .await?;
        Ok(())
    }
}
