//! REST parity with the MCP config file (issue 18, item 6): a user's MCP server gets what the
//! file says about a platform server beyond how to connect — its tool allow-list, its rate
//! limit (tool calls per minute) and its health check — as one JSON object, `policy`. `NULL`
//! (every existing row) is "none set": the pool's defaults, as before.

use sea_orm_migration::prelude::*;

use super::Cols;

#[derive(DeriveMigrationName)]
pub struct Migration;

#[allow(elided_lifetimes_in_paths)] // the trait's signature, as sea-orm-migration declares it
#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        let c = Cols::new(manager);
        if !manager.has_column("mcp_servers", "policy").await? {
            manager
                .alter_table(
                    Table::alter()
                        .table(Alias::new("mcp_servers"))
                        .add_column(c.json_null("policy"))
                        .take(),
                )
                .await?;
        }
        Ok(())
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        if manager.has_column("mcp_servers", "policy").await? {
            manager
                .alter_table(
                    Table::alter()
                        .table(Alias::new("mcp_servers"))
                        .drop_column(Alias::new("policy"))
                        .take(),
                )
                .await?;
        }
        Ok(())
    }
}
