//! `skills` table: skills in the agent-framework folder format (a `SKILL.md` with YAML front
//! matter, then instructions, plus files beside it), per tenant or per user. The files,
//! `SKILL.md` included, are rows of `skill_files`.
use sea_orm::entity::prelude::*;

#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "skills")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub tenant_id: Uuid,
    /// `tenant` for the tenant's skills (admin-managed), else the owning user's id.
    #[sea_orm(primary_key, auto_increment = false)]
    pub owner: String,
    /// The front matter's `name` (a slug).
    #[sea_orm(primary_key, auto_increment = false)]
    pub name: String,
    /// The front matter's `description`: what the system prompt lists.
    #[sea_orm(column_type = "Text")]
    pub description: String,
    /// The body of `SKILL.md` after the front matter: what `load_skill` returns.
    #[sea_orm(column_type = "Text")]
    pub instructions: String,
    pub file_count: i32,
    /// Bytes of every file, `SKILL.md` included.
    pub total_bytes: i64,
    pub created_by: Option<Uuid>,
    pub created_at: DateTimeUtc,
    pub updated_at: DateTimeUtc,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
