//! `profiles` table: a tenant's own agent profiles (the built-in ones live in code).
use sea_orm::entity::prelude::*;

#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "profiles")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub tenant_id: Uuid,
    #[sea_orm(primary_key, auto_increment = false)]
    pub id: String,
    pub name: String,
    #[sea_orm(column_type = "Text")]
    pub description: String,
    /// A template (`{{assistant_name}}`, `{{date}}`, `{{tools}}`).
    #[sea_orm(column_type = "Text")]
    pub system_prompt: String,
    /// JSON array of tool names or patterns; null = every tool.
    pub tools: Option<Json>,
    /// JSON array of tools that always need approval.
    pub interrupt_on: Json,
    pub recursion_limit: i32,
    pub timeout_secs: i32,
    pub created_at: DateTimeUtc,
    pub updated_at: DateTimeUtc,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
