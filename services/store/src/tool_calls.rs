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
    let ts = now();
    tool_call_log::Entity::insert_many(new.into_iter().map(|n| new_row(scope, n, ts)))
        .exec_without_returning(db)
        .await?;
    Ok(())
}

fn new_row(
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
