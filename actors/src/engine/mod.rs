//! The engine facade: transport-neutral operations that REST, WebSocket and SSE all call
//! (CONVENTIONS 6). Each loads and authorizes what it needs from the store, then talks to the
//! actors.
//!
//! A command for a session another replica runs goes there (`forward`). Starting this
//! replica's part in the cluster (`Engine::start_cluster`) lives in [`crate::cluster`], which
//! takes the engine: the engine knows nothing of the watcher.

mod forward;

use std::sync::Arc;
use std::time::Duration;

use actix::prelude::*;
use agentry_schema::api::ClientTool;
use agentry_schema::events::ExecutionEvent;
use agentry_schema::frames::Decision;
use agentry_schema::ids::{ApprovalId, AssistantId, RunId, SessionId, TenantId};
use agentry_schema::tenancy::TenantStatus;
use agentry_store::approvals;
use agentry_store::sessions::{self, NewSession, Session};
use agentry_store::tenants::Tenant;
use agentry_store::{PlatformScope, UserScope, executions};
use chrono::Utc;
use serde_json::Value;
use tokio::sync::mpsc;

use crate::deps::EngineDeps;
use crate::error::EngineError;
use crate::quota::{QuotaActor, QuotaHandle, QuotaState};
use crate::registry::{GetTenant, LiveTenant, Registry, StopTenant, TenantCount};
use crate::session::{
    CancelRun, ChatAccepted, GetStatus, SessionActor, SessionEvent, SessionStatus, Shutdown,
    StartChat, Subscribe, Subscriber, SubscriptionId, Unsubscribe,
};
use crate::tenant::{ArbiterPool, LiveSession, StartSession, TenantSupervisor};

/// The largest chat message accepted.
pub const MAX_MESSAGE_BYTES: usize = 256 * 1024;

/// Remove a directory tree; one that is not there is already removed.
async fn remove_tree(path: std::path::PathBuf) -> std::io::Result<()> {
    match tokio::fs::remove_dir_all(&path).await {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(std::io::Error::new(
            e.kind(),
            format!("removing {}: {e}", path.display()),
        )),
        _ => Ok(()),
    }
}

/// Switching approvals off (`auto_approve`) is a tenant admin's right, or every member's when
/// the tenant's policy says `members_may_auto_approve`.
pub fn may_auto_approve(tenant: &Tenant, user: &UserScope) -> Result<(), EngineError> {
    if tenant.policy().may_auto_approve(user.is_admin()) {
        Ok(())
    } else {
        Err(EngineError::Forbidden(
            "switching approvals off (`auto_approve`) is a tenant admin's right; a member needs \
             the tenant policy `members_may_auto_approve`, which the platform admin sets"
                .to_string(),
        ))
    }
}

/// Makes the quota keeper of a tenant the engine has not seen yet (see [`Engine::quota`]).
/// `tokens_used_today` is what the store counts since midnight UTC.
pub type QuotaFactory = Arc<dyn Fn(&Tenant, u64) -> QuotaHandle + Send + Sync>;

#[derive(Clone)]
pub struct Engine {
    deps: Arc<EngineDeps>,
    registry: Addr<Registry>,
    /// Pending approvals and questions: decisions go through it straight to their run.
    desk: Arc<crate::hitl::ApprovalDesk>,
    live_sessions: Arc<crate::live_sessions::LiveSessions>,
    /// Every tenant's quota handle, outside the actor tree: admission looks it up here and asks
    /// it in one hop, instead of going registry → supervisor → quota actor. It outlives the
    /// tenant's supervisor (which stops when idle), so a window or a reservation is never reset
    /// by an idle spell.
    quotas: Arc<std::sync::Mutex<std::collections::HashMap<TenantId, QuotaHandle>>>,
    make_quota: QuotaFactory,
    /// Set once the process is stopping: new runs are refused (see [`Engine::drain`]).
    draining: Arc<std::sync::atomic::AtomicBool>,
}

/// A live session the caller may use. While a handle (or a clone) exists, the session's actor
/// is not evicted (see [`crate::live_sessions`]).
#[derive(Clone)]
pub struct SessionHandle {
    pub session: Session,
    pub addr: Addr<SessionActor>,
    _guard: crate::live_sessions::LeaseGuard,
}

#[derive(Debug, Clone, Default)]
pub struct CreateSession {
    pub id: Option<SessionId>,
    pub assistant_id: Option<AssistantId>,
    pub metadata: Option<Value>,
    pub auto_approve: Option<bool>,
    /// Made for one stateless OpenAI-compatible call: not counted against
    /// `max_sessions_per_user` (docs/openai.md). Never set from a client's input.
    pub stateless: bool,
}

/// A message for [`Engine::chat`].
#[derive(Debug, Clone, Default)]
pub struct ChatCommand {
    /// The caller's session; `None` creates one as `new_session` says.
    pub session_id: Option<SessionId>,
    pub new_session: CreateSession,
    pub message: String,
    pub enqueue: bool,
    /// Subscribed before the message is sent, so it gets every event of the run.
    pub subscriber: Option<Subscriber>,
    /// The id of the request that sent the message (`X-Request-Id`), for the log.
    pub request_id: Option<String>,
    /// Functions the client declares for the run (the Responses API's function tools),
    /// offered to the model beside the assistant's tools; a call to one waits, as a question
    /// waits, for the client's output (`Decision::Answer`). Check them first with
    /// [`Engine::check_client_tools`]. Such a message is never queued.
    pub client_tools: Vec<agentry_schema::api::ClientTool>,
}

pub struct ChatStarted {
    pub handle: SessionHandle,
    pub accepted: ChatAccepted,
}

impl Engine {
    /// Start the registry. Call inside an actix system. `arbiters` threads carry the session
    /// actors (0: the current arbiter).
    pub fn start(deps: EngineDeps, arbiters: usize, tenant_idle_after: Duration) -> Engine {
        let deps_draining = deps.draining.clone();
        let deps = Arc::new(deps);
        let pool = Arc::new(ArbiterPool::new(arbiters));
        let desk = Arc::new(crate::hitl::ApprovalDesk::new());
        let live_sessions = Arc::new(crate::live_sessions::LiveSessions::new(
            deps.config.max_live_sessions,
        ));
        let registry = Registry::new(
            deps.clone(),
            pool.clone(),
            tenant_idle_after,
            desk.clone(),
            live_sessions.clone(),
        )
        .start();
        // Single-node mode: one quota actor per tenant, spread over the arbiters, restarted in
        // place (same address) if it stops or panics.
        let make_quota: QuotaFactory = Arc::new(move |tenant: &Tenant, used: u64| {
            let state = QuotaState::new(tenant.quotas, used, Utc::now());
            QuotaHandle::local(crate::supervise::start_supervised(
                &pool.pick(),
                "quota",
                move |_| QuotaActor::new(state),
            ))
        });
        Engine {
            deps,
            registry,
            desk,
            live_sessions,
            quotas: Default::default(),
            make_quota,
            draining: deps_draining,
        }
    }

    /// How many session actors are live in this process (at most about
    /// `max_live_sessions` once the idle ones over it have left).
    pub fn live_sessions(&self) -> usize {
        self.live_sessions.len()
    }

    /// Keep quotas elsewhere from now on (cluster mode: Redis). Call before the first request.
    pub fn with_quotas(mut self, make_quota: QuotaFactory) -> Engine {
        self.make_quota = make_quota;
        self
    }

    pub fn deps(&self) -> &Arc<EngineDeps> {
        &self.deps
    }

    /// The process is stopping: refuse new runs (`ShuttingDown`) from now on. Runs already
    /// going continue; what is unfinished when the process exits resumes at the next start.
    pub fn drain(&self) {
        self.draining
            .store(true, std::sync::atomic::Ordering::SeqCst);
    }

    pub fn is_draining(&self) -> bool {
        self.draining.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// How many tenants have a live supervisor (for metrics and tests).
    pub async fn live_tenants(&self) -> Result<usize, EngineError> {
        Ok(self.registry.send(TenantCount).await?)
    }

    pub(crate) async fn supervisor(
        &self,
        tenant: &Tenant,
    ) -> Result<Addr<TenantSupervisor>, EngineError> {
        if let Some(addr) = self.registry.send(LiveTenant(tenant.id)).await? {
            return Ok(addr);
        }
        let quota = self.quota(tenant).await?;
        Ok(self
            .registry
            .send(GetTenant {
                tenant: tenant.clone(),
                quota,
            })
            .await?)
    }

    fn known_quota(&self, tenant: TenantId) -> Option<QuotaHandle> {
        let quotas = self.quotas.lock().unwrap_or_else(|p| p.into_inner());
        quotas.get(&tenant).filter(|q| q.is_alive()).cloned()
    }

    /// The tenant's quota handle: a table lookup, made (from the store's count of today's
    /// tokens) the first time the tenant is seen, or again if its keeper stopped.
    pub async fn quota(&self, tenant: &Tenant) -> Result<QuotaHandle, EngineError> {
        if let Some(q) = self.known_quota(tenant.id) {
            return Ok(q);
        }
        let midnight = Utc::now()
            .date_naive()
            .and_hms_opt(0, 0, 0)
            .map(|t| t.and_utc())
            .unwrap_or_else(Utc::now);
        let used = executions::tokens_since(&self.deps.db, &tenant.scope(), midnight).await?;
        let mut quotas = self.quotas.lock().unwrap_or_else(|p| p.into_inner());
        // Another request may have made it while the store answered: the first one wins.
        if let Some(q) = quotas.get(&tenant.id).filter(|q| q.is_alive()) {
            return Ok(q.clone());
        }
        let q = (self.make_quota)(tenant, used);
        quotas.insert(tenant.id, q.clone());
        Ok(q)
    }

    /// Check the functions a client declares for a run of `assistant` (see
    /// [`ChatCommand::client_tools`]): each name is 1–64 letters, digits, `_` or `-`, and
    /// unique; `parameters` is a JSON Schema object that compiles; and no name is one of the
    /// run's own tools — the assistant's built-ins, the user's MCP tools, `task` — as the
    /// run would compose them for `user` (connecting the user's MCP servers if need be, which
    /// the run reuses). `Validation` (field `tools`) naming the tool otherwise.
    pub async fn check_client_tools(
        &self,
        tenant: Arc<Tenant>,
        user: &UserScope,
        assistant: &AssistantId,
        tools: &[ClientTool],
    ) -> Result<(), EngineError> {
        let bad = |message: String| EngineError::Validation {
            field: "tools",
            message,
        };
        let mut seen = std::collections::HashSet::new();
        for t in tools {
            let ok_name = (1..=64).contains(&t.name.len())
                && t.name
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
            if !ok_name {
                return Err(bad(format!(
                    "the function tool name {:?} is not valid: use 1 to 64 letters, digits, `_` or `-`",
                    t.name
                )));
            }
            if !seen.insert(t.name.as_str()) {
                return Err(bad(format!(
                    "the function tool {:?} is declared twice",
                    t.name
                )));
            }
            if !t.parameters.is_object() {
                return Err(bad(format!(
                    "the parameters of the function tool {:?} must be a JSON Schema object",
                    t.name
                )));
            }
            agentry_tools::client::ClientFunction::compile(t).map_err(|e| {
                bad(format!(
                    "the parameters of the function tool {:?} are not a valid JSON Schema: {}",
                    t.name,
                    match e {
                        agentry_tools::tool::RegistryError::InvalidSchema { reason, .. } => reason,
                        other => other.to_string(),
                    }
                ))
            })?;
        }
        if tools.is_empty() {
            return Ok(());
        }
        let scope = tenant.scope();
        let (assistant, agent) = match self.deps.assistants.get(tenant.id, assistant) {
            Some((kept, _)) => kept,
            None => {
                let a = crate::session::load_assistant(&self.deps, &scope, assistant).await?;
                let agent = crate::profiles::effective(&self.deps.db, &scope, &a).await?;
                (a, agent)
            }
        };
        let task_allowed = crate::tools::assistant_allows(
            agent.tools.as_deref(),
            &crate::agent::task::task_spec(),
        );
        let mcp = self.mcp_pool(&tenant).await?;
        let own = self
            .deps
            .tools
            .tools_for(&crate::deps::ToolRequest {
                tenant,
                user_id: user.user_id,
                role: user.role,
                custom_role: user.custom_role,
                // Not a session's tools: a session's are the same for every run of its user.
                session_id: SessionId(uuid::Uuid::nil()),
                assistant,
                agent,
                mcp,
            })
            .await;
        for t in tools {
            if own.registry.contains(&t.name)
                || (task_allowed && t.name == crate::agent::task::TASK_TOOL)
            {
                return Err(bad(format!(
                    "the function tool {:?} has the name of one of the assistant's own tools; rename it",
                    t.name
                )));
            }
        }
        Ok(())
    }

    /// The tenant's MCP pool (None when MCP is not configured).
    pub async fn mcp_pool(
        &self,
        tenant: &Tenant,
    ) -> Result<Option<Addr<crate::mcp_pool::McpPoolActor>>, EngineError> {
        Ok(self
            .supervisor(tenant)
            .await?
            .send(crate::tenant::GetMcpPool)
            .await?)
    }

    /// The platform's MCP config file changed: every live tenant's pool drops the connections it
    /// affects.
    pub async fn mcp_file_changed(
        &self,
        diff: Arc<agentry_mcp::config_file::ConfigDiff>,
    ) -> Result<(), EngineError> {
        self.registry
            .send(crate::registry::BroadcastFileChange(diff))
            .await?;
        Ok(())
    }

    /// The per-tenant request rate limit, for every authenticated API request and every
    /// WebSocket frame that starts work (chat, hitl_decision). One hop: the quota handle comes
    /// from the engine's table.
    pub async fn admit_request(&self, tenant: &Tenant) -> Result<(), EngineError> {
        match self.quota(tenant).await?.admit_request().await {
            // Redis down: reads, cancels and replays go on (only new runs and sessions are
            // refused, fail closed, where they are admitted): the rate limit fails open.
            Err(crate::quota::QuotaError::Coordination(cause)) => {
                tracing::warn!(error = %cause, "requests_per_minute not counted: Redis does not answer");
                Ok(())
            }
            r => Ok(r?),
        }
    }

    /// The tenant's row changed: its quotas apply to the next admission, the live supervisor
    /// picks it up; a suspended tenant's actors stop.
    pub async fn tenant_changed(&self, tenant: &Tenant) -> Result<(), EngineError> {
        if let Some(q) = self.known_quota(tenant.id) {
            q.set_quotas(tenant.quotas);
        }
        if tenant.status == TenantStatus::Suspended {
            self.registry.send(StopTenant(tenant.id)).await?;
        } else if let Some(sup) = self.registry.send(LiveTenant(tenant.id)).await? {
            sup.do_send(crate::tenant::UpdateTenant(Arc::new(tenant.clone())));
        }
        Ok(())
    }

    /// An assistant was changed or deleted: live sessions that keep it load it again for
    /// their next run. Returns once every live session has heard, so a run asked for after
    /// this returns (a WebSocket frame goes to its session directly, not through the
    /// supervisor) uses the new assistant.
    pub async fn assistant_changed(
        &self,
        tenant: agentry_schema::ids::TenantId,
        assistant: &agentry_schema::ids::AssistantId,
    ) -> Result<(), EngineError> {
        self.deps.assistants.changed(tenant, Some(assistant));
        if let Some(sup) = self.registry.send(LiveTenant(tenant)).await? {
            sup.send(crate::session::AssistantChanged(assistant.clone()))
                .await?;
        }
        Ok(())
    }

    /// A profile (or anything else every assistant of the tenant may use) changed: live
    /// sessions load their assistant again for their next run. Returns once every live
    /// session has heard, as [`Engine::assistant_changed`].
    pub async fn assistants_changed(
        &self,
        tenant: agentry_schema::ids::TenantId,
    ) -> Result<(), EngineError> {
        self.deps.assistants.changed(tenant, None);
        if let Some(sup) = self.registry.send(LiveTenant(tenant)).await? {
            sup.send(crate::session::AssistantsChanged).await?;
        }
        Ok(())
    }

    pub async fn tenant_deleted(
        &self,
        tenant: agentry_schema::ids::TenantId,
    ) -> Result<(), EngineError> {
        self.quotas
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&tenant);
        Ok(self.registry.send(StopTenant(tenant)).await?)
    }

    /// Remove a deleted tenant's files: every user's workspace. Call after its rows are gone
    /// and its actors stopped.
    pub async fn remove_tenant_files(
        &self,
        tenant: agentry_schema::ids::TenantId,
    ) -> std::io::Result<()> {
        remove_tree(self.deps.tenant_workspaces(tenant)).await
    }

    /// Remove a deleted user's workspace.
    pub async fn remove_user_files(
        &self,
        tenant: agentry_schema::ids::TenantId,
        user: agentry_schema::ids::UserId,
    ) -> std::io::Result<()> {
        remove_tree(self.deps.tenant_workspaces(tenant).join(user.to_string())).await
    }

    /// Create a session for the caller, within `max_sessions_per_user`.
    pub async fn create_session(
        &self,
        tenant: &Tenant,
        user: &UserScope,
        req: CreateSession,
    ) -> Result<Session, EngineError> {
        let scope = tenant.scope();
        if req.auto_approve == Some(true) {
            may_auto_approve(tenant, user)?;
        }
        let assistant_id = req
            .assistant_id
            .unwrap_or_else(AssistantId::default_assistant);
        crate::session::assistant_exists(&self.deps, &scope, &assistant_id).await?;
        if req.stateless {
            // Made for one stateless OpenAI-compatible call: not counted against
            // max_sessions_per_user (docs/openai.md), so no quota to reserve.
            let new = NewSession {
                id: req.id,
                user_id: user.user_id,
                assistant_id,
                auto_approve: req.auto_approve.unwrap_or(false),
                metadata: req.metadata.unwrap_or(Value::Null),
            };
            return Ok(sessions::create_stateless(&self.deps.db, &scope, new).await?);
        }
        let quota = self.quota(tenant).await?;
        // The user's stored sessions are counted only when the quota's keeper has not seen the
        // user yet (a read of all their sessions per new session otherwise).
        if !quota.reserve_session(user.user_id, None).await? {
            let stored = sessions::count_by_user(&self.deps.db, &scope, user.user_id).await?;
            quota.reserve_session(user.user_id, Some(stored)).await?;
        }
        // The id is chosen here, not by the insert, so that the creation goes through the
        // session's own writer connection like its later writes (without one, every new
        // session's creation queued on the same connection of the four).
        let id = req.id.unwrap_or_default();
        let new = NewSession {
            id: Some(id),
            user_id: user.user_id,
            assistant_id,
            auto_approve: req.auto_approve.unwrap_or(false),
            metadata: req.metadata.unwrap_or(Value::Null),
        };
        let created = self
            .deps
            .writer
            .write_for(id.0, move |txn| {
                let new = new.clone();
                Box::pin(async move { sessions::create(txn, &scope, new).await })
            })
            .await;
        match created {
            Ok(s) => {
                self.deps.fresh_sessions.created(s.id);
                Ok(s)
            }
            Err(e) => {
                quota.release_session(user.user_id);
                Err(e.into())
            }
        }
    }

    /// A run of `session` was stored by something other than its actor (the MCP endpoint's
    /// audit of a tool call): the session's actor, when it starts, recovers by reading what is
    /// stored (see [`crate::deps::FreshSessions`]).
    pub fn run_recorded_outside(&self, session: SessionId) {
        self.deps.fresh_sessions.take(session);
    }

    /// Load a session the caller may see: their own, or any of the tenant's for an admin.
    /// Anything else is "not found".
    pub async fn load_session(
        &self,
        tenant: &Tenant,
        user: &UserScope,
        id: SessionId,
    ) -> Result<Session, EngineError> {
        let s = sessions::get(&self.deps.db, &tenant.scope(), id)
            .await?
            .ok_or_else(|| EngineError::NotFound(format!("session {id}")))?;
        if s.user_id != user.user_id && !user.is_admin() {
            return Err(EngineError::NotFound(format!("session {id}")));
        }
        Ok(s)
    }

    /// The session's live actor, started if needed.
    pub async fn open_session(
        &self,
        tenant: &Tenant,
        user: &UserScope,
        id: SessionId,
    ) -> Result<SessionHandle, EngineError> {
        let session = self.load_session(tenant, user, id).await?;
        let sup = self.supervisor(tenant).await?;
        let held = sup
            .send(StartSession {
                session: session.clone(),
                home: Arbiter::try_current(),
            })
            .await?;
        Ok(SessionHandle {
            session,
            addr: held.addr,
            _guard: held.guard,
        })
    }

    /// Send a message: into an existing session, or a new one. The message is stored before this
    /// returns; the run's events go to the session's subscribers. A session created for a
    /// message that is then refused (a quota, a run in progress) is deleted again: a refused
    /// request changes nothing, and no empty session counts against `max_sessions_per_user`.
    pub async fn chat(
        &self,
        tenant: &Tenant,
        user: &UserScope,
        cmd: ChatCommand,
    ) -> Result<ChatStarted, EngineError> {
        check_message(&cmd.message)?;
        self.check_token_budget(tenant).await?;
        let handle = match cmd.session_id {
            Some(id) => self.open_session(tenant, user, id).await?,
            None => {
                let s = self.create_session(tenant, user, cmd.new_session).await?;
                match self.open_session(tenant, user, s.id).await {
                    Ok(handle) => handle,
                    Err(e) => {
                        self.discard_session(tenant, user, s.id).await;
                        return Err(e);
                    }
                }
            }
        };
        let started = async {
            if let Some(to) = cmd.subscriber {
                self.subscribe(&handle, None, to).await?;
            }
            self.start_chat_with(
                &handle,
                user,
                cmd.message,
                cmd.client_tools,
                cmd.enqueue,
                cmd.request_id,
            )
            .await
        };
        match started.await {
            Ok(accepted) => Ok(ChatStarted { handle, accepted }),
            Err(e) => {
                if cmd.session_id.is_none() {
                    self.discard_session(tenant, user, handle.session.id).await;
                }
                Err(e)
            }
        }
    }

    /// The one way to run and watch a run, whatever the transport: validate, open (or create)
    /// the session, subscribe a channel, send the message, and hand back the run's events as a
    /// stream that ends after its `done`. The same bad input gets the same [`EngineError`] on
    /// every transport. `cmd.subscriber` is ignored: the stream is the subscriber.
    pub async fn stream_run(
        &self,
        tenant: &Tenant,
        user: &UserScope,
        mut cmd: ChatCommand,
    ) -> Result<RunStream, EngineError> {
        let (to, rx) = channel_subscriber();
        cmd.subscriber = Some(to);
        let started = self.chat(tenant, user, cmd).await?;
        Ok(RunStream::new(started.handle, started.accepted, rx))
    }

    /// Watch a run that is already going (paused on an approval, say) from after `after_seq`:
    /// the same [`RunStream`] as [`Engine::stream_run`]'s, for an adapter whose client comes
    /// back in a later request (the Responses API's `previous_response_id`). Subscribe before
    /// deciding what the run waits for, so nothing it does next is missed. An event at or
    /// below `after_seq` may still arrive (a watcher's tail can hand on one it replayed): the
    /// caller skips what it saw.
    pub async fn follow_run(
        &self,
        tenant: &Tenant,
        user: &UserScope,
        session: SessionId,
        run: RunId,
        after_seq: u64,
    ) -> Result<RunStream, EngineError> {
        let handle = self.open_session(tenant, user, session).await?;
        let (to, rx) = channel_subscriber();
        self.subscribe(&handle, Some(after_seq), to).await?;
        let accepted = ChatAccepted {
            run_id: run,
            queued: false,
        };
        Ok(RunStream::new(handle, accepted, rx))
    }

    /// [`Engine::stream_run`], collected: every event of the run, `done` last.
    pub async fn run_to_done(
        &self,
        tenant: &Tenant,
        user: &UserScope,
        cmd: ChatCommand,
    ) -> Result<RunOutput, EngineError> {
        let stream = self.stream_run(tenant, user, cmd).await?;
        let (session_id, run_id) = (stream.session_id(), stream.run_id());
        let events = futures::StreamExt::collect::<Vec<_>>(stream)
            .await
            .into_iter()
            .map(|ev| (*ev.event).clone())
            .collect();
        Ok(RunOutput {
            session_id,
            run_id,
            events,
        })
    }

    /// A chat over a spent `tokens_per_day` is refused before anything is created for it (a
    /// session, a message); the run's admission in the session decides all the same. Redis not
    /// answering is left to that admission, which fails closed.
    pub async fn check_token_budget(&self, tenant: &Tenant) -> Result<(), EngineError> {
        if tenant.quotas.tokens_per_day == 0 {
            return Ok(());
        }
        match self.quota(tenant).await?.check_budget().await {
            Err(e @ crate::quota::QuotaError::Refused(_)) => Err(e.into()),
            _ => Ok(()),
        }
    }

    async fn discard_session(&self, tenant: &Tenant, user: &UserScope, id: SessionId) {
        if let Err(e) = self.delete_session(tenant, user, id).await {
            tracing::warn!(error = %e, session_id = %id, "removing the session of a refused chat failed");
        }
    }

    /// Send a message into an open session.
    pub async fn start_chat(
        &self,
        handle: &SessionHandle,
        user: &UserScope,
        message: String,
        enqueue: bool,
    ) -> Result<ChatAccepted, EngineError> {
        self.start_chat_for(handle, user, message, enqueue, None)
            .await
    }

    /// [`Engine::start_chat`] on behalf of a request: a run that fails is logged with its id.
    /// Cluster mode: a session another replica runs gets the message there (forwarded).
    pub async fn start_chat_for(
        &self,
        handle: &SessionHandle,
        user: &UserScope,
        message: String,
        enqueue: bool,
        request_id: Option<String>,
    ) -> Result<ChatAccepted, EngineError> {
        self.start_chat_with(handle, user, message, Vec::new(), enqueue, request_id)
            .await
    }

    /// [`Engine::start_chat_for`] with the client's function tools for the run.
    async fn start_chat_with(
        &self,
        handle: &SessionHandle,
        user: &UserScope,
        message: String,
        client_tools: Vec<ClientTool>,
        enqueue: bool,
        request_id: Option<String>,
    ) -> Result<ChatAccepted, EngineError> {
        // Kept for the owner only in cluster mode: the actor takes the message.
        let kept = self
            .deps
            .coordination
            .is_some()
            .then(|| (message.clone(), client_tools.clone(), request_id.clone()));
        match self
            .start_chat_here(handle, user, message, client_tools, enqueue, request_id)
            .await
        {
            Err(EngineError::SessionOwnedElsewhere { owner, .. }) if kept.is_some() => {
                let (message, client_tools, request_id) = kept.unwrap_or_default();
                self.forward_chat(
                    owner,
                    handle,
                    user,
                    message,
                    client_tools,
                    enqueue,
                    request_id,
                )
                .await
            }
            res => res,
        }
    }

    /// A message into the session on this replica, never forwarded.
    pub(crate) async fn start_chat_here(
        &self,
        handle: &SessionHandle,
        user: &UserScope,
        message: String,
        client_tools: Vec<ClientTool>,
        enqueue: bool,
        request_id: Option<String>,
    ) -> Result<ChatAccepted, EngineError> {
        if self.is_draining() {
            return Err(EngineError::ShuttingDown);
        }
        check_message(&message)?;
        handle
            .addr
            .send(StartChat {
                user: *user,
                message,
                client_tools,
                enqueue,
                request_id,
                span: tracing::Span::current(),
            })
            .await?
    }

    pub async fn subscribe(
        &self,
        handle: &SessionHandle,
        after_seq: Option<u64>,
        to: impl Into<Subscriber>,
    ) -> Result<SubscriptionId, EngineError> {
        handle
            .addr
            .send(Subscribe {
                after_seq,
                subscriber: to.into(),
            })
            .await?
    }

    /// Where the session's stream is now (see [`crate::session::Position`]): subscribe from
    /// here to get everything numbered after this moment.
    pub async fn position(&self, handle: &SessionHandle) -> Result<u64, EngineError> {
        handle.addr.send(crate::session::Position).await?
    }

    pub fn unsubscribe(&self, handle: &SessionHandle, id: SubscriptionId) {
        handle.addr.do_send(Unsubscribe(id));
    }

    pub async fn status(&self, handle: &SessionHandle) -> Result<SessionStatus, EngineError> {
        Ok(handle.addr.send(GetStatus).await?)
    }

    /// Cancel the session's active run. `NoActiveRun` when there is none. Cluster mode: a run
    /// another replica runs is cancelled there.
    pub async fn cancel(
        &self,
        tenant: &Tenant,
        user: &UserScope,
        id: SessionId,
    ) -> Result<RunId, EngineError> {
        match self.cancel_here(tenant, user, id).await {
            Err(EngineError::NoActiveRun) if self.deps.coordination.is_some() => {
                self.forward_cancel(tenant, user, id).await
            }
            res => res,
        }
    }

    /// Cancel the session's run on this replica, never forwarded.
    pub(crate) async fn cancel_here(
        &self,
        tenant: &Tenant,
        user: &UserScope,
        id: SessionId,
    ) -> Result<RunId, EngineError> {
        let session = self.load_session(tenant, user, id).await?;
        let sup = self.supervisor(tenant).await?;
        let Some(held) = sup.send(LiveSession(session.id)).await? else {
            return Err(EngineError::NoActiveRun);
        };
        held.addr.send(CancelRun).await?
    }

    /// A decision on a pending approval or question of the session.
    ///
    /// The hot path is one hop: the desk checks that the request is pending for this caller's
    /// session and hands the decision to the waiting run, with no database read and no actor in
    /// between. Only a decision the desk cannot deliver reads the store, to tell "not yours or
    /// never existed" (404, the same either way) from "over" (409).
    ///
    /// Cluster mode: a request still pending in the store whose run another replica runs is
    /// decided there (forwarded); one whose replica stopped is `RunResuming` until another
    /// replica has resumed the run (it asks again with the same request id).
    pub async fn decide(
        &self,
        tenant: &Tenant,
        user: &UserScope,
        id: SessionId,
        request_id: ApprovalId,
        decision: Decision,
    ) -> Result<(), EngineError> {
        // The desk consumes the decision it delivers: a copy only where it may go elsewhere.
        let kept = self.deps.coordination.is_some().then(|| decision.clone());
        match (
            self.decide_here(tenant, user, id, request_id, decision)
                .await,
            kept,
        ) {
            (Err(EngineError::ApprovalNotPending(_)), Some(decision)) => {
                self.decide_elsewhere(tenant, user, id, request_id, decision)
                    .await
            }
            (res, _) => res,
        }
    }

    /// A decision taken on this replica, never forwarded.
    pub(crate) async fn decide_here(
        &self,
        tenant: &Tenant,
        user: &UserScope,
        id: SessionId,
        request_id: ApprovalId,
        decision: Decision,
    ) -> Result<(), EngineError> {
        if self
            .desk
            .decide(request_id, tenant.id, id, user, decision)?
        {
            return Ok(());
        }
        let session = self.load_session(tenant, user, id).await?;
        match approvals::get(&self.deps.db, &tenant.scope(), request_id).await? {
            // Known to this session but not pending for a live run here: over, its run is gone,
            // or (cluster mode) it waits on another replica.
            Some(a) if a.session_id == session.id => {
                Err(EngineError::ApprovalNotPending(request_id.to_string()))
            }
            _ => Err(EngineError::NotFound(format!("approval {request_id}"))),
        }
    }

    /// A request of the session not pending on this replica: if the store says it is still
    /// pending, its run is on another replica (forwarded there) or being resumed.
    async fn decide_elsewhere(
        &self,
        tenant: &Tenant,
        user: &UserScope,
        id: SessionId,
        request_id: ApprovalId,
        decision: Decision,
    ) -> Result<(), EngineError> {
        let scope = tenant.scope();
        let not_pending = || EngineError::ApprovalNotPending(request_id.to_string());
        let Some(a) = approvals::get(&self.deps.db, &scope, request_id).await? else {
            return Err(not_pending());
        };
        if a.status != approvals::ApprovalStatus::Pending {
            return Err(not_pending());
        }
        if self
            .forward_decision(tenant, user, id, request_id, decision)
            .await?
        {
            return Ok(());
        }
        match executions::get(&self.deps.db, &scope, a.execution_id).await? {
            Some(run) if !run.status.is_finished() => Err(EngineError::RunResuming),
            _ => Err(not_pending()),
        }
    }

    /// How many approvals and questions wait for a decision, in the whole process.
    pub fn approvals_pending(&self) -> usize {
        self.desk.len()
    }

    /// Delete a session: stop its actor (a running run ends with `done`), then its rows.
    pub async fn delete_session(
        &self,
        tenant: &Tenant,
        user: &UserScope,
        id: SessionId,
    ) -> Result<(), EngineError> {
        let session = self.load_session(tenant, user, id).await?;
        let sup = self.supervisor(tenant).await?;
        if let Some(held) = sup.send(LiveSession(session.id)).await? {
            held.addr.do_send(Shutdown);
        }
        sessions::delete(&self.deps.db, &tenant.scope(), session.id).await?;
        if !session.stateless
            && let Ok(quota) = self.quota(tenant).await
        {
            quota.release_session(session.user_id);
        }
        Ok(())
    }

    /// Sessions the retention sweep deleted (their rows are gone already): stop their actors
    /// on this replica, if any were live, and give their users' session counts back (for the
    /// sessions that counted: `true` in the tuple).
    pub async fn sessions_swept(
        &self,
        tenant: &Tenant,
        swept: &[(SessionId, agentry_schema::ids::UserId, bool)],
    ) -> Result<(), EngineError> {
        if let Some(sup) = self.registry.send(LiveTenant(tenant.id)).await? {
            for (id, _, _) in swept {
                if let Some(held) = sup.send(LiveSession(*id)).await? {
                    held.addr.do_send(Shutdown);
                }
            }
        }
        let quota = self.quota(tenant).await?;
        for (_, user, counted) in swept {
            if *counted {
                quota.release_session(*user);
            }
        }
        Ok(())
    }

    /// At start-up, before anything numbers events: write the run ends the previous process
    /// could not record (its journal, see [`crate::journal`]) to the database, so those runs
    /// are never run again and every `seq` their clients saw keeps its meaning. A run whose
    /// stream already holds a `done` is left as it is. Returns how many were written.
    pub async fn reconcile_unrecorded(&self) -> Result<usize, EngineError> {
        let dir = &self.deps.config.data_dir;
        let entries = crate::journal::read(dir).map_err(|e| {
            EngineError::Internal(format!("reading the journal of unrecorded runs: {e}"))
        })?;
        let mut written = 0;
        for entry in &entries {
            let scope = PlatformScope::new().tenant(entry.tenant_id);
            if agentry_store::events::done_of_run(&self.deps.db, &scope, entry.end.run_id)
                .await?
                .is_none()
            {
                match executions::record_end(&self.deps.db, &scope, &entry.end).await {
                    Ok(()) => written += 1,
                    // Another replica owns the session now and carried its run on: this end is
                    // stale (the refusal is logged).
                    Err(agentry_store::StoreError::Fenced { .. }) => {}
                    Err(e) => return Err(e.into()),
                }
            }
        }
        if !entries.is_empty() {
            crate::journal::clear(dir).map_err(|e| {
                EngineError::Internal(format!("clearing the journal of unrecorded runs: {e}"))
            })?;
            tracing::info!(
                written,
                "recorded the run ends the previous process could not"
            );
        }
        Ok(written)
    }

    /// At start-up: every run left unfinished by the previous process is resumed from its
    /// checkpoint or marked interrupted (its session actor does that when it starts; a run
    /// whose stream already holds its `done` only gets that status recorded), queued messages
    /// are started, and runs of the last week that ended without a `done` in their stream get
    /// one (`interrupted`). Returns how many sessions were picked up.
    pub async fn recover(&self) -> Result<usize, EngineError> {
        self.reconcile_unrecorded().await?;
        let platform = PlatformScope::new();
        let unfinished = executions::list_unfinished(&self.deps.db, &platform).await?;
        let since = chrono::Utc::now() - chrono::Duration::days(7);
        let without_done =
            executions::finished_without_done(&self.deps.db, &platform, since).await?;
        let mut missing: std::collections::HashMap<_, Vec<_>> = Default::default();
        for exec in &without_done {
            missing
                .entry((exec.tenant_id, exec.session_id))
                .or_default()
                .push((exec.id, exec.parent_execution_id));
        }
        let mut seen = std::collections::HashSet::new();
        for exec in unfinished.iter().chain(without_done.iter()) {
            if !seen.insert((exec.tenant_id, exec.session_id)) {
                continue;
            }
            // Stored runs to recover: whatever this process remembers, the session is not fresh.
            self.deps.fresh_sessions.take(exec.session_id);
            let Some(tenant) =
                agentry_store::tenants::get(&self.deps.db, &platform, exec.tenant_id).await?
            else {
                continue;
            };
            let scope = tenant.scope();
            let Some(session) = sessions::get(&self.deps.db, &scope, exec.session_id).await? else {
                if !exec.status.is_finished() {
                    // The session is gone: its run can only end.
                    executions::update(
                        &self.deps.db,
                        &scope,
                        exec.id,
                        executions::ExecutionStatus::Interrupted,
                        exec.steps,
                        exec.token_usage,
                        Some("session deleted"),
                    )
                    .await?;
                }
                continue;
            };
            let sup = self.supervisor(&tenant).await?;
            let held = sup
                .send(StartSession {
                    session,
                    home: None,
                })
                .await?;
            if let Some(runs) = missing.remove(&(exec.tenant_id, exec.session_id)) {
                held.addr.do_send(crate::session::AddMissingDone(runs));
            }
        }
        Ok(seen.len())
    }
}

/// The checks every transport's message gets, so each answers the same `validation_error`.
pub fn check_message(message: &str) -> Result<(), EngineError> {
    if message.trim().is_empty() {
        return Err(EngineError::Validation {
            field: "message",
            message: "`message` must not be empty".into(),
        });
    }
    if message.len() > MAX_MESSAGE_BYTES {
        return Err(EngineError::Validation {
            field: "message",
            message: format!(
                "`message` is {} bytes; the limit is {MAX_MESSAGE_BYTES}",
                message.len()
            ),
        });
    }
    Ok(())
}

/// A subscriber that puts a session's events into a channel: for adapters that are not actors
/// (REST, SSE, `/mcp`, `/v1/chat/completions`). No actor is started; the session drops the
/// subscriber once the receiver is dropped.
pub fn channel_subscriber() -> (Subscriber, mpsc::UnboundedReceiver<SessionEvent>) {
    let (tx, rx) = mpsc::unbounded_channel();
    (Subscriber::Channel(tx), rx)
}

/// One run being watched, from the facade's [`Engine::stream_run`]: the run's own events and
/// those of its `task` child runs (nested to any depth, each with its `parent_run_id`) in
/// order (other runs of the session are skipped), ending after the run's own `done`. Every
/// adapter that waits for a run's end reads it through this — the one "read until `done`" in
/// the code.
pub struct RunStream {
    pub handle: SessionHandle,
    pub accepted: ChatAccepted,
    run: String,
    /// The run and its child runs seen so far.
    tree: std::collections::HashSet<String>,
    rx: mpsc::UnboundedReceiver<SessionEvent>,
    finished: bool,
}

impl RunStream {
    /// The events of `accepted`'s run (and its children) as they come on `rx`.
    fn new(
        handle: SessionHandle,
        accepted: ChatAccepted,
        rx: mpsc::UnboundedReceiver<SessionEvent>,
    ) -> RunStream {
        let run = accepted.run_id.to_string();
        RunStream {
            tree: std::collections::HashSet::from([run.clone()]),
            run,
            handle,
            accepted,
            rx,
            finished: false,
        }
    }

    pub fn session_id(&self) -> SessionId {
        self.handle.session.id
    }

    pub fn run_id(&self) -> RunId {
        self.accepted.run_id
    }

    /// Read to the end of the run (after a cancel, say), discarding the events.
    pub async fn finish(mut self) {
        while futures::StreamExt::next(&mut self).await.is_some() {}
    }
}

impl futures::Stream for RunStream {
    type Item = SessionEvent;

    fn poll_next(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<SessionEvent>> {
        use std::task::Poll;
        let this = &mut *self;
        loop {
            if this.finished {
                return Poll::Ready(None);
            }
            match this.rx.poll_recv(cx) {
                Poll::Ready(Some(ev)) => {
                    let e = &ev.event;
                    if e.run_id != this.run {
                        // A child of the run (or of one of its children) joins the tree.
                        match &e.parent_run_id {
                            Some(p) if this.tree.contains(p) => {
                                this.tree.insert(e.run_id.clone());
                            }
                            _ => continue,
                        }
                    }
                    this.finished = e.is_done() && e.run_id == this.run;
                    return Poll::Ready(Some(ev));
                }
                // The session stopped without the run's `done` (deleted meanwhile).
                Poll::Ready(None) => {
                    this.finished = true;
                    return Poll::Ready(None);
                }
                Poll::Pending => return Poll::Pending,
            }
        }
    }
}

/// What [`Engine::run_to_done`] returns: every event of the run, its `done` last (absent only
/// when the session was deleted before the run ended).
pub struct RunOutput {
    pub session_id: SessionId,
    pub run_id: RunId,
    pub events: Vec<ExecutionEvent>,
}
