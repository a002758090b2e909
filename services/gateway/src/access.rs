//! What a tenant caller may see, in one place for REST, SSE and WebSocket alike: a row of
//! another tenant, or (for a member) of another user, is "not found" — never "forbidden", so
//! its existence does not leak.

use agentry_schema::ids::{RunId, SessionId};
use agentry_store::executions::{self, Execution};
use agentry_store::sessions::{self, Session};
use sea_orm::ConnectionTrait;

use crate::auth::TenantCaller;
use crate::error::{ApiError, ApiResult};

/// The session `id`, if the caller may see it (tenant admins: the tenant's; members: their own).
pub async fn session(
    db: &impl ConnectionTrait,
    caller: &TenantCaller,
    id: SessionId,
) -> ApiResult<Session> {
    match sessions::get(db, &caller.scope(), id).await? {
        Some(s) if caller.can_see(s.user_id) => Ok(s),
        _ => Err(ApiError::not_found(format!("session {id}"))),
    }
}

/// The execution `id`, if the caller may see it.
pub async fn execution(
    db: &impl ConnectionTrait,
    caller: &TenantCaller,
    id: RunId,
) -> ApiResult<Execution> {
    match executions::get(db, &caller.scope(), id).await? {
        Some(e) if caller.can_see(e.user_id) => Ok(e),
        _ => Err(ApiError::not_found(format!("execution {id}"))),
    }
}
