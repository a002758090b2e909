//! The one table of error codes (CONVENTIONS §8) and the one wire shape for errors.
//!
//! Every crate's error type maps into an [`ErrorCode`]; the gateway turns the code into an HTTP
//! status with [`ErrorCode::http_status`]. The body is always [`ErrorResponse`].

use serde::{Deserialize, Serialize};
use serde_json::Value;

macro_rules! error_codes {
    ($( $(#[$doc:meta])* $variant:ident = ($name:literal, $status:literal) ),+ $(,)?) => {
        /// Every error a client can see, with its snake_case name and HTTP status.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
        #[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
        #[serde(rename_all = "snake_case")]
        pub enum ErrorCode {
            $( $(#[$doc])* $variant ),+
        }

        impl ErrorCode {
            pub const ALL: &'static [ErrorCode] = &[$(ErrorCode::$variant),+];

            pub fn as_str(self) -> &'static str {
                match self { $(ErrorCode::$variant => $name),+ }
            }

            pub fn http_status(self) -> u16 {
                match self { $(ErrorCode::$variant => $status),+ }
            }

            pub fn from_name(name: &str) -> Option<ErrorCode> {
                match name { $($name => Some(ErrorCode::$variant),)+ _ => None }
            }
        }
    };
}

error_codes! {
    /// The request is malformed in a way no more specific code covers.
    BadRequest = ("bad_request", 400),
    /// The body or frame is not valid JSON.
    InvalidJson = ("invalid_json", 400),
    /// A WebSocket frame lacks `type`/`payload` or has an unknown type.
    InvalidFrame = ("invalid_frame", 400),
    /// A query string parameter is invalid.
    InvalidQuery = ("invalid_query", 400),
    /// No API key, or a key that is unknown, expired or revoked.
    Unauthorized = ("unauthorized", 401),
    /// The key is valid but may not do this.
    Forbidden = ("forbidden", 403),
    /// The tenant is suspended.
    TenantSuspended = ("tenant_suspended", 403),
    /// A tool call was refused by the tool permissions (RBAC).
    PermissionDenied = ("permission_denied", 403),
    /// The resource does not exist, or belongs to someone else.
    NotFound = ("not_found", 404),
    /// `POST /sessions/{id}/cancel` with no active run.
    NoActiveRun = ("no_active_run", 404),
    /// The route does not exist.
    RouteNotFound = ("route_not_found", 404),
    /// `POST /v1/chat/completions`: `model` names no assistant of the caller's tenant.
    ModelNotFound = ("model_not_found", 404),
    MethodNotAllowed = ("method_not_allowed", 405),
    /// The `Accept` header rules out every form of the answer (`/mcp` needs JSON and SSE).
    NotAcceptable = ("not_acceptable", 406),
    /// The resource already exists (a duplicate name, say).
    Conflict = ("conflict", 409),
    /// A chat message arrived while a run is active and the client did not ask to enqueue it.
    RunInProgress = ("run_in_progress", 409),
    /// The approval was already decided or timed out.
    ApprovalNotPending = ("approval_not_pending", 409),
    /// Cluster mode: another replica owns the session's live run (`details.owner_replica`);
    /// send the request to that replica, or retry after `Retry-After`.
    SessionOwnedElsewhere = ("session_owned_elsewhere", 409),
    /// `POST /v1/chat/completions`: the run wanted an approval (or an answer) that an OpenAI
    /// client cannot give; the run was ended and `details.tool` names the tool.
    ApprovalRequired = ("approval_required", 409),
    /// A run's assistant has no model connection and the tenant may not fall back on the
    /// platform's model (the platform admin turned that off): pick one of the tenant's model
    /// connections for the assistant.
    ModelNotConfigured = ("model_not_configured", 409),
    PayloadTooLarge = ("payload_too_large", 413),
    UnsupportedMediaType = ("unsupported_media_type", 415),
    /// The body is well-formed JSON but a field is missing or invalid.
    ValidationError = ("validation_error", 422),
    /// A run made more model calls than its assistant's `recursion_limit` allows.
    RecursionLimit = ("recursion_limit", 422),
    /// A tenant quota is exhausted; `details.quota` names it and `Retry-After` says when to retry.
    QuotaExceeded = ("quota_exceeded", 429),
    /// An unexpected server fault. Never the result of a client's mistake.
    InternalError = ("internal_error", 500),
    /// The language model endpoint failed.
    ModelError = ("model_error", 502),
    /// The model provider refused the credentials (HTTP 401/403): the model connection's API
    /// key is wrong, revoked or lacks the right; nothing else about the endpoint is told.
    ModelAuthFailed = ("model_auth_failed", 502),
    /// A tool failed while running.
    ToolError = ("tool_error", 502),
    /// An MCP server could not be reached or failed.
    McpError = ("mcp_error", 502),
    /// The server is at capacity (connections) or not ready.
    ServiceUnavailable = ("service_unavailable", 503),
    /// The database cannot be reached (connection refused or lost, no pooled connection within
    /// `database.acquire_timeout_secs`); `Retry-After` says when to try again. Nothing changed.
    DatabaseUnavailable = ("database_unavailable", 503),
    /// Cluster mode: Redis (the replicas' coordination) cannot be reached, so no new run can
    /// start; runs in flight go on. `Retry-After` says when to try again.
    CoordinationUnavailable = ("coordination_unavailable", 503),
    /// An operation ran out of time.
    Timeout = ("timeout", 504),
}

impl std::fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The body of every error response: `{error_code, message, details}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ErrorResponse {
    pub error_code: ErrorCode,
    /// What was wrong and what to do about it, for a human.
    pub message: String,
    /// Machine-readable specifics (the field that failed validation, the quota that was hit…).
    #[serde(default)]
    #[cfg_attr(feature = "openapi", schema(value_type = Object))]
    pub details: Value,
}

impl ErrorResponse {
    pub fn new(error_code: ErrorCode, message: impl Into<String>) -> Self {
        Self {
            error_code,
            message: message.into(),
            details: Value::Object(Default::default()),
        }
    }

    pub fn with_details(mut self, details: Value) -> Self {
        self.details = details;
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_unique_and_round_trip() {
        let mut seen = std::collections::HashSet::new();
        for code in ErrorCode::ALL {
            assert!(
                seen.insert(code.as_str()),
                "duplicate name {}",
                code.as_str()
            );
            assert_eq!(ErrorCode::from_name(code.as_str()), Some(*code));
            let json = serde_json::to_string(code).unwrap();
            assert_eq!(json, format!("\"{}\"", code.as_str()));
            assert!((400..600).contains(&code.http_status()));
        }
    }

    #[test]
    fn client_mistakes_are_never_500() {
        for code in ErrorCode::ALL {
            if *code != ErrorCode::InternalError {
                assert_ne!(code.http_status(), 500, "{code}");
            }
        }
    }
}
