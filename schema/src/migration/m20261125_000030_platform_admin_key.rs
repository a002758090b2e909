//! `platform_admin_keys`: the platform admin key a server generates on its first start when
//! none is configured (issue 15), kept as a hash in the database so every replica accepts it
//! and two replicas starting at once agree on one.

use sea_orm_migration::prelude::*;

use super::Cols;

#[derive(DeriveMigrationName)]
pub struct Migration;

#[allow(elided_lifetimes_in_paths)] // the trait's signature, as sea-orm-migration declares it
#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        let c = Cols::new(manager);
        manager
            .create_table(
                Table::create()
                    .table(Alias::new("platform_admin_keys"))
                    .if_not_exists()
                    .col(c.string(Alias::new("slot"), 32).primary_key())
                    .col(c.string(Alias::new("prefix"), 16))
                    .col(c.string(Alias::new("key_hash"), 64))
                    .col(c.ts(Alias::new("created_at")))
                    .take(),
            )
            .await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .drop_table(
                Table::drop()
                    .table(Alias::new("platform_admin_keys"))
                    .to_owned(),
            )
            .await
    }
}
