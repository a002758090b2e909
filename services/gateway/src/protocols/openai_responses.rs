//! The OpenAI Responses API (`/v1/responses`): `POST /v1/responses` (streamed, not, or in the
//! background), `GET /v1/responses/{id}` (read back, or its events resumed with `stream=true`),
//! `DELETE /v1/responses/{id}`, `POST /v1/responses/{id}/cancel`,
//! `GET /v1/responses/{id}/input_items` (docs/openai.md, "The Responses API").
//!
//! A thin adapter over the engine's one run path, like the Chat Completions one: a request
//! becomes one [`agentry_actors::Engine::stream_run`] (or, for an approval answered, one
//! [`agentry_actors::Engine::decide`] followed by [`agentry_actors::Engine::follow_run`]), and
//! the run's events are folded ([`Fold`]) into OpenAI's output items and semantic stream events.
//! The assistant's own tools run in Agentry and show as `mcp_call` items; a call that needs a
//! person ends the response with an `mcp_approval_request` item while the run waits, paused,
//! for the next request's `mcp_approval_response` (within `hitl.timeout_secs`). The client's own
//! function tools (`tools: [{"type": "function"}]`) go into the run's command
//! ([`agentry_actors::ChatCommand::client_tools`]); a call to one pauses the run as a question
//! does (`agentry_tools::client`), which ends the response with a `function_call` item, and the
//! next request's `function_call_output` answers the question ([`agentry_actors::Engine::decide`])
//! — by `previous_response_id` or in a full stateless item list: its `call_id` names the
//! question, so the paused run is found from it. A question of the assistant's own tools
//! (`ask_question`, …, an MCP server's elicitation) is asked the same way, as a call of the
//! reserved function [`ASK_USER`], and answered the same way.
//!
//! A response is a window of one run's stored events: the run, and the session `seq` after
//! which the window starts (0 or the last seq before the run for a run's first response; the
//! seq of the approval request for a response that continues a paused run). Its id encodes
//! just that ([`ResponseRef`]), so no table maps ids: a response is read back from the session's
//! event log, which every replica shares and which survives restarts, and the session's owner
//! check (tenant and user) is the response's.

use std::collections::{HashMap, HashSet};

use actix_web::http::header;
use actix_web::web::{self, Bytes};
use actix_web::{HttpResponse, Responder};
use agentry_actors::SessionEvent;
use agentry_schema::api::ClientTool;
use agentry_schema::error::ErrorCode;
use agentry_schema::events::{
    ActionRequest, DoneStatus, EventPayload, ExecutionEvent, FUNCTION_CALL_QUESTION, HitlKind,
    HitlRequestData, TokenUsage,
};
use agentry_schema::frames::Decision;
use agentry_schema::ids::{ApprovalId, AssistantId, RunId, SessionId};
use agentry_store::messages::{MessageRole, NewMessage};
use agentry_store::sessions::Session;
use agentry_store::{approvals, assistants, events, executions};
use futures::StreamExt;
use futures::stream::LocalBoxStream;
use serde::Deserialize;
use serde_json::{Value, json};
use utoipa::ToSchema;

use crate::auth::TenantCaller;
use crate::error::{ApiError, ApiResult};
use crate::extract::{ApiJson, ApiQuery};
use crate::protocols::common::{
    ConversationRun, start_conversation_run, text_message, with_keep_alive,
};
use crate::request_id::RequestId;
use crate::routes::resource::endpoint;
use crate::state::AppState;

/// The header naming the Agentry session a response belongs to.
const SESSION_HEADER: &str = "x-agentry-session";

/// A streamed response sends a `: keep-alive` comment after this much silence (a tool call, a
/// slow model), so proxies keep the stream open.
const KEEP_ALIVE: std::time::Duration = std::time::Duration::from_secs(15);

/// Stored events read per page when a response is read back.
const PAGE: u64 = 500;

/// `metadata`: at most this many keys (OpenAI's limit), keys and values bounded too.
const MAX_METADATA_KEYS: usize = 16;

pub fn configure(cfg: &mut web::ServiceConfig) {
    // Full paths, not a `/v1` scope: the Chat Completions adapter owns that scope, and a scope
    // that matches a prefix does not hand unmatched paths on to the next one.
    cfg.service(endpoint("/v1/responses").post(create_response))
        .service(
            endpoint("/v1/responses/{response_id}")
                .get(get_response)
                .delete(delete_response),
        )
        .service(endpoint("/v1/responses/{response_id}/cancel").post(cancel_response))
        .service(endpoint("/v1/responses/{response_id}/input_items").get(list_input_items));
}

// ---- wire types ----

/// Create a response. Other OpenAI parameters (`temperature`, `top_p`, `reasoning`, `text`,
/// `user`, …) are accepted and ignored: the assistant's own configuration decides.
#[derive(Debug, Deserialize, ToSchema)]
pub struct CreateResponseRequest {
    /// The assistant's id (see `GET /v1/models`).
    pub model: String,
    /// A string (one user message) or a list of input items: messages (`role` `user`,
    /// `system`, `developer` or `assistant`; `content` a string or `input_text` /
    /// `output_text` parts), or one `mcp_approval_response` answering the previous response's
    /// `mcp_approval_request`, or ending in a `function_call_output` answering a
    /// `function_call` (with `previous_response_id`, or after the whole conversation re-sent:
    /// its `function_call` items are accepted and skipped).
    #[schema(value_type = Object)]
    pub input: Value,
    /// Added to a new conversation as a system message before the input; a response that
    /// continues one (`previous_response_id`) keeps the conversation's own.
    #[serde(default)]
    pub instructions: Option<String>,
    /// Continue the conversation (the Agentry session) this response belongs to.
    #[serde(default)]
    pub previous_response_id: Option<String>,
    #[serde(default)]
    pub stream: Option<bool>,
    /// `false`: the conversation is deleted once the run ends (kept while it waits for an
    /// approval). Default `true`.
    #[serde(default)]
    pub store: Option<bool>,
    /// Up to 16 string pairs, kept with a new conversation and echoed in the response.
    #[serde(default)]
    #[schema(value_type = Option<Object>)]
    pub metadata: Option<Value>,
    /// Echoed; not enforced (the assistant's model settings decide).
    #[serde(default)]
    pub max_output_tokens: Option<u64>,
    /// Only `auto` (the assistant decides which of its tools to call).
    #[serde(default)]
    #[schema(value_type = Option<Object>)]
    pub tool_choice: Option<Value>,
    /// Echoed; the assistant's run decides how its calls are made.
    #[serde(default)]
    pub parallel_tool_calls: Option<bool>,
    /// Client function tools, `{"type": "function", "name", "description", "parameters",
    /// "strict"}`: offered to the model beside the assistant's own tools; a call to one ends
    /// the response with a `function_call` item, and the client runs it and sends its
    /// `function_call_output`. A name of one of the assistant's tools, a bad name or a
    /// `parameters` that is not a JSON Schema object is 422. Other tool types are 422. A
    /// function named `ask_user` is the client's way to answer the assistant's questions (they
    /// come as `ask_user` calls): it is echoed, not offered to the model.
    #[serde(default)]
    #[schema(value_type = Option<Vec<Object>>)]
    pub tools: Option<Vec<Value>>,
    /// `true`: answer at once with the response `queued` or `in_progress` while the run goes on
    /// in the server; poll it with `GET /v1/responses/{id}`, resume its events with
    /// `GET /v1/responses/{id}?stream=true&starting_after=N`, cancel it with
    /// `POST /v1/responses/{id}/cancel`. Needs `store` (the default).
    #[serde(default)]
    pub background: Option<bool>,
}

/// `GET /v1/responses/{id}`'s query: read the response back, or (`stream=true`) replay its
/// events as Server-Sent Events and follow the run to its end. Other parameters (`include`,
/// …) are accepted and ignored.
#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub struct RetrieveQuery {
    /// `true`: the response's semantic events, numbered as its own stream numbered them.
    #[serde(default)]
    pub stream: Option<bool>,
    /// With `stream=true`: only the events whose `sequence_number` is greater.
    #[serde(default)]
    pub starting_after: Option<u64>,
}

// ---- response ids ----

/// Which window of which run a response is: the events of `run` (and its `task` children)
/// with `seq > after`, up to the run's `done` or its next approval request; a window that
/// continues a paused run starts at the approval request's own `seq` (`after`), read as the
/// context of the call it approved.
///
/// `background` is part of the id (a `b` after the seq), so reading back echoes it and a
/// cancel knows it may cancel, with no table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct ResponseRef {
    session: SessionId,
    run: RunId,
    after: u64,
    background: bool,
}

impl ResponseRef {
    fn id(&self) -> String {
        format!(
            "resp_{}{}_{}{}",
            self.session.0.simple(),
            self.run.0.simple(),
            self.after,
            if self.background { "b" } else { "" }
        )
    }

    fn parse(raw: &str) -> Option<ResponseRef> {
        let rest = raw.strip_prefix("resp_")?;
        let (hex, after) = rest.split_once('_')?;
        if hex.len() != 64 || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
            return None;
        }
        let (after, background) = match after.strip_suffix('b') {
            Some(a) => (a, true),
            None => (after, false),
        };
        if !after.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        Some(ResponseRef {
            session: SessionId(uuid::Uuid::parse_str(&hex[..32]).ok()?),
            run: RunId(uuid::Uuid::parse_str(&hex[32..]).ok()?),
            after: after.parse().ok().filter(|a| *a <= i64::MAX as u64)?,
            background,
        })
    }
}

/// An approval request's item id: the Agentry approval it answers to.
fn approval_item_id(request_id: &str, index: usize) -> String {
    match index {
        0 => format!("mcpr_{request_id}"),
        i => format!("mcpr_{request_id}_{i}"),
    }
}

fn approval_of_item(raw: &str) -> Option<ApprovalId> {
    let rest = raw.strip_prefix("mcpr_")?;
    rest.get(..36)?.parse().ok()
}

/// A `function_call` item's `call_id`: the question its client's output answers.
fn function_call_id(request_id: &str) -> String {
    format!("call_{request_id}")
}

fn question_of_call(raw: &str) -> Option<ApprovalId> {
    let rest = raw.strip_prefix("call_")?;
    if rest.len() != 36 {
        return None;
    }
    rest.parse().ok()
}

/// The client function call a `hitl_request` asks its client to make, if it is one.
fn function_call_of(h: &HitlRequestData) -> Option<&ActionRequest> {
    match &h.question {
        Some(q) if h.kind == HitlKind::Question && q.question_type == FUNCTION_CALL_QUESTION => {
            q.function_call.as_deref()
        }
        _ => None,
    }
}

/// The name of the function a question of the assistant's (`ask_question`, …, an MCP
/// server's elicitation) is asked as: the client answers it as it answers its own functions.
const ASK_USER: &str = "ask_user";

/// The `function_call` a `hitl_request` of kind `question` is to a Responses client: the
/// client's own function, or [`ASK_USER`] with the question (`question`, `question_type`,
/// `options`, and the answer's JSON Schema `schema` when it has one) as its arguments.
fn question_call(h: &HitlRequestData) -> Option<(String, String)> {
    if let Some(call) = function_call_of(h) {
        return Some((call.name.clone(), as_text(&call.args)));
    }
    let q = h
        .question
        .as_ref()
        .filter(|_| h.kind == HitlKind::Question)?;
    let mut args = json!({
        "question": q.text,
        "question_type": q.question_type,
        "options": q.options,
    });
    if let Some(schema) = &q.schema {
        args["schema"] = schema.clone();
    }
    Some((ASK_USER.to_string(), args.to_string()))
}

/// A `function_call` item (`status` as it stands, `arguments` empty while it streams in).
fn function_call_item(request_id: &str, name: &str, arguments: &str, status: &str) -> Value {
    json!({
        "type": "function_call",
        "id": format!("fc_{}", request_id.replace('-', "")),
        "call_id": function_call_id(request_id),
        "name": name,
        "arguments": arguments,
        "status": status,
    })
}

/// The run's token usage when it asked `request` (stored with the request), zero for a
/// request stored without it.
fn usage_at(request: &Value) -> TokenUsage {
    serde_json::from_value(request["token_usage"].clone()).unwrap_or_default()
}

fn usage_between(start: TokenUsage, end: TokenUsage) -> TokenUsage {
    TokenUsage {
        input: end.input.saturating_sub(start.input),
        output: end.output.saturating_sub(start.output),
        total: end.total.saturating_sub(start.total),
    }
}

fn response_not_found(raw: &str, param: &str) -> ApiError {
    ApiError::new(
        ErrorCode::NotFound,
        format!("no response {raw:?} visible to this key"),
    )
    .with_details(json!({"param": param}))
}

// ---- folding a run's events into output items ----

/// The tool's service, OpenAI's `server_label`: the MCP server of `<server>__<tool>`, the
/// built-in service of a built-in tool, `agentry` for the rest (memory, skills, `task`, …).
fn server_label(tool: &str) -> String {
    if let Some((server, _)) = tool.split_once("__") {
        return server.to_string();
    }
    static BUILTIN: std::sync::OnceLock<HashMap<String, String>> = std::sync::OnceLock::new();
    BUILTIN
        .get_or_init(|| {
            let cfg = agentry_builtin::BuiltinConfig::default();
            agentry_builtin::BuiltinService::ALL
                .into_iter()
                .flat_map(|svc| svc.tools(&cfg))
                .map(|t| (t.spec().name.clone(), t.spec().service.clone()))
                .collect()
        })
        .get(tool)
        .cloned()
        .unwrap_or_else(|| "agentry".to_string())
}

/// A value as the string an item carries (`arguments`, `output`): strings as they are, other
/// JSON serialized.
fn as_text(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// How a response's window ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum End {
    /// At an approval request: the run waits for the next request's decision.
    Paused,
    Done(DoneStatus),
    /// The session stopped before the run's `done` (deleted meanwhile).
    Lost,
}

struct OpenMessage {
    id: String,
    index: usize,
    text: String,
}

/// One response's window of a run, folded event by event into output items; each step also
/// returns the stream events it makes (without `sequence_number`, which [`Sse`] adds).
struct Fold {
    run: String,
    /// The run and the `task` child runs seen so far.
    tree: HashSet<String>,
    /// The approval request this window continues from: the context of the call it approved.
    resumes_at: Option<u64>,
    /// The last seq taken (a subscription may hand on an event twice).
    seen: Option<u64>,
    items: Vec<Value>,
    open: Option<OpenMessage>,
    /// Calls started (or approved) and not yet answered: id → (name, arguments).
    calls: HashMap<String, (String, Value)>,
    /// The client function call this window continues from: its result is the client's own
    /// output, not an item of the response.
    client_calls: HashSet<String>,
    /// The request this window continues from (the approval or question it answered): asked
    /// again under the same id by a run resumed after a restart, which is no new request.
    resumed_request: Option<String>,
    /// It was a question of the assistant's own tools: its call started before the window.
    resumed_question: bool,
    /// The request this window ended at, if it ended at one.
    paused_at: Option<String>,
    ended: Option<End>,
    /// The run's usage at the window's end (the run's total at its `done`; at a pause, what
    /// [`settle_usage`] reads), then, settled, the window's own share.
    usage: TokenUsage,
    last_error: Option<(String, String)>,
    created_at: f64,
    messages: usize,
}

impl Fold {
    fn new(r: &ResponseRef) -> Fold {
        let run = r.run.to_string();
        Fold {
            tree: HashSet::from([run.clone()]),
            run,
            resumes_at: (r.after > 0).then_some(r.after),
            seen: None,
            items: Vec::new(),
            open: None,
            calls: HashMap::new(),
            client_calls: HashSet::new(),
            resumed_request: None,
            resumed_question: false,
            paused_at: None,
            ended: None,
            usage: TokenUsage::default(),
            last_error: None,
            created_at: 0.0,
            messages: 0,
        }
    }

    fn take(&mut self, ev: &ExecutionEvent) -> Vec<Value> {
        let mut out = Vec::new();
        if self.ended.is_some() || self.seen.is_some_and(|s| ev.seq <= s) {
            return out;
        }
        self.seen = Some(ev.seq);
        if ev.run_id != self.run {
            match &ev.parent_run_id {
                Some(p) if self.tree.contains(p) => {
                    self.tree.insert(ev.run_id.clone());
                }
                _ => return out,
            }
        }
        if self.created_at == 0.0 {
            self.created_at = ev.timestamp;
        }
        let own = ev.run_id == self.run;
        match &ev.payload {
            EventPayload::HitlRequest(h) if Some(ev.seq) == self.resumes_at => {
                for a in &h.action_requests {
                    if let Some(id) = &a.tool_call_id {
                        self.calls
                            .insert(id.clone(), (a.name.clone(), a.args.clone()));
                    }
                }
                if let Some(id) = function_call_of(h).and_then(|c| c.tool_call_id.clone()) {
                    self.client_calls.insert(id);
                }
                self.resumed_question =
                    h.kind == HitlKind::Question && function_call_of(h).is_none();
                self.resumed_request = Some(h.request_id.clone());
            }
            // Asked again by the run resumed after a restart: the same request, answered.
            EventPayload::HitlRequest(h)
                if self.resumed_request.as_deref() == Some(h.request_id.as_str()) => {}
            EventPayload::HitlRequest(h) if h.kind == HitlKind::Question => {
                // The client answers it (its own function, or `ask_user`): the response ends
                // with the call, the run waits for its output (the next request's
                // `function_call_output`).
                if let Some((name, args)) = question_call(h) {
                    self.close_message(&mut out);
                    let index = self.items.len();
                    let item = function_call_item(&h.request_id, &name, &args, "completed");
                    let item_id = item["id"].clone();
                    out.push(json!({
                        "type": "response.output_item.added",
                        "output_index": index,
                        "item": function_call_item(&h.request_id, &name, "", "in_progress"),
                    }));
                    out.push(json!({
                        "type": "response.function_call_arguments.delta",
                        "item_id": item_id,
                        "output_index": index,
                        "delta": args,
                    }));
                    out.push(json!({
                        "type": "response.function_call_arguments.done",
                        "item_id": item_id,
                        "output_index": index,
                        "name": name,
                        "arguments": args,
                    }));
                    out.push(json!({
                        "type": "response.output_item.done",
                        "output_index": index,
                        "item": item,
                    }));
                    self.items.push(item);
                }
                self.paused_at = Some(h.request_id.clone());
                self.ended = Some(End::Paused);
            }
            EventPayload::HitlRequest(h) if h.kind == HitlKind::Approval => {
                self.close_message(&mut out);
                for (i, a) in h.action_requests.iter().enumerate() {
                    let item = json!({
                        "type": "mcp_approval_request",
                        "id": approval_item_id(&h.request_id, i),
                        "server_label": server_label(&a.name),
                        "name": a.name,
                        "arguments": as_text(&a.args),
                    });
                    self.push_item(item, &mut out);
                }
                self.paused_at = Some(h.request_id.clone());
                self.ended = Some(End::Paused);
            }
            _ if !own => {}
            EventPayload::Text(t) if !t.is_final && !t.content.is_empty() => {
                self.delta(&t.content, &mut out);
            }
            EventPayload::Text(t) if !t.is_final => {}
            EventPayload::Text(t) => {
                let streamed = self.open.as_ref().is_some_and(|m| !m.text.is_empty());
                if !streamed && !t.content.is_empty() {
                    self.delta(&t.content, &mut out);
                }
                if let Some(m) = self.open.as_mut()
                    && !t.content.is_empty()
                {
                    m.text = t.content.clone();
                }
                self.close_message(&mut out);
            }
            EventPayload::ToolCall(c) => {
                self.close_message(&mut out);
                self.calls.insert(
                    c.tool_call_id.clone(),
                    (c.tool_name.clone(), c.tool_args.clone()),
                );
            }
            EventPayload::ToolResult(r) if self.client_calls.remove(&r.tool_call_id) => {
                self.calls.remove(&r.tool_call_id);
            }
            EventPayload::ToolResult(r) => {
                self.close_message(&mut out);
                let (name, args) = self
                    .calls
                    .remove(&r.tool_call_id)
                    .unwrap_or_else(|| ("unknown".to_string(), Value::Null));
                let failed = r.status == agentry_schema::events::ToolStatus::Error;
                let item = json!({
                    "type": "mcp_call",
                    // A model's call ids are unique in its run only.
                    "id": format!("mcp_{}_{}", self.run.replace('-', ""), r.tool_call_id),
                    "server_label": server_label(&name),
                    "name": name,
                    "arguments": as_text(&args),
                    "output": if failed { Value::Null } else { json!(as_text(&r.result)) },
                    "error": if failed {
                        json!({"type": "mcp_tool_execution_error", "content": r.result})
                    } else {
                        Value::Null
                    },
                    "status": if failed { "failed" } else { "completed" },
                });
                self.push_item(item, &mut out);
            }
            EventPayload::Error(e) => {
                self.last_error = Some((e.error_code.clone(), e.error.clone()));
            }
            EventPayload::Done(d) => {
                self.close_message(&mut out);
                self.usage = d.token_usage;
                self.ended = Some(End::Done(d.status));
            }
            _ => {}
        }
        out
    }

    fn delta(&mut self, text: &str, out: &mut Vec<Value>) {
        if self.open.is_none() {
            self.messages += 1;
            let m = OpenMessage {
                id: format!("msg_{}_{}", self.run.replace('-', ""), self.messages),
                index: self.items.len(),
                text: String::new(),
            };
            out.push(json!({
                "type": "response.output_item.added",
                "output_index": m.index,
                "item": message_item(&m.id, "", "in_progress", false),
            }));
            out.push(json!({
                "type": "response.content_part.added",
                "item_id": m.id,
                "output_index": m.index,
                "content_index": 0,
                "part": text_part(""),
            }));
            self.open = Some(m);
        }
        if let Some(m) = self.open.as_mut() {
            m.text.push_str(text);
            out.push(json!({
                "type": "response.output_text.delta",
                "item_id": m.id,
                "output_index": m.index,
                "content_index": 0,
                "delta": text,
                "logprobs": [],
            }));
        }
    }

    fn close_message(&mut self, out: &mut Vec<Value>) {
        let Some(m) = self.open.take() else {
            return;
        };
        out.push(json!({
            "type": "response.output_text.done",
            "item_id": m.id,
            "output_index": m.index,
            "content_index": 0,
            "text": m.text,
            "logprobs": [],
        }));
        out.push(json!({
            "type": "response.content_part.done",
            "item_id": m.id,
            "output_index": m.index,
            "content_index": 0,
            "part": text_part(&m.text),
        }));
        let item = message_item(&m.id, &m.text, "completed", true);
        out.push(json!({
            "type": "response.output_item.done",
            "output_index": m.index,
            "item": item,
        }));
        self.items.push(item);
    }

    fn push_item(&mut self, item: Value, out: &mut Vec<Value>) {
        let index = self.items.len();
        out.push(
            json!({"type": "response.output_item.added", "output_index": index, "item": item}),
        );
        out.push(json!({"type": "response.output_item.done", "output_index": index, "item": item}));
        self.items.push(item);
    }

    /// The response's `status` and `error`.
    fn status(&self) -> (&'static str, Value) {
        let failed = |fallback: &str| {
            let (code, message) = self
                .last_error
                .clone()
                .unwrap_or_else(|| ("server_error".into(), fallback.to_string()));
            json!({"code": code, "message": message})
        };
        match self.ended {
            None => ("in_progress", Value::Null),
            Some(End::Paused) => ("completed", Value::Null),
            // A rejection is the client's own decision: the run ended as asked.
            Some(End::Done(DoneStatus::Completed | DoneStatus::Rejected)) => {
                ("completed", Value::Null)
            }
            Some(End::Done(DoneStatus::Cancelled)) => ("cancelled", Value::Null),
            Some(End::Done(s)) => ("failed", failed(&format!("the run ended {}", s.as_str()))),
            Some(End::Lost) => (
                "failed",
                json!({"code": "server_error", "message": "the session stopped before its run ended"}),
            ),
        }
    }

    /// The Response object as it stands.
    fn response(&self, r: &ResponseRef, echo: &Echo) -> Value {
        let (status, error) = self.status();
        let mut output = self.items.clone();
        if let Some(m) = &self.open {
            output.push(message_item(&m.id, &m.text, "in_progress", true));
        }
        let created_at = if self.created_at > 0.0 {
            self.created_at.floor() as i64
        } else {
            chrono::Utc::now().timestamp()
        };
        let u = self.usage;
        json!({
            "id": r.id(),
            "object": "response",
            "created_at": created_at,
            "status": status,
            "error": error,
            "incomplete_details": null,
            "model": echo.model,
            "output": output,
            "usage": {
                "input_tokens": u.input,
                "input_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 0},
                "output_tokens": u.output,
                "output_tokens_details": {"reasoning_tokens": 0},
                "total_tokens": u.total,
            },
            "instructions": echo.instructions,
            "metadata": echo.metadata,
            "max_output_tokens": echo.max_output_tokens,
            "parallel_tool_calls": echo.parallel_tool_calls,
            "previous_response_id": echo.previous_response_id,
            "store": echo.store,
            "tool_choice": "auto",
            "tools": echo.tools,
            "temperature": null,
            "top_p": null,
            "text": {"format": {"type": "text"}},
            "truncation": "disabled",
            "background": r.background,
            "user": null,
            "agentry_session_id": r.session.to_string(),
            "agentry_run_id": r.run.to_string(),
        })
    }
}

fn text_part(text: &str) -> Value {
    json!({"type": "output_text", "text": text, "annotations": [], "logprobs": []})
}

fn message_item(id: &str, text: &str, status: &str, with_text: bool) -> Value {
    let content = if with_text {
        json!([text_part(text)])
    } else {
        json!([])
    };
    json!({"type": "message", "id": id, "status": status, "role": "assistant", "content": content})
}

/// What a response echoes of its request.
#[derive(Debug, Clone, Default)]
struct Echo {
    model: String,
    instructions: Option<String>,
    metadata: Value,
    max_output_tokens: Option<u64>,
    parallel_tool_calls: bool,
    previous_response_id: Option<String>,
    store: bool,
    /// The client's function tools, as OpenAI echoes them.
    tools: Vec<Value>,
}

/// The semantic stream events of one response, numbered. The numbering is a function of the
/// run's stored events (the same [`Fold`] makes them), so a stream resumed later
/// (`starting_after`) numbers its events as the first one did.
struct Sse {
    next: u64,
    /// Resuming: the events up to this number were seen already and are not sent again.
    skip_to: Option<u64>,
}

impl Sse {
    fn frame(&mut self, mut ev: Value) -> Option<Bytes> {
        let n = self.next;
        self.next += 1;
        if self.skip_to.is_some_and(|s| n <= s) {
            return None;
        }
        ev["sequence_number"] = json!(n);
        let name = ev["type"].as_str().unwrap_or("error").to_string();
        Some(Bytes::from(format!("event: {name}\ndata: {ev}\n\n")))
    }
}

// ---- checking a request ----

enum Input {
    Messages {
        /// What came before the last message (a new conversation stores it): messages, and the
        /// function calls and tool calls (with their outputs) of earlier responses.
        earlier: Vec<NewMessage>,
        message: String,
    },
    Approval {
        id: ApprovalId,
        approve: bool,
        reason: Option<String>,
    },
    /// The client's output of a function call its run waits for.
    FunctionOutput {
        /// As the client sent it (`call_<question id>`).
        call_id: String,
        output: String,
    },
}

struct Plan {
    assistant: AssistantId,
    previous: Option<(ResponseRef, Session)>,
    input: Input,
    /// The client's function tools for a run the request starts.
    client_tools: Vec<ClientTool>,
    echo: Echo,
    stream: bool,
    background: bool,
}

/// The text of a message's `content`: a string, or the text parts of an array.
fn text_of(content: &Value) -> Option<String> {
    match content {
        Value::String(s) => Some(s.clone()),
        Value::Array(parts) => {
            let mut out = String::new();
            for part in parts {
                match (part["type"].as_str(), part["text"].as_str()) {
                    (Some("input_text" | "output_text" | "text"), Some(t)) => out.push_str(t),
                    _ => return None,
                }
            }
            Some(out)
        }
        _ => None,
    }
}

fn parse_input(input: &Value) -> ApiResult<Input> {
    let items = match input {
        Value::String(s) => {
            return Ok(Input::Messages {
                earlier: Vec::new(),
                message: s.clone(),
            });
        }
        Value::Array(items) if !items.is_empty() => items,
        _ => {
            return Err(ApiError::validation(
                "input",
                "`input` must be a string or a non-empty list of input items",
            ));
        }
    };
    // A client function call's output, as the last item: it continues the run that waits for
    // it. What comes before it is the conversation a stateless client sends again (the run
    // holds it), so it is not read.
    if let Some(last) = items.last()
        && last["type"] == "function_call_output"
    {
        let i = items.len() - 1;
        let call_id = last["call_id"].as_str().ok_or_else(|| {
            ApiError::validation("input", format!("input[{i}].call_id must be a string"))
        })?;
        let output = output_text(i, &last["output"])?;
        if items.iter().any(|it| it["type"] == "mcp_approval_response") {
            return Err(ApiError::validation(
                "input",
                "send an mcp_approval_response and a function_call_output in separate requests",
            ));
        }
        return Ok(Input::FunctionOutput {
            call_id: call_id.to_string(),
            output,
        });
    }
    let mut messages: Vec<NewMessage> = Vec::new();
    let mut approval = None;
    for (i, item) in items.iter().enumerate() {
        let kind = item["type"].as_str().unwrap_or("message");
        match kind {
            // Earlier calls of a conversation a client sends whole (its function calls and
            // their outputs; the assistant's own tool calls, `mcp_call`): stored as the calls
            // and results they were, so the model of the new conversation reads them.
            "function_call" | "mcp_call" => {
                let call = earlier_call(i, item)?;
                match messages.last_mut() {
                    // Calls made together, and the text before them, are one turn of the
                    // model's.
                    Some(m) if m.role == MessageRole::Assistant => match m.tool_calls.as_mut() {
                        Some(Value::Array(calls)) => calls.push(call.clone()),
                        _ => m.tool_calls = Some(json!([call])),
                    },
                    _ => messages.push(NewMessage {
                        run_id: None,
                        role: MessageRole::Assistant,
                        content: String::new(),
                        tool_calls: Some(json!([call])),
                        tool_call_id: None,
                    }),
                }
                if kind == "mcp_call" {
                    let failed = !item["error"].is_null();
                    let output = if failed {
                        as_text(&item["error"]["content"])
                    } else {
                        as_text(&item["output"])
                    };
                    messages.push(tool_result(&call, output, failed));
                }
            }
            "function_call_output" => {
                let call_id = item["call_id"].as_str().ok_or_else(|| {
                    ApiError::validation("input", format!("input[{i}].call_id must be a string"))
                })?;
                let output = output_text(i, &item["output"])?;
                // Its call, sent before it: the result names the function.
                let call = messages
                    .iter()
                    .rev()
                    .filter_map(|m| m.tool_calls.as_ref()?.as_array())
                    .flatten()
                    .find(|c| c["id"] == call_id)
                    .cloned()
                    .ok_or_else(|| {
                        ApiError::validation(
                            "input",
                            format!(
                                "input[{i}] is the output of call {call_id:?}, which no \
                                 function_call before it made"
                            ),
                        )
                    })?;
                messages.push(tool_result(&call, output, false));
            }
            // A pause of an earlier response: what answered it follows in the list.
            "mcp_approval_request" => {}
            "message" => {
                let role = match item["role"].as_str() {
                    Some("user") => MessageRole::User,
                    Some("assistant") => MessageRole::Assistant,
                    Some("system" | "developer") => MessageRole::System,
                    other => {
                        return Err(ApiError::validation(
                            "input",
                            format!(
                                "input[{i}].role {other:?} is not supported: use user, system, \
                                 developer or assistant"
                            ),
                        ));
                    }
                };
                let text = text_of(&item["content"]).ok_or_else(|| {
                    ApiError::validation(
                        "input",
                        format!(
                            "input[{i}].content must be a string or a list of input_text parts"
                        ),
                    )
                })?;
                messages.push(text_message(role, text));
            }
            "mcp_approval_response" => {
                let id = item["approval_request_id"]
                    .as_str()
                    .and_then(approval_of_item)
                    .ok_or_else(|| {
                        ApiError::validation(
                            "input",
                            format!(
                                "input[{i}].approval_request_id must be the id of an \
                                 mcp_approval_request item of the previous response"
                            ),
                        )
                    })?;
                let approve = item["approve"].as_bool().ok_or_else(|| {
                    ApiError::validation("input", format!("input[{i}].approve must be a boolean"))
                })?;
                if approval.is_some() {
                    return Err(ApiError::validation(
                        "input",
                        "only one mcp_approval_response per request: a run waits on one \
                         approval at a time",
                    ));
                }
                approval = Some(Input::Approval {
                    id,
                    approve,
                    reason: item["reason"].as_str().map(str::to_string),
                });
            }
            other => {
                return Err(ApiError::validation(
                    "input",
                    format!(
                        "input[{i}].type {other:?} is not supported: send messages, one \
                         mcp_approval_response, or a function_call_output"
                    ),
                ));
            }
        }
    }
    if let Some(a) = approval {
        if !messages.is_empty() {
            return Err(ApiError::validation(
                "input",
                "send an mcp_approval_response alone: the run it resumes goes on with it, and \
                 the next message follows in a later request",
            ));
        }
        return Ok(a);
    }
    let message = match messages.pop() {
        Some(m) if m.role == MessageRole::User && m.tool_calls.is_none() => m.content,
        _ => {
            return Err(ApiError::validation(
                "input",
                "the input must end with a `user` message",
            ));
        }
    };
    Ok(Input::Messages {
        earlier: messages,
        message,
    })
}

/// An earlier `function_call` or `mcp_call` item, as a stored tool call (`id` the call's id,
/// `name`, `arguments` parsed).
fn earlier_call(i: usize, item: &Value) -> ApiResult<Value> {
    let field = |name: &str| {
        item[name].as_str().ok_or_else(|| {
            ApiError::validation("input", format!("input[{i}].{name} must be a string"))
        })
    };
    let id = match item["type"].as_str() {
        Some("function_call") => field("call_id")?,
        _ => field("id")?,
    };
    let arguments = field("arguments")?;
    let arguments = serde_json::from_str::<Value>(arguments)
        .unwrap_or_else(|_| json!({"__invalid_json__": arguments}));
    Ok(json!({"id": id, "name": field("name")?, "arguments": arguments}))
}

/// The stored result of an earlier call.
fn tool_result(call: &Value, output: String, is_error: bool) -> NewMessage {
    NewMessage {
        run_id: None,
        role: MessageRole::Tool,
        content: output,
        tool_calls: Some(json!({"name": call["name"], "is_error": is_error})),
        tool_call_id: call["id"].as_str().map(str::to_string),
    }
}

/// A `function_call_output`'s `output`: a string, or a list of `input_text` parts.
fn output_text(i: usize, output: &Value) -> ApiResult<String> {
    match output {
        Value::String(s) => Ok(s.clone()),
        parts @ Value::Array(_) => text_of(parts).ok_or_else(|| {
            ApiError::validation(
                "input",
                format!("input[{i}].output must be a string or a list of input_text parts"),
            )
        }),
        _ => Err(ApiError::validation(
            "input",
            format!("input[{i}].output must be a string"),
        )),
    }
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

/// The session of a response id, if it is the caller's own (another user's — even for a
/// tenant admin — or another tenant's is "not found", as is an id that names nothing).
async fn owned(
    state: &AppState,
    caller: &TenantCaller,
    raw: &str,
) -> ApiResult<(ResponseRef, Session)> {
    let param = "previous_response_id";
    let r = ResponseRef::parse(raw).ok_or_else(|| response_not_found(raw, param))?;
    // Continuing needs the conversation only: the session's owner check is the one that
    // matters, and one read less per turn (an approval's run is checked with the approval).
    owned_session(state, caller, raw, r, param).await
}

/// The response id of a path: a malformed one is 400, naming the parameter, as every path id.
async fn owned_in_path(
    state: &AppState,
    caller: &TenantCaller,
    raw: &str,
) -> ApiResult<(ResponseRef, Session)> {
    let r = ResponseRef::parse(raw).ok_or_else(|| {
        ApiError::new(
            ErrorCode::BadRequest,
            format!("path parameter `response_id`: {raw:?} is not a response id (resp_…)"),
        )
        .with_details(json!({"parameter": "response_id", "reason": "expected a response id"}))
    })?;
    owned_ref(state, caller, raw, r, "response_id").await
}

async fn owned_ref(
    state: &AppState,
    caller: &TenantCaller,
    raw: &str,
    r: ResponseRef,
    param: &str,
) -> ApiResult<(ResponseRef, Session)> {
    let (r, session) = owned_session(state, caller, raw, r, param).await?;
    match executions::get(&state.db, &caller.scope(), r.run).await? {
        Some(run) if run.session_id == session.id => Ok((r, session)),
        _ => Err(response_not_found(raw, param)),
    }
}

/// The response's session, if it is the caller's own.
async fn owned_session(
    state: &AppState,
    caller: &TenantCaller,
    raw: &str,
    r: ResponseRef,
    param: &str,
) -> ApiResult<(ResponseRef, Session)> {
    let session = match state
        .engine
        .load_session(caller.tenant(), &caller.user(), r.session)
        .await
    {
        Ok(s) if s.user_id == caller.user_id() => s,
        Ok(_) | Err(agentry_actors::EngineError::NotFound(_)) => {
            return Err(response_not_found(raw, param));
        }
        Err(e) => return Err(e.into()),
    };
    Ok((r, session))
}

fn check_metadata(metadata: &Option<Value>) -> ApiResult<Value> {
    let Some(m) = metadata else {
        return Ok(json!({}));
    };
    let bad = || {
        ApiError::validation(
            "metadata",
            format!(
                "`metadata` must be an object of at most {MAX_METADATA_KEYS} string values \
                 (keys up to 64 characters, values up to 512)"
            ),
        )
    };
    let obj = m.as_object().ok_or_else(bad)?;
    if obj.len() > MAX_METADATA_KEYS
        || obj.iter().any(|(k, v)| {
            k.chars().count() > 64 || v.as_str().is_none_or(|s| s.chars().count() > 512)
        })
    {
        return Err(bad());
    }
    Ok(m.clone())
}

/// The client's function tools (`{"type": "function", "name", "description", "parameters",
/// "strict"}`), and each as the response echoes it. Their names and schemas are the engine's
/// to check ([`agentry_actors::Engine::check_client_tools`]).
fn parse_tools(tools: &[Value]) -> ApiResult<(Vec<ClientTool>, Vec<Value>)> {
    let mut defs = Vec::new();
    let mut echoed = Vec::new();
    for (i, t) in tools.iter().enumerate() {
        match t["type"].as_str() {
            Some("function") => {}
            Some("mcp") => {
                return Err(ApiError::validation(
                    "tools",
                    format!(
                        "tools[{i}]: client-declared MCP servers are not supported: configure \
                         MCP servers on the user or the assistant"
                    ),
                ));
            }
            other => {
                return Err(ApiError::validation(
                    "tools",
                    format!(
                        "tools[{i}].type {other:?} is not supported: only `function` tools \
                         (the assistant runs its own tools)"
                    ),
                ));
            }
        }
        let name = t["name"].as_str().ok_or_else(|| {
            ApiError::validation("tools", format!("tools[{i}].name must be a string"))
        })?;
        let description = match &t["description"] {
            Value::Null => String::new(),
            Value::String(s) => s.clone(),
            _ => {
                return Err(ApiError::validation(
                    "tools",
                    format!("tools[{i}].description must be a string"),
                ));
            }
        };
        let parameters = match &t["parameters"] {
            Value::Null => json!({"type": "object", "properties": {}}),
            p => p.clone(),
        };
        let strict = match &t["strict"] {
            Value::Null => true,
            Value::Bool(b) => *b,
            _ => {
                return Err(ApiError::validation(
                    "tools",
                    format!("tools[{i}].strict must be a boolean"),
                ));
            }
        };
        echoed.push(json!({
            "type": "function",
            "name": name,
            "description": description,
            "parameters": parameters,
            "strict": strict,
        }));
        if name == ASK_USER {
            // The name the assistant's questions are asked as: a client declares it to answer
            // them (the Agents SDK runs only the functions it declared); it is not offered to
            // the model, which asks through the assistant's own tools.
            continue;
        }
        defs.push(ClientTool {
            name: name.to_string(),
            description,
            parameters,
        });
    }
    Ok((defs, echoed))
}

async fn check(
    state: &AppState,
    caller: &TenantCaller,
    body: CreateResponseRequest,
) -> ApiResult<Plan> {
    let (client_tools, echoed_tools) = parse_tools(body.tools.as_deref().unwrap_or_default())?;
    let background = body.background == Some(true);
    if background && body.store == Some(false) {
        return Err(ApiError::validation(
            "background",
            "a background response is read back later: it needs `store: true` (the default)",
        ));
    }
    match &body.tool_choice {
        None | Some(Value::Null) => {}
        Some(Value::String(s)) if s == "auto" => {}
        Some(_) => {
            return Err(ApiError::validation(
                "tool_choice",
                "only `tool_choice: \"auto\"` is supported: the assistant decides which of its \
                 tools to call",
            ));
        }
    }
    let metadata = check_metadata(&body.metadata)?;
    let input = parse_input(&body.input)?;
    if let Input::Messages { message, .. } = &input {
        agentry_actors::check_message(message)
            .map_err(|e| ApiError::validation("input", e.to_string()))?;
    }
    let assistant = AssistantId::try_from(body.model.as_str())
        .ok()
        .ok_or_else(|| model_not_found(&body.model))?;
    assistants::get(&state.db, &caller.scope(), &assistant)
        .await?
        .ok_or_else(|| model_not_found(&body.model))?;
    // Checked for a continuation too (a client sends its tools again with every request, as
    // the Agents SDK does), though only a run the request starts takes them.
    state
        .engine
        .check_client_tools(
            caller.tenant_arc(),
            &caller.user(),
            &assistant,
            &client_tools,
        )
        .await
        .map_err(|e| match e {
            agentry_actors::EngineError::Validation { message, .. } => {
                ApiError::validation("tools", message)
            }
            other => other.into(),
        })?;
    let previous = match body.previous_response_id.as_deref() {
        Some(raw) => {
            let (r, session) = owned(state, caller, raw).await?;
            if session.assistant_id != assistant {
                return Err(ApiError::validation(
                    "model",
                    format!(
                        "response {raw} is a conversation with {:?}; send `model: {:?}` to \
                         continue it",
                        session.assistant_id.as_str(),
                        session.assistant_id.as_str()
                    ),
                ));
            }
            Some((r, session))
        }
        None => None,
    };
    if matches!(input, Input::Approval { .. }) && previous.is_none() {
        return Err(ApiError::validation(
            "previous_response_id",
            "an mcp_approval_response needs `previous_response_id`: the response whose \
             mcp_approval_request it answers",
        ));
    }
    let echo = Echo {
        model: body.model,
        instructions: body.instructions,
        metadata,
        max_output_tokens: body.max_output_tokens,
        parallel_tool_calls: body.parallel_tool_calls.unwrap_or(true),
        previous_response_id: body.previous_response_id,
        store: body.store.unwrap_or(true),
        tools: echoed_tools,
    };
    Ok(Plan {
        assistant,
        previous,
        input,
        client_tools,
        echo,
        stream: body.stream.unwrap_or(false),
        background,
    })
}

// ---- starting the run ----

/// The run a request starts or resumes, the response it makes, the fold seeded with the
/// context it continues from, and whether the run waits in the session's queue.
async fn start(
    state: &AppState,
    caller: &TenantCaller,
    request_id: RequestId,
    plan: &Plan,
) -> ApiResult<(
    LocalBoxStream<'static, SessionEvent>,
    ResponseRef,
    Fold,
    bool,
)> {
    match (&plan.input, &plan.previous) {
        (
            Input::Approval {
                id,
                approve,
                reason,
            },
            Some((prev, session)),
        ) => {
            let not_found = || {
                ApiError::new(
                    ErrorCode::NotFound,
                    format!(
                        "approval request {} is not one of response {}",
                        approval_item_id(&id.to_string(), 0),
                        prev.id()
                    ),
                )
                .with_details(json!({"param": "input"}))
            };
            let a = approvals::get(&state.db, &caller.scope(), *id)
                .await?
                .filter(|a| a.session_id == session.id && a.execution_id == prev.run)
                .ok_or_else(not_found)?;
            let decision = if *approve {
                Decision::Approve { message: None }
            } else {
                Decision::Reject {
                    message: reason.clone(),
                }
            };
            let (run, r, fold) = resume(state, caller, session.id, a, decision, plan.background)
                .await?
                .ok_or_else(not_found)?;
            Ok((run, r, fold, false))
        }
        (Input::FunctionOutput { call_id, output }, previous) => {
            let not_found = || {
                ApiError::new(
                    ErrorCode::NotFound,
                    format!(
                        "no function call {call_id:?} of a response of yours waits for its \
                         output: send the call_id of the function_call item the response ended \
                         with"
                    ),
                )
                .with_details(json!({"param": "input"}))
            };
            let a = match question_of_call(call_id) {
                Some(id) => approvals::get(&state.db, &caller.scope(), id).await?,
                None => None,
            }
            .filter(|a| {
                a.kind == "question"
                    && previous
                        .as_ref()
                        .is_none_or(|(prev, _)| prev.session == a.session_id)
            })
            .ok_or_else(not_found)?;
            // Stateless (no previous_response_id): the call names the conversation, which must
            // be the caller's own and the model's.
            let session = match state
                .engine
                .load_session(caller.tenant(), &caller.user(), a.session_id)
                .await
            {
                Ok(s) if s.user_id == caller.user_id() => s,
                Ok(_) | Err(agentry_actors::EngineError::NotFound(_)) => return Err(not_found()),
                Err(e) => return Err(e.into()),
            };
            if session.assistant_id != plan.assistant {
                return Err(ApiError::validation(
                    "model",
                    format!(
                        "function call {call_id} belongs to a conversation with {:?}; send \
                         `model: {:?}` to continue it",
                        session.assistant_id.as_str(),
                        session.assistant_id.as_str()
                    ),
                ));
            }
            // A question whose answer has a JSON Schema (an MCP server's elicitation) takes
            // the output as JSON when it is; every other answer is the output's text.
            let answer = match &a.request["question"]["schema"] {
                Value::Object(_) => serde_json::from_str::<Value>(output)
                    .ok()
                    .filter(Value::is_object)
                    .unwrap_or_else(|| Value::String(output.clone())),
                _ => Value::String(output.clone()),
            };
            let decision = Decision::Answer { answer };
            let (run, r, fold) = resume(state, caller, session.id, a, decision, plan.background)
                .await?
                .ok_or_else(not_found)?;
            Ok((run, r, fold, false))
        }
        (Input::Messages { earlier, message }, previous) => {
            let (session, after, earlier) = match previous {
                Some((_, session)) => {
                    if !earlier.is_empty() {
                        return Err(ApiError::validation(
                            "input",
                            "with `previous_response_id` send the new user message only: \
                             the conversation holds the earlier ones",
                        ));
                    }
                    let after = events::max_seq(&state.db, &caller.scope(), session.id).await?;
                    (Some(session.id), after, Vec::new())
                }
                // A new conversation holds the instructions, then the earlier messages.
                None => {
                    let instructions = plan
                        .echo
                        .instructions
                        .iter()
                        .map(|i| text_message(MessageRole::System, i.clone()));
                    (
                        None,
                        0,
                        instructions.chain(earlier.iter().cloned()).collect(),
                    )
                }
            };
            let run = start_conversation_run(
                state,
                caller,
                request_id,
                ConversationRun {
                    session,
                    assistant: &plan.assistant,
                    metadata: json!({"source": "openai_responses", "metadata": plan.echo.metadata}),
                    earlier,
                    message: message.clone(),
                    client_tools: plan.client_tools.clone(),
                },
            )
            .await?;
            let r = ResponseRef {
                session: run.session_id(),
                run: run.run_id(),
                after,
                background: plan.background,
            };
            let fold = Fold::new(&r);
            let queued = run.accepted.queued;
            Ok((run.boxed_local(), r, fold, queued))
        }
        (Input::Approval { .. }, None) => Err(ApiError::validation(
            "previous_response_id",
            "an mcp_approval_response needs `previous_response_id`",
        )),
    }
}

/// Decide what a paused run waits for (`approval`, of the run `approval.execution_id` in
/// `session`) and follow the run on from there: the response that continues it starts at the
/// request's `hitl_request` event, the fold seeded with it. `None` when the run never asked it.
async fn resume(
    state: &AppState,
    caller: &TenantCaller,
    session: SessionId,
    approval: approvals::Approval,
    decision: Decision,
    background: bool,
) -> ApiResult<Option<(LocalBoxStream<'static, SessionEvent>, ResponseRef, Fold)>> {
    let (tenant, user) = (caller.tenant(), caller.user());
    let run_id = approval.execution_id;
    let request_id_text = approval.id.to_string();
    let Some(asked) = events::of_run_by_type(
        &state.db,
        &caller.scope(),
        run_id,
        "hitl_request",
        1000,
    )
    .await?
    .into_iter()
    // The last time it was asked: a run resumed after a restart asks again, same id.
    .rfind(
        |e| matches!(&e.payload, EventPayload::HitlRequest(h) if h.request_id == request_id_text),
    ) else {
        return Ok(None);
    };
    // Subscribed before the decision, so nothing the run does next is missed.
    let run = state
        .engine
        .follow_run(tenant, &user, session, run_id, asked.seq)
        .await?
        .boxed_local();
    state
        .engine
        .decide(tenant, &user, session, approval.id, decision)
        .await?;
    let r = ResponseRef {
        session,
        run: run_id,
        after: asked.seq,
        background,
    };
    let mut fold = Fold::new(&r);
    fold.take(&asked);
    seed_question_call(state, caller, &mut fold).await?;
    Ok(Some((run, r, fold)))
}

/// A window's `usage`, settled once it has ended: what the run spent from the request it
/// continues from (or its start) to the request it ended at (or its `done`), as the run's
/// usage stored with each request tells. The responses of one run add up to its usage.
async fn settle_usage(state: &AppState, caller: &TenantCaller, fold: &mut Fold) -> ApiResult<()> {
    let usage_of = |request: Option<String>| async move {
        let Some(id) = request.and_then(|r| r.parse::<ApprovalId>().ok()) else {
            return Ok::<_, ApiError>(TokenUsage::default());
        };
        Ok(approvals::get(&state.db, &caller.scope(), id)
            .await?
            .map(|a| usage_at(&a.request))
            .unwrap_or_default())
    };
    let end = match fold.ended {
        Some(End::Paused) => usage_of(fold.paused_at.clone()).await?,
        Some(End::Done(_)) => fold.usage,
        _ => return Ok(()),
    };
    let start = usage_of(fold.resumed_request.clone()).await?;
    fold.usage = usage_between(start, end);
    Ok(())
}

/// The fold of a stored response's window, seeded with the request it continues from (read
/// first: a question's call started before the window, see [`seed_question_call`]).
async fn window_fold(state: &AppState, caller: &TenantCaller, r: &ResponseRef) -> ApiResult<Fold> {
    let mut fold = Fold::new(r);
    if r.after > 0
        && let Some(asked) =
            events::list_after(&state.db, &caller.scope(), r.session, r.after - 1, 1)
                .await?
                .into_iter()
                .find(|e| e.seq == r.after)
    {
        fold.take(&asked);
        seed_question_call(state, caller, &mut fold).await?;
    }
    Ok(fold)
}

/// A window that continues from a question of the assistant's own tools (`ask_question`, an
/// MCP tool's elicitation): the tool call that asked it started before the window, and its
/// result, in the window, is an `mcp_call` item named after it.
async fn seed_question_call(
    state: &AppState,
    caller: &TenantCaller,
    fold: &mut Fold,
) -> ApiResult<()> {
    let Some(before) = fold.resumes_at.filter(|_| fold.resumed_question) else {
        return Ok(());
    };
    let run = fold.run.parse::<uuid::Uuid>().map(RunId).ok();
    let Some(run) = run else { return Ok(()) };
    for ev in events::of_run_by_type(&state.db, &caller.scope(), run, "tool_call", 1000).await? {
        if let (EventPayload::ToolCall(c), true) = (&ev.payload, ev.seq < before) {
            fold.calls
                .entry(c.tool_call_id.clone())
                .or_insert_with(|| (c.tool_name.clone(), c.tool_args.clone()));
        }
    }
    Ok(())
}

/// `store: false`: the conversation goes once its run has ended (kept while it waits).
async fn forget_if_asked(
    state: &AppState,
    caller: &TenantCaller,
    fold: &Fold,
    echo: &Echo,
    session: SessionId,
) {
    if echo.store || !matches!(fold.ended, Some(End::Done(_))) {
        return;
    }
    if let Err(e) = state
        .engine
        .delete_session(caller.tenant(), &caller.user(), session)
        .await
    {
        tracing::warn!(error = %e, session_id = %session, "removing an unstored response's conversation failed");
    }
}

// ---- handlers ----

/// Create a response: run the assistant named by `model`.
#[utoipa::path(
    post,
    path = "/v1/responses",
    tag = "openai",
    request_body = CreateResponseRequest,
    responses(
        (status = 200, description = "`stream: false`: the Response object (`background: true`: at once, `queued` or `in_progress`). `stream: true`: `text/event-stream` of semantic events (`event: <type>`, `data: {type, sequence_number, …}`): `response.created`, `response.in_progress`, `response.output_item.added` / `.done`, `response.content_part.added` / `.done`, `response.output_text.delta` / `.done`, `response.function_call_arguments.delta` / `.done` (a client function call, which ends the response), ending in `response.completed` or `response.failed` (after an `error` event when the run was lost). `X-Agentry-Session` names the session", body = Object),
        (status = 400, description = "Malformed JSON (`invalid_json`)", body = agentry_schema::ErrorResponse),
        (status = 401, description = "No usable API key", body = agentry_schema::ErrorResponse),
        (status = 403, description = "The platform admin key (it has no tenant)", body = agentry_schema::ErrorResponse),
        (status = 404, description = "`model` names no assistant of the tenant (`model_not_found`), or `previous_response_id` / `approval_request_id` / a `function_call_output`'s `call_id` names nothing of the caller's (`not_found`)", body = agentry_schema::ErrorResponse),
        (status = 409, description = "A run is in progress in the conversation (`run_in_progress`: it waits for an approval, say), or the approval was decided already (`approval_not_pending`)", body = agentry_schema::ErrorResponse),
        (status = 422, description = "A field is invalid (`validation_error`): no final user message, an empty one, a tool that is not a `function`, a function tool whose name is bad, taken by one of the assistant's tools or declared twice, or whose `parameters` is not a JSON Schema object, `background` with `store: false`, a `tool_choice` other than `auto`", body = agentry_schema::ErrorResponse),
    )
)]
pub async fn create_response(
    caller: TenantCaller,
    state: web::Data<AppState>,
    request_id: RequestId,
    body: ApiJson<CreateResponseRequest>,
) -> ApiResult<HttpResponse> {
    let plan = check(&state, &caller, body.into_inner()).await?;
    let (mut run, r, mut fold, queued) = start(&state, &caller, request_id, &plan).await?;
    let echo = plan.echo;
    if plan.stream {
        return Ok(stream_events(
            state.into_inner(),
            caller,
            run,
            r,
            fold,
            echo,
            None,
        ));
    }
    if plan.background {
        // Answered now; the run goes on in its session whatever this request does (when this
        // replica stops, the run is recovered like any other and the read-back still works).
        drop(run);
        let mut response = fold.response(&r, &echo);
        if queued {
            response["status"] = json!("queued");
        }
        return Ok(HttpResponse::Ok()
            .insert_header((SESSION_HEADER, r.session.to_string()))
            .json(response));
    }
    while fold.ended.is_none() {
        let Some(ev) = run.next().await else {
            fold.ended = Some(End::Lost);
            break;
        };
        fold.take(&ev.event);
    }
    drop(run);
    settle_usage(&state, &caller, &mut fold).await?;
    forget_if_asked(&state, &caller, &fold, &echo, r.session).await;
    Ok(HttpResponse::Ok()
        .insert_header((SESSION_HEADER, r.session.to_string()))
        .json(fold.response(&r, &echo)))
}

/// A response's semantic events as Server-Sent Events, from `response.created` to its final
/// event: the run's events folded as they come (the stored ones first, for a stream resumed
/// by `GET …?stream=true`), numbered by [`Sse`]; `starting_after` leaves out what a client
/// had seen already.
fn stream_events(
    state: std::sync::Arc<AppState>,
    caller: TenantCaller,
    mut run: LocalBoxStream<'static, SessionEvent>,
    r: ResponseRef,
    mut fold: Fold,
    echo: Echo,
    starting_after: Option<u64>,
) -> HttpResponse {
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel::<Bytes>();
    let mut sse = Sse {
        next: 0,
        skip_to: starting_after,
    };
    let send = |frame: Option<Bytes>| {
        if let Some(f) = frame {
            let _ = tx.send(f);
        }
    };
    let created = fold.response(&r, &echo);
    send(sse.frame(json!({"type": "response.created", "response": created})));
    send(sse.frame(json!({"type": "response.in_progress", "response": created})));
    // One task reads the run and folds its events; the response reads the frames it makes. A
    // client that hangs up stops the reading, not the run: its response can be read back.
    actix_web::rt::spawn(async move {
        let send = |frame: Option<Bytes>| {
            if let Some(f) = frame {
                let _ = tx.send(f);
            }
        };
        while fold.ended.is_none() {
            let ev = tokio::select! {
                ev = run.next() => ev,
                () = tx.closed() => return,
            };
            let Some(ev) = ev else {
                fold.ended = Some(End::Lost);
                send(sse.frame(json!({
                    "type": "error",
                    "code": "server_error",
                    "message": "the session stopped before its run ended",
                    "param": null,
                })));
                break;
            };
            for out in fold.take(&ev.event) {
                send(sse.frame(out));
            }
        }
        drop(run);
        if let Err(e) = settle_usage(&state, &caller, &mut fold).await {
            tracing::warn!(error = %e.message, "reading a paused response's usage failed");
        }
        let response = fold.response(&r, &echo);
        // OpenAI has no `response.cancelled` event: a cancelled response ends in
        // `response.failed`, its `status` `cancelled`.
        let kind = match response["status"].as_str() {
            Some("completed") => "response.completed",
            _ => "response.failed",
        };
        send(sse.frame(json!({"type": kind, "response": response})));
        forget_if_asked(&state, &caller, &fold, &echo, r.session).await;
    });
    let frames = tokio_stream::wrappers::UnboundedReceiverStream::new(rx);
    HttpResponse::Ok()
        .insert_header((header::CONTENT_TYPE, "text/event-stream"))
        .insert_header((header::CACHE_CONTROL, "no-cache"))
        .insert_header(("x-accel-buffering", "no"))
        .insert_header((SESSION_HEADER, r.session.to_string()))
        .streaming(with_keep_alive(frames, KEEP_ALIVE))
}

/// Read a stored window back: the events of the run from the response's start, folded.
async fn read_back(state: &AppState, caller: &TenantCaller, r: &ResponseRef) -> ApiResult<Fold> {
    // A continuation starts at its approval request (its context, taken first); a run's first
    // response after the seq it names.
    let mut fold = window_fold(state, caller, r).await?;
    let mut after = r.after;
    while fold.ended.is_none() {
        let page = events::list_after(&state.db, &caller.scope(), r.session, after, PAGE).await?;
        for ev in &page {
            fold.take(ev);
        }
        match page.last() {
            Some(last) if page.len() as u64 == PAGE => after = last.seq,
            _ => break,
        }
    }
    settle_usage(state, caller, &mut fold).await?;
    Ok(fold)
}

/// What a read-back response echoes: the conversation's assistant and metadata, and the
/// id's `background`.
fn stored_echo(session: &Session) -> Echo {
    Echo {
        model: session.assistant_id.to_string(),
        metadata: session
            .metadata
            .get("metadata")
            .filter(|m| m.is_object())
            .cloned()
            .unwrap_or_else(|| json!({})),
        parallel_tool_calls: true,
        store: true,
        ..Default::default()
    }
}

/// Follow a response's run from the start of its window: its stored events first, then live.
async fn follow(
    state: &AppState,
    caller: &TenantCaller,
    r: &ResponseRef,
) -> ApiResult<LocalBoxStream<'static, SessionEvent>> {
    Ok(state
        .engine
        .follow_run(
            caller.tenant(),
            &caller.user(),
            r.session,
            r.run,
            r.after.saturating_sub(1),
        )
        .await?
        .boxed_local())
}

/// Retrieve a response (the caller's own), rebuilt from the run's stored events: while its run
/// goes on, `status` is `in_progress` and `output` what it did so far. With `stream=true`, its
/// semantic events as Server-Sent Events, numbered as the response's own stream numbered them
/// (`starting_after=N`: those after N), following the run to its final event.
#[utoipa::path(
    get,
    path = "/v1/responses/{response_id}",
    tag = "openai",
    params(("response_id" = String, Path, description = "The response's id (`resp_…`)"), RetrieveQuery),
    responses(
        (status = 200, description = "The Response object; with `stream=true`, `text/event-stream` of its semantic events (as `POST /v1/responses` streams them), from after `starting_after`, ending with `response.completed` or `response.failed`", body = Object),
        (status = 400, description = "`response_id` is not a response id (`bad_request`, `details.parameter`), or a query parameter is malformed", body = agentry_schema::ErrorResponse),
        (status = 401, description = "No usable API key", body = agentry_schema::ErrorResponse),
        (status = 403, description = "The platform admin key (it has no tenant)", body = agentry_schema::ErrorResponse),
        (status = 404, description = "No such response of the caller's (another user's or tenant's is not found either)", body = agentry_schema::ErrorResponse),
    )
)]
pub async fn get_response(
    caller: TenantCaller,
    state: web::Data<AppState>,
    id: web::Path<String>,
    query: ApiQuery<RetrieveQuery>,
) -> ApiResult<HttpResponse> {
    let query = query.into_inner();
    let (r, session) = owned_in_path(&state, &caller, &id).await?;
    let echo = stored_echo(&session);
    if query.stream == Some(true) {
        // The log and the session's live stream, which any replica can follow: a stream cut
        // on one replica resumes on another.
        let fold = window_fold(&state, &caller, &r).await?;
        let run = follow(&state, &caller, &r).await?;
        return Ok(stream_events(
            state.into_inner(),
            caller,
            run,
            r,
            fold,
            echo,
            query.starting_after,
        ));
    }
    let fold = read_back(&state, &caller, &r).await?;
    Ok(HttpResponse::Ok()
        .insert_header((SESSION_HEADER, r.session.to_string()))
        .json(fold.response(&r, &echo)))
}

/// How long a cancel waits for the run's `done` before answering with the response as it
/// stands (still `in_progress`: read it again).
const CANCEL_WAIT: std::time::Duration = std::time::Duration::from_secs(30);

/// Cancel a background response: its run is cancelled as `POST …/sessions/{id}/cancel`
/// cancels it (`Engine::cancel`, one `done`), and the response answers `status: "cancelled"`.
/// A response that has ended already is answered as it is (cancelling is idempotent, as on
/// OpenAI); so is one that ended at an approval request (`completed`: its run waits for the
/// decision, which a later request makes).
#[utoipa::path(
    post,
    path = "/v1/responses/{response_id}/cancel",
    tag = "openai",
    params(("response_id" = String, Path, description = "The response's id (`resp_…`)")),
    responses(
        (status = 200, description = "The Response object: `cancelled`, or as it ended already", body = Object),
        (status = 400, description = "`response_id` is not a response id (`bad_request`, `details.parameter`), or not a background response's (only those can be cancelled, as on OpenAI)", body = agentry_schema::ErrorResponse),
        (status = 401, description = "No usable API key", body = agentry_schema::ErrorResponse),
        (status = 403, description = "The platform admin key (it has no tenant)", body = agentry_schema::ErrorResponse),
        (status = 404, description = "No such response of the caller's (another user's or tenant's is not found either)", body = agentry_schema::ErrorResponse),
    )
)]
pub async fn cancel_response(
    caller: TenantCaller,
    state: web::Data<AppState>,
    id: web::Path<String>,
) -> ApiResult<HttpResponse> {
    let (r, session) = owned_in_path(&state, &caller, &id).await?;
    if !r.background {
        return Err(ApiError::new(
            ErrorCode::BadRequest,
            "only a response created with `background: true` can be cancelled",
        )
        .with_details(json!({"parameter": "response_id", "reason": "not a background response"})));
    }
    let echo = stored_echo(&session);
    let fold = read_back(&state, &caller, &r).await?;
    let ok = |fold: &Fold| {
        HttpResponse::Ok()
            .insert_header((SESSION_HEADER, r.session.to_string()))
            .json(fold.response(&r, &echo))
    };
    if fold.ended.is_some() {
        return Ok(ok(&fold));
    }
    // Subscribed before cancelling, so the run's `done` is seen.
    let mut run = follow(&state, &caller, &r).await?;
    match state
        .engine
        .cancel(caller.tenant(), &caller.user(), r.session)
        .await
    {
        Ok(_) => {}
        // It ended meanwhile (or paused: no run is active then either).
        Err(agentry_actors::EngineError::NoActiveRun) => {
            drop(run);
            return Ok(ok(&read_back(&state, &caller, &r).await?));
        }
        Err(e) => return Err(e.into()),
    }
    let mut fold = window_fold(&state, &caller, &r).await?;
    let _ = tokio::time::timeout(CANCEL_WAIT, async {
        while fold.ended.is_none() {
            match run.next().await {
                Some(ev) => {
                    fold.take(&ev.event);
                }
                None => fold.ended = Some(End::Lost),
            }
        }
    })
    .await;
    settle_usage(&state, &caller, &mut fold).await?;
    Ok(ok(&fold))
}

/// Delete a response: Agentry keeps conversations, not single responses, so this deletes the
/// conversation (the session) the response belongs to, with every response of it; a run still
/// going (or waiting for an approval) ends.
#[utoipa::path(
    delete,
    path = "/v1/responses/{response_id}",
    tag = "openai",
    params(("response_id" = String, Path, description = "The response's id (`resp_…`)")),
    responses(
        (status = 200, description = "`{id, object: \"response.deleted\", deleted: true}`", body = Object),
        (status = 400, description = "`response_id` is not a response id (`bad_request`, `details.parameter`)", body = agentry_schema::ErrorResponse),
        (status = 401, description = "No usable API key", body = agentry_schema::ErrorResponse),
        (status = 403, description = "The platform admin key (it has no tenant)", body = agentry_schema::ErrorResponse),
        (status = 404, description = "No such response of the caller's", body = agentry_schema::ErrorResponse),
    )
)]
pub async fn delete_response(
    caller: TenantCaller,
    state: web::Data<AppState>,
    id: web::Path<String>,
) -> ApiResult<impl Responder> {
    let (r, session) = owned_in_path(&state, &caller, &id).await?;
    state
        .engine
        .delete_session(caller.tenant(), &caller.user(), session.id)
        .await?;
    Ok(web::Json(
        json!({"id": r.id(), "object": "response.deleted", "deleted": true}),
    ))
}

/// The input of a response: the user message that started its run, or the
/// `mcp_approval_response` or `function_call_output` that resumed it. Messages given before the last in a new
/// conversation's `input` are in the conversation (`GET /api/v1/sessions/{id}/messages`), not
/// listed here.
#[utoipa::path(
    get,
    path = "/v1/responses/{response_id}/input_items",
    tag = "openai",
    params(("response_id" = String, Path, description = "The response's id (`resp_…`)")),
    responses(
        (status = 200, description = "`{object: \"list\", data, first_id, last_id, has_more}`", body = Object),
        (status = 400, description = "`response_id` is not a response id (`bad_request`, `details.parameter`)", body = agentry_schema::ErrorResponse),
        (status = 401, description = "No usable API key", body = agentry_schema::ErrorResponse),
        (status = 403, description = "The platform admin key (it has no tenant)", body = agentry_schema::ErrorResponse),
        (status = 404, description = "No such response of the caller's", body = agentry_schema::ErrorResponse),
    )
)]
pub async fn list_input_items(
    caller: TenantCaller,
    state: web::Data<AppState>,
    id: web::Path<String>,
) -> ApiResult<impl Responder> {
    let (r, _) = owned_in_path(&state, &caller, &id).await?;
    let scope = caller.scope();
    let mut data = Vec::new();
    if r.after > 0 {
        let at = events::list_after(&state.db, &scope, r.session, r.after - 1, 1).await?;
        if let Some(EventPayload::HitlRequest(h)) = at
            .first()
            .filter(|e| e.seq == r.after && e.run_id == r.run.to_string())
            .map(|e| &e.payload)
            && let Ok(approval) = h.request_id.parse::<ApprovalId>()
            && let Some(a) = approvals::get(&state.db, &scope, approval).await?
        {
            if h.kind == HitlKind::Question {
                // The client's output, as the question's answer stored it.
                let output = a
                    .decision
                    .as_ref()
                    .map(|d| as_text(&d["answer"]))
                    .unwrap_or_default();
                data.push(json!({
                    "type": "function_call_output",
                    "id": format!("fco_{}", a.id.0.simple()),
                    "call_id": function_call_id(&h.request_id),
                    "output": output,
                    "status": "completed",
                }));
            } else {
                let approve = matches!(
                    a.status,
                    approvals::ApprovalStatus::Approved | approvals::ApprovalStatus::Edited
                );
                data.push(json!({
                    "type": "mcp_approval_response",
                    "id": format!("mcpa_{}", a.id.0.simple()),
                    "approval_request_id": approval_item_id(&h.request_id, 0),
                    "approve": approve,
                }));
            }
        }
    }
    if data.is_empty()
        && let Some(run) = executions::get(&state.db, &scope, r.run).await?
    {
        data.push(json!({
            "type": "message",
            "id": format!("msg_in_{}", r.run.0.simple()),
            "role": "user",
            "status": "completed",
            "content": [{"type": "input_text", "text": run.input}],
        }));
    }
    let first = data.first().map(|i| i["id"].clone()).unwrap_or(Value::Null);
    let last = data.last().map(|i| i["id"].clone()).unwrap_or(Value::Null);
    Ok(web::Json(json!({
        "object": "list",
        "data": data,
        "first_id": first,
        "last_id": last,
        "has_more": false,
    })))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_response_id_names_its_session_run_and_start() {
        let r = ResponseRef {
            session: SessionId::new(),
            run: RunId::new(),
            after: 42,
            background: false,
        };
        assert_eq!(ResponseRef::parse(&r.id()), Some(r));
        let b = ResponseRef {
            background: true,
            ..r
        };
        assert!(b.id().ends_with("_42b"), "{}", b.id());
        assert_eq!(ResponseRef::parse(&b.id()), Some(b));
        assert_eq!(ResponseRef::parse(&format!("{}_1", r.id())), None);
        assert_eq!(ResponseRef::parse(&r.id().replace("_42", "_+42")), None);
        for bad in [
            "",
            "resp_",
            "resp_xyz_1",
            &r.id().replace("resp_", "msg_"),
            &format!("{}x", r.id()),
            &r.id()[..r.id().len() - 3],
        ] {
            assert_eq!(ResponseRef::parse(bad), None, "{bad}");
        }
    }

    #[test]
    fn an_approval_item_id_names_its_approval() {
        let id = ApprovalId::new();
        assert_eq!(
            approval_of_item(&approval_item_id(&id.to_string(), 0)),
            Some(id)
        );
        assert_eq!(
            approval_of_item(&approval_item_id(&id.to_string(), 2)),
            Some(id)
        );
        assert_eq!(approval_of_item("mcpr_nope"), None);
    }

    #[test]
    fn a_function_call_id_names_its_question() {
        let id = ApprovalId::new();
        let call_id = function_call_id(&id.to_string());
        assert_eq!(question_of_call(&call_id), Some(id));
        for bad in ["call_", "call_nope", &format!("{call_id}x"), &call_id[5..]] {
            assert_eq!(question_of_call(bad), None, "{bad}");
        }
    }

    /// The Agents SDK without `previous_response_id` sends the whole conversation again: the
    /// output at its end is what continues the run; a list ending in a user message is a new
    /// conversation whose earlier calls are skipped.
    #[test]
    fn a_function_call_output_at_the_end_continues_whatever_came_before() {
        let call = json!({"type": "function_call", "id": "fc_1", "call_id": "call_1", "name": "f", "arguments": "{}"});
        let output = json!({"type": "function_call_output", "call_id": "call_1", "output": "42"});
        let user = json!({"role": "user", "content": "hi"});
        match parse_input(&json!([user, call, output])) {
            Ok(Input::FunctionOutput { call_id, output }) => {
                assert_eq!((call_id.as_str(), output.as_str()), ("call_1", "42"));
            }
            _ => panic!("not a function output"),
        }
        let parts = json!({"type": "function_call_output", "call_id": "call_1",
            "output": [{"type": "input_text", "text": "4"}, {"type": "input_text", "text": "2"}]});
        assert!(matches!(
            parse_input(&json!([parts])),
            Ok(Input::FunctionOutput { output, .. }) if output == "42"
        ));
        match parse_input(&json!([user, call, output, {"role": "user", "content": "and now?"}])) {
            Ok(Input::Messages { earlier, message }) => {
                assert_eq!(message, "and now?");
                // The earlier call and its output are stored as the call and its result.
                let kinds: Vec<_> = earlier
                    .iter()
                    .map(|m| (m.role, m.content.as_str(), m.tool_call_id.as_deref()))
                    .collect();
                assert_eq!(
                    kinds,
                    [
                        (MessageRole::User, "hi", None),
                        (MessageRole::Assistant, "", None),
                        (MessageRole::Tool, "42", Some("call_1")),
                    ]
                );
                assert_eq!(
                    earlier[1].tool_calls,
                    Some(json!([{"id": "call_1", "name": "f", "arguments": {}}]))
                );
                assert_eq!(
                    earlier[2].tool_calls,
                    Some(json!({"name": "f", "is_error": false}))
                );
            }
            _ => panic!("not messages"),
        }
        let no_id = json!({"type": "function_call_output", "output": "42"});
        assert!(parse_input(&json!([no_id])).is_err());
        let approval =
            json!({"type": "mcp_approval_response", "approval_request_id": "x", "approve": true});
        assert!(parse_input(&json!([approval, output])).is_err());
    }

    #[test]
    fn function_tools_are_read_and_echoed_other_tools_refused() {
        let (defs, echoed) = parse_tools(&[json!({"type": "function", "name": "get_weather",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}})])
        .unwrap();
        assert_eq!(defs[0].name, "get_weather");
        assert_eq!(defs[0].parameters["properties"]["city"]["type"], "string");
        assert_eq!(echoed[0]["strict"], true);
        let (defs, _) = parse_tools(&[json!({"type": "function", "name": "now"})]).unwrap();
        assert_eq!(
            defs[0].parameters,
            json!({"type": "object", "properties": {}})
        );
        for bad in [
            json!({"type": "mcp", "server_label": "x"}),
            json!({"type": "web_search"}),
            json!({"type": "function"}),
            json!({"type": "function", "name": "f", "strict": "yes"}),
        ] {
            assert!(parse_tools(std::slice::from_ref(&bad)).is_err(), "{bad}");
        }
    }

    #[test]
    fn built_in_tools_are_labelled_by_their_service() {
        assert_eq!(server_label("read_file"), "files");
        assert_eq!(server_label("execute"), "shell");
        assert_eq!(server_label("github__create_issue"), "github");
        assert_eq!(server_label("task"), "agentry");
    }
}
