//! Data sources (issue 17, item 2): `data_sources`, a tenant's databases for the data tools,
//! their URLs sealed, the roles that may use each, and the cached catalog.

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
        t.table(a("data_sources")).if_not_exists();
        for mut col in [
            c.uuid("tenant_id"),
            c.string("id", 64),
            c.string("name", 200),
            c.string("engine", 16),
            c.string("url_redacted", 2048),
            c.text("url_sealed"),
            c.boolean("password_set"),
            c.json("allowed_roles"),
            c.json_null("catalog"),
            c.ts_null("catalog_at"),
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
                    .table(a("data_sources"))
                    .if_exists()
                    .to_owned(),
            )
            .await
    }
}
