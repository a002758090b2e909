//! Cache invalidation across replicas (issue 13, item 7): a change made on one replica — a
//! tenant updated, suspended or deleted, its users changed, a key revoked, an assistant
//! changed — is announced on the Redis channel `<prefix>:changes`, and every other replica drops
//! what it cached of it (its key cache, its live sessions' assistant) at once, instead of waiting
//! for `auth.cache_ttl_secs`.
//!
//! Pub/sub delivers at most once: a replica cut off from Redis misses the messages sent
//! meanwhile, so when its subscription comes back it drops its whole key cache (the TTL bounds
//! what it could have missed before it noticed).

use std::time::Duration;

use std::sync::Arc;

use agentry_schema::ids::{ApiKeyId, AssistantId, TenantId};
use agentry_store::PlatformScope;
use serde::{Deserialize, Serialize};

use crate::{Domain, HasDomain};

/// What changed, as every replica hears it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Change {
    /// The tenant's row (status, quotas, policy) changed, or it was deleted.
    Tenant { tenant_id: TenantId },
    /// A user of the tenant changed (role, disabled) or was deleted: its keys' cached roles.
    Users { tenant_id: TenantId },
    /// A key was revoked.
    Key {
        tenant_id: TenantId,
        key_id: ApiKeyId,
    },
    /// An assistant was changed or deleted.
    Assistant {
        tenant_id: TenantId,
        assistant_id: AssistantId,
    },
    /// Something every assistant of the tenant may use changed (a profile, a model connection,
    /// a skill).
    Assistants { tenant_id: TenantId },
}

#[derive(Debug, Serialize, Deserialize)]
struct Envelope {
    origin: String,
    #[serde(flatten)]
    change: Change,
}

/// The channel, under the deployment's key prefix.
const CHANNEL: &str = "changes";

/// Tell the other replicas (cluster mode; nothing in single-node mode). Best effort: while Redis
/// is away they rely on the cache TTL.
pub fn announce(domain: &Domain<'_>, change: Change) {
    let Some(c) = domain.coordination.cloned() else {
        return;
    };
    let envelope = Envelope {
        origin: c.replica_id().to_string(),
        change,
    };
    let Ok(payload) = serde_json::to_string(&envelope) else {
        return;
    };
    tokio::task::spawn_local(async move {
        if let Err(e) = c.publish(CHANNEL, &payload).await {
            tracing::warn!(error = %e, "announcing a change to the other replicas failed; their caches expire it by their TTL");
        }
    });
}

/// Apply a change another replica announced.
async fn apply(domain: &Domain<'_>, change: Change) {
    match change {
        Change::Tenant { tenant_id } => {
            domain.credentials.forget_tenant(tenant_id);
            match agentry_store::tenants::get(domain.db, &PlatformScope::new(), tenant_id).await {
                Ok(Some(tenant)) => {
                    if let Err(e) = domain.engine.tenant_changed(&tenant).await {
                        tracing::warn!(error = %e, "applying another replica's tenant change failed");
                    }
                }
                Ok(None) => {
                    if let Err(e) = domain.engine.tenant_deleted(tenant_id).await {
                        tracing::warn!(error = %e, "stopping a tenant another replica deleted failed");
                    }
                }
                Err(e) => {
                    tracing::warn!(error = %e, "loading a tenant another replica changed failed")
                }
            }
        }
        Change::Users { tenant_id } => domain.credentials.forget_tenant(tenant_id),
        Change::Key { key_id, .. } => domain.credentials.forget_key(key_id),
        Change::Assistant {
            tenant_id,
            assistant_id,
        } => {
            if let Err(e) = domain
                .engine
                .assistant_changed(tenant_id, &assistant_id)
                .await
            {
                tracing::warn!(error = %e, "applying another replica's assistant change failed");
            }
        }
        Change::Assistants { tenant_id } => {
            if let Err(e) = domain.engine.assistants_changed(tenant_id).await {
                tracing::warn!(error = %e, "applying another replica's profile change failed");
            }
        }
    }
}

/// Listen for the other replicas' changes for as long as the process runs, resubscribing after
/// Redis comes back (and then dropping the whole key cache: messages sent meanwhile are lost).
pub fn spawn_listener(host: Arc<impl HasDomain>) {
    let Some(c) = host.domain().coordination.cloned() else {
        return;
    };
    tokio::task::spawn_local(async move {
        use futures::StreamExt;
        let mine = c.replica_id().to_string();
        let mut first = true;
        loop {
            let subscribed = c.subscribe(CHANNEL);
            let mut messages = match tokio::time::timeout(Duration::from_secs(3), subscribed).await
            {
                Ok(Ok(p)) => p,
                Ok(Err(e)) => {
                    tracing::debug!(error = %e, "subscribing to the replicas' changes failed; retrying");
                    tokio::time::sleep(Duration::from_millis(500)).await;
                    continue;
                }
                Err(_) => {
                    tracing::debug!("subscribing to the replicas' changes timed out; retrying");
                    continue;
                }
            };
            if !first {
                tracing::info!(
                    "listening to the replicas' changes again; dropping the key cache, since changes sent meanwhile were missed"
                );
                host.domain().credentials.forget_all();
            }
            first = false;
            while let Some(msg) = messages.next().await {
                match serde_json::from_slice::<Envelope>(msg.get_payload_bytes()) {
                    Ok(e) if e.origin == mine => {}
                    Ok(e) => {
                        tracing::debug!(origin = %e.origin, change = ?e.change, "a change from another replica");
                        apply(&host.domain(), e.change).await;
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, "an unreadable change on the replicas' channel")
                    }
                }
            }
            tracing::warn!("the subscription to the replicas' changes ended; resubscribing");
        }
    });
}
