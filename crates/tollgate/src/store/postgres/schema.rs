//! Where the buckets live (schema, table, logged or not), the SQL with those names filled in,
//! and the migration that creates them.

use tokio_postgres::Client;

use crate::StoreError;

/// The schema and table of a store.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Names {
    pub(crate) schema: String,
    pub(crate) table: String,
    pub(crate) unlogged: bool,
}

/// A key for `pg_advisory_xact_lock`, so that processes creating the schema at once take turns:
/// concurrent `CREATE ... IF NOT EXISTS` can otherwise fail on PostgreSQL's catalog.
const MIGRATION_LOCK: i64 = 0x746f_6c6c_6761_7465; // "tollgate"

/// What `schema.sql` writes as the table's comment: the version of the layout of its rows.
pub(crate) const LAYOUT: &str = "tollgate layout v3";

impl Names {
    /// Reads the table's layout version (its comment).
    pub(crate) fn layout_query(&self) -> String {
        self.render(
            r#"SELECT coalesce(obj_description('"@schema@"."@table@"'::regclass, 'pg_class'), '')"#,
        )
    }

    /// Checks that both names are plain identifiers, so they can be spliced into SQL.
    pub(crate) fn new(schema: &str, table: &str, unlogged: bool) -> Result<Names, StoreError> {
        for (what, name) in [("schema", schema), ("table", table)] {
            let plain = name.len() <= 50
                && name.starts_with(|c: char| c.is_ascii_lowercase() || c == '_')
                && name
                    .chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_');
            if !plain {
                return Err(StoreError::Config(format!(
                    "the PostgreSQL {what} name {name:?} must be 1 to 50 lowercase letters, \
                     digits or underscores, not starting with a digit"
                )));
            }
        }
        Ok(Names {
            schema: schema.to_owned(),
            table: table.to_owned(),
            unlogged,
        })
    }

    /// `sql` with the names filled in.
    pub(crate) fn render(&self, sql: &str) -> String {
        sql.replace("@schema@", &self.schema)
            .replace("@table@", &self.table)
            .replace("@unlogged@", if self.unlogged { "UNLOGGED" } else { "" })
    }

    /// Creates the schema, the table and the function if they are missing (and replaces the
    /// function, so an upgrade takes effect). Safe to run from many processes at once.
    pub(crate) async fn migrate(&self, client: &mut Client) -> Result<(), StoreError> {
        let store_error = super::error::store_error;
        let tx = client.transaction().await.map_err(store_error)?;
        tx.execute("SELECT pg_advisory_xact_lock($1)", &[&MIGRATION_LOCK])
            .await
            .map_err(store_error)?;
        tx.batch_execute(&self.render(include_str!("schema.sql")))
            .await
            .map_err(store_error)?;
        tx.commit().await.map_err(store_error)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_plain_names_are_spliced_into_sql() {
        assert!(Names::new("tollgate", "buckets_v1", false).is_ok());
        for bad in [
            "",
            "Buckets",
            "1st",
            "a-b",
            "a\"; DROP TABLE x; --",
            &"x".repeat(51),
        ] {
            assert!(Names::new("tollgate", bad, false).is_err(), "{bad:?}");
            assert!(Names::new(bad, "buckets", false).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn renders_names_and_persistence() {
        let names = Names::new("rl", "b", true).unwrap();
        assert_eq!(
            names.render(r#"CREATE @unlogged@ TABLE "@schema@"."@table@""#),
            r#"CREATE UNLOGGED TABLE "rl"."b""#
        );
    }
}
