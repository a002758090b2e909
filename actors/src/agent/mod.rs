//! The agent loop (DESIGN §4): `reason -> (act | approve | respond)`, `act -> reason`,
//! `approve -> reason`, `respond -> end`.
//!
//! It is plain async code. The session actor runs it as a task on the engine runtime, feeds it a
//! [`RunSink`] for events and human decisions, and turns whatever it returns — or its panic, or
//! its abort after a cancel — into exactly one `done` event. The loop never emits `done` itself.
//! Its moves go through the run state machine ([`state::transition`]), which refuses any the
//! design does not allow. Its writes go through a [`RunRecorder`]: one transaction per step
//! (the step's messages and audit rows with the next checkpoint), so a crashed run can
//! resume; what the last step leaves unwritten goes into the run's end ([`RunOutcome::rows`]).

pub mod checkpoint;
pub mod history;
pub mod recorder;
pub mod sink;
pub mod state;
pub mod task;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use agentry_llm::{
    ChatMessage, ChatModel, ChatRequest, LlmError, RetryPolicy, StreamEvent, ToolCall, ToolSchema,
};
use agentry_schema::error::ErrorCode;
use agentry_schema::events::{
    ActionRequest, DoneStatus, EventPayload, HitlKind, HitlRequestData, Question, Todo, TokenUsage,
    ToolCallData, ToolResultData, ToolStatus,
};
use agentry_schema::frames::Decision;
use agentry_schema::ids::{ApprovalId, RunId, SessionId, UserId};
use agentry_schema::tenancy::Role;
use agentry_store::approvals::{self, ApprovalStatus, NewApproval};
use agentry_store::assistants::Assistant;
use agentry_store::tenants::Tenant;
use agentry_store::tool_calls::NewToolCallLog;
use agentry_store::{StoreError, TenantScope, messages};
use agentry_tools::pipeline::{
    self, Approval, CallHost, CallRequest, FinishedCall, Outcome, Refusal, RefusalKind, ToolPolicy,
};
use agentry_tools::tool::{
    EventSink, InteractionError, PauseClock, Tool, ToolContext, ToolError, ToolSpec,
    UserInteraction, WorkspaceInfo,
};
use async_trait::async_trait;
use futures::StreamExt;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use crate::deps::{EngineDeps, ToolRequest, ToolSet};
pub use checkpoint::{CHECKPOINT_VERSION, InFlight, RunCheckpoint};
pub use recorder::{RunRecorder, StepRows};
use sink::{HumanOutcome, HumanRequest, RunSink};
pub use state::{IllegalTransition, RunEvent, RunState, transition};

/// What a run is about.
#[derive(Clone)]
pub struct RunInput {
    pub tenant: Arc<Tenant>,
    /// The session's owner: whose workspace and MCP servers the tools use.
    pub user_id: UserId,
    /// The role of whoever started the run: it decides the tool permissions.
    pub role: Role,
    /// The custom role of whoever started the run (then `role` is `Member`).
    pub custom_role: Option<agentry_schema::roles::RoleName>,
    pub session_id: SessionId,
    pub run_id: RunId,
    pub assistant: Assistant,
    /// The assistant's settings over its profile's: prompt, tools, approvals, limits.
    pub agent: Arc<crate::profiles::AgentConfig>,
    /// The session (or the assistant) approves every tool call without asking.
    pub auto_approve: bool,
    /// Continue from this checkpoint instead of starting fresh.
    pub resume: Option<RunCheckpoint>,
    /// The tenant's MCP pool.
    pub mcp: Option<actix::Addr<crate::mcp_pool::McpPoolActor>>,
    /// Cluster mode: the fencing token of this replica's lease on the session; every write of
    /// the run carries it. `None` on a single-node server.
    pub fence: Option<i64>,
    /// The tenant's quotas: each model call reserves its tokens here first.
    pub quota: crate::quota::QuotaHandle,
    /// A `task` child run: the run that started it (`None`: a person did).
    pub parent: Option<task::ParentRun>,
    /// The session's history window, brought up to date with the run's start (`None`: read it
    /// at load). Shared with the session, which keeps it for its next run.
    pub history: Option<Arc<Vec<agentry_store::messages::Message>>>,
    /// Functions the client declared for this run (the Responses API's function tools), offered
    /// beside the assistant's tools; a call to one waits for the client's output. Kept in the
    /// run's checkpoints, so a resumed run offers them again.
    pub client_tools: Vec<agentry_schema::api::ClientTool>,
}

/// How a run ended; the session turns it into the `done` event and the execution row.
#[derive(Debug, Clone, PartialEq)]
pub struct RunOutcome {
    pub status: DoneStatus,
    /// `user_cancelled`, `rejected`, `hitl_timeout`, `run_timeout`, an error code…
    pub reason: Option<String>,
    /// For failures: what went wrong (stored on the execution).
    pub error: Option<String>,
    pub usage: TokenUsage,
    pub steps: u32,
    /// Rows of the last step the loop did not write (the final answer, a refused call): the
    /// run's end writes them. (Boxed: every early exit of the loop carries an outcome.)
    pub rows: Box<StepRows>,
    /// Checkpoints the run wrote (the end prunes only past `checkpoint_keep`).
    pub checkpoints: u64,
    /// Whether the run may have left approvals pending: true unless the loop itself reported
    /// the outcome (an aborted or crashed loop may have, the session does not know).
    pub may_have_approvals: bool,
}

impl RunOutcome {
    pub fn new(status: DoneStatus, reason: Option<&str>, progress: &Progress) -> Self {
        RunOutcome {
            status,
            reason: reason.map(str::to_string),
            error: None,
            usage: progress.usage,
            steps: progress.steps,
            rows: Box::default(),
            checkpoints: 0,
            may_have_approvals: true,
        }
    }

    fn failed(code: ErrorCode, message: String, progress: &Progress) -> Self {
        RunOutcome {
            error: Some(message),
            ..RunOutcome::new(DoneStatus::Failed, Some(code.as_str()), progress)
        }
    }

    /// The log line of the run's end, for an operator: a run that failed or timed out is an
    /// `error` line; one cancelled, rejected or interrupted a `warn` line; a completed run is in
    /// the access log and the metrics only. Each carries the run, its session and tenant, the
    /// request that started it (when a request did: not a recovered run) and its trace id (when
    /// traces are exported).
    pub fn log_end(
        &self,
        session: &agentry_store::sessions::Session,
        run_id: RunId,
        request_id: Option<&str>,
        trace_id: Option<&str>,
    ) {
        let outcome = self;
        macro_rules! emit {
            ($level:expr, $message:literal) => {
                tracing::event!(
                    target: "agentry::runs",
                    $level,
                    %run_id,
                    session_id = %session.id,
                    tenant_id = %session.tenant_id,
                    request_id,
                    trace_id,
                    status = outcome.status.as_str(),
                    reason = outcome.reason.as_deref(),
                    error = outcome.error.as_deref(),
                    steps = outcome.steps,
                    $message
                )
            };
        }
        match outcome.status {
            DoneStatus::Completed => {}
            DoneStatus::Failed | DoneStatus::Timeout => emit!(tracing::Level::ERROR, "run failed"),
            DoneStatus::Cancelled | DoneStatus::Rejected | DoneStatus::Interrupted => {
                emit!(tracing::Level::WARN, "run ended early")
            }
        }
    }
}

/// Usage and steps so far, readable from outside the loop (a cancel or timeout drops the loop
/// mid-way and still reports them).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Progress {
    pub usage: TokenUsage,
    pub steps: u32,
}

pub type SharedProgress = Arc<Mutex<Progress>>;

fn read(progress: &SharedProgress) -> Progress {
    progress.lock().map(|p| *p).unwrap_or_default()
}

/// Run the loop to its end: completion, rejection, failure, cancellation (`cancel`) or the
/// assistant's run timeout. The run timeout counts the run's own time: while it waits for a
/// person (an approval, a question, an MCP elicitation) its clock stands still, as a tool's does;
/// `hitl_timeout` bounds those waits.
pub async fn run_agent(
    deps: Arc<EngineDeps>,
    input: RunInput,
    sink: Arc<dyn RunSink>,
    cancel: CancellationToken,
    progress: SharedProgress,
) -> RunOutcome {
    let timeout = Duration::from_secs(u64::from(input.agent.timeout_secs.max(1)));
    let run_clock = Arc::new(PauseClock::default());
    let started = Instant::now();
    let scope = input.tenant.scope();
    let mut agent = Agent {
        recorder: RunRecorder::new(
            deps.writer.clone(),
            scope,
            input.session_id,
            input.run_id,
            input.fence,
        ),
        state: RunState::Reason,
        resume_at: Vec::new(),
        asked_human: Arc::default(),
        deps,
        scope,
        input,
        sink,
        cancel: cancel.clone(),
        progress: progress.clone(),
        conversation: Vec::new(),
        window_start: 0,
        todos: Vec::new(),
        memories: Vec::new(),
        memory_on: false,
        model: None,
        answer: None,
        connection: None,
        skills: Vec::new(),
        run_clock: run_clock.clone(),
        stored: StoredRun::default(),
        // run_agent runs in the run's span.
        trace_parent: agentry_schema::trace_context::traceparent(&tracing::Span::current()),
        delegation: None,
        stop_children: None,
    };
    let sink = agent.sink.clone();
    let result = tokio::select! {
        biased;
        _ = cancel.cancelled() => Err(RunOutcome::new(DoneStatus::Cancelled, Some("user_cancelled"), &read(&progress))),
        r = agent.run() => r,
        _ = run_clock.deadline(started, timeout) => {
            let p = read(&progress);
            sink.emit(EventPayload::error(
                ErrorCode::Timeout.as_str(),
                format!("the run took longer than the assistant's timeout of {} s", timeout.as_secs()),
                false,
            ));
            Err(RunOutcome::new(DoneStatus::Timeout, Some("run_timeout"), &p))
        }
    };
    let (Ok(mut outcome) | Err(mut outcome)) = result;
    if let Some(d) = &agent.delegation {
        // Children it started ahead of calls it never reached stop; the session ends them.
        d.stop();
    }
    agent.stop(&outcome);
    if outcome.status == DoneStatus::Completed {
        agent.extract_memories();
    }
    outcome.rows = Box::new(agent.recorder.take_waiting());
    outcome.checkpoints = agent.recorder.checkpoints_written();
    outcome.may_have_approvals = agent.asked_human.load(Ordering::Relaxed);
    outcome
}

/// Skills listed in one system prompt, at most (by name; `load_skill` still loads the rest).
const MAX_LISTED_SKILLS: usize = 100;

/// Early exit from a step with the run's outcome.
type Step<T> = Result<T, RunOutcome>;

struct Agent {
    /// Every write of the run goes through it.
    recorder: RunRecorder,
    /// Where the run is (see [`state`]); moved only by [`Agent::go`].
    state: RunState,
    /// The calls of the current answer that have no result yet, the one being acted on
    /// first: where a checkpoint taken while acting resumes.
    resume_at: Vec<ToolCall>,
    /// Set before the run opens an approval or a question: its end then looks for pending
    /// ones to cancel.
    asked_human: Arc<AtomicBool>,
    deps: Arc<EngineDeps>,
    scope: TenantScope,
    input: RunInput,
    sink: Arc<dyn RunSink>,
    cancel: CancellationToken,
    progress: SharedProgress,
    conversation: Vec<ChatMessage>,
    window_start: i64,
    todos: Vec<Todo>,
    /// The long-term memories most relevant to the run's message, for the system prompt.
    memories: Vec<String>,
    /// The run offers the memory tools: memories go into its prompt, and facts may be
    /// extracted after it.
    memory_on: bool,
    /// The run's model, for the extraction after it.
    model: Option<Arc<dyn agentry_llm::ChatModel>>,
    /// The final answer of a completed run.
    answer: Option<String>,
    /// The skills the run sees (name, description), for the system prompt.
    skills: Vec<(String, String)>,
    /// The run timeout's clock: it stands still while the run waits for a person.
    run_clock: Arc<PauseClock>,
    /// On resume: what the store already holds of this run.
    stored: StoredRun,
    /// The run span's W3C trace context, saved in every checkpoint.
    trace_parent: Option<String>,
    /// The tenant's model connection the run talks to; `None`: the platform's model.
    connection: Option<agentry_schema::ids::ModelConnectionId>,
    /// Its `task` tool's state, when its tools include `task`.
    delegation: Option<Arc<task::Delegation>>,
    /// Stops its children when the loop is dropped (aborted after a cancel, or panicked).
    stop_children: Option<tokio_util::sync::DropGuard>,
}

/// What a resumed run finds stored of itself, so nothing that happened before the crash
/// happens again.
#[derive(Default)]
struct StoredRun {
    /// Tool calls whose result is stored: they ran (or were refused) and never run again.
    results: std::collections::HashSet<String>,
    /// The run's last stored message when it is the model's answer: the model was called
    /// after the checkpoint, so it is not called again.
    last_answer: Option<(String, Vec<ToolCall>)>,
    /// Approvals the run left pending, by tool call: asked again under the same id, so a
    /// decision sent for it (to any replica) still counts.
    pending_approvals: std::collections::HashMap<String, ApprovalId>,
    /// Client function calls whose question the run left pending, by tool call: nothing of
    /// them ran on the server (the client runs them), so the call is made again and asks under
    /// the same id, and the client's output sent for it (to any replica) still counts.
    pending_functions: std::collections::HashMap<String, ApprovalId>,
}

/// What the model reads for a tool call a crash interrupted.
pub const INTERRUPTED_MESSAGE: &str =
    "the server restarted while this call was running; its outcome is unknown";

struct ModelAnswer {
    text: String,
    calls: Vec<ToolCall>,
}

impl Agent {
    fn progress(&self) -> Progress {
        read(&self.progress)
    }

    /// The configured pacing of the loop's own retries (see `ModelProvider::retry_policy`).
    fn retry_policy(&self) -> RetryPolicy {
        self.deps.models.retry_policy(&self.input.assistant)
    }

    fn update_progress(&self, f: impl FnOnce(&mut Progress)) {
        if let Ok(mut p) = self.progress.lock() {
            f(&mut p);
        }
    }

    /// End the run as failed: a non-recoverable `error` event, then the outcome.
    fn fail(&self, code: ErrorCode, msg: String) -> RunOutcome {
        self.sink
            .emit(EventPayload::error(code.as_str(), msg.clone(), false));
        RunOutcome::failed(code, msg, &self.progress())
    }

    /// A model call that failed for good. A refused key (HTTP 401/403) is `model_auth_failed`
    /// and says which connection to fix, and nothing else: not the provider's text (it may
    /// quote part of the key), and for the platform's model not its endpoint either.
    fn model_failed(&self, err: &LlmError) -> RunOutcome {
        if let LlmError::Auth { status, .. } = err {
            tracing::warn!(run_id = %self.input.run_id, connection = ?self.connection.as_ref().map(|c| c.as_str()), status, "the model provider refused the credentials");
            let msg = match &self.connection {
                Some(c) => format!(
                    "the model provider refused the API key of the model connection {:?} (HTTP {status}): check the key, and that it may use the model (PUT /api/v1/model-connections/{c})",
                    c.as_str()
                ),
                None => "the platform's model provider refused the platform's credentials; tell the platform operator, or give this assistant a model connection of your own".to_string(),
            };
            return self.fail(ErrorCode::ModelAuthFailed, msg);
        }
        if self.connection.is_none() && matches!(err, LlmError::Connect(_)) {
            // The reason names the platform's endpoint (reqwest quotes the URL): the operator's
            // log has it, the tenant does not.
            tracing::warn!(run_id = %self.input.run_id, error = %err, "the platform's model provider could not be reached");
            return self.fail(
                ErrorCode::ModelError,
                "the model call failed: could not reach the platform's model provider; try again later, or tell the platform operator".into(),
            );
        }
        self.fail(
            ErrorCode::ModelError,
            format!("the model call failed: {err}"),
        )
    }

    fn cancelled(&self) -> RunOutcome {
        RunOutcome::new(
            DoneStatus::Cancelled,
            Some("user_cancelled"),
            &self.progress(),
        )
    }

    /// Move the state machine; a move it refuses is a bug in the loop, and ends the run.
    fn go(&mut self, event: RunEvent) -> Step<()> {
        match transition(self.state, event) {
            Ok(next) => {
                self.state = next;
                Ok(())
            }
            Err(e) => {
                tracing::error!(run_id = %self.input.run_id, "{e}");
                Err(self.fail(ErrorCode::InternalError, format!("the run stopped: {e}")))
            }
        }
    }

    /// The run is over: a completed run got to `End` by its answer; any other stops here.
    fn stop(&mut self, outcome: &RunOutcome) {
        let legal = if outcome.status == DoneStatus::Completed {
            self.state == RunState::End
        } else {
            transition(self.state, RunEvent::Stopped)
                .map(|next| self.state = next)
                .is_ok()
        };
        if !legal {
            tracing::error!(run_id = %self.input.run_id, state = self.state.as_str(), status = ?outcome.status, "the run ended outside its state machine");
        }
    }

    /// A store failure ends the run: its record would otherwise be incomplete.
    fn store_failed(&self, what: &str, e: StoreError) -> RunOutcome {
        tracing::error!(error = %e, run_id = %self.input.run_id, "{what}");
        self.fail(
            ErrorCode::InternalError,
            format!(
                "could not record the run ({what}); it was stopped to keep its history consistent"
            ),
        )
    }

    async fn run(&mut self) -> Step<RunOutcome> {
        let model = match self.deps.models.model_for(
            &self.input.tenant,
            &self.input.assistant,
            &self.input.agent,
        ) {
            Ok(chosen) => {
                self.connection = chosen.connection;
                chosen.model
            }
            Err(refusal) => return Err(self.fail(refusal.code, refusal.message)),
        };
        let mut tools = self
            .deps
            .tools
            .tools_for(&ToolRequest {
                tenant: self.input.tenant.clone(),
                user_id: self.input.user_id,
                role: self.input.role,
                custom_role: self.input.custom_role,
                session_id: self.input.session_id,
                assistant: self.input.assistant.clone(),
                agent: self.input.agent.clone(),
                mcp: self.input.mcp.clone(),
            })
            .await;
        for w in &tools.warnings {
            self.sink.emit(EventPayload::error(
                ErrorCode::McpError.as_str(),
                w.clone(),
                true,
            ));
        }
        self.add_task_tool(&mut tools);
        self.add_client_tools(&mut tools);
        self.memory_on = tools.offered().any(|s| s.name == "recall");
        self.model = Some(model.clone());
        if tools.offered().any(|s| s.name == "load_skill") {
            self.skills = self.visible_skills().await;
        }

        let mut pending = match self.input.resume.take() {
            Some(cp) => {
                self.window_start = cp.window_start;
                self.todos = cp.todos.clone();
                self.update_progress(|p| {
                    p.usage = cp.usage;
                    p.steps = cp.step;
                });
                self.load_conversation(Some(cp.window_start)).await?;
                // A checkpoint is taken in `Reason` or `Act`; one taken while waiting for a
                // person resumes acting, and the person is asked again.
                self.state = match cp.node {
                    RunState::Reason => RunState::Reason,
                    RunState::Act | RunState::Approve => RunState::Act,
                    other => {
                        return Err(self.fail(
                            ErrorCode::InternalError,
                            format!(
                                "the run's checkpoint is in state {}, which a run does not resume from",
                                other.as_str()
                            ),
                        ));
                    }
                };
                let mut pending = cp.pending;
                if self.state == RunState::Reason
                    && let Some((text, calls)) = self.stored.last_answer.take()
                {
                    // The model answered after this checkpoint and its answer is stored: it is
                    // not asked (nor billed) again.
                    if calls.is_empty() {
                        return self.respond(text);
                    }
                    self.update_progress(|p| p.steps += 1);
                    self.go(RunEvent::ToolsCalled)?;
                    pending = calls;
                }
                if let Some(call) = cp.in_flight {
                    if self.stored.pending_functions.contains_key(&call.call.id)
                        && !self.stored.results.contains(&call.call.id)
                    {
                        // A client function call still waiting for its output: it ran nothing
                        // here, so it is made again (and asks under the same id).
                        pending.insert(0, call.call);
                    } else {
                        self.settle_interrupted(call, &pending).await?;
                    }
                }
                // A call whose result is stored ran (or was refused) before the crash.
                pending.retain(|c| !self.stored.results.contains(&c.id));
                pending
            }
            None => {
                self.load_conversation(None).await?;
                if !self.input.client_tools.is_empty() {
                    // A fresh run writes no checkpoint before its first model call; one with
                    // client tools does, so a restart during that call still offers them.
                    self.checkpoint(&[], None).await?;
                }
                Vec::new()
            }
        };
        if self.memory_on {
            self.memories = self.relevant_memories().await;
        }

        // A step (one model call and the tool calls it asked for) is a span of the run's trace.
        let mut step_span = tracing::Span::none();
        loop {
            match self.state {
                RunState::Reason => {
                    let limit = self.input.agent.recursion_limit.max(1);
                    if self.progress().steps >= limit {
                        return Err(self.fail(ErrorCode::RecursionLimit, format!(
                            "the run reached the assistant's recursion_limit of {limit} model calls without a final answer"
                        )));
                    }
                    // The previous step's rows go in with this checkpoint, before the model
                    // is called. A fresh run's first would repeat what its start stored.
                    if !self.recorder.nothing_to_write() {
                        self.checkpoint(&[], None).await?;
                    }
                    let step = self.progress().steps + 1;
                    step_span = tracing::info_span!(
                        "agent.step",
                        otel.name = %format!("step {step}"),
                        agentry.step = i64::from(step),
                    );
                    let answer = self
                        .reason(&model, &tools)
                        .instrument(step_span.clone())
                        .await?;
                    self.update_progress(|p| p.steps += 1);
                    if !answer.text.is_empty() || !answer.calls.is_empty() {
                        self.save(history::assistant_message(
                            self.input.run_id,
                            &answer.text,
                            &answer.calls,
                        ))
                        .await?;
                    }
                    self.conversation.push(ChatMessage::Assistant {
                        content: answer.text.clone(),
                        tool_calls: answer.calls.clone(),
                    });
                    if answer.calls.is_empty() {
                        return self.respond(answer.text);
                    }
                    self.plan_tasks(&answer.calls, &tools);
                    // The answer is written with the first checkpoint of acting on it (just
                    // before its first call runs, or before it waits for a person).
                    self.go(RunEvent::ToolsCalled)?;
                    pending = answer.calls;
                }
                RunState::Act => {
                    if pending.is_empty() {
                        self.go(RunEvent::CallsDone)?;
                        continue;
                    }
                    self.resume_at = pending.clone();
                    // The checkpoint before the call runs records it as started (see `act`).
                    let call = pending.remove(0);
                    let span = step_span.in_scope(|| tool_span(&call));
                    self.act(call, &tools, &pending).instrument(span).await?;
                }
                RunState::Approve | RunState::Respond | RunState::End => {
                    // `act` returns to `Act` (or ends the run); `respond` returns.
                    return Err(self.fail(
                        ErrorCode::InternalError,
                        format!(
                            "the run stopped: its loop found itself in state {}",
                            self.state.as_str()
                        ),
                    ));
                }
            }
        }
    }

    /// The `task` tool, bound to this run, when its assistant's tools admit it (its use is
    /// still subject to the role's permissions, like every tool's).
    fn add_task_tool(&mut self, tools: &mut ToolSet) {
        let spec = task::task_spec();
        if !crate::tools::assistant_allows(self.input.agent.tools.as_deref(), &spec)
            || tools.registry.contains(task::TASK_TOOL)
        {
            return;
        }
        let delegation = Arc::new(task::Delegation::new(
            self.deps.clone(),
            &self.input,
            self.sink.clone(),
            self.progress.clone(),
            &self.cancel,
        ));
        let Some(tool) = task::task_tool(delegation.clone()) else {
            return;
        };
        if let Err(e) = tools.registry.register_compiled(tool) {
            tracing::error!(error = %e, "the task tool was not registered");
            return;
        }
        self.stop_children = Some(delegation.cancel_token().drop_guard());
        self.delegation = Some(delegation);
    }

    /// The client's function tools, beside the assistant's: a call to one asks the client
    /// through the call's user interaction (`agentry_tools::client`). The role's permissions
    /// do not apply to them (they run on the client); a name the run's tools already have is
    /// left out with a warning (the Responses adapter refuses such a request before the run).
    fn add_client_tools(&mut self, tools: &mut ToolSet) {
        if self.input.client_tools.is_empty() {
            return;
        }
        let mut names = std::collections::HashSet::new();
        for def in &self.input.client_tools {
            let added = agentry_tools::client::ClientFunction::compile(def)
                .map_err(|e| e.to_string())
                .and_then(|t| {
                    tools
                        .registry
                        .register_compiled(t)
                        .map_err(|e| e.to_string())
                });
            match added {
                Ok(()) => {
                    names.insert(def.name.clone());
                }
                Err(e) => self.sink.emit(EventPayload::error(
                    ErrorCode::ValidationError.as_str(),
                    format!("the client tool {:?} was left out: {e}", def.name),
                    true,
                )),
            }
        }
        tools.policy = Arc::new(agentry_tools::client::WithClientTools {
            inner: tools.policy.clone(),
            names,
        });
    }

    /// A step's `task` calls: several start together now (see [`task::Delegation::plan`]), if
    /// each would pass the pipeline's checks without a person's approval.
    fn plan_tasks(&self, calls: &[ToolCall], tools: &ToolSet) {
        let Some(d) = &self.delegation else { return };
        let Some(tool) = tools.registry.get(task::TASK_TOOL) else {
            return;
        };
        let allowed = tools.policy.check(tool.spec()).is_ok();
        // Whether the pipeline would ask a person before this call (then it starts in turn).
        let asks = |args: &Value| {
            tool.needs_approval(args)
                || self
                    .input
                    .agent
                    .interrupt_on
                    .iter()
                    .any(|n| n == task::TASK_TOOL)
        };
        d.plan(calls, |call| {
            allowed
                && tools
                    .registry
                    .validate(task::TASK_TOOL, &call.arguments)
                    .is_ok()
                && (self.input.auto_approve || !asks(&call.arguments))
        });
    }

    /// `reason -> respond -> end`: the model's final answer. Its message goes into the run's
    /// end with the `done`.
    fn respond(&mut self, text: String) -> Step<RunOutcome> {
        self.go(RunEvent::Answered)?;
        self.answer = Some(text.clone());
        self.sink.emit(EventPayload::text(text, true));
        self.go(RunEvent::Responded)?;
        Ok(RunOutcome::new(
            DoneStatus::Completed,
            None,
            &self.progress(),
        ))
    }

    async fn load_conversation(&mut self, from_id: Option<i64>) -> Step<()> {
        let msgs = match from_id {
            // A `task` child's context is its own messages only (its task description first).
            _ if self.input.parent.is_some() => messages::of_run(
                &self.deps.db,
                &self.scope,
                self.input.session_id,
                self.input.run_id,
            )
            .await
            .map_err(|e| self.store_failed("loading the sub-task's conversation", e))?,
            Some(_) => {
                // Resume: everything from the window start (a run's own messages are bounded by
                // its recursion limit, so this stays small).
                let mut all = Vec::new();
                let mut offset = 0;
                loop {
                    let page = messages::list(
                        &self.deps.db,
                        &self.scope,
                        self.input.session_id,
                        agentry_store::PageRequest::new(
                            agentry_store::PageRequest::MAX_LIMIT,
                            offset,
                        ),
                    )
                    .await
                    .map_err(|e| self.store_failed("loading the conversation", e))?;
                    let n = page.len() as u64;
                    all.extend(page);
                    if n < agentry_store::PageRequest::MAX_LIMIT {
                        break;
                    }
                    offset += n;
                }
                let start = from_id.unwrap_or(0);
                all.retain(|m| m.id >= start);
                all
            }
            None => match self.input.history.take() {
                Some(window) => {
                    self.window_start = window.first().map(|m| m.id).unwrap_or(self.window_start);
                    self.conversation = history::to_chat(&window);
                    return Ok(());
                }
                None => messages::last_n(
                    &self.deps.db,
                    &self.scope,
                    self.input.session_id,
                    self.deps.config.history_window.max(1),
                )
                .await
                .map_err(|e| self.store_failed("loading the conversation", e))?,
            },
        };
        self.window_start = msgs.first().map(|m| m.id).unwrap_or(self.window_start);
        if from_id.is_some() {
            let run = Some(self.input.run_id);
            self.stored.results = msgs
                .iter()
                .filter(|m| m.role == agentry_store::messages::MessageRole::Tool && m.run_id == run)
                .filter_map(|m| m.tool_call_id.clone())
                .collect();
            self.stored.last_answer = msgs
                .last()
                .filter(|m| {
                    m.role == agentry_store::messages::MessageRole::Assistant && m.run_id == run
                })
                .map(|m| {
                    (
                        m.content.clone(),
                        history::parse_tool_calls(m.tool_calls.as_ref()),
                    )
                });
            let pending: Vec<_> =
                approvals::list_by_execution(&self.deps.db, &self.scope, self.input.run_id)
                    .await
                    .map_err(|e| self.store_failed("loading the run's approvals", e))?
                    .into_iter()
                    .filter(|a| a.status == ApprovalStatus::Pending)
                    .collect();
            let by_call = |keep: &dyn Fn(&approvals::Approval) -> bool| {
                pending
                    .iter()
                    .filter(|&a| keep(a))
                    .filter_map(|a| Some((a.tool_call_id.clone()?, a.id)))
                    .collect()
            };
            self.stored.pending_approvals = by_call(&|a| a.kind == "approval");
            self.stored.pending_functions = by_call(&|a| {
                a.kind == "question"
                    && a.request["question"]["question_type"]
                        == agentry_schema::events::FUNCTION_CALL_QUESTION
            });
        }
        self.conversation = history::to_chat(&msgs);
        Ok(())
    }

    /// A tool call the crash interrupted: if its result is not stored it is not run again. The
    /// model gets an `interrupted` result (with the progress it reported, if any) and decides
    /// itself; the audit records the call as interrupted.
    async fn settle_interrupted(&mut self, f: InFlight, pending: &[ToolCall]) -> Step<()> {
        if self.stored.results.contains(&f.call.id) {
            return Ok(());
        }
        let progress: Vec<String> = agentry_store::events::of_run_by_type(
            &self.deps.db,
            &self.scope,
            self.input.run_id,
            "progress",
            1000,
        )
        .await
        .unwrap_or_default()
        .into_iter()
        .filter_map(|e| match e.payload {
            EventPayload::Progress(p) if p.tool_call_id == f.call.id => p.message,
            _ => None,
        })
        .collect();
        let mut content = json!({"error": {"code": "interrupted", "message": INTERRUPTED_MESSAGE}});
        if !progress.is_empty() {
            content["partial_output"] = json!(progress.join("\n"));
        }
        self.sink.emit(EventPayload::ToolResult(ToolResultData {
            tool_call_id: f.call.id.clone(),
            result: content.clone(),
            status: ToolStatus::Error,
        }));
        self.sink.emit(EventPayload::error(
            ErrorCode::ToolError.as_str(),
            format!(
                "the call {} ({}) was interrupted: {INTERRUPTED_MESSAGE}",
                f.call.name, f.call.id
            ),
            true,
        ));
        let text = content.to_string();
        self.save(history::tool_message(
            self.input.run_id,
            &f.call,
            &text,
            true,
        ))
        .await?;
        self.stored.results.insert(f.call.id.clone());
        self.audit(
            &f.call,
            &f.args,
            (!progress.is_empty()).then(|| json!({"partial_output": progress.join("\n")})),
            Some(format!("interrupted: {INTERRUPTED_MESSAGE}")),
            0,
            f.approved,
            f.approved_by,
        )
        .await?;
        // Written now, and reloaded, so the conversation holds the stored result in its place.
        self.checkpoint(pending, None).await?;
        let from = self.window_start;
        let keep = std::mem::take(&mut self.stored);
        self.load_conversation(Some(from)).await?;
        self.stored.results.extend(keep.results);
        Ok(())
    }

    /// A message of the current step: written with the step (see [`RunRecorder`]).
    async fn save(&mut self, m: agentry_store::messages::NewMessage) -> Step<()> {
        self.recorder.message(m);
        Ok(())
    }

    /// Write the step: its waiting rows with a checkpoint of where the run is, in one
    /// transaction. `pending` are the calls still to run, `in_flight` the one about to.
    async fn checkpoint(&mut self, pending: &[ToolCall], in_flight: Option<InFlight>) -> Step<()> {
        let p = self.progress();
        let cp = RunCheckpoint {
            version: CHECKPOINT_VERSION,
            step: p.steps,
            node: self.state,
            window_start: self.window_start,
            pending: pending.to_vec(),
            todos: self.todos.clone(),
            usage: p.usage,
            in_flight,
            trace_parent: self.trace_parent.clone(),
            client_tools: self.input.client_tools.clone(),
        };
        match self.recorder.commit_step(&cp).await {
            Ok(()) => Ok(()),
            Err(e) => Err(self.store_failed("writing a step of the run", e)),
        }
    }

    /// Call the model; stream its text as `text` events. A stream that breaks mid-way is
    /// retried up to the assistant's `max_retries` with `base_delay * 2^n`.
    async fn reason(&mut self, model: &Arc<dyn ChatModel>, tools: &ToolSet) -> Step<ModelAnswer> {
        // The conversation goes into the request and comes back after the call (not a copy of
        // it per call: it is the model request's largest part).
        let mut request = ChatRequest {
            system: Some(self.system_prompt(tools)),
            messages: std::mem::take(&mut self.conversation),
            tools: tools
                .offered()
                .map(|s| ToolSchema {
                    name: s.name.clone(),
                    description: s.description.clone(),
                    parameters: s.input_schema.clone(),
                })
                .collect(),
            temperature: None,
            max_tokens: None,
        };
        let answer = self.call_with_retries(model, &request).await;
        self.conversation = std::mem::take(&mut request.messages);
        answer
    }

    /// [`Agent::reason`]'s calls: the first, and the retries of a stream that broke off.
    async fn call_with_retries(
        &mut self,
        model: &Arc<dyn ChatModel>,
        request: &ChatRequest,
    ) -> Step<ModelAnswer> {
        let max_retries = self.input.agent.max_retries;
        let mut attempt = 0u32;
        loop {
            // Every attempt is a model call: it reserves its tokens before, and settles the
            // reservation with what it really used after (a cancelled call, with nothing).
            let reservation = self.reserve_tokens(request).await?;
            let before = self.progress().usage.total;
            let called = self.call_model(model, request).await;
            let used = self.progress().usage.total.saturating_sub(before);
            match reservation {
                Some(r) => r.settle(used),
                None => self.input.quota.count_tokens(used),
            }
            match called? {
                Ok(answer) => return Ok(answer),
                Err((err, mid_stream)) => {
                    let retry = mid_stream && err.is_retryable() && attempt < max_retries;
                    if !retry {
                        return Err(self.model_failed(&err));
                    }
                    let delay = agentry_llm::retry_delay(&self.retry_policy(), attempt, None);
                    self.sink.emit(EventPayload::error(
                        ErrorCode::ModelError.as_str(),
                        format!(
                            "the model's answer broke off ({err}); retrying in {} ms",
                            delay.as_millis()
                        ),
                        true,
                    ));
                    tokio::select! {
                        biased;
                        _ = self.cancel.cancelled() => return Err(self.cancelled()),
                        _ = tokio::time::sleep(delay) => {}
                    }
                    attempt += 1;
                }
            }
        }
    }

    /// Reserve the tokens of the next model call against the tenant's daily budget: the
    /// prompt's estimate plus the answer's (`max_tokens`, or the configured
    /// `reserve_output_tokens`). A tenant without a budget reserves nothing (its calls are
    /// still counted after they end). A budget that is spent ends the run, `failed` with
    /// `quota_exceeded`; a quota store that does not answer (Redis down) does not.
    async fn reserve_tokens(
        &self,
        request: &ChatRequest,
    ) -> Step<Option<crate::quota::TokenReservation>> {
        if self.input.tenant.quotas.tokens_per_day == 0 {
            return Ok(None);
        }
        let output = request
            .max_tokens
            .map_or(self.deps.config.reserve_output_tokens, u64::from);
        let estimate = agentry_llm::estimate_prompt_tokens(request).saturating_add(output);
        let reserved = tokio::select! {
            biased;
            _ = self.cancel.cancelled() => return Err(self.cancelled()),
            r = self.input.quota.reserve_tokens(estimate) => r,
        };
        match reserved {
            Ok(r) => Ok(Some(r)),
            // Runs already going finish while Redis is down (DESIGN §10): only new work is
            // refused. This call goes on unreserved; its usage is counted if Redis takes it.
            Err(crate::quota::QuotaError::Coordination(cause)) => {
                tracing::warn!(run_id = %self.input.run_id, error = %cause, "tokens_per_day not reserved (Redis does not answer); the run goes on");
                Ok(None)
            }
            Err(e) => {
                let e = crate::error::EngineError::from(e);
                let code = e.code();
                self.sink.emit(EventPayload::error_with_details(
                    code.as_str(),
                    e.to_string(),
                    false,
                    e.details(),
                ));
                Err(RunOutcome::failed(code, e.to_string(), &self.progress()))
            }
        }
    }

    /// One model call. `Ok(Err((e, mid_stream)))` is a model failure, with whether the response
    /// had already started (the client retries failures before that itself). Timed and counted
    /// in the metrics.
    async fn call_model(
        &mut self,
        model: &Arc<dyn ChatModel>,
        request: &ChatRequest,
    ) -> Step<Result<ModelAnswer, (LlmError, bool)>> {
        let started = Instant::now();
        // GenAI semantic conventions; usage and finish reason are recorded as the answer ends.
        let span = tracing::info_span!(
            "gen_ai.chat",
            otel.name = %format!("chat {}", model.model()),
            otel.kind = "client",
            otel.status_code = tracing::field::Empty,
            gen_ai.operation.name = "chat",
            gen_ai.system = model.provider(),
            gen_ai.request.model = model.model(),
            gen_ai.usage.input_tokens = tracing::field::Empty,
            gen_ai.usage.output_tokens = tracing::field::Empty,
            gen_ai.response.finish_reasons = tracing::field::Empty,
            error.type = tracing::field::Empty,
        );
        let result = self
            .stream_model(model, request)
            .instrument(span.clone())
            .await;
        let (outcome, error) = match &result {
            Ok(Ok(_)) => ("ok", None),
            Ok(Err((e, _))) => ("error", Some(crate::metrics::model_error_kind(e))),
            Err(_) => ("cancelled", None),
        };
        if let Some(kind) = error {
            span.record("error.type", kind);
            span.record("otel.status_code", "ERROR");
        }
        crate::metrics::record_model_call(
            model.provider(),
            model.model(),
            started.elapsed(),
            outcome,
            error,
        );
        result
    }

    async fn stream_model(
        &mut self,
        model: &Arc<dyn ChatModel>,
        request: &ChatRequest,
    ) -> Step<Result<ModelAnswer, (LlmError, bool)>> {
        let started = tokio::select! {
            biased;
            _ = self.cancel.cancelled() => return Err(self.cancelled()),
            s = model.stream(request) => s,
        };
        let mut stream = match started {
            Ok(s) => s,
            Err(e) => return Ok(Err((e, false))),
        };
        let mut text = String::new();
        let mut calls = Vec::new();
        let mut usage = TokenUsage::default();
        let mut finish = None;
        loop {
            let item = tokio::select! {
                biased;
                _ = self.cancel.cancelled() => return Err(self.cancelled()),
                item = stream.next() => item,
            };
            match item {
                None => break,
                Some(Ok(StreamEvent::Done(reason))) => {
                    finish = Some(reason);
                    break;
                }
                Some(Ok(StreamEvent::TextDelta(d))) => {
                    if !d.is_empty() {
                        text.push_str(&d);
                        self.sink.emit(EventPayload::text(d, false));
                    }
                }
                Some(Ok(StreamEvent::ToolCall(c))) => {
                    calls.push(c);
                }
                Some(Ok(StreamEvent::Usage(u))) => usage = u,
                Some(Err(e)) => {
                    self.update_progress(|p| p.usage.add(usage));
                    // The response had started: the client does not retry that, the loop may.
                    return Ok(Err((e, true)));
                }
            }
        }
        self.update_progress(|p| p.usage.add(usage));
        let span = tracing::Span::current();
        // As i64: tracing-opentelemetry would turn a u64 into a string attribute.
        let int = |n: u64| i64::try_from(n).unwrap_or(i64::MAX);
        span.record("gen_ai.usage.input_tokens", int(usage.input));
        span.record("gen_ai.usage.output_tokens", int(usage.output));
        if let Some(reason) = finish {
            span.record("gen_ai.response.finish_reasons", finish_reason(reason));
        }
        Ok(Ok(ModelAnswer { text, calls }))
    }

    /// The profile's (or the assistant's own) template filled in, then what the run knows of
    /// the user: memories and the current todo list.
    fn system_prompt(&self, tools: &ToolSet) -> String {
        let offered: Vec<&str> = tools.offered().map(|s| s.name.as_str()).collect();
        let mut prompt = crate::profiles::render_prompt(
            &self.input.agent.system_prompt,
            &crate::profiles::PromptVars {
                assistant_name: &self.input.assistant.spec.name,
                tools: &offered,
            },
        );
        if !self.memories.is_empty() {
            prompt.push_str(
                "\n\nWhat you remember that bears on this message (use `recall` for more):\n",
            );
            for m in &self.memories {
                prompt.push_str(&format!("- {m}\n"));
            }
        }
        if !self.skills.is_empty() {
            prompt.push_str(
                "\n\nSkills you can load: when a task matches one, call `load_skill` with its name \
                 first and follow the instructions it returns (`read_skill_file` reads its other \
                 files; run a skill's scripts only with `execute`).\n",
            );
            for (name, description) in &self.skills {
                prompt.push_str(&format!("- {name}: {description}\n"));
            }
        }
        if !self.todos.is_empty() {
            prompt.push_str("\n\nCurrent todo list:\n");
            for t in &self.todos {
                prompt.push_str(&format!("- [{:?}] {}\n", t.status, t.content));
            }
        }
        prompt
    }

    /// Who the run is, for long-term memory.
    fn memory_who(&self) -> agentry_builtin::memory::Who {
        agentry_builtin::memory::Who {
            tenant: self.scope,
            user_id: self.input.user_id,
            assistant_id: Some(self.input.assistant.id.to_string()),
            admin: self.input.role == agentry_schema::tenancy::Role::Admin,
        }
    }

    /// The message the run answers: the last user message of its conversation.
    fn current_message(&self) -> Option<&str> {
        self.conversation.iter().rev().find_map(|m| match m {
            ChatMessage::User { content } => Some(content.as_str()),
            _ => None,
        })
    }

    /// The `memory.top_k` memories the run sees that are most relevant to its message (not the
    /// most recent), as prompt lines.
    async fn relevant_memories(&self) -> Vec<String> {
        let (Some(bank), Some(message)) = (&self.deps.memory, self.current_message()) else {
            return Vec::new();
        };
        bank.relevant(&self.memory_who(), message, bank.config().top_k)
            .await
            .into_iter()
            .map(|m| match m.scope {
                agentry_schema::memory::MemoryScope::User => {
                    format!("[{}] {}", m.kind, m.content.replace('\n', " "))
                }
                shared => format!(
                    "[{}, {} knowledge] {}",
                    m.kind,
                    shared,
                    m.content.replace('\n', " ")
                ),
            })
            .collect()
    }

    /// `memory.auto_extract`: after a completed run, the model proposes facts from the
    /// exchange and the bank stores them (merging what it already knows). In the background:
    /// the run's answer does not wait for it, and a failure only logs.
    fn extract_memories(&self) {
        let Some(bank) = self.deps.memory.clone() else {
            return;
        };
        if !bank.config().auto_extract || !self.memory_on {
            return;
        }
        let (Some(model), Some(answer), Some(message)) = (
            self.model.clone(),
            self.answer.clone(),
            self.current_message(),
        ) else {
            return;
        };
        let message = message.to_string();
        let who = self.memory_who();
        let source = agentry_builtin::memory::Fact {
            source_session_id: Some(self.input.session_id),
            source_run_id: Some(self.input.run_id),
            ..agentry_builtin::memory::Fact::new("")
        };
        let quota = self.input.quota.clone();
        // Reserved like any model call of the run: a tenant whose daily tokens are spent gets
        // no extraction (the run itself is already answered).
        let budgeted = self.input.tenant.quotas.tokens_per_day > 0;
        let estimate = agentry_llm::estimate_prompt_tokens(
            &agentry_builtin::memory::extract::extraction_request(&message, &answer),
        )
        .saturating_add(self.deps.config.reserve_output_tokens);
        let span = tracing::info_span!("memory.extract", run_id = %self.input.run_id);
        self.deps.runtime.spawn(tracing::Instrument::instrument(
            async move {
                let reservation = if budgeted {
                    match quota.reserve_tokens(estimate).await {
                        Ok(r) => Some(r),
                        Err(crate::quota::QuotaError::Coordination(cause)) => {
                            tracing::warn!(error = %cause, "tokens for memory extraction not reserved (Redis does not answer); extracting anyway");
                            None
                        }
                        Err(e) => {
                            tracing::info!(error = %e, "memory extraction skipped: the tenant's daily tokens are spent");
                            return;
                        }
                    }
                } else {
                    None
                };
                match agentry_builtin::memory::extract::extract_and_remember(
                    &bank, &*model, &who, source, &message, &answer,
                )
                .await
                {
                    Ok(done) => {
                        let merged = done.stored.iter().filter(|r| r.merged).count();
                        tracing::info!(
                            stored = done.stored.len() - merged,
                            merged,
                            "memories extracted from the run"
                        );
                        // Counted against the tenant's daily tokens (not the run's usage).
                        let used = done.usage.input + done.usage.output;
                        match reservation {
                            Some(r) => r.settle(used),
                            None => quota.count_tokens(used),
                        }
                    }
                    // A failed call used nothing it reported: the reservation drops to 0.
                    Err(e) => tracing::warn!(error = %e, "extracting memories from the run failed"),
                }
            },
            span,
        ));
    }

    /// The skills this run lists in its prompt: the tenant's and the user's own, narrowed by
    /// the assistant's `skills` (none: no query at all). Skills are context, not a
    /// requirement: a failed read only leaves them out.
    async fn visible_skills(&self) -> Vec<(String, String)> {
        let selection = self.input.assistant.spec.skills.as_deref();
        if selection.is_some_and(|s| s.is_empty()) {
            return Vec::new();
        }
        match agentry_store::skills::list_visible(&self.deps.db, &self.scope, self.input.user_id)
            .await
        {
            Ok(all) => all
                .into_iter()
                .filter(|s| agentry_builtin::skills::admits(selection, s.name.as_str()))
                .take(MAX_LISTED_SKILLS)
                .map(|s| (s.name.to_string(), s.description.replace('\n', " ")))
                .collect(),
            Err(e) => {
                tracing::warn!(error = %e, "listing the skills for the prompt failed; none are listed");
                Vec::new()
            }
        }
    }

    /// Run one tool call through the tool-call pipeline ([`pipeline::run_call`]: policy,
    /// schema, approval as a `hitl_request`, the call on a paused clock with retries, audit,
    /// events). `rest` are the calls after it: the checkpoint written just before the call runs
    /// records it as started, so a crash during it never runs it again (at most once). A
    /// refused approval ends the run.
    async fn act(&mut self, call: ToolCall, tools: &ToolSet, rest: &[ToolCall]) -> Step<()> {
        let request = CallRequest {
            id: call.id.clone(),
            name: call.name.clone(),
            arguments: call.arguments.clone(),
        };
        let mut host = LoopCall {
            agent: self,
            tools,
            rest,
            call: &call,
        };
        let finished = pipeline::run_call(&mut host, &tools.registry, request).await?;
        let Outcome::Refused(refusal) = finished.outcome else {
            return Ok(());
        };
        let reason = match refusal.kind {
            RefusalKind::TimedOut => {
                let secs = self.deps.config.hitl_timeout.as_secs();
                self.sink.emit(EventPayload::error(
                    ErrorCode::Timeout.as_str(),
                    format!("no decision on the approval within {secs} s; it counts as a reject"),
                    false,
                ));
                "hitl_timeout"
            }
            RefusalKind::Rejected | RefusalKind::Unanswerable => "rejected",
        };
        Err(RunOutcome::new(
            DoneStatus::Rejected,
            Some(reason),
            &self.progress(),
        ))
    }

    /// Ask for approval with a `hitl_request` and wait for the decision (the run's clock
    /// stands still meanwhile). A cancel ends the run.
    async fn approve(&mut self, call: &ToolCall, tool: &dyn Tool, args: &Value) -> Step<Approval> {
        // A request this run left pending before it was resumed is asked again, same id.
        let reused = self.stored.pending_approvals.remove(&call.id);
        let id = reused.unwrap_or_default();
        self.asked_human.store(true, Ordering::Relaxed);
        let data = HitlRequestData {
            request_id: id.to_string(),
            kind: HitlKind::Approval,
            action_requests: vec![ActionRequest {
                name: call.name.clone(),
                args: args.clone(),
                description: describe(tool, args),
                tool_call_id: Some(call.id.clone()),
            }],
            question: None,
        };
        if reused.is_none() {
            create_approval(
                &self.deps.writer,
                self.scope,
                NewApproval {
                    id,
                    session_id: self.input.session_id,
                    execution_id: self.input.run_id,
                    kind: "approval".into(),
                    tool_call_id: Some(call.id.clone()),
                    request: request_with_usage(&data, self.progress().usage),
                },
            )
            .await
            .map_err(|e| self.store_failed("recording the approval request", e))?;
        }
        self.go(RunEvent::ApprovalNeeded)?;
        self.set_waiting(true).await?;
        let wait = tracing::info_span!(
            "agentry.approval.wait",
            otel.name = %format!("approval {}", call.name),
            agentry.approval.id = %id,
            agentry.approval.outcome = tracing::field::Empty,
        );
        let outcome = {
            let _paused = self.run_clock.pause();
            self.sink
                .ask_human(HumanRequest {
                    id,
                    data,
                    timeout: self.deps.config.hitl_timeout,
                })
                .instrument(wait.clone())
                .await
        };
        let (status, decision_json, by) = match &outcome {
            HumanOutcome::Decided { decision, by } => (
                match decision {
                    Decision::Approve { .. } => ApprovalStatus::Approved,
                    Decision::Edit { .. } => ApprovalStatus::Edited,
                    Decision::Reject { .. } => ApprovalStatus::Rejected,
                    Decision::Answer { .. } => ApprovalStatus::Answered,
                },
                serde_json::to_value(decision).ok(),
                *by,
            ),
            HumanOutcome::TimedOut => (ApprovalStatus::TimedOut, None, None),
            HumanOutcome::Cancelled => (ApprovalStatus::Cancelled, None, None),
        };
        wait.record("agentry.approval.outcome", status.as_str());
        // Written with the step that follows: with the call's `in_flight` checkpoint before it
        // runs (approved), or with the run's end (refused).
        self.recorder.decided(approvals::ApprovalDecision {
            id,
            status,
            decision: decision_json,
            decided_by: by,
        });
        match outcome {
            HumanOutcome::Decided {
                decision: Decision::Approve { .. },
                by,
            } => {
                self.go(RunEvent::Approved)?;
                self.set_waiting(false).await?;
                Ok(Approval::Approved { args: None, by })
            }
            HumanOutcome::Decided {
                decision: Decision::Edit { args, .. },
                by,
            } => {
                self.go(RunEvent::Approved)?;
                self.set_waiting(false).await?;
                Ok(Approval::Approved {
                    args: Some(args),
                    by,
                })
            }
            HumanOutcome::Decided {
                decision: Decision::Reject { message },
                by,
            } => {
                let reason = message.filter(|m| !m.trim().is_empty());
                Ok(Approval::Refused {
                    refusal: Refusal {
                        kind: RefusalKind::Rejected,
                        message: match &reason {
                            Some(m) => format!("the user rejected this call: {m}"),
                            None => "the user rejected this call".to_string(),
                        },
                        audit: "rejected by the user".into(),
                    },
                    by,
                })
            }
            // HitlApproval refuses answers to approvals; a stray one counts as a reject.
            HumanOutcome::Decided {
                decision: Decision::Answer { .. },
                ..
            } => Ok(Approval::Refused {
                refusal: Refusal {
                    kind: RefusalKind::Rejected,
                    message: "no approval was given".into(),
                    audit: "no approval given".into(),
                },
                by: None,
            }),
            HumanOutcome::TimedOut => {
                let secs = self.deps.config.hitl_timeout.as_secs();
                Ok(Approval::Refused {
                    refusal: Refusal {
                        kind: RefusalKind::TimedOut,
                        message: format!("no decision within {secs} s; the call was rejected"),
                        audit: "approval timed out".into(),
                    },
                    by: None,
                })
            }
            HumanOutcome::Cancelled => Err(self.cancelled()),
        }
    }

    /// The run waits for a person: the step so far is written with the status, before the
    /// wait (a crash asks again). Going on again is written with the next step.
    async fn set_waiting(&mut self, waiting: bool) -> Step<()> {
        self.recorder.set_waiting(waiting);
        if waiting {
            let pending = self.resume_at.clone();
            self.checkpoint(&pending, None).await?;
        }
        Ok(())
    }

    /// What a call may know about where it runs. Its questions to the user stop the run's
    /// clock here, and the call's own clock in the pipeline.
    fn tool_context(&self, call: &ToolCall) -> ToolContext {
        ToolContext {
            tenant_id: self.input.tenant.id,
            user_id: self.input.user_id,
            role: self.input.role,
            custom_role: self.input.custom_role,
            session_id: self.input.session_id,
            run_id: self.input.run_id,
            tool_call_id: call.id.clone(),
            assistant_id: Some(self.input.assistant.id.to_string()),
            workspace: WorkspaceInfo {
                root: self
                    .deps
                    .workspace_root(&self.input.tenant, self.input.user_id),
                quota_bytes: self.input.tenant.quotas.workspace_quota_bytes,
                sandbox: (&self.input.tenant.policy().sandbox).into(),
            },
            cancel: self.cancel.child_token(),
            interaction: Arc::new(LoopInteraction {
                deps: self.deps.clone(),
                scope: self.scope,
                session_id: self.input.session_id,
                run_id: self.input.run_id,
                tool_call_id: call.id.clone(),
                reuse: self.stored.pending_functions.get(&call.id).copied(),
                progress: self.progress.clone(),
                sink: self.sink.clone(),
                run_clock: self.run_clock.clone(),
                asked_human: self.asked_human.clone(),
            }),
            events: Arc::new(SinkEvents(self.sink.clone())),
        }
    }

    /// The finished call's history and audit: its tool message (and its place in the
    /// conversation) and its audit row, written with the step (see [`RunRecorder`]).
    async fn record_call(&mut self, call: &ToolCall, done: &FinishedCall) -> Step<()> {
        let (content, is_error, error_text, duration) = match &done.outcome {
            Outcome::Refused(refusal) => {
                // The run ends here; the result still goes into the history so the
                // conversation stays valid for the next run.
                let text = refusal.content().to_string();
                self.save(history::tool_message(self.input.run_id, call, &text, true))
                    .await?;
                return self
                    .audit(
                        call,
                        &done.args,
                        None,
                        Some(refusal.audit.clone()),
                        0,
                        done.approved,
                        done.approved_by,
                    )
                    .await;
            }
            Outcome::Result(Ok(out)) => (
                out.content.clone(),
                out.is_error,
                out.is_error.then(|| out.content.to_string()),
                done.duration,
            ),
            Outcome::Result(Err(e)) => {
                (e.to_model_json(), true, Some(e.to_string()), done.duration)
            }
        };
        // Images go to the model with the result (not stored: a resumed run has the text).
        let images: Vec<agentry_llm::ImagePart> = match &done.outcome {
            Outcome::Result(Ok(out)) => out
                .images
                .iter()
                .map(|i| agentry_llm::ImagePart {
                    mime_type: i.mime_type.clone(),
                    data: i.data.clone(),
                })
                .collect(),
            _ => Vec::new(),
        };
        let text = match &content {
            Value::String(s) => s.clone(),
            other => other.to_string(),
        };
        self.save(history::tool_message(
            self.input.run_id,
            call,
            &text,
            is_error,
        ))
        .await?;
        self.conversation.push(ChatMessage::Tool {
            images,
            tool_call_id: call.id.clone(),
            name: call.name.clone(),
            content: text,
            is_error,
        });
        let output = (!is_error || error_text.is_none()).then_some(content);
        let duration_ms = u64::try_from(duration.as_millis()).unwrap_or(u64::MAX);
        self.audit(
            call,
            &done.args,
            output,
            error_text,
            duration_ms,
            done.approved,
            done.approved_by,
        )
        .await
    }

    /// The finished call's events: `tool_result`, an `error` when there is no result (DESIGN
    /// §4: errors become `error` events), then the tool's own (`file_operation`,
    /// `todo_update`).
    fn emit_call(&mut self, call: &ToolCall, done: &FinishedCall) {
        let result = match &done.outcome {
            Outcome::Refused(refusal) => {
                self.sink.emit(EventPayload::ToolResult(ToolResultData {
                    tool_call_id: call.id.clone(),
                    result: refusal.content(),
                    status: ToolStatus::Error,
                }));
                return;
            }
            Outcome::Result(result) => result,
        };
        crate::metrics::record_tool_call(&call.name, done.outcome_label(), done.duration);
        let (content, is_error) = match result {
            Ok(out) => (shown_to_clients(out), out.is_error),
            Err(e) => (e.to_model_json(), true),
        };
        self.sink.emit(EventPayload::ToolResult(ToolResultData {
            tool_call_id: call.id.clone(),
            result: content,
            status: if is_error {
                ToolStatus::Error
            } else {
                ToolStatus::Success
            },
        }));
        match result {
            Err(e) => {
                // A tool that ran and reported failure in its result (a non-zero exit, an HTTP
                // 404) is not this: its `tool_result` already says so. Recoverable: the model
                // reads the error and the run goes on.
                self.sink.emit(EventPayload::error(
                    e.code().as_str(),
                    format!("the call {} ({}) failed: {e}", call.name, call.id),
                    true,
                ));
            }
            Ok(out) => {
                for ev in &out.events {
                    if let EventPayload::TodoUpdate(t) = ev {
                        self.todos = t.todos.clone();
                    }
                    self.sink.emit(ev.clone());
                }
            }
        }
    }

    /// The call's audit row: written with the step (see [`RunRecorder`]).
    #[allow(clippy::too_many_arguments)]
    async fn audit(
        &mut self,
        call: &ToolCall,
        args: &Value,
        output: Option<Value>,
        error: Option<String>,
        duration_ms: u64,
        approved: Option<bool>,
        approved_by: Option<UserId>,
    ) -> Step<()> {
        self.recorder.audit(NewToolCallLog {
            session_id: self.input.session_id,
            execution_id: self.input.run_id,
            tool_call_id: call.id.clone(),
            tool_name: call.name.clone(),
            input: args.clone(),
            output,
            error,
            duration_ms,
            approved,
            approved_by,
        });
        Ok(())
    }
}

/// The agent loop as the pipeline's host: approvals are `hitl_request`s, the call is recorded
/// as started in a checkpoint before it runs, a cancel ends the run, and the finished call goes
/// into the history, the audit and the event stream.
struct LoopCall<'a> {
    agent: &'a mut Agent,
    tools: &'a ToolSet,
    /// The calls of the answer after this one: what the checkpoint before the call names.
    rest: &'a [ToolCall],
    call: &'a ToolCall,
}

#[async_trait]
impl CallHost for LoopCall<'_> {
    type Stop = RunOutcome;

    fn started(&mut self, call: &CallRequest) {
        self.agent.sink.emit(EventPayload::ToolCall(ToolCallData {
            tool_name: call.name.clone(),
            tool_args: call.arguments.clone(),
            tool_call_id: call.id.clone(),
        }));
    }

    fn policy(&self) -> &dyn ToolPolicy {
        self.tools.policy.as_ref()
    }

    fn approval_required(&self, tool: &dyn Tool, call: &CallRequest, args: &Value) -> bool {
        let input = &self.agent.input;
        !input.auto_approve
            && (tool.needs_approval(args)
                || input.agent.interrupt_on.iter().any(|n| n == &call.name))
    }

    async fn approve(
        &mut self,
        tool: &dyn Tool,
        _call: &CallRequest,
        args: &Value,
    ) -> Step<Approval> {
        self.agent.approve(self.call, tool, args).await
    }

    async fn before_call(
        &mut self,
        _call: &CallRequest,
        args: &Value,
        approved: Option<bool>,
        approved_by: Option<UserId>,
    ) -> Step<()> {
        self.agent
            .checkpoint(
                self.rest,
                Some(InFlight {
                    call: self.call.clone(),
                    args: args.clone(),
                    approved,
                    approved_by,
                }),
            )
            .await
    }

    async fn context(
        &mut self,
        _spec: &ToolSpec,
        _call: &CallRequest,
    ) -> Result<ToolContext, ToolError> {
        Ok(self.agent.tool_context(self.call))
    }

    /// Paced like every retry of the run (the configured `base_delay * 2^n`), at most the
    /// assistant's `max_retries` times.
    fn retry_delay(&self, attempt: u32) -> Option<Duration> {
        (attempt < self.agent.input.agent.max_retries)
            .then(|| agentry_llm::retry_delay(&self.agent.retry_policy(), attempt, None))
    }

    fn cancelled(&mut self) -> Step<Duration> {
        Err(self.agent.cancelled())
    }

    async fn audit(&mut self, done: &FinishedCall) -> Step<()> {
        self.agent.record_call(self.call, done).await
    }

    fn emit(&mut self, done: &FinishedCall) {
        self.agent.emit_call(self.call, done);
    }
}

/// A one-line, human-readable summary of a call for the approval prompt.
/// The span of one tool call (GenAI `execute_tool`); service, approval and outcome are recorded
/// as the call goes.
fn tool_span(call: &ToolCall) -> tracing::Span {
    tracing::info_span!(
        "gen_ai.execute_tool",
        otel.name = %format!("execute_tool {}", call.name),
        gen_ai.operation.name = "execute_tool",
        gen_ai.tool.name = %call.name,
        gen_ai.tool.call.id = %call.id,
        agentry.tool.service = tracing::field::Empty,
        agentry.tool.approved = tracing::field::Empty,
        agentry.tool.outcome = tracing::field::Empty,
    )
}

/// The finish reason as the GenAI conventions (and OpenAI) name it.
fn finish_reason(reason: agentry_llm::StopReason) -> &'static str {
    match reason {
        agentry_llm::StopReason::EndTurn => "stop",
        agentry_llm::StopReason::ToolUse => "tool_calls",
        agentry_llm::StopReason::MaxTokens => "length",
        agentry_llm::StopReason::Other => "other",
    }
}

fn describe(tool: &dyn Tool, args: &Value) -> String {
    let spec = tool.spec();
    let first = spec.description.lines().next().unwrap_or_default().trim();
    let mut preview = args.to_string();
    if preview.len() > 300 {
        preview.truncate(preview.floor_char_boundary(300));
        preview.push('…');
    }
    if first.is_empty() {
        format!("{} with {preview}", spec.name)
    } else {
        format!("{} ({first}) with {preview}", spec.name)
    }
}

/// Tool events (progress) go straight to the session.
struct SinkEvents(Arc<dyn RunSink>);

impl EventSink for SinkEvents {
    fn emit(&self, payload: EventPayload) {
        self.0.emit(payload);
    }
}

/// Questions from tools (the user-interaction tools, MCP elicitation) become `hitl_request`s of
/// kind `question`.
struct LoopInteraction {
    deps: Arc<EngineDeps>,
    scope: TenantScope,
    session_id: SessionId,
    run_id: RunId,
    tool_call_id: String,
    /// The id of the question this call left pending before the run was resumed (a client
    /// function call's): asked again under it, not stored anew.
    reuse: Option<ApprovalId>,
    /// The run's usage so far, stored with the question (a Responses client reads it).
    progress: SharedProgress,
    sink: Arc<dyn RunSink>,
    /// The run's timeout clock: it stands still until the user has answered (the call's own
    /// clock is stopped by the pipeline).
    run_clock: Arc<PauseClock>,
    /// The run's "opened an approval or a question" flag.
    asked_human: Arc<AtomicBool>,
}

#[async_trait]
impl UserInteraction for LoopInteraction {
    async fn ask(&self, question: Question) -> Result<Value, InteractionError> {
        let _paused = self.run_clock.pause();
        let id = self.reuse.unwrap_or_default();
        self.asked_human.store(true, Ordering::Relaxed);
        let timeout = if question.timeout == 0 {
            self.deps.config.hitl_timeout
        } else {
            Duration::from_secs(question.timeout)
        };
        let data = HitlRequestData {
            request_id: id.to_string(),
            kind: HitlKind::Question,
            action_requests: Vec::new(),
            question: Some(Question {
                timeout: timeout.as_secs(),
                ..question
            }),
        };
        if self.reuse.is_none() {
            create_approval(
                &self.deps.writer,
                self.scope,
                NewApproval {
                    id,
                    session_id: self.session_id,
                    execution_id: self.run_id,
                    kind: "question".into(),
                    tool_call_id: Some(self.tool_call_id.clone()),
                    request: request_with_usage(&data, read(&self.progress).usage),
                },
            )
            .await
            .map_err(|e| InteractionError::Unavailable(e.to_string()))?;
        }
        let outcome = self
            .sink
            .ask_human(HumanRequest { id, data, timeout })
            .await;
        let (status, decision, by, result) = match outcome {
            HumanOutcome::Decided {
                decision: Decision::Answer { answer },
                by,
            } => (
                ApprovalStatus::Answered,
                Some(json!({"type": "answer", "answer": answer.clone()})),
                by,
                Ok(answer),
            ),
            HumanOutcome::Decided { decision, by } => (
                ApprovalStatus::Rejected,
                serde_json::to_value(&decision).ok(),
                by,
                Err(InteractionError::Declined),
            ),
            HumanOutcome::TimedOut => (
                ApprovalStatus::TimedOut,
                None,
                None,
                Err(InteractionError::TimedOut(timeout.as_secs())),
            ),
            HumanOutcome::Cancelled => (
                ApprovalStatus::Cancelled,
                None,
                None,
                Err(InteractionError::Cancelled),
            ),
        };
        let (scope, session) = (self.scope, self.session_id);
        let decided = self
            .deps
            .writer
            .write_for(session.0, move |txn| {
                let decision = decision.clone();
                Box::pin(
                    async move { approvals::decide(txn, &scope, id, status, decision, by).await },
                )
            })
            .await;
        if let Err(e) = decided {
            tracing::warn!(error = %e, "recording an answer failed");
        }
        result
    }
}

/// A result as clients see it in `tool_result`: what the model read, plus the images it got as
/// image parts (`images`: `[{"mime_type", "data"}]`), so a client can draw them (the console
/// does). The images are not in the model's text, nor in the run's stored history.
fn shown_to_clients(out: &agentry_tools::tool::ToolOutput) -> Value {
    let mut content = out.content.clone();
    if !out.images.is_empty()
        && let Value::Object(map) = &mut content
    {
        map.insert(
            "images".into(),
            Value::Array(
                out.images
                    .iter()
                    .map(|i| serde_json::json!({"mime_type": i.mime_type, "data": i.data}))
                    .collect(),
            ),
        );
    }
    content
}

/// A request for a person as its approval row stores it: the `hitl_request`, and the run's
/// token usage when it asked (`token_usage`), so a client that shows the run in parts (the
/// Responses API: a response ends at each request) can tell what each part spent.
fn request_with_usage(data: &HitlRequestData, usage: TokenUsage) -> Value {
    let mut request = serde_json::to_value(data).unwrap_or(Value::Null);
    if let Value::Object(map) = &mut request {
        map.insert(
            "token_usage".into(),
            serde_json::to_value(usage).unwrap_or(Value::Null),
        );
    }
    request
}

/// Store a request for a person (an approval or a question), through the writer.
async fn create_approval(
    writer: &agentry_store::writer::Writer,
    scope: agentry_store::TenantScope,
    new: NewApproval,
) -> Result<(), agentry_store::StoreError> {
    writer
        .write_for(new.session_id.0, move |txn| {
            let new = new.clone();
            Box::pin(async move { approvals::create(txn, &scope, new).await.map(|_| ()) })
        })
        .await
}
