//! `server_leases`: who serves this database (issue 13, item 1). A single-node server holds the
//! row `single-node`; each replica of a cluster holds `replica:<id>`. Every holder renews its
//! row's `expires_at` on a heartbeat, so a second single-node server on the same database (or a
//! single-node server next to a cluster) is refused at start, naming the holder, and a holder
//! that died stops counting once its row expires.

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
                    .table(Alias::new("server_leases"))
                    .if_not_exists()
                    .col(c.string(Alias::new("name"), 160).primary_key())
                    .col(c.string(Alias::new("mode"), 16))
                    .col(c.string(Alias::new("replica_id"), 128))
                    .col(c.string(Alias::new("host"), 255))
                    .col(c.bigint(Alias::new("pid")))
                    .col(c.ts(Alias::new("started_at")))
                    .col(c.ts(Alias::new("heartbeat_at")))
                    .col(c.ts(Alias::new("expires_at")))
                    .take(),
            )
            .await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .drop_table(Table::drop().table(Alias::new("server_leases")).to_owned())
            .await
    }
}
