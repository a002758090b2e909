//! A2A v1.0 (the Agent2Agent protocol, JSON-RPC binding): every assistant of a tenant is an A2A
//! agent at `/a2a/{tenant_id}/{agent_id}` (docs/a2a.md).
//!
//! - `GET /a2a/{tenant_id}/{agent_id}/.well-known/agent-card.json`: the public card ([`card`]).
//! - `POST /a2a/{tenant_id}/{agent_id}`: the JSON-RPC methods `SendMessage`,
//!   `SendStreamingMessage` (SSE), `GetTask`, `ListTasks`, `CancelTask`, `SubscribeToTask` (SSE),
//!   `GetExtendedAgentCard` and the push-notification config methods ([`push`]).
//!
//! A thin adapter over the engine's one run path: an A2A task is an Agentry run, its
//! `contextId` the run's session. A message starts a run ([`start_conversation_run`], so
//! [`agentry_actors::Engine::stream_run`]); the answer to an input-required task is one
//! [`agentry_actors::Engine::decide`] followed by [`agentry_actors::Engine::follow_run`]; a
//! cancel is [`agentry_actors::Engine::cancel`]. A task is read back from the session's stored
//! event log (no table of its own), folded by [`task::TaskFold`], so any replica answers for it
//! and a subscription resumes on any replica (`follow_run`). Tenancy: the key's tenant must be
//! the path's (another tenant's agent is 404), and a task or context is visible to the user who
//! made it only (anyone else's is `TaskNotFoundError`).

pub mod card;
pub mod push;
pub mod task;

use actix_web::body::{BoxBody, MessageBody};
use actix_web::dev::{ServiceRequest, ServiceResponse};
use actix_web::http::header;
use actix_web::middleware::Next;
use actix_web::web::{self, Bytes};
use actix_web::{HttpRequest, HttpResponse};
use agentry_actors::SessionEvent;
use agentry_schema::error::ErrorCode;
use agentry_schema::events::HitlKind;
use agentry_schema::frames::Decision;
use agentry_schema::ids::{ApprovalId, AssistantId, RunId, SessionId, TenantId};
use agentry_store::assistants::{self, Assistant};
use agentry_store::executions::{self, Execution, UpdateCursor};
use agentry_store::{events, sessions};
use futures::StreamExt;
use futures::stream::LocalBoxStream;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use utoipa::ToSchema;

use crate::auth::TenantCaller;
use crate::error::{ApiError, ApiResult};
use crate::extract::{ApiJson, ApiPath, param};
use crate::protocols::common::{
    ConversationRun, KEEP_ALIVE, reshape_errors, start_conversation_run, with_keep_alive,
};
use crate::request_id::RequestId;
use crate::routes::resource::endpoint;
use crate::state::AppState;
use card::{AgentUrl, PROTOCOL_VERSION};
use task::{Standing, TaskFold, TaskIds, TaskState};

/// Stored events read per page when a task is read back.
const PAGE: u64 = 500;

/// How long `CancelTask` waits for the run's `done` before answering with the task as it stands.
const CANCEL_WAIT: std::time::Duration = std::time::Duration::from_secs(30);

/// `ListTasks`: the page size when none is asked, and the largest.
const DEFAULT_PAGE_SIZE: u64 = 50;
const MAX_PAGE_SIZE: u64 = 100;

/// The path of the public agent card below an agent's base URL.
pub const CARD_PATH: &str = "/.well-known/agent-card.json";

pub fn configure(cfg: &mut web::ServiceConfig) {
    cfg.service(endpoint("/a2a/{tenant_id}/{agent_id}").post(rpc))
        .service(
            endpoint("/a2a/{tenant_id}/{agent_id}/.well-known/agent-card.json").get(agent_card),
        );
}

// ---- errors ----

/// A JSON-RPC error body, what every error under `/a2a/` answers: A2A's codes (`-32001`
/// TaskNotFoundError … `-32009` VersionNotSupportedError), JSON-RPC's (`-32700`, `-32600`,
/// `-32601`, `-32602`, `-32603`), and `-32000` for the rest of Agentry's errors (a quota, a bad
/// key). `error.data` holds a `google.rpc.ErrorInfo` whose `metadata.error_code` is Agentry's
/// error code, when one applies.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct A2aErrorBody {
    /// Always `2.0`.
    pub jsonrpc: String,
    /// The request's `id` (a string or a number); `null` when it could not be read.
    #[schema(value_type = Value)]
    pub id: Value,
    pub error: A2aError,
}

#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct A2aError {
    pub code: i64,
    pub message: String,
    /// `[{"@type": "type.googleapis.com/google.rpc.ErrorInfo", reason, domain, metadata}]`,
    /// then, for one of Agentry's errors, `{"@type": "type.agentry.dev/agentry.ErrorResponse",
    /// error_code, details}`.
    #[schema(value_type = Vec<Object>)]
    pub data: Vec<Value>,
}

/// An error a method answers (inside a 200, as JSON-RPC over HTTP does). Boxed: it is the
/// error of every step of a call, and rare.
#[derive(Debug)]
pub struct RpcError(Box<RpcErrorData>);

impl std::ops::Deref for RpcError {
    type Target = RpcErrorData;
    fn deref(&self) -> &RpcErrorData {
        &self.0
    }
}

impl std::ops::DerefMut for RpcError {
    fn deref_mut(&mut self) -> &mut RpcErrorData {
        &mut self.0
    }
}

#[derive(Debug)]
pub struct RpcErrorData {
    code: i64,
    message: String,
    /// `ErrorInfo.reason`.
    reason: String,
    domain: &'static str,
    metadata: serde_json::Map<String, Value>,
    /// Agentry's error, when it is one: a second entry of `data` with its code and details.
    agentry: Option<(ErrorCode, Value)>,
}

const ERROR_INFO: &str = "type.googleapis.com/google.rpc.ErrorInfo";
/// The `@type` of the `data` entry that carries Agentry's `{error_code, details}`.
pub const AGENTRY_ERROR: &str = "type.agentry.dev/agentry.ErrorResponse";

impl RpcError {
    fn a2a(code: i64, reason: &str, message: impl Into<String>) -> RpcError {
        RpcError(Box::new(RpcErrorData {
            code,
            message: message.into(),
            reason: reason.to_string(),
            domain: "a2a-protocol.org",
            metadata: Default::default(),
            agentry: None,
        }))
    }

    fn task_not_found(id: &str) -> RpcError {
        let mut e = RpcError::a2a(
            -32001,
            "TASK_NOT_FOUND",
            format!("no task {id:?} of yours at this agent"),
        );
        e.metadata.insert("taskId".into(), json!(id));
        e
    }

    fn context_not_found(id: &str) -> RpcError {
        let mut e = RpcError::a2a(
            -32001,
            "TASK_NOT_FOUND",
            format!("no context {id:?} of yours at this agent"),
        );
        e.metadata.insert("contextId".into(), json!(id));
        e
    }

    fn not_cancelable(state: TaskState) -> RpcError {
        RpcError::a2a(
            -32002,
            "TASK_NOT_CANCELABLE",
            format!("the task is {} already", state.as_str()),
        )
    }

    fn unsupported(message: impl Into<String>) -> RpcError {
        RpcError::a2a(-32004, "UNSUPPORTED_OPERATION", message)
    }

    fn content_type(message: impl Into<String>) -> RpcError {
        RpcError::a2a(-32005, "CONTENT_TYPE_NOT_SUPPORTED", message)
    }

    fn version(asked: &str) -> RpcError {
        RpcError::a2a(
            -32009,
            "VERSION_NOT_SUPPORTED",
            format!(
                "A2A version {asked:?} is not supported: this agent speaks {PROTOCOL_VERSION} \
                 (send the header `A2A-Version: {PROTOCOL_VERSION}`; none means 0.3)"
            ),
        )
    }

    fn invalid_request(message: impl Into<String>) -> RpcError {
        RpcError::a2a(-32600, "INVALID_REQUEST", message)
    }

    fn method_not_found(method: &str) -> RpcError {
        RpcError::a2a(
            -32601,
            "METHOD_NOT_FOUND",
            format!(
                "no method {method:?}: this agent serves SendMessage, SendStreamingMessage, \
                 GetTask, ListTasks, CancelTask, SubscribeToTask, GetExtendedAgentCard, \
                 CreateTaskPushNotificationConfig, GetTaskPushNotificationConfig, \
                 ListTaskPushNotificationConfigs and DeleteTaskPushNotificationConfig"
            ),
        )
    }

    fn invalid_params(field: &str, message: impl Into<String>) -> RpcError {
        let mut e = RpcError::a2a(-32602, "INVALID_PARAMS", message);
        e.metadata.insert("field".into(), json!(field));
        e
    }

    /// One of Agentry's errors, with its code kept in the `ErrorInfo`.
    fn of_api(e: &ApiError) -> RpcError {
        let code = match e.code {
            ErrorCode::InvalidJson => -32700,
            // The body is JSON but not one request object (a batch, say): not JSON-RPC.
            ErrorCode::ValidationError if e.details["field"] == "." => -32600,
            ErrorCode::NotFound | ErrorCode::NoActiveRun => -32001,
            ErrorCode::RunInProgress | ErrorCode::ApprovalNotPending | ErrorCode::Conflict => {
                -32004
            }
            ErrorCode::ValidationError | ErrorCode::BadRequest | ErrorCode::InvalidQuery => -32602,
            c if c.http_status() >= 500 => -32603,
            _ => -32000,
        };
        let mut metadata = serde_json::Map::new();
        metadata.insert("error_code".into(), json!(e.code.as_str()));
        RpcError(Box::new(RpcErrorData {
            code,
            message: e.message.clone(),
            reason: e.code.as_str().to_uppercase(),
            domain: "agentry",
            metadata,
            agentry: Some((
                e.code,
                if e.details.is_object() {
                    e.details.clone()
                } else {
                    json!({})
                },
            )),
        }))
    }

    fn body(&self, id: &Value) -> Value {
        let mut data = vec![json!({
            "@type": ERROR_INFO,
            "reason": self.reason,
            "domain": self.domain,
            "metadata": self.metadata,
        })];
        if let Some((code, details)) = &self.agentry {
            data.push(json!({
                "@type": AGENTRY_ERROR,
                "error_code": code.as_str(),
                "details": details,
            }));
        }
        json!({
            "jsonrpc": "2.0",
            "id": id,
            "error": {"code": self.code, "message": self.message, "data": data},
        })
    }
}

impl From<ApiError> for RpcError {
    fn from(e: ApiError) -> Self {
        RpcError::of_api(&e)
    }
}

impl From<agentry_actors::EngineError> for RpcError {
    fn from(e: agentry_actors::EngineError) -> Self {
        RpcError::of_api(&ApiError::from(e))
    }
}

impl From<agentry_store::StoreError> for RpcError {
    fn from(e: agentry_store::StoreError) -> Self {
        RpcError::of_api(&ApiError::from(e))
    }
}

type RpcResult<T> = Result<T, RpcError>;

/// Every error answer under `/a2a/` (the key check, the body extractor, a quota, a handler's
/// 404) as a JSON-RPC error body, keeping its status and headers: an A2A client reads one shape.
pub async fn a2a_errors(
    req: ServiceRequest,
    next: Next<impl MessageBody + 'static>,
) -> Result<ServiceResponse<BoxBody>, actix_web::Error> {
    reshape_errors(
        req,
        next,
        |path| path.starts_with("/a2a/"),
        |parsed| {
            let err = ApiError::new(parsed.error_code, parsed.message).with_details(parsed.details);
            RpcError::of_api(&err).body(&Value::Null)
        },
    )
    .await
}

// ---- the agent ----

/// The server's base URL as the client reached it (its scheme and `Host`, or
/// `Forwarded`/`X-Forwarded-*` behind a proxy).
fn base_url(req: &HttpRequest) -> String {
    let info = req.connection_info();
    format!("{}://{}", info.scheme(), info.host())
}

fn agent_not_found(tenant: TenantId, agent: &AssistantId) -> ApiError {
    ApiError::new(
        ErrorCode::NotFound,
        format!(
            "no agent {agent} of tenant {tenant} for this key: the path is \
             /a2a/{{your tenant's id}}/{{assistant id}} (GET /api/v1/agents lists the assistants)"
        ),
    )
}

/// The caller's tenant's assistant named by the path: another tenant's, or none, is 404.
async fn agent_of(
    state: &AppState,
    caller: &TenantCaller,
    tenant: TenantId,
    agent: &AssistantId,
) -> ApiResult<Assistant> {
    if tenant != caller.tenant_id() {
        return Err(agent_not_found(tenant, agent));
    }
    let scope = caller.scope();
    match assistants::get(&state.db, &scope, agent).await? {
        Some(a) => Ok(a),
        None if agent.as_str() == AssistantId::DEFAULT => Ok(assistants::ensure_default(
            &state.db,
            &scope,
            agentry_domain::tenancy::default_assistant_spec(),
        )
        .await?),
        None => Err(agent_not_found(tenant, agent)),
    }
}

/// The public agent card: how to reach the agent and authenticate, nothing of the tenant
/// (docs/a2a.md, "Agent cards"); the same for every well-formed path. No key needed.
#[utoipa::path(
    get,
    path = "/a2a/{tenant_id}/{agent_id}/.well-known/agent-card.json",
    tag = "a2a",
    params(
        ("tenant_id" = String, Path, description = "The tenant's id"),
        ("agent_id" = String, Path, description = "The assistant's id (a slug)"),
    ),
    responses(
        (status = 200, description = "The A2A v1.0 AgentCard (JSON-RPC interface at `/a2a/{tenant_id}/{agent_id}`, bearer scheme, `extendedAgentCard: true`)", body = Object),
        (status = 400, description = "`tenant_id` is not a UUID or `agent_id` not a slug (`bad_request`)", body = A2aErrorBody),
    ),
    security(())
)]
pub async fn agent_card(
    req: HttpRequest,
    tenant: ApiPath<param::Tenant>,
    agent: ApiPath<param::Agent>,
) -> HttpResponse {
    let (tenant, agent) = (tenant.into_inner(), agent.into_inner());
    let base = base_url(&req);
    let card = card::public_card(&AgentUrl {
        base: &base,
        tenant,
        agent: &agent,
    });
    HttpResponse::Ok()
        .insert_header((header::CACHE_CONTROL, "public, max-age=300"))
        .json(card)
}

// ---- the JSON-RPC endpoint ----

/// A checked JSON-RPC call to one agent.
struct Call {
    id: Value,
    method: String,
    params: serde_json::Map<String, Value>,
}

fn parse_call(body: Value) -> Result<Call, (Value, RpcError)> {
    let Value::Object(mut obj) = body else {
        return Err((
            Value::Null,
            RpcError::invalid_request("the body must be one JSON-RPC 2.0 request object"),
        ));
    };
    let id = match obj.remove("id") {
        None | Some(Value::Null) => Value::Null,
        Some(v @ (Value::String(_) | Value::Number(_))) => v,
        Some(_) => {
            return Err((
                Value::Null,
                RpcError::invalid_request("`id` must be a string or a number"),
            ));
        }
    };
    if obj.get("jsonrpc").and_then(Value::as_str) != Some("2.0") {
        return Err((id, RpcError::invalid_request("`jsonrpc` must be \"2.0\"")));
    }
    let method = match obj.remove("method") {
        Some(Value::String(m)) => m,
        _ => return Err((id, RpcError::invalid_request("`method` must be a string"))),
    };
    let params = match obj.remove("params") {
        None | Some(Value::Null) => Default::default(),
        Some(Value::Object(p)) => p,
        Some(_) => {
            return Err((
                id,
                RpcError::invalid_params("params", "`params` must be an object"),
            ));
        }
    };
    Ok(Call { id, method, params })
}

/// The version a request speaks: its `A2A-Version` header (or query parameter); none is 0.3.
fn check_version(req: &HttpRequest) -> RpcResult<()> {
    let from_query = || {
        web::Query::<std::collections::HashMap<String, String>>::from_query(req.query_string())
            .ok()
            .and_then(|q| q.get("A2A-Version").cloned())
    };
    let asked = req
        .headers()
        .get("a2a-version")
        .and_then(|v| v.to_str().ok())
        .map(|s| s.trim().to_string())
        .or_else(from_query)
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "0.3".to_string());
    // Major and minor count; a patch number is ignored.
    let mut parts = asked.split('.');
    match (parts.next(), parts.next()) {
        (Some("1"), Some("0") | None) => Ok(()),
        _ => Err(RpcError::version(&asked)),
    }
}

fn ok_body(id: &Value, result: Value) -> HttpResponse {
    HttpResponse::Ok().json(json!({"jsonrpc": "2.0", "id": id, "result": result}))
}

fn error_body(id: &Value, e: &RpcError) -> HttpResponse {
    HttpResponse::Ok().json(e.body(id))
}

/// An agent's JSON-RPC endpoint (A2A v1.0, JSON-RPC binding). Methods: `SendMessage`,
/// `SendStreamingMessage` and `SubscribeToTask` (answered as `text/event-stream`, one JSON-RPC
/// response per `data:` line), `GetTask`, `ListTasks`, `CancelTask`, `GetExtendedAgentCard`,
/// `CreateTaskPushNotificationConfig`, `GetTaskPushNotificationConfig`,
/// `ListTaskPushNotificationConfigs`, `DeleteTaskPushNotificationConfig`.
/// A method's error is a JSON-RPC error inside a 200, with A2A's codes; the request must carry
/// `A2A-Version: 1.0`. docs/a2a.md.
#[utoipa::path(
    post,
    path = "/a2a/{tenant_id}/{agent_id}",
    tag = "a2a",
    params(
        ("tenant_id" = String, Path, description = "The tenant's id (the key's tenant)"),
        ("agent_id" = String, Path, description = "The assistant's id (a slug)"),
        ("A2A-Version" = Option<String>, Header, description = "The A2A version the client speaks: `1.0` (none means 0.3, which is refused with VersionNotSupportedError)"),
    ),
    request_body(content = Object, description = "A JSON-RPC 2.0 request: `{jsonrpc: \"2.0\", id, method, params}`"),
    responses(
        (status = 200, description = "A JSON-RPC response: `result`, or `error` (A2A's codes: -32001 TaskNotFoundError, -32002 TaskNotCancelableError, -32004 UnsupportedOperationError, -32005 ContentTypeNotSupportedError, -32009 VersionNotSupportedError; JSON-RPC's -32600, -32601, -32602, -32603; -32000 for other Agentry errors). `SendStreamingMessage` and `SubscribeToTask`: `text/event-stream`, each `data:` a JSON-RPC response whose `result` is a StreamResponse (`task`, then `statusUpdate` / `artifactUpdate`), ending when the task is terminal or input-required", body = Object),
        (status = 400, description = "Malformed JSON (`invalid_json`, JSON-RPC -32700), or a path id that is not one (`bad_request`)", body = A2aErrorBody),
        (status = 401, description = "No usable API key", body = A2aErrorBody),
        (status = 403, description = "The platform admin key (it has no tenant), a suspended tenant, or a custom role without the `chat` area", body = A2aErrorBody),
        (status = 404, description = "No such agent for this key: another tenant's, or no such assistant (`not_found`)", body = A2aErrorBody),
        (status = 422, description = "The body is JSON but not one request object — an array (a batch, which A2A does not use), a string (`validation_error`, JSON-RPC -32600)", body = A2aErrorBody),
    )
)]
pub async fn rpc(
    caller: TenantCaller,
    state: web::Data<AppState>,
    req: HttpRequest,
    tenant: ApiPath<param::Tenant>,
    agent: ApiPath<param::Agent>,
    request_id: RequestId,
    body: ApiJson<Value>,
) -> ApiResult<HttpResponse> {
    let (tenant, agent_id) = (tenant.into_inner(), agent.into_inner());
    let assistant = agent_of(&state, &caller, tenant, &agent_id).await?;
    let call = match parse_call(body.into_inner()) {
        Ok(c) => c,
        Err((id, e)) => return Ok(error_body(&id, &e)),
    };
    if let Err(e) = check_version(&req) {
        return Ok(error_body(&call.id, &e));
    }
    if let Some(t) = call.params.get("tenant")
        && !t.is_null()
        && t.as_str() != Some(tenant.to_string().as_str())
    {
        let e = RpcError::invalid_params(
            "tenant",
            format!("`tenant` must be this agent's interface tenant, {tenant:?}"),
        );
        return Ok(error_body(&call.id, &e));
    }
    let base = base_url(&req);
    let agent = Agent {
        state: state.into_inner(),
        caller,
        assistant,
        url_base: base,
        tenant,
        request_id,
    };
    let id = call.id.clone();
    let answer = match call.method.as_str() {
        "SendMessage" => agent.send_message(&call.params, false).await,
        "SendStreamingMessage" => agent.send_message(&call.params, true).await,
        "GetTask" => agent.get_task(&call.params).await.map(Answer::Result),
        "ListTasks" => agent.list_tasks(&call.params).await.map(Answer::Result),
        "CancelTask" => agent.cancel_task(&call.params).await.map(Answer::Result),
        "SubscribeToTask" => agent.subscribe(&call.params).await,
        "GetExtendedAgentCard" => agent.extended_card().await.map(Answer::Result),
        "CreateTaskPushNotificationConfig" => agent
            .create_push_config(&call.params)
            .await
            .map(Answer::Result),
        "GetTaskPushNotificationConfig" => agent
            .get_push_config(&call.params)
            .await
            .map(Answer::Result),
        "ListTaskPushNotificationConfigs" => agent
            .list_push_configs(&call.params)
            .await
            .map(Answer::Result),
        "DeleteTaskPushNotificationConfig" => agent
            .delete_push_config(&call.params)
            .await
            .map(Answer::Result),
        other => Err(RpcError::method_not_found(other)),
    };
    Ok(match answer {
        Ok(Answer::Result(result)) => ok_body(&id, result),
        Ok(Answer::Stream(stream)) => stream.respond(id),
        Err(e) => error_body(&id, &e),
    })
}

enum Answer {
    Result(Value),
    Stream(Box<TaskStream>),
}

/// One request's agent: the caller, the assistant, where it is served.
struct Agent {
    state: std::sync::Arc<AppState>,
    caller: TenantCaller,
    assistant: Assistant,
    url_base: String,
    tenant: TenantId,
    request_id: RequestId,
}

/// A task, as stored: its run, and the fold of its events so far.
struct Found {
    run: Execution,
    fold: TaskFold,
}

fn str_param<'a>(
    params: &'a serde_json::Map<String, Value>,
    name: &str,
) -> RpcResult<Option<&'a str>> {
    match params.get(name) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) if s.is_empty() => Ok(None),
        Some(Value::String(s)) => Ok(Some(s)),
        Some(_) => Err(RpcError::invalid_params(
            name,
            format!("`{name}` must be a string"),
        )),
    }
}

fn int_param(params: &serde_json::Map<String, Value>, name: &str) -> RpcResult<Option<i64>> {
    match params.get(name) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => v
            .as_i64()
            .or_else(|| v.as_str().and_then(|s| s.parse().ok()))
            .map(Some)
            .ok_or_else(|| RpcError::invalid_params(name, format!("`{name}` must be an integer"))),
    }
}

/// `historyLength`: none is all; a negative one is refused.
fn history_length(params: &serde_json::Map<String, Value>) -> RpcResult<Option<usize>> {
    match int_param(params, "historyLength")? {
        None => Ok(None),
        Some(n) if n < 0 => Err(RpcError::invalid_params(
            "historyLength",
            "`historyLength` must be 0 or more",
        )),
        Some(n) => Ok(Some(usize::try_from(n).unwrap_or(usize::MAX))),
    }
}

/// The last `n` of `history` (all when `n` is `None`).
fn trim_history(mut history: Vec<Value>, n: Option<usize>) -> Vec<Value> {
    if let Some(n) = n
        && history.len() > n
    {
        history.drain(..history.len() - n);
    }
    history
}

/// What a client's message says: its text (text parts, and data parts as JSON), and its data
/// parts (a decision).
struct Incoming {
    text: String,
    data: Vec<Value>,
    task_id: Option<String>,
    context_id: Option<String>,
}

fn parse_message(params: &serde_json::Map<String, Value>) -> RpcResult<Incoming> {
    let Some(Value::Object(m)) = params.get("message") else {
        return Err(RpcError::invalid_params(
            "message",
            "`message` is required: {messageId, role: \"ROLE_USER\", parts: [{text}]}",
        ));
    };
    match m.get("role").and_then(Value::as_str) {
        Some("ROLE_USER" | "user") => {}
        other => {
            return Err(RpcError::invalid_params(
                "message.role",
                format!("`message.role` must be ROLE_USER, not {other:?}"),
            ));
        }
    }
    let has_id = matches!(m.get("messageId"), Some(Value::String(id)) if !id.is_empty());
    if !has_id {
        return Err(RpcError::invalid_params(
            "message.messageId",
            "`message.messageId` is required (a unique id the client makes)",
        ));
    }
    let parts = match m.get("parts") {
        Some(Value::Array(p)) if !p.is_empty() => p,
        _ => {
            return Err(RpcError::invalid_params(
                "message.parts",
                "`message.parts` must hold at least one part",
            ));
        }
    };
    let mut text = Vec::new();
    let mut data = Vec::new();
    for (i, part) in parts.iter().enumerate() {
        if let Some(t) = part.get("text").and_then(Value::as_str) {
            text.push(t.to_string());
        } else if let Some(d) = part.get("data") {
            text.push(d.to_string());
            data.push(d.clone());
        } else if part.get("raw").is_some() || part.get("url").is_some() {
            return Err(RpcError::content_type(format!(
                "message.parts[{i}] is a file: this agent takes text and data parts \
                 (text/plain, application/json)"
            )));
        } else {
            return Err(RpcError::invalid_params(
                "message.parts",
                format!("message.parts[{i}] has no text, data, raw or url"),
            ));
        }
    }
    let id_of =
        |name: &str| -> RpcResult<Option<String>> { Ok(str_param(m, name)?.map(str::to_string)) };
    Ok(Incoming {
        text: text.join("\n"),
        data,
        task_id: id_of("taskId")?,
        context_id: id_of("contextId")?,
    })
}

/// The decision a message on an input-required task carries: a data part in the shape of
/// `POST /sessions/{id}/approvals/{request_id}` (`{"type": "approve" | "edit" | "reject" |
/// "answer", …}`), or, for a question, its text as the answer.
fn decision_of(kind: HitlKind, msg: &Incoming) -> RpcResult<Decision> {
    let typed = msg.data.iter().find(|d| d.get("type").is_some());
    if let Some(d) = typed {
        let decision: Decision = serde_json::from_value(d.clone()).map_err(|e| {
            RpcError::invalid_params(
                "message.parts",
                format!(
                    "the decision's data part is not one: {e}; send {{\"type\": \"approve\"}}, \
                     {{\"type\": \"reject\", \"message\": \"…\"}}, {{\"type\": \"edit\", \
                     \"args\": {{…}}}} or {{\"type\": \"answer\", \"answer\": …}}"
                ),
            )
        })?;
        return Ok(decision);
    }
    match kind {
        HitlKind::Question if !msg.text.trim().is_empty() => Ok(Decision::Answer {
            answer: Value::String(msg.text.clone()),
        }),
        HitlKind::Question => Err(RpcError::invalid_params(
            "message.parts",
            "the task waits for an answer: send it as text",
        )),
        HitlKind::Approval => Err(RpcError::invalid_params(
            "message.parts",
            "the task waits for an approval: send a data part {\"type\": \"approve\"}, \
             {\"type\": \"reject\", \"message\": \"…\"} or {\"type\": \"edit\", \"args\": {…}}",
        )),
    }
}

fn configuration(
    params: &serde_json::Map<String, Value>,
) -> RpcResult<serde_json::Map<String, Value>> {
    match params.get("configuration") {
        None | Some(Value::Null) => Ok(Default::default()),
        Some(Value::Object(c)) => Ok(c.clone()),
        Some(_) => Err(RpcError::invalid_params(
            "configuration",
            "`configuration` must be an object",
        )),
    }
}

impl Agent {
    fn url(&self) -> AgentUrl<'_> {
        AgentUrl {
            base: &self.url_base,
            tenant: self.tenant,
            agent: &self.assistant.id,
        }
    }

    async fn extended_card(&self) -> RpcResult<Value> {
        Ok(card::extended_card(&self.state, &self.caller, &self.url(), &self.assistant).await?)
    }

    /// The caller's task `raw` at this agent, read back: anything else is TaskNotFound.
    async fn find(&self, raw: &str) -> RpcResult<Found> {
        let run = self.own_run(raw).await?;
        let fold = self.read_back(&run).await?;
        Ok(Found { run, fold })
    }

    /// The run of the caller's task `raw` at this agent (its events not read): anything else
    /// is TaskNotFound.
    async fn own_run(&self, raw: &str) -> RpcResult<Execution> {
        let not_found = || RpcError::task_not_found(raw);
        let run_id: RunId = raw.parse().map_err(|_| not_found())?;
        executions::get(&self.state.db, &self.caller.scope(), run_id)
            .await?
            .filter(|r| {
                r.user_id == self.caller.user_id()
                    && r.assistant_id == self.assistant.id.as_str()
                    && r.parent_execution_id.is_none()
            })
            .ok_or_else(not_found)
    }

    /// A run's stored events, folded.
    async fn read_back(&self, run: &Execution) -> RpcResult<TaskFold> {
        let scope = self.caller.scope();
        let ids = TaskIds {
            task: run.id.to_string(),
            context: run.session_id.to_string(),
        };
        let mut fold = TaskFold::new(ids, run.status == executions::ExecutionStatus::Queued);
        let Some(first) = events::first_seq_of_run(&self.state.db, &scope, run.id).await? else {
            return Ok(fold);
        };
        let mut after = first.saturating_sub(1);
        while !fold.ended() {
            let page =
                events::list_after(&self.state.db, &scope, run.session_id, after, PAGE).await?;
            for ev in &page {
                fold.take(ev);
            }
            match page.last() {
                Some(last) if page.len() as u64 == PAGE => after = last.seq,
                _ => break,
            }
        }
        // A run whose row says it ended without a stored `done` (a crash before the write).
        if !fold.ended()
            && run.status.is_finished()
            && run.status != executions::ExecutionStatus::Queued
        {
            fold.lose();
        }
        Ok(fold)
    }

    /// The caller's context (session) at this agent.
    async fn context(&self, raw: &str) -> RpcResult<SessionId> {
        let not_found = || RpcError::context_not_found(raw);
        let id: SessionId = raw.parse().map_err(|_| not_found())?;
        let s = sessions::get(&self.state.db, &self.caller.scope(), id)
            .await?
            .filter(|s| s.user_id == self.caller.user_id() && s.assistant_id == self.assistant.id)
            .ok_or_else(not_found)?;
        Ok(s.id)
    }

    async fn follow(
        &self,
        session: SessionId,
        run: RunId,
        after: u64,
    ) -> RpcResult<LocalBoxStream<'static, SessionEvent>> {
        Ok(self
            .state
            .engine
            .follow_run(
                self.caller.tenant(),
                &self.caller.user(),
                session,
                run,
                after,
            )
            .await?
            .boxed_local())
    }

    /// `SendMessage` / `SendStreamingMessage`: a new task (in a new context, or the one
    /// named), or the answer to an input-required task.
    async fn send_message(
        &self,
        params: &serde_json::Map<String, Value>,
        stream: bool,
    ) -> RpcResult<Answer> {
        let msg = parse_message(params)?;
        let config = configuration(params)?;
        // A push config comes with the message: checked (and its secrets sealed) before the
        // message does anything, stored once the task exists.
        const PUSH_AT: &str = "configuration.taskPushNotificationConfig";
        let push_config = match config.get("taskPushNotificationConfig") {
            None | Some(Value::Null) => None,
            Some(Value::Object(c)) => {
                if let Some(t) = c.get("tenant")
                    && !t.is_null()
                    && t.as_str() != Some(self.tenant.to_string().as_str())
                {
                    return Err(RpcError::invalid_params(
                        &format!("{PUSH_AT}.tenant"),
                        format!(
                            "`tenant` must be this agent's interface tenant, {:?}",
                            self.tenant
                        ),
                    ));
                }
                let wanted = push::parse_config(c, PUSH_AT)?;
                let sealed = self.check_config(&wanted, PUSH_AT).await?;
                Some((wanted, sealed))
            }
            Some(_) => {
                return Err(RpcError::invalid_params(
                    PUSH_AT,
                    format!("`{PUSH_AT}` must be an object"),
                ));
            }
        };
        let history_len = history_length(&config)?;
        let immediately = config
            .get("returnImmediately")
            .and_then(Value::as_bool)
            .unwrap_or(false);
        let (run, fold, input, start_wait) = match &msg.task_id {
            Some(task_id) => {
                let found = self.find(task_id).await?;
                if let Some(ctx) = &msg.context_id
                    && *ctx != found.run.session_id.to_string()
                {
                    return Err(RpcError::invalid_params(
                        "message.contextId",
                        format!(
                            "task {task_id} is of context {}, not {ctx}",
                            found.run.session_id
                        ),
                    ));
                }
                let state = found.fold.state();
                let Some((seq, request)) = found.fold.waiting() else {
                    return Err(if state.is_terminal() {
                        RpcError::unsupported(format!(
                            "task {task_id} is {} and takes no more messages: send a new \
                             message with its contextId to go on in the conversation",
                            state.as_str()
                        ))
                    } else {
                        RpcError::unsupported(format!(
                            "task {task_id} is {} and waits for no input: follow it \
                             (SubscribeToTask) or cancel it",
                            state.as_str()
                        ))
                    });
                };
                let decision = decision_of(request.kind, &msg)?;
                let approval: ApprovalId = request.request_id.parse().map_err(|_| {
                    RpcError::of_api(&ApiError::internal("a2a", "a stored request id is not one"))
                })?;
                if let Some((wanted, sealed)) = push_config {
                    let fold = self.read_back(&found.run).await?;
                    let after = fold.seen.unwrap_or(seq);
                    self.attach(
                        found.run.id,
                        found.run.session_id,
                        fold,
                        after,
                        &wanted,
                        sealed,
                    )
                    .await?;
                }
                // Subscribed before deciding, so nothing the run does next is missed.
                let run = self.follow(found.run.session_id, found.run.id, seq).await?;
                self.state
                    .engine
                    .decide(
                        self.caller.tenant(),
                        &self.caller.user(),
                        found.run.session_id,
                        approval,
                        decision,
                    )
                    .await?;
                (run, found.fold, found.run.input.clone(), Some(seq))
            }
            None => {
                let session = match &msg.context_id {
                    Some(raw) => Some(self.context(raw).await?),
                    None => None,
                };
                agentry_actors::check_message(&msg.text)
                    .map_err(|e| RpcError::invalid_params("message.parts", e.to_string()))?;
                // Where a watcher follows the new task from: nothing of it is stored yet.
                let before = match (&push_config, session) {
                    (Some(_), Some(s)) => {
                        events::max_seq(&self.state.db, &self.caller.scope(), s).await?
                    }
                    _ => 0,
                };
                let run = start_conversation_run(
                    &self.state,
                    &self.caller,
                    self.request_id.clone(),
                    ConversationRun {
                        session,
                        assistant: &self.assistant.id,
                        metadata: json!({"source": "a2a"}),
                        earlier: Vec::new(),
                        message: msg.text.clone(),
                        client_tools: Vec::new(),
                    },
                )
                .await?;
                let ids = TaskIds {
                    task: run.run_id().to_string(),
                    context: run.session_id().to_string(),
                };
                let fold = TaskFold::new(ids, run.accepted.queued);
                if let Some((wanted, sealed)) = push_config {
                    let (task, session) = (run.run_id(), run.session_id());
                    let first = push::fresh_fold(task, session, run.accepted.queued);
                    self.attach(task, session, first, before, &wanted, sealed)
                        .await?;
                }
                (run.boxed_local(), fold, msg.text.clone(), None)
            }
        };
        let history = trim_history(vec![fold.ids.input_message(&input)], history_len);
        let stream_of = TaskStream {
            run,
            fold,
            history,
            start_wait,
        };
        if stream {
            return Ok(Answer::Stream(Box::new(stream_of)));
        }
        if immediately {
            let TaskStream { fold, history, .. } = stream_of;
            return Ok(Answer::Result(json!({"task": fold.task(history, true)})));
        }
        let TaskStream {
            mut run,
            mut fold,
            history,
            ..
        } = stream_of;
        while !stops(&fold, start_wait) {
            match run.next().await {
                Some(ev) => {
                    fold.take(&ev.event);
                }
                None => {
                    fold.lose();
                }
            }
        }
        Ok(Answer::Result(json!({"task": fold.task(history, true)})))
    }

    async fn get_task(&self, params: &serde_json::Map<String, Value>) -> RpcResult<Value> {
        let id = str_param(params, "id")?
            .ok_or_else(|| RpcError::invalid_params("id", "`id` (the task's id) is required"))?;
        let n = history_length(params)?;
        let found = self.find(id).await?;
        let history = trim_history(vec![found.fold.ids.input_message(&found.run.input)], n);
        Ok(found.fold.task(history, true))
    }

    async fn list_tasks(&self, params: &serde_json::Map<String, Value>) -> RpcResult<Value> {
        let page_size = match int_param(params, "pageSize")? {
            None => DEFAULT_PAGE_SIZE,
            Some(n) if (1..=MAX_PAGE_SIZE as i64).contains(&n) => n as u64,
            Some(_) => {
                return Err(RpcError::invalid_params(
                    "pageSize",
                    format!("`pageSize` must be 1 to {MAX_PAGE_SIZE}"),
                ));
            }
        };
        let session = match str_param(params, "contextId")? {
            Some(raw) => match raw.parse::<SessionId>() {
                Ok(s) => Some(s),
                // Not a context of anyone's: an empty list, as for another user's.
                Err(_) => return Ok(empty_list(page_size)),
            },
            None => None,
        };
        let statuses = match str_param(params, "status")? {
            None | Some("TASK_STATE_UNSPECIFIED") => &[][..],
            Some(raw) => TaskState::parse(raw)
                .ok_or_else(|| {
                    RpcError::invalid_params(
                        "status",
                        format!("`status` {raw:?} is not a task state (TASK_STATE_WORKING, …)"),
                    )
                })?
                .executions(),
        };
        let updated_from = match str_param(params, "statusTimestampAfter")? {
            None => None,
            Some(raw) => Some(
                chrono::DateTime::parse_from_rfc3339(raw)
                    .map_err(|e| {
                        RpcError::invalid_params(
                            "statusTimestampAfter",
                            format!("`statusTimestampAfter` must be an ISO 8601 time: {e}"),
                        )
                    })?
                    .with_timezone(&chrono::Utc),
            ),
        };
        let after = match str_param(params, "pageToken")? {
            None => None,
            Some(raw) => Some(parse_page_token(raw).ok_or_else(|| {
                RpcError::invalid_params(
                    "pageToken",
                    "`pageToken` is not one this agent gave (use `nextPageToken` as it came)",
                )
            })?),
        };
        let n = history_length(params)?;
        let with_artifacts = params
            .get("includeArtifacts")
            .and_then(Value::as_bool)
            .unwrap_or(false);
        let (runs, total) = executions::list_by_update(
            &self.state.db,
            &self.caller.scope(),
            self.caller.user_id(),
            self.assistant.id.as_str(),
            session,
            statuses,
            updated_from,
            after,
            // One more than asked: whether another page follows.
            page_size + 1,
        )
        .await?;
        let more = runs.len() as u64 > page_size;
        let runs = &runs[..runs.len().min(page_size as usize)];
        let mut tasks = Vec::with_capacity(runs.len());
        for run in runs {
            if with_artifacts {
                let fold = self.read_back(run).await?;
                let history = trim_history(vec![fold.ids.input_message(&run.input)], n);
                tasks.push(fold.task(history, true));
            } else {
                tasks.push(task::task_of_row(run, n));
            }
        }
        let next = match runs.last() {
            Some(last) if more => page_token(&UpdateCursor {
                updated_at: last.updated_at,
                id: last.id,
            }),
            _ => String::new(),
        };
        Ok(json!({
            "tasks": tasks,
            "nextPageToken": next,
            "pageSize": page_size,
            "totalSize": total,
        }))
    }

    async fn cancel_task(&self, params: &serde_json::Map<String, Value>) -> RpcResult<Value> {
        let id = str_param(params, "id")?
            .ok_or_else(|| RpcError::invalid_params("id", "`id` (the task's id) is required"))?;
        let found = self.find(id).await?;
        let state = found.fold.state();
        if state.is_terminal() {
            return Err(RpcError::not_cancelable(state));
        }
        let history = vec![found.fold.ids.input_message(&found.run.input)];
        // Subscribed before cancelling, so the run's `done` is seen.
        let mut run = self
            .follow(
                found.run.session_id,
                found.run.id,
                found.fold.seen.unwrap_or(0),
            )
            .await?;
        let mut fold = found.fold;
        match self
            .state
            .engine
            .cancel(
                self.caller.tenant(),
                &self.caller.user(),
                found.run.session_id,
            )
            .await
        {
            Ok(_) => {}
            // It ended meanwhile.
            Err(agentry_actors::EngineError::NoActiveRun) => {
                drop(run);
                let fold = self.read_back(&found.run).await?;
                let state = fold.state();
                if state.is_terminal() {
                    return Err(RpcError::not_cancelable(state));
                }
                return Ok(fold.task(history, true));
            }
            Err(e) => return Err(e.into()),
        }
        let _ = tokio::time::timeout(CANCEL_WAIT, async {
            while !fold.ended() {
                match run.next().await {
                    Some(ev) => {
                        fold.take(&ev.event);
                    }
                    None => {
                        fold.lose();
                    }
                }
            }
        })
        .await;
        Ok(fold.task(history, true))
    }

    /// `SubscribeToTask`: the task as it stands, then its updates until it is terminal or
    /// waits for input anew. A terminal task has nothing to follow (UnsupportedOperationError).
    async fn subscribe(&self, params: &serde_json::Map<String, Value>) -> RpcResult<Answer> {
        let id = str_param(params, "id")?
            .ok_or_else(|| RpcError::invalid_params("id", "`id` (the task's id) is required"))?;
        let found = self.find(id).await?;
        let state = found.fold.state();
        if state.is_terminal() {
            return Err(RpcError::unsupported(format!(
                "task {id} is {}: nothing more will happen to it (GetTask reads it)",
                state.as_str()
            )));
        }
        let after = match found.fold.seen {
            Some(s) => s,
            None => events::first_seq_of_run(&self.state.db, &self.caller.scope(), found.run.id)
                .await?
                .map(|f| f.saturating_sub(1))
                .unwrap_or(0),
        };
        let run = self
            .follow(found.run.session_id, found.run.id, after)
            .await?;
        let start_wait = found.fold.waiting().map(|(seq, _)| seq);
        Ok(Answer::Stream(Box::new(TaskStream {
            history: vec![found.fold.ids.input_message(&found.run.input)],
            run,
            fold: found.fold,
            start_wait,
        })))
    }
}

fn empty_list(page_size: u64) -> Value {
    json!({"tasks": [], "nextPageToken": "", "pageSize": page_size, "totalSize": 0})
}

/// A `ListTasks` cursor: the last task's update time (microseconds) and id.
fn page_token(c: &UpdateCursor) -> String {
    format!("{}.{}", c.updated_at.timestamp_micros(), c.id.0.simple())
}

fn parse_page_token(raw: &str) -> Option<UpdateCursor> {
    let (micros, id) = raw.split_once('.')?;
    Some(UpdateCursor {
        updated_at: chrono::DateTime::from_timestamp_micros(micros.parse().ok()?)?,
        id: RunId(uuid::Uuid::parse_str(id).ok()?),
    })
}

/// Whether a stream (or a blocking send) is over: the task ended, or waits for input on a
/// request other than the one it waited on when the stream began.
fn stops(fold: &TaskFold, start_wait: Option<u64>) -> bool {
    match &fold.standing {
        Standing::Done(_) | Standing::Lost => true,
        Standing::Waiting(seq, _) => Some(*seq) != start_wait,
        Standing::Queued | Standing::Working => false,
    }
}

/// A task's updates, about to be answered as a stream (or collected).
struct TaskStream {
    run: LocalBoxStream<'static, SessionEvent>,
    fold: TaskFold,
    history: Vec<Value>,
    start_wait: Option<u64>,
}

impl TaskStream {
    /// Server-Sent Events, one JSON-RPC response per `data:` line: the task first, then each
    /// update, until [`stops`]. A client that hangs up stops the reading, not the run.
    fn respond(self, id: Value) -> HttpResponse {
        let TaskStream {
            mut run,
            mut fold,
            history,
            start_wait,
        } = self;
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel::<Bytes>();
        let frame = move |result: Value| {
            Bytes::from(format!(
                "data: {}\n\n",
                json!({"jsonrpc": "2.0", "id": id, "result": result})
            ))
        };
        let _ = tx.send(frame(json!({"task": fold.task(history, true)})));
        actix_web::rt::spawn(async move {
            while !stops(&fold, start_wait) {
                let ev = tokio::select! {
                    ev = run.next() => ev,
                    () = tx.closed() => return,
                };
                let out = match ev {
                    Some(ev) => fold.take(&ev.event),
                    None => fold.lose(),
                };
                for update in out {
                    let _ = tx.send(frame(update));
                }
            }
        });
        let frames = tokio_stream::wrappers::UnboundedReceiverStream::new(rx);
        HttpResponse::Ok()
            .insert_header((header::CONTENT_TYPE, "text/event-stream"))
            .insert_header((header::CACHE_CONTROL, "no-cache"))
            .insert_header(("x-accel-buffering", "no"))
            .streaming(with_keep_alive(frames, KEEP_ALIVE))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_page_token_names_its_cursor() {
        let c = UpdateCursor {
            updated_at: chrono::DateTime::from_timestamp_micros(1_700_000_000_123_456).unwrap(),
            id: RunId::new(),
        };
        assert_eq!(parse_page_token(&page_token(&c)), Some(c));
        for bad in ["", "x", "1.", ".abc", "1.nothex", "abc.0"] {
            assert_eq!(parse_page_token(bad), None, "{bad}");
        }
    }

    #[test]
    fn calls_are_checked_as_json_rpc_2() {
        let ok = parse_call(
            json!({"jsonrpc": "2.0", "id": 7, "method": "GetTask", "params": {"id": "x"}}),
        )
        .ok()
        .unwrap();
        assert_eq!((ok.id, ok.method.as_str()), (json!(7), "GetTask"));
        for (bad, code) in [
            (json!([1]), -32600),
            (
                json!({"jsonrpc": "1.0", "id": 1, "method": "GetTask"}),
                -32600,
            ),
            (json!({"jsonrpc": "2.0", "id": 1, "method": 3}), -32600),
            (
                json!({"jsonrpc": "2.0", "id": {}, "method": "GetTask"}),
                -32600,
            ),
            (
                json!({"jsonrpc": "2.0", "id": 1, "method": "GetTask", "params": [1]}),
                -32602,
            ),
        ] {
            let Err((_, e)) = parse_call(bad.clone()) else {
                panic!("{bad} passed");
            };
            assert_eq!(e.code, code, "{bad}");
        }
    }

    #[test]
    fn decisions_come_from_a_typed_data_part_or_a_questions_text() {
        let msg = |text: &str, data: Vec<Value>| Incoming {
            text: text.into(),
            data,
            task_id: None,
            context_id: None,
        };
        assert!(matches!(
            decision_of(
                HitlKind::Approval,
                &msg("", vec![json!({"type": "approve"})])
            ),
            Ok(Decision::Approve { .. })
        ));
        assert!(matches!(
            decision_of(
                HitlKind::Approval,
                &msg("", vec![json!({"type": "reject", "message": "no"})])
            ),
            Ok(Decision::Reject { message: Some(m) }) if m == "no"
        ));
        assert!(decision_of(HitlKind::Approval, &msg("yes please", vec![])).is_err());
        assert!(decision_of(HitlKind::Approval, &msg("", vec![json!({"type": "maybe"})])).is_err());
        assert!(matches!(
            decision_of(HitlKind::Question, &msg("blue", vec![])),
            Ok(Decision::Answer { answer }) if answer == "blue"
        ));
    }

    #[test]
    fn agentry_errors_keep_their_code_in_the_error_info() {
        let e = RpcError::of_api(&ApiError::new(ErrorCode::RunInProgress, "busy"));
        let body = e.body(&json!("r1"));
        assert_eq!(body["error"]["code"], -32004);
        assert_eq!(body["error"]["data"][0]["@type"], ERROR_INFO);
        assert_eq!(
            body["error"]["data"][0]["metadata"]["error_code"],
            "run_in_progress"
        );
        assert_eq!(body["id"], "r1");
        let e = RpcError::of_api(&ApiError::new(ErrorCode::Unauthorized, "no key"));
        assert_eq!(e.code, -32000);
    }
}
