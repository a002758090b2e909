//! A tenant's own model connections (bring your own key, issue 16 item 4):
//! `GET|POST /model-connections`, `GET|PUT|DELETE /model-connections/{connection_id}`.
//!
//! Everyone of the tenant lists and reads them; tenant admins create, replace and delete them.
//! The API key is sealed at rest with the server's encryption key (as MCP secrets are) and is
//! write-only: responses say `api_key_set`, never the key, and no message quotes it. A base URL
//! is tenant input, so the network rule of users' MCP servers and the web tools applies: a host
//! that resolves to a private, loopback or link-local address is refused (unless the platform
//! allows it, `tools.allow_private_addresses` / `tools.allowed_networks`), and the model client
//! checks the addresses again on every connection (its DNS resolver refuses them), so a DNS
//! change after the check leads nowhere either.

use actix_web::HttpResponse;
use actix_web::web::{self, Json};
use agentry_llm::Provider;
use agentry_schema::api::{
    CreateModelConnectionRequest, ModelConnectionInfo, ModelConnectionSpecRequest,
};
use agentry_schema::error::ErrorCode;
use agentry_schema::ids::ModelConnectionId;
use agentry_store::model_connections::{self as stored, ConnectionSpec, ModelConnection};
use agentry_tools::tool::ToolError;

use crate::auth::{TenantAdmin, TenantCaller};
use crate::error::{ApiError, ApiResult};
use crate::extract::{ApiJson, ApiPath, param};
use crate::routes::agents::bounded;
use crate::routes::resource::endpoint;
use crate::state::AppState;
use crate::views;
use agentry_domain::tenancy::valid_name;

pub fn configure(cfg: &mut web::ServiceConfig) {
    cfg.service(
        endpoint("/model-connections")
            .get(list_connections)
            .post(create_connection),
    )
    .service(
        endpoint("/model-connections/{connection_id}")
            .get(get_connection)
            .put(replace_connection)
            .delete(delete_connection),
    );
}

/// Connections a tenant may have.
pub const MAX_CONNECTIONS: u64 = 100;
pub const MAX_BASE_URL_CHARS: usize = 2048;
pub const MAX_KEY_CHARS: usize = 4096;
pub const MAX_CONNECTION_TIMEOUT_SECS: u32 = 600;
pub const DEFAULT_CONNECTION_TIMEOUT_SECS: u32 = 120;
pub const MAX_CONNECTION_RETRIES: u32 = 10;
pub const DEFAULT_CONNECTION_RETRIES: u32 = 3;

fn provider_of(raw: &str) -> ApiResult<Provider> {
    raw.trim()
        .parse::<Provider>()
        .ok()
        .filter(|p| *p != Provider::Scripted)
        .ok_or_else(|| {
            ApiError::validation(
                "provider",
                format!(
                    "unknown provider {:?}: use `openai` (any OpenAI-compatible endpoint: OpenAI, DeepSeek, vLLM, …) or `anthropic`",
                    raw.chars().take(40).collect::<String>()
                ),
            )
        })
}

/// A base URL a tenant may point the server at: http(s), no credentials in it, and a host that
/// resolves only to addresses the network policy allows.
async fn valid_base_url(state: &AppState, raw: &str) -> ApiResult<String> {
    let field = "base_url";
    let url = raw.trim();
    if url.chars().count() > MAX_BASE_URL_CHARS {
        return Err(ApiError::validation(
            field,
            format!("`base_url` must be at most {MAX_BASE_URL_CHARS} characters"),
        ));
    }
    let parsed = reqwest::Url::parse(url).map_err(|e| {
        ApiError::validation(
            field,
            format!("`base_url` is not a valid URL ({e}); give the API root, e.g. https://api.openai.com/v1"),
        )
    })?;
    if !matches!(parsed.scheme(), "http" | "https") {
        return Err(ApiError::validation(
            field,
            format!(
                "`base_url` must be an http:// or https:// URL, not {}:",
                parsed.scheme()
            ),
        ));
    }
    if !parsed.username().is_empty() || parsed.password().is_some() {
        return Err(ApiError::validation(
            field,
            "`base_url` must not carry credentials (user:password@); give the key as `api_key`, which is stored sealed",
        ));
    }
    if parsed.query().is_some() || parsed.fragment().is_some() {
        return Err(ApiError::validation(
            field,
            "`base_url` is the API root: no query string or fragment",
        ));
    }
    match agentry_builtin::net_guard::check_parsed(parsed, &state.settings.tools).await {
        Ok(_) => Ok(url.trim_end_matches('/').to_string()),
        Err(ToolError::Failed { message, .. }) => Err(ApiError::validation(
            field,
            format!(
                "`base_url` is refused: {message}; give a host name that resolves, or an IP address"
            ),
        )),
        Err(e) => Err(ApiError::validation(
            field,
            format!("`base_url` is refused: {e}"),
        )),
    }
}

/// A key that can go into an HTTP header. The message never quotes it.
fn valid_key(raw: &str) -> ApiResult<String> {
    let key = raw.trim();
    if key.is_empty() {
        return Err(ApiError::validation(
            "api_key",
            "`api_key` must not be empty; send null (or leave it out when creating) for a connection without a key",
        ));
    }
    if key.chars().count() > MAX_KEY_CHARS {
        return Err(ApiError::validation(
            "api_key",
            format!("`api_key` must be at most {MAX_KEY_CHARS} characters"),
        ));
    }
    if !key.chars().all(|c| c.is_ascii_graphic()) {
        return Err(ApiError::validation(
            "api_key",
            "`api_key` must be visible ASCII characters without spaces (it is sent in an HTTP header)",
        ));
    }
    Ok(key.to_string())
}

fn seal(state: &AppState, key: &str) -> ApiResult<String> {
    let Some(secrets) = state.secrets.as_ref() else {
        return Err(ApiError::new(
            ErrorCode::ServiceUnavailable,
            "this server has no encryption key (AGENTRY_MCP__ENCRYPTION_KEY), so it cannot store model keys; ask the platform operator, or create the connection without `api_key`",
        ));
    };
    secrets
        .seal(key)
        .map_err(|e| ApiError::internal("sealing a model key", e))
}

/// Turn a request into a checked spec. `current` is the stored connection on a `PUT`: its key
/// stays when the request leaves `api_key` out.
async fn spec_from(
    state: &AppState,
    id: &ModelConnectionId,
    req: ModelConnectionSpecRequest,
    current: Option<&ModelConnection>,
) -> ApiResult<ConnectionSpec> {
    let provider = provider_of(&req.provider)?;
    let name = match req.name {
        Some(n) => valid_name("name", &n, 200)?,
        None => id.to_string(),
    };
    let model = match req.model {
        Some(m) => valid_name("model", &m, 200)?,
        None => provider.default_model().to_string(),
    };
    let timeout_secs = bounded(
        "timeout_secs",
        req.timeout_secs,
        DEFAULT_CONNECTION_TIMEOUT_SECS,
        1,
        MAX_CONNECTION_TIMEOUT_SECS,
    )?;
    let max_retries = bounded(
        "max_retries",
        req.max_retries,
        DEFAULT_CONNECTION_RETRIES,
        0,
        MAX_CONNECTION_RETRIES,
    )?;
    let embedding_model = match req.embedding_model.as_deref().map(str::trim) {
        None | Some("") => None,
        Some(m) => {
            if provider != Provider::OpenAi {
                return Err(ApiError::validation(
                    "embedding_model",
                    "`embedding_model` needs an `openai` (OpenAI-compatible) connection: the embeddings wire is `/v1/embeddings`",
                ));
            }
            Some(valid_name("embedding_model", m, 200)?)
        }
    };
    let key = match req.api_key {
        None => None,
        Some(None) => Some(None),
        Some(Some(k)) => Some(Some(valid_key(&k)?)),
    };
    // The URL last: checking it may ask the resolver.
    let base_url = match req.base_url.as_deref().map(str::trim) {
        None | Some("") => None,
        Some(u) => Some(valid_base_url(state, u).await?),
    };
    let api_key_sealed = match key {
        None => current.and_then(|c| c.spec.api_key_sealed.clone()),
        Some(None) => None,
        Some(Some(k)) => Some(seal(state, &k)?),
    };
    Ok(ConnectionSpec {
        name,
        provider: provider.as_str().to_string(),
        base_url,
        model,
        api_key_sealed,
        timeout_secs,
        max_retries,
        embedding_model,
    })
}

/// Sessions keep their assistant's effective settings (its connection included) between runs:
/// tell them, on this replica and the others.
async fn connections_changed(state: &AppState, admin: &TenantAdmin) {
    if let Err(e) = state.engine.assistants_changed(admin.tenant_id()).await {
        tracing::warn!(error = %e, "telling the engine about the model connection change failed");
    }
    agentry_domain::invalidate::announce(
        &state.domain(),
        agentry_domain::invalidate::Change::Assistants {
            tenant_id: admin.tenant_id(),
        },
    );
}

/// The tenant's model connections, by id (keys never shown).
#[utoipa::path(
    get,
    path = "/api/v1/model-connections",
    tag = "models",
    responses(
        (status = 200, description = "The tenant's model connections, by id", body = Vec<ModelConnectionInfo>),
        (status = 401, description = "No usable API key", body = agentry_schema::ErrorResponse),
        (status = 403, description = "The platform admin key (it has no tenant)", body = agentry_schema::ErrorResponse),
    )
)]
pub async fn list_connections(
    caller: TenantCaller,
    state: web::Data<AppState>,
) -> ApiResult<Json<Vec<ModelConnectionInfo>>> {
    Ok(Json(
        stored::list(&state.db, &caller.scope())
            .await?
            .into_iter()
            .map(views::model_connection)
            .collect(),
    ))
}

/// One model connection of the tenant.
#[utoipa::path(
    get,
    path = "/api/v1/model-connections/{connection_id}",
    tag = "models",
    params(("connection_id" = String, Path, description = "Model connection id (a slug)")),
    responses(
        (status = 200, description = "The connection; `api_key_set` says whether a key is stored", body = ModelConnectionInfo),
        (status = 400, description = "`connection_id` is not a valid slug", body = agentry_schema::ErrorResponse),
        (status = 401, description = "No usable API key", body = agentry_schema::ErrorResponse),
        (status = 403, description = "The platform admin key (it has no tenant)", body = agentry_schema::ErrorResponse),
        (status = 404, description = "No such connection in the tenant", body = agentry_schema::ErrorResponse),
    )
)]
pub async fn get_connection(
    caller: TenantCaller,
    state: web::Data<AppState>,
    id: ApiPath<param::ModelConnection>,
) -> ApiResult<Json<ModelConnectionInfo>> {
    let id = id.into_inner();
    let c = stored::get(&state.db, &caller.scope(), &id)
        .await?
        .ok_or_else(|| ApiError::not_found(format!("model connection {id}")))?;
    Ok(Json(views::model_connection(c)))
}

/// Create a model connection (tenant admins).
#[utoipa::path(
    post,
    path = "/api/v1/model-connections",
    tag = "models",
    request_body = CreateModelConnectionRequest,
    responses(
        (status = 201, description = "Created; the key is stored sealed and never shown", body = ModelConnectionInfo),
        (status = 400, description = "The body is not JSON", body = agentry_schema::ErrorResponse),
        (status = 401, description = "No usable API key", body = agentry_schema::ErrorResponse),
        (status = 403, description = "Not a tenant admin", body = agentry_schema::ErrorResponse),
        (status = 409, description = "A connection with this id exists, or the tenant has 100", body = agentry_schema::ErrorResponse),
        (status = 413, description = "The body is over the size limit", body = agentry_schema::ErrorResponse),
        (status = 415, description = "The body is not `application/json`", body = agentry_schema::ErrorResponse),
        (status = 422, description = "A field is missing or invalid (`details.field` names it): an unknown provider, a bad or refused base URL, an oversize field", body = agentry_schema::ErrorResponse),
        (status = 503, description = "The server has no encryption key, so a key cannot be stored", body = agentry_schema::ErrorResponse),
    )
)]
pub async fn create_connection(
    admin: TenantAdmin,
    state: web::Data<AppState>,
    body: ApiJson<CreateModelConnectionRequest>,
) -> ApiResult<HttpResponse> {
    let (id, spec) = body.into_inner().split();
    let id = ModelConnectionId::try_from(id.as_str())
        .map_err(|e| ApiError::validation("id", e.to_string()))?;
    let scope = admin.scope();
    let spec = spec_from(&state, &id, spec, None).await?;
    if stored::count(&state.db, &scope).await? >= MAX_CONNECTIONS {
        return Err(ApiError::conflict(format!(
            "the tenant has {MAX_CONNECTIONS} model connections, the most it may have; delete one first"
        )));
    }
    let created = stored::create(&state.db, &scope, &id, spec).await?;
    connections_changed(&state, &admin).await;
    Ok(HttpResponse::Created()
        .insert_header((
            actix_web::http::header::LOCATION,
            format!("/api/v1/model-connections/{id}"),
        ))
        .json(views::model_connection(created)))
}

/// Replace a model connection (tenant admins). Fields left out return to their defaults, but
/// the stored key stays unless `api_key` is given (a new key) or `null` (no key). Assistants
/// that use it get the change at their next run, on every replica.
#[utoipa::path(
    put,
    path = "/api/v1/model-connections/{connection_id}",
    tag = "models",
    params(("connection_id" = String, Path, description = "Model connection id (a slug)")),
    request_body = ModelConnectionSpecRequest,
    responses(
        (status = 200, description = "Replaced", body = ModelConnectionInfo),
        (status = 400, description = "A bad `connection_id`, or the body is not JSON", body = agentry_schema::ErrorResponse),
        (status = 401, description = "No usable API key", body = agentry_schema::ErrorResponse),
        (status = 403, description = "Not a tenant admin", body = agentry_schema::ErrorResponse),
        (status = 404, description = "No such connection", body = agentry_schema::ErrorResponse),
        (status = 413, description = "The body is over the size limit", body = agentry_schema::ErrorResponse),
        (status = 415, description = "The body is not `application/json`", body = agentry_schema::ErrorResponse),
        (status = 422, description = "A field is invalid (`details.field` names it)", body = agentry_schema::ErrorResponse),
        (status = 503, description = "The server has no encryption key, so a key cannot be stored", body = agentry_schema::ErrorResponse),
    )
)]
pub async fn replace_connection(
    admin: TenantAdmin,
    state: web::Data<AppState>,
    id: ApiPath<param::ModelConnection>,
    body: ApiJson<ModelConnectionSpecRequest>,
) -> ApiResult<Json<ModelConnectionInfo>> {
    let id = id.into_inner();
    let scope = admin.scope();
    let current = stored::get(&state.db, &scope, &id)
        .await?
        .ok_or_else(|| ApiError::not_found(format!("model connection {id}")))?;
    let spec = spec_from(&state, &id, body.into_inner(), Some(&current)).await?;
    let updated = stored::update(&state.db, &scope, &id, spec).await?;
    connections_changed(&state, &admin).await;
    Ok(Json(views::model_connection(updated)))
}

/// Delete a model connection (tenant admins); one that an assistant uses cannot be.
#[utoipa::path(
    delete,
    path = "/api/v1/model-connections/{connection_id}",
    tag = "models",
    params(("connection_id" = String, Path, description = "Model connection id (a slug)")),
    responses(
        (status = 204, description = "Deleted, its sealed key with it"),
        (status = 400, description = "A bad `connection_id`", body = agentry_schema::ErrorResponse),
        (status = 401, description = "No usable API key", body = agentry_schema::ErrorResponse),
        (status = 403, description = "Not a tenant admin", body = agentry_schema::ErrorResponse),
        (status = 404, description = "No such connection", body = agentry_schema::ErrorResponse),
        (status = 409, description = "Assistants use it (`details.assistants`)", body = agentry_schema::ErrorResponse),
    )
)]
pub async fn delete_connection(
    admin: TenantAdmin,
    state: web::Data<AppState>,
    id: ApiPath<param::ModelConnection>,
) -> ApiResult<HttpResponse> {
    let id = id.into_inner();
    let scope = admin.scope();
    if stored::get(&state.db, &scope, &id).await?.is_none() {
        return Err(ApiError::not_found(format!("model connection {id}")));
    }
    let users = agentry_store::assistants::using_connection(&state.db, &scope, &id).await?;
    if !users.is_empty() {
        let names: Vec<String> = users.iter().map(ToString::to_string).collect();
        return Err(ApiError::conflict(format!(
            "model connection {id:?} is used by {}: point them at another connection (or none) first",
            names.join(", ")
        ))
        .with_details(serde_json::json!({ "assistants": names })));
    }
    if !stored::delete(&state.db, &scope, &id).await? {
        return Err(ApiError::not_found(format!("model connection {id}")));
    }
    connections_changed(&state, &admin).await;
    Ok(HttpResponse::NoContent().finish())
}
