//! The MCP client: connections to MCP servers over stdio and Streamable HTTP, on rmcp.
//!
//! - [`config`]: [`McpServerConfig`], the shape shared by the YAML file, the REST API and the
//!   store, with validation.
//! - [`connection`]: [`McpConnection`] — connect, status, ping, list tools, call, close.
//! - [`adapter`]: [`McpTool`], one remote tool as a [`Tool`](agentry_tools::tool::Tool) named
//!   `<server>__<tool>`, and [`tools_for`].
//! - [`stdio`]: the child-process environment allow-list and process-group handling.
//!
//! The per-tenant pool (keyed by user and server, health checks, reconnect with backoff, idle
//! close) lives in the actors crate and drives this API. See `docs/mcp.md`.

pub mod adapter;
pub mod config;
pub mod connection;
pub mod error;
mod handler;
mod http;
pub mod oauth;
pub mod stdio;
mod task_support;

pub use adapter::{McpTool, agent_tool_name, tools_for, wrap_tools};
pub use config::{
    ConfigError, ConfigIssue, HttpAuth, HttpConfig, McpServerConfig, McpTransportConfig,
    OAuthConfig, OAuthGrant, StdioConfig,
};
pub use connection::{
    Catalog, ClientHooks, ConnectionStatus, LEGACY_PROTOCOL_VERSION, MAX_RESOURCE_BYTES,
    McpConnection, PREFERRED_PROTOCOL_VERSIONS, RemoteTool, ServerDetails, ToolHints,
};
pub use error::McpError;
pub use handler::{ELICITATION_QUESTION_TYPE, ELICITATION_TIMEOUT_SECS};
pub use stdio::StdioLaunch;
