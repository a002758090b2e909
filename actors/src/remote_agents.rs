//! Remote A2A agents as `task` targets (issue 27, item 5): Agentry as an A2A v1.0 client,
//! JSON-RPC binding, over plain HTTP (reqwest, Server-Sent Events for the streams).
//!
//! - [`RemoteAgents::fetch_card`] reads and checks an agent's card when a tenant admin registers
//!   it: an A2A v1 card with a JSON-RPC interface whose URL the network policy allows.
//! - [`RemoteAgents::delegate`] runs one delegated task: `SendStreamingMessage` (or
//!   `SendMessage` when the card says it does not stream), its updates handed to a
//!   [`RemoteListener`] as they come; `input-required` asks the listener (the user) and sends the
//!   answer as a `SendMessage` on the same task; a cancel sends `CancelTask`; the agent's time
//!   is bounded by the registration's `timeout_secs` (waiting for the user does not count).
//!
//! Every connection goes through the network guard (`agentry_builtin::net_guard`): host names
//! are resolved and checked by the client's own resolver on every connection, IP literals are
//! checked before the request, redirects are not followed.

use std::time::{Duration, Instant};

use agentry_builtin::BuiltinConfig;
use agentry_builtin::net_guard::{GuardedResolver, check_parsed};
use agentry_sealing::SecretBox;
use agentry_store::remote_agents::RemoteAgent;
use agentry_tools::tool::ToolError;
use async_trait::async_trait;
use futures::StreamExt;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

/// The A2A protocol version this client speaks (the `A2A-Version` header).
pub const A2A_VERSION: &str = "1.0";
/// The well-known path of an agent's card under its base URL.
pub const CARD_PATH: &str = ".well-known/agent-card.json";
/// Largest card read.
const MAX_CARD_BYTES: usize = 1 << 20;
/// How long a `CancelTask` sent on the way out may take.
const CANCEL_TIMEOUT: Duration = Duration::from_secs(10);

/// How Agentry authenticates to a remote agent.
#[derive(Clone, PartialEq, Eq)]
pub enum RemoteAuth {
    None,
    Bearer(String),
    ApiKey { header: String, key: String },
}

impl std::fmt::Debug for RemoteAuth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.kind())
    }
}

impl RemoteAuth {
    /// `none`, `bearer` or `api_key`, as stored.
    pub fn kind(&self) -> &'static str {
        match self {
            RemoteAuth::None => "none",
            RemoteAuth::Bearer(_) => "bearer",
            RemoteAuth::ApiKey { .. } => "api_key",
        }
    }

    fn apply(&self, rb: reqwest::RequestBuilder) -> reqwest::RequestBuilder {
        match self {
            RemoteAuth::None => rb,
            RemoteAuth::Bearer(token) => rb.bearer_auth(token),
            RemoteAuth::ApiKey { header, key } => rb.header(header.as_str(), key.as_str()),
        }
    }
}

/// A card that passed the checks.
#[derive(Debug, Clone, PartialEq)]
pub struct CheckedCard {
    pub name: String,
    pub description: String,
    /// The JSON-RPC interface's URL.
    pub endpoint_url: String,
    /// The card as read.
    pub card: Value,
}

/// Why a card was not accepted: the text says what to fix.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CardError {
    /// The URL (or the card's interface URL) is one the network policy refuses.
    #[error("{0}")]
    Refused(String),
    /// The card could not be read (no answer, an HTTP error status, a timeout).
    #[error("{0}")]
    Unreachable(String),
    /// The card was read but is not an A2A v1 card with a JSON-RPC interface.
    #[error("{0}")]
    Invalid(String),
}

/// Where a card is: `url` itself when it names a `.json` file, else its well-known path.
pub fn card_url(url: &str) -> String {
    let url = url.trim();
    if url.ends_with(".json") {
        url.to_string()
    } else {
        format!("{}/{CARD_PATH}", url.trim_end_matches('/'))
    }
}

/// Check a card: an object with a `name`, and among `supportedInterfaces` one of the JSON-RPC
/// binding at protocol version 1.x with an http(s) URL. Its tenant (`tenant`), if it names one,
/// goes with every request.
pub fn check_card(card: &Value) -> Result<(String, String, String), String> {
    let Value::Object(obj) = card else {
        return Err("the agent card is not a JSON object".into());
    };
    let name = obj
        .get("name")
        .and_then(Value::as_str)
        .map(str::trim)
        .filter(|n| !n.is_empty())
        .ok_or("the agent card has no `name`")?;
    let description = obj
        .get("description")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let Some(Value::Array(interfaces)) = obj.get("supportedInterfaces") else {
        return Err(
            "the agent card has no `supportedInterfaces`: it is not an A2A v1.0 card (an A2A 0.x agent is not supported)"
                .into(),
        );
    };
    let jsonrpc = interfaces.iter().find(|i| {
        i.get("protocolBinding").and_then(Value::as_str) == Some("JSONRPC")
            && i.get("protocolVersion")
                .and_then(Value::as_str)
                .is_some_and(|v| v == "1" || v.starts_with("1."))
    });
    let Some(iface) = jsonrpc else {
        let seen: Vec<String> = interfaces
            .iter()
            .map(|i| {
                format!(
                    "{} {}",
                    i.get("protocolBinding")
                        .and_then(Value::as_str)
                        .unwrap_or("?"),
                    i.get("protocolVersion")
                        .and_then(Value::as_str)
                        .unwrap_or("?")
                )
            })
            .collect();
        return Err(format!(
            "the agent card has no JSON-RPC interface of A2A 1.x (it offers: {}); Agentry speaks the JSON-RPC binding of A2A v1.0",
            if seen.is_empty() {
                "nothing".to_string()
            } else {
                seen.join(", ")
            }
        ));
    };
    let url = iface
        .get("url")
        .and_then(Value::as_str)
        .map(str::trim)
        .filter(|u| !u.is_empty())
        .ok_or("the agent card's JSON-RPC interface has no `url`")?;
    match reqwest::Url::parse(url) {
        Ok(u) if matches!(u.scheme(), "http" | "https") => {}
        _ => {
            return Err(format!(
                "the agent card's JSON-RPC interface URL {:?} is not an http(s) URL",
                url.chars().take(200).collect::<String>()
            ));
        }
    }
    Ok((name.to_string(), description.to_string(), url.to_string()))
}

/// The tenant of the card's JSON-RPC interface (sent as `params.tenant`), if it names one.
fn interface_tenant(card: &Value) -> Option<String> {
    card.get("supportedInterfaces")?
        .as_array()?
        .iter()
        .find(|i| i.get("protocolBinding").and_then(Value::as_str) == Some("JSONRPC"))?
        .get("tenant")?
        .as_str()
        .filter(|t| !t.is_empty())
        .map(str::to_string)
}

/// The remote agents' HTTP client: the network policy in its resolver, no proxy, no redirects;
/// and the box that opens the stored credentials.
pub struct RemoteAgents {
    client: reqwest::Client,
    net: BuiltinConfig,
    secrets: Option<SecretBox>,
}

impl RemoteAgents {
    pub fn new(net: &BuiltinConfig, secrets: Option<SecretBox>) -> Result<Self, reqwest::Error> {
        let client = reqwest::Client::builder()
            .no_proxy()
            .dns_resolver(std::sync::Arc::new(GuardedResolver::new(net)))
            .redirect(reqwest::redirect::Policy::none())
            .connect_timeout(Duration::from_secs(10))
            .build()?;
        Ok(RemoteAgents {
            client,
            net: net.clone(),
            secrets,
        })
    }

    /// `url` checked against the network policy (IP literals here; names again by the
    /// resolver on every connection).
    async fn allowed(&self, url: &str, what: &str) -> Result<reqwest::Url, CardError> {
        let parsed = reqwest::Url::parse(url)
            .map_err(|e| CardError::Invalid(format!("{what} is not a valid URL ({e})")))?;
        match check_parsed(parsed.clone(), &self.net).await {
            Ok(_) => Ok(parsed),
            Err(ToolError::Refused(m)) => {
                Err(CardError::Refused(format!("{what} is refused: {m}")))
            }
            Err(e) => Err(CardError::Unreachable(format!("{what} is refused: {e}"))),
        }
    }

    /// Read and check the card of the agent at `url` (a base URL or a card's URL).
    pub async fn fetch_card(
        &self,
        url: &str,
        auth: &RemoteAuth,
        timeout: Duration,
    ) -> Result<CheckedCard, CardError> {
        let at = card_url(url);
        let parsed = self.allowed(&at, "the agent card's URL").await?;
        let request = auth
            .apply(self.client.get(parsed))
            .header("A2A-Version", A2A_VERSION)
            .header("Accept", "application/json")
            .timeout(timeout);
        let response = request.send().await.map_err(|e| {
            CardError::Unreachable(format!(
                "the agent card at {at} could not be read: {}",
                http_error(&e)
            ))
        })?;
        let status = response.status();
        if !status.is_success() {
            return Err(CardError::Unreachable(format!(
                "the agent card at {at} answered HTTP {status}{}",
                if status.is_redirection() {
                    " (redirects are not followed: register the URL it points to)"
                } else {
                    ""
                }
            )));
        }
        let mut body = Vec::new();
        let mut stream = response.bytes_stream();
        while let Some(chunk) = stream.next().await {
            let chunk = chunk.map_err(|e| {
                CardError::Unreachable(format!(
                    "reading the agent card at {at} failed: {}",
                    http_error(&e)
                ))
            })?;
            body.extend_from_slice(&chunk);
            if body.len() > MAX_CARD_BYTES {
                return Err(CardError::Invalid(format!(
                    "the agent card at {at} is over {MAX_CARD_BYTES} bytes"
                )));
            }
        }
        let card: Value = serde_json::from_slice(&body)
            .map_err(|e| CardError::Invalid(format!("the agent card at {at} is not JSON ({e})")))?;
        let (name, description, endpoint) = check_card(&card).map_err(CardError::Invalid)?;
        self.allowed(&endpoint, "the agent card's JSON-RPC interface URL")
            .await?;
        Ok(CheckedCard {
            name,
            description,
            endpoint_url: endpoint,
            card,
        })
    }

    /// The credential of a stored agent, opened.
    pub fn auth_of(&self, agent: &RemoteAgent) -> Result<RemoteAuth, String> {
        let secret = match &agent.spec.credential_sealed {
            None => None,
            Some(sealed) => {
                let Some(secrets) = &self.secrets else {
                    return Err("this server has no encryption key to open the remote agent's stored credential; ask the platform operator".into());
                };
                Some(secrets.open(sealed).map_err(|e| {
                    tracing::error!(agent = %agent.id, tenant = %agent.tenant_id, error = %e, "a remote agent's credential does not open");
                    "its stored credential cannot be opened (the server's encryption key changed?); register the agent again".to_string()
                })?)
            }
        };
        Ok(match (agent.spec.auth_kind.as_str(), secret) {
            ("bearer", Some(token)) => RemoteAuth::Bearer(token),
            ("api_key", Some(key)) => RemoteAuth::ApiKey {
                header: agent.spec.auth_header.clone().unwrap_or_default(),
                key,
            },
            _ => RemoteAuth::None,
        })
    }

    /// One JSON-RPC call; a streaming method's answer as its events, a plain one as one event.
    async fn call(
        &self,
        endpoint: &reqwest::Url,
        auth: &RemoteAuth,
        method: &str,
        params: Value,
        stream: bool,
    ) -> Result<RpcEvents, RemoteError> {
        let body = json!({
            "jsonrpc": "2.0",
            "id": uuid::Uuid::new_v4().to_string(),
            "method": method,
            "params": params,
        });
        let response = auth
            .apply(self.client.post(endpoint.clone()))
            .header("A2A-Version", A2A_VERSION)
            .header(
                "Accept",
                if stream {
                    "text/event-stream"
                } else {
                    "application/json"
                },
            )
            .json(&body)
            .send()
            .await
            .map_err(|e| RemoteError::Unreachable(format!("{method}: {}", http_error(&e))))?;
        let status = response.status();
        let is_sse = response
            .headers()
            .get(reqwest::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.starts_with("text/event-stream"));
        if is_sse && status.is_success() {
            let events = agentry_llm::sse::events(response.bytes_stream()).map(|item| match item {
                Ok(e) => serde_json::from_str::<Value>(&e.data).map_err(|err| {
                    RemoteError::Protocol(format!("a stream event is not JSON ({err})"))
                }),
                Err(agentry_llm::sse::SseError::Body(e)) => Err(RemoteError::Unreachable(format!(
                    "the stream broke: {}",
                    http_error(&e)
                ))),
                Err(agentry_llm::sse::SseError::Malformed(m)) => Err(RemoteError::Protocol(
                    format!("the stream is not valid Server-Sent Events ({m})"),
                )),
            });
            return Ok(Box::pin(events));
        }
        let bytes = response
            .bytes()
            .await
            .map_err(|e| RemoteError::Unreachable(format!("{method}: {}", http_error(&e))))?;
        let parsed: Result<Value, _> = serde_json::from_slice(&bytes);
        match parsed {
            // A JSON-RPC answer, whatever the status: its error says more than the status.
            Ok(v)
                if v.get("jsonrpc").is_some()
                    && (v.get("result").is_some() || v.get("error").is_some()) =>
            {
                Ok(Box::pin(futures::stream::once(async move { Ok(v) })))
            }
            _ if status == reqwest::StatusCode::UNAUTHORIZED
                || status == reqwest::StatusCode::FORBIDDEN =>
            {
                Err(RemoteError::Protocol(format!(
                    "{method} was refused with HTTP {status}: the remote agent does not accept the registered credential"
                )))
            }
            _ => Err(RemoteError::Protocol(format!(
                "{method} answered HTTP {status} without a JSON-RPC response"
            ))),
        }
    }

    /// Run one delegated task to its end. `description` starts it; its updates go to
    /// `listener`; `cancel` stops it (and sends `CancelTask`).
    pub async fn delegate(
        &self,
        agent: &RemoteAgent,
        description: &str,
        listener: &dyn RemoteListener,
        cancel: &CancellationToken,
    ) -> RemoteOutcome {
        let auth = match self.auth_of(agent) {
            Ok(a) => a,
            Err(e) => return RemoteOutcome::failed(e),
        };
        let endpoint = match self
            .allowed(&agent.spec.endpoint_url, "the remote agent's URL")
            .await
        {
            Ok(u) => u,
            Err(e) => return RemoteOutcome::failed(e.to_string()),
        };
        let card: Value = serde_json::from_str(&agent.spec.card).unwrap_or(Value::Null);
        let streaming = card["capabilities"]["streaming"].as_bool().unwrap_or(false);
        let tenant = interface_tenant(&card);
        let mut run = TaskRun {
            agents: self,
            endpoint,
            auth,
            tenant,
            streaming,
            budget: Duration::from_secs(u64::from(agent.spec.timeout_secs.max(1))),
            used: Duration::ZERO,
            task_id: None,
            context_id: None,
            answer: Answer::default(),
        };
        let mut message = user_message(vec![json!({"text": description})], None, None);
        loop {
            let step = tokio::select! {
                s = run.step(message, listener) => Some(s),
                _ = cancel.cancelled() => None,
            };
            let Some(step) = step else {
                run.cancel_remote().await;
                return run.outcome(
                    RemoteEnd::Cancelled,
                    Some("the sub-task was cancelled".into()),
                );
            };
            match step {
                Step::Done(outcome) => return outcome,
                Step::TimedOut => {
                    run.cancel_remote().await;
                    return run.outcome(
                        RemoteEnd::TimedOut,
                        Some(format!(
                            "the remote agent {:?} did not finish within its timeout ({} s); its task was cancelled",
                            agent.id.as_str(),
                            run.budget.as_secs()
                        )),
                    );
                }
                Step::InputRequired(question) => {
                    let answer = tokio::select! {
                        a = listener.ask(question) => a,
                        _ = cancel.cancelled() => Err(AskEnd::Cancelled),
                    };
                    match answer {
                        Ok(text) => {
                            message = user_message(
                                vec![json!({"text": text})],
                                run.task_id.clone(),
                                run.context_id.clone(),
                            );
                        }
                        Err(end) => {
                            run.cancel_remote().await;
                            let (status, why) = match end {
                                AskEnd::Declined => (
                                    RemoteEnd::Rejected,
                                    "the user declined to answer the remote agent's question",
                                ),
                                AskEnd::TimedOut => (
                                    RemoteEnd::Rejected,
                                    "the user did not answer the remote agent's question in time",
                                ),
                                AskEnd::Cancelled => {
                                    (RemoteEnd::Cancelled, "the sub-task was cancelled")
                                }
                                AskEnd::Unavailable => (
                                    RemoteEnd::Failed,
                                    "the remote agent's question could not be put to the user",
                                ),
                            };
                            return run.outcome(status, Some(why.into()));
                        }
                    }
                }
            }
        }
    }
}

/// The events of a JSON-RPC answer: each a JSON-RPC response object.
type RpcEvents = std::pin::Pin<Box<dyn futures::Stream<Item = Result<Value, RemoteError>> + Send>>;

#[derive(Debug, Clone, thiserror::Error)]
enum RemoteError {
    #[error("the remote agent could not be reached or stopped answering ({0})")]
    Unreachable(String),
    #[error("the remote agent's answer is not A2A JSON-RPC ({0})")]
    Protocol(String),
}

/// A reqwest error's cause chain, for a person.
fn http_error(e: &reqwest::Error) -> String {
    let mut s = if e.is_timeout() {
        "timed out".to_string()
    } else if e.is_connect() {
        "could not connect".to_string()
    } else {
        e.to_string()
    };
    let mut source = std::error::Error::source(e);
    while let Some(inner) = source {
        s.push_str(": ");
        s.push_str(&inner.to_string());
        source = inner.source();
    }
    s
}

fn user_message(parts: Vec<Value>, task_id: Option<String>, context_id: Option<String>) -> Value {
    let mut m = json!({
        "messageId": uuid::Uuid::new_v4().to_string(),
        "role": "ROLE_USER",
        "parts": parts,
    });
    if let Some(t) = task_id {
        m["taskId"] = json!(t);
    }
    if let Some(c) = context_id {
        m["contextId"] = json!(c);
    }
    m
}

/// The text of a message's text parts (data parts as JSON), joined.
fn message_text(message: &Value) -> String {
    message["parts"]
        .as_array()
        .map(|parts| {
            parts
                .iter()
                .filter_map(|p| {
                    p.get("text")
                        .and_then(Value::as_str)
                        .map(str::to_string)
                        .or_else(|| p.get("data").map(Value::to_string))
                })
                .collect::<Vec<_>>()
                .join("\n")
        })
        .unwrap_or_default()
}

/// The answer as the artifacts build it: artifact id → text, in order of first sight.
#[derive(Debug, Default)]
struct Answer {
    artifacts: Vec<(String, String)>,
    /// The last status message of the agent's (an answer when there is no artifact).
    status_text: Option<String>,
}

impl Answer {
    /// Fold an artifact (whole, or a chunk with `append`); the new text.
    fn artifact(&mut self, artifact: &Value, append: bool) -> String {
        let id = artifact["artifactId"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        let text = message_text(artifact);
        match self.artifacts.iter_mut().find(|(a, _)| *a == id) {
            Some((_, t)) if append => t.push_str(&text),
            Some((_, t)) => *t = text.clone(),
            None => self.artifacts.push((id, text.clone())),
        }
        text
    }

    fn text(&self) -> Option<String> {
        let joined: Vec<&str> = self
            .artifacts
            .iter()
            .map(|(_, t)| t.as_str())
            .filter(|t| !t.is_empty())
            .collect();
        if joined.is_empty() {
            self.status_text.clone()
        } else {
            Some(joined.join("\n\n"))
        }
    }
}

/// How a remote task ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RemoteEnd {
    Completed,
    Failed,
    Cancelled,
    Rejected,
    TimedOut,
}

#[derive(Debug, Clone, PartialEq)]
pub struct RemoteOutcome {
    pub end: RemoteEnd,
    /// The agent's answer (its artifacts' text, or its last message).
    pub answer: Option<String>,
    /// Why it did not complete.
    pub error: Option<String>,
    /// The remote task's id, once known.
    pub task_id: Option<String>,
}

impl RemoteOutcome {
    fn end(end: RemoteEnd, answer: Option<String>, error: Option<String>) -> Self {
        RemoteOutcome {
            end,
            answer,
            error,
            task_id: None,
        }
    }

    fn failed(error: String) -> Self {
        Self::end(RemoteEnd::Failed, None, Some(error))
    }
}

/// Why the user gave no answer to a remote agent's question.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AskEnd {
    Declined,
    TimedOut,
    Cancelled,
    Unavailable,
}

/// Who hears a delegated task as it goes: the child run.
#[async_trait]
pub trait RemoteListener: Send + Sync {
    /// The remote task is known (its id and context).
    fn started(&self, task_id: &str, context_id: &str);
    /// A piece of the answer as it streams.
    fn text(&self, chunk: &str);
    /// A status message of the agent's while it works.
    fn status(&self, state: &str, message: &str);
    /// The agent asks the user (`input-required`): the answer's text.
    async fn ask(&self, question: String) -> Result<String, AskEnd>;
}

enum Step {
    Done(RemoteOutcome),
    InputRequired(String),
    TimedOut,
}

/// One delegated task in progress.
struct TaskRun<'a> {
    agents: &'a RemoteAgents,
    endpoint: reqwest::Url,
    auth: RemoteAuth,
    tenant: Option<String>,
    streaming: bool,
    /// The agent's time: all of it spent while the agent works (not while the user answers).
    budget: Duration,
    used: Duration,
    task_id: Option<String>,
    context_id: Option<String>,
    answer: Answer,
}

impl TaskRun<'_> {
    fn params(&self, mut params: Value) -> Value {
        if let Some(t) = &self.tenant {
            params["tenant"] = json!(t);
        }
        params
    }

    /// Send `message`, follow the task until it ends or asks for input.
    async fn step(&mut self, message: Value, listener: &dyn RemoteListener) -> Step {
        let Some(left) = self.budget.checked_sub(self.used) else {
            return Step::TimedOut;
        };
        let started = Instant::now();
        let r = tokio::time::timeout(left, self.follow(message, listener)).await;
        self.used += started.elapsed();
        match r {
            Ok(step) => step,
            Err(_) => Step::TimedOut,
        }
    }

    async fn follow(&mut self, message: Value, listener: &dyn RemoteListener) -> Step {
        let (method, params) = if self.streaming {
            ("SendStreamingMessage", json!({"message": message}))
        } else {
            ("SendMessage", json!({"message": message}))
        };
        let params = self.params(params);
        let mut events = match self
            .agents
            .call(&self.endpoint, &self.auth, method, params, self.streaming)
            .await
        {
            Ok(e) => e,
            Err(e) => return self.failed(e.to_string()),
        };
        while let Some(event) = events.next().await {
            let event = match event {
                Ok(e) => e,
                Err(e) => return self.failed(e.to_string()),
            };
            if let Some(err) = event.get("error") {
                return self.failed(format!(
                    "the remote agent answered error {}: {}",
                    err["code"],
                    err["message"].as_str().unwrap_or("(no message)")
                ));
            }
            let result = &event["result"];
            if let Some(step) = self.fold(result, listener) {
                return step;
            }
        }
        self.failed("the remote agent's answer ended before its task did (no final state)".into())
    }

    fn outcome(&self, end: RemoteEnd, error: Option<String>) -> RemoteOutcome {
        RemoteOutcome {
            end,
            answer: self.answer.text(),
            error,
            task_id: self.task_id.clone(),
        }
    }

    fn failed(&self, error: String) -> Step {
        Step::Done(self.outcome(RemoteEnd::Failed, Some(error)))
    }

    /// Fold one StreamResponse (or SendMessage result) in; `Some` when the task ended or asks.
    fn fold(&mut self, result: &Value, listener: &dyn RemoteListener) -> Option<Step> {
        if let Some(task) = result.get("task") {
            self.known(task["id"].as_str(), task["contextId"].as_str(), listener);
            for a in task["artifacts"].as_array().into_iter().flatten() {
                let text = self.answer.artifact(a, false);
                if !text.is_empty() {
                    listener.text(&text);
                }
            }
            return self.status(&task["status"], listener);
        }
        if let Some(u) = result.get("statusUpdate") {
            self.known(u["taskId"].as_str(), u["contextId"].as_str(), listener);
            return self.status(&u["status"], listener);
        }
        if let Some(u) = result.get("artifactUpdate") {
            self.known(u["taskId"].as_str(), u["contextId"].as_str(), listener);
            let append = u["append"].as_bool().unwrap_or(false);
            let text = self.answer.artifact(&u["artifact"], append);
            if !text.is_empty() {
                listener.text(&text);
            }
            return None;
        }
        if let Some(m) = result.get("message") {
            // A direct answer: no task, done.
            let text = message_text(m);
            listener.text(&text);
            self.answer.status_text = Some(text.clone());
            return Some(Step::Done(RemoteOutcome {
                task_id: self.task_id.clone(),
                ..RemoteOutcome::end(RemoteEnd::Completed, Some(text), None)
            }));
        }
        Some(self.failed(format!(
            "the remote agent sent a result that is none of task, statusUpdate, artifactUpdate, message: {}",
            result.to_string().chars().take(200).collect::<String>()
        )))
    }

    fn known(&mut self, task: Option<&str>, context: Option<&str>, listener: &dyn RemoteListener) {
        if self.task_id.is_none()
            && let Some(t) = task.filter(|t| !t.is_empty())
        {
            self.task_id = Some(t.to_string());
            self.context_id = context.filter(|c| !c.is_empty()).map(str::to_string);
            listener.started(t, context.unwrap_or_default());
        }
    }

    fn status(&mut self, status: &Value, listener: &dyn RemoteListener) -> Option<Step> {
        let state = status["state"].as_str().unwrap_or("TASK_STATE_UNSPECIFIED");
        let text = status
            .get("message")
            .map(message_text)
            .filter(|t| !t.is_empty());
        let said = |what: &str| {
            format!(
                "{what}{}",
                text.as_deref()
                    .map(|t| format!(": {t}"))
                    .unwrap_or_default()
            )
        };
        let (end, error) = match state {
            "TASK_STATE_COMPLETED" => {
                if let Some(t) = &text {
                    self.answer.status_text = Some(t.clone());
                }
                (RemoteEnd::Completed, None)
            }
            "TASK_STATE_INPUT_REQUIRED" => {
                return Some(Step::InputRequired(text.unwrap_or_else(|| {
                    "The remote agent needs more input to go on.".into()
                })));
            }
            "TASK_STATE_FAILED" => (RemoteEnd::Failed, Some(said("the remote agent's task failed"))),
            "TASK_STATE_CANCELED" => (
                RemoteEnd::Failed,
                Some(said("the remote agent cancelled its task")),
            ),
            "TASK_STATE_REJECTED" => (
                RemoteEnd::Failed,
                Some(said("the remote agent rejected the task")),
            ),
            "TASK_STATE_AUTH_REQUIRED" => (
                RemoteEnd::Failed,
                Some("the remote agent asks for authentication Agentry cannot give (auth-required); register it with a credential it accepts".into()),
            ),
            _ => {
                if let Some(t) = &text {
                    listener.status(state, t);
                }
                return None;
            }
        };
        Some(Step::Done(self.outcome(end, error)))
    }

    /// `CancelTask` on the remote task, if it has one; failures are only logged.
    async fn cancel_remote(&self) {
        let Some(id) = &self.task_id else {
            return;
        };
        let params = self.params(json!({"id": id}));
        let sent = tokio::time::timeout(
            CANCEL_TIMEOUT,
            self.agents
                .call(&self.endpoint, &self.auth, "CancelTask", params, false),
        )
        .await;
        match sent {
            Ok(Ok(mut events)) => {
                if let Some(Ok(v)) = events.next().await
                    && let Some(e) = v.get("error")
                {
                    tracing::info!(task = %id, error = %e, "the remote agent refused CancelTask");
                }
            }
            Ok(Err(e)) => {
                tracing::warn!(task = %id, error = %e, "CancelTask to a remote agent failed")
            }
            Err(_) => tracing::warn!(task = %id, "CancelTask to a remote agent timed out"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn card(interfaces: Value) -> Value {
        json!({"name": "Remote", "description": "d", "supportedInterfaces": interfaces})
    }

    #[test]
    fn a_v1_card_with_a_json_rpc_interface_passes() {
        let c = card(json!([
            {"url": "http://a.example/grpc", "protocolBinding": "GRPC", "protocolVersion": "1.0"},
            {"url": "http://a.example/rpc", "protocolBinding": "JSONRPC", "protocolVersion": "1.0", "tenant": "t1"}
        ]));
        let (name, _, url) = check_card(&c).unwrap();
        assert_eq!(
            (name.as_str(), url.as_str()),
            ("Remote", "http://a.example/rpc")
        );
        assert_eq!(interface_tenant(&c).as_deref(), Some("t1"));
    }

    #[test]
    fn cards_that_fail_say_why() {
        let old = json!({"name": "Old", "url": "http://a.example", "protocolVersion": "0.3.0"});
        assert!(
            check_card(&old)
                .unwrap_err()
                .contains("not an A2A v1.0 card")
        );
        let grpc = card(
            json!([{"url": "http://a.example", "protocolBinding": "GRPC", "protocolVersion": "1.0"}]),
        );
        assert!(check_card(&grpc).unwrap_err().contains("GRPC 1.0"));
        let v03 = card(
            json!([{"url": "http://a.example", "protocolBinding": "JSONRPC", "protocolVersion": "0.3"}]),
        );
        assert!(
            check_card(&v03)
                .unwrap_err()
                .contains("no JSON-RPC interface of A2A 1.x")
        );
        let ftp = card(
            json!([{"url": "ftp://a.example", "protocolBinding": "JSONRPC", "protocolVersion": "1.0"}]),
        );
        assert!(check_card(&ftp).unwrap_err().contains("not an http(s) URL"));
        assert!(
            check_card(&json!({"supportedInterfaces": []}))
                .unwrap_err()
                .contains("`name`")
        );
        assert!(
            check_card(&json!([1]))
                .unwrap_err()
                .contains("not a JSON object")
        );
    }

    #[test]
    fn card_urls() {
        assert_eq!(
            card_url("http://a.example/agents/x/"),
            "http://a.example/agents/x/.well-known/agent-card.json"
        );
        assert_eq!(
            card_url("http://a.example/card.json"),
            "http://a.example/card.json"
        );
    }

    #[test]
    fn artifacts_fold_chunks_and_whole_ones() {
        let mut a = Answer::default();
        a.artifact(
            &json!({"artifactId": "1", "parts": [{"text": "Hel"}]}),
            false,
        );
        a.artifact(&json!({"artifactId": "1", "parts": [{"text": "lo"}]}), true);
        a.artifact(
            &json!({"artifactId": "2", "parts": [{"text": "again"}]}),
            false,
        );
        assert_eq!(a.text().as_deref(), Some("Hello\n\nagain"));
        let mut b = Answer {
            status_text: Some("only a message".into()),
            ..Answer::default()
        };
        assert_eq!(b.text().as_deref(), Some("only a message"));
        b.artifact(
            &json!({"artifactId": "x", "parts": [{"data": {"k": 1}}]}),
            false,
        );
        assert_eq!(b.text().as_deref(), Some("{\"k\":1}"));
    }
}
