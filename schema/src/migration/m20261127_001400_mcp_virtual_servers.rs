//! MCP virtual servers (issue 18, item 5): `tenants.mcp_virtual_servers` holds the tenant's
//! named tool subsets served at `/mcp/{name}` (`{"support": {"description", "tools"}}`;
//! null = none).

use sea_orm_migration::prelude::*;

use super::Cols;

#[derive(DeriveMigrationName)]
pub struct Migration;

const COLUMN: &str = "mcp_virtual_servers";

#[allow(elided_lifetimes_in_paths)] // the trait's signature, as sea-orm-migration declares it
#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        if manager.has_column("tenants", COLUMN).await? {
            return Ok(());
        }
        let c = Cols::new(manager);
        manager
            .alter_table(
                Table::alter()
                    .table(Alias::new("tenants"))
                    .add_column(c.json_null(Alias::new(COLUMN)))
                    .take(),
            )
            .await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        if !manager.has_column("tenants", COLUMN).await? {
            return Ok(());
        }
        manager
            .alter_table(
                Table::alter()
                    .table(Alias::new("tenants"))
                    .drop_column(Alias::new(COLUMN))
                    .take(),
            )
            .await
    }
}
