//! `tenants` table.
use sea_orm::entity::prelude::*;

#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "tenants")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub id: Uuid,
    #[sea_orm(unique)]
    pub name: String,
    /// `active` or `suspended`.
    pub status: String,
    pub max_users: i32,
    pub max_sessions_per_user: i32,
    pub max_mcp_servers: i32,
    pub workspace_quota_bytes: i64,
    pub requests_per_minute: i32,
    pub tokens_per_day: i64,
    pub max_concurrent_runs: i32,
    /// JSON array of feature names, e.g. `["stdio_mcp"]`.
    pub features_enabled: Json,
    /// Tool permissions per role, `{"member": ["files:*"], "admin": ["*:*"]}`; null = defaults.
    pub tool_permissions: Option<Json>,
    /// The tenant's policy (`agentry_schema::policy::TenantPolicy`); null = defaults.
    pub policy: Option<Json>,
    /// The tenant's custom roles (`agentry_schema::roles::CustomRoles`); null = none.
    pub custom_roles: Option<Json>,
    /// The tenant's MCP virtual servers (`agentry_schema::roles::McpVirtualServers`); null =
    /// none.
    pub mcp_virtual_servers: Option<Json>,
    pub created_at: DateTimeUtc,
    pub updated_at: DateTimeUtc,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
