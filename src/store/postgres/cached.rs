//! Statements prepared once per connection: tokio-postgres prepares a statement
//! given as text at every call (a round trip of its own before the one that runs
//! it); these run it from the connection's cache of prepared statements (deadpool's
//! `prepare_cached`), so a call is one round trip.

use deadpool_postgres::GenericClient;
use tokio_postgres::Row;
use tokio_postgres::types::ToSql;

use crate::store::StoreError;

/// The cached forms of `query`, `query_one`, `query_opt` and `execute`.
pub(super) trait Cached: GenericClient {
    async fn query_cached(
        &self,
        sql: &str,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<Vec<Row>, StoreError> {
        let statement = self.prepare_cached(sql).await?;
        Ok(self.query(&statement, params).await?)
    }

    async fn query_one_cached(
        &self,
        sql: &str,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<Row, StoreError> {
        let statement = self.prepare_cached(sql).await?;
        Ok(self.query_one(&statement, params).await?)
    }

    async fn query_opt_cached(
        &self,
        sql: &str,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<Option<Row>, StoreError> {
        let statement = self.prepare_cached(sql).await?;
        Ok(self.query_opt(&statement, params).await?)
    }

    async fn execute_cached(
        &self,
        sql: &str,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<u64, StoreError> {
        let statement = self.prepare_cached(sql).await?;
        Ok(self.execute(&statement, params).await?)
    }
}

impl<C: GenericClient> Cached for C {}
