//! `session_events` table: the persisted event stream of every session, so replay by `seq`
//! works after the session actor stopped or the process restarted.
use sea_orm::entity::prelude::*;

#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "session_events")]
pub struct Model {
    #[sea_orm(primary_key)]
    pub id: i64,
    pub tenant_id: Uuid,
    pub session_id: Uuid,
    pub seq: i64,
    pub run_id: Option<Uuid>,
    pub event_type: String,
    /// The whole event as sent on the wire.
    #[sea_orm(column_type = "Text")]
    pub event: String,
    pub created_at: DateTimeUtc,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
