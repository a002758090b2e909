//! `mcp_oauth_states` table: an OAuth sign-in in progress, found by a hash of its `state`.
use sea_orm::entity::prelude::*;

#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "mcp_oauth_states")]
pub struct Model {
    /// SHA-256 of the `state` parameter, hex: the state itself is never stored.
    #[sea_orm(primary_key, auto_increment = false)]
    pub state_hash: String,
    pub tenant_id: Uuid,
    pub user_id: Uuid,
    pub server_name: String,
    /// Sealed PKCE verifier and client of the sign-in.
    #[sea_orm(column_type = "Text")]
    pub pending_sealed: String,
    pub expires_at: DateTimeUtc,
    pub created_at: DateTimeUtc,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
