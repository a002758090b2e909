//! The domain's one error type: an error code of the one table (`agentry_schema::error`), a
//! message for the user and details (`field`, `parameter`, `quota`, …). Each transport maps it
//! onto its own shape (REST: `{error_code, message, details}` with the table's status).

use agentry_schema::error::ErrorCode;
use agentry_store::StoreError;
use serde_json::Value;

#[derive(Debug, Clone)]
pub struct DomainError {
    pub code: ErrorCode,
    pub message: String,
    pub details: Value,
    /// Seconds, for 429 and 503.
    pub retry_after: Option<u64>,
}

pub type DomainResult<T> = Result<T, DomainError>;

/// Seconds a client is asked to wait while the database is unreachable.
pub const DATABASE_RETRY_AFTER_SECS: u64 = 5;

/// What a client reads while the database is away (never the driver's text).
pub const DATABASE_UNAVAILABLE: &str =
    "the database is unreachable; nothing was changed, retry after the Retry-After seconds";

impl DomainError {
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
            details: Value::Object(Default::default()),
            retry_after: None,
        }
    }

    pub fn with_details(mut self, details: Value) -> Self {
        self.details = details;
        self
    }

    pub fn with_retry_after(mut self, secs: u64) -> Self {
        self.retry_after = Some(secs);
        self
    }

    pub fn not_found(what: impl std::fmt::Display) -> Self {
        Self::new(ErrorCode::NotFound, format!("{what} not found"))
    }

    pub fn validation(field: &str, message: impl Into<String>) -> Self {
        Self::new(ErrorCode::ValidationError, message)
            .with_details(serde_json::json!({ "field": field }))
    }

    pub fn forbidden(message: impl Into<String>) -> Self {
        Self::new(ErrorCode::Forbidden, message)
    }

    pub fn conflict(message: impl Into<String>) -> Self {
        Self::new(ErrorCode::Conflict, message)
    }

    /// A query parameter that is missing, malformed or out of range.
    pub fn invalid_query(parameter: &str, message: impl Into<String>) -> Self {
        Self::new(ErrorCode::InvalidQuery, message)
            .with_details(serde_json::json!({ "parameter": parameter }))
    }

    /// A tenant quota is exhausted.
    pub fn quota_exceeded(
        quota: &str,
        limit: u64,
        message: impl Into<String>,
        retry_after: u64,
    ) -> Self {
        Self::new(ErrorCode::QuotaExceeded, message)
            .with_details(serde_json::json!({ "quota": quota, "limit": limit }))
            .with_retry_after(retry_after)
    }

    pub fn internal(context: &str, err: impl std::fmt::Display) -> Self {
        tracing::error!(error = %err, "{context}");
        Self::new(
            ErrorCode::InternalError,
            "internal error; the server logged the cause (quote the X-Request-Id when reporting it)",
        )
    }

    /// The database cannot be reached: `database_unavailable` with a retry delay.
    pub fn database_unavailable() -> Self {
        Self::new(ErrorCode::DatabaseUnavailable, DATABASE_UNAVAILABLE)
            .with_retry_after(DATABASE_RETRY_AFTER_SECS)
    }
}

impl std::fmt::Display for DomainError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.code, self.message)
    }
}

impl std::error::Error for DomainError {}

impl From<StoreError> for DomainError {
    fn from(e: StoreError) -> Self {
        match e {
            StoreError::NotFound(what) => DomainError::not_found(what),
            StoreError::Conflict(msg) => DomainError::new(ErrorCode::Conflict, msg),
            StoreError::Invalid(msg) => DomainError::new(ErrorCode::ValidationError, msg),
            e if e.is_unavailable() => {
                tracing::warn!(error = %e, "database unreachable");
                DomainError::database_unavailable()
            }
            other => DomainError::internal("database operation failed", other),
        }
    }
}
