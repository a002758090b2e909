//! The tools of a request's caller ([`CallerToolSource`]): what `tools/list` shows and
//! `tools/call` may call, built per request from the [`McpRequest`] the transport put there.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use agentry_actors::tools::{PlatformTools, role_policy};
use agentry_actors::{Engine, ToolPolicy};
use agentry_mcp::server::{CallAudit, CallerTools, Presenter, ToolSource, to_mcp_result};
use agentry_schema::ids::SessionId;
use agentry_store::UserScope;
use agentry_store::assistants;
use agentry_store::tenants::Tenant;
use agentry_tools::pipeline::Retry;
use agentry_tools::tool::{
    CompiledTool, RegistryError, Tool, ToolContext, ToolError, ToolOutput, ToolSpec, WorkspaceInfo,
};
use async_trait::async_trait;
use rmcp::model::{CallToolResponse, CallToolResult, ContentBlock};
use rmcp::service::{RequestContext, RoleServer};
use sea_orm::DatabaseConnection;
use serde_json::json;

use crate::ask::{ASSISTANTS_SERVICE, AskAssistant};
use crate::audit::{AuditKey, McpAudit};
use crate::{Config, McpRequest, RequestExtensions, SESSION_HEADER};

pub(crate) struct CallerToolSource {
    engine: Engine,
    db: DatabaseConnection,
    /// The platform's tools, built once at start and shared with the engine.
    tools: Arc<PlatformTools>,
    hitl_timeout_secs: u64,
    request_extensions: RequestExtensions,
    /// The session each (tenant, user, MCP session) records its built-in calls under.
    sessions: Arc<Mutex<HashMap<AuditKey, SessionId>>>,
    /// An `ask_<assistant>` tool compiled once (see [`CallerToolSource::compiled_ask`]).
    ask_template: Mutex<Option<CompiledTool>>,
}

impl CallerToolSource {
    pub(crate) fn new(
        engine: Engine,
        tools: Arc<PlatformTools>,
        db: DatabaseConnection,
        config: Config,
    ) -> Self {
        CallerToolSource {
            engine,
            db,
            tools,
            hitl_timeout_secs: config.hitl_timeout_secs,
            request_extensions: config.request_extensions,
            sessions: Arc::default(),
            ask_template: Mutex::default(),
        }
    }

    /// An `ask_<assistant>` tool with its schema compiled: every one has the same arguments,
    /// so the schema is compiled once, not per assistant per request.
    fn compiled_ask(&self, ask: Arc<dyn Tool>) -> Result<CompiledTool, RegistryError> {
        let mut template = self.ask_template.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(compiled) = template
            .as_ref()
            .and_then(|t| CompiledTool::reusing(ask.clone(), t))
        {
            return Ok(compiled);
        }
        let compiled = CompiledTool::compile(ask)?;
        *template = Some(compiled.clone());
        Ok(compiled)
    }
}

impl CallerToolSource {
    /// Re-export the caller's own MCP servers (theirs and the platform's, as their runs see
    /// them): each tool under the name the agent sees (`<server>__<tool>`), kept only when the
    /// caller's role may use it, and never over a built-in or `ask_<assistant>` name. Servers
    /// that are down are left out, as in a run (the pool reports them as warnings).
    ///
    /// Returns the servers whose resources and prompts the caller may see
    /// ([`crate::reexport::visible`]).
    async fn add_user_servers(
        &self,
        tenant: &Tenant,
        user: UserScope,
        allowed: &(dyn Fn(&ToolSpec) -> bool + Sync),
        registry: &mut agentry_tools::tool::ToolRegistry,
    ) -> Vec<agentry_actors::mcp_pool::ServerCatalog> {
        let pool = match self.engine.mcp_pool(tenant).await {
            Ok(Some(pool)) => pool,
            Ok(None) => return Vec::new(),
            Err(e) => {
                tracing::warn!(error = %e, "the MCP pool is not available; /mcp serves no MCP server tools");
                return Vec::new();
            }
        };
        let reply = match pool
            .send(agentry_actors::mcp_pool::UserTools {
                user: user.user_id,
                // `/mcp` has no assistant: every server of the caller may be used.
                patterns: None,
            })
            .await
        {
            Ok(reply) => reply,
            Err(e) => {
                tracing::warn!(error = %e, "the MCP pool did not answer; /mcp serves no MCP server tools");
                return Vec::new();
            }
        };
        for warning in &reply.warnings {
            tracing::debug!(%warning, "an MCP server of the caller is left out of /mcp");
        }
        let specs: Vec<&ToolSpec> = reply.tools.iter().map(|t| t.spec()).collect();
        let servers: Vec<_> = reply
            .servers
            .iter()
            .filter(|s| crate::reexport::visible(&s.server, &specs, allowed))
            .cloned()
            .collect();
        for tool in reply.tools {
            let name = tool.spec().name.clone();
            if !allowed(tool.spec()) {
                continue;
            }
            if registry.contains(&name) {
                tracing::warn!(tool = %name, "an MCP server tool clashes with a built-in tool; left out of /mcp");
                continue;
            }
            if let Err(e) = registry.register_compiled(tool) {
                tracing::warn!(tool = %name, error = %e, "an MCP server tool is left out of /mcp");
            }
        }
        servers
    }
}

fn internal(message: impl Into<String>) -> rmcp::ErrorData {
    rmcp::ErrorData::internal_error(message.into(), None)
}

#[async_trait]
impl ToolSource for CallerToolSource {
    /// The caller's servers' resources and prompts (and completions for them).
    fn serves_content(&self) -> bool {
        true
    }

    async fn tools_for(
        &self,
        context: &RequestContext<RoleServer>,
    ) -> Result<CallerTools, rmcp::ErrorData> {
        let caller = (self.request_extensions)(&context.extensions)
            .and_then(|e| e.get::<McpRequest>())
            .cloned()
            // The transport puts the caller on every request before rmcp sees it.
            .ok_or_else(|| internal("the request reached the MCP server unauthenticated"))?;
        // rmcp hands the handler the request's HTTP parts; `None` on a sessionless request.
        let mcp_session = context
            .extensions
            .get::<http::request::Parts>()
            .and_then(|p| p.headers.get(SESSION_HEADER))
            .and_then(|v| v.to_str().ok())
            .map(str::to_string);
        let tenant = caller.tenant.clone();
        let user = caller.user;
        let policy = role_policy(&tenant, user.role, user.custom_role);
        // `/mcp/{name}`: only the virtual server's tools, of those the role may use.
        let narrowed = match &caller.virtual_server {
            None => None,
            Some(name) => Some(
                agentry_domain::virtual_servers::tools_of(&tenant, name).ok_or_else(|| {
                    rmcp::ErrorData::invalid_request(
                        format!("the MCP virtual server {name:?} no longer exists"),
                        None,
                    )
                })?,
            ),
        };
        let allowed = |spec: &ToolSpec| {
            policy.check(spec).is_ok()
                && narrowed
                    .as_ref()
                    .is_none_or(|p| p.allows(&spec.service, &spec.service_tool))
        };
        let mut registry = self.tools.builtin_tools().clone();
        registry.retain(|spec| allowed(spec));
        let assistants = assistants::list(&self.db, &user.tenant)
            .await
            .map_err(|e| internal(format!("loading the tenant's assistants: {e}")))?;
        for a in assistants {
            let effective = agentry_actors::profiles::effective(&self.db, &user.tenant, &a)
                .await
                .map_err(|e| internal(format!("loading an assistant's profile: {e}")))?;
            let ask = AskAssistant::new(
                self.engine.clone(),
                tenant.clone(),
                user,
                a.id.clone(),
                &a.spec.name,
                &a.spec.description,
                Duration::from_secs(
                    u64::from(effective.timeout_secs) + 4 * self.hitl_timeout_secs + 60,
                ),
            );
            let name = ask.spec.name.clone();
            if !allowed(&ask.spec) {
                continue;
            }
            let ask = match self.compiled_ask(Arc::new(ask)) {
                Ok(ask) => ask,
                Err(e) => {
                    tracing::error!(tool = %name, error = %e, "assistant left out of /mcp");
                    continue;
                }
            };
            if let Err(e) = registry.register_compiled(ask) {
                // Two ids that sanitize to the same name: the first keeps it.
                tracing::warn!(tool = %name, error = %e, "assistant left out of /mcp");
            }
        }
        let servers = self
            .add_user_servers(&tenant, user, &allowed, &mut registry)
            .await;
        let workspace = WorkspaceInfo {
            root: self.engine.deps().workspace_root(&tenant, user.user_id),
            quota_bytes: tenant.quotas.workspace_quota_bytes,
            sandbox: (&tenant.policy().sandbox).into(),
        };
        if let Err(e) = std::fs::create_dir_all(&workspace.root) {
            return Err(internal(format!("preparing the user's workspace: {e}")));
        }
        let mut context = ToolContext::standalone(workspace);
        context.tenant_id = tenant.id;
        context.user_id = user.user_id;
        context.role = user.role;
        context.custom_role = user.custom_role;
        // `/mcp` has no assistant: the memory tools see the user's and the tenant's memories.
        let presenter: Presenter = Arc::new(present);
        let audit: Arc<dyn CallAudit> = Arc::new(McpAudit {
            engine: self.engine.clone(),
            db: self.db.clone(),
            tenant: tenant.clone(),
            user,
            key: (tenant.id, user.user_id, mcp_session),
            sessions: self.sessions.clone(),
        });
        Ok(CallerTools {
            registry,
            context,
            enforce_approval: true,
            approval_timeout_secs: self.hitl_timeout_secs,
            audit: Some(audit.clone()),
            owner: format!("{}/{}", tenant.id, user.user_id),
            presenter: Some(presenter),
            policy: Arc::new(policy),
            retry: Retry::default(),
            content: Some(Arc::new(crate::reexport::ReExported {
                servers,
                audit: Some(audit),
            })),
        })
    }
}

/// An `ask_<assistant>` result shows the assistant's answer as text, with the ids to continue
/// in `structuredContent`; every other tool's result is the standard one.
fn present(spec: &ToolSpec, result: Result<ToolOutput, ToolError>) -> CallToolResponse {
    match result {
        Ok(out) if spec.service == ASSISTANTS_SERVICE => {
            let text = out.content["text"].as_str().unwrap_or_default().to_string();
            let structured = json!({
                "session_id": out.content["session_id"],
                "run_id": out.content["run_id"],
                "status": out.content["status"],
            });
            let mut r = if out.is_error {
                CallToolResult::error(vec![ContentBlock::text(text)])
            } else {
                CallToolResult::success(vec![ContentBlock::text(text)])
            };
            r.structured_content = Some(structured);
            r.into()
        }
        other => to_mcp_result(other),
    }
}
