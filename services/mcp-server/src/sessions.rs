//! Which tenant user each MCP session belongs to ([`McpSessions`]): a session id belongs to the
//! tenant user whose `initialize` created it, on the path (`/mcp` or a virtual server) it was
//! opened on, and is "not found" for every other caller.
//!
//! Cluster mode: an MCP session lives on the replica whose `initialize` made it (rmcp keeps it
//! in that process). Each replica records its sessions in Redis ([`SessionDirectory`]:
//! `<prefix>:mcp:<session id>`: the replica, where to reach it, whose session it is); a request
//! for a session held by another replica is [`Admission::Elsewhere`], which the transport
//! proxies there. So `/mcp` works behind a load balancer without stickiness.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use agentry_schema::ids::{TenantId, UserId, VirtualServerName};
use agentry_store::coordination::Coordination;

/// MCP session bindings older than this are forgotten; the client then gets 404 and starts a
/// new session, as the MCP spec has clients do for an expired session.
const BINDING_TTL: Duration = Duration::from_secs(24 * 3600);

/// Whose an MCP session is.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Owner {
    pub tenant: TenantId,
    pub user: UserId,
    /// The virtual server the session was opened on (`/mcp/{name}`); `None` for `/mcp`.
    pub path: Option<VirtualServerName>,
}

/// What becomes of a request that names an MCP session.
#[derive(Debug, PartialEq, Eq)]
pub enum Admission {
    /// The caller's session, held here: serve it.
    Here,
    /// The caller's session, held by the replica at this base URL: proxy the request there.
    Elsewhere(String),
    /// Ended, expired, made up, or another tenant's or user's (which is as unknown as a made-up
    /// one): 404.
    Unknown,
}

/// The MCP sessions of this process, and in cluster mode where the others' are.
pub struct McpSessions {
    bindings: SessionBindings,
    directory: Option<SessionDirectory>,
}

impl McpSessions {
    /// `directory`: cluster mode (the sessions of other replicas are found through Redis).
    pub fn new(directory: Option<SessionDirectory>) -> Self {
        McpSessions {
            bindings: SessionBindings::default(),
            directory,
        }
    }

    /// Whether `owner` may use `session`. `from_peer`: another replica proxied the request here
    /// already, so it is answered here, never passed on twice.
    pub async fn admit(&self, session: &str, owner: &Owner, from_peer: bool) -> Admission {
        let local = self.bindings.owner(session);
        if local.as_ref() == Some(owner) {
            return Admission::Here;
        }
        if let Some(directory) = self.directory.as_ref().filter(|_| !from_peer)
            && local.is_none()
            && let Some(url) = directory.elsewhere(session, owner).await
        {
            return Admission::Elsewhere(url);
        }
        Admission::Unknown
    }

    /// `initialize` made `session` for `owner`.
    pub fn opened(&self, session: &str, owner: Owner) {
        if let Some(d) = &self.directory {
            d.publish(session, &owner);
        }
        self.bindings.bind(session.to_string(), owner);
    }

    /// The client ended `session`.
    pub fn closed(&self, session: &str) {
        self.bindings.forget(session);
        if let Some(d) = &self.directory {
            d.withdraw(session);
        }
    }
}

/// Which tenant user each MCP session of this process belongs to.
#[derive(Default)]
struct SessionBindings(Mutex<HashMap<String, (Owner, Instant)>>);

impl SessionBindings {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, (Owner, Instant)>> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn owner(&self, session: &str) -> Option<Owner> {
        let now = Instant::now();
        self.lock()
            .get(session)
            .filter(|(_, at)| now.duration_since(*at) < BINDING_TTL)
            .map(|(o, _)| o.clone())
    }

    fn bind(&self, session: String, owner: Owner) {
        let now = Instant::now();
        let mut map = self.lock();
        map.retain(|_, (_, at)| now.duration_since(*at) < BINDING_TTL);
        map.insert(session, (owner, now));
    }

    fn forget(&self, session: &str) {
        self.lock().remove(session);
    }
}

/// Cluster mode: where each replica's MCP sessions are, in Redis.
pub struct SessionDirectory {
    coordination: Coordination,
    /// This replica's id and advertised base URL (`cluster.advertise_url`).
    me: String,
    url: String,
}

/// Where an MCP session lives, as Redis holds it.
#[derive(serde::Serialize, serde::Deserialize)]
struct RemoteBinding {
    replica: String,
    url: String,
    tenant: TenantId,
    user: UserId,
}

impl SessionDirectory {
    /// `url`: the base URL other replicas reach this one by.
    pub fn new(coordination: Coordination, url: String) -> Self {
        SessionDirectory {
            me: coordination.replica_id().to_string(),
            coordination,
            url,
        }
    }

    fn key(session: &str) -> String {
        format!("mcp:{session}")
    }

    /// Say that this replica holds `session`, for `owner`.
    fn publish(&self, session: &str, owner: &Owner) {
        let binding = RemoteBinding {
            replica: self.me.clone(),
            url: self.url.clone(),
            tenant: owner.tenant,
            user: owner.user,
        };
        let Ok(value) = serde_json::to_string(&binding) else {
            return;
        };
        let (c, key) = (self.coordination.clone(), Self::key(session));
        tokio::task::spawn_local(async move {
            if let Err(e) = c.put(&key, &value, BINDING_TTL).await {
                tracing::warn!(error = %e, "recording an MCP session in Redis failed; other replicas answer 404 for it");
            }
        });
    }

    fn withdraw(&self, session: &str) {
        let (c, key) = (self.coordination.clone(), Self::key(session));
        tokio::task::spawn_local(async move {
            let _ = c.forget(&key).await;
        });
    }

    /// The replica URL of `owner`'s `session` when another replica holds it.
    async fn elsewhere(&self, session: &str, owner: &Owner) -> Option<String> {
        let value = self.coordination.get(&Self::key(session)).await.ok()??;
        let b: RemoteBinding = serde_json::from_str(&value).ok()?;
        (b.replica != self.me && b.tenant == owner.tenant && b.user == owner.user).then_some(b.url)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bindings_belong_to_one_owner() {
        let b = SessionBindings::default();
        let a = Owner {
            tenant: TenantId::new(),
            user: UserId::new(),
            path: None,
        };
        b.bind("s1".into(), a.clone());
        assert_eq!(b.owner("s1"), Some(a.clone()));
        let on_virtual = Owner {
            path: Some(VirtualServerName::try_from("support").unwrap()),
            ..a.clone()
        };
        assert_ne!(b.owner("s1"), Some(on_virtual));
        assert_eq!(b.owner("s2"), None);
        b.forget("s1");
        assert_eq!(b.owner("s1"), None);
    }

    #[tokio::test]
    async fn a_session_is_admitted_for_its_owner_only() {
        let sessions = McpSessions::new(None);
        let a = Owner {
            tenant: TenantId::new(),
            user: UserId::new(),
            path: None,
        };
        let other_user = Owner {
            user: UserId::new(),
            ..a.clone()
        };
        assert_eq!(sessions.admit("s1", &a, false).await, Admission::Unknown);
        sessions.opened("s1", a.clone());
        assert_eq!(sessions.admit("s1", &a, false).await, Admission::Here);
        assert_eq!(sessions.admit("s1", &a, true).await, Admission::Here);
        assert_eq!(
            sessions.admit("s1", &other_user, false).await,
            Admission::Unknown
        );
        sessions.closed("s1");
        assert_eq!(sessions.admit("s1", &a, false).await, Admission::Unknown);
    }
}
