//! McpPoolActor: one per tenant, under its supervisor. It owns the tenant's MCP connections,
//! keyed by (user, server) and never shared across users (seed property 49).
//!
//! - connects on first use, bounded by the tenant's `max_mcp_servers` per user;
//! - a server that fails or is slow to connect never blocks a run: the run gets the tools that
//!   are ready plus a warning (seed property 48), and the connect goes on in the background;
//! - health checks every `health_interval`; a dead connection is reconnected with exponential
//!   backoff; `tools/list_changed` refreshes the tool list;
//! - idle connections close after `idle_timeout`; a user's connections close when the user has
//!   no live session left (seed property 50);
//! - configuration changes (REST or the hot-reloaded file) close the connections they affect.

mod handlers;
pub mod messages;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use actix::prelude::*;
use agentry_mcp::client::{
    Catalog, ClientHooks, ConnectionStatus, McpConnection, McpServerConfig, StdioLaunch,
};
use agentry_mcp::config_file::ServerPolicy;
use agentry_schema::ids::UserId;
use agentry_store::tenants::Tenant;
use agentry_tools::tool::{CompiledTool, Tool};
use async_trait::async_trait;
use tokio::sync::oneshot;

pub use crate::config::McpPoolConfig;
pub use handlers::STDIO_FEATURE;
pub use messages::*;

/// Where a server's configuration came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Origin {
    /// The platform's MCP config file: offered to every user of every tenant.
    File,
    /// The user's own, from the REST API.
    User,
}

/// One server a user may use.
#[derive(Debug, Clone, PartialEq)]
pub struct PoolServer {
    pub config: McpServerConfig,
    pub policy: ServerPolicy,
    pub origin: Origin,
}

/// The servers configured for a user (the file's plus their own), from outside the actor.
#[async_trait]
pub trait McpConfigSource: Send + Sync {
    /// Servers for `user`, enabled or not. Problems with single entries (a secret that does not
    /// decrypt) come back as warnings, not errors.
    async fn servers_for(&self, tenant: &Tenant, user: UserId) -> (Vec<PoolServer>, Vec<String>);

    /// Where `user`'s OAuth tokens for `server` are kept (a server with `auth: {type: oauth}`).
    /// `None`: nowhere (an `authorization_code` server then cannot connect).
    fn oauth_tokens(
        &self,
        _tenant: &Tenant,
        _user: UserId,
        _server: &McpServerConfig,
    ) -> Option<Arc<dyn agentry_mcp::client::oauth::OAuthTokenStore>> {
        None
    }
}

/// The delay before reconnect attempt `n` (0-based): the server's one retry policy
/// ([`agentry_llm::RetryPolicy`]): `base * 2^n` capped at `backoff_max`, plus a random jitter of
/// up to as much again, so the pools of many tenants do not hammer a server that came back in step.
pub fn backoff(cfg: &McpPoolConfig, attempt: u32) -> Duration {
    let policy = agentry_llm::RetryPolicy {
        base_delay: cfg.backoff_base,
        max_delay: cfg.backoff_max,
        ..agentry_llm::RetryPolicy::default()
    };
    agentry_llm::retry_delay(&policy, attempt, None)
}

pub type Key = (UserId, String);

/// A server's tool as the pool keeps it: compiled once when the server's tools are listed, or
/// why it is left out (its schema does not compile), repeated to every run as a warning.
pub(crate) type PoolTool = Result<CompiledTool, String>;

type ToolsResult = Result<Vec<PoolTool>, String>;

pub(crate) enum SlotState {
    Connecting {
        waiters: Vec<oneshot::Sender<ToolsResult>>,
        /// The attempt (0 = the server's first).
        attempt: u32,
        started: Instant,
    },
    Connected {
        conn: McpConnection,
        tools: Vec<PoolTool>,
    },
    Failed {
        error: String,
        attempts: u32,
        retry_at: Instant,
    },
}

pub(crate) struct Slot {
    pub server: PoolServer,
    pub state: SlotState,
    pub last_used: Instant,
    /// Bumped on every (re)connect so late results of an older attempt are ignored.
    pub generation: u64,
    /// The slot was connected once; a failure after that is reconnected in the background.
    pub was_connected: bool,
    /// When the connection was last pinged (or made).
    pub last_checked: Instant,
    /// The tools of the server's last listing, bound to `live`: offered to runs while the
    /// server reconnects (a run never waits for that), and answering "unavailable" until it
    /// is back. Empty until the server was listed once.
    pub known: Vec<PoolTool>,
    /// What `known`'s tools call through.
    pub live: Arc<LiveSlot>,
    /// The server's resources, templates and prompts as last listed (`/mcp` re-exports them);
    /// kept while the server reconnects, like `known`. Empty until listed once.
    pub catalog: Arc<Catalog>,
}

/// What a server's pool tools call through: the tools of its current connection, or why there
/// is none. Shared by every run that got the tools, so a run started while the server was down
/// reaches it once it is back, and one started while it was up is told it went away.
pub(crate) struct LiveSlot {
    server: String,
    state: std::sync::Mutex<Live>,
    /// What `GET …/mcp-servers/{name}` reports of the server (calls, errors, reconnects).
    pub(crate) stats: Arc<ServerStats>,
    /// The server's `server` label in the per-server metrics ([`server_label`]).
    pub(crate) label: String,
}

enum Live {
    /// The connection, and its tools by agent tool name.
    Up(McpConnection, HashMap<String, Arc<dyn Tool>>),
    Down(String),
}

impl LiveSlot {
    fn new(server: &PoolServer, stats: Arc<ServerStats>) -> Arc<Self> {
        Arc::new(LiveSlot {
            server: server.config.name.clone(),
            state: std::sync::Mutex::new(Live::Down("it is connecting".into())),
            stats,
            label: server_label(server),
        })
    }

    fn set(&self, live: Live) {
        *self.state.lock().unwrap_or_else(|p| p.into_inner()) = live;
    }

    fn down(&self, reason: impl Into<String>) {
        self.set(Live::Down(reason.into()));
    }

    fn current(&self, name: &str) -> Result<Arc<dyn Tool>, agentry_tools::tool::ToolError> {
        use agentry_tools::tool::ToolError;
        match &*self.state.lock().unwrap_or_else(|p| p.into_inner()) {
            Live::Up(_, tools) => tools.get(name).cloned().ok_or_else(|| {
                ToolError::NotFound(format!(
                    "MCP server {:?} no longer offers the tool {name:?}",
                    self.server
                ))
            }),
            Live::Down(reason) => Err(ToolError::Disconnected(format!(
                "MCP server {:?} is unavailable ({reason}); the tool {name:?} was not called. \
                 Agentry is reconnecting it in the background: do without it for now, or try \
                 again in a later message",
                self.server
            ))),
        }
    }
}

impl LiveSlot {
    /// The server's connection of the moment, or why there is none.
    fn connection(&self) -> Result<McpConnection, String> {
        match &*self.state.lock().unwrap_or_else(|p| p.into_inner()) {
            Live::Up(conn, _) => Ok(conn.clone()),
            Live::Down(reason) => Err(format!(
                "MCP server {:?} is unavailable ({reason}); Agentry is reconnecting it in the \
                 background: try again later",
                self.server
            )),
        }
    }
}

/// One of a user's servers as `/mcp` offers it besides its tools: the catalog (resources,
/// templates, prompts) of its last listing, and the way to reach the server now.
#[derive(Clone)]
pub struct ServerCatalog {
    pub server: String,
    /// As last listed by the pool; empty when the server was never listed.
    pub known: Arc<Catalog>,
    live: Arc<LiveSlot>,
}

impl ServerCatalog {
    pub(crate) fn new(server: String, slot: &Slot) -> Self {
        ServerCatalog {
            server,
            known: slot.catalog.clone(),
            live: slot.live.clone(),
        }
    }

    /// The server's current connection; an error (in words) while it is down or reconnecting.
    /// Never waits.
    pub fn connection(&self) -> Result<McpConnection, String> {
        self.live.connection()
    }

    /// The catalog now: the live connection's (cached by it until the server says a list
    /// changed), or the last known one while the server is down or does not answer.
    pub async fn catalog(&self) -> Arc<Catalog> {
        let Ok(conn) = self.connection() else {
            return self.known.clone();
        };
        if !conn.catalog_stale() || self.known.is_empty() {
            match conn.catalog().await {
                Ok(c) => return Arc::new(c),
                Err(e) => {
                    tracing::debug!(server = %self.server, error = %e, "listing the resources and prompts of an MCP server failed; using the last known lists");
                }
            }
        }
        self.known.clone()
    }
}

/// A pool tool: the spec of the server's last listing, called through the server's current
/// connection ([`LiveSlot`]).
struct PoolBound {
    spec: agentry_tools::tool::ToolSpec,
    live: Arc<LiveSlot>,
}

#[async_trait]
impl Tool for PoolBound {
    fn spec(&self) -> &agentry_tools::tool::ToolSpec {
        &self.spec
    }

    fn needs_approval(&self, args: &serde_json::Value) -> bool {
        match self.live.current(&self.spec.name) {
            Ok(tool) => tool.needs_approval(args),
            Err(_) => self.spec.requires_approval,
        }
    }

    async fn call(
        &self,
        args: serde_json::Value,
        ctx: &agentry_tools::tool::ToolContext,
    ) -> Result<agentry_tools::tool::ToolOutput, agentry_tools::tool::ToolError> {
        let mut counted = CountOnDrop {
            live: &self.live,
            timeout: self.spec.timeout,
            started: Instant::now(),
            outcome: None,
        };
        let result = match self.live.current(&self.spec.name) {
            Ok(tool) => tool.call(args, ctx).await,
            Err(e) => Err(e),
        };
        counted.outcome = Some(CallOutcome::of(&result));
        result
    }
}

/// Counts a call through the pool when it ends — also when the caller drops it unanswered: the
/// tool pipeline applies the same timeout as the MCP client and usually drops the call first.
/// A call dropped after its timeout counts as `timeout`, one dropped earlier as `cancelled`.
struct CountOnDrop<'a> {
    live: &'a LiveSlot,
    timeout: Duration,
    started: Instant,
    outcome: Option<CallOutcome>,
}

impl Drop for CountOnDrop<'_> {
    fn drop(&mut self) {
        let took = self.started.elapsed();
        let outcome = self.outcome.unwrap_or(if took >= self.timeout {
            CallOutcome::Timeout
        } else {
            CallOutcome::Cancelled
        });
        self.live.stats.count_call(outcome);
        metrics::counter!("agentry_mcp_server_calls_total", "server" => self.live.label.clone(), "outcome" => outcome.as_str())
            .increment(1);
        metrics::histogram!("agentry_mcp_server_call_duration_seconds", "server" => self.live.label.clone())
            .record(took.as_secs_f64());
    }
}

/// How a call through the pool ended, as counted per server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CallOutcome {
    /// The server answered with a result that is not an error.
    Ok,
    /// The server answered with an error result (`isError`), a JSON-RPC error, or the call could
    /// not be made (the server is down: "unavailable").
    Error,
    /// No answer within the server's `timeout_secs`.
    Timeout,
    /// The run was cancelled while the call was in flight: counted in the metrics only.
    Cancelled,
}

impl CallOutcome {
    pub fn of(
        result: &Result<agentry_tools::tool::ToolOutput, agentry_tools::tool::ToolError>,
    ) -> Self {
        use agentry_tools::tool::ToolError;
        match result {
            Ok(out) if out.is_error => CallOutcome::Error,
            Ok(_) => CallOutcome::Ok,
            Err(ToolError::Timeout(_)) => CallOutcome::Timeout,
            Err(ToolError::Cancelled) => CallOutcome::Cancelled,
            Err(_) => CallOutcome::Error,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            CallOutcome::Ok => "ok",
            CallOutcome::Error => "error",
            CallOutcome::Timeout => "timeout",
            CallOutcome::Cancelled => "cancelled",
        }
    }
}

/// One server's history in this pool (this replica), for `GET …/mcp-servers/{name}`: kept
/// while the user's connection is closed for idleness, dropped when the server's configuration
/// changes or the user has no live session left.
#[derive(Debug, Default)]
pub struct ServerStats {
    inner: std::sync::Mutex<ServerReport>,
}

/// What the pool reports of one server of one user. Counters start when the pool first used
/// the server (since its last configuration change).
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct ServerReport {
    /// The last connect, health check or transport error, and when it happened.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_error: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_error_at: Option<chrono::DateTime<chrono::Utc>>,
    /// When the current connection was made (none while not connected).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub connected_since: Option<chrono::DateTime<chrono::Utc>>,
    /// Connects of the server after it had been connected (lost connections brought back).
    pub reconnects: u64,
    pub calls: CallCounts,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct CallCounts {
    pub ok: u64,
    pub error: u64,
    pub timeout: u64,
}

impl ServerStats {
    fn with<R>(&self, f: impl FnOnce(&mut ServerReport) -> R) -> R {
        f(&mut self.inner.lock().unwrap_or_else(|p| p.into_inner()))
    }

    pub fn report(&self) -> ServerReport {
        self.with(|r| r.clone())
    }

    fn count_call(&self, outcome: CallOutcome) {
        self.with(|r| match outcome {
            CallOutcome::Ok => r.calls.ok += 1,
            CallOutcome::Error => r.calls.error += 1,
            CallOutcome::Timeout => r.calls.timeout += 1,
            CallOutcome::Cancelled => {}
        })
    }

    fn failed(&self, error: &str) {
        self.with(|r| {
            r.last_error = Some(error.to_string());
            r.last_error_at = Some(chrono::Utc::now());
            r.connected_since = None;
        })
    }

    fn connected(&self) {
        self.with(|r| r.connected_since = Some(chrono::Utc::now()))
    }

    fn disconnected(&self) {
        self.with(|r| r.connected_since = None)
    }

    fn reconnecting(&self) {
        self.with(|r| r.reconnects += 1)
    }
}

/// The `server` label of the per-server metrics: a platform server (the operator's config file,
/// a bounded set) by its name; a user's server as `user:<name>`, its names bounded by
/// [`MCP_USER_SERVER_LABELS`] (beyond the cap, `user:other`), since tenants choose them.
pub fn server_label(server: &PoolServer) -> String {
    match server.origin {
        Origin::File => server.config.name.clone(),
        Origin::User => format!(
            "user:{}",
            crate::metrics::MCP_USER_SERVER_LABELS
                .label(&server.config.name)
                .unwrap_or_else(|| "other".into())
        ),
    }
}

impl Slot {
    pub fn status(&self) -> (&'static str, Option<String>) {
        match &self.state {
            SlotState::Connecting { .. } => ("connecting", None),
            SlotState::Connected { conn, .. } => match conn.status() {
                ConnectionStatus::Connected => ("connected", None),
                ConnectionStatus::Error(m) => ("error", Some(m)),
                other => (other.as_str(), None),
            },
            SlotState::Failed { error, .. } => ("error", Some(error.clone())),
        }
    }
}

fn is_oauth(config: &McpServerConfig) -> bool {
    matches!(
        &config.transport,
        agentry_mcp::client::McpTransportConfig::Http(h)
            if matches!(h.auth, agentry_mcp::client::HttpAuth::OAuth(_))
    )
}

pub struct McpPoolActor {
    pub(crate) tenant: Arc<Tenant>,
    pub(crate) source: Arc<dyn McpConfigSource>,
    pub(crate) cfg: McpPoolConfig,
    pub(crate) slots: HashMap<Key, Slot>,
    pub(crate) next_generation: u64,
    /// Each server's history (see [`ServerStats`]): outlives its slot when the connection is
    /// closed for idleness.
    pub(crate) stats: HashMap<Key, Arc<ServerStats>>,
    /// This pool's share of `agentry_mcp_connections{state}` and
    /// `agentry_mcp_server_connections{server, state}`, as last added to the gauges.
    published: HashMap<(Option<String>, &'static str), f64>,
    /// Each user's server list as last read ([`CONFIG_TTL`]), so a run does not read the
    /// user's MCP configuration from the database every time. Dropped on every change this
    /// replica hears of (a user's servers, the config file, the tenant), and with
    /// `configs_generation` bumped so a read in flight at the change is not kept.
    pub(crate) configs: HashMap<UserId, (Instant, Arc<ServerList>)>,
    pub(crate) configs_generation: u64,
}

/// A user's servers and the warnings reading them gave.
pub(crate) type ServerList = (Vec<PoolServer>, Vec<String>);

/// How long a user's server list is used without reading it again. Changes through any
/// replica drop it at once (they are broadcast); this bounds what a change made behind the
/// server's back (straight in the database) takes to count.
pub(crate) const CONFIG_TTL: Duration = Duration::from_secs(5);

impl McpPoolActor {
    pub fn new(tenant: Arc<Tenant>, source: Arc<dyn McpConfigSource>, cfg: McpPoolConfig) -> Self {
        McpPoolActor {
            tenant,
            source,
            cfg,
            slots: HashMap::new(),
            next_generation: 1,
            stats: HashMap::new(),
            published: HashMap::new(),
            configs: HashMap::new(),
            configs_generation: 0,
        }
    }

    /// Forget every cached server list (see [`McpPoolActor::configs`]).
    pub(crate) fn forget_configs(&mut self) {
        self.configs.clear();
        self.configs_generation += 1;
    }

    /// Start connecting `key`; `waiter` (if any) hears the result.
    pub(crate) fn connect(
        &mut self,
        ctx: &mut Context<Self>,
        key: Key,
        server: PoolServer,
        waiter: Option<oneshot::Sender<ToolsResult>>,
        attempts: u32,
    ) {
        let generation = self.next_generation;
        self.next_generation += 1;
        let was_connected = self.slots.get(&key).is_some_and(|s| s.was_connected);
        // The same server again (a reconnect) keeps its last tool list and what its tools call
        // through; a changed configuration starts afresh.
        let (known, live, catalog) = match self.slots.remove(&key) {
            Some(old) if old.server == server => {
                let kept = (old.known.clone(), old.live.clone(), old.catalog.clone());
                close_slot(old);
                kept
            }
            Some(old) => {
                close_slot(old);
                self.stats.remove(&key);
                (
                    Vec::new(),
                    LiveSlot::new(&server, self.stats_for(&key)),
                    Arc::default(),
                )
            }
            None => (
                Vec::new(),
                LiveSlot::new(&server, self.stats_for(&key)),
                Arc::default(),
            ),
        };
        if was_connected {
            live.stats.reconnecting();
            metrics::counter!("agentry_mcp_reconnects_total").increment(1);
            metrics::counter!("agentry_mcp_server_reconnects_total", "server" => live.label.clone())
                .increment(1);
        }
        self.slots.insert(
            key.clone(),
            Slot {
                server: server.clone(),
                state: SlotState::Connecting {
                    waiters: waiter.into_iter().collect(),
                    attempt: attempts,
                    started: Instant::now(),
                },
                last_used: Instant::now(),
                generation,
                was_connected,
                last_checked: Instant::now(),
                known,
                live,
                catalog,
            },
        );
        let me = ctx.address();
        let hook_key = key.clone();
        let hook_key2 = key.clone();
        let hook_key3 = key.clone();
        let me2 = me.clone();
        let me3 = me.clone();
        let hooks = ClientHooks::default()
            .on_tools_changed(move |_| {
                me.do_send(ToolsChanged {
                    key: hook_key.clone(),
                    generation,
                })
            })
            .on_catalog_changed(move |_| {
                me3.do_send(CatalogChanged {
                    key: hook_key3.clone(),
                    generation,
                })
            })
            .on_status(move |_, status| {
                if let ConnectionStatus::Error(msg) = status {
                    me2.do_send(ConnectionLost {
                        key: hook_key2.clone(),
                        generation,
                        error: msg.clone(),
                    });
                }
            });
        let config = server.config.clone();
        let hooks = match self.source.oauth_tokens(&self.tenant, key.0, &config) {
            Some(store) if is_oauth(&config) => hooks.oauth_tokens(store),
            _ => hooks,
        };
        let policy = server.policy.clone();
        let launch = StdioLaunch {
            sandbox: self.cfg.sandbox.clone(),
            workspace: self
                .cfg
                .workspaces
                .join(self.tenant.id.to_string())
                .join(key.0.to_string()),
            tenant: (&self.tenant.policy().sandbox).into(),
            platform: server.origin == Origin::File,
            owner: agentry_sandbox::Owner {
                kind: format!("mcp:{}", config.name),
                tenant_id: Some(self.tenant.id.to_string()),
                user_id: Some(key.0.to_string()),
                ..Default::default()
            },
            http_guard: (server.origin == Origin::User).then(|| self.cfg.user_http_guard.clone()),
        };
        let fut = async move {
            let conn = McpConnection::connect(&config, hooks, &launch)
                .await
                .map_err(|e| e.to_string())?;
            match agentry_mcp::client::tools_for(&conn).await {
                Ok(tools) => Ok((conn, allowed_tools(tools, &policy))),
                Err(e) => {
                    conn.close().await;
                    Err(e.to_string())
                }
            }
        };
        ctx.spawn(
            fut.into_actor(self)
                .map(move |res, act, ctx| act.connected(ctx, key, generation, attempts, res)),
        );
    }

    /// The history of `key`'s server, kept or new.
    fn stats_for(&mut self, key: &Key) -> Arc<ServerStats> {
        self.stats.entry(key.clone()).or_default().clone()
    }

    /// What the pool knows of each of `user`'s servers it used: `(name, status, status
    /// message, history)`; a server whose connection was closed for idleness is
    /// `disconnected` with its history. Nothing is connected for this.
    pub(crate) fn reports(
        &self,
        user: UserId,
    ) -> Vec<(String, &'static str, Option<String>, ServerReport)> {
        let mut out: Vec<_> = self
            .stats
            .iter()
            .filter(|((u, _), _)| *u == user)
            .map(|((_, name), stats)| {
                let (status, message) = self
                    .slots
                    .get(&(user, name.clone()))
                    .map(Slot::status)
                    .unwrap_or(("disconnected", None));
                (name.clone(), status, message, stats.report())
            })
            .collect();
        out.sort_by(|a, b| a.0.cmp(&b.0));
        out
    }

    fn connected(
        &mut self,
        ctx: &mut Context<Self>,
        key: Key,
        generation: u64,
        attempts: u32,
        res: Result<(McpConnection, Vec<Arc<dyn Tool>>), String>,
    ) {
        let Some(slot) = self
            .slots
            .get_mut(&key)
            .filter(|s| s.generation == generation)
        else {
            // Superseded (config changed, user went idle): drop what we got.
            if let Ok((conn, _)) = res {
                actix::spawn(async move { conn.close().await });
            }
            return;
        };
        let waiters = match &mut slot.state {
            SlotState::Connecting { waiters, .. } => std::mem::take(waiters),
            _ => Vec::new(),
        };
        match res {
            Ok((conn, raw)) => {
                slot.live.stats.connected();
                let tools = bind_tools(&raw, &slot.server.policy, &slot.live);
                slot.live.set(Live::Up(
                    conn.clone(),
                    raw.into_iter()
                        .map(|t| (t.spec().name.clone(), t))
                        .collect(),
                ));
                tracing::info!(tenant = %self.tenant.id, user = %key.0, server = %key.1, tools = tools.len(), "MCP server connected");
                for w in waiters {
                    let _ = w.send(Ok(tools.clone()));
                }
                slot.known = tools.clone();
                slot.state = SlotState::Connected {
                    conn: conn.clone(),
                    tools,
                };
                slot.was_connected = true;
                // The resources and prompts in the background: no run waits for them.
                self.refresh_catalog(ctx, key, generation, conn);
            }
            Err(error) => {
                slot.live.down(error.clone());
                slot.live.stats.failed(&error);
                metrics::counter!("agentry_mcp_server_connect_failures_total", "server" => slot.live.label.clone())
                    .increment(1);
                let delay = backoff(&self.cfg, attempts);
                tracing::warn!(tenant = %self.tenant.id, user = %key.0, server = %key.1, attempt = attempts, "MCP server failed to connect: {error}; next try in {delay:?}");
                for w in waiters {
                    let _ = w.send(Err(error.clone()));
                }
                slot.state = SlotState::Failed {
                    error,
                    attempts: attempts + 1,
                    retry_at: Instant::now() + delay,
                };
                if slot.was_connected {
                    // A server that worked before is brought back without waiting for a run.
                    let server = slot.server.clone();
                    ctx.run_later(delay, move |act, ctx| {
                        let due = act.slots.get(&key).is_some_and(|s| {
                            s.generation == generation
                                && matches!(s.state, SlotState::Failed { .. })
                        });
                        if due {
                            act.connect(ctx, key, server, None, attempts + 1);
                        }
                    });
                }
            }
        }
    }

    /// List the server's resources, templates and prompts on `conn` and keep them as the
    /// slot's last known catalog (a failure keeps the old one).
    pub(crate) fn refresh_catalog(
        &mut self,
        ctx: &mut Context<Self>,
        key: Key,
        generation: u64,
        conn: McpConnection,
    ) {
        let fut = async move { conn.catalog().await };
        ctx.spawn(fut.into_actor(self).map(move |res, act, _| {
            let Some(slot) = act
                .slots
                .get_mut(&key)
                .filter(|s| s.generation == generation)
            else {
                return;
            };
            match res {
                Ok(catalog) => slot.catalog = Arc::new(catalog),
                Err(e) => {
                    tracing::info!(server = %key.1, error = %e, "listing the resources and prompts of an MCP server failed; keeping the last known lists");
                }
            }
        }));
    }

    /// Bring this pool's share of `agentry_mcp_connections{state}` up to date (the gauge is
    /// the sum over every tenant's pool); `gone` withdraws it.
    fn publish_states(&mut self, gone: bool) {
        let mut now: HashMap<(Option<String>, &'static str), f64> = HashMap::new();
        if !gone {
            for slot in self.slots.values() {
                let state = slot.status().0;
                *now.entry((None, state)).or_default() += 1.0;
                *now.entry((Some(slot.live.label.clone()), state))
                    .or_default() += 1.0;
            }
        }
        for key in self
            .published
            .keys()
            .chain(now.keys())
            .cloned()
            .collect::<std::collections::HashSet<_>>()
        {
            let delta = now.get(&key).copied().unwrap_or(0.0)
                - self.published.get(&key).copied().unwrap_or(0.0);
            if delta == 0.0 {
                continue;
            }
            match key {
                (None, state) => {
                    metrics::gauge!("agentry_mcp_connections", "state" => state).increment(delta)
                }
                (Some(server), state) => {
                    metrics::gauge!("agentry_mcp_server_connections", "server" => server, "state" => state)
                        .increment(delta)
                }
            }
        }
        self.published = now;
    }

    /// Health: ping every connected server; close idle ones.
    fn sweep(&mut self, ctx: &mut Context<Self>) {
        self.publish_states(false);
        let now = Instant::now();
        let idle: Vec<Key> = self
            .slots
            .iter()
            .filter(|(_, s)| {
                matches!(s.state, SlotState::Connected { .. })
                    && now.duration_since(s.last_used) >= self.cfg.idle_timeout
            })
            .map(|(k, _)| k.clone())
            .collect();
        for key in idle {
            if let Some(slot) = self.slots.remove(&key) {
                tracing::debug!(server = %key.1, "closing an idle MCP connection");
                close_slot(slot);
            }
        }
        let default_interval = self.cfg.health_interval;
        let mut due = Vec::new();
        for (key, slot) in &mut self.slots {
            if let SlotState::Connected { conn, .. } = &slot.state {
                // A server of the config file may set its own `health_check.interval`.
                let every = slot
                    .server
                    .policy
                    .health_interval
                    .unwrap_or(default_interval);
                if !health_due(slot.last_checked, now, every) {
                    continue;
                }
                slot.last_checked = now;
                let conn = conn.clone();
                let key = key.clone();
                let generation = slot.generation;
                let timeout = slot
                    .server
                    .policy
                    .health_timeout
                    .unwrap_or(Duration::from_secs(10));
                due.push((conn, key, generation, timeout));
            }
        }
        for (conn, key, generation, timeout) in due {
            let fut = async move { tokio::time::timeout(timeout, conn.ping()).await };
            ctx.spawn(fut.into_actor(self).map(move |res, act, ctx| {
                let error = match res {
                    Ok(Ok(_)) => return,
                    Ok(Err(e)) => e.to_string(),
                    Err(_) => "health check timed out".to_string(),
                };
                act.lost(ctx, key, generation, error);
            }));
        }
    }

    /// A connection died: mark it failed and reconnect with backoff.
    pub(crate) fn lost(
        &mut self,
        ctx: &mut Context<Self>,
        key: Key,
        generation: u64,
        error: String,
    ) {
        let Some(slot) = self
            .slots
            .get_mut(&key)
            .filter(|s| s.generation == generation)
        else {
            return;
        };
        let SlotState::Connected { conn, .. } = &slot.state else {
            return;
        };
        tracing::warn!(tenant = %self.tenant.id, server = %key.1, "MCP connection lost: {error}; reconnecting");
        slot.live.down(error.clone());
        slot.live.stats.failed(&error);
        let conn = conn.clone();
        actix::spawn(async move { conn.close().await });
        let delay = backoff(&self.cfg, 0);
        slot.state = SlotState::Failed {
            error,
            attempts: 1,
            retry_at: Instant::now() + delay,
        };
        let server = slot.server.clone();
        ctx.run_later(delay, move |act, ctx| {
            let due = act.slots.get(&key).is_some_and(|s| {
                s.generation == generation && matches!(s.state, SlotState::Failed { .. })
            });
            if due {
                act.connect(ctx, key, server, None, 1);
            }
        });
    }

    /// Close every connection of `user` (or of the servers matching `only`).
    pub(crate) fn close_user(&mut self, user: UserId, only: Option<&str>) {
        let keys: Vec<Key> = self
            .slots
            .keys()
            .filter(|(u, name)| *u == user && only.is_none_or(|o| o == name))
            .cloned()
            .collect();
        for key in keys {
            if let Some(slot) = self.slots.remove(&key) {
                close_slot(slot);
            }
        }
        // A changed configuration or a user gone: the history goes too.
        self.stats
            .retain(|(u, name), _| !(*u == user && only.is_none_or(|o| o == name)));
    }
}

fn close_slot(slot: Slot) {
    slot.live.down("it was closed");
    slot.live.stats.disconnected();
    match slot.state {
        SlotState::Connected { conn, .. } => {
            actix::spawn(async move { conn.close().await });
        }
        SlotState::Connecting { waiters, .. } => {
            for w in waiters {
                let _ = w.send(Err("the connection was closed".into()));
            }
        }
        SlotState::Failed { .. } => {}
    }
}

/// A server's tools that its policy (a file server's tool allow-list) allows.
fn allowed_tools(tools: Vec<Arc<dyn Tool>>, policy: &ServerPolicy) -> Vec<Arc<dyn Tool>> {
    tools
        .into_iter()
        .filter(|t| policy.allows_tool(&t.spec().service_tool))
        .collect()
}

/// The tools runs get: each called through `live` (the server's connection of the moment),
/// under the server's rate limit (shared by all of its tools), its schema compiled once here,
/// not per run.
fn bind_tools(
    tools: &[Arc<dyn Tool>],
    policy: &ServerPolicy,
    live: &Arc<LiveSlot>,
) -> Vec<PoolTool> {
    let limiter = policy
        .rate_limit_per_minute
        .filter(|n| *n > 0)
        .map(|n| Arc::new(RateLimiter::new(n)));
    tools
        .iter()
        .map(|t| {
            Arc::new(PoolBound {
                spec: t.spec().clone(),
                live: live.clone(),
            }) as Arc<dyn Tool>
        })
        .map(|t| match &limiter {
            Some(l) => Arc::new(RateLimited {
                inner: t,
                limiter: l.clone(),
            }) as Arc<dyn Tool>,
            None => t,
        })
        .map(|t| {
            let name = t.spec().name.clone();
            CompiledTool::compile(t).map_err(|e| format!("MCP tool {name:?} was left out: {e}"))
        })
        .collect()
}

/// Whether an assistant's `tools` patterns may admit a tool of server `server` (see
/// [`crate::tools::assistant_allows`]: `*`, `service:*`, `service:tool`, or a tool's name,
/// `<server>__<tool>`).
pub fn may_use_server(patterns: Option<&[String]>, server: &str) -> bool {
    let Some(patterns) = patterns else {
        return true;
    };
    let prefix = agentry_mcp::client::agent_tool_name(server, "x");
    let prefix = prefix.strip_suffix('x').unwrap_or(&prefix);
    patterns.iter().any(|p| {
        let p = p.trim();
        p == "*"
            || p == "*:*"
            || p.split_once(':')
                .is_some_and(|(service, _)| service == server)
            || p.starts_with(prefix)
    })
}

/// A connection's tools into a run's: the compiled ones, and a warning for each left out.
fn sort_tools(tools: &[PoolTool], ready: &mut Vec<CompiledTool>, warnings: &mut Vec<String>) {
    for t in tools {
        match t {
            Ok(tool) => ready.push(tool.clone()),
            Err(warning) => warnings.push(warning.clone()),
        }
    }
}

/// Calls per minute, sliding window.
struct RateLimiter {
    per_minute: u32,
    calls: std::sync::Mutex<std::collections::VecDeque<Instant>>,
}

impl RateLimiter {
    fn new(per_minute: u32) -> Self {
        RateLimiter {
            per_minute,
            calls: std::sync::Mutex::new(std::collections::VecDeque::new()),
        }
    }

    fn admit(&self) -> Result<(), Duration> {
        let now = Instant::now();
        let Ok(mut calls) = self.calls.lock() else {
            return Ok(());
        };
        while calls
            .front()
            .is_some_and(|t| now.duration_since(*t) >= Duration::from_secs(60))
        {
            calls.pop_front();
        }
        if calls.len() >= self.per_minute as usize {
            let oldest = calls.front().copied().unwrap_or(now);
            return Err(Duration::from_secs(60).saturating_sub(now.duration_since(oldest)));
        }
        calls.push_back(now);
        Ok(())
    }
}

struct RateLimited {
    inner: Arc<dyn Tool>,
    limiter: Arc<RateLimiter>,
}

#[async_trait]
impl Tool for RateLimited {
    fn spec(&self) -> &agentry_tools::tool::ToolSpec {
        self.inner.spec()
    }

    fn needs_approval(&self, args: &serde_json::Value) -> bool {
        self.inner.needs_approval(args)
    }

    async fn call(
        &self,
        args: serde_json::Value,
        ctx: &agentry_tools::tool::ToolContext,
    ) -> Result<agentry_tools::tool::ToolOutput, agentry_tools::tool::ToolError> {
        if let Err(wait) = self.limiter.admit() {
            return Err(agentry_tools::tool::ToolError::Failed {
                message: format!(
                    "the MCP server's rate limit of {} calls per minute is reached; try again in {} s",
                    self.limiter.per_minute,
                    wait.as_secs().max(1)
                ),
                retryable: false,
            });
        }
        self.inner.call(args, ctx).await
    }
}

impl Actor for McpPoolActor {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Self::Context) {
        // Each server is pinged on its own interval (the config file's `health_check.interval`,
        // else the pool's); the sweep runs often enough for the shortest of them.
        let tick = self
            .cfg
            .health_interval
            .min(Duration::from_secs(1))
            .max(Duration::from_millis(50));
        ctx.run_interval(tick, |act, ctx| act.sweep(ctx));
    }

    fn stopped(&mut self, _: &mut Self::Context) {
        self.publish_states(true);
        for (_, slot) in self.slots.drain() {
            close_slot(slot);
        }
    }
}

/// Restarted by the tenant's supervisor after a stop or a panic
/// ([`crate::supervise::start_supervised`]). After a panic `stopped` did not run and connects in
/// flight lost their tasks: every connection is closed and made again on its next use.
impl actix::Supervised for McpPoolActor {
    fn restarting(&mut self, _: &mut Self::Context) {
        self.publish_states(true);
        for (_, slot) in self.slots.drain() {
            close_slot(slot);
        }
    }
}

/// Whether a connection last checked at `last` is due for a ping at `now`, every `every`.
fn health_due(last: Instant, now: Instant, every: Duration) -> bool {
    now.saturating_duration_since(last) >= every
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_connection_is_pinged_once_its_own_interval_has_passed() {
        let t0 = Instant::now();
        let every = Duration::from_secs(60);
        assert!(!health_due(t0, t0, every));
        assert!(!health_due(t0, t0 + Duration::from_secs(59), every));
        assert!(health_due(t0, t0 + every, every));
        assert!(health_due(t0, t0 + Duration::from_secs(61), every));
        // A clock read before `last` (another thread's Instant) is not due, and does not panic.
        assert!(!health_due(t0 + every, t0, every));
    }

    #[test]
    fn the_server_label_is_the_platform_name_or_a_bounded_user_name() {
        let server = |name: &str, origin| PoolServer {
            config: McpServerConfig::http(name, "https://mcp.example.com/mcp"),
            policy: ServerPolicy::default(),
            origin,
        };
        assert_eq!(server_label(&server("github", Origin::File)), "github");
        assert_eq!(server_label(&server("github", Origin::User)), "user:github");
    }

    #[test]
    fn calls_count_by_outcome_and_errors_keep_their_time() {
        use agentry_tools::tool::{ToolError, ToolOutput};
        let stats = ServerStats::default();
        let ok = ToolOutput {
            content: serde_json::json!("fine"),
            ..Default::default()
        };
        let tool_error = ToolOutput {
            is_error: true,
            ..ok.clone()
        };
        for r in [
            Ok(ok),
            Ok(tool_error),
            Err(ToolError::Disconnected("gone".into())),
            Err(ToolError::Timeout(Duration::from_secs(1))),
            Err(ToolError::Cancelled),
        ] {
            stats.count_call(CallOutcome::of(&r));
        }
        stats.failed("boom");
        let r = stats.report();
        assert_eq!(
            r.calls,
            CallCounts {
                ok: 1,
                error: 2,
                timeout: 1
            }
        );
        assert_eq!(r.last_error.as_deref(), Some("boom"));
        assert!(r.last_error_at.is_some() && r.connected_since.is_none());
        stats.connected();
        stats.reconnecting();
        let r = stats.report();
        assert!(r.connected_since.is_some());
        assert_eq!(r.reconnects, 1);
        assert_eq!(
            r.last_error.as_deref(),
            Some("boom"),
            "kept after the server is back"
        );
    }

    #[test]
    fn backoff_doubles_and_caps_with_jitter() {
        let cfg = McpPoolConfig {
            backoff_base: Duration::from_millis(100),
            backoff_max: Duration::from_secs(2),
            ..McpPoolConfig::default()
        };
        // The step, plus up to as much again (backon computes in f32: 10 ppm of slack).
        for (attempt, step_ms) in [(0, 100), (1, 200), (3, 800), (10, 2000), (1000, 2000)] {
            let step = Duration::from_millis(step_ms);
            let slack = step / 100_000 + Duration::from_micros(1);
            let d = backoff(&cfg, attempt);
            assert!(
                d + slack >= step && d <= step * 2 + slack,
                "attempt {attempt}: {d:?}"
            );
        }
    }
}
