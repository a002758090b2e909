//! `sessions` table.
use sea_orm::entity::prelude::*;

#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "sessions")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub id: Uuid,
    pub tenant_id: Uuid,
    pub user_id: Uuid,
    pub assistant_id: String,
    /// `idle`, `running`, `waiting_approval` or `closed`.
    pub state: String,
    pub auto_approve: bool,
    pub metadata: Json,
    pub created_at: DateTimeUtc,
    pub last_active: DateTimeUtc,
    /// The highest event `seq` the session may have sent: a restarted session numbers its
    /// events above it (and above the stored ones), so no sent `seq` names another event.
    pub seq_reserved: i64,
    /// Cluster mode: the highest fencing token that wrote for the session (0: none). A write
    /// with a lower token is refused (`agentry_store::sessions::fence`).
    pub fence: i64,
    /// Made for one stateless OpenAI-compatible call: not counted against
    /// `max_sessions_per_user` (set by the server only).
    pub stateless: bool,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
