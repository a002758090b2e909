//! What the engine's operations can fail with; each maps to one error code.

use std::time::Duration;

use agentry_schema::error::ErrorCode;
use agentry_store::StoreError;
use serde_json::{Value, json};

#[derive(Debug, Clone, thiserror::Error)]
pub enum EngineError {
    #[error("{0} not found")]
    NotFound(String),
    #[error(
        "a run is already in progress in this session; wait for its `done` event, cancel it, or send the message with enqueue"
    )]
    RunInProgress,
    #[error("this session has no active run")]
    NoActiveRun,
    #[error("approval {0} is not pending (it was already decided, timed out, or its run ended)")]
    ApprovalNotPending(String),
    #[error("{0}")]
    BadRequest(String),
    /// A field of the request is invalid: the same `validation_error` (422) on every transport.
    #[error("{message}")]
    Validation {
        field: &'static str,
        message: String,
    },
    #[error("{0}")]
    Conflict(String),
    #[error("{0}")]
    Forbidden(String),
    #[error("quota {quota} exceeded (limit {limit}); retry after {} s", retry_after.as_secs())]
    Quota {
        quota: &'static str,
        limit: u64,
        retry_after: Duration,
    },
    #[error("the session is shutting down")]
    Unavailable,
    /// The database cannot be reached (the driver's text stays in the log).
    #[error("the database is unreachable; nothing was changed, retry shortly")]
    DatabaseUnavailable,
    /// The process is stopping (SIGTERM): no new runs; the client retries elsewhere or later.
    #[error("the server is shutting down; retry in a moment")]
    ShuttingDown,
    /// Cluster mode: another replica runs this session now (what reaches a client only when a
    /// command could not be forwarded there).
    #[error(
        "replica {owner} runs this session now: send the request to that replica, or retry after {} s, when its run has ended or its lease has expired",
        retry_after.as_secs().max(1)
    )]
    SessionOwnedElsewhere {
        owner: String,
        retry_after: Duration,
    },
    /// Cluster mode: Redis does not answer, so no run can be given an owner.
    #[error(
        "the replicas' coordination (Redis) does not answer, so no new run can start; runs in flight go on; retry shortly"
    )]
    CoordinationUnavailable,
    /// Cluster mode: the replica that runs this session did not answer a forwarded command in
    /// time (or is gone: then another replica takes the session over within seconds).
    #[error(
        "replica {owner}, which runs this session, did not answer; retry after {} s",
        retry_after.as_secs().max(1)
    )]
    OwnerUnreachable {
        owner: String,
        retry_after: Duration,
    },
    /// Cluster mode: the replica that ran this session's run stopped, and the run is being
    /// resumed by another one; a command for it can be sent again in a moment.
    #[error(
        "this session's run is moving to another replica (the one running it stopped); retry in a moment"
    )]
    RunResuming,
    /// Cluster mode: the answer of the replica a command was forwarded to, as it gave it.
    #[error("{message}")]
    Remote {
        code: ErrorCode,
        message: String,
        details: Value,
    },
    #[error("internal error: {0}")]
    Internal(String),
}

impl EngineError {
    pub fn code(&self) -> ErrorCode {
        match self {
            EngineError::NotFound(_) => ErrorCode::NotFound,
            EngineError::RunInProgress => ErrorCode::RunInProgress,
            EngineError::NoActiveRun => ErrorCode::NoActiveRun,
            EngineError::ApprovalNotPending(_) => ErrorCode::ApprovalNotPending,
            EngineError::BadRequest(_) => ErrorCode::BadRequest,
            EngineError::Validation { .. } => ErrorCode::ValidationError,
            EngineError::Conflict(_) => ErrorCode::Conflict,
            EngineError::Forbidden(_) => ErrorCode::Forbidden,
            EngineError::Quota { .. } => ErrorCode::QuotaExceeded,
            EngineError::DatabaseUnavailable => ErrorCode::DatabaseUnavailable,
            EngineError::Unavailable | EngineError::ShuttingDown => ErrorCode::ServiceUnavailable,
            EngineError::SessionOwnedElsewhere { .. } => ErrorCode::SessionOwnedElsewhere,
            EngineError::CoordinationUnavailable | EngineError::OwnerUnreachable { .. } => {
                ErrorCode::CoordinationUnavailable
            }
            EngineError::RunResuming => ErrorCode::ServiceUnavailable,
            EngineError::Remote { code, .. } => *code,
            EngineError::Internal(_) => ErrorCode::InternalError,
        }
    }

    /// The `Retry-After` an answer to this error carries, if any.
    pub fn retry_after_secs(&self) -> Option<u64> {
        match self {
            EngineError::OwnerUnreachable { retry_after, .. }
            | EngineError::SessionOwnedElsewhere { retry_after, .. }
            | EngineError::Quota { retry_after, .. } => Some(retry_after.as_secs().max(1)),
            EngineError::RunResuming => Some(1),
            EngineError::CoordinationUnavailable => Some(COORDINATION_RETRY_AFTER_SECS),
            EngineError::Remote { details, .. } => details["retry_after_secs"].as_u64(),
            _ => None,
        }
    }

    pub fn details(&self) -> Value {
        match self {
            EngineError::Quota {
                quota,
                limit,
                retry_after,
            } => json!({"quota": quota, "limit": limit, "retry_after_secs": retry_after.as_secs()}),
            // What REST's `Retry-After` says, for clients on a WebSocket.
            EngineError::DatabaseUnavailable => json!({"retry_after_secs": 5}),
            EngineError::Validation { field, .. } => json!({"field": field}),
            EngineError::SessionOwnedElsewhere { owner, retry_after } => json!({
                "owner_replica": owner,
                "retry_after_secs": retry_after.as_secs().max(1),
            }),
            EngineError::CoordinationUnavailable => {
                json!({"retry_after_secs": COORDINATION_RETRY_AFTER_SECS})
            }
            EngineError::OwnerUnreachable { owner, retry_after } => json!({
                "owner_replica": owner,
                "retry_after_secs": retry_after.as_secs().max(1),
            }),
            EngineError::RunResuming => json!({"retry_after_secs": 1}),
            EngineError::Remote { details, .. } => details.clone(),
            _ => json!({}),
        }
    }
}

/// What `Retry-After` says while Redis does not answer.
pub const COORDINATION_RETRY_AFTER_SECS: u64 = 2;

impl From<agentry_store::coordination::CoordinationError> for EngineError {
    fn from(e: agentry_store::coordination::CoordinationError) -> Self {
        tracing::warn!(error = %e, "the replicas' coordination (Redis) failed");
        EngineError::CoordinationUnavailable
    }
}

impl From<StoreError> for EngineError {
    fn from(e: StoreError) -> Self {
        match e {
            StoreError::NotFound(what) => EngineError::NotFound(what),
            StoreError::Invalid(msg) => EngineError::BadRequest(msg),
            StoreError::Conflict(msg) => EngineError::Conflict(msg),
            StoreError::Fenced { .. } => EngineError::SessionOwnedElsewhere {
                owner: "another replica".into(),
                retry_after: Duration::from_secs(1),
            },
            e if e.is_unavailable() => {
                tracing::warn!(error = %e, "database unreachable");
                EngineError::DatabaseUnavailable
            }
            other => EngineError::Internal(other.to_string()),
        }
    }
}

impl From<actix::MailboxError> for EngineError {
    fn from(_: actix::MailboxError) -> Self {
        EngineError::Unavailable
    }
}
