//! The one tool-call pipeline (DESIGN §4 "act", issue 11 item 2).
//!
//! Every tool call Agentry makes goes through [`run_call`], whoever asked for it: the agent loop
//! (a model's tool call), `/mcp` (an MCP client's `tools/call`) and `agentry tool-server`. The
//! steps, in this order:
//!
//! 1. **lookup**: an unknown name is a `not_found` result listing the tools the caller may use;
//! 2. **policy**: the caller's RBAC permissions ([`ToolPolicy`]: `service:tool`, `service:*`,
//!    `*:*`) may refuse the call (`permission_denied`);
//! 3. **schema**: the arguments are checked against the tool's compiled JSON Schema (every
//!    violation listed, so the model can fix them all at once); arguments a model sent as
//!    broken JSON are refused here too;
//! 4. **approval**: when the host says the call needs one, the host asks a person — a
//!    `hitl_request` in the agent loop, an MCP elicitation on `/mcp` — and gets an approve (maybe
//!    with edited arguments, checked again), a refusal, or a stop;
//! 5. **call**: the tool runs with its timeout on a [`PauseClock`]: while the call waits for the
//!    user (a question, an elicitation) its clock stands still. A backend that is unavailable
//!    (the call never reached it) is retried with the host's delays. A cancel either stops the
//!    call at once or gives it a grace period to wind down, as the host says;
//! 6. **audit**: the host records the finished call (a tool-call row, the history);
//! 7. **events**: the host tells whoever watches (`tool_result`, `file_operation`, …).
//!
//! What differs between callers is behind the [`CallHost`] trait: how to ask for approval, how
//! to build the call's context, how to audit and what to emit. The order of the steps, the
//! clock and the retries are here only.

use std::sync::Arc;
use std::time::{Duration, Instant};

use agentry_schema::events::Question;
use agentry_schema::ids::UserId;
use async_trait::async_trait;
use serde_json::{Value, json};

use crate::tool::{
    InteractionError, PauseClock, Tool, ToolContext, ToolError, ToolOutput, ToolRegistry, ToolSpec,
    UserInteraction,
};

/// Decides whether the caller may call a tool (`service:tool`, `service:*`, `*:*`).
pub trait ToolPolicy: Send + Sync {
    /// `Err(reason)` when denied.
    fn check(&self, spec: &ToolSpec) -> Result<(), String>;
}

/// Everything allowed: `agentry tool-server`, whose client applies its own policy.
pub struct AllowAll;

impl ToolPolicy for AllowAll {
    fn check(&self, _spec: &ToolSpec) -> Result<(), String> {
        Ok(())
    }
}

/// A tool call as a caller asks for it.
#[derive(Debug, Clone, PartialEq)]
pub struct CallRequest {
    /// The call's id: the model's `tool_call_id`, or one made up for an MCP call.
    pub id: String,
    pub name: String,
    pub arguments: Value,
}

/// The step a call ended at.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Stage {
    /// No tool of that name.
    Lookup,
    /// The caller may not use the tool.
    Policy,
    /// The arguments do not fit the tool's schema.
    Schema,
    /// Refused (or abandoned) while waiting for approval.
    Approval,
    /// The tool ran (or was started): its result, failure, timeout or cancel.
    Call,
}

/// Why an approval was not given.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RefusalKind {
    /// The person said no.
    Rejected,
    /// Nobody decided in time.
    TimedOut,
    /// Nobody can be asked (an MCP client without elicitation).
    Unanswerable,
}

impl RefusalKind {
    /// The error code the model reads in the call's result.
    pub fn code(self) -> &'static str {
        match self {
            RefusalKind::Rejected => "rejected",
            RefusalKind::TimedOut => "hitl_timeout",
            RefusalKind::Unanswerable => "permission_denied",
        }
    }
}

/// A call that needed approval and did not get it: it never ran.
#[derive(Debug, Clone, PartialEq)]
pub struct Refusal {
    pub kind: RefusalKind,
    /// What the model (or the MCP client) reads.
    pub message: String,
    /// The audit row's error text.
    pub audit: String,
}

impl Refusal {
    /// The call's result as the model reads it: `{error: {code, message}}`.
    pub fn content(&self) -> Value {
        json!({"error": {"code": self.kind.code(), "message": self.message}})
    }
}

/// How a call ended.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    /// The tool's result, or why there is none (unknown tool, policy, schema, timeout, …).
    Result(Result<ToolOutput, ToolError>),
    /// The approval was refused: the call did not run.
    Refused(Refusal),
}

/// A finished call: what the host audits and emits, and what [`run_call`] returns.
#[derive(Debug, Clone)]
pub struct FinishedCall {
    pub request: CallRequest,
    /// `None` for an unknown tool.
    pub spec: Option<ToolSpec>,
    /// The arguments the call ran (or would have run) with: an approval may have edited them.
    pub args: Value,
    pub outcome: Outcome,
    pub stage: Stage,
    /// From the start of the pipeline to its end (approval waits included).
    pub duration: Duration,
    /// `None` when no approval was needed.
    pub approved: Option<bool>,
    pub approved_by: Option<UserId>,
}

impl FinishedCall {
    /// `success` (the tool's result), `error` (a result that reports failure), `failed` (no
    /// result), `refused` (not approved): the span's and the metrics' outcome.
    pub fn outcome_label(&self) -> &'static str {
        match &self.outcome {
            Outcome::Result(Ok(out)) if !out.is_error => "success",
            Outcome::Result(Ok(_)) => "error",
            Outcome::Result(Err(_)) => "failed",
            Outcome::Refused(_) => "refused",
        }
    }

    /// The outcome as a tool's result: a refusal is `permission_denied` with its message.
    pub fn into_result(self) -> Result<ToolOutput, ToolError> {
        match self.outcome {
            Outcome::Result(r) => r,
            Outcome::Refused(r) => Err(ToolError::PermissionDenied(r.message)),
        }
    }
}

/// The answer to an approval request.
#[derive(Debug, Clone, PartialEq)]
pub enum Approval {
    /// Go ahead, with these arguments instead when `args` is set (an edit).
    Approved {
        args: Option<Value>,
        by: Option<UserId>,
    },
    /// Not approved: the call does not run.
    Refused {
        refusal: Refusal,
        by: Option<UserId>,
    },
    /// The wait ended without a decision for a reason that is the call's error (an MCP call
    /// cancelled while its user was being asked).
    Failed(ToolError),
}

/// Delays between attempts of a call whose backend was unavailable: `base_delay * 2^n`, at
/// most `max_retries` times.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Retry {
    pub max_retries: u32,
    pub base_delay: Duration,
}

impl Retry {
    pub const NONE: Retry = Retry {
        max_retries: 0,
        base_delay: Duration::ZERO,
    };

    pub fn delay(&self, attempt: u32) -> Option<Duration> {
        (attempt < self.max_retries).then(|| self.base_delay * 2u32.saturating_pow(attempt.min(16)))
    }
}

impl Default for Retry {
    fn default() -> Self {
        Retry {
            max_retries: 2,
            base_delay: Duration::from_millis(500),
        }
    }
}

/// What a caller of [`run_call`] provides: everything that differs between the agent loop and
/// `/mcp`. `Stop` is how the host ends the pipeline early (the agent loop ends its run on a
/// cancel or a store failure; `/mcp` never stops it: `Infallible`).
#[async_trait]
pub trait CallHost: Send {
    type Stop: Send;

    /// The call arrived (the agent loop emits its `tool_call` event here).
    fn started(&mut self, _call: &CallRequest) {}

    /// The caller's permissions.
    fn policy(&self) -> &dyn ToolPolicy;

    /// Whether this call must be approved by a person before it runs.
    fn approval_required(&self, tool: &dyn Tool, call: &CallRequest, args: &Value) -> bool;

    /// Ask for the approval and wait for the decision.
    async fn approve(
        &mut self,
        tool: &dyn Tool,
        call: &CallRequest,
        args: &Value,
    ) -> Result<Approval, Self::Stop>;

    /// The call is about to run with `args` (the agent loop writes a checkpoint that records it
    /// as started, so a crash never runs it twice).
    async fn before_call(
        &mut self,
        _call: &CallRequest,
        _args: &Value,
        _approved: Option<bool>,
        _approved_by: Option<UserId>,
    ) -> Result<(), Self::Stop> {
        Ok(())
    }

    /// The context of one attempt: ids, workspace, cancellation, the user to ask and where
    /// progress goes. The pipeline wraps its user interaction so that a question stops the
    /// attempt's clock. An error fails the call with it.
    async fn context(
        &mut self,
        spec: &ToolSpec,
        call: &CallRequest,
    ) -> Result<ToolContext, ToolError>;

    /// How long to wait before attempt `attempt + 1` of a call whose backend was unavailable;
    /// `None` gives up.
    fn retry_delay(&self, attempt: u32) -> Option<Duration>;

    /// The call's context was cancelled: `Err` stops the pipeline at once (the call is
    /// dropped, unaudited), `Ok(grace)` lets the tool wind down for `grace` and records the
    /// call as cancelled.
    fn cancelled(&mut self) -> Result<Duration, Self::Stop>;

    /// Record the finished call (audit row, history).
    async fn audit(&mut self, call: &FinishedCall) -> Result<(), Self::Stop>;

    /// Tell whoever watches (events).
    fn emit(&mut self, call: &FinishedCall);
}

/// Run one call through every step (see the module doc). The outcome — a result, a failure, a
/// refusal — is audited and emitted by the host before it is returned; only the host's `Stop`
/// skips that. Records `agentry.tool.service`, `agentry.tool.approved` and
/// `agentry.tool.outcome` on the current span (the loop's `execute_tool` span).
pub async fn run_call<H: CallHost>(
    host: &mut H,
    registry: &ToolRegistry,
    request: CallRequest,
) -> Result<FinishedCall, H::Stop> {
    host.started(&request);
    let started = Instant::now();
    let span = tracing::Span::current();
    let mut args = request.arguments.clone();
    let mut approved = None;
    let mut approved_by = None;
    let (spec, stage, outcome) = 'call: {
        let Some(tool) = registry.get(&request.name) else {
            let offered: Vec<&str> = registry
                .specs()
                .filter(|s| host.policy().check(s).is_ok())
                .map(|s| s.name.as_str())
                .collect();
            let err = ToolError::NotFound(format!(
                "there is no tool named {:?}; available tools: {}",
                request.name,
                offered.join(", ")
            ));
            break 'call (None, Stage::Lookup, Outcome::Result(Err(err)));
        };
        let spec = tool.spec().clone();
        span.record("agentry.tool.service", spec.service.as_str());
        if let Err(reason) = host.policy().check(&spec) {
            let err = ToolError::PermissionDenied(reason);
            break 'call (Some(spec), Stage::Policy, Outcome::Result(Err(err)));
        }
        if let Some(raw) = args.get("__invalid_json__").and_then(Value::as_str) {
            // The model's arguments did not parse (the LLM client keeps the raw text here).
            let err = ToolError::InvalidArguments {
                message: "the arguments are not valid JSON".into(),
                details: json!({"raw": raw}),
            };
            break 'call (Some(spec), Stage::Schema, Outcome::Result(Err(err)));
        }
        if let Err(err) = registry.validate(&request.name, &args) {
            break 'call (Some(spec), Stage::Schema, Outcome::Result(Err(err)));
        }
        if host.approval_required(tool.as_ref(), &request, &args) {
            match host.approve(tool.as_ref(), &request, &args).await? {
                Approval::Approved { args: edited, by } => {
                    approved = Some(true);
                    approved_by = by;
                    span.record("agentry.tool.approved", true);
                    if let Some(edited) = edited {
                        args = edited;
                        if let Err(err) = registry.validate(&request.name, &args) {
                            break 'call (Some(spec), Stage::Schema, Outcome::Result(Err(err)));
                        }
                    }
                }
                Approval::Refused { refusal, by } => {
                    approved = Some(false);
                    approved_by = by;
                    span.record("agentry.tool.approved", false);
                    break 'call (Some(spec), Stage::Approval, Outcome::Refused(refusal));
                }
                Approval::Failed(err) => {
                    approved = Some(false);
                    span.record("agentry.tool.approved", false);
                    break 'call (Some(spec), Stage::Approval, Outcome::Result(Err(err)));
                }
            }
        }
        host.before_call(&request, &args, approved, approved_by)
            .await?;
        let result = call_with_retries(host, tool, &request, &args).await?;
        (Some(spec), Stage::Call, Outcome::Result(result))
    };
    let finished = FinishedCall {
        request,
        spec,
        args,
        outcome,
        stage,
        duration: started.elapsed(),
        approved,
        approved_by,
    };
    span.record("agentry.tool.outcome", finished.outcome_label());
    host.audit(&finished).await?;
    host.emit(&finished);
    Ok(finished)
}

/// The call itself: each attempt on its own [`PauseClock`] (a pause of an earlier attempt must
/// not lengthen this one's timeout), under the context's cancellation.
async fn call_with_retries<H: CallHost>(
    host: &mut H,
    tool: Arc<dyn Tool>,
    request: &CallRequest,
    args: &Value,
) -> Result<Result<ToolOutput, ToolError>, H::Stop> {
    let spec = tool.spec().clone();
    let timeout = spec.timeout;
    let mut attempt = 0;
    loop {
        let mut ctx = match host.context(&spec, request).await {
            Ok(ctx) => ctx,
            Err(e) => return Ok(Err(e)),
        };
        let clock = Arc::new(PauseClock::default());
        ctx.interaction = Arc::new(PausingInteraction {
            inner: ctx.interaction.clone(),
            clock: clock.clone(),
        });
        let cancel = ctx.cancel.clone();
        let started = Instant::now();
        let call = tool.call(args.clone(), &ctx);
        tokio::pin!(call);
        let result = tokio::select! {
            biased;
            _ = cancel.cancelled() => {
                // Dropping the call is what stops it; an MCP call dropped unanswered sends the
                // server `notifications/cancelled` on its way out.
                let grace = host.cancelled()?;
                return Ok(match tokio::time::timeout(grace, &mut call).await {
                    Ok(r) => r,
                    Err(_) => Err(ToolError::Cancelled),
                });
            }
            r = &mut call => r,
            _ = clock.deadline(started, timeout) => Err(ToolError::Timeout(timeout)),
        };
        match result {
            // The call never reached the backend, so trying again is safe. A backend gone for
            // good (`Disconnected`) is not retried: every attempt would fail alike.
            Err(ToolError::Unavailable(msg)) => {
                let Some(delay) = host.retry_delay(attempt) else {
                    return Ok(Err(ToolError::Unavailable(msg)));
                };
                tracing::warn!(tool = %request.name, attempt, "tool backend unavailable ({msg}); retrying in {delay:?}");
                tokio::select! {
                    biased;
                    _ = cancel.cancelled() => {
                        host.cancelled()?;
                        return Ok(Err(ToolError::Cancelled));
                    }
                    _ = tokio::time::sleep(delay) => {}
                }
                attempt += 1;
            }
            Err(ToolError::Cancelled) if cancel.is_cancelled() => {
                host.cancelled()?;
                return Ok(Err(ToolError::Cancelled));
            }
            other => return Ok(other),
        }
    }
}

/// The user interaction of one attempt: the attempt's clock stands still while a question
/// waits for its answer, since an answer may take minutes.
struct PausingInteraction {
    inner: Arc<dyn UserInteraction>,
    clock: Arc<PauseClock>,
}

#[async_trait]
impl UserInteraction for PausingInteraction {
    async fn ask(&self, question: Question) -> Result<Value, InteractionError> {
        let _paused = self.clock.pause();
        self.inner.ask(question).await
    }
}

#[cfg(test)]
mod tests;
