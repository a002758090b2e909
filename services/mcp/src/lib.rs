//! agentry-mcp: everything the agent can call.
//!
//! - [`tool`]: the [`Tool`](tool::Tool) trait every tool implements (built-in or MCP), the context
//!   a call runs in, and the structured errors a call can end with.
//! - [`client`]: the MCP client (stdio and Streamable HTTP servers, on rmcp) and the adapter that
//!   turns a server's tools into [`Tool`](tool::Tool)s named `<server>__<tool>`.
//! - [`builtin`]: the built-in tool services (files, shell, web, system, services, todos,
//!   interaction) and [`builtin_registry`](builtin::builtin_registry) to mount them.
//! - [`pipeline`]: the one tool-call pipeline (policy → schema → approval → the call on a
//!   paused clock, with retries → audit → events) that the agent loop and `/mcp` share.
//! - [`rbac`]: role permissions (`service:tool`, `service:*`, `*:*`) the loop checks per call.
//! - [`server`]: a tool registry served as an MCP server (`agentry tool-server <name>`).
//! - [`config_file`]: the MCP config file (YAML or JSON), its per-server policy, and
//!   [`McpConfigWatcher`](config_file::McpConfigWatcher), which hot-reloads it.
//! - [`secrets`]: [`SecretBox`](secrets::SecretBox), MCP secrets encrypted at rest.
//! - [`stored`]: a server's config as a store row (secrets sealed) and as the REST API shows it.

pub mod builtin;
pub mod client;
pub mod config_file;
pub mod pipeline;
pub mod rbac;
pub mod secrets;
pub mod server;
pub mod stored;
#[cfg(feature = "testing")]
pub mod testing;
pub mod tool;
