//! A [`ToolRegistry`] served as an MCP server: `agentry tool-server <name>` (DESIGN §8).
//!
//! [`ToolServer`] implements rmcp's `ServerHandler`:
//! - `tools/list` gives every tool with its schema; tools that need approval carry the
//!   `destructiveHint` annotation and `_meta["agentry/requires_approval"]`, so the client (our
//!   own agent loop, or any MCP host) can ask a human first.
//! - `tools/call` validates the arguments against the schema (a violation is an `isError`
//!   result listing every problem), runs the tool within its timeout, and maps the outcome:
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

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use agentry_schema::events::{EventPayload, Question};
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

use crate::builtin::{BuiltinConfig, builtin_registry, parse_selection};
use crate::tool::{
    EventSink, InteractionError, Tool, ToolContext, ToolError, ToolOutput, ToolRegistry,
    UserInteraction, WorkspaceInfo,
};

/// Key of the elicitation inside an `input_required` result.
const QUESTION_KEY: &str = "question";
/// A suspended call whose client never comes back is dropped this long after its question's
/// own timeout.
const SUSPENDED_GRACE: Duration = Duration::from_secs(60);

#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error(transparent)]
    UnknownService(#[from] crate::builtin::UnknownService),
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
        self.cancel.cancel();
        self.task.abort();
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
}

/// An MCP server over a tool registry.
#[derive(Clone)]
pub struct ToolServer {
    name: String,
    registry: ToolRegistry,
    workspace: WorkspaceInfo,
    suspended: Arc<Mutex<HashMap<String, Suspended>>>,
}

impl ToolServer {
    pub fn new(name: impl Into<String>, registry: ToolRegistry, workspace: WorkspaceInfo) -> Self {
        Self {
            name: name.into(),
            registry,
            workspace,
            suspended: Arc::default(),
        }
    }

    fn mcp_tool(tool: &dyn Tool) -> rmcp::model::Tool {
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
        tool: Arc<dyn Tool>,
        args: Value,
        peer: Peer<RoleServer>,
        progress: Option<rmcp::model::ProgressToken>,
    ) -> RunningCall {
        let (tx, rx) = mpsc::channel(1);
        let cancel = CancellationToken::new();
        let ctx = ToolContext::standalone(self.workspace.clone())
            .with_interaction(Arc::new(ChannelInteraction(tx)))
            .with_events(Arc::new(ProgressSink {
                peer,
                token: progress,
            }))
            .with_cancel(cancel.clone());
        let timeout = tool.spec().timeout;
        let task = tokio::spawn(async move {
            match tokio::time::timeout(timeout, tool.call(args, &ctx)).await {
                Ok(result) => result,
                Err(_) => Err(ToolError::Timeout(timeout)),
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
                Step::Done(result) => return to_mcp_result(result),
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
                        },
                    );
                    return InputRequiredResult::new(Some(requests), Some(handle)).into();
                }
                Step::Asks(asked) => {
                    let timeout = Duration::from_secs(asked.question.timeout.max(1));
                    let reply = tokio::select! {
                        r = context.peer.create_elicitation_with_timeout(elicit_params(&asked.question), Some(timeout)) => r,
                        _ = context.ct.cancelled() => return to_mcp_result(Err(ToolError::Cancelled)),
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
        state: &str,
        request: &CallToolRequestParams,
        context: &RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        let parked = self
            .suspended
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(state);
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
        Ok(self.drive(parked.call, context).await)
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
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(Implementation::new(self.name.clone(), env!("CARGO_PKG_VERSION")))
            .with_instructions(
                "Agentry built-in tools. File paths are relative to the workspace this server was \
                 started in; tools marked destructive need the user's approval before you call them.",
            )
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, McpError> {
        let tools = self
            .registry
            .names()
            .filter_map(|n| self.registry.get(n))
            .map(|t| Self::mcp_tool(t.as_ref()))
            .collect();
        Ok(ListToolsResult::with_all_items(tools))
    }

    fn get_tool(&self, name: &str) -> Option<rmcp::model::Tool> {
        self.registry.get(name).map(|t| Self::mcp_tool(t.as_ref()))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        if let Some(state) = request.request_state.clone() {
            return self.resume(&state, &request, &context).await;
        }
        let Some(tool) = self.registry.get(&request.name) else {
            return Err(McpError::invalid_params(
                format!("unknown tool {:?}", request.name),
                None,
            ));
        };
        let args = Value::Object(request.arguments.clone().unwrap_or_default());
        if let Err(e) = self.registry.validate(&request.name, &args) {
            return Ok(to_mcp_result(Err(e)));
        }
        let call = self.start(
            tool,
            args,
            context.peer.clone(),
            context.meta.get_progress_token(),
        );
        Ok(self.drive(call, &context).await)
    }
}

#[cfg(test)]
mod tests;
