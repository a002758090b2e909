//! The client side of one connection as rmcp sees it: what we declare (elicitation), and what we
//! do with what the server sends us unasked — elicitation requests, progress, `list_changed`.
//!
//! It also keeps the state the connection shares with its calls: which calls are in flight
//! (an elicitation is asked through its call's `UserInteraction`, see [`ElicitFor`]), where each
//! progress token's notifications go, the tool-list generation, and the connection status.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use agentry_schema::events::{EventPayload, ProgressData, Question};
use rmcp::ClientHandler;
use rmcp::model::RequestId;
use rmcp::model::{
    ClientCapabilities, ClientConfig, ElicitRequestParams, ElicitResult, ElicitationAction,
    ElicitationCapability, ErrorData, FormElicitationCapability, Implementation,
    ProgressNotificationParam, ProgressToken, ProtocolVersion,
};
use rmcp::service::{InboundStreamOrigin, NotificationContext, RequestContext, RoleClient};
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use super::connection::{ClientHooks, ConnectionStatus};
use agentry_tools::tool::{EventSink, InteractionError, PauseClock, UserInteraction};

/// How long a user has to answer an elicitation (the HITL default).
pub const ELICITATION_TIMEOUT_SECS: u64 = 300;
/// `question_type` of the [`Question`] an elicitation becomes.
pub const ELICITATION_QUESTION_TYPE: &str = "elicitation";
/// How many times a user is asked before an answer that never matches the schema is declined.
const ELICITATION_MAX_ASKS: usize = 3;
/// Progress notifications that arrived before their call registered (kept briefly).
const UNCLAIMED_PROGRESS_MAX: usize = 64;

/// One `tools/call` in flight on this connection.
struct InFlight {
    seq: u64,
    /// The `tools/call` request of the call's current round, once sent.
    request: Option<RequestId>,
    interaction: Arc<dyn UserInteraction>,
    cancel: CancellationToken,
    clock: Arc<PauseClock>,
}

struct ProgressRoute {
    tool_call_id: String,
    events: Arc<dyn EventSink>,
}

/// State shared by the connection, its handler and its calls.
pub(crate) struct Shared {
    pub server: String,
    pub hooks: ClientHooks,
    status: Mutex<ConnectionStatus>,
    in_flight: Mutex<Vec<InFlight>>,
    /// Wakes elicitations waiting for their call's request id to be recorded.
    request_sent: tokio::sync::Notify,
    next_seq: AtomicU64,
    progress: Mutex<HashMap<ProgressToken, ProgressRoute>>,
    unclaimed_progress: Mutex<VecDeque<ProgressNotificationParam>>,
    /// Bumped by every `tools/list_changed`; a cached list from an older generation is stale.
    pub tools_generation: AtomicU64,
    /// Bumped by every `resources/list_changed` and `prompts/list_changed`: a cached catalog
    /// (resources, templates, prompts) from an older generation is stale.
    pub catalog_generation: AtomicU64,
    /// Bumped (with the reason) when the transport is seen broken under the calls in flight:
    /// a Streamable HTTP server that stopped answering (its stream broke and reconnecting was
    /// refused). Every call waiting at that moment fails at once instead of waiting for a
    /// stream rmcp keeps trying to resume.
    breaks: tokio::sync::watch::Sender<(u64, String)>,
    /// Tools the server says require MCP tasks (read off the raw `tools/list` answers).
    pub(crate) task_support: super::task_support::TaskSupport,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Shared {
    pub(crate) fn new(server: &str, hooks: ClientHooks) -> Arc<Self> {
        Arc::new(Self {
            server: server.to_string(),
            hooks,
            status: Mutex::new(ConnectionStatus::Connecting),
            in_flight: Mutex::new(Vec::new()),
            request_sent: tokio::sync::Notify::new(),
            next_seq: AtomicU64::new(1),
            progress: Mutex::new(HashMap::new()),
            unclaimed_progress: Mutex::new(VecDeque::new()),
            tools_generation: AtomicU64::new(0),
            catalog_generation: AtomicU64::new(0),
            breaks: tokio::sync::watch::channel((0, String::new())).0,
            task_support: Default::default(),
        })
    }

    /// The server's resources or prompts changed: the cached catalog is stale.
    fn catalog_changed(&self, what: &str) {
        self.catalog_generation.fetch_add(1, Ordering::SeqCst);
        tracing::debug!(server = %self.server, "{what}");
        if let Some(hook) = &self.hooks.on_catalog_changed {
            hook(&self.server);
        }
    }

    /// The transport broke under the calls in flight (see `breaks`): fail them, and show the
    /// connection as `error` with `reason` (a pool reconnects on that).
    pub(crate) fn transport_broken(&self, reason: String) {
        tracing::warn!(server = %self.server, "{reason}");
        self.breaks.send_modify(|(generation, r)| {
            *generation += 1;
            *r = reason.clone();
        });
        self.set_status(ConnectionStatus::Error(reason));
    }

    /// Watches for transport breaks from now on (one seen before this call does not count).
    pub(crate) fn watch_breaks(&self) -> tokio::sync::watch::Receiver<(u64, String)> {
        let mut rx = self.breaks.subscribe();
        rx.borrow_and_update();
        rx
    }

    pub(crate) fn status(&self) -> ConnectionStatus {
        lock(&self.status).clone()
    }

    /// Set the status; hooks hear about real changes only. `Disconnected` (closed by us) is
    /// final: nothing that finishes afterwards changes it.
    pub(crate) fn set_status(&self, status: ConnectionStatus) {
        {
            let mut s = lock(&self.status);
            if *s == status || *s == ConnectionStatus::Disconnected {
                return;
            }
            *s = status.clone();
        }
        if let Some(hook) = &self.hooks.on_status {
            hook(&self.server, &status);
        }
    }

    /// Register a call; elicitation goes to the most recent one until the guard drops.
    pub(crate) fn begin_call(
        self: &Arc<Self>,
        interaction: Arc<dyn UserInteraction>,
        cancel: CancellationToken,
    ) -> InFlightGuard {
        let seq = self.next_seq.fetch_add(1, Ordering::Relaxed);
        let clock = Arc::new(PauseClock::default());
        lock(&self.in_flight).push(InFlight {
            seq,
            request: None,
            interaction,
            cancel,
            clock: clock.clone(),
        });
        InFlightGuard {
            shared: self.clone(),
            seq,
            token: None,
            clock,
        }
    }

    /// The call an elicitation belongs to: the one named, or, when the transport cannot say
    /// (stdio), the most recent.
    fn call_for(
        &self,
        target: &ElicitFor,
    ) -> Option<(Arc<dyn UserInteraction>, CancellationToken, Arc<PauseClock>)> {
        let calls = lock(&self.in_flight);
        let call = match target {
            ElicitFor::Call(seq) => calls.iter().find(|c| c.seq == *seq),
            ElicitFor::Request(id) => calls.iter().find(|c| c.request.as_ref() == Some(id)),
            ElicitFor::MostRecent => calls.last(),
        };
        call.map(|c| (c.interaction.clone(), c.cancel.clone(), c.clock.clone()))
    }

    pub(crate) fn in_flight_calls(&self) -> usize {
        lock(&self.in_flight).len()
    }

    fn route_progress(&self, p: ProgressNotificationParam) {
        let route = lock(&self.progress)
            .get(&p.progress_token)
            .map(|r| (r.tool_call_id.clone(), r.events.clone()));
        match route {
            Some((tool_call_id, events)) => emit_progress(&tool_call_id, &events, p),
            None => {
                let mut q = lock(&self.unclaimed_progress);
                if q.len() == UNCLAIMED_PROGRESS_MAX {
                    q.pop_front();
                }
                q.push_back(p);
            }
        }
    }
}

fn emit_progress(tool_call_id: &str, events: &Arc<dyn EventSink>, p: ProgressNotificationParam) {
    events.emit(EventPayload::Progress(ProgressData {
        tool_call_id: tool_call_id.to_string(),
        progress: p.progress,
        total: p.total,
        message: p.message,
    }));
}

/// Removes its call (and progress route) from the connection when dropped, however the call
/// ended.
pub(crate) struct InFlightGuard {
    shared: Arc<Shared>,
    seq: u64,
    token: Option<ProgressToken>,
    clock: Arc<PauseClock>,
}

impl InFlightGuard {
    /// Elicitations arriving on this request's response stream belong to this call.
    pub(crate) fn sent(&self, request: RequestId) {
        if let Some(c) = lock(&self.shared.in_flight)
            .iter_mut()
            .find(|c| c.seq == self.seq)
        {
            c.request = Some(request);
        }
        self.shared.request_sent.notify_waiters();
    }

    /// Who asks the user for this call's own input requests (MRTR).
    pub(crate) fn elicit_for(&self) -> ElicitFor {
        ElicitFor::Call(self.seq)
    }

    /// The call's timeout clock, paused while its user answers an elicitation.
    pub(crate) fn clock(&self) -> Arc<PauseClock> {
        self.clock.clone()
    }

    /// Send this progress token's notifications to `events` as `progress` events.
    pub(crate) fn route_progress(
        &mut self,
        token: ProgressToken,
        tool_call_id: &str,
        events: Arc<dyn EventSink>,
    ) {
        let early: Vec<_> = {
            let mut q = lock(&self.shared.unclaimed_progress);
            let (mine, rest): (Vec<_>, Vec<_>) =
                q.drain(..).partition(|p| p.progress_token == token);
            q.extend(rest);
            mine
        };
        for p in early {
            emit_progress(tool_call_id, &events, p);
        }
        lock(&self.shared.progress).insert(
            token.clone(),
            ProgressRoute {
                tool_call_id: tool_call_id.to_string(),
                events,
            },
        );
        self.token = Some(token);
    }
}

impl Drop for InFlightGuard {
    fn drop(&mut self) {
        lock(&self.shared.in_flight).retain(|c| c.seq != self.seq);
        if let Some(t) = self.token.take() {
            lock(&self.shared.progress).remove(&t);
        }
    }
}

/// What rmcp calls back into.
#[derive(Clone)]
pub(crate) struct AgentryClientHandler {
    pub shared: Arc<Shared>,
}

/// What we tell servers about ourselves: elicitation (form mode, answers validated against the
/// schema). The offered version is the newest with an `initialize` handshake; see
/// `connection::lifecycle` for how 2026-07-28 is negotiated.
pub(crate) fn client_info() -> ClientConfig {
    let mut caps = ClientCapabilities::default();
    caps.elicitation = Some(
        ElicitationCapability::new()
            .with_form(FormElicitationCapability::new().with_schema_validation(true)),
    );
    ClientConfig::new(
        caps,
        Implementation::new("agentry", env!("CARGO_PKG_VERSION")),
    )
    .with_protocol_version(ProtocolVersion::LATEST_WITH_INITIALIZE)
}

impl ClientHandler for AgentryClientHandler {
    fn get_info(&self) -> ClientConfig {
        client_info()
    }

    async fn create_elicitation(
        &self,
        request: ElicitRequestParams,
        context: RequestContext<RoleClient>,
    ) -> Result<ElicitResult, ErrorData> {
        // Over Streamable HTTP a server asks on the response stream of the call it is serving,
        // and rmcp says which; over stdio nothing does.
        let target = match context.extensions.get::<InboundStreamOrigin>() {
            Some(InboundStreamOrigin::OutboundRequest(id)) => ElicitFor::Request(id.clone()),
            _ => ElicitFor::MostRecent,
        };
        Ok(elicit(&self.shared, request, target).await)
    }

    async fn on_progress(
        &self,
        params: ProgressNotificationParam,
        _context: NotificationContext<RoleClient>,
    ) {
        self.shared.route_progress(params);
    }

    async fn on_tool_list_changed(&self, _context: NotificationContext<RoleClient>) {
        self.shared.tools_generation.fetch_add(1, Ordering::SeqCst);
        tracing::debug!(server = %self.shared.server, "tools/list_changed");
        if let Some(hook) = &self.shared.hooks.on_tools_changed {
            hook(&self.shared.server);
        }
    }

    async fn on_resource_list_changed(&self, _context: NotificationContext<RoleClient>) {
        self.shared.catalog_changed("resources/list_changed");
    }

    async fn on_prompt_list_changed(&self, _context: NotificationContext<RoleClient>) {
        self.shared.catalog_changed("prompts/list_changed");
    }
}

/// Which call in flight an elicitation is asked through.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum ElicitFor {
    /// A call of ours (an MRTR input request in its own result).
    Call(u64),
    /// The call whose `tools/call` request's response stream carried the elicitation.
    Request(RequestId),
    /// The transport cannot say (stdio): the most recent call. With several calls in flight on
    /// one connection (a user's sessions sharing a server) this can be the wrong one.
    MostRecent,
}

/// An `elicitation/create` from the server, asked through the call it belongs to.
pub(crate) async fn elicit(
    shared: &Shared,
    request: ElicitRequestParams,
    target: ElicitFor,
) -> ElicitResult {
    let (message, schema) = match request {
        ElicitRequestParams::FormElicitationParams {
            message,
            requested_schema,
            ..
        } => (
            message,
            serde_json::to_value(&requested_schema).unwrap_or(Value::Null),
        ),
        // URL mode is not declared; a server that sends it anyway is declined.
        other => {
            tracing::info!(server = %shared.server, ?other, "declining a non-form elicitation");
            return ElicitResult::new(ElicitationAction::Decline);
        }
    };
    let Some((interaction, cancel, clock)) = find_call(shared, target.clone()).await else {
        tracing::info!(server = %shared.server, ?target, "elicitation outside any tool call in flight: declined");
        return ElicitResult::new(ElicitationAction::Decline);
    };
    let _paused = clock.pause();
    ask_until_valid(shared, &message, schema, interaction, cancel).await
}

/// The call for `target`. A server may ask before our side has recorded which request the call
/// sent (the id is known only once the send returns): wait a moment for it, then fall back to
/// the most recent call rather than refuse.
async fn find_call(
    shared: &Shared,
    target: ElicitFor,
) -> Option<(Arc<dyn UserInteraction>, CancellationToken, Arc<PauseClock>)> {
    const WAIT: std::time::Duration = std::time::Duration::from_millis(500);
    if let ElicitFor::Request(_) = target {
        let deadline = tokio::time::Instant::now() + WAIT;
        loop {
            let sent = shared.request_sent.notified();
            if let Some(call) = shared.call_for(&target) {
                return Some(call);
            }
            if tokio::time::timeout_at(deadline, sent).await.is_err() {
                break;
            }
        }
        tracing::info!(server = %shared.server, ?target, "elicitation on a stream no call in flight sent; asking the most recent call");
        return shared.call_for(&ElicitFor::MostRecent);
    }
    shared.call_for(&target)
}

async fn ask_until_valid(
    shared: &Shared,
    message: &str,
    schema: Value,
    interaction: Arc<dyn UserInteraction>,
    cancel: CancellationToken,
) -> ElicitResult {
    let validator = jsonschema::validator_for(&schema).ok();
    let mut text = message.to_string();
    for _ in 0..ELICITATION_MAX_ASKS {
        let question = Question {
            text: text.clone(),
            question_type: ELICITATION_QUESTION_TYPE.to_string(),
            options: Vec::new(),
            timeout: ELICITATION_TIMEOUT_SECS,
            schema: Some(schema.clone()),
            function_call: None,
        };
        let answer = tokio::select! {
            a = interaction.ask(question) => a,
            _ = cancel.cancelled() => Err(InteractionError::Cancelled),
        };
        let answer = match answer {
            Ok(a) => with_defaults(normalize_answer(a), &schema),
            Err(InteractionError::Declined) | Err(InteractionError::Unavailable(_)) => {
                return ElicitResult::new(ElicitationAction::Decline);
            }
            Err(InteractionError::TimedOut(_)) | Err(InteractionError::Cancelled) => {
                return ElicitResult::new(ElicitationAction::Cancel);
            }
        };
        let problems = match (&validator, answer.is_object()) {
            (_, false) => vec!["the answer must be a JSON object with the requested fields".into()],
            (Some(v), true) => v
                .iter_errors(&answer)
                .map(|e| {
                    let path = e.instance_path().to_string();
                    if path.is_empty() {
                        e.to_string()
                    } else {
                        format!("{path}: {e}")
                    }
                })
                .collect::<Vec<String>>(),
            (None, true) => Vec::new(),
        };
        if problems.is_empty() {
            return ElicitResult::new(ElicitationAction::Accept).with_content(answer);
        }
        tracing::info!(server = %shared.server, ?problems, "elicitation answer does not match the schema; asking again");
        text = format!(
            "{message}\n\nThe previous answer was not accepted: {}",
            problems.join("; ")
        );
    }
    tracing::info!(server = %shared.server, "no valid elicitation answer after {ELICITATION_MAX_ASKS} tries: declined");
    ElicitResult::new(ElicitationAction::Decline)
}

/// Fields the user left out take the schema's `default` (SEP-1034), so "accept" with an empty
/// form sends the defaults the server proposed.
fn with_defaults(answer: Value, schema: &Value) -> Value {
    let (Value::Object(mut fields), Some(Value::Object(props))) =
        (answer.clone(), schema.get("properties"))
    else {
        return answer;
    };
    for (name, prop) in props {
        if let Some(default) = prop.get("default")
            && !fields.contains_key(name)
        {
            fields.insert(name.clone(), default.clone());
        }
    }
    Value::Object(fields)
}

/// A user may answer with the object itself or with its JSON as text.
fn normalize_answer(answer: Value) -> Value {
    if let Value::String(s) = &answer
        && let Ok(v @ Value::Object(_)) = serde_json::from_str::<Value>(s)
    {
        return v;
    }
    answer
}
