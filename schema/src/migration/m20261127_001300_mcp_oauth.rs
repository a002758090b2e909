//! OAuth for users' MCP servers (issue 18, item 1): `mcp_oauth_tokens` keeps each user's tokens
//! for each OAuth server (the token set sealed, one row per tenant, user and server name, bound
//! to the server URL it was issued for); `mcp_oauth_states` keeps the sign-ins in progress
//! (keyed by a hash of the OAuth `state`, which is the callback's only credential; the PKCE
//! verifier sealed; an expiry), in the database so any replica can finish a sign-in.

use sea_orm_migration::prelude::*;

use super::Cols;

#[derive(DeriveMigrationName)]
pub struct Migration;

fn a(name: &str) -> Alias {
    Alias::new(name)
}

#[allow(elided_lifetimes_in_paths)] // the trait's signature, as sea-orm-migration declares it
#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        let c = Cols::new(manager);
        let mut t = Table::create();
        t.table(a("mcp_oauth_tokens")).if_not_exists();
        for mut col in [
            c.uuid("tenant_id"),
            c.uuid("user_id"),
            c.string("server_name", 64),
            c.string("server_url", 2048),
            c.text("tokens_sealed"),
            c.ts("created_at"),
            c.ts("updated_at"),
        ] {
            t.col(&mut col);
        }
        t.primary_key(
            Index::create()
                .col(a("tenant_id"))
                .col(a("user_id"))
                .col(a("server_name")),
        );
        manager.create_table(t).await?;

        let mut t = Table::create();
        t.table(a("mcp_oauth_states")).if_not_exists();
        for mut col in [
            c.string("state_hash", 64),
            c.uuid("tenant_id"),
            c.uuid("user_id"),
            c.string("server_name", 64),
            c.text("pending_sealed"),
            c.ts("expires_at"),
            c.ts("created_at"),
        ] {
            t.col(&mut col);
        }
        t.primary_key(Index::create().col(a("state_hash")));
        manager.create_table(t).await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        for table in ["mcp_oauth_states", "mcp_oauth_tokens"] {
            manager
                .drop_table(Table::drop().table(a(table)).if_exists().to_owned())
                .await?;
        }
        Ok(())
    }
}
