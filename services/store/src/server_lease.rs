//! Who serves this database (issue 13, item 1): the `server_leases` rows.
//!
//! A single-node server (no Redis) keeps the whole database to itself: it holds the row
//! `single-node`, and a second single-node server on the same database is refused at start,
//! naming the holder. Each replica of a cluster (Redis configured) holds `replica:<id>`: a
//! single-node server is refused while any replica is live, and a replica is refused while a
//! single-node server is, or while another live process uses the same replica id.
//!
//! Every holder renews its row on a heartbeat ([`renew`]). A row whose `expires_at` has passed
//! belongs to a holder presumed dead and may be taken over. On the holder's own host, a holder
//! whose process is gone (or is not an `agentry` process any more) is known dead at once, so a
//! server restarted after a crash (`kill -9`) on the same machine does not wait out the TTL.
//!
//! Expiry compares wall clocks of different hosts: their clocks must agree to well within the
//! TTL (NTP does).

use std::time::Duration;

use chrono::{DateTime, Utc};
use sea_orm::{
    ActiveModelTrait, ColumnTrait, ConnectionTrait, EntityTrait, QueryFilter, Set, SqlErr,
};

use agentry_schema::entities::server_lease;

use crate::{PlatformScope, Result, StoreError, now};

/// The row a single-node server holds.
pub const SINGLE_NODE: &str = "single-node";
const REPLICA_PREFIX: &str = "replica:";

/// How this process serves the database.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ServeMode {
    /// No Redis: one server owns the database.
    Single,
    /// Redis configured: one replica of several.
    Cluster,
}

impl ServeMode {
    pub fn as_str(self) -> &'static str {
        match self {
            ServeMode::Single => "single",
            ServeMode::Cluster => "cluster",
        }
    }
}

/// This process, as a lease holder.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Holder {
    pub mode: ServeMode,
    pub replica_id: String,
    pub host: String,
    pub pid: i64,
}

impl Holder {
    /// This process: its host name and pid.
    pub fn this_process(mode: ServeMode, replica_id: String) -> Holder {
        Holder {
            mode,
            replica_id,
            host: host_name(),
            pid: i64::from(std::process::id()),
        }
    }

    /// The row this holder holds.
    pub fn lease_name(&self) -> String {
        match self.mode {
            ServeMode::Single => SINGLE_NODE.to_string(),
            ServeMode::Cluster => format!("{REPLICA_PREFIX}{}", self.replica_id),
        }
    }
}

/// The machine's host name (the pod name on Kubernetes).
pub fn host_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .map(|h| h.trim().to_string())
        .filter(|h| !h.is_empty())
        .or_else(|| std::env::var("HOSTNAME").ok().filter(|h| !h.is_empty()))
        .unwrap_or_else(|| "unknown-host".into())
}

/// A live lease that keeps this process from serving the database.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaseHeld {
    pub name: String,
    pub mode: String,
    pub replica_id: String,
    pub host: String,
    pub pid: i64,
    pub heartbeat_at: DateTime<Utc>,
    pub expires_at: DateTime<Utc>,
}

impl LeaseHeld {
    fn of(m: &server_lease::Model) -> LeaseHeld {
        LeaseHeld {
            name: m.name.clone(),
            mode: m.mode.clone(),
            replica_id: m.replica_id.clone(),
            host: m.host.clone(),
            pid: m.pid,
            heartbeat_at: m.heartbeat_at,
            expires_at: m.expires_at,
        }
    }

    /// Seconds until the lease expires if its holder stops renewing it now.
    pub fn expires_in_secs(&self) -> i64 {
        (self.expires_at - now()).num_seconds().max(0) + 1
    }

    /// What the refused process tells its operator: who holds the database, and how to get it.
    pub fn explain(&self, wanted: ServeMode) -> String {
        let who = format!(
            "replica {:?} (pid {} on host {:?}, last heartbeat {})",
            self.replica_id,
            self.pid,
            self.host,
            self.heartbeat_at.format("%Y-%m-%d %H:%M:%S UTC"),
        );
        let what = match (wanted, self.mode.as_str()) {
            (ServeMode::Single, "single") => format!(
                "another single-node server serves this database: {who}. Two single-node \
                 servers on one database would run the same sessions twice"
            ),
            (ServeMode::Single, _) => format!(
                "a cluster serves this database ({who} is live): a single-node server next \
                 to it would run its sessions twice. Set redis.url (AGENTRY_REDIS__URL) to the \
                 cluster's Redis to join it"
            ),
            (ServeMode::Cluster, "single") => format!(
                "a single-node server serves this database: {who}. Stop it before starting \
                 replicas in cluster mode"
            ),
            (ServeMode::Cluster, _) => format!(
                "another live process uses the replica id {:?}: {who}. Give each replica its \
                 own cluster.replica_id (or leave it unset to generate one)",
                self.replica_id
            ),
        };
        format!(
            "{what}. If that holder is dead, its lease expires in {} s and a start after that \
             takes it over (docs/operations.md, \"The database lease\")",
            self.expires_in_secs()
        )
    }
}

/// Is `pid` on this host gone, or some other program than this one (its pid reused)?
fn local_process_gone(pid: i64) -> bool {
    if pid == i64::from(std::process::id()) {
        // A row naming our own pid is an earlier incarnation (a container restarts as pid 1).
        return true;
    }
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return true;
    };
    // `pid (comm) S …`: the state follows the last `)`; a zombie or dead task is gone.
    let state = stat
        .rsplit_once(')')
        .and_then(|(_, rest)| rest.trim_start().chars().next());
    if matches!(state, Some('Z' | 'X' | 'x')) {
        return true;
    }
    let comm = |p: &str| {
        std::fs::read_to_string(format!("/proc/{p}/comm"))
            .map(|c| c.trim().to_string())
            .ok()
    };
    match (comm(&pid.to_string()), comm("self")) {
        (Some(theirs), Some(ours)) => theirs != ours,
        _ => false,
    }
}

/// May `me` take `row` over: expired, or held by a process of this host that is gone?
fn is_dead(row: &server_lease::Model, me: &Holder, at: DateTime<Utc>) -> bool {
    row.expires_at <= at || (row.host == me.host && local_process_gone(row.pid))
}

fn ttl_of(ttl: Duration) -> chrono::Duration {
    chrono::Duration::from_std(ttl).unwrap_or_else(|_| chrono::Duration::seconds(15))
}

/// Take this process's lease, or say who holds the database. `Ok(Err(held))` is a refusal.
pub async fn acquire(
    db: &impl ConnectionTrait,
    _: &PlatformScope,
    me: &Holder,
    ttl: Duration,
) -> Result<std::result::Result<(), LeaseHeld>> {
    // The leases that exclude this one: a single-node server excludes everything, a cluster
    // excludes single-node servers.
    let at = now();
    let rivals = server_lease::Entity::find()
        .filter(match me.mode {
            ServeMode::Single => server_lease::Column::Name.starts_with(REPLICA_PREFIX),
            ServeMode::Cluster => server_lease::Column::Name.eq(SINGLE_NODE),
        })
        .all(db)
        .await?;
    if let Some(live) = rivals.iter().find(|r| !is_dead(r, me, at)) {
        return Ok(Err(LeaseHeld::of(live)));
    }
    let name = me.lease_name();
    // Two rounds: a holder that vanished (or a rival that inserted) between our read and our
    // write is seen on the second.
    for _ in 0..3 {
        let at = now();
        let expires = at + ttl_of(ttl);
        let existing = server_lease::Entity::find_by_id(name.clone())
            .one(db)
            .await?;
        match existing {
            None => {
                let row = server_lease::ActiveModel {
                    name: Set(name.clone()),
                    mode: Set(me.mode.as_str().to_string()),
                    replica_id: Set(me.replica_id.clone()),
                    host: Set(me.host.clone()),
                    pid: Set(me.pid),
                    started_at: Set(at),
                    heartbeat_at: Set(at),
                    expires_at: Set(expires),
                };
                match row.insert(db).await {
                    Ok(_) => return Ok(Ok(())),
                    Err(e)
                        if matches!(
                            crate::sql_err(&e),
                            Some(SqlErr::UniqueConstraintViolation(_))
                        ) =>
                    {
                        continue;
                    }
                    Err(e) => return Err(e.into()),
                }
            }
            Some(row) if !is_dead(&row, me, at) => return Ok(Err(LeaseHeld::of(&row))),
            Some(row) => {
                // Take over exactly the dead holder's row: a rival that took it meanwhile
                // changed it, and this update then changes nothing.
                let taken = server_lease::Entity::update_many()
                    .col_expr(server_lease::Column::Mode, me.mode.as_str().into())
                    .col_expr(
                        server_lease::Column::ReplicaId,
                        me.replica_id.clone().into(),
                    )
                    .col_expr(server_lease::Column::Host, me.host.clone().into())
                    .col_expr(server_lease::Column::Pid, me.pid.into())
                    .col_expr(server_lease::Column::StartedAt, at.into())
                    .col_expr(server_lease::Column::HeartbeatAt, at.into())
                    .col_expr(server_lease::Column::ExpiresAt, expires.into())
                    .filter(server_lease::Column::Name.eq(name.clone()))
                    .filter(server_lease::Column::Host.eq(row.host.clone()))
                    .filter(server_lease::Column::Pid.eq(row.pid))
                    .filter(server_lease::Column::ExpiresAt.eq(row.expires_at))
                    .exec(db)
                    .await?;
                if taken.rows_affected == 1 {
                    tracing::warn!(
                        lease = %name,
                        previous_replica = %row.replica_id,
                        previous_host = %row.host,
                        previous_pid = row.pid,
                        "took over the database lease of a holder that is gone"
                    );
                    return Ok(Ok(()));
                }
            }
        }
    }
    Err(StoreError::Conflict(format!(
        "the database lease {name:?} kept changing hands while this server started; retry"
    )))
}

/// Renew this process's lease. `Ok(false)`: it is no longer ours (another process took it over
/// after this one stopped renewing it).
pub async fn renew(
    db: &impl ConnectionTrait,
    _: &PlatformScope,
    me: &Holder,
    ttl: Duration,
) -> Result<bool> {
    let at = now();
    let res = server_lease::Entity::update_many()
        .col_expr(server_lease::Column::HeartbeatAt, at.into())
        .col_expr(server_lease::Column::ExpiresAt, (at + ttl_of(ttl)).into())
        .filter(server_lease::Column::Name.eq(me.lease_name()))
        .filter(server_lease::Column::Host.eq(me.host.clone()))
        .filter(server_lease::Column::Pid.eq(me.pid))
        .filter(server_lease::Column::ReplicaId.eq(me.replica_id.clone()))
        .exec(db)
        .await?;
    Ok(res.rows_affected == 1)
}

/// Give this process's lease up (a graceful stop), so the next server need not wait.
pub async fn release(db: &impl ConnectionTrait, _: &PlatformScope, me: &Holder) -> Result<bool> {
    let res = server_lease::Entity::delete_many()
        .filter(server_lease::Column::Name.eq(me.lease_name()))
        .filter(server_lease::Column::Host.eq(me.host.clone()))
        .filter(server_lease::Column::Pid.eq(me.pid))
        .exec(db)
        .await?;
    Ok(res.rows_affected == 1)
}

/// The leases whose holders are live now (for operators and tests).
pub async fn live(db: &impl ConnectionTrait, _: &PlatformScope) -> Result<Vec<LeaseHeld>> {
    let at = now();
    Ok(server_lease::Entity::find()
        .filter(server_lease::Column::ExpiresAt.gt(at))
        .all(db)
        .await?
        .iter()
        .map(LeaseHeld::of)
        .collect())
}
