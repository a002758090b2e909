//! Per-user MCP server configurations. Secrets arrive here already encrypted by the caller;
//! the store keeps them opaque.

use chrono::{DateTime, Utc};
use sea_orm::{
    ActiveModelTrait, ColumnTrait, ConnectionTrait, EntityTrait, PaginatorTrait, QueryFilter,
    QueryOrder, Set,
};

use agentry_schema::entities::mcp_server;
use agentry_schema::ids::{TenantId, UserId};

use crate::{Result, StoreError, TenantScope, corrupt, now};

#[derive(Debug, Clone, PartialEq)]
pub struct McpServerRow {
    pub id: uuid::Uuid,
    pub tenant_id: TenantId,
    pub user_id: UserId,
    pub name: String,
    /// `stdio` or `http`.
    pub transport: String,
    pub command: Option<String>,
    pub args: Vec<String>,
    pub url: Option<String>,
    pub env_encrypted: Option<String>,
    pub headers_encrypted: Option<String>,
    pub disabled: bool,
    pub timeout_secs: u32,
    /// The REST policy object (tool allow-list, rate limit, health check), as stored.
    pub policy: Option<serde_json::Value>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

impl TryFrom<mcp_server::Model> for McpServerRow {
    type Error = StoreError;
    fn try_from(m: mcp_server::Model) -> Result<Self> {
        Ok(McpServerRow {
            id: m.id,
            tenant_id: m.tenant_id.into(),
            user_id: m.user_id.into(),
            name: m.name,
            transport: m.transport,
            command: m.command,
            args: serde_json::from_value(m.args).map_err(|e| corrupt("mcp_server.args", e))?,
            url: m.url,
            env_encrypted: m.env_encrypted,
            headers_encrypted: m.headers_encrypted,
            disabled: m.disabled,
            timeout_secs: u32::try_from(m.timeout_secs).unwrap_or(0),
            policy: m.policy,
            created_at: m.created_at,
            updated_at: m.updated_at,
        })
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct NewMcpServer {
    pub user_id: UserId,
    pub name: String,
    pub transport: String,
    pub command: Option<String>,
    pub args: Vec<String>,
    pub url: Option<String>,
    pub env_encrypted: Option<String>,
    pub headers_encrypted: Option<String>,
    pub disabled: bool,
    pub timeout_secs: u32,
    pub policy: Option<serde_json::Value>,
}

fn active(scope: &TenantScope, id: uuid::Uuid, new: NewMcpServer) -> mcp_server::ActiveModel {
    let ts = now();
    mcp_server::ActiveModel {
        id: Set(id),
        tenant_id: Set(scope.uuid()),
        user_id: Set(new.user_id.0),
        name: Set(new.name),
        transport: Set(new.transport),
        command: Set(new.command),
        args: Set(serde_json::json!(new.args)),
        url: Set(new.url),
        env_encrypted: Set(new.env_encrypted),
        headers_encrypted: Set(new.headers_encrypted),
        disabled: Set(new.disabled),
        timeout_secs: Set(i32::try_from(new.timeout_secs).unwrap_or(i32::MAX)),
        policy: Set(new.policy),
        created_at: Set(ts),
        updated_at: Set(ts),
    }
}

/// Add a server. A duplicate name for the same user is a `Conflict`.
pub async fn create(
    db: &impl ConnectionTrait,
    scope: &TenantScope,
    new: NewMcpServer,
) -> Result<McpServerRow> {
    let name = new.name.clone();
    active(scope, uuid::Uuid::now_v7(), new)
        .insert(db)
        .await
        .map_err(|e| {
            StoreError::conflict_on_unique(e, || {
                format!("an MCP server named {name:?} already exists for this user")
            })
        })?
        .try_into()
}

/// Replace a server's configuration, keeping its id and creation time.
pub async fn replace(
    db: &impl ConnectionTrait,
    scope: &TenantScope,
    new: NewMcpServer,
) -> Result<McpServerRow> {
    let Some(current) = get_by_name(db, scope, new.user_id, &new.name).await? else {
        return Err(StoreError::NotFound(format!("MCP server {:?}", new.name)));
    };
    let mut am = active(scope, current.id, new);
    am.created_at = Set(current.created_at);
    am.update(db).await?.try_into()
}

pub async fn list_by_user(
    db: &impl ConnectionTrait,
    scope: &TenantScope,
    user_id: UserId,
) -> Result<Vec<McpServerRow>> {
    mcp_server::Entity::find()
        .filter(mcp_server::Column::TenantId.eq(scope.uuid()))
        .filter(mcp_server::Column::UserId.eq(user_id.0))
        .order_by_asc(mcp_server::Column::Name)
        .all(db)
        .await?
        .into_iter()
        .map(McpServerRow::try_from)
        .collect()
}

pub async fn get_by_name(
    db: &impl ConnectionTrait,
    scope: &TenantScope,
    user_id: UserId,
    name: &str,
) -> Result<Option<McpServerRow>> {
    mcp_server::Entity::find()
        .filter(mcp_server::Column::TenantId.eq(scope.uuid()))
        .filter(mcp_server::Column::UserId.eq(user_id.0))
        .filter(mcp_server::Column::Name.eq(name))
        .one(db)
        .await?
        .map(McpServerRow::try_from)
        .transpose()
}

pub async fn delete_by_name(
    db: &impl ConnectionTrait,
    scope: &TenantScope,
    user_id: UserId,
    name: &str,
) -> Result<bool> {
    Ok(mcp_server::Entity::delete_many()
        .filter(mcp_server::Column::TenantId.eq(scope.uuid()))
        .filter(mcp_server::Column::UserId.eq(user_id.0))
        .filter(mcp_server::Column::Name.eq(name))
        .exec(db)
        .await?
        .rows_affected
        > 0)
}

pub async fn count_by_user(
    db: &impl ConnectionTrait,
    scope: &TenantScope,
    user_id: UserId,
) -> Result<u64> {
    Ok(mcp_server::Entity::find()
        .filter(mcp_server::Column::TenantId.eq(scope.uuid()))
        .filter(mcp_server::Column::UserId.eq(user_id.0))
        .count(db)
        .await?)
}
