//! The tool-call audit: one row per call, with input, output or error, duration and approval.

use chrono::{DateTime, Utc};
use sea_orm::{
    ActiveModelTrait, ColumnTrait, ConnectionTrait, EntityTrait, QueryFilter, QueryOrder, Set,
};
use serde_json::Value;

use agentry_schema::entities::tool_call_log;
use agentry_schema::ids::{RunId, SessionId, UserId};

use crate::{Result, TenantScope, now, sanitize_json, sanitize_text};

#[derive(Debug, Clone, PartialEq)]
pub struct ToolCallLog {
    pub id: uuid::Uuid,
    pub session_id: SessionId,
    pub execution_id: RunId,
    pub tool_call_id: String,
    pub tool_name: String,
    pub input: Value,
    pub output: Option<Value>,
    pub error: Option<String>,
    pub duration_ms: u64,
    /// `None` when the call needed no approval.
    pub approved: Option<bool>,
    pub approved_by: Option<UserId>,
    pub created_at: DateTime<Utc>,
}

impl From<tool_call_log::Model> for ToolCallLog {
    fn from(m: tool_call_log::Model) -> Self {
        ToolCallLog {
            id: m.id,
            session_id: m.session_id.into(),
            execution_id: m.execution_id.into(),
            tool_call_id: m.tool_call_id,
            tool_name: m.tool_name,
            input: m.input,
            output: m.output,
            error: m.error,
            duration_ms: u64::try_from(m.duration_ms).unwrap_or(0),
            approved: m.approved,
            approved_by: m.approved_by.map(UserId::from),
            created_at: m.created_at,
        }
    }
}

#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct NewToolCallLog {
    pub session_id: SessionId,
    pub execution_id: RunId,
    pub tool_call_id: String,
    pub tool_name: String,
    pub input: Value,
    pub output: Option<Value>,
    pub error: Option<String>,
    pub duration_ms: u64,
    pub approved: Option<bool>,
    pub approved_by: Option<UserId>,
}

pub async fn insert(
    db: &impl ConnectionTrait,
    scope: &TenantScope,
    new: NewToolCallLog,
) -> Result<ToolCallLog> {
    Ok(new_row(scope, new, now()).insert(db).await?.into())
}

/// Store audit rows in order, in one statement.
pub async fn insert_many(
    db: &impl ConnectionTrait,
    scope: &TenantScope,
    new: Vec<NewToolCallLog>,
) -> Result<()> {
    if new.is_empty() {
        return Ok(());
    }
    db.execute(&insert_many_query(scope, new)).await?;
    Ok(())
}

/// [`insert_many`]'s statement (`new` not empty), for a caller that sends it inside a bigger
/// one (`crate::run_writes`).
pub(crate) fn insert_many_query(
    scope: &TenantScope,
    new: Vec<NewToolCallLog>,
) -> sea_orm::sea_query::InsertStatement {
    use sea_orm::QueryTrait;
    let ts = now();
    tool_call_log::Entity::insert_many(new.into_iter().map(|n| new_row(scope, n, ts))).into_query()
}

pub(crate) fn new_row(
    scope: &TenantScope,
    new: NewToolCallLog,
    ts: chrono::DateTime<chrono::Utc>,
) -> tool_call_log::ActiveModel {
    tool_call_log::ActiveModel {
        id: Set(uuid::Uuid::now_v7()),
        tenant_id: Set(scope.uuid()),
        session_id: Set(new.session_id.0),
        execution_id: Set(new.execution_id.0),
        tool_call_id: Set(sanitize_text(new.tool_call_id)),
        tool_name: Set(new.tool_name),
        input: Set(sanitize_json(new.input)),
        output: Set(new.output.map(sanitize_json)),
        error: Set(new.error.map(sanitize_text)),
        duration_ms: Set(i64::try_from(new.duration_ms).unwrap_or(i64::MAX)),
        approved: Set(new.approved),
        approved_by: Set(new.approved_by.map(|u| u.0)),
        created_at: Set(ts),
    }
}

/// The calls of one run, in the order they were made.
pub async fn list_by_execution(
    db: &impl ConnectionTrait,
    scope: &TenantScope,
    execution_id: RunId,
) -> Result<Vec<ToolCallLog>> {
    Ok(tool_call_log::Entity::find()
        .filter(tool_call_log::Column::TenantId.eq(scope.uuid()))
        .filter(tool_call_log::Column::ExecutionId.eq(execution_id.0))
        .order_by_asc(tool_call_log::Column::CreatedAt)
        .order_by_asc(tool_call_log::Column::Id)
        .all(db)
        .await?
        .into_iter()
        .map(ToolCallLog::from)
        .collect())
}

/// How a call ended, as the audit tells it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CallOutcome {
    /// The tool returned a result (which may be a reported failure such as an HTTP 404).
    Ok,
    /// No result: refused, denied, invalid arguments, timed out, failed, interrupted, ….
    Error,
}

impl CallOutcome {
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "ok" => Some(Self::Ok),
            "error" => Some(Self::Error),
            _ => None,
        }
    }
}

/// `GET /tool-calls`: which audit rows of the tenant to list. Every field narrows.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ToolCallFilter {
    /// The user whose run made the call.
    pub user_id: Option<UserId>,
    /// The assistant whose run made the call.
    pub assistant_id: Option<String>,
    pub session_id: Option<SessionId>,
    pub execution_id: Option<RunId>,
    pub tool_name: Option<String>,
    pub outcome: Option<CallOutcome>,
    /// Calls recorded at or after this instant.
    pub from: Option<DateTime<Utc>>,
    /// Calls recorded before this instant.
    pub to: Option<DateTime<Utc>>,
}

/// An audit row with the run it belongs to: who made the call, through which assistant.
#[derive(Debug, Clone, PartialEq)]
pub struct AuditedCall {
    pub call: ToolCallLog,
    pub user_id: UserId,
    pub assistant_id: String,
}

/// The tenant's tool calls matching `filter`, newest first, with the total. Who made a call
/// is its run's user (the audit row names the run), so a user or assistant filter is a
/// semi-join on the tenant's runs.
pub async fn list(
    db: &impl ConnectionTrait,
    scope: &TenantScope,
    filter: &ToolCallFilter,
    page: crate::PageRequest,
) -> Result<(Vec<AuditedCall>, u64)> {
    use agentry_schema::entities::execution;
    use sea_orm::sea_query::Query;
    use sea_orm::{PaginatorTrait, QuerySelect};
    let mut q =
        tool_call_log::Entity::find().filter(tool_call_log::Column::TenantId.eq(scope.uuid()));
    if filter.user_id.is_some() || filter.assistant_id.is_some() {
        let mut runs = Query::select();
        runs.column(execution::Column::Id)
            .from(execution::Entity)
            .and_where(execution::Column::TenantId.eq(scope.uuid()));
        if let Some(u) = filter.user_id {
            runs.and_where(execution::Column::UserId.eq(u.0));
        }
        if let Some(a) = &filter.assistant_id {
            runs.and_where(execution::Column::AssistantId.eq(a.as_str()));
        }
        q = q.filter(tool_call_log::Column::ExecutionId.in_subquery(runs.to_owned()));
    }
    if let Some(s) = filter.session_id {
        q = q.filter(tool_call_log::Column::SessionId.eq(s.0));
    }
    if let Some(r) = filter.execution_id {
        q = q.filter(tool_call_log::Column::ExecutionId.eq(r.0));
    }
    if let Some(t) = &filter.tool_name {
        q = q.filter(tool_call_log::Column::ToolName.eq(t.as_str()));
    }
    match filter.outcome {
        Some(CallOutcome::Ok) => q = q.filter(tool_call_log::Column::Error.is_null()),
        Some(CallOutcome::Error) => q = q.filter(tool_call_log::Column::Error.is_not_null()),
        None => {}
    }
    if let Some(from) = filter.from {
        q = q.filter(tool_call_log::Column::CreatedAt.gte(from));
    }
    if let Some(to) = filter.to {
        q = q.filter(tool_call_log::Column::CreatedAt.lt(to));
    }
    let total = q.clone().count(db).await?;
    let calls: Vec<ToolCallLog> = q
        .order_by_desc(tool_call_log::Column::CreatedAt)
        .order_by_desc(tool_call_log::Column::Id)
        .limit(page.limit)
        .offset(page.offset)
        .all(db)
        .await?
        .into_iter()
        .map(ToolCallLog::from)
        .collect();
    // The runs of this page, for who and through which assistant (one query, not one per row).
    let mut run_ids: Vec<uuid::Uuid> = calls.iter().map(|c| c.execution_id.0).collect();
    run_ids.sort_unstable();
    run_ids.dedup();
    let runs: std::collections::HashMap<uuid::Uuid, (uuid::Uuid, String)> = if run_ids.is_empty() {
        Default::default()
    } else {
        execution::Entity::find()
            .select_only()
            .column(execution::Column::Id)
            .column(execution::Column::UserId)
            .column(execution::Column::AssistantId)
            .filter(execution::Column::TenantId.eq(scope.uuid()))
            .filter(execution::Column::Id.is_in(run_ids))
            .into_tuple::<(uuid::Uuid, uuid::Uuid, String)>()
            .all(db)
            .await?
            .into_iter()
            .map(|(id, user, assistant)| (id, (user, assistant)))
            .collect()
    };
    let items = calls
        .into_iter()
        .filter_map(|call| {
            // A call's run is always stored before (or with) its audit row; a row whose run
            // is missing would be corrupt data, left out rather than shown without its owner.
            let (user, assistant) = runs.get(&call.execution_id.0)?.clone();
            Some(AuditedCall {
                call,
                user_id: user.into(),
                assistant_id: assistant,
            })
        })
        .collect();
    Ok((items, total))
}
