//! A tenant's remote A2A agents (issue 27, item 5): `GET|POST /remote-agents`,
//! `GET|DELETE /remote-agents/{remote_agent_id}`. The `task` tool may delegate to them
//! (`remote_agent`), as it does to the tenant's own assistants (docs/a2a.md, "Remote agents").
//!
//! Everyone of the tenant lists and reads them (a run's `task` may name any); tenant admins
//! register and delete them. Registering fetches the agent's card and checks it (an A2A v1.0
//! card with a JSON-RPC interface) before anything is stored; the card's URL and its
//! interface's URL are tenant input, so the network rule of model connections and users' MCP
//! servers applies to both (no private, loopback or link-local address unless the platform
//! allows it, checked again on every connection). The credential (a bearer token or an API key
//! header) is sealed at rest with the server's encryption key and never shown again.

use std::time::Duration;

use actix_web::HttpResponse;
use actix_web::web::{self, Json};
use agentry_actors::remote_agents::{CardError, RemoteAgents, RemoteAuth};
use agentry_schema::api::{CreateRemoteAgentRequest, RemoteAgentAuthRequest, RemoteAgentInfo};
use agentry_schema::error::ErrorCode;
use agentry_schema::ids::RemoteAgentId;
use agentry_store::remote_agents::{self as stored, RemoteAgent, RemoteAgentSpec};
use serde_json::Value;

use crate::auth::{TenantAdmin, TenantCaller};
use crate::error::{ApiError, ApiResult};
use crate::extract::{ApiJson, ApiPath, param};
use crate::routes::agents::bounded;
use crate::routes::resource::endpoint;
use crate::state::AppState;

pub fn configure(cfg: &mut web::ServiceConfig) {
    cfg.service(
        endpoint("/remote-agents")
            .get(list_remote_agents)
            .post(create_remote_agent),
    )
    .service(
        endpoint("/remote-agents/{remote_agent_id}")
            .get(get_remote_agent)
            .delete(delete_remote_agent),
    );
}

/// Remote agents a tenant may register.
pub const MAX_REMOTE_AGENTS: u64 = 100;
pub const MAX_URL_CHARS: usize = 2048;
pub const MAX_CREDENTIAL_CHARS: usize = 4096;
pub const DEFAULT_TIMEOUT_SECS: u32 = 300;
pub const MAX_TIMEOUT_SECS: u32 = 3600;
/// How long reading the card may take at registration.
const CARD_TIMEOUT: Duration = Duration::from_secs(15);
/// The id's longest: the child run's `assistant_id` is `a2a:<id>` (64 characters at most).
const MAX_ID_CHARS: usize = 64 - agentry_actors::agent::task::REMOTE_PREFIX.len();

/// A stored agent as the API shows it: the credential never, only whether one is stored.
fn view(a: RemoteAgent) -> RemoteAgentInfo {
    let card: Value = serde_json::from_str(&a.spec.card).unwrap_or(Value::Null);
    let skills = card["skills"]
        .as_array()
        .map(|skills| {
            skills
                .iter()
                .map(|s| {
                    serde_json::json!({
                        "id": s["id"],
                        "name": s["name"],
                        "description": s["description"],
                    })
                })
                .collect()
        })
        .unwrap_or_default();
    RemoteAgentInfo {
        id: a.id.to_string(),
        name: a.spec.name,
        description: a.spec.description,
        url: a.spec.url,
        endpoint_url: a.spec.endpoint_url,
        auth: a.spec.auth_kind,
        auth_header: a.spec.auth_header,
        credential_set: a.spec.credential_sealed.is_some(),
        timeout_secs: a.spec.timeout_secs,
        skills,
        card,
        created_at: a.created_at,
        updated_at: a.updated_at,
    }
}

/// A token or key that can go into an HTTP header. The message never quotes it.
fn header_value(field: &str, raw: &str) -> ApiResult<String> {
    let v = raw.trim();
    if v.is_empty() || v.chars().count() > MAX_CREDENTIAL_CHARS {
        return Err(ApiError::validation(
            field,
            format!("`{field}` must be 1 to {MAX_CREDENTIAL_CHARS} characters"),
        ));
    }
    if !v.chars().all(|c| c.is_ascii_graphic() || c == ' ') {
        return Err(ApiError::validation(
            field,
            format!("`{field}` must be visible ASCII characters (it is sent in an HTTP header)"),
        ));
    }
    Ok(v.to_string())
}

/// The credential asked for, checked.
fn auth_of(req: Option<RemoteAgentAuthRequest>) -> ApiResult<RemoteAuth> {
    Ok(match req {
        None | Some(RemoteAgentAuthRequest::None) => RemoteAuth::None,
        Some(RemoteAgentAuthRequest::Bearer { token }) => {
            RemoteAuth::Bearer(header_value("auth.token", &token)?)
        }
        Some(RemoteAgentAuthRequest::ApiKey { header, key }) => {
            let name = header.trim();
            let valid = !name.is_empty()
                && name.len() <= 128
                && reqwest::header::HeaderName::from_bytes(name.as_bytes()).is_ok();
            let reserved = [
                "host",
                "content-type",
                "content-length",
                "a2a-version",
                "accept",
            ]
            .contains(&name.to_ascii_lowercase().as_str());
            if !valid || reserved {
                return Err(ApiError::validation(
                    "auth.header",
                    "`auth.header` must be an HTTP header name (≤ 128 characters, e.g. X-API-Key), not one the A2A client sets itself",
                ));
            }
            RemoteAuth::ApiKey {
                header: name.to_string(),
                key: header_value("auth.key", &key)?,
            }
        }
    })
}

/// The URL as given: http(s), no credentials, no fragment, within the length limit. (The
/// network rule is the card fetch's.)
fn valid_url(raw: &str) -> ApiResult<String> {
    let url = raw.trim();
    if url.is_empty() || url.chars().count() > MAX_URL_CHARS {
        return Err(ApiError::validation(
            "url",
            format!("`url` must be 1 to {MAX_URL_CHARS} characters"),
        ));
    }
    let parsed = reqwest::Url::parse(url).map_err(|e| {
        ApiError::validation(
            "url",
            format!("`url` is not a valid URL ({e}); give the agent's base URL, e.g. https://agents.example.com/a2a/helper"),
        )
    })?;
    if !matches!(parsed.scheme(), "http" | "https") {
        return Err(ApiError::validation(
            "url",
            format!(
                "`url` must be an http:// or https:// URL, not {}:",
                parsed.scheme()
            ),
        ));
    }
    if !parsed.username().is_empty() || parsed.password().is_some() || parsed.fragment().is_some() {
        return Err(ApiError::validation(
            "url",
            "`url` must not carry credentials (user:password@) or a fragment; give the credential as `auth`, which is stored sealed",
        ));
    }
    Ok(url.to_string())
}

/// The tenant's remote A2A agents, by id (credentials never shown).
#[utoipa::path(
    get,
    path = "/api/v1/remote-agents",
    tag = "agents",
    responses(
        (status = 200, description = "The tenant's remote A2A agents, by id", body = Vec<RemoteAgentInfo>),
        (status = 401, description = "No usable API key", body = agentry_schema::ErrorResponse),
        (status = 403, description = "The platform admin key (it has no tenant), or a role without the `agents` area", body = agentry_schema::ErrorResponse),
    )
)]
pub async fn list_remote_agents(
    caller: TenantCaller,
    state: web::Data<AppState>,
) -> ApiResult<Json<Vec<RemoteAgentInfo>>> {
    Ok(Json(
        stored::list(&state.db, &caller.scope())
            .await?
            .into_iter()
            .map(view)
            .collect(),
    ))
}

/// One remote A2A agent of the tenant.
#[utoipa::path(
    get,
    path = "/api/v1/remote-agents/{remote_agent_id}",
    tag = "agents",
    params(("remote_agent_id" = String, Path, description = "Remote agent id (a slug)")),
    responses(
        (status = 200, description = "The agent, its card as checked; `credential_set` says whether a credential is stored", body = RemoteAgentInfo),
        (status = 400, description = "`remote_agent_id` is not a valid slug", body = agentry_schema::ErrorResponse),
        (status = 401, description = "No usable API key", body = agentry_schema::ErrorResponse),
        (status = 403, description = "The platform admin key (it has no tenant), or a role without the `agents` area", body = agentry_schema::ErrorResponse),
        (status = 404, description = "No such remote agent in the tenant", body = agentry_schema::ErrorResponse),
    )
)]
pub async fn get_remote_agent(
    caller: TenantCaller,
    state: web::Data<AppState>,
    id: ApiPath<param::RemoteAgent>,
) -> ApiResult<Json<RemoteAgentInfo>> {
    let id = id.into_inner();
    let a = stored::get(&state.db, &caller.scope(), &id)
        .await?
        .ok_or_else(|| ApiError::not_found(format!("remote agent {id}")))?;
    Ok(Json(view(a)))
}

/// Register a remote A2A agent by URL (tenant admins): its card is fetched and checked first.
#[utoipa::path(
    post,
    path = "/api/v1/remote-agents",
    tag = "agents",
    request_body = CreateRemoteAgentRequest,
    responses(
        (status = 201, description = "Registered; the credential is stored sealed and never shown", body = RemoteAgentInfo),
        (status = 400, description = "The body is not JSON", body = agentry_schema::ErrorResponse),
        (status = 401, description = "No usable API key", body = agentry_schema::ErrorResponse),
        (status = 403, description = "Not a tenant admin", body = agentry_schema::ErrorResponse),
        (status = 409, description = "A remote agent with this id exists, or the tenant has 100", body = agentry_schema::ErrorResponse),
        (status = 413, description = "The body is over the size limit", body = agentry_schema::ErrorResponse),
        (status = 415, description = "The body is not `application/json`", body = agentry_schema::ErrorResponse),
        (status = 422, description = "A field is invalid (`details.field` names it): a bad id or credential; a URL the network rule refuses (a private address), whose card cannot be read, or whose card is not an A2A v1.0 card with a JSON-RPC interface", body = agentry_schema::ErrorResponse),
        (status = 503, description = "The server has no encryption key, so a credential cannot be stored", body = agentry_schema::ErrorResponse),
    )
)]
pub async fn create_remote_agent(
    admin: TenantAdmin,
    state: web::Data<AppState>,
    body: ApiJson<CreateRemoteAgentRequest>,
) -> ApiResult<HttpResponse> {
    let req = body.into_inner();
    let id = RemoteAgentId::try_from(req.id.trim())
        .map_err(|e| ApiError::validation("id", e.to_string()))?;
    if id.as_str().len() > MAX_ID_CHARS {
        return Err(ApiError::validation(
            "id",
            format!("`id` must be at most {MAX_ID_CHARS} characters"),
        ));
    }
    let url = valid_url(&req.url)?;
    let auth = auth_of(req.auth)?;
    let timeout_secs = bounded(
        "timeout_secs",
        req.timeout_secs,
        DEFAULT_TIMEOUT_SECS,
        1,
        MAX_TIMEOUT_SECS,
    )?;
    let scope = admin.scope();
    if stored::get(&state.db, &scope, &id).await?.is_some() {
        return Err(ApiError::conflict(format!(
            "remote agent {id:?} already exists; delete it first to register it again"
        )));
    }
    if stored::count(&state.db, &scope).await? >= MAX_REMOTE_AGENTS {
        return Err(ApiError::conflict(format!(
            "the tenant has {MAX_REMOTE_AGENTS} remote agents, the most it may have; delete one first"
        )));
    }
    let (credential, header) = match &auth {
        RemoteAuth::None => (None, None),
        RemoteAuth::Bearer(token) => (Some(token.clone()), None),
        RemoteAuth::ApiKey { header, key } => (Some(key.clone()), Some(header.clone())),
    };
    let credential_sealed = match credential {
        None => None,
        Some(secret) => {
            let Some(secrets) = state.secrets.as_ref() else {
                return Err(ApiError::new(
                    ErrorCode::ServiceUnavailable,
                    "this server has no encryption key (AGENTRY_MCP__ENCRYPTION_KEY), so it cannot store a remote agent's credential; ask the platform operator, or register it with `auth: {\"type\": \"none\"}`",
                ));
            };
            Some(
                secrets
                    .seal(&secret)
                    .map_err(|e| ApiError::internal("sealing a remote agent's credential", e))?,
            )
        }
    };
    let client = RemoteAgents::new(&state.settings.tools, None)
        .map_err(|e| ApiError::internal("building the A2A client", e))?;
    let card = client
        .fetch_card(&url, &auth, CARD_TIMEOUT)
        .await
        .map_err(|e| {
            let kind = match &e {
                CardError::Refused(_) => "refused",
                CardError::Unreachable(_) => "unreachable",
                CardError::Invalid(_) => "invalid_card",
            };
            ApiError::validation("url", e.to_string())
                .with_details(serde_json::json!({"field": "url", "card": kind}))
        })?;
    let spec = RemoteAgentSpec {
        name: card.name.chars().take(200).collect(),
        description: card.description.chars().take(4000).collect(),
        url,
        endpoint_url: card.endpoint_url,
        card: card.card.to_string(),
        auth_kind: auth.kind().to_string(),
        auth_header: header,
        credential_sealed,
        timeout_secs,
    };
    let created = stored::create(&state.db, &scope, &id, spec).await?;
    Ok(HttpResponse::Created()
        .insert_header((
            actix_web::http::header::LOCATION,
            format!("/api/v1/remote-agents/{id}"),
        ))
        .json(view(created)))
}

/// Delete a remote agent (tenant admins): `task` can no longer name it; its sealed credential
/// goes with it. Child runs it already ran stay in the audit.
#[utoipa::path(
    delete,
    path = "/api/v1/remote-agents/{remote_agent_id}",
    tag = "agents",
    params(("remote_agent_id" = String, Path, description = "Remote agent id (a slug)")),
    responses(
        (status = 204, description = "Deleted, its sealed credential with it"),
        (status = 400, description = "A bad `remote_agent_id`", body = agentry_schema::ErrorResponse),
        (status = 401, description = "No usable API key", body = agentry_schema::ErrorResponse),
        (status = 403, description = "Not a tenant admin", body = agentry_schema::ErrorResponse),
        (status = 404, description = "No such remote agent in the tenant", body = agentry_schema::ErrorResponse),
    )
)]
pub async fn delete_remote_agent(
    admin: TenantAdmin,
    state: web::Data<AppState>,
    id: ApiPath<param::RemoteAgent>,
) -> ApiResult<HttpResponse> {
    let id = id.into_inner();
    if !stored::delete(&state.db, &admin.scope(), &id).await? {
        return Err(ApiError::not_found(format!("remote agent {id}")));
    }
    Ok(HttpResponse::NoContent().finish())
}
