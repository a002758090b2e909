//! Models per tenant (issue 16, item 4): `model_connections`, a tenant's own model endpoints
//! with their keys sealed, and `assistants.model_connection`, the one an assistant uses (null:
//! the platform's model).

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
        t.table(a("model_connections")).if_not_exists();
        for mut col in [
            c.uuid("tenant_id"),
            c.string("id", 64),
            c.string("name", 200),
            c.string("provider", 32),
            c.string_null("base_url", 2048),
            c.string("model", 200),
            c.text_null("api_key_sealed"),
            c.int("timeout_secs"),
            c.int("max_retries"),
            c.ts("created_at"),
            c.ts("updated_at"),
        ] {
            t.col(&mut col);
        }
        t.primary_key(Index::create().col(a("tenant_id")).col(a("id")));
        manager.create_table(t).await?;
        manager
            .alter_table(
                Table::alter()
                    .table(a("assistants"))
                    .add_column(c.string_null("model_connection", 64))
                    .to_owned(),
            )
            .await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .alter_table(
                Table::alter()
                    .table(a("assistants"))
                    .drop_column(a("model_connection"))
                    .to_owned(),
            )
            .await?;
        manager
            .drop_table(
                Table::drop()
                    .table(a("model_connections"))
                    .if_exists()
                    .to_owned(),
            )
            .await
    }
}
