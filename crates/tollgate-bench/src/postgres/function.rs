//! The baseline's client: one connection per worker, as pgbench clients have, each calling the
//! published function once per request in its own (autocommit) transaction. Under SERIALIZABLE
//! the write-up tells the application to retry SQLSTATE 40001; it does, immediately, up to
//! [`MAX_ATTEMPTS`] attempts, and a call that still fails is an error.

use tokio_postgres::error::SqlState;
use tokio_postgres::{Client, NoTls, Statement};

use super::database::Target;
use super::limit::Limit;
use super::outcome::{CallError, Checked};
use super::{Isolation, IsolationNames};
use crate::BenchError;

/// Attempts per call, the first included.
pub(crate) const MAX_ATTEMPTS: u32 = 10;

/// One worker's connection, with the call prepared.
pub(crate) struct FunctionConn {
    client: Client,
    call: Statement,
}

impl FunctionConn {
    /// Connects, sets the session's isolation and prepares the call.
    pub(crate) async fn connect(
        target: &Target,
        isolation: Isolation,
    ) -> Result<FunctionConn, BenchError> {
        let (client, connection) = tokio_postgres::connect(&target.url, NoTls).await?;
        // The connection's I/O runs on its own task; it ends when the client is dropped.
        tokio::spawn(async move {
            let _ = connection.await;
        });
        client
            .batch_execute(&format!(
                "SET SESSION CHARACTERISTICS AS TRANSACTION ISOLATION LEVEL {}",
                isolation.sql()
            ))
            .await?;
        let call = client
            .prepare(&format!(
                r#"SELECT "{}".rate_limiting_token_bucket_request($1::text, $2::int, $3::int)"#,
                target.schema
            ))
            .await?;
        Ok(FunctionConn { client, call })
    }

    /// One request on `key`: allowed when the function returns a token count >= 0 (-1 is "no
    /// token").
    pub(crate) async fn check(&self, key: &str, limit: Limit) -> Checked {
        let mut attempt = 1;
        loop {
            let answer = self
                .client
                .query_one(
                    &self.call,
                    &[&key, &limit.refill_per_sec, &limit.window_seconds],
                )
                .await;
            let outcome = match answer {
                Ok(row) => row
                    .try_get::<_, Option<i32>>(0)
                    .map_err(CallError::Db)
                    .and_then(|tk| {
                        tk.map(|tk| tk >= 0)
                            .ok_or_else(|| CallError::Reply("the function returned NULL".into()))
                    }),
                Err(e)
                    if e.code() == Some(&SqlState::T_R_SERIALIZATION_FAILURE)
                        && attempt < MAX_ATTEMPTS =>
                {
                    attempt += 1;
                    continue;
                }
                Err(e) => Err(CallError::Db(e)),
            };
            return Checked {
                outcome,
                retried: attempt - 1,
                statements: attempt,
            };
        }
    }
}
