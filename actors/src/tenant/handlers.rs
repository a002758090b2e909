use std::sync::Arc;

use actix::prelude::*;
use agentry_store::sessions::Session;

use super::messages::*;
use super::{LiveActor, TenantSupervisor};
use crate::live_sessions::{Lease, Residency};
use crate::session::{
    AssistantChanged, AssistantsChanged, SessionActor, SessionStopped, Subscriber, TenantChanged,
};

impl Handler<StartSession> for TenantSupervisor {
    type Result = MessageResult<StartSession>;

    fn handle(&mut self, msg: StartSession, ctx: &mut Self::Context) -> Self::Result {
        let id = msg.session.id;
        if let Some(held) = self.live(id) {
            return MessageResult(held);
        }
        MessageResult(self.start_session(msg.session, Vec::new(), msg.home, ctx))
    }
}

impl TenantSupervisor {
    /// Start the session's actor on an arbiter of the pool; `subscribers` carry over from an
    /// actor it replaces.
    fn start_session(
        &mut self,
        session: Session,
        subscribers: Vec<Subscriber>,
        home: Option<ArbiterHandle>,
        ctx: &mut Context<Self>,
    ) -> SessionRef {
        let id = session.id;
        let user = session.user_id;
        let tenant = self.tenant.clone();
        let deps = self.deps.clone();
        let quota = self.quota.clone();
        let mcp = self.mcp.clone();
        let me = ctx.address().recipient();
        let desk = self.desk.clone();
        let instance = self.live_sessions.next_instance();
        // Held before the actor exists: it cannot retire before the caller is done with it.
        let (lease, guard) = Lease::new_held();
        let residency = Residency {
            live: self.live_sessions.clone(),
            lease: lease.clone(),
            id,
            instance,
        };
        let arbiter = home.unwrap_or_else(|| self.arbiters.pick());
        let addr = SessionActor::start_in_arbiter(&arbiter, move |_| {
            SessionActor::new(session, tenant, deps, quota, mcp, me, residency, desk)
                .with_subscribers(subscribers)
        });
        self.sessions.insert(
            id,
            LiveActor {
                addr: addr.clone(),
                user,
                instance,
                lease: lease.clone(),
            },
        );
        self.live_sessions
            .insert(id, instance, addr.clone().recipient(), lease);
        self.idle_since = None;
        crate::metrics::live_sessions(1.0);
        SessionRef { addr, guard }
    }
}

impl Handler<LiveSession> for TenantSupervisor {
    type Result = Option<SessionRef>;
    fn handle(&mut self, msg: LiveSession, _: &mut Self::Context) -> Self::Result {
        self.live(msg.0)
    }
}

/// Answers once every live session has handled the change: whoever asked for it (an API
/// call) answers its client only then, and a run asked for afterwards reaches the session
/// behind it. A session that stopped meanwhile keeps nothing, so its error is ignored.
impl Handler<AssistantChanged> for TenantSupervisor {
    type Result = ResponseFuture<()>;
    fn handle(&mut self, msg: AssistantChanged, _: &mut Self::Context) -> Self::Result {
        let heard: Vec<_> = self
            .sessions
            .values()
            .map(|s| s.addr.send(msg.clone()))
            .collect();
        Box::pin(async move {
            futures::future::join_all(heard).await;
        })
    }
}

/// As [`AssistantChanged`]: answers once every live session has heard.
impl Handler<AssistantsChanged> for TenantSupervisor {
    type Result = ResponseFuture<()>;
    fn handle(&mut self, msg: AssistantsChanged, _: &mut Self::Context) -> Self::Result {
        let heard: Vec<_> = self
            .sessions
            .values()
            .map(|s| s.addr.send(msg.clone()))
            .collect();
        Box::pin(async move {
            futures::future::join_all(heard).await;
        })
    }
}

impl Handler<UpdateTenant> for TenantSupervisor {
    type Result = ();
    fn handle(&mut self, msg: UpdateTenant, _: &mut Self::Context) {
        // The quotas themselves were updated by the engine (Engine::tenant_changed).
        if let Some(pool) = &self.mcp {
            pool.do_send(crate::mcp_pool::TenantUpdated(msg.0.clone()));
        }
        for s in self.sessions.values() {
            s.addr.do_send(TenantChanged(Arc::clone(&msg.0)));
        }
        self.tenant = msg.0;
    }
}

impl Handler<LiveCount> for TenantSupervisor {
    type Result = usize;
    fn handle(&mut self, _: LiveCount, _: &mut Self::Context) -> usize {
        self.sessions
            .values()
            .filter(|s| s.addr.connected() && !s.lease.retired())
            .count()
    }
}

impl Handler<SessionStopped> for TenantSupervisor {
    type Result = ();
    fn handle(&mut self, msg: SessionStopped, ctx: &mut Self::Context) {
        // A newer actor of the same session may already be live: remove only this instance.
        // (The periodic check may have forgotten a dead one already: then none is live.)
        let current = match self.sessions.get(&msg.session_id) {
            Some(s) => s.instance == msg.instance,
            None => true,
        };
        if current && let Some(gone) = self.sessions.remove(&msg.session_id) {
            self.live_sessions.remove(msg.session_id, gone.instance);
            crate::metrics::live_sessions(-1.0);
        }
        match msg.restart {
            Some(r) if current => {
                self.start_session(r.session, r.subscribers, None, ctx);
            }
            _ => self.user_maybe_idle(msg.user_id),
        }
    }
}

impl Handler<StopSupervisor> for TenantSupervisor {
    type Result = ();
    fn handle(&mut self, _: StopSupervisor, ctx: &mut Self::Context) {
        ctx.stop();
    }
}

impl Handler<GetMcpPool> for TenantSupervisor {
    type Result = Option<Addr<crate::mcp_pool::McpPoolActor>>;
    fn handle(&mut self, _: GetMcpPool, _: &mut Self::Context) -> Self::Result {
        self.mcp.clone()
    }
}
