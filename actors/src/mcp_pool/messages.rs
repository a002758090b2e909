//! McpPoolActor's contract. Input: tools for a user, live statuses, configuration changes,
//! user idle. Internal: connection hooks.

use std::sync::Arc;

use actix::Message;
use agentry_mcp::config_file::ConfigDiff;
use agentry_schema::ids::UserId;
use agentry_tools::tool::CompiledTool;

use super::Key;

/// The user's MCP tools for a run. Never fails: servers that are down or slow are reported in
/// `warnings` and left out.
#[derive(Message)]
#[rtype(result = "UserToolsReply")]
pub struct UserTools {
    pub user: UserId,
    /// The run's assistant's `tools` patterns ([`crate::tools::assistant_allows`]): only the
    /// servers they may admit a tool of are connected. `None` admits every server.
    pub patterns: Option<Vec<String>>,
}

#[derive(Clone, Default)]
pub struct UserToolsReply {
    /// Compiled when the server's tools were listed: a run registers them as they are.
    pub tools: Vec<CompiledTool>,
    pub warnings: Vec<String>,
    /// The servers of `tools` (and any other the run may use that was listed once), for what
    /// `/mcp` re-exports besides tools: their resources, templates and prompts. A server that
    /// is reconnecting is here with its last known catalog.
    pub servers: Vec<super::ServerCatalog>,
}

/// Live status of each of the user's servers: `(name, connected|connecting|disconnected|error,
/// message)`. Servers never used have no entry (they are `disconnected`).
#[derive(Message)]
#[rtype(result = "Vec<(String, &'static str, Option<String>)>")]
pub struct ServerStatuses {
    pub user: UserId,
}

/// What this pool (this replica) knows of each of the user's servers it has used: `(name,
/// status, status message, history)` — the last error and its time, since when it is connected,
/// reconnects, call counts. Nothing is connected for this; servers never used have no entry.
#[derive(Message)]
#[rtype(result = "Vec<(String, &'static str, Option<String>, super::ServerReport)>")]
pub struct ServerReports {
    pub user: UserId,
}

/// The tools each of the user's connected servers offers (for the console's server list):
/// `(server, [(tool name, first line of its description)])`, tool names as the model sees them
/// (`<server>__<tool>`). Servers not connected now are left out; nothing is connected for this.
#[derive(Message)]
#[rtype(result = "Vec<(String, Vec<(String, String)>)>")]
pub struct ServerTools {
    pub user: UserId,
}

/// The user's server configuration changed (REST): close the affected connections; the next
/// run connects with the new configuration. `server: None` = all of the user's.
#[derive(Message)]
#[rtype(result = "()")]
pub struct UserConfigChanged {
    pub user: UserId,
    pub server: Option<String>,
}

/// A server of the user was added or changed (REST): connect it now, in the background, so the
/// user's first run finds it connected (or at least its first attempt under way) instead of
/// starting the connect itself. Does nothing for a server runs may not use (disabled, stdio
/// without the tenant's feature, over `max_mcp_servers`) or one already connected with this
/// configuration.
#[derive(Message)]
#[rtype(result = "()")]
pub struct ConnectInBackground {
    pub user: UserId,
    pub server: String,
}

/// The platform's MCP config file changed: close connections to servers it changed or removed.
#[derive(Message)]
#[rtype(result = "()")]
pub struct FileConfigChanged(pub Arc<ConfigDiff>);

/// The user has no live session left: release their connections (seed property 50).
#[derive(Message)]
#[rtype(result = "()")]
pub struct UserIdle {
    pub user: UserId,
}

/// How many connections are open (for tests and metrics).
#[derive(Message)]
#[rtype(result = "usize")]
pub struct OpenConnections;

#[derive(Message)]
#[rtype(result = "()")]
pub(crate) struct ToolsChanged {
    pub key: Key,
    pub generation: u64,
}

/// The server said its resources or prompts changed.
#[derive(Message)]
#[rtype(result = "()")]
pub(crate) struct CatalogChanged {
    pub key: Key,
    pub generation: u64,
}

#[derive(Message)]
#[rtype(result = "()")]
pub(crate) struct ConnectionLost {
    pub key: Key,
    pub generation: u64,
    pub error: String,
}

/// The tenant's row changed (quotas, features).
#[derive(Message)]
#[rtype(result = "()")]
pub struct TenantUpdated(pub Arc<agentry_store::tenants::Tenant>);

/// The process groups of the user's stdio servers, by server name (operations and tests).
#[derive(Message)]
#[rtype(result = "Vec<(String, i32)>")]
pub struct ProcessGroups {
    pub user: UserId,
}
