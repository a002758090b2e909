//! MCP virtual servers (issue 18, item 5; docs/mcp.md, "Virtual servers"): a tenant admin names
//! a subset of the tools `/mcp` offers — by the same patterns roles use — and MCP clients
//! connect to `/mcp/{name}` to get only those. The caller's role still applies: a virtual
//! server narrows what a caller may use, never widens it.
//!
//! The definitions live in the tenant's row (like custom roles), so every `/mcp` request's
//! cached tenant carries them.

use agentry_schema::api::{McpVirtualServerInfo, McpVirtualServerRequest};
use agentry_schema::ids::VirtualServerName;
use agentry_schema::roles::{McpVirtualServer, McpVirtualServers};
use agentry_store::TenantScope;
use agentry_store::tenants::Tenant;
use agentry_tools::rbac::Permissions;

use crate::Domain;
use crate::error::{DomainError, DomainResult};
use crate::roles::{Part, checked_description, checked_patterns, edit_tenant};

/// Virtual servers per tenant.
pub const MAX_VIRTUAL_SERVERS: usize = 50;

fn info(name: &VirtualServerName, def: &McpVirtualServer) -> McpVirtualServerInfo {
    McpVirtualServerInfo {
        name: name.to_string(),
        description: def.description.clone(),
        tools: def.tools.clone(),
        path: format!("/mcp/{name}"),
    }
}

fn not_found(name: &VirtualServerName) -> DomainError {
    DomainError::not_found(format!("MCP virtual server {:?}", name.as_str()))
}

/// The tenant's virtual servers by name.
pub fn list(tenant: &Tenant) -> Vec<McpVirtualServerInfo> {
    tenant
        .mcp_virtual_servers
        .iter()
        .map(|(n, d)| info(n, d))
        .collect()
}

pub fn get(tenant: &Tenant, name: &VirtualServerName) -> DomainResult<McpVirtualServerInfo> {
    tenant
        .mcp_virtual_servers
        .get(name)
        .map(|d| info(name, d))
        .ok_or_else(|| not_found(name))
}

/// The tools of virtual server `name` of the tenant, as permissions; `None` when the tenant has
/// no such server.
pub fn tools_of(tenant: &Tenant, name: &VirtualServerName) -> Option<Permissions> {
    let def = tenant.mcp_virtual_servers.get(name)?;
    Some(Permissions::parse(&def.tools).unwrap_or_else(|e| {
        tracing::warn!(tenant = %tenant.id, server = %name, error = %e, "an MCP virtual server's tool patterns are invalid; it serves no tool");
        Permissions::default()
    }))
}

fn definition(req: McpVirtualServerRequest) -> DomainResult<McpVirtualServer> {
    let description = checked_description(req.description)?;
    let tools = checked_patterns(&req.tools)?;
    if !tools.iter().any(|t| !t.starts_with('!')) {
        return Err(DomainError::validation(
            "tools",
            "a virtual server needs at least one tool pattern that allows (not only `!` denials)",
        ));
    }
    Ok(McpVirtualServer { description, tools })
}

async fn edit<T>(
    domain: &Domain<'_>,
    scope: &TenantScope,
    mut edit: impl FnMut(&mut McpVirtualServers) -> DomainResult<T>,
) -> DomainResult<T> {
    edit_tenant(domain, scope, |tenant| {
        let mut servers = tenant.mcp_virtual_servers.clone();
        let out = edit(&mut servers)?;
        Ok((out, Part::McpVirtualServers(servers)))
    })
    .await
}

#[tracing::instrument(skip_all, fields(tenant_id = %scope.tenant_id()))]
pub async fn create(
    domain: &Domain<'_>,
    scope: &TenantScope,
    req: McpVirtualServerRequest,
) -> DomainResult<McpVirtualServerInfo> {
    let Some(raw) = req.name.clone() else {
        return Err(DomainError::validation("name", "`name` is required"));
    };
    let name = VirtualServerName::try_from(raw.trim())
        .map_err(|e| DomainError::validation("name", e.to_string()))?;
    let def = definition(req)?;
    let out = info(&name, &def);
    edit(domain, scope, |servers| {
        if servers.contains_key(&name) {
            return Err(DomainError::conflict(format!(
                "the tenant already has a virtual server {name:?}; change it with PUT /api/v1/tenant/mcp-virtual-servers/{name}"
            )));
        }
        if servers.len() >= MAX_VIRTUAL_SERVERS {
            return Err(DomainError::validation(
                "name",
                format!(
                    "a tenant has at most {MAX_VIRTUAL_SERVERS} virtual servers; delete one first"
                ),
            ));
        }
        servers.insert(name.clone(), def.clone());
        Ok(())
    })
    .await?;
    tracing::info!(tenant_id = %scope.tenant_id(), server = %name, "MCP virtual server created");
    Ok(out)
}

#[tracing::instrument(skip_all, fields(tenant_id = %scope.tenant_id()))]
pub async fn replace(
    domain: &Domain<'_>,
    scope: &TenantScope,
    name: VirtualServerName,
    req: McpVirtualServerRequest,
) -> DomainResult<McpVirtualServerInfo> {
    if let Some(n) = req.name.as_deref()
        && n.trim() != name.as_str()
    {
        return Err(DomainError::validation(
            "name",
            "a virtual server cannot be renamed: `name` must be absent or the path's name (create the new one, then delete the old one)",
        ));
    }
    let def = definition(req)?;
    edit(domain, scope, |servers| match servers.get_mut(&name) {
        Some(d) => {
            *d = def.clone();
            Ok(())
        }
        None => Err(not_found(&name)),
    })
    .await?;
    tracing::info!(tenant_id = %scope.tenant_id(), server = %name, "MCP virtual server changed");
    Ok(info(&name, &def))
}

/// Delete a virtual server; sessions open on it end with their next request (404).
#[tracing::instrument(skip_all, fields(tenant_id = %scope.tenant_id()))]
pub async fn delete(
    domain: &Domain<'_>,
    scope: &TenantScope,
    name: VirtualServerName,
) -> DomainResult<()> {
    edit(domain, scope, |servers| {
        servers
            .remove(&name)
            .map(|_| ())
            .ok_or_else(|| not_found(&name))
    })
    .await?;
    tracing::info!(tenant_id = %scope.tenant_id(), server = %name, "MCP virtual server deleted");
    Ok(())
}
