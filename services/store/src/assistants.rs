//! Assistants: a tenant's configured agents (system prompt, model, tools, approval policy,
//! limits). Every tenant has `default`.

use chrono::{DateTime, Utc};
use sea_orm::{
    ActiveModelTrait, ColumnTrait, ConnectionTrait, EntityTrait, QueryFilter, QueryOrder, Set,
};
use serde::{Deserialize, Serialize};

use agentry_schema::entities::assistant;
use agentry_schema::ids::{AssistantId, TenantId};

use crate::{Result, StoreError, TenantScope, corrupt, now, sanitize_text};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Profile {
    General,
    Devops,
    Sre,
    Orchestrator,
}

impl Profile {
    pub fn as_str(self) -> &'static str {
        match self {
            Profile::General => "general",
            Profile::Devops => "devops",
            Profile::Sre => "sre",
            Profile::Orchestrator => "orchestrator",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "general" => Profile::General,
            "devops" => Profile::Devops,
            "sre" => Profile::Sre,
            "orchestrator" => Profile::Orchestrator,
            _ => return None,
        })
    }
}

/// Everything about an assistant that an admin can set.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AssistantSpec {
    pub name: String,
    pub description: String,
    pub system_prompt: String,
    pub provider: Option<String>,
    pub model: Option<String>,
    /// Tool names or `service:*` patterns; `None` = every built-in tool.
    pub tools: Option<Vec<String>>,
    /// Tools that always need approval, on top of the high-risk defaults.
    pub interrupt_on: Vec<String>,
    pub auto_approve: bool,
    pub profile: Profile,
    pub recursion_limit: u32,
    pub timeout_secs: u32,
    pub max_retries: u32,
}

impl Default for AssistantSpec {
    fn default() -> Self {
        AssistantSpec {
            name: "Default assistant".into(),
            description: "A general assistant with the built-in tools.".into(),
            system_prompt: "You are a helpful assistant. Use the tools when they help, and explain what you did.".into(),
            provider: None,
            model: None,
            tools: None,
            interrupt_on: Vec::new(),
            auto_approve: false,
            profile: Profile::General,
            recursion_limit: 25,
            timeout_secs: 600,
            max_retries: 3,
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
                system_prompt: m.system_prompt,
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
                profile: Profile::parse(&m.profile)
                    .ok_or_else(|| corrupt("assistant.profile", &m.profile))?,
                recursion_limit: u32::try_from(m.recursion_limit).unwrap_or(0),
                timeout_secs: u32::try_from(m.timeout_secs).unwrap_or(0),
                max_retries: u32::try_from(m.max_retries).unwrap_or(0),
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
        system_prompt: Set(sanitize_text(s.system_prompt)),
        provider: Set(s.provider),
        model: Set(s.model),
        tools: Set(s.tools.map(|t| serde_json::json!(t))),
        interrupt_on: Set(serde_json::json!(s.interrupt_on)),
        auto_approve: Set(s.auto_approve),
        profile: Set(s.profile.as_str().to_string()),
        recursion_limit: Set(i32::try_from(s.recursion_limit).unwrap_or(i32::MAX)),
        timeout_secs: Set(i32::try_from(s.timeout_secs).unwrap_or(i32::MAX)),
        max_retries: Set(i32::try_from(s.max_retries).unwrap_or(i32::MAX)),
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
