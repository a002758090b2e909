//! The engine facade: transport-neutral operations that REST, WebSocket and SSE all call
//! (CONVENTIONS 6). Each loads and authorizes what it needs from the store, then talks to the
//! actors.

use std::sync::Arc;
use std::time::Duration;

use actix::prelude::*;
use agentry_schema::frames::Decision;
use agentry_schema::ids::{ApprovalId, AssistantId, RunId, SessionId};
use agentry_store::approvals::{self, ApprovalStatus};
use agentry_store::sessions::{self, NewSession, Session};
use agentry_store::tenants::Tenant;
use agentry_store::{PlatformScope, UserScope, executions};
use chrono::Utc;
use serde_json::Value;
use tokio::sync::mpsc;

use crate::deps::EngineDeps;
use crate::error::EngineError;
use crate::quota::{AdmitRequest, QuotaActor, ReleaseSession, ReserveSession};
use crate::registry::{GetTenant, LiveTenant, Registry, StopTenant, TenantCount};
use crate::session::{
    CancelRun, ChatAccepted, Decide, GetStatus, SessionActor, SessionEvent, SessionStatus,
    Shutdown, StartChat, Subscribe, SubscriptionId, Unsubscribe,
};
use crate::tenant::{ArbiterPool, GetQuota, LiveSession, StartSession, TenantSupervisor};

/// The largest chat message accepted.
pub const MAX_MESSAGE_BYTES: usize = 256 * 1024;

#[derive(Clone)]
pub struct Engine {
    deps: Arc<EngineDeps>,
    registry: Addr<Registry>,
}

/// A live session the caller may use.
#[derive(Clone)]
pub struct SessionHandle {
    pub session: Session,
    pub addr: Addr<SessionActor>,
}

#[derive(Debug, Clone, Default)]
pub struct CreateSession {
    pub id: Option<SessionId>,
    pub assistant_id: Option<AssistantId>,
    pub metadata: Option<Value>,
    pub auto_approve: Option<bool>,
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
    pub subscriber: Option<Recipient<SessionEvent>>,
}

pub struct ChatStarted {
    pub handle: SessionHandle,
    pub accepted: ChatAccepted,
}

impl Engine {
    /// Start the registry. Call inside an actix system. `arbiters` threads carry the session
    /// actors (0: the current arbiter).
    pub fn start(deps: EngineDeps, arbiters: usize, tenant_idle_after: Duration) -> Engine {
        let deps = Arc::new(deps);
        let pool = Arc::new(ArbiterPool::new(arbiters));
        let registry = Registry::new(deps.clone(), pool, tenant_idle_after).start();
        Engine { deps, registry }
    }

    pub fn deps(&self) -> &Arc<EngineDeps> {
        &self.deps
    }

    /// How many tenants have a live supervisor (for metrics and tests).
    pub async fn live_tenants(&self) -> Result<usize, EngineError> {
        Ok(self.registry.send(TenantCount).await?)
    }

    async fn supervisor(&self, tenant: &Tenant) -> Result<Addr<TenantSupervisor>, EngineError> {
        if let Some(addr) = self.registry.send(LiveTenant(tenant.id)).await? {
            return Ok(addr);
        }
        let midnight = Utc::now()
            .date_naive()
            .and_hms_opt(0, 0, 0)
            .map(|t| t.and_utc())
            .unwrap_or_else(Utc::now);
        let used = executions::tokens_since(&self.deps.db, &tenant.scope(), midnight).await?;
        Ok(self
            .registry
            .send(GetTenant {
                tenant: tenant.clone(),
                tokens_used_today: used,
            })
            .await?)
    }

    pub async fn quota(&self, tenant: &Tenant) -> Result<Addr<QuotaActor>, EngineError> {
        Ok(self.supervisor(tenant).await?.send(GetQuota).await?)
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

    /// The per-tenant request rate limit, for every authenticated API request.
    pub async fn admit_request(&self, tenant: &Tenant) -> Result<(), EngineError> {
        let quota = self.quota(tenant).await?;
        quota.send(AdmitRequest).await?.map_err(|r| {
            crate::metrics::record_quota_rejection(r.quota);
            EngineError::Quota {
                quota: r.quota,
                limit: r.limit,
                retry_after: r.retry_after,
            }
        })
    }

    /// The tenant's row changed: the live supervisor picks it up; a suspended tenant's actors stop.
    pub async fn tenant_changed(&self, tenant: &Tenant) -> Result<(), EngineError> {
        if tenant.status == agentry_store::tenants::TenantStatus::Suspended {
            self.registry.send(StopTenant(tenant.id)).await?;
        } else if let Some(sup) = self.registry.send(LiveTenant(tenant.id)).await? {
            sup.do_send(crate::tenant::UpdateTenant(Arc::new(tenant.clone())));
        }
        Ok(())
    }

    pub async fn tenant_deleted(
        &self,
        tenant: agentry_schema::ids::TenantId,
    ) -> Result<(), EngineError> {
        Ok(self.registry.send(StopTenant(tenant)).await?)
    }

    /// Create a session for the caller, within `max_sessions_per_user`.
    pub async fn create_session(
        &self,
        tenant: &Tenant,
        user: &UserScope,
        req: CreateSession,
    ) -> Result<Session, EngineError> {
        let scope = tenant.scope();
        let assistant_id = req
            .assistant_id
            .unwrap_or_else(AssistantId::default_assistant);
        crate::session::assistant_exists(&self.deps, &scope, &assistant_id).await?;
        let quota = self.quota(tenant).await?;
        let stored = sessions::count_by_user(&self.deps.db, &scope, user.user_id).await?;
        quota
            .send(ReserveSession {
                user: user.user_id,
                stored,
            })
            .await?
            .map_err(|r| {
                crate::metrics::record_quota_rejection(r.quota);
                EngineError::Quota {
                    quota: r.quota,
                    limit: r.limit,
                    retry_after: r.retry_after,
                }
            })?;
        let created = sessions::create(
            &self.deps.db,
            &scope,
            NewSession {
                id: req.id,
                user_id: user.user_id,
                assistant_id,
                auto_approve: req.auto_approve.unwrap_or(false),
                metadata: req.metadata.unwrap_or(Value::Null),
            },
        )
        .await;
        match created {
            Ok(s) => Ok(s),
            Err(e) => {
                quota.do_send(ReleaseSession { user: user.user_id });
                Err(e.into())
            }
        }
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
        let addr = sup
            .send(StartSession {
                session: session.clone(),
            })
            .await?;
        Ok(SessionHandle { session, addr })
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
            self.start_chat(&handle, user, cmd.message, cmd.enqueue)
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
        check_message(&message)?;
        handle
            .addr
            .send(StartChat {
                user: *user,
                message,
                enqueue,
            })
            .await?
    }

    pub async fn subscribe(
        &self,
        handle: &SessionHandle,
        after_seq: Option<u64>,
        to: Recipient<SessionEvent>,
    ) -> Result<SubscriptionId, EngineError> {
        handle
            .addr
            .send(Subscribe {
                after_seq,
                subscriber: to,
            })
            .await?
    }

    pub fn unsubscribe(&self, handle: &SessionHandle, id: SubscriptionId) {
        handle.addr.do_send(Unsubscribe(id));
    }

    pub async fn status(&self, handle: &SessionHandle) -> Result<SessionStatus, EngineError> {
        Ok(handle.addr.send(GetStatus).await?)
    }

    /// Cancel the session's active run. `NoActiveRun` when there is none.
    pub async fn cancel(
        &self,
        tenant: &Tenant,
        user: &UserScope,
        id: SessionId,
    ) -> Result<RunId, EngineError> {
        let session = self.load_session(tenant, user, id).await?;
        let sup = self.supervisor(tenant).await?;
        let Some(addr) = sup.send(LiveSession(session.id)).await? else {
            return Err(EngineError::NoActiveRun);
        };
        addr.send(CancelRun).await?
    }

    /// A decision on a pending approval or question of the session.
    pub async fn decide(
        &self,
        tenant: &Tenant,
        user: &UserScope,
        id: SessionId,
        request_id: ApprovalId,
        decision: Decision,
    ) -> Result<(), EngineError> {
        let session = self.load_session(tenant, user, id).await?;
        let sup = self.supervisor(tenant).await?;
        let live = sup.send(LiveSession(session.id)).await?;
        let result = match live {
            Some(addr) => {
                addr.send(Decide {
                    request_id,
                    decision,
                    by: user.user_id,
                })
                .await?
            }
            None => Err(EngineError::ApprovalNotPending(request_id.to_string())),
        };
        if let Err(EngineError::ApprovalNotPending(_)) = &result {
            // Unknown to this session at all → 404; known but over → 409.
            let row = approvals::get(&self.deps.db, &tenant.scope(), request_id).await?;
            match row {
                Some(a) if a.session_id == session.id => {
                    if a.status == ApprovalStatus::Pending {
                        // Pending in the store but no live waiter: its run is gone.
                        return Err(EngineError::ApprovalNotPending(request_id.to_string()));
                    }
                }
                _ => return Err(EngineError::NotFound(format!("approval {request_id}"))),
            }
        }
        result
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
        if let Some(addr) = sup.send(LiveSession(session.id)).await? {
            addr.do_send(Shutdown);
        }
        sessions::delete(&self.deps.db, &tenant.scope(), session.id).await?;
        if let Ok(quota) = sup.send(GetQuota).await {
            quota.do_send(ReleaseSession {
                user: session.user_id,
            });
        }
        Ok(())
    }

    /// At start-up: every run left unfinished by the previous process is resumed from its
    /// checkpoint or marked interrupted (its session actor does that when it starts), and queued
    /// messages are started. Returns how many sessions were picked up.
    pub async fn recover(&self) -> Result<usize, EngineError> {
        let unfinished = executions::list_unfinished(&self.deps.db, &PlatformScope::new()).await?;
        let mut seen = std::collections::HashSet::new();
        for exec in unfinished {
            if !seen.insert((exec.tenant_id, exec.session_id)) {
                continue;
            }
            let Some(tenant) =
                agentry_store::tenants::get(&self.deps.db, &PlatformScope::new(), exec.tenant_id)
                    .await?
            else {
                continue;
            };
            let scope = tenant.scope();
            let Some(session) = sessions::get(&self.deps.db, &scope, exec.session_id).await? else {
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
                continue;
            };
            let sup = self.supervisor(&tenant).await?;
            sup.send(StartSession { session }).await?;
        }
        Ok(seen.len())
    }
}

fn check_message(message: &str) -> Result<(), EngineError> {
    if message.trim().is_empty() {
        return Err(EngineError::BadRequest("message must not be empty".into()));
    }
    if message.len() > MAX_MESSAGE_BYTES {
        return Err(EngineError::BadRequest(format!(
            "message is {} bytes; the limit is {MAX_MESSAGE_BYTES}",
            message.len()
        )));
    }
    Ok(())
}

/// A subscriber that forwards a session's events into a channel: for REST and SSE, which are
/// not actors. The forwarder stops when the receiver is dropped.
pub fn channel_subscriber() -> (
    Recipient<SessionEvent>,
    mpsc::UnboundedReceiver<SessionEvent>,
) {
    let (tx, rx) = mpsc::unbounded_channel();
    let addr = Forwarder { tx }.start();
    (addr.recipient(), rx)
}

struct Forwarder {
    tx: mpsc::UnboundedSender<SessionEvent>,
}

impl Actor for Forwarder {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Self::Context) {
        // Stop as soon as the receiver is dropped, so the session sees the subscriber go.
        let tx = self.tx.clone();
        ctx.spawn(
            async move { tx.closed().await }
                .into_actor(self)
                .map(|_, _, ctx| ctx.stop()),
        );
    }
}

impl Handler<SessionEvent> for Forwarder {
    type Result = ();
    fn handle(&mut self, msg: SessionEvent, ctx: &mut Self::Context) {
        if self.tx.send(msg).is_err() {
            ctx.stop();
        }
    }
}
