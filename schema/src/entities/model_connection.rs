//! `model_connections` table: a tenant's own model endpoints (bring your own key).
use sea_orm::entity::prelude::*;

#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "model_connections")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub tenant_id: Uuid,
    #[sea_orm(primary_key, auto_increment = false)]
    pub id: String,
    pub name: String,
    /// `openai` (any OpenAI-compatible endpoint) or `anthropic`.
    pub provider: String,
    /// API root; null = the provider's public endpoint.
    pub base_url: Option<String>,
    pub model: String,
    /// The API key, sealed (`agentry_sealing::SecretBox`); null = no key. Never shown.
    #[sea_orm(column_type = "Text", nullable)]
    pub api_key_sealed: Option<String>,
    pub timeout_secs: i32,
    pub max_retries: i32,
    /// The embeddings model of this endpoint (OpenAI-compatible only): the tenant's memories
    /// are embedded with it (docs/memory.md). Null: none.
    pub embedding_model: Option<String>,
    pub created_at: DateTimeUtc,
    pub updated_at: DateTimeUtc,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
