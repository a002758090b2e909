//! What the retention sweep removes (docs/operations.md, "Retention"): sessions idle past the
//! retention period with everything they own, checkpoints beyond the newest few of each session,
//! expired memories, and the stored events of long-finished runs. Each function does one
//! bounded batch and says how much it removed; the sweeper (in the gateway) calls them until a
//! batch comes back short.
//!
//! Every delete re-checks its condition in the same transaction that deletes, so a session that
//! became active, or a checkpoint written, between finding and deleting is never removed.

use chrono::{DateTime, Utc};
use sea_orm::sea_query::{Expr, ExprTrait, Query};
use sea_orm::{
    ColumnTrait, ConnectionTrait, EntityTrait, QueryFilter, QueryOrder, QuerySelect,
    TransactionSession, TransactionTrait,
};

use agentry_schema::entities::{checkpoint, execution, memory, session, session_event};
use agentry_schema::ids::{SessionId, TenantId, UserId};

// Run statuses that may still need their checkpoint (or keep their session busy).
use crate::executions::UNFINISHED;
use crate::sessions::SessionState;
use crate::{PlatformScope, Result, TenantScope};

/// A session the sweep may delete.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IdleSession {
    pub tenant_id: TenantId,
    pub session_id: SessionId,
    pub user_id: UserId,
}

/// No unfinished run of the session in the outer query (`sessions`).
fn has_no_unfinished_run(tenant: Option<uuid::Uuid>) -> sea_orm::sea_query::SimpleExpr {
    let mut busy = Query::select();
    busy.expr(Expr::val(1))
        .from(execution::Entity)
        .and_where(
            Expr::col((execution::Entity, execution::Column::TenantId))
                .equals((session::Entity, session::Column::TenantId)),
        )
        .and_where(
            Expr::col((execution::Entity, execution::Column::SessionId))
                .equals((session::Entity, session::Column::Id)),
        )
        .and_where(Expr::col((execution::Entity, execution::Column::Status)).is_in(UNFINISHED));
    if let Some(t) = tenant {
        busy.and_where(Expr::col((execution::Entity, execution::Column::TenantId)).eq(t));
    }
    Expr::exists(busy.to_owned()).not()
}

/// Sessions of every tenant idle (no run, nobody waiting: state `idle` or `closed`, no
/// unfinished run) since before `cutoff`, longest idle first, at most `limit`.
pub async fn idle_sessions(
    db: &impl ConnectionTrait,
    _: &PlatformScope,
    cutoff: DateTime<Utc>,
    limit: u64,
) -> Result<Vec<IdleSession>> {
    let rows: Vec<(uuid::Uuid, uuid::Uuid, uuid::Uuid)> = session::Entity::find()
        .select_only()
        .column(session::Column::TenantId)
        .column(session::Column::Id)
        .column(session::Column::UserId)
        .filter(session::Column::LastActive.lt(cutoff))
        .filter(
            session::Column::State
                .is_in([SessionState::Idle.as_str(), SessionState::Closed.as_str()]),
        )
        .filter(has_no_unfinished_run(None))
        .order_by_asc(session::Column::LastActive)
        .limit(limit)
        .into_tuple()
        .all(db)
        .await?;
    Ok(rows
        .into_iter()
        .map(|(t, s, u)| IdleSession {
            tenant_id: t.into(),
            session_id: s.into(),
            user_id: u.into(),
        })
        .collect())
}

/// Delete those of `candidates` (sessions of this tenant) that are still idle since before
/// `cutoff` and have no unfinished run, with their messages, checkpoints and events, in one
/// transaction (the rows are locked while it checks, where the database locks rows). Their
/// runs, tool-call audit and approvals stay: they are the tenant's audit trail and usage, as
/// with `DELETE /sessions/{id}`. Returns the sessions deleted: id, user, and whether it counted
/// against the user's `max_sessions_per_user` (a stateless OpenAI call's did not).
pub async fn delete_idle_sessions<C>(
    db: &C,
    scope: &TenantScope,
    candidates: &[SessionId],
    cutoff: DateTime<Utc>,
) -> Result<Vec<(SessionId, UserId, bool)>>
where
    C: ConnectionTrait + TransactionTrait,
{
    if candidates.is_empty() {
        return Ok(Vec::new());
    }
    let txn = db.begin().await?;
    let doomed: Vec<(uuid::Uuid, uuid::Uuid, bool)> = session::Entity::find()
        .select_only()
        .column(session::Column::Id)
        .column(session::Column::UserId)
        .column(session::Column::Stateless)
        .filter(session::Column::TenantId.eq(scope.uuid()))
        .filter(session::Column::Id.is_in(candidates.iter().map(|s| s.0)))
        .filter(session::Column::LastActive.lt(cutoff))
        .filter(
            session::Column::State
                .is_in([SessionState::Idle.as_str(), SessionState::Closed.as_str()]),
        )
        .filter(has_no_unfinished_run(Some(scope.uuid())))
        .lock_exclusive()
        .into_tuple()
        .all(&txn)
        .await?;
    let ids: Vec<uuid::Uuid> = doomed.iter().map(|(s, _, _)| *s).collect();
    if !ids.is_empty() {
        session::Entity::delete_many()
            .filter(session::Column::TenantId.eq(scope.uuid()))
            .filter(session::Column::Id.is_in(ids.iter().copied()))
            .exec(&txn)
            .await?;
        crate::sessions::delete_children(&txn, scope, &ids).await?;
    }
    txn.commit().await?;
    Ok(doomed
        .into_iter()
        .map(|(s, u, stateless)| (s.into(), u.into(), !stateless))
        .collect())
}

/// Keep the newest `keep` checkpoints of each session, and always the newest of each of its
/// runs that is not finished (queued, running, waiting for a person: what a restart resumes
/// from); delete the rest. Looks at the next `batch` sessions (by id, after `after`) with more
/// than `keep` checkpoints. Returns `(sessions looked at, checkpoints deleted, the last session
/// looked at)`: pass it as the next `after` to go through every session once.
pub async fn prune_checkpoints<C>(
    db: &C,
    _: &PlatformScope,
    keep: u64,
    after: Option<SessionId>,
    batch: u64,
) -> Result<(u64, u64, Option<SessionId>)>
where
    C: ConnectionTrait + TransactionTrait,
{
    let keep_i = i64::try_from(keep).unwrap_or(i64::MAX);
    // (tenant, session, newest id): the newest id bounds the delete, so checkpoints written
    // after this look are never touched.
    let mut q = checkpoint::Entity::find()
        .select_only()
        .column(checkpoint::Column::TenantId)
        .column(checkpoint::Column::SessionId)
        .column_as(checkpoint::Column::Id.max(), "newest");
    if let Some(after) = after {
        q = q.filter(checkpoint::Column::SessionId.gt(after.0));
    }
    let crowded: Vec<(uuid::Uuid, uuid::Uuid, i64)> = q
        .group_by(checkpoint::Column::SessionId)
        .group_by(checkpoint::Column::TenantId)
        .having(checkpoint::Column::Id.count().gt(keep_i))
        .order_by_asc(checkpoint::Column::SessionId)
        .limit(batch)
        .into_tuple()
        .all(db)
        .await?;
    let mut deleted = 0;
    for (tenant, session_id, newest) in &crowded {
        let txn = db.begin().await?;
        let mut kept: Vec<i64> = checkpoint::Entity::find()
            .select_only()
            .column(checkpoint::Column::Id)
            .filter(checkpoint::Column::TenantId.eq(*tenant))
            .filter(checkpoint::Column::SessionId.eq(*session_id))
            .filter(checkpoint::Column::Id.lte(*newest))
            .order_by_desc(checkpoint::Column::Id)
            .limit(keep)
            .into_tuple()
            .all(&txn)
            .await?;
        let unfinished = Query::select()
            .column(execution::Column::Id)
            .from(execution::Entity)
            .and_where(execution::Column::TenantId.eq(*tenant))
            .and_where(execution::Column::SessionId.eq(*session_id))
            .and_where(execution::Column::Status.is_in(UNFINISHED))
            .to_owned();
        let resumable: Vec<Option<i64>> = checkpoint::Entity::find()
            .select_only()
            .column_as(checkpoint::Column::Id.max(), "latest")
            .filter(checkpoint::Column::TenantId.eq(*tenant))
            .filter(checkpoint::Column::SessionId.eq(*session_id))
            .filter(checkpoint::Column::ExecutionId.in_subquery(unfinished))
            .group_by(checkpoint::Column::ExecutionId)
            .into_tuple()
            .all(&txn)
            .await?;
        kept.extend(resumable.into_iter().flatten());
        let mut q = checkpoint::Entity::delete_many()
            .filter(checkpoint::Column::TenantId.eq(*tenant))
            .filter(checkpoint::Column::SessionId.eq(*session_id))
            .filter(checkpoint::Column::Id.lte(*newest));
        if !kept.is_empty() {
            q = q.filter(checkpoint::Column::Id.is_not_in(kept));
        }
        deleted += q.exec(&txn).await?.rows_affected;
        txn.commit().await?;
    }
    let last = crowded.last().map(|(_, s, _)| SessionId::from(*s));
    Ok((crowded.len() as u64, deleted, last))
}

/// Delete memories whose expiry has passed. Returns how many went.
pub async fn expire_memories(
    db: &impl ConnectionTrait,
    _: &PlatformScope,
    now: DateTime<Utc>,
) -> Result<u64> {
    Ok(memory::Entity::delete_many()
        .filter(memory::Column::ExpiresAt.is_not_null())
        .filter(memory::Column::ExpiresAt.lte(now))
        .exec(db)
        .await?
        .rows_affected)
}

/// The stored events of runs that ended in `[from, before)`, except each run's `done` (a
/// stream keeps exactly one `done` per run, and recovery would otherwise write another): the
/// `batch` oldest such runs. Returns `(runs looked at, events deleted, the newest end looked
/// at)`; pass that end as the next `from`, so runs already trimmed are not looked at again.
pub async fn trim_events(
    db: &impl ConnectionTrait,
    _: &PlatformScope,
    from: Option<DateTime<Utc>>,
    before: DateTime<Utc>,
    batch: u64,
) -> Result<(u64, u64, Option<DateTime<Utc>>)> {
    let mut q = execution::Entity::find()
        .select_only()
        .column(execution::Column::Id)
        .column(execution::Column::CompletedAt)
        .filter(execution::Column::CompletedAt.lt(before))
        .filter(execution::Column::Status.is_not_in(UNFINISHED));
    if let Some(from) = from {
        q = q.filter(execution::Column::CompletedAt.gte(from));
    }
    let runs: Vec<(uuid::Uuid, Option<DateTime<Utc>>)> = q
        .order_by_asc(execution::Column::CompletedAt)
        .order_by_asc(execution::Column::Id)
        .limit(batch)
        .into_tuple()
        .all(db)
        .await?;
    if runs.is_empty() {
        return Ok((0, 0, from));
    }
    let newest = runs.iter().filter_map(|(_, at)| *at).max();
    let deleted = session_event::Entity::delete_many()
        .filter(session_event::Column::RunId.is_in(runs.iter().map(|(id, _)| *id)))
        .filter(session_event::Column::EventType.ne("done"))
        .exec(db)
        .await?
        .rows_affected;
    Ok((runs.len() as u64, deleted, newest))
}
