//! Remote A2A agents a tenant registered (issue 27, item 5): `task` may delegate to them. The
//! credential is stored sealed (`agentry_sealing::SecretBox`, by the caller): this module never
//! sees it in the clear.

use chrono::{DateTime, Utc};
use sea_orm::{
    ActiveModelTrait, ColumnTrait, ConnectionTrait, EntityTrait, PaginatorTrait, QueryFilter,
    QueryOrder, Set,
};

use agentry_schema::entities::remote_agent;
use agentry_schema::ids::{RemoteAgentId, TenantId};

use crate::{Result, StoreError, TenantScope, corrupt, now, sanitize_text};

/// What a registration stores: the card as checked, the credential already sealed.
#[derive(Clone, PartialEq, Eq)]
pub struct RemoteAgentSpec {
    pub name: String,
    pub description: String,
    pub url: String,
    pub endpoint_url: String,
    /// The card as fetched, JSON.
    pub card: String,
    /// `none`, `bearer` or `api_key`.
    pub auth_kind: String,
    pub auth_header: Option<String>,
    /// The sealed token or key (`v1:<key id>:…`); `None` for `none`.
    pub credential_sealed: Option<String>,
    pub timeout_secs: u32,
}

impl std::fmt::Debug for RemoteAgentSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RemoteAgentSpec")
            .field("name", &self.name)
            .field("url", &self.url)
            .field("endpoint_url", &self.endpoint_url)
            .field("auth_kind", &self.auth_kind)
            .field("auth_header", &self.auth_header)
            .field("credential_set", &self.credential_sealed.is_some())
            .field("timeout_secs", &self.timeout_secs)
            .finish()
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RemoteAgent {
    pub tenant_id: TenantId,
    pub id: RemoteAgentId,
    pub spec: RemoteAgentSpec,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

impl TryFrom<remote_agent::Model> for RemoteAgent {
    type Error = StoreError;
    fn try_from(m: remote_agent::Model) -> Result<Self> {
        Ok(RemoteAgent {
            tenant_id: m.tenant_id.into(),
            id: RemoteAgentId::try_from(m.id).map_err(|e| corrupt("remote_agent.id", e))?,
            spec: RemoteAgentSpec {
                name: m.name,
                description: m.description,
                url: m.url,
                endpoint_url: m.endpoint_url,
                card: m.card,
                auth_kind: m.auth_kind,
                auth_header: m.auth_header,
                credential_sealed: m.credential_sealed,
                timeout_secs: u32::try_from(m.timeout_secs).unwrap_or(1),
            },
            created_at: m.created_at,
            updated_at: m.updated_at,
        })
    }
}

pub async fn create(
    db: &impl ConnectionTrait,
    scope: &TenantScope,
    id: &RemoteAgentId,
    s: RemoteAgentSpec,
) -> Result<RemoteAgent> {
    let ts = now();
    remote_agent::ActiveModel {
        tenant_id: Set(scope.uuid()),
        id: Set(id.to_string()),
        name: Set(sanitize_text(s.name)),
        description: Set(sanitize_text(s.description)),
        url: Set(s.url),
        endpoint_url: Set(s.endpoint_url),
        card: Set(s.card),
        auth_kind: Set(s.auth_kind),
        auth_header: Set(s.auth_header),
        credential_sealed: Set(s.credential_sealed),
        timeout_secs: Set(i32::try_from(s.timeout_secs).unwrap_or(i32::MAX)),
        created_at: Set(ts),
        updated_at: Set(ts),
    }
    .insert(db)
    .await
    .map_err(|e| {
        StoreError::conflict_on_unique(e, || format!("remote agent {id:?} already exists"))
    })?
    .try_into()
}

pub async fn get(
    db: &impl ConnectionTrait,
    scope: &TenantScope,
    id: &RemoteAgentId,
) -> Result<Option<RemoteAgent>> {
    remote_agent::Entity::find_by_id((scope.uuid(), id.to_string()))
        .one(db)
        .await?
        .map(RemoteAgent::try_from)
        .transpose()
}

/// The tenant's remote agents, by id.
pub async fn list(db: &impl ConnectionTrait, scope: &TenantScope) -> Result<Vec<RemoteAgent>> {
    remote_agent::Entity::find()
        .filter(remote_agent::Column::TenantId.eq(scope.uuid()))
        .order_by_asc(remote_agent::Column::Id)
        .all(db)
        .await?
        .into_iter()
        .map(RemoteAgent::try_from)
        .collect()
}

pub async fn count(db: &impl ConnectionTrait, scope: &TenantScope) -> Result<u64> {
    Ok(remote_agent::Entity::find()
        .filter(remote_agent::Column::TenantId.eq(scope.uuid()))
        .count(db)
        .await?)
}

pub async fn delete(
    db: &impl ConnectionTrait,
    scope: &TenantScope,
    id: &RemoteAgentId,
) -> Result<bool> {
    Ok(
        remote_agent::Entity::delete_by_id((scope.uuid(), id.to_string()))
            .exec(db)
            .await?
            .rows_affected
            > 0,
    )
}
