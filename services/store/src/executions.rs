//! Executions: one row per run of the agent loop, with status and token usage.

use chrono::{DateTime, Utc};
use sea_orm::sea_query::{Expr, ExprTrait};
use sea_orm::{
    ActiveModelTrait, ColumnTrait, ConnectionTrait, EntityTrait, PaginatorTrait, QueryFilter,
    QueryOrder, QuerySelect, Set, TransactionSession, TransactionTrait,
};
use serde::{Deserialize, Serialize};

use agentry_schema::entities::{execution, session_event};
use agentry_schema::events::{ExecutionEvent, TokenUsage};
use agentry_schema::ids::{RunId, SessionId, TenantId, UserId};
use agentry_schema::roles::Grant;

use crate::{
    PageRequest, PlatformScope, Result, StoreError, TenantScope, corrupt, now, sanitize_text,
};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ExecutionStatus {
    /// Accepted while another run of the session was active; starts when that one ends.
    Queued,
    Running,
    WaitingApproval,
    Completed,
    Failed,
    Cancelled,
    Rejected,
    Timeout,
    Interrupted,
}

impl ExecutionStatus {
    pub const ALL: [ExecutionStatus; 9] = [
        ExecutionStatus::Queued,
        ExecutionStatus::Running,
        ExecutionStatus::WaitingApproval,
        ExecutionStatus::Completed,
        ExecutionStatus::Failed,
        ExecutionStatus::Cancelled,
        ExecutionStatus::Rejected,
        ExecutionStatus::Timeout,
        ExecutionStatus::Interrupted,
    ];

    pub const fn as_str(self) -> &'static str {
        match self {
            ExecutionStatus::Queued => "queued",
            ExecutionStatus::Running => "running",
            ExecutionStatus::WaitingApproval => "waiting_approval",
            ExecutionStatus::Completed => "completed",
            ExecutionStatus::Failed => "failed",
            ExecutionStatus::Cancelled => "cancelled",
            ExecutionStatus::Rejected => "rejected",
            ExecutionStatus::Timeout => "timeout",
            ExecutionStatus::Interrupted => "interrupted",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|x| x.as_str() == s)
    }

    pub fn is_finished(self) -> bool {
        !matches!(
            self,
            ExecutionStatus::Running | ExecutionStatus::WaitingApproval
        )
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct Execution {
    pub id: RunId,
    pub tenant_id: TenantId,
    pub user_id: UserId,
    pub session_id: SessionId,
    pub assistant_id: String,
    pub input: String,
    pub status: ExecutionStatus,
    pub error: Option<String>,
    pub token_usage: TokenUsage,
    pub steps: u32,
    pub trace_id: Option<String>,
    pub started_at: DateTime<Utc>,
    pub completed_at: Option<DateTime<Utc>>,
    pub updated_at: DateTime<Utc>,
    /// The run whose `task` call started this one (a child run); `None` for a top-level run.
    pub parent_execution_id: Option<RunId>,
    /// The parent's tool call that started this run.
    pub parent_tool_call_id: Option<String>,
    /// The role the run was started with: a resumed or queued run keeps it. `None` on rows
    /// from before it was recorded.
    pub role: Option<Grant>,
}

impl TryFrom<execution::Model> for Execution {
    type Error = StoreError;
    fn try_from(m: execution::Model) -> Result<Self> {
        let u = |v: i64| u64::try_from(v).unwrap_or(0);
        Ok(Execution {
            id: m.id.into(),
            tenant_id: m.tenant_id.into(),
            user_id: m.user_id.into(),
            session_id: m.session_id.into(),
            assistant_id: m.assistant_id,
            input: m.input,
            status: ExecutionStatus::parse(&m.status)
                .ok_or_else(|| corrupt("execution.status", &m.status))?,
            error: m.error,
            token_usage: TokenUsage {
                input: u(m.input_tokens),
                output: u(m.output_tokens),
                total: u(m.total_tokens),
            },
            steps: u32::try_from(m.steps).unwrap_or(0),
            trace_id: m.trace_id,
            started_at: m.started_at,
            completed_at: m.completed_at,
            updated_at: m.updated_at,
            parent_execution_id: m.parent_execution_id.map(RunId::from),
            parent_tool_call_id: m.parent_tool_call_id,
            role: m.role.as_deref().and_then(Grant::parse),
        })
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct NewExecution {
    pub id: RunId,
    pub user_id: UserId,
    pub session_id: SessionId,
    pub assistant_id: String,
    pub input: String,
    pub trace_id: Option<String>,
    /// `Running`, or `Queued` behind the session's active run.
    pub status: ExecutionStatus,
    /// The caller's effective role, kept for a resumed or queued run.
    pub role: Option<Grant>,
}

/// Store a new execution and return it as stored.
pub async fn create(
    db: &impl ConnectionTrait,
    scope: &TenantScope,
    new: NewExecution,
) -> Result<Execution> {
    row(scope, new).insert(db).await?.try_into()
}

/// Store a new execution without reading it back (a run's start).
pub async fn insert(
    db: &impl ConnectionTrait,
    scope: &TenantScope,
    new: NewExecution,
) -> Result<()> {
    db.execute(&insert_query(scope, new)).await?;
    Ok(())
}

/// [`insert`]'s statement, for a caller that sends it inside a bigger one
/// (`crate::run_writes`).
pub(crate) fn insert_query(
    scope: &TenantScope,
    new: NewExecution,
) -> sea_orm::sea_query::InsertStatement {
    use sea_orm::QueryTrait;
    execution::Entity::insert(row(scope, new)).into_query()
}

/// Store the execution of a child run: one started by the `task` call `tool_call_id` of the
/// run `parent`.
pub async fn insert_child(
    db: &impl ConnectionTrait,
    scope: &TenantScope,
    new: NewExecution,
    parent: RunId,
    tool_call_id: &str,
) -> Result<()> {
    let mut row = row(scope, new);
    row.parent_execution_id = Set(Some(parent.0));
    row.parent_tool_call_id = Set(Some(tool_call_id.to_string()));
    execution::Entity::insert(row)
        .exec_without_returning(db)
        .await?;
    Ok(())
}

/// The child run the `task` call `tool_call_id` of `parent` started, if it did.
pub async fn child_of_call(
    db: &impl ConnectionTrait,
    scope: &TenantScope,
    parent: RunId,
    tool_call_id: &str,
) -> Result<Option<Execution>> {
    execution::Entity::find()
        .filter(execution::Column::TenantId.eq(scope.uuid()))
        .filter(execution::Column::ParentExecutionId.eq(parent.0))
        .filter(execution::Column::ParentToolCallId.eq(tool_call_id))
        .one(db)
        .await?
        .map(Execution::try_from)
        .transpose()
}

/// The session's child runs left unfinished (a crash mid-child), deepest first: start-up
/// recovery ends each with one `done`.
pub async fn unfinished_children(
    db: &impl ConnectionTrait,
    scope: &TenantScope,
    session_id: SessionId,
) -> Result<Vec<Execution>> {
    execution::Entity::find()
        .filter(execution::Column::TenantId.eq(scope.uuid()))
        .filter(execution::Column::SessionId.eq(session_id.0))
        .filter(execution::Column::ParentExecutionId.is_not_null())
        .filter(execution::Column::Status.is_in(IN_PROGRESS))
        .order_by_desc(execution::Column::StartedAt)
        .all(db)
        .await?
        .into_iter()
        .map(Execution::try_from)
        .collect()
}

fn row(scope: &TenantScope, new: NewExecution) -> execution::ActiveModel {
    let ts = now();
    execution::ActiveModel {
        id: Set(new.id.0),
        tenant_id: Set(scope.uuid()),
        user_id: Set(new.user_id.0),
        session_id: Set(new.session_id.0),
        assistant_id: Set(new.assistant_id),
        input: Set(sanitize_text(new.input)),
        status: Set(new.status.as_str().to_string()),
        error: Set(None),
        input_tokens: Set(0),
        output_tokens: Set(0),
        total_tokens: Set(0),
        steps: Set(0),
        trace_id: Set(new.trace_id),
        started_at: Set(ts),
        completed_at: Set(None),
        updated_at: Set(ts),
        parent_execution_id: Set(None),
        parent_tool_call_id: Set(None),
        role: Set(new.role.map(|g| g.as_str().to_string())),
    }
}

pub async fn get(
    db: &impl ConnectionTrait,
    scope: &TenantScope,
    id: RunId,
) -> Result<Option<Execution>> {
    execution::Entity::find_by_id(id.0)
        .filter(crate::tenant_of_row(
            db.get_database_backend(),
            execution::Column::TenantId,
            scope,
        ))
        .one(db)
        .await?
        .map(Execution::try_from)
        .transpose()
}

fn i64_of(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

/// Record progress of a run: status, steps so far, usage so far. Finished statuses also set
/// `completed_at` and the error.
pub async fn update(
    db: &impl ConnectionTrait,
    scope: &TenantScope,
    id: RunId,
    status: ExecutionStatus,
    steps: u32,
    usage: TokenUsage,
    error: Option<&str>,
) -> Result<()> {
    let q = update_query(
        db.get_database_backend(),
        scope,
        id,
        status,
        steps,
        usage,
        error,
    );
    let res = db.execute(&q).await?;
    if res.rows_affected() == 0 {
        return Err(StoreError::NotFound(format!("execution {id}")));
    }
    Ok(())
}

/// [`update`]'s statement, for a caller that sends it inside a bigger one
/// (`crate::run_writes`).
pub(crate) fn update_query(
    backend: sea_orm::DatabaseBackend,
    scope: &TenantScope,
    id: RunId,
    status: ExecutionStatus,
    steps: u32,
    usage: TokenUsage,
    error: Option<&str>,
) -> sea_orm::sea_query::UpdateStatement {
    use sea_orm::QueryTrait;
    let ts = now();
    let mut q = execution::Entity::update_many()
        .col_expr(execution::Column::Status, Expr::value(status.as_str()))
        .col_expr(
            execution::Column::Steps,
            Expr::value(i32::try_from(steps).unwrap_or(i32::MAX)),
        )
        .col_expr(
            execution::Column::InputTokens,
            Expr::value(i64_of(usage.input)),
        )
        .col_expr(
            execution::Column::OutputTokens,
            Expr::value(i64_of(usage.output)),
        )
        .col_expr(
            execution::Column::TotalTokens,
            Expr::value(i64_of(usage.total)),
        )
        .col_expr(execution::Column::UpdatedAt, Expr::value(ts));
    if status.is_finished() {
        q = q
            .col_expr(execution::Column::CompletedAt, Expr::value(Some(ts)))
            .col_expr(
                execution::Column::Error,
                Expr::value(error.map(|e| sanitize_text(e.to_string()))),
            );
    }
    q.filter(execution::Column::Id.eq(id.0))
        .filter(crate::tenant_of_row(
            backend,
            execution::Column::TenantId,
            scope,
        ))
        .into_query()
}

/// Everything a run's end writes, in one transaction: its final status, the messages and
/// tool-call audit rows of its last step, its events not yet stored with its `done` last, its
/// pending approvals cancelled and its session idle. A `done` is never stored without its
/// status, nor a final status without its `done`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunEnd {
    pub run_id: RunId,
    pub session_id: SessionId,
    pub status: ExecutionStatus,
    pub steps: u32,
    pub usage: TokenUsage,
    pub error: Option<String>,
    /// The run's events that may not be stored yet, in `seq` order, its `done` last. Events
    /// already stored are left as they are.
    pub events: Vec<ExecutionEvent>,
    /// Messages of the run's last step not stored yet (its final answer, a refused call's
    /// result), in order. Stored only by the write that ends the run.
    #[serde(default)]
    pub messages: Vec<crate::messages::NewMessage>,
    /// Tool-call audit rows of the last step not stored yet, likewise.
    #[serde(default)]
    pub tool_calls: Vec<crate::tool_calls::NewToolCallLog>,
    /// Decisions on the run's approvals not stored yet (a rejection that ended the run),
    /// written before the pending ones are cancelled.
    #[serde(default)]
    pub decisions: Vec<crate::approvals::ApprovalDecision>,
    /// Whether the run may have pending approvals to cancel (false: it never asked anyone, so
    /// the look is skipped).
    #[serde(default = "yes")]
    pub cancel_approvals: bool,
    /// Cluster mode: the fencing token of the replica that owns the session's run (see
    /// [`crate::sessions::fence`]); the end is refused if a newer owner wrote. `None`: a
    /// single-node server, which holds the whole database.
    #[serde(default)]
    pub fence: Option<i64>,
    /// A `task` child run's end: the session's state is its parent's business (it is not set
    /// idle).
    #[serde(default)]
    pub child: bool,
}

fn yes() -> bool {
    true
}

/// Write a run's end (see [`RunEnd`]). Writing the same end twice changes nothing the second
/// time, and an end never overwrites another final status.
pub async fn record_end<C>(db: &C, scope: &TenantScope, end: &RunEnd) -> Result<()>
where
    C: ConnectionTrait + TransactionTrait,
{
    let txn = db.begin().await?;
    record_end_in(&txn, scope, end).await?;
    txn.commit().await?;
    Ok(())
}

/// [`record_end`] through the writer: one job, committed with whatever else waits for it.
pub async fn write_end(
    writer: &crate::writer::Writer,
    scope: &TenantScope,
    end: std::sync::Arc<RunEnd>,
) -> Result<()> {
    let scope = *scope;
    writer
        .write_for(end.session_id.0, move |txn| {
            let end = end.clone();
            Box::pin(async move { record_end_in(txn, &scope, &end).await })
        })
        .await
}

/// [`record_end`]'s statements, inside the caller's transaction.
pub async fn record_end_in(
    txn: &impl ConnectionTrait,
    scope: &TenantScope,
    end: &RunEnd,
) -> Result<()> {
    if txn.get_database_backend() == sea_orm::DatabaseBackend::Postgres {
        // The statements below as one (`crate::run_writes`).
        if !crate::run_writes::end_rows_pg(txn, scope, end).await? {
            match crate::sessions::untouched(txn, scope, end.session_id, end.fence).await {
                StoreError::NotFound(_) => {}
                e => return Err(e),
            }
        }
        return record_end_rest(txn, scope, end).await;
    }
    // First, and in one statement: the session goes idle with its event numbers raised past the
    // run's last event, under the owner's fencing token in cluster mode (refused if a newer
    // owner wrote; it locks the session's row like `sessions::fence`).
    let last_seq = end.events.iter().map(|e| e.seq).max().unwrap_or(0);
    // A `task` child's end leaves the session's state to its parent's run (which goes on, or
    // ends with its own end): it only raises the reservation, under the same fence.
    let touched = if end.child {
        crate::sessions::reserve_fenced(txn, scope, end.session_id, last_seq, end.fence).await
    } else {
        crate::sessions::touch_fenced(
            txn,
            scope,
            end.session_id,
            crate::sessions::SessionState::Idle,
            Some(last_seq),
            end.fence,
        )
        .await
    };
    match touched {
        // A deleted session keeps its runs (the audit trail): the end is still the run's.
        Ok(()) | Err(StoreError::NotFound(_)) => {}
        Err(e) => return Err(e),
    }
    let ended = txn
        .execute(&end_query(txn.get_database_backend(), scope, end))
        .await?
        .rows_affected()
        > 0;
    // Rows of the last step go in only with the end that ends the run: an end written again
    // (its first commit's answer was lost) or after another final status adds nothing twice.
    if ended {
        crate::messages::save_many(txn, scope, end.session_id, end.messages.clone()).await?;
        crate::tool_calls::insert_many(txn, scope, end.tool_calls.clone()).await?;
    }
    record_end_rest(txn, scope, end).await
}

/// The end's events (deferred to the transaction's end by the writer), decisions and pending
/// approvals.
async fn record_end_rest(
    txn: &impl ConnectionTrait,
    scope: &TenantScope,
    end: &RunEnd,
) -> Result<()> {
    crate::events::append_missing(txn, scope, end.session_id, &end.events).await?;
    for d in &end.decisions {
        crate::approvals::record(txn, scope, d).await?;
    }
    if end.cancel_approvals {
        crate::approvals::cancel_pending_of_run(txn, scope, end.run_id).await?;
    }
    Ok(())
}

/// The run's row at its end: its final status (with `completed_at` and the error), unless it
/// has one already.
pub(crate) fn end_query(
    backend: sea_orm::DatabaseBackend,
    scope: &TenantScope,
    end: &RunEnd,
) -> sea_orm::sea_query::UpdateStatement {
    let mut q = update_query(
        backend,
        scope,
        end.run_id,
        end.status,
        end.steps,
        end.usage,
        end.error.as_deref(),
    );
    q.and_where(execution::Column::Status.is_in(UNFINISHED));
    q
}

/// A run going or waiting for a person: what recovery resumes and a session waits for.
pub(crate) const IN_PROGRESS: [&str; 2] = [
    ExecutionStatus::Running.as_str(),
    ExecutionStatus::WaitingApproval.as_str(),
];

/// [`IN_PROGRESS`], or queued behind one: not ended.
pub(crate) const UNFINISHED: [&str; 3] = [
    ExecutionStatus::Queued.as_str(),
    ExecutionStatus::Running.as_str(),
    ExecutionStatus::WaitingApproval.as_str(),
];

/// Runs of the last `since` that ended (a final status) but whose stream holds no `done`:
/// what a crash between the two writes left before they were one transaction. Start-up
/// recovery gives each its `done`.
pub async fn finished_without_done(
    db: &impl ConnectionTrait,
    _: &PlatformScope,
    since: DateTime<Utc>,
) -> Result<Vec<Execution>> {
    use sea_orm::sea_query::Query;
    let has_done = Query::select()
        .expr(Expr::val(1))
        .from(session_event::Entity)
        .and_where(
            Expr::col((session_event::Entity, session_event::Column::RunId))
                .equals((execution::Entity, execution::Column::Id)),
        )
        .and_where(Expr::col((session_event::Entity, session_event::Column::EventType)).eq("done"))
        .to_owned();
    execution::Entity::find()
        .filter(execution::Column::Status.is_not_in(UNFINISHED))
        .filter(execution::Column::CompletedAt.gte(since))
        .filter(Expr::exists(has_done).not())
        .order_by_asc(execution::Column::StartedAt)
        .all(db)
        .await?
        .into_iter()
        .map(Execution::try_from)
        .collect()
}

#[derive(Debug, Clone, Default, PartialEq)]
pub struct ExecutionFilter {
    pub user_id: Option<UserId>,
    pub session_id: Option<SessionId>,
    pub status: Option<ExecutionStatus>,
    pub assistant_id: Option<String>,
    /// Only runs that made at least one call of this tool (by its name in the audit).
    pub tool_name: Option<String>,
    /// Runs started at or after this instant.
    pub from: Option<DateTime<Utc>>,
    /// Runs started before this instant.
    pub to: Option<DateTime<Utc>>,
    /// Only the child runs this run's `task` calls started.
    pub parent_execution_id: Option<RunId>,
    /// Only runs a person started (`true`) or only `task` child runs (`false`).
    pub top_level: Option<bool>,
}

/// Newest first, with the total.
pub async fn list(
    db: &impl ConnectionTrait,
    scope: &TenantScope,
    filter: &ExecutionFilter,
    page: PageRequest,
) -> Result<(Vec<Execution>, u64)> {
    let mut q = execution::Entity::find().filter(execution::Column::TenantId.eq(scope.uuid()));
    if let Some(u) = filter.user_id {
        q = q.filter(execution::Column::UserId.eq(u.0));
    }
    if let Some(s) = filter.session_id {
        q = q.filter(execution::Column::SessionId.eq(s.0));
    }
    if let Some(st) = filter.status {
        q = q.filter(execution::Column::Status.eq(st.as_str()));
    }
    if let Some(a) = &filter.assistant_id {
        q = q.filter(execution::Column::AssistantId.eq(a.as_str()));
    }
    if let Some(from) = filter.from {
        q = q.filter(execution::Column::StartedAt.gte(from));
    }
    if let Some(to) = filter.to {
        q = q.filter(execution::Column::StartedAt.lt(to));
    }
    if let Some(p) = filter.parent_execution_id {
        q = q.filter(execution::Column::ParentExecutionId.eq(p.0));
    }
    match filter.top_level {
        Some(true) => q = q.filter(execution::Column::ParentExecutionId.is_null()),
        Some(false) => q = q.filter(execution::Column::ParentExecutionId.is_not_null()),
        None => {}
    }
    if let Some(tool) = &filter.tool_name {
        use agentry_schema::entities::tool_call_log;
        use sea_orm::sea_query::Query;
        let called = Query::select()
            .expr(Expr::val(1))
            .from(tool_call_log::Entity)
            .and_where(
                Expr::col((tool_call_log::Entity, tool_call_log::Column::TenantId))
                    .eq(scope.uuid()),
            )
            .and_where(
                Expr::col((tool_call_log::Entity, tool_call_log::Column::ExecutionId))
                    .equals((execution::Entity, execution::Column::Id)),
            )
            .and_where(
                Expr::col((tool_call_log::Entity, tool_call_log::Column::ToolName))
                    .eq(tool.as_str()),
            )
            .to_owned();
        q = q.filter(Expr::exists(called));
    }
    let total = q.clone().count(db).await?;
    let items = q
        .order_by_desc(execution::Column::StartedAt)
        .order_by_desc(execution::Column::Id)
        .limit(page.limit)
        .offset(page.offset)
        .all(db)
        .await?
        .into_iter()
        .map(Execution::try_from)
        .collect::<Result<_>>()?;
    Ok((items, total))
}

/// Where a page of [`list_by_update`] ends: the last row's `updated_at` and id.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UpdateCursor {
    pub updated_at: DateTime<Utc>,
    pub id: RunId,
}

/// One user's top-level runs of one assistant, most recently updated first, for a client that
/// pages with a cursor (the A2A `ListTasks`): the rows after `after` (keyset, so a page is not
/// skewed by rows added before it), at most `limit`, with the total that match. `statuses`
/// empty: any; `updated_from`: updated at or after.
#[allow(clippy::too_many_arguments)]
pub async fn list_by_update(
    db: &impl ConnectionTrait,
    scope: &TenantScope,
    user: UserId,
    assistant_id: &str,
    session: Option<SessionId>,
    statuses: &[ExecutionStatus],
    updated_from: Option<DateTime<Utc>>,
    after: Option<UpdateCursor>,
    limit: u64,
) -> Result<(Vec<Execution>, u64)> {
    let mut q = execution::Entity::find()
        .filter(execution::Column::TenantId.eq(scope.uuid()))
        .filter(execution::Column::UserId.eq(user.0))
        .filter(execution::Column::AssistantId.eq(assistant_id))
        .filter(execution::Column::ParentExecutionId.is_null());
    if let Some(s) = session {
        q = q.filter(execution::Column::SessionId.eq(s.0));
    }
    if !statuses.is_empty() {
        q = q.filter(execution::Column::Status.is_in(statuses.iter().map(|s| s.as_str())));
    }
    if let Some(from) = updated_from {
        q = q.filter(execution::Column::UpdatedAt.gte(from));
    }
    let total = q.clone().count(db).await?;
    if let Some(c) = after {
        q = q.filter(
            sea_orm::Condition::any()
                .add(execution::Column::UpdatedAt.lt(c.updated_at))
                .add(
                    sea_orm::Condition::all()
                        .add(execution::Column::UpdatedAt.eq(c.updated_at))
                        .add(execution::Column::Id.lt(c.id.0)),
                ),
        );
    }
    let items = q
        .order_by_desc(execution::Column::UpdatedAt)
        .order_by_desc(execution::Column::Id)
        .limit(limit)
        .all(db)
        .await?
        .into_iter()
        .map(Execution::try_from)
        .collect::<Result<_>>()?;
    Ok((items, total))
}

/// Runs left unfinished (a crash, a restart), across all tenants: start-up recovery.
pub async fn list_unfinished(
    db: &impl ConnectionTrait,
    _: &PlatformScope,
) -> Result<Vec<Execution>> {
    execution::Entity::find()
        .filter(execution::Column::Status.is_in(IN_PROGRESS))
        .order_by_asc(execution::Column::StartedAt)
        .all(db)
        .await?
        .into_iter()
        .map(Execution::try_from)
        .collect()
}

/// Every session with a run going, waiting for a person, or queued, across all tenants: what
/// a cluster's failover watcher checks for a dead owner.
pub async fn sessions_with_open_runs(
    db: &impl ConnectionTrait,
    _: &PlatformScope,
) -> Result<Vec<(TenantId, SessionId)>> {
    let rows: Vec<(uuid::Uuid, uuid::Uuid)> = execution::Entity::find()
        .select_only()
        .column(execution::Column::TenantId)
        .column(execution::Column::SessionId)
        .distinct()
        .filter(execution::Column::Status.is_in(UNFINISHED))
        .into_tuple()
        .all(db)
        .await?;
    Ok(rows
        .into_iter()
        .map(|(t, s)| (TenantId::from(t), SessionId::from(s)))
        .collect())
}

/// The session's queued runs, oldest first.
pub async fn queued_for_session(
    db: &impl ConnectionTrait,
    scope: &TenantScope,
    session_id: SessionId,
) -> Result<Vec<Execution>> {
    execution::Entity::find()
        .filter(execution::Column::TenantId.eq(scope.uuid()))
        .filter(execution::Column::SessionId.eq(session_id.0))
        .filter(execution::Column::Status.eq(ExecutionStatus::Queued.as_str()))
        .order_by_asc(execution::Column::StartedAt)
        .order_by_asc(execution::Column::Id)
        .all(db)
        .await?
        .into_iter()
        .map(Execution::try_from)
        .collect()
}

/// Mark a queued run as started now.
pub async fn start_queued(db: &impl ConnectionTrait, scope: &TenantScope, id: RunId) -> Result<()> {
    let ts = now();
    let res = execution::Entity::update_many()
        .col_expr(
            execution::Column::Status,
            Expr::value(ExecutionStatus::Running.as_str()),
        )
        .col_expr(execution::Column::StartedAt, Expr::value(ts))
        .col_expr(execution::Column::UpdatedAt, Expr::value(ts))
        .filter(execution::Column::Id.eq(id.0))
        .filter(crate::tenant_of_row(
            db.get_database_backend(),
            execution::Column::TenantId,
            scope,
        ))
        .filter(execution::Column::Status.eq(ExecutionStatus::Queued.as_str()))
        .exec(db)
        .await?;
    if res.rows_affected == 0 {
        return Err(StoreError::NotFound(format!("queued execution {id}")));
    }
    Ok(())
}

/// The unfinished top-level run of a session, if any (its unfinished `task` children are
/// [`unfinished_children`]).
pub async fn active_for_session(
    db: &impl ConnectionTrait,
    scope: &TenantScope,
    session_id: SessionId,
) -> Result<Option<Execution>> {
    execution::Entity::find()
        .filter(execution::Column::TenantId.eq(scope.uuid()))
        .filter(execution::Column::SessionId.eq(session_id.0))
        .filter(execution::Column::ParentExecutionId.is_null())
        .filter(execution::Column::Status.is_in(IN_PROGRESS))
        .order_by_desc(execution::Column::StartedAt)
        .one(db)
        .await?
        .map(Execution::try_from)
        .transpose()
}

/// Tokens used by the tenant's runs started since `since` (the daily token quota).
pub async fn tokens_since(
    db: &impl ConnectionTrait,
    scope: &TenantScope,
    since: DateTime<Utc>,
) -> Result<u64> {
    let rows: Vec<i64> = execution::Entity::find()
        .select_only()
        .column(execution::Column::TotalTokens)
        .filter(execution::Column::TenantId.eq(scope.uuid()))
        // A `task` child's tokens are in its parent's row already (they roll up).
        .filter(execution::Column::ParentExecutionId.is_null())
        .filter(execution::Column::StartedAt.gte(since))
        .into_tuple()
        .all(db)
        .await?;
    Ok(rows
        .into_iter()
        .map(|v| u64::try_from(v).unwrap_or(0))
        .sum())
}
