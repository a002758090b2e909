//! `assistants` table.
use sea_orm::entity::prelude::*;

#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "assistants")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub tenant_id: Uuid,
    #[sea_orm(primary_key, auto_increment = false)]
    pub id: String,
    pub name: String,
    pub description: String,
    #[sea_orm(column_type = "Text")]
    pub system_prompt: String,
    /// `scripted`, `openai`, `anthropic`; null = the server default.
    pub provider: Option<String>,
    pub model: Option<String>,
    /// JSON array of tool names or patterns (`files:*`); null = every built-in tool.
    pub tools: Option<Json>,
    /// JSON array of tool names that always need approval.
    pub interrupt_on: Json,
    pub auto_approve: bool,
    /// `general`, `devops`, `sre` or `orchestrator`.
    pub profile: String,
    pub recursion_limit: i32,
    pub timeout_secs: i32,
    pub max_retries: i32,
    pub created_at: DateTimeUtc,
    pub updated_at: DateTimeUtc,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
