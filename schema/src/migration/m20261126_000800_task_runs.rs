//! `executions.parent_execution_id` and `executions.parent_tool_call_id` (issue 16, item 2): a
//! run started by another run's `task` call is a child execution. The parent's id makes the audit
//! a tree (`GET /executions?parent_execution_id=`); the tool call's id lets a resumed parent find
//! the child its call already started, so a finished sub-task is never run again.

use sea_orm_migration::prelude::*;

use super::Cols;

#[derive(DeriveMigrationName)]
pub struct Migration;

const INDEX: &str = "ix_executions_parent_execution_id";

#[allow(elided_lifetimes_in_paths)] // the trait's signature, as sea-orm-migration declares it
#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        let c = Cols::new(manager);
        // One column per statement: SQLite adds one at a time.
        if !manager
            .has_column("executions", "parent_execution_id")
            .await?
        {
            manager
                .alter_table(
                    Table::alter()
                        .table(Alias::new("executions"))
                        .add_column(c.uuid_null(Alias::new("parent_execution_id")))
                        .take(),
                )
                .await?;
        }
        if !manager
            .has_column("executions", "parent_tool_call_id")
            .await?
        {
            manager
                .alter_table(
                    Table::alter()
                        .table(Alias::new("executions"))
                        .add_column(c.string_null(Alias::new("parent_tool_call_id"), 255))
                        .take(),
                )
                .await?;
        }
        manager
            .create_index(
                Index::create()
                    .name(INDEX)
                    .table(Alias::new("executions"))
                    .col(Alias::new("parent_execution_id"))
                    .if_not_exists()
                    .take(),
            )
            .await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .drop_index(
                Index::drop()
                    .name(INDEX)
                    .table(Alias::new("executions"))
                    .to_owned(),
            )
            .await?;
        for col in ["parent_tool_call_id", "parent_execution_id"] {
            manager
                .alter_table(
                    Table::alter()
                        .table(Alias::new("executions"))
                        .drop_column(Alias::new(col))
                        .take(),
                )
                .await?;
        }
        Ok(())
    }
}
