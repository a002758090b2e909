//! `approvals` table.
use sea_orm::entity::prelude::*;

#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "approvals")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub id: Uuid,
    pub tenant_id: Uuid,
    pub session_id: Uuid,
    pub execution_id: Uuid,
    /// `approval` or `question`.
    pub kind: String,
    pub tool_call_id: Option<String>,
    /// The `hitl_request` data as sent.
    pub request: Json,
    /// `pending`, `approved`, `edited`, `rejected`, `answered`, `timed_out`, `cancelled`.
    pub status: String,
    pub decision: Option<Json>,
    pub decided_by: Option<Uuid>,
    pub created_at: DateTimeUtc,
    pub decided_at: Option<DateTimeUtc>,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
