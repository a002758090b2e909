//! `POST /chat/stream`: the `POST /chat` request answered as Server-Sent Events, one event of
//! the run per `data:` line, ending after `done`. A view of the session's event stream like the
//! WebSocket.

use actix_web::HttpResponse;
use actix_web::http::header;
use actix_web::web::{self, Bytes};
use agentry_schema::api::ChatRequest;
use futures::stream::StreamExt;

use crate::auth::TenantCaller;
use crate::error::ApiResult;
use crate::extract::ApiJson;
use crate::protocols::common::{KEEP_ALIVE, chat_command, with_keep_alive};
use crate::request_id::RequestId;
use crate::routes::resource::endpoint;
use crate::state::AppState;

pub fn configure(cfg: &mut web::ServiceConfig) {
    cfg.service(endpoint("/chat/stream").post(chat_stream));
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
    let cmd = chat_command(body.into_inner(), request_id)?;
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
