//! A tenant's data sources (issue 17 item 2): `GET|POST /data-sources`,
//! `GET|PUT|DELETE /data-sources/{source_id}`. Tenant admins only: members reach the sources
//! their role may use through the data tools (`list_data_sources`, `run_sql`, …), never their
//! URLs.
//!
//! The URL is tenant input, so it is checked when it is registered and again by the tools
//! before every connection (`agentry_data::source`): a server's host must resolve only to
//! addresses the platform's network rule allows (the rule of the web tools and users' MCP
//! servers: no private, loopback, link-local or metadata address unless
//! `tools.allowed_networks` allows it) and never to the platform's own database or Redis; a
//! SQLite file must be inside the tenant's own area, `{data_dir}/workspaces/{tenant}/`, opened
//! beneath it (no `..`, no symlink out), read-only. The whole URL is sealed at rest (as MCP
//! secrets and model keys are); responses show it with the password masked.

use actix_web::HttpResponse;
use actix_web::web::{self, Json};
use agentry_data::DataError;
use agentry_data::source::SourceUrl;
use agentry_schema::api::{CreateDataSourceRequest, DataSourceInfo, DataSourceSpecRequest};
use agentry_schema::error::ErrorCode;
use agentry_schema::ids::DataSourceId;
use agentry_schema::roles::RoleName;
use agentry_schema::tenancy::Role;
use agentry_store::data_sources::{self as stored, DataSource, DataSourceSpec};
use agentry_store::tenants::Tenant;

use crate::auth::TenantAdmin;
use crate::error::{ApiError, ApiResult};
use crate::extract::{ApiJson, ApiPath, param};
use crate::routes::resource::endpoint;
use crate::state::AppState;
use crate::views;
use agentry_domain::tenancy::valid_name;

pub fn configure(cfg: &mut web::ServiceConfig) {
    cfg.service(
        endpoint("/data-sources")
            .get(list_sources)
            .post(create_source),
    )
    .service(
        endpoint("/data-sources/{source_id}")
            .get(get_source)
            .put(replace_source)
            .delete(delete_source),
    );
}

/// Data sources a tenant may have.
pub const MAX_SOURCES: u64 = 100;
pub const MAX_PASSWORD_CHARS: usize = 1024;

fn url_error(e: DataError) -> ApiError {
    ApiError::validation("url", format!("`url` is refused: {e}"))
}

/// The roles that may use a source: `admin`, `member` or the tenant's custom roles, no
/// repeats, at least one.
fn valid_roles(tenant: &Tenant, raw: Option<Vec<String>>) -> ApiResult<Vec<String>> {
    let Some(raw) = raw else {
        return Ok(vec![Role::Admin.as_str().to_string()]);
    };
    let mut out: Vec<String> = Vec::new();
    for r in raw {
        let r = r.trim().to_string();
        let custom = || {
            RoleName::parse(&r)
                .ok()
                .is_some_and(|n| tenant.custom_role(n).is_some())
        };
        if Role::parse(&r).is_none() && !custom() {
            return Err(ApiError::validation(
                "allowed_roles",
                format!(
                    "unknown role {:?}; use admin, member or one of the tenant's custom roles",
                    r.chars().take(40).collect::<String>()
                ),
            ));
        }
        if !out.contains(&r) {
            out.push(r);
        }
    }
    if out.is_empty() {
        return Err(ApiError::validation(
            "allowed_roles",
            "`allowed_roles` needs at least one role (admin, member); delete the source to stop its use",
        ));
    }
    Ok(out)
}

fn seal(state: &AppState, url: &str) -> ApiResult<String> {
    let Some(secrets) = state.secrets.as_ref() else {
        return Err(ApiError::new(
            ErrorCode::ServiceUnavailable,
            "this server has no encryption key (AGENTRY_MCP__ENCRYPTION_KEY), so it cannot store data source URLs; ask the platform operator",
        ));
    };
    secrets
        .seal(url)
        .map_err(|e| ApiError::internal("sealing a data source URL", e))
}

/// The stored URL of `current`, opened (for a `PUT` that keeps its password).
fn stored_url(state: &AppState, current: &DataSource) -> Option<SourceUrl> {
    let raw = state
        .secrets
        .as_ref()?
        .open(&current.spec.url_sealed)
        .ok()?;
    SourceUrl::parse(&raw).ok()
}

/// Turn a request into a checked, sealed spec. `current` is the stored source on a `PUT`.
async fn spec_from(
    state: &AppState,
    admin: &TenantAdmin,
    id: &DataSourceId,
    req: DataSourceSpecRequest,
    current: Option<&DataSource>,
) -> ApiResult<(DataSourceSpec, bool)> {
    let name = match req.name {
        Some(n) => valid_name("name", &n, 200)?,
        None => id.to_string(),
    };
    let allowed_roles = valid_roles(admin.tenant(), req.allowed_roles)?;
    let mut url = SourceUrl::parse(&req.url).map_err(url_error)?;
    if let Some(Some(p)) = &req.password
        && (p.is_empty() || p.chars().count() > MAX_PASSWORD_CHARS)
    {
        return Err(ApiError::validation(
            "password",
            format!("`password` must be 1–{MAX_PASSWORD_CHARS} characters, or null for none"),
        ));
    }
    let before = current.and_then(|c| stored_url(state, c));
    match (&mut url, req.password) {
        (SourceUrl::Sqlite { .. }, Some(Some(_))) => {
            return Err(ApiError::validation(
                "password",
                "a SQLite data source has no password",
            ));
        }
        (SourceUrl::Server { url, .. }, Some(password)) => {
            let set = url.set_password(password.as_deref());
            if set.is_err() {
                return Err(ApiError::validation(
                    "password",
                    "this URL cannot carry a password",
                ));
            }
        }
        // Left out on a PUT: the stored password stays for the same server and user (never
        // handed to another host).
        (SourceUrl::Server { url, .. }, None) if url.password().is_none() => {
            if let Some(SourceUrl::Server { url: old, .. }) = &before
                && old.host_str() == url.host_str()
                && old.port_or_known_default() == url.port_or_known_default()
                && old.username() == url.username()
                && old.password().is_some()
            {
                let _ = url.set_password(old.password());
            }
        }
        _ => {}
    }
    url.check(state.data.policy(), &admin.tenant_id().to_string())
        .await
        .map_err(url_error)?;
    let (raw, password_set) = match &url {
        SourceUrl::Server { url, .. } => (url.to_string(), url.password().is_some()),
        SourceUrl::Sqlite { path } => (format!("sqlite:{}", path.display()), false),
    };
    let same_database = before.as_ref() == Some(&url);
    let url_sealed = seal(state, &raw)?;
    Ok((
        DataSourceSpec {
            name,
            engine: url.engine().as_str().to_string(),
            url_redacted: url.redacted(),
            url_sealed,
            password_set,
            allowed_roles,
        },
        same_database,
    ))
}

/// The tenant's data sources, by id (passwords never shown).
#[utoipa::path(
    get,
    path = "/api/v1/data-sources",
    tag = "data",
    responses(
        (status = 200, description = "The tenant's data sources, by id", body = Vec<DataSourceInfo>),
        (status = 401, description = "No usable API key", body = agentry_schema::ErrorResponse),
        (status = 403, description = "Not a tenant admin", body = agentry_schema::ErrorResponse),
    )
)]
pub async fn list_sources(
    admin: TenantAdmin,
    state: web::Data<AppState>,
) -> ApiResult<Json<Vec<DataSourceInfo>>> {
    Ok(Json(
        stored::list(&state.db, &admin.scope())
            .await?
            .into_iter()
            .map(views::data_source)
            .collect(),
    ))
}

/// One data source of the tenant.
#[utoipa::path(
    get,
    path = "/api/v1/data-sources/{source_id}",
    tag = "data",
    params(("source_id" = String, Path, description = "Data source id (a slug)")),
    responses(
        (status = 200, description = "The data source; its password is never shown", body = DataSourceInfo),
        (status = 400, description = "`source_id` is not a valid slug", body = agentry_schema::ErrorResponse),
        (status = 401, description = "No usable API key", body = agentry_schema::ErrorResponse),
        (status = 403, description = "Not a tenant admin", body = agentry_schema::ErrorResponse),
        (status = 404, description = "No such data source in the tenant", body = agentry_schema::ErrorResponse),
    )
)]
pub async fn get_source(
    admin: TenantAdmin,
    state: web::Data<AppState>,
    id: ApiPath<param::DataSource>,
) -> ApiResult<Json<DataSourceInfo>> {
    let id = id.into_inner();
    let s = stored::get(&state.db, &admin.scope(), &id)
        .await?
        .ok_or_else(|| ApiError::not_found(format!("data source {id}")))?;
    Ok(Json(views::data_source(s)))
}

/// Register a data source (tenant admins).
#[utoipa::path(
    post,
    path = "/api/v1/data-sources",
    tag = "data",
    request_body = CreateDataSourceRequest,
    responses(
        (status = 201, description = "Created; the URL is stored sealed, its password never shown", body = DataSourceInfo),
        (status = 400, description = "The body is not JSON", body = agentry_schema::ErrorResponse),
        (status = 401, description = "No usable API key", body = agentry_schema::ErrorResponse),
        (status = 403, description = "Not a tenant admin", body = agentry_schema::ErrorResponse),
        (status = 409, description = "A data source with this id exists, or the tenant has 100", body = agentry_schema::ErrorResponse),
        (status = 415, description = "The body is not `application/json`", body = agentry_schema::ErrorResponse),
        (status = 422, description = "A field is missing or invalid (`details.field` names it): a malformed or refused URL (a forbidden address, the platform's own services, a SQLite file outside the tenant's area), an unknown role", body = agentry_schema::ErrorResponse),
        (status = 503, description = "The server has no encryption key, so a URL cannot be stored", body = agentry_schema::ErrorResponse),
    )
)]
pub async fn create_source(
    admin: TenantAdmin,
    state: web::Data<AppState>,
    body: ApiJson<CreateDataSourceRequest>,
) -> ApiResult<HttpResponse> {
    let (id, spec) = body.into_inner().split();
    let id = DataSourceId::try_from(id.as_str())
        .map_err(|e| ApiError::validation("id", e.to_string()))?;
    let scope = admin.scope();
    let (spec, _) = spec_from(&state, &admin, &id, spec, None).await?;
    if stored::count(&state.db, &scope).await? >= MAX_SOURCES {
        return Err(ApiError::conflict(format!(
            "the tenant has {MAX_SOURCES} data sources, the most it may have; delete one first"
        )));
    }
    let created = stored::create(&state.db, &scope, &id, spec).await?;
    Ok(HttpResponse::Created()
        .insert_header((
            actix_web::http::header::LOCATION,
            format!("/api/v1/data-sources/{id}"),
        ))
        .json(views::data_source(created)))
}

/// Replace a data source (tenant admins). Fields left out return to their defaults; the stored
/// password stays when `password` is left out and the host, port and user are unchanged. The
/// cached catalog is kept only when the URL is the same.
#[utoipa::path(
    put,
    path = "/api/v1/data-sources/{source_id}",
    tag = "data",
    params(("source_id" = String, Path, description = "Data source id (a slug)")),
    request_body = DataSourceSpecRequest,
    responses(
        (status = 200, description = "Replaced", body = DataSourceInfo),
        (status = 400, description = "A bad `source_id`, or the body is not JSON", body = agentry_schema::ErrorResponse),
        (status = 401, description = "No usable API key", body = agentry_schema::ErrorResponse),
        (status = 403, description = "Not a tenant admin", body = agentry_schema::ErrorResponse),
        (status = 404, description = "No such data source", body = agentry_schema::ErrorResponse),
        (status = 422, description = "A field is invalid (`details.field` names it)", body = agentry_schema::ErrorResponse),
    )
)]
pub async fn replace_source(
    admin: TenantAdmin,
    state: web::Data<AppState>,
    id: ApiPath<param::DataSource>,
    body: ApiJson<DataSourceSpecRequest>,
) -> ApiResult<Json<DataSourceInfo>> {
    let id = id.into_inner();
    let scope = admin.scope();
    let current = stored::get(&state.db, &scope, &id)
        .await?
        .ok_or_else(|| ApiError::not_found(format!("data source {id}")))?;
    let (spec, same) = spec_from(&state, &admin, &id, body.into_inner(), Some(&current)).await?;
    let updated = stored::update(&state.db, &scope, &id, spec, same).await?;
    Ok(Json(views::data_source(updated)))
}

/// Delete a data source (tenant admins), its sealed URL and cached catalog with it.
#[utoipa::path(
    delete,
    path = "/api/v1/data-sources/{source_id}",
    tag = "data",
    params(("source_id" = String, Path, description = "Data source id (a slug)")),
    responses(
        (status = 204, description = "Deleted"),
        (status = 400, description = "A bad `source_id`", body = agentry_schema::ErrorResponse),
        (status = 401, description = "No usable API key", body = agentry_schema::ErrorResponse),
        (status = 403, description = "Not a tenant admin", body = agentry_schema::ErrorResponse),
        (status = 404, description = "No such data source", body = agentry_schema::ErrorResponse),
    )
)]
pub async fn delete_source(
    admin: TenantAdmin,
    state: web::Data<AppState>,
    id: ApiPath<param::DataSource>,
) -> ApiResult<HttpResponse> {
    let id = id.into_inner();
    if !stored::delete(&state.db, &admin.scope(), &id).await? {
        return Err(ApiError::not_found(format!("data source {id}")));
    }
    Ok(HttpResponse::NoContent().finish())
}
