//! Skills (issue 16, docs/agents.md "Skills"): the tenant's (`/skills`, every user reads them,
//! tenant admins write them) and each user's own (`/users/{user_id}/skills`: a member manages
//! only their own, another user's are "not found"; a tenant admin manages any user's of the
//! tenant). Uploaded as a zip (`Content-Type: application/zip`) or as JSON files
//! (`{"files": [{"path", "content", "encoding"}]}`), checked by [`crate::skill_bundle`] before
//! anything is stored. Stored in the database, so every replica serves them.

use actix_web::dev::Payload;
use actix_web::error::PayloadError;
use actix_web::web::{self, Json};
use actix_web::{FromRequest, HttpMessage, HttpRequest, HttpResponse};
use agentry_schema::api::{FileEncoding, SkillDetail, SkillFileEntry, SkillInfo, SkillUpload};
use agentry_schema::error::ErrorCode;
use agentry_schema::ids::{SkillName, UserId};
use agentry_store::skills::{self, NewSkill, Skill, SkillOwner};
use agentry_store::users;
use base64::Engine;
use serde::Deserialize;
use serde_json::json;
use utoipa::{IntoParams, ToSchema};

use crate::auth::{TenantAdmin, TenantCaller};
use crate::error::{ApiError, ApiResult};
use crate::extract::{ApiPath, ApiQuery, param};
use crate::routes::resource::endpoint;
use crate::state::AppState;
use agentry_domain::skill_bundle;

pub fn configure(cfg: &mut web::ServiceConfig) {
    cfg.service(
        endpoint("/skills")
            .get(list_tenant_skills)
            .post(upload_tenant_skill),
    )
    .service(
        endpoint("/skills/{skill}")
            .get(get_tenant_skill)
            .put(put_tenant_skill)
            .delete(delete_tenant_skill),
    )
    .service(endpoint("/skills/{skill}/file").get(get_tenant_skill_file))
    .service(
        endpoint("/users/{user_id}/skills")
            .get(list_user_skills)
            .post(upload_user_skill),
    )
    .service(
        endpoint("/users/{user_id}/skills/{skill}")
            .get(get_user_skill)
            .put(put_user_skill)
            .delete(delete_user_skill),
    )
    .service(endpoint("/users/{user_id}/skills/{skill}/file").get(get_user_skill_file));
}

/// A zip archive (the body of `Content-Type: application/zip`).
#[derive(ToSchema)]
#[schema(value_type = String, format = Binary)]
pub struct ZipArchive(#[allow(dead_code)] Vec<u8>);

/// `?path=` of a skill's file.
#[derive(Debug, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct FileQuery {
    /// The file's path inside the skill (`SKILL.md`, `scripts/fill.py`).
    pub path: String,
}

/// An upload: a zip archive or JSON files. Other content types are 415; a body over
/// `server.body_limit_bytes` is 413.
pub enum SkillBody {
    Zip(web::Bytes),
    Files(SkillUpload),
}

fn is_zip(req: &HttpRequest) -> Option<bool> {
    let mime = req.mime_type().ok()??;
    let essence = format!("{}/{}", mime.type_(), mime.subtype());
    match essence.as_str() {
        "application/zip" | "application/x-zip-compressed" => Some(true),
        "application/json" => Some(false),
        _ => None,
    }
}

impl FromRequest for SkillBody {
    type Error = ApiError;
    type Future = std::pin::Pin<Box<dyn std::future::Future<Output = Result<Self, ApiError>>>>;

    fn from_request(req: &HttpRequest, payload: &mut Payload) -> Self::Future {
        let Some(zip) = is_zip(req) else {
            let got = req
                .headers()
                .get(actix_web::http::header::CONTENT_TYPE)
                .and_then(|v| v.to_str().ok())
                .map(|v| format!("got `{v}`"))
                .unwrap_or_else(|| "none was sent".to_string());
            let err = ApiError::new(
                ErrorCode::UnsupportedMediaType,
                format!(
                    "a skill is uploaded as a zip archive (`Content-Type: application/zip`) or as JSON files (`Content-Type: application/json`) ({got})"
                ),
            );
            return Box::pin(async move { Err(err) });
        };
        let limit = req
            .app_data::<web::Data<AppState>>()
            .map(|s| s.settings.server.body_limit_bytes)
            .unwrap_or(crate::settings::ServerSettings::default().body_limit_bytes);
        let body = web::Bytes::from_request(req, payload);
        Box::pin(async move {
            let bytes = body.await.map_err(|e| match e.as_error::<PayloadError>() {
                Some(PayloadError::Overflow) => crate::extract::too_large(limit),
                _ => ApiError::new(
                    ErrorCode::BadRequest,
                    format!("could not read the body: {e}"),
                ),
            })?;
            if zip {
                Ok(SkillBody::Zip(bytes))
            } else {
                crate::extract::parse_json(&bytes).map(SkillBody::Files)
            }
        })
    }
}

impl SkillBody {
    /// The checked skill (see [`skill_bundle`]).
    fn into_skill(self) -> ApiResult<NewSkill> {
        match self {
            SkillBody::Zip(bytes) => Ok(skill_bundle::from_zip(&bytes)?),
            SkillBody::Files(upload) => {
                let mut files = Vec::with_capacity(upload.files.len());
                for (i, f) in upload.files.into_iter().enumerate() {
                    let content = match f.encoding {
                        FileEncoding::Text => f.content.into_bytes(),
                        FileEncoding::Base64 => base64::engine::general_purpose::STANDARD
                            .decode(f.content.as_bytes())
                            .map_err(|e| {
                                let field = format!("files[{i}].content");
                                ApiError::validation(
                                    &field,
                                    format!("`{field}` is not valid base64: {e}"),
                                )
                            })?,
                    };
                    files.push((f.path, content));
                }
                Ok(skill_bundle::from_files(files)?)
            }
        }
    }
}

fn info(s: Skill) -> SkillInfo {
    SkillInfo {
        name: s.name.to_string(),
        scope: s.owner.scope_name().to_string(),
        user_id: match s.owner {
            SkillOwner::Tenant => None,
            SkillOwner::User(u) => Some(u.to_string()),
        },
        description: s.description,
        file_count: s.file_count,
        total_bytes: s.total_bytes,
        created_by: s.created_by.map(|u| u.to_string()),
        created_at: s.created_at,
        updated_at: s.updated_at,
    }
}

fn not_found(owner: SkillOwner, name: &SkillName) -> ApiError {
    match owner {
        SkillOwner::Tenant => ApiError::not_found(format!("tenant skill {name}")),
        SkillOwner::User(u) => ApiError::not_found(format!("skill {name} of user {u}")),
    }
}

/// The user whose skills are addressed, if the caller may manage them: themselves, or (tenant
/// admins) any user of the tenant. Another user's are "not found" to a member.
async fn user_owner(
    state: &AppState,
    caller: &TenantCaller,
    user: UserId,
) -> ApiResult<SkillOwner> {
    if user != caller.user_id() && !caller.is_admin() {
        return Err(ApiError::not_found(format!("user {user}")));
    }
    if users::get(&state.db, &caller.scope(), user)
        .await?
        .is_none()
    {
        return Err(ApiError::not_found(format!("user {user}")));
    }
    Ok(SkillOwner::User(user))
}

async fn list(
    state: &AppState,
    caller: &TenantCaller,
    owner: SkillOwner,
) -> ApiResult<Json<Vec<SkillInfo>>> {
    Ok(Json(
        skills::list(&state.db, &caller.scope(), owner)
            .await?
            .into_iter()
            .map(info)
            .collect(),
    ))
}

async fn detail(
    state: &AppState,
    caller: &TenantCaller,
    owner: SkillOwner,
    name: &SkillName,
) -> ApiResult<Json<SkillDetail>> {
    let scope = caller.scope();
    let s = skills::get(&state.db, &scope, owner, name)
        .await?
        .ok_or_else(|| not_found(owner, name))?;
    let files = skills::files(&state.db, &scope, owner, name)
        .await?
        .into_iter()
        .map(|f| SkillFileEntry {
            path: f.path,
            size: f.size,
        })
        .collect();
    let instructions = s.instructions.clone();
    Ok(Json(SkillDetail {
        info: info(s),
        instructions,
        files,
    }))
}

/// `replace_name`: a `PUT` to this name (the front matter's must match) replaces; `None` is a
/// `POST`, which refuses a name in use.
async fn store(
    state: &AppState,
    caller: &TenantCaller,
    owner: SkillOwner,
    body: SkillBody,
    replace_name: Option<SkillName>,
) -> ApiResult<HttpResponse> {
    let skill = body.into_skill()?;
    let scope = caller.scope();
    let mut created = true;
    if let Some(name) = &replace_name {
        if &skill.name != name {
            return Err(ApiError::validation(
                "SKILL.md",
                format!(
                    "SKILL.md names the skill {:?}, but it is uploaded to {:?}: the names must match",
                    skill.name.as_str(),
                    name.as_str()
                ),
            ));
        }
        created = skills::get(&state.db, &scope, owner, name).await?.is_none();
    }
    let name = skill.name.clone();
    let stored = skills::put(
        &state.db,
        &scope,
        owner,
        skill,
        Some(caller.user_id()),
        replace_name.is_some(),
    )
    .await?;
    let location = match owner {
        SkillOwner::Tenant => format!("/api/v1/skills/{name}"),
        SkillOwner::User(u) => format!("/api/v1/users/{u}/skills/{name}"),
    };
    let mut res = if created {
        HttpResponse::Created()
    } else {
        HttpResponse::Ok()
    };
    Ok(res
        .insert_header((actix_web::http::header::LOCATION, location))
        .json(info(stored)))
}

async fn remove(
    state: &AppState,
    caller: &TenantCaller,
    owner: SkillOwner,
    name: &SkillName,
) -> ApiResult<HttpResponse> {
    if !skills::delete(&state.db, &caller.scope(), owner, name).await? {
        return Err(not_found(owner, name));
    }
    Ok(HttpResponse::NoContent().finish())
}

async fn file(
    state: &AppState,
    caller: &TenantCaller,
    owner: SkillOwner,
    name: &SkillName,
    path: &str,
) -> ApiResult<HttpResponse> {
    skill_bundle::check_path(path).map_err(|reason| {
        ApiError::invalid_query(
            "path",
            format!("`path` {path:?} is not a file path inside a skill: {reason}"),
        )
        .with_details(json!({ "parameter": "path", "reason": reason }))
    })?;
    let scope = caller.scope();
    let Some(bytes) = skills::file(&state.db, &scope, owner, name, path).await? else {
        if skills::get(&state.db, &scope, owner, name).await?.is_none() {
            return Err(not_found(owner, name));
        }
        return Err(ApiError::not_found(format!(
            "file {path:?} of skill {name}"
        )));
    };
    let content_type = if std::str::from_utf8(&bytes).is_ok() {
        "text/plain; charset=utf-8"
    } else {
        "application/octet-stream"
    };
    Ok(HttpResponse::Ok()
        .content_type(content_type)
        .insert_header(("X-Content-Type-Options", "nosniff"))
        .body(bytes))
}

/// The tenant's skills, by name.
#[utoipa::path(
    get,
    path = "/api/v1/skills",
    tag = "skills",
    responses(
        (status = 200, description = "The tenant's skills, by name", body = Vec<SkillInfo>),
        (status = 401, description = "No usable API key", body = agentry_schema::ErrorResponse),
        (status = 403, description = "The platform admin key (it has no tenant)", body = agentry_schema::ErrorResponse),
    )
)]
pub async fn list_tenant_skills(
    caller: TenantCaller,
    state: web::Data<AppState>,
) -> ApiResult<Json<Vec<SkillInfo>>> {
    list(&state, &caller, SkillOwner::Tenant).await
}

/// Upload a tenant skill (tenant admins): a zip archive or JSON files, `SKILL.md` among them.
#[utoipa::path(
    post,
    path = "/api/v1/skills",
    tag = "skills",
    request_body(content(
        (ZipArchive = "application/zip"),
        (SkillUpload = "application/json"),
    )),
    responses(
        (status = 201, description = "Stored", body = SkillInfo),
        (status = 400, description = "The JSON body is not JSON", body = agentry_schema::ErrorResponse),
        (status = 401, description = "No usable API key", body = agentry_schema::ErrorResponse),
        (status = 403, description = "Not a tenant admin", body = agentry_schema::ErrorResponse),
        (status = 409, description = "The tenant has a skill of this name (replace it with `PUT /skills/{skill}`)", body = agentry_schema::ErrorResponse),
        (status = 413, description = "The body is over `server.body_limit_bytes`, a file over 512 KiB, or the files over 2 MiB together (`payload_too_large`)", body = agentry_schema::ErrorResponse),
        (status = 415, description = "Neither `application/zip` nor `application/json`", body = agentry_schema::ErrorResponse),
        (status = 422, description = "Refused, nothing stored: not a zip, an entry that escapes the folder (`..`, an absolute path), a symbolic link, a duplicate or non-UTF-8 name, too many files, or SKILL.md missing or with bad front matter (`details` names the entry or the problem)", body = agentry_schema::ErrorResponse),
    )
)]
pub async fn upload_tenant_skill(
    admin: TenantAdmin,
    state: web::Data<AppState>,
    body: SkillBody,
) -> ApiResult<HttpResponse> {
    store(&state, &admin, SkillOwner::Tenant, body, None).await
}

/// A tenant skill: its instructions and its files.
#[utoipa::path(
    get,
    path = "/api/v1/skills/{skill}",
    tag = "skills",
    params(("skill" = String, Path, description = "The skill's name (a slug)")),
    responses(
        (status = 200, description = "The skill", body = SkillDetail),
        (status = 400, description = "`skill` is not a valid name", body = agentry_schema::ErrorResponse),
        (status = 401, description = "No usable API key", body = agentry_schema::ErrorResponse),
        (status = 403, description = "The platform admin key (it has no tenant)", body = agentry_schema::ErrorResponse),
        (status = 404, description = "No such tenant skill", body = agentry_schema::ErrorResponse),
    )
)]
pub async fn get_tenant_skill(
    caller: TenantCaller,
    state: web::Data<AppState>,
    name: ApiPath<param::Skill>,
) -> ApiResult<Json<SkillDetail>> {
    detail(&state, &caller, SkillOwner::Tenant, &name.into_inner()).await
}

/// Create or replace a tenant skill (tenant admins); SKILL.md's `name` must be `{skill}`.
#[utoipa::path(
    put,
    path = "/api/v1/skills/{skill}",
    tag = "skills",
    params(("skill" = String, Path, description = "The skill's name (a slug)")),
    request_body(content(
        (ZipArchive = "application/zip"),
        (SkillUpload = "application/json"),
    )),
    responses(
        (status = 200, description = "Replaced", body = SkillInfo),
        (status = 201, description = "Created", body = SkillInfo),
        (status = 400, description = "A bad `skill`, or the JSON body is not JSON", body = agentry_schema::ErrorResponse),
        (status = 401, description = "No usable API key", body = agentry_schema::ErrorResponse),
        (status = 403, description = "Not a tenant admin", body = agentry_schema::ErrorResponse),
        (status = 413, description = "Over a size limit (`payload_too_large`)", body = agentry_schema::ErrorResponse),
        (status = 415, description = "Neither `application/zip` nor `application/json`", body = agentry_schema::ErrorResponse),
        (status = 422, description = "Refused, nothing stored (see `POST /skills`), or SKILL.md names another skill", body = agentry_schema::ErrorResponse),
    )
)]
pub async fn put_tenant_skill(
    admin: TenantAdmin,
    state: web::Data<AppState>,
    name: ApiPath<param::Skill>,
    body: SkillBody,
) -> ApiResult<HttpResponse> {
    store(
        &state,
        &admin,
        SkillOwner::Tenant,
        body,
        Some(name.into_inner()),
    )
    .await
}

/// Delete a tenant skill (tenant admins).
#[utoipa::path(
    delete,
    path = "/api/v1/skills/{skill}",
    tag = "skills",
    params(("skill" = String, Path, description = "The skill's name (a slug)")),
    responses(
        (status = 204, description = "Deleted"),
        (status = 400, description = "`skill` is not a valid name", body = agentry_schema::ErrorResponse),
        (status = 401, description = "No usable API key", body = agentry_schema::ErrorResponse),
        (status = 403, description = "Not a tenant admin", body = agentry_schema::ErrorResponse),
        (status = 404, description = "No such tenant skill", body = agentry_schema::ErrorResponse),
    )
)]
pub async fn delete_tenant_skill(
    admin: TenantAdmin,
    state: web::Data<AppState>,
    name: ApiPath<param::Skill>,
) -> ApiResult<HttpResponse> {
    remove(&state, &admin, SkillOwner::Tenant, &name.into_inner()).await
}

/// One file of a tenant skill, as stored: `text/plain` when it is UTF-8, else
/// `application/octet-stream`.
#[utoipa::path(
    get,
    path = "/api/v1/skills/{skill}/file",
    tag = "skills",
    params(("skill" = String, Path, description = "The skill's name (a slug)"), FileQuery),
    responses(
        (status = 200, description = "The file's bytes", content(
            (String = "text/plain"),
            (ZipArchive = "application/octet-stream"),
        )),
        (status = 400, description = "A bad `skill`, or `path` missing or not a path inside a skill", body = agentry_schema::ErrorResponse),
        (status = 401, description = "No usable API key", body = agentry_schema::ErrorResponse),
        (status = 403, description = "The platform admin key (it has no tenant)", body = agentry_schema::ErrorResponse),
        (status = 404, description = "No such skill, or no such file in it", body = agentry_schema::ErrorResponse),
    )
)]
pub async fn get_tenant_skill_file(
    caller: TenantCaller,
    state: web::Data<AppState>,
    name: ApiPath<param::Skill>,
    query: ApiQuery<FileQuery>,
) -> ApiResult<HttpResponse> {
    file(
        &state,
        &caller,
        SkillOwner::Tenant,
        &name.into_inner(),
        &query.into_inner().path,
    )
    .await
}

/// A user's own skills, by name (the user themselves, or a tenant admin).
#[utoipa::path(
    get,
    path = "/api/v1/users/{user_id}/skills",
    tag = "skills",
    params(("user_id" = String, Path, description = "User id (UUID)")),
    responses(
        (status = 200, description = "The user's skills, by name", body = Vec<SkillInfo>),
        (status = 400, description = "`user_id` is not a UUID", body = agentry_schema::ErrorResponse),
        (status = 401, description = "No usable API key", body = agentry_schema::ErrorResponse),
        (status = 403, description = "The platform admin key (it has no tenant)", body = agentry_schema::ErrorResponse),
        (status = 404, description = "No such user, or another user's (to a member)", body = agentry_schema::ErrorResponse),
    )
)]
pub async fn list_user_skills(
    caller: TenantCaller,
    state: web::Data<AppState>,
    user: ApiPath<param::User>,
) -> ApiResult<Json<Vec<SkillInfo>>> {
    let owner = user_owner(&state, &caller, user.into_inner()).await?;
    list(&state, &caller, owner).await
}

/// Upload a skill of the user's own: a zip archive or JSON files, `SKILL.md` among them.
#[utoipa::path(
    post,
    path = "/api/v1/users/{user_id}/skills",
    tag = "skills",
    params(("user_id" = String, Path, description = "User id (UUID)")),
    request_body(content(
        (ZipArchive = "application/zip"),
        (SkillUpload = "application/json"),
    )),
    responses(
        (status = 201, description = "Stored", body = SkillInfo),
        (status = 400, description = "A bad `user_id`, or the JSON body is not JSON", body = agentry_schema::ErrorResponse),
        (status = 401, description = "No usable API key", body = agentry_schema::ErrorResponse),
        (status = 403, description = "The platform admin key (it has no tenant)", body = agentry_schema::ErrorResponse),
        (status = 404, description = "No such user, or another user's (to a member)", body = agentry_schema::ErrorResponse),
        (status = 409, description = "The user has a skill of this name", body = agentry_schema::ErrorResponse),
        (status = 413, description = "Over a size limit (`payload_too_large`)", body = agentry_schema::ErrorResponse),
        (status = 415, description = "Neither `application/zip` nor `application/json`", body = agentry_schema::ErrorResponse),
        (status = 422, description = "Refused, nothing stored (see `POST /skills`)", body = agentry_schema::ErrorResponse),
    )
)]
pub async fn upload_user_skill(
    caller: TenantCaller,
    state: web::Data<AppState>,
    user: ApiPath<param::User>,
    body: SkillBody,
) -> ApiResult<HttpResponse> {
    let owner = user_owner(&state, &caller, user.into_inner()).await?;
    store(&state, &caller, owner, body, None).await
}

/// One of a user's skills: its instructions and its files.
#[utoipa::path(
    get,
    path = "/api/v1/users/{user_id}/skills/{skill}",
    tag = "skills",
    params(
        ("user_id" = String, Path, description = "User id (UUID)"),
        ("skill" = String, Path, description = "The skill's name (a slug)"),
    ),
    responses(
        (status = 200, description = "The skill", body = SkillDetail),
        (status = 400, description = "A bad `user_id` or `skill`", body = agentry_schema::ErrorResponse),
        (status = 401, description = "No usable API key", body = agentry_schema::ErrorResponse),
        (status = 403, description = "The platform admin key (it has no tenant)", body = agentry_schema::ErrorResponse),
        (status = 404, description = "No such user or skill", body = agentry_schema::ErrorResponse),
    )
)]
pub async fn get_user_skill(
    caller: TenantCaller,
    state: web::Data<AppState>,
    user: ApiPath<param::User>,
    name: ApiPath<param::Skill>,
) -> ApiResult<Json<SkillDetail>> {
    let owner = user_owner(&state, &caller, user.into_inner()).await?;
    detail(&state, &caller, owner, &name.into_inner()).await
}

/// Create or replace one of a user's skills; SKILL.md's `name` must be `{skill}`.
#[utoipa::path(
    put,
    path = "/api/v1/users/{user_id}/skills/{skill}",
    tag = "skills",
    params(
        ("user_id" = String, Path, description = "User id (UUID)"),
        ("skill" = String, Path, description = "The skill's name (a slug)"),
    ),
    request_body(content(
        (ZipArchive = "application/zip"),
        (SkillUpload = "application/json"),
    )),
    responses(
        (status = 200, description = "Replaced", body = SkillInfo),
        (status = 201, description = "Created", body = SkillInfo),
        (status = 400, description = "A bad `user_id` or `skill`, or the JSON body is not JSON", body = agentry_schema::ErrorResponse),
        (status = 401, description = "No usable API key", body = agentry_schema::ErrorResponse),
        (status = 403, description = "The platform admin key (it has no tenant)", body = agentry_schema::ErrorResponse),
        (status = 404, description = "No such user, or another user's (to a member)", body = agentry_schema::ErrorResponse),
        (status = 413, description = "Over a size limit (`payload_too_large`)", body = agentry_schema::ErrorResponse),
        (status = 415, description = "Neither `application/zip` nor `application/json`", body = agentry_schema::ErrorResponse),
        (status = 422, description = "Refused, nothing stored (see `POST /skills`), or SKILL.md names another skill", body = agentry_schema::ErrorResponse),
    )
)]
pub async fn put_user_skill(
    caller: TenantCaller,
    state: web::Data<AppState>,
    user: ApiPath<param::User>,
    name: ApiPath<param::Skill>,
    body: SkillBody,
) -> ApiResult<HttpResponse> {
    let owner = user_owner(&state, &caller, user.into_inner()).await?;
    store(&state, &caller, owner, body, Some(name.into_inner())).await
}

/// Delete one of a user's skills.
#[utoipa::path(
    delete,
    path = "/api/v1/users/{user_id}/skills/{skill}",
    tag = "skills",
    params(
        ("user_id" = String, Path, description = "User id (UUID)"),
        ("skill" = String, Path, description = "The skill's name (a slug)"),
    ),
    responses(
        (status = 204, description = "Deleted"),
        (status = 400, description = "A bad `user_id` or `skill`", body = agentry_schema::ErrorResponse),
        (status = 401, description = "No usable API key", body = agentry_schema::ErrorResponse),
        (status = 403, description = "The platform admin key (it has no tenant)", body = agentry_schema::ErrorResponse),
        (status = 404, description = "No such user or skill", body = agentry_schema::ErrorResponse),
    )
)]
pub async fn delete_user_skill(
    caller: TenantCaller,
    state: web::Data<AppState>,
    user: ApiPath<param::User>,
    name: ApiPath<param::Skill>,
) -> ApiResult<HttpResponse> {
    let owner = user_owner(&state, &caller, user.into_inner()).await?;
    remove(&state, &caller, owner, &name.into_inner()).await
}

/// One file of a user's skill (see `GET /skills/{skill}/file`).
#[utoipa::path(
    get,
    path = "/api/v1/users/{user_id}/skills/{skill}/file",
    tag = "skills",
    params(
        ("user_id" = String, Path, description = "User id (UUID)"),
        ("skill" = String, Path, description = "The skill's name (a slug)"),
        FileQuery,
    ),
    responses(
        (status = 200, description = "The file's bytes", content(
            (String = "text/plain"),
            (ZipArchive = "application/octet-stream"),
        )),
        (status = 400, description = "A bad `user_id` or `skill`, or `path` missing or not a path inside a skill", body = agentry_schema::ErrorResponse),
        (status = 401, description = "No usable API key", body = agentry_schema::ErrorResponse),
        (status = 403, description = "The platform admin key (it has no tenant)", body = agentry_schema::ErrorResponse),
        (status = 404, description = "No such user, skill or file", body = agentry_schema::ErrorResponse),
    )
)]
pub async fn get_user_skill_file(
    caller: TenantCaller,
    state: web::Data<AppState>,
    user: ApiPath<param::User>,
    name: ApiPath<param::Skill>,
    query: ApiQuery<FileQuery>,
) -> ApiResult<HttpResponse> {
    let owner = user_owner(&state, &caller, user.into_inner()).await?;
    file(
        &state,
        &caller,
        owner,
        &name.into_inner(),
        &query.into_inner().path,
    )
    .await
}
