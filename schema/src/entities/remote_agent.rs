//! `remote_agents` table: a tenant's registered remote A2A agents, which `task` may delegate to.
use sea_orm::entity::prelude::*;

#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "remote_agents")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub tenant_id: Uuid,
    #[sea_orm(primary_key, auto_increment = false)]
    pub id: String,
    /// The card's `name`.
    pub name: String,
    /// The card's `description`.
    #[sea_orm(column_type = "Text")]
    pub description: String,
    /// The URL the admin registered (the agent's base URL, or its card's URL).
    pub url: String,
    /// The JSON-RPC interface's URL, from the card: where requests go.
    pub endpoint_url: String,
    /// The card as fetched (JSON), for the admin's view and the model's tool description.
    #[sea_orm(column_type = "Text")]
    pub card: String,
    /// `none`, `bearer` or `api_key`.
    pub auth_kind: String,
    /// For `api_key`: the header the key goes in.
    pub auth_header: Option<String>,
    /// The token or key, sealed (`agentry_sealing::SecretBox`); null for `none`. Never shown.
    #[sea_orm(column_type = "Text", nullable)]
    pub credential_sealed: Option<String>,
    /// How long a delegated task may take, end to end.
    pub timeout_secs: i32,
    pub created_at: DateTimeUtc,
    pub updated_at: DateTimeUtc,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
