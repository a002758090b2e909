//! `data_sources` table: a tenant's databases the data tools may query (issue 17 item 2).
use sea_orm::entity::prelude::*;

#[derive(Clone, Debug, PartialEq, DeriveEntityModel)]
#[sea_orm(table_name = "data_sources")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub tenant_id: Uuid,
    #[sea_orm(primary_key, auto_increment = false)]
    pub id: String,
    pub name: String,
    /// `postgres`, `mysql` or `sqlite`, from the URL's scheme.
    pub engine: String,
    /// The URL with its password replaced by `***`: what may be shown.
    pub url_redacted: String,
    /// The whole URL, credentials included, sealed (`agentry_sealing::SecretBox`). Never shown.
    #[sea_orm(column_type = "Text")]
    pub url_sealed: String,
    /// Whether the URL carries a password.
    pub password_set: bool,
    /// The role names whose callers may use the source (a JSON array of strings).
    pub allowed_roles: Json,
    /// The cached catalog (`describe_data_source`); null until first described.
    #[sea_orm(nullable)]
    pub catalog: Option<Json>,
    pub catalog_at: Option<DateTimeUtc>,
    pub created_at: DateTimeUtc,
    pub updated_at: DateTimeUtc,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
