//! Remote A2A agents (issue 27, item 5): `remote_agents`, the agents a tenant admin registered
//! by URL, their card as checked and their credential sealed; `task` may delegate to them.

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
        t.table(a("remote_agents")).if_not_exists();
        for mut col in [
            c.uuid("tenant_id"),
            c.string("id", 64),
            c.string("name", 200),
            c.text("description"),
            c.string("url", 2048),
            c.string("endpoint_url", 2048),
            c.text("card"),
            c.string("auth_kind", 16),
            c.string_null("auth_header", 128),
            c.text_null("credential_sealed"),
            c.int("timeout_secs"),
            c.ts("created_at"),
            c.ts("updated_at"),
        ] {
            t.col(&mut col);
        }
        t.primary_key(Index::create().col(a("tenant_id")).col(a("id")));
        manager.create_table(t).await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .drop_table(
                Table::drop()
                    .table(a("remote_agents"))
                    .if_exists()
                    .to_owned(),
            )
            .await
    }
}
