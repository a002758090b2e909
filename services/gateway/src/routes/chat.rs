//! `POST /chat` (runs to `done` and returns every event of the run) and `POST /chat/stream`
//! (the same run as Server-Sent Events, one event per `data:` line). Both are views of the
//! session's event stream, like the WebSocket.

use std::time::Duration;

use actix_web::HttpResponse;
use actix_web::http::header;
use actix_web::web::{self, Bytes, Json};
use agentry_actors::{ChatCommand, CreateSession};
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

/// The engine command of a REST/SSE chat request. The message itself is checked by the engine,
/// as on every transport; only the ids are REST's own to parse.
fn command(req: ChatRequest, request_id: RequestId) -> ApiResult<ChatCommand> {
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
    Ok(ChatCommand {
        session_id,
        new_session: CreateSession {
            assistant_id,
            ..Default::default()
        },
        message: req.message,
        enqueue: req.enqueue,
        subscriber: None,
        request_id: Some(request_id.0),
    })
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
    let cmd = command(body.into_inner(), request_id)?;
    // The run ends with exactly one `done`; the assistant's own timeout bounds the wait.
    let out = state
        .engine
        .run_to_done(caller.tenant(), &caller.user(), cmd)
        .await?;
    Ok(Json(ChatResponse {
        session_id: out.session_id.to_string(),
        run_id: out.run_id.to_string(),
        events: out.events,
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
    let cmd = command(body.into_inner(), request_id)?;
    let run = state
        .engine
        .stream_run(caller.tenant(), &caller.user(), cmd)
        .await?;
    let (session, run_id) = (run.session_id().to_string(), run.run_id().to_string());
    let frames = run.map(|ev| Bytes::from(format!("id: {}\ndata: {}\n\n", ev.event.seq, ev.json)));
    Ok(HttpResponse::Ok()
        .insert_header((header::CONTENT_TYPE, "text/event-stream"))
        .insert_header((header::CACHE_CONTROL, "no-cache"))
        .insert_header(("x-accel-buffering", "no"))
        .insert_header(("x-session-id", session))
        .insert_header(("x-run-id", run_id))
        .streaming(with_keep_alive(frames, KEEP_ALIVE)))
}

/// How often an idle event stream gets a comment line, so proxies keep it open.
pub const KEEP_ALIVE: Duration = Duration::from_secs(15);

/// `frames`, with an SSE comment line sent whenever none came for `every`.
pub fn with_keep_alive(
    frames: impl futures::Stream<Item = Bytes> + Unpin + 'static,
    every: Duration,
) -> impl futures::Stream<Item = Result<Bytes, actix_web::Error>> {
    futures::stream::unfold(frames, move |mut frames| async move {
        match tokio::time::timeout(every, frames.next()).await {
            Err(_) => Some((Bytes::from_static(b": keep-alive\n\n"), frames)),
            Ok(Some(frame)) => Some((frame, frames)),
            Ok(None) => None,
        }
    })
    .map(Ok::<_, actix_web::Error>)
}
