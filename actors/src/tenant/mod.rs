//! TenantSupervisor: one per tenant. It owns the tenant's quota actor and its live session
//! actors (started on arbiters from the pool so sessions spread over the cores), routes to
//! them, restarts a session actor that died, and tells the registry when the tenant is idle.
//! The MCP pool actor joins it with the tools/MCP work; its seam is the `ToolProvider`.

mod handlers;
pub mod messages;

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use actix::prelude::*;
use agentry_schema::ids::{SessionId, TenantId, UserId};
use agentry_store::tenants::Tenant;

use crate::deps::EngineDeps;
use crate::hitl::ApprovalDesk;
use crate::live_sessions::{Instance, Lease, LiveSessions};
use crate::mcp_pool::{McpPoolActor, UserIdle};
use crate::quota::QuotaHandle;
use crate::session::SessionActor;
pub use messages::*;

/// Arbiters (threads with their own event loop) that session actors are spread over.
pub struct ArbiterPool {
    arbiters: Vec<ArbiterHandle>,
    next: AtomicUsize,
}

impl ArbiterPool {
    /// `n` new arbiters; 0 uses the caller's arbiter for everything (tests).
    pub fn new(n: usize) -> Self {
        ArbiterPool {
            arbiters: (0..n).map(|_| Arbiter::new().handle()).collect(),
            next: AtomicUsize::new(0),
        }
    }

    pub fn pick(&self) -> ArbiterHandle {
        if self.arbiters.is_empty() {
            return Arbiter::current();
        }
        let i = self.next.fetch_add(1, Ordering::Relaxed) % self.arbiters.len();
        self.arbiters[i].clone()
    }
}

/// A live session actor of the tenant.
pub(crate) struct LiveActor {
    pub(crate) addr: Addr<SessionActor>,
    pub(crate) user: UserId,
    pub(crate) instance: Instance,
    pub(crate) lease: Arc<Lease>,
}

pub struct TenantSupervisor {
    pub(crate) tenant: Arc<Tenant>,
    deps: Arc<EngineDeps>,
    quota: QuotaHandle,
    pub(crate) mcp: Option<Addr<McpPoolActor>>,
    pub(crate) sessions: HashMap<SessionId, LiveActor>,
    /// Every live session of the process, for the cap.
    pub(crate) live_sessions: Arc<LiveSessions>,
    arbiters: Arc<ArbiterPool>,
    registry: Recipient<TenantIdle>,
    idle_since: Option<Instant>,
    idle_after: Duration,
    desk: Arc<ApprovalDesk>,
}

impl TenantSupervisor {
    #[allow(clippy::too_many_arguments)] // what a tenant's actors share with the process
    pub fn new(
        tenant: Arc<Tenant>,
        deps: Arc<EngineDeps>,
        quota: QuotaHandle,
        arbiters: Arc<ArbiterPool>,
        live_sessions: Arc<LiveSessions>,
        registry: Recipient<TenantIdle>,
        idle_after: Duration,
        desk: Arc<ApprovalDesk>,
    ) -> Self {
        TenantSupervisor {
            tenant,
            deps,
            quota,
            mcp: None,
            sessions: HashMap::new(),
            live_sessions,
            arbiters,
            registry,
            idle_since: Some(Instant::now()),
            idle_after,
            desk,
        }
    }

    pub fn tenant_id(&self) -> TenantId {
        self.tenant.id
    }

    /// The session's live actor, held for the caller (it is not evicted while held).
    pub(crate) fn live(&mut self, id: SessionId) -> Option<SessionRef> {
        let live = self.sessions.get(&id)?;
        let guard = live
            .addr
            .connected()
            .then(|| live.lease.acquire())
            .flatten();
        if let Some(guard) = guard {
            self.live_sessions.touch(id, live.instance);
            return Some(SessionRef {
                addr: live.addr.clone(),
                guard,
            });
        }
        self.forget(id);
        None
    }

    /// Forget the session's actor if it retired (evicted, idle) or died without saying so (its
    /// arbiter went down): the next use starts a fresh actor, which resumes any run it had
    /// from the checkpoint. Not a use: its place in the eviction order stays.
    fn forget_if_gone(&mut self, id: SessionId) {
        if self
            .sessions
            .get(&id)
            .is_some_and(|s| !s.addr.connected() || s.lease.retired())
        {
            self.forget(id);
        }
    }

    fn forget(&mut self, id: SessionId) {
        let Some(gone) = self.sessions.remove(&id) else {
            return;
        };
        self.live_sessions.remove(id, gone.instance);
        crate::metrics::live_sessions(-1.0);
        self.user_maybe_idle(gone.user);
    }

    fn user_maybe_idle(&mut self, user: UserId) {
        if !self.sessions.values().any(|s| s.user == user)
            && let Some(pool) = &self.mcp
        {
            pool.do_send(UserIdle { user });
        }
        if self.sessions.is_empty() {
            self.idle_since = Some(Instant::now());
        }
    }
}

impl Actor for TenantSupervisor {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Self::Context) {
        if let Some(source) = &self.deps.mcp {
            let mut cfg = self.deps.config.mcp_pool.clone();
            if cfg.workspaces.as_os_str().is_empty() {
                cfg.workspaces = self.deps.config.data_dir.join("workspaces");
            }
            let (tenant, source) = (self.tenant.clone(), source.clone());
            // On this supervisor's arbiter, restarted if it stops or panics.
            self.mcp = Some(crate::supervise::start_supervised(
                &Arbiter::current(),
                "mcp_pool",
                move |_| McpPoolActor::new(tenant, source, cfg),
            ));
        }
        let check = (self.idle_after / 4).clamp(Duration::from_millis(50), Duration::from_secs(60));
        ctx.run_interval(check, |act, _ctx| {
            let ids: Vec<SessionId> = act.sessions.keys().copied().collect();
            for id in ids {
                act.forget_if_gone(id);
            }
            if act.sessions.is_empty()
                && act
                    .idle_since
                    .is_some_and(|t| t.elapsed() >= act.idle_after)
            {
                // The registry forgets us and replies with StopSupervisor.
                act.idle_since = None;
                act.registry.do_send(TenantIdle {
                    tenant_id: act.tenant.id,
                });
            }
        });
    }

    fn stopped(&mut self, _: &mut Self::Context) {
        for s in self.sessions.values() {
            s.addr.do_send(crate::session::Shutdown);
        }
    }
}
