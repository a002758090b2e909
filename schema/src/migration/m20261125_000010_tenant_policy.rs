//! `tenants.policy`: the tenant's policy (who may add stdio MCP servers or switch approvals
//! off, sandbox limits) as one JSON value; null means the defaults.

use sea_orm_migration::prelude::*;

use super::Cols;

#[derive(DeriveMigrationName)]
pub struct Migration;

// The trait's signature elides the lifetime; ours must match it exactly.
#[allow(elided_lifetimes_in_paths)]
#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        let c = Cols::new(manager);
        manager
            .alter_table(
                Table::alter()
                    .table(Alias::new("tenants"))
                    .add_column(c.json_null(Alias::new("policy")))
                    .to_owned(),
            )
            .await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .alter_table(
                Table::alter()
                    .table(Alias::new("tenants"))
                    .drop_column(Alias::new("policy"))
                    .to_owned(),
            )
            .await
    }
}
