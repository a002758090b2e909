//! Custom roles (issue 17, item 5; docs/admin.md, "Roles"): a tenant admin defines roles beside
//! `admin` and `member`, each with its own tool permission patterns and REST areas, and gives
//! them to users and keys. A custom role is member-level: it never carries admin rights.
//!
//! The definitions live in the tenant's row, so the auth cache's tenant carries them to every
//! request and run; a change forgets the tenant's cached keys here and tells the other replicas.

use agentry_schema::api::{RoleInfo, RoleRequest};
use agentry_schema::roles::{CustomRole, CustomRoles, Grant, RestArea, RoleName};
use agentry_schema::tenancy::Role;
use agentry_store::TenantScope;
use agentry_store::tenants::{self, Tenant};
use agentry_store::users;
use agentry_tools::rbac::{Permission, RolePermissions};

use crate::Domain;
use crate::error::{DomainError, DomainResult};

/// Custom roles per tenant.
pub const MAX_CUSTOM_ROLES: usize = 50;
/// Tool patterns per role.
pub const MAX_ROLE_TOOLS: usize = 100;
/// Characters of a role's description.
pub const MAX_DESCRIPTION: usize = 500;
/// Tries of a role change that loses a race with another change of the tenant.
const EDIT_TRIES: usize = 5;

/// The grant a user or key request names: a built-in role, or a custom role the tenant
/// defines (member-level, so `role` must be absent or `member` beside it).
pub fn grant_of(tenant: &Tenant, role: Option<Role>, custom: Option<&str>) -> DomainResult<Grant> {
    let Some(custom) = custom else {
        return Ok(role.unwrap_or(Role::Member).into());
    };
    if role == Some(Role::Admin) {
        return Err(DomainError::validation(
            "role",
            "a custom role is member-level: leave `role` out (or set it to member) when you give `custom_role`",
        ));
    }
    let name = RoleName::parse(custom).map_err(|e| DomainError::validation("custom_role", e))?;
    if tenant.custom_role(name).is_none() {
        return Err(DomainError::validation(
            "custom_role",
            format!(
                "the tenant has no role {name:?}; define it first with POST /api/v1/tenant/roles"
            ),
        ));
    }
    Ok(Grant::custom(name))
}

fn builtin(tenant: &Tenant, role: Role) -> RoleInfo {
    let permissions = tenant
        .tool_permissions
        .as_ref()
        .and_then(|v| RolePermissions::from_json(v).ok())
        .unwrap_or_default();
    RoleInfo {
        name: role.to_string(),
        builtin: true,
        description: match role {
            Role::Admin => "Manages the tenant's users, keys and shared settings; every tool.",
            Role::Member => {
                "Uses the tenant's assistants with their own sessions, files and servers."
            }
        }
        .to_string(),
        tools: permissions
            .for_role(role)
            .list()
            .iter()
            .map(ToString::to_string)
            .collect(),
        areas: RestArea::ALL.to_vec(),
    }
}

fn custom(name: RoleName, def: &CustomRole) -> RoleInfo {
    RoleInfo {
        name: name.to_string(),
        builtin: false,
        description: def.description.clone(),
        tools: def.tools.clone(),
        areas: def.areas.clone(),
    }
}

/// Every role of the tenant: the built-ins first, then the custom ones by name.
pub fn list(tenant: &Tenant) -> Vec<RoleInfo> {
    let mut out = vec![builtin(tenant, Role::Admin), builtin(tenant, Role::Member)];
    out.extend(tenant.custom_roles.iter().map(|(n, d)| custom(*n, d)));
    out
}

/// One role by name; 404 for a custom role the tenant does not have.
pub fn get(tenant: &Tenant, role: Grant) -> DomainResult<RoleInfo> {
    match role.custom {
        None => Ok(builtin(tenant, role.role)),
        Some(n) => tenant
            .custom_role(n)
            .map(|d| custom(n, d))
            .ok_or_else(|| not_found(n)),
    }
}

fn not_found(name: RoleName) -> DomainError {
    DomainError::not_found(format!("role {:?}", name.as_str()))
}

/// A description as given: trimmed, at most [`MAX_DESCRIPTION`] characters, no control
/// characters.
pub(crate) fn checked_description(raw: Option<String>) -> DomainResult<String> {
    let description = raw.unwrap_or_default().trim().to_string();
    if description.chars().count() > MAX_DESCRIPTION {
        return Err(DomainError::validation(
            "description",
            format!("`description` must be at most {MAX_DESCRIPTION} characters"),
        ));
    }
    if description.chars().any(char::is_control) {
        return Err(DomainError::validation(
            "description",
            "`description` must not contain control characters",
        ));
    }
    Ok(description)
}

/// Tool patterns as given: each parses (`tools[i]` names a bad one), at most
/// [`MAX_ROLE_TOOLS`], repeats dropped, each in its canonical spelling.
pub(crate) fn checked_patterns(raw: &[String]) -> DomainResult<Vec<String>> {
    if raw.len() > MAX_ROLE_TOOLS {
        return Err(DomainError::validation(
            "tools",
            format!("at most {MAX_ROLE_TOOLS} tool patterns"),
        ));
    }
    let mut tools: Vec<String> = Vec::with_capacity(raw.len());
    for (i, raw) in raw.iter().enumerate() {
        let p: Permission = raw
            .parse()
            .map_err(|e| DomainError::validation(&format!("tools[{i}]"), format!("{e}")))?;
        let p = p.to_string();
        if !tools.contains(&p) {
            tools.push(p);
        }
    }
    Ok(tools)
}

/// A definition's fields, checked: patterns that parse, areas without repeats.
fn definition(req: RoleRequest) -> DomainResult<CustomRole> {
    let description = checked_description(req.description)?;
    let tools = checked_patterns(&req.tools)?;
    let mut areas = req.areas;
    areas.sort();
    areas.dedup();
    Ok(CustomRole {
        description,
        tools,
        areas,
    })
}

/// Change the tenant's roles with `edit` (see [`edit_tenant`]).
async fn edit<T>(
    domain: &Domain<'_>,
    scope: &TenantScope,
    mut edit: impl FnMut(&mut CustomRoles) -> DomainResult<T>,
) -> DomainResult<T> {
    edit_tenant(domain, scope, |tenant| {
        let mut roles = tenant.custom_roles.clone();
        let out = edit(&mut roles)?;
        Ok((out, Part::CustomRoles(roles)))
    })
    .await
}

/// A part of the tenant its admins edit as a whole.
pub(crate) enum Part {
    CustomRoles(CustomRoles),
    McpVirtualServers(agentry_schema::roles::McpVirtualServers),
}

/// Change a part of the tenant with `edit` (given the tenant as read), retrying when another
/// change of the tenant won the race; then forget the tenant's cached keys here, tell the other
/// replicas, and hand the tenant's actors the new row.
pub(crate) async fn edit_tenant<T>(
    domain: &Domain<'_>,
    scope: &TenantScope,
    mut edit: impl FnMut(&Tenant) -> DomainResult<(T, Part)>,
) -> DomainResult<T> {
    for _ in 0..EDIT_TRIES {
        let tenant = tenants::get_own(domain.db, scope).await?;
        let (out, part) = edit(&tenant)?;
        let part = match &part {
            Part::CustomRoles(r) => tenants::TenantPart::CustomRoles(r),
            Part::McpVirtualServers(v) => tenants::TenantPart::McpVirtualServers(v),
        };
        if let Some(updated) = tenants::set_part(domain.db, scope, tenant.updated_at, part).await? {
            domain.credentials.forget_tenant(scope.tenant_id());
            crate::invalidate::announce(
                domain,
                crate::invalidate::Change::Tenant {
                    tenant_id: scope.tenant_id(),
                },
            );
            // The tenant's actors hold its row for new runs: they get the change now.
            if let Err(e) = domain.engine.tenant_changed(&updated).await {
                tracing::warn!(error = %e, "telling the engine about the tenant change failed");
            }
            return Ok(out);
        }
    }
    Err(DomainError::conflict(
        "the tenant was being changed by someone else at the same time; try again",
    ))
}

#[tracing::instrument(skip_all, fields(tenant_id = %scope.tenant_id()))]
pub async fn create(
    domain: &Domain<'_>,
    scope: &TenantScope,
    req: RoleRequest,
) -> DomainResult<RoleInfo> {
    let Some(raw) = req.name.clone() else {
        return Err(DomainError::validation("name", "`name` is required"));
    };
    let name = RoleName::parse(raw.trim()).map_err(|e| DomainError::validation("name", e))?;
    let def = definition(req)?;
    let info = custom(name, &def);
    edit(domain, scope, |roles| {
        if roles.contains_key(&name) {
            return Err(DomainError::conflict(format!(
                "the tenant already has a role {name:?}; change it with PUT /api/v1/tenant/roles/{name}"
            )));
        }
        if roles.len() >= MAX_CUSTOM_ROLES {
            return Err(DomainError::validation(
                "name",
                format!("a tenant has at most {MAX_CUSTOM_ROLES} custom roles; delete one first"),
            ));
        }
        roles.insert(name, def.clone());
        Ok(())
    })
    .await?;
    tracing::info!(tenant_id = %scope.tenant_id(), role = %name, "custom role created");
    Ok(info)
}

/// A custom role by its path name, for a change: the built-ins are refused (409), anything
/// else the tenant does not have is 404.
fn custom_name(tenant_roles: &CustomRoles, role: Grant) -> DomainResult<RoleName> {
    let Some(name) = role.custom else {
        return Err(DomainError::conflict(format!(
            "{:?} is a built-in role: its tool permissions are the tenant's tool_permissions, which the platform admin sets",
            role.as_str()
        )));
    };
    if tenant_roles.contains_key(&name) {
        Ok(name)
    } else {
        Err(not_found(name))
    }
}

#[tracing::instrument(skip_all, fields(tenant_id = %scope.tenant_id()))]
pub async fn replace(
    domain: &Domain<'_>,
    scope: &TenantScope,
    raw: Grant,
    req: RoleRequest,
) -> DomainResult<RoleInfo> {
    if let Some(n) = req.name.as_deref()
        && n.trim() != raw.as_str()
    {
        return Err(DomainError::validation(
            "name",
            "a role cannot be renamed: `name` must be absent or the path's name (create the new role, move its holders, delete the old one)",
        ));
    }
    let def = definition(req)?;
    let name = edit(domain, scope, |roles| {
        let name = custom_name(roles, raw)?;
        roles.insert(name, def.clone());
        Ok(name)
    })
    .await?;
    tracing::info!(tenant_id = %scope.tenant_id(), role = %name, "custom role changed");
    Ok(custom(name, &def))
}

/// Delete a custom role nobody holds (409 naming how many users and keys still do).
#[tracing::instrument(skip_all, fields(tenant_id = %scope.tenant_id()))]
pub async fn delete(domain: &Domain<'_>, scope: &TenantScope, raw: Grant) -> DomainResult<()> {
    let tenant = tenants::get_own(domain.db, scope).await?;
    let name = custom_name(&tenant.custom_roles, raw)?;
    let (holders, keys) = users::holders_of(domain.db, scope, name).await?;
    if holders > 0 || keys > 0 {
        return Err(DomainError::conflict(format!(
            "the role {name:?} is held by {holders} user(s) and {keys} unrevoked key(s); give them another role (or revoke the keys) first"
        ))
        .with_details(serde_json::json!({ "users": holders, "keys": keys })));
    }
    edit(domain, scope, |roles| {
        roles.remove(&custom_name(roles, raw)?);
        Ok(())
    })
    .await?;
    tracing::info!(tenant_id = %scope.tenant_id(), role = %name, "custom role deleted");
    Ok(())
}
