//! SessionActor: one per live session. It owns the session's event log (a `seq` per event, a
//! ring of recent events for replay, batched persistence), its subscribers, its active run (the
//! agent loop as a task on the engine runtime), the queue of enqueued messages, and the
//! approval actors of that run.
//!
//! Exactly one `done` per run: only this actor emits it, when the run task reports its outcome,
//! panics past the restart budget, or is aborted after a cancel.

mod handlers;
pub mod messages;

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::panic::AssertUnwindSafe;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use actix::prelude::*;
use agentry_schema::error::ErrorCode;
use agentry_schema::events::{DoneData, DoneStatus, EventPayload, ExecutionEvent};
use agentry_schema::ids::{ApprovalId, AssistantId, RunId, UserId};
use agentry_store::approvals::{self, ApprovalStatus};
use agentry_store::assistants::{self, Assistant, AssistantSpec};
use agentry_store::checkpoints;
use agentry_store::executions::{self, ExecutionStatus, NewExecution};
use agentry_store::messages::{self as store_messages, NewMessage};
use agentry_store::sessions::{self, Session, SessionState};
use agentry_store::tenants::Tenant;
use agentry_store::{Role, TenantScope, UserScope, events as store_events, users};
use futures::FutureExt;
use tokio::sync::oneshot;
use tokio_util::sync::CancellationToken;

use crate::deps::EngineDeps;
use crate::engine::sink::{HumanOutcome, HumanRequest, RunSink};
use crate::engine::{Progress, RunCheckpoint, RunInput, RunOutcome, SharedProgress, run_agent};
use crate::error::EngineError;
use crate::hitl::{CancelApproval, HitlApproval};
use crate::quota::{AcquireRun, QuotaActor, ReleaseRun};
use crate::tenant::SessionStopped;
pub use messages::*;

/// How the session log keeps events.
struct EventLog {
    next_seq: u64,
    ring: VecDeque<SessionEvent>,
    cap: usize,
    unflushed: Vec<ExecutionEvent>,
    /// Every event with `seq <= persisted_upto` is in the store; only those may leave the ring,
    /// so a replay never finds a hole between the store and memory.
    persisted_upto: u64,
    flushing: bool,
}

impl EventLog {
    fn new(last_seq: u64, cap: usize) -> Self {
        EventLog {
            next_seq: last_seq + 1,
            ring: VecDeque::new(),
            cap: cap.max(16),
            unflushed: Vec::new(),
            persisted_upto: last_seq,
            flushing: false,
        }
    }

    fn push(&mut self, session_id: &str, run_id: &str, payload: EventPayload) -> SessionEvent {
        let event = ExecutionEvent::new(self.next_seq, session_id, run_id, payload);
        self.next_seq += 1;
        let json: Arc<str> = event.to_json().into();
        self.unflushed.push(event.clone());
        let ev = SessionEvent {
            event: Arc::new(event),
            json,
        };
        self.ring.push_back(ev.clone());
        self.evict();
        ev
    }

    fn evict(&mut self) {
        while self.ring.len() > self.cap
            && self
                .ring
                .front()
                .is_some_and(|e| e.event.seq <= self.persisted_upto)
        {
            self.ring.pop_front();
        }
    }

    fn first_in_ring(&self) -> u64 {
        self.ring
            .front()
            .map(|e| e.event.seq)
            .unwrap_or(self.next_seq)
    }

    fn last_seq(&self) -> u64 {
        self.next_seq - 1
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// Admitted; its rows are being written before the loop starts.
    Starting,
    Running,
    /// The loop is over; the outcome is being recorded before `done` goes out.
    Finishing,
}

struct ActiveRun {
    run_id: RunId,
    input: Option<RunInput>,
    cancel: CancellationToken,
    abort: Option<tokio::task::AbortHandle>,
    progress: SharedProgress,
    phase: Phase,
    restarts: u32,
}

#[derive(Debug, Clone, Copy)]
struct QueuedRun {
    run_id: RunId,
    user: UserScope,
}

/// How a run gets its rows written before the loop starts.
enum RunStart {
    /// A new message: create the execution, store the message.
    Fresh { message: String },
    /// A queued execution: mark it running, store its message.
    Queued,
    /// After a crash or a panic: continue from this checkpoint (or from the stored
    /// conversation when there is none).
    Resume(Option<RunCheckpoint>),
}

pub struct SessionActor {
    session: Session,
    tenant: Arc<Tenant>,
    scope: TenantScope,
    deps: Arc<EngineDeps>,
    quota: Addr<QuotaActor>,
    mcp: Option<Addr<crate::mcp_pool::McpPoolActor>>,
    supervisor: Recipient<SessionStopped>,
    log: EventLog,
    session_key: String,
    subscribers: BTreeMap<SubscriptionId, Recipient<SessionEvent>>,
    next_sub: SubscriptionId,
    run: Option<ActiveRun>,
    queue: VecDeque<QueuedRun>,
    approvals: HashMap<ApprovalId, (RunId, Addr<HitlApproval>)>,
    last_activity: Instant,
    shutting_down: bool,
    instance: u64,
}

impl SessionActor {
    pub fn new(
        session: Session,
        tenant: Arc<Tenant>,
        deps: Arc<EngineDeps>,
        quota: Addr<QuotaActor>,
        mcp: Option<Addr<crate::mcp_pool::McpPoolActor>>,
        supervisor: Recipient<SessionStopped>,
        instance: u64,
    ) -> Self {
        let cap = deps.config.event_ring;
        SessionActor {
            scope: tenant.scope(),
            session_key: session.id.to_string(),
            session,
            tenant,
            deps,
            quota,
            mcp,
            supervisor,
            log: EventLog::new(0, cap),
            subscribers: BTreeMap::new(),
            next_sub: 1,
            run: None,
            queue: VecDeque::new(),
            approvals: HashMap::new(),
            last_activity: Instant::now(),
            shutting_down: false,
            instance,
        }
    }

    fn busy(&self) -> bool {
        self.run.is_some() || !self.queue.is_empty()
    }

    /// Assign the next `seq`, keep it for replay and persistence, and fan it out.
    fn publish(&mut self, run_id: Option<RunId>, payload: EventPayload) {
        let run = run_id.map(|r| r.to_string()).unwrap_or_default();
        let ev = self.log.push(&self.session_key, &run, payload);
        self.last_activity = Instant::now();
        self.subscribers.retain(|_, s| s.connected());
        for s in self.subscribers.values() {
            s.do_send(ev.clone());
        }
    }

    /// Write buffered events to the store, one batch at a time.
    fn flush(&mut self, ctx: &mut Context<Self>) {
        if self.log.flushing || self.log.unflushed.is_empty() {
            return;
        }
        let batch = std::mem::take(&mut self.log.unflushed);
        self.log.flushing = true;
        let db = self.deps.db.clone();
        let scope = self.scope;
        let sid = self.session.id;
        let fut = async move {
            let res = store_events::append(&db, &scope, sid, &batch).await;
            (res, batch)
        };
        ctx.spawn(fut.into_actor(self).map(|(res, batch), act, ctx| {
            act.log.flushing = false;
            match res {
                Ok(()) | Err(agentry_store::StoreError::Conflict(_)) => {
                    if let Some(last) = batch.last() {
                        act.log.persisted_upto = act.log.persisted_upto.max(last.seq);
                    }
                    act.log.evict();
                }
                Err(e) => {
                    tracing::warn!(error = %e, session_id = %act.session.id, "storing events failed; will retry");
                    let mut rest = std::mem::take(&mut act.log.unflushed);
                    act.log.unflushed = batch;
                    act.log.unflushed.append(&mut rest);
                }
            }
            if !act.log.unflushed.is_empty() {
                act.flush(ctx);
            }
        }));
    }

    fn replay_from_ring(&self, after: u64, to: &Recipient<SessionEvent>) -> u64 {
        let mut last = after;
        for ev in self.log.ring.iter().filter(|e| e.event.seq > after) {
            to.do_send(ev.clone());
            last = ev.event.seq;
        }
        last
    }

    fn add_subscriber(&mut self, to: Recipient<SessionEvent>) -> SubscriptionId {
        let id = self.next_sub;
        self.next_sub += 1;
        self.subscribers.insert(id, to);
        self.last_activity = Instant::now();
        id
    }

    // ---- runs ----

    fn sink(&self, ctx: &Context<Self>, run_id: RunId) -> Arc<dyn RunSink> {
        Arc::new(ActorSink {
            addr: ctx.address(),
            run_id,
        })
    }

    /// Admit a run and write its rows, then start the loop. `reply` gets the result of the
    /// admission (a chat request waits on it; queued and resumed runs report failures as events).
    fn start_run(
        &mut self,
        ctx: &mut Context<Self>,
        run_id: RunId,
        user: UserScope,
        start: RunStart,
        restarts: u32,
        reply: Option<oneshot::Sender<Result<ChatAccepted, EngineError>>>,
    ) {
        self.run = Some(ActiveRun {
            run_id,
            input: None,
            cancel: CancellationToken::new(),
            abort: None,
            progress: Arc::new(Mutex::new(Progress::default())),
            phase: Phase::Starting,
            restarts,
        });
        self.last_activity = Instant::now();
        let deps = self.deps.clone();
        let scope = self.scope;
        let session = self.session.clone();
        let quota = self.quota.clone();
        let mcp = self.mcp.clone();
        let resuming = matches!(start, RunStart::Resume(_));
        let fut = async move {
            match quota.send(AcquireRun).await {
                Ok(Ok(())) => {}
                Ok(Err(r)) if !resuming => {
                    crate::metrics::record_quota_rejection(r.quota);
                    return Err(EngineError::Quota {
                        quota: r.quota,
                        limit: r.limit,
                        retry_after: r.retry_after,
                    });
                }
                // A run interrupted by a restart goes on even over the limit.
                Ok(Err(_)) => {}
                Err(_) => return Err(EngineError::Unavailable),
            }
            let prepared = prepare_run(&deps, &scope, &session, run_id, &user, start, mcp).await;
            if prepared.is_err() {
                quota.do_send(ReleaseRun { tokens: 0 });
            }
            prepared
        };
        ctx.spawn(fut.into_actor(self).map(move |res, act, ctx| {
            let still_ours = act.run.as_ref().is_some_and(|r| r.run_id == run_id);
            match res {
                Ok(prepared) if still_ours => {
                    let cancelled = act.run.as_ref().is_some_and(|r| r.cancel.is_cancelled());
                    if let Some(tx) = reply {
                        let _ = tx.send(Ok(ChatAccepted {
                            run_id,
                            queued: false,
                        }));
                    }
                    if cancelled {
                        // Cancelled while its rows were being written.
                        act.finish_run(
                            ctx,
                            run_id,
                            RunOutcome::new(
                                DoneStatus::Cancelled,
                                Some("user_cancelled"),
                                &Progress::default(),
                            ),
                        );
                        return;
                    }
                    if let Some(note) = &prepared.notice {
                        act.publish(
                            Some(run_id),
                            EventPayload::error(
                                ErrorCode::InternalError.as_str(),
                                note.clone(),
                                true,
                            ),
                        );
                    }
                    act.spawn_loop(ctx, prepared.input);
                }
                Ok(_) => {}
                Err(e) => {
                    if still_ours {
                        act.run = None;
                    }
                    match reply {
                        Some(tx) => {
                            let _ = tx.send(Err(e));
                        }
                        None => {
                            // A queued or resumed run that cannot start still ends with done.
                            let (code, status) = match &e {
                                EngineError::Quota { .. } => {
                                    (ErrorCode::QuotaExceeded, DoneStatus::Failed)
                                }
                                _ => (ErrorCode::InternalError, DoneStatus::Failed),
                            };
                            act.publish(
                                Some(run_id),
                                EventPayload::error(code.as_str(), e.to_string(), false),
                            );
                            act.publish(
                                Some(run_id),
                                EventPayload::Done(DoneData::new(
                                    status,
                                    Some(code.as_str().into()),
                                    Default::default(),
                                )),
                            );
                            let db = act.deps.db.clone();
                            let scope = act.scope;
                            let msg = e.to_string();
                            act.deps.runtime.spawn(async move {
                                let _ = executions::update(
                                    &db,
                                    &scope,
                                    run_id,
                                    ExecutionStatus::Failed,
                                    0,
                                    Default::default(),
                                    Some(&msg),
                                )
                                .await;
                            });
                            act.flush(ctx);
                        }
                    }
                    act.start_next(ctx);
                }
            }
        }));
    }

    fn spawn_loop(&mut self, ctx: &mut Context<Self>, input: RunInput) {
        let Some(run_id) = self.run.as_ref().map(|r| r.run_id) else {
            return;
        };
        let sink = self.sink(ctx, run_id);
        let Some(run) = self.run.as_mut() else { return };
        run.input = Some(input.clone());
        run.phase = Phase::Running;
        let fut = run_agent(
            self.deps.clone(),
            input,
            sink,
            run.cancel.clone(),
            run.progress.clone(),
        );
        let addr = ctx.address();
        let handle = self.deps.runtime.spawn(async move {
            let result = AssertUnwindSafe(fut)
                .catch_unwind()
                .await
                .map_err(panic_message);
            addr.do_send(RunFinished { run_id, result });
        });
        run.abort = Some(handle.abort_handle());
    }

    /// The loop is over: record the outcome, then emit the run's one `done`.
    fn finish_run(&mut self, ctx: &mut Context<Self>, run_id: RunId, outcome: RunOutcome) {
        let Some(run) = self.run.as_mut().filter(|r| r.run_id == run_id) else {
            return;
        };
        if run.phase == Phase::Finishing {
            return;
        }
        run.phase = Phase::Finishing;
        if let Some(abort) = run.abort.take() {
            abort.abort();
        }
        self.close_approvals(Some(run_id));
        let deps = self.deps.clone();
        let scope = self.scope;
        let session_id = self.session.id;
        let quota = self.quota.clone();
        let out = outcome.clone();
        let fut = async move {
            let status = match out.status {
                DoneStatus::Completed => ExecutionStatus::Completed,
                DoneStatus::Cancelled => ExecutionStatus::Cancelled,
                DoneStatus::Rejected => ExecutionStatus::Rejected,
                DoneStatus::Failed => ExecutionStatus::Failed,
                DoneStatus::Timeout => ExecutionStatus::Timeout,
                DoneStatus::Interrupted => ExecutionStatus::Interrupted,
            };
            let error = out.error.clone().or_else(|| {
                out.reason
                    .clone()
                    .filter(|_| status != ExecutionStatus::Completed)
            });
            if let Err(e) = executions::update(
                &deps.db,
                &scope,
                run_id,
                status,
                out.steps,
                out.usage,
                error.as_deref(),
            )
            .await
            {
                tracing::error!(error = %e, %run_id, "recording the end of a run failed");
            }
            // Approvals the run was still waiting on can no longer be answered.
            if let Ok(pending) = approvals::list_by_execution(&deps.db, &scope, run_id).await {
                for a in pending
                    .into_iter()
                    .filter(|a| a.status == ApprovalStatus::Pending)
                {
                    let _ = approvals::decide(
                        &deps.db,
                        &scope,
                        a.id,
                        ApprovalStatus::Cancelled,
                        None,
                        None,
                    )
                    .await;
                }
            }
            if let Err(e) =
                checkpoints::prune(&deps.db, &scope, run_id, deps.config.checkpoint_keep).await
            {
                tracing::warn!(error = %e, %run_id, "pruning checkpoints failed");
            }
            let _ = sessions::touch(&deps.db, &scope, session_id, SessionState::Idle).await;
            quota.do_send(ReleaseRun {
                tokens: out.usage.total,
            });
        };
        ctx.spawn(fut.into_actor(self).map(move |_, act, ctx| {
            crate::metrics::record_run_done(
                outcome.status,
                &act.tenant.id.to_string(),
                outcome.usage.total,
            );
            act.publish(
                Some(run_id),
                EventPayload::Done(DoneData::new(
                    outcome.status,
                    outcome.reason.clone(),
                    outcome.usage,
                )),
            );
            act.flush(ctx);
            if act.run.as_ref().is_some_and(|r| r.run_id == run_id) {
                act.run = None;
            }
            if act.shutting_down {
                ctx.stop();
            } else {
                act.start_next(ctx);
            }
        }));
    }

    fn start_next(&mut self, ctx: &mut Context<Self>) {
        if self.run.is_some() || self.shutting_down {
            return;
        }
        if let Some(q) = self.queue.pop_front() {
            self.start_run(ctx, q.run_id, q.user, RunStart::Queued, 0, None);
        }
    }

    fn close_approvals(&mut self, run_id: Option<RunId>) {
        let ids: Vec<ApprovalId> = self
            .approvals
            .iter()
            .filter(|(_, (r, _))| run_id.is_none_or(|x| x == *r))
            .map(|(id, _)| *id)
            .collect();
        for id in ids {
            if let Some((_, addr)) = self.approvals.remove(&id) {
                addr.do_send(CancelApproval);
            }
        }
    }

    /// Cancel the active run. The loop gets `cancel_grace` to stop; then it is aborted. Either
    /// way `done{cancelled}` follows.
    fn cancel_run(&mut self, ctx: &mut Context<Self>) -> Result<RunId, EngineError> {
        let Some(run) = self.run.as_mut().filter(|r| r.phase != Phase::Finishing) else {
            return Err(EngineError::NoActiveRun);
        };
        let run_id = run.run_id;
        run.cancel.cancel();
        let starting = run.phase == Phase::Starting;
        self.close_approvals(Some(run_id));
        if !starting {
            ctx.run_later(self.deps.config.cancel_grace, move |act, ctx| {
                let Some(run) = act.run.as_ref().filter(|r| r.run_id == run_id && r.phase == Phase::Running) else {
                    return;
                };
                tracing::warn!(%run_id, "the run did not stop within the cancel grace period; aborting it");
                let p = run.progress.lock().map(|p| *p).unwrap_or_default();
                act.finish_run(ctx, run_id, RunOutcome::new(DoneStatus::Cancelled, Some("user_cancelled"), &p));
            });
        }
        Ok(run_id)
    }

    fn on_run_finished(
        &mut self,
        ctx: &mut Context<Self>,
        run_id: RunId,
        result: Result<RunOutcome, String>,
    ) {
        let Some(run) = self
            .run
            .as_mut()
            .filter(|r| r.run_id == run_id && r.phase == Phase::Running)
        else {
            return;
        };
        match result {
            Ok(outcome) => self.finish_run(ctx, run_id, outcome),
            Err(panic) => {
                let restarts = run.restarts;
                let user = run.input.as_ref().map(|i| UserScope {
                    tenant: self.scope,
                    user_id: i.user_id,
                    role: i.role,
                });
                tracing::error!(%run_id, restarts, "the agent loop panicked: {panic}");
                if restarts < self.deps.config.max_restarts && !run.cancel.is_cancelled() {
                    self.publish(
                        Some(run_id),
                        EventPayload::error(
                            ErrorCode::InternalError.as_str(),
                            "the run crashed; it is resuming from its last checkpoint",
                            true,
                        ),
                    );
                    let user = user.unwrap_or(UserScope {
                        tenant: self.scope,
                        user_id: self.session.user_id,
                        role: Role::Member,
                    });
                    let deps = self.deps.clone();
                    let scope = self.scope;
                    let fut = async move { checkpoints::latest(&deps.db, &scope, run_id).await };
                    ctx.spawn(fut.into_actor(self).map(move |cp, act, ctx| {
                        let cp = cp
                            .ok()
                            .flatten()
                            .and_then(|c| RunCheckpoint::from_json(&c.state).ok());
                        act.run = None;
                        act.start_run(ctx, run_id, user, RunStart::Resume(cp), restarts + 1, None);
                    }));
                } else {
                    let p = run.progress.lock().map(|p| *p).unwrap_or_default();
                    self.publish(
                        Some(run_id),
                        EventPayload::error(
                            ErrorCode::InternalError.as_str(),
                            "the run crashed repeatedly and was stopped",
                            false,
                        ),
                    );
                    let mut outcome =
                        RunOutcome::new(DoneStatus::Failed, Some("internal_error"), &p);
                    outcome.error = Some(format!("the agent loop panicked: {panic}"));
                    self.finish_run(ctx, run_id, outcome);
                }
            }
        }
    }

    /// After (re)start: pick up a run that was active when the process or actor died, and the
    /// queued messages, and continue the `seq` where the store left it.
    fn recover(&mut self, ctx: &mut Context<Self>) {
        let deps = self.deps.clone();
        let scope = self.scope;
        let session = self.session.clone();
        let fut = async move { load_recovery(&deps, &scope, &session).await };
        ctx.wait(fut.into_actor(self).map(move |res, act, ctx| {
            let rec = match res {
                Ok(r) => r,
                Err(e) => {
                    tracing::error!(error = %e, session_id = %act.session.id, "loading the session's state failed");
                    return;
                }
            };
            act.log = EventLog::new(rec.last_seq, act.deps.config.event_ring);
            for (run_id, user) in rec.queued {
                act.queue.push_back(QueuedRun { run_id, user });
            }
            if let Some((run_id, user, cp)) = rec.active {
                match cp {
                    Some(cp) => {
                        act.publish(
                            Some(run_id),
                            EventPayload::error(
                                ErrorCode::InternalError.as_str(),
                                "the server restarted during this run; it is resuming from its last checkpoint",
                                true,
                            ),
                        );
                        act.start_run(ctx, run_id, user, RunStart::Resume(Some(cp)), 0, None);
                    }
                    None => {
                        act.publish(
                            Some(run_id),
                            EventPayload::error(
                                ErrorCode::InternalError.as_str(),
                                "the server restarted before this run saved a checkpoint; it was interrupted",
                                false,
                            ),
                        );
                        act.publish(
                            Some(run_id),
                            EventPayload::Done(DoneData::new(DoneStatus::Interrupted, Some("server_restarted".into()), Default::default())),
                        );
                        let db = act.deps.db.clone();
                        act.deps.runtime.spawn(async move {
                            let _ = executions::update(&db, &scope, run_id, ExecutionStatus::Interrupted, 0, Default::default(), Some("server_restarted")).await;
                        });
                        act.flush(ctx);
                        act.start_next(ctx);
                    }
                }
            } else {
                act.start_next(ctx);
            }
        }));
    }
}

struct Recovery {
    last_seq: u64,
    active: Option<(RunId, UserScope, Option<RunCheckpoint>)>,
    queued: Vec<(RunId, UserScope)>,
}

async fn user_scope(deps: &EngineDeps, scope: &TenantScope, user_id: UserId) -> UserScope {
    let role = users::get(&deps.db, scope, user_id)
        .await
        .ok()
        .flatten()
        .map(|u| u.role)
        .unwrap_or(Role::Member);
    UserScope {
        tenant: *scope,
        user_id,
        role,
    }
}

async fn load_recovery(
    deps: &EngineDeps,
    scope: &TenantScope,
    session: &Session,
) -> agentry_store::Result<Recovery> {
    let last_seq = store_events::max_seq(&deps.db, scope, session.id).await?;
    let mut active = None;
    if let Some(exec) = executions::active_for_session(&deps.db, scope, session.id).await? {
        // Approvals of the interrupted run can no longer be answered; the resumed run asks again.
        for a in approvals::list_pending_for_session(&deps.db, scope, session.id).await? {
            approvals::decide(&deps.db, scope, a.id, ApprovalStatus::Cancelled, None, None).await?;
        }
        let cp = checkpoints::latest(&deps.db, scope, exec.id)
            .await?
            .and_then(|c| RunCheckpoint::from_json(&c.state).ok());
        let user = user_scope(deps, scope, exec.user_id).await;
        active = Some((exec.id, user, cp));
    }
    let mut queued = Vec::new();
    for exec in executions::queued_for_session(&deps.db, scope, session.id).await? {
        let user = user_scope(deps, scope, exec.user_id).await;
        queued.push((exec.id, user));
    }
    Ok(Recovery {
        last_seq,
        active,
        queued,
    })
}

struct PreparedRun {
    input: RunInput,
    notice: Option<String>,
}

async fn load_assistant(
    deps: &EngineDeps,
    scope: &TenantScope,
    id: &AssistantId,
) -> Result<Assistant, EngineError> {
    if let Some(a) = assistants::get(&deps.db, scope, id).await? {
        return Ok(a);
    }
    if id.as_str() == AssistantId::DEFAULT {
        return Ok(assistants::ensure_default(&deps.db, scope, AssistantSpec::default()).await?);
    }
    Err(EngineError::NotFound(format!("assistant {id}")))
}

/// Whether the session's assistant exists (`default` always does: it is created on demand).
pub(crate) async fn assistant_exists(
    deps: &EngineDeps,
    scope: &TenantScope,
    id: &AssistantId,
) -> Result<(), EngineError> {
    load_assistant(deps, scope, id).await.map(|_| ())
}

/// Write what must be stored before a run starts (DESIGN §1.5: an acknowledged message is in the
/// database), and build the loop's input.
async fn prepare_run(
    deps: &Arc<EngineDeps>,
    scope: &TenantScope,
    session: &Session,
    run_id: RunId,
    user: &UserScope,
    start: RunStart,
    mcp: Option<Addr<crate::mcp_pool::McpPoolActor>>,
) -> Result<PreparedRun, EngineError> {
    let tenant = Arc::new(agentry_store::tenants::get_own(&deps.db, scope).await?);
    let assistant = load_assistant(deps, scope, &session.assistant_id).await?;
    let mut notice = None;
    let resume = match start {
        RunStart::Fresh { message } => {
            executions::create(
                &deps.db,
                scope,
                NewExecution {
                    id: run_id,
                    user_id: user.user_id,
                    session_id: session.id,
                    assistant_id: session.assistant_id.to_string(),
                    input: message.clone(),
                    trace_id: None,
                    status: ExecutionStatus::Running,
                },
            )
            .await?;
            store_messages::save(
                &deps.db,
                scope,
                session.id,
                NewMessage::user(message, Some(run_id)),
            )
            .await?;
            None
        }
        RunStart::Queued => {
            let exec = executions::get(&deps.db, scope, run_id)
                .await?
                .ok_or_else(|| EngineError::NotFound(format!("queued run {run_id}")))?;
            executions::start_queued(&deps.db, scope, run_id).await?;
            store_messages::save(
                &deps.db,
                scope,
                session.id,
                NewMessage::user(exec.input, Some(run_id)),
            )
            .await?;
            None
        }
        RunStart::Resume(cp) => {
            if cp.is_none() {
                notice = Some(
                    "no checkpoint was found; the run restarts from its stored conversation"
                        .to_string(),
                );
            }
            cp
        }
    };
    sessions::touch(&deps.db, scope, session.id, SessionState::Running).await?;
    let auto_approve = session.auto_approve || assistant.spec.auto_approve;
    Ok(PreparedRun {
        input: RunInput {
            tenant,
            user_id: session.user_id,
            role: user.role,
            session_id: session.id,
            run_id,
            assistant,
            auto_approve,
            resume,
            mcp,
        },
        notice,
    })
}

fn panic_message(p: Box<dyn std::any::Any + Send>) -> String {
    if let Some(s) = p.downcast_ref::<&str>() {
        (*s).to_string()
    } else if let Some(s) = p.downcast_ref::<String>() {
        s.clone()
    } else {
        "panic".to_string()
    }
}

/// The run task's handle on its session.
struct ActorSink {
    addr: Addr<SessionActor>,
    run_id: RunId,
}

#[async_trait::async_trait]
impl RunSink for ActorSink {
    fn emit(&self, payload: EventPayload) {
        self.addr.do_send(Emit {
            run_id: self.run_id,
            payload,
        });
    }

    async fn ask_human(&self, request: HumanRequest) -> HumanOutcome {
        let (tx, rx) = oneshot::channel();
        self.addr.do_send(OpenApproval {
            run_id: self.run_id,
            request,
            reply: tx,
        });
        rx.await.unwrap_or(HumanOutcome::Cancelled)
    }
}

impl Actor for SessionActor {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Self::Context) {
        self.recover(ctx);
        let flush_every = self.deps.config.event_flush_interval;
        ctx.run_interval(flush_every, |act, ctx| act.flush(ctx));
        let timeout = self.deps.config.session_timeout;
        let check = (timeout / 4).clamp(Duration::from_millis(50), Duration::from_secs(30));
        ctx.run_interval(check, move |act, ctx| {
            act.subscribers.retain(|_, s| s.connected());
            let idle = !act.busy()
                && act.approvals.is_empty()
                && act.subscribers.is_empty()
                && act.last_activity.elapsed() >= timeout;
            if idle {
                tracing::debug!(session_id = %act.session.id, "session idle; stopping its actor");
                ctx.stop();
            }
        });
    }

    fn stopped(&mut self, _ctx: &mut Self::Context) {
        // Whatever is still buffered goes to the store; the actor is gone, so a plain task.
        let batch = std::mem::take(&mut self.log.unflushed);
        if !batch.is_empty() {
            let db = self.deps.db.clone();
            let scope = self.scope;
            let sid = self.session.id;
            self.deps.runtime.spawn(async move {
                if let Err(e) = store_events::append(&db, &scope, sid, &batch).await {
                    tracing::warn!(error = %e, "storing the last events of a session failed");
                }
            });
        }
        if let Some(run) = &self.run {
            run.cancel.cancel();
            if let Some(a) = &run.abort {
                a.abort();
            }
        }
        self.supervisor.do_send(SessionStopped {
            session_id: self.session.id,
            user_id: self.session.user_id,
            instance: self.instance,
        });
    }
}
