//! The tenant admin API: a tenant admin manages their own tenant's users and keys, and reads
//! (never changes) the tenant itself — status, quotas, features, policy — and its usage by day,
//! which only the platform admin may change. Members get 403; nothing here reaches another
//! tenant (the scope comes from the caller's key). A tenant admin may not demote, disable or
//! delete themselves (409), so a tenant cannot lock itself out by accident.

use actix_web::HttpResponse;
use actix_web::web::{self, Json};
use agentry_schema::api::{
    ApiKeyInfo, CreateApiKeyRequest, CreateUserRequest, CreatedApiKey, McpVirtualServerInfo,
    McpVirtualServerRequest, Page, RoleInfo, RoleRequest, TenantInfo, UpdateUserRequest,
    UsageReport, UserInfo,
};

use crate::auth::TenantAdmin;
use crate::error::ApiResult;
use crate::extract::{ApiJson, ApiPath, ApiQuery, param};
use crate::routes::admin::{KeysQuery, UsageQuery, created_key, keys_page};
use crate::routes::resource::endpoint;
use crate::routes::{PageQuery, page_of};
use crate::state::AppState;
use crate::views;
use agentry_domain::roles;
use agentry_domain::tenancy::{self, Actor};
use agentry_domain::virtual_servers;

pub fn configure(cfg: &mut web::ServiceConfig) {
    cfg.service(endpoint("/tenant").get(get_tenant))
        .service(endpoint("/tenant/usage").get(usage))
        .service(endpoint("/tenant/webhook-secret").get(webhook_secret))
        .service(endpoint("/tenant/users").get(list_users).post(create_user))
        .service(
            endpoint("/tenant/users/{user_id}")
                .get(get_user)
                .patch(update_user)
                .delete(delete_user),
        )
        .service(endpoint("/tenant/api-keys").get(list_keys).post(create_key))
        .service(
            endpoint("/tenant/api-keys/{key_id}")
                .get(get_key)
                .delete(revoke_key),
        )
        .service(endpoint("/tenant/roles").get(list_roles).post(create_role))
        .service(
            endpoint("/tenant/roles/{role}")
                .get(get_role)
                .put(replace_role)
                .delete(delete_role),
        )
        .service(
            endpoint("/tenant/mcp-virtual-servers")
                .get(list_virtual_servers)
                .post(create_virtual_server),
        )
        .service(
            endpoint("/tenant/mcp-virtual-servers/{name}")
                .get(get_virtual_server)
                .put(replace_virtual_server)
                .delete(delete_virtual_server),
        );
}

/// The tenant's MCP virtual servers: named subsets of tools served at `/mcp/{name}`.
#[utoipa::path(
    get,
    path = "/api/v1/tenant/mcp-virtual-servers",
    operation_id = "tenant_list_mcp_virtual_servers",
    tag = "tenant",
    responses(
        (status = 200, description = "Every virtual server of the tenant, by name", body = Vec<McpVirtualServerInfo>),
        (status = 401, description = "No usable API key", body = agentry_schema::ErrorResponse),
        (status = 403, description = "Not a tenant admin", body = agentry_schema::ErrorResponse),
    )
)]
pub async fn list_virtual_servers(
    admin: TenantAdmin,
    state: web::Data<AppState>,
) -> ApiResult<Json<Vec<McpVirtualServerInfo>>> {
    let tenant = agentry_store::tenants::get_own(&state.db, &admin.scope()).await?;
    Ok(Json(virtual_servers::list(&tenant)))
}

/// Define an MCP virtual server: the tool patterns `/mcp/{name}` serves (the caller's role
/// still applies).
#[utoipa::path(
    post,
    path = "/api/v1/tenant/mcp-virtual-servers",
    operation_id = "tenant_create_mcp_virtual_server",
    tag = "tenant",
    request_body = McpVirtualServerRequest,
    responses(
        (status = 201, description = "Created", body = McpVirtualServerInfo),
        (status = 400, description = "The body is not JSON", body = agentry_schema::ErrorResponse),
        (status = 401, description = "No usable API key", body = agentry_schema::ErrorResponse),
        (status = 403, description = "Not a tenant admin", body = agentry_schema::ErrorResponse),
        (status = 409, description = "The tenant already has a virtual server of that name", body = agentry_schema::ErrorResponse),
        (status = 413, description = "The body is over the size limit", body = agentry_schema::ErrorResponse),
        (status = 415, description = "The body is not `application/json`", body = agentry_schema::ErrorResponse),
        (status = 422, description = "A field is invalid (a bad name or pattern, no allowing pattern, too many servers)", body = agentry_schema::ErrorResponse),
    )
)]
pub async fn create_virtual_server(
    admin: TenantAdmin,
    state: web::Data<AppState>,
    body: ApiJson<McpVirtualServerRequest>,
) -> ApiResult<HttpResponse> {
    let server =
        virtual_servers::create(&state.domain(), &admin.scope(), body.into_inner()).await?;
    Ok(HttpResponse::Created().json(server))
}

/// One MCP virtual server of the tenant.
#[utoipa::path(
    get,
    path = "/api/v1/tenant/mcp-virtual-servers/{name}",
    operation_id = "tenant_get_mcp_virtual_server",
    tag = "tenant",
    params(("name" = String, Path, description = "The virtual server's name")),
    responses(
        (status = 200, description = "The virtual server", body = McpVirtualServerInfo),
        (status = 400, description = "`name` is not a virtual server name", body = agentry_schema::ErrorResponse),
        (status = 401, description = "No usable API key", body = agentry_schema::ErrorResponse),
        (status = 403, description = "Not a tenant admin", body = agentry_schema::ErrorResponse),
        (status = 404, description = "No such virtual server in the tenant", body = agentry_schema::ErrorResponse),
    )
)]
pub async fn get_virtual_server(
    admin: TenantAdmin,
    state: web::Data<AppState>,
    name: ApiPath<param::VirtualServer>,
) -> ApiResult<Json<McpVirtualServerInfo>> {
    let tenant = agentry_store::tenants::get_own(&state.db, &admin.scope()).await?;
    Ok(Json(virtual_servers::get(&tenant, &name.into_inner())?))
}

/// Replace an MCP virtual server's definition; open sessions on it see the change on their
/// next `tools/list`.
#[utoipa::path(
    put,
    path = "/api/v1/tenant/mcp-virtual-servers/{name}",
    operation_id = "tenant_replace_mcp_virtual_server",
    tag = "tenant",
    params(("name" = String, Path, description = "The virtual server's name")),
    request_body = McpVirtualServerRequest,
    responses(
        (status = 200, description = "Replaced", body = McpVirtualServerInfo),
        (status = 400, description = "A bad `name`, or the body is not JSON", body = agentry_schema::ErrorResponse),
        (status = 401, description = "No usable API key", body = agentry_schema::ErrorResponse),
        (status = 403, description = "Not a tenant admin", body = agentry_schema::ErrorResponse),
        (status = 404, description = "No such virtual server in the tenant", body = agentry_schema::ErrorResponse),
        (status = 409, description = "The tenant was being changed at the same time", body = agentry_schema::ErrorResponse),
        (status = 413, description = "The body is over the size limit", body = agentry_schema::ErrorResponse),
        (status = 415, description = "The body is not `application/json`", body = agentry_schema::ErrorResponse),
        (status = 422, description = "A field is invalid", body = agentry_schema::ErrorResponse),
    )
)]
pub async fn replace_virtual_server(
    admin: TenantAdmin,
    state: web::Data<AppState>,
    name: ApiPath<param::VirtualServer>,
    body: ApiJson<McpVirtualServerRequest>,
) -> ApiResult<Json<McpVirtualServerInfo>> {
    Ok(Json(
        virtual_servers::replace(
            &state.domain(),
            &admin.scope(),
            name.into_inner(),
            body.into_inner(),
        )
        .await?,
    ))
}

/// Delete an MCP virtual server; sessions open on it get 404 on their next request.
#[utoipa::path(
    delete,
    path = "/api/v1/tenant/mcp-virtual-servers/{name}",
    operation_id = "tenant_delete_mcp_virtual_server",
    tag = "tenant",
    params(("name" = String, Path, description = "The virtual server's name")),
    responses(
        (status = 204, description = "Deleted"),
        (status = 400, description = "`name` is not a virtual server name", body = agentry_schema::ErrorResponse),
        (status = 401, description = "No usable API key", body = agentry_schema::ErrorResponse),
        (status = 403, description = "Not a tenant admin", body = agentry_schema::ErrorResponse),
        (status = 404, description = "No such virtual server in the tenant", body = agentry_schema::ErrorResponse),
        (status = 409, description = "The tenant was being changed at the same time", body = agentry_schema::ErrorResponse),
    )
)]
pub async fn delete_virtual_server(
    admin: TenantAdmin,
    state: web::Data<AppState>,
    name: ApiPath<param::VirtualServer>,
) -> ApiResult<HttpResponse> {
    virtual_servers::delete(&state.domain(), &admin.scope(), name.into_inner()).await?;
    Ok(HttpResponse::NoContent().finish())
}

/// The tenant's roles: `admin` and `member` (with the tool permissions in force), then the
/// custom roles.
#[utoipa::path(
    get,
    path = "/api/v1/tenant/roles",
    operation_id = "tenant_list_roles",
    tag = "tenant",
    responses(
        (status = 200, description = "Every role of the tenant", body = Vec<RoleInfo>),
        (status = 401, description = "No usable API key", body = agentry_schema::ErrorResponse),
        (status = 403, description = "Not a tenant admin", body = agentry_schema::ErrorResponse),
    )
)]
pub async fn list_roles(
    admin: TenantAdmin,
    state: web::Data<AppState>,
) -> ApiResult<Json<Vec<RoleInfo>>> {
    let tenant = agentry_store::tenants::get_own(&state.db, &admin.scope()).await?;
    Ok(Json(roles::list(&tenant)))
}

/// Define a custom role: its tool permission patterns and the REST areas it may use.
#[utoipa::path(
    post,
    path = "/api/v1/tenant/roles",
    operation_id = "tenant_create_role",
    tag = "tenant",
    request_body = RoleRequest,
    responses(
        (status = 201, description = "Created", body = RoleInfo),
        (status = 400, description = "The body is not JSON", body = agentry_schema::ErrorResponse),
        (status = 401, description = "No usable API key", body = agentry_schema::ErrorResponse),
        (status = 403, description = "Not a tenant admin", body = agentry_schema::ErrorResponse),
        (status = 409, description = "The tenant already has a role of that name", body = agentry_schema::ErrorResponse),
        (status = 413, description = "The body is over the size limit", body = agentry_schema::ErrorResponse),
        (status = 415, description = "The body is not `application/json`", body = agentry_schema::ErrorResponse),
        (status = 422, description = "A field is invalid (a bad name, pattern or area; too many roles)", body = agentry_schema::ErrorResponse),
    )
)]
pub async fn create_role(
    admin: TenantAdmin,
    state: web::Data<AppState>,
    body: ApiJson<RoleRequest>,
) -> ApiResult<HttpResponse> {
    let role = roles::create(&state.domain(), &admin.scope(), body.into_inner()).await?;
    Ok(HttpResponse::Created().json(role))
}

/// One role of the tenant, built-in or custom.
#[utoipa::path(
    get,
    path = "/api/v1/tenant/roles/{role}",
    operation_id = "tenant_get_role",
    tag = "tenant",
    params(("role" = String, Path, description = "The role's name")),
    responses(
        (status = 200, description = "The role", body = RoleInfo),
        (status = 400, description = "`role` is not a role name", body = agentry_schema::ErrorResponse),
        (status = 401, description = "No usable API key", body = agentry_schema::ErrorResponse),
        (status = 403, description = "Not a tenant admin", body = agentry_schema::ErrorResponse),
        (status = 404, description = "No such role in the tenant", body = agentry_schema::ErrorResponse),
    )
)]
pub async fn get_role(
    admin: TenantAdmin,
    state: web::Data<AppState>,
    name: ApiPath<param::Role>,
) -> ApiResult<Json<RoleInfo>> {
    let tenant = agentry_store::tenants::get_own(&state.db, &admin.scope()).await?;
    Ok(Json(roles::get(&tenant, name.into_inner())?))
}

/// Replace a custom role's definition; its holders' next requests and runs use it.
#[utoipa::path(
    put,
    path = "/api/v1/tenant/roles/{role}",
    operation_id = "tenant_replace_role",
    tag = "tenant",
    params(("role" = String, Path, description = "The role's name")),
    request_body = RoleRequest,
    responses(
        (status = 200, description = "Replaced", body = RoleInfo),
        (status = 400, description = "A bad `role`, or the body is not JSON", body = agentry_schema::ErrorResponse),
        (status = 401, description = "No usable API key", body = agentry_schema::ErrorResponse),
        (status = 403, description = "Not a tenant admin", body = agentry_schema::ErrorResponse),
        (status = 404, description = "No such custom role in the tenant", body = agentry_schema::ErrorResponse),
        (status = 409, description = "A built-in role (admin, member) cannot be changed here", body = agentry_schema::ErrorResponse),
        (status = 413, description = "The body is over the size limit", body = agentry_schema::ErrorResponse),
        (status = 415, description = "The body is not `application/json`", body = agentry_schema::ErrorResponse),
        (status = 422, description = "A field is invalid", body = agentry_schema::ErrorResponse),
    )
)]
pub async fn replace_role(
    admin: TenantAdmin,
    state: web::Data<AppState>,
    name: ApiPath<param::Role>,
    body: ApiJson<RoleRequest>,
) -> ApiResult<Json<RoleInfo>> {
    Ok(Json(
        roles::replace(
            &state.domain(),
            &admin.scope(),
            name.into_inner(),
            body.into_inner(),
        )
        .await?,
    ))
}

/// Delete a custom role that no user and no unrevoked key holds.
#[utoipa::path(
    delete,
    path = "/api/v1/tenant/roles/{role}",
    operation_id = "tenant_delete_role",
    tag = "tenant",
    params(("role" = String, Path, description = "The role's name")),
    responses(
        (status = 204, description = "Deleted"),
        (status = 400, description = "`role` is not a role name", body = agentry_schema::ErrorResponse),
        (status = 401, description = "No usable API key", body = agentry_schema::ErrorResponse),
        (status = 403, description = "Not a tenant admin", body = agentry_schema::ErrorResponse),
        (status = 404, description = "No such custom role in the tenant", body = agentry_schema::ErrorResponse),
        (status = 409, description = "A built-in role, or users or keys still hold it", body = agentry_schema::ErrorResponse),
    )
)]
pub async fn delete_role(
    admin: TenantAdmin,
    state: web::Data<AppState>,
    name: ApiPath<param::Role>,
) -> ApiResult<HttpResponse> {
    roles::delete(&state.domain(), &admin.scope(), name.into_inner()).await?;
    Ok(HttpResponse::NoContent().finish())
}

/// The caller's own tenant: status, quotas, features, tool permissions and policy, read-only
/// (the platform admin changes them). As the server enforces them now: a change made on
/// another replica shows within `auth.cache_ttl_secs`.
#[utoipa::path(
    get,
    path = "/api/v1/tenant",
    operation_id = "tenant_get",
    tag = "tenant",
    responses(
        (status = 200, description = "The tenant", body = TenantInfo),
        (status = 401, description = "No usable API key", body = agentry_schema::ErrorResponse),
        (status = 403, description = "Not a tenant admin", body = agentry_schema::ErrorResponse),
    )
)]
pub async fn get_tenant(admin: TenantAdmin) -> Json<TenantInfo> {
    Json(views::tenant(admin.tenant().clone()))
}

/// The tenant's Standard Webhooks signing secret.
#[derive(Debug, serde::Serialize, utoipa::ToSchema)]
pub struct WebhookSecret {
    /// `whsec_` and the base64 of the key: what a Standard Webhooks library takes.
    pub secret: String,
}

/// The secret that signs the tenant's outbound webhooks (A2A push notifications): a receiver
/// checks `webhook-signature` with it (docs/a2a.md, "Push notifications"). Made on first use;
/// the same for every webhook of the tenant.
#[utoipa::path(
    get,
    path = "/api/v1/tenant/webhook-secret",
    operation_id = "tenant_webhook_secret",
    tag = "tenant",
    responses(
        (status = 200, description = "The signing secret", body = WebhookSecret),
        (status = 401, description = "No usable API key", body = agentry_schema::ErrorResponse),
        (status = 403, description = "Not a tenant admin", body = agentry_schema::ErrorResponse),
        (status = 503, description = "The server has no encryption key to keep the secret with", body = agentry_schema::ErrorResponse),
    )
)]
pub async fn webhook_secret(
    admin: TenantAdmin,
    state: web::Data<AppState>,
) -> ApiResult<Json<WebhookSecret>> {
    let secret = state.webhooks.tenant_secret(&admin.scope()).await?;
    Ok(Json(WebhookSecret { secret }))
}

/// The caller's own tenant's runs, tokens and tool calls by day (the platform admin's
/// `/admin/tenants/{id}/usage` for this tenant).
#[utoipa::path(
    get,
    path = "/api/v1/tenant/usage",
    operation_id = "tenant_usage",
    tag = "tenant",
    params(UsageQuery),
    responses(
        (status = 200, description = "Usage by day with totals", body = UsageReport),
        (status = 400, description = "A bad date or range", body = agentry_schema::ErrorResponse),
        (status = 401, description = "No usable API key", body = agentry_schema::ErrorResponse),
        (status = 403, description = "Not a tenant admin", body = agentry_schema::ErrorResponse),
    )
)]
pub async fn usage(
    admin: TenantAdmin,
    state: web::Data<AppState>,
    query: ApiQuery<UsageQuery>,
) -> ApiResult<Json<UsageReport>> {
    let q = query.into_inner();
    Ok(Json(
        tenancy::usage_report(
            &state.db,
            &admin.scope(),
            q.from.as_deref(),
            q.to.as_deref(),
        )
        .await?,
    ))
}

/// The tenant's users, oldest first.
#[utoipa::path(
    get,
    path = "/api/v1/tenant/users",
    operation_id = "tenant_list_users",
    tag = "tenant",
    params(PageQuery),
    responses(
        (status = 200, description = "A page of users", body = Page<UserInfo>),
        (status = 400, description = "A bad query parameter", body = agentry_schema::ErrorResponse),
        (status = 401, description = "No usable API key", body = agentry_schema::ErrorResponse),
        (status = 403, description = "Not a tenant admin", body = agentry_schema::ErrorResponse),
    )
)]
pub async fn list_users(
    admin: TenantAdmin,
    state: web::Data<AppState>,
    query: ApiQuery<PageQuery>,
) -> ApiResult<Json<Page<UserInfo>>> {
    let page = query.0.page()?;
    let (items, total) = tenancy::list_users(&state.db, &admin.scope(), page).await?;
    Ok(Json(page_of(items, total, page, views::user)))
}

/// Add a user (`role` defaults to `member`), within the tenant's `max_users`.
#[utoipa::path(
    post,
    path = "/api/v1/tenant/users",
    operation_id = "tenant_create_user",
    tag = "tenant",
    request_body = CreateUserRequest,
    responses(
        (status = 201, description = "Created", body = UserInfo),
        (status = 400, description = "The body is not JSON", body = agentry_schema::ErrorResponse),
        (status = 401, description = "No usable API key", body = agentry_schema::ErrorResponse),
        (status = 403, description = "Not a tenant admin", body = agentry_schema::ErrorResponse),
        (status = 409, description = "A user with this name exists", body = agentry_schema::ErrorResponse),
        (status = 413, description = "The body is over the size limit", body = agentry_schema::ErrorResponse),
        (status = 415, description = "The body is not `application/json`", body = agentry_schema::ErrorResponse),
        (status = 422, description = "A field is missing or invalid", body = agentry_schema::ErrorResponse),
        (status = 429, description = "The tenant is at `max_users` (`details.quota`, `Retry-After`)", body = agentry_schema::ErrorResponse),
    )
)]
pub async fn create_user(
    admin: TenantAdmin,
    state: web::Data<AppState>,
    body: ApiJson<CreateUserRequest>,
) -> ApiResult<HttpResponse> {
    // The cached tenant may be a few seconds old; quotas are read fresh.
    let tenant = agentry_store::tenants::get_own(&state.db, &admin.scope()).await?;
    let u = tenancy::create_user(&state.db, &tenant, body.into_inner()).await?;
    Ok(HttpResponse::Created().json(views::user(u)))
}

/// One user of the tenant.
#[utoipa::path(
    get,
    path = "/api/v1/tenant/users/{user_id}",
    operation_id = "tenant_get_user",
    tag = "tenant",
    params(("user_id" = String, Path, description = "User id (UUID)")),
    responses(
        (status = 200, description = "The user", body = UserInfo),
        (status = 400, description = "`user_id` is not a UUID", body = agentry_schema::ErrorResponse),
        (status = 401, description = "No usable API key", body = agentry_schema::ErrorResponse),
        (status = 403, description = "Not a tenant admin", body = agentry_schema::ErrorResponse),
        (status = 404, description = "No such user in the tenant", body = agentry_schema::ErrorResponse),
    )
)]
pub async fn get_user(
    admin: TenantAdmin,
    state: web::Data<AppState>,
    id: ApiPath<param::User>,
) -> ApiResult<Json<UserInfo>> {
    let id = id.into_inner();
    Ok(Json(views::user(
        tenancy::user(&state.db, &admin.scope(), id).await?,
    )))
}

/// Change a user's role or disable them.
#[utoipa::path(
    patch,
    path = "/api/v1/tenant/users/{user_id}",
    operation_id = "tenant_update_user",
    tag = "tenant",
    params(("user_id" = String, Path, description = "User id (UUID)")),
    request_body = UpdateUserRequest,
    responses(
        (status = 200, description = "Updated", body = UserInfo),
        (status = 400, description = "A bad `user_id`, or the body is not JSON", body = agentry_schema::ErrorResponse),
        (status = 401, description = "No usable API key", body = agentry_schema::ErrorResponse),
        (status = 403, description = "Not a tenant admin", body = agentry_schema::ErrorResponse),
        (status = 404, description = "No such user in the tenant", body = agentry_schema::ErrorResponse),
        (status = 409, description = "A tenant admin tried to demote or disable themselves", body = agentry_schema::ErrorResponse),
        (status = 413, description = "The body is over the size limit", body = agentry_schema::ErrorResponse),
        (status = 415, description = "The body is not `application/json`", body = agentry_schema::ErrorResponse),
        (status = 422, description = "A field is invalid", body = agentry_schema::ErrorResponse),
    )
)]
pub async fn update_user(
    admin: TenantAdmin,
    state: web::Data<AppState>,
    id: ApiPath<param::User>,
    body: ApiJson<UpdateUserRequest>,
) -> ApiResult<Json<UserInfo>> {
    let id = id.into_inner();
    let u = tenancy::update_user(
        &state.domain(),
        &admin.scope(),
        Actor::TenantAdmin(admin.user_id()),
        id,
        body.into_inner(),
    )
    .await?;
    Ok(Json(views::user(u)))
}

/// Delete a user and their keys.
#[utoipa::path(
    delete,
    path = "/api/v1/tenant/users/{user_id}",
    operation_id = "tenant_delete_user",
    tag = "tenant",
    params(("user_id" = String, Path, description = "User id (UUID)")),
    responses(
        (status = 204, description = "Deleted"),
        (status = 400, description = "`user_id` is not a UUID", body = agentry_schema::ErrorResponse),
        (status = 401, description = "No usable API key", body = agentry_schema::ErrorResponse),
        (status = 403, description = "Not a tenant admin", body = agentry_schema::ErrorResponse),
        (status = 404, description = "No such user in the tenant", body = agentry_schema::ErrorResponse),
        (status = 409, description = "A tenant admin tried to delete themselves", body = agentry_schema::ErrorResponse),
    )
)]
pub async fn delete_user(
    admin: TenantAdmin,
    state: web::Data<AppState>,
    id: ApiPath<param::User>,
) -> ApiResult<HttpResponse> {
    let id = id.into_inner();
    tenancy::delete_user(
        &state.domain(),
        &admin.scope(),
        Actor::TenantAdmin(admin.user_id()),
        id,
    )
    .await?;
    Ok(HttpResponse::NoContent().finish())
}

/// The tenant's API keys (never the keys themselves), newest first.
#[utoipa::path(
    get,
    path = "/api/v1/tenant/api-keys",
    operation_id = "tenant_list_keys",
    tag = "tenant",
    params(KeysQuery),
    responses(
        (status = 200, description = "A page of keys", body = Page<ApiKeyInfo>),
        (status = 400, description = "A bad query parameter", body = agentry_schema::ErrorResponse),
        (status = 401, description = "No usable API key", body = agentry_schema::ErrorResponse),
        (status = 403, description = "Not a tenant admin", body = agentry_schema::ErrorResponse),
    )
)]
pub async fn list_keys(
    admin: TenantAdmin,
    state: web::Data<AppState>,
    query: ApiQuery<KeysQuery>,
) -> ApiResult<Json<Page<ApiKeyInfo>>> {
    Ok(Json(
        keys_page(&state.db, &admin.scope(), query.into_inner()).await?,
    ))
}

/// Mint a key for a user of the tenant (at most the user's role). Shown this once.
#[utoipa::path(
    post,
    path = "/api/v1/tenant/api-keys",
    operation_id = "tenant_create_key",
    tag = "tenant",
    request_body = CreateApiKeyRequest,
    responses(
        (status = 201, description = "Created; `key` is shown this once", body = CreatedApiKey),
        (status = 400, description = "The body is not JSON", body = agentry_schema::ErrorResponse),
        (status = 401, description = "No usable API key", body = agentry_schema::ErrorResponse),
        (status = 403, description = "Not a tenant admin", body = agentry_schema::ErrorResponse),
        (status = 413, description = "The body is over the size limit", body = agentry_schema::ErrorResponse),
        (status = 415, description = "The body is not `application/json`", body = agentry_schema::ErrorResponse),
        (status = 422, description = "A field is missing or invalid (unknown user, a role above the user's, a past expiry)", body = agentry_schema::ErrorResponse),
    )
)]
pub async fn create_key(
    admin: TenantAdmin,
    state: web::Data<AppState>,
    body: ApiJson<CreateApiKeyRequest>,
) -> ApiResult<HttpResponse> {
    let k = tenancy::create_key(&state.db, &admin.scope(), body.into_inner()).await?;
    Ok(HttpResponse::Created().json(created_key(k)))
}

/// One key of the tenant (never the key itself).
#[utoipa::path(
    get,
    path = "/api/v1/tenant/api-keys/{key_id}",
    operation_id = "tenant_get_key",
    tag = "tenant",
    params(("key_id" = String, Path, description = "Key id (UUID, not the key)")),
    responses(
        (status = 200, description = "The key's record", body = ApiKeyInfo),
        (status = 400, description = "`key_id` is not a UUID", body = agentry_schema::ErrorResponse),
        (status = 401, description = "No usable API key", body = agentry_schema::ErrorResponse),
        (status = 403, description = "Not a tenant admin", body = agentry_schema::ErrorResponse),
        (status = 404, description = "No such key in the tenant", body = agentry_schema::ErrorResponse),
    )
)]
pub async fn get_key(
    admin: TenantAdmin,
    state: web::Data<AppState>,
    id: ApiPath<param::Key>,
) -> ApiResult<Json<ApiKeyInfo>> {
    let id = id.into_inner();
    Ok(Json(views::api_key(
        tenancy::key(&state.db, &admin.scope(), id).await?,
    )))
}

/// Revoke a key of the tenant.
#[utoipa::path(
    delete,
    path = "/api/v1/tenant/api-keys/{key_id}",
    operation_id = "tenant_revoke_key",
    tag = "tenant",
    params(("key_id" = String, Path, description = "Key id (UUID, not the key)")),
    responses(
        (status = 200, description = "Revoked; the record with `revoked_at`", body = ApiKeyInfo),
        (status = 400, description = "`key_id` is not a UUID", body = agentry_schema::ErrorResponse),
        (status = 401, description = "No usable API key", body = agentry_schema::ErrorResponse),
        (status = 403, description = "Not a tenant admin", body = agentry_schema::ErrorResponse),
        (status = 404, description = "No such key in the tenant", body = agentry_schema::ErrorResponse),
    )
)]
pub async fn revoke_key(
    admin: TenantAdmin,
    state: web::Data<AppState>,
    id: ApiPath<param::Key>,
) -> ApiResult<Json<ApiKeyInfo>> {
    let id = id.into_inner();
    Ok(Json(views::api_key(
        tenancy::revoke_key(&state.domain(), &admin.scope(), id).await?,
    )))
}
