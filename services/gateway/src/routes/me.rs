//! `GET /me`: who the key in use belongs to. The quickest check that a key works.

use actix_web::web::{self, Json};
use agentry_schema::api::WhoAmI;

use crate::auth::Caller;
use crate::routes::resource::endpoint;

pub fn configure(cfg: &mut web::ServiceConfig) {
    cfg.service(endpoint("/me").get(who_am_i));
}

/// The caller: the platform admin, or a tenant's user with their effective role.
#[utoipa::path(
    get,
    path = "/api/v1/me",
    tag = "auth",
    responses(
        (status = 200, description = "The caller", body = WhoAmI),
        (status = 401, description = "No usable API key", body = agentry_schema::ErrorResponse),
        (status = 403, description = "The key's tenant is suspended", body = agentry_schema::ErrorResponse),
    )
)]
pub async fn who_am_i(caller: Caller) -> Json<WhoAmI> {
    Json(match caller {
        Caller::PlatformAdmin(_) => WhoAmI {
            kind: "platform_admin".into(),
            tenant_id: None,
            tenant_name: None,
            user_id: None,
            role: None,
            custom_role: None,
            areas: None,
            key_id: None,
        },
        Caller::Tenant(t) => WhoAmI {
            kind: "tenant".into(),
            tenant_id: Some(t.tenant_id().to_string()),
            tenant_name: Some(t.tenant().name.clone()),
            user_id: Some(t.user_id().to_string()),
            role: Some(t.role()),
            custom_role: t.custom_role().map(|n| n.to_string()),
            // A role deleted since the key was resolved may use nothing.
            areas: t.custom_role().map(|n| {
                t.tenant()
                    .custom_role(n)
                    .map_or_else(Vec::new, |r| r.areas.clone())
            }),
            key_id: t.key_id().map(|k| k.to_string()),
        },
    })
}
