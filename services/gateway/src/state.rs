//! State shared by every handler (`web::Data<AppState>`).

use std::sync::Arc;
use std::sync::atomic::AtomicUsize;
use std::time::Instant;

use metrics_exporter_prometheus::PrometheusHandle;
use sea_orm::DatabaseConnection;

use crate::auth::cache::KeyResolver;
use crate::settings::Settings;

pub struct AppState {
    pub db: DatabaseConnection,
    /// The database's last known reachability, for the health endpoints.
    pub db_probe: Arc<crate::readiness::DatabaseProbe>,
    pub settings: Settings,
    /// This server's mode, replica id and database lease; Redis in cluster mode.
    pub cluster: Arc<crate::cluster::Cluster>,
    pub started: Instant,
    /// Resolves API keys (with a short cache); see `auth`.
    pub auth: KeyResolver,
    /// The external authorization server `/mcp` trusts (`[mcp.oauth]`), when configured.
    pub oauth: Option<std::sync::Arc<crate::auth::oauth::OAuthVerifier>>,
    /// The process's Prometheus registry, rendered at `/metrics`.
    pub metrics: PrometheusHandle,
    /// The actor tree: sessions, runs, approvals, quotas, MCP pools.
    pub engine: agentry_actors::Engine,
    /// Seals users' MCP secrets at rest (`mcp.encryption_key`); `None` when no key is set.
    pub secrets: Option<agentry_sealing::SecretBox>,
    /// The tenants' data sources (the network rule their URLs follow), shared with the data
    /// tools.
    pub data: Arc<agentry_builtin::data::DataSources>,
    /// Open WebSocket connections (capped by `server.max_connections`).
    pub ws_connections: Arc<AtomicUsize>,
    /// Cancelled when the process starts stopping (SIGTERM/SIGINT): every WebSocket closes with
    /// 1001 "going away" so its client reconnects elsewhere.
    pub shutdown: tokio_util::sync::CancellationToken,
    /// The MCP config file watcher, kept alive while the server runs.
    pub mcp_file: Option<Arc<agentry_mcp::config_file::McpConfigWatcher>>,
    /// Long-term memory (`/api/v1/memories`), shared with the engine's runs and tools.
    pub memory: Arc<agentry_builtin::memory::MemoryBank>,
    /// Outbound webhooks (A2A push notifications): the outbox and its delivery worker.
    pub webhooks: Arc<crate::webhooks::Webhooks>,
    /// The A2A tasks this process watches for their push notifications.
    pub push_watchers: crate::webhooks::Watchers,
}

impl AppState {
    /// The domain operations' view of this state (`agentry_domain`): the database, the engine,
    /// the cluster's coordination and the key cache.
    pub fn domain(&self) -> agentry_domain::Domain<'_> {
        agentry_domain::Domain {
            db: &self.db,
            engine: &self.engine,
            coordination: self.cluster.coordination.as_ref(),
            credentials: &self.auth,
        }
    }
}

impl agentry_domain::HasDomain for AppState {
    fn domain(&self) -> agentry_domain::Domain<'_> {
        AppState::domain(self)
    }
}
