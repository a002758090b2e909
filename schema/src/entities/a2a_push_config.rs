//! `a2a_push_configs` table: an A2A task's push-notification config (docs/a2a.md), its token and
//! credentials sealed.
use sea_orm::entity::prelude::*;

#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "a2a_push_configs")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub tenant_id: Uuid,
    /// The task (the run) it notifies about.
    #[sea_orm(primary_key, auto_increment = false)]
    pub task_id: Uuid,
    /// The config's id, the client's or one made for it.
    #[sea_orm(primary_key, auto_increment = false)]
    pub id: String,
    /// The task's user (only they see the config).
    pub user_id: Uuid,
    pub url: String,
    /// Sealed: the `token` sent in `X-A2A-Notification-Token`.
    #[sea_orm(column_type = "Text", nullable)]
    pub token_sealed: Option<String>,
    /// `authentication.scheme` (`Bearer`, …).
    pub auth_scheme: Option<String>,
    /// Sealed: `authentication.credentials`.
    #[sea_orm(column_type = "Text", nullable)]
    pub credentials_sealed: Option<String>,
    pub created_at: DateTimeUtc,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
