//! agentry-mcp: MCP, both ways.
//!
//! - [`client`]: the MCP client (stdio and Streamable HTTP servers, on rmcp) and the adapter that
//!   turns a server's tools into [`Tool`](agentry_tools::tool::Tool)s named `<server>__<tool>`.
//! - [`server`]: a tool registry served as an MCP server (`agentry tool-server <name>`, and
//!   `/mcp`, whose tools `agentry-mcp-server` picks per request), calling through the one tool-call pipeline
//!   ([`agentry_tools::pipeline`]).
//! - [`config_file`]: the MCP config file (YAML or JSON), its per-server policy, and
//!   [`McpConfigWatcher`](config_file::McpConfigWatcher), which hot-reloads it.
//! - [`stored`]: a server's config as a store row (secrets sealed with
//!   [`agentry_sealing::SecretBox`]) and as the REST API shows it.
//!
//! The tool core (the `Tool` trait, the registry, the pipeline, RBAC) is `agentry-tools`; the
//! built-in tools are `agentry-builtin`.

pub mod client;
pub mod config_file;
mod config_secrets;
pub mod server;
pub mod stored;
#[cfg(feature = "testing")]
pub mod testing;
