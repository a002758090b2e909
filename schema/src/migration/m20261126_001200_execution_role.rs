//! `executions.role`: the role the run was started with (the key's effective role: `admin`,
//! `member` or a custom role's name). A run resumed after a crash or a failover, and a queued
//! run started later, keep that role: before, they took the user's, so a tenant admin's key
//! narrowed to `member` or a custom role regained the admin's tools across a restart. Null on
//! rows written before: those resume with the user's role, as they did.

use sea_orm_migration::prelude::*;

use super::Cols;

#[derive(DeriveMigrationName)]
pub struct Migration;

#[allow(elided_lifetimes_in_paths)] // the trait's signature, as sea-orm-migration declares it
#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        if manager.has_column("executions", "role").await? {
            return Ok(());
        }
        let c = Cols::new(manager);
        manager
            .alter_table(
                Table::alter()
                    .table(Alias::new("executions"))
                    .add_column(c.string_null(Alias::new("role"), 64))
                    .take(),
            )
            .await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        if !manager.has_column("executions", "role").await? {
            return Ok(());
        }
        manager
            .alter_table(
                Table::alter()
                    .table(Alias::new("executions"))
                    .drop_column(Alias::new("role"))
                    .take(),
            )
            .await
    }
}
