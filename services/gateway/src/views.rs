//! Domain values (the store's types) into the wire types of `agentry_schema::api`, and the
//! few enums back. Both sides are foreign to this crate, hence functions rather than `From`.
//! (`Role` and `TenantStatus` need none: both sides use `agentry_schema::tenancy`'s.)

use agentry_actors::ModelChoice;
use agentry_actors::profiles::{AgentConfig, ResolvedProfile};
use agentry_schema::api::{
    ApiKeyInfo, ApprovalInfo, AssistantInfo, AuditedToolCall, EffectiveAgent, ExecutionInfo,
    MessageInfo, ModelConnectionInfo, ProfileInfo, SessionInfo, TenantInfo, TenantQuotas,
    ToolCallInfo, UserInfo,
};
use agentry_store::api_keys::ApiKey;
use agentry_store::approvals::Approval;
use agentry_store::assistants::Assistant;
use agentry_store::executions::Execution;
use agentry_store::messages::Message;
use agentry_store::model_connections::ModelConnection;
use agentry_store::profiles::Profile;
use agentry_store::sessions::Session;
use agentry_store::tenants::{Quotas, Tenant};
use agentry_store::tool_calls::{AuditedCall, ToolCallLog};
use agentry_store::users::User;

/// A built-in profile (no timestamps) or a tenant's.
pub fn profile(p: ResolvedProfile, stored: Option<&Profile>) -> ProfileInfo {
    let s = p.spec;
    ProfileInfo {
        id: p.id.to_string(),
        builtin: p.builtin,
        name: s.name,
        description: s.description,
        system_prompt: s.system_prompt,
        tools: s.tools,
        interrupt_on: s.interrupt_on,
        recursion_limit: s.recursion_limit,
        timeout_secs: s.timeout_secs,
        created_at: stored.map(|p| p.created_at),
        updated_at: stored.map(|p| p.updated_at),
    }
}

pub fn stored_profile(p: Profile) -> ProfileInfo {
    let resolved = ResolvedProfile {
        id: p.id.clone(),
        builtin: false,
        spec: p.spec.clone(),
    };
    profile(resolved, Some(&p))
}

pub fn quotas(q: Quotas) -> TenantQuotas {
    TenantQuotas {
        max_users: q.max_users,
        max_sessions_per_user: q.max_sessions_per_user,
        max_mcp_servers: q.max_mcp_servers,
        workspace_quota_bytes: q.workspace_quota_bytes,
        requests_per_minute: q.requests_per_minute,
        tokens_per_day: q.tokens_per_day,
        max_concurrent_runs: q.max_concurrent_runs,
    }
}

pub fn tenant(t: Tenant) -> TenantInfo {
    TenantInfo {
        id: t.id.to_string(),
        name: t.name,
        status: t.status,
        quotas: quotas(t.quotas),
        features_enabled: t.features_enabled,
        tool_permissions: t.tool_permissions,
        policy: t.policy,
        created_at: t.created_at,
        updated_at: t.updated_at,
    }
}

pub fn user(u: User) -> UserInfo {
    UserInfo {
        id: u.id.to_string(),
        tenant_id: u.tenant_id.to_string(),
        name: u.name,
        role: u.role,
        custom_role: u.custom_role.map(|n| n.to_string()),
        disabled: u.disabled,
        created_at: u.created_at,
    }
}

pub fn api_key(k: ApiKey) -> ApiKeyInfo {
    ApiKeyInfo {
        id: k.id.to_string(),
        tenant_id: k.tenant_id.to_string(),
        user_id: k.user_id.to_string(),
        name: k.name,
        prefix: k.prefix,
        role: k.role,
        custom_role: k.custom_role.map(|n| n.to_string()),
        expires_at: k.expires_at,
        revoked_at: k.revoked_at,
        last_used_at: k.last_used_at,
        created_at: k.created_at,
    }
}

/// An assistant with its effective settings (its own over its profile's).
pub fn assistant(a: Assistant, effective: &AgentConfig) -> AssistantInfo {
    let s = a.spec;
    AssistantInfo {
        id: a.id.to_string(),
        name: s.name,
        description: s.description,
        system_prompt: s.system_prompt,
        provider: s.provider,
        model: s.model,
        tools: s.tools,
        skills: s.skills,
        interrupt_on: s.interrupt_on,
        auto_approve: s.auto_approve,
        profile: s.profile.to_string(),
        recursion_limit: s.recursion_limit,
        timeout_secs: s.timeout_secs,
        max_retries: s.max_retries,
        model_connection: s.model_connection.map(|c| c.to_string()),
        effective: EffectiveAgent {
            profile: effective.profile.to_string(),
            system_prompt: effective.system_prompt.clone(),
            tools: effective.tools.clone(),
            interrupt_on: effective.interrupt_on.clone(),
            auto_approve: effective.auto_approve,
            recursion_limit: effective.recursion_limit,
            timeout_secs: effective.timeout_secs,
            // What its model calls get: a model connection's own `max_retries` caps the
            // assistant's.
            max_retries: match &effective.model {
                ModelChoice::Connection(c) => effective.max_retries.min(c.spec.max_retries),
                _ => effective.max_retries,
            },
            model_connection: match &effective.model {
                ModelChoice::Platform => None,
                ModelChoice::Connection(c) => Some(c.id.to_string()),
                ModelChoice::Missing(id) => Some(id.to_string()),
            },
        },
        created_at: a.created_at,
        updated_at: a.updated_at,
    }
}

pub fn session(s: Session) -> SessionInfo {
    SessionInfo {
        session_id: s.id.to_string(),
        user_id: s.user_id.to_string(),
        assistant_id: s.assistant_id.to_string(),
        state: s.state.as_str().to_string(),
        metadata: s.metadata,
        auto_approve: s.auto_approve,
        created_at: s.created_at,
        last_active: s.last_active,
    }
}

pub fn message(m: Message) -> MessageInfo {
    MessageInfo {
        id: m.id,
        session_id: m.session_id.to_string(),
        run_id: m.run_id.map(|r| r.to_string()),
        role: m.role.as_str().to_string(),
        content: m.content,
        tool_calls: m.tool_calls,
        tool_call_id: m.tool_call_id,
        created_at: m.created_at,
    }
}

pub fn execution(e: Execution) -> ExecutionInfo {
    ExecutionInfo {
        id: e.id.to_string(),
        session_id: e.session_id.to_string(),
        user_id: e.user_id.to_string(),
        assistant_id: e.assistant_id,
        input: e.input,
        status: e.status.as_str().to_string(),
        error: e.error,
        token_usage: e.token_usage,
        steps: e.steps,
        trace_id: e.trace_id,
        started_at: e.started_at,
        completed_at: e.completed_at,
        updated_at: e.updated_at,
        parent_execution_id: e.parent_execution_id.map(|p| p.to_string()),
        parent_tool_call_id: e.parent_tool_call_id,
    }
}

pub fn tool_call(c: ToolCallLog) -> ToolCallInfo {
    ToolCallInfo {
        id: c.id.to_string(),
        tool_call_id: c.tool_call_id,
        tool_name: c.tool_name,
        input: c.input,
        output: c.output,
        error: c.error,
        duration_ms: c.duration_ms,
        approved: c.approved,
        approved_by: c.approved_by.map(|u| u.to_string()),
        created_at: c.created_at,
    }
}

pub fn audited_call(a: AuditedCall) -> AuditedToolCall {
    let c = a.call;
    AuditedToolCall {
        id: c.id.to_string(),
        execution_id: c.execution_id.to_string(),
        session_id: c.session_id.to_string(),
        user_id: a.user_id.to_string(),
        assistant_id: a.assistant_id,
        tool_call_id: c.tool_call_id,
        tool_name: c.tool_name,
        input: c.input,
        output: c.output,
        error: c.error,
        duration_ms: c.duration_ms,
        approved: c.approved,
        approved_by: c.approved_by.map(|u| u.to_string()),
        created_at: c.created_at,
    }
}

pub fn approval(a: Approval) -> ApprovalInfo {
    ApprovalInfo {
        id: a.id.to_string(),
        kind: a.kind,
        tool_call_id: a.tool_call_id,
        request: a.request,
        status: a.status.as_str().to_string(),
        decision: a.decision,
        decided_by: a.decided_by.map(|u| u.to_string()),
        created_at: a.created_at,
        decided_at: a.decided_at,
    }
}

/// A tenant's model connection: the key never, only whether one is stored.
pub fn model_connection(c: ModelConnection) -> ModelConnectionInfo {
    let effective_base_url = c
        .spec
        .base_url
        .clone()
        .or_else(|| {
            c.spec
                .provider
                .parse::<agentry_llm::Provider>()
                .ok()
                .and_then(|p| p.default_base_url())
                .map(str::to_string)
        })
        .unwrap_or_default();
    ModelConnectionInfo {
        id: c.id.to_string(),
        name: c.spec.name,
        provider: c.spec.provider,
        base_url: c.spec.base_url,
        effective_base_url,
        model: c.spec.model,
        api_key_set: c.spec.api_key_sealed.is_some(),
        timeout_secs: c.spec.timeout_secs,
        max_retries: c.spec.max_retries,
        embedding_model: c.spec.embedding_model,
        created_at: c.created_at,
        updated_at: c.updated_at,
    }
}

pub fn data_source(
    s: agentry_store::data_sources::DataSource,
) -> agentry_schema::api::DataSourceInfo {
    agentry_schema::api::DataSourceInfo {
        id: s.id.to_string(),
        name: s.spec.name,
        engine: s.spec.engine,
        url: s.spec.url_redacted,
        password_set: s.spec.password_set,
        allowed_roles: s.spec.allowed_roles,
        catalog_cached_at: s.catalog.map(|(_, at)| at),
        created_at: s.created_at,
        updated_at: s.updated_at,
    }
}
