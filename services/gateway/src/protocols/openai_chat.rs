//! The OpenAI-compatible front of the assistants: `POST /v1/chat/completions` (streaming and
//! not) and `GET /v1/models`, so any OpenAI SDK can talk to Agentry (docs/openai.md).
//!
//! `model` names an assistant of the caller's tenant; the key is the tenant API key as
//! `Authorization: Bearer`. A request either carries the whole conversation in `messages`
//! (stateless: a new session is made for it, holding the earlier messages) or continues an
//! Agentry session named by the `X-Agentry-Session` header or the `agentry_session_id` field
//! (then only the last user message is sent; the session holds the rest). Either way the run
//! goes through the engine's one run path ([`agentry_actors::Engine::stream_run`]), and the
//! response names its session in `X-Agentry-Session` so the client can continue it.
//!
//! An OpenAI client cannot answer an approval: a run that asks for one is ended (the approval
//! rejected) and the request fails with `approval_required`, naming the tool. Errors on these
//! routes use OpenAI's shape, `{"error": {message, type, param, code}}` ([`openai_errors`]
//! rewrites every error answer under `/v1/`, whichever layer produced it).

use actix_web::body::{BoxBody, MessageBody};
use actix_web::dev::{ServiceRequest, ServiceResponse};
use actix_web::http::header;
use actix_web::middleware::Next;
use actix_web::web::{self, Bytes, Json};
use actix_web::{HttpRequest, HttpResponse};
use agentry_actors::RunStream;
use agentry_schema::ErrorResponse;
use agentry_schema::error::ErrorCode;
use agentry_schema::events::{DoneStatus, EventPayload, HitlKind, TokenUsage};
use agentry_schema::frames::Decision;
use agentry_schema::ids::{ApprovalId, AssistantId, SessionId};
use agentry_store::assistants;
use agentry_store::messages::MessageRole;
use futures::StreamExt;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use utoipa::ToSchema;

use crate::auth::TenantCaller;
use crate::error::{ApiError, ApiResult};
use crate::extract::ApiJson;
use crate::protocols::common::{
    ConversationRun, reshape_errors, start_conversation_run, text_message, with_keep_alive,
};
use crate::request_id::RequestId;
use crate::routes::resource::endpoint;
use crate::state::AppState;

/// A streamed completion sends a `: keep-alive` comment after this much silence (a tool call,
/// a slow model). The server learns that a client hung up only when a write fails, so this is
/// also how soon a closed stream cancels its run (two probes at most).
const HANG_UP_PROBE: std::time::Duration = std::time::Duration::from_secs(1);

/// The header (request and response) naming the Agentry session a request continues.
pub const SESSION_HEADER: &str = "x-agentry-session";

pub fn configure(cfg: &mut web::ServiceConfig) {
    cfg.service(
        web::scope("/v1")
            .service(endpoint("/chat/completions").post(chat_completions))
            .service(endpoint("/models").get(list_models)),
    );
}

// ---- wire types (OpenAI's) ----

/// A chat completion request. Other OpenAI parameters (`temperature`, `max_tokens`, `user`, …)
/// are accepted and ignored: the assistant's own configuration decides.
#[derive(Debug, Deserialize, ToSchema)]
pub struct ChatCompletionRequest {
    /// The assistant's id (see `GET /v1/models`).
    pub model: String,
    /// The conversation; the last one must be a `user` message.
    pub messages: Vec<ChatMessage>,
    #[serde(default)]
    pub stream: Option<bool>,
    #[serde(default)]
    pub stream_options: Option<StreamOptions>,
    /// Continue this Agentry session (the `X-Agentry-Session` header does the same).
    #[serde(default)]
    pub agentry_session_id: Option<String>,
    /// Client-side tools are not supported: the assistant runs its own.
    #[serde(default)]
    #[schema(value_type = Option<Vec<Object>>)]
    pub tools: Option<Vec<Value>>,
    /// Only 1.
    #[serde(default)]
    pub n: Option<u32>,
}

#[derive(Debug, Deserialize, ToSchema)]
pub struct StreamOptions {
    /// Send a last chunk with `usage` (and no choices) before `[DONE]`.
    #[serde(default)]
    pub include_usage: bool,
}

#[derive(Debug, Deserialize, ToSchema)]
pub struct ChatMessage {
    /// `system`, `developer`, `user` or `assistant`.
    pub role: String,
    /// A string, or an array of `{type: "text", text}` parts.
    #[serde(default)]
    #[schema(value_type = Object)]
    pub content: Value,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct ChatCompletion {
    /// `chatcmpl-<run id>`.
    pub id: String,
    /// `chat.completion`.
    #[schema(value_type = String)]
    pub object: &'static str,
    pub created: i64,
    pub model: String,
    pub choices: Vec<Choice>,
    pub usage: Usage,
    /// The Agentry session the run went into: send it back (`X-Agentry-Session` or
    /// `agentry_session_id`) to continue the conversation.
    pub agentry_session_id: String,
    pub agentry_run_id: String,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct Choice {
    pub index: u32,
    pub message: AssistantMessage,
    /// `stop`.
    #[schema(value_type = String)]
    pub finish_reason: &'static str,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct AssistantMessage {
    /// `assistant`.
    #[schema(value_type = String)]
    pub role: &'static str,
    pub content: String,
}

#[derive(Debug, Clone, Copy, Serialize, ToSchema)]
pub struct Usage {
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
    pub total_tokens: u64,
}

impl From<TokenUsage> for Usage {
    fn from(u: TokenUsage) -> Self {
        Usage {
            prompt_tokens: u.input,
            completion_tokens: u.output,
            total_tokens: u.total,
        }
    }
}

#[derive(Debug, Serialize, ToSchema)]
pub struct ModelList {
    /// `list`.
    #[schema(value_type = String)]
    pub object: &'static str,
    pub data: Vec<Model>,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct Model {
    /// The assistant's id: what `model` takes.
    pub id: String,
    /// `model`.
    #[schema(value_type = String)]
    pub object: &'static str,
    pub created: i64,
    /// `agentry`.
    #[schema(value_type = String)]
    pub owned_by: &'static str,
    /// The assistant's name and description.
    pub name: String,
    pub description: String,
}

/// OpenAI's error body: what every error under `/v1/` answers. `code` is the Agentry error
/// code (`model_not_found`, `unauthorized`, `approval_required`, …).
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct OpenAiErrorBody {
    pub error: OpenAiError,
}

#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct OpenAiError {
    pub message: String,
    /// `invalid_request_error`, `authentication_error`, `permission_error`,
    /// `rate_limit_error`, `server_error`.
    #[serde(rename = "type")]
    pub kind: String,
    /// The request field at fault, when one is.
    pub param: Option<String>,
    pub code: String,
    /// The Agentry error's `details` (the tool of an `approval_required`, the quota of a 429).
    #[schema(value_type = Object)]
    pub details: Value,
}

impl From<ErrorResponse> for OpenAiErrorBody {
    fn from(e: ErrorResponse) -> Self {
        let status = e.error_code.http_status();
        let kind = match status {
            401 => "authentication_error",
            403 => "permission_error",
            429 => "rate_limit_error",
            s if s >= 500 => "server_error",
            _ => "invalid_request_error",
        };
        let param = ["field", "parameter", "param"]
            .iter()
            .find_map(|k| e.details.get(*k).and_then(Value::as_str))
            .map(str::to_string);
        OpenAiErrorBody {
            error: OpenAiError {
                message: e.message,
                kind: kind.to_string(),
                param,
                code: e.error_code.as_str().to_string(),
                details: if e.details.is_object() {
                    e.details
                } else {
                    json!({})
                },
            },
        }
    }
}

/// Every error answer under `/v1/` in OpenAI's shape, whichever layer made it (the key check,
/// the JSON extractor, a quota, the handler). Status and headers are kept.
pub async fn openai_errors(
    req: ServiceRequest,
    next: Next<impl MessageBody + 'static>,
) -> Result<ServiceResponse<BoxBody>, actix_web::Error> {
    reshape_errors(
        req,
        next,
        |path| path == "/v1" || path.starts_with("/v1/"),
        OpenAiErrorBody::from,
    )
    .await
}

// ---- handlers ----

/// The text of a message's `content`: a string, or the `text` parts of an array.
fn text_of(content: &Value) -> Option<String> {
    match content {
        Value::String(s) => Some(s.clone()),
        Value::Null => Some(String::new()),
        Value::Array(parts) => {
            let mut out = String::new();
            for part in parts {
                match (part["type"].as_str(), part["text"].as_str()) {
                    (Some("text"), Some(t)) => out.push_str(t),
                    _ => return None,
                }
            }
            Some(out)
        }
        _ => None,
    }
}

/// A request checked and turned into what the engine needs.
struct Checked {
    assistant: AssistantId,
    model: String,
    /// The messages before the last (stateless requests store them in the new session).
    earlier: Vec<(MessageRole, String)>,
    message: String,
    session: Option<SessionId>,
    stream: bool,
    include_usage: bool,
}

async fn check(
    state: &AppState,
    caller: &TenantCaller,
    req: &HttpRequest,
    body: ChatCompletionRequest,
) -> ApiResult<Checked> {
    if body.tools.as_ref().is_some_and(|t| !t.is_empty()) {
        return Err(ApiError::validation(
            "tools",
            "client-side tools are not supported: the assistant runs its own tools (configure \
             them on the assistant)",
        ));
    }
    if body.n.is_some_and(|n| n != 1) {
        return Err(ApiError::validation("n", "only `n: 1` is supported"));
    }
    let mut messages = Vec::with_capacity(body.messages.len());
    for (i, m) in body.messages.iter().enumerate() {
        let role = match m.role.as_str() {
            "user" => MessageRole::User,
            "assistant" => MessageRole::Assistant,
            "system" | "developer" => MessageRole::System,
            other => {
                return Err(ApiError::validation(
                    "messages",
                    format!(
                        "messages[{i}].role {other:?} is not supported: use system, developer, \
                         user or assistant (the assistant runs its tools itself)"
                    ),
                ));
            }
        };
        let text = text_of(&m.content).ok_or_else(|| {
            ApiError::validation(
                "messages",
                format!("messages[{i}].content must be a string or an array of text parts"),
            )
        })?;
        messages.push((role, text));
    }
    let Some((MessageRole::User, message)) = messages.pop() else {
        return Err(ApiError::validation(
            "messages",
            "`messages` must end with a `user` message",
        ));
    };
    // The engine checks the message itself, as on every transport (an empty one is
    // `validation_error` everywhere); checked here too so nothing is created for it.
    agentry_actors::check_message(&message)
        .map_err(|e| ApiError::validation("messages", e.to_string()))?;
    let assistant = AssistantId::try_from(body.model.as_str())
        .ok()
        .ok_or_else(|| model_not_found(&body.model))?;
    assistants::get(&state.db, &caller.scope(), &assistant)
        .await?
        .ok_or_else(|| model_not_found(&body.model))?;
    let named = req
        .headers()
        .get(SESSION_HEADER)
        .map(|v| {
            v.to_str()
                .map(str::to_string)
                .map_err(|_| ApiError::validation("X-Agentry-Session", "not a session id"))
        })
        .transpose()?
        .or(body.agentry_session_id);
    let session = match named {
        Some(raw) => {
            let id: SessionId = raw
                .parse()
                .map_err(|e| ApiError::validation("agentry_session_id", format!("{e}")))?;
            let s = state
                .engine
                .load_session(caller.tenant(), &caller.user(), id)
                .await?;
            if s.assistant_id != assistant {
                return Err(ApiError::validation(
                    "model",
                    format!(
                        "session {id} is a conversation with {:?}; send `model: {:?}` to \
                         continue it",
                        s.assistant_id.as_str(),
                        s.assistant_id.as_str()
                    ),
                ));
            }
            Some(id)
        }
        None => None,
    };
    Ok(Checked {
        assistant,
        model: body.model,
        earlier: messages,
        message,
        session,
        stream: body.stream.unwrap_or(false),
        include_usage: body.stream_options.is_some_and(|o| o.include_usage),
    })
}

fn model_not_found(model: &str) -> ApiError {
    ApiError::new(
        ErrorCode::ModelNotFound,
        format!(
            "the model {model:?} is not an assistant of this tenant; GET /v1/models lists them"
        ),
    )
    .with_details(json!({"param": "model"}))
}

/// Start the run: into the named session, or a new one holding the earlier messages.
async fn start(
    state: &AppState,
    caller: &TenantCaller,
    request_id: RequestId,
    c: &Checked,
) -> ApiResult<RunStream> {
    start_conversation_run(
        state,
        caller,
        request_id,
        ConversationRun {
            session: c.session,
            assistant: &c.assistant,
            metadata: json!({"source": "openai"}),
            earlier: c
                .earlier
                .iter()
                .map(|(role, content)| text_message(*role, content.clone()))
                .collect(),
            message: c.message.clone(),
            client_tools: Vec::new(),
        },
    )
    .await
}

/// An event of a `task` child run that this API does not show: an OpenAI client sees the
/// run's own answer only. A child's approval requests still count (they are refused like the
/// run's own, and named in the error).
fn is_child_noise(ev: &agentry_schema::events::ExecutionEvent) -> bool {
    ev.parent_run_id.is_some() && !matches!(ev.payload, EventPayload::HitlRequest(_))
}

/// What the run's events say, folded as they arrive.
#[derive(Default)]
struct Outcome {
    answer: String,
    /// The tool (or tools) whose approval the client could not give.
    needed_approval: Option<String>,
    last_tool: Option<String>,
    last_error: Option<(String, String)>,
    done: Option<(DoneStatus, TokenUsage)>,
}

impl Outcome {
    /// Take in one event; an approval request is refused at once (the client cannot answer),
    /// which ends the run.
    async fn take(
        &mut self,
        state: &AppState,
        caller: &TenantCaller,
        session: SessionId,
        payload: &EventPayload,
    ) {
        match payload {
            EventPayload::Text(t) if t.is_final => self.answer = t.content.clone(),
            EventPayload::ToolCall(c) => self.last_tool = Some(c.tool_name.clone()),
            EventPayload::Error(e) => {
                self.last_error = Some((e.error_code.clone(), e.error.clone()));
            }
            EventPayload::HitlRequest(h) => {
                let tools = match h.kind {
                    HitlKind::Approval if !h.action_requests.is_empty() => h
                        .action_requests
                        .iter()
                        .map(|a| a.name.as_str())
                        .collect::<Vec<_>>()
                        .join(", "),
                    _ => self
                        .last_tool
                        .clone()
                        .unwrap_or_else(|| "a question to the user".into()),
                };
                self.needed_approval = Some(tools);
                if let Ok(id) = h.request_id.parse::<ApprovalId>()
                    && let Err(e) = state
                        .engine
                        .decide(
                            caller.tenant(),
                            &caller.user(),
                            session,
                            id,
                            Decision::Reject {
                                message: Some(
                                    "an OpenAI-compatible client cannot give approvals".into(),
                                ),
                            },
                        )
                        .await
                {
                    // Timed out or the run ended meanwhile: its `done` says how.
                    tracing::debug!(error = %e, "refusing a /v1 approval was not taken");
                }
            }
            EventPayload::Done(d) => self.done = Some((d.status, d.token_usage)),
            _ => {}
        }
    }

    /// The error the request ends with, when the run did not complete.
    fn error(&self, session: SessionId, run: &str) -> Option<ApiError> {
        let ids = json!({"session_id": session.to_string(), "run_id": run});
        if let Some(tool) = &self.needed_approval {
            let mut details = ids;
            details["tool"] = json!(tool);
            return Some(
                ApiError::new(
                    ErrorCode::ApprovalRequired,
                    format!(
                        "the assistant wanted to call {tool}, which needs a person's approval; \
                         an OpenAI client cannot give one, so the run was ended. Use the \
                         Agentry API (REST, SSE or WebSocket) to approve it, or an assistant \
                         that does not need approval for it"
                    ),
                )
                .with_details(details),
            );
        }
        match self.done {
            Some((DoneStatus::Completed, _)) => None,
            Some((status, _)) => {
                let code = self
                    .last_error
                    .as_ref()
                    .and_then(|(code, _)| ErrorCode::from_name(code))
                    .filter(|c| c.http_status() >= 500)
                    .unwrap_or(match status {
                        DoneStatus::Timeout => ErrorCode::Timeout,
                        _ => ErrorCode::ServiceUnavailable,
                    });
                let why = match &self.last_error {
                    Some((_, message)) => format!("the run ended {}: {message}", status.as_str()),
                    None => format!("the run ended {}", status.as_str()),
                };
                let mut e = ApiError::new(code, why).with_details(ids);
                if code == ErrorCode::ServiceUnavailable {
                    e = e.with_retry_after(1);
                }
                Some(e)
            }
            None => Some(
                ApiError::new(
                    ErrorCode::ServiceUnavailable,
                    "the session stopped before its run ended",
                )
                .with_details(ids)
                .with_retry_after(1),
            ),
        }
    }
}

fn now_secs() -> i64 {
    chrono::Utc::now().timestamp()
}

/// Run an assistant, OpenAI-style.
#[utoipa::path(
    post,
    path = "/v1/chat/completions",
    tag = "openai",
    request_body = ChatCompletionRequest,
    params(("X-Agentry-Session" = Option<String>, Header, description = "Continue this Agentry session (as `agentry_session_id`)")),
    responses(
        (status = 200, description = "`stream: false`: the completion, with `usage`. `stream: true`: `text/event-stream` of `chat.completion.chunk`s ending in `data: [DONE]`; a run that fails or needs an approval ends with a `data: {\"error\": …}` line. `X-Agentry-Session` names the session", body = ChatCompletion),
        (status = 400, description = "Malformed JSON (`invalid_json`)", body = OpenAiErrorBody),
        (status = 401, description = "No usable API key", body = OpenAiErrorBody),
        (status = 403, description = "The platform admin key (it has no tenant)", body = OpenAiErrorBody),
        (status = 404, description = "`model` names no assistant of the tenant (`model_not_found`), or the session is not the caller's", body = OpenAiErrorBody),
        (status = 409, description = "The run needed an approval the client cannot give (`approval_required`, `details.tool`), or a run is in progress in the session", body = OpenAiErrorBody),
        (status = 422, description = "A field is invalid (`validation_error`): no final user message, an empty one, client-side `tools`", body = OpenAiErrorBody),
    )
)]
pub async fn chat_completions(
    caller: TenantCaller,
    state: web::Data<AppState>,
    request_id: RequestId,
    req: HttpRequest,
    body: ApiJson<ChatCompletionRequest>,
) -> ApiResult<HttpResponse> {
    let c = check(&state, &caller, &req, body.into_inner()).await?;
    let mut run = start(&state, &caller, request_id, &c).await?;
    let session = run.session_id();
    let run_id = run.run_id().to_string();
    // A client that hangs up before the run's end (the request future or the response stream
    // is dropped) cancels the run, as OpenAI stops generating.
    let mut hang_up = CancelOnHangUp {
        state: state.clone(),
        caller: caller.clone(),
        session,
        run: run.run_id(),
        over: false,
    };
    if !c.stream {
        let mut outcome = Outcome::default();
        while let Some(ev) = run.next().await {
            if is_child_noise(&ev.event) {
                continue;
            }
            outcome
                .take(&state, &caller, session, &ev.event.payload)
                .await;
        }
        hang_up.over = true;
        if let Some(e) = outcome.error(session, &run_id) {
            return Err(e);
        }
        let usage = outcome.done.map(|(_, u)| u).unwrap_or_default();
        return Ok(HttpResponse::Ok()
            .insert_header((SESSION_HEADER, session.to_string()))
            .json(ChatCompletion {
                id: format!("chatcmpl-{run_id}"),
                object: "chat.completion",
                created: now_secs(),
                model: c.model,
                choices: vec![Choice {
                    index: 0,
                    message: AssistantMessage {
                        role: "assistant",
                        content: outcome.answer,
                    },
                    finish_reason: "stop",
                }],
                usage: usage.into(),
                agentry_session_id: session.to_string(),
                agentry_run_id: run_id,
            }));
    }
    let chunks = Chunks {
        id: format!("chatcmpl-{run_id}"),
        created: now_secs(),
        model: c.model.clone(),
    };
    let first = chunks.frame(json!({"role": "assistant", "content": ""}), None);
    let state = state.clone();
    let include_usage = c.include_usage;
    // One task reads the run and folds its events (approvals are refused as they come); the
    // response reads the frames it makes.
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel::<Bytes>();
    let _ = tx.send(first);
    actix_web::rt::spawn(async move {
        // The whole guard moves into the task (not just its flag): it cancels when this ends.
        let mut hang_up = hang_up;
        let mut outcome = Outcome::default();
        // Deltas of the current answer sent so far: a final text that came without deltas
        // is sent whole.
        let mut streamed = false;
        loop {
            let ev = tokio::select! {
                ev = run.next() => ev,
                // The client closed the response: `hang_up` cancels the run as it drops.
                () = tx.closed() => return,
            };
            let Some(ev) = ev else {
                hang_up.over = true;
                break;
            };
            if is_child_noise(&ev.event) {
                continue;
            }
            match &ev.event.payload {
                EventPayload::Text(t) if !t.is_final && !t.content.is_empty() => {
                    streamed = true;
                    let _ = tx.send(chunks.frame(json!({"content": t.content}), None));
                }
                EventPayload::Text(t) if t.is_final => {
                    if !streamed && !t.content.is_empty() {
                        let _ = tx.send(chunks.frame(json!({"content": t.content}), None));
                    }
                    streamed = false;
                }
                _ => {}
            }
            outcome
                .take(&state, &caller, session, &ev.event.payload)
                .await;
        }
        match outcome.error(session, &run_id) {
            Some(e) => {
                let body = OpenAiErrorBody::from(e.body());
                let _ = tx.send(Bytes::from(format!(
                    "data: {}\n\n",
                    serde_json::to_string(&body).unwrap_or_default()
                )));
            }
            None => {
                let _ = tx.send(chunks.frame(json!({}), Some("stop")));
                if include_usage {
                    let usage: Usage = outcome.done.map(|(_, u)| u).unwrap_or_default().into();
                    let _ = tx.send(chunks.usage(usage));
                }
            }
        }
        let _ = tx.send(Bytes::from_static(b"data: [DONE]\n\n"));
    });
    let frames = tokio_stream::wrappers::UnboundedReceiverStream::new(rx);
    Ok(HttpResponse::Ok()
        .insert_header((header::CONTENT_TYPE, "text/event-stream"))
        .insert_header((header::CACHE_CONTROL, "no-cache"))
        .insert_header(("x-accel-buffering", "no"))
        .insert_header((SESSION_HEADER, session.to_string()))
        .streaming(with_keep_alive(frames, HANG_UP_PROBE)))
}

/// Cancels the request's run when dropped before the run ended: the client hung up (closed a
/// stream, gave up waiting for a completion). The cancel is the one `POST
/// /sessions/{id}/cancel` makes (forwarded to the replica that runs the session).
struct CancelOnHangUp {
    state: web::Data<AppState>,
    caller: TenantCaller,
    session: SessionId,
    run: agentry_schema::ids::RunId,
    /// The run ended (its `done` was read): nothing to cancel.
    over: bool,
}

impl Drop for CancelOnHangUp {
    fn drop(&mut self) {
        if self.over {
            return;
        }
        let (state, caller, session, run) = (
            self.state.clone(),
            self.caller.clone(),
            self.session,
            self.run,
        );
        actix_web::rt::spawn(async move {
            match state
                .engine
                .cancel(caller.tenant(), &caller.user(), session)
                .await
            {
                Ok(cancelled) => {
                    tracing::info!(%session, run_id = %cancelled, hung_up = %run, "the client hung up: run cancelled")
                }
                Err(e) => {
                    tracing::debug!(error = %e, %session, run_id = %run, "the client hung up; no run to cancel")
                }
            }
        });
    }
}

/// The `chat.completion.chunk` frames of one streamed completion.
struct Chunks {
    id: String,
    created: i64,
    model: String,
}

impl Chunks {
    fn frame(&self, delta: Value, finish_reason: Option<&str>) -> Bytes {
        self.data(json!({
            "id": self.id,
            "object": "chat.completion.chunk",
            "created": self.created,
            "model": self.model,
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish_reason}],
        }))
    }

    fn usage(&self, usage: Usage) -> Bytes {
        self.data(json!({
            "id": self.id,
            "object": "chat.completion.chunk",
            "created": self.created,
            "model": self.model,
            "choices": [],
            "usage": usage,
        }))
    }

    fn data(&self, v: Value) -> Bytes {
        Bytes::from(format!("data: {v}\n\n"))
    }
}

/// The tenant's assistants, as OpenAI models.
#[utoipa::path(
    get,
    path = "/v1/models",
    tag = "openai",
    responses(
        (status = 200, description = "The tenant's assistants; `id` is what `model` takes", body = ModelList),
        (status = 401, description = "No usable API key", body = OpenAiErrorBody),
        (status = 403, description = "The platform admin key (it has no tenant)", body = OpenAiErrorBody),
    )
)]
pub async fn list_models(
    caller: TenantCaller,
    state: web::Data<AppState>,
) -> ApiResult<Json<ModelList>> {
    let list = assistants::list(&state.db, &caller.scope()).await?;
    Ok(Json(ModelList {
        object: "list",
        data: list
            .into_iter()
            .map(|a| Model {
                id: a.id.to_string(),
                object: "model",
                created: a.created_at.timestamp(),
                owned_by: "agentry",
                name: a.spec.name,
                description: a.spec.description,
            })
            .collect(),
    }))
}
