//! Assistants: a tenant's configured agents (system prompt, model, tools, approval policy,
//! limits). Every tenant has `default`.

use chrono::{DateTime, Utc};
use sea_orm::{
    ActiveModelTrait, ColumnTrait, ConnectionTrait, EntityTrait, QueryFilter, QueryOrder, Set,
};
use serde::{Deserialize, Serialize};

use agentry_schema::entities::assistant;
use agentry_schema::ids::{AssistantId, ModelConnectionId, ProfileId, TenantId};

use crate::{Result, StoreError, TenantScope, corrupt, now, sanitize_text};

/// Everything about an assistant that an admin can set. `None` fields are inherited from the
/// assistant's profile (see `agentry_actors::profiles`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AssistantSpec {
    pub name: String,
    pub description: String,
    /// A system prompt template; `None` = the profile's.
    pub system_prompt: Option<String>,
    pub provider: Option<String>,
    pub model: Option<String>,
    /// Tool names or `service:*` patterns; `None` = the profile's.
    pub tools: Option<Vec<String>>,
    /// Tools that always need approval, on top of the high-risk defaults; `None` = the
    /// profile's.
    pub interrupt_on: Option<Vec<String>>,
    pub auto_approve: bool,
    /// A built-in profile or one of the tenant's.
    pub profile: ProfileId,
    /// `None` = the profile's.
    pub recursion_limit: Option<u32>,
    /// `None` = the profile's.
    pub timeout_secs: Option<u32>,
    pub max_retries: u32,
    /// One of the tenant's model connections; `None` = the platform's model.
    pub model_connection: Option<ModelConnectionId>,
    /// The skills the assistant sees: `None` = every skill the user sees, `Some([])` = none,
    /// else these names.
    pub skills: Option<Vec<String>>,
}

/// The profile every assistant has unless it names another.
pub fn general_profile() -> ProfileId {
    ProfileId::try_from("general").unwrap_or_else(|_| unreachable!("`general` is a slug"))
}

impl Default for AssistantSpec {
    fn default() -> Self {
        AssistantSpec {
            name: "Default assistant".into(),
            description: "A general assistant with the built-in tools.".into(),
            system_prompt: None,
            provider: None,
            model: None,
            tools: None,
            interrupt_on: None,
            auto_approve: false,
            profile: general_profile(),
            recursion_limit: None,
            timeout_secs: None,
            max_retries: 3,
            model_connection: None,
            skills: None,
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct Assistant {
    pub tenant_id: TenantId,
    pub id: AssistantId,
    pub spec: AssistantSpec,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

impl TryFrom<assistant::Model> for Assistant {
    type Error = StoreError;
    fn try_from(m: assistant::Model) -> Result<Self> {
        Ok(Assistant {
            tenant_id: m.tenant_id.into(),
            id: AssistantId::try_from(m.id).map_err(|e| corrupt("assistant.id", e))?,
            spec: AssistantSpec {
                name: m.name,
                description: m.description,
                system_prompt: Some(m.system_prompt).filter(|p| !p.is_empty()),
                provider: m.provider,
                model: m.model,
                tools: m
                    .tools
                    .map(serde_json::from_value)
                    .transpose()
                    .map_err(|e| corrupt("assistant.tools", e))?,
                interrupt_on: serde_json::from_value(m.interrupt_on)
                    .map_err(|e| corrupt("assistant.interrupt_on", e))?,
                auto_approve: m.auto_approve,
                profile: ProfileId::try_from(m.profile.as_str())
                    .map_err(|e| corrupt("assistant.profile", e))?,
                recursion_limit: u32::try_from(m.recursion_limit).ok().filter(|n| *n > 0),
                timeout_secs: u32::try_from(m.timeout_secs).ok().filter(|n| *n > 0),
                max_retries: u32::try_from(m.max_retries).unwrap_or(0),
                model_connection: m
                    .model_connection
                    .map(ModelConnectionId::try_from)
                    .transpose()
                    .map_err(|e| corrupt("assistant.model_connection", e))?,
                skills: m
                    .skills
                    .filter(|v| !v.is_null())
                    .map(serde_json::from_value)
                    .transpose()
                    .map_err(|e| corrupt("assistant.skills", e))?,
            },
            created_at: m.created_at,
            updated_at: m.updated_at,
        })
    }
}

fn active(scope: &TenantScope, id: &AssistantId, s: AssistantSpec) -> assistant::ActiveModel {
    let ts = now();
    assistant::ActiveModel {
        tenant_id: Set(scope.uuid()),
        id: Set(id.to_string()),
        name: Set(sanitize_text(s.name)),
        description: Set(sanitize_text(s.description)),
        system_prompt: Set(sanitize_text(s.system_prompt.unwrap_or_default())),
        provider: Set(s.provider),
        model: Set(s.model),
        tools: Set(s.tools.map(|t| serde_json::json!(t))),
        interrupt_on: Set(serde_json::json!(s.interrupt_on)),
        auto_approve: Set(s.auto_approve),
        profile: Set(s.profile.to_string()),
        recursion_limit: Set(s
            .recursion_limit
            .map_or(0, |n| i32::try_from(n).unwrap_or(i32::MAX))),
        timeout_secs: Set(s
            .timeout_secs
            .map_or(0, |n| i32::try_from(n).unwrap_or(i32::MAX))),
        max_retries: Set(i32::try_from(s.max_retries).unwrap_or(i32::MAX)),
        model_connection: Set(s.model_connection.map(|c| c.to_string())),
        skills: Set(s.skills.map(|t| serde_json::json!(t))),
        created_at: Set(ts),
        updated_at: Set(ts),
    }
}

pub async fn create(
    db: &impl ConnectionTrait,
    scope: &TenantScope,
    id: &AssistantId,
    spec: AssistantSpec,
) -> Result<Assistant> {
    active(scope, id, spec)
        .insert(db)
        .await
        .map_err(|e| {
            StoreError::conflict_on_unique(e, || format!("assistant {id:?} already exists"))
        })?
        .try_into()
}

pub async fn get(
    db: &impl ConnectionTrait,
    scope: &TenantScope,
    id: &AssistantId,
) -> Result<Option<Assistant>> {
    assistant::Entity::find_by_id((scope.uuid(), id.to_string()))
        .one(db)
        .await?
        .map(Assistant::try_from)
        .transpose()
}

pub async fn list(db: &impl ConnectionTrait, scope: &TenantScope) -> Result<Vec<Assistant>> {
    assistant::Entity::find()
        .filter(assistant::Column::TenantId.eq(scope.uuid()))
        .order_by_asc(assistant::Column::Id)
        .all(db)
        .await?
        .into_iter()
        .map(Assistant::try_from)
        .collect()
}

pub async fn update(
    db: &impl ConnectionTrait,
    scope: &TenantScope,
    id: &AssistantId,
    spec: AssistantSpec,
) -> Result<Assistant> {
    let Some(current) = assistant::Entity::find_by_id((scope.uuid(), id.to_string()))
        .one(db)
        .await?
    else {
        return Err(StoreError::NotFound(format!("assistant {id}")));
    };
    let mut am = active(scope, id, spec);
    am.created_at = Set(current.created_at);
    am.update(db).await?.try_into()
}

/// Delete an assistant. `default` cannot be deleted: every tenant keeps one.
pub async fn delete(
    db: &impl ConnectionTrait,
    scope: &TenantScope,
    id: &AssistantId,
) -> Result<bool> {
    if id.as_str() == AssistantId::DEFAULT {
        return Err(StoreError::Invalid(
            "the default assistant cannot be deleted; update it instead".into(),
        ));
    }
    Ok(
        assistant::Entity::delete_by_id((scope.uuid(), id.to_string()))
            .exec(db)
            .await?
            .rows_affected
            > 0,
    )
}

/// Create `default` with `spec` unless it exists. Returns the assistant either way.
pub async fn ensure_default(
    db: &impl ConnectionTrait,
    scope: &TenantScope,
    spec: AssistantSpec,
) -> Result<Assistant> {
    let id = AssistantId::default_assistant();
    if let Some(a) = get(db, scope, &id).await? {
        return Ok(a);
    }
    match create(db, scope, &id, spec).await {
        Ok(a) => Ok(a),
        // Lost a race with another request: read the winner's.
        Err(StoreError::Conflict(_)) => get(db, scope, &id)
            .await?
            .ok_or_else(|| StoreError::NotFound("assistant default".into())),
        Err(e) => Err(e),
    }
}

/// The tenant's assistants that use `profile` (a profile in use cannot be deleted).
pub async fn using_profile(
    db: &impl ConnectionTrait,
    scope: &TenantScope,
    profile: &ProfileId,
) -> Result<Vec<AssistantId>> {
    assistant::Entity::find()
        .filter(assistant::Column::TenantId.eq(scope.uuid()))
        .filter(assistant::Column::Profile.eq(profile.as_str()))
        .order_by_asc(assistant::Column::Id)
        .all(db)
        .await?
        .into_iter()
        .map(|m| AssistantId::try_from(m.id).map_err(|e| corrupt("assistant.id", e)))
        .collect()
}

/// The tenant's assistants that use the model connection `id` (one in use cannot be deleted).
pub async fn using_connection(
    db: &impl ConnectionTrait,
    scope: &TenantScope,
    id: &ModelConnectionId,
) -> Result<Vec<AssistantId>> {
    assistant::Entity::find()
        .filter(assistant::Column::TenantId.eq(scope.uuid()))
        .filter(assistant::Column::ModelConnection.eq(id.as_str()))
        .order_by_asc(assistant::Column::Id)
        .all(db)
        .await?
        .into_iter()
        .map(|m| AssistantId::try_from(m.id).map_err(|e| corrupt("assistant.id", e)))
        .collect()
}
