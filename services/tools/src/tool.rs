//! The contract between the agent loop and everything it can call.
//!
//! A [`Tool`] is one callable: a built-in (files, shell, web, …), a tool of an MCP server, or a
//! loop-level tool such as `write_todos`. The agent loop owns approval, RBAC, argument validation,
//! timeouts, audit and events; a tool only does its work inside a [`ToolContext`] and returns a
//! [`ToolOutput`] or a structured [`ToolError`] that the model can read and act on.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use agentry_schema::error::ErrorCode;
use agentry_schema::events::{EventPayload, Question};
use agentry_schema::ids::{RunId, SessionId, TenantId, UserId};
use agentry_schema::roles::RoleName;
use agentry_schema::tenancy::Role;
use async_trait::async_trait;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

/// What the model sees of a tool, plus the policy the loop applies to it.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolSpec {
    /// The name the model calls: `read_file`, or `<server>__<tool>` for MCP tools.
    pub name: String,
    pub description: String,
    /// JSON Schema of the arguments (an object schema).
    pub input_schema: Value,
    /// The RBAC service this tool belongs to (`files`, `shell`, `web`, `system`, `services`,
    /// `todos`, `interaction`, `memory`, or the MCP server's name). Permissions read
    /// `service:tool`, `service:*`, `*:*`.
    pub service: String,
    /// The tool's own name within its service (for MCP tools, the server's name for it).
    pub service_tool: String,
    /// High-risk: the loop asks a human before running it (unless the session auto-approves).
    pub requires_approval: bool,
    /// How long one call may run before it is abandoned with [`ToolError::Timeout`].
    pub timeout: Duration,
}

impl ToolSpec {
    pub fn new(service: &str, name: &str, description: &str, input_schema: Value) -> Self {
        Self {
            name: name.to_string(),
            description: description.to_string(),
            input_schema,
            service: service.to_string(),
            service_tool: name.to_string(),
            requires_approval: false,
            timeout: Duration::from_secs(60),
        }
    }

    pub fn with_approval(mut self, requires_approval: bool) -> Self {
        self.requires_approval = requires_approval;
        self
    }

    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }
}

/// The user's workspace a tool may touch: `{data}/workspaces/{tenant}/{user}/`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkspaceInfo {
    pub root: PathBuf,
    /// The tenant's `workspace_quota_bytes`; writes that would exceed it are refused.
    pub quota_bytes: u64,
    /// The tenant's sandbox policy (tighter limits, egress) for the programs tools start here.
    pub sandbox: agentry_sandbox::TenantSandbox,
}

/// Asks the human on the other side of the session something, and waits for the answer.
///
/// The agent loop implements this with a `hitl_request` of kind `question`; MCP elicitation and
/// the user-interaction tools both go through it.
#[async_trait]
pub trait UserInteraction: Send + Sync {
    /// Resolves with the user's answer (text, or JSON for a schema'd question).
    async fn ask(&self, question: Question) -> Result<Value, InteractionError>;
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum InteractionError {
    #[error("the user did not answer within {0} s")]
    TimedOut(u64),
    #[error("the user declined to answer")]
    Declined,
    #[error("the run was cancelled")]
    Cancelled,
    #[error("no user can be asked: {0}")]
    Unavailable(String),
}

/// Receives events a tool produces while it runs (progress, for example).
pub trait EventSink: Send + Sync {
    fn emit(&self, payload: EventPayload);
}

/// Everything a call may know about where it runs. Cheap to clone.
#[derive(Clone)]
pub struct ToolContext {
    pub tenant_id: TenantId,
    pub user_id: UserId,
    /// The caller's role (the key's): what the tools that check it themselves see (the data
    /// tools' per-source roles). The pipeline's RBAC check happens before any call.
    pub role: Role,
    /// The caller's custom role, if any (then `role` is `Member`).
    pub custom_role: Option<RoleName>,
    pub session_id: SessionId,
    pub run_id: RunId,
    pub tool_call_id: String,
    /// The assistant of the run (`None` outside a run: `/mcp`, `agentry tool-server`): the
    /// memory tools read and write its shared knowledge.
    pub assistant_id: Option<String>,
    pub workspace: WorkspaceInfo,
    /// Fires when the run is cancelled; long calls must stop promptly.
    pub cancel: CancellationToken,
    pub interaction: Arc<dyn UserInteraction>,
    pub events: Arc<dyn EventSink>,
}

impl std::fmt::Debug for ToolContext {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ToolContext")
            .field("tenant_id", &self.tenant_id)
            .field("user_id", &self.user_id)
            .field("role", &self.role)
            .field("custom_role", &self.custom_role)
            .field("session_id", &self.session_id)
            .field("run_id", &self.run_id)
            .field("tool_call_id", &self.tool_call_id)
            .field("workspace", &self.workspace)
            .finish_non_exhaustive()
    }
}

impl ToolContext {
    /// The name of the caller's role: `admin`, `member` or the custom role's.
    pub fn role_name(&self) -> &str {
        match &self.custom_role {
            Some(n) => n.as_str(),
            None => self.role.as_str(),
        }
    }

    /// A context outside any session: fresh ids, the `member` role, a cancellation token
    /// nobody fires, no user to ask and no event consumer. For `agentry tool-server` and for
    /// tests.
    pub fn standalone(workspace: WorkspaceInfo) -> Self {
        Self {
            tenant_id: TenantId::new(),
            user_id: UserId::new(),
            role: Role::Member,
            custom_role: None,
            session_id: SessionId::new(),
            run_id: RunId::new(),
            tool_call_id: String::new(),
            assistant_id: None,
            workspace,
            cancel: CancellationToken::new(),
            interaction: Arc::new(NoUserInteraction::new("no interactive user is attached")),
            events: Arc::new(DiscardEvents),
        }
    }

    pub fn with_interaction(mut self, interaction: Arc<dyn UserInteraction>) -> Self {
        self.interaction = interaction;
        self
    }

    pub fn with_events(mut self, events: Arc<dyn EventSink>) -> Self {
        self.events = events;
        self
    }

    pub fn with_cancel(mut self, cancel: CancellationToken) -> Self {
        self.cancel = cancel;
        self
    }
}

/// A [`UserInteraction`] for contexts with nobody to ask: every question ends with
/// [`InteractionError::Unavailable`] and the given reason.
#[derive(Debug, Clone)]
pub struct NoUserInteraction {
    reason: String,
}

impl NoUserInteraction {
    pub fn new(reason: impl Into<String>) -> Self {
        Self {
            reason: reason.into(),
        }
    }
}

#[async_trait]
impl UserInteraction for NoUserInteraction {
    async fn ask(&self, _question: Question) -> Result<Value, InteractionError> {
        Err(InteractionError::Unavailable(self.reason.clone()))
    }
}

/// An [`EventSink`] that drops everything.
#[derive(Debug, Clone, Copy, Default)]
pub struct DiscardEvents;

impl EventSink for DiscardEvents {
    fn emit(&self, _payload: EventPayload) {}
}

/// The result of a successful call.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ToolOutput {
    /// What the model and the `tool_result` event see.
    pub content: Value,
    /// True when the tool ran but reports failure in its content (an HTTP 404, a command that
    /// exited non-zero): `tool_result.status` is `error`, the run goes on.
    pub is_error: bool,
    /// Events to emit after the `tool_result` (`file_operation`, `todo_update`).
    pub events: Vec<EventPayload>,
    /// Images for the model to look at (an MCP tool's image content), beside `content`, which
    /// describes them in words for models and events. Not stored with the result.
    pub images: Vec<ToolImage>,
}

/// An image a tool returned: media type and base64 bytes.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolImage {
    pub mime_type: String,
    pub data: String,
}

impl ToolOutput {
    pub fn ok(content: Value) -> Self {
        Self {
            content,
            is_error: false,
            events: Vec::new(),
            images: Vec::new(),
        }
    }

    pub fn failed(content: Value) -> Self {
        Self {
            content,
            is_error: true,
            events: Vec::new(),
            images: Vec::new(),
        }
    }

    pub fn with_images(mut self, images: Vec<ToolImage>) -> Self {
        self.images = images;
        self
    }

    pub fn with_event(mut self, event: EventPayload) -> Self {
        self.events.push(event);
        self
    }
}

/// Why a call did not produce a result. The model receives [`ToolError::to_model_json`] and may
/// correct itself; none of these is a crash.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ToolError {
    #[error("invalid arguments: {message}")]
    InvalidArguments { message: String, details: Value },
    #[error("permission denied: {0}")]
    PermissionDenied(String),
    /// Refused by a safety rule: a dangerous command, a path outside the workspace, a private
    /// address.
    #[error("refused: {0}")]
    Refused(String),
    #[error("not found: {0}")]
    NotFound(String),
    #[error("workspace quota exceeded: {0}")]
    QuotaExceeded(String),
    #[error("timed out after {0:?}")]
    Timeout(Duration),
    #[error("cancelled")]
    Cancelled,
    /// The tool's backend (an MCP server, say) is not reachable right now; the same call may
    /// work a moment later.
    #[error("unavailable: {0}")]
    Unavailable(String),
    /// The connection this tool is bound to is gone for good (the server exited or closed it):
    /// no call through it can succeed, so retrying is pointless. A pool reconnects the server
    /// and later runs get tools bound to the new connection.
    #[error("disconnected: {0}")]
    Disconnected(String),
    #[error("{message}")]
    Failed { message: String, retryable: bool },
}

impl ToolError {
    pub fn failed(message: impl Into<String>) -> Self {
        ToolError::Failed {
            message: message.into(),
            retryable: false,
        }
    }

    pub fn invalid(message: impl Into<String>) -> Self {
        ToolError::InvalidArguments {
            message: message.into(),
            details: Value::Null,
        }
    }

    pub fn code(&self) -> ErrorCode {
        match self {
            ToolError::InvalidArguments { .. } => ErrorCode::ValidationError,
            ToolError::PermissionDenied(_) | ToolError::Refused(_) => ErrorCode::PermissionDenied,
            ToolError::NotFound(_) => ErrorCode::NotFound,
            ToolError::QuotaExceeded(_) => ErrorCode::QuotaExceeded,
            ToolError::Timeout(_) => ErrorCode::Timeout,
            ToolError::Cancelled => ErrorCode::BadRequest,
            ToolError::Unavailable(_) | ToolError::Disconnected(_) => ErrorCode::McpError,
            ToolError::Failed { .. } => ErrorCode::ToolError,
        }
    }

    /// Worth calling again unchanged (after a delay).
    pub fn is_retryable(&self) -> bool {
        match self {
            ToolError::Timeout(_) | ToolError::Unavailable(_) => true,
            ToolError::Failed { retryable, .. } => *retryable,
            _ => false,
        }
    }

    /// The structured error the model reads in place of a result.
    pub fn to_model_json(&self) -> Value {
        let details = match self {
            ToolError::InvalidArguments { details, .. } => details.clone(),
            _ => Value::Null,
        };
        json!({
            "error": {
                "code": if matches!(self, ToolError::Refused(_)) { "refused" } else { self.code().as_str() },
                "message": self.to_string(),
                "details": details,
            }
        })
    }
}

/// A call's timeout clock that stops while the call waits for its user (an MCP elicitation, a
/// question): the minutes a person takes to answer are not the tool being slow. The agent loop
/// times every call on one, and the MCP client times its per-server timeout on another; the
/// call's [`UserInteraction`] pauses them.
#[derive(Debug, Default)]
pub struct PauseClock {
    state: Mutex<PauseState>,
    changed: tokio::sync::Notify,
}

#[derive(Debug, Default)]
struct PauseState {
    /// Questions being asked right now; the clock stands still while any is open.
    asking: u32,
    /// When the current pause began (`asking` went from 0 to 1).
    since: Option<Instant>,
    /// Total time stood still, over finished pauses.
    paused: Duration,
}

impl PauseClock {
    fn state(&self) -> std::sync::MutexGuard<'_, PauseState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Stop the clock until the guard drops. Overlapping pauses count once. A guard (not a
    /// pair of calls) so a question abandoned mid-way — its future dropped on a cancel — never
    /// leaves the clock stopped for good.
    pub fn pause(self: &Arc<Self>) -> PauseGuard {
        {
            let mut s = self.state();
            if s.asking == 0 {
                s.since = Some(Instant::now());
            }
            s.asking += 1;
        }
        self.changed.notify_waiters();
        PauseGuard {
            clock: self.clone(),
        }
    }

    fn resume(&self) {
        {
            let mut s = self.state();
            s.asking = s.asking.saturating_sub(1);
            if s.asking == 0
                && let Some(since) = s.since.take()
            {
                s.paused += since.elapsed();
            }
        }
        self.changed.notify_waiters();
    }

    /// Time stood still so far (finished pauses only).
    pub fn paused(&self) -> Duration {
        self.state().paused
    }

    /// Resolves when `timeout` of running (unpaused) time has passed since `started`. Pauses
    /// that finished before `started` must not exist: give each timed call its own clock.
    pub async fn deadline(&self, started: Instant, timeout: Duration) {
        loop {
            // Registered before the state is read, so a change in between still wakes us.
            let changed = self.changed.notified();
            let target = {
                let s = self.state();
                (s.asking == 0).then(|| started + timeout + s.paused)
            };
            let Some(target) = target else {
                changed.await;
                continue;
            };
            tokio::select! {
                _ = tokio::time::sleep_until(target.into()) => {
                    let s = self.state();
                    if s.asking == 0 && started + timeout + s.paused <= Instant::now() {
                        return;
                    }
                }
                _ = changed => {}
            }
        }
    }
}

/// Keeps its [`PauseClock`] stopped; dropping it starts the clock again.
#[derive(Debug)]
pub struct PauseGuard {
    clock: Arc<PauseClock>,
}

impl Drop for PauseGuard {
    fn drop(&mut self) {
        self.clock.resume();
    }
}

/// One callable thing.
#[async_trait]
pub trait Tool: Send + Sync {
    fn spec(&self) -> &ToolSpec;

    /// Whether this particular call needs a human's approval. Defaults to the spec's flag; tools
    /// whose risk depends on the arguments (a service tool on `sshd`) override it.
    fn needs_approval(&self, _args: &Value) -> bool {
        self.spec().requires_approval
    }

    /// Run the call. Arguments were validated against `spec().input_schema` already.
    async fn call(&self, args: Value, ctx: &ToolContext) -> Result<ToolOutput, ToolError>;
}

/// A set of tools by name, with compiled argument validators.
#[derive(Clone, Default)]
pub struct ToolRegistry {
    tools: BTreeMap<String, CompiledTool>,
}

/// A tool with its argument validator compiled. Compiling a JSON Schema is the expensive part
/// of registering a tool, so whoever holds tools for long (the MCP pool, for a connection's
/// tools) compiles them once and registers the same `CompiledTool` in every run's registry.
/// Cheap to clone: the validator is shared.
#[derive(Clone)]
pub struct CompiledTool {
    tool: Arc<dyn Tool>,
    validator: Option<Arc<jsonschema::Validator>>,
}

impl CompiledTool {
    /// Compile the tool's schema; a schema that does not compile is refused.
    pub fn compile(tool: Arc<dyn Tool>) -> Result<Self, RegistryError> {
        let validator = compile_schema(&tool.spec().name, &tool.spec().input_schema)?;
        Ok(CompiledTool { tool, validator })
    }

    /// `tool` with the validator of `compiled` when both have the same schema (tools made per
    /// request from one schema, such as `/mcp`'s `ask_<assistant>`, compile it once); `None`
    /// when the schemas differ.
    pub fn reusing(tool: Arc<dyn Tool>, compiled: &CompiledTool) -> Option<Self> {
        (tool.spec().input_schema == compiled.spec().input_schema).then(|| CompiledTool {
            tool,
            validator: compiled.validator.clone(),
        })
    }

    pub fn tool(&self) -> &Arc<dyn Tool> {
        &self.tool
    }

    pub fn spec(&self) -> &ToolSpec {
        self.tool.spec()
    }
}

impl std::fmt::Debug for CompiledTool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("CompiledTool")
            .field(&self.tool.spec().name)
            .finish()
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RegistryError {
    #[error("a tool named {0:?} is already registered")]
    Duplicate(String),
    #[error("tool {name:?} has an invalid input schema: {reason}")]
    InvalidSchema { name: String, reason: String },
}

impl ToolRegistry {
    pub fn new() -> Self {
        Self::default()
    }

    /// Add a tool. Its schema is compiled once here; a schema that does not compile is refused.
    pub fn register(&mut self, tool: Arc<dyn Tool>) -> Result<(), RegistryError> {
        let name = tool.spec().name.clone();
        if self.tools.contains_key(&name) {
            return Err(RegistryError::Duplicate(name));
        }
        self.tools.insert(name, CompiledTool::compile(tool)?);
        Ok(())
    }

    /// Add a tool compiled earlier: nothing is compiled again.
    pub fn register_compiled(&mut self, tool: CompiledTool) -> Result<(), RegistryError> {
        let name = tool.spec().name.clone();
        if self.tools.contains_key(&name) {
            return Err(RegistryError::Duplicate(name));
        }
        self.tools.insert(name, tool);
        Ok(())
    }

    /// Add or replace a tool (MCP tools refresh on `tools/list_changed`).
    pub fn upsert(&mut self, tool: Arc<dyn Tool>) -> Result<(), RegistryError> {
        let name = tool.spec().name.clone();
        self.tools.insert(name, CompiledTool::compile(tool)?);
        Ok(())
    }

    pub fn remove(&mut self, name: &str) -> bool {
        self.tools.remove(name).is_some()
    }

    /// Merge another registry in; on a name clash the existing tool wins and the clash is
    /// returned so the caller can report it.
    pub fn extend(&mut self, other: &ToolRegistry) -> Vec<String> {
        let mut clashes = Vec::new();
        for (name, t) in &other.tools {
            if self.tools.contains_key(name) {
                clashes.push(name.clone());
            } else {
                self.tools.insert(name.clone(), t.clone());
            }
        }
        clashes
    }

    pub fn get(&self, name: &str) -> Option<Arc<dyn Tool>> {
        self.tools.get(name).map(|t| t.tool.clone())
    }

    pub fn contains(&self, name: &str) -> bool {
        self.tools.contains_key(name)
    }

    pub fn len(&self) -> usize {
        self.tools.len()
    }

    pub fn is_empty(&self) -> bool {
        self.tools.is_empty()
    }

    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.tools.keys().map(String::as_str)
    }

    pub fn specs(&self) -> impl Iterator<Item = &ToolSpec> {
        self.tools.values().map(|t| t.tool.spec())
    }

    /// Keep only the tools `keep` accepts.
    pub fn retain(&mut self, mut keep: impl FnMut(&ToolSpec) -> bool) {
        self.tools.retain(|_, t| keep(t.tool.spec()));
    }

    /// Check arguments against the tool's schema. The error lists every violation with its
    /// JSON pointer so the model can fix them all at once.
    pub fn validate(&self, name: &str, args: &Value) -> Result<(), ToolError> {
        let Some(t) = self.tools.get(name) else {
            return Err(ToolError::NotFound(format!("no tool named {name:?}")));
        };
        let Some(validator) = &t.validator else {
            return Ok(());
        };
        let violations: Vec<Value> = validator
            .iter_errors(args)
            .map(|e| {
                json!({
                    "path": e.instance_path().to_string(),
                    "message": e.to_string(),
                })
            })
            .collect();
        if violations.is_empty() {
            Ok(())
        } else {
            Err(ToolError::InvalidArguments {
                message: format!(
                    "arguments for {name} do not match its schema ({} problem{})",
                    violations.len(),
                    if violations.len() == 1 { "" } else { "s" }
                ),
                details: json!({ "violations": violations }),
            })
        }
    }
}

impl std::fmt::Debug for ToolRegistry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.tools.keys()).finish()
    }
}

thread_local! {
    /// JSON Schemas compiled on this thread (see [`schema_compilations_on_this_thread`]).
    static SCHEMAS_COMPILED: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

/// How many tool schemas this thread has compiled so far. Compiling is the expensive part of
/// building a registry, which is why registries are built once and cloned (a clone shares the
/// compiled validators); tests read this to prove a run compiles nothing. Per thread, so tests
/// running side by side in one process do not count each other's work.
pub fn schema_compilations_on_this_thread() -> u64 {
    SCHEMAS_COMPILED.with(|c| c.get())
}

fn compile_schema(
    name: &str,
    schema: &Value,
) -> Result<Option<Arc<jsonschema::Validator>>, RegistryError> {
    if schema.is_null() || schema == &json!({}) {
        return Ok(None);
    }
    SCHEMAS_COMPILED.with(|c| c.set(c.get() + 1));
    jsonschema::validator_for(schema)
        .map(|v| Some(Arc::new(v)))
        .map_err(|e| RegistryError::InvalidSchema {
            name: name.to_string(),
            reason: e.to_string(),
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Echo(ToolSpec);

    #[async_trait]
    impl Tool for Echo {
        fn spec(&self) -> &ToolSpec {
            &self.0
        }
        async fn call(&self, args: Value, _ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
            Ok(ToolOutput::ok(args))
        }
    }

    fn echo() -> Arc<dyn Tool> {
        Arc::new(Echo(ToolSpec::new(
            "test",
            "echo",
            "echoes",
            json!({"type":"object","properties":{"text":{"type":"string"}},"required":["text"]}),
        )))
    }

    #[test]
    fn validation_names_every_violation() {
        let mut reg = ToolRegistry::new();
        reg.register(echo()).unwrap();
        assert!(reg.validate("echo", &json!({"text":"hi"})).is_ok());
        let err = reg.validate("echo", &json!({"text": 3})).unwrap_err();
        let ToolError::InvalidArguments { details, .. } = &err else {
            panic!("{err:?}")
        };
        assert_eq!(details["violations"][0]["path"], "/text");
        assert_eq!(err.code(), ErrorCode::ValidationError);
        assert!(matches!(
            reg.validate("nope", &json!({})),
            Err(ToolError::NotFound(_))
        ));
    }

    /// A tool compiled once (as the MCP pool does when a server's tools are listed) goes into
    /// any number of registries without being compiled again, and still validates.
    #[test]
    fn a_compiled_tool_is_registered_without_compiling() {
        let before = schema_compilations_on_this_thread();
        let compiled = CompiledTool::compile(echo()).unwrap();
        assert_eq!(schema_compilations_on_this_thread() - before, 1);
        for _run in 0..3 {
            let mut reg = ToolRegistry::new();
            reg.register_compiled(compiled.clone()).unwrap();
            assert!(reg.validate("echo", &json!({"text": 3})).is_err());
            assert_eq!(
                reg.register_compiled(compiled.clone()),
                Err(RegistryError::Duplicate("echo".into()))
            );
        }
        assert_eq!(schema_compilations_on_this_thread() - before, 1);
        // Another tool with the same schema shares the validator; one with another does not.
        let twin = Arc::new(Echo(ToolSpec::new(
            "test",
            "twin",
            "the same arguments",
            echo().spec().input_schema.clone(),
        )));
        let twin = CompiledTool::reusing(twin, &compiled).unwrap();
        let mut reg = ToolRegistry::new();
        reg.register_compiled(twin).unwrap();
        assert!(
            reg.validate("twin", &json!({})).is_err(),
            "text is required"
        );
        assert_eq!(schema_compilations_on_this_thread() - before, 1);
        let other = Arc::new(Echo(ToolSpec::new(
            "t",
            "other",
            "",
            json!({"type": "object"}),
        )));
        assert!(CompiledTool::reusing(other, &compiled).is_none());
        let bad = Arc::new(Echo(ToolSpec::new("t", "bad", "", json!({"type": 12}))));
        assert!(matches!(
            CompiledTool::compile(bad),
            Err(RegistryError::InvalidSchema { .. })
        ));
    }

    #[test]
    fn duplicates_and_bad_schemas_are_refused() {
        let mut reg = ToolRegistry::new();
        reg.register(echo()).unwrap();
        assert_eq!(
            reg.register(echo()),
            Err(RegistryError::Duplicate("echo".into()))
        );
        let bad = Arc::new(Echo(ToolSpec::new("t", "bad", "", json!({"type": 12}))));
        assert!(matches!(
            reg.register(bad),
            Err(RegistryError::InvalidSchema { .. })
        ));
    }

    #[tokio::test]
    async fn a_paused_clock_does_not_count_the_pause() {
        let clock = Arc::new(PauseClock::default());
        let started = Instant::now();
        let timeout = Duration::from_millis(200);
        let c = clock.clone();
        let pauser = tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(50)).await;
            let guard = c.pause();
            // A second, overlapping pause counts once.
            let overlapping = c.pause();
            tokio::time::sleep(Duration::from_millis(300)).await;
            drop(overlapping);
            drop(guard);
        });
        clock.deadline(started, timeout).await;
        let elapsed = started.elapsed();
        pauser.await.unwrap();
        assert!(
            elapsed >= Duration::from_millis(500),
            "200 ms running + 300 ms paused, got {elapsed:?}"
        );
        assert!(
            elapsed < Duration::from_millis(900),
            "the overlapping pause was counted twice: {elapsed:?}"
        );
        assert!(clock.paused() >= Duration::from_millis(300));
    }

    #[tokio::test]
    async fn a_dropped_pause_lets_the_clock_run_again() {
        let clock = Arc::new(PauseClock::default());
        let started = Instant::now();
        // A question abandoned mid-way (its future dropped) must not stop the clock for good.
        let asking = {
            let c = clock.clone();
            async move {
                let _paused = c.pause();
                std::future::pending::<()>().await;
            }
        };
        let _ = tokio::time::timeout(Duration::from_millis(100), asking).await;
        tokio::time::timeout(
            Duration::from_secs(2),
            clock.deadline(started, Duration::from_millis(100)),
        )
        .await
        .expect("the clock runs again once the pause is dropped");
        assert!(started.elapsed() >= Duration::from_millis(200));
    }

    #[test]
    fn a_disconnected_backend_is_not_retryable() {
        let e = ToolError::Disconnected("the server exited".into());
        assert!(!e.is_retryable());
        assert_eq!(e.code(), ErrorCode::McpError);
        assert_eq!(e.to_model_json()["error"]["code"], "mcp_error");
        assert!(ToolError::Unavailable("down".into()).is_retryable());
    }
}
