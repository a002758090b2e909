//! `executions` table.
use sea_orm::entity::prelude::*;

#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "executions")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub id: Uuid,
    pub tenant_id: Uuid,
    pub user_id: Uuid,
    pub session_id: Uuid,
    pub assistant_id: String,
    #[sea_orm(column_type = "Text")]
    pub input: String,
    /// `running`, `waiting_approval`, `completed`, `failed`, `cancelled`, `rejected`, `timeout`, `interrupted`.
    pub status: String,
    #[sea_orm(column_type = "Text", nullable)]
    pub error: Option<String>,
    pub input_tokens: i64,
    pub output_tokens: i64,
    pub total_tokens: i64,
    pub steps: i32,
    pub trace_id: Option<String>,
    pub started_at: DateTimeUtc,
    pub completed_at: Option<DateTimeUtc>,
    pub updated_at: DateTimeUtc,
    /// The run whose `task` call started this one; `None` for a run a person started.
    pub parent_execution_id: Option<Uuid>,
    /// The parent's tool call that started this run.
    pub parent_tool_call_id: Option<String>,
    /// The role the run was started with (`admin`, `member` or a custom role's name); null on
    /// rows from before it was recorded.
    pub role: Option<String>,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
