//! `sessions.stateless` (issue 31 item 9): a session made for one stateless OpenAI-compatible
//! call (`POST /v1/chat/completions` without a session). Such sessions do not count against
//! `max_sessions_per_user`: a client that sends its whole conversation with every call would
//! otherwise be cut off after that many calls. The flag is set by the server only, never by a
//! client, so it cannot be used to get around the quota.

use sea_orm_migration::prelude::*;

#[derive(DeriveMigrationName)]
pub struct Migration;

#[allow(elided_lifetimes_in_paths)] // the trait's signature, as sea-orm-migration declares it
#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        if manager.has_column("sessions", "stateless").await? {
            return Ok(());
        }
        manager
            .alter_table(
                Table::alter()
                    .table(Alias::new("sessions"))
                    .add_column(
                        ColumnDef::new(Alias::new("stateless"))
                            .boolean()
                            .not_null()
                            .default(false),
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
                    .drop_column(Alias::new("stateless"))
                    .take(),
            )
            .await
    }
}
