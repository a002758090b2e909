//! Executions (runs of the agent loop) with their tool-call audit and approvals. Members see
//! their own runs, tenant admins the tenant's.

use actix_web::web::{self, Json};
use agentry_schema::api::{ExecutionDetail, ExecutionInfo, Page};
use agentry_schema::ids::SessionId;
use agentry_store::executions::{self, ExecutionFilter, ExecutionStatus};
use agentry_store::{approvals, tool_calls};
use serde::Deserialize;
use utoipa::IntoParams;

use crate::access;
use crate::auth::TenantCaller;
use crate::error::{ApiError, ApiResult};
use crate::extract::{ApiPath, ApiQuery, param};
use crate::routes::resource::endpoint;
use crate::routes::{page, page_of};
use crate::state::AppState;
use crate::views;

pub fn configure(cfg: &mut web::ServiceConfig) {
    cfg.service(endpoint("/executions").get(list_executions))
        .service(endpoint("/executions/{execution_id}").get(get_execution));
}

/// `GET /executions` query.
#[derive(Debug, Default, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct ExecutionsQuery {
    /// Items per page, 1–1000 (default 100).
    pub limit: Option<u64>,
    /// Items to skip (default 0).
    pub offset: Option<u64>,
    /// Only the runs of this session.
    pub session_id: Option<String>,
    /// Only runs in this status: `running`, `waiting_approval`, `completed`, `failed`,
    /// `cancelled`, `rejected`, `timeout`, `interrupted`.
    pub status: Option<String>,
}

/// Runs visible to the caller, newest first.
#[utoipa::path(
    get,
    path = "/api/v1/executions",
    tag = "executions",
    params(ExecutionsQuery),
    responses(
        (status = 200, description = "A page of runs, newest first", body = Page<ExecutionInfo>),
        (status = 400, description = "A bad query parameter (`invalid_query`)", body = agentry_schema::ErrorResponse),
        (status = 401, description = "No usable API key", body = agentry_schema::ErrorResponse),
        (status = 403, description = "The platform admin key (it has no tenant)", body = agentry_schema::ErrorResponse),
    )
)]
pub async fn list_executions(
    caller: TenantCaller,
    state: web::Data<AppState>,
    query: ApiQuery<ExecutionsQuery>,
) -> ApiResult<Json<Page<ExecutionInfo>>> {
    let q = query.into_inner();
    let page = page(q.limit, q.offset)?;
    let session_id: Option<SessionId> = q
        .session_id
        .as_deref()
        .map(|s| {
            s.parse().map_err(|e: agentry_schema::ids::InvalidId| {
                ApiError::invalid_query("session_id", e.to_string())
            })
        })
        .transpose()?;
    let status = q
        .status
        .as_deref()
        .map(|s| {
            ExecutionStatus::parse(s).ok_or_else(|| {
                let all: Vec<&str> = ExecutionStatus::ALL.iter().map(|s| s.as_str()).collect();
                ApiError::invalid_query(
                    "status",
                    format!("unknown status {s:?}; use one of {}", all.join(", ")),
                )
            })
        })
        .transpose()?;
    let filter = ExecutionFilter {
        user_id: (!caller.is_admin()).then(|| caller.user_id()),
        session_id,
        status,
    };
    let (items, total) = executions::list(&state.db, &caller.scope(), &filter, page).await?;
    Ok(Json(page_of(items, total, page, views::execution)))
}

/// One run with its tool-call audit rows and approvals, oldest first.
#[utoipa::path(
    get,
    path = "/api/v1/executions/{execution_id}",
    tag = "executions",
    params(("execution_id" = String, Path, description = "Run id (UUID)")),
    responses(
        (status = 200, description = "The run, its tool calls and its approvals", body = ExecutionDetail),
        (status = 400, description = "`execution_id` is not a UUID", body = agentry_schema::ErrorResponse),
        (status = 401, description = "No usable API key", body = agentry_schema::ErrorResponse),
        (status = 403, description = "The platform admin key (it has no tenant)", body = agentry_schema::ErrorResponse),
        (status = 404, description = "No such run visible to the caller", body = agentry_schema::ErrorResponse),
    )
)]
pub async fn get_execution(
    caller: TenantCaller,
    state: web::Data<AppState>,
    id: ApiPath<param::Execution>,
) -> ApiResult<Json<ExecutionDetail>> {
    let id = id.into_inner();
    let run = access::execution(&state.db, &caller, id).await?;
    let scope = caller.scope();
    let calls = tool_calls::list_by_execution(&state.db, &scope, run.id).await?;
    let decided = approvals::list_by_execution(&state.db, &scope, run.id).await?;
    Ok(Json(ExecutionDetail {
        execution: views::execution(run),
        tool_calls: calls.into_iter().map(views::tool_call).collect(),
        approvals: decided.into_iter().map(views::approval).collect(),
    }))
}
