//! Approvals: each `hitl_request` (a tool call waiting for approval, or a question) and the
//! decision it got.

use chrono::{DateTime, Utc};
use sea_orm::sea_query::Expr;
use sea_orm::{
    ActiveModelTrait, ColumnTrait, ConnectionTrait, EntityTrait, QueryFilter, QueryOrder, Set,
};
use serde_json::Value;

use agentry_schema::entities::approval;
use agentry_schema::ids::{ApprovalId, RunId, SessionId, UserId};

use crate::{Result, StoreError, TenantScope, corrupt, now, sanitize_json};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ApprovalStatus {
    Pending,
    Approved,
    Edited,
    Rejected,
    Answered,
    TimedOut,
    Cancelled,
}

impl ApprovalStatus {
    const ALL: [ApprovalStatus; 7] = [
        ApprovalStatus::Pending,
        ApprovalStatus::Approved,
        ApprovalStatus::Edited,
        ApprovalStatus::Rejected,
        ApprovalStatus::Answered,
        ApprovalStatus::TimedOut,
        ApprovalStatus::Cancelled,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            ApprovalStatus::Pending => "pending",
            ApprovalStatus::Approved => "approved",
            ApprovalStatus::Edited => "edited",
            ApprovalStatus::Rejected => "rejected",
            ApprovalStatus::Answered => "answered",
            ApprovalStatus::TimedOut => "timed_out",
            ApprovalStatus::Cancelled => "cancelled",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|x| x.as_str() == s)
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct Approval {
    pub id: ApprovalId,
    pub session_id: SessionId,
    pub execution_id: RunId,
    /// `approval` or `question`.
    pub kind: String,
    pub tool_call_id: Option<String>,
    pub request: Value,
    pub status: ApprovalStatus,
    pub decision: Option<Value>,
    pub decided_by: Option<UserId>,
    pub created_at: DateTime<Utc>,
    pub decided_at: Option<DateTime<Utc>>,
}

impl TryFrom<approval::Model> for Approval {
    type Error = StoreError;
    fn try_from(m: approval::Model) -> Result<Self> {
        Ok(Approval {
            id: m.id.into(),
            session_id: m.session_id.into(),
            execution_id: m.execution_id.into(),
            kind: m.kind,
            tool_call_id: m.tool_call_id,
            request: m.request,
            status: ApprovalStatus::parse(&m.status)
                .ok_or_else(|| corrupt("approval.status", &m.status))?,
            decision: m.decision,
            decided_by: m.decided_by.map(UserId::from),
            created_at: m.created_at,
            decided_at: m.decided_at,
        })
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct NewApproval {
    pub id: ApprovalId,
    pub session_id: SessionId,
    pub execution_id: RunId,
    pub kind: String,
    pub tool_call_id: Option<String>,
    pub request: Value,
}

pub async fn create(
    db: &impl ConnectionTrait,
    scope: &TenantScope,
    new: NewApproval,
) -> Result<Approval> {
    approval::ActiveModel {
        id: Set(new.id.0),
        tenant_id: Set(scope.uuid()),
        session_id: Set(new.session_id.0),
        execution_id: Set(new.execution_id.0),
        kind: Set(new.kind),
        tool_call_id: Set(new.tool_call_id),
        request: Set(sanitize_json(new.request)),
        status: Set(ApprovalStatus::Pending.as_str().to_string()),
        decision: Set(None),
        decided_by: Set(None),
        created_at: Set(now()),
        decided_at: Set(None),
    }
    .insert(db)
    .await?
    .try_into()
}

pub async fn get(
    db: &impl ConnectionTrait,
    scope: &TenantScope,
    id: ApprovalId,
) -> Result<Option<Approval>> {
    approval::Entity::find_by_id(id.0)
        .filter(crate::tenant_of_row(
            db.get_database_backend(),
            approval::Column::TenantId,
            scope,
        ))
        .one(db)
        .await?
        .map(Approval::try_from)
        .transpose()
}

/// Record a decision if the approval is still pending. Returns false when it was already
/// decided (the first decision wins).
/// A decision on an approval or question, as the run records it (with the run's next step,
/// see `RunRecorder` in agentry-actors).
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct ApprovalDecision {
    pub id: ApprovalId,
    pub status: ApprovalStatus,
    pub decision: Option<Value>,
    pub decided_by: Option<UserId>,
}

/// [`decide`] for an [`ApprovalDecision`].
pub async fn record(
    db: &impl ConnectionTrait,
    scope: &TenantScope,
    d: &ApprovalDecision,
) -> Result<bool> {
    decide(db, scope, d.id, d.status, d.decision.clone(), d.decided_by).await
}

pub async fn decide(
    db: &impl ConnectionTrait,
    scope: &TenantScope,
    id: ApprovalId,
    status: ApprovalStatus,
    decision: Option<Value>,
    decided_by: Option<UserId>,
) -> Result<bool> {
    let res = approval::Entity::update_many()
        .col_expr(approval::Column::Status, Expr::value(status.as_str()))
        .col_expr(
            approval::Column::Decision,
            Expr::value(decision.map(sanitize_json)),
        )
        .col_expr(
            approval::Column::DecidedBy,
            Expr::value(decided_by.map(|u| u.0)),
        )
        .col_expr(approval::Column::DecidedAt, Expr::value(Some(now())))
        .filter(approval::Column::Id.eq(id.0))
        .filter(crate::tenant_of_row(
            db.get_database_backend(),
            approval::Column::TenantId,
            scope,
        ))
        .filter(approval::Column::Status.eq(ApprovalStatus::Pending.as_str()))
        .exec(db)
        .await?;
    Ok(res.rows_affected > 0)
}

/// Cancel every approval of a run still pending (the run ended): one statement.
pub async fn cancel_pending_of_run(
    db: &impl ConnectionTrait,
    scope: &TenantScope,
    execution_id: RunId,
) -> Result<u64> {
    let res = approval::Entity::update_many()
        .col_expr(
            approval::Column::Status,
            Expr::value(ApprovalStatus::Cancelled.as_str()),
        )
        .col_expr(approval::Column::DecidedAt, Expr::value(Some(now())))
        .filter(approval::Column::ExecutionId.eq(execution_id.0))
        .filter(approval::Column::TenantId.eq(scope.uuid()))
        .filter(approval::Column::Status.eq(ApprovalStatus::Pending.as_str()))
        .exec(db)
        .await?;
    Ok(res.rows_affected)
}

pub async fn list_by_execution(
    db: &impl ConnectionTrait,
    scope: &TenantScope,
    execution_id: RunId,
) -> Result<Vec<Approval>> {
    approval::Entity::find()
        .filter(approval::Column::TenantId.eq(scope.uuid()))
        .filter(approval::Column::ExecutionId.eq(execution_id.0))
        .order_by_asc(approval::Column::CreatedAt)
        .all(db)
        .await?
        .into_iter()
        .map(Approval::try_from)
        .collect()
}

pub async fn list_pending_for_session(
    db: &impl ConnectionTrait,
    scope: &TenantScope,
    session_id: SessionId,
) -> Result<Vec<Approval>> {
    approval::Entity::find()
        .filter(approval::Column::TenantId.eq(scope.uuid()))
        .filter(approval::Column::SessionId.eq(session_id.0))
        .filter(approval::Column::Status.eq(ApprovalStatus::Pending.as_str()))
        .order_by_asc(approval::Column::CreatedAt)
        .all(db)
        .await?
        .into_iter()
        .map(Approval::try_from)
        .collect()
}
