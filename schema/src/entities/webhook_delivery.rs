//! `webhook_deliveries` table: the outbox of outbound webhooks — one row per notification to
//! one URL, with its attempts (agentry_store::webhooks).
use sea_orm::entity::prelude::*;

#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "webhook_deliveries")]
pub struct Model {
    /// Orders the deliveries of one stream.
    #[sea_orm(primary_key)]
    pub id: i64,
    pub tenant_id: Uuid,
    /// The Standard Webhooks `webhook-id`: the same on every attempt.
    pub msg_id: String,
    /// Deliveries of one stream go out one at a time, in `id` order (an A2A push config's
    /// notifications: `a2a:{task}:{config}`).
    pub stream: String,
    /// What made it (`a2a_push`).
    pub source: String,
    pub url: String,
    /// Sealed JSON `[[name, value], …]`: the receiver's own credentials (a token, an
    /// `Authorization`), sent with each attempt.
    #[sea_orm(column_type = "Text", nullable)]
    pub headers_sealed: Option<String>,
    #[sea_orm(column_type = "Text")]
    pub payload: String,
    /// `pending`, `delivered` or `failed` (given up).
    pub status: String,
    pub attempts: i32,
    pub next_attempt_at: DateTimeUtc,
    /// No attempt starts after this: the delivery is `failed`.
    pub give_up_at: DateTimeUtc,
    /// The last attempt's HTTP status, when it got one.
    pub last_status: Option<i32>,
    #[sea_orm(column_type = "Text", nullable)]
    pub last_error: Option<String>,
    pub created_at: DateTimeUtc,
    pub updated_at: DateTimeUtc,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
