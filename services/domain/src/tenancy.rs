//! Tenants, users and API keys: the operations behind the platform admin API
//! (`/admin/tenants/...`) and the tenant admin API (`/tenant/...`). The routes only extract and
//! convert; both APIs call the same functions with the scope their caller proved.

use agentry_schema::api::{
    CreateApiKeyRequest, CreateTenantRequest, CreateUserRequest, DailyUsage as WireDailyUsage,
    ReplaceTenantRequest, UpdateTenantRequest, UpdateUserRequest, UsageReport, UsageTotals,
};
use agentry_schema::ids::{ApiKeyId, TenantId, UserId};
use agentry_schema::policy::merge_patch;
use agentry_schema::tenancy::{Role, TenantStatus};
use agentry_store::api_keys::{self, ApiKey, CreatedKey};
use agentry_store::assistants::{self, AssistantSpec};
use agentry_store::tenants::{self, NewTenant, Quotas, Tenant, TenantPolicy, TenantUpdate};
use agentry_store::users::{self, User};
use agentry_store::{PageRequest, PlatformScope, StoreError, TenantScope, TransactionTrait, usage};
use agentry_tools::rbac::RolePermissions;
use chrono::{NaiveDate, Utc};
use sea_orm::DatabaseConnection;
use serde_json::Value;

use crate::Domain;
use crate::error::{DomainError, DomainResult};

/// How long a client is told to wait after hitting `max_users`: users are not freed by time,
/// so this only paces retries while an admin raises the quota or removes a user.
const MAX_USERS_RETRY_AFTER_SECS: u64 = 60;

/// A trimmed, non-empty name of at most `max` characters without control characters.
pub fn valid_name(field: &str, raw: &str, max: usize) -> DomainResult<String> {
    let name = raw.trim();
    if name.is_empty() {
        return Err(DomainError::validation(
            field,
            format!("`{field}` must not be empty"),
        ));
    }
    if name.chars().count() > max {
        return Err(DomainError::validation(
            field,
            format!("`{field}` must be at most {max} characters"),
        ));
    }
    if name.chars().any(char::is_control) {
        return Err(DomainError::validation(
            field,
            format!("`{field}` must not contain control characters"),
        ));
    }
    Ok(name.to_string())
}

fn valid_features(features: Vec<String>) -> DomainResult<Vec<String>> {
    let mut out: Vec<String> = Vec::with_capacity(features.len());
    for (i, f) in features.into_iter().enumerate() {
        let ok = !f.is_empty()
            && f.len() <= 64
            && f.chars().all(|c| {
                c.is_ascii_lowercase() || c.is_ascii_digit() || matches!(c, '_' | '-' | '.')
            });
        if !ok {
            return Err(DomainError::validation(
                &format!("features_enabled[{i}]"),
                format!("feature {f:?} must be 1-64 characters of a-z, 0-9, `_`, `-`, `.`"),
            ));
        }
        if !out.contains(&f) {
            out.push(f);
        }
    }
    Ok(out)
}

fn valid_permissions(value: Option<Value>) -> DomainResult<Option<Value>> {
    match value {
        None | Some(Value::Null) => Ok(None),
        Some(v) => {
            RolePermissions::from_json(&v)
                .map_err(|e| DomainError::validation("tool_permissions", e.to_string()))?;
            Ok(Some(v))
        }
    }
}

fn valid_policy(policy: TenantPolicy) -> DomainResult<TenantPolicy> {
    policy
        .validate()
        .map_err(|e| DomainError::validation(&format!("policy.{}", e.field), e.message))?;
    Ok(policy)
}

/// The policy after a PATCH: `null` resets it, an object is merged into the current one
/// (RFC 7396), and the result must be a valid policy.
fn patched_policy(current: &TenantPolicy, patch: Option<Value>) -> DomainResult<TenantPolicy> {
    let Some(patch) = patch else {
        return Ok(TenantPolicy::default());
    };
    if !patch.is_object() {
        return Err(DomainError::validation(
            "policy",
            "`policy` must be an object (a merge patch of the policy) or null (the defaults)",
        ));
    }
    let mut merged = current.to_json();
    merge_patch(&mut merged, &patch);
    let policy = serde_path_to_error::deserialize(merged).map_err(|e| {
        let field = match e.path().to_string() {
            p if p == "." || p.is_empty() => "policy".to_string(),
            p => format!("policy.{p}"),
        };
        let reason = e.inner().to_string();
        DomainError::validation(&field, format!("invalid field `{field}`: {reason}"))
    })?;
    valid_policy(policy)
}

/// The largest quota the database holds: counts are stored as 32-bit, sizes as 64-bit signed
/// integers. A larger value is refused, never clamped.
pub const MAX_COUNT_QUOTA: u32 = i32::MAX as u32;
pub const MAX_SIZE_QUOTA: u64 = i64::MAX as u64;

fn in_range<T: PartialOrd + std::fmt::Display + Copy>(
    field: &str,
    value: Option<T>,
    max: T,
) -> DomainResult<Option<T>> {
    match value {
        Some(v) if v > max => Err(DomainError::validation(
            field,
            format!("`{field}` must be at most {max} (got {v})"),
        )),
        v => Ok(v),
    }
}

/// Quotas from optional fields over `base`.
#[allow(clippy::too_many_arguments)]
fn quotas_over(
    base: Quotas,
    max_users: Option<u32>,
    max_sessions_per_user: Option<u32>,
    max_mcp_servers: Option<u32>,
    workspace_quota_bytes: Option<u64>,
    requests_per_minute: Option<u32>,
    tokens_per_day: Option<u64>,
    max_concurrent_runs: Option<u32>,
) -> DomainResult<Quotas> {
    let count = |field: &str, v: Option<u32>, base: u32| {
        in_range(field, v, MAX_COUNT_QUOTA).map(|v| v.unwrap_or(base))
    };
    let size = |field: &str, v: Option<u64>, base: u64| {
        in_range(field, v, MAX_SIZE_QUOTA).map(|v| v.unwrap_or(base))
    };
    Ok(Quotas {
        max_users: count("max_users", max_users, base.max_users)?,
        max_sessions_per_user: count(
            "max_sessions_per_user",
            max_sessions_per_user,
            base.max_sessions_per_user,
        )?,
        max_mcp_servers: count("max_mcp_servers", max_mcp_servers, base.max_mcp_servers)?,
        workspace_quota_bytes: size(
            "workspace_quota_bytes",
            workspace_quota_bytes,
            base.workspace_quota_bytes,
        )?,
        requests_per_minute: count(
            "requests_per_minute",
            requests_per_minute,
            base.requests_per_minute,
        )?,
        tokens_per_day: size("tokens_per_day", tokens_per_day, base.tokens_per_day)?,
        max_concurrent_runs: count(
            "max_concurrent_runs",
            max_concurrent_runs,
            base.max_concurrent_runs,
        )?,
    })
}

/// The assistant every new tenant starts with: the server's default model, every built-in tool,
/// approvals on for the high-risk ones (the tools' own policy).
pub fn default_assistant_spec() -> AssistantSpec {
    AssistantSpec::default()
}

/// Create a tenant with its `default` assistant, atomically.
#[tracing::instrument(skip_all)]
pub async fn create_tenant(
    db: &DatabaseConnection,
    platform: &PlatformScope,
    req: CreateTenantRequest,
) -> DomainResult<Tenant> {
    let name = valid_name("name", &req.name, 128)?;
    let features = valid_features(req.features_enabled.unwrap_or_default())?;
    let permissions = valid_permissions(req.tool_permissions)?;
    let policy = valid_policy(req.policy.unwrap_or_default())?;
    let quotas = quotas_over(
        Quotas::default(),
        req.max_users,
        req.max_sessions_per_user,
        req.max_mcp_servers,
        req.workspace_quota_bytes,
        req.requests_per_minute,
        req.tokens_per_day,
        req.max_concurrent_runs,
    )?;
    let txn = db.begin().await.map_err(StoreError::from)?;
    let tenant = tenants::create(
        &txn,
        platform,
        NewTenant {
            name,
            quotas,
            features_enabled: features,
            tool_permissions: permissions,
            policy,
        },
    )
    .await?;
    assistants::ensure_default(&txn, &tenant.scope(), default_assistant_spec()).await?;
    txn.commit().await.map_err(StoreError::from)?;
    tracing::info!(tenant_id = %tenant.id, name = %tenant.name, "tenant created");
    Ok(tenant)
}

pub async fn tenant(
    db: &DatabaseConnection,
    platform: &PlatformScope,
    id: TenantId,
) -> DomainResult<Tenant> {
    tenants::get(db, platform, id)
        .await?
        .ok_or_else(|| DomainError::not_found(format!("tenant {id}")))
}

pub async fn list_tenants(
    db: &DatabaseConnection,
    platform: &PlatformScope,
    page: PageRequest,
) -> DomainResult<(Vec<Tenant>, u64)> {
    Ok(tenants::list(db, platform, page).await?)
}

async fn apply_tenant_update(
    domain: &Domain<'_>,
    platform: &PlatformScope,
    id: TenantId,
    change: TenantUpdate,
) -> DomainResult<Tenant> {
    let updated = tenants::update(domain.db, platform, id, change).await?;
    // A suspension, a reactivation or new quotas apply to cached keys at once, and to the live
    // actors (a suspended tenant's sessions stop; new quotas apply to the next admission), here
    // and on the other replicas.
    domain.credentials.forget_tenant(id);
    crate::invalidate::announce(domain, crate::invalidate::Change::Tenant { tenant_id: id });
    if let Err(e) = domain.engine.tenant_changed(&updated).await {
        tracing::warn!(error = %e, "telling the engine about the tenant change failed");
    }
    Ok(updated)
}

#[tracing::instrument(skip_all, fields(tenant_id = %id))]
pub async fn update_tenant(
    domain: &Domain<'_>,
    platform: &PlatformScope,
    id: TenantId,
    req: UpdateTenantRequest,
) -> DomainResult<Tenant> {
    let current = tenant(domain.db, platform, id).await?;
    let change = TenantUpdate {
        name: req
            .name
            .as_deref()
            .map(|n| valid_name("name", n, 128))
            .transpose()?,
        status: req.status,
        quotas: Some(quotas_over(
            current.quotas,
            req.max_users,
            req.max_sessions_per_user,
            req.max_mcp_servers,
            req.workspace_quota_bytes,
            req.requests_per_minute,
            req.tokens_per_day,
            req.max_concurrent_runs,
        )?),
        features_enabled: req.features_enabled.map(valid_features).transpose()?,
        tool_permissions: match req.tool_permissions {
            None => None,
            Some(p) => Some(valid_permissions(p)?),
        },
        policy: req
            .policy
            .map(|p| patched_policy(&current.policy, p))
            .transpose()?,
    };
    apply_tenant_update(domain, platform, id, change).await
}

#[tracing::instrument(skip_all, fields(tenant_id = %id))]
pub async fn replace_tenant(
    domain: &Domain<'_>,
    platform: &PlatformScope,
    id: TenantId,
    req: ReplaceTenantRequest,
) -> DomainResult<Tenant> {
    tenant(domain.db, platform, id).await?;
    let change = TenantUpdate {
        name: Some(valid_name("name", &req.name, 128)?),
        status: Some(req.status.unwrap_or(TenantStatus::Active)),
        quotas: Some(quotas_over(
            Quotas::default(),
            req.max_users,
            req.max_sessions_per_user,
            req.max_mcp_servers,
            req.workspace_quota_bytes,
            req.requests_per_minute,
            req.tokens_per_day,
            req.max_concurrent_runs,
        )?),
        features_enabled: Some(valid_features(req.features_enabled.unwrap_or_default())?),
        tool_permissions: Some(valid_permissions(req.tool_permissions)?),
        policy: Some(valid_policy(req.policy.unwrap_or_default())?),
    };
    apply_tenant_update(domain, platform, id, change).await
}

/// Delete a tenant and everything it owns: its rows, its live actors, its workspaces on disk.
#[tracing::instrument(skip_all, fields(tenant_id = %id))]
pub async fn delete_tenant(
    domain: &Domain<'_>,
    platform: &PlatformScope,
    id: TenantId,
) -> DomainResult<()> {
    if !tenants::delete(domain.db, platform, id).await? {
        return Err(DomainError::not_found(format!("tenant {id}")));
    }
    domain.credentials.forget_tenant(id);
    crate::invalidate::announce(domain, crate::invalidate::Change::Tenant { tenant_id: id });
    if let Err(e) = domain.engine.tenant_deleted(id).await {
        tracing::warn!(error = %e, "stopping the deleted tenant's actors failed");
    }
    // The rows are gone whatever happens here: a leftover directory is logged, not a 5xx.
    if let Err(e) = domain.engine.remove_tenant_files(id).await {
        tracing::error!(error = %e, "removing the deleted tenant's workspaces failed");
    }
    tracing::info!(tenant_id = %id, "tenant deleted");
    Ok(())
}

/// Create a user, keeping the tenant within `max_users`.
///
/// The count is checked before the insert (the clear error) and again after it: two concurrent
/// creations that both passed the first check cannot both stay, so the quota is never exceeded
/// at rest, on any number of replicas.
#[tracing::instrument(skip_all, fields(tenant_id = %tenant.id))]
pub async fn create_user(
    db: &DatabaseConnection,
    tenant: &Tenant,
    req: CreateUserRequest,
) -> DomainResult<User> {
    let name = valid_name("name", &req.name, 128)?;
    let role = crate::roles::grant_of(tenant, req.role, req.custom_role.as_deref())?;
    let scope = tenant.scope();
    let limit = tenant.quotas.max_users;
    let over = || {
        DomainError::quota_exceeded(
            "max_users",
            u64::from(limit),
            format!(
                "the tenant has reached its limit of {limit} users; remove a user or ask the platform admin to raise max_users"
            ),
            MAX_USERS_RETRY_AFTER_SECS,
        )
    };
    if limit > 0 && users::count(db, &scope).await? >= u64::from(limit) {
        metrics::counter!("agentry_quota_rejections_total", "quota" => "max_users").increment(1);
        return Err(over());
    }
    let user = users::create(db, &scope, &name, role).await?;
    if limit > 0 && users::count(db, &scope).await? > u64::from(limit) {
        users::delete(db, &scope, user.id).await?;
        metrics::counter!("agentry_quota_rejections_total", "quota" => "max_users").increment(1);
        return Err(over());
    }
    Ok(user)
}

pub async fn user(db: &DatabaseConnection, scope: &TenantScope, id: UserId) -> DomainResult<User> {
    users::get(db, scope, id)
        .await?
        .ok_or_else(|| DomainError::not_found(format!("user {id}")))
}

pub async fn list_users(
    db: &DatabaseConnection,
    scope: &TenantScope,
    page: PageRequest,
) -> DomainResult<(Vec<User>, u64)> {
    Ok(users::list(db, scope, page).await?)
}

/// Who is changing a user: a tenant admin may not lock themselves out.
#[derive(Debug, Clone, Copy)]
pub enum Actor {
    Platform,
    TenantAdmin(UserId),
}

fn refuse_self_lockout(actor: Actor, target: UserId, what: &str) -> DomainResult<()> {
    match actor {
        Actor::TenantAdmin(me) if me == target => Err(DomainError::conflict(format!(
            "you cannot {what} yourself: ask another tenant admin (or the platform admin) to do it"
        ))),
        _ => Ok(()),
    }
}

#[tracing::instrument(skip_all, fields(tenant_id = %scope.tenant_id(), user_id = %id))]
pub async fn update_user(
    domain: &Domain<'_>,
    scope: &TenantScope,
    actor: Actor,
    id: UserId,
    req: UpdateUserRequest,
) -> DomainResult<User> {
    let updated = update_user_stored(domain.db, scope, actor, id, req).await?;
    domain.credentials.forget_tenant(scope.tenant_id());
    crate::invalidate::announce(
        domain,
        crate::invalidate::Change::Users {
            tenant_id: scope.tenant_id(),
        },
    );
    Ok(updated)
}

/// The database half of [`update_user`]: without a server to tell, cached keys of the user
/// follow within the auth cache TTL.
pub async fn update_user_stored(
    db: &DatabaseConnection,
    scope: &TenantScope,
    actor: Actor,
    id: UserId,
    req: UpdateUserRequest,
) -> DomainResult<User> {
    let grant = match (req.role, req.custom_role) {
        (None, None) => None,
        (role, Some(Some(custom))) => {
            let tenant = tenants::get_own(db, scope).await?;
            Some(crate::roles::grant_of(&tenant, role, Some(&custom))?)
        }
        (Some(role), _) => Some(role.into()),
        (None, Some(None)) => Some(Role::Member.into()),
    };
    if grant.is_some_and(|g| !g.is_admin()) {
        refuse_self_lockout(actor, id, "demote")?;
    }
    if req.disabled == Some(true) {
        refuse_self_lockout(actor, id, "disable")?;
    }
    user(db, scope, id).await?;
    Ok(users::update(db, scope, id, grant, req.disabled).await?)
}

/// Delete a user with their keys and their workspace (their sessions stay until deleted).
#[tracing::instrument(skip_all, fields(tenant_id = %scope.tenant_id(), user_id = %id))]
pub async fn delete_user(
    domain: &Domain<'_>,
    scope: &TenantScope,
    actor: Actor,
    id: UserId,
) -> DomainResult<()> {
    refuse_self_lockout(actor, id, "delete")?;
    if !users::delete(domain.db, scope, id).await? {
        return Err(DomainError::not_found(format!("user {id}")));
    }
    domain.credentials.forget_tenant(scope.tenant_id());
    crate::invalidate::announce(
        domain,
        crate::invalidate::Change::Users {
            tenant_id: scope.tenant_id(),
        },
    );
    if let Err(e) = domain.engine.remove_user_files(scope.tenant_id(), id).await {
        tracing::error!(error = %e, "removing the deleted user's workspace failed");
    }
    tracing::info!(tenant_id = %scope.tenant_id(), user_id = %id, "user deleted");
    Ok(())
}

/// Mint a key for a user of the tenant. The key's role defaults to the user's and may not
/// exceed it, so nobody can mint more power than the tenant's admin role.
#[tracing::instrument(skip_all, fields(tenant_id = %scope.tenant_id()))]
pub async fn create_key(
    db: &DatabaseConnection,
    scope: &TenantScope,
    req: CreateApiKeyRequest,
) -> DomainResult<CreatedKey> {
    let user_id: UserId = req
        .user_id
        .parse()
        .map_err(|e: agentry_schema::ids::InvalidId| {
            DomainError::validation("user_id", e.to_string())
        })?;
    let name = valid_name("name", &req.name, 128)?;
    let Some(owner) = users::get(db, scope, user_id).await? else {
        return Err(DomainError::validation(
            "user_id",
            format!("there is no user {user_id} in this tenant"),
        ));
    };
    if owner.disabled {
        return Err(DomainError::validation(
            "user_id",
            format!("user {user_id} is disabled; enable them first"),
        ));
    }
    let owner_grant = owner.grant();
    let role = match (req.role, req.custom_role.as_deref()) {
        (None, None) => owner_grant,
        (role, Some(custom)) => {
            let tenant = tenants::get_own(db, scope).await?;
            crate::roles::grant_of(&tenant, role, Some(custom))?
        }
        (Some(role), None) => role.into(),
    };
    // A tenant admin's key may have any role of the tenant; anyone else's only the user's own.
    if !owner_grant.is_admin() && role != owner_grant {
        return Err(DomainError::validation(
            if req.custom_role.is_some() {
                "custom_role"
            } else {
                "role"
            },
            format!(
                "a key cannot have more power than its user: this user is a {owner_grant}, so the key's role must be {owner_grant}"
            ),
        ));
    }
    if let Some(at) = req.expires_at
        && at <= Utc::now()
    {
        return Err(DomainError::validation(
            "expires_at",
            "`expires_at` must be in the future",
        ));
    }
    let created = api_keys::create(db, scope, user_id, &name, role, req.expires_at).await?;
    tracing::info!(tenant_id = %scope.tenant_id(), key_id = %created.key.id, prefix = %created.key.prefix, "API key created");
    Ok(created)
}

/// The tenant's keys, newest first, optionally one user's and/or by prefix.
pub async fn list_keys(
    db: &DatabaseConnection,
    scope: &TenantScope,
    user_id: Option<UserId>,
    prefix: Option<&str>,
) -> DomainResult<Vec<ApiKey>> {
    if let Some(p) = prefix
        && (p.is_empty()
            || p.len() > 16
            || !p.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'))
    {
        return Err(DomainError::invalid_query(
            "prefix",
            "`prefix` must be 1-16 characters of letters, digits and `_` (e.g. agk_AbCd)",
        ));
    }
    Ok(api_keys::list(db, scope, user_id, prefix).await?)
}

pub async fn key(
    db: &DatabaseConnection,
    scope: &TenantScope,
    id: ApiKeyId,
) -> DomainResult<ApiKey> {
    api_keys::get(db, scope, id)
        .await?
        .ok_or_else(|| DomainError::not_found(format!("api key {id}")))
}

/// Revoke a key; it answers 401 from now on (at once on this replica, within the auth cache
/// TTL on the others).
#[tracing::instrument(skip_all, fields(tenant_id = %scope.tenant_id(), key_id = %id))]
pub async fn revoke_key(
    domain: &Domain<'_>,
    scope: &TenantScope,
    id: ApiKeyId,
) -> DomainResult<ApiKey> {
    let key = revoke_key_stored(domain.db, scope, id).await?;
    domain.credentials.forget_key(id);
    crate::invalidate::announce(
        domain,
        crate::invalidate::Change::Key {
            tenant_id: scope.tenant_id(),
            key_id: id,
        },
    );
    Ok(key)
}

/// The database half of [`revoke_key`]: without a server to tell, the key stops working within
/// the auth cache TTL.
pub async fn revoke_key_stored(
    db: &DatabaseConnection,
    scope: &TenantScope,
    id: ApiKeyId,
) -> DomainResult<ApiKey> {
    let key = match api_keys::revoke(db, scope, id).await {
        Err(StoreError::NotFound(_)) => {
            return Err(DomainError::not_found(format!("api key {id}")));
        }
        other => other?,
    };
    tracing::info!(tenant_id = %scope.tenant_id(), key_id = %id, "API key revoked");
    Ok(key)
}

/// Longest usage window one request may ask for.
const MAX_USAGE_DAYS: i64 = 366;

fn parse_day(parameter: &str, raw: &str) -> DomainResult<NaiveDate> {
    NaiveDate::parse_from_str(raw, "%Y-%m-%d").map_err(|_| {
        DomainError::invalid_query(
            parameter,
            format!("`{parameter}` must be a date like 2026-11-22 (got {raw:?})"),
        )
    })
}

/// Usage by day between `from` and `to` (inclusive, UTC); default: the last 30 days.
#[tracing::instrument(skip_all, fields(tenant_id = %scope.tenant_id()))]
pub async fn usage_report(
    db: &DatabaseConnection,
    scope: &TenantScope,
    from: Option<&str>,
    to: Option<&str>,
) -> DomainResult<UsageReport> {
    let today = Utc::now().date_naive();
    let to = match to {
        Some(t) => parse_day("to", t)?,
        None => today,
    };
    let from = match from {
        Some(f) => parse_day("from", f)?,
        None => to - chrono::Duration::days(29),
    };
    if from > to {
        return Err(DomainError::invalid_query(
            "from",
            "`from` must not be after `to`",
        ));
    }
    if (to - from).num_days() >= MAX_USAGE_DAYS {
        return Err(DomainError::invalid_query(
            "from",
            format!("ask for at most {MAX_USAGE_DAYS} days at a time"),
        ));
    }
    let start = from.and_hms_opt(0, 0, 0).map(|d| d.and_utc());
    let end = to
        .succ_opt()
        .and_then(|d| d.and_hms_opt(0, 0, 0))
        .map(|d| d.and_utc());
    let (Some(start), Some(end)) = (start, end) else {
        return Err(DomainError::invalid_query("to", "the date is out of range"));
    };
    let days = usage::by_day(db, scope, start, end).await?;
    let mut totals = UsageTotals::default();
    let days = days
        .into_iter()
        .map(|d| {
            totals.runs += d.runs;
            totals.input_tokens += d.input_tokens;
            totals.output_tokens += d.output_tokens;
            totals.total_tokens += d.total_tokens;
            totals.tool_calls += d.tool_calls;
            WireDailyUsage {
                day: d.day,
                usage: UsageTotals {
                    runs: d.runs,
                    input_tokens: d.input_tokens,
                    output_tokens: d.output_tokens,
                    total_tokens: d.total_tokens,
                    tool_calls: d.tool_calls,
                },
            }
        })
        .collect();
    Ok(UsageReport {
        tenant_id: scope.tenant_id().to_string(),
        from,
        to,
        days,
        totals,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use agentry_schema::error::ErrorCode;
    use serde_json::json;

    #[test]
    fn names_and_features_are_checked() {
        assert_eq!(valid_name("name", "  acme ", 10).unwrap(), "acme");
        assert_eq!(
            valid_name("name", " ", 10).unwrap_err().details["field"],
            "name"
        );
        assert!(valid_name("name", "a\u{0}b", 10).is_err());
        assert!(valid_name("name", &"x".repeat(11), 10).is_err());
        assert_eq!(
            valid_features(vec!["mcp".into(), "mcp".into()]).unwrap(),
            vec!["mcp"]
        );
        let e = valid_features(vec!["ok".into(), "Not OK".into()]).unwrap_err();
        assert_eq!(e.details["field"], "features_enabled[1]");
        assert!(valid_permissions(Some(json!({"member": ["files:*"]}))).is_ok());
        let e = valid_permissions(Some(json!({"member": ["nonsense"]}))).unwrap_err();
        assert_eq!(
            (e.code, e.details["field"].as_str()),
            (ErrorCode::ValidationError, Some("tool_permissions"))
        );
    }

    #[test]
    fn usage_dates_are_checked() {
        assert!(parse_day("from", "2026-11-22").is_ok());
        assert_eq!(
            parse_day("from", "22/11/2026").unwrap_err().details["parameter"],
            "from"
        );
    }
}
