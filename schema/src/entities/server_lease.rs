//! `server_leases` table: who serves this database. One row `single-node` for a single-node
//! server, one row `replica:<id>` per replica of a cluster; each renewed by its holder's
//! heartbeat (`agentry_store::server_lease`).
use sea_orm::entity::prelude::*;

#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "server_leases")]
pub struct Model {
    /// `single-node`, or `replica:<replica id>`.
    #[sea_orm(primary_key, auto_increment = false)]
    pub name: String,
    /// `single` or `cluster`.
    pub mode: String,
    pub replica_id: String,
    /// The holder's host name, and its process id there: a holder on this host whose process
    /// is gone is known dead without waiting for its lease to expire.
    pub host: String,
    pub pid: i64,
    pub started_at: DateTimeUtc,
    pub heartbeat_at: DateTimeUtc,
    /// Past this the holder counts as dead and its lease may be taken over.
    pub expires_at: DateTimeUtc,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
