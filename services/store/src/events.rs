//! The persisted event stream of each session, for replay by `seq` after the session actor
//! stopped or the process restarted.

use sea_orm::sea_query::{Expr, ExprTrait};
use sea_orm::{
    ColumnTrait, ConnectionTrait, EntityTrait, QueryFilter, QueryOrder, QuerySelect, Set,
};

use agentry_schema::entities::session_event;
use agentry_schema::events::ExecutionEvent;
use agentry_schema::ids::{RunId, SessionId};

use crate::{Result, StoreError, TenantScope, corrupt, now};

/// Store a batch of events of one session in one statement.
pub async fn append(
    db: &impl ConnectionTrait,
    scope: &TenantScope,
    session_id: SessionId,
    events: &[ExecutionEvent],
) -> Result<()> {
    if events.is_empty() {
        return Ok(());
    }
    let ts = now();
    let rows = events.iter().map(|e| session_event::ActiveModel {
        tenant_id: Set(scope.uuid()),
        session_id: Set(session_id.0),
        seq: Set(i64::try_from(e.seq).unwrap_or(i64::MAX)),
        run_id: Set(e.run_id.parse::<RunId>().ok().map(|r| r.0)),
        event_type: Set(e.event_type().to_string()),
        event: Set(e.to_json()),
        created_at: Set(ts),
        ..Default::default()
    });
    session_event::Entity::insert_many(rows)
        .exec(db)
        .await
        .map_err(|e| {
            StoreError::conflict_on_unique(e, || {
                format!("an event seq of session {session_id} is already stored")
            })
        })?;
    Ok(())
}

/// Events with `seq > after_seq`, in order, at most `limit`.
pub async fn list_after(
    db: &impl ConnectionTrait,
    scope: &TenantScope,
    session_id: SessionId,
    after_seq: u64,
    limit: u64,
) -> Result<Vec<ExecutionEvent>> {
    session_event::Entity::find()
        .filter(session_event::Column::TenantId.eq(scope.uuid()))
        .filter(session_event::Column::SessionId.eq(session_id.0))
        .filter(session_event::Column::Seq.gt(i64::try_from(after_seq).unwrap_or(i64::MAX)))
        .order_by_asc(session_event::Column::Seq)
        .limit(limit)
        .all(db)
        .await?
        .into_iter()
        .map(|m| serde_json::from_str(&m.event).map_err(|e| corrupt("session_event.event", e)))
        .collect()
}

/// The highest stored `seq` of a session (0 when none).
pub async fn max_seq(
    db: &impl ConnectionTrait,
    scope: &TenantScope,
    session_id: SessionId,
) -> Result<u64> {
    let max: Option<Option<i64>> = session_event::Entity::find()
        .select_only()
        .column_as(Expr::col(session_event::Column::Seq).max(), "max_seq")
        .filter(session_event::Column::TenantId.eq(scope.uuid()))
        .filter(session_event::Column::SessionId.eq(session_id.0))
        .into_tuple()
        .one(db)
        .await?;
    Ok(max
        .flatten()
        .and_then(|v| u64::try_from(v).ok())
        .unwrap_or(0))
}
