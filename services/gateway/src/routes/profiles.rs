//! Agent profiles of the caller's tenant: the built-in ones (`general`, `devops`, `sre`,
//! `orchestrator`) and the tenant's own. Everyone lists and reads them; tenant admins create,
//! replace and delete their own. Built-in profiles cannot be changed (409).

use actix_web::HttpResponse;
use actix_web::web::{self, Json};
use agentry_actors::profiles::{self, ResolvedProfile};
use agentry_schema::api::{CreateProfileRequest, ProfileInfo, ProfileSpecRequest};
use agentry_schema::ids::ProfileId;
use agentry_store::profiles::{self as stored, ProfileSpec};

use crate::auth::{TenantAdmin, TenantCaller};
use crate::error::{ApiError, ApiResult};
use crate::extract::{ApiJson, ApiPath, param};
use crate::routes::agents::{MAX_RECURSION_LIMIT, MAX_TIMEOUT_SECS, bounded, text, valid_tools};
use crate::routes::resource::endpoint;
use crate::state::AppState;
use crate::views;
use agentry_domain::tenancy::valid_name;

pub fn configure(cfg: &mut web::ServiceConfig) {
    cfg.service(
        endpoint("/profiles")
            .get(list_profiles)
            .post(create_profile),
    )
    .service(
        endpoint("/profiles/{profile_id}")
            .get(get_profile)
            .put(replace_profile)
            .delete(delete_profile),
    );
}

/// Turn a request into a checked spec; fields left out are the `general` profile's.
pub fn spec_from(id: &ProfileId, req: ProfileSpecRequest) -> ApiResult<ProfileSpec> {
    let general = profiles::builtin("general")
        .ok_or_else(|| ApiError::internal("profiles", "the general profile is missing"))?;
    Ok(ProfileSpec {
        name: match req.name {
            Some(n) => valid_name("name", &n, 200)?,
            None => id.to_string(),
        },
        description: text("description", req.description, String::new(), 2_000)?,
        system_prompt: text(
            "system_prompt",
            req.system_prompt.filter(|p| !p.trim().is_empty()),
            general.system_prompt,
            100_000,
        )?,
        tools: match req.tools {
            Some(t) => Some(valid_tools("tools", t)?),
            None => general.tools,
        },
        interrupt_on: match req.interrupt_on {
            Some(t) => valid_tools("interrupt_on", t)?,
            None => general.interrupt_on,
        },
        recursion_limit: bounded(
            "recursion_limit",
            req.recursion_limit,
            general.recursion_limit,
            1,
            MAX_RECURSION_LIMIT,
        )?,
        timeout_secs: bounded(
            "timeout_secs",
            req.timeout_secs,
            general.timeout_secs,
            1,
            MAX_TIMEOUT_SECS,
        )?,
    })
}

fn builtin_is_fixed(id: &ProfileId) -> ApiResult<()> {
    if profiles::is_builtin(id) {
        return Err(ApiError::conflict(format!(
            "{id:?} is a built-in profile and cannot be changed or deleted; create a profile of your own (POST /api/v1/profiles) and point assistants at it"
        )));
    }
    Ok(())
}

/// The built-in profiles, then the tenant's own, by id.
#[utoipa::path(
    get,
    path = "/api/v1/profiles",
    tag = "agents",
    responses(
        (status = 200, description = "The built-in profiles, then the tenant's own", body = Vec<ProfileInfo>),
        (status = 401, description = "No usable API key", body = agentry_schema::ErrorResponse),
        (status = 403, description = "The platform admin key (it has no tenant)", body = agentry_schema::ErrorResponse),
    )
)]
pub async fn list_profiles(
    caller: TenantCaller,
    state: web::Data<AppState>,
) -> ApiResult<Json<Vec<ProfileInfo>>> {
    let mut out: Vec<ProfileInfo> = profiles::BUILTIN_IDS
        .iter()
        .filter_map(|id| {
            let spec = profiles::builtin(id)?;
            let id = ProfileId::try_from(*id).ok()?;
            Some(views::profile(
                ResolvedProfile {
                    id,
                    builtin: true,
                    spec,
                },
                None,
            ))
        })
        .collect();
    out.extend(
        stored::list(&state.db, &caller.scope())
            .await?
            .into_iter()
            .map(views::stored_profile),
    );
    Ok(Json(out))
}

/// One profile: a built-in one or the tenant's.
#[utoipa::path(
    get,
    path = "/api/v1/profiles/{profile_id}",
    tag = "agents",
    params(("profile_id" = String, Path, description = "Profile id (a slug)")),
    responses(
        (status = 200, description = "The profile", body = ProfileInfo),
        (status = 400, description = "`profile_id` is not a valid slug", body = agentry_schema::ErrorResponse),
        (status = 401, description = "No usable API key", body = agentry_schema::ErrorResponse),
        (status = 403, description = "The platform admin key (it has no tenant)", body = agentry_schema::ErrorResponse),
        (status = 404, description = "No such profile in the tenant", body = agentry_schema::ErrorResponse),
    )
)]
pub async fn get_profile(
    caller: TenantCaller,
    state: web::Data<AppState>,
    id: ApiPath<param::Profile>,
) -> ApiResult<Json<ProfileInfo>> {
    let id = id.into_inner();
    let scope = caller.scope();
    if profiles::is_builtin(&id) {
        let found = profiles::find(&state.db, &scope, &id)
            .await?
            .ok_or_else(|| ApiError::not_found(format!("profile {id}")))?;
        return Ok(Json(views::profile(found, None)));
    }
    let p = stored::get(&state.db, &scope, &id)
        .await?
        .ok_or_else(|| ApiError::not_found(format!("profile {id}")))?;
    Ok(Json(views::stored_profile(p)))
}

/// Create a profile (tenant admins).
#[utoipa::path(
    post,
    path = "/api/v1/profiles",
    tag = "agents",
    request_body = CreateProfileRequest,
    responses(
        (status = 201, description = "Created", body = ProfileInfo),
        (status = 400, description = "The body is not JSON", body = agentry_schema::ErrorResponse),
        (status = 401, description = "No usable API key", body = agentry_schema::ErrorResponse),
        (status = 403, description = "Not a tenant admin", body = agentry_schema::ErrorResponse),
        (status = 409, description = "A profile with this id exists (the built-in ones included)", body = agentry_schema::ErrorResponse),
        (status = 413, description = "The body is over the size limit", body = agentry_schema::ErrorResponse),
        (status = 415, description = "The body is not `application/json`", body = agentry_schema::ErrorResponse),
        (status = 422, description = "A field is missing or invalid (`details.field` names it)", body = agentry_schema::ErrorResponse),
    )
)]
pub async fn create_profile(
    admin: TenantAdmin,
    state: web::Data<AppState>,
    body: ApiJson<CreateProfileRequest>,
) -> ApiResult<HttpResponse> {
    let (id, spec) = body.into_inner().split();
    let id = ProfileId::try_from(id).map_err(|e| ApiError::validation("id", e.to_string()))?;
    if profiles::is_builtin(&id) {
        return Err(ApiError::conflict(format!(
            "{id:?} is a built-in profile; choose another id"
        )));
    }
    let spec = spec_from(&id, spec)?;
    let created = stored::create(&state.db, &admin.scope(), &id, spec).await?;
    Ok(HttpResponse::Created()
        .insert_header((
            actix_web::http::header::LOCATION,
            format!("/api/v1/profiles/{id}"),
        ))
        .json(views::stored_profile(created)))
}

/// Replace a profile of the tenant (tenant admins). Fields left out are the `general`
/// profile's. Assistants that use it get the change at their next run.
#[utoipa::path(
    put,
    path = "/api/v1/profiles/{profile_id}",
    tag = "agents",
    params(("profile_id" = String, Path, description = "Profile id (a slug)")),
    request_body = ProfileSpecRequest,
    responses(
        (status = 200, description = "Replaced", body = ProfileInfo),
        (status = 400, description = "A bad `profile_id`, or the body is not JSON", body = agentry_schema::ErrorResponse),
        (status = 401, description = "No usable API key", body = agentry_schema::ErrorResponse),
        (status = 403, description = "Not a tenant admin", body = agentry_schema::ErrorResponse),
        (status = 404, description = "No such profile", body = agentry_schema::ErrorResponse),
        (status = 409, description = "A built-in profile cannot be changed", body = agentry_schema::ErrorResponse),
        (status = 413, description = "The body is over the size limit", body = agentry_schema::ErrorResponse),
        (status = 415, description = "The body is not `application/json`", body = agentry_schema::ErrorResponse),
        (status = 422, description = "A field is invalid (`details.field` names it)", body = agentry_schema::ErrorResponse),
    )
)]
pub async fn replace_profile(
    admin: TenantAdmin,
    state: web::Data<AppState>,
    id: ApiPath<param::Profile>,
    body: ApiJson<ProfileSpecRequest>,
) -> ApiResult<Json<ProfileInfo>> {
    let id = id.into_inner();
    builtin_is_fixed(&id)?;
    let spec = spec_from(&id, body.into_inner())?;
    let updated = stored::update(&state.db, &admin.scope(), &id, spec).await?;
    profiles_changed(&state, &admin).await;
    Ok(Json(views::stored_profile(updated)))
}

/// Delete a profile of the tenant (tenant admins); one that an assistant uses cannot be.
#[utoipa::path(
    delete,
    path = "/api/v1/profiles/{profile_id}",
    tag = "agents",
    params(("profile_id" = String, Path, description = "Profile id (a slug)")),
    responses(
        (status = 204, description = "Deleted"),
        (status = 400, description = "A bad `profile_id`", body = agentry_schema::ErrorResponse),
        (status = 401, description = "No usable API key", body = agentry_schema::ErrorResponse),
        (status = 403, description = "Not a tenant admin", body = agentry_schema::ErrorResponse),
        (status = 404, description = "No such profile", body = agentry_schema::ErrorResponse),
        (status = 409, description = "A built-in profile, or one that assistants use (`details.assistants`)", body = agentry_schema::ErrorResponse),
    )
)]
pub async fn delete_profile(
    admin: TenantAdmin,
    state: web::Data<AppState>,
    id: ApiPath<param::Profile>,
) -> ApiResult<HttpResponse> {
    let id = id.into_inner();
    builtin_is_fixed(&id)?;
    let scope = admin.scope();
    if stored::get(&state.db, &scope, &id).await?.is_none() {
        return Err(ApiError::not_found(format!("profile {id}")));
    }
    let users = agentry_store::assistants::using_profile(&state.db, &scope, &id).await?;
    if !users.is_empty() {
        let names: Vec<String> = users.iter().map(ToString::to_string).collect();
        return Err(ApiError::conflict(format!(
            "profile {id:?} is used by {}: point them at another profile first",
            names.join(", ")
        ))
        .with_details(serde_json::json!({ "assistants": names })));
    }
    if !stored::delete(&state.db, &scope, &id).await? {
        return Err(ApiError::not_found(format!("profile {id}")));
    }
    Ok(HttpResponse::NoContent().finish())
}

/// Sessions keep their assistant's effective settings between runs: tell them a profile
/// changed.
async fn profiles_changed(state: &AppState, admin: &TenantAdmin) {
    if let Err(e) = state.engine.assistants_changed(admin.tenant_id()).await {
        tracing::warn!(error = %e, "telling the engine about the profile change failed");
    }
    agentry_domain::invalidate::announce(
        &state.domain(),
        agentry_domain::invalidate::Change::Assistants {
            tenant_id: admin.tenant_id(),
        },
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use agentry_schema::error::ErrorCode;

    #[test]
    fn left_out_fields_are_the_general_profiles() {
        let id = ProfileId::try_from("triage").unwrap();
        let s = spec_from(&id, ProfileSpecRequest::default()).unwrap();
        let g = profiles::builtin("general").unwrap();
        assert_eq!(s.name, "triage");
        assert_eq!(
            (s.system_prompt, s.tools, s.interrupt_on, s.recursion_limit),
            (g.system_prompt, g.tools, g.interrupt_on, g.recursion_limit)
        );
        let e = spec_from(
            &id,
            ProfileSpecRequest {
                tools: Some(vec!["!shell:*".into()]),
                ..Default::default()
            },
        )
        .unwrap_err();
        assert_eq!(
            (e.code, e.details["field"].as_str()),
            (ErrorCode::ValidationError, Some("tools[0]"))
        );
    }
}
