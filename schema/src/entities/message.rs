//! `messages` table.
use sea_orm::entity::prelude::*;

#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "messages")]
pub struct Model {
    #[sea_orm(primary_key)]
    pub id: i64,
    pub tenant_id: Uuid,
    pub session_id: Uuid,
    pub run_id: Option<Uuid>,
    /// `user`, `assistant`, `tool` or `system`.
    pub role: String,
    #[sea_orm(column_type = "Text")]
    pub content: String,
    pub tool_calls: Option<Json>,
    pub tool_call_id: Option<String>,
    pub created_at: DateTimeUtc,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
