//! The tool set of a run as the server composes it: the built-in tools the assistant allows,
//! guarded by the tenant's role permissions, plus the user's MCP tools from the tenant's pool.

use std::sync::Arc;

use agentry_builtin::{BuiltinConfig, BuiltinService, builtin_registry};
use agentry_schema::roles::RoleName;
use agentry_schema::tenancy::Role;
use agentry_store::tenants::Tenant;
use agentry_tools::rbac::{Permissions, RolePermissions};
use agentry_tools::tool::{ToolRegistry, ToolSpec};
use async_trait::async_trait;

use crate::deps::{ToolPolicy, ToolProvider, ToolRequest, ToolSet};
use crate::mcp_pool::UserTools;

/// Whether an assistant's `tools` list admits a tool. `None` admits everything; entries are a
/// tool name (`read_file`, `github__create_issue`), `service:tool`, `service:*` or `*`.
pub fn assistant_allows(patterns: Option<&[String]>, spec: &ToolSpec) -> bool {
    let Some(patterns) = patterns else {
        return true;
    };
    patterns.iter().any(|p| {
        let p = p.trim();
        if p == "*" || p == "*:*" || p == spec.name {
            return true;
        }
        match p.split_once(':') {
            Some((service, tool)) => {
                service == spec.service && (tool == "*" || tool == spec.service_tool)
            }
            None => false,
        }
    })
}

/// One role's permissions as the loop's policy.
pub struct RbacPolicy {
    pub permissions: Permissions,
    /// The role's name, for the denial: `admin`, `member` or a custom role's.
    pub role: String,
}

impl ToolPolicy for RbacPolicy {
    fn check(&self, spec: &ToolSpec) -> Result<(), String> {
        self.permissions
            .check(&self.role, &spec.service, &spec.service_tool)
            .map_err(|d| d.to_string())
    }
}

/// The platform's own tools: the built-in services (and the memory tools when a database is
/// given), registered and their schemas compiled once, when the server starts. Every run and
/// every `/mcp` request clones the registry, which shares the compiled validators. The built-in
/// configuration (`[tools]`) is read at start, so a change to it means a restart, which builds
/// the registry again.
pub struct PlatformTools {
    config: BuiltinConfig,
    registry: ToolRegistry,
}

impl PlatformTools {
    pub fn new(builtin: BuiltinConfig) -> Self {
        let registry = builtin_registry(&builtin, &BuiltinService::ALL);
        PlatformTools {
            config: builtin,
            registry,
        }
    }

    /// Add the memory tools (`remember`, `recall`, `forget`) over `bank`.
    pub fn with_memory(mut self, bank: Arc<agentry_builtin::memory::MemoryBank>) -> Self {
        for t in agentry_builtin::memory::memory_tools(bank) {
            if let Err(e) = self.registry.register(t) {
                tracing::error!(error = %e, "memory tool not registered");
            }
        }
        self
    }

    /// Add the skill tools (`load_skill`, `read_skill_file`), which read skills from the store.
    pub fn with_skills(mut self, db: sea_orm::DatabaseConnection) -> Self {
        for t in agentry_builtin::skills::skill_tools(db) {
            if let Err(e) = self.registry.register(t) {
                tracing::error!(error = %e, "skill tool not registered");
            }
        }
        self
    }

    /// Add the data tools (`list_data_sources`, `describe_data_source`, `run_sql`,
    /// `create_report`) over the tenants' data sources.
    pub fn with_data(mut self, sources: Arc<agentry_builtin::data::DataSources>) -> Self {
        for t in agentry_builtin::data::data_tools(sources) {
            if let Err(e) = self.registry.register(t) {
                tracing::error!(error = %e, "data tool not registered");
            }
        }
        self
    }

    /// The configuration the built-in tools were built from.
    pub fn config(&self) -> &BuiltinConfig {
        &self.config
    }

    /// Every platform tool: what a run starts from before its assistant's `tools` narrow it,
    /// and what `/mcp` serves. Clone it to narrow it; nothing is compiled again.
    pub fn builtin_tools(&self) -> &ToolRegistry {
        &self.registry
    }
}

/// The tenant's tool permissions for a caller: a custom role's own patterns, or the built-in
/// role's (`tool_permissions`, or the defaults when unset or invalid). A custom role the tenant
/// no longer defines, or whose patterns do not parse, grants no tool (it fails closed).
pub fn role_policy(tenant: &Tenant, role: Role, custom: Option<RoleName>) -> RbacPolicy {
    if let Some(name) = custom {
        let permissions = match tenant.custom_role(name) {
            Some(def) => Permissions::parse(&def.tools).unwrap_or_else(|e| {
                tracing::warn!(tenant = %tenant.id, role = %name, error = %e, "the custom role's tool permissions are invalid; it may use no tool");
                Permissions::default()
            }),
            None => {
                tracing::warn!(tenant = %tenant.id, role = %name, "the caller's custom role is not defined; it may use no tool");
                Permissions::default()
            }
        };
        return RbacPolicy {
            permissions,
            role: name.to_string(),
        };
    }
    let permissions = match tenant.tool_permissions.as_ref() {
        None => RolePermissions::default(),
        Some(v) => RolePermissions::from_json(v).unwrap_or_else(|e| {
            tracing::warn!(tenant = %tenant.id, error = %e, "the tenant's tool permissions are invalid; using the defaults");
            RolePermissions::default()
        }),
    };
    RbacPolicy {
        permissions: permissions.for_role(role).clone(),
        role: role.as_str().to_string(),
    }
}

#[async_trait]
impl ToolProvider for PlatformTools {
    async fn tools_for(&self, req: &ToolRequest) -> ToolSet {
        let patterns = req.agent.tools.as_deref();
        let mut warnings = Vec::new();
        let mut registry = self.registry.clone();
        registry.retain(|s| assistant_allows(patterns, s));
        if let Some(pool) = &req.mcp {
            let request = UserTools {
                user: req.user_id,
                patterns: patterns.map(<[String]>::to_vec),
            };
            match pool.send(request).await {
                Ok(reply) => {
                    warnings.extend(reply.warnings);
                    for tool in reply.tools {
                        if !assistant_allows(patterns, tool.spec()) {
                            continue;
                        }
                        let name = tool.spec().name.clone();
                        if registry.contains(&name) {
                            warnings.push(format!(
                                "MCP tool {name:?} clashes with a built-in tool and was left out"
                            ));
                            continue;
                        }
                        if let Err(e) = registry.register_compiled(tool) {
                            warnings.push(format!("MCP tool {name:?} was left out: {e}"));
                        }
                    }
                }
                Err(_) => warnings.push(
                    "the MCP pool is not available; MCP tools are left out of this run".into(),
                ),
            }
        }
        ToolSet {
            registry,
            policy: Arc::new(role_policy(&req.tenant, req.role, req.custom_role)),
            warnings,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn spec(service: &str, name: &str) -> ToolSpec {
        ToolSpec::new(service, name, "", json!({}))
    }

    #[test]
    fn assistant_patterns() {
        let read = spec("files", "read_file");
        let mut gh = spec("github", "create_issue");
        gh.name = "github__create_issue".into();
        assert!(assistant_allows(None, &read));
        let p = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert!(assistant_allows(Some(&p(&["files:*"])), &read));
        assert!(!assistant_allows(Some(&p(&["files:*"])), &gh));
        assert!(assistant_allows(Some(&p(&["github__create_issue"])), &gh));
        assert!(assistant_allows(Some(&p(&["github:create_issue"])), &gh));
        assert!(assistant_allows(Some(&p(&["*"])), &gh));
        assert!(!assistant_allows(Some(&[]), &read));
    }

    fn request(tools: Option<Vec<String>>) -> ToolRequest {
        use agentry_schema::ids::{AssistantId, SessionId, TenantId, UserId};
        use agentry_schema::tenancy::TenantStatus;
        use agentry_store::assistants::{Assistant, AssistantSpec};
        use agentry_store::tenants::{Quotas, Tenant};
        let now = chrono::Utc::now();
        let tenant = Tenant {
            id: TenantId::new(),
            name: "t".into(),
            status: TenantStatus::Active,
            quotas: Quotas::default(),
            features_enabled: Vec::new(),
            tool_permissions: None,
            policy: Default::default(),
            custom_roles: Default::default(),
            mcp_virtual_servers: Default::default(),
            created_at: now,
            updated_at: now,
        };
        ToolRequest {
            tenant: Arc::new(tenant.clone()),
            user_id: UserId::new(),
            role: Role::Member,
            custom_role: None,
            session_id: SessionId::new(),
            assistant: Assistant {
                tenant_id: tenant.id,
                id: AssistantId::default_assistant(),
                spec: AssistantSpec::default(),
                created_at: now,
                updated_at: now,
            },
            agent: Arc::new(crate::profiles::AgentConfig {
                tools,
                ..crate::profiles::resolve(
                    &Assistant {
                        tenant_id: tenant.id,
                        id: AssistantId::default_assistant(),
                        spec: AssistantSpec::default(),
                        created_at: now,
                        updated_at: now,
                    },
                    &crate::profiles::builtin("general").unwrap(),
                )
            }),
            mcp: None,
        }
    }

    /// Issue 11: the built-in registry and its schemas are built once, at start; a run only
    /// narrows a clone. Before, every run compiled every built-in schema again (21 of them).
    #[tokio::test]
    async fn a_run_compiles_no_schema() {
        let before_start = agentry_tools::tool::schema_compilations_on_this_thread();
        let platform = PlatformTools::new(BuiltinConfig::default());
        let at_start = agentry_tools::tool::schema_compilations_on_this_thread() - before_start;
        assert_eq!(
            at_start as usize,
            platform.builtin_tools().len(),
            "each built-in schema is compiled once at start"
        );
        for tools in [None, Some(vec!["files:*".to_string()])] {
            let before = agentry_tools::tool::schema_compilations_on_this_thread();
            let set = platform.tools_for(&request(tools.clone())).await;
            assert_eq!(
                agentry_tools::tool::schema_compilations_on_this_thread() - before,
                0,
                "a run with tools {tools:?} compiled schemas"
            );
            assert!(set.registry.contains("read_file"));
            assert_eq!(set.registry.contains("write_todos"), tools.is_none());
            // The clone validates with the validators compiled at start.
            assert!(matches!(
                set.registry.validate("read_file", &json!({"file_path": 3})),
                Err(agentry_tools::tool::ToolError::InvalidArguments { .. })
            ));
        }
    }
}
