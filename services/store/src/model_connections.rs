//! Model connections: a tenant's own model endpoints (bring your own key, issue 16 item 4).
//! The API key is stored sealed (`agentry_sealing::SecretBox`, by the caller): this module
//! never sees it in the clear.

use chrono::{DateTime, Utc};
use sea_orm::{
    ActiveModelTrait, ColumnTrait, ConnectionTrait, EntityTrait, PaginatorTrait, QueryFilter,
    QueryOrder, Set,
};

use agentry_schema::entities::model_connection;
use agentry_schema::ids::{ModelConnectionId, TenantId};

use crate::{Result, StoreError, TenantScope, corrupt, now, sanitize_text};

/// What a tenant admin sets on a connection; the key already sealed.
#[derive(Clone, PartialEq, Eq)]
pub struct ConnectionSpec {
    pub name: String,
    /// `openai` or `anthropic`.
    pub provider: String,
    /// `None` = the provider's public endpoint.
    pub base_url: Option<String>,
    pub model: String,
    /// The sealed key (`v1:<key id>:…`); `None` = no key.
    pub api_key_sealed: Option<String>,
    pub timeout_secs: u32,
    pub max_retries: u32,
    /// The endpoint's embeddings model, for the tenant's memories; `None`: none.
    pub embedding_model: Option<String>,
}

impl std::fmt::Debug for ConnectionSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ConnectionSpec")
            .field("name", &self.name)
            .field("provider", &self.provider)
            .field("base_url", &self.base_url)
            .field("model", &self.model)
            .field("api_key_set", &self.api_key_sealed.is_some())
            .field("timeout_secs", &self.timeout_secs)
            .field("max_retries", &self.max_retries)
            .field("embedding_model", &self.embedding_model)
            .finish()
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModelConnection {
    pub tenant_id: TenantId,
    pub id: ModelConnectionId,
    pub spec: ConnectionSpec,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

impl TryFrom<model_connection::Model> for ModelConnection {
    type Error = StoreError;
    fn try_from(m: model_connection::Model) -> Result<Self> {
        Ok(ModelConnection {
            tenant_id: m.tenant_id.into(),
            id: ModelConnectionId::try_from(m.id).map_err(|e| corrupt("model_connection.id", e))?,
            spec: ConnectionSpec {
                name: m.name,
                provider: m.provider,
                base_url: m.base_url,
                model: m.model,
                api_key_sealed: m.api_key_sealed,
                timeout_secs: u32::try_from(m.timeout_secs).unwrap_or(1),
                max_retries: u32::try_from(m.max_retries).unwrap_or(0),
                embedding_model: m.embedding_model,
            },
            created_at: m.created_at,
            updated_at: m.updated_at,
        })
    }
}

fn active(
    scope: &TenantScope,
    id: &ModelConnectionId,
    s: ConnectionSpec,
) -> model_connection::ActiveModel {
    let ts = now();
    model_connection::ActiveModel {
        tenant_id: Set(scope.uuid()),
        id: Set(id.to_string()),
        name: Set(sanitize_text(s.name)),
        provider: Set(s.provider),
        base_url: Set(s.base_url),
        model: Set(sanitize_text(s.model)),
        api_key_sealed: Set(s.api_key_sealed),
        timeout_secs: Set(i32::try_from(s.timeout_secs).unwrap_or(i32::MAX)),
        max_retries: Set(i32::try_from(s.max_retries).unwrap_or(i32::MAX)),
        embedding_model: Set(s.embedding_model),
        created_at: Set(ts),
        updated_at: Set(ts),
    }
}

pub async fn create(
    db: &impl ConnectionTrait,
    scope: &TenantScope,
    id: &ModelConnectionId,
    spec: ConnectionSpec,
) -> Result<ModelConnection> {
    active(scope, id, spec)
        .insert(db)
        .await
        .map_err(|e| {
            StoreError::conflict_on_unique(e, || format!("model connection {id:?} already exists"))
        })?
        .try_into()
}

pub async fn get(
    db: &impl ConnectionTrait,
    scope: &TenantScope,
    id: &ModelConnectionId,
) -> Result<Option<ModelConnection>> {
    model_connection::Entity::find_by_id((scope.uuid(), id.to_string()))
        .one(db)
        .await?
        .map(ModelConnection::try_from)
        .transpose()
}

/// The tenant's connections, by id.
pub async fn list(db: &impl ConnectionTrait, scope: &TenantScope) -> Result<Vec<ModelConnection>> {
    model_connection::Entity::find()
        .filter(model_connection::Column::TenantId.eq(scope.uuid()))
        .order_by_asc(model_connection::Column::Id)
        .all(db)
        .await?
        .into_iter()
        .map(ModelConnection::try_from)
        .collect()
}

pub async fn count(db: &impl ConnectionTrait, scope: &TenantScope) -> Result<u64> {
    Ok(model_connection::Entity::find()
        .filter(model_connection::Column::TenantId.eq(scope.uuid()))
        .count(db)
        .await?)
}

pub async fn update(
    db: &impl ConnectionTrait,
    scope: &TenantScope,
    id: &ModelConnectionId,
    spec: ConnectionSpec,
) -> Result<ModelConnection> {
    let Some(current) = model_connection::Entity::find_by_id((scope.uuid(), id.to_string()))
        .one(db)
        .await?
    else {
        return Err(StoreError::NotFound(format!("model connection {id}")));
    };
    let mut am = active(scope, id, spec);
    am.created_at = Set(current.created_at);
    am.update(db).await?.try_into()
}

pub async fn delete(
    db: &impl ConnectionTrait,
    scope: &TenantScope,
    id: &ModelConnectionId,
) -> Result<bool> {
    Ok(
        model_connection::Entity::delete_by_id((scope.uuid(), id.to_string()))
            .exec(db)
            .await?
            .rows_affected
            > 0,
    )
}
