//! The enterprise admin API, for the platform admin key only: tenants with their quotas, and
//! each tenant's users, API keys and usage. While `auth.admin_key` is unset every route here
//! answers 404.

use actix_web::HttpResponse;
use actix_web::web::{self, Json};
use agentry_schema::api::{
    ApiKeyInfo, CreateApiKeyRequest, CreateTenantRequest, CreateUserRequest, CreatedApiKey, Page,
    ReplaceTenantRequest, TenantInfo, UpdateTenantRequest, UpdateUserRequest, UsageReport,
    UserInfo,
};
use agentry_schema::ids::UserId;
use agentry_store::api_keys::CreatedKey;
use agentry_store::tenants::Tenant;
use serde::Deserialize;
use utoipa::IntoParams;

use crate::auth::PlatformAdmin;
use crate::error::ApiResult;
use crate::extract::{ApiJson, ApiPath, ApiQuery, param};
use crate::routes::resource::endpoint;
use crate::routes::{PageQuery, page, page_of};
use crate::state::AppState;
use crate::views;
use agentry_domain::tenancy::{self, Actor};

pub fn configure(cfg: &mut web::ServiceConfig) {
    cfg.service(
        endpoint("/admin/tenants")
            .get(list_tenants)
            .post(create_tenant),
    )
    .service(
        endpoint("/admin/tenants/{tenant_id}")
            .get(get_tenant)
            .put(replace_tenant)
            .patch(update_tenant)
            .delete(delete_tenant),
    )
    .service(
        endpoint("/admin/tenants/{tenant_id}/users")
            .get(list_users)
            .post(create_user),
    )
    .service(
        endpoint("/admin/tenants/{tenant_id}/users/{user_id}")
            .get(get_user)
            .patch(update_user)
            .delete(delete_user),
    )
    .service(
        endpoint("/admin/tenants/{tenant_id}/api-keys")
            .get(list_keys)
            .post(create_key),
    )
    .service(
        endpoint("/admin/tenants/{tenant_id}/api-keys/{key_id}")
            .get(get_key)
            .delete(revoke_key),
    )
    .service(endpoint("/admin/tenants/{tenant_id}/usage").get(usage));
}

/// The created key as shown once.
pub fn created_key(k: CreatedKey) -> CreatedApiKey {
    CreatedApiKey {
        info: views::api_key(k.key),
        key: k.secret,
    }
}

async fn tenant_at(
    state: &AppState,
    admin: &PlatformAdmin,
    id: ApiPath<param::Tenant>,
) -> ApiResult<Tenant> {
    Ok(tenancy::tenant(&state.db, &admin.scope(), id.into_inner()).await?)
}

/// Every tenant, oldest first.
#[utoipa::path(
    get,
    path = "/api/v1/admin/tenants",
    tag = "admin",
    params(PageQuery),
    responses(
        (status = 200, description = "A page of tenants", body = Page<TenantInfo>),
        (status = 400, description = "A bad query parameter", body = agentry_schema::ErrorResponse),
        (status = 401, description = "No usable API key", body = agentry_schema::ErrorResponse),
        (status = 403, description = "Not the platform admin key", body = agentry_schema::ErrorResponse),
        (status = 404, description = "The admin API is off (no `auth.admin_key`)", body = agentry_schema::ErrorResponse),
    )
)]
pub async fn list_tenants(
    admin: PlatformAdmin,
    state: web::Data<AppState>,
    query: ApiQuery<PageQuery>,
) -> ApiResult<Json<Page<TenantInfo>>> {
    let page = query.0.page()?;
    let (items, total) = tenancy::list_tenants(&state.db, &admin.scope(), page).await?;
    Ok(Json(page_of(items, total, page, views::tenant)))
}

/// Create a tenant (with its `default` assistant). Quotas and policy fields left out get the
/// defaults.
#[utoipa::path(
    post,
    path = "/api/v1/admin/tenants",
    tag = "admin",
    request_body = CreateTenantRequest,
    responses(
        (status = 201, description = "Created", body = TenantInfo),
        (status = 400, description = "The body is not JSON", body = agentry_schema::ErrorResponse),
        (status = 401, description = "No usable API key", body = agentry_schema::ErrorResponse),
        (status = 403, description = "Not the platform admin key", body = agentry_schema::ErrorResponse),
        (status = 404, description = "The admin API is off", body = agentry_schema::ErrorResponse),
        (status = 409, description = "A tenant with this name exists", body = agentry_schema::ErrorResponse),
        (status = 413, description = "The body is over the size limit", body = agentry_schema::ErrorResponse),
        (status = 415, description = "The body is not `application/json`", body = agentry_schema::ErrorResponse),
        (status = 422, description = "A field is missing or invalid (`details.field` names it)", body = agentry_schema::ErrorResponse),
    )
)]
pub async fn create_tenant(
    admin: PlatformAdmin,
    state: web::Data<AppState>,
    body: ApiJson<CreateTenantRequest>,
) -> ApiResult<HttpResponse> {
    let t = tenancy::create_tenant(&state.db, &admin.scope(), body.into_inner()).await?;
    Ok(HttpResponse::Created()
        .insert_header((
            actix_web::http::header::LOCATION,
            format!("/api/v1/admin/tenants/{}", t.id),
        ))
        .json(views::tenant(t)))
}

/// One tenant with its quotas.
#[utoipa::path(
    get,
    path = "/api/v1/admin/tenants/{tenant_id}",
    tag = "admin",
    params(("tenant_id" = String, Path, description = "Tenant id (UUID)")),
    responses(
        (status = 200, description = "The tenant", body = TenantInfo),
        (status = 400, description = "`tenant_id` is not a UUID", body = agentry_schema::ErrorResponse),
        (status = 401, description = "No usable API key", body = agentry_schema::ErrorResponse),
        (status = 403, description = "Not the platform admin key", body = agentry_schema::ErrorResponse),
        (status = 404, description = "No such tenant, or the admin API is off", body = agentry_schema::ErrorResponse),
    )
)]
pub async fn get_tenant(
    admin: PlatformAdmin,
    state: web::Data<AppState>,
    tenant: ApiPath<param::Tenant>,
) -> ApiResult<Json<TenantInfo>> {
    Ok(Json(views::tenant(
        tenant_at(&state, &admin, tenant).await?,
    )))
}

/// Change some of a tenant's fields: name, `status` (`active`/`suspended`), any quota,
/// features, tool permissions (`null` = defaults), `policy` (a merge patch: only the policy
/// fields present change; `null` = defaults).
#[utoipa::path(
    patch,
    path = "/api/v1/admin/tenants/{tenant_id}",
    tag = "admin",
    params(("tenant_id" = String, Path, description = "Tenant id (UUID)")),
    request_body = UpdateTenantRequest,
    responses(
        (status = 200, description = "Updated", body = TenantInfo),
        (status = 400, description = "A bad `tenant_id`, or the body is not JSON", body = agentry_schema::ErrorResponse),
        (status = 401, description = "No usable API key", body = agentry_schema::ErrorResponse),
        (status = 403, description = "Not the platform admin key", body = agentry_schema::ErrorResponse),
        (status = 404, description = "No such tenant, or the admin API is off", body = agentry_schema::ErrorResponse),
        (status = 409, description = "Another tenant has this name", body = agentry_schema::ErrorResponse),
        (status = 413, description = "The body is over the size limit", body = agentry_schema::ErrorResponse),
        (status = 415, description = "The body is not `application/json`", body = agentry_schema::ErrorResponse),
        (status = 422, description = "A field is invalid", body = agentry_schema::ErrorResponse),
    )
)]
pub async fn update_tenant(
    admin: PlatformAdmin,
    state: web::Data<AppState>,
    tenant: ApiPath<param::Tenant>,
    body: ApiJson<UpdateTenantRequest>,
) -> ApiResult<Json<TenantInfo>> {
    let id = tenant.into_inner();
    Ok(Json(views::tenant(
        tenancy::update_tenant(&state.domain(), &admin.scope(), id, body.into_inner()).await?,
    )))
}

/// Replace a tenant: what is left out returns to its default (`status` to `active`).
#[utoipa::path(
    put,
    path = "/api/v1/admin/tenants/{tenant_id}",
    tag = "admin",
    params(("tenant_id" = String, Path, description = "Tenant id (UUID)")),
    request_body = ReplaceTenantRequest,
    responses(
        (status = 200, description = "Replaced", body = TenantInfo),
        (status = 400, description = "A bad `tenant_id`, or the body is not JSON", body = agentry_schema::ErrorResponse),
        (status = 401, description = "No usable API key", body = agentry_schema::ErrorResponse),
        (status = 403, description = "Not the platform admin key", body = agentry_schema::ErrorResponse),
        (status = 404, description = "No such tenant, or the admin API is off", body = agentry_schema::ErrorResponse),
        (status = 409, description = "Another tenant has this name", body = agentry_schema::ErrorResponse),
        (status = 413, description = "The body is over the size limit", body = agentry_schema::ErrorResponse),
        (status = 415, description = "The body is not `application/json`", body = agentry_schema::ErrorResponse),
        (status = 422, description = "A field is missing or invalid", body = agentry_schema::ErrorResponse),
    )
)]
pub async fn replace_tenant(
    admin: PlatformAdmin,
    state: web::Data<AppState>,
    tenant: ApiPath<param::Tenant>,
    body: ApiJson<ReplaceTenantRequest>,
) -> ApiResult<Json<TenantInfo>> {
    let id = tenant.into_inner();
    Ok(Json(views::tenant(
        tenancy::replace_tenant(&state.domain(), &admin.scope(), id, body.into_inner()).await?,
    )))
}

/// Delete a tenant and everything it owns (users, keys, assistants, sessions, audit).
#[utoipa::path(
    delete,
    path = "/api/v1/admin/tenants/{tenant_id}",
    tag = "admin",
    params(("tenant_id" = String, Path, description = "Tenant id (UUID)")),
    responses(
        (status = 204, description = "Deleted"),
        (status = 400, description = "`tenant_id` is not a UUID", body = agentry_schema::ErrorResponse),
        (status = 401, description = "No usable API key", body = agentry_schema::ErrorResponse),
        (status = 403, description = "Not the platform admin key", body = agentry_schema::ErrorResponse),
        (status = 404, description = "No such tenant, or the admin API is off", body = agentry_schema::ErrorResponse),
    )
)]
pub async fn delete_tenant(
    admin: PlatformAdmin,
    state: web::Data<AppState>,
    tenant: ApiPath<param::Tenant>,
) -> ApiResult<HttpResponse> {
    let id = tenant.into_inner();
    tenancy::delete_tenant(&state.domain(), &admin.scope(), id).await?;
    Ok(HttpResponse::NoContent().finish())
}

/// A tenant's users, oldest first.
#[utoipa::path(
    get,
    path = "/api/v1/admin/tenants/{tenant_id}/users",
    tag = "admin",
    params(("tenant_id" = String, Path, description = "Tenant id (UUID)"), PageQuery),
    responses(
        (status = 200, description = "A page of users", body = Page<UserInfo>),
        (status = 400, description = "A bad `tenant_id` or query parameter", body = agentry_schema::ErrorResponse),
        (status = 401, description = "No usable API key", body = agentry_schema::ErrorResponse),
        (status = 403, description = "Not the platform admin key", body = agentry_schema::ErrorResponse),
        (status = 404, description = "No such tenant, or the admin API is off", body = agentry_schema::ErrorResponse),
    )
)]
pub async fn list_users(
    admin: PlatformAdmin,
    state: web::Data<AppState>,
    tenant: ApiPath<param::Tenant>,
    query: ApiQuery<PageQuery>,
) -> ApiResult<Json<Page<UserInfo>>> {
    let page = query.0.page()?;
    let t = tenant_at(&state, &admin, tenant).await?;
    let (items, total) = tenancy::list_users(&state.db, &t.scope(), page).await?;
    Ok(Json(page_of(items, total, page, views::user)))
}

/// Add a user to a tenant (`role` defaults to `member`), within the tenant's `max_users`.
#[utoipa::path(
    post,
    path = "/api/v1/admin/tenants/{tenant_id}/users",
    tag = "admin",
    params(("tenant_id" = String, Path, description = "Tenant id (UUID)")),
    request_body = CreateUserRequest,
    responses(
        (status = 201, description = "Created", body = UserInfo),
        (status = 400, description = "A bad `tenant_id`, or the body is not JSON", body = agentry_schema::ErrorResponse),
        (status = 401, description = "No usable API key", body = agentry_schema::ErrorResponse),
        (status = 403, description = "Not the platform admin key", body = agentry_schema::ErrorResponse),
        (status = 404, description = "No such tenant, or the admin API is off", body = agentry_schema::ErrorResponse),
        (status = 409, description = "A user with this name exists in the tenant", body = agentry_schema::ErrorResponse),
        (status = 413, description = "The body is over the size limit", body = agentry_schema::ErrorResponse),
        (status = 415, description = "The body is not `application/json`", body = agentry_schema::ErrorResponse),
        (status = 422, description = "A field is missing or invalid", body = agentry_schema::ErrorResponse),
        (status = 429, description = "The tenant is at `max_users` (`details.quota`, `Retry-After`)", body = agentry_schema::ErrorResponse),
    )
)]
pub async fn create_user(
    admin: PlatformAdmin,
    state: web::Data<AppState>,
    tenant: ApiPath<param::Tenant>,
    body: ApiJson<CreateUserRequest>,
) -> ApiResult<HttpResponse> {
    let t = tenant_at(&state, &admin, tenant).await?;
    let u = tenancy::create_user(&state.db, &t, body.into_inner()).await?;
    Ok(HttpResponse::Created().json(views::user(u)))
}

/// One user of a tenant.
#[utoipa::path(
    get,
    path = "/api/v1/admin/tenants/{tenant_id}/users/{user_id}",
    tag = "admin",
    params(("tenant_id" = String, Path, description = "Tenant id (UUID)"), ("user_id" = String, Path, description = "User id (UUID)")),
    responses(
        (status = 200, description = "The user", body = UserInfo),
        (status = 400, description = "A bad `tenant_id` or `user_id`", body = agentry_schema::ErrorResponse),
        (status = 401, description = "No usable API key", body = agentry_schema::ErrorResponse),
        (status = 403, description = "Not the platform admin key", body = agentry_schema::ErrorResponse),
        (status = 404, description = "No such tenant or user, or the admin API is off", body = agentry_schema::ErrorResponse),
    )
)]
pub async fn get_user(
    admin: PlatformAdmin,
    state: web::Data<AppState>,
    tenant: ApiPath<param::Tenant>,
    user: ApiPath<param::User>,
) -> ApiResult<Json<UserInfo>> {
    let (tid, user_id) = (tenant.into_inner(), user.into_inner());
    let t = tenancy::tenant(&state.db, &admin.scope(), tid).await?;
    Ok(Json(views::user(
        tenancy::user(&state.db, &t.scope(), user_id).await?,
    )))
}

/// Change a user's role or disable them (a disabled user's keys answer 401).
#[utoipa::path(
    patch,
    path = "/api/v1/admin/tenants/{tenant_id}/users/{user_id}",
    tag = "admin",
    params(("tenant_id" = String, Path, description = "Tenant id (UUID)"), ("user_id" = String, Path, description = "User id (UUID)")),
    request_body = UpdateUserRequest,
    responses(
        (status = 200, description = "Updated", body = UserInfo),
        (status = 400, description = "A bad id, or the body is not JSON", body = agentry_schema::ErrorResponse),
        (status = 401, description = "No usable API key", body = agentry_schema::ErrorResponse),
        (status = 403, description = "Not the platform admin key", body = agentry_schema::ErrorResponse),
        (status = 404, description = "No such tenant or user, or the admin API is off", body = agentry_schema::ErrorResponse),
        (status = 413, description = "The body is over the size limit", body = agentry_schema::ErrorResponse),
        (status = 415, description = "The body is not `application/json`", body = agentry_schema::ErrorResponse),
        (status = 422, description = "A field is invalid", body = agentry_schema::ErrorResponse),
    )
)]
pub async fn update_user(
    admin: PlatformAdmin,
    state: web::Data<AppState>,
    tenant: ApiPath<param::Tenant>,
    user: ApiPath<param::User>,
    body: ApiJson<UpdateUserRequest>,
) -> ApiResult<Json<UserInfo>> {
    let (tid, user_id) = (tenant.into_inner(), user.into_inner());
    let t = tenancy::tenant(&state.db, &admin.scope(), tid).await?;
    let u = tenancy::update_user(
        &state.domain(),
        &t.scope(),
        Actor::Platform,
        user_id,
        body.into_inner(),
    )
    .await?;
    Ok(Json(views::user(u)))
}

/// Delete a user and their keys.
#[utoipa::path(
    delete,
    path = "/api/v1/admin/tenants/{tenant_id}/users/{user_id}",
    tag = "admin",
    params(("tenant_id" = String, Path, description = "Tenant id (UUID)"), ("user_id" = String, Path, description = "User id (UUID)")),
    responses(
        (status = 204, description = "Deleted"),
        (status = 400, description = "A bad `tenant_id` or `user_id`", body = agentry_schema::ErrorResponse),
        (status = 401, description = "No usable API key", body = agentry_schema::ErrorResponse),
        (status = 403, description = "Not the platform admin key", body = agentry_schema::ErrorResponse),
        (status = 404, description = "No such tenant or user, or the admin API is off", body = agentry_schema::ErrorResponse),
    )
)]
pub async fn delete_user(
    admin: PlatformAdmin,
    state: web::Data<AppState>,
    tenant: ApiPath<param::Tenant>,
    user: ApiPath<param::User>,
) -> ApiResult<HttpResponse> {
    let (tid, user_id) = (tenant.into_inner(), user.into_inner());
    let t = tenancy::tenant(&state.db, &admin.scope(), tid).await?;
    tenancy::delete_user(&state.domain(), &t.scope(), Actor::Platform, user_id).await?;
    Ok(HttpResponse::NoContent().finish())
}

/// `GET …/api-keys` query.
#[derive(Debug, Default, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct KeysQuery {
    /// Items per page, 1–1000 (default 100).
    pub limit: Option<u64>,
    /// Items to skip (default 0).
    pub offset: Option<u64>,
    /// Keys whose visible prefix starts with this (`agk_AbCd`).
    pub prefix: Option<String>,
    /// Only this user's keys.
    pub user_id: Option<String>,
}

/// List keys (newest first) of a scope: shared by the admin and tenant APIs.
pub async fn keys_page(
    db: &sea_orm::DatabaseConnection,
    scope: &agentry_store::TenantScope,
    q: KeysQuery,
) -> ApiResult<Page<ApiKeyInfo>> {
    let page = page(q.limit, q.offset)?;
    let user_id: Option<UserId> = q
        .user_id
        .as_deref()
        .map(|u| {
            u.parse().map_err(|e: agentry_schema::ids::InvalidId| {
                crate::error::ApiError::invalid_query("user_id", e.to_string())
            })
        })
        .transpose()?;
    let all = tenancy::list_keys(db, scope, user_id, q.prefix.as_deref()).await?;
    let total = all.len() as u64;
    let skip = usize::try_from(page.offset).unwrap_or(usize::MAX);
    let take = usize::try_from(page.limit).unwrap_or(usize::MAX);
    let items: Vec<_> = all.into_iter().skip(skip).take(take).collect();
    Ok(page_of(items, total, page, views::api_key))
}

/// A tenant's API keys (never the keys themselves), newest first.
#[utoipa::path(
    get,
    path = "/api/v1/admin/tenants/{tenant_id}/api-keys",
    tag = "admin",
    params(("tenant_id" = String, Path, description = "Tenant id (UUID)"), KeysQuery),
    responses(
        (status = 200, description = "A page of keys", body = Page<ApiKeyInfo>),
        (status = 400, description = "A bad `tenant_id` or query parameter", body = agentry_schema::ErrorResponse),
        (status = 401, description = "No usable API key", body = agentry_schema::ErrorResponse),
        (status = 403, description = "Not the platform admin key", body = agentry_schema::ErrorResponse),
        (status = 404, description = "No such tenant, or the admin API is off", body = agentry_schema::ErrorResponse),
    )
)]
pub async fn list_keys(
    admin: PlatformAdmin,
    state: web::Data<AppState>,
    tenant: ApiPath<param::Tenant>,
    query: ApiQuery<KeysQuery>,
) -> ApiResult<Json<Page<ApiKeyInfo>>> {
    let t = tenant_at(&state, &admin, tenant).await?;
    Ok(Json(
        keys_page(&state.db, &t.scope(), query.into_inner()).await?,
    ))
}

/// Mint a key for a user of the tenant. The response is the only time the key is shown.
#[utoipa::path(
    post,
    path = "/api/v1/admin/tenants/{tenant_id}/api-keys",
    tag = "admin",
    params(("tenant_id" = String, Path, description = "Tenant id (UUID)")),
    request_body = CreateApiKeyRequest,
    responses(
        (status = 201, description = "Created; `key` is shown this once", body = CreatedApiKey),
        (status = 400, description = "A bad `tenant_id`, or the body is not JSON", body = agentry_schema::ErrorResponse),
        (status = 401, description = "No usable API key", body = agentry_schema::ErrorResponse),
        (status = 403, description = "Not the platform admin key", body = agentry_schema::ErrorResponse),
        (status = 404, description = "No such tenant, or the admin API is off", body = agentry_schema::ErrorResponse),
        (status = 413, description = "The body is over the size limit", body = agentry_schema::ErrorResponse),
        (status = 415, description = "The body is not `application/json`", body = agentry_schema::ErrorResponse),
        (status = 422, description = "A field is missing or invalid (unknown user, a role above the user's, a past expiry)", body = agentry_schema::ErrorResponse),
    )
)]
pub async fn create_key(
    admin: PlatformAdmin,
    state: web::Data<AppState>,
    tenant: ApiPath<param::Tenant>,
    body: ApiJson<CreateApiKeyRequest>,
) -> ApiResult<HttpResponse> {
    let t = tenant_at(&state, &admin, tenant).await?;
    let k = tenancy::create_key(&state.db, &t.scope(), body.into_inner()).await?;
    Ok(HttpResponse::Created().json(created_key(k)))
}

/// One key of a tenant (never the key itself).
#[utoipa::path(
    get,
    path = "/api/v1/admin/tenants/{tenant_id}/api-keys/{key_id}",
    tag = "admin",
    params(("tenant_id" = String, Path, description = "Tenant id (UUID)"), ("key_id" = String, Path, description = "Key id (UUID, not the key)")),
    responses(
        (status = 200, description = "The key's record", body = ApiKeyInfo),
        (status = 400, description = "A bad `tenant_id` or `key_id`", body = agentry_schema::ErrorResponse),
        (status = 401, description = "No usable API key", body = agentry_schema::ErrorResponse),
        (status = 403, description = "Not the platform admin key", body = agentry_schema::ErrorResponse),
        (status = 404, description = "No such tenant or key, or the admin API is off", body = agentry_schema::ErrorResponse),
    )
)]
pub async fn get_key(
    admin: PlatformAdmin,
    state: web::Data<AppState>,
    tenant: ApiPath<param::Tenant>,
    key: ApiPath<param::Key>,
) -> ApiResult<Json<ApiKeyInfo>> {
    let (tid, key_id) = (tenant.into_inner(), key.into_inner());
    let t = tenancy::tenant(&state.db, &admin.scope(), tid).await?;
    Ok(Json(views::api_key(
        tenancy::key(&state.db, &t.scope(), key_id).await?,
    )))
}

/// Revoke a key: it answers 401 from now on. Revoking twice keeps the first time.
#[utoipa::path(
    delete,
    path = "/api/v1/admin/tenants/{tenant_id}/api-keys/{key_id}",
    tag = "admin",
    params(("tenant_id" = String, Path, description = "Tenant id (UUID)"), ("key_id" = String, Path, description = "Key id (UUID, not the key)")),
    responses(
        (status = 200, description = "Revoked; the record with `revoked_at`", body = ApiKeyInfo),
        (status = 400, description = "A bad `tenant_id` or `key_id`", body = agentry_schema::ErrorResponse),
        (status = 401, description = "No usable API key", body = agentry_schema::ErrorResponse),
        (status = 403, description = "Not the platform admin key", body = agentry_schema::ErrorResponse),
        (status = 404, description = "No such tenant or key, or the admin API is off", body = agentry_schema::ErrorResponse),
    )
)]
pub async fn revoke_key(
    admin: PlatformAdmin,
    state: web::Data<AppState>,
    tenant: ApiPath<param::Tenant>,
    key: ApiPath<param::Key>,
) -> ApiResult<Json<ApiKeyInfo>> {
    let (tid, key_id) = (tenant.into_inner(), key.into_inner());
    let t = tenancy::tenant(&state.db, &admin.scope(), tid).await?;
    Ok(Json(views::api_key(
        tenancy::revoke_key(&state.domain(), &t.scope(), key_id).await?,
    )))
}

/// `GET …/usage` query.
#[derive(Debug, Default, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct UsageQuery {
    /// First day (UTC, `YYYY-MM-DD`, inclusive); default 29 days before `to`.
    pub from: Option<String>,
    /// Last day (UTC, `YYYY-MM-DD`, inclusive); default today. At most 366 days in all.
    pub to: Option<String>,
}

/// Runs, tokens and tool calls of a tenant by day.
#[utoipa::path(
    get,
    path = "/api/v1/admin/tenants/{tenant_id}/usage",
    tag = "admin",
    params(("tenant_id" = String, Path, description = "Tenant id (UUID)"), UsageQuery),
    responses(
        (status = 200, description = "Usage by day with totals", body = UsageReport),
        (status = 400, description = "A bad `tenant_id` or date", body = agentry_schema::ErrorResponse),
        (status = 401, description = "No usable API key", body = agentry_schema::ErrorResponse),
        (status = 403, description = "Not the platform admin key", body = agentry_schema::ErrorResponse),
        (status = 404, description = "No such tenant, or the admin API is off", body = agentry_schema::ErrorResponse),
    )
)]
pub async fn usage(
    admin: PlatformAdmin,
    state: web::Data<AppState>,
    tenant: ApiPath<param::Tenant>,
    query: ApiQuery<UsageQuery>,
) -> ApiResult<Json<UsageReport>> {
    let q = query.into_inner();
    let t = tenant_at(&state, &admin, tenant).await?;
    Ok(Json(
        tenancy::usage_report(&state.db, &t.scope(), q.from.as_deref(), q.to.as_deref()).await?,
    ))
}
