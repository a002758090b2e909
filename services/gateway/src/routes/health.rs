//! Health endpoints: `/api/v1/health` (status, version, uptime), `/health/live` (the process
//! answers) and `/health/ready` (the database, and Redis when configured, answer).

use actix_web::{HttpResponse, web};
use agentry_schema::api::{HealthResponse, ReadinessResponse};
use agentry_schema::error::{ErrorCode, ErrorResponse};
use serde_json::json;

use crate::routes::resource::endpoint;
use crate::state::AppState;

pub fn configure(cfg: &mut web::ServiceConfig) {
    cfg.service(endpoint("/health").get(health))
        .service(endpoint("/health/live").get(live))
        .service(endpoint("/health/ready").get(ready));
}

/// Status, version and uptime. No key needed.
#[utoipa::path(
    get,
    path = "/api/v1/health",
    tag = "health",
    security(()),
    responses((status = 200, description = "`ok`, or `degraded` when the database does not answer", body = HealthResponse))
)]
pub async fn health(state: web::Data<AppState>) -> HttpResponse {
    let db_ok = agentry_store::ping(&state.db).await.is_ok();
    HttpResponse::Ok().json(HealthResponse {
        status: if db_ok { "ok" } else { "degraded" }.into(),
        version: env!("CARGO_PKG_VERSION").into(),
        uptime: state.started.elapsed().as_secs_f64(),
    })
}

/// The process answers. No key needed.
#[utoipa::path(
    get,
    path = "/api/v1/health/live",
    tag = "health",
    security(()),
    responses((status = 200, description = "`{\"status\": \"ok\"}`", body = Object))
)]
pub async fn live() -> HttpResponse {
    HttpResponse::Ok().json(json!({"status": "ok"}))
}

/// The database (and Redis, when configured) answer. No key needed.
#[utoipa::path(
    get,
    path = "/api/v1/health/ready",
    tag = "health",
    security(()),
    responses(
        (status = 200, description = "Ready", body = ReadinessResponse),
        (status = 503, description = "A dependency does not answer: the readiness fields plus `error_code` `service_unavailable`, `message`, `details.checks`", body = ReadinessResponse),
    )
)]
pub async fn ready(state: web::Data<AppState>) -> HttpResponse {
    let db = match agentry_store::ping(&state.db).await {
        Ok(()) => "ok".to_string(),
        Err(e) => {
            tracing::warn!(error = %e, "readiness: database unreachable");
            "unreachable".to_string()
        }
    };
    let ok = db == "ok";
    let body = ReadinessResponse {
        status: if ok { "ready" } else { "not_ready" }.into(),
        checks: json!({ "database": db }),
    };
    if ok {
        return HttpResponse::Ok().json(body);
    }
    // Not ready is also an error response: it carries the error fields every error has, next
    // to the readiness fields load balancers and people read.
    let mut value = serde_json::to_value(&body).unwrap_or_else(|_| json!({}));
    let error = ErrorResponse::new(
        ErrorCode::ServiceUnavailable,
        "not ready: a dependency does not answer (see `checks`)",
    )
    .with_details(json!({ "checks": body.checks }));
    if let (Some(v), Ok(serde_json::Value::Object(e))) =
        (value.as_object_mut(), serde_json::to_value(error))
    {
        v.extend(e);
    }
    HttpResponse::ServiceUnavailable().json(value)
}
