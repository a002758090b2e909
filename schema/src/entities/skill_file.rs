//! `skill_files` table: the files of a skill (`SKILL.md` and everything beside it), by relative
//! path. Stored in the database, not on a replica's disk: every replica serves every skill.
use sea_orm::entity::prelude::*;

#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "skill_files")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub tenant_id: Uuid,
    #[sea_orm(primary_key, auto_increment = false)]
    pub owner: String,
    #[sea_orm(primary_key, auto_increment = false)]
    pub skill: String,
    /// Relative, `/`-separated, checked on upload (no `..`, no absolute path).
    #[sea_orm(primary_key, auto_increment = false)]
    pub path: String,
    pub size: i64,
    #[sea_orm(column_type = "Blob")]
    pub content: Vec<u8>,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
