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
use crate::tenant::{ArbiterPool, TenantSupervisor};
pub use messages::*;

pub struct Registry {
    deps: Arc<EngineDeps>,
    arbiters: Arc<ArbiterPool>,
    tenants: HashMap<TenantId, Addr<TenantSupervisor>>,
    tenant_idle_after: Duration,
    pub(crate) desk: Arc<ApprovalDesk>,
}

impl Registry {
    pub fn new(
        deps: Arc<EngineDeps>,
        arbiters: Arc<ArbiterPool>,
        tenant_idle_after: Duration,
        desk: Arc<ApprovalDesk>,
    ) -> Self {
        Registry {
            deps,
            arbiters,
            tenants: HashMap::new(),
            tenant_idle_after,
            desk,
        }
    }
}

impl Actor for Registry {
    type Context = Context<Self>;
}
