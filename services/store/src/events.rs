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
    let rows = events.iter().map(|e| row(scope, session_id, e, ts));
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

/// Store events that may already be stored (a batch whose first write's outcome is unknown, or
/// the events a run's end record carries): a `seq` already there is left as it is.
pub async fn append_missing(
    db: &impl ConnectionTrait,
    scope: &TenantScope,
    session_id: SessionId,
    events: &[ExecutionEvent],
) -> Result<()> {
    if events.is_empty() {
        return Ok(());
    }
    let ts = now();
    let rows: Vec<_> = events
        .iter()
        .map(|e| row(scope, session_id, e, ts))
        .collect();
    // Inside the writer's transaction: with the other jobs' events, before the commit.
    let Some(rows) = crate::writer::Deferred::events(rows) else {
        return Ok(());
    };
    insert_missing_rows(db, rows).await
}

/// Event rows, a `seq` already stored (or twice among them) left as it is.
pub(crate) async fn insert_missing_rows(
    db: &impl ConnectionTrait,
    rows: Vec<session_event::ActiveModel>,
) -> Result<()> {
    for chunk in crate::writer::per_insert(rows) {
        session_event::Entity::insert_many(chunk)
            .on_conflict_do_nothing_on([
                session_event::Column::SessionId,
                session_event::Column::Seq,
            ])
            .exec_without_returning(db)
            .await?;
    }
    Ok(())
}

/// [`append_missing`] under a fencing token (cluster mode, [`crate::sessions::fence`]): in one
/// transaction with the token's check, refused if a newer owner of the session wrote. `None`
/// writes unfenced (single-node mode).
pub async fn append_missing_fenced<C>(
    db: &C,
    scope: &TenantScope,
    session_id: SessionId,
    events: &[ExecutionEvent],
    fence: Option<i64>,
) -> Result<()>
where
    C: ConnectionTrait + sea_orm::TransactionTrait,
{
    let Some(token) = fence else {
        return append_missing(db, scope, session_id, events).await;
    };
    if events.is_empty() {
        return Ok(());
    }
    use sea_orm::TransactionSession;
    let txn = db.begin().await?;
    crate::sessions::fence(&txn, scope, session_id, token).await?;
    append_missing(&txn, scope, session_id, events).await?;
    txn.commit().await?;
    Ok(())
}

/// [`append_missing_fenced`] through the writer (its transaction holds the fence's check).
pub async fn write_missing(
    writer: &crate::writer::Writer,
    scope: &TenantScope,
    session_id: SessionId,
    events: std::sync::Arc<Vec<ExecutionEvent>>,
    fence: Option<i64>,
) -> Result<()> {
    if events.is_empty() {
        return Ok(());
    }
    let scope = *scope;
    writer
        .write_for(session_id.0, move |txn| {
            let events = events.clone();
            Box::pin(async move {
                if let Some(token) = fence {
                    crate::sessions::fence(txn, &scope, session_id, token).await?;
                }
                append_missing(txn, &scope, session_id, &events).await
            })
        })
        .await
}

fn row(
    scope: &TenantScope,
    session_id: SessionId,
    e: &ExecutionEvent,
    ts: chrono::DateTime<chrono::Utc>,
) -> session_event::ActiveModel {
    session_event::ActiveModel {
        tenant_id: Set(scope.uuid()),
        session_id: Set(session_id.0),
        seq: Set(i64::try_from(e.seq).unwrap_or(i64::MAX)),
        run_id: Set(e.run_id.parse::<RunId>().ok().map(|r| r.0)),
        event_type: Set(e.event_type().to_string()),
        event: Set(e.to_json()),
        created_at: Set(ts),
        ..Default::default()
    }
}

/// The stored `done` event of a run, if its stream holds one.
pub async fn done_of_run(
    db: &impl ConnectionTrait,
    scope: &TenantScope,
    run_id: RunId,
) -> Result<Option<ExecutionEvent>> {
    session_event::Entity::find()
        .filter(session_event::Column::RunId.eq(run_id.0))
        .filter(session_event::Column::EventType.eq("done"))
        .filter(session_event::Column::TenantId.eq(scope.uuid()))
        .order_by_asc(session_event::Column::Seq)
        .one(db)
        .await?
        .map(|m| serde_json::from_str(&m.event).map_err(|e| corrupt("session_event.event", e)))
        .transpose()
}

/// Stored events of one run whose type is `event_type`, in order (e.g. a tool's `progress`).
pub async fn of_run_by_type(
    db: &impl ConnectionTrait,
    scope: &TenantScope,
    run_id: RunId,
    event_type: &str,
    limit: u64,
) -> Result<Vec<ExecutionEvent>> {
    session_event::Entity::find()
        .filter(session_event::Column::RunId.eq(run_id.0))
        .filter(session_event::Column::EventType.eq(event_type))
        .filter(session_event::Column::TenantId.eq(scope.uuid()))
        .order_by_asc(session_event::Column::Seq)
        .limit(limit)
        .all(db)
        .await?
        .into_iter()
        .map(|m| serde_json::from_str(&m.event).map_err(|e| corrupt("session_event.event", e)))
        .collect()
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

/// The `seq` of a run's first stored event, if it has one: where reading the run back starts.
pub async fn first_seq_of_run(
    db: &impl ConnectionTrait,
    scope: &TenantScope,
    run_id: RunId,
) -> Result<Option<u64>> {
    let min: Option<Option<i64>> = session_event::Entity::find()
        .select_only()
        .column_as(Expr::col(session_event::Column::Seq).min(), "min_seq")
        .filter(session_event::Column::TenantId.eq(scope.uuid()))
        .filter(session_event::Column::RunId.eq(run_id.0))
        .into_tuple()
        .one(db)
        .await?;
    Ok(min.flatten().and_then(|v| u64::try_from(v).ok()))
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
