//! Per-user MCP servers (seed 000 Phase 8): `GET|POST /users/{user_id}/mcp-servers`,
//! `PUT|DELETE /users/{user_id}/mcp-servers/{name}`.
//!
//! A member manages only their own servers (another user's are "not found"); a tenant admin may
//! manage any user's of the tenant. Secrets (env values, header values, tokens) are sealed at
//! rest with `mcp.encryption_key` and never shown again (`***`). Rules for servers a tenant's
//! users supply:
//! - local (stdio) servers run a process on the server: only tenants with the `stdio_mcp`
//!   feature may add them, and only callers with the role the tenant policy names
//!   (`stdio_mcp_role`: tenant admins by default);
//! - references to the server's own environment (`token_env`, `key_env`, basic auth) are
//!   refused: they would hand the server's secrets to a URL the user chose; give the token
//!   itself, which is sealed at rest;
//! - HTTP URLs that resolve to private, loopback or link-local addresses are refused unless the
//!   tools configuration allows them (`tools.allow_private_addresses`,
//!   `tools.allowed_networks`), as for the web tools, and so are host names that do not
//!   resolve; the MCP client checks the addresses again on every connection and connects only
//!   to the ones it checked (no DNS-rebinding window).
//!
//! Responses carry the live status of each server from the tenant's MCP pool.

use actix_web::HttpResponse;
use actix_web::web::{self, Json};
use agentry_actors::mcp_pool::{
    ConnectInBackground, ServerReport, ServerReports, ServerTools, UserConfigChanged,
};
use agentry_mcp::client::{HttpAuth, McpServerConfig, McpTransportConfig};
use agentry_mcp::config_file::FileServerEntry;
use agentry_mcp::stored::{join_from_storage, masked_view, split_for_storage, unmask};
use agentry_schema::error::ErrorCode;
use agentry_schema::ids::UserId;
use agentry_store::mcp_servers::{self, NewMcpServer};
use agentry_store::users;
use agentry_tools::tool::ToolError;
use serde_json::{Value, json};

use crate::auth::TenantCaller;
use crate::error::{ApiError, ApiResult};
use crate::extract::{ApiJson, ApiPath, param};
use crate::mcp_stored::{RestPolicy, stored_of};
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

/// The live status of every server of `user` the pool has used, and its history there: name →
/// (status, message, report). From this replica's pool; nothing is connected to answer.
async fn statuses(
    state: &AppState,
    caller: &TenantCaller,
    user: UserId,
) -> std::collections::HashMap<String, Status> {
    let Ok(Some(pool)) = state.engine.mcp_pool(caller.tenant()).await else {
        return Default::default();
    };
    pool.send(ServerReports { user })
        .await
        .unwrap_or_default()
        .into_iter()
        .map(|(name, status, message, report)| (name, (status.to_string(), message, Some(report))))
        .collect()
}

/// A server's status, its message (the error while in `error`) and the pool's history of it.
type Status = (String, Option<String>, Option<ServerReport>);

/// The tools each connected server of `user` offers now: name → `[{name, description}]`.
async fn tools_of(
    state: &AppState,
    caller: &TenantCaller,
    user: UserId,
) -> std::collections::HashMap<String, Value> {
    let Ok(Some(pool)) = state.engine.mcp_pool(caller.tenant()).await else {
        return Default::default();
    };
    pool.send(ServerTools { user })
        .await
        .unwrap_or_default()
        .into_iter()
        .map(|(server, tools)| {
            let list: Vec<Value> = tools
                .into_iter()
                .map(|(name, description)| json!({"name": name, "description": description}))
                .collect();
            (server, Value::Array(list))
        })
        .collect()
}

/// Adds `tools` (what the server offers, known while it is connected) to a server's view.
fn with_tools(mut v: Value, tools: &std::collections::HashMap<String, Value>) -> Value {
    if let Some(list) = v["name"].as_str().and_then(|n| tools.get(n)).cloned() {
        v["tools"] = list;
    }
    v
}

fn with_status(mut v: Value, status: Option<&Status>, source: &str) -> Value {
    if let Value::Object(o) = &mut v {
        let (s, m, report) = status
            .cloned()
            .unwrap_or(("disconnected".into(), None, None));
        o.insert("status".into(), json!(s));
        if let Some(m) = m {
            o.insert("status_message".into(), json!(m));
        }
        // `last_error`, `last_error_at`, `connected_since` when known; `reconnects` and `calls`
        // always (zero for a server this replica has not used).
        if let Ok(Value::Object(r)) = serde_json::to_value(report.unwrap_or_default()) {
            o.extend(r);
        }
        o.insert("source".into(), json!(source));
        o.insert("read_only".into(), json!(source == PLATFORM));
    }
    v
}

/// A user's own server: its configuration, secrets masked.
fn view(config: &McpServerConfig, status: Option<&Status>) -> Value {
    with_status(masked_view(config), status, "user")
}

/// `source` of the servers from the platform's MCP config file.
const PLATFORM: &str = "platform";

/// The platform's server of this name (from the MCP config file), if there is one.
fn platform_server(state: &AppState, name: &str) -> Option<FileServerEntry> {
    state.mcp_file.as_ref()?.current().get(name).cloned()
}

/// A platform server as a tenant's user sees it: what it is and whether it works, not how it is
/// reached (its command line, URL and credentials are the operator's).
fn platform_view(entry: &FileServerEntry, status: Option<&Status>) -> Value {
    let transport = match entry.config.transport {
        McpTransportConfig::Stdio(_) => "stdio",
        McpTransportConfig::Http(_) => "http",
    };
    let mut v = json!({
        "name": entry.config.name,
        "transport": transport,
        "disabled": entry.config.disabled,
    });
    if let Some(d) = &entry.policy.description {
        v["description"] = json!(d);
    }
    if let Some(ver) = &entry.policy.version {
        v["version"] = json!(ver);
    }
    with_status(v, status, PLATFORM)
}

/// A user's server with a platform server's name would shadow it: refused.
fn platform_name_taken(name: &str) -> ApiError {
    ApiError::conflict(format!(
        "{name:?} is the name of a platform MCP server (from the server's MCP config file); pick another name for yours"
    ))
}

/// A platform server cannot be changed or removed through a user's list.
fn platform_read_only(name: &str) -> ApiError {
    ApiError::conflict(format!(
        "MCP server {name:?} is the platform's (from the server's MCP config file) and is read-only here; ask the platform operator to change it"
    ))
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
            // A stdio server is a program the server starts: a role right as well as a feature.
            if !caller
                .tenant()
                .policy()
                .may_add_stdio_mcp(caller.is_admin())
            {
                return Err(ApiError::forbidden(
                    "adding or changing a local (stdio) MCP server is a tenant admin's right \
                     (tenant policy `stdio_mcp_role`: admin); ask a tenant admin to add it, or use \
                     an HTTP server (`url`)",
                ));
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
                HttpAuth::OAuth(o) if o.client_secret_env.is_some() => {
                    Some("auth.client_secret_env")
                }
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
            // A host that does not resolve, or resolves to an address the policy refuses, is
            // refused now; the client checks the addresses again on every connection.
            match agentry_builtin::net_guard::check_url(&h.url, &state.settings.tools).await {
                Ok(_) => {}
                Err(ToolError::Failed { message, .. }) => {
                    return Err(ApiError::validation(
                        "url",
                        format!(
                            "the MCP server URL is refused: {message}; give a host name that \
                             resolves, or an IP address"
                        ),
                    ));
                }
                Err(e) => {
                    return Err(ApiError::validation(
                        "url",
                        format!("the MCP server URL is refused: {e}"),
                    ));
                }
            }
        }
    }
    Ok(())
}

/// Fields the API adds to a server's view: a client that sends a view back may leave them in.
const VIEW_ONLY: [&str; 10] = [
    "status",
    "status_message",
    "source",
    "read_only",
    "last_error",
    "last_error_at",
    "connected_since",
    "reconnects",
    "calls",
    "sign_in",
];
/// Adds `sign_in` (whether the user is signed in to an OAuth server) to a server's view.
async fn with_sign_in(
    mut v: Value,
    state: &AppState,
    caller: &TenantCaller,
    user: UserId,
    config: &McpServerConfig,
) -> Value {
    if let Some(s) =
        crate::routes::mcp_oauth::sign_in_view(state, &caller.scope(), user, config).await
        && let Value::Object(o) = &mut v
    {
        o.insert("sign_in".into(), s);
    }
    v
}

/// A user's server's view with its policy fields.
fn with_policy(mut v: Value, policy: Option<&RestPolicy>) -> Value {
    let policy = policy.map(|p| RestPolicy {
        // The server's own fields in the view already.
        connect_timeout_secs: None,
        cwd: None,
        ..p.clone()
    });
    if let (Value::Object(o), Some(Value::Object(p))) =
        (&mut v, policy.and_then(|p| serde_json::to_value(p).ok()))
    {
        o.extend(p);
    }
    v
}

/// The configuration in a POST or PUT body. Masked secrets (`"***"`) keep the stored values of
/// `current`, `null` in `env`/`headers` removes an entry (`agentry_mcp::stored::unmask`).
fn config_from_body(
    mut body: Value,
    current: Option<&McpServerConfig>,
) -> ApiResult<McpServerConfig> {
    if let Value::Object(o) = &mut body {
        for k in VIEW_ONLY {
            o.remove(k);
        }
        // The discovered tools GET shows (`[{name, description}]`); the allow-list is
        // `allowed_tools`.
        if o.get("tools")
            .is_some_and(|t| t.as_array().is_some_and(|a| a.iter().all(Value::is_object)))
        {
            o.remove("tools");
        }
    }
    unmask(&mut body, current).map_err(|e| ApiError::validation(&e.field, e.message))?;
    serde_path_to_error::deserialize(body).map_err(crate::extract::json_error)
}

fn storage_error(e: agentry_mcp::stored::StorageError) -> ApiError {
    if let agentry_mcp::stored::StorageError::NotStorable { field, .. } = &e {
        return ApiError::validation(field, e.to_string());
    }
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

fn new_row(
    user: UserId,
    stored: agentry_mcp::stored::StoredMcpServer,
    policy: Option<&RestPolicy>,
) -> NewMcpServer {
    NewMcpServer {
        user_id: user,
        disabled: stored.disabled,
        timeout_secs: stored.timeout_secs,
        policy: RestPolicy::stored(policy, &stored),
        name: stored.name,
        transport: stored.transport,
        command: stored.command,
        args: stored.args,
        url: stored.url,
        env_encrypted: stored.env_encrypted,
        headers_encrypted: stored.headers_encrypted,
    }
}

/// The MCP servers the user's runs get: the platform's (from the MCP config file, read-only,
/// shown without how they are reached) and the user's own (secrets masked), with live status.
#[utoipa::path(
    get,
    path = "/api/v1/users/{user_id}/mcp-servers",
    tag = "mcp",
    params(("user_id" = String, Path, description = "User id (UUID)")),
    responses(
        (status = 200, description = "The platform's servers (`source: platform`, `read_only: true`) and the user's own (`source: user`), each with `status`: connected, connecting, disconnected or error, this replica's history of it (`last_error`, `last_error_at`, `connected_since`, `reconnects`, `calls`), and while connected the `tools` it offers (`[{name, description}]`)", body = Vec<Object>),
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
    let tools = tools_of(&state, &caller, user).await;
    let platform = state
        .mcp_file
        .as_ref()
        .map(|f| f.current())
        .unwrap_or_default();
    let mut out = Vec::with_capacity(rows.len() + platform.servers.len());
    for entry in &platform.servers {
        let v = platform_view(entry, live.get(&entry.config.name));
        out.push(with_sign_in(v, &state, &caller, user, &entry.config).await);
    }
    for row in rows {
        // Added before the platform took the name: listed, but the platform's is the one used.
        let shadowed = platform.get(&row.name).is_some().then(shadowed_status);
        let status = shadowed.as_ref().or(live.get(&row.name));
        match join_from_storage(&stored_of(&row), state.secrets.as_ref()) {
            Ok(config) => {
                let v = with_policy(
                    view(&config, status),
                    RestPolicy::of_row(&row).ok().flatten().as_ref(),
                );
                out.push(with_sign_in(v, &state, &caller, user, &config).await);
            }
            // A row whose secrets no longer open (the key changed) is still listed, flagged.
            Err(e) => out.push(json!({"name": row.name, "transport": row.transport, "disabled": row.disabled, "status": "error", "status_message": e.to_string(), "source": "user", "read_only": false})),
        }
    }
    Ok(Json(
        out.into_iter().map(|v| with_tools(v, &tools)).collect(),
    ))
}

/// A user's server stored under a name the platform's file took since: listed, not used (the
/// pool's status of that name is the platform server's).
fn shadowed_status() -> Status {
    (
        "error".to_string(),
        Some("not used: the platform has an MCP server of this name; delete yours and add it under another name".to_string()),
        None,
    )
}

/// One server of the user.
#[utoipa::path(
    get,
    path = "/api/v1/users/{user_id}/mcp-servers/{name}",
    tag = "mcp",
    params(("user_id" = String, Path, description = "User id (UUID)"), ("name" = String, Path, description = "Server name")),
    responses(
        (status = 200, description = "The server, secrets masked, with its policy (`allowed_tools`, `rate_limit_per_minute`, `health_check` when set), its live status (`status`, and the last error in `status_message`), this replica's history of it (`last_error` and `last_error_at`, `connected_since`, `reconnects`, `calls: {ok, error, timeout}`) and, while connected, the `tools` it offers", body = Object),
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
        if let Some(entry) = platform_server(&state, name.0.as_str()) {
            let live = statuses(&state, &caller, user).await;
            let tools = tools_of(&state, &caller, user).await;
            let v = platform_view(&entry, live.get(name.0.as_str()));
            let v = with_sign_in(v, &state, &caller, user, &entry.config).await;
            return Ok(Json(with_tools(v, &tools)));
        }
        return Err(ApiError::not_found(format!("MCP server {:?}", name.0)));
    };
    let config =
        join_from_storage(&stored_of(&row), state.secrets.as_ref()).map_err(storage_error)?;
    let live = statuses(&state, &caller, user).await;
    let tools = tools_of(&state, &caller, user).await;
    let policy =
        RestPolicy::of_row(&row).map_err(|e| ApiError::internal("mcp server policy", e))?;
    let shadowed = platform_server(&state, &row.name).map(|_| shadowed_status());
    let status = shadowed.as_ref().or(live.get(&row.name));
    let v = with_policy(view(&config, status), policy.as_ref());
    let v = with_sign_in(v, &state, &caller, user, &config).await;
    Ok(Json(if shadowed.is_some() {
        v
    } else {
        with_tools(v, &tools)
    }))
}

/// Add a server for the user: `{name, command, args, env}` for a local server, `{name, url,
/// headers, auth}` for a Streamable HTTP one, and optionally what the MCP config file sets for a
/// platform server: `allowed_tools`, `rate_limit_per_minute`, `health_check: {endpoint,
/// interval_secs, timeout_secs}`, and `timeout_secs` (see docs/mcp.md for every field).
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
        (status = 403, description = "Local (stdio) servers are not enabled for the tenant, the caller's role may not add them (tenant policy `stdio_mcp_role`), or the platform admin key", body = agentry_schema::ErrorResponse),
        (status = 404, description = "No such user visible to the caller", body = agentry_schema::ErrorResponse),
        (status = 409, description = "The user already has a server with this name, or a platform server has it", body = agentry_schema::ErrorResponse),
        (status = 422, description = "An invalid field (named), an environment reference, or a refused URL", body = agentry_schema::ErrorResponse),
        (status = 429, description = "The tenant's `max_mcp_servers` per user is reached", body = agentry_schema::ErrorResponse),
        (status = 503, description = "The server has no encryption key, so secrets cannot be stored", body = agentry_schema::ErrorResponse),
    )
)]
pub async fn add_server(
    caller: TenantCaller,
    state: web::Data<AppState>,
    user: ApiPath<param::User>,
    body: ApiJson<Value>,
) -> ApiResult<HttpResponse> {
    let user = owner(&state, &caller, user.into_inner()).await?;
    let mut body = body.into_inner();
    let policy = RestPolicy::take(&mut body)?;
    let config = config_from_body(body, None)?;
    if let Some(p) = &policy {
        p.check(&config)?;
    }
    admissible(&state, &caller, &config).await?;
    if platform_server(&state, &config.name).is_some() {
        return Err(platform_name_taken(&config.name));
    }
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
    mcp_servers::create(
        &state.db,
        &caller.scope(),
        new_row(user, stored, policy.as_ref()),
    )
    .await?;
    notify(&state, &caller, user, &config.name, true).await;
    Ok(HttpResponse::Created().json(with_policy(view(&config, None), policy.as_ref())))
}

/// Replace a server's configuration (its connection is closed; the next run reconnects). A
/// secret sent back as `"***"` (as GET shows it) keeps its stored value, a new value replaces it,
/// and `null` in `env` or `headers` removes the entry.
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
        (status = 403, description = "Local (stdio) servers are not enabled for the tenant, the caller's role may not add them (tenant policy `stdio_mcp_role`), or the platform admin key", body = agentry_schema::ErrorResponse),
        (status = 404, description = "No such user or server", body = agentry_schema::ErrorResponse),
        (status = 409, description = "The server is the platform's (from the MCP config file): read-only", body = agentry_schema::ErrorResponse),
        (status = 422, description = "An invalid field, a name that differs from the path, an environment reference, a refused URL, or `***` where nothing is stored", body = agentry_schema::ErrorResponse),
        (status = 503, description = "The server has no encryption key, so secrets cannot be stored", body = agentry_schema::ErrorResponse),
    )
)]
pub async fn replace_server(
    caller: TenantCaller,
    state: web::Data<AppState>,
    user: ApiPath<param::User>,
    name: ApiPath<param::McpServer>,
    body: ApiJson<Value>,
) -> ApiResult<Json<Value>> {
    let user = owner(&state, &caller, user.into_inner()).await?;
    if platform_server(&state, name.0.as_str()).is_some() {
        return Err(platform_read_only(name.0.as_str()));
    }
    let Some(current) =
        mcp_servers::get_by_name(&state.db, &caller.scope(), user, name.0.as_str()).await?
    else {
        return Err(ApiError::not_found(format!("MCP server {:?}", name.0)));
    };
    // Secrets that no longer open (the key changed) cannot be kept: they must be given again.
    let stored = join_from_storage(&stored_of(&current), state.secrets.as_ref()).ok();
    // PUT replaces: a policy left out of the body is removed, as any other field.
    let mut body = body.into_inner();
    let policy = RestPolicy::take(&mut body)?;
    let config = config_from_body(body, stored.as_ref())?;
    if config.name != name.0.as_str() {
        return Err(ApiError::validation(
            "name",
            format!(
                "the body names {:?} but the path {:?}; rename by deleting and adding",
                config.name, name.0
            ),
        ));
    }
    if let Some(p) = &policy {
        p.check(&config)?;
    }
    admissible(&state, &caller, &config).await?;
    let stored = split_for_storage(&config, state.secrets.as_ref()).map_err(storage_error)?;
    mcp_servers::replace(
        &state.db,
        &caller.scope(),
        new_row(user, stored, policy.as_ref()),
    )
    .await?;
    notify(&state, &caller, user, &config.name, true).await;
    Ok(Json(with_policy(view(&config, None), policy.as_ref())))
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
        (status = 409, description = "The server is the platform's (from the MCP config file): read-only", body = agentry_schema::ErrorResponse),
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
        if platform_server(&state, name.0.as_str()).is_some() {
            return Err(platform_read_only(name.0.as_str()));
        }
        return Err(ApiError::not_found(format!("MCP server {:?}", name.0)));
    }
    notify(&state, &caller, user, name.0.as_str(), false).await;
    Ok(HttpResponse::NoContent().finish())
}

/// Close the user's connection to `name`, so the next run uses the new configuration; with
/// `connect`, start connecting the server as it now is, in the background (this replica's pool),
/// so the user's first run does not wait for the connect.
async fn notify(state: &AppState, caller: &TenantCaller, user: UserId, name: &str, connect: bool) {
    if let Ok(Some(pool)) = state.engine.mcp_pool(caller.tenant()).await {
        pool.do_send(UserConfigChanged {
            user,
            server: Some(name.to_string()),
        });
        if connect {
            pool.do_send(ConnectInBackground {
                user,
                server: name.to_string(),
            });
        }
    }
}
