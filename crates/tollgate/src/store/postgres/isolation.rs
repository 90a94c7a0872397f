//! The isolation level the store's transactions run at: the builder sets it, the connections
//! ask for it, and the retries depend on it.

/// The isolation level of every transaction of the store's connections.
///
/// ```
/// use tollgate::PostgresStore;
/// use tollgate::store::postgres::Isolation;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), tollgate::StoreError> {
/// // CockroachDB runs SERIALIZABLE whatever is asked; say so, and conflicts are retried.
/// let store = PostgresStore::builder("postgres://root@127.0.0.1:26257/defaultdb")
///     .isolation(Isolation::Serializable)
///     .build()
///     .await?;
/// # drop(store);
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum Isolation {
    /// PostgreSQL's default. Each decision is atomic without retries.
    #[default]
    ReadCommitted,
    /// What YugabyteDB and CockroachDB run: conflicts fail with SQLSTATE 40001 and are retried.
    Serializable,
}
