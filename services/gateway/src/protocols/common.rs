//! What more than one protocol adapter needs and no single one owns: the REST chat request's
//! engine command (`POST /chat` and `POST /chat/stream` take the same body) and the
//! Server-Sent-Events keep-alive (`/chat/stream`, `/v1/chat/completions` with `stream: true`,
//! and a session's event stream `GET /sessions/{id}/events` with `Accept: text/event-stream`). Authentication of a request
//! is `crate::auth` (the `TenantCaller` extractor) and the error body `crate::error`, shared with
//! the resource routes.

use std::time::Duration;

use actix_web::web::Bytes;
use agentry_actors::{ChatCommand, CreateSession};
use agentry_schema::api::ChatRequest;
use agentry_schema::ids::{AssistantId, SessionId};
use futures::stream::StreamExt;

use crate::error::{ApiError, ApiResult};
use crate::extract::body_id;
use crate::request_id::RequestId;

/// The engine command of a REST/SSE chat request. The message itself is checked by the engine,
/// as on every transport; only the ids are REST's own to parse.
pub fn chat_command(req: ChatRequest, request_id: RequestId) -> ApiResult<ChatCommand> {
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
