//! The gateway's one error type: every failure a handler returns becomes
//! `{error_code, message, details}` with the status from the error-code table.

use actix_web::http::StatusCode;
use actix_web::http::header::{self, HeaderValue};
use actix_web::{HttpResponse, ResponseError};
use agentry_domain::DomainError;
use agentry_schema::error::{ErrorCode, ErrorResponse};
use agentry_store::StoreError;
use serde_json::Value;

#[derive(Debug, Clone)]
pub struct ApiError {
    pub code: ErrorCode,
    pub message: String,
    pub details: Value,
    /// Seconds, for 429 and 503.
    pub retry_after: Option<u64>,
}

impl ApiError {
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

    pub fn body(&self) -> ErrorResponse {
        ErrorResponse::new(self.code, self.message.clone()).with_details(self.details.clone())
    }
}

impl std::fmt::Display for ApiError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.code, self.message)
    }
}

impl ResponseError for ApiError {
    fn status_code(&self) -> StatusCode {
        StatusCode::from_u16(self.code.http_status()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR)
    }

    fn error_response(&self) -> HttpResponse {
        let mut res = HttpResponse::build(self.status_code());
        if let Some(secs) = self.retry_after {
            res.insert_header((header::RETRY_AFTER, HeaderValue::from(secs)));
        }
        res.json(self.body())
    }
}

pub use agentry_domain::error::{DATABASE_RETRY_AFTER_SECS, DATABASE_UNAVAILABLE};

impl ApiError {
    /// The database cannot be reached: 503 `database_unavailable` with `Retry-After`.
    pub fn database_unavailable() -> Self {
        ApiError::new(ErrorCode::DatabaseUnavailable, DATABASE_UNAVAILABLE)
            .with_retry_after(DATABASE_RETRY_AFTER_SECS)
    }
}

/// A domain operation's failure, as every REST answer: the same code, message, details and
/// retry delay.
impl From<DomainError> for ApiError {
    fn from(e: DomainError) -> Self {
        ApiError {
            code: e.code,
            message: e.message,
            details: e.details,
            retry_after: e.retry_after,
        }
    }
}

/// The store's failures mean the same on every transport (`agentry_domain::DomainError`).
impl From<StoreError> for ApiError {
    fn from(e: StoreError) -> Self {
        DomainError::from(e).into()
    }
}

pub type ApiResult<T> = Result<T, ApiError>;

/// The error code that stands for an HTTP status when a response was produced by something
/// other than our handlers (actix's defaults, CORS, the Swagger UI).
fn code_for_status(status: StatusCode) -> ErrorCode {
    match status.as_u16() {
        401 => ErrorCode::Unauthorized,
        403 => ErrorCode::Forbidden,
        404 => ErrorCode::RouteNotFound,
        405 => ErrorCode::MethodNotAllowed,
        409 => ErrorCode::Conflict,
        413 => ErrorCode::PayloadTooLarge,
        415 => ErrorCode::UnsupportedMediaType,
        422 => ErrorCode::ValidationError,
        429 => ErrorCode::QuotaExceeded,
        503 => ErrorCode::ServiceUnavailable,
        504 => ErrorCode::Timeout,
        s if s >= 500 => ErrorCode::InternalError,
        _ => ErrorCode::BadRequest,
    }
}

fn is_json(headers: &header::HeaderMap) -> bool {
    headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/json"))
}

/// Headers of an error response worth keeping when its body is rewritten.
const KEPT_HEADERS: &[header::HeaderName] = &[
    header::ALLOW,
    header::RETRY_AFTER,
    header::WWW_AUTHENTICATE,
    header::VARY,
    header::ACCESS_CONTROL_ALLOW_ORIGIN,
    header::ACCESS_CONTROL_EXPOSE_HEADERS,
];

/// Middleware, the safety net of the one wire shape: an error response (4xx/5xx) that is not
/// already our JSON — actix's own answers, a CORS refusal — gets the `{error_code, message,
/// details}` body, keeping its status and the headers that matter.
pub async fn errors_as_json(
    req: actix_web::dev::ServiceRequest,
    next: actix_web::middleware::Next<impl actix_web::body::MessageBody + 'static>,
) -> Result<actix_web::dev::ServiceResponse<actix_web::body::BoxBody>, actix_web::Error> {
    let res = next.call(req).await?.map_into_boxed_body();
    let status = res.status();
    if !(status.is_client_error() || status.is_server_error()) || is_json(res.headers()) {
        return Ok(res);
    }
    let (req, res) = res.into_parts();
    let kept: Vec<(header::HeaderName, HeaderValue)> = KEPT_HEADERS
        .iter()
        .flat_map(|name| {
            res.headers()
                .get_all(name)
                .map(move |v| (name.clone(), v.clone()))
        })
        .collect();
    let text = actix_web::body::to_bytes_limited(res.into_body(), 2048)
        .await
        .ok()
        .and_then(|b| b.ok())
        .and_then(|b| String::from_utf8(b.to_vec()).ok())
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty());
    let code = code_for_status(status);
    let message = match (code, text) {
        (ErrorCode::RouteNotFound, _) => format!("no route for {} {}", req.method(), req.path()),
        (_, Some(t)) => t,
        (_, None) => status.canonical_reason().unwrap_or("error").to_lowercase(),
    };
    let mut out = HttpResponse::build(status);
    for (name, value) in kept {
        out.append_header((name, value));
    }
    let out = out.json(ErrorResponse::new(code, message));
    Ok(actix_web::dev::ServiceResponse::new(req, out))
}
