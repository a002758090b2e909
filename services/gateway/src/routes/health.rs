//! Health endpoints: `/api/v1/health` (status, version, uptime), `/health/live` (the process
//! answers) and `/health/ready` (the database answers). Both read the database's state from the
//! background probe (crate::readiness), so they answer at once during an outage.

use actix_web::{HttpResponse, web};
use agentry_schema::api::{HealthResponse, ReadinessResponse, SandboxHealth};
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
    responses((status = 200, description = "`ok`, or `degraded` when the database (or, in cluster mode, Redis) does not answer; `sandbox` says how tenant programs run; `mode` and `replica_id` which server answered", body = HealthResponse))
)]
pub async fn health(state: web::Data<AppState>) -> HttpResponse {
    let db_ok = state.db_probe.reachable() && redis_ok(&state);
    let sandbox = state.settings.tools.sandbox.status();
    HttpResponse::Ok().json(HealthResponse {
        status: if db_ok { "ok" } else { "degraded" }.into(),
        version: env!("CARGO_PKG_VERSION").into(),
        uptime: state.started.elapsed().as_secs_f64(),
        sandbox: SandboxHealth {
            configured: serde_json::to_value(sandbox.configured)
                .ok()
                .and_then(|v| v.as_str().map(String::from))
                .unwrap_or_default(),
            backend: sandbox.backend.map(|b| b.as_str().to_string()),
            error: sandbox.error.clone(),
            process_limit: sandbox.process_limit.clone(),
            egress: sandbox.egress,
        },
        mode: state.cluster.mode.as_str().into(),
        replica_id: state.cluster.replica_id().into(),
    })
}

/// Redis answers, or this server does not use it (single-node mode).
fn redis_ok(state: &AppState) -> bool {
    state
        .cluster
        .coordination
        .as_ref()
        .is_none_or(|c| c.reachable())
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

/// The database (and Redis, when configured) answer, and the server is not stopping. No key
/// needed.
#[utoipa::path(
    get,
    path = "/api/v1/health/ready",
    tag = "health",
    security(()),
    responses(
        (status = 200, description = "Ready", body = ReadinessResponse),
        (status = 503, description = "A dependency does not answer (`error_code` `database_unavailable`; in cluster mode `coordination_unavailable` when only Redis does not), or the server is stopping after SIGTERM (`service_unavailable`, `checks.shutdown: \"draining\"`): the readiness fields plus `error_code`, `message`, `details.checks`; `Retry-After`", body = ReadinessResponse),
    )
)]
pub async fn ready(state: web::Data<AppState>) -> HttpResponse {
    // From the background probe's last verdict: answers at once even while the database
    // does not (crate::readiness).
    let db = if state.db_probe.reachable() {
        "ok"
    } else {
        "unreachable"
    }
    .to_string();
    // A stopping server is red at once, so load balancers send no new work its way.
    let draining = state.engine.is_draining();
    let redis = state
        .cluster
        .coordination
        .as_ref()
        .map(|c| if c.reachable() { "ok" } else { "unreachable" });
    let ok = db == "ok" && redis.is_none_or(|r| r == "ok") && !draining;
    let mut checks = json!({ "database": db });
    if let Some(redis) = redis {
        checks["redis"] = json!(redis);
    }
    if draining {
        checks["shutdown"] = json!("draining");
    }
    let body = ReadinessResponse {
        status: if ok { "ready" } else { "not_ready" }.into(),
        checks,
    };
    if ok {
        return HttpResponse::Ok().json(body);
    }
    // Not ready is also an error response: it carries the error fields every error has, next
    // to the readiness fields load balancers and people read.
    let mut value = serde_json::to_value(&body).unwrap_or_else(|_| json!({}));
    let error = if draining {
        ErrorResponse::new(
            ErrorCode::ServiceUnavailable,
            "not ready: the server is stopping; send new work to another replica",
        )
    } else if db == "ok" {
        ErrorResponse::new(
            ErrorCode::CoordinationUnavailable,
            "not ready: Redis does not answer (see `checks`); runs in flight go on, new runs are refused",
        )
    } else {
        ErrorResponse::new(
            ErrorCode::DatabaseUnavailable,
            "not ready: a dependency does not answer (see `checks`)",
        )
    }
    .with_details(json!({ "checks": body.checks }));
    if let (Some(v), Ok(serde_json::Value::Object(e))) =
        (value.as_object_mut(), serde_json::to_value(error))
    {
        v.extend(e);
    }
    HttpResponse::ServiceUnavailable()
        .insert_header((
            actix_web::http::header::RETRY_AFTER,
            crate::error::DATABASE_RETRY_AFTER_SECS,
        ))
        .json(value)
}
