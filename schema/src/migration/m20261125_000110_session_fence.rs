//! `sessions.fence` (issue 13, item 2): the highest fencing token that wrote for the session.
//! In cluster mode a replica owns a session's live run through a Redis lease that comes with a
//! token, larger for each new owner; every write of the run checks (and raises) this column in
//! its own transaction, so an owner that lost its lease (paused, partitioned) cannot write once
//! a newer owner has.

use sea_orm_migration::prelude::*;

#[derive(DeriveMigrationName)]
pub struct Migration;

#[allow(elided_lifetimes_in_paths)] // the trait's signature, as sea-orm-migration declares it
#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        if manager.has_column("sessions", "fence").await? {
            return Ok(());
        }
        manager
            .alter_table(
                Table::alter()
                    .table(Alias::new("sessions"))
                    .add_column(
                        ColumnDef::new(Alias::new("fence"))
                            .big_integer()
                            .not_null()
                            .default(0),
                    )
                    .take(),
            )
            .await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .alter_table(
                Table::alter()
                    .table(Alias::new("sessions"))
                    .drop_column(Alias::new("fence"))
                    .take(),
            )
            .await
    }
}
