//! `mcp_oauth_tokens` table: a user's OAuth tokens for one MCP server, sealed.
use sea_orm::entity::prelude::*;

#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "mcp_oauth_tokens")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub tenant_id: Uuid,
    #[sea_orm(primary_key, auto_increment = false)]
    pub user_id: Uuid,
    #[sea_orm(primary_key, auto_increment = false)]
    pub server_name: String,
    /// The URL the tokens were issued for: tokens are never sent to another one.
    pub server_url: String,
    /// Sealed token set (access, refresh, client registration).
    #[sea_orm(column_type = "Text")]
    pub tokens_sealed: String,
    pub created_at: DateTimeUtc,
    pub updated_at: DateTimeUtc,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
