//! A [`ToolRegistry`] served as an MCP server: `agentry tool-server <name>` (DESIGN §8).
//!
//! [`ToolServer`] implements rmcp's `ServerHandler`:
//! - `tools/list` gives every tool with its schema; tools that need approval carry the
//!   `destructiveHint` annotation and `_meta["agentry/requires_approval"]`, so the client (our
//!   own agent loop, or any MCP host) can ask a human first.
//! - `tools/call` runs the call through the tool-call pipeline ([`agentry_tools::pipeline`], the same
//!   one the agent loop uses): policy, the schema (a violation is an `isError` result listing
//!   every problem), the approval by elicitation when enforced, the tool within its timeout on
//!   a clock that stands still while an elicitation waits, the audit. It maps the outcome:
//!   [`ToolOutput`] → `content` (the JSON as text), `structuredContent` (when it is an object),
//!   `isError`, and the tool's events (`file_operation`, `todo_update`) under
//!   `_meta["agentry/events"]`; a [`ToolError`] → `isError: true` with its structured
//!   `{error: {code, message, details}}`.
//! - A tool that asks the user something (the interaction tools) is answered through MCP
//!   elicitation: on a session that began with `initialize` (protocol 2025-11-25 and older) as
//!   an `elicitation/create` request; on protocol 2026-07-28, which forbids server-to-client
//!   requests, as an `input_required` result (SEP-2322): the call is suspended, the client asks
//!   its user and retries with the answer, and the suspended call goes on where it stopped.
//!   A client that declares no elicitation support gets "no interactive user".
//! - Cancellation (`notifications/cancelled`) cancels the tool's context.
//!
//! What a request may see comes from a [`ToolSource`]: `agentry tool-server` serves one fixed
//! registry ([`FixedTools`]); `/mcp` (`agentry-mcp-server`) resolves the authenticated caller of each
//! request into that tenant user's tools ([`CallerTools`]), with approvals asked by
//! elicitation ([`CallerTools::enforce_approval`]) and every call recorded ([`CallAudit`]).

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use agentry_schema::events::{EventPayload, Question};
use agentry_schema::ids::{RunId, SessionId};
use async_trait::async_trait;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, ElicitRequest,
    ElicitRequestParams, ElicitationAction, Implementation, InputRequest, InputRequests,
    InputRequiredResult, JsonObject, ListToolsResult, MetaObject, PaginatedRequestParams,
    ProgressNotificationParam, ProtocolVersion, ServerCapabilities, ServerConfig, ToolAnnotations,
};
use rmcp::service::{RequestContext, RoleServer, ServiceError};
use rmcp::{ErrorData as McpError, Peer, ServerHandler, ServiceExt};
use serde_json::{Value, json};
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use agentry_builtin::{BuiltinConfig, builtin_registry, parse_selection};
use agentry_tools::pipeline::{
    self, AllowAll, Approval, CallHost, CallRequest, FinishedCall, Refusal, RefusalKind, Retry,
    Stage, ToolPolicy,
};
use agentry_tools::tool::{
    EventSink, InteractionError, Tool, ToolContext, ToolError, ToolOutput, ToolRegistry, ToolSpec,
    UserInteraction, WorkspaceInfo,
};

/// Key of the elicitation inside an `input_required` result.
const QUESTION_KEY: &str = "question";
/// A suspended call whose client never comes back is dropped this long after its question's
/// own timeout.
const SUSPENDED_GRACE: Duration = Duration::from_secs(60);
/// After a cancel, how long a tool gets to wind down by itself (an `ask_<assistant>` call
/// cancels its run and waits for the run's `done`) before its task is dropped.
const CANCEL_GRACE: Duration = Duration::from_secs(3);
/// How long an approval asked by elicitation waits when the source sets no timeout.
const DEFAULT_APPROVAL_TIMEOUT_SECS: u64 = 300;

#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error(transparent)]
    UnknownService(#[from] agentry_builtin::UnknownService),
    #[error("cannot prepare the workspace {path}: {reason}")]
    Workspace { path: PathBuf, reason: String },
    #[error("the MCP session did not start: {0}")]
    Init(String),
    #[error("the MCP session ended with an error: {0}")]
    Session(String),
}

/// Serve the built-in service(s) named by `service` (`files`, `files,shell`, `all`) over
/// stdin/stdout until the client disconnects. The workspace is `workspace` (created if
/// missing) with the quota `cfg.tool_server_quota_bytes`.
pub async fn serve_stdio(
    service: &str,
    cfg: &BuiltinConfig,
    workspace: PathBuf,
) -> Result<(), ServeError> {
    let selection = parse_selection(service)?;
    std::fs::create_dir_all(&workspace).map_err(|e| ServeError::Workspace {
        path: workspace.clone(),
        reason: e.to_string(),
    })?;
    let root = std::fs::canonicalize(&workspace).map_err(|e| ServeError::Workspace {
        path: workspace.clone(),
        reason: e.to_string(),
    })?;
    let server = ToolServer::new(
        format!("agentry-{}", service.replace(',', "-")),
        builtin_registry(cfg, &selection),
        WorkspaceInfo {
            root,
            quota_bytes: cfg.tool_server_quota_bytes,
            sandbox: Default::default(),
        },
    );
    let running = server
        .serve(rmcp::transport::stdio())
        .await
        .map_err(|e| ServeError::Init(e.to_string()))?;
    running
        .waiting()
        .await
        .map(|_| ())
        .map_err(|e| ServeError::Session(e.to_string()))
}

/// A question from a running tool, waiting for its answer.
struct Asked {
    question: Question,
    answer: oneshot::Sender<Result<Value, InteractionError>>,
}

/// The [`UserInteraction`] of a call served over MCP: questions go to the call's driver.
struct ChannelInteraction(mpsc::Sender<Asked>);

#[async_trait]
impl UserInteraction for ChannelInteraction {
    async fn ask(&self, question: Question) -> Result<Value, InteractionError> {
        let (tx, rx) = oneshot::channel();
        self.0
            .send(Asked {
                question,
                answer: tx,
            })
            .await
            .map_err(|_| InteractionError::Unavailable("the MCP call has ended".into()))?;
        rx.await.unwrap_or_else(|_| {
            Err(InteractionError::Unavailable(
                "the MCP call has ended".into(),
            ))
        })
    }
}

/// Forwards a tool's progress events as MCP progress notifications.
struct ProgressSink {
    peer: Peer<RoleServer>,
    token: Option<rmcp::model::ProgressToken>,
}

impl EventSink for ProgressSink {
    fn emit(&self, payload: EventPayload) {
        if let (EventPayload::Progress(p), Some(token)) = (payload, self.token.clone()) {
            let mut param = ProgressNotificationParam::new(token, p.progress);
            param.total = p.total;
            param.message = p.message;
            let peer = self.peer.clone();
            tokio::spawn(async move {
                let _ = peer.notify_progress(param).await;
            });
        }
    }
}

/// A tool call in flight: the task running it and the questions it asks.
struct RunningCall {
    task: JoinHandle<Result<ToolOutput, ToolError>>,
    questions: mpsc::Receiver<Asked>,
    cancel: CancellationToken,
}

impl Drop for RunningCall {
    fn drop(&mut self) {
        // Cancel, but do not abort: the task stops within CANCEL_GRACE by itself, and in between
        // it records the call in the audit (and an `ask_<assistant>` call cancels its run).
        self.cancel.cancel();
    }
}

enum Step {
    Done(Result<ToolOutput, ToolError>),
    Asks(Asked),
}

impl RunningCall {
    async fn next(&mut self, request_cancel: &CancellationToken) -> Step {
        tokio::select! {
            result = &mut self.task => Step::Done(result.unwrap_or_else(|e| Err(ToolError::failed(format!("the tool crashed: {e}"))))),
            Some(asked) = self.questions.recv() => Step::Asks(asked),
            _ = request_cancel.cancelled() => {
                self.cancel.cancel();
                Step::Done(Err(ToolError::Cancelled))
            }
        }
    }
}

/// A call parked on an `input_required` result until the client retries with the answer.
struct Suspended {
    call: RunningCall,
    answer: oneshot::Sender<Result<Value, InteractionError>>,
    deadline: Instant,
    /// Only the caller who started the call may resume it.
    owner: String,
}

/// How a finished call becomes an MCP result; [`to_mcp_result`] unless a source says otherwise.
pub type Presenter =
    Arc<dyn Fn(&ToolSpec, Result<ToolOutput, ToolError>) -> CallToolResponse + Send + Sync>;

/// The tools one request may see and call, and the rules around calling them.
#[derive(Clone)]
pub struct CallerTools {
    pub registry: ToolRegistry,
    /// What every call starts from: the ids and the workspace. Each call gets its own
    /// cancellation, user interaction (elicitation) and progress sink on top.
    pub context: ToolContext,
    /// Ask the user by elicitation before a call that needs approval, and refuse the call when
    /// the client cannot ask. Off for `agentry tool-server`, whose client (an agent loop, ours
    /// or another host) asks its own user before it calls; on for `/mcp`, where the MCP client
    /// is the only way to reach the user.
    pub enforce_approval: bool,
    /// How long an approval waits for the user's answer.
    pub approval_timeout_secs: u64,
    /// Records every call (the tool-call audit); `None` records nothing.
    pub audit: Option<Arc<dyn CallAudit>>,
    /// Who is calling (`tenant/user`); a call parked on `input_required` resumes only for them.
    pub owner: String,
    pub presenter: Option<Presenter>,
    /// The caller's tool permissions, checked by the pipeline on every call (the registry is
    /// already narrowed to them; this is the same check the agent loop makes).
    pub policy: Arc<dyn ToolPolicy>,
    /// How a call whose backend is unavailable is retried.
    pub retry: Retry,
    /// Resources, resource templates and prompts the caller may see (`/mcp` re-exports their
    /// own MCP servers'); `None` serves none.
    pub content: Option<Arc<dyn ContentSource>>,
}

/// What a request may see besides tools: resources, resource templates and prompts, and how to
/// read, get and complete them. Errors are JSON-RPC errors, as the client gets them.
#[async_trait]
pub trait ContentSource: Send + Sync {
    async fn resources(&self) -> Vec<rmcp::model::Resource>;
    async fn resource_templates(&self) -> Vec<rmcp::model::ResourceTemplate>;
    async fn prompts(&self) -> Vec<rmcp::model::Prompt>;
    async fn read_resource(&self, uri: &str) -> Result<rmcp::model::ReadResourceResult, McpError>;
    async fn get_prompt(
        &self,
        name: &str,
        arguments: Option<JsonObject>,
    ) -> Result<rmcp::model::GetPromptResult, McpError>;
    async fn complete(
        &self,
        request: rmcp::model::CompleteRequestParams,
    ) -> Result<rmcp::model::CompleteResult, McpError>;
}

impl CallerTools {
    /// A registry in a workspace with nothing around the calls: `agentry tool-server`.
    pub fn plain(registry: ToolRegistry, workspace: WorkspaceInfo) -> Self {
        Self {
            registry,
            context: ToolContext::standalone(workspace),
            enforce_approval: false,
            approval_timeout_secs: DEFAULT_APPROVAL_TIMEOUT_SECS,
            audit: None,
            owner: String::new(),
            presenter: None,
            policy: Arc::new(AllowAll),
            // The client (an agent loop) retries by itself.
            retry: Retry::NONE,
            content: None,
        }
    }

    fn present(
        &self,
        spec: Option<&ToolSpec>,
        result: Result<ToolOutput, ToolError>,
    ) -> CallToolResponse {
        match (&self.presenter, spec) {
            (Some(p), Some(spec)) => p(spec, result),
            _ => to_mcp_result(result),
        }
    }
}

/// Where a [`ToolServer`] gets the tools of a request.
#[async_trait]
pub trait ToolSource: Send + Sync + 'static {
    /// The tools the caller of this request may see and call. An error is a JSON-RPC error.
    async fn tools_for(
        &self,
        context: &RequestContext<RoleServer>,
    ) -> Result<CallerTools, McpError>;

    /// A tool by name without a request (rmcp checks standard headers against it); `None`
    /// when the tools depend on who asks.
    fn tool_without_request(&self, _name: &str) -> Option<rmcp::model::Tool> {
        None
    }

    /// Whether requests may get a [`CallerTools::content`]: the server then declares the
    /// `completions` capability (and forwards `completion/complete` to the content's source).
    fn serves_content(&self) -> bool {
        false
    }
}

/// One registry for every request: `agentry tool-server`.
pub struct FixedTools(pub CallerTools);

#[async_trait]
impl ToolSource for FixedTools {
    async fn tools_for(
        &self,
        _context: &RequestContext<RoleServer>,
    ) -> Result<CallerTools, McpError> {
        Ok(self.0.clone())
    }

    fn tool_without_request(&self, name: &str) -> Option<rmcp::model::Tool> {
        self.0
            .registry
            .get(name)
            .map(|t| ToolServer::mcp_tool(t.as_ref()))
    }
}

/// One finished call, for the audit.
#[derive(Debug, Clone)]
pub struct CallRecord {
    pub tool: ToolSpec,
    pub tool_call_id: String,
    pub args: Value,
    pub result: Result<ToolOutput, ToolError>,
    pub duration: Duration,
    /// `None` when the call needed no approval; `Some(false)` when it was refused for want of one.
    pub approved: Option<bool>,
}

/// Records calls: before one runs it names the session and run the call belongs to (so the tool
/// sees them in its context), after it ends it gets the outcome.
#[async_trait]
pub trait CallAudit: Send + Sync {
    /// `None` leaves this call unrecorded (a tool whose work is recorded elsewhere, like an
    /// assistant run). An error refuses the call.
    async fn begin(
        &self,
        tool: &ToolSpec,
        args: &Value,
    ) -> Result<Option<(SessionId, RunId)>, ToolError>;

    async fn record(&self, ids: (SessionId, RunId), call: CallRecord);
}

/// An MCP server over the tools of a [`ToolSource`].
#[derive(Clone)]
pub struct ToolServer {
    name: String,
    instructions: String,
    source: Arc<dyn ToolSource>,
    suspended: Arc<Mutex<HashMap<String, Suspended>>>,
}

impl ToolServer {
    pub fn new(name: impl Into<String>, registry: ToolRegistry, workspace: WorkspaceInfo) -> Self {
        Self::with_source(
            name,
            "Agentry built-in tools. File paths are relative to the workspace this server was \
             started in; tools marked destructive need the user's approval before you call them.",
            Arc::new(FixedTools(CallerTools::plain(registry, workspace))),
        )
    }

    /// A server whose tools depend on the request (`/mcp`, `agentry-mcp-server`). Clones share the
    /// calls parked on `input_required`, so one server can be cloned per MCP session.
    pub fn with_source(
        name: impl Into<String>,
        instructions: impl Into<String>,
        source: Arc<dyn ToolSource>,
    ) -> Self {
        Self {
            name: name.into(),
            instructions: instructions.into(),
            source,
            suspended: Arc::default(),
        }
    }

    pub fn mcp_tool(tool: &dyn Tool) -> rmcp::model::Tool {
        let spec = tool.spec();
        let schema: JsonObject = match &spec.input_schema {
            Value::Object(map) => map.clone(),
            _ => {
                let mut m = JsonObject::new();
                m.insert("type".into(), json!("object"));
                m
            }
        };
        let mut meta = JsonObject::new();
        meta.insert("agentry/service".into(), json!(spec.service));
        meta.insert(
            "agentry/requires_approval".into(),
            json!(spec.requires_approval),
        );
        meta.insert("agentry/timeout_secs".into(), json!(spec.timeout.as_secs()));
        rmcp::model::Tool::new(spec.name.clone(), spec.description.clone(), schema)
            .with_annotations(ToolAnnotations::new().destructive(spec.requires_approval))
            .with_meta(MetaObject(meta))
    }

    fn start(
        &self,
        tools: &CallerTools,
        name: &str,
        args: Value,
        peer: Peer<RoleServer>,
        progress: Option<rmcp::model::ProgressToken>,
    ) -> RunningCall {
        let (tx, rx) = mpsc::channel(1);
        let cancel = CancellationToken::new();
        let base = tools
            .context
            .clone()
            .with_interaction(Arc::new(ChannelInteraction(tx)))
            .with_events(Arc::new(ProgressSink {
                peer,
                token: progress,
            }))
            .with_cancel(cancel.clone());
        let mut host = McpCall {
            base,
            policy: tools.policy.clone(),
            approval_timeout: tools
                .enforce_approval
                .then_some(tools.approval_timeout_secs),
            audit: tools.audit.clone(),
            ids: None,
            retry: tools.retry,
        };
        let registry = tools.registry.clone();
        let request = CallRequest {
            id: format!("mcp_{}", uuid::Uuid::new_v4().simple()),
            name: name.to_string(),
            arguments: args,
        };
        let task = tokio::spawn(async move {
            match pipeline::run_call(&mut host, &registry, request).await {
                Ok(done) => done.into_result(),
                Err(never) => match never {},
            }
        });
        RunningCall {
            task,
            questions: rx,
            cancel,
        }
    }

    /// Drive a call until it completes or (on 2026-07-28) parks on a question.
    async fn drive(
        &self,
        tools: &CallerTools,
        spec: Option<&ToolSpec>,
        mut call: RunningCall,
        context: &RequestContext<RoleServer>,
    ) -> CallToolResponse {
        let inline = context
            .protocol_version()
            .is_some_and(|v| v.as_str() >= ProtocolVersion::V_2026_07_28.as_str());
        let elicitation = context
            .client_capabilities()
            .is_some_and(|c| c.elicitation.is_some());
        loop {
            match call.next(&context.ct).await {
                Step::Done(result) => return tools.present(spec, result),
                Step::Asks(asked) if !elicitation => {
                    let _ = asked.answer.send(Err(InteractionError::Unavailable(
                        "no interactive user: the MCP client does not support elicitation".into(),
                    )));
                }
                Step::Asks(asked) if inline => {
                    let handle = uuid::Uuid::new_v4().simple().to_string();
                    let mut requests = InputRequests::new();
                    requests.insert(
                        QUESTION_KEY.to_string(),
                        InputRequest::Elicitation(ElicitRequest::new(elicit_params(
                            &asked.question,
                        ))),
                    );
                    let deadline = Instant::now()
                        + Duration::from_secs(asked.question.timeout)
                        + SUSPENDED_GRACE;
                    let mut parked = self.suspended.lock().unwrap_or_else(|p| p.into_inner());
                    let now = Instant::now();
                    parked.retain(|_, s| s.deadline > now);
                    parked.insert(
                        handle.clone(),
                        Suspended {
                            call,
                            answer: asked.answer,
                            deadline,
                            owner: tools.owner.clone(),
                        },
                    );
                    return InputRequiredResult::new(Some(requests), Some(handle)).into();
                }
                Step::Asks(asked) => {
                    let timeout = Duration::from_secs(asked.question.timeout.max(1));
                    let reply = tokio::select! {
                        r = context.peer.create_elicitation_with_timeout(elicit_params(&asked.question), Some(timeout)) => r,
                        _ = context.ct.cancelled() => return tools.present(spec, Err(ToolError::Cancelled)),
                    };
                    let answer = match reply {
                        Ok(result) => elicit_answer(result.action, result.content),
                        Err(ServiceError::Timeout { .. }) => {
                            Err(InteractionError::TimedOut(timeout.as_secs()))
                        }
                        Err(e) => Err(InteractionError::Unavailable(format!(
                            "elicitation failed: {e}"
                        ))),
                    };
                    let _ = asked.answer.send(answer);
                }
            }
        }
    }

    /// A retry of a parked call with the client's answer.
    async fn resume(
        &self,
        tools: &CallerTools,
        state: &str,
        request: &CallToolRequestParams,
        context: &RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        let parked = {
            let mut parked = self.suspended.lock().unwrap_or_else(|p| p.into_inner());
            // Another caller's handle is as unknown as a made-up one, and stays parked.
            match parked.get(state) {
                Some(p) if p.owner == tools.owner => parked.remove(state),
                _ => None,
            }
        };
        let Some(parked) = parked else {
            return Ok(to_mcp_result(Err(ToolError::invalid(
                "this call's requestState is unknown or has expired; call the tool again",
            ))));
        };
        let answer = match request
            .input_responses
            .as_ref()
            .and_then(|r| r.get(QUESTION_KEY))
        {
            Some(response) => {
                let action = response
                    .get("action")
                    .and_then(Value::as_str)
                    .unwrap_or("cancel");
                let action = match action {
                    "accept" => ElicitationAction::Accept,
                    "decline" => ElicitationAction::Decline,
                    _ => ElicitationAction::Cancel,
                };
                elicit_answer(action, response.get("content").cloned())
            }
            None => Err(InteractionError::Unavailable(
                "the client sent no answer".into(),
            )),
        };
        let _ = parked.answer.send(answer);
        let spec = tools.registry.get(&request.name).map(|t| t.spec().clone());
        Ok(self.drive(tools, spec.as_ref(), parked.call, context).await)
    }
}

/// The elicitation form for a question: one field, `answer`, typed by the question.
fn elicit_params(q: &Question) -> ElicitRequestParams {
    let answer_schema = match (q.question_type.as_str(), &q.schema) {
        (_, Some(s)) if s.get("type") == Some(&json!("object")) => None,
        (_, Some(s)) if s.get("type") == Some(&json!("number")) => {
            Some(json!({"type": "number", "title": "Answer"}))
        }
        ("choice", _) if !q.options.is_empty() => {
            Some(json!({"type": "string", "title": "Answer", "enum": q.options}))
        }
        ("confirm", _) if q.options.iter().all(|o| o == "yes" || o == "no") => {
            Some(json!({"type": "boolean", "title": "Confirm"}))
        }
        ("confirm", _) => Some(json!({"type": "string", "title": "Answer", "enum": q.options})),
        _ if !q.options.is_empty() => Some(json!({
            "type": "string", "title": "Answer",
            "description": format!("One of: {}", q.options.join(", ")),
        })),
        _ => Some(json!({"type": "string", "title": "Answer"})),
    };
    let schema_json = match (answer_schema, &q.schema) {
        (Some(answer), _) => {
            json!({"type": "object", "properties": {"answer": answer}, "required": ["answer"]})
        }
        (None, Some(object_schema)) => object_schema.clone(),
        (None, None) => {
            json!({"type": "object", "properties": {"answer": {"type": "string"}}, "required": ["answer"]})
        }
    };
    let requested_schema = serde_json::from_value(schema_json).unwrap_or_else(|_| {
        // A schema elicitation cannot carry (nested objects, say): fall back to free text.
        let mut properties = std::collections::BTreeMap::new();
        properties.insert(
            "answer".to_string(),
            rmcp::model::PrimitiveSchemaDefinition::String(rmcp::model::StringSchema::new()),
        );
        let mut schema = rmcp::model::ElicitationSchema::new(properties);
        schema.required = Some(vec!["answer".to_string()]);
        schema
    });
    let mut message = q.text.clone();
    if !q.options.is_empty() && q.question_type != "confirm" {
        message.push_str(&format!("\nOptions: {}", q.options.join(", ")));
    }
    ElicitRequestParams::FormElicitationParams {
        meta: None,
        message,
        requested_schema,
    }
}

fn elicit_answer(
    action: ElicitationAction,
    content: Option<Value>,
) -> Result<Value, InteractionError> {
    match action {
        ElicitationAction::Accept => {
            let content = content.unwrap_or(Value::Null);
            Ok(content.get("answer").cloned().unwrap_or(content))
        }
        ElicitationAction::Decline | ElicitationAction::Cancel => Err(InteractionError::Declined),
        #[allow(unreachable_patterns)]
        _ => Err(InteractionError::Declined),
    }
}

fn text_of(value: &Value) -> String {
    match value {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// The MCP form of a tool's outcome.
pub fn to_mcp_result(result: Result<ToolOutput, ToolError>) -> CallToolResponse {
    let mut out = match result {
        Ok(output) => {
            let mut r = if output.is_error {
                CallToolResult::error(vec![ContentBlock::text(text_of(&output.content))])
            } else {
                CallToolResult::success(vec![ContentBlock::text(text_of(&output.content))])
            };
            if output.content.is_object() {
                r.structured_content = Some(output.content.clone());
            }
            if !output.events.is_empty() {
                let events: Vec<Value> = output
                    .events
                    .iter()
                    .filter_map(|e| serde_json::to_value(e).ok())
                    .collect();
                let mut meta = JsonObject::new();
                meta.insert("agentry/events".into(), Value::Array(events));
                r.meta = Some(MetaObject(meta));
            }
            r
        }
        Err(e) => {
            let body = e.to_model_json();
            let mut r = CallToolResult::error(vec![ContentBlock::text(body.to_string())]);
            r.structured_content = Some(body);
            r
        }
    };
    if out.is_error.is_none() {
        out.is_error = Some(false);
    }
    out.into()
}

impl ServerHandler for ToolServer {
    // Logging is deprecated by SEP-2577 (the 2026 era) but part of 2025-11-25, which most
    // clients still speak; see `set_level`.
    #[allow(deprecated)]
    fn get_info(&self) -> ServerConfig {
        let mut capabilities = ServerCapabilities::builder()
            .enable_tools()
            .enable_logging()
            .enable_resources()
            .enable_prompts()
            .build();
        if self.source.serves_content() {
            capabilities.completions = Some(JsonObject::new());
        }
        ServerConfig::new(capabilities)
            .with_server_info(Implementation::new(
                self.name.clone(),
                env!("CARGO_PKG_VERSION"),
            ))
            .with_instructions(self.instructions.clone())
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, McpError> {
        let tools = self.source.tools_for(&context).await?;
        let listed = tools
            .registry
            .names()
            .filter_map(|n| tools.registry.get(n))
            .map(|t| Self::mcp_tool(t.as_ref()))
            .collect();
        Ok(ListToolsResult::with_all_items(listed))
    }

    fn get_tool(&self, name: &str) -> Option<rmcp::model::Tool> {
        self.source.tool_without_request(name)
    }

    /// Accepted so clients that set a level work; the server sends no log notifications (a
    /// tool's output and errors are in its result), so there is nothing to filter.
    #[allow(deprecated)]
    async fn set_level(
        &self,
        _request: rmcp::model::SetLevelRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        Ok(())
    }

    // Resources and prompts are declared and served: those of the request's content source
    // (`/mcp`: the caller's own MCP servers'), none otherwise. A name or URI that is not in them
    // is -32602 naming it (SEP-2164: never an empty `contents`). Completions are declared only
    // by a server whose source serves content; without it `completion/complete` is -32601, as
    // is every other undeclared method (rmcp's defaults would answer it with an empty
    // completion).

    async fn list_prompts(
        &self,
        _request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<rmcp::model::ListPromptsResult, McpError> {
        let prompts = match self.source.tools_for(&context).await?.content {
            Some(c) => c.prompts().await,
            None => Vec::new(),
        };
        Ok(rmcp::model::ListPromptsResult::with_all_items(prompts))
    }

    async fn get_prompt(
        &self,
        request: rmcp::model::GetPromptRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<rmcp::model::GetPromptResponse, McpError> {
        match self.source.tools_for(&context).await?.content {
            Some(c) => Ok(c.get_prompt(&request.name, request.arguments).await?.into()),
            None => Err(unknown_prompt(&request.name)),
        }
    }

    async fn list_resources(
        &self,
        _request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<rmcp::model::ListResourcesResult, McpError> {
        let resources = match self.source.tools_for(&context).await?.content {
            Some(c) => c.resources().await,
            None => Vec::new(),
        };
        Ok(rmcp::model::ListResourcesResult::with_all_items(resources))
    }

    async fn list_resource_templates(
        &self,
        _request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<rmcp::model::ListResourceTemplatesResult, McpError> {
        let templates = match self.source.tools_for(&context).await?.content {
            Some(c) => c.resource_templates().await,
            None => Vec::new(),
        };
        Ok(rmcp::model::ListResourceTemplatesResult::with_all_items(
            templates,
        ))
    }

    async fn read_resource(
        &self,
        request: rmcp::model::ReadResourceRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<rmcp::model::ReadResourceResponse, McpError> {
        match self.source.tools_for(&context).await?.content {
            Some(c) => Ok(c.read_resource(&request.uri).await?.into()),
            None => Err(resource_not_found(&request.uri)),
        }
    }

    async fn complete(
        &self,
        request: rmcp::model::CompleteRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<rmcp::model::CompleteResult, McpError> {
        if !self.source.serves_content() {
            return Err(McpError::new(
                rmcp::model::ErrorCode::METHOD_NOT_FOUND,
                "completion/complete: this server declares no completions capability",
                None,
            ));
        }
        match self.source.tools_for(&context).await?.content {
            Some(c) => c.complete(request).await,
            None => Ok(rmcp::model::CompleteResult::default()),
        }
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        let tools = self.source.tools_for(&context).await?;
        if let Some(state) = request.request_state.clone() {
            return self.resume(&tools, &state, &request, &context).await;
        }
        let Some(tool) = tools.registry.get(&request.name) else {
            return Err(McpError::invalid_params(
                format!("unknown tool {:?}", request.name),
                None,
            ));
        };
        let spec = tool.spec().clone();
        let args = Value::Object(request.arguments.clone().unwrap_or_default());
        let call = self.start(
            &tools,
            &request.name,
            args,
            context.peer.clone(),
            context.meta.get_progress_token(),
        );
        Ok(self.drive(&tools, Some(&spec), call, &context).await)
    }
}

/// `/mcp` and `agentry tool-server` as the tool-call pipeline's host ([`pipeline::run_call`]):
/// approvals (when enforced) are asked by elicitation through the call's user interaction, a
/// cancel gives the tool [`CANCEL_GRACE`] to wind down, and every call that got past its
/// arguments is recorded through the [`CallAudit`], whatever its outcome — a refusal, a failure,
/// a cancel.
struct McpCall {
    /// The context every attempt starts from.
    base: ToolContext,
    policy: Arc<dyn ToolPolicy>,
    /// `Some(secs)` when approvals are asked here, and how long they wait.
    approval_timeout: Option<u64>,
    audit: Option<Arc<dyn CallAudit>>,
    /// The session and run the audit files this call under, once asked (`None` inside: not
    /// recorded).
    ids: Option<Option<(SessionId, RunId)>>,
    retry: Retry,
}

impl McpCall {
    async fn ids(
        &mut self,
        spec: &ToolSpec,
        args: &Value,
    ) -> Result<Option<(SessionId, RunId)>, ToolError> {
        if let Some(ids) = self.ids {
            return Ok(ids);
        }
        let ids = match &self.audit {
            Some(a) => a.begin(spec, args).await?,
            None => None,
        };
        self.ids = Some(ids);
        Ok(ids)
    }
}

#[async_trait]
impl CallHost for McpCall {
    type Stop = std::convert::Infallible;

    fn policy(&self) -> &dyn ToolPolicy {
        self.policy.as_ref()
    }

    fn approval_required(&self, tool: &dyn Tool, _call: &CallRequest, args: &Value) -> bool {
        self.approval_timeout.is_some() && tool.needs_approval(args)
    }

    /// Ask the user, through the call's interaction (an elicitation), whether the call may
    /// run. Only a clear yes runs it; a client that cannot ask gets a refusal that says so.
    async fn approve(
        &mut self,
        tool: &dyn Tool,
        _call: &CallRequest,
        args: &Value,
    ) -> Result<Approval, Self::Stop> {
        let name = tool.spec().name.clone();
        let timeout = self
            .approval_timeout
            .unwrap_or(DEFAULT_APPROVAL_TIMEOUT_SECS);
        let shown = serde_json::to_string_pretty(args).unwrap_or_else(|_| args.to_string());
        let question = approval_question(
            format!("Allow the tool {name} to run with these arguments?\n{shown}"),
            timeout,
        );
        let answer = tokio::select! {
            a = self.base.interaction.ask(question) => a,
            _ = self.base.cancel.cancelled() => Err(InteractionError::Cancelled),
        };
        let refused = |kind, message: String| Approval::Refused {
            refusal: Refusal {
                kind,
                audit: ToolError::PermissionDenied(message.clone()).to_string(),
                message,
            },
            by: None,
        };
        Ok(match answer {
            Ok(answer) if is_yes(&answer) => Approval::Approved {
                args: None,
                by: None,
            },
            Ok(_) | Err(InteractionError::Declined) => refused(
                RefusalKind::Rejected,
                format!("the user did not approve the call to {name}; it was not made"),
            ),
            Err(InteractionError::TimedOut(secs)) => refused(
                RefusalKind::TimedOut,
                format!("no approval for {name} within {secs} s; the call was not made"),
            ),
            Err(InteractionError::Cancelled) => Approval::Failed(ToolError::Cancelled),
            Err(InteractionError::Unavailable(why)) => refused(
                RefusalKind::Unanswerable,
                format!(
                    "{name} needs the user's approval and none can be asked ({why}); the call \
                     was not made. Use an MCP client that supports elicitation."
                ),
            ),
        })
    }

    async fn context(
        &mut self,
        spec: &ToolSpec,
        call: &CallRequest,
    ) -> Result<ToolContext, ToolError> {
        let mut ctx = self.base.clone();
        ctx.tool_call_id = call.id.clone();
        if let Some((session, run)) = self.ids(spec, &call.arguments).await? {
            ctx.session_id = session;
            ctx.run_id = run;
        }
        Ok(ctx)
    }

    fn retry_delay(&self, attempt: u32) -> Option<Duration> {
        self.retry.delay(attempt)
    }

    /// Cancel, but do not drop the call at once: an `ask_<assistant>` call cancels its run and
    /// waits for the run's `done`.
    fn cancelled(&mut self) -> Result<Duration, Self::Stop> {
        Ok(CANCEL_GRACE)
    }

    async fn audit(&mut self, done: &FinishedCall) -> Result<(), Self::Stop> {
        // A call refused for its name, its caller's permissions or its arguments was never
        // attempted: the client reads the error, and the audit has nothing to record.
        if done.stage < Stage::Approval {
            return Ok(());
        }
        let (Some(audit), Some(spec)) = (self.audit.clone(), done.spec.clone()) else {
            return Ok(());
        };
        let ids = match self.ids(&spec, &done.request.arguments).await {
            Ok(Some(ids)) => ids,
            Ok(None) => return Ok(()),
            Err(e) => {
                tracing::error!(tool = %spec.name, error = %e, "the audit of an MCP call could not start");
                return Ok(());
            }
        };
        audit
            .record(
                ids,
                CallRecord {
                    tool: spec,
                    tool_call_id: done.request.id.clone(),
                    args: done.args.clone(),
                    result: done.clone().into_result(),
                    duration: done.duration,
                    approved: done.approved,
                },
            )
            .await;
        Ok(())
    }

    /// Nothing to emit: the call's result is the MCP response, and its progress went out as
    /// notifications while it ran.
    fn emit(&mut self, _done: &FinishedCall) {}
}

/// -32602 for a prompt the caller cannot get, with `data.name`.
pub fn unknown_prompt(name: &str) -> McpError {
    McpError::invalid_params(
        format!("unknown prompt {name:?}; prompts/list names the prompts"),
        Some(json!({ "name": name })),
    )
}

/// -32602 `Resource not found` with `data.uri` (SEP-2164).
pub fn resource_not_found(uri: &str) -> McpError {
    McpError::invalid_params("Resource not found", Some(json!({ "uri": uri })))
}

/// A yes/no question, as elicitation shows it: one boolean field.
pub fn approval_question(text: String, timeout: u64) -> Question {
    Question {
        text,
        question_type: "confirm".into(),
        options: vec!["yes".into(), "no".into()],
        timeout,
        schema: None,
        function_call: None,
    }
}

/// Whether an answer to [`approval_question`] is a yes.
pub fn is_yes(answer: &Value) -> bool {
    match answer {
        Value::Bool(b) => *b,
        Value::String(s) => matches!(
            s.trim().to_ascii_lowercase().as_str(),
            "yes" | "y" | "true" | "approve" | "approved"
        ),
        _ => false,
    }
}

#[cfg(test)]
mod tests;
