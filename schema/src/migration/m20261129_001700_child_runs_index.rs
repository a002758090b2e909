//! A session's `task` child runs indexed by `(session_id, parent_execution_id)` (issue 24).
//!
//! Every history read of a session on PostgreSQL and MySQL leaves out the messages of its
//! `task` child runs with `run_id NOT IN (SELECT id FROM executions WHERE session_id = ? AND
//! parent_execution_id IS NOT NULL)`. No index served that subquery (the session's index has
//! the tenant first; `parent_execution_id`'s alone does not name the session), so PostgreSQL
//! scanned the whole `executions` table on every run's start: 8.4 ms at 4,700 runs, growing
//! with every run of every tenant (the largest share of PostgreSQL's CPU in the ten-client
//! benchmark). With this index the subquery reads exactly the session's child runs (usually
//! none): 0.1 ms.

use sea_orm_migration::prelude::*;

#[derive(DeriveMigrationName)]
pub struct Migration;

const TABLE: &str = "executions";
const INDEX: &str = "ix_executions_session_id_parent_execution_id";

#[allow(elided_lifetimes_in_paths)] // the trait's signature, as sea-orm-migration declares it
#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .create_index(
                Index::create()
                    .name(INDEX)
                    .table(Alias::new(TABLE))
                    .col(Alias::new("session_id"))
                    .col(Alias::new("parent_execution_id"))
                    .if_not_exists()
                    .to_owned(),
            )
            .await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        if !manager.has_index(TABLE, INDEX).await? {
            return Ok(());
        }
        manager
            .drop_index(
                Index::drop()
                    .name(INDEX)
                    .table(Alias::new(TABLE))
                    .to_owned(),
            )
            .await
    }
}
