//! Registry's contract.

use actix::{Addr, Message};
use agentry_schema::ids::TenantId;
use agentry_store::tenants::Tenant;

use crate::tenant::TenantSupervisor;

/// The tenant's supervisor, started (with the quota actor) if needed. The caller loaded the
/// tenant row and the tokens it used today (so the daily budget survives restarts); a newer row
/// than the supervisor's updates it.
#[derive(Message)]
#[rtype(result = "Addr<TenantSupervisor>")]
pub struct GetTenant {
    pub tenant: Tenant,
    /// The tenant's quotas, from the engine's table (they outlive the supervisor).
    pub quota: crate::quota::QuotaHandle,
}

/// The live supervisor, if any.
#[derive(Message)]
#[rtype(result = "Option<Addr<TenantSupervisor>>")]
pub struct LiveTenant(pub TenantId);

/// The tenant was deleted or suspended: stop its actors.
#[derive(Message)]
#[rtype(result = "()")]
pub struct StopTenant(pub TenantId);

/// How many tenants have a live supervisor.
#[derive(Message)]
#[rtype(result = "usize")]
pub struct TenantCount;

/// The MCP config file changed: tell every live tenant's pool.
#[derive(Message)]
#[rtype(result = "()")]
pub struct BroadcastFileChange(pub std::sync::Arc<agentry_mcp::config_file::ConfigDiff>);
