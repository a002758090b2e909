//! REST request and response bodies (DESIGN §6). Request DTOs are never bound straight to
//! database entities; the gateway converts them into domain types first.

use chrono::{DateTime, NaiveDate, Utc};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::events::{ExecutionEvent, TokenUsage};
use crate::policy::TenantPolicy;
use crate::tenancy::{Role, TenantStatus};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct ChatRequest {
    pub message: String,
    /// Continue this session; a new one is created when absent.
    #[serde(default)]
    pub session_id: Option<String>,
    /// The assistant for a new session (default: `default`).
    #[serde(default)]
    pub assistant_id: Option<String>,
    /// Queue behind an active run instead of failing with `run_in_progress`.
    #[serde(default)]
    pub enqueue: bool,
}

/// A function tool a client declares for one run (the OpenAI Responses API's `tools: [{"type":
/// "function"}]`): offered to the model beside the assistant's own tools; a call to it asks the
/// client, which runs it and answers with the output. Nothing of it runs on the server.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ClientTool {
    pub name: String,
    #[serde(default)]
    pub description: String,
    /// The JSON Schema of its arguments (an object schema).
    pub parameters: Value,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ChatResponse {
    pub session_id: String,
    pub run_id: String,
    #[cfg_attr(feature = "openapi", schema(value_type = Vec<Object>))]
    pub events: Vec<ExecutionEvent>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct CreateSessionRequest {
    #[serde(default)]
    pub assistant_id: Option<String>,
    #[serde(default)]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<Object>))]
    pub metadata: Option<Value>,
    /// Skip approvals for this session's tool calls: a tenant admin's right (a member gets 403
    /// `forbidden` unless the tenant policy has `members_may_auto_approve`).
    #[serde(default)]
    pub auto_approve: Option<bool>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct SessionInfo {
    pub session_id: String,
    pub user_id: String,
    pub assistant_id: String,
    /// `idle`, `running`, `waiting_approval` or `closed`.
    pub state: String,
    #[cfg_attr(feature = "openapi", schema(value_type = Object))]
    pub metadata: Value,
    /// Tool calls run without asking for approval. Honoured only while the session's owner has
    /// the right (a tenant admin, or a member under `members_may_auto_approve`).
    #[serde(default)]
    pub auto_approve: bool,
    pub created_at: DateTime<Utc>,
    pub last_active: DateTime<Utc>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct MessageInfo {
    pub id: i64,
    pub session_id: String,
    pub run_id: Option<String>,
    /// `user`, `assistant`, `tool` or `system`.
    pub role: String,
    pub content: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<Object>))]
    pub tool_calls: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_call_id: Option<String>,
    pub created_at: DateTime<Utc>,
}

/// A page of a list.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Page<T> {
    pub items: Vec<T>,
    pub total: u64,
    pub limit: u64,
    pub offset: u64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct HealthResponse {
    /// `ok`, or `degraded` when a dependency is down.
    pub status: String,
    pub version: String,
    /// Seconds since the process started.
    pub uptime: f64,
    /// How tenant programs (`execute`, stdio MCP servers) run.
    pub sandbox: SandboxHealth,
    /// `single` (no Redis: this server owns the database) or `cluster` (one replica of
    /// several, coordinated over Redis).
    pub mode: String,
    /// This server's replica id (`cluster.replica_id`, or generated at start).
    pub replica_id: String,
}

/// The sandbox in use (docs/security.md).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct SandboxHealth {
    /// `auto`, `bwrap`, `landlock` or `none`, as configured.
    pub configured: String,
    /// The backend in use: `bwrap`, `landlock`, `none` (no isolation), or null when programs
    /// cannot run on this host (`error` says why).
    pub backend: Option<String>,
    /// Why programs cannot run, or why a preferred backend was skipped.
    pub error: Option<String>,
    /// How the process limit is enforced: `cgroup`, or `rlimit (…)` (per uid, not binding root).
    pub process_limit: String,
    /// Network egress by default.
    pub egress: bool,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ReadinessResponse {
    pub status: String,
    /// Each dependency and whether it answered: `{"database": "ok", "redis": "ok"}`.
    #[cfg_attr(feature = "openapi", schema(value_type = Object))]
    pub checks: Value,
}

// ---------------------------------------------------------------------------------------------
// Tenancy, users, keys, assistants, executions: the gateway's REST surface beyond chat.
// Request bodies refuse unknown fields so a misspelt field is a 422 naming it, not a silent
// default.
// ---------------------------------------------------------------------------------------------

/// Absent → `None`, `null` → `Some(None)`, a value → `Some(Some(v))`: lets a PATCH tell "leave
/// it" from "clear it".
pub(crate) fn double_option<'de, D, T>(d: D) -> Result<Option<Option<T>>, D::Error>
where
    D: serde::Deserializer<'de>,
    T: Deserialize<'de>,
{
    Option::<T>::deserialize(d).map(Some)
}

/// Who the key in use belongs to (`GET /api/v1/me`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct WhoAmI {
    /// `platform_admin` or `tenant`.
    pub kind: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tenant_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tenant_name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user_id: Option<String>,
    /// The effective role: admin only when both the user and the key are admin.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub role: Option<Role>,
    /// The caller's custom role (then `role` is `member`): its tool patterns and REST areas.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub custom_role: Option<String>,
    /// The REST areas a custom role may use (every other answers 403); absent for the
    /// built-in roles, which may use them all. A client shows only what the caller may use.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub areas: Option<Vec<crate::roles::RestArea>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key_id: Option<String>,
}

/// A tenant's limits; 0 means "no limit".
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct TenantQuotas {
    pub max_users: u32,
    pub max_sessions_per_user: u32,
    pub max_mcp_servers: u32,
    pub workspace_quota_bytes: u64,
    pub requests_per_minute: u32,
    pub tokens_per_day: u64,
    pub max_concurrent_runs: u32,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct TenantInfo {
    pub id: String,
    pub name: String,
    pub status: TenantStatus,
    #[serde(flatten)]
    pub quotas: TenantQuotas,
    pub features_enabled: Vec<String>,
    /// Tool permissions per role (`{"member": ["files:*"], "admin": ["*:*"]}`); null = defaults.
    #[cfg_attr(feature = "openapi", schema(value_type = Option<Object>))]
    pub tool_permissions: Option<Value>,
    /// Role rights and sandbox limits (every field shown, defaults filled in).
    #[serde(default)]
    pub policy: TenantPolicy,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

/// `POST /admin/tenants`. Quotas left out get the defaults.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct CreateTenantRequest {
    #[cfg_attr(feature = "openapi", schema(min_length = 1, max_length = 128))]
    pub name: String,
    #[serde(default)]
    #[cfg_attr(feature = "openapi", schema(maximum = 2147483647))]
    pub max_users: Option<u32>,
    #[serde(default)]
    #[cfg_attr(feature = "openapi", schema(maximum = 2147483647))]
    pub max_sessions_per_user: Option<u32>,
    #[serde(default)]
    #[cfg_attr(feature = "openapi", schema(maximum = 2147483647))]
    pub max_mcp_servers: Option<u32>,
    #[serde(default)]
    pub workspace_quota_bytes: Option<u64>,
    #[serde(default)]
    #[cfg_attr(feature = "openapi", schema(maximum = 2147483647))]
    pub requests_per_minute: Option<u32>,
    #[serde(default)]
    pub tokens_per_day: Option<u64>,
    #[serde(default)]
    #[cfg_attr(feature = "openapi", schema(maximum = 2147483647))]
    pub max_concurrent_runs: Option<u32>,
    #[serde(default)]
    pub features_enabled: Option<Vec<String>>,
    #[serde(default)]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<Object>))]
    pub tool_permissions: Option<Value>,
    /// Role rights and sandbox limits; left out (or a field left out) = the defaults.
    #[serde(default)]
    pub policy: Option<TenantPolicy>,
}

/// `PUT /admin/tenants/{id}`: the whole tenant; what is left out returns to its default.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct ReplaceTenantRequest {
    #[cfg_attr(feature = "openapi", schema(min_length = 1, max_length = 128))]
    pub name: String,
    /// Default `active`.
    #[serde(default)]
    pub status: Option<TenantStatus>,
    #[serde(default)]
    #[cfg_attr(feature = "openapi", schema(maximum = 2147483647))]
    pub max_users: Option<u32>,
    #[serde(default)]
    #[cfg_attr(feature = "openapi", schema(maximum = 2147483647))]
    pub max_sessions_per_user: Option<u32>,
    #[serde(default)]
    #[cfg_attr(feature = "openapi", schema(maximum = 2147483647))]
    pub max_mcp_servers: Option<u32>,
    #[serde(default)]
    pub workspace_quota_bytes: Option<u64>,
    #[serde(default)]
    #[cfg_attr(feature = "openapi", schema(maximum = 2147483647))]
    pub requests_per_minute: Option<u32>,
    #[serde(default)]
    pub tokens_per_day: Option<u64>,
    #[serde(default)]
    #[cfg_attr(feature = "openapi", schema(maximum = 2147483647))]
    pub max_concurrent_runs: Option<u32>,
    #[serde(default)]
    pub features_enabled: Option<Vec<String>>,
    #[serde(default)]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<Object>))]
    pub tool_permissions: Option<Value>,
    /// Role rights and sandbox limits; left out (or a field left out) = the defaults.
    #[serde(default)]
    pub policy: Option<TenantPolicy>,
}

/// `PATCH /admin/tenants/{id}`: only the fields present change. `tool_permissions: null`
/// returns to the defaults.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct UpdateTenantRequest {
    #[serde(default)]
    #[cfg_attr(feature = "openapi", schema(min_length = 1, max_length = 128))]
    pub name: Option<String>,
    #[serde(default)]
    pub status: Option<TenantStatus>,
    #[serde(default)]
    #[cfg_attr(feature = "openapi", schema(maximum = 2147483647))]
    pub max_users: Option<u32>,
    #[serde(default)]
    #[cfg_attr(feature = "openapi", schema(maximum = 2147483647))]
    pub max_sessions_per_user: Option<u32>,
    #[serde(default)]
    #[cfg_attr(feature = "openapi", schema(maximum = 2147483647))]
    pub max_mcp_servers: Option<u32>,
    #[serde(default)]
    pub workspace_quota_bytes: Option<u64>,
    #[serde(default)]
    #[cfg_attr(feature = "openapi", schema(maximum = 2147483647))]
    pub requests_per_minute: Option<u32>,
    #[serde(default)]
    pub tokens_per_day: Option<u64>,
    #[serde(default)]
    #[cfg_attr(feature = "openapi", schema(maximum = 2147483647))]
    pub max_concurrent_runs: Option<u32>,
    #[serde(default)]
    pub features_enabled: Option<Vec<String>>,
    #[serde(
        default,
        deserialize_with = "double_option",
        skip_serializing_if = "Option::is_none"
    )]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<Object>))]
    pub tool_permissions: Option<Option<Value>>,
    /// A JSON merge patch (RFC 7396) of the policy: only the fields present change, a field
    /// set to `null` returns to its default, `"policy": null` resets the whole policy.
    #[serde(
        default,
        deserialize_with = "double_option",
        skip_serializing_if = "Option::is_none"
    )]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<TenantPolicy>))]
    pub policy: Option<Option<Value>>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct UserInfo {
    pub id: String,
    pub tenant_id: String,
    pub name: String,
    pub role: Role,
    /// The user's custom role, if any (then `role` is `member`).
    pub custom_role: Option<String>,
    pub disabled: bool,
    pub created_at: DateTime<Utc>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct CreateUserRequest {
    pub name: String,
    /// Default `member`.
    #[serde(default)]
    pub role: Option<Role>,
    /// A custom role of the tenant (`GET /api/v1/tenant/roles`); `role` must then be absent or
    /// `member`.
    #[serde(default)]
    pub custom_role: Option<String>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct UpdateUserRequest {
    /// Setting `admin` or `member` clears the custom role.
    #[serde(default)]
    pub role: Option<Role>,
    /// A custom role of the tenant, or `null` to go back to plain `member`.
    #[serde(
        default,
        deserialize_with = "double_option",
        skip_serializing_if = "Option::is_none"
    )]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<String>))]
    pub custom_role: Option<Option<String>>,
    /// A disabled user's keys answer 401 until enabled again.
    #[serde(default)]
    pub disabled: Option<bool>,
}

/// An API key as listed: never the key itself.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ApiKeyInfo {
    pub id: String,
    pub tenant_id: String,
    pub user_id: String,
    pub name: String,
    /// The visible start of the key (`agk_XXXXXXXX`).
    pub prefix: String,
    pub role: Role,
    /// The key's custom role, if any (then `role` is `member`).
    pub custom_role: Option<String>,
    pub expires_at: Option<DateTime<Utc>>,
    pub revoked_at: Option<DateTime<Utc>>,
    pub last_used_at: Option<DateTime<Utc>>,
    pub created_at: DateTime<Utc>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct CreateApiKeyRequest {
    pub user_id: String,
    pub name: String,
    /// Default: the user's role. May not exceed it.
    #[serde(default)]
    pub role: Option<Role>,
    /// A custom role for the key: the user's own, or any when the user is a tenant admin.
    #[serde(default)]
    pub custom_role: Option<String>,
    /// RFC 3339; must be in the future.
    #[serde(default)]
    pub expires_at: Option<DateTime<Utc>>,
}

/// A tenant's MCP virtual server (`/api/v1/tenant/mcp-virtual-servers`): a named subset of
/// the tools `/mcp` offers, served at `/mcp/{name}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct McpVirtualServerInfo {
    pub name: String,
    pub description: String,
    /// Tool patterns, as in roles: `service:tool`, `service:prefix*`, `service:*`, `*:*`, and
    /// denials with a leading `!`. A caller sees the tools their role allows and these match.
    pub tools: Vec<String>,
    /// The path MCP clients connect to: `/mcp/{name}`.
    pub path: String,
}

/// A virtual server's definition (`POST` and `PUT /api/v1/tenant/mcp-virtual-servers…`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct McpVirtualServerRequest {
    /// Required on `POST` (1–64 of `a-z 0-9 - _`); on `PUT` it must be absent or the path's.
    #[serde(default)]
    pub name: Option<String>,
    #[serde(default)]
    pub description: Option<String>,
    /// Tool patterns (at most 100); at least one.
    pub tools: Vec<String>,
}

/// A role of the tenant (`/api/v1/tenant/roles`): a built-in one (`admin`, `member`) or a
/// custom one.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct RoleInfo {
    pub name: String,
    /// `admin` and `member`; they cannot be changed here (the built-ins' tool permissions are
    /// the tenant's `tool_permissions`, set by the platform admin).
    pub builtin: bool,
    pub description: String,
    /// Tool permission patterns.
    pub tools: Vec<String>,
    /// The REST areas the role may use (every area for the built-ins).
    pub areas: Vec<crate::roles::RestArea>,
}

/// A custom role's definition (`POST` and `PUT /api/v1/tenant/roles…`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct RoleRequest {
    /// Required on `POST`; on `PUT` it must be absent or equal the path's.
    #[serde(default)]
    pub name: Option<String>,
    #[serde(default)]
    pub description: Option<String>,
    /// Tool permission patterns: `service:tool`, `service:prefix*`, `service:*`, `*:*`, and
    /// denials with a leading `!`. At most 100.
    pub tools: Vec<String>,
    /// The REST areas the role may use.
    pub areas: Vec<crate::roles::RestArea>,
}

/// A new key: the only time the key itself is shown.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct CreatedApiKey {
    #[serde(flatten)]
    pub info: ApiKeyInfo,
    /// The key. Store it now: it cannot be shown again.
    pub key: String,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct UsageTotals {
    pub runs: u64,
    pub input_tokens: u64,
    pub output_tokens: u64,
    pub total_tokens: u64,
    pub tool_calls: u64,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct DailyUsage {
    pub day: NaiveDate,
    #[serde(flatten)]
    pub usage: UsageTotals,
}

/// `GET /admin/tenants/{id}/usage`: days with activity between `from` and `to` (both
/// inclusive, UTC), oldest first.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct UsageReport {
    pub tenant_id: String,
    pub from: NaiveDate,
    pub to: NaiveDate,
    pub days: Vec<DailyUsage>,
    pub totals: UsageTotals,
}

/// An assistant. The fields it sets itself are shown as set; `null` ones come from its
/// profile. `effective` is what its runs get: its own settings over its profile's.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct AssistantInfo {
    pub id: String,
    pub name: String,
    pub description: String,
    /// The assistant's own system prompt template; null = the profile's.
    pub system_prompt: Option<String>,
    /// `scripted`, `openai` or `anthropic`; null = the server's default model.
    pub provider: Option<String>,
    pub model: Option<String>,
    /// Tool names or `service:tool` / `service:*` patterns; null = the profile's.
    pub tools: Option<Vec<String>>,
    /// The skills its runs see (names): null = every skill the user sees, `[]` = none.
    pub skills: Option<Vec<String>>,
    /// Tools that always need approval, on top of the high-risk defaults; null = the profile's.
    pub interrupt_on: Option<Vec<String>>,
    pub auto_approve: bool,
    /// A built-in profile (`general`, `devops`, `sre`, `orchestrator`) or one of the tenant's.
    pub profile: String,
    /// null = the profile's.
    pub recursion_limit: Option<u32>,
    /// null = the profile's.
    pub timeout_secs: Option<u32>,
    pub max_retries: u32,
    /// One of the tenant's model connections; null = the platform's model.
    pub model_connection: Option<String>,
    pub effective: EffectiveAgent,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

/// What an assistant's runs get: each field the assistant sets, else its profile's.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct EffectiveAgent {
    pub profile: String,
    /// The template; `{{assistant_name}}`, `{{date}}` and `{{tools}}` are filled in at each run.
    pub system_prompt: String,
    /// null = every tool the caller's role may use.
    pub tools: Option<Vec<String>>,
    pub interrupt_on: Vec<String>,
    pub auto_approve: bool,
    pub recursion_limit: u32,
    pub timeout_secs: u32,
    pub max_retries: u32,
    /// The tenant's model connection its runs use; null = the platform's model.
    pub model_connection: Option<String>,
}

/// An assistant's settings. Fields left out are inherited from its profile (a `PUT` replaces
/// the whole assistant). Limits: `recursion_limit` 1–1000, `timeout_secs` 1–86400,
/// `max_retries` 0–10.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct AssistantSpecRequest {
    #[serde(default)]
    pub name: Option<String>,
    #[serde(default)]
    pub description: Option<String>,
    #[serde(default)]
    pub system_prompt: Option<String>,
    #[serde(default)]
    pub provider: Option<String>,
    #[serde(default)]
    pub model: Option<String>,
    #[serde(default)]
    pub tools: Option<Vec<String>>,
    /// The skills its runs see, by name: left out or null = every skill the user sees (the
    /// tenant's and their own), `[]` = none.
    #[serde(default)]
    pub skills: Option<Vec<String>>,
    #[serde(default)]
    pub interrupt_on: Option<Vec<String>>,
    #[serde(default)]
    pub auto_approve: Option<bool>,
    /// A built-in profile or one of the tenant's; default `general`.
    #[serde(default)]
    pub profile: Option<String>,
    #[serde(default)]
    pub recursion_limit: Option<u32>,
    #[serde(default)]
    pub timeout_secs: Option<u32>,
    #[serde(default)]
    pub max_retries: Option<u32>,
    /// One of the tenant's model connections (`GET /api/v1/model-connections`); null or left
    /// out = the platform's model.
    #[serde(default)]
    pub model_connection: Option<String>,
}

/// `POST /agents`: an id (a slug: lowercase letters, digits, `-`, `_`) and the settings.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct CreateAssistantRequest {
    pub id: String,
    #[serde(default)]
    pub name: Option<String>,
    #[serde(default)]
    pub description: Option<String>,
    #[serde(default)]
    pub system_prompt: Option<String>,
    #[serde(default)]
    pub provider: Option<String>,
    #[serde(default)]
    pub model: Option<String>,
    #[serde(default)]
    pub tools: Option<Vec<String>>,
    /// The skills its runs see, by name: left out or null = every skill the user sees (the
    /// tenant's and their own), `[]` = none.
    #[serde(default)]
    pub skills: Option<Vec<String>>,
    #[serde(default)]
    pub interrupt_on: Option<Vec<String>>,
    #[serde(default)]
    pub auto_approve: Option<bool>,
    #[serde(default)]
    pub profile: Option<String>,
    #[serde(default)]
    pub recursion_limit: Option<u32>,
    #[serde(default)]
    pub timeout_secs: Option<u32>,
    #[serde(default)]
    pub max_retries: Option<u32>,
    /// One of the tenant's model connections (`GET /api/v1/model-connections`); null or left
    /// out = the platform's model.
    #[serde(default)]
    pub model_connection: Option<String>,
}

impl CreateAssistantRequest {
    /// The id and the settings.
    pub fn split(self) -> (String, AssistantSpecRequest) {
        (
            self.id,
            AssistantSpecRequest {
                name: self.name,
                description: self.description,
                system_prompt: self.system_prompt,
                provider: self.provider,
                model: self.model,
                tools: self.tools,
                skills: self.skills,
                interrupt_on: self.interrupt_on,
                auto_approve: self.auto_approve,
                profile: self.profile,
                recursion_limit: self.recursion_limit,
                timeout_secs: self.timeout_secs,
                max_retries: self.max_retries,
                model_connection: self.model_connection,
            },
        )
    }
}

/// An agent profile: a system prompt template, a default tool set, approval defaults and
/// limits. Built-in profiles (`builtin: true`) cannot be changed or deleted.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ProfileInfo {
    pub id: String,
    pub builtin: bool,
    pub name: String,
    pub description: String,
    /// A template: `{{assistant_name}}`, `{{date}}` (UTC) and `{{tools}}` are filled in at each
    /// run.
    pub system_prompt: String,
    /// Tool names or `service:tool` / `service:*` patterns; null = every tool.
    pub tools: Option<Vec<String>>,
    /// Tools that always need approval, on top of the tools' own policy.
    pub interrupt_on: Vec<String>,
    pub recursion_limit: u32,
    pub timeout_secs: u32,
    /// null for built-in profiles.
    pub created_at: Option<DateTime<Utc>>,
    pub updated_at: Option<DateTime<Utc>>,
}

/// A profile's settings; fields left out are the `general` profile's (a `PUT` replaces the
/// whole profile). Limits as for assistants.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct ProfileSpecRequest {
    #[serde(default)]
    pub name: Option<String>,
    #[serde(default)]
    pub description: Option<String>,
    #[serde(default)]
    pub system_prompt: Option<String>,
    #[serde(default)]
    pub tools: Option<Vec<String>>,
    #[serde(default)]
    pub interrupt_on: Option<Vec<String>>,
    #[serde(default)]
    pub recursion_limit: Option<u32>,
    #[serde(default)]
    pub timeout_secs: Option<u32>,
}

/// `POST /profiles`: an id (a slug, not a built-in profile's) and the settings.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct CreateProfileRequest {
    pub id: String,
    #[serde(default)]
    pub name: Option<String>,
    #[serde(default)]
    pub description: Option<String>,
    #[serde(default)]
    pub system_prompt: Option<String>,
    #[serde(default)]
    pub tools: Option<Vec<String>>,
    #[serde(default)]
    pub interrupt_on: Option<Vec<String>>,
    #[serde(default)]
    pub recursion_limit: Option<u32>,
    #[serde(default)]
    pub timeout_secs: Option<u32>,
}

impl CreateProfileRequest {
    /// The id and the settings.
    pub fn split(self) -> (String, ProfileSpecRequest) {
        (
            self.id,
            ProfileSpecRequest {
                name: self.name,
                description: self.description,
                system_prompt: self.system_prompt,
                tools: self.tools,
                interrupt_on: self.interrupt_on,
                recursion_limit: self.recursion_limit,
                timeout_secs: self.timeout_secs,
            },
        )
    }
}

/// A skill (the agent-framework folder format: `SKILL.md` with front matter `name` and
/// `description`, then instructions, plus files beside it). The system prompt lists its name
/// and description; the `load_skill` tool reads its instructions.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct SkillInfo {
    pub name: String,
    /// `tenant` (every user of the tenant sees it; tenant admins manage it) or `user`.
    pub scope: String,
    /// The owner's user id for a `user` skill; null for a tenant skill.
    pub user_id: Option<String>,
    pub description: String,
    pub file_count: u32,
    /// Bytes of every file, `SKILL.md` included.
    pub total_bytes: u64,
    pub created_by: Option<String>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

/// One file of a skill.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct SkillFileEntry {
    /// Relative to the skill's folder, `/`-separated.
    pub path: String,
    pub size: u64,
}

/// A skill with its instructions and its file listing.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct SkillDetail {
    #[serde(flatten)]
    pub info: SkillInfo,
    /// The body of `SKILL.md` after its front matter.
    pub instructions: String,
    pub files: Vec<SkillFileEntry>,
}

/// How a file's `content` is written in a JSON upload.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "lowercase")]
pub enum FileEncoding {
    /// The content is the text itself.
    #[default]
    Text,
    /// The content is base64 (standard alphabet, padded).
    Base64,
}

/// One file of a JSON skill upload.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct SkillFileUpload {
    /// Relative, `/`-separated (no `..`, no leading `/`).
    pub path: String,
    pub content: String,
    #[serde(default)]
    pub encoding: FileEncoding,
}

/// A skill uploaded as JSON: its files, `SKILL.md` among them.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct SkillUpload {
    pub files: Vec<SkillFileUpload>,
}

/// One run of the agent loop.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ExecutionInfo {
    pub id: String,
    pub session_id: String,
    pub user_id: String,
    pub assistant_id: String,
    /// The user message that started the run.
    pub input: String,
    /// `running`, `waiting_approval`, `completed`, `failed`, `cancelled`, `rejected`,
    /// `timeout` or `interrupted`.
    pub status: String,
    pub error: Option<String>,
    pub token_usage: TokenUsage,
    pub steps: u32,
    pub trace_id: Option<String>,
    pub started_at: DateTime<Utc>,
    pub completed_at: Option<DateTime<Utc>>,
    pub updated_at: DateTime<Utc>,
    /// For a `task` child run: the run whose `task` call started it (`null` for a run a person
    /// started). `GET /executions?parent_execution_id=` lists a run's children.
    #[serde(default)]
    pub parent_execution_id: Option<String>,
    /// For a `task` child run: the parent's tool call that started it.
    #[serde(default)]
    pub parent_tool_call_id: Option<String>,
}

/// One row of the tool-call audit.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ToolCallInfo {
    pub id: String,
    pub tool_call_id: String,
    pub tool_name: String,
    #[cfg_attr(feature = "openapi", schema(value_type = Object))]
    pub input: Value,
    #[cfg_attr(feature = "openapi", schema(value_type = Option<Object>))]
    pub output: Option<Value>,
    pub error: Option<String>,
    pub duration_ms: u64,
    /// null when the call needed no approval.
    pub approved: Option<bool>,
    pub approved_by: Option<String>,
    pub created_at: DateTime<Utc>,
}

/// One row of `GET /tool-calls`: an audited call with the run it belongs to.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct AuditedToolCall {
    pub id: String,
    pub execution_id: String,
    pub session_id: String,
    /// The user whose run made the call.
    pub user_id: String,
    pub assistant_id: String,
    pub tool_call_id: String,
    pub tool_name: String,
    #[cfg_attr(feature = "openapi", schema(value_type = Object))]
    pub input: Value,
    #[cfg_attr(feature = "openapi", schema(value_type = Option<Object>))]
    pub output: Option<Value>,
    /// Set when the call ended without a result (refused, denied, timed out, …).
    pub error: Option<String>,
    pub duration_ms: u64,
    /// null when the call needed no approval.
    pub approved: Option<bool>,
    pub approved_by: Option<String>,
    pub created_at: DateTime<Utc>,
}

/// A `hitl_request` and the decision it got.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ApprovalInfo {
    pub id: String,
    /// `approval` or `question`.
    pub kind: String,
    pub tool_call_id: Option<String>,
    #[cfg_attr(feature = "openapi", schema(value_type = Object))]
    pub request: Value,
    /// `pending`, `approved`, `edited`, `rejected`, `answered`, `timed_out` or `cancelled`.
    pub status: String,
    #[cfg_attr(feature = "openapi", schema(value_type = Option<Object>))]
    pub decision: Option<Value>,
    pub decided_by: Option<String>,
    pub created_at: DateTime<Utc>,
    pub decided_at: Option<DateTime<Utc>>,
}

/// `GET /executions/{id}`: the run with its tool-call audit and approvals, oldest first.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ExecutionDetail {
    #[serde(flatten)]
    pub execution: ExecutionInfo,
    pub tool_calls: Vec<ToolCallInfo>,
    pub approvals: Vec<ApprovalInfo>,
}

/// `GET /sessions/{id}/events?after_seq&limit`: stored events with `seq > after_seq`, in order.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct EventsPage {
    pub session_id: String,
    #[cfg_attr(feature = "openapi", schema(value_type = Vec<Object>))]
    pub events: Vec<ExecutionEvent>,
    /// Pass as `after_seq` to get the next page (the last returned `seq`, or the request's
    /// `after_seq` when nothing was returned).
    pub next_after_seq: u64,
    /// More events are stored past this page.
    pub has_more: bool,
}

/// A tenant's model connection (bring your own key). The key is write-only: `api_key_set` says
/// whether one is stored.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ModelConnectionInfo {
    pub id: String,
    pub name: String,
    /// `openai` (any OpenAI-compatible endpoint) or `anthropic`.
    pub provider: String,
    /// The API root; null = the provider's public endpoint.
    pub base_url: Option<String>,
    /// Where requests go: `base_url`, or the provider's public endpoint.
    pub effective_base_url: String,
    pub model: String,
    /// Whether an API key is stored (the key itself is never shown).
    pub api_key_set: bool,
    /// Limit on waiting for the response head, then on each gap between streamed chunks.
    pub timeout_secs: u32,
    /// Most retries of a model call through this connection (429, 5xx, timeouts, connection
    /// failures, before the answer starts); an assistant's own `max_retries` may only lower it.
    pub max_retries: u32,
    /// The endpoint's embeddings model: the tenant's memories are embedded with it
    /// (docs/memory.md); null: the platform's embeddings endpoint, if any.
    pub embedding_model: Option<String>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

/// A model connection's settings (a `PUT` replaces them all; leave `api_key` out to keep the
/// stored key, send `null` to remove it).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct ModelConnectionSpecRequest {
    /// Default: the id. 1–200 characters.
    #[serde(default)]
    pub name: Option<String>,
    /// `openai` (any OpenAI-compatible endpoint) or `anthropic`.
    pub provider: String,
    /// The API root (`https://api.openai.com/v1`, `https://api.anthropic.com`); left out = the
    /// provider's. http(s) only, ≤ 2048 characters; a host that resolves to a private,
    /// loopback or link-local address is refused unless the platform allows it.
    #[serde(default)]
    pub base_url: Option<String>,
    /// The model name sent to the provider (≤ 200 characters); left out = the provider's
    /// default model.
    #[serde(default)]
    pub model: Option<String>,
    /// The API key (≤ 4096 characters), sealed at rest and never shown again. Left out on a
    /// `PUT`: the stored key stays; `null`: no key.
    #[serde(
        default,
        deserialize_with = "double_option",
        skip_serializing_if = "Option::is_none"
    )]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<String>))]
    pub api_key: Option<Option<String>>,
    /// 1–600; default 120.
    #[serde(default)]
    pub timeout_secs: Option<u32>,
    /// 0–10; default 3.
    #[serde(default)]
    pub max_retries: Option<u32>,
    /// The endpoint's embeddings model (≤ 200 characters; `openai` connections only): the
    /// tenant's memories are embedded with it (docs/memory.md).
    #[serde(default)]
    pub embedding_model: Option<String>,
}

/// `POST /model-connections`: an id (a slug) and the settings.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct CreateModelConnectionRequest {
    pub id: String,
    #[serde(default)]
    pub name: Option<String>,
    pub provider: String,
    #[serde(default)]
    pub base_url: Option<String>,
    #[serde(default)]
    pub model: Option<String>,
    /// The API key, sealed at rest and never shown again.
    #[serde(default)]
    pub api_key: Option<String>,
    #[serde(default)]
    pub timeout_secs: Option<u32>,
    #[serde(default)]
    pub max_retries: Option<u32>,
    #[serde(default)]
    pub embedding_model: Option<String>,
}

impl CreateModelConnectionRequest {
    /// The id and the settings.
    pub fn split(self) -> (String, ModelConnectionSpecRequest) {
        (
            self.id,
            ModelConnectionSpecRequest {
                name: self.name,
                provider: self.provider,
                base_url: self.base_url,
                model: self.model,
                api_key: Some(self.api_key),
                timeout_secs: self.timeout_secs,
                max_retries: self.max_retries,
                embedding_model: self.embedding_model,
            },
        )
    }
}

/// A remote A2A agent the tenant registered: `task` may delegate to it (`remote_agent`). Its
/// credential is write-only: `credential_set` says whether one is stored.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct RemoteAgentInfo {
    pub id: String,
    /// The card's `name`.
    pub name: String,
    /// The card's `description`.
    pub description: String,
    /// The URL it was registered with.
    pub url: String,
    /// The card's JSON-RPC interface: where Agentry sends the tasks.
    pub endpoint_url: String,
    /// `none`, `bearer` or `api_key`.
    pub auth: String,
    /// For `api_key`: the header the key is sent in.
    pub auth_header: Option<String>,
    /// Whether a token or key is stored (it is never shown).
    pub credential_set: bool,
    /// How long a delegated task may take, end to end (seconds).
    pub timeout_secs: u32,
    /// The skills the card names: `[{id, name, description}]`.
    #[cfg_attr(feature = "openapi", schema(value_type = Vec<Object>))]
    pub skills: Vec<Value>,
    /// The card as it was fetched and checked at registration.
    #[cfg_attr(feature = "openapi", schema(value_type = Object))]
    pub card: Value,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

/// `POST /remote-agents`: register a remote A2A agent by URL. Its card is fetched and checked
/// (A2A v1.0, a JSON-RPC interface) before anything is stored.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct CreateRemoteAgentRequest {
    /// A slug (1–64 of `a-z 0-9 - _`): what `task` names it by.
    pub id: String,
    /// The agent's base URL (its card is at `{url}/.well-known/agent-card.json`) or its card's
    /// URL (ending in `.json`). http(s), ≤ 2048 characters; a host that resolves to a private,
    /// loopback or link-local address is refused unless the platform allows it.
    pub url: String,
    /// How Agentry authenticates to it: `none` (the default), `bearer` (`token`, sent as
    /// `Authorization: Bearer …`) or `api_key` (`key` in the header `header`).
    #[serde(default)]
    pub auth: Option<RemoteAgentAuthRequest>,
    /// 1–3600; default 300: how long a delegated task may take, end to end.
    #[serde(default)]
    pub timeout_secs: Option<u32>,
}

/// A remote agent's credential, sealed at rest and never shown again (nor logged: its `Debug`
/// names only the kind).
#[derive(Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(tag = "type", rename_all = "snake_case", deny_unknown_fields)]
pub enum RemoteAgentAuthRequest {
    None,
    Bearer { token: String },
    ApiKey { header: String, key: String },
}

impl std::fmt::Debug for RemoteAgentAuthRequest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RemoteAgentAuthRequest::None => f.write_str("None"),
            RemoteAgentAuthRequest::Bearer { .. } => f.write_str("Bearer(***)"),
            RemoteAgentAuthRequest::ApiKey { header, .. } => write!(f, "ApiKey({header}: ***)"),
        }
    }
}

/// A tenant's data source: a database the data tools (`run_sql`, `describe_data_source`,
/// `create_report`) may query. The URL is shown with its password masked (`***`); the
/// credentials are sealed at rest and never returned.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct DataSourceInfo {
    pub id: String,
    pub name: String,
    /// `postgres`, `mysql` (MySQL or MariaDB) or `sqlite`, from the URL's scheme.
    pub engine: String,
    /// The URL with its password replaced by `***`.
    pub url: String,
    /// Whether a password is stored (it is never shown).
    pub password_set: bool,
    /// The roles whose callers may use the source through the data tools.
    pub allowed_roles: Vec<String>,
    /// When the cached catalog was read (null: not yet described).
    pub catalog_cached_at: Option<DateTime<Utc>>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

/// A data source's settings (a `PUT` replaces them all).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct DataSourceSpecRequest {
    /// Default: the id. 1–200 characters.
    #[serde(default)]
    pub name: Option<String>,
    /// `postgres://user:password@host:port/database` (also `postgresql://`),
    /// `mysql://…`, `mariadb://…`, or `sqlite:<path>` (a file inside the tenant's area,
    /// relative to `{data_dir}/workspaces/{tenant}/`, e.g. `sqlite:<user id>/sales.db`).
    /// A server's host must pass the platform's network rule; see docs/data.md.
    pub url: String,
    /// The password, if it is not in the URL (it wins over one in the URL). Left out on a
    /// `PUT`: the stored password stays when the host, port and user are unchanged; `null`:
    /// no password.
    #[serde(
        default,
        deserialize_with = "double_option",
        skip_serializing_if = "Option::is_none"
    )]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<String>))]
    pub password: Option<Option<String>>,
    /// The roles that may use the source (`admin`, `member`); default `["admin"]`.
    #[serde(default)]
    pub allowed_roles: Option<Vec<String>>,
}

/// `POST /data-sources`: an id (a slug) and the settings.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct CreateDataSourceRequest {
    pub id: String,
    #[serde(default)]
    pub name: Option<String>,
    pub url: String,
    /// The password, sealed at rest and never shown again.
    #[serde(default)]
    pub password: Option<String>,
    #[serde(default)]
    pub allowed_roles: Option<Vec<String>>,
}

impl CreateDataSourceRequest {
    /// The id and the settings.
    pub fn split(self) -> (String, DataSourceSpecRequest) {
        (
            self.id,
            DataSourceSpecRequest {
                name: self.name,
                url: self.url,
                password: self.password.map(Some),
                allowed_roles: self.allowed_roles,
            },
        )
    }
}
