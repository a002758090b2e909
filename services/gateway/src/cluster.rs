//! This server among servers (issue 13, item 1): its mode, its replica id, the database lease
//! it holds, and in cluster mode the one Redis connection every coordinating part shares.
//!
//! - **Single-node** (`redis.url` unset): the server holds the database's `single-node` lease;
//!   a second single-node server on the same database is refused at start, naming the holder.
//! - **Cluster** (`redis.url` set; PostgreSQL or MySQL): the server holds the lease
//!   `replica:<id>` and connects to Redis ([`Coordination`]); a single-node server on the same
//!   database is refused, and so is a replica whose id a live replica already uses.
//!
//! The lease is renewed every third of `cluster.database_lease_ttl_secs`. A server that finds
//! its lease taken over (it stalled past the TTL and another server started) exits at once:
//! two servers running the same sessions is the one thing the lease exists to prevent.

use std::sync::Arc;
use std::time::Duration;

use agentry_store::PlatformScope;
use agentry_store::coordination::{Coordination, CoordinationOptions};
use agentry_store::server_lease::{self, Holder, ServeMode};
use anyhow::Context;
use rand::distr::{Alphanumeric, SampleString};
use sea_orm::DatabaseConnection;

use crate::settings::{Settings, mask_password};

/// The exit status of a server whose database lease another server took over.
pub const LEASE_LOST_EXIT: i32 = 75;

pub struct Cluster {
    pub mode: ServeMode,
    holder: Holder,
    ttl: Duration,
    /// Redis, in cluster mode.
    pub coordination: Option<Coordination>,
    /// Cluster mode: what proves a request comes from another replica (see [`PEER_HEADER`]).
    pub peer_secret: Option<String>,
}

/// The header a replica's request to another replica carries (a proxied `/mcp` request), with
/// the cluster's peer secret: such a request was admitted (counted against the tenant's
/// quotas) by the replica that proxied it.
pub const PEER_HEADER: &str = "x-agentry-peer";

impl Cluster {
    /// Whether `req` comes from another replica of this cluster.
    pub fn from_peer(&self, req: &actix_web::HttpRequest) -> bool {
        let (Some(secret), Some(sent)) = (&self.peer_secret, req.headers().get(PEER_HEADER)) else {
            return false;
        };
        use subtle::ConstantTimeEq;
        bool::from(secret.as_bytes().ct_eq(sent.as_bytes()))
    }
}

impl Cluster {
    pub fn replica_id(&self) -> &str {
        &self.holder.replica_id
    }

    /// Is this server one replica of several?
    pub fn is_cluster(&self) -> bool {
        self.mode == ServeMode::Cluster
    }

    /// Give the database lease up (a graceful stop), so the next server starts at once.
    pub async fn release(&self, db: &DatabaseConnection) {
        match server_lease::release(db, &PlatformScope::new(), &self.holder).await {
            Ok(true) => tracing::info!(
                replica_id = %self.holder.replica_id,
                "released the database lease"
            ),
            Ok(false) => {}
            Err(e) => tracing::warn!(
                error = %e,
                "could not release the database lease; the next server waits for it to expire"
            ),
        }
    }

    /// Renew the lease every third of its TTL for as long as the process runs; exit if another
    /// server took it over.
    fn spawn_heartbeat(self: &Arc<Self>, db: DatabaseConnection) {
        let me = self.clone();
        actix_web::rt::spawn(async move {
            let every = me.ttl / 3;
            loop {
                tokio::time::sleep(every).await;
                match server_lease::renew(&db, &PlatformScope::new(), &me.holder, me.ttl).await {
                    Ok(true) => {}
                    Ok(false) => {
                        tracing::error!(
                            replica_id = %me.holder.replica_id,
                            lease = %me.holder.lease_name(),
                            "another server took this server's database lease over (this one \
                             stalled past cluster.database_lease_ttl_secs): stopping now so the \
                             two never run the same sessions"
                        );
                        std::process::exit(LEASE_LOST_EXIT);
                    }
                    // The database is away: the lease stays ours until another server takes
                    // it, which it can only do through the same database.
                    Err(e) => tracing::warn!(error = %e, "renewing the database lease failed"),
                }
            }
        });
    }
}

/// A replica id: `<host name>-<6 random characters>`, made of the characters ids allow.
fn generated_replica_id() -> String {
    let host: String = server_lease::host_name()
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.') {
                c
            } else {
                '-'
            }
        })
        .take(80)
        .collect();
    let suffix = Alphanumeric
        .sample_string(&mut rand::rng(), 6)
        .to_lowercase();
    format!("{host}-{suffix}")
}

/// Take this server's place: pick the replica id, connect to Redis in cluster mode, take the
/// database lease (or fail naming who holds it), and keep the lease renewed.
pub async fn join(settings: &Settings, db: &DatabaseConnection) -> anyhow::Result<Arc<Cluster>> {
    let replica_id = if settings.cluster.replica_id.is_empty() {
        generated_replica_id()
    } else {
        settings.cluster.replica_id.clone()
    };
    let redis_url = settings.redis.url.expose();
    let mode = if redis_url.is_empty() {
        ServeMode::Single
    } else {
        ServeMode::Cluster
    };
    let coordination = match mode {
        ServeMode::Single => None,
        ServeMode::Cluster => {
            let opts = CoordinationOptions {
                url: redis_url.to_string(),
                key_prefix: settings.redis.key_prefix.clone(),
                replica_id: replica_id.clone(),
                startup_timeout: Duration::from_secs(settings.database.connect_timeout_secs),
            };
            let c = Coordination::connect(&opts).await.with_context(|| {
                format!(
                    "connecting to Redis at {} (redis.url): cluster mode needs it at start",
                    mask_password(redis_url)
                )
            })?;
            c.spawn_probe();
            Some(c)
        }
    };
    let peer_secret = match &coordination {
        Some(c) => Some(
            c.peer_secret()
                .await
                .context("reading the cluster's peer secret from Redis")?,
        ),
        None => None,
    };
    let holder = Holder::this_process(mode, replica_id);
    let ttl = Duration::from_secs(settings.cluster.database_lease_ttl_secs);
    match server_lease::acquire(db, &PlatformScope::new(), &holder, ttl)
        .await
        .context("taking the database lease")?
    {
        Ok(()) => {}
        Err(held) => anyhow::bail!("this database is taken: {}", held.explain(mode)),
    }
    tracing::info!(
        replica_id = %holder.replica_id,
        mode = mode.as_str(),
        host = %holder.host,
        "took the database lease ({} mode)",
        mode.as_str()
    );
    let cluster = Arc::new(Cluster {
        mode,
        holder,
        ttl,
        coordination,
        peer_secret,
    });
    cluster.spawn_heartbeat(db.clone());
    Ok(cluster)
}
