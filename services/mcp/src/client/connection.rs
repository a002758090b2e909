//! [`McpConnection`]: one live connection to one MCP server.
//!
//! What a pool needs, and nothing it has to know about rmcp: [`McpConnection::connect`],
//! [`status`](McpConnection::status), [`ping`](McpConnection::ping),
//! [`list_tools`](McpConnection::list_tools) (+ [`ClientHooks::on_tools_changed`]),
//! [`call_tool`](McpConnection::call_tool), [`close`](McpConnection::close). A dead transport is
//! never hidden: it shows as [`ConnectionStatus::Error`], is reported to
//! [`ClientHooks::on_status`], and every later call fails with [`McpError::TransportClosed`]
//! (a `ToolError::Unavailable` for the loop). Reconnecting is connecting again: a connection
//! is not reused after its transport died.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rmcp::model::{
    CallToolRequest, CallToolRequestParams, CallToolResult, CancelledNotificationParam,
    ClientRequest, InputRequest, InputRequiredResult, InputResponses, ProtocolVersion, RequestId,
    RequestMetaObject, ServerResult,
};
use rmcp::service::{
    ClientInitializeError, ClientLifecycleMode, Peer, PeerRequestOptions, RoleClient,
    RunningService, RxJsonRpcMessage, TxJsonRpcMessage, serve_client_with_lifecycle,
};
use rmcp::transport::{AuthClient, StreamableHttpClientTransport, Transport};
use serde::Serialize;
use serde_json::{Map, Value, json};

use super::config::{HttpAuth, McpServerConfig, McpTransportConfig};
use super::error::McpError;
use super::handler::{AgentryClientHandler, ElicitFor, InFlightGuard, Shared, elicit};
use super::http::{HttpSignals, SessionAwareClient, transport_config};
use super::stdio::{self, ProcessGroup, StderrTail, StdioLaunch};
use agentry_tools::tool::{PauseClock, ToolContext, ToolImage, ToolOutput};

/// MRTR (`input_required`) rounds driven for one call before giving up.
const MAX_INPUT_ROUNDS: usize = 8;
/// How long a `notifications/cancelled` may take to go out (in the background).
const CANCEL_SEND_TIMEOUT: Duration = Duration::from_secs(2);
/// How long a server's processes get between SIGTERM and SIGKILL.
const KILL_GRACE: Duration = Duration::from_secs(2);
/// How long `close` waits for the server to shut down before killing it.
const CLOSE_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a new Streamable HTTP connection waits for its standalone event stream to open
/// before it is handed out anyway (see `HttpSignals::standalone_stream_open`).
const STANDALONE_STREAM_WAIT: Duration = Duration::from_secs(5);

/// The protocol versions offered, newest first. 2026-07-28 is tried with `server/discover`;
/// a server that does not know it gets the legacy `initialize` with 2025-11-25, and may answer
/// with any older version it speaks (2025-06-18, 2025-03-26, 2024-11-05), which is accepted.
pub const PREFERRED_PROTOCOL_VERSIONS: &[ProtocolVersion] = &[ProtocolVersion::V_2026_07_28];
/// Offered in `initialize` when the server does not speak the discover lifecycle.
pub const LEGACY_PROTOCOL_VERSION: ProtocolVersion = ProtocolVersion::V_2025_11_25;

fn lifecycle() -> ClientLifecycleMode {
    ClientLifecycleMode::Auto {
        preferred_versions: PREFERRED_PROTOCOL_VERSIONS.to_vec(),
        legacy_version: Some(LEGACY_PROTOCOL_VERSION),
    }
}

/// Live state of a connection, as the REST API shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "status", content = "message", rename_all = "snake_case")]
pub enum ConnectionStatus {
    /// Spawning / handshaking.
    Connecting,
    Connected,
    /// Closed by us ([`McpConnection::close`]).
    Disconnected,
    /// The transport failed or the server went away; the message says how.
    Error(String),
}

impl ConnectionStatus {
    /// `connecting`, `connected`, `disconnected` or `error`.
    pub fn as_str(&self) -> &'static str {
        match self {
            ConnectionStatus::Connecting => "connecting",
            ConnectionStatus::Connected => "connected",
            ConnectionStatus::Disconnected => "disconnected",
            ConnectionStatus::Error(_) => "error",
        }
    }
}

type ToolsChangedHook = Arc<dyn Fn(&str) + Send + Sync>;
type StatusHook = Arc<dyn Fn(&str, &ConnectionStatus) + Send + Sync>;

/// Callbacks a pool gives each connection. Each receives the server's name. They run on rmcp's
/// tasks: do something quick (send a message to an actor), never block.
#[derive(Clone, Default)]
pub struct ClientHooks {
    /// The server sent `notifications/tools/list_changed`: the cached tool list is stale and
    /// the next [`McpConnection::list_tools`] fetches it again.
    pub on_tools_changed: Option<ToolsChangedHook>,
    /// The status changed (connected, error with a message, disconnected).
    pub on_status: Option<StatusHook>,
    /// The server sent `notifications/resources/list_changed` or `prompts/list_changed`: the
    /// cached [`Catalog`] is stale and the next [`McpConnection::catalog`] fetches it again.
    pub on_catalog_changed: Option<ToolsChangedHook>,
    /// Where this user's OAuth tokens for the server are (`auth: {type: oauth}` only). Without
    /// one, a `client_credentials` server keeps its token in memory and an
    /// `authorization_code` server cannot connect ([`McpError::AuthorizationRequired`]).
    pub oauth_tokens: Option<Arc<dyn super::oauth::OAuthTokenStore>>,
}

impl ClientHooks {
    pub fn on_tools_changed(mut self, f: impl Fn(&str) + Send + Sync + 'static) -> Self {
        self.on_tools_changed = Some(Arc::new(f));
        self
    }

    pub fn on_catalog_changed(mut self, f: impl Fn(&str) + Send + Sync + 'static) -> Self {
        self.on_catalog_changed = Some(Arc::new(f));
        self
    }

    pub fn on_status(
        mut self,
        f: impl Fn(&str, &ConnectionStatus) + Send + Sync + 'static,
    ) -> Self {
        self.on_status = Some(Arc::new(f));
        self
    }

    pub fn oauth_tokens(mut self, store: Arc<dyn super::oauth::OAuthTokenStore>) -> Self {
        self.oauth_tokens = Some(store);
        self
    }
}

impl std::fmt::Debug for ClientHooks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClientHooks")
            .field("on_tools_changed", &self.on_tools_changed.is_some())
            .field("on_status", &self.on_status.is_some())
            .field("on_catalog_changed", &self.on_catalog_changed.is_some())
            .field("oauth_tokens", &self.oauth_tokens.is_some())
            .finish()
    }
}

/// Who answered the handshake.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ServerDetails {
    /// The negotiated protocol version (`2025-11-25`, `2025-06-18`, …).
    pub protocol_version: String,
    pub name: Option<String>,
    pub version: Option<String>,
    pub title: Option<String>,
    pub instructions: Option<String>,
}

/// The behaviour hints a server gives for a tool (MCP `ToolAnnotations`). Unset is `None`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct ToolHints {
    pub read_only: Option<bool>,
    pub destructive: Option<bool>,
    pub idempotent: Option<bool>,
    pub open_world: Option<bool>,
}

impl ToolHints {
    /// Approval is needed when the server explicitly marks the tool destructive and does not
    /// also mark it read-only. The spec's *default* for `destructiveHint` is `true`, but applying
    /// it would put every unannotated tool behind approval; hints from an untrusted server are
    /// only hints, and an assistant's `interrupt_on` can require approval for any tool.
    pub fn needs_approval(&self) -> bool {
        self.destructive == Some(true) && self.read_only != Some(true)
    }
}

/// One tool as the server lists it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RemoteTool {
    /// The server's own name for it.
    pub name: String,
    pub title: Option<String>,
    pub description: Option<String>,
    pub input_schema: Value,
    pub output_schema: Option<Value>,
    pub hints: ToolHints,
}

impl From<rmcp::model::Tool> for RemoteTool {
    fn from(t: rmcp::model::Tool) -> Self {
        let hints = t
            .annotations
            .as_ref()
            .map(|a| ToolHints {
                read_only: a.read_only_hint,
                destructive: a.destructive_hint,
                idempotent: a.idempotent_hint,
                open_world: a.open_world_hint,
            })
            .unwrap_or_default();
        RemoteTool {
            name: t.name.to_string(),
            title: t
                .title
                .clone()
                .or_else(|| t.annotations.as_ref().and_then(|a| a.title.clone())),
            description: t.description.map(|d| d.to_string()),
            input_schema: Value::Object((*t.input_schema).clone()),
            output_schema: t.output_schema.map(|s| Value::Object((*s).clone())),
            hints,
        }
    }
}

/// What a server offers besides tools, as it lists them (every page): its resources, resource
/// templates and prompts, each list empty when the server does not declare the capability.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Catalog {
    pub resources: Vec<rmcp::model::Resource>,
    pub templates: Vec<rmcp::model::ResourceTemplate>,
    pub prompts: Vec<rmcp::model::Prompt>,
    /// The server declares `completions` (it answers `completion/complete`).
    pub completions: bool,
}

impl Catalog {
    pub fn is_empty(&self) -> bool {
        self.resources.is_empty() && self.templates.is_empty() && self.prompts.is_empty()
    }
}

/// The most a `resources/read` may bring back (the text and base64 blobs of all its contents
/// together); a larger answer is refused, not cut, so a client never takes a truncated file
/// for the whole.
pub const MAX_RESOURCE_BYTES: usize = 8 * 1024 * 1024;

/// A connection to one server. Cheap to clone; all clones are the same connection.
#[derive(Clone)]
pub struct McpConnection {
    inner: Arc<Inner>,
}

struct Inner {
    config: McpServerConfig,
    shared: Arc<Shared>,
    peer: Peer<RoleClient>,
    service: tokio::sync::Mutex<Option<RunningService<RoleClient, AgentryClientHandler>>>,
    details: ServerDetails,
    process_group: Option<Arc<ProcessGroup>>,
    /// Set when the transport ended (the server went away); final.
    dead: Arc<AtomicBool>,
    tools: Mutex<Option<(u64, Vec<RemoteTool>)>>,
    catalog: Mutex<Option<(u64, Catalog)>>,
}

impl std::fmt::Debug for McpConnection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("McpConnection")
            .field("server", &self.inner.config.name)
            .field("status", &self.status())
            .field("details", &self.inner.details)
            .finish_non_exhaustive()
    }
}

impl McpConnection {
    /// Spawn or reach the server and complete the MCP handshake, all within
    /// `connect_timeout_secs`. A stdio server is spawned as `launch` says (its sandbox and
    /// workspace); an HTTP server ignores it.
    #[tracing::instrument(skip_all, fields(server = %config.name, transport = config.transport_kind()))]
    pub async fn connect(
        config: &McpServerConfig,
        hooks: ClientHooks,
        launch: &StdioLaunch,
    ) -> Result<Self, McpError> {
        config.validate()?;
        if config.disabled {
            return Err(McpError::Disabled {
                server: config.name.clone(),
            });
        }
        let shared = Shared::new(&config.name, hooks);
        let dead = Arc::new(AtomicBool::new(false));
        let connect_started = Instant::now();
        let started = match start(config, &shared, &dead, lifecycle(), launch).await {
            Ok(started) => started,
            // A server that answered the `server/discover` probe with something that is
            // neither a discover result nor a JSON-RPC error (some minimal 2025 servers answer
            // every unknown method with `{}`) gets a plain `initialize` on a fresh transport.
            // Also after a closed transport: an older server may exit on a request it does
            // not expect before `initialize`.
            Err(McpError::HandshakeFailed { reason, .. })
            | Err(McpError::TransportClosed { reason, .. }) => {
                tracing::info!(%reason, "discover/auto lifecycle failed; retrying with initialize");
                dead.store(false, Ordering::SeqCst);
                start(
                    config,
                    &shared,
                    &dead,
                    ClientLifecycleMode::Initialize,
                    launch,
                )
                .await?
            }
            Err(e) => return Err(e),
        };
        let Started {
            service,
            process_group,
            http,
        } = started;
        let server = config.name.clone();
        if let Some(http) = &http {
            let within = config
                .connect_timeout()
                .saturating_sub(connect_started.elapsed())
                .min(STANDALONE_STREAM_WAIT);
            if !http.standalone_stream_open(within).await {
                tracing::info!(
                    "the server did not answer the standalone event stream within {within:?}; \
                     requests it sends outside a call may be lost"
                );
            }
        }

        let peer = service.peer().clone();
        let Some(info) = peer.peer_info() else {
            let mut service = service;
            let _ = service.close_with_timeout(CLOSE_TIMEOUT).await;
            return Err(McpError::HandshakeFailed {
                server,
                reason: "the server sent no initialize result".into(),
            });
        };
        if !ProtocolVersion::KNOWN_VERSIONS.contains(&info.protocol_version) {
            let mut service = service;
            let _ = service.close_with_timeout(CLOSE_TIMEOUT).await;
            if let Some(pg) = &process_group {
                pg.terminate(KILL_GRACE).await;
            }
            return Err(McpError::HandshakeFailed {
                server,
                reason: format!(
                    "the server chose protocol version {}, which this client does not speak",
                    info.protocol_version
                ),
            });
        }
        let details = ServerDetails {
            protocol_version: info.protocol_version.to_string(),
            name: info.server_info.as_ref().map(|i| i.name.clone()),
            version: info.server_info.as_ref().map(|i| i.version.clone()),
            title: info.server_info.as_ref().and_then(|i| i.title.clone()),
            instructions: info.instructions.clone(),
        };
        tracing::info!(protocol_version = %details.protocol_version, server_name = ?details.name, "MCP server connected");
        shared.set_status(ConnectionStatus::Connected);
        Ok(McpConnection {
            inner: Arc::new(Inner {
                config: config.clone(),
                shared,
                peer,
                service: tokio::sync::Mutex::new(Some(service)),
                details,
                process_group,
                dead,
                tools: Mutex::new(None),
                catalog: Mutex::new(None),
            }),
        })
    }

    /// The server's configured name.
    pub fn name(&self) -> &str {
        &self.inner.config.name
    }

    pub fn config(&self) -> &McpServerConfig {
        &self.inner.config
    }

    /// Negotiated protocol version and the server's self-description.
    pub fn server_details(&self) -> &ServerDetails {
        &self.inner.details
    }

    pub fn protocol_version(&self) -> &str {
        &self.inner.details.protocol_version
    }

    pub fn status(&self) -> ConnectionStatus {
        self.inner.shared.status()
    }

    /// The process group of a stdio server (its leader's pid), for diagnostics and tests.
    pub fn process_group(&self) -> Option<i32> {
        self.inner.process_group.as_ref().map(|g| g.pgid())
    }

    /// Whether this connection is finished: closed by us, or its transport ended (the server
    /// exited or hung up). Nothing sent on it can succeed again; a pool connects anew.
    pub fn is_closed(&self) -> bool {
        self.inner.dead.load(Ordering::SeqCst) || self.status() == ConnectionStatus::Disconnected
    }

    /// Calls currently running on this connection.
    pub fn in_flight_calls(&self) -> usize {
        self.inner.shared.in_flight_calls()
    }

    /// Whether a `tools/list_changed` arrived since the tool list was last fetched.
    pub fn tools_stale(&self) -> bool {
        let generation = self.inner.shared.tools_generation.load(Ordering::SeqCst);
        lock(&self.inner.tools)
            .as_ref()
            .is_none_or(|(g, _)| *g != generation)
    }

    fn usable(&self) -> Result<(), McpError> {
        match self.status() {
            ConnectionStatus::Disconnected => Err(McpError::TransportClosed {
                server: self.name().to_string(),
                reason: "the connection was closed".into(),
            }),
            ConnectionStatus::Error(reason) if self.inner.dead.load(Ordering::SeqCst) => {
                Err(McpError::TransportClosed {
                    server: self.name().to_string(),
                    reason,
                })
            }
            _ => Ok(()),
        }
    }

    /// Note the outcome of a request in the status: transport failures make it `error`, a
    /// success after an HTTP outage makes it `connected` again.
    fn observe<T>(&self, r: &Result<T, McpError>) {
        match r {
            Err(e) if e.is_transport() => self
                .inner
                .shared
                .set_status(ConnectionStatus::Error(e.to_string())),
            Ok(_) if !self.inner.dead.load(Ordering::SeqCst) => {
                self.inner.shared.set_status(ConnectionStatus::Connected)
            }
            _ => {}
        }
    }

    /// A `ping` round trip within the connect timeout. For health checks: a JSON-RPC error
    /// answer counts as a round trip too (the server is alive, it just does not do `ping`).
    pub async fn ping(&self) -> Result<Duration, McpError> {
        self.usable()?;
        let start = Instant::now();
        let r = async {
            let handle = self
                .inner
                .peer
                .send_request_with_option(
                    ClientRequest::PingRequest(Default::default()),
                    PeerRequestOptions::with_timeout(self.inner.config.connect_timeout()),
                )
                .await
                .map_err(|e| McpError::from_service(self.name(), e))?;
            handle
                .await_response()
                .await
                .map_err(|e| McpError::from_service(self.name(), e))?;
            Ok(start.elapsed())
        }
        .await;
        // Any answer proves the server is there and reading. Some servers do not implement
        // `ping` (the official Python SDK answers "method not found"); a health check that
        // took that for a dead server would reconnect it every interval and kill its calls.
        let r = match r {
            Err(McpError::Server { .. }) => Ok(start.elapsed()),
            other => other,
        };
        self.observe(&r);
        r
    }

    /// Every tool of the server (pagination cursors followed), cached until the server says
    /// the list changed.
    pub async fn list_tools(&self) -> Result<Vec<RemoteTool>, McpError> {
        self.usable()?;
        let generation = self.inner.shared.tools_generation.load(Ordering::SeqCst);
        if let Some((g, tools)) = lock(&self.inner.tools).as_ref()
            && *g == generation
        {
            return Ok(tools.clone());
        }
        let timeout = self.inner.config.timeout();
        let r = match tokio::time::timeout(timeout, self.inner.peer.list_all_tools()).await {
            Ok(Ok(tools)) => {
                let mut tools = tools.into_iter().map(RemoteTool::from).collect::<Vec<_>>();
                // A tool that may only be called as a task would always fail here (-32601).
                self.inner.shared.task_support.retain_callable(
                    self.name(),
                    &mut tools,
                    |t: &RemoteTool| t.name.as_str(),
                );
                Ok(tools)
            }
            Ok(Err(e)) => Err(McpError::from_service(self.name(), e)),
            Err(_) => Err(McpError::Timeout {
                server: self.name().to_string(),
                after: timeout,
            }),
        };
        self.observe(&r);
        let tools = r?;
        *lock(&self.inner.tools) = Some((generation, tools.clone()));
        Ok(tools)
    }

    /// Whether a `resources/list_changed` or `prompts/list_changed` arrived since the catalog
    /// was last fetched.
    pub fn catalog_stale(&self) -> bool {
        let generation = self.inner.shared.catalog_generation.load(Ordering::SeqCst);
        lock(&self.inner.catalog)
            .as_ref()
            .is_none_or(|(g, _)| *g != generation)
    }

    /// The server's resources, resource templates and prompts (pagination cursors followed),
    /// each listed only when the server declares the capability, cached until the server says
    /// a list changed. Within the server's `timeout_secs`.
    pub async fn catalog(&self) -> Result<Catalog, McpError> {
        self.usable()?;
        let generation = self.inner.shared.catalog_generation.load(Ordering::SeqCst);
        if let Some((g, catalog)) = lock(&self.inner.catalog).as_ref()
            && *g == generation
        {
            return Ok(catalog.clone());
        }
        let caps = self
            .inner
            .peer
            .peer_info()
            .map(|i| i.capabilities.clone())
            .unwrap_or_default();
        let peer = &self.inner.peer;
        let server = self.name();
        let fetch = async {
            let mut catalog = Catalog {
                completions: caps.completions.is_some(),
                ..Catalog::default()
            };
            if caps.resources.is_some() {
                catalog.resources = peer
                    .list_all_resources()
                    .await
                    .map_err(|e| McpError::from_service(server, e))?;
                // Templates are optional within `resources`: a server without them may answer
                // "method not found", which is no template rather than a failure.
                catalog.templates = match peer.list_all_resource_templates().await {
                    Ok(t) => t,
                    Err(e) => match McpError::from_service(server, e) {
                        McpError::Server { code: -32601, .. } => Vec::new(),
                        other => return Err(other),
                    },
                };
            }
            if caps.prompts.is_some() {
                catalog.prompts = peer
                    .list_all_prompts()
                    .await
                    .map_err(|e| McpError::from_service(server, e))?;
            }
            Ok(catalog)
        };
        let r = self.within_timeout(fetch).await;
        self.observe(&r);
        let catalog = r?;
        *lock(&self.inner.catalog) = Some((generation, catalog.clone()));
        Ok(catalog)
    }

    /// `fut` within the server's `timeout_secs`.
    async fn within_timeout<T>(
        &self,
        fut: impl std::future::Future<Output = Result<T, McpError>>,
    ) -> Result<T, McpError> {
        let timeout = self.inner.config.timeout();
        tokio::time::timeout(timeout, fut)
            .await
            .unwrap_or_else(|_| {
                Err(McpError::Timeout {
                    server: self.name().to_string(),
                    after: timeout,
                })
            })
    }

    /// Read the resource `uri` (the server's own URI). Text contents come back as text, blobs as
    /// the server's base64; an answer over [`MAX_RESOURCE_BYTES`] is refused.
    pub async fn read_resource(
        &self,
        uri: &str,
    ) -> Result<rmcp::model::ReadResourceResult, McpError> {
        use rmcp::model::{ReadResourceRequestParams, ReadResourceResponse, ResourceContents};
        self.usable()?;
        let server = self.name();
        let params = ReadResourceRequestParams::new(uri.to_string());
        let r = self
            .within_timeout(async {
                match self.inner.peer.read_resource_once(params).await {
                    Ok(ReadResourceResponse::Complete(r)) => Ok(r),
                    Ok(ReadResourceResponse::InputRequired(_)) => {
                        Err(input_not_offered(server, "resources/read"))
                    }
                    Ok(_) => Err(unexpected(server, "resources/read")),
                    Err(e) => Err(McpError::from_service(server, e)),
                }
            })
            .await;
        self.observe(&r);
        let result = r?;
        let size: usize = result
            .contents
            .iter()
            .map(|c| match c {
                ResourceContents::TextResourceContents { text, .. } => text.len(),
                ResourceContents::BlobResourceContents { blob, .. } => blob.len(),
                #[allow(unreachable_patterns)]
                _ => 0,
            })
            .sum();
        if size > MAX_RESOURCE_BYTES {
            return Err(McpError::Protocol {
                server: server.to_string(),
                reason: format!(
                    "the resource {uri:?} is {size} bytes, over the {MAX_RESOURCE_BYTES} bytes a \
                     read may bring back; it was not read"
                ),
            });
        }
        Ok(result)
    }

    /// Get the prompt `name` (the server's own name) with `arguments`.
    pub async fn get_prompt(
        &self,
        name: &str,
        arguments: Option<rmcp::model::JsonObject>,
    ) -> Result<rmcp::model::GetPromptResult, McpError> {
        use rmcp::model::{GetPromptRequestParams, GetPromptResponse};
        self.usable()?;
        let server = self.name();
        let mut params = GetPromptRequestParams::new(name.to_string());
        params.arguments = arguments;
        let r = self
            .within_timeout(async {
                match self.inner.peer.get_prompt_once(params).await {
                    Ok(GetPromptResponse::Complete(r)) => Ok(r),
                    Ok(GetPromptResponse::InputRequired(_)) => {
                        Err(input_not_offered(server, "prompts/get"))
                    }
                    Ok(_) => Err(unexpected(server, "prompts/get")),
                    Err(e) => Err(McpError::from_service(server, e)),
                }
            })
            .await;
        self.observe(&r);
        r
    }

    /// Forward `completion/complete` (the reference in the server's own names). A server that
    /// does not declare `completions` is not asked: the answer is an empty completion.
    pub async fn complete(
        &self,
        params: rmcp::model::CompleteRequestParams,
    ) -> Result<rmcp::model::CompleteResult, McpError> {
        self.usable()?;
        let declared = self
            .inner
            .peer
            .peer_info()
            .is_some_and(|i| i.capabilities.completions.is_some());
        if !declared {
            return Ok(rmcp::model::CompleteResult::default());
        }
        let server = self.name();
        let r = self
            .within_timeout(async {
                self.inner
                    .peer
                    .complete(params)
                    .await
                    .map_err(|e| McpError::from_service(server, e))
            })
            .await;
        self.observe(&r);
        r
    }

    /// Call `name` (the server's name for the tool) with `args` (a JSON object, or null for
    /// none). Progress goes to `ctx.events` as `progress` events for `ctx.tool_call_id`;
    /// elicitation is asked through `ctx.interaction`; `ctx.cancel` sends
    /// `notifications/cancelled` and returns [`McpError::Cancelled`] at once; after
    /// `timeout_secs` (not counting time spent waiting for the user to answer an elicitation)
    /// the request is cancelled the same way and [`McpError::Timeout`] returned.
    ///
    /// The output's content is `{"text": …, "attachments": […], "structured_content": …}`
    /// (the last two only when present), made for a model: see [`to_output`]. `isError: true`
    /// gives a [`ToolOutput`] with `is_error` set.
    #[tracing::instrument(skip_all, fields(otel.name = %format!("mcp tools/call {name}"), otel.kind = "client", rpc.system = "jsonrpc", rpc.method = "tools/call", server = %self.name(), tool = %name, tool_call_id = %ctx.tool_call_id))]
    pub async fn call_tool(
        &self,
        name: &str,
        args: Value,
        ctx: &ToolContext,
    ) -> Result<ToolOutput, McpError> {
        self.usable()?;
        if ctx.cancel.is_cancelled() {
            return Err(McpError::Cancelled);
        }
        let arguments = match args {
            Value::Object(m) => Some(m),
            Value::Null => None,
            other => {
                return Err(McpError::InvalidArguments(format!(
                    "tool arguments must be a JSON object, got {other}"
                )));
            }
        };
        let mut guard = self
            .inner
            .shared
            .begin_call(ctx.interaction.clone(), ctx.cancel.clone());
        let clock = guard.clock();
        let timeout = self.inner.config.timeout();
        let started = Instant::now();
        let mut params = CallToolRequestParams::new(name.to_string());
        params.arguments = arguments;

        for _round in 0..MAX_INPUT_ROUNDS {
            let r = self
                .call_round(&mut guard, params.clone(), ctx, &clock, started, timeout)
                .await;
            self.observe(&r);
            match r? {
                Round::Done(result) => return Ok(to_output(result)),
                Round::InputRequired(input) => {
                    let (responses, state) = self.fulfill_input(input, guard.elicit_for()).await?;
                    params.input_responses = responses;
                    params.request_state = state;
                }
            }
        }
        Err(McpError::Protocol {
            server: self.name().to_string(),
            reason: format!(
                "the server kept asking for input for more than {MAX_INPUT_ROUNDS} rounds"
            ),
        })
    }

    async fn call_round(
        &self,
        guard: &mut InFlightGuard,
        params: CallToolRequestParams,
        ctx: &ToolContext,
        clock: &Arc<PauseClock>,
        started: Instant,
        timeout: Duration,
    ) -> Result<Round, McpError> {
        let server = self.name();
        let mut breaks = self.inner.shared.watch_breaks();
        // The call's span as W3C trace context in `_meta` (SEP-414, the OpenTelemetry MCP
        // conventions); over HTTP it is sent as the `traceparent` header too (http.rs).
        let mut options = PeerRequestOptions::no_options();
        if let Some(tp) = agentry_schema::trace_context::traceparent(&tracing::Span::current()) {
            let mut meta = RequestMetaObject::new();
            meta.set_traceparent(tp);
            options.meta = Some(meta);
        }
        let handle = self
            .inner
            .peer
            .send_request_with_option(
                ClientRequest::CallToolRequest(CallToolRequest::new(params)),
                options,
            )
            .await
            .map_err(|e| McpError::from_service(server, e))?;
        guard.sent(handle.id.clone());
        guard.route_progress(
            handle.progress_token.clone(),
            &ctx.tool_call_id,
            ctx.events.clone(),
        );
        // Until the server answers, dropping this future (the agent loop stops waiting on a
        // cancel or its own timeout, or its task is aborted) must still tell the server: the
        // guard sends `notifications/cancelled` for a request left unanswered.
        let mut pending = PendingRequest {
            conn: self,
            id: Some(handle.id.clone()),
        };
        let response = tokio::select! {
            r = handle.await_response() => {
                pending.answered();
                r
            }
            reason = transport_break(&mut breaks) => {
                // The server is gone: there is nobody to send a cancel to.
                pending.answered();
                return Err(McpError::TransportClosed { server: server.to_string(), reason });
            }
            _ = ctx.cancel.cancelled() => {
                pending.cancel("the run was cancelled");
                return Err(McpError::Cancelled);
            }
            _ = clock.deadline(started, timeout) => {
                pending.cancel("timed out");
                return Err(McpError::Timeout { server: server.to_string(), after: timeout });
            }
        };
        match response.map_err(|e| McpError::from_service(server, e))? {
            ServerResult::CallToolResult(r) => Ok(Round::Done(r)),
            ServerResult::InputRequiredResult(r) => Ok(Round::InputRequired(r)),
            other => Err(McpError::Protocol {
                server: server.to_string(),
                reason: format!("unexpected answer to tools/call: {other:?}"),
            }),
        }
    }

    /// Answer MRTR (`input_required`, protocol 2026-07-28) requests: elicitation goes to the
    /// user like a server-sent `elicitation/create`; roots are an empty list; sampling is not
    /// offered (the call fails).
    async fn fulfill_input(
        &self,
        input: InputRequiredResult,
        target: ElicitFor,
    ) -> Result<(Option<InputResponses>, Option<String>), McpError> {
        let mut responses = InputResponses::new();
        for (key, request) in input.input_requests.unwrap_or_default() {
            let value = match request {
                InputRequest::Elicitation(r) => {
                    serde_json::to_value(elicit(&self.inner.shared, r.params, target.clone()).await)
                }
                // Roots are not offered: an empty list.
                InputRequest::ListRoots(_) => Ok(json!({ "roots": [] })),
                other => {
                    return Err(McpError::Protocol {
                        server: self.name().to_string(),
                        reason: format!(
                            "the server asked for input Agentry does not offer (sampling): {other:?}"
                        ),
                    });
                }
            };
            let value = value.map_err(|e| McpError::Protocol {
                server: self.name().to_string(),
                reason: format!("could not encode an input response: {e}"),
            })?;
            responses.insert(key, value);
        }
        Ok((
            (!responses.is_empty()).then_some(responses),
            input.request_state,
        ))
    }

    /// Send `notifications/cancelled` for `id` in the background, so the caller returns at
    /// once however slow the transport is. Outside a Tokio runtime (a drop during shutdown)
    /// there is nothing to send it with; the server learns when the transport closes.
    fn send_cancel(&self, id: RequestId, reason: &'static str) {
        if self.inner.dead.load(Ordering::SeqCst) {
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            tracing::info!(%id, "no runtime to send notifications/cancelled on");
            return;
        };
        let peer = self.inner.peer.clone();
        runtime.spawn(async move {
            let sent = tokio::time::timeout(
                CANCEL_SEND_TIMEOUT,
                peer.notify_cancelled(CancelledNotificationParam::new(
                    Some(id.clone()),
                    Some(reason.to_string()),
                )),
            )
            .await;
            match sent {
                Ok(Ok(())) => tracing::debug!(%id, reason, "sent notifications/cancelled"),
                Ok(Err(e)) => tracing::info!(%id, "could not send notifications/cancelled: {e}"),
                Err(_) => tracing::info!(%id, "notifications/cancelled did not go out in time"),
            }
        });
    }

    /// Shut the connection down: the transport is closed (stdio: stdin closed, then TERM, then
    /// KILL to the whole process group; HTTP: the session is deleted), and the status becomes
    /// `disconnected`. Idempotent.
    pub async fn close(&self) {
        self.inner.shared.set_status(ConnectionStatus::Disconnected);
        let service = self.inner.service.lock().await.take();
        if let Some(mut service) = service
            && service
                .close_with_timeout(CLOSE_TIMEOUT)
                .await
                .ok()
                .flatten()
                .is_none()
        {
            tracing::warn!(server = %self.name(), "the MCP service did not stop in time");
        }
        if let Some(pg) = &self.inner.process_group {
            pg.terminate(KILL_GRACE).await;
        }
    }
}

/// A server answered a request that is not a tool call with `input_required` (2026-07-28):
/// Agentry asks its users only for tool calls.
fn input_not_offered(server: &str, method: &str) -> McpError {
    McpError::Protocol {
        server: server.to_string(),
        reason: format!(
            "the server asked for input (input_required) to answer {method}; Agentry answers \
             input requests only for tool calls"
        ),
    }
}

fn unexpected(server: &str, method: &str) -> McpError {
    McpError::Protocol {
        server: server.to_string(),
        reason: format!("unexpected answer to {method}"),
    }
}

/// A server reached and its handshake done.
struct Started {
    service: RunningService<RoleClient, AgentryClientHandler>,
    process_group: Option<Arc<ProcessGroup>>,
    /// Streamable HTTP only.
    http: Option<Arc<HttpSignals>>,
}

/// One attempt: spawn or reach the server and run the handshake in `mode`.
async fn start(
    config: &McpServerConfig,
    shared: &Arc<Shared>,
    dead: &Arc<AtomicBool>,
    mode: ClientLifecycleMode,
    launch: &StdioLaunch,
) -> Result<Started, McpError> {
    let handler = AgentryClientHandler {
        shared: shared.clone(),
    };
    let server = config.name.clone();
    let connect_timeout = config.connect_timeout();
    let mut http = None;
    let (started, process_group, stderr) = match &config.transport {
        McpTransportConfig::Stdio(s) => {
            let spawned = stdio::spawn(&config.name, s, launch, shared)?;
            let pg = spawned.process_group.clone();
            let transport = Observed {
                inner: spawned.transport,
                shared: shared.clone(),
                dead: dead.clone(),
                stderr: Some(spawned.stderr.clone()),
                process_group: spawned.process_group,
            };
            let started = tokio::time::timeout(
                connect_timeout,
                serve_client_with_lifecycle(handler, transport, mode),
            )
            .await;
            (started, pg, Some(spawned.stderr))
        }
        McpTransportConfig::Http(h) => {
            let cfg = transport_config(&config.name, h)?;
            let signals = HttpSignals::new(shared.clone());
            http = Some(signals.clone());
            let client =
                SessionAwareClient::new(connect_timeout, launch.http_guard.as_ref(), signals)
                    .map_err(|e| McpError::Protocol {
                        server: server.clone(),
                        reason: format!("could not build the HTTP client: {e}"),
                    })?;
            let started = if matches!(h.auth, HttpAuth::OAuth(_)) {
                let tokens = shared.hooks.oauth_tokens.clone();
                let manager = tokio::time::timeout(
                    connect_timeout,
                    super::oauth::authorized_manager(
                        &server,
                        h,
                        tokens,
                        launch.http_guard.as_ref(),
                    ),
                )
                .await
                .map_err(|_| McpError::ConnectTimeout {
                    server: server.clone(),
                    after: connect_timeout,
                })??;
                let transport = Observed {
                    inner: StreamableHttpClientTransport::with_client(
                        AuthClient::new(client, manager),
                        cfg,
                    ),
                    shared: shared.clone(),
                    dead: dead.clone(),
                    stderr: None,
                    process_group: None,
                };
                tokio::time::timeout(
                    connect_timeout,
                    serve_client_with_lifecycle(handler, transport, mode),
                )
                .await
            } else {
                let transport = Observed {
                    inner: StreamableHttpClientTransport::with_client(client, cfg),
                    shared: shared.clone(),
                    dead: dead.clone(),
                    stderr: None,
                    process_group: None,
                };
                tokio::time::timeout(
                    connect_timeout,
                    serve_client_with_lifecycle(handler, transport, mode),
                )
                .await
            };
            (started, None, None)
        }
    };
    let with_stderr = |reason: String| match stderr.as_ref().map(StderrTail::text) {
        Some(tail) if !tail.is_empty() => format!("{reason}; server stderr:\n{tail}"),
        _ => reason,
    };
    match started {
        Ok(Ok(service)) => Ok(Started {
            service,
            process_group,
            http,
        }),
        Ok(Err(e)) => {
            if let Some(pg) = &process_group {
                pg.terminate(KILL_GRACE).await;
            }
            if let ClientInitializeError::TransportError { error, .. } = &e
                && let Some(auth) = McpError::from_auth_chain(&server, error.error.as_ref())
            {
                return Err(auth);
            }
            // A transport that never worked (nothing listening, the process exited) is not a
            // protocol disagreement: report it as such.
            let transport_failure = matches!(
                e,
                ClientInitializeError::TransportError { .. }
                    | ClientInitializeError::ConnectionClosed(_)
            );
            let reason = with_stderr(plain_initialize_error(&e));
            if transport_failure {
                Err(McpError::TransportClosed { server, reason })
            } else {
                Err(McpError::HandshakeFailed { server, reason })
            }
        }
        Err(_) => {
            if let Some(pg) = &process_group {
                pg.terminate(KILL_GRACE).await;
            }
            tracing::warn!(
                "connect timed out{}",
                stderr
                    .as_ref()
                    .map(|t| format!("; stderr: {}", t.text()))
                    .unwrap_or_default()
            );
            Err(McpError::ConnectTimeout {
                server,
                after: connect_timeout,
            })
        }
    }
}

impl Drop for Inner {
    fn drop(&mut self) {
        // Dropped without close(): rmcp stops the service on its own, but the grandchildren of a
        // stdio server would outlive it.
        if let Some(pg) = &self.process_group {
            pg.release();
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// A `tools/call` sent and not yet answered. Dropped while still armed, it cancels the request
/// on the server.
struct PendingRequest<'a> {
    conn: &'a McpConnection,
    id: Option<RequestId>,
}

impl PendingRequest<'_> {
    /// The server answered (or the transport failed): nothing left to cancel.
    fn answered(&mut self) {
        self.id = None;
    }

    fn cancel(&mut self, reason: &'static str) {
        if let Some(id) = self.id.take() {
            self.conn.send_cancel(id, reason);
        }
    }
}

impl Drop for PendingRequest<'_> {
    fn drop(&mut self) {
        self.cancel("the caller stopped waiting (the run was cancelled or timed out)");
    }
}

/// The reason of the next transport break ([`Shared::transport_broken`]); pending forever when
/// the connection goes away without one.
async fn transport_break(rx: &mut tokio::sync::watch::Receiver<(u64, String)>) -> String {
    match rx.changed().await {
        Ok(()) => rx.borrow_and_update().1.clone(),
        Err(_) => std::future::pending().await,
    }
}

/// An rmcp handshake error in plain words: no Rust type names (rmcp's transport errors show the
/// transport's type), the cause first.
fn plain_initialize_error(e: &ClientInitializeError) -> String {
    match e {
        ClientInitializeError::TransportError { error, context } => {
            let cause = plain_error_chain(error.error.as_ref());
            format!("{cause} (while the client was {})", plain_context(context))
        }
        other => super::error::plain_words(&other.to_string()),
    }
}

/// rmcp's contexts ("send initialize request") as a phrase.
fn plain_context(context: &str) -> String {
    let c = context.trim();
    if c.is_empty() {
        return "starting".into();
    }
    format!(
        "trying to {}",
        c.strip_prefix("send ")
            .map(|r| format!("send the {r}"))
            .unwrap_or_else(|| c.to_string())
    )
}

/// An error and its causes in words, for people and models.
pub(crate) fn plain_error_chain(e: &(dyn std::error::Error + 'static)) -> String {
    if let Some(r) = e.downcast_ref::<reqwest::Error>() {
        return super::http::plain_reqwest(r);
    }
    if let Some(rmcp::transport::streamable_http_client::StreamableHttpError::Client(r)) = e
        .downcast_ref::<rmcp::transport::streamable_http_client::StreamableHttpError<reqwest::Error>>(
        ) {
        return super::http::plain_reqwest(r);
    }
    let mut text = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        let more = c.to_string();
        if !text.contains(&more) {
            text = format!("{text}: {more}");
        }
        cause = c.source();
    }
    super::error::plain_words(&text)
}

enum Round {
    Done(CallToolResult),
    InputRequired(InputRequiredResult),
}

/// Most characters of text a result gives the model (its text, inlined resources and
/// structured content together); the rest is cut with a note saying so.
pub const MAX_RESULT_CHARS: usize = 100_000;

/// The model-facing content of a result. See [`McpConnection::call_tool`].
///
/// - text blocks are the text, joined by newlines;
/// - a resource with text (`resource` blocks) is inlined as text under a line naming its URI;
/// - images, audio and binary resources are not sent as base64 text (a 20×20 PNG cost about
///   1.4k input tokens that way): each becomes a line such as `[image: image/png, 1.2 kB; …]` in
///   the text, and an entry of `attachments` (`{type, mime_type, bytes, uri?}`); up to
///   [`MAX_MODEL_IMAGES`] PNG/JPEG/GIF/WebP images of at most 5 MB also go in
///   [`ToolOutput::images`], which the model gets as image parts;
/// - a resource link is a line with its URI and name;
/// - `structured_content` is kept as is;
/// - past [`MAX_RESULT_CHARS`] the text is cut, with a note of how much was left out, and a
///   structured content that would not fit is replaced by the same kind of note.
pub fn to_output(r: CallToolResult) -> ToolOutput {
    let mut parts: Vec<String> = Vec::new();
    let mut attachments = Vec::new();
    let mut images = Vec::new();
    for block in &r.content {
        let v = serde_json::to_value(block).unwrap_or(Value::Null);
        let kind = v.get("type").and_then(Value::as_str).unwrap_or_default();
        let mime = |v: &Value| {
            v.get("mimeType")
                .and_then(Value::as_str)
                .unwrap_or("unknown type")
                .to_string()
        };
        let base64_bytes = |data: Option<&Value>| {
            let len = data.and_then(Value::as_str).map(str::len).unwrap_or(0);
            len / 4 * 3
        };
        match kind {
            "text" => parts.push(v["text"].as_str().unwrap_or_default().to_string()),
            "image" | "audio" => {
                let mime_type = mime(&v);
                let bytes = base64_bytes(v.get("data"));
                let data = v.get("data").and_then(Value::as_str).unwrap_or_default();
                let for_model = kind == "image"
                    && MODEL_IMAGE_TYPES.contains(&mime_type.as_str())
                    && images.len() < MAX_MODEL_IMAGES
                    && bytes <= MAX_MODEL_IMAGE_BYTES
                    && !data.is_empty();
                if for_model {
                    images.push(ToolImage {
                        mime_type: mime_type.clone(),
                        data: data.to_string(),
                    });
                }
                let shown = if for_model {
                    "passed to the model as an image"
                } else {
                    "not shown as text"
                };
                parts.push(format!(
                    "[{kind}: {mime_type}, {}; {shown}]",
                    human_bytes(bytes)
                ));
                attachments.push(json!({"type": kind, "mime_type": mime_type, "bytes": bytes}));
            }
            "resource" => {
                let res = &v["resource"];
                let uri = res["uri"].as_str().unwrap_or_default();
                if let Some(text) = res.get("text").and_then(Value::as_str) {
                    parts.push(format!("[resource {uri}]\n{text}"));
                } else {
                    let mime_type = mime(res);
                    let bytes = base64_bytes(res.get("blob"));
                    parts.push(format!(
                        "[resource {uri}: {mime_type}, {}; binary, not shown as text]",
                        human_bytes(bytes)
                    ));
                    attachments.push(json!({"type": "resource", "uri": uri, "mime_type": mime_type, "bytes": bytes}));
                }
            }
            "resource_link" => {
                let uri = v["uri"].as_str().unwrap_or_default();
                let name = v["name"].as_str().unwrap_or_default();
                let description = v["description"]
                    .as_str()
                    .map(|d| format!(": {d}"))
                    .unwrap_or_default();
                parts.push(format!("[resource link {uri} ({name}){description}]"));
            }
            other => parts.push(format!("[{other} content, not shown]")),
        }
    }
    let (text, budget) = capped(parts.join("\n"), MAX_RESULT_CHARS);
    let mut out = Map::new();
    out.insert("text".into(), json!(text));
    if !attachments.is_empty() {
        out.insert("attachments".into(), Value::Array(attachments));
    }
    if let Some(sc) = r.structured_content {
        let size = sc.to_string().chars().count();
        if size <= budget {
            out.insert("structured_content".into(), sc);
        } else {
            out.insert(
                "structured_content".into(),
                json!(format!(
                    "[structured content of {size} characters left out: the result is limited to {MAX_RESULT_CHARS} characters]"
                )),
            );
        }
    }
    let out = if r.is_error == Some(true) {
        ToolOutput::failed(Value::Object(out))
    } else {
        ToolOutput::ok(Value::Object(out))
    };
    out.with_images(images)
}

/// Image types the model APIs take (Anthropic's and OpenAI's common set).
const MODEL_IMAGE_TYPES: &[&str] = &["image/png", "image/jpeg", "image/gif", "image/webp"];
/// Images of one result passed to the model; more are only described.
const MAX_MODEL_IMAGES: usize = 4;
/// Largest image passed to the model (Anthropic's limit is 5 MB).
const MAX_MODEL_IMAGE_BYTES: usize = 5 * 1024 * 1024;

/// `text` cut to `max` characters with a note of what was left out, and the budget left.
fn capped(text: String, max: usize) -> (String, usize) {
    let total = text.chars().count();
    if total <= max {
        return (text, max - total);
    }
    let kept: String = text.chars().take(max).collect();
    (
        format!(
            "{kept}\n[truncated: the result has {total} characters; only the first {max} are shown]"
        ),
        0,
    )
}

fn human_bytes(n: usize) -> String {
    if n < 1024 {
        format!("{n} bytes")
    } else if n < 1024 * 1024 {
        format!("{:.1} kB", n as f64 / 1024.0)
    } else {
        format!("{:.1} MB", n as f64 / (1024.0 * 1024.0))
    }
}

/// rmcp's transport, plus: the end of the stream marks the connection dead (status `error`),
/// and closing a stdio transport also kills what is left of its process group.
struct Observed<T> {
    inner: T,
    shared: Arc<Shared>,
    dead: Arc<AtomicBool>,
    stderr: Option<StderrTail>,
    process_group: Option<Arc<ProcessGroup>>,
}

impl<T: Transport<RoleClient>> Transport<RoleClient> for Observed<T> {
    type Error = T::Error;

    /// rmcp puts this in its transport errors; the default is the Rust type name.
    fn name() -> std::borrow::Cow<'static, str> {
        "MCP transport".into()
    }

    fn send(
        &mut self,
        item: TxJsonRpcMessage<RoleClient>,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send + 'static {
        // Its answer is read raw for `execution.taskSupport` (see `task_support`).
        if let rmcp::model::JsonRpcMessage::Request(r) = &item
            && matches!(r.request, rmcp::model::ClientRequest::ListToolsRequest(_))
        {
            self.shared.task_support.expect(&r.id);
        }
        self.inner.send(item)
    }

    async fn receive(&mut self) -> Option<RxJsonRpcMessage<RoleClient>> {
        let message = self.inner.receive().await;
        if message.is_none() && !self.dead.swap(true, Ordering::SeqCst) {
            let tail = self
                .stderr
                .as_ref()
                .map(StderrTail::text)
                .filter(|t| !t.is_empty())
                .map(|t| format!("; last stderr: {}", t.lines().last().unwrap_or_default()))
                .unwrap_or_default();
            let reason = format!("the server closed the connection{tail}");
            tracing::warn!(server = %self.shared.server, "{reason}");
            self.shared.set_status(ConnectionStatus::Error(reason));
        }
        message
    }

    async fn close(&mut self) -> Result<(), Self::Error> {
        self.dead.store(true, Ordering::SeqCst);
        let r = self.inner.close().await;
        if let Some(pg) = &self.process_group {
            pg.terminate(KILL_GRACE).await;
        }
        r
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn result(v: Value) -> CallToolResult {
        serde_json::from_value(v).unwrap()
    }

    /// Issue 18: an image reached the model as base64 in JSON text (~1.4k tokens for a 20×20
    /// PNG). Now it is a line in the text and an attachment entry, without the data.
    #[test]
    fn images_are_summarized_not_sent_as_base64() {
        let png = "iVBORw0KGgo".repeat(100);
        let out = to_output(result(json!({"content": [
            {"type": "text", "text": "here it is"},
            {"type": "image", "data": png.clone(), "mimeType": "image/png"}
        ]})));
        let text = out.content["text"].as_str().unwrap();
        assert!(
            text.starts_with("here it is\n[image: image/png, "),
            "{text}"
        );
        assert!(!out.content.to_string().contains("iVBORw0KGgo"));
        assert_eq!(out.content["attachments"][0]["type"], "image");
        assert_eq!(out.content["attachments"][0]["bytes"], 1100 / 4 * 3);
    }

    #[test]
    fn text_resources_are_inlined_and_binary_ones_summarized() {
        let out = to_output(result(json!({"content": [
            {"type": "resource", "resource": {"uri": "file:///notes.md", "mimeType": "text/markdown", "text": "# Notes\nbody"}},
            {"type": "resource", "resource": {"uri": "file:///x.bin", "mimeType": "application/octet-stream", "blob": "AAAA"}},
            {"type": "resource_link", "uri": "file:///big.csv", "name": "big.csv"}
        ]})));
        let text = out.content["text"].as_str().unwrap();
        assert!(
            text.contains("[resource file:///notes.md]\n# Notes\nbody"),
            "{text}"
        );
        assert!(
            text.contains("[resource file:///x.bin: application/octet-stream, 3 bytes"),
            "{text}"
        );
        assert!(
            text.contains("[resource link file:///big.csv (big.csv)]"),
            "{text}"
        );
        assert!(!out.content.to_string().contains("AAAA"));
    }

    #[test]
    fn long_results_are_cut_with_a_note() {
        let long = "é".repeat(MAX_RESULT_CHARS + 10);
        let out = to_output(result(json!({
            "content": [{"type": "text", "text": long}],
            "structuredContent": {"rows": [1, 2, 3]}
        })));
        let text = out.content["text"].as_str().unwrap();
        assert!(text.ends_with(&format!(
            "[truncated: the result has {} characters; only the first {MAX_RESULT_CHARS} are shown]",
            MAX_RESULT_CHARS + 10
        )));
        assert!(
            out.content["structured_content"]
                .as_str()
                .unwrap()
                .contains("left out")
        );
        // A short one is untouched, structured content included; an error result stays one.
        let out = to_output(result(json!({
            "content": [{"type": "text", "text": "ok"}],
            "structuredContent": {"rows": [1]},
            "isError": true
        })));
        assert_eq!(out.content["text"], "ok");
        assert_eq!(out.content["structured_content"]["rows"][0], 1);
        assert!(out.is_error);
    }
}
