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
            EngineError::Internal(_) => ErrorCode::InternalError,
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
            _ => json!({}),
        }
    }
}

impl From<StoreError> for EngineError {
    fn from(e: StoreError) -> Self {
        match e {
            StoreError::NotFound(what) => EngineError::NotFound(what),
            StoreError::Invalid(msg) => EngineError::BadRequest(msg),
            StoreError::Conflict(msg) => EngineError::Conflict(msg),
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
