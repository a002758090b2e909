//! Agentry as an MCP server (DESIGN §6, issue 5 item 7), over the [`Engine`]: the same
//! [`ToolServer`] `agentry tool-server` runs over stdio, fed by the tools of the request's
//! caller:
//!
//! - the calling user's built-in tools (the registry the agent loop mounts, in the user's
//!   workspace with the tenant's quota), narrowed by the tenant's RBAC permissions for the
//!   caller's role;
//! - one `ask_<assistant>` tool per assistant of the tenant ([`ask`]): a real chat run through
//!   the engine, its approvals and questions put to the MCP client's user by elicitation, an MCP
//!   cancel cancelling the run;
//! - the caller's own MCP servers' tools, from the tenant's pool, under the names the agent sees
//!   (`<server>__<tool>`), narrowed by the same permissions, and their resources, templates and
//!   prompts ([`reexport`]).
//!
//! Calls go through the same tool-call pipeline as the agent loop's (`agentry_tools::pipeline`):
//! built-in tools that need approval are asked by elicitation, refused when the client cannot
//! ask; their timeout stands still while an elicitation waits; every built-in call that got past
//! its arguments writes an execution and a tool-call audit row ([`audit`]).
//!
//! No HTTP here: the transport (the gateway's `/mcp` adapter, over rmcp's Streamable HTTP
//! service) authenticates each request, puts an [`McpRequest`] naming its caller into the
//! request's extensions, and keeps each MCP session to the tenant user whose `initialize` made
//! it with [`sessions::McpSessions`].

pub mod ask;
pub mod audit;
pub mod reexport;
pub mod sessions;
mod source;

use std::sync::Arc;

use agentry_actors::Engine;
use agentry_actors::tools::PlatformTools;
use agentry_mcp::server::ToolServer;
use agentry_schema::ids::VirtualServerName;
use agentry_store::UserScope;
use agentry_store::tenants::Tenant;
use rmcp::model::Extensions;
use sea_orm::DatabaseConnection;

pub use ask::ask_tool_name;
pub use sessions::{Admission, McpSessions, Owner, SessionDirectory};

/// The MCP session header (Streamable HTTP).
pub const SESSION_HEADER: &str = "mcp-session-id";

const INSTRUCTIONS: &str = "Agentry: your built-in tools (files in your workspace, shell, web, \
system, services, todos, memory, questions), the tools of your own MCP servers (named \
<server>__<tool>), and one ask_<assistant> tool per assistant of your tenant, which runs a full chat with that assistant and returns its answer (pass the returned \
session_id to continue the conversation). Tools marked destructive ask you for approval first. \
Your MCP servers' resources are under agentry://mcp/<server>/<uri>, their prompts named \
<server>__<prompt>.";

/// Who is calling, as the transport authenticated the request: it puts one into the request's
/// extensions before rmcp sees the request, and the server trusts it.
#[derive(Clone)]
pub struct McpRequest {
    /// The caller's tenant as it was when the key was resolved.
    pub tenant: Arc<Tenant>,
    pub user: UserScope,
    /// The tenant's virtual server the request names (`/mcp/{name}`): only its tools are
    /// served; `None` for `/mcp`, which serves every tool the caller may use.
    pub virtual_server: Option<VirtualServerName>,
}

/// Where a transport keeps the HTTP request's own extensions inside rmcp's request context
/// (rmcp-actix-web: `rmcp_actix_web::transport::on_request_extensions`).
pub type RequestExtensions = fn(&Extensions) -> Option<&Extensions>;

/// What the server takes from the transport's configuration.
#[derive(Clone, Copy)]
pub struct Config {
    /// How long an approval or question waits for its user (`hitl.timeout_secs`): part of an
    /// `ask_<assistant>` call's timeout, and of an elicited approval's.
    pub hitl_timeout_secs: u64,
    /// Where the [`McpRequest`] of a request is found.
    pub request_extensions: RequestExtensions,
}

/// The MCP server of every request: one for the process, shared by every transport worker
/// (clone it per worker; the clones share their state).
pub fn tool_server(
    engine: Engine,
    tools: Arc<PlatformTools>,
    db: DatabaseConnection,
    config: Config,
) -> ToolServer {
    let source = source::CallerToolSource::new(engine, tools, db, config);
    ToolServer::with_source("agentry", INSTRUCTIONS, Arc::new(source))
}
