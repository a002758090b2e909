//! `mcp_servers` table.
use sea_orm::entity::prelude::*;

#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "mcp_servers")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub id: Uuid,
    pub tenant_id: Uuid,
    pub user_id: Uuid,
    pub name: String,
    /// `stdio` or `http`.
    pub transport: String,
    pub command: Option<String>,
    pub args: Json,
    pub url: Option<String>,
    /// Encrypted JSON object of environment variables (write-only to clients).
    #[sea_orm(column_type = "Text", nullable)]
    pub env_encrypted: Option<String>,
    /// Encrypted JSON object of HTTP headers / auth (write-only to clients).
    #[sea_orm(column_type = "Text", nullable)]
    pub headers_encrypted: Option<String>,
    pub disabled: bool,
    pub timeout_secs: i32,
    /// Tool allow-list, rate limit and health check (`{allowed_tools?, rate_limit_per_minute?,
    /// health_check?}`); `None`: the pool's defaults.
    pub policy: Option<Json>,
    pub created_at: DateTimeUtc,
    pub updated_at: DateTimeUtc,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
