//! Outbound webhooks (issue 27 item 4, reused by issue 28's completion webhooks):
//! - `a2a_push_configs`: each A2A task's push-notification configs (one row per tenant, task and
//!   config id), the token and the credentials sealed;
//! - `webhook_secrets`: each tenant's Standard Webhooks signing secret, sealed;
//! - `webhook_deliveries`: the outbox — every notification to send, with its attempts, so a
//!   restarted server (or another replica) goes on delivering what was not delivered yet. The
//!   auto-increment id orders the deliveries of one `stream` (one receiver's view of one
//!   subject), which go out one at a time, in that order.

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
        t.table(a("a2a_push_configs")).if_not_exists();
        for mut col in [
            c.uuid("tenant_id"),
            c.uuid("task_id"),
            c.string("id", 128),
            c.uuid("user_id"),
            c.string("url", 2048),
            c.text_null("token_sealed"),
            c.string_null("auth_scheme", 64),
            c.text_null("credentials_sealed"),
            c.ts("created_at"),
        ] {
            t.col(&mut col);
        }
        t.primary_key(
            Index::create()
                .col(a("tenant_id"))
                .col(a("task_id"))
                .col(a("id")),
        );
        manager.create_table(t).await?;

        let mut t = Table::create();
        t.table(a("webhook_secrets")).if_not_exists();
        for mut col in [
            c.uuid("tenant_id"),
            c.text("secret_sealed"),
            c.ts("created_at"),
        ] {
            t.col(&mut col);
        }
        t.primary_key(Index::create().col(a("tenant_id")));
        manager.create_table(t).await?;

        let mut t = Table::create();
        t.table(a("webhook_deliveries")).if_not_exists();
        for mut col in [
            c.auto_id("id"),
            c.uuid("tenant_id"),
            c.string("msg_id", 64),
            c.string("stream", 256),
            c.string("source", 32),
            c.string("url", 2048),
            c.text_null("headers_sealed"),
            c.text("payload"),
            c.string("status", 16),
            c.int("attempts"),
            c.ts("next_attempt_at"),
            c.ts("give_up_at"),
            ColumnDef::new(a("last_status")).integer().null().take(),
            c.text_null("last_error"),
            c.ts("created_at"),
            c.ts("updated_at"),
        ] {
            t.col(&mut col);
        }
        manager.create_table(t).await?;
        manager
            .create_index(
                Index::create()
                    .if_not_exists()
                    .name("idx_webhook_deliveries_due")
                    .table(a("webhook_deliveries"))
                    .col(a("status"))
                    .col(a("id"))
                    .to_owned(),
            )
            .await?;
        manager
            .create_index(
                Index::create()
                    .if_not_exists()
                    .name("idx_webhook_deliveries_stream")
                    .table(a("webhook_deliveries"))
                    .col(a("tenant_id"))
                    .col(a("stream"))
                    .to_owned(),
            )
            .await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        for table in ["webhook_deliveries", "webhook_secrets", "a2a_push_configs"] {
            manager
                .drop_table(Table::drop().table(a(table)).if_exists().to_owned())
                .await?;
        }
        Ok(())
    }
}
