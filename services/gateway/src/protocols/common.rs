//! What more than one protocol adapter needs and no single one owns: the REST chat request's
//! engine command (`POST /chat` and `POST /chat/stream` take the same body), the start of an
//! OpenAI-style conversation's run (`/v1/chat/completions` and `/v1/responses`), and the
//! Server-Sent-Events keep-alive (`/chat/stream`, `/v1/chat/completions` with `stream: true`,
//! and a session's event stream `GET /sessions/{id}/events` with `Accept: text/event-stream`), and
//! the rewriting of every error answer under a protocol's prefix into that protocol's error shape
//! ([`reshape_errors`]: `/v1/` in OpenAI's, `/a2a/` in JSON-RPC's). Authentication of a request
//! is `crate::auth` (the `TenantCaller` extractor) and the error body `crate::error`, shared with
//! the resource routes.

use std::time::Duration;

use actix_web::HttpResponse;
use actix_web::body::{BoxBody, MessageBody};
use actix_web::dev::{ServiceRequest, ServiceResponse};
use actix_web::http::header;
use actix_web::middleware::Next;
use actix_web::web::Bytes;
use agentry_actors::{ChatCommand, CreateSession, RunStream};
use agentry_schema::ErrorResponse;
use agentry_schema::api::ChatRequest;
use agentry_schema::error::ErrorCode;
use agentry_schema::ids::{AssistantId, SessionId};
use agentry_store::messages::{self as store_messages, MessageRole, NewMessage};
use futures::stream::StreamExt;
use serde::Serialize;
use serde_json::Value;

use crate::auth::TenantCaller;
use crate::error::{ApiError, ApiResult};
use crate::extract::body_id;
use crate::request_id::RequestId;
use crate::state::AppState;

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
        client_tools: Vec::new(),
    })
}

/// The run of an OpenAI-style request (Chat Completions, Responses): the new message into
/// `session`, or into a new session of `assistant` made for it that first holds `earlier`.
pub struct ConversationRun<'a> {
    /// The conversation to continue; `None` makes a new one.
    pub session: Option<SessionId>,
    /// The assistant of a new conversation.
    pub assistant: &'a AssistantId,
    /// The new session's metadata.
    pub metadata: Value,
    /// What a new conversation holds before the message (the client's earlier messages, its
    /// instructions, the function calls and their outputs it sends again), oldest first.
    pub earlier: Vec<NewMessage>,
    pub message: String,
    /// The client's function tools for the run (the Responses API's), checked already.
    pub client_tools: Vec<agentry_schema::api::ClientTool>,
}

/// A text message a client sent, as a new conversation stores it before the run.
pub fn text_message(role: MessageRole, content: String) -> NewMessage {
    NewMessage {
        run_id: None,
        role,
        content,
        tool_calls: None,
        tool_call_id: None,
    }
}

/// Start `c`'s run. A spent daily budget is refused before a session is made; a new session is
/// stateless (not counted against `max_sessions_per_user`: a stateless client would be cut off
/// after that many calls, docs/openai.md); a refused start leaves no session behind.
pub async fn start_conversation_run(
    state: &AppState,
    caller: &TenantCaller,
    request_id: RequestId,
    c: ConversationRun<'_>,
) -> ApiResult<RunStream> {
    let (tenant, user) = (caller.tenant(), caller.user());
    state.engine.check_token_budget(tenant).await?;
    let (session, created) = match c.session {
        Some(id) => (id, false),
        None => {
            let s = state
                .engine
                .create_session(
                    tenant,
                    &user,
                    CreateSession {
                        assistant_id: Some(c.assistant.clone()),
                        metadata: Some(c.metadata),
                        stateless: true,
                        ..Default::default()
                    },
                )
                .await?;
            (s.id, true)
        }
    };
    let started = async {
        for m in c.earlier {
            store_messages::save(&state.db, &caller.scope(), session, m).await?;
        }
        let run = state
            .engine
            .stream_run(
                tenant,
                &user,
                ChatCommand {
                    session_id: Some(session),
                    message: c.message,
                    request_id: Some(request_id.0),
                    client_tools: c.client_tools,
                    ..Default::default()
                },
            )
            .await?;
        Ok::<_, ApiError>(run)
    };
    match started.await {
        Ok(run) => Ok(run),
        Err(e) => {
            // A refused request changes nothing: the session made for it goes again.
            if created && let Err(del) = state.engine.delete_session(tenant, &user, session).await {
                tracing::warn!(error = %del, session_id = %session, "removing the session of a refused request failed");
            }
            Err(e)
        }
    }
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

/// Every error answer (4xx, 5xx) to a request whose path `applies`, whichever layer made it (the
/// key check, the body extractor, a quota, the handler), with its body — Agentry's
/// [`ErrorResponse`], or text, read as an internal error — re-rendered by `render` in a
/// protocol's own shape. Status and headers are kept: a client of that protocol reads one shape.
pub async fn reshape_errors<B: Serialize>(
    req: ServiceRequest,
    next: Next<impl MessageBody + 'static>,
    applies: impl FnOnce(&str) -> bool,
    render: impl FnOnce(ErrorResponse) -> B,
) -> Result<ServiceResponse<BoxBody>, actix_web::Error> {
    let applies = applies(req.path());
    let res = next.call(req).await?.map_into_boxed_body();
    if !applies || !(res.status().is_client_error() || res.status().is_server_error()) {
        return Ok(res);
    }
    let (req, res) = res.into_parts();
    let status = res.status();
    let headers = res.headers().clone();
    let body = actix_web::body::to_bytes_limited(res.into_body(), 64 * 1024)
        .await
        .ok()
        .and_then(|b| b.ok())
        .unwrap_or_default();
    let parsed: ErrorResponse = serde_json::from_slice(&body).unwrap_or_else(|_| {
        ErrorResponse::new(
            ErrorCode::InternalError,
            String::from_utf8_lossy(&body).into_owned(),
        )
    });
    let mut out = HttpResponse::build(status);
    for (name, value) in headers.iter() {
        if name != header::CONTENT_LENGTH && name != header::CONTENT_TYPE {
            out.append_header((name.clone(), value.clone()));
        }
    }
    let out = out.json(render(parsed));
    Ok(ServiceResponse::new(req, out))
}
