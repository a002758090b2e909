//! `platform_admin_keys` table: the platform admin key a server generated on its first start
//! (when none was configured). At most one row, in the slot `platform`.
use sea_orm::entity::prelude::*;

#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "platform_admin_keys")]
pub struct Model {
    /// Always `platform`: the primary key makes two replicas starting at once agree on one key.
    #[sea_orm(primary_key, auto_increment = false)]
    pub slot: String,
    /// The visible start of the key (`aga_XXXXXXXX`), for telling keys apart in logs.
    pub prefix: String,
    /// SHA-256 of the whole key, hex. The key itself is never stored.
    pub key_hash: String,
    pub created_at: DateTimeUtc,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
