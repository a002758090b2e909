//! `POST /chat` (runs to `done` and returns every event of the run) and `POST /chat/stream`
//! (the same run as Server-Sent Events, one event per `data:` line). Both are views of the
//! session's event stream, like the WebSocket.

use std::time::Duration;

use actix_web::HttpResponse;
use actix_web::http::header;
use actix_web::web::{self, Bytes, Json};
use agentry_actors::{ChatAccepted, ChatCommand, CreateSession, SessionHandle, channel_subscriber};
use agentry_schema::api::{ChatRequest, ChatResponse};
use agentry_schema::ids::{AssistantId, SessionId};
use futures::stream::StreamExt;

use crate::auth::TenantCaller;
use crate::error::{ApiError, ApiResult};
use crate::extract::{ApiJson, body_id};
use crate::request_id::RequestId;
use crate::routes::resource::endpoint;
use crate::state::AppState;

pub fn configure(cfg: &mut web::ServiceConfig) {
    cfg.service(endpoint("/chat").post(chat))
        .service(endpoint("/chat/stream").post(chat_stream));
}

/// Open (or create) the session, subscribe to it, then send the message: every event of the
/// run reaches the returned receiver.
async fn start(
    state: &AppState,
    caller: &TenantCaller,
    request_id: RequestId,
    req: ChatRequest,
) -> ApiResult<(
    SessionHandle,
    ChatAccepted,
    tokio::sync::mpsc::UnboundedReceiver<agentry_actors::SessionEvent>,
)> {
    // Refuse a bad message before anything is created: a refused request changes nothing.
    if req.message.trim().is_empty() {
        return Err(ApiError::validation(
            "message",
            "`message` must not be empty",
        ));
    }
    let session_id = req
        .session_id
        .as_deref()
        .map(|raw| {
            raw.parse::<SessionId>()
                .map_err(|e| ApiError::validation("session_id", e.to_string()))
        })
        .transpose()?;
    // The assistant names the session a message creates; with a session it is not used.
    let assistant_id = match session_id {
        Some(_) => None,
        None => body_id::<AssistantId>("assistant_id", req.assistant_id.as_deref())?,
    };
    let (to, rx) = channel_subscriber();
    let started = state
        .engine
        .chat(
            caller.tenant(),
            &caller.user(),
            ChatCommand {
                session_id,
                new_session: CreateSession {
                    assistant_id,
                    ..Default::default()
                },
                message: req.message,
                enqueue: req.enqueue,
                subscriber: Some(to),
                request_id: Some(request_id.0),
            },
        )
        .await?;
    Ok((started.handle, started.accepted, rx))
}

/// Send a message and wait for the run's `done`. With `enqueue: true` the message may wait
/// behind the session's active run.
#[utoipa::path(
    post,
    path = "/api/v1/chat",
    tag = "chat",
    request_body = ChatRequest,
    responses(
        (status = 200, description = "The run's events, ending in its `done`", body = ChatResponse),
        (status = 400, description = "Malformed JSON (`invalid_json`)", body = agentry_schema::ErrorResponse),
        (status = 401, description = "No usable API key", body = agentry_schema::ErrorResponse),
        (status = 403, description = "The platform admin key (it has no tenant)", body = agentry_schema::ErrorResponse),
        (status = 404, description = "No such session or assistant visible to the caller", body = agentry_schema::ErrorResponse),
        (status = 409, description = "A run is in progress in the session (`run_in_progress`); send with `enqueue: true` to queue", body = agentry_schema::ErrorResponse),
        (status = 422, description = "A field is invalid (`validation_error`)", body = agentry_schema::ErrorResponse),
        (status = 429, description = "A tenant quota is used up (`Retry-After`)", body = agentry_schema::ErrorResponse),
        (status = 503, description = "The server is stopping (SIGTERM) and starts no new run (`service_unavailable`); send it again, to another replica, after `Retry-After` seconds", body = agentry_schema::ErrorResponse),
    )
)]
pub async fn chat(
    caller: TenantCaller,
    state: web::Data<AppState>,
    request_id: RequestId,
    body: ApiJson<ChatRequest>,
) -> ApiResult<Json<ChatResponse>> {
    let (handle, accepted, mut rx) = start(&state, &caller, request_id, body.into_inner()).await?;
    let run = accepted.run_id.to_string();
    let mut events = Vec::new();
    // The run ends with exactly one `done`; the assistant's own timeout bounds the wait.
    while let Some(ev) = rx.recv().await {
        if ev.event.run_id != run {
            continue;
        }
        let done = ev.event.is_done();
        events.push((*ev.event).clone());
        if done {
            break;
        }
    }
    Ok(Json(ChatResponse {
        session_id: handle.session.id.to_string(),
        run_id: run,
        events,
    }))
}

/// The same run as Server-Sent Events: `id: <seq>` and one `data:` line per event, ending
/// after `done`. A comment line is sent every 15 s to keep proxies from closing the stream.
#[utoipa::path(
    post,
    path = "/api/v1/chat/stream",
    tag = "chat",
    request_body = ChatRequest,
    responses(
        (status = 200, description = "`text/event-stream`: the run's events, ending in its `done`", content_type = "text/event-stream"),
        (status = 400, description = "Malformed JSON (`invalid_json`)", body = agentry_schema::ErrorResponse),
        (status = 401, description = "No usable API key", body = agentry_schema::ErrorResponse),
        (status = 403, description = "The platform admin key (it has no tenant)", body = agentry_schema::ErrorResponse),
        (status = 404, description = "No such session or assistant visible to the caller", body = agentry_schema::ErrorResponse),
        (status = 409, description = "A run is in progress in the session (`run_in_progress`)", body = agentry_schema::ErrorResponse),
        (status = 422, description = "A field is invalid (`validation_error`)", body = agentry_schema::ErrorResponse),
        (status = 429, description = "A tenant quota is used up (`Retry-After`)", body = agentry_schema::ErrorResponse),
        (status = 503, description = "The server is stopping (SIGTERM) and starts no new run (`service_unavailable`); send it again, to another replica, after `Retry-After` seconds", body = agentry_schema::ErrorResponse),
    )
)]
pub async fn chat_stream(
    caller: TenantCaller,
    state: web::Data<AppState>,
    request_id: RequestId,
    body: ApiJson<ChatRequest>,
) -> ApiResult<HttpResponse> {
    let (handle, accepted, rx) = start(&state, &caller, request_id, body.into_inner()).await?;
    let run = accepted.run_id.to_string();
    let session = handle.session.id.to_string();
    let events = futures::stream::unfold((rx, false), move |(mut rx, finished)| {
        let run = run.clone();
        async move {
            if finished {
                return None;
            }
            loop {
                let next = tokio::time::timeout(Duration::from_secs(15), rx.recv()).await;
                match next {
                    Err(_) => return Some((Bytes::from_static(b": keep-alive\n\n"), (rx, false))),
                    Ok(None) => return None,
                    Ok(Some(ev)) if ev.event.run_id != run => continue,
                    Ok(Some(ev)) => {
                        let done = ev.event.is_done();
                        let frame = format!("id: {}\ndata: {}\n\n", ev.event.seq, ev.json);
                        return Some((Bytes::from(frame), (rx, done)));
                    }
                }
            }
        }
    })
    .map(Ok::<_, actix_web::Error>);
    Ok(HttpResponse::Ok()
        .insert_header((header::CONTENT_TYPE, "text/event-stream"))
        .insert_header((header::CACHE_CONTROL, "no-cache"))
        .insert_header(("x-accel-buffering", "no"))
        .insert_header(("x-session-id", session))
        .insert_header(("x-run-id", accepted.run_id.to_string()))
        .streaming(events))
}
