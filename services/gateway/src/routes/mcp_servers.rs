//! Per-user MCP servers (seed 000 Phase 8): `GET|POST /users/{user_id}/mcp-servers`,
//! `PUT|DELETE /users/{user_id}/mcp-servers/{name}`.
//!
//! A member manages only their own servers (another user's are "not found"); a tenant admin may
//! manage any user's of the tenant. Secrets (env values, header values, tokens) are sealed at
//! rest with `mcp.encryption_key` and never shown again (`***`). Rules for servers a tenant's
//! users supply:
//! - local (stdio) servers run a process on the server: only tenants with the `stdio_mcp`
//!   feature may add them;
//! - references to the server's own environment (`token_env`, `key_env`, basic auth) are
//!   refused: they would hand the server's secrets to a URL the user chose; give the token
//!   itself, which is sealed at rest;
//! - HTTP URLs that resolve to private, loopback or link-local addresses are refused unless the
//!   tools configuration allows them (`tools.allow_private_addresses`,
//!   `tools.allowed_networks`), as for the web tools; the check runs again before each connect.
//!
//! Responses carry the live status of each server from the tenant's MCP pool.

use actix_web::HttpResponse;
use actix_web::web::{self, Json};
use agentry_actors::mcp_pool::{ServerStatuses, UserConfigChanged};
use agentry_mcp::client::{HttpAuth, McpServerConfig, McpTransportConfig};
use agentry_mcp::stored::{join_from_storage, masked_view, split_for_storage};
use agentry_mcp::tool::ToolError;
use agentry_schema::error::ErrorCode;
use agentry_schema::ids::UserId;
use agentry_store::mcp_servers::{self, NewMcpServer};
use agentry_store::users;
use serde_json::{Value, json};

use crate::auth::TenantCaller;
use crate::engine::stored_of;
use crate::error::{ApiError, ApiResult};
use crate::extract::{ApiJson, ApiPath, param};
use crate::routes::resource::endpoint;
use crate::state::AppState;

/// Tenants whose users may run local (stdio) MCP servers.
pub const STDIO_FEATURE: &str = agentry_actors::mcp_pool::STDIO_FEATURE;

pub fn configure(cfg: &mut web::ServiceConfig) {
    cfg.service(
        endpoint("/users/{user_id}/mcp-servers")
            .get(list_servers)
            .post(add_server),
    )
    .service(
        endpoint("/users/{user_id}/mcp-servers/{name}")
            .get(get_server)
            .put(replace_server)
            .delete(delete_server),
    );
}

/// The user whose servers are addressed, if the caller may manage them.
async fn owner(state: &AppState, caller: &TenantCaller, user: UserId) -> ApiResult<UserId> {
    if user != caller.user_id() && !caller.is_admin() {
        return Err(ApiError::not_found(format!("user {user}")));
    }
    if users::get(&state.db, &caller.scope(), user)
        .await?
        .is_none()
    {
        return Err(ApiError::not_found(format!("user {user}")));
    }
    Ok(user)
}

/// The live status of every server of `user`: name → (status, message).
async fn statuses(
    state: &AppState,
    caller: &TenantCaller,
    user: UserId,
) -> std::collections::HashMap<String, (String, Option<String>)> {
    let Ok(Some(pool)) = state.engine.mcp_pool(caller.tenant()).await else {
        return Default::default();
    };
    pool.send(ServerStatuses { user })
        .await
        .unwrap_or_default()
        .into_iter()
        .map(|(name, status, message)| (name, (status.to_string(), message)))
        .collect()
}

fn view(config: &McpServerConfig, status: Option<&(String, Option<String>)>) -> Value {
    let mut v = masked_view(config);
    if let Value::Object(o) = &mut v {
        let (s, m) = status.cloned().unwrap_or(("disconnected".into(), None));
        o.insert("status".into(), json!(s));
        if let Some(m) = m {
            o.insert("status_message".into(), json!(m));
        }
    }
    v
}

/// Refuse what a tenant's user may not configure (see the module doc).
async fn admissible(
    state: &AppState,
    caller: &TenantCaller,
    config: &McpServerConfig,
) -> ApiResult<()> {
    match &config.transport {
        McpTransportConfig::Stdio(_) => {
            if !caller.tenant().has_feature(STDIO_FEATURE) {
                return Err(ApiError::forbidden(format!(
                    "local (stdio) MCP servers are not enabled for this tenant (feature `{STDIO_FEATURE}`); use an HTTP server (`url`)"
                )));
            }
        }
        McpTransportConfig::Http(h) => {
            let env_ref = match &h.auth {
                HttpAuth::Bearer {
                    token_env: Some(_), ..
                } => Some("auth.token_env"),
                HttpAuth::ApiKey {
                    key_env: Some(_), ..
                } => Some("auth.key_env"),
                HttpAuth::Basic { .. } => Some("auth (basic reads the server's environment)"),
                _ => None,
            };
            if let Some(field) = env_ref {
                return Err(ApiError::validation(
                    "auth",
                    format!(
                        "{field}: user-configured servers cannot read the server's environment; give the token itself (`auth.token` / `auth.key`, or a header), which is stored encrypted"
                    ),
                ));
            }
            // A name that does not resolve right now is accepted (the check runs again before
            // every connect); an address the policy refuses is not.
            if let Err(e @ (ToolError::Refused(_) | ToolError::InvalidArguments { .. })) =
                agentry_mcp::builtin::net_guard::check_url(&h.url, &state.settings.tools).await
            {
                return Err(ApiError::validation(
                    "url",
                    format!("the MCP server URL is refused: {e}"),
                ));
            }
        }
    }
    Ok(())
}

fn storage_error(e: agentry_mcp::stored::StorageError) -> ApiError {
    match e.code() {
        ErrorCode::ServiceUnavailable => ApiError::new(
            ErrorCode::ServiceUnavailable,
            format!(
                "{e}: this server has no `mcp.encryption_key` (AGENTRY_MCP__ENCRYPTION_KEY), so it cannot store MCP secrets; ask the operator, or add the server without env values and tokens"
            ),
        ),
        ErrorCode::InternalError => ApiError::internal("sealing MCP secrets", e),
        code => ApiError::new(code, e.to_string()),
    }
}

fn new_row(user: UserId, stored: agentry_mcp::stored::StoredMcpServer) -> NewMcpServer {
    NewMcpServer {
        user_id: user,
        name: stored.name,
        transport: stored.transport,
        command: stored.command,
        args: stored.args,
        url: stored.url,
        env_encrypted: stored.env_encrypted,
        headers_encrypted: stored.headers_encrypted,
        disabled: stored.disabled,
        timeout_secs: stored.timeout_secs,
    }
}

/// The user's MCP servers, secrets masked, with their live status.
#[utoipa::path(
    get,
    path = "/api/v1/users/{user_id}/mcp-servers",
    tag = "mcp",
    params(("user_id" = String, Path, description = "User id (UUID)")),
    responses(
        (status = 200, description = "The user's servers (`status`: connected, connecting, disconnected or error)", body = Vec<Object>),
        (status = 400, description = "`user_id` is not a UUID", body = agentry_schema::ErrorResponse),
        (status = 401, description = "No usable API key", body = agentry_schema::ErrorResponse),
        (status = 403, description = "The platform admin key (it has no tenant)", body = agentry_schema::ErrorResponse),
        (status = 404, description = "No such user visible to the caller", body = agentry_schema::ErrorResponse),
    )
)]
pub async fn list_servers(
    caller: TenantCaller,
    state: web::Data<AppState>,
    user: ApiPath<param::User>,
) -> ApiResult<Json<Vec<Value>>> {
    let user = owner(&state, &caller, user.into_inner()).await?;
    let rows = mcp_servers::list_by_user(&state.db, &caller.scope(), user).await?;
    let live = statuses(&state, &caller, user).await;
    let mut out = Vec::with_capacity(rows.len());
    for row in rows {
        match join_from_storage(&stored_of(&row), state.secrets.as_ref()) {
            Ok(config) => out.push(view(&config, live.get(&row.name))),
            // A row whose secrets no longer open (the key changed) is still listed, flagged.
            Err(e) => out.push(json!({"name": row.name, "transport": row.transport, "disabled": row.disabled, "status": "error", "status_message": e.to_string()})),
        }
    }
    Ok(Json(out))
}

/// One server of the user.
#[utoipa::path(
    get,
    path = "/api/v1/users/{user_id}/mcp-servers/{name}",
    tag = "mcp",
    params(("user_id" = String, Path, description = "User id (UUID)"), ("name" = String, Path, description = "Server name")),
    responses(
        (status = 200, description = "The server, secrets masked, with its live status", body = Object),
        (status = 400, description = "`user_id` is not a UUID", body = agentry_schema::ErrorResponse),
        (status = 401, description = "No usable API key", body = agentry_schema::ErrorResponse),
        (status = 403, description = "The platform admin key (it has no tenant)", body = agentry_schema::ErrorResponse),
        (status = 404, description = "No such user or server", body = agentry_schema::ErrorResponse),
    )
)]
pub async fn get_server(
    caller: TenantCaller,
    state: web::Data<AppState>,
    user: ApiPath<param::User>,
    name: ApiPath<param::McpServer>,
) -> ApiResult<Json<Value>> {
    let user = owner(&state, &caller, user.into_inner()).await?;
    let Some(row) =
        mcp_servers::get_by_name(&state.db, &caller.scope(), user, name.0.as_str()).await?
    else {
        return Err(ApiError::not_found(format!("MCP server {:?}", name.0)));
    };
    let config =
        join_from_storage(&stored_of(&row), state.secrets.as_ref()).map_err(storage_error)?;
    let live = statuses(&state, &caller, user).await;
    Ok(Json(view(&config, live.get(&row.name))))
}

/// Add a server for the user: `{name, command, args, env}` for a local server, `{name, url,
/// headers, auth}` for a Streamable HTTP one (see docs/mcp.md for every field).
#[utoipa::path(
    post,
    path = "/api/v1/users/{user_id}/mcp-servers",
    tag = "mcp",
    params(("user_id" = String, Path, description = "User id (UUID)")),
    request_body = Object,
    responses(
        (status = 201, description = "Added; secrets masked; `status: disconnected` until first use", body = Object),
        (status = 400, description = "A bad `user_id` or malformed JSON", body = agentry_schema::ErrorResponse),
        (status = 401, description = "No usable API key", body = agentry_schema::ErrorResponse),
        (status = 403, description = "Local (stdio) servers are not enabled for the tenant, or the platform admin key", body = agentry_schema::ErrorResponse),
        (status = 404, description = "No such user visible to the caller", body = agentry_schema::ErrorResponse),
        (status = 409, description = "The user already has a server with this name", body = agentry_schema::ErrorResponse),
        (status = 422, description = "An invalid field (named), an environment reference, or a refused URL", body = agentry_schema::ErrorResponse),
        (status = 429, description = "The tenant's `max_mcp_servers` per user is reached", body = agentry_schema::ErrorResponse),
        (status = 503, description = "The server has no encryption key, so secrets cannot be stored", body = agentry_schema::ErrorResponse),
    )
)]
pub async fn add_server(
    caller: TenantCaller,
    state: web::Data<AppState>,
    user: ApiPath<param::User>,
    body: ApiJson<McpServerConfig>,
) -> ApiResult<HttpResponse> {
    let user = owner(&state, &caller, user.into_inner()).await?;
    let config = body.into_inner();
    admissible(&state, &caller, &config).await?;
    if mcp_servers::get_by_name(&state.db, &caller.scope(), user, &config.name)
        .await?
        .is_some()
    {
        return Err(ApiError::conflict(format!(
            "an MCP server named {:?} already exists for this user; replace it with PUT or pick another name",
            config.name
        )));
    }
    let limit = caller.tenant().quotas.max_mcp_servers;
    if limit > 0
        && mcp_servers::count_by_user(&state.db, &caller.scope(), user).await? >= u64::from(limit)
    {
        return Err(ApiError::quota_exceeded(
            "max_mcp_servers",
            u64::from(limit),
            format!("the tenant allows {limit} MCP servers per user; delete one first"),
            60,
        ));
    }
    let stored = split_for_storage(&config, state.secrets.as_ref()).map_err(storage_error)?;
    mcp_servers::create(&state.db, &caller.scope(), new_row(user, stored)).await?;
    notify(&state, &caller, user, &config.name).await;
    Ok(HttpResponse::Created().json(view(&config, None)))
}

/// Replace a server's configuration (its connection is closed; the next run reconnects).
#[utoipa::path(
    put,
    path = "/api/v1/users/{user_id}/mcp-servers/{name}",
    tag = "mcp",
    params(("user_id" = String, Path, description = "User id (UUID)"), ("name" = String, Path, description = "Server name")),
    request_body = Object,
    responses(
        (status = 200, description = "Replaced; secrets masked", body = Object),
        (status = 400, description = "A bad `user_id` or malformed JSON", body = agentry_schema::ErrorResponse),
        (status = 401, description = "No usable API key", body = agentry_schema::ErrorResponse),
        (status = 403, description = "Local (stdio) servers are not enabled for the tenant, or the platform admin key", body = agentry_schema::ErrorResponse),
        (status = 404, description = "No such user or server", body = agentry_schema::ErrorResponse),
        (status = 422, description = "An invalid field, a name that differs from the path, an environment reference, or a refused URL", body = agentry_schema::ErrorResponse),
        (status = 503, description = "The server has no encryption key, so secrets cannot be stored", body = agentry_schema::ErrorResponse),
    )
)]
pub async fn replace_server(
    caller: TenantCaller,
    state: web::Data<AppState>,
    user: ApiPath<param::User>,
    name: ApiPath<param::McpServer>,
    body: ApiJson<McpServerConfig>,
) -> ApiResult<Json<Value>> {
    let user = owner(&state, &caller, user.into_inner()).await?;
    let config = body.into_inner();
    if config.name != name.0.as_str() {
        return Err(ApiError::validation(
            "name",
            format!(
                "the body names {:?} but the path {:?}; rename by deleting and adding",
                config.name, name.0
            ),
        ));
    }
    if mcp_servers::get_by_name(&state.db, &caller.scope(), user, name.0.as_str())
        .await?
        .is_none()
    {
        return Err(ApiError::not_found(format!("MCP server {:?}", name.0)));
    }
    admissible(&state, &caller, &config).await?;
    let stored = split_for_storage(&config, state.secrets.as_ref()).map_err(storage_error)?;
    mcp_servers::replace(&state.db, &caller.scope(), new_row(user, stored)).await?;
    notify(&state, &caller, user, &config.name).await;
    Ok(Json(view(&config, None)))
}

/// Remove a server (its connection is closed).
#[utoipa::path(
    delete,
    path = "/api/v1/users/{user_id}/mcp-servers/{name}",
    tag = "mcp",
    params(("user_id" = String, Path, description = "User id (UUID)"), ("name" = String, Path, description = "Server name")),
    responses(
        (status = 204, description = "Removed"),
        (status = 400, description = "`user_id` is not a UUID", body = agentry_schema::ErrorResponse),
        (status = 401, description = "No usable API key", body = agentry_schema::ErrorResponse),
        (status = 403, description = "The platform admin key (it has no tenant)", body = agentry_schema::ErrorResponse),
        (status = 404, description = "No such user or server", body = agentry_schema::ErrorResponse),
    )
)]
pub async fn delete_server(
    caller: TenantCaller,
    state: web::Data<AppState>,
    user: ApiPath<param::User>,
    name: ApiPath<param::McpServer>,
) -> ApiResult<HttpResponse> {
    let user = owner(&state, &caller, user.into_inner()).await?;
    if !mcp_servers::delete_by_name(&state.db, &caller.scope(), user, name.0.as_str()).await? {
        return Err(ApiError::not_found(format!("MCP server {:?}", name.0)));
    }
    notify(&state, &caller, user, name.0.as_str()).await;
    Ok(HttpResponse::NoContent().finish())
}

/// Close the user's connection to `name`, so the next run uses the new configuration.
async fn notify(state: &AppState, caller: &TenantCaller, user: UserId, name: &str) {
    if let Ok(Some(pool)) = state.engine.mcp_pool(caller.tenant()).await {
        pool.do_send(UserConfigChanged {
            user,
            server: Some(name.to_string()),
        });
    }
}
