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
    /// A template; "" = the profile's.
    #[sea_orm(column_type = "Text")]
    pub system_prompt: String,
    /// `scripted`, `openai`, `anthropic`; null = the server default.
    pub provider: Option<String>,
    pub model: Option<String>,
    /// JSON array of tool names or patterns (`files:*`); null = the profile's.
    pub tools: Option<Json>,
    /// JSON array of tool names that always need approval; JSON `null` = the profile's.
    pub interrupt_on: Json,
    pub auto_approve: bool,
    /// A built-in profile (`general`, `devops`, `sre`, `orchestrator`) or one of the tenant's.
    pub profile: String,
    /// 0 = the profile's.
    pub recursion_limit: i32,
    /// 0 = the profile's.
    pub timeout_secs: i32,
    pub max_retries: i32,
    /// One of the tenant's model connections; null = the platform's model.
    pub model_connection: Option<String>,
    /// JSON array of the skill names the assistant sees; null = every skill, `[]` = none.
    pub skills: Option<Json>,
    pub created_at: DateTimeUtc,
    pub updated_at: DateTimeUtc,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
