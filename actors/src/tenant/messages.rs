//! TenantSupervisor's contract. Input: get or start a session actor, the quota actor, tenant
//! changes; from its session actors, [`crate::session::SessionStopped`] (the session's own
//! output message, through a `Recipient` the supervisor gives each). Output (to the registry):
//! idle.

use std::sync::Arc;

use actix::{Addr, Message};
use agentry_schema::ids::{SessionId, TenantId};
use agentry_store::sessions::Session;
use agentry_store::tenants::Tenant;

use crate::live_sessions::LeaseGuard;
use crate::session::SessionActor;

/// A live session actor's address with a guard that keeps it live while held (see
/// [`crate::live_sessions`]).
#[derive(Clone, Debug)]
pub struct SessionRef {
    pub addr: Addr<SessionActor>,
    pub guard: LeaseGuard,
}

/// The live actor of a session, started if needed. The caller has already loaded and
/// authorized the row.
#[derive(Message)]
#[rtype(result = "SessionRef")]
pub struct StartSession {
    pub session: Session,
    /// Where the session's actor should live: the arbiter of the HTTP worker that asked (its
    /// WebSocket actor or response stream lives there too, so the run's events reach it without
    /// crossing threads). `None`: an arbiter of the pool.
    pub home: Option<actix::ArbiterHandle>,
}

/// The live actor of a session, if there is one (no start).
#[derive(Message)]
#[rtype(result = "Option<SessionRef>")]
pub struct LiveSession(pub SessionId);

/// The tenant's row changed (quotas, features, status).
#[derive(Message)]
#[rtype(result = "()")]
pub struct UpdateTenant(pub Arc<Tenant>);

/// How many session actors are live.
#[derive(Message)]
#[rtype(result = "usize")]
pub struct LiveCount;

/// Sent to the registry: no live sessions for a while; the supervisor stopped.
#[derive(Message)]
#[rtype(result = "()")]
pub struct TenantIdle {
    pub tenant_id: TenantId,
}

/// Stop the supervisor and shut its sessions down (the tenant went idle, was suspended or
/// deleted).
#[derive(Message)]
#[rtype(result = "()")]
pub struct StopSupervisor;

/// The tenant's MCP pool, if MCP is configured.
#[derive(Message)]
#[rtype(result = "Option<Addr<crate::mcp_pool::McpPoolActor>>")]
pub struct GetMcpPool;
