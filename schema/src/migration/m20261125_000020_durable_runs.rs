//! One durable truth per run (issue 12, item 1): `sessions.seq_reserved` is the highest event
//! `seq` the session may have sent to a client, reserved before sending, so a restart numbers
//! its events above it and never gives a sent `seq` to another event; an index finds a run's
//! `done` event without scanning its session's stream.

use sea_orm_migration::prelude::*;

#[derive(DeriveMigrationName)]
pub struct Migration;

#[allow(elided_lifetimes_in_paths)] // the trait's signature, as sea-orm-migration declares it
#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        if !manager.has_column("sessions", "seq_reserved").await? {
            manager
                .alter_table(
                    Table::alter()
                        .table(Alias::new("sessions"))
                        .add_column(
                            ColumnDef::new(Alias::new("seq_reserved"))
                                .big_integer()
                                .not_null()
                                .default(0),
                        )
                        .take(),
                )
                .await?;
        }
        manager
            .create_index(
                Index::create()
                    .name("ix_session_events_run_id_event_type")
                    .table(Alias::new("session_events"))
                    .col(Alias::new("run_id"))
                    .col(Alias::new("event_type"))
                    .if_not_exists()
                    .take(),
            )
            .await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .drop_index(
                Index::drop()
                    .name("ix_session_events_run_id_event_type")
                    .table(Alias::new("session_events"))
                    .to_owned(),
            )
            .await?;
        manager
            .alter_table(
                Table::alter()
                    .table(Alias::new("sessions"))
                    .drop_column(Alias::new("seq_reserved"))
                    .take(),
            )
            .await
    }
}
