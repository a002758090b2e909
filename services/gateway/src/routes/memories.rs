//! Long-term memory over REST (docs/memory.md): `GET|POST /memories`, `GET /memories/search`,
//! `GET|PATCH|DELETE /memories/{memory_id}`.
//!
//! Everyone of a tenant reads their own `user` memories and the shared ones (`tenant`, and every
//! assistant's `assistant` knowledge); only tenant admins write the shared ones. Another user's
//! `user` memory is answered 404, as if it did not exist. The same [`MemoryBank`] serves the
//! memory tools and the runs, so what is stored here is what the assistants remember.
//!
//! [`MemoryBank`]: agentry_builtin::memory::MemoryBank

use actix_web::HttpResponse;
use actix_web::web::{self, Json};
use agentry_builtin::memory::{Fact, MemoryError, Who};
use agentry_schema::api::Page;
use agentry_schema::ids::AssistantId;
use agentry_schema::memory::{
    CreateMemoryRequest, MemoryHit, MemoryInfo, MemoryScope, MemorySearchResponse,
    UpdateMemoryRequest,
};
use agentry_store::memories::Memory;
use serde::Deserialize;
use utoipa::IntoParams;

use crate::auth::TenantCaller;
use crate::error::{ApiError, ApiResult};
use crate::extract::{ApiJson, ApiPath, ApiQuery, param};
use crate::routes::resource::endpoint;
use crate::routes::{page, page_of};
use crate::state::AppState;

pub fn configure(cfg: &mut web::ServiceConfig) {
    // `/memories/search` before `/memories/{memory_id}`, which would take "search" for an id.
    cfg.service(endpoint("/memories").get(list_memories).post(create_memory))
        .service(endpoint("/memories/search").get(search_memories))
        .service(
            endpoint("/memories/{memory_id}")
                .get(get_memory)
                .patch(update_memory)
                .delete(delete_memory),
        );
}

/// Search results a request may ask for.
pub const MAX_SEARCH_LIMIT: usize = 50;

pub fn memory_view(m: Memory) -> MemoryInfo {
    MemoryInfo {
        id: m.id.to_string(),
        scope: m.scope,
        assistant_id: m.assistant_id,
        user_id: m.user_id.to_string(),
        kind: m.kind,
        content: m.content,
        source_session_id: m.source_session_id.map(|s| s.to_string()),
        source_run_id: m.source_run_id.map(|r| r.to_string()),
        expires_at: m.expires_at,
        embedded: m.embedding.is_some(),
        created_at: m.created_at,
        updated_at: m.updated_at,
    }
}

fn api_error(e: MemoryError) -> ApiError {
    match e {
        MemoryError::Invalid { field, message } => ApiError::validation(field, message),
        MemoryError::Forbidden(m) => ApiError::forbidden(m),
        MemoryError::NotFound(id) => ApiError::not_found(format!("memory {id}")),
        MemoryError::Store(e) => e.into(),
    }
}

fn scope_param(raw: Option<&str>) -> ApiResult<Option<MemoryScope>> {
    raw.map(|s| {
        MemoryScope::parse(s).ok_or_else(|| {
            ApiError::invalid_query(
                "scope",
                format!(
                    "unknown scope {:?}: use user, assistant or tenant",
                    s.chars().take(40).collect::<String>()
                ),
            )
        })
    })
    .transpose()
}

fn assistant_param(raw: Option<&str>) -> ApiResult<Option<String>> {
    raw.map(|a| {
        AssistantId::try_from(a)
            .map(|id| id.to_string())
            .map_err(|e| ApiError::invalid_query("assistant_id", e.to_string()))
    })
    .transpose()
}

fn who(caller: &TenantCaller, assistant_id: Option<String>) -> Who {
    Who {
        tenant: caller.scope(),
        user_id: caller.user_id(),
        assistant_id,
        admin: caller.is_admin(),
    }
}

/// `GET /memories` query.
#[derive(Debug, Default, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct MemoriesQuery {
    /// `user` (default: your own), `assistant` or `tenant`.
    pub scope: Option<String>,
    /// With `scope=assistant`: only this assistant's knowledge.
    pub assistant_id: Option<String>,
    /// Items per page, 1–1000 (default 100).
    pub limit: Option<u64>,
    /// Items to skip (default 0).
    pub offset: Option<u64>,
}

/// The unexpired memories of one scope you can see, newest first.
#[utoipa::path(
    get,
    path = "/api/v1/memories",
    tag = "memory",
    params(MemoriesQuery),
    responses(
        (status = 200, description = "A page of memories", body = Page<MemoryInfo>),
        (status = 400, description = "A bad query parameter (`invalid_query`)", body = agentry_schema::ErrorResponse),
        (status = 401, description = "No usable API key", body = agentry_schema::ErrorResponse),
        (status = 403, description = "The platform admin key (it has no tenant)", body = agentry_schema::ErrorResponse),
    )
)]
pub async fn list_memories(
    caller: TenantCaller,
    state: web::Data<AppState>,
    query: ApiQuery<MemoriesQuery>,
) -> ApiResult<Json<Page<MemoryInfo>>> {
    let q = query.into_inner();
    let page = page(q.limit, q.offset)?;
    let scope = scope_param(q.scope.as_deref())?.unwrap_or_default();
    let assistant = assistant_param(q.assistant_id.as_deref())?;
    if assistant.is_some() && scope != MemoryScope::Assistant {
        return Err(ApiError::invalid_query(
            "assistant_id",
            "`assistant_id` goes with `scope=assistant`",
        ));
    }
    let (items, total) = state
        .memory
        .list(&who(&caller, assistant), &[scope], page)
        .await
        .map_err(api_error)?;
    Ok(Json(page_of(items, total, page, memory_view)))
}

/// `GET /memories/search` query.
#[derive(Debug, Default, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct SearchQuery {
    /// What to look for, in words (1–2000 characters).
    pub q: Option<String>,
    /// Only this scope; left out: every scope you can see.
    pub scope: Option<String>,
    /// Only this assistant's `assistant` knowledge (with your own and the tenant's).
    pub assistant_id: Option<String>,
    /// Results, 1–50 (default 10).
    pub limit: Option<u64>,
}

/// Search the memories you can see by meaning (by words when no embeddings model is
/// configured: `search` says which), best first.
#[utoipa::path(
    get,
    path = "/api/v1/memories/search",
    tag = "memory",
    params(SearchQuery),
    responses(
        (status = 200, description = "The relevant memories, best first, with their scores", body = MemorySearchResponse),
        (status = 400, description = "No `q`, or a bad query parameter (`invalid_query`)", body = agentry_schema::ErrorResponse),
        (status = 401, description = "No usable API key", body = agentry_schema::ErrorResponse),
        (status = 403, description = "The platform admin key (it has no tenant)", body = agentry_schema::ErrorResponse),
    )
)]
pub async fn search_memories(
    caller: TenantCaller,
    state: web::Data<AppState>,
    query: ApiQuery<SearchQuery>,
) -> ApiResult<Json<MemorySearchResponse>> {
    let q = query.into_inner();
    let text = q.q.as_deref().map(str::trim).unwrap_or_default();
    if text.is_empty() || text.chars().count() > 2000 {
        return Err(ApiError::invalid_query(
            "q",
            "`q` is what to look for: 1–2000 characters",
        ));
    }
    let limit = q.limit.unwrap_or(10);
    if !(1..=MAX_SEARCH_LIMIT as u64).contains(&limit) {
        return Err(ApiError::invalid_query(
            "limit",
            format!("`limit` must be between 1 and {MAX_SEARCH_LIMIT} (got {limit})"),
        ));
    }
    let scopes = match scope_param(q.scope.as_deref())? {
        Some(s) => vec![s],
        None => MemoryScope::ALL.to_vec(),
    };
    let assistant = assistant_param(q.assistant_id.as_deref())?;
    let found = state
        .memory
        .search(&who(&caller, assistant), text, &scopes, limit as usize)
        .await
        .map_err(api_error)?;
    Ok(Json(MemorySearchResponse {
        search: found.mode.as_str().to_string(),
        note: found.mode.note().map(str::to_string),
        items: found
            .hits
            .into_iter()
            .map(|(m, score)| MemoryHit {
                memory: memory_view(m),
                score: (score * 1000.0).round() / 1000.0,
            })
            .collect(),
    }))
}

/// Store a memory (the `assistant` and `tenant` scopes: tenant admins). One that says the same
/// as a memory of its scope refreshes that one instead (200, same id).
#[utoipa::path(
    post,
    path = "/api/v1/memories",
    tag = "memory",
    request_body = CreateMemoryRequest,
    responses(
        (status = 200, description = "A memory of the scope said the same: it was refreshed (its id, the new wording)", body = MemoryInfo),
        (status = 201, description = "Stored", body = MemoryInfo),
        (status = 400, description = "The body is not JSON", body = agentry_schema::ErrorResponse),
        (status = 401, description = "No usable API key", body = agentry_schema::ErrorResponse),
        (status = 403, description = "A member writing a shared scope, or the platform admin key", body = agentry_schema::ErrorResponse),
        (status = 422, description = "A field is missing or invalid (`details.field` names it): empty or oversize content, an unknown kind or scope, an expiry in the past, an unknown assistant", body = agentry_schema::ErrorResponse),
    )
)]
pub async fn create_memory(
    caller: TenantCaller,
    state: web::Data<AppState>,
    body: ApiJson<CreateMemoryRequest>,
) -> ApiResult<HttpResponse> {
    let req = body.into_inner();
    let scope = req.scope.unwrap_or_default();
    let assistant_id = match req.assistant_id.as_deref() {
        None => None,
        Some(a) => {
            let id = AssistantId::try_from(a)
                .map_err(|e| ApiError::validation("assistant_id", e.to_string()))?;
            // Shared knowledge of an assistant the tenant does not have would be read by none.
            if scope == MemoryScope::Assistant
                && caller.is_admin()
                && agentry_store::assistants::get(&state.db, &caller.scope(), &id)
                    .await?
                    .is_none()
            {
                return Err(ApiError::validation(
                    "assistant_id",
                    format!("the tenant has no assistant {:?}", id.as_str()),
                ));
            }
            Some(id.to_string())
        }
    };
    let fact = Fact {
        content: req.content,
        kind: req.kind.unwrap_or_else(|| "fact".into()),
        scope,
        assistant_id,
        expires_at: req.expires_at,
        source_session_id: None,
        source_run_id: None,
    };
    let r = state
        .memory
        .remember(&who(&caller, None), fact)
        .await
        .map_err(api_error)?;
    let location = format!("/api/v1/memories/{}", r.memory.id);
    let mut response = if r.merged {
        HttpResponse::Ok()
    } else {
        HttpResponse::Created()
    };
    Ok(response
        .insert_header((actix_web::http::header::LOCATION, location))
        .json(memory_view(r.memory)))
}

/// One memory you can see.
#[utoipa::path(
    get,
    path = "/api/v1/memories/{memory_id}",
    tag = "memory",
    params(("memory_id" = String, Path, description = "Memory id")),
    responses(
        (status = 200, description = "The memory", body = MemoryInfo),
        (status = 400, description = "`memory_id` is not a valid id", body = agentry_schema::ErrorResponse),
        (status = 401, description = "No usable API key", body = agentry_schema::ErrorResponse),
        (status = 403, description = "The platform admin key (it has no tenant)", body = agentry_schema::ErrorResponse),
        (status = 404, description = "No such memory that you can see (another user's, expired, deleted)", body = agentry_schema::ErrorResponse),
    )
)]
pub async fn get_memory(
    caller: TenantCaller,
    state: web::Data<AppState>,
    id: ApiPath<param::Memory>,
) -> ApiResult<Json<MemoryInfo>> {
    let m = state
        .memory
        .get(&who(&caller, None), id.into_inner())
        .await
        .map_err(api_error)?;
    Ok(Json(memory_view(m)))
}

/// Change a memory's content (embedded again), kind or expiry; shared ones: tenant admins.
#[utoipa::path(
    patch,
    path = "/api/v1/memories/{memory_id}",
    tag = "memory",
    params(("memory_id" = String, Path, description = "Memory id")),
    request_body = UpdateMemoryRequest,
    responses(
        (status = 200, description = "Changed", body = MemoryInfo),
        (status = 400, description = "A bad `memory_id`, or the body is not JSON", body = agentry_schema::ErrorResponse),
        (status = 401, description = "No usable API key", body = agentry_schema::ErrorResponse),
        (status = 403, description = "A member changing a shared memory, or the platform admin key", body = agentry_schema::ErrorResponse),
        (status = 404, description = "No such memory that you can see", body = agentry_schema::ErrorResponse),
        (status = 422, description = "A field is invalid (`details.field` names it)", body = agentry_schema::ErrorResponse),
    )
)]
pub async fn update_memory(
    caller: TenantCaller,
    state: web::Data<AppState>,
    id: ApiPath<param::Memory>,
    body: ApiJson<UpdateMemoryRequest>,
) -> ApiResult<Json<MemoryInfo>> {
    let req = body.into_inner();
    let m = state
        .memory
        .update(
            &who(&caller, None),
            id.into_inner(),
            req.content,
            req.kind,
            req.expires_at,
        )
        .await
        .map_err(api_error)?;
    Ok(Json(memory_view(m)))
}

/// Forget a memory; shared ones: tenant admins.
#[utoipa::path(
    delete,
    path = "/api/v1/memories/{memory_id}",
    tag = "memory",
    params(("memory_id" = String, Path, description = "Memory id")),
    responses(
        (status = 204, description = "Deleted"),
        (status = 400, description = "A bad `memory_id`", body = agentry_schema::ErrorResponse),
        (status = 401, description = "No usable API key", body = agentry_schema::ErrorResponse),
        (status = 403, description = "A member deleting a shared memory, or the platform admin key", body = agentry_schema::ErrorResponse),
        (status = 404, description = "No such memory that you can see", body = agentry_schema::ErrorResponse),
    )
)]
pub async fn delete_memory(
    caller: TenantCaller,
    state: web::Data<AppState>,
    id: ApiPath<param::Memory>,
) -> ApiResult<HttpResponse> {
    state
        .memory
        .forget(&who(&caller, None), id.into_inner())
        .await
        .map_err(api_error)?;
    Ok(HttpResponse::NoContent().finish())
}
