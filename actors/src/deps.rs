//! What the engine needs from the outside world, injected as small traits so the composition
//! root (the gateway) decides which model clients and tools a run gets.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use agentry_llm::{ChatModel, LlmError, ModelConfig, RetryPolicy, build_model};
use agentry_schema::ids::{SessionId, TenantId, UserId};
use agentry_schema::tenancy::Role;
use agentry_store::assistants::Assistant;
use agentry_store::tenants::Tenant;
pub use agentry_tools::pipeline::{AllowAll, ToolPolicy};
use agentry_tools::tool::{ToolRegistry, ToolSpec};
use async_trait::async_trait;
use sea_orm::DatabaseConnection;

/// Engine knobs, from the server configuration.
#[derive(Debug, Clone)]
pub struct EngineConfig {
    /// How long an approval waits before it counts as a reject.
    pub hitl_timeout: Duration,
    /// An idle session actor stops after this long.
    pub session_timeout: Duration,
    /// How many stored messages a run sends the model as history.
    pub history_window: u64,
    /// How many recent events each session keeps in memory for replay.
    pub event_ring: usize,
    /// Checkpoints kept per run once it ends.
    pub checkpoint_keep: u64,
    /// The data dir; workspaces live in `{data_dir}/workspaces/{tenant}/{user}`.
    pub data_dir: PathBuf,
    /// How many times a crashed run is restarted from its checkpoint before it fails.
    pub max_restarts: u32,
    /// After a cancel, how long the loop gets to stop by itself before it is aborted.
    pub cancel_grace: Duration,
    /// How often buffered events are written to the database.
    pub event_flush_interval: Duration,
    /// Live session actors per process past which the least recently used idle ones stop
    /// (they start again, from the database, when next used); 0: no cap.
    pub max_live_sessions: usize,
    /// Cluster mode: how long a replica's lease on a session's live run lasts unless renewed
    /// (it is renewed every third of this).
    pub session_lease_ttl: Duration,
    /// Cluster mode: a replica silent this long (no heartbeat) is dead, and the others take
    /// over its sessions that have a run going or waiting.
    pub replica_ttl: Duration,
    /// Cluster mode: how long a command forwarded to a session's owner waits for its answer.
    pub forward_timeout: Duration,
    /// Tokens each model call reserves of the tenant's `tokens_per_day` for its answer, on top
    /// of the prompt's estimate (a request's own `max_tokens` wins).
    pub reserve_output_tokens: u64,
    pub mcp_pool: crate::mcp_pool::McpPoolConfig,
}

impl Default for EngineConfig {
    fn default() -> Self {
        EngineConfig {
            hitl_timeout: Duration::from_secs(300),
            session_timeout: Duration::from_secs(3600),
            history_window: 50,
            event_ring: 1024,
            checkpoint_keep: 3,
            data_dir: PathBuf::from("./agentry-data"),
            max_restarts: 2,
            cancel_grace: Duration::from_millis(300),
            event_flush_interval: Duration::from_millis(100),
            max_live_sessions: 1_000,
            session_lease_ttl: Duration::from_secs(10),
            replica_ttl: Duration::from_secs(3),
            forward_timeout: Duration::from_secs(5),
            reserve_output_tokens: 1024,
            mcp_pool: crate::mcp_pool::McpPoolConfig::default(),
        }
    }
}

/// Picks the model client for an assistant.
pub trait ModelProvider: Send + Sync {
    fn model_for(&self, assistant: &Assistant) -> Result<Arc<dyn ChatModel>, LlmError>;

    /// The delays the agent loop waits between its own retries (a model answer that broke off,
    /// an unavailable tool backend): the operator's configured `base_delay`, so one setting
    /// paces every retry of a run. The assistant's `max_retries` still decides how many.
    fn retry_policy(&self, _assistant: &Assistant) -> RetryPolicy {
        RetryPolicy::default()
    }
}

/// (provider, model, base URL): what makes two model clients different.
type ModelKey = (String, String, String);

/// Model clients built from the server's `[llm]` config with each assistant's provider/model
/// overrides, cached per distinct configuration and sharing one HTTP client.
pub struct ConfiguredModels {
    base: ModelConfig,
    client: reqwest::Client,
    cache: Mutex<HashMap<ModelKey, Arc<dyn ChatModel>>>,
}

impl ConfiguredModels {
    pub fn new(base: ModelConfig, client: reqwest::Client) -> Self {
        Self {
            base,
            client,
            cache: Mutex::new(HashMap::new()),
        }
    }

    pub fn base(&self) -> &ModelConfig {
        &self.base
    }
}

impl ModelProvider for ConfiguredModels {
    fn model_for(&self, assistant: &Assistant) -> Result<Arc<dyn ChatModel>, LlmError> {
        let cfg = self.base.with_overrides(
            assistant.spec.provider.as_deref(),
            assistant.spec.model.as_deref(),
        )?;
        let key = (
            cfg.provider.as_str().to_string(),
            cfg.effective_model().to_string(),
            cfg.effective_base_url().unwrap_or_default().to_string(),
        );
        if let Some(m) = self.cache.lock().ok().and_then(|c| c.get(&key).cloned()) {
            return Ok(m);
        }
        let model = build_model(&cfg, self.client.clone())?;
        if let Ok(mut cache) = self.cache.lock() {
            cache.insert(key, model.clone());
        }
        Ok(model)
    }

    fn retry_policy(&self, _assistant: &Assistant) -> RetryPolicy {
        // Per-assistant overrides change the provider and model, never the retry pacing.
        self.base.retry_policy()
    }
}

/// Who a tool set is for.
#[derive(Clone)]
pub struct ToolRequest {
    pub tenant: Arc<Tenant>,
    pub user_id: UserId,
    pub role: Role,
    pub session_id: SessionId,
    pub assistant: Assistant,
    /// The assistant's effective settings: its `tools` narrow the set.
    pub agent: Arc<crate::profiles::AgentConfig>,
    /// The tenant's MCP pool, for the user's MCP tools.
    pub mcp: Option<actix::Addr<crate::mcp_pool::McpPoolActor>>,
}

/// The tools of one run and the policy that guards them.
pub struct ToolSet {
    pub registry: ToolRegistry,
    pub policy: Arc<dyn ToolPolicy>,
    /// Problems to tell the user about without failing the run (an MCP server that did not
    /// connect, say): each becomes a recoverable `error` event.
    pub warnings: Vec<String>,
}

impl ToolSet {
    /// The tools the caller may use, the only ones offered to the model (DESIGN §13): a tool
    /// the policy denies is neither described to the model nor named in its error messages.
    pub fn offered(&self) -> impl Iterator<Item = &ToolSpec> {
        self.registry
            .specs()
            .filter(|s| self.policy.check(s).is_ok())
    }
}

/// Builds the tool set for a run: built-ins the assistant allows plus the user's MCP tools.
#[async_trait]
pub trait ToolProvider: Send + Sync {
    async fn tools_for(&self, request: &ToolRequest) -> ToolSet;
}

/// Everything a run and the actors share.
pub struct EngineDeps {
    pub db: DatabaseConnection,
    pub models: Arc<dyn ModelProvider>,
    pub tools: Arc<dyn ToolProvider>,
    /// The MCP servers configured for each user; `None` runs without MCP.
    pub mcp: Option<Arc<dyn crate::mcp_pool::McpConfigSource>>,
    pub config: EngineConfig,
    /// Where agent loops run: a multi-threaded runtime in the server, the test's runtime in
    /// tests. Loops run outside the actors' arbiters so a slow or panicking loop never blocks
    /// or kills an actor.
    pub runtime: tokio::runtime::Handle,
    /// Cluster mode: the replicas' shared Redis (session leases, quotas, cache invalidation),
    /// with this replica's id. `None` in single-node mode.
    pub coordination: Option<agentry_store::coordination::Coordination>,
}

impl EngineDeps {
    /// Where every workspace of a tenant lives (ids are UUIDs: nothing here can climb out).
    pub fn tenant_workspaces(&self, tenant: TenantId) -> PathBuf {
        self.config
            .data_dir
            .join("workspaces")
            .join(tenant.to_string())
    }

    pub fn workspace_root(&self, tenant: &Tenant, user: UserId) -> PathBuf {
        self.tenant_workspaces(tenant.id).join(user.to_string())
    }
}
