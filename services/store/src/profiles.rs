//! Profiles: a tenant's own agent profiles (a system prompt template, a default tool set,
//! approval defaults and limits). The built-in ones (`general`, `devops`, `sre`,
//! `orchestrator`) are not stored: they live in code (`agentry_actors::profiles`).

use chrono::{DateTime, Utc};
use sea_orm::{
    ActiveModelTrait, ColumnTrait, ConnectionTrait, EntityTrait, QueryFilter, QueryOrder, Set,
};
use serde::{Deserialize, Serialize};

use agentry_schema::entities::profile;
use agentry_schema::ids::{ProfileId, TenantId};

use crate::{Result, StoreError, TenantScope, corrupt, now, sanitize_text};

/// What a profile sets.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ProfileSpec {
    pub name: String,
    pub description: String,
    /// A template: `{{assistant_name}}`, `{{date}}` and `{{tools}}` are filled in at each run.
    pub system_prompt: String,
    /// Tool names or `service:tool` / `service:*` patterns; `None` = every tool.
    pub tools: Option<Vec<String>>,
    /// Tools that always need approval, on top of the tools' own policy.
    pub interrupt_on: Vec<String>,
    pub recursion_limit: u32,
    pub timeout_secs: u32,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Profile {
    pub tenant_id: TenantId,
    pub id: ProfileId,
    pub spec: ProfileSpec,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

impl TryFrom<profile::Model> for Profile {
    type Error = StoreError;
    fn try_from(m: profile::Model) -> Result<Self> {
        Ok(Profile {
            tenant_id: m.tenant_id.into(),
            id: ProfileId::try_from(m.id).map_err(|e| corrupt("profile.id", e))?,
            spec: ProfileSpec {
                name: m.name,
                description: m.description,
                system_prompt: m.system_prompt,
                tools: m
                    .tools
                    .map(serde_json::from_value)
                    .transpose()
                    .map_err(|e| corrupt("profile.tools", e))?,
                interrupt_on: serde_json::from_value(m.interrupt_on)
                    .map_err(|e| corrupt("profile.interrupt_on", e))?,
                recursion_limit: u32::try_from(m.recursion_limit).unwrap_or(1),
                timeout_secs: u32::try_from(m.timeout_secs).unwrap_or(1),
            },
            created_at: m.created_at,
            updated_at: m.updated_at,
        })
    }
}

fn active(scope: &TenantScope, id: &ProfileId, s: ProfileSpec) -> profile::ActiveModel {
    let ts = now();
    profile::ActiveModel {
        tenant_id: Set(scope.uuid()),
        id: Set(id.to_string()),
        name: Set(sanitize_text(s.name)),
        description: Set(sanitize_text(s.description)),
        system_prompt: Set(sanitize_text(s.system_prompt)),
        tools: Set(s.tools.map(|t| serde_json::json!(t))),
        interrupt_on: Set(serde_json::json!(s.interrupt_on)),
        recursion_limit: Set(i32::try_from(s.recursion_limit).unwrap_or(i32::MAX)),
        timeout_secs: Set(i32::try_from(s.timeout_secs).unwrap_or(i32::MAX)),
        created_at: Set(ts),
        updated_at: Set(ts),
    }
}

pub async fn create(
    db: &impl ConnectionTrait,
    scope: &TenantScope,
    id: &ProfileId,
    spec: ProfileSpec,
) -> Result<Profile> {
    active(scope, id, spec)
        .insert(db)
        .await
        .map_err(|e| {
            StoreError::conflict_on_unique(e, || format!("profile {id:?} already exists"))
        })?
        .try_into()
}

pub async fn get(
    db: &impl ConnectionTrait,
    scope: &TenantScope,
    id: &ProfileId,
) -> Result<Option<Profile>> {
    profile::Entity::find_by_id((scope.uuid(), id.to_string()))
        .one(db)
        .await?
        .map(Profile::try_from)
        .transpose()
}

/// The tenant's profiles, by id.
pub async fn list(db: &impl ConnectionTrait, scope: &TenantScope) -> Result<Vec<Profile>> {
    profile::Entity::find()
        .filter(profile::Column::TenantId.eq(scope.uuid()))
        .order_by_asc(profile::Column::Id)
        .all(db)
        .await?
        .into_iter()
        .map(Profile::try_from)
        .collect()
}

pub async fn update(
    db: &impl ConnectionTrait,
    scope: &TenantScope,
    id: &ProfileId,
    spec: ProfileSpec,
) -> Result<Profile> {
    let Some(current) = profile::Entity::find_by_id((scope.uuid(), id.to_string()))
        .one(db)
        .await?
    else {
        return Err(StoreError::NotFound(format!("profile {id}")));
    };
    let mut am = active(scope, id, spec);
    am.created_at = Set(current.created_at);
    am.update(db).await?.try_into()
}

pub async fn delete(
    db: &impl ConnectionTrait,
    scope: &TenantScope,
    id: &ProfileId,
) -> Result<bool> {
    Ok(
        profile::Entity::delete_by_id((scope.uuid(), id.to_string()))
            .exec(db)
            .await?
            .rows_affected
            > 0,
    )
}
