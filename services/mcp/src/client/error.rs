//! [`McpError`]: everything that can go wrong talking to an MCP server, and how each maps to the
//! [`ToolError`] the agent loop sees.

use std::time::Duration;

use agentry_schema::error::ErrorCode;
use rmcp::service::ServiceError;
use serde_json::Value;

use super::config::ConfigError;
use agentry_tools::tool::ToolError;

/// JSON-RPC codes with a meaning for the model.
const INVALID_PARAMS: i32 = -32602;
const METHOD_NOT_FOUND: i32 = -32601;

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum McpError {
    #[error(transparent)]
    BadConfig(#[from] ConfigError),
    #[error("MCP server {server:?}: environment variable {var} is not set ({purpose})")]
    MissingEnv {
        server: String,
        var: String,
        purpose: String,
    },
    #[error("MCP server {server:?}: could not start {command:?}: {reason}")]
    SpawnFailed {
        server: String,
        command: String,
        reason: String,
    },
    #[error("MCP server {server:?}: no connection within {after:?}")]
    ConnectTimeout { server: String, after: Duration },
    #[error("MCP server {server:?}: handshake failed: {reason}")]
    HandshakeFailed { server: String, reason: String },
    #[error("MCP server {server:?}: connection closed: {reason}")]
    TransportClosed { server: String, reason: String },
    #[error("MCP server {server:?} answered error {code}: {message}")]
    Server {
        server: String,
        code: i32,
        message: String,
        data: Option<Value>,
    },
    #[error("MCP server {server:?}: {reason}")]
    Protocol { server: String, reason: String },
    #[error("MCP server {server:?}: no answer within {after:?}")]
    Timeout { server: String, after: Duration },
    #[error("cancelled")]
    Cancelled,
    #[error("MCP server {server:?} is disabled in its config")]
    Disabled { server: String },
    #[error("invalid arguments: {0}")]
    InvalidArguments(String),
    /// The server wants an OAuth token this client does not have (or no longer has): a person
    /// must sign in (see `client::oauth`). Connecting again will not help until they do.
    #[error("MCP server {server:?} needs you to sign in (OAuth): {reason}")]
    AuthorizationRequired {
        server: String,
        reason: String,
        /// The server's `WWW-Authenticate`, when it sent one.
        challenge: Option<String>,
    },
    /// The token is good but lacks a scope the server asked for (HTTP 403 `insufficient_scope`):
    /// signing in again with that scope lets the call through.
    #[error("MCP server {server:?} needs more permissions than the sign-in granted{}: sign in again to grant them", scope_label(.scope))]
    InsufficientScope {
        server: String,
        scope: Option<String>,
        challenge: String,
    },
    /// An OAuth step failed (discovery, registration, token exchange).
    #[error("MCP server {server:?}: OAuth failed: {reason}")]
    OAuth { server: String, reason: String },
}

fn scope_label(scope: &Option<String>) -> String {
    match scope {
        Some(s) => format!(" (it asks for scope {s:?})"),
        None => String::new(),
    }
}

impl McpError {
    /// The server can't be reached right now (as opposed to: it answered and said no). A pool
    /// reconnects on these.
    pub fn is_transport(&self) -> bool {
        matches!(
            self,
            McpError::SpawnFailed { .. }
                | McpError::ConnectTimeout { .. }
                | McpError::HandshakeFailed { .. }
                | McpError::TransportClosed { .. }
        )
    }

    /// Worth trying again later unchanged.
    pub fn is_retryable(&self) -> bool {
        self.is_transport() || matches!(self, McpError::Timeout { .. })
    }

    pub fn code(&self) -> ErrorCode {
        match self {
            McpError::BadConfig(_) | McpError::MissingEnv { .. } => ErrorCode::ValidationError,
            McpError::Timeout { .. } | McpError::ConnectTimeout { .. } => ErrorCode::Timeout,
            _ => ErrorCode::McpError,
        }
    }

    /// The server's 401 or 403 challenge, when this error carries one.
    pub fn auth_challenge(&self) -> Option<&str> {
        match self {
            McpError::AuthorizationRequired { challenge, .. } => challenge.as_deref(),
            McpError::InsufficientScope { challenge, .. } => Some(challenge),
            _ => None,
        }
    }

    /// A 401 or 403 from the server somewhere in `e`'s causes, as the matching error.
    pub(crate) fn from_auth_chain(
        server: &str,
        e: &(dyn std::error::Error + 'static),
    ) -> Option<Self> {
        use rmcp::transport::streamable_http_client::{AuthRequiredError, InsufficientScopeError};
        let mut cause: Option<&(dyn std::error::Error + 'static)> = Some(e);
        while let Some(c) = cause {
            if let Some(a) = c.downcast_ref::<AuthRequiredError>() {
                return Some(McpError::AuthorizationRequired {
                    server: server.to_string(),
                    reason: "the server refused the request without a valid token (HTTP 401)"
                        .into(),
                    challenge: Some(a.www_authenticate_header.clone()),
                });
            }
            if let Some(i) = c.downcast_ref::<InsufficientScopeError>() {
                return Some(McpError::InsufficientScope {
                    server: server.to_string(),
                    scope: i
                        .required_scope
                        .clone()
                        .or_else(|| super::oauth::challenged_scope(&i.www_authenticate_header)),
                    challenge: i.www_authenticate_header.clone(),
                });
            }
            if let Some(rmcp::transport::streamable_http_client::StreamableHttpError::<
                reqwest::Error,
            >::Auth(a)) = c.downcast_ref()
            {
                return Some(match a {
                    rmcp::transport::auth::AuthError::AuthorizationRequired => {
                        McpError::AuthorizationRequired {
                            server: server.to_string(),
                            reason: "the token expired and could not be renewed".into(),
                            challenge: None,
                        }
                    }
                    other => McpError::OAuth {
                        server: server.to_string(),
                        reason: format!(
                            "getting a token: {}",
                            super::connection::plain_error_chain(other)
                        ),
                    },
                });
            }
            cause = c.source();
        }
        None
    }

    /// Wrap an rmcp error from a request to `server`.
    pub(crate) fn from_service(server: &str, e: ServiceError) -> Self {
        if let ServiceError::TransportSend(t) = &e
            && let Some(auth) = Self::from_auth_chain(server, t.error.as_ref())
        {
            return auth;
        }
        let server = server.to_string();
        match e {
            ServiceError::McpError(data) => McpError::Server {
                server,
                code: data.code.0,
                message: data.message.to_string(),
                data: data.data,
            },
            ServiceError::TransportSend(e) => McpError::TransportClosed {
                server,
                reason: super::connection::plain_error_chain(e.error.as_ref()),
            },
            ServiceError::TransportClosed => McpError::TransportClosed {
                server,
                reason: "the transport is closed".into(),
            },
            ServiceError::Cancelled { .. } => McpError::Cancelled,
            ServiceError::Timeout { timeout } => McpError::Timeout {
                server,
                after: timeout,
            },
            other => McpError::Protocol {
                server,
                reason: plain_words(&other.to_string()),
            },
        }
    }
}

/// `text` without the Rust type names rmcp's errors carry (`Transport [<type>] error: …`,
/// `Client error: …`): what is left is the cause in words.
pub(crate) fn plain_words(text: &str) -> String {
    let mut out = text.to_string();
    // `Transport [agentry_mcp::…::Observed<rmcp::…>] error: ` → ``
    while let Some(start) = out.find("Transport [") {
        let rest = &out[start + "Transport [".len()..];
        let mut depth = 1usize;
        let mut end = None;
        for (i, c) in rest.char_indices() {
            match c {
                '[' => depth += 1,
                ']' => {
                    depth -= 1;
                    if depth == 0 {
                        end = Some(i);
                        break;
                    }
                }
                _ => {}
            }
        }
        let Some(end) = end else { break };
        let after = &rest[end + 1..];
        let after = after.strip_prefix(" error: ").unwrap_or(after);
        out = format!("{}{}", &out[..start], after);
    }
    for prefix in ["Client error: ", "Send message error "] {
        out = out.replace(prefix, "");
    }
    // Any other `a::b::C<…>` path left in the text.
    out.split(' ')
        .map(|w| {
            if w.contains("::") && w.chars().next().is_some_and(|c| c.is_ascii_lowercase()) {
                "(internal)"
            } else {
                w
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

impl From<McpError> for ToolError {
    fn from(e: McpError) -> Self {
        match e {
            McpError::Cancelled => ToolError::Cancelled,
            McpError::Timeout { after, .. } => ToolError::Timeout(after),
            McpError::Server {
                code: INVALID_PARAMS,
                ref message,
                ref data,
                ..
            } => ToolError::InvalidArguments {
                message: message.clone(),
                details: data.clone().unwrap_or(Value::Null),
            },
            McpError::Server {
                code: METHOD_NOT_FOUND,
                ..
            } => ToolError::NotFound(e.to_string()),
            McpError::Server { .. } | McpError::Protocol { .. } => ToolError::Failed {
                message: e.to_string(),
                retryable: false,
            },
            McpError::InvalidArguments(m) => ToolError::invalid(m),
            McpError::AuthorizationRequired { .. }
            | McpError::InsufficientScope { .. }
            | McpError::OAuth { .. } => ToolError::Unavailable(e.to_string()),
            McpError::BadConfig(_)
            | McpError::Disabled { .. }
            | McpError::MissingEnv { .. }
            | McpError::SpawnFailed { .. }
            | McpError::ConnectTimeout { .. }
            | McpError::HandshakeFailed { .. }
            | McpError::TransportClosed { .. } => ToolError::Unavailable(e.to_string()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_carry_no_rust_type_names() {
        let raw = "Send message error Transport [agentry_mcp::client::connection::Observed<rmcp::transport::streamable_http_client::StreamableHttpClientTransport<agentry_mcp::client::http::SessionAwareClient>>] error: Client error: error sending request, when send initialize request";
        let plain = plain_words(raw);
        assert!(!plain.contains("::"), "{plain}");
        assert!(!plain.contains("Transport ["), "{plain}");
        assert!(plain.contains("error sending request"), "{plain}");
        assert_eq!(
            plain_words("the server closed the connection"),
            "the server closed the connection"
        );
    }

    #[test]
    fn transport_problems_are_unavailable_and_retryable_for_the_loop() {
        let e = McpError::TransportClosed {
            server: "s".into(),
            reason: "eof".into(),
        };
        assert!(e.is_transport());
        let t: ToolError = e.into();
        assert!(matches!(t, ToolError::Unavailable(ref m) if m.contains("eof")));
        assert!(t.is_retryable());
        assert_eq!(t.code(), ErrorCode::McpError);
    }

    #[test]
    fn server_errors_map_by_json_rpc_code() {
        let e = |code| McpError::Server {
            server: "s".into(),
            code,
            message: "bad x".into(),
            data: Some(serde_json::json!({"x": 1})),
        };
        assert!(matches!(
            ToolError::from(e(-32602)),
            ToolError::InvalidArguments { ref details, .. } if details["x"] == 1
        ));
        assert!(matches!(ToolError::from(e(-32601)), ToolError::NotFound(_)));
        let other = ToolError::from(e(-32000));
        assert!(matches!(
            other,
            ToolError::Failed {
                retryable: false,
                ..
            }
        ));
        assert!(other.to_string().contains("-32000"));
        assert_eq!(
            ToolError::from(McpError::Timeout {
                server: "s".into(),
                after: Duration::from_secs(3)
            }),
            ToolError::Timeout(Duration::from_secs(3))
        );
        assert_eq!(ToolError::from(McpError::Cancelled), ToolError::Cancelled);
    }
}
