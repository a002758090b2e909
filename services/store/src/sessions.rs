//! Sessions: one conversation of a user with an assistant.

use std::time::Duration;

use chrono::{DateTime, Utc};
use sea_orm::sea_query::Expr;
use sea_orm::{
    ActiveModelTrait, ColumnTrait, ConnectionTrait, EntityTrait, PaginatorTrait, QueryFilter,
    QueryOrder, QuerySelect, Set, TransactionSession, TransactionTrait,
};
use serde_json::Value;

use agentry_schema::entities::{checkpoint, message, session, session_event};
use agentry_schema::ids::{AssistantId, RunId, SessionId, TenantId, UserId};

use crate::{PageRequest, Result, StoreError, TenantScope, corrupt, now, sanitize_json};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SessionState {
    Idle,
    Running,
    WaitingApproval,
    Closed,
}

impl SessionState {
    pub fn as_str(self) -> &'static str {
        match self {
            SessionState::Idle => "idle",
            SessionState::Running => "running",
            SessionState::WaitingApproval => "waiting_approval",
            SessionState::Closed => "closed",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "idle" => SessionState::Idle,
            "running" => SessionState::Running,
            "waiting_approval" => SessionState::WaitingApproval,
            "closed" => SessionState::Closed,
            _ => return None,
        })
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct Session {
    pub id: SessionId,
    pub tenant_id: TenantId,
    pub user_id: UserId,
    pub assistant_id: AssistantId,
    pub state: SessionState,
    pub auto_approve: bool,
    pub metadata: Value,
    pub created_at: DateTime<Utc>,
    pub last_active: DateTime<Utc>,
    /// Made for one stateless OpenAI-compatible call: not counted against
    /// `max_sessions_per_user` ([`create_stateless`]).
    pub stateless: bool,
}

impl TryFrom<session::Model> for Session {
    type Error = StoreError;
    fn try_from(m: session::Model) -> Result<Self> {
        Ok(Session {
            id: m.id.into(),
            tenant_id: m.tenant_id.into(),
            user_id: m.user_id.into(),
            assistant_id: AssistantId::try_from(m.assistant_id)
                .map_err(|e| corrupt("session.assistant_id", e))?,
            state: SessionState::parse(&m.state)
                .ok_or_else(|| corrupt("session.state", &m.state))?,
            auto_approve: m.auto_approve,
            metadata: m.metadata,
            created_at: m.created_at,
            last_active: m.last_active,
            stateless: m.stateless,
        })
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct NewSession {
    /// Use this id (clients may pick one); a fresh one otherwise.
    pub id: Option<SessionId>,
    pub user_id: UserId,
    pub assistant_id: AssistantId,
    pub auto_approve: bool,
    pub metadata: Value,
}

pub async fn create(
    db: &impl ConnectionTrait,
    scope: &TenantScope,
    new: NewSession,
) -> Result<Session> {
    insert(db, scope, new, false).await
}

/// A session made for one stateless OpenAI-compatible call: [`count_by_user`] leaves it out,
/// so it does not count against `max_sessions_per_user`. Only the server makes these.
pub async fn create_stateless(
    db: &impl ConnectionTrait,
    scope: &TenantScope,
    new: NewSession,
) -> Result<Session> {
    insert(db, scope, new, true).await
}

async fn insert(
    db: &impl ConnectionTrait,
    scope: &TenantScope,
    new: NewSession,
    stateless: bool,
) -> Result<Session> {
    let ts = now();
    let id = new.id.unwrap_or_default();
    let model = session::ActiveModel {
        id: Set(id.0),
        tenant_id: Set(scope.uuid()),
        user_id: Set(new.user_id.0),
        assistant_id: Set(new.assistant_id.to_string()),
        state: Set(SessionState::Idle.as_str().to_string()),
        auto_approve: Set(new.auto_approve),
        metadata: Set(if new.metadata.is_null() {
            Value::Object(Default::default())
        } else {
            sanitize_json(new.metadata)
        }),
        created_at: Set(ts),
        last_active: Set(ts),
        seq_reserved: Set(0),
        fence: Set(0),
        stateless: Set(stateless),
    };
    let m = model.insert(db).await.map_err(|e| {
        StoreError::conflict_on_unique(e, || format!("session {id} already exists"))
    })?;
    m.try_into()
}

pub async fn get(
    db: &impl ConnectionTrait,
    scope: &TenantScope,
    id: SessionId,
) -> Result<Option<Session>> {
    session::Entity::find_by_id(id.0)
        .filter(crate::tenant_of_row(
            db.get_database_backend(),
            session::Column::TenantId,
            scope,
        ))
        .one(db)
        .await?
        .map(Session::try_from)
        .transpose()
}

/// Write back every mutable field of `s`. `NotFound` when the session is not in this tenant.
pub async fn update(db: &impl ConnectionTrait, scope: &TenantScope, s: &Session) -> Result<()> {
    let res = session::Entity::update_many()
        .col_expr(
            session::Column::AssistantId,
            Expr::value(s.assistant_id.to_string()),
        )
        .col_expr(session::Column::State, Expr::value(s.state.as_str()))
        .col_expr(session::Column::AutoApprove, Expr::value(s.auto_approve))
        .col_expr(
            session::Column::Metadata,
            Expr::value(sanitize_json(s.metadata.clone())),
        )
        .col_expr(session::Column::LastActive, Expr::value(s.last_active))
        .filter(session::Column::Id.eq(s.id.0))
        .filter(crate::tenant_of_row(
            db.get_database_backend(),
            session::Column::TenantId,
            scope,
        ))
        .exec(db)
        .await?;
    if res.rows_affected == 0 {
        return Err(StoreError::NotFound(format!("session {}", s.id)));
    }
    Ok(())
}

/// Record activity: set the state and bump `last_active`; with `reserve_upto`, also raise the
/// session's reserved `seq` to at least it (see [`reserve_seq`]: a run's start reserves its first
/// block of event numbers for free); with `fence`, check and raise the fencing token in the
/// same statement (see [`fence`]: a transaction that touches the session anyway pays no
/// statement for its fence). `fence: None` is a plain touch (single-node mode). Put it first in
/// the transaction: like [`fence`], it locks the session's row until the transaction ends.
pub async fn touch_fenced(
    db: &impl ConnectionTrait,
    scope: &TenantScope,
    id: SessionId,
    state: SessionState,
    reserve_upto: Option<u64>,
    fence: Option<i64>,
) -> Result<()> {
    update_row(db, scope, id, Some(state), reserve_upto, fence).await
}

/// [`reserve_seq`] under a fencing token (see [`touch_fenced`]): the state is left as it is.
pub async fn reserve_fenced(
    db: &impl ConnectionTrait,
    scope: &TenantScope,
    id: SessionId,
    upto: u64,
    fence: Option<i64>,
) -> Result<()> {
    update_row(db, scope, id, None, Some(upto), fence).await
}

/// Reserve event numbers: after this, no restart numbers an event of the session at or below
/// `upto`, so the session may send events up to it before they are stored.
pub async fn reserve_seq(
    db: &impl ConnectionTrait,
    scope: &TenantScope,
    id: SessionId,
    upto: u64,
) -> Result<()> {
    update_row(db, scope, id, None, Some(upto), None).await
}

/// One statement: the state (with `last_active`) and/or the reservation, and the fencing
/// token's check when there is one.
async fn update_row(
    db: &impl ConnectionTrait,
    scope: &TenantScope,
    id: SessionId,
    state: Option<SessionState>,
    reserve_upto: Option<u64>,
    fence: Option<i64>,
) -> Result<()> {
    let q = update_row_query(
        db.get_database_backend(),
        scope,
        id,
        state,
        reserve_upto,
        fence,
    );
    let res = db.execute(&q).await?;
    if res.rows_affected() > 0 {
        return Ok(());
    }
    Err(untouched(db, scope, id, fence).await)
}

/// [`update_row`]'s statement, for a caller that sends it inside a bigger one
/// (`crate::run_writes`).
pub(crate) fn update_row_query(
    backend: sea_orm::DatabaseBackend,
    scope: &TenantScope,
    id: SessionId,
    state: Option<SessionState>,
    reserve_upto: Option<u64>,
    fence: Option<i64>,
) -> sea_orm::sea_query::UpdateStatement {
    use sea_orm::QueryTrait;
    let mut q = session::Entity::update_many();
    if let Some(state) = state {
        q = q
            .col_expr(session::Column::State, Expr::value(state.as_str()))
            .col_expr(session::Column::LastActive, Expr::value(now()));
    }
    if let Some(upto) = reserve_upto {
        q = q.col_expr(session::Column::SeqReserved, raised(upto));
    }
    if let Some(token) = fence {
        q = q
            .col_expr(session::Column::Fence, Expr::value(token))
            .filter(session::Column::Fence.lte(token));
    }
    q.filter(session::Column::Id.eq(id.0))
        .filter(crate::tenant_of_row(
            backend,
            session::Column::TenantId,
            scope,
        ))
        .into_query()
}

/// Why a write of the session's row matched nothing: the session is gone
/// ([`StoreError::NotFound`]), or a newer owner wrote ([`StoreError::Fenced`]).
pub(crate) async fn untouched(
    db: &impl ConnectionTrait,
    scope: &TenantScope,
    id: SessionId,
    fence: Option<i64>,
) -> StoreError {
    match fence {
        Some(token) => refused(db, scope, id, token).await,
        None => StoreError::NotFound(format!("session {id}")),
    }
}

/// `seq_reserved` raised to `upto`, never lowered (two reservations may land in any order).
fn raised(upto: u64) -> sea_orm::sea_query::SimpleExpr {
    use sea_orm::sea_query::ExprTrait;
    let upto = i64::try_from(upto).unwrap_or(i64::MAX);
    Expr::case(
        Expr::col(session::Column::SeqReserved).lt(upto),
        Expr::value(upto),
    )
    .finally(Expr::col(session::Column::SeqReserved))
    .into()
}

/// Give back the unused part of a reservation when the session stops cleanly with everything
/// up to `last_sent` stored, so the next actor continues without a gap. Only if nothing
/// reserved more since (`reserved` is what this actor holds).
pub async fn release_seq(
    db: &impl ConnectionTrait,
    scope: &TenantScope,
    id: SessionId,
    reserved: u64,
    last_sent: u64,
) -> Result<()> {
    let as_i64 = |v: u64| i64::try_from(v).unwrap_or(i64::MAX);
    session::Entity::update_many()
        .col_expr(session::Column::SeqReserved, Expr::value(as_i64(last_sent)))
        .filter(session::Column::Id.eq(id.0))
        .filter(crate::tenant_of_row(
            db.get_database_backend(),
            session::Column::TenantId,
            scope,
        ))
        .filter(session::Column::SeqReserved.eq(as_i64(reserved)))
        .exec(db)
        .await?;
    Ok(())
}

/// Check this write's fencing token against the session's and raise the session's to it, in the
/// caller's transaction (cluster mode, issue 13): the first statement of every transaction a
/// run's owner writes for its session. Refused ([`StoreError::Fenced`], logged) when a newer
/// owner wrote already. On PostgreSQL and MySQL the update locks the session's row until the
/// transaction ends, so a newer owner's first write waits for this one and then refuses every
/// later write of the old owner; SQLite runs one write transaction at a time anyway.
pub async fn fence(
    db: &impl ConnectionTrait,
    scope: &TenantScope,
    id: SessionId,
    token: i64,
) -> Result<()> {
    update_row(db, scope, id, None, None, Some(token)).await
}

/// Why a fenced write of the session matched no row: the session is gone, or a newer owner
/// wrote (logged: a replica that lost the lease still tried to write).
async fn refused(
    db: &impl ConnectionTrait,
    scope: &TenantScope,
    id: SessionId,
    token: i64,
) -> StoreError {
    let current = match fence_of(db, scope, id).await {
        Ok(current) => current,
        Err(e) => return e,
    };
    tracing::warn!(
        session_id = %id,
        tenant_id = %scope.tenant_id(),
        token,
        current,
        "refused a write with a stale fencing token: another replica owns the session now"
    );
    StoreError::Fenced {
        session: id.to_string(),
        token,
        current,
    }
}

/// The session's fencing token: the highest that wrote for it (0: none yet).
pub async fn fence_of(
    db: &impl ConnectionTrait,
    scope: &TenantScope,
    id: SessionId,
) -> Result<i64> {
    let current: Option<i64> = session::Entity::find()
        .select_only()
        .column(session::Column::Fence)
        .filter(session::Column::Id.eq(id.0))
        .filter(crate::tenant_of_row(
            db.get_database_backend(),
            session::Column::TenantId,
            scope,
        ))
        .into_tuple()
        .one(db)
        .await?;
    current.ok_or_else(|| StoreError::NotFound(format!("session {id}")))
}

/// The `seq` below which a (re)started session must not number events: the highest stored or
/// reserved one.
pub async fn seq_floor(
    db: &impl ConnectionTrait,
    scope: &TenantScope,
    id: SessionId,
) -> Result<u64> {
    Ok(floor_and_active(db, scope, id, false).await?.0)
}

/// [`seq_floor`] and, when `with_active`, the session's unfinished top-level run (running or
/// waiting for approval, the latest started, not a `task` child: what
/// `executions::active_for_session` finds), in one
/// statement: what a replica that just took a session's lease needs to know before it numbers
/// anything or starts a run (cluster mode).
pub async fn floor_and_active(
    db: &impl ConnectionTrait,
    scope: &TenantScope,
    id: SessionId,
    with_active: bool,
) -> Result<(u64, Option<RunId>)> {
    use agentry_schema::entities::execution;
    use sea_orm::sea_query::{ExprTrait, Order, Query};
    let stored = Query::select()
        .expr(Expr::col(session_event::Column::Seq).max())
        .from(session_event::Entity)
        .and_where(Expr::col(session_event::Column::TenantId).eq(scope.uuid()))
        .and_where(Expr::col(session_event::Column::SessionId).eq(id.0))
        .to_owned();
    let mut q = session::Entity::find()
        .select_only()
        .column(session::Column::SeqReserved)
        .column_as(Expr::SubQuery(None, Box::new(stored.into())), "max_seq");
    if with_active {
        let active = Query::select()
            .column(execution::Column::Id)
            .from(execution::Entity)
            .and_where(Expr::col(execution::Column::TenantId).eq(scope.uuid()))
            .and_where(Expr::col(execution::Column::SessionId).eq(id.0))
            .and_where(Expr::col(execution::Column::ParentExecutionId).is_null())
            .and_where(Expr::col(execution::Column::Status).is_in(crate::executions::IN_PROGRESS))
            .order_by(execution::Column::StartedAt, Order::Desc)
            .limit(1)
            .to_owned();
        q = q.column_as(Expr::SubQuery(None, Box::new(active.into())), "active");
    } else {
        q = q.column_as(Expr::value(Option::<uuid::Uuid>::None), "active");
    }
    let row: Option<(i64, Option<i64>, Option<uuid::Uuid>)> = q
        .filter(session::Column::Id.eq(id.0))
        .filter(crate::tenant_of_row(
            db.get_database_backend(),
            session::Column::TenantId,
            scope,
        ))
        .into_tuple()
        .one(db)
        .await?;
    let Some((reserved, stored, active)) = row else {
        return Ok((0, None));
    };
    let as_u64 = |v: i64| u64::try_from(v).unwrap_or(0);
    Ok((
        std::cmp::max(as_u64(reserved), stored.map_or(0, as_u64)),
        active.map(RunId),
    ))
}

/// Delete a session with its messages, checkpoints and stored events, atomically. Executions,
/// approvals and the tool-call audit stay: they are the tenant's audit trail.
pub async fn delete<C>(db: &C, scope: &TenantScope, id: SessionId) -> Result<bool>
where
    C: ConnectionTrait + TransactionTrait,
{
    let txn = db.begin().await?;
    let res = session::Entity::delete_many()
        .filter(session::Column::Id.eq(id.0))
        .filter(crate::tenant_of_row(
            db.get_database_backend(),
            session::Column::TenantId,
            scope,
        ))
        .exec(&txn)
        .await?;
    if res.rows_affected == 0 {
        txn.rollback().await?;
        return Ok(false);
    }
    delete_children(&txn, scope, &[id.0]).await?;
    txn.commit().await?;
    Ok(true)
}

pub(crate) async fn delete_children(
    db: &impl ConnectionTrait,
    scope: &TenantScope,
    ids: &[uuid::Uuid],
) -> Result<()> {
    if ids.is_empty() {
        return Ok(());
    }
    message::Entity::delete_many()
        .filter(message::Column::TenantId.eq(scope.uuid()))
        .filter(message::Column::SessionId.is_in(ids.iter().copied()))
        .exec(db)
        .await?;
    checkpoint::Entity::delete_many()
        .filter(checkpoint::Column::TenantId.eq(scope.uuid()))
        .filter(checkpoint::Column::SessionId.is_in(ids.iter().copied()))
        .exec(db)
        .await?;
    session_event::Entity::delete_many()
        .filter(session_event::Column::TenantId.eq(scope.uuid()))
        .filter(session_event::Column::SessionId.is_in(ids.iter().copied()))
        .exec(db)
        .await?;
    Ok(())
}

/// A user's sessions, most recently active first.
pub async fn list_by_user(
    db: &impl ConnectionTrait,
    scope: &TenantScope,
    user_id: UserId,
    page: PageRequest,
) -> Result<Vec<Session>> {
    list_where(db, scope, Some(user_id), None, page).await
}

pub async fn list_by_assistant(
    db: &impl ConnectionTrait,
    scope: &TenantScope,
    assistant_id: &AssistantId,
    page: PageRequest,
) -> Result<Vec<Session>> {
    list_where(db, scope, None, Some(assistant_id), page).await
}

/// The tenant's sessions (or one user's), most recently active first, with the total count.
pub async fn list(
    db: &impl ConnectionTrait,
    scope: &TenantScope,
    user_id: Option<UserId>,
    page: PageRequest,
) -> Result<(Vec<Session>, u64)> {
    let items = list_where(db, scope, user_id, None, page).await?;
    let mut q = session::Entity::find().filter(session::Column::TenantId.eq(scope.uuid()));
    if let Some(u) = user_id {
        q = q.filter(session::Column::UserId.eq(u.0));
    }
    Ok((items, q.count(db).await?))
}

async fn list_where(
    db: &impl ConnectionTrait,
    scope: &TenantScope,
    user_id: Option<UserId>,
    assistant_id: Option<&AssistantId>,
    page: PageRequest,
) -> Result<Vec<Session>> {
    let mut q = session::Entity::find().filter(session::Column::TenantId.eq(scope.uuid()));
    if let Some(u) = user_id {
        q = q.filter(session::Column::UserId.eq(u.0));
    }
    if let Some(a) = assistant_id {
        q = q.filter(session::Column::AssistantId.eq(a.as_str()));
    }
    q.order_by_desc(session::Column::LastActive)
        .order_by_desc(session::Column::Id)
        .limit(page.limit)
        .offset(page.offset)
        .all(db)
        .await?
        .into_iter()
        .map(Session::try_from)
        .collect()
}

/// The user's sessions that count against `max_sessions_per_user`: all but those made for
/// stateless OpenAI-compatible calls.
pub async fn count_by_user(
    db: &impl ConnectionTrait,
    scope: &TenantScope,
    user_id: UserId,
) -> Result<u64> {
    Ok(session::Entity::find()
        .filter(session::Column::TenantId.eq(scope.uuid()))
        .filter(session::Column::UserId.eq(user_id.0))
        .filter(session::Column::Stateless.eq(false))
        .count(db)
        .await?)
}

/// Delete the sessions idle for longer than `timeout` (those not running nor waiting for an
/// approval), with their messages, checkpoints and events. Returns the ids removed.
pub async fn cleanup_expired<C>(
    db: &C,
    scope: &TenantScope,
    timeout: Duration,
) -> Result<Vec<SessionId>>
where
    C: ConnectionTrait + TransactionTrait,
{
    let cutoff = now()
        - chrono::Duration::from_std(timeout).map_err(|e| StoreError::Invalid(e.to_string()))?;
    let txn = db.begin().await?;
    let expired: Vec<uuid::Uuid> = session::Entity::find()
        .select_only()
        .column(session::Column::Id)
        .filter(session::Column::TenantId.eq(scope.uuid()))
        .filter(session::Column::LastActive.lt(cutoff))
        .filter(
            session::Column::State
                .is_in([SessionState::Idle.as_str(), SessionState::Closed.as_str()]),
        )
        .into_tuple()
        .all(&txn)
        .await?;
    for chunk in expired.chunks(500) {
        session::Entity::delete_many()
            .filter(session::Column::TenantId.eq(scope.uuid()))
            .filter(session::Column::Id.is_in(chunk.iter().copied()))
            .exec(&txn)
            .await?;
        delete_children(&txn, scope, chunk).await?;
    }
    txn.commit().await?;
    Ok(expired.into_iter().map(SessionId::from).collect())
}

/// Set `last_active` explicitly (imports, tests of expiry).
pub async fn set_last_active(
    db: &impl ConnectionTrait,
    scope: &TenantScope,
    id: SessionId,
    at: DateTime<Utc>,
) -> Result<()> {
    session::Entity::update_many()
        .col_expr(session::Column::LastActive, Expr::value(at))
        .filter(session::Column::Id.eq(id.0))
        .filter(crate::tenant_of_row(
            db.get_database_backend(),
            session::Column::TenantId,
            scope,
        ))
        .exec(db)
        .await?;
    Ok(())
}
