//! Delegation (issue 16, item 2): the `task` tool.
//!
//! A `task` call starts a **child run** of the same tenant, user and session, with its own
//! context (its own messages: the task description is its first and only user message; its own
//! tools, from the target assistant's or profile's settings, under the same user's role), and
//! returns the child's final answer as the call's result. The child is a real run: its own
//! execution row (`parent_execution_id`, `parent_tool_call_id`), its own events (each with
//! `parent_run_id`) in the session's stream, its own approvals decided by the same clients, its
//! own `done`. Its token usage rolls up into its parent's.
//!
//! The session keeps the children of its active run (see `SessionActor::start_child`): their
//! events are published while they go, and the run's end (a cancel, a failure) ends the ones
//! left, each with its `done`, before the run's own.
//!
//! Limits (`[tasks]`): how deep delegation nests, how many `task` calls one model step may make,
//! and how many children run at once. Several `task` calls of one step run concurrently: they
//! are started together as soon as the model's answer is in ([`Delegation::plan`]), and each
//! call in the tool-call pipeline then waits for its child.
//!
//! A crash mid-child: the child is not resumed. Start-up recovery ends it `interrupted`, and the
//! parent resumes from its checkpoint; its interrupted `task` call reads as interrupted to its
//! model, and a call that had not started yet finds its child's end instead of starting another
//! (`executions::child_of_call`): a finished sub-task never runs again.

use std::collections::{HashMap, HashSet};
use std::panic::AssertUnwindSafe;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use agentry_llm::ToolCall;
use agentry_schema::error::ErrorCode;
use agentry_schema::events::{DoneStatus, EventPayload, ProgressData, Question};
use agentry_schema::ids::{AssistantId, ProfileId, RemoteAgentId, RunId};
use agentry_store::assistants::{self, Assistant, AssistantSpec};
use agentry_store::executions::{self, Execution, ExecutionStatus, NewExecution};
use agentry_store::messages::{self, MessageRole, NewMessage};
use agentry_store::{remote_agents, sessions};
use agentry_tools::tool::{CompiledTool, Tool, ToolContext, ToolError, ToolOutput, ToolSpec};
use async_trait::async_trait;
use futures::FutureExt;
use serde_json::{Value, json};
use tokio::sync::{Semaphore, oneshot};
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use super::sink::{ChildTag, RunSink};
use super::{Progress, RunInput, RunOutcome, SharedProgress, run_agent};
pub use crate::config::TaskLimits;
use crate::deps::EngineDeps;
use crate::remote_agents::{AskEnd, RemoteEnd, RemoteListener};

/// The `assistant_id` of a remote task's child run: `a2a:<remote agent id>`.
pub const REMOTE_PREFIX: &str = "a2a:";

/// The tool's name, and its RBAC service and tool (`task:task`, or `task:*`).
pub const TASK_TOOL: &str = "task";

/// Where a child run sits: the run whose call started it, that call, and its depth.
#[derive(Debug, Clone, PartialEq)]
pub struct ParentRun {
    pub run_id: RunId,
    pub tool_call_id: String,
    pub depth: u32,
}

const DESCRIPTION: &str = "\
Delegate a sub-task to a sub-agent: a separate run with its own context and tools, whose final \
answer comes back as this call's result. The sub-agent sees nothing of this conversation: make \
`description` self-contained (every fact, path, name and constraint it needs, and what to return). \
Pick who does it with `profile` (general, devops, sre, orchestrator, or one of the tenant's) or \
`assistant` (an assistant's id), or hand it to a remote A2A agent the tenant registered with \
`remote_agent` (its id); by default the `general` profile. Several `task` calls in one step run in \
parallel. Its risky actions are approved by the user as they happen; a remote agent's questions \
reach the user the same way.";

/// A child waits at most this long as a tool call; its own run timeout (its profile's or
/// assistant's `timeout_secs`) ends it long before.
const CALL_TIMEOUT: Duration = Duration::from_secs(24 * 3600);

fn spec() -> ToolSpec {
    ToolSpec::new(
        TASK_TOOL,
        TASK_TOOL,
        DESCRIPTION,
        json!({
            "type": "object",
            "properties": {
                "description": {
                    "type": "string",
                    "minLength": 1,
                    "maxLength": 100000,
                    "description": "The sub-task, self-contained, with what to return."
                },
                "profile": {
                    "type": "string",
                    "description": "The profile the sub-agent runs with (default: general)."
                },
                "assistant": {
                    "type": "string",
                    "description": "The id of an assistant of this tenant to run the sub-task (instead of a profile)."
                },
                "remote_agent": {
                    "type": "string",
                    "description": "The id of a remote A2A agent registered by this tenant (GET /api/v1/remote-agents) to hand the sub-task to (instead of a profile or an assistant)."
                }
            },
            "required": ["description"],
            "additionalProperties": false
        }),
    )
    .with_timeout(CALL_TIMEOUT)
}

/// The tool's spec with its schema compiled, once per process: each run's `task` tool reuses
/// the validator.
fn template() -> Option<&'static CompiledTool> {
    static TEMPLATE: OnceLock<Option<CompiledTool>> = OnceLock::new();
    TEMPLATE
        .get_or_init(|| {
            let tool = Arc::new(TaskTool {
                spec: spec(),
                delegation: None,
            });
            CompiledTool::compile(tool)
                .map_err(|e| tracing::error!(error = %e, "the task tool's schema does not compile"))
                .ok()
        })
        .as_ref()
}

/// The `task` tool's spec (for listings: what an assistant's `tools` admit).
pub fn task_spec() -> ToolSpec {
    spec()
}

/// A run's `task` tool, bound to its [`Delegation`].
pub(crate) fn task_tool(delegation: Arc<Delegation>) -> Option<CompiledTool> {
    let template = template()?;
    CompiledTool::reusing(
        Arc::new(TaskTool {
            spec: template.spec().clone(),
            delegation: Some(delegation),
        }),
        template,
    )
}

struct TaskTool {
    spec: ToolSpec,
    /// `None` only in the process-wide template.
    delegation: Option<Arc<Delegation>>,
}

#[async_trait]
impl Tool for TaskTool {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    async fn call(&self, args: Value, ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
        let Some(d) = &self.delegation else {
            return Err(ToolError::failed("delegation is not available here"));
        };
        d.call(&ctx.tool_call_id, args, &ctx.cancel).await
    }
}

type ChildResult = Result<ToolOutput, ToolError>;

/// One run's delegation: what its child runs are started from, and the children it started
/// ahead of their calls (a step's parallel `task` calls).
pub(crate) struct Delegation {
    deps: Arc<EngineDeps>,
    /// The delegating run (its `resume` cleared).
    parent: RunInput,
    sink: Arc<dyn RunSink>,
    /// The delegating run's usage: a child's rolls up into it when the child ends.
    progress: SharedProgress,
    /// Cancelled when the delegating run ends, however it ends: its children stop.
    cancel: CancellationToken,
    permits: Arc<Semaphore>,
    limits: TaskLimits,
    /// Children started ahead of their call, by tool call id.
    launched: Mutex<HashMap<String, oneshot::Receiver<ChildResult>>>,
    /// `task` calls of the current step past `max_per_step`.
    refused: Mutex<HashSet<String>>,
}

impl Delegation {
    pub(crate) fn new(
        deps: Arc<EngineDeps>,
        parent: &RunInput,
        sink: Arc<dyn RunSink>,
        progress: SharedProgress,
        cancel: &CancellationToken,
    ) -> Self {
        let limits = deps.config.tasks;
        let mut parent = parent.clone();
        parent.resume = None;
        Delegation {
            deps,
            parent,
            sink,
            progress,
            cancel: cancel.child_token(),
            permits: Arc::new(Semaphore::new(limits.max_parallel.max(1) as usize)),
            limits,
            launched: Mutex::default(),
            refused: Mutex::default(),
        }
    }

    /// The delegating run's depth (0: a person started it).
    fn depth(&self) -> u32 {
        self.parent.parent.as_ref().map_or(0, |p| p.depth)
    }

    /// Stop every child still going (the delegating run is over).
    pub(crate) fn stop(&self) {
        self.cancel.cancel();
    }

    /// The token that stops its children.
    pub(crate) fn cancel_token(&self) -> CancellationToken {
        self.cancel.clone()
    }

    /// A model step's calls are in: its `task` calls past `max_per_step` are refused, and when
    /// it makes several, the ones `startable` admits (allowed, valid, needing no approval) start
    /// now, together; each call then waits for its own child.
    pub(crate) fn plan(&self, calls: &[ToolCall], startable: impl Fn(&ToolCall) -> bool) {
        let tasks: Vec<&ToolCall> = calls.iter().filter(|c| c.name == TASK_TOOL).collect();
        let allowed = self.limits.max_per_step as usize;
        if let Ok(mut refused) = self.refused.lock() {
            refused.clear();
            refused.extend(tasks.iter().skip(allowed).map(|c| c.id.clone()));
        }
        if tasks.len().min(allowed) < 2 || self.depth() >= self.limits.max_depth {
            return;
        }
        for call in tasks.into_iter().take(allowed) {
            if startable(call) {
                let rx = self.launch(&call.id, call.arguments.clone());
                if let Ok(mut launched) = self.launched.lock() {
                    launched.insert(call.id.clone(), rx);
                }
            }
        }
    }

    async fn call(
        &self,
        call_id: &str,
        args: Value,
        cancel: &CancellationToken,
    ) -> Result<ToolOutput, ToolError> {
        let over_fan_out = self.refused.lock().is_ok_and(|r| r.contains(call_id));
        if over_fan_out {
            return Err(ToolError::Refused(format!(
                "at most {} task calls run per step (tasks.max_per_step); this one was not started: delegate it in a later step, or do it yourself",
                self.limits.max_per_step
            )));
        }
        let depth = self.depth();
        if depth >= self.limits.max_depth {
            return Err(ToolError::Refused(format!(
                "delegation is limited to {} levels (tasks.max_depth) and this run is at depth {depth}: it cannot start a sub-task; do this part yourself",
                self.limits.max_depth
            )));
        }
        let started = self
            .launched
            .lock()
            .ok()
            .and_then(|mut l| l.remove(call_id));
        let rx = match started {
            Some(rx) => rx,
            None => self.launch(call_id, args),
        };
        tokio::select! {
            r = rx => r.unwrap_or_else(|_| Err(ToolError::failed("the sub-task ended without a result"))),
            _ = cancel.cancelled() => Err(ToolError::Cancelled),
        }
    }

    /// Start the child of call `call_id` on the engine runtime, once a place is free.
    fn launch(&self, call_id: &str, args: Value) -> oneshot::Receiver<ChildResult> {
        let (tx, rx) = oneshot::channel();
        let job = ChildJob {
            deps: self.deps.clone(),
            parent: self.parent.clone(),
            depth: self.depth() + 1,
            sink: self.sink.clone(),
            progress: self.progress.clone(),
            cancel: self.cancel.clone(),
            call_id: call_id.to_string(),
            args,
        };
        let permits = self.permits.clone();
        let span = tracing::Span::current();
        self.deps.runtime.spawn(
            async move {
                let permit = tokio::select! {
                    p = permits.acquire_owned() => p.ok(),
                    _ = job.cancel.cancelled() => None,
                };
                let result = match permit {
                    Some(_permit) => job.run().await,
                    None => Err(ToolError::Cancelled),
                };
                let _ = tx.send(result);
            }
            .instrument(span),
        );
        rx
    }
}

/// One child run, from its call to its end.
struct ChildJob {
    deps: Arc<EngineDeps>,
    parent: RunInput,
    depth: u32,
    sink: Arc<dyn RunSink>,
    progress: SharedProgress,
    cancel: CancellationToken,
    call_id: String,
    args: Value,
}

impl ChildJob {
    async fn run(self) -> ChildResult {
        let db = &self.deps.db;
        let scope = self.parent.tenant.scope();
        // A resumed parent calls again what its crash left pending: the child it started then
        // is not started twice.
        let earlier = executions::child_of_call(db, &scope, self.parent.run_id, &self.call_id)
            .await
            .map_err(|e| ToolError::failed(format!("could not look the sub-task up: {e}")))?;
        if let Some(child) = earlier {
            return Ok(self.earlier_child(&child).await);
        }
        let description = self
            .args
            .get("description")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .trim()
            .to_string();
        if description.is_empty() {
            return Err(ToolError::invalid("`description` must say what to do"));
        }
        if let Some(remote) = self.named("remote_agent") {
            if self.named("assistant").is_some() || self.named("profile").is_some() {
                return Err(ToolError::invalid(
                    "name one of `remote_agent`, `assistant` or `profile`, not several",
                ));
            }
            let remote = remote.to_string();
            return self.run_remote(&description, &remote).await;
        }
        let (assistant, agent) = self.target().await?;
        let child_id = RunId::new();
        let span = tracing::info_span!(
            "agent.run",
            otel.name = "agent run (task)",
            run_id = %child_id,
            parent_run_id = %self.parent.run_id,
            session_id = %self.parent.session_id,
            tenant_id = %self.parent.tenant.id,
            assistant_id = %assistant.id,
            agentry.run.depth = i64::from(self.depth),
        );
        let (tag, progress) = self
            .begin(child_id, assistant.id.as_str(), &description, &span)
            .await?;
        // The session's auto-approve counts for its children; the delegating assistant's own
        // does not pass to another assistant.
        let session_auto = self.parent.auto_approve && !self.parent.agent.auto_approve;
        let input = RunInput {
            history: None,
            tenant: self.parent.tenant.clone(),
            user_id: self.parent.user_id,
            // The child acts for the same person: never with more rights.
            role: self.parent.role,
            custom_role: self.parent.custom_role,
            session_id: self.parent.session_id,
            run_id: child_id,
            auto_approve: agent.auto_approve || session_auto,
            assistant,
            agent,
            resume: None,
            mcp: self.parent.mcp.clone(),
            fence: self.parent.fence,
            quota: self.parent.quota.clone(),
            parent: Some(ParentRun {
                run_id: self.parent.run_id,
                tool_call_id: self.call_id.clone(),
                depth: self.depth,
            }),
            // A client's functions are its own run's: a sub-task has no client to ask.
            client_tools: Vec::new(),
        };
        let sink = self.sink.child(tag);
        let looped = run_agent(
            self.deps.clone(),
            input,
            sink.clone(),
            self.cancel.child_token(),
            progress.clone(),
        )
        .instrument(span);
        let outcome = match AssertUnwindSafe(looped).catch_unwind().await {
            Ok(outcome) => outcome,
            Err(_) => {
                // A child is not restarted (its parent decides what to do instead).
                sink.emit(EventPayload::error(
                    ErrorCode::InternalError.as_str(),
                    "the sub-task crashed",
                    false,
                ));
                let p = progress.lock().map(|p| *p).unwrap_or_default();
                let mut o = RunOutcome::new(DoneStatus::Failed, Some("internal_error"), &p);
                o.error = Some("the sub-task's loop panicked".into());
                o
            }
        };
        let answer = outcome
            .rows
            .messages
            .iter()
            .rev()
            .find(|m| m.role == MessageRole::Assistant && m.tool_calls.is_none())
            .map(|m| m.content.clone());
        let usage = outcome.usage;
        let reason = outcome.reason.clone();
        let error = outcome.error.clone();
        let Some(status) = self.sink.end_child(tag, outcome).await else {
            // Its parent's run ended first and ended it (its usage rolled up then).
            return Err(ToolError::Cancelled);
        };
        if let Ok(mut p) = self.progress.lock() {
            p.usage.add(usage);
        }
        Ok(result(child_id, status, reason, error, answer))
    }

    /// Register the child with the session, then record its start (its execution and its one
    /// user message). `Err`: it must not run (the parent is over, or the start was not stored).
    async fn begin(
        &self,
        child_id: RunId,
        assistant_id: &str,
        description: &str,
        span: &tracing::Span,
    ) -> Result<(ChildTag, SharedProgress), ToolError> {
        let tag = ChildTag {
            run: child_id,
            parent: self.parent.run_id,
        };
        let progress: SharedProgress = Arc::new(Mutex::new(Progress::default()));
        if !self
            .sink
            .start_child(tag, self.depth, progress.clone())
            .await
        {
            return Err(ToolError::Cancelled);
        }
        let trace_id = agentry_schema::trace_context::trace_id(span);
        if let Err(e) = self
            .write_start(child_id, assistant_id, description, trace_id)
            .await
        {
            self.sink.forget_child(tag);
            tracing::error!(error = %e, run_id = %self.parent.run_id, "recording a sub-task's start failed");
            return Err(ToolError::failed(
                "could not record the sub-task's start; it was not started",
            ));
        }
        Ok((tag, progress))
    }

    /// A non-empty string argument of the call.
    fn named(&self, key: &str) -> Option<&str> {
        self.args
            .get(key)
            .and_then(Value::as_str)
            .map(str::trim)
            .filter(|s| !s.is_empty())
    }

    /// A child run that is a task of a registered remote A2A agent (`remote_agent`): the same
    /// execution row, events (with `parent_run_id`), `done` and result as a local child's; its
    /// messages stream from the remote task; its questions (`input-required`) are the user's
    /// to answer; cancelling it sends `CancelTask`; the registration's `timeout_secs` bounds the
    /// agent's time.
    async fn run_remote(&self, description: &str, name: &str) -> ChildResult {
        let db = &self.deps.db;
        let scope = self.parent.tenant.scope();
        let id = RemoteAgentId::try_from(name)
            .map_err(|e| ToolError::invalid(format!("`remote_agent`: {e}")))?;
        let remote = remote_agents::get(db, &scope, &id)
            .await
            .map_err(|e| ToolError::failed(format!("could not load the remote agent: {e}")))?
            .ok_or_else(|| {
                ToolError::NotFound(format!(
                    "no remote agent {name:?} is registered in this tenant (GET /api/v1/remote-agents lists them)"
                ))
            })?;
        let child_id = RunId::new();
        let span = tracing::info_span!(
            "agent.run",
            otel.name = "agent run (remote task)",
            run_id = %child_id,
            parent_run_id = %self.parent.run_id,
            session_id = %self.parent.session_id,
            tenant_id = %self.parent.tenant.id,
            remote_agent = %id,
            agentry.run.depth = i64::from(self.depth),
        );
        let assistant_id = format!("{REMOTE_PREFIX}{id}");
        let (tag, progress) = self
            .begin(child_id, &assistant_id, description, &span)
            .await?;
        let sink = self.sink.child(tag);
        let asked_human = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let listener = ChildListener {
            sink: sink.clone(),
            interaction: super::LoopInteraction {
                deps: self.deps.clone(),
                scope,
                session_id: self.parent.session_id,
                run_id: child_id,
                tool_call_id: self.call_id.clone(),
                reuse: None,
                progress: progress.clone(),
                sink: sink.clone(),
                run_clock: Arc::new(agentry_tools::tool::PauseClock::default()),
                asked_human: asked_human.clone(),
            },
        };
        let cancel = self.cancel.child_token();
        let outcome = self
            .deps
            .remote_agents
            .delegate(&remote, description, &listener, &cancel)
            .instrument(span)
            .await;
        let (status, reason) = match outcome.end {
            RemoteEnd::Completed => (DoneStatus::Completed, None),
            RemoteEnd::Failed => (DoneStatus::Failed, Some(ErrorCode::ToolError.as_str())),
            RemoteEnd::Cancelled => (DoneStatus::Cancelled, Some("user_cancelled")),
            RemoteEnd::Rejected => (DoneStatus::Rejected, Some("rejected")),
            RemoteEnd::TimedOut => (DoneStatus::Timeout, Some(ErrorCode::Timeout.as_str())),
        };
        let p = progress.lock().map(|p| *p).unwrap_or_default();
        let mut run = RunOutcome::new(status, reason, &p);
        run.error = outcome.error.clone();
        run.may_have_approvals = asked_human.load(std::sync::atomic::Ordering::Relaxed);
        let answer =
            (status == DoneStatus::Completed).then(|| outcome.answer.clone().unwrap_or_default());
        match &answer {
            Some(text) => {
                sink.emit(EventPayload::text(text.clone(), true));
                run.rows.messages.push(NewMessage {
                    run_id: Some(child_id),
                    role: MessageRole::Assistant,
                    content: text.clone(),
                    tool_calls: None,
                    tool_call_id: None,
                });
            }
            None if status != DoneStatus::Cancelled => {
                let code = if status == DoneStatus::Timeout {
                    ErrorCode::Timeout
                } else {
                    ErrorCode::ToolError
                };
                sink.emit(EventPayload::error(
                    code.as_str(),
                    outcome
                        .error
                        .clone()
                        .unwrap_or_else(|| "the remote agent's task did not complete".into()),
                    false,
                ));
            }
            None => {}
        }
        let reason = run.reason.clone();
        let error = run.error.clone();
        let Some(status) = self.sink.end_child(tag, run).await else {
            return Err(ToolError::Cancelled);
        };
        let mut out = result(child_id, status, reason, error, answer);
        if let (Value::Object(body), Some(task)) = (&mut out.content, &outcome.task_id) {
            body.insert("remote_agent".into(), json!(id.as_str()));
            body.insert("remote_task_id".into(), json!(task));
        }
        Ok(out)
    }

    /// The assistant and settings the child runs with: the named assistant, or the delegating
    /// assistant under the named profile (default `general`), its own prompt, tools and
    /// approvals dropped for the profile's, its model kept.
    async fn target(&self) -> Result<(Assistant, Arc<crate::profiles::AgentConfig>), ToolError> {
        let db = &self.deps.db;
        let scope = self.parent.tenant.scope();
        let named = |key: &str| self.named(key);
        let unavailable = |e: agentry_store::StoreError| {
            ToolError::failed(format!("could not load the sub-task's settings: {e}"))
        };
        let assistant = match (named("assistant"), named("profile")) {
            (Some(_), Some(_)) => {
                return Err(ToolError::invalid(
                    "name either `assistant` or `profile`, not both",
                ));
            }
            (Some(a), None) => {
                let id = AssistantId::try_from(a)
                    .map_err(|e| ToolError::invalid(format!("`assistant`: {e}")))?;
                assistants::get(db, &scope, &id)
                    .await
                    .map_err(unavailable)?
                    .ok_or_else(|| {
                        ToolError::NotFound(format!(
                            "no assistant {a:?} in this tenant (GET /api/v1/agents lists them)"
                        ))
                    })?
            }
            (None, p) => {
                let name = p.unwrap_or("general");
                let id = ProfileId::try_from(name)
                    .map_err(|e| ToolError::invalid(format!("`profile`: {e}")))?;
                if crate::profiles::find(db, &scope, &id)
                    .await
                    .map_err(unavailable)?
                    .is_none()
                {
                    return Err(ToolError::NotFound(format!(
                        "no profile {name:?}: use general, devops, sre, orchestrator or one of the tenant's (GET /api/v1/profiles)"
                    )));
                }
                let from = &self.parent.assistant;
                Assistant {
                    spec: AssistantSpec {
                        name: format!("{} ({name})", from.spec.name),
                        description: format!(
                            "A sub-agent of {} with the {name} profile",
                            from.spec.name
                        ),
                        profile: id,
                        provider: from.spec.provider.clone(),
                        model: from.spec.model.clone(),
                        model_connection: from.spec.model_connection.clone(),
                        max_retries: from.spec.max_retries,
                        skills: from.spec.skills.clone(),
                        ..AssistantSpec::default()
                    },
                    ..from.clone()
                }
            }
        };
        let agent = crate::profiles::effective(db, &scope, &assistant)
            .await
            .map_err(unavailable)?;
        Ok((assistant, agent))
    }

    /// The child's execution and its one user message (the description), in one transaction.
    async fn write_start(
        &self,
        id: RunId,
        assistant_id: &str,
        description: &str,
        trace_id: Option<String>,
    ) -> Result<(), agentry_store::StoreError> {
        let scope = self.parent.tenant.scope();
        let (fence, session_id, parent_run) = (
            self.parent.fence,
            self.parent.session_id,
            self.parent.run_id,
        );
        let call_id = self.call_id.clone();
        let new = NewExecution {
            id,
            user_id: self.parent.user_id,
            session_id,
            assistant_id: assistant_id.to_string(),
            input: description.to_string(),
            trace_id,
            status: ExecutionStatus::Running,
            role: Some(agentry_schema::roles::Grant {
                role: self.parent.role,
                custom: self.parent.custom_role,
            }),
        };
        let message = NewMessage::user(description, Some(id));
        self.deps
            .writer
            .write_for(session_id.0, move |txn| {
                let (new, message, call_id) = (new.clone(), message.clone(), call_id.clone());
                Box::pin(async move {
                    if let Some(token) = fence {
                        sessions::fence(txn, &scope, session_id, token).await?;
                    }
                    executions::insert_child(txn, &scope, new, parent_run, &call_id).await?;
                    messages::save_many(txn, &scope, session_id, vec![message]).await
                })
            })
            .await
    }

    /// The result of a call whose child a crash interrupted the parent after starting.
    async fn earlier_child(&self, child: &Execution) -> ToolOutput {
        let status = match child.status {
            ExecutionStatus::Completed => DoneStatus::Completed,
            ExecutionStatus::Failed => DoneStatus::Failed,
            ExecutionStatus::Cancelled => DoneStatus::Cancelled,
            ExecutionStatus::Rejected => DoneStatus::Rejected,
            ExecutionStatus::Timeout => DoneStatus::Timeout,
            // Still going (its end is being written after a restart) or ended by the restart.
            _ => DoneStatus::Interrupted,
        };
        let answer = if status == DoneStatus::Completed {
            messages::of_run(
                &self.deps.db,
                &self.parent.tenant.scope(),
                self.parent.session_id,
                child.id,
            )
            .await
            .ok()
            .and_then(|msgs| {
                msgs.into_iter()
                    .rev()
                    .find(|m| m.role == MessageRole::Assistant && m.tool_calls.is_none())
                    .map(|m| m.content)
            })
        } else {
            None
        };
        let error = (status == DoneStatus::Interrupted).then(|| {
            "the server restarted while this sub-task ran; its outcome is unknown".to_string()
        });
        result(
            child.id,
            status,
            None,
            error.or_else(|| child.error.clone()),
            answer,
        )
    }
}

/// What the model reads of a child's end: its answer, or how it ended.
fn result(
    child: RunId,
    status: DoneStatus,
    reason: Option<String>,
    error: Option<String>,
    answer: Option<String>,
) -> ToolOutput {
    if status == DoneStatus::Completed {
        return ToolOutput::ok(json!({
            "run_id": child.to_string(),
            "status": status.as_str(),
            "answer": answer.unwrap_or_default(),
        }));
    }
    let mut body = json!({
        "run_id": child.to_string(),
        "status": status.as_str(),
        "message": match status {
            DoneStatus::Rejected => "the sub-task stopped: the user rejected one of its actions",
            DoneStatus::Cancelled => "the sub-task was cancelled",
            DoneStatus::Timeout => "the sub-task ran out of time",
            DoneStatus::Interrupted => "the sub-task was interrupted by a server restart; its outcome is unknown",
            _ => "the sub-task failed",
        },
    });
    if let Some(r) = reason {
        body["reason"] = json!(r);
    }
    if let Some(e) = error {
        body["error"] = json!(e);
    }
    ToolOutput::failed(body)
}

/// The child run's sink seen by a remote task: its text as the child's `text` events, its
/// status messages as `progress`, its questions through the run's own question path (a
/// `hitl_request` of kind `question`, stored, answered by the same clients).
struct ChildListener {
    sink: Arc<dyn RunSink>,
    interaction: super::LoopInteraction,
}

#[async_trait]
impl RemoteListener for ChildListener {
    fn started(&self, task_id: &str, context_id: &str) {
        tracing::debug!(
            remote_task = task_id,
            remote_context = context_id,
            "the remote task started"
        );
    }

    fn text(&self, chunk: &str) {
        self.sink.emit(EventPayload::text(chunk, false));
    }

    fn status(&self, state: &str, message: &str) {
        self.sink.emit(EventPayload::Progress(ProgressData {
            tool_call_id: self.interaction.tool_call_id.clone(),
            progress: 0.0,
            total: None,
            message: Some(format!("{state}: {message}")),
        }));
    }

    async fn ask(&self, question: String) -> Result<String, AskEnd> {
        use agentry_tools::tool::{InteractionError, UserInteraction};
        let asked = self
            .interaction
            .ask(Question {
                text: question,
                question_type: "text".into(),
                options: Vec::new(),
                timeout: 0,
                schema: None,
                function_call: None,
            })
            .await;
        match asked {
            Ok(Value::String(s)) => Ok(s),
            Ok(other) => Ok(other.to_string()),
            Err(InteractionError::Declined) => Err(AskEnd::Declined),
            Err(InteractionError::TimedOut(_)) => Err(AskEnd::TimedOut),
            Err(InteractionError::Cancelled) => Err(AskEnd::Cancelled),
            Err(InteractionError::Unavailable(_)) => Err(AskEnd::Unavailable),
        }
    }
}
