//! Executions (runs of the agent loop) with their tool-call audit and approvals, and the audit
//! itself (`GET /tool-calls`). Members see their own runs, tenant admins the tenant's.

use actix_web::web::{self, Json};
use agentry_schema::api::{AuditedToolCall, ExecutionDetail, ExecutionInfo, Page};
use agentry_schema::ids::{SessionId, UserId};
use agentry_store::executions::{self, ExecutionFilter, ExecutionStatus};
use agentry_store::tool_calls::{CallOutcome, ToolCallFilter};
use agentry_store::{approvals, tool_calls};
use chrono::{DateTime, Utc};
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
        .service(endpoint("/executions/{execution_id}").get(get_execution))
        .service(endpoint("/tool-calls").get(list_tool_calls));
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
    /// Only runs in this status: `queued`, `running`, `waiting_approval`, `completed`,
    /// `failed`, `cancelled`, `rejected`, `timeout`, `interrupted`.
    pub status: Option<String>,
    /// Only the runs of this user. Members may name only themselves (403 otherwise).
    pub user_id: Option<String>,
    /// Only the runs of this assistant.
    pub assistant_id: Option<String>,
    /// Only runs that called this tool (its name as the audit records it, e.g. `read_file`).
    pub tool_name: Option<String>,
    /// Runs started at or after this instant (RFC 3339, e.g. `2026-11-01T00:00:00Z`).
    pub from: Option<String>,
    /// Runs started before this instant (RFC 3339).
    pub to: Option<String>,
    /// Only the `task` child runs this run started (the audit's tree, one level at a time).
    pub parent_execution_id: Option<String>,
    /// `true`: only runs a person started; `false`: only `task` child runs.
    pub top_level: Option<bool>,
}

/// `GET /tool-calls` query.
#[derive(Debug, Default, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct ToolCallsQuery {
    /// Items per page, 1–1000 (default 100).
    pub limit: Option<u64>,
    /// Items to skip (default 0).
    pub offset: Option<u64>,
    /// Only calls of this tool (its name as the audit records it, e.g. `read_file`).
    pub tool_name: Option<String>,
    /// Only calls made by this user's runs. Members may name only themselves (403 otherwise).
    pub user_id: Option<String>,
    /// Only calls made by runs of this assistant.
    pub assistant_id: Option<String>,
    /// Only calls of this session.
    pub session_id: Option<String>,
    /// Only calls of this run.
    pub execution_id: Option<String>,
    /// `ok` (the tool returned a result, which may be a reported failure) or `error` (no
    /// result: refused, denied, invalid arguments, timed out, interrupted, …).
    pub status: Option<String>,
    /// Calls recorded at or after this instant (RFC 3339).
    pub from: Option<String>,
    /// Calls recorded before this instant (RFC 3339).
    pub to: Option<String>,
}

/// The filters both audit lists share, checked: who (a member only themselves), which
/// assistant and tool, and when.
struct AuditWho {
    user_id: Option<UserId>,
    assistant_id: Option<String>,
    tool_name: Option<String>,
    from: Option<DateTime<Utc>>,
    to: Option<DateTime<Utc>>,
}

fn parse_id<T: std::str::FromStr>(name: &str, v: Option<&str>) -> ApiResult<Option<T>>
where
    T::Err: std::fmt::Display,
{
    v.map(|s| {
        s.parse()
            .map_err(|e: T::Err| ApiError::invalid_query(name, e.to_string()))
    })
    .transpose()
}

fn parse_instant(name: &str, v: Option<&str>) -> ApiResult<Option<DateTime<Utc>>> {
    v.map(|s| {
        DateTime::parse_from_rfc3339(s)
            .map(|t| t.with_timezone(&Utc))
            .map_err(|e| {
                ApiError::invalid_query(
                    name,
                    format!(
                        "`{name}` must be an RFC 3339 instant such as 2026-11-01T00:00:00Z ({e})"
                    ),
                )
            })
    })
    .transpose()
}

fn non_empty(name: &str, v: Option<String>) -> ApiResult<Option<String>> {
    match v {
        Some(s) if s.is_empty() || s.len() > 256 => Err(ApiError::invalid_query(
            name,
            format!("`{name}` must be 1 to 256 characters"),
        )),
        other => Ok(other),
    }
}

impl AuditWho {
    fn parse(
        caller: &TenantCaller,
        user_id: Option<&str>,
        assistant_id: Option<String>,
        tool_name: Option<String>,
        from: Option<&str>,
        to: Option<&str>,
    ) -> ApiResult<Self> {
        let named: Option<UserId> = parse_id("user_id", user_id)?;
        let from = parse_instant("from", from)?;
        let to = parse_instant("to", to)?;
        if let (Some(f), Some(t)) = (from, to)
            && f > t
        {
            return Err(ApiError::invalid_query(
                "from",
                "`from` must not be after `to`",
            ));
        }
        // Members see their own rows: naming another user is refused rather than answered
        // with an empty page, so a mistake is visible (and nothing about the user leaks: the
        // same answer whether or not the user exists).
        let user_id = if caller.is_admin() {
            named
        } else {
            match named {
                Some(u) if u != caller.user_id() => {
                    return Err(ApiError::forbidden(
                        "members see only their own runs and tool calls; leave out user_id or \
                         name yourself",
                    ));
                }
                _ => Some(caller.user_id()),
            }
        };
        Ok(Self {
            user_id,
            assistant_id: non_empty("assistant_id", assistant_id)?,
            tool_name: non_empty("tool_name", tool_name)?,
            from,
            to,
        })
    }
}

/// Runs visible to the caller, newest first, filtered by what the query names.
#[utoipa::path(
    get,
    path = "/api/v1/executions",
    tag = "executions",
    params(ExecutionsQuery),
    responses(
        (status = 200, description = "A page of runs, newest first", body = Page<ExecutionInfo>),
        (status = 400, description = "A bad query parameter (`invalid_query`)", body = agentry_schema::ErrorResponse),
        (status = 401, description = "No usable API key", body = agentry_schema::ErrorResponse),
        (status = 403, description = "The platform admin key (it has no tenant), or a member naming another user", body = agentry_schema::ErrorResponse),
    )
)]
pub async fn list_executions(
    caller: TenantCaller,
    state: web::Data<AppState>,
    query: ApiQuery<ExecutionsQuery>,
) -> ApiResult<Json<Page<ExecutionInfo>>> {
    let q = query.into_inner();
    let page = page(q.limit, q.offset)?;
    let session_id: Option<SessionId> = parse_id("session_id", q.session_id.as_deref())?;
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
    let who = AuditWho::parse(
        &caller,
        q.user_id.as_deref(),
        q.assistant_id,
        q.tool_name,
        q.from.as_deref(),
        q.to.as_deref(),
    )?;
    let parent_execution_id = parse_id("parent_execution_id", q.parent_execution_id.as_deref())?;
    let filter = ExecutionFilter {
        user_id: who.user_id,
        session_id,
        status,
        assistant_id: who.assistant_id,
        tool_name: who.tool_name,
        from: who.from,
        to: who.to,
        parent_execution_id,
        top_level: q.top_level,
    };
    let (items, total) = executions::list(&state.db, &caller.scope(), &filter, page).await?;
    Ok(Json(page_of(items, total, page, views::execution)))
}

/// Tool calls visible to the caller (tenant admins: the tenant's; members: their own runs'),
/// newest first: the audit an auditor reads, e.g. every call of one tool in a month.
#[utoipa::path(
    get,
    path = "/api/v1/tool-calls",
    tag = "executions",
    params(ToolCallsQuery),
    responses(
        (status = 200, description = "A page of audited tool calls, newest first", body = Page<AuditedToolCall>),
        (status = 400, description = "A bad query parameter (`invalid_query`)", body = agentry_schema::ErrorResponse),
        (status = 401, description = "No usable API key", body = agentry_schema::ErrorResponse),
        (status = 403, description = "The platform admin key (it has no tenant), or a member naming another user", body = agentry_schema::ErrorResponse),
    )
)]
pub async fn list_tool_calls(
    caller: TenantCaller,
    state: web::Data<AppState>,
    query: ApiQuery<ToolCallsQuery>,
) -> ApiResult<Json<Page<AuditedToolCall>>> {
    let q = query.into_inner();
    let page = page(q.limit, q.offset)?;
    let outcome = q
        .status
        .as_deref()
        .map(|s| {
            CallOutcome::parse(s).ok_or_else(|| {
                ApiError::invalid_query("status", format!("unknown status {s:?}; use ok or error"))
            })
        })
        .transpose()?;
    let who = AuditWho::parse(
        &caller,
        q.user_id.as_deref(),
        q.assistant_id,
        q.tool_name,
        q.from.as_deref(),
        q.to.as_deref(),
    )?;
    let filter = ToolCallFilter {
        user_id: who.user_id,
        assistant_id: who.assistant_id,
        session_id: parse_id("session_id", q.session_id.as_deref())?,
        execution_id: parse_id("execution_id", q.execution_id.as_deref())?,
        tool_name: who.tool_name,
        outcome,
        from: who.from,
        to: who.to,
    };
    let (items, total) = tool_calls::list(&state.db, &caller.scope(), &filter, page).await?;
    Ok(Json(page_of(items, total, page, views::audited_call)))
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
