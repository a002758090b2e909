//! Wiring the engine (the actor tree and the agent loop) from the settings: the model clients,
//! the tools, the MCP configuration source, the runtime the agent loops run on. Also the mapping
//! of the engine's errors onto the one error shape.

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use agentry_actors::mcp_pool::{McpConfigSource, McpPoolConfig, Origin, PoolServer};
use agentry_actors::quota::{QuotaHandle, RedisQuota};
use agentry_actors::tools::PlatformTools;
use agentry_actors::{
    ConfiguredModels, Engine, EngineConfig, EngineDeps, EngineError, TenantConnections,
};
use agentry_builtin::data::DataSources;
use agentry_builtin::net_guard::GuardedResolver;
use agentry_mcp::config_file::McpConfigWatcher;
use agentry_mcp::stored::join_from_storage;
use agentry_schema::ids::UserId;
use agentry_sealing::SecretBox;
use agentry_store::mcp_servers;
use agentry_store::tenants::Tenant;
use anyhow::Context;
use async_trait::async_trait;
use sea_orm::DatabaseConnection;

use crate::error::ApiError;
use crate::mcp_stored::stored_of;
use crate::settings::Settings;

/// The runtime agent loops run on: multi-threaded, one worker per core, for the life of the
/// process (shared by every engine the process builds, e.g. in tests).
fn engine_runtime() -> anyhow::Result<tokio::runtime::Handle> {
    static RUNTIME: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    if let Some(rt) = RUNTIME.get() {
        return Ok(rt.handle().clone());
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(
            std::thread::available_parallelism()
                .map(|n| n.get())
                .unwrap_or(2),
        )
        .thread_name("agentry-engine")
        .enable_all()
        .build()
        .context("starting the engine runtime")?;
    Ok(RUNTIME.get_or_init(|| rt).handle().clone())
}

/// The MCP servers of a user: the platform's file (hot-reloaded) and the user's own rows, their
/// secrets opened with the configured key.
pub struct McpSources {
    pub db: DatabaseConnection,
    /// The address rules of the web tools, applied again to users' HTTP servers before each
    /// connect (a name may resolve elsewhere than when it was added).
    pub net: agentry_builtin::BuiltinConfig,
    pub secrets: Option<SecretBox>,
    pub file: Option<Arc<McpConfigWatcher>>,
}

#[async_trait]
impl McpConfigSource for McpSources {
    async fn servers_for(&self, tenant: &Tenant, user: UserId) -> (Vec<PoolServer>, Vec<String>) {
        let mut servers = Vec::new();
        let mut warnings = Vec::new();
        if let Some(file) = &self.file {
            for entry in &file.current().servers {
                servers.push(PoolServer {
                    config: entry.config.clone(),
                    policy: entry.policy.clone(),
                    origin: Origin::File,
                });
            }
        }
        match mcp_servers::list_by_user(&self.db, &tenant.scope(), user).await {
            Ok(rows) => {
                for row in rows {
                    match join_from_storage(&stored_of(&row), self.secrets.as_ref()) {
                        Ok(config) => {
                            if let agentry_mcp::client::McpTransportConfig::Http(h) =
                                &config.transport
                                && let Err(e @ agentry_tools::tool::ToolError::Refused(_)) =
                                    agentry_builtin::net_guard::check_url(&h.url, &self.net).await
                            {
                                warnings.push(format!(
                                    "MCP server {:?} was not connected: its URL is refused ({e})",
                                    row.name
                                ));
                                continue;
                            }
                            // An allow-list that cannot be read must not become "every tool".
                            let policy = match crate::mcp_stored::RestPolicy::of_row(&row) {
                                Ok(p) => p.map(|p| p.server_policy()).unwrap_or_default(),
                                Err(e) => {
                                    warnings.push(format!(
                                        "MCP server {:?} was not connected: {e}",
                                        row.name
                                    ));
                                    continue;
                                }
                            };
                            servers.push(PoolServer {
                                config,
                                policy,
                                origin: Origin::User,
                            });
                        }
                        Err(e) => {
                            warnings.push(format!("MCP server {:?} cannot be used: {e}", row.name))
                        }
                    }
                }
            }
            Err(e) => warnings.push(format!("your MCP servers could not be loaded: {e}")),
        }
        (servers, warnings)
    }

    fn oauth_tokens(
        &self,
        tenant: &Tenant,
        user: UserId,
        server: &agentry_mcp::client::McpServerConfig,
    ) -> Option<Arc<dyn agentry_mcp::client::oauth::OAuthTokenStore>> {
        let (http, _) = crate::routes::mcp_oauth::oauth_http(server)?;
        Some(Arc::new(crate::routes::mcp_oauth::DbTokenStore {
            db: self.db.clone(),
            secrets: self.secrets.clone(),
            scope: tenant.scope(),
            user,
            server: server.name.clone(),
            url: http.url.clone(),
        }))
    }
}

/// Everything the gateway keeps of the engine.
pub struct EngineParts {
    pub engine: Engine,
    pub secrets: Option<SecretBox>,
    /// Kept alive for hot reload; dropping it stops watching.
    pub watcher: Option<Arc<McpConfigWatcher>>,
    /// The platform's tools, built once here: the engine's runs and `/mcp` share them.
    pub tools: Arc<PlatformTools>,
    /// The tenants' data sources as the data tools and the REST routes reach them.
    pub data: Arc<DataSources>,
    /// Long-term memory: the runs, the memory tools and the REST API share it.
    pub memory: Arc<agentry_builtin::memory::MemoryBank>,
}

/// The addresses of the platform's own database and Redis (resolved once, at start): no data
/// source may point at them, whatever the network rule allows. A SQLite database has none.
fn platform_endpoints(settings: &Settings) -> Vec<std::net::SocketAddr> {
    use std::net::ToSocketAddrs;
    let mut out = Vec::new();
    for (raw, default_port) in [
        (settings.database.url.expose().to_string(), None),
        (settings.redis.url.expose().to_string(), Some(6379)),
    ] {
        let Ok(url) = reqwest::Url::parse(&raw) else {
            continue;
        };
        let port = url.port().or(default_port).or(match url.scheme() {
            "postgres" | "postgresql" => Some(5432),
            "mysql" | "mariadb" => Some(3306),
            _ => None,
        });
        let (Some(host), Some(port)) = (url.host_str(), port) else {
            continue;
        };
        let host = host.trim_start_matches('[').trim_end_matches(']');
        match (host, port).to_socket_addrs() {
            Ok(addrs) => out.extend(addrs),
            Err(e) => {
                tracing::warn!(host, error = %e, "resolving a platform service for the data sources' rule failed")
            }
        }
    }
    out
}

pub fn build(
    settings: &Settings,
    db: &DatabaseConnection,
    writer: &agentry_store::writer::Writer,
    cluster: &crate::cluster::Cluster,
) -> anyhow::Result<EngineParts> {
    let secrets = SecretBox::from_config(Some(&settings.mcp.encryption_key))
        .map(Some)
        .or_else(|e| match e {
            agentry_sealing::SecretError::NoKey => Ok(None),
            other => Err(other),
        })
        .context("mcp.encryption_key")?;
    let (diff_tx, mut diff_rx) = tokio::sync::mpsc::unbounded_channel();
    let watcher = match settings
        .mcp
        .config_file
        .as_ref()
        .filter(|p| !p.as_os_str().is_empty())
    {
        Some(path) => Some(Arc::new(
            McpConfigWatcher::start(path.clone(), move |diff| {
                // Called on the watcher's thread: hand over to the actix runtime.
                let _ = diff_tx.send(Arc::new(diff));
            })
            .with_context(|| format!("mcp.config_file {}", path.display()))?,
        )),
        None => None,
    };
    let http = reqwest::Client::builder()
        .build()
        .context("building the HTTP client for model providers")?;
    let data = Arc::new(DataSources::new(
        db.clone(),
        secrets.clone(),
        agentry_builtin::data::net_policy(
            &settings.tools,
            platform_endpoints(settings),
            settings.data_dir.join("workspaces"),
        ),
        agentry_data::Limits::default(),
    ));
    // Long-term memory: a tenant's own connection's embeddings model, else the platform's
    // embeddings endpoint, else search by words (docs/memory.md).
    let platform_embedder: Option<Arc<dyn agentry_llm::Embedder>> = settings
        .embeddings
        .build(http.clone())
        .map(|e| Arc::new(e) as Arc<dyn agentry_llm::Embedder>);
    let memory = Arc::new(agentry_builtin::memory::MemoryBank::with_source(
        db.clone(),
        Arc::new(agentry_actors::deps::TenantEmbedders {
            db: db.clone(),
            platform: platform_embedder,
            tenants: TenantConnections::new(&settings.tools, secrets.clone())
                .context("building the HTTP client for tenants' embeddings")?,
        }),
        settings.memory.clone(),
    ));
    let tools = Arc::new(
        PlatformTools::new(settings.tools.clone())
            .with_memory(memory.clone())
            .with_skills(db.clone())
            .with_data(data.clone()),
    );
    let deps = EngineDeps {
        db: db.clone(),
        writer: writer.clone(),
        draining: Default::default(),
        models: Arc::new(
            ConfiguredModels::new(settings.llm.clone(), http).with_tenant_connections(
                TenantConnections::new(&settings.tools, secrets.clone())
                    .context("building the HTTP client for tenants' model connections")?,
            ),
        ),
        tools: tools.clone(),
        mcp: Some(Arc::new(McpSources {
            db: db.clone(),
            net: settings.tools.clone(),
            secrets: secrets.clone(),
            file: watcher.clone(),
        })),
        config: EngineConfig {
            hitl_timeout: Duration::from_secs(settings.hitl.timeout_secs),
            session_timeout: Duration::from_secs(settings.session.timeout_secs),
            max_live_sessions: settings.session.max_live,
            data_dir: settings.data_dir.clone(),
            reserve_output_tokens: settings.quota.reserve_output_tokens,
            tasks: agentry_actors::agent::task::TaskLimits {
                max_depth: settings.tasks.max_depth,
                max_per_step: settings.tasks.max_per_step,
                max_parallel: settings.tasks.max_parallel,
            },
            mcp_pool: McpPoolConfig {
                health_interval: Duration::from_secs(settings.mcp.health_interval_secs),
                idle_timeout: Duration::from_secs(settings.mcp.idle_timeout_secs),
                connect_wait: Duration::from_secs(settings.mcp.connect_wait_secs),
                sandbox: settings.tools.sandbox.clone(),
                workspaces: settings.data_dir.join("workspaces"),
                user_http_guard: Arc::new(GuardedResolver::new(&settings.tools)),
                ..McpPoolConfig::default()
            },
            session_lease_ttl: Duration::from_secs(settings.cluster.session_lease_ttl_secs),
            replica_ttl: Duration::from_millis(settings.cluster.replica_ttl_ms),
            forward_timeout: Duration::from_millis(settings.cluster.forward_timeout_ms),
            ..EngineConfig::default()
        },
        runtime: engine_runtime()?,
        coordination: cluster.coordination.clone(),
        memory: Some(memory.clone()),
        assistants: Default::default(),
        fresh_sessions: Default::default(),
        remote_agents: Arc::new(
            agentry_actors::remote_agents::RemoteAgents::new(&settings.tools, secrets.clone())
                .context("building the HTTP client for remote A2A agents")?,
        ),
    };
    let arbiters = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(2);
    let mut engine = Engine::start(deps, arbiters, Duration::from_secs(600));
    if let Some(coord) = &cluster.coordination {
        // Cluster mode: every replica counts against the same quotas, in Redis (docs/admin.md).
        let (conn, prefix) = (coord.connection(), coord.key(""));
        engine = engine.with_quotas(Arc::new(move |tenant, used| {
            QuotaHandle::new(RedisQuota::new(
                conn.clone(),
                &prefix,
                tenant.id,
                tenant.quotas,
                used,
                agentry_actors::quota::redis::DEFAULT_LEASE,
            ))
        }));
    }
    engine.start_cluster();
    if watcher.is_some() {
        let e = engine.clone();
        actix_web::rt::spawn(async move {
            while let Some(diff) = diff_rx.recv().await {
                tracing::info!(summary = %diff.summary(), "MCP config file reloaded");
                if let Err(err) = e.mcp_file_changed(diff).await {
                    tracing::warn!(error = %err, "applying the MCP config change failed");
                }
            }
        });
    }
    Ok(EngineParts {
        engine,
        secrets,
        watcher,
        tools,
        data,
        memory,
    })
}

impl From<EngineError> for ApiError {
    fn from(e: EngineError) -> Self {
        match e {
            EngineError::Quota {
                quota,
                limit,
                retry_after,
            } => ApiError::quota_exceeded(
                quota,
                limit,
                format!(
                    "the tenant's {quota} quota ({limit}) is used up; retry after {} s",
                    retry_after.as_secs().max(1)
                ),
                retry_after.as_secs().max(1),
            ),
            EngineError::Unavailable => ApiError::new(
                e.code(),
                "the session is busy shutting down; retry in a moment",
            )
            .with_retry_after(1),
            EngineError::DatabaseUnavailable => ApiError::database_unavailable(),
            EngineError::ShuttingDown => ApiError::new(e.code(), e.to_string()).with_retry_after(5),
            EngineError::SessionOwnedElsewhere { retry_after, .. } => {
                let secs = retry_after.as_secs().max(1);
                ApiError::new(e.code(), e.to_string())
                    .with_details(e.details())
                    .with_retry_after(secs)
            }
            EngineError::CoordinationUnavailable
            | EngineError::OwnerUnreachable { .. }
            | EngineError::RunResuming
            | EngineError::Remote { .. } => {
                let retry = e.retry_after_secs();
                let api = ApiError::new(e.code(), e.to_string()).with_details(e.details());
                match retry {
                    Some(secs) => api.with_retry_after(secs),
                    None => api,
                }
            }
            EngineError::Internal(msg) => ApiError::internal("engine", msg),
            EngineError::NotFound(what) => ApiError::not_found(what),
            other => ApiError::new(other.code(), other.to_string()).with_details(other.details()),
        }
    }
}
