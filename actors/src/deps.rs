//! What the engine needs from the outside world, injected as small traits so the composition
//! root (the gateway) decides which model clients and tools a run gets.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use agentry_llm::{
    AnthropicModel, ChatModel, Embedder, LlmError, ModelConfig, OpenAiEmbeddings, OpenAiModel,
    Provider, RetryPolicy, build_model,
};
use agentry_schema::error::ErrorCode;
use agentry_schema::ids::ModelConnectionId;
use agentry_schema::ids::{AssistantId, SessionId, TenantId, UserId};
use agentry_schema::secret::Secret;
use agentry_schema::tenancy::Role;
use agentry_sealing::SecretBox;
use agentry_store::assistants::Assistant;
use agentry_store::model_connections::ModelConnection;
use agentry_store::tenants::Tenant;
pub use agentry_tools::pipeline::{AllowAll, ToolPolicy};
use agentry_tools::tool::{ToolRegistry, ToolSpec};
use async_trait::async_trait;
use sea_orm::DatabaseConnection;

use crate::config::EngineConfig;
use crate::profiles::{AgentConfig, ModelChoice};

/// The model client of a run, and where it comes from.
#[derive(Clone)]
pub struct ChosenModel {
    pub model: Arc<dyn ChatModel>,
    /// The tenant's model connection, or `None` for the platform's model.
    pub connection: Option<ModelConnectionId>,
}

/// Why a run has no model: the code and a message for the tenant (never a platform detail).
#[derive(Debug, Clone, PartialEq)]
pub struct ModelRefusal {
    pub code: ErrorCode,
    pub message: String,
}

impl ModelRefusal {
    fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
        }
    }
}

/// Picks the model client for an assistant.
pub trait ModelProvider: Send + Sync {
    /// The client for a run of `assistant` (of `tenant`) with its effective settings `agent`:
    /// `agent.model` says which model, `agent.max_retries` how many times a failed call is
    /// retried (capped by the connection's, or the server's, `max_retries`).
    fn model_for(
        &self,
        tenant: &Tenant,
        assistant: &Assistant,
        agent: &AgentConfig,
    ) -> Result<ChosenModel, ModelRefusal>;

    /// The delays the agent loop waits between its own retries (a model answer that broke off,
    /// an unavailable tool backend): the operator's configured `base_delay`, so one setting
    /// paces every retry of a run. The assistant's `max_retries` still decides how many.
    fn retry_policy(&self, _assistant: &Assistant) -> RetryPolicy {
        RetryPolicy::default()
    }
}

/// (provider, model, base URL, retries, thread): what makes two platform model clients
/// different. Each thread that runs agent loops gets its own client and so its own connection
/// pool: a pooled connection's task lives on the thread that opened it, and a request sent
/// through another thread's connection crossed threads twice per call.
type ModelKey = (String, String, String, u32, std::thread::ThreadId);

/// How tenants' own model connections are reached: an HTTP client whose DNS resolver refuses
/// addresses the network policy refuses (so a connection's host name cannot lead to the
/// platform's internal services, even after a DNS change), no redirects, the policy itself
/// for IP literals, and the box that opens the sealed keys.
pub struct TenantConnections {
    client: reqwest::Client,
    net: agentry_builtin::BuiltinConfig,
    secrets: Option<SecretBox>,
}

impl TenantConnections {
    /// The network policy of `net` (`tools.allow_private_addresses`, `tools.allowed_networks`)
    /// and the sealing key (`None`: connections with a key cannot be used).
    pub fn new(
        net: &agentry_builtin::BuiltinConfig,
        secrets: Option<SecretBox>,
    ) -> Result<Self, reqwest::Error> {
        // No proxy: a proxy would resolve the name itself, past the guard.
        let client = reqwest::Client::builder()
            .no_proxy()
            .dns_resolver(Arc::new(agentry_builtin::net_guard::GuardedResolver::new(
                net,
            )))
            .redirect(reqwest::redirect::Policy::none())
            .build()?;
        Ok(Self {
            client,
            net: net.clone(),
            secrets,
        })
    }

    /// Where `c` is reached: its provider (never `scripted`), base URL (checked against the
    /// network policy when it is an IP literal; host names are checked by the client's
    /// resolver on every connection) and opened key. `Err` says why it cannot be used.
    fn endpoint(&self, c: &ModelConnection) -> Result<(Provider, String, Option<Secret>), String> {
        let provider: Provider = c
            .spec
            .provider
            .parse()
            .ok()
            .filter(|p| *p != Provider::Scripted)
            .ok_or_else(|| format!("unknown provider {:?}", c.spec.provider))?;
        let base_url = c
            .spec
            .base_url
            .clone()
            .or_else(|| provider.default_base_url().map(str::to_string))
            .unwrap_or_default();
        let url = reqwest::Url::parse(&base_url)
            .map_err(|e| format!("the base URL is not valid ({e})"))?;
        let literal = match url.host() {
            Some(url::Host::Ipv4(ip)) => Some(std::net::IpAddr::V4(ip)),
            Some(url::Host::Ipv6(ip)) => Some(std::net::IpAddr::V6(ip)),
            _ => None,
        };
        if let Some(ip) = literal
            && let Some(reason) = agentry_builtin::net_guard::refusal(&self.net, ip)
        {
            return Err(format!(
                "its base URL points at a {reason} address, which the platform does not let tenants reach"
            ));
        }
        let api_key = match &c.spec.api_key_sealed {
            None => None,
            Some(sealed) => {
                let Some(secrets) = &self.secrets else {
                    return Err("this server has no encryption key to open the stored API key; ask the platform operator".into());
                };
                match secrets.open(sealed) {
                    Ok(k) => Some(Secret::new(k)),
                    Err(e) => {
                        tracing::error!(connection = %c.id, tenant = %c.tenant_id, error = %e, "a model connection's key does not open");
                        return Err("its stored API key cannot be opened (the server's encryption key changed?); set the key again".into());
                    }
                }
            }
        };
        Ok((provider, base_url, api_key))
    }

    /// The embeddings endpoint of `c` (its `embedding_model`), if it has one and is usable.
    pub fn embedder(&self, c: &ModelConnection) -> Result<Option<OpenAiEmbeddings>, String> {
        let Some(model) = c.spec.embedding_model.as_deref() else {
            return Ok(None);
        };
        let (provider, base_url, api_key) = self.endpoint(c)?;
        if provider != Provider::OpenAi {
            return Err("only OpenAI-compatible connections serve embeddings".into());
        }
        Ok(Some(
            OpenAiEmbeddings::new(self.client.clone(), &base_url, api_key, model)
                .with_timeout(Duration::from_secs(u64::from(c.spec.timeout_secs.max(1))))
                .with_retry(RetryPolicy {
                    max_retries: c.spec.max_retries,
                    ..RetryPolicy::default()
                }),
        ))
    }
}

/// Model clients: the platform's, built from the server's `[llm]` config with each assistant's
/// provider/model overrides (cached per distinct configuration, sharing one HTTP client), and
/// the tenants' own connections (built per run: a changed key or URL counts at the next run).
pub struct ConfiguredModels {
    base: ModelConfig,
    client: reqwest::Client,
    clients: Mutex<HashMap<std::thread::ThreadId, reqwest::Client>>,
    cache: Mutex<HashMap<ModelKey, Arc<dyn ChatModel>>>,
    tenants: Option<TenantConnections>,
}

impl ConfiguredModels {
    pub fn new(base: ModelConfig, client: reqwest::Client) -> Self {
        Self {
            base,
            client,
            clients: Mutex::new(HashMap::new()),
            cache: Mutex::new(HashMap::new()),
            tenants: None,
        }
    }

    /// Tenants' model connections become usable (without this, a run of an assistant with a
    /// connection fails, saying so).
    pub fn with_tenant_connections(mut self, tenants: TenantConnections) -> Self {
        self.tenants = Some(tenants);
        self
    }

    pub fn base(&self) -> &ModelConfig {
        &self.base
    }

    /// This thread's HTTP client: the one given for the first thread that asks, a new one
    /// with the same defaults for each other (see [`ModelKey`]).
    fn thread_client(&self) -> reqwest::Client {
        let me = std::thread::current().id();
        let Ok(mut clients) = self.clients.lock() else {
            return self.client.clone();
        };
        if clients.is_empty() {
            clients.insert(me, self.client.clone());
        }
        clients
            .entry(me)
            .or_insert_with(|| {
                reqwest::Client::builder()
                    .build()
                    .unwrap_or_else(|_| self.client.clone())
            })
            .clone()
    }

    fn platform_model(
        &self,
        assistant: &Assistant,
        max_retries: u32,
    ) -> Result<Arc<dyn ChatModel>, LlmError> {
        let mut cfg = self.base.with_overrides(
            assistant.spec.provider.as_deref(),
            assistant.spec.model.as_deref(),
        )?;
        // The assistant's `max_retries` governs, within the server's.
        cfg.max_retries = max_retries.min(self.base.max_retries);
        let key = (
            cfg.provider.as_str().to_string(),
            cfg.effective_model().to_string(),
            cfg.effective_base_url().unwrap_or_default().to_string(),
            cfg.max_retries,
            std::thread::current().id(),
        );
        if let Some(m) = self.cache.lock().ok().and_then(|c| c.get(&key).cloned()) {
            return Ok(m);
        }
        let model = build_model(&cfg, self.thread_client())?;
        if let Ok(mut cache) = self.cache.lock() {
            cache.insert(key, model.clone());
        }
        Ok(model)
    }

    fn connection_model(
        &self,
        c: &ModelConnection,
        assistant: &Assistant,
        max_retries: u32,
    ) -> Result<Arc<dyn ChatModel>, ModelRefusal> {
        let unusable = |why: String| {
            ModelRefusal::new(
                ErrorCode::ModelError,
                format!(
                    "the model connection {:?} cannot be used: {why}",
                    c.id.as_str()
                ),
            )
        };
        let Some(tenants) = &self.tenants else {
            return Err(unusable(
                "this server does not take tenants' model connections".into(),
            ));
        };
        let (provider, base_url, api_key) = tenants.endpoint(c).map_err(unusable)?;
        let model = assistant
            .spec
            .model
            .as_deref()
            .map(str::trim)
            .filter(|m| !m.is_empty())
            .unwrap_or(&c.spec.model)
            .to_string();
        let retry = RetryPolicy {
            max_retries: max_retries.min(c.spec.max_retries),
            ..self.base.retry_policy()
        };
        let timeout = Duration::from_secs(u64::from(c.spec.timeout_secs.max(1)));
        let client = tenants.client.clone();
        Ok(match provider {
            Provider::Anthropic => Arc::new(
                AnthropicModel::new(client, &base_url, api_key, &model)
                    .with_streaming(self.base.stream)
                    .with_timeout(timeout)
                    .with_retry(retry),
            ),
            _ => Arc::new(
                OpenAiModel::new(client, &base_url, api_key, &model)
                    .with_streaming(self.base.stream)
                    .with_timeout(timeout)
                    .with_retry(retry),
            ),
        })
    }
}

impl ModelProvider for ConfiguredModels {
    fn model_for(
        &self,
        tenant: &Tenant,
        assistant: &Assistant,
        agent: &AgentConfig,
    ) -> Result<ChosenModel, ModelRefusal> {
        match &agent.model {
            ModelChoice::Connection(c) => Ok(ChosenModel {
                model: self.connection_model(c, assistant, agent.max_retries)?,
                connection: Some(c.id.clone()),
            }),
            ModelChoice::Missing(id) => Err(ModelRefusal::new(
                ErrorCode::ModelNotConfigured,
                format!(
                    "the assistant {:?} uses the model connection {:?}, which does not exist; pick another (PUT /api/v1/agents/{})",
                    assistant.id.as_str(),
                    id.as_str(),
                    assistant.id
                ),
            )),
            ModelChoice::Platform if tenant.policy().own_models_only => Err(ModelRefusal::new(
                ErrorCode::ModelNotConfigured,
                format!(
                    "the assistant {:?} has no model connection, and this tenant's assistants must use one of the tenant's own: create one (POST /api/v1/model-connections) and set `model_connection` on the assistant (PUT /api/v1/agents/{})",
                    assistant.id.as_str(),
                    assistant.id
                ),
            )),
            ModelChoice::Platform => self
                .platform_model(assistant, agent.max_retries)
                .map(|model| ChosenModel {
                    model,
                    connection: None,
                })
                .map_err(|e| {
                    ModelRefusal::new(
                        ErrorCode::ModelError,
                        format!("the assistant's model is not usable: {e}"),
                    )
                }),
        }
    }

    fn retry_policy(&self, _assistant: &Assistant) -> RetryPolicy {
        // Per-assistant overrides change the provider and model, never the retry pacing.
        self.base.retry_policy()
    }
}

/// Where each tenant's memories are embedded: the first of its model connections (by id) that
/// names an `embedding_model`, else the platform's `[embeddings]` endpoint, else none. A
/// connection that cannot be used (a refused address, a key that does not open) is logged and
/// skipped, so the tenant falls back to the platform's endpoint rather than to nothing.
pub struct TenantEmbedders {
    pub db: DatabaseConnection,
    pub platform: Option<Arc<dyn Embedder>>,
    pub tenants: TenantConnections,
}

#[async_trait]
impl agentry_builtin::memory::EmbedderSource for TenantEmbedders {
    async fn embedder_for(&self, tenant: &agentry_store::TenantScope) -> Option<Arc<dyn Embedder>> {
        match agentry_store::model_connections::list(&self.db, tenant).await {
            Ok(connections) => {
                for c in connections
                    .iter()
                    .filter(|c| c.spec.embedding_model.is_some())
                {
                    match self.tenants.embedder(c) {
                        Ok(Some(e)) => return Some(Arc::new(e)),
                        Ok(None) => {}
                        Err(why) => tracing::warn!(
                            connection = %c.id, tenant = %c.tenant_id,
                            "a model connection's embeddings cannot be used ({why}); trying the next"
                        ),
                    }
                }
            }
            Err(e) => {
                tracing::warn!(error = %e, "listing the tenant's model connections failed; using the platform's embeddings")
            }
        }
        self.platform.clone()
    }
}

/// Who a tool set is for.
#[derive(Clone)]
pub struct ToolRequest {
    pub tenant: Arc<Tenant>,
    pub user_id: UserId,
    pub role: Role,
    /// The caller's custom role: its patterns replace the role's tool permissions.
    pub custom_role: Option<agentry_schema::roles::RoleName>,
    pub session_id: SessionId,
    pub assistant: Assistant,
    /// The assistant's effective settings: its `tools` narrow the set.
    pub agent: Arc<AgentConfig>,
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
    /// Where a run's writes go (`agentry_store::writer`): on SQLite one connection that commits
    /// the writes waiting for it together.
    pub writer: agentry_store::writer::Writer,
    /// Set when the server drains for a graceful stop (`Engine::drain`): a session actor
    /// stopped after that (its HTTP worker's arbiter stopping) is not a crash to restart.
    pub draining: Arc<std::sync::atomic::AtomicBool>,
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
    /// Long-term memory: each run's prompt gets the memories relevant to its message, and
    /// `memory.auto_extract` stores facts after it. `None`: no memory.
    pub memory: Option<Arc<agentry_builtin::memory::MemoryBank>>,
    /// Assistants the process's runs loaded a moment ago (see [`AssistantCache`]).
    pub assistants: Arc<AssistantCache>,
    /// Sessions created here and not started yet (see [`FreshSessions`]).
    pub fresh_sessions: Arc<FreshSessions>,
    /// The tenants' registered remote A2A agents, as `task` reaches them (the network policy
    /// in the client, the sealing key for their credentials).
    pub remote_agents: Arc<crate::remote_agents::RemoteAgents>,
}

/// An assistant with its effective configuration, as a run uses it.
pub type KeptAssistant = (Assistant, Arc<AgentConfig>);

/// Sessions this process created that no actor has started for yet (single-node mode): such a
/// session has no run, no queued run and no event — only its actor makes them — so its actor's
/// start-up recovery reads nothing (four reads through the pool for every REST run that opens a
/// session of its own). Taken by the first actor that starts for the session, by start-up
/// recovery finding stored runs of it, and by a run stored beside its actor (the MCP endpoint's
/// audit, `Engine::run_recorded_outside`); an entry not taken within ten minutes is forgotten
/// (its session then recovers by reading, as any other). In cluster mode another replica may
/// run the session meanwhile: not used there.
pub struct FreshSessions(moka::sync::Cache<SessionId, ()>);

impl Default for FreshSessions {
    fn default() -> Self {
        FreshSessions(
            moka::sync::Cache::builder()
                .max_capacity(100_000)
                .time_to_live(Duration::from_secs(600))
                .build(),
        )
    }
}

impl FreshSessions {
    pub(crate) fn created(&self, id: SessionId) {
        self.0.insert(id, ());
    }

    /// Whether `id` was created here and not started yet; it is not fresh afterwards.
    pub(crate) fn take(&self, id: SessionId) -> bool {
        self.0.remove(&id).is_some()
    }
}

/// How long a loaded assistant is used again without reading it (by its session, and by any
/// session through [`AssistantCache`]), unless a change is told first.
pub(crate) const ASSISTANT_REUSE: Duration = Duration::from_secs(5);

/// The assistants (with their effective configuration) that runs loaded in the last
/// [`ASSISTANT_REUSE`], shared by the process's sessions: a new session's first run — every
/// REST run that opens a session of its own — reads neither its assistant nor its profile
/// again (two reads per run through the pool, whose page cache every commit empties). The
/// same bound as a session's own kept assistant: a change made through this server, or told
/// by another replica (`Engine::assistant_changed`, `Engine::assistants_changed`), drops
/// entries at once, and a load that a change overtook is not kept (it may have read the old
/// row).
pub struct AssistantCache {
    entries: moka::sync::Cache<(uuid::Uuid, AssistantId), (KeptAssistant, Instant)>,
    /// How many changes were told: a load keeps its result only if none came meanwhile.
    changes: std::sync::atomic::AtomicU64,
}

impl Default for AssistantCache {
    fn default() -> Self {
        AssistantCache {
            entries: moka::sync::Cache::builder()
                .max_capacity(10_000)
                .time_to_live(ASSISTANT_REUSE)
                .build(),
            changes: Default::default(),
        }
    }
}

impl AssistantCache {
    pub(crate) fn get(
        &self,
        tenant: TenantId,
        id: &AssistantId,
    ) -> Option<(KeptAssistant, Instant)> {
        self.entries
            .get(&(tenant.0, id.clone()))
            .filter(|(_, at)| at.elapsed() < ASSISTANT_REUSE)
    }

    pub(crate) fn changes(&self) -> u64 {
        self.changes.load(std::sync::atomic::Ordering::Acquire)
    }

    /// Keep what was loaded since [`AssistantCache::changes`] read `seen`, unless a change came.
    pub(crate) fn keep(&self, tenant: TenantId, kept: (KeptAssistant, Instant), seen: u64) {
        if self.changes() != seen {
            return;
        }
        let key = (tenant.0, kept.0.0.id.clone());
        self.entries.insert(key.clone(), kept);
        // A change between the check and the insert: its invalidation may have come first.
        if self.changes() != seen {
            self.entries.invalidate(&key);
        }
    }

    /// The tenant's assistant `id` changed (`None`: anything every assistant may use).
    pub(crate) fn changed(&self, tenant: TenantId, id: Option<&AssistantId>) {
        self.changes
            .fetch_add(1, std::sync::atomic::Ordering::AcqRel);
        match id {
            Some(id) => self.entries.invalidate(&(tenant.0, id.clone())),
            None => self.entries.invalidate_all(),
        }
    }
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
