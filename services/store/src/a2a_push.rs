//! A2A push-notification configs (issue 27 item 4, docs/a2a.md): one row per tenant, task and
//! config id. The token and credentials arrive sealed (`agentry_sealing::SecretBox`, by the
//! caller): this module never sees them in clear. Whose task it is the caller checks (the task's
//! run); a row records its user too.

use chrono::{DateTime, Utc};
use sea_orm::{
    ActiveModelTrait, ColumnTrait, ConnectionTrait, EntityTrait, QueryFilter, QueryOrder,
    QuerySelect, Set,
};

use agentry_schema::entities::a2a_push_config as row;
use agentry_schema::ids::{RunId, TenantId, UserId};

use crate::{Result, TenantScope, now};

/// A stored config.
#[derive(Clone, PartialEq, Eq)]
pub struct PushConfig {
    pub tenant_id: TenantId,
    pub task_id: RunId,
    pub id: String,
    pub user_id: UserId,
    pub url: String,
    pub token_sealed: Option<String>,
    pub auth_scheme: Option<String>,
    pub credentials_sealed: Option<String>,
    pub created_at: DateTime<Utc>,
}

impl std::fmt::Debug for PushConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PushConfig")
            .field("task_id", &self.task_id)
            .field("id", &self.id)
            .field("url", &self.url)
            .field("auth_scheme", &self.auth_scheme)
            .finish_non_exhaustive()
    }
}

fn of(m: row::Model) -> PushConfig {
    PushConfig {
        tenant_id: TenantId(m.tenant_id),
        task_id: RunId(m.task_id),
        id: m.id,
        user_id: UserId(m.user_id),
        url: m.url,
        token_sealed: m.token_sealed,
        auth_scheme: m.auth_scheme,
        credentials_sealed: m.credentials_sealed,
        created_at: m.created_at,
    }
}

/// What a new (or replacing) config holds; its tenant is the scope's.
#[derive(Clone)]
pub struct NewPushConfig<'a> {
    pub task_id: RunId,
    pub id: &'a str,
    pub user_id: UserId,
    pub url: &'a str,
    pub token_sealed: Option<String>,
    pub auth_scheme: Option<String>,
    pub credentials_sealed: Option<String>,
}

fn find(scope: &TenantScope, task: RunId) -> sea_orm::Select<row::Entity> {
    row::Entity::find()
        .filter(row::Column::TenantId.eq(scope.uuid()))
        .filter(row::Column::TaskId.eq(task.0))
}

/// Store `c`, replacing a config of the same task and id.
pub async fn put(
    db: &impl ConnectionTrait,
    scope: &TenantScope,
    c: NewPushConfig<'_>,
) -> Result<PushConfig> {
    let existing = find(scope, c.task_id)
        .filter(row::Column::Id.eq(c.id))
        .one(db)
        .await?;
    let created_at = existing.as_ref().map(|m| m.created_at).unwrap_or_else(now);
    let am = row::ActiveModel {
        tenant_id: Set(scope.uuid()),
        task_id: Set(c.task_id.0),
        id: Set(c.id.to_string()),
        user_id: Set(c.user_id.as_uuid()),
        url: Set(c.url.to_string()),
        token_sealed: Set(c.token_sealed),
        auth_scheme: Set(c.auth_scheme),
        credentials_sealed: Set(c.credentials_sealed),
        created_at: Set(created_at),
    };
    let m = match existing {
        Some(_) => am.update(db).await?,
        None => am.insert(db).await?,
    };
    Ok(of(m))
}

pub async fn get(
    db: &impl ConnectionTrait,
    scope: &TenantScope,
    task: RunId,
    id: &str,
) -> Result<Option<PushConfig>> {
    Ok(find(scope, task)
        .filter(row::Column::Id.eq(id))
        .one(db)
        .await?
        .map(of))
}

/// A task's configs in id order: at most `limit`, after the id `after`.
pub async fn list(
    db: &impl ConnectionTrait,
    scope: &TenantScope,
    task: RunId,
    after: Option<&str>,
    limit: u64,
) -> Result<Vec<PushConfig>> {
    let mut q = find(scope, task);
    if let Some(after) = after {
        q = q.filter(row::Column::Id.gt(after));
    }
    Ok(q.order_by_asc(row::Column::Id)
        .limit(limit)
        .all(db)
        .await?
        .into_iter()
        .map(of)
        .collect())
}

/// Remove a config; whether there was one.
pub async fn delete(
    db: &impl ConnectionTrait,
    scope: &TenantScope,
    task: RunId,
    id: &str,
) -> Result<bool> {
    let r = row::Entity::delete_many()
        .filter(row::Column::TenantId.eq(scope.uuid()))
        .filter(row::Column::TaskId.eq(task.0))
        .filter(row::Column::Id.eq(id))
        .exec(db)
        .await?;
    Ok(r.rows_affected > 0)
}
