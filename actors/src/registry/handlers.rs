use std::sync::Arc;

use actix::prelude::*;

use super::Registry;
use super::messages::*;
use crate::tenant::{StopSupervisor, TenantIdle, TenantSupervisor, UpdateTenant};

impl Handler<GetTenant> for Registry {
    type Result = MessageResult<GetTenant>;

    fn handle(&mut self, msg: GetTenant, ctx: &mut Self::Context) -> Self::Result {
        let id = msg.tenant.id;
        if let Some(addr) = self.tenants.get(&id).filter(|a| a.connected()) {
            addr.do_send(UpdateTenant(Arc::new(msg.tenant)));
            return MessageResult(addr.clone());
        }
        let tenant = Arc::new(msg.tenant);
        // The tenant's actors live on one arbiter of the pool, not on the registry's thread:
        // tenants spread over the cores. (Its quota actor was started by the engine, on the
        // pool too: see `Engine::quota`.)
        let arbiter = self.arbiters.pick();
        let quota = msg.quota;
        let (deps, arbiters, live, me) = (
            self.deps.clone(),
            self.arbiters.clone(),
            self.live_sessions.clone(),
            ctx.address().recipient(),
        );
        let (idle_after, desk) = (self.tenant_idle_after, self.desk.clone());
        let sup = TenantSupervisor::start_in_arbiter(&arbiter, move |_| {
            TenantSupervisor::new(tenant, deps, quota, arbiters, live, me, idle_after, desk)
        });
        self.tenants.insert(id, sup.clone());
        MessageResult(sup)
    }
}

impl Handler<LiveTenant> for Registry {
    type Result = Option<Addr<TenantSupervisor>>;
    fn handle(&mut self, msg: LiveTenant, _: &mut Self::Context) -> Self::Result {
        self.tenants.get(&msg.0).filter(|a| a.connected()).cloned()
    }
}

impl Handler<StopTenant> for Registry {
    type Result = ();
    fn handle(&mut self, msg: StopTenant, _: &mut Self::Context) {
        if let Some(addr) = self.tenants.remove(&msg.0) {
            addr.do_send(StopSupervisor);
        }
    }
}

impl Handler<TenantIdle> for Registry {
    type Result = ();
    fn handle(&mut self, msg: TenantIdle, _: &mut Self::Context) {
        if let Some(addr) = self.tenants.remove(&msg.tenant_id) {
            addr.do_send(StopSupervisor);
        }
    }
}

impl Handler<TenantCount> for Registry {
    type Result = usize;
    fn handle(&mut self, _: TenantCount, _: &mut Self::Context) -> usize {
        self.tenants.len()
    }
}

impl Handler<BroadcastFileChange> for Registry {
    type Result = ResponseFuture<()>;
    fn handle(&mut self, msg: BroadcastFileChange, _: &mut Self::Context) -> Self::Result {
        let sups: Vec<_> = self.tenants.values().cloned().collect();
        Box::pin(async move {
            for sup in sups {
                if let Ok(Some(pool)) = sup.send(crate::tenant::GetMcpPool).await {
                    pool.do_send(crate::mcp_pool::FileConfigChanged(msg.0.clone()));
                }
            }
        })
    }
}
