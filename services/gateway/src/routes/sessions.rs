//! Sessions: create, list, one session, delete, its messages, its stored events, cancelling
//! its run and deciding its approvals. Members see their own sessions, tenant admins the
//! tenant's; anything else is 404. Creating, deleting, cancelling and deciding go through the
//! engine (the same calls the WebSocket makes).

use actix_web::http::header;
use actix_web::web::{self, Bytes, Json};
use actix_web::{HttpRequest, HttpResponse};
use agentry_actors::CreateSession;
use agentry_actors::channel_subscriber;
use agentry_schema::api::{CreateSessionRequest, EventsPage, MessageInfo, Page, SessionInfo};
use agentry_schema::error::ErrorCode;
use agentry_schema::frames::Decision;
use agentry_schema::ids::AssistantId;
use agentry_schema::ids::SessionId;
use agentry_schema::ids::UserId;
use agentry_store::{events, messages, sessions};
use futures::StreamExt;
use serde::Deserialize;
use utoipa::IntoParams;

use crate::access;
use crate::auth::TenantCaller;
use crate::error::{ApiError, ApiResult};
use crate::extract::{ApiJson, ApiPath, ApiQuery, body_id, param};
use crate::protocols::common::{KEEP_ALIVE, with_keep_alive};
use crate::routes::resource::endpoint;
use crate::routes::{PageQuery, page, page_of};
use crate::state::AppState;
use crate::views;

pub fn configure(cfg: &mut web::ServiceConfig) {
    cfg.service(
        endpoint("/sessions")
            .get(list_sessions)
            .post(create_session),
    )
    .service(
        endpoint("/sessions/{session_id}")
            .get(get_session)
            .delete(delete_session),
    )
    .service(endpoint("/sessions/{session_id}/cancel").post(cancel_run))
    .service(endpoint("/sessions/{session_id}/approvals/{request_id}").post(decide))
    .service(endpoint("/sessions/{session_id}/messages").get(list_messages))
    .service(endpoint("/sessions/{session_id}/events").get(list_events));
}

/// `GET /sessions` query.
#[derive(Debug, Default, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct SessionsQuery {
    /// Items per page, 1–1000 (default 100).
    pub limit: Option<u64>,
    /// Items to skip (default 0).
    pub offset: Option<u64>,
    /// Tenant admins: only this user's sessions. Members may name only themselves.
    pub user_id: Option<String>,
}

/// The caller's sessions (a tenant admin: the tenant's), most recently active first.
#[utoipa::path(
    get,
    path = "/api/v1/sessions",
    tag = "sessions",
    params(SessionsQuery),
    responses(
        (status = 200, description = "A page of sessions", body = Page<SessionInfo>),
        (status = 400, description = "A bad query parameter (`invalid_query`)", body = agentry_schema::ErrorResponse),
        (status = 401, description = "No usable API key", body = agentry_schema::ErrorResponse),
        (status = 403, description = "A member asked for another user's sessions, or the platform admin key", body = agentry_schema::ErrorResponse),
    )
)]
pub async fn list_sessions(
    caller: TenantCaller,
    state: web::Data<AppState>,
    query: ApiQuery<SessionsQuery>,
) -> ApiResult<Json<Page<SessionInfo>>> {
    let q = query.into_inner();
    let page = page(q.limit, q.offset)?;
    let wanted: Option<UserId> = q
        .user_id
        .as_deref()
        .map(|u| {
            u.parse().map_err(|e: agentry_schema::ids::InvalidId| {
                ApiError::invalid_query("user_id", e.to_string())
            })
        })
        .transpose()?;
    let user = match (caller.is_admin(), wanted) {
        (true, w) => w,
        (false, None) => Some(caller.user_id()),
        (false, Some(w)) if w == caller.user_id() => Some(w),
        (false, Some(_)) => {
            return Err(ApiError::forbidden(
                "members see only their own sessions; drop `user_id` or ask a tenant admin",
            ));
        }
    };
    let (items, total) = sessions::list(&state.db, &caller.scope(), user, page).await?;
    Ok(Json(page_of(items, total, page, views::session)))
}

/// One session.
#[utoipa::path(
    get,
    path = "/api/v1/sessions/{session_id}",
    tag = "sessions",
    params(("session_id" = String, Path, description = "Session id (UUID)")),
    responses(
        (status = 200, description = "The session", body = SessionInfo),
        (status = 400, description = "`session_id` is not a UUID", body = agentry_schema::ErrorResponse),
        (status = 401, description = "No usable API key", body = agentry_schema::ErrorResponse),
        (status = 403, description = "The platform admin key (it has no tenant)", body = agentry_schema::ErrorResponse),
        (status = 404, description = "No such session visible to the caller", body = agentry_schema::ErrorResponse),
    )
)]
pub async fn get_session(
    caller: TenantCaller,
    state: web::Data<AppState>,
    id: ApiPath<param::Session>,
) -> ApiResult<Json<SessionInfo>> {
    let id = id.into_inner();
    let session = access::session(&state.db, &caller, id).await?;
    Ok(Json(views::session(session)))
}

/// The conversation of a session, oldest first.
#[utoipa::path(
    get,
    path = "/api/v1/sessions/{session_id}/messages",
    tag = "sessions",
    params(("session_id" = String, Path, description = "Session id (UUID)"), PageQuery),
    responses(
        (status = 200, description = "A page of messages, oldest first", body = Page<MessageInfo>),
        (status = 400, description = "A bad `session_id` or query parameter", body = agentry_schema::ErrorResponse),
        (status = 401, description = "No usable API key", body = agentry_schema::ErrorResponse),
        (status = 403, description = "The platform admin key (it has no tenant)", body = agentry_schema::ErrorResponse),
        (status = 404, description = "No such session visible to the caller", body = agentry_schema::ErrorResponse),
    )
)]
pub async fn list_messages(
    caller: TenantCaller,
    state: web::Data<AppState>,
    id: ApiPath<param::Session>,
    query: ApiQuery<PageQuery>,
) -> ApiResult<Json<Page<MessageInfo>>> {
    let id = id.into_inner();
    let page = query.0.page()?;
    let session = access::session(&state.db, &caller, id).await?;
    let scope = caller.scope();
    let items = messages::list(&state.db, &scope, session.id, page).await?;
    let total = messages::count(&state.db, &scope, session.id).await?;
    Ok(Json(page_of(items, total, page, views::message)))
}

/// Largest page of events.
const MAX_EVENTS: u64 = 1000;

/// `GET /sessions/{id}/events` query.
#[derive(Debug, Default, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct EventsQuery {
    /// Only events with a greater `seq` (default 0: from the start).
    pub after_seq: Option<u64>,
    /// Events per page, 1–1000 (default 1000).
    pub limit: Option<u64>,
}

/// The session's stored events after `after_seq`, in order: what a client that reconnects
/// missed. With `Accept: text/event-stream` the session's event stream instead, as Server-Sent
/// Events that stay open: the events after `Last-Event-ID` (or `after_seq`), then every new
/// one, on whichever replica the request lands.
#[utoipa::path(
    get,
    path = "/api/v1/sessions/{session_id}/events",
    tag = "sessions",
    params(
        ("session_id" = String, Path, description = "Session id (UUID)"),
        EventsQuery,
        ("Last-Event-ID" = Option<u64>, Header, description = "With `Accept: text/event-stream`: the last `seq` the client saw (an `EventSource` sends it when it reconnects); wins over `after_seq`"),
    ),
    responses(
        (status = 200, description = "Events with `seq > after_seq`, in order; with `Accept: text/event-stream`, a stream of them (`id: <seq>`, one `data:` line per event, a `: keep-alive` comment every 15 s) that does not end", content(
            (EventsPage = "application/json"),
            (String = "text/event-stream"),
        )),
        (status = 400, description = "A bad `session_id` or query parameter", body = agentry_schema::ErrorResponse),
        (status = 401, description = "No usable API key", body = agentry_schema::ErrorResponse),
        (status = 403, description = "The platform admin key (it has no tenant)", body = agentry_schema::ErrorResponse),
        (status = 404, description = "No such session visible to the caller", body = agentry_schema::ErrorResponse),
    )
)]
pub async fn list_events(
    caller: TenantCaller,
    state: web::Data<AppState>,
    id: ApiPath<param::Session>,
    query: ApiQuery<EventsQuery>,
    req: HttpRequest,
) -> ApiResult<HttpResponse> {
    let id = id.into_inner();
    let q = query.into_inner();
    if wants_event_stream(&req) {
        return event_stream(caller, state, id, q.after_seq, &req).await;
    }
    let limit = q.limit.unwrap_or(MAX_EVENTS);
    if !(1..=MAX_EVENTS).contains(&limit) {
        return Err(ApiError::invalid_query(
            "limit",
            format!("`limit` must be between 1 and {MAX_EVENTS} (got {limit})"),
        ));
    }
    let after = q.after_seq.unwrap_or(0);
    if after > i64::MAX as u64 {
        return Err(ApiError::invalid_query(
            "after_seq",
            "`after_seq` is too large",
        ));
    }
    let session = access::session(&state.db, &caller, id).await?;
    // One more than asked tells whether another page exists.
    let mut events =
        events::list_after(&state.db, &caller.scope(), session.id, after, limit + 1).await?;
    let has_more = events.len() as u64 > limit;
    events.truncate(usize::try_from(limit).unwrap_or(usize::MAX));
    let next_after_seq = events.last().map(|e| e.seq).unwrap_or(after);
    Ok(HttpResponse::Ok().json(EventsPage {
        session_id: session.id.to_string(),
        events,
        next_after_seq,
        has_more,
    }))
}

/// `Accept: text/event-stream` (what an `EventSource` sends).
fn wants_event_stream(req: &HttpRequest) -> bool {
    req.headers()
        .get_all(header::ACCEPT)
        .filter_map(|v| v.to_str().ok())
        .any(|v| v.contains("text/event-stream"))
}

/// The session's events as Server-Sent Events: replayed after `Last-Event-ID` (or
/// `after_seq`), then live, until the client goes away (or the session is deleted).
async fn event_stream(
    caller: TenantCaller,
    state: web::Data<AppState>,
    id: SessionId,
    after_seq: Option<u64>,
    req: &HttpRequest,
) -> ApiResult<HttpResponse> {
    let after = match req.headers().get("last-event-id") {
        Some(v) => Some(
            v.to_str()
                .ok()
                .and_then(|s| s.trim().parse::<u64>().ok())
                .filter(|n| *n <= i64::MAX as u64)
                .ok_or_else(|| {
                    ApiError::new(
                        ErrorCode::BadRequest,
                        "`Last-Event-ID` must be the `seq` of an event (a whole number)",
                    )
                    .with_details(serde_json::json!({"header": "Last-Event-ID"}))
                })?,
        ),
        None => after_seq,
    };
    if after.is_some_and(|a| a > i64::MAX as u64) {
        return Err(ApiError::invalid_query(
            "after_seq",
            "`after_seq` is too large",
        ));
    }
    let handle = state
        .engine
        .open_session(caller.tenant(), &caller.user(), id)
        .await?;
    let (to, rx) = channel_subscriber();
    state.engine.subscribe(&handle, after, to).await?;
    let session = handle.session.id.to_string();
    // Events the client saw already (a watcher's tail may hand on one it replayed) are skipped.
    let mut next = after.map_or(0, |a| a + 1);
    let frames = tokio_stream::wrappers::UnboundedReceiverStream::new(rx).filter_map(move |ev| {
        // The handle keeps the session live (not evicted) for as long as the stream is open.
        let _live = &handle;
        let seq = ev.event.seq;
        let frame = (seq >= next).then(|| {
            next = seq + 1;
            Bytes::from(format!("id: {seq}\ndata: {}\n\n", ev.json))
        });
        futures::future::ready(frame)
    });
    Ok(HttpResponse::Ok()
        .insert_header((header::CONTENT_TYPE, "text/event-stream"))
        .insert_header((header::CACHE_CONTROL, "no-cache"))
        .insert_header(("x-accel-buffering", "no"))
        .insert_header(("x-session-id", session))
        .streaming(with_keep_alive(Box::pin(frames), KEEP_ALIVE)))
}

/// Largest `metadata` object accepted on a session, serialized.
const MAX_METADATA_BYTES: usize = 16 * 1024;

/// Create a session for the caller (within the tenant's `max_sessions_per_user`).
#[utoipa::path(
    post,
    path = "/api/v1/sessions",
    tag = "sessions",
    request_body = CreateSessionRequest,
    responses(
        (status = 201, description = "The new session", body = SessionInfo),
        (status = 400, description = "Malformed JSON (`invalid_json`)", body = agentry_schema::ErrorResponse),
        (status = 401, description = "No usable API key", body = agentry_schema::ErrorResponse),
        (status = 403, description = "The platform admin key (it has no tenant), or a member asking for `auto_approve` without the right", body = agentry_schema::ErrorResponse),
        (status = 404, description = "No such assistant in the tenant", body = agentry_schema::ErrorResponse),
        (status = 422, description = "A field is invalid (`validation_error`, the field named)", body = agentry_schema::ErrorResponse),
        (status = 429, description = "`max_sessions_per_user` or `requests_per_minute` reached (`Retry-After`)", body = agentry_schema::ErrorResponse),
    )
)]
pub async fn create_session(
    caller: TenantCaller,
    state: web::Data<AppState>,
    body: ApiJson<CreateSessionRequest>,
) -> ApiResult<HttpResponse> {
    let req = body.into_inner();
    let assistant_id = body_id::<AssistantId>("assistant_id", req.assistant_id.as_deref())?;
    if let Some(m) = &req.metadata {
        if !m.is_object() {
            return Err(ApiError::validation(
                "metadata",
                "`metadata` must be a JSON object",
            ));
        }
        if m.to_string().len() > MAX_METADATA_BYTES {
            return Err(ApiError::validation(
                "metadata",
                format!("`metadata` must be at most {MAX_METADATA_BYTES} bytes of JSON"),
            ));
        }
    }
    let session = state
        .engine
        .create_session(
            caller.tenant(),
            &caller.user(),
            CreateSession {
                id: None,
                assistant_id,
                metadata: req.metadata,
                auto_approve: req.auto_approve,
                // Counted against max_sessions_per_user, whatever the body says.
                stateless: false,
            },
        )
        .await?;
    Ok(HttpResponse::Created().json(views::session(session)))
}

/// Delete a session with its messages and events. A run in progress ends first (its `done`
/// goes to whoever watches).
#[utoipa::path(
    delete,
    path = "/api/v1/sessions/{session_id}",
    tag = "sessions",
    params(("session_id" = String, Path, description = "Session id (UUID)")),
    responses(
        (status = 204, description = "Deleted"),
        (status = 400, description = "`session_id` is not a UUID", body = agentry_schema::ErrorResponse),
        (status = 401, description = "No usable API key", body = agentry_schema::ErrorResponse),
        (status = 403, description = "The platform admin key (it has no tenant)", body = agentry_schema::ErrorResponse),
        (status = 404, description = "No such session visible to the caller", body = agentry_schema::ErrorResponse),
    )
)]
pub async fn delete_session(
    caller: TenantCaller,
    state: web::Data<AppState>,
    id: ApiPath<param::Session>,
) -> ApiResult<HttpResponse> {
    state
        .engine
        .delete_session(caller.tenant(), &caller.user(), id.into_inner())
        .await?;
    Ok(HttpResponse::NoContent().finish())
}

/// Cancel the session's active run: `done{cancelled: true, reason: "user_cancelled"}` follows
/// on the event stream.
#[utoipa::path(
    post,
    path = "/api/v1/sessions/{session_id}/cancel",
    tag = "sessions",
    params(("session_id" = String, Path, description = "Session id (UUID)")),
    responses(
        (status = 200, description = "The run is being cancelled", body = Object, example = json!({"status": "cancelled", "session_id": "…", "run_id": "…"})),
        (status = 400, description = "`session_id` is not a UUID", body = agentry_schema::ErrorResponse),
        (status = 401, description = "No usable API key", body = agentry_schema::ErrorResponse),
        (status = 403, description = "The platform admin key (it has no tenant)", body = agentry_schema::ErrorResponse),
        (status = 404, description = "No such session, or no active run (`no_active_run`)", body = agentry_schema::ErrorResponse),
    )
)]
pub async fn cancel_run(
    caller: TenantCaller,
    state: web::Data<AppState>,
    id: ApiPath<param::Session>,
) -> ApiResult<Json<serde_json::Value>> {
    let id = id.into_inner();
    let run = state
        .engine
        .cancel(caller.tenant(), &caller.user(), id)
        .await?;
    Ok(Json(serde_json::json!({
        "status": "cancelled",
        "session_id": id.to_string(),
        "run_id": run.to_string(),
    })))
}

/// Decide a pending `hitl_request` of the session: `approve`, `edit` (with `args`), `reject`
/// (with an optional `message`) for approvals; `answer` (or `reject` to decline) for questions.
#[utoipa::path(
    post,
    path = "/api/v1/sessions/{session_id}/approvals/{request_id}",
    tag = "sessions",
    params(
        ("session_id" = String, Path, description = "Session id (UUID)"),
        ("request_id" = String, Path, description = "The `request_id` of the `hitl_request` (UUID)"),
    ),
    request_body = Decision,
    responses(
        (status = 200, description = "The decision was taken", body = Object, example = json!({"status": "accepted", "request_id": "…", "type": "approve"})),
        (status = 400, description = "A bad id, malformed JSON, or a decision that does not fit the request's kind", body = agentry_schema::ErrorResponse),
        (status = 401, description = "No usable API key", body = agentry_schema::ErrorResponse),
        (status = 403, description = "The platform admin key (it has no tenant)", body = agentry_schema::ErrorResponse),
        (status = 404, description = "No such session or request visible to the caller", body = agentry_schema::ErrorResponse),
        (status = 409, description = "Already decided, timed out, or its run ended (`approval_not_pending`)", body = agentry_schema::ErrorResponse),
        (status = 422, description = "The body is not a decision (`validation_error`)", body = agentry_schema::ErrorResponse),
    )
)]
pub async fn decide(
    caller: TenantCaller,
    state: web::Data<AppState>,
    session: ApiPath<param::Session>,
    request: ApiPath<param::Approval>,
    body: ApiJson<Decision>,
) -> ApiResult<Json<serde_json::Value>> {
    let decision = body.into_inner();
    let kind = decision.kind();
    let request = request.into_inner();
    state
        .engine
        .decide(
            caller.tenant(),
            &caller.user(),
            session.into_inner(),
            request,
            decision,
        )
        .await?;
    Ok(Json(serde_json::json!({
        "status": "accepted",
        "request_id": request.to_string(),
        "type": kind,
    })))
}
