//! `memories` table.
use sea_orm::entity::prelude::*;

#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "memories")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub id: Uuid,
    pub tenant_id: Uuid,
    /// The owner of a `user` memory; the author of a shared one.
    pub user_id: Uuid,
    /// `user`, `assistant` or `tenant`.
    pub scope: String,
    /// The assistant of an `assistant` memory (`None` otherwise).
    pub assistant_id: Option<String>,
    /// `fact`, `preference`, `decision` or `context`.
    pub kind: String,
    #[sea_orm(column_type = "Text")]
    pub content: String,
    pub metadata: Json,
    /// The content's embedding: little-endian `f32`s, made by `embedding_model`.
    #[sea_orm(column_type = "Blob", nullable)]
    pub embedding: Option<Vec<u8>>,
    pub embedding_model: Option<String>,
    pub source_session_id: Option<Uuid>,
    pub source_run_id: Option<Uuid>,
    pub expires_at: Option<DateTimeUtc>,
    pub created_at: DateTimeUtc,
    pub updated_at: DateTimeUtc,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
