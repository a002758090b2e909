//! TenantSupervisor's contract. Input: get or start a session actor, the quota actor, tenant
//! changes. Output (to the registry): idle.

use std::sync::Arc;

use actix::{Addr, Message};
use agentry_schema::ids::{SessionId, TenantId, UserId};
use agentry_store::sessions::Session;
use agentry_store::tenants::Tenant;

use crate::live_sessions::SessionRef;

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

/// Sent by a session actor when it stops.
#[derive(Message)]
#[rtype(result = "()")]
pub struct SessionStopped {
    pub session_id: SessionId,
    pub user_id: UserId,
    /// Which start of the session actor stopped.
    pub instance: u64,
    /// It did not stop but was dropped after a handler panicked: start it again now, for these
    /// subscribers (its recovery resumes the run it had).
    pub restart: Option<Box<RestartSession>>,
}

pub struct RestartSession {
    pub session: Session,
    pub subscribers: Vec<crate::session::Subscriber>,
}

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
