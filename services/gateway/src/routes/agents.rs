//! Agents (assistants) of the caller's tenant: everyone lists and reads them; tenant admins
//! create, replace and delete them. `default` always exists and cannot be deleted.

use actix_web::HttpResponse;
use actix_web::web::{self, Json};
use agentry_actors::profiles;
use agentry_llm::Provider;
use agentry_schema::api::{AssistantInfo, AssistantSpecRequest, CreateAssistantRequest};
use agentry_schema::ids::{AssistantId, ModelConnectionId, ProfileId};
use agentry_store::TenantScope;
use agentry_store::assistants::{self, Assistant, AssistantSpec};
use agentry_tools::rbac::Permission;

use crate::auth::{TenantAdmin, TenantCaller};
use crate::error::{ApiError, ApiResult};
use crate::extract::{ApiJson, ApiPath, param};
use crate::routes::resource::endpoint;
use crate::state::AppState;
use crate::views;
use agentry_domain::tenancy::{default_assistant_spec, valid_name};

pub fn configure(cfg: &mut web::ServiceConfig) {
    cfg.service(endpoint("/agents").get(list_agents).post(create_agent))
        .service(
            endpoint("/agents/{agent_id}")
                .get(get_agent)
                .post(create_agent_at)
                .put(replace_agent)
                .delete(delete_agent),
        );
}

pub const MAX_RECURSION_LIMIT: u32 = 1000;
pub const MAX_TIMEOUT_SECS: u32 = 86_400;
pub const MAX_RETRIES: u32 = 10;
const MAX_TOOL_ENTRIES: usize = 256;

pub(crate) fn bounded(
    field: &str,
    value: Option<u32>,
    default: u32,
    min: u32,
    max: u32,
) -> ApiResult<u32> {
    let v = value.unwrap_or(default);
    if !(min..=max).contains(&v) {
        return Err(ApiError::validation(
            field,
            format!("`{field}` must be between {min} and {max} (got {v})"),
        ));
    }
    Ok(v)
}

pub(crate) fn text(
    field: &str,
    value: Option<String>,
    default: String,
    max: usize,
) -> ApiResult<String> {
    let v = value.unwrap_or(default);
    if v.chars().count() > max {
        return Err(ApiError::validation(
            field,
            format!("`{field}` must be at most {max} characters"),
        ));
    }
    Ok(v)
}

/// A tool entry: a tool name (`read_file`, an MCP tool `github__create_issue`) or a pattern
/// `service:tool` / `service:*` / `*:*`.
fn valid_tool(field: &str, entry: &str) -> ApiResult<String> {
    let e = entry.trim();
    let bad = |why: String| ApiError::validation(field, format!("`{field}`: {why}"));
    if e.starts_with('!') {
        return Err(bad(format!(
            "{e:?}: denials belong in the tenant's tool_permissions, not in an assistant's tool list"
        )));
    }
    if e.contains(':') {
        e.parse::<Permission>()
            .map_err(|err| bad(err.to_string()))?;
    } else if e.is_empty()
        || e.len() > 128
        || !e
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'))
    {
        return Err(bad(format!(
            "{e:?} is not a tool name (letters, digits, `_`, `-`, `.`) nor a pattern like files:* or files:read_file"
        )));
    }
    Ok(e.to_string())
}

pub(crate) fn valid_tools(field: &str, list: Vec<String>) -> ApiResult<Vec<String>> {
    if list.len() > MAX_TOOL_ENTRIES {
        return Err(ApiError::validation(
            field,
            format!("`{field}` may list at most {MAX_TOOL_ENTRIES} entries"),
        ));
    }
    let mut out: Vec<String> = Vec::with_capacity(list.len());
    for (i, t) in list.iter().enumerate() {
        let t = valid_tool(&format!("{field}[{i}]"), t)?;
        if !out.contains(&t) {
            out.push(t);
        }
    }
    Ok(out)
}

fn optional(field: &str, value: Option<String>, max: usize) -> ApiResult<Option<String>> {
    match value
        .map(|v| v.trim().to_string())
        .filter(|v| !v.is_empty())
    {
        None => Ok(None),
        Some(v) => Ok(Some(valid_name(field, &v, max)?)),
    }
}

/// A field the request may leave out (then inherited from the profile), within bounds.
fn bounded_opt(field: &str, value: Option<u32>, min: u32, max: u32) -> ApiResult<Option<u32>> {
    value
        .map(|v| bounded(field, Some(v), v, min, max))
        .transpose()
}

/// Turn a request into a checked spec; fields left out are inherited from the profile (or get
/// the defaults). Whether the profile exists is [`check_profile`]'s to say.
pub fn spec_from(id: &AssistantId, req: AssistantSpecRequest) -> ApiResult<AssistantSpec> {
    let d = default_assistant_spec();
    let name = match req.name {
        Some(n) => valid_name("name", &n, 200)?,
        None if id.as_str() == AssistantId::DEFAULT => d.name,
        None => id.to_string(),
    };
    let provider = match optional("provider", req.provider, 32)? {
        None => None,
        Some(p) => Some(
            p.parse::<Provider>()
                .map_err(|_| {
                    ApiError::validation(
                        "provider",
                        format!("unknown provider {p:?}: use `scripted`, `openai` (any OpenAI-compatible endpoint) or `anthropic`, or leave it out for the server's default"),
                    )
                })?
                .as_str()
                .to_string(),
        ),
    };
    let model_connection = match req
        .model_connection
        .as_deref()
        .map(str::trim)
        .filter(|c| !c.is_empty())
    {
        None => None,
        Some(c) => {
            if provider.is_some() {
                return Err(ApiError::validation(
                    "provider",
                    "`provider` and `model_connection` exclude each other: the connection says which provider; leave `provider` out (`model` may still name another model of the connection's provider)",
                ));
            }
            Some(ModelConnectionId::try_from(c).map_err(|e| {
                ApiError::validation("model_connection", format!("`model_connection`: {e}"))
            })?)
        }
    };
    Ok(AssistantSpec {
        name,
        description: text("description", req.description, String::new(), 2_000)?,
        system_prompt: req
            .system_prompt
            .map(|p| text("system_prompt", Some(p), String::new(), 100_000))
            .transpose()?
            .filter(|p| !p.trim().is_empty()),
        provider,
        model: optional("model", req.model, 200)?,
        tools: req.tools.map(|t| valid_tools("tools", t)).transpose()?,
        skills: req.skills.map(valid_skills).transpose()?,
        interrupt_on: req
            .interrupt_on
            .map(|t| valid_tools("interrupt_on", t))
            .transpose()?,
        auto_approve: req.auto_approve.unwrap_or(d.auto_approve),
        profile: match req.profile {
            None => d.profile,
            Some(p) => ProfileId::try_from(p.trim())
                .map_err(|e| ApiError::validation("profile", format!("`profile`: {e}")))?,
        },
        recursion_limit: bounded_opt(
            "recursion_limit",
            req.recursion_limit,
            1,
            MAX_RECURSION_LIMIT,
        )?,
        timeout_secs: bounded_opt("timeout_secs", req.timeout_secs, 1, MAX_TIMEOUT_SECS)?,
        max_retries: bounded(
            "max_retries",
            req.max_retries,
            d.max_retries,
            0,
            MAX_RETRIES,
        )?,
        model_connection,
    })
}

/// The assistant's model connection, if it names one, must be one of the tenant's. Another
/// tenant's id gets the same answer as an id nobody has.
pub(crate) async fn check_connection(
    state: &AppState,
    scope: &TenantScope,
    id: Option<&ModelConnectionId>,
) -> ApiResult<()> {
    let Some(id) = id else {
        return Ok(());
    };
    if agentry_store::model_connections::get(&state.db, scope, id)
        .await?
        .is_none()
    {
        return Err(ApiError::validation(
            "model_connection",
            format!(
                "no model connection {:?} in this tenant (GET /api/v1/model-connections lists them)",
                id.as_str()
            ),
        ));
    }
    Ok(())
}

/// An assistant's skill selection: skill names (slugs), at most 100, each once. A skill need
/// not exist yet: users upload their own, and a name that matches nothing selects nothing.
fn valid_skills(names: Vec<String>) -> ApiResult<Vec<String>> {
    if names.len() > 100 {
        return Err(ApiError::validation(
            "skills",
            "`skills` lists at most 100 names",
        ));
    }
    let mut out: Vec<String> = Vec::with_capacity(names.len());
    for (i, n) in names.into_iter().enumerate() {
        let field = format!("skills[{i}]");
        let name = agentry_schema::ids::SkillName::try_from(n.trim())
            .map_err(|e| ApiError::validation(&field, format!("`{field}`: {e}")))?
            .to_string();
        if !out.contains(&name) {
            out.push(name);
        }
    }
    Ok(out)
}

/// The assistant's profile must exist: a built-in one or one of the tenant's.
pub(crate) async fn check_profile(
    state: &AppState,
    scope: &TenantScope,
    profile: &ProfileId,
) -> ApiResult<()> {
    if profiles::find(&state.db, scope, profile).await?.is_none() {
        return Err(ApiError::validation(
            "profile",
            format!(
                "no profile {profile:?}: use one of {} or a profile of this tenant (GET /api/v1/profiles)",
                profiles::BUILTIN_IDS.join(", ")
            ),
        ));
    }
    Ok(())
}

/// The assistant as the API shows it: with its effective settings.
async fn view(state: &AppState, scope: &TenantScope, a: Assistant) -> ApiResult<AssistantInfo> {
    let effective = profiles::effective(&state.db, scope, &a).await?;
    Ok(views::assistant(a, &effective))
}

/// The tenant's assistants, by id. `default` is always among them.
#[utoipa::path(
    get,
    path = "/api/v1/agents",
    tag = "agents",
    responses(
        (status = 200, description = "Every assistant of the tenant, by id", body = Vec<AssistantInfo>),
        (status = 401, description = "No usable API key", body = agentry_schema::ErrorResponse),
        (status = 403, description = "The platform admin key (it has no tenant), or a suspended tenant", body = agentry_schema::ErrorResponse),
    )
)]
pub async fn list_agents(
    caller: TenantCaller,
    state: web::Data<AppState>,
) -> ApiResult<Json<Vec<AssistantInfo>>> {
    let scope = caller.scope();
    let mut list = assistants::list(&state.db, &scope).await?;
    if !list.iter().any(|a| a.id.as_str() == AssistantId::DEFAULT) {
        // A tenant made before assistants existed, or whose default row was lost.
        assistants::ensure_default(&state.db, &scope, default_assistant_spec()).await?;
        list = assistants::list(&state.db, &scope).await?;
    }
    let mut out = Vec::with_capacity(list.len());
    for a in list {
        out.push(view(&state, &scope, a).await?);
    }
    Ok(Json(out))
}

/// One assistant.
#[utoipa::path(
    get,
    path = "/api/v1/agents/{agent_id}",
    tag = "agents",
    params(("agent_id" = String, Path, description = "Assistant id (a slug)")),
    responses(
        (status = 200, description = "The assistant", body = AssistantInfo),
        (status = 400, description = "`agent_id` is not a valid slug", body = agentry_schema::ErrorResponse),
        (status = 401, description = "No usable API key", body = agentry_schema::ErrorResponse),
        (status = 403, description = "The platform admin key (it has no tenant)", body = agentry_schema::ErrorResponse),
        (status = 404, description = "No such assistant in the tenant", body = agentry_schema::ErrorResponse),
    )
)]
pub async fn get_agent(
    caller: TenantCaller,
    state: web::Data<AppState>,
    id: ApiPath<param::Agent>,
) -> ApiResult<Json<AssistantInfo>> {
    let id = id.into_inner();
    let scope = caller.scope();
    let found = match assistants::get(&state.db, &scope, &id).await? {
        Some(a) => Some(a),
        None if id.as_str() == AssistantId::DEFAULT => {
            Some(assistants::ensure_default(&state.db, &scope, default_assistant_spec()).await?)
        }
        None => None,
    };
    let a = found.ok_or_else(|| ApiError::not_found(format!("assistant {id}")))?;
    Ok(Json(view(&state, &scope, a).await?))
}

async fn create(
    state: &AppState,
    admin: &TenantAdmin,
    id: AssistantId,
    spec: AssistantSpecRequest,
) -> ApiResult<HttpResponse> {
    let spec = spec_from(&id, spec)?;
    let scope = admin.scope();
    check_profile(state, &scope, &spec.profile).await?;
    check_connection(state, &scope, spec.model_connection.as_ref()).await?;
    let created = assistants::create(&state.db, &scope, &id, spec).await?;
    Ok(HttpResponse::Created()
        .insert_header((
            actix_web::http::header::LOCATION,
            format!("/api/v1/agents/{id}"),
        ))
        .json(view(state, &scope, created).await?))
}

/// Create an assistant (tenant admins).
#[utoipa::path(
    post,
    path = "/api/v1/agents",
    tag = "agents",
    request_body = CreateAssistantRequest,
    responses(
        (status = 201, description = "Created", body = AssistantInfo),
        (status = 400, description = "The body is not JSON", body = agentry_schema::ErrorResponse),
        (status = 401, description = "No usable API key", body = agentry_schema::ErrorResponse),
        (status = 403, description = "Not a tenant admin", body = agentry_schema::ErrorResponse),
        (status = 409, description = "An assistant with this id exists", body = agentry_schema::ErrorResponse),
        (status = 413, description = "The body is over the size limit", body = agentry_schema::ErrorResponse),
        (status = 415, description = "The body is not `application/json`", body = agentry_schema::ErrorResponse),
        (status = 422, description = "A field is missing or invalid (`details.field` names it)", body = agentry_schema::ErrorResponse),
    )
)]
pub async fn create_agent(
    admin: TenantAdmin,
    state: web::Data<AppState>,
    body: ApiJson<CreateAssistantRequest>,
) -> ApiResult<HttpResponse> {
    let (id, spec) = body.into_inner().split();
    let id = AssistantId::try_from(id).map_err(|e| ApiError::validation("id", e.to_string()))?;
    create(&state, &admin, id, spec).await
}

/// Create the assistant `agent_id` (tenant admins).
#[utoipa::path(
    post,
    path = "/api/v1/agents/{agent_id}",
    tag = "agents",
    params(("agent_id" = String, Path, description = "Assistant id (a slug)")),
    request_body = AssistantSpecRequest,
    responses(
        (status = 201, description = "Created", body = AssistantInfo),
        (status = 400, description = "A bad `agent_id`, or the body is not JSON", body = agentry_schema::ErrorResponse),
        (status = 401, description = "No usable API key", body = agentry_schema::ErrorResponse),
        (status = 403, description = "Not a tenant admin", body = agentry_schema::ErrorResponse),
        (status = 409, description = "An assistant with this id exists", body = agentry_schema::ErrorResponse),
        (status = 413, description = "The body is over the size limit", body = agentry_schema::ErrorResponse),
        (status = 415, description = "The body is not `application/json`", body = agentry_schema::ErrorResponse),
        (status = 422, description = "A field is invalid (`details.field` names it)", body = agentry_schema::ErrorResponse),
    )
)]
pub async fn create_agent_at(
    admin: TenantAdmin,
    state: web::Data<AppState>,
    id: ApiPath<param::Agent>,
    body: ApiJson<AssistantSpecRequest>,
) -> ApiResult<HttpResponse> {
    let id = id.into_inner();
    create(&state, &admin, id, body.into_inner()).await
}

/// Replace an assistant's settings (tenant admins). Fields left out return to their defaults.
#[utoipa::path(
    put,
    path = "/api/v1/agents/{agent_id}",
    tag = "agents",
    params(("agent_id" = String, Path, description = "Assistant id (a slug)")),
    request_body = AssistantSpecRequest,
    responses(
        (status = 200, description = "Replaced", body = AssistantInfo),
        (status = 400, description = "A bad `agent_id`, or the body is not JSON", body = agentry_schema::ErrorResponse),
        (status = 401, description = "No usable API key", body = agentry_schema::ErrorResponse),
        (status = 403, description = "Not a tenant admin", body = agentry_schema::ErrorResponse),
        (status = 404, description = "No such assistant", body = agentry_schema::ErrorResponse),
        (status = 413, description = "The body is over the size limit", body = agentry_schema::ErrorResponse),
        (status = 415, description = "The body is not `application/json`", body = agentry_schema::ErrorResponse),
        (status = 422, description = "A field is invalid (`details.field` names it)", body = agentry_schema::ErrorResponse),
    )
)]
pub async fn replace_agent(
    admin: TenantAdmin,
    state: web::Data<AppState>,
    id: ApiPath<param::Agent>,
    body: ApiJson<AssistantSpecRequest>,
) -> ApiResult<Json<AssistantInfo>> {
    let id = id.into_inner();
    let spec = spec_from(&id, body.into_inner())?;
    let scope = admin.scope();
    check_profile(&state, &scope, &spec.profile).await?;
    check_connection(&state, &scope, spec.model_connection.as_ref()).await?;
    if id.as_str() == AssistantId::DEFAULT {
        assistants::ensure_default(&state.db, &scope, default_assistant_spec()).await?;
    }
    let updated = assistants::update(&state.db, &scope, &id, spec).await?;
    assistant_changed(&state, &admin, &id).await;
    Ok(Json(view(&state, &scope, updated).await?))
}

/// Delete an assistant (tenant admins). `default` cannot be deleted.
#[utoipa::path(
    delete,
    path = "/api/v1/agents/{agent_id}",
    tag = "agents",
    params(("agent_id" = String, Path, description = "Assistant id (a slug)")),
    responses(
        (status = 204, description = "Deleted"),
        (status = 400, description = "A bad `agent_id`", body = agentry_schema::ErrorResponse),
        (status = 401, description = "No usable API key", body = agentry_schema::ErrorResponse),
        (status = 403, description = "Not a tenant admin", body = agentry_schema::ErrorResponse),
        (status = 404, description = "No such assistant", body = agentry_schema::ErrorResponse),
        (status = 409, description = "`default` cannot be deleted", body = agentry_schema::ErrorResponse),
    )
)]
pub async fn delete_agent(
    admin: TenantAdmin,
    state: web::Data<AppState>,
    id: ApiPath<param::Agent>,
) -> ApiResult<HttpResponse> {
    let id = id.into_inner();
    if id.as_str() == AssistantId::DEFAULT {
        return Err(ApiError::conflict(
            "the default assistant cannot be deleted: every tenant keeps one; change it with PUT /api/v1/agents/default instead",
        ));
    }
    if !assistants::delete(&state.db, &admin.scope(), &id).await? {
        return Err(ApiError::not_found(format!("assistant {id}")));
    }
    assistant_changed(&state, &admin, &id).await;
    Ok(HttpResponse::NoContent().finish())
}

/// Live sessions keep their assistant between runs: tell them it changed.
async fn assistant_changed(state: &AppState, admin: &TenantAdmin, id: &AssistantId) {
    if let Err(e) = state.engine.assistant_changed(admin.tenant_id(), id).await {
        tracing::warn!(error = %e, "telling the engine about the assistant change failed");
    }
    agentry_domain::invalidate::announce(
        &state.domain(),
        agentry_domain::invalidate::Change::Assistant {
            tenant_id: admin.tenant_id(),
            assistant_id: id.clone(),
        },
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use agentry_schema::error::ErrorCode;

    fn id(s: &str) -> AssistantId {
        AssistantId::try_from(s).unwrap()
    }

    #[test]
    fn an_empty_request_is_the_default_spec_named_after_the_id() {
        let s = spec_from(&id("sre"), AssistantSpecRequest::default()).unwrap();
        let d = AssistantSpec::default();
        assert_eq!(s.name, "sre");
        assert_eq!(
            (s.recursion_limit, s.timeout_secs, s.max_retries),
            (None, None, d.max_retries),
            "left out: inherited from the profile"
        );
        assert_eq!(
            (s.tools, s.interrupt_on, s.system_prompt),
            (None, None, None)
        );
        assert_eq!(s.profile.as_str(), "general");
        assert_eq!(
            spec_from(&id("default"), AssistantSpecRequest::default())
                .unwrap()
                .name,
            d.name
        );
    }

    #[test]
    fn bad_values_name_their_field() {
        let cases: Vec<(AssistantSpecRequest, &str)> = vec![
            (
                AssistantSpecRequest {
                    provider: Some("gemini".into()),
                    ..Default::default()
                },
                "provider",
            ),
            (
                AssistantSpecRequest {
                    recursion_limit: Some(0),
                    ..Default::default()
                },
                "recursion_limit",
            ),
            (
                AssistantSpecRequest {
                    recursion_limit: Some(1001),
                    ..Default::default()
                },
                "recursion_limit",
            ),
            (
                AssistantSpecRequest {
                    timeout_secs: Some(86_401),
                    ..Default::default()
                },
                "timeout_secs",
            ),
            (
                AssistantSpecRequest {
                    max_retries: Some(11),
                    ..Default::default()
                },
                "max_retries",
            ),
            (
                AssistantSpecRequest {
                    name: Some(" ".into()),
                    ..Default::default()
                },
                "name",
            ),
            (
                AssistantSpecRequest {
                    tools: Some(vec!["files:*".into(), "bad tool".into()]),
                    ..Default::default()
                },
                "tools[1]",
            ),
            (
                AssistantSpecRequest {
                    tools: Some(vec!["*:read_file".into()]),
                    ..Default::default()
                },
                "tools[0]",
            ),
            (
                AssistantSpecRequest {
                    interrupt_on: Some(vec!["!shell:*".into()]),
                    ..Default::default()
                },
                "interrupt_on[0]",
            ),
            (
                AssistantSpecRequest {
                    model: Some("a\u{7}b".into()),
                    ..Default::default()
                },
                "model",
            ),
            (
                AssistantSpecRequest {
                    profile: Some("No Such".into()),
                    ..Default::default()
                },
                "profile",
            ),
        ];
        for (req, field) in cases {
            let e = spec_from(&id("x"), req).unwrap_err();
            assert_eq!(e.code, ErrorCode::ValidationError);
            assert_eq!(e.details["field"], field, "{}", e.message);
        }
    }

    #[test]
    fn good_values_are_normalised() {
        let s = spec_from(
            &id("x"),
            AssistantSpecRequest {
                provider: Some(" OpenAI ".into()),
                model: Some("gpt-4o".into()),
                tools: Some(vec![
                    "files:*".into(),
                    "read_file".into(),
                    "github__create_issue".into(),
                    "files:*".into(),
                ]),
                recursion_limit: Some(1000),
                timeout_secs: Some(1),
                max_retries: Some(0),
                ..Default::default()
            },
        )
        .unwrap();
        assert_eq!(s.provider.as_deref(), Some("openai"));
        assert_eq!(
            s.tools.unwrap(),
            vec!["files:*", "read_file", "github__create_issue"]
        );
        assert_eq!(
            (s.recursion_limit, s.timeout_secs, s.max_retries),
            (Some(1000), Some(1), 0)
        );
    }
}
