//! Registry: one per process. Tenant id → its supervisor, started on first use and dropped when
//! the supervisor reports idle.

mod handlers;
pub mod messages;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use actix::prelude::*;
use agentry_schema::ids::TenantId;

use crate::deps::EngineDeps;
use crate::hitl::ApprovalDesk;
use crate::live_sessions::LiveSessions;
use crate::tenant::{ArbiterPool, TenantSupervisor};
pub use messages::*;

pub struct Registry {
    deps: Arc<EngineDeps>,
    arbiters: Arc<ArbiterPool>,
    tenants: HashMap<TenantId, Addr<TenantSupervisor>>,
    tenant_idle_after: Duration,
    pub(crate) desk: Arc<ApprovalDesk>,
    live_sessions: Arc<LiveSessions>,
}

impl Registry {
    pub fn new(
        deps: Arc<EngineDeps>,
        arbiters: Arc<ArbiterPool>,
        tenant_idle_after: Duration,
        desk: Arc<ApprovalDesk>,
        live_sessions: Arc<LiveSessions>,
    ) -> Self {
        Registry {
            deps,
            arbiters,
            tenants: HashMap::new(),
            tenant_idle_after,
            desk,
            live_sessions,
        }
    }
}

/// How often sessions over the cap that were busy when last asked are asked to leave again.
const EVICT_RETRY: Duration = Duration::from_secs(5);

impl Actor for Registry {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Self::Context) {
        if self.live_sessions.cap() > 0 {
            ctx.run_interval(EVICT_RETRY, |act, _| act.live_sessions.evict_excess());
        }
    }
}
