//! Tenants and their quotas. Creating, listing and changing tenants is platform-level.

use chrono::{DateTime, Utc};
use sea_orm::sea_query::Expr;
use sea_orm::{
    ActiveModelTrait, ColumnTrait, ConnectionTrait, EntityTrait, PaginatorTrait, QueryFilter,
    QueryOrder, QuerySelect, Set, TransactionSession, TransactionTrait,
};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use agentry_schema::entities::{
    a2a_push_config, api_key, approval, assistant, checkpoint, data_source, execution, mcp_server,
    membership, memory, message, model_connection, profile, remote_agent, session, session_event,
    skill, skill_file, tenant, tool_call_log, user, webhook_delivery, webhook_secret,
};
use agentry_schema::ids::TenantId;
pub use agentry_schema::policy::{SandboxPolicy, StdioMcpRole, TenantPolicy};
use agentry_schema::roles::{CustomRole, CustomRoles, McpVirtualServers, RoleName};
use agentry_schema::tenancy::TenantStatus;

use crate::{PageRequest, PlatformScope, Result, StoreError, TenantScope, corrupt, now};

/// A tenant's limits. Zero means "no limit" for every field.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Quotas {
    pub max_users: u32,
    pub max_sessions_per_user: u32,
    pub max_mcp_servers: u32,
    pub workspace_quota_bytes: u64,
    pub requests_per_minute: u32,
    pub tokens_per_day: u64,
    pub max_concurrent_runs: u32,
}

impl Default for Quotas {
    fn default() -> Self {
        Quotas {
            max_users: 100,
            max_sessions_per_user: 100,
            max_mcp_servers: 10,
            workspace_quota_bytes: 1 << 30,
            requests_per_minute: 600,
            tokens_per_day: 10_000_000,
            max_concurrent_runs: 50,
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct Tenant {
    pub id: TenantId,
    pub name: String,
    pub status: TenantStatus,
    pub quotas: Quotas,
    pub features_enabled: Vec<String>,
    /// Tool permissions per role; `None` = the built-in defaults.
    pub tool_permissions: Option<Value>,
    /// Role rights and sandbox limits; the defaults when never set.
    pub policy: TenantPolicy,
    /// The tenant's own roles beside `admin` and `member`.
    pub custom_roles: CustomRoles,
    /// The tenant's MCP virtual servers (`/mcp/{name}`).
    pub mcp_virtual_servers: McpVirtualServers,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

impl Tenant {
    /// A custom role's definition; `None` for a role the tenant does not (or no longer) define.
    pub fn custom_role(&self, name: RoleName) -> Option<&CustomRole> {
        self.custom_roles.get(&name)
    }

    /// The tenant's policy: who may add stdio MCP servers or switch approvals off, and the
    /// sandbox limits its processes get (`tenant.policy().sandbox`).
    pub fn policy(&self) -> &TenantPolicy {
        &self.policy
    }

    pub fn scope(&self) -> TenantScope {
        TenantScope::new(self.id)
    }

    pub fn has_feature(&self, feature: &str) -> bool {
        self.features_enabled.iter().any(|f| f == feature)
    }
}

fn u32_of(v: i32) -> u32 {
    u32::try_from(v).unwrap_or(0)
}

fn u64_of(v: i64) -> u64 {
    u64::try_from(v).unwrap_or(0)
}

fn i32_of(v: u32) -> i32 {
    i32::try_from(v).unwrap_or(i32::MAX)
}

fn i64_of(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

impl TryFrom<tenant::Model> for Tenant {
    type Error = StoreError;
    fn try_from(m: tenant::Model) -> Result<Self> {
        Ok(Tenant {
            id: m.id.into(),
            status: TenantStatus::parse(&m.status)
                .ok_or_else(|| corrupt("tenant.status", &m.status))?,
            name: m.name,
            quotas: Quotas {
                max_users: u32_of(m.max_users),
                max_sessions_per_user: u32_of(m.max_sessions_per_user),
                max_mcp_servers: u32_of(m.max_mcp_servers),
                workspace_quota_bytes: u64_of(m.workspace_quota_bytes),
                requests_per_minute: u32_of(m.requests_per_minute),
                tokens_per_day: u64_of(m.tokens_per_day),
                max_concurrent_runs: u32_of(m.max_concurrent_runs),
            },
            features_enabled: serde_json::from_value(m.features_enabled)
                .map_err(|e| corrupt("tenant.features_enabled", e))?,
            tool_permissions: m.tool_permissions,
            policy: match m.policy {
                None | Some(Value::Null) => TenantPolicy::default(),
                Some(v) => serde_json::from_value(v).map_err(|e| corrupt("tenant.policy", e))?,
            },
            custom_roles: match m.custom_roles {
                None | Some(Value::Null) => CustomRoles::new(),
                Some(v) => {
                    serde_json::from_value(v).map_err(|e| corrupt("tenant.custom_roles", e))?
                }
            },
            mcp_virtual_servers: match m.mcp_virtual_servers {
                None | Some(Value::Null) => McpVirtualServers::new(),
                Some(v) => serde_json::from_value(v)
                    .map_err(|e| corrupt("tenant.mcp_virtual_servers", e))?,
            },
            created_at: m.created_at,
            updated_at: m.updated_at,
        })
    }
}

#[derive(Debug, Clone, Default, PartialEq)]
pub struct NewTenant {
    pub name: String,
    pub quotas: Quotas,
    pub features_enabled: Vec<String>,
    pub tool_permissions: Option<Value>,
    pub policy: TenantPolicy,
}

/// A partial change; `None` leaves a field as it is.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TenantUpdate {
    pub name: Option<String>,
    pub status: Option<TenantStatus>,
    pub quotas: Option<Quotas>,
    pub features_enabled: Option<Vec<String>>,
    pub tool_permissions: Option<Option<Value>>,
    pub policy: Option<TenantPolicy>,
}

pub async fn create(
    db: &impl ConnectionTrait,
    _: &PlatformScope,
    new: NewTenant,
) -> Result<Tenant> {
    let ts = now();
    let q = new.quotas;
    let name = new.name.clone();
    let m = tenant::ActiveModel {
        id: Set(TenantId::new().0),
        name: Set(new.name),
        status: Set(TenantStatus::Active.as_str().to_string()),
        max_users: Set(i32_of(q.max_users)),
        max_sessions_per_user: Set(i32_of(q.max_sessions_per_user)),
        max_mcp_servers: Set(i32_of(q.max_mcp_servers)),
        workspace_quota_bytes: Set(i64_of(q.workspace_quota_bytes)),
        requests_per_minute: Set(i32_of(q.requests_per_minute)),
        tokens_per_day: Set(i64_of(q.tokens_per_day)),
        max_concurrent_runs: Set(i32_of(q.max_concurrent_runs)),
        features_enabled: Set(serde_json::json!(new.features_enabled)),
        tool_permissions: Set(new.tool_permissions),
        policy: Set(Some(new.policy.to_json())),
        custom_roles: Set(None),
        mcp_virtual_servers: Set(None),
        created_at: Set(ts),
        updated_at: Set(ts),
    }
    .insert(db)
    .await
    .map_err(|e| {
        StoreError::conflict_on_unique(e, || format!("a tenant named {name:?} already exists"))
    })?;
    m.try_into()
}

pub async fn get(
    db: &impl ConnectionTrait,
    _: &PlatformScope,
    id: TenantId,
) -> Result<Option<Tenant>> {
    tenant::Entity::find_by_id(id.0)
        .one(db)
        .await?
        .map(Tenant::try_from)
        .transpose()
}

/// A tenant reading itself.
pub async fn get_own(db: &impl ConnectionTrait, scope: &TenantScope) -> Result<Tenant> {
    tenant::Entity::find_by_id(scope.uuid())
        .one(db)
        .await?
        .map(Tenant::try_from)
        .transpose()?
        .ok_or_else(|| StoreError::NotFound(format!("tenant {}", scope.tenant_id())))
}

pub async fn get_by_name(
    db: &impl ConnectionTrait,
    _: &PlatformScope,
    name: &str,
) -> Result<Option<Tenant>> {
    tenant::Entity::find()
        .filter(tenant::Column::Name.eq(name))
        .one(db)
        .await?
        .map(Tenant::try_from)
        .transpose()
}

pub async fn list(
    db: &impl ConnectionTrait,
    _: &PlatformScope,
    page: PageRequest,
) -> Result<(Vec<Tenant>, u64)> {
    let total = tenant::Entity::find().count(db).await?;
    let items = tenant::Entity::find()
        .order_by_asc(tenant::Column::CreatedAt)
        .order_by_asc(tenant::Column::Id)
        .limit(page.limit)
        .offset(page.offset)
        .all(db)
        .await?
        .into_iter()
        .map(Tenant::try_from)
        .collect::<Result<_>>()?;
    Ok((items, total))
}

pub async fn update(
    db: &impl ConnectionTrait,
    _: &PlatformScope,
    id: TenantId,
    change: TenantUpdate,
) -> Result<Tenant> {
    let Some(current) = tenant::Entity::find_by_id(id.0).one(db).await? else {
        return Err(StoreError::NotFound(format!("tenant {id}")));
    };
    let mut am: tenant::ActiveModel = current.into();
    if let Some(name) = change.name.clone() {
        am.name = Set(name);
    }
    if let Some(s) = change.status {
        am.status = Set(s.as_str().to_string());
    }
    if let Some(q) = change.quotas {
        am.max_users = Set(i32_of(q.max_users));
        am.max_sessions_per_user = Set(i32_of(q.max_sessions_per_user));
        am.max_mcp_servers = Set(i32_of(q.max_mcp_servers));
        am.workspace_quota_bytes = Set(i64_of(q.workspace_quota_bytes));
        am.requests_per_minute = Set(i32_of(q.requests_per_minute));
        am.tokens_per_day = Set(i64_of(q.tokens_per_day));
        am.max_concurrent_runs = Set(i32_of(q.max_concurrent_runs));
    }
    if let Some(f) = change.features_enabled {
        am.features_enabled = Set(serde_json::json!(f));
    }
    if let Some(p) = change.tool_permissions {
        am.tool_permissions = Set(p);
    }
    if let Some(p) = change.policy {
        am.policy = Set(Some(p.to_json()));
    }
    am.updated_at = Set(now());
    let name = change.name.unwrap_or_default();
    am.update(db)
        .await
        .map_err(|e| {
            StoreError::conflict_on_unique(e, || format!("a tenant named {name:?} already exists"))
        })?
        .try_into()
}

/// A part of the tenant's row that its admins edit as a whole (a JSON column).
#[derive(Debug, Clone, Copy)]
pub enum TenantPart<'a> {
    CustomRoles(&'a CustomRoles),
    McpVirtualServers(&'a McpVirtualServers),
}

/// Replace a part of the tenant (its custom roles, its virtual servers) if the tenant was not
/// changed since `seen` (its `updated_at` when the caller read it): two admins editing at once
/// cannot lose each other's change. `Ok(None)`: it was changed meanwhile; read it again and
/// retry.
pub async fn set_part(
    db: &impl ConnectionTrait,
    scope: &TenantScope,
    seen: DateTime<Utc>,
    part: TenantPart<'_>,
) -> Result<Option<Tenant>> {
    let (column, value) = match part {
        TenantPart::CustomRoles(v) => (tenant::Column::CustomRoles, serde_json::to_value(v)),
        TenantPart::McpVirtualServers(v) => {
            (tenant::Column::McpVirtualServers, serde_json::to_value(v))
        }
    };
    let value = value.map_err(|e| StoreError::Invalid(e.to_string()))?;
    let done = tenant::Entity::update_many()
        .col_expr(column, Expr::value(value))
        .col_expr(tenant::Column::UpdatedAt, Expr::value(now()))
        .filter(tenant::Column::Id.eq(scope.uuid()))
        .filter(tenant::Column::UpdatedAt.eq(seen))
        .exec(db)
        .await?
        .rows_affected
        > 0;
    if !done {
        return Ok(None);
    }
    get_own(db, scope).await.map(Some)
}

/// Delete a tenant and every row it owns, atomically.
pub async fn delete<C>(db: &C, _: &PlatformScope, id: TenantId) -> Result<bool>
where
    C: ConnectionTrait + TransactionTrait,
{
    let txn = db.begin().await?;
    let t = id.0;
    macro_rules! wipe {
        ($($m:ident),+) => {$(
            $m::Entity::delete_many().filter($m::Column::TenantId.eq(t)).exec(&txn).await?;
        )+};
    }
    wipe!(
        webhook_delivery,
        webhook_secret,
        a2a_push_config,
        session_event,
        message,
        checkpoint,
        tool_call_log,
        approval,
        execution,
        session,
        memory,
        mcp_server,
        assistant,
        model_connection,
        remote_agent,
        data_source,
        profile,
        skill_file,
        skill,
        api_key,
        membership,
        user
    );
    let gone = tenant::Entity::delete_by_id(t)
        .exec(&txn)
        .await?
        .rows_affected
        > 0;
    txn.commit().await?;
    Ok(gone)
}
