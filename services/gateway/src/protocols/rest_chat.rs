//! `POST /chat`: a message in, the run's every event out once it is `done`, as one JSON body.
//! A view of the session's event stream like the WebSocket; the same request as Server-Sent
//! Events is [`super::sse`]'s.

use actix_web::web::{self, Json};
use agentry_schema::api::{ChatRequest, ChatResponse};

use crate::auth::TenantCaller;
use crate::error::ApiResult;
use crate::extract::ApiJson;
use crate::protocols::common::chat_command;
use crate::request_id::RequestId;
use crate::routes::resource::endpoint;
use crate::state::AppState;

pub fn configure(cfg: &mut web::ServiceConfig) {
    cfg.service(endpoint("/chat").post(chat));
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
    let cmd = chat_command(body.into_inner(), request_id)?;
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
