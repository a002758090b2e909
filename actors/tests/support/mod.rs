//! A real engine for tests: a migrated database (SQLite or PostgreSQL), the fake model server
//! speaking the OpenAI or Anthropic wire format over real HTTP, the real built-in tools (plus
//! test tools where a test needs one), and helpers to chat and collect a run's events.

#![allow(dead_code)]

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use agentry_actors::{
    AllowAll, ChatCommand, ConfiguredModels, Engine, EngineConfig, EngineDeps, SessionEvent,
    SessionHandle, ToolProvider, ToolRequest, ToolSet, channel_subscriber,
};
use agentry_builtin::{BuiltinConfig, BuiltinService, builtin_registry};
use agentry_fake_model::{FakeConfig, FakeModelServer};
use agentry_llm::{ModelConfig, Provider};
use agentry_schema::events::{EventPayload, ExecutionEvent};
use agentry_schema::ids::{RunId, SessionId};
use agentry_schema::tenancy::Role;
use agentry_store::tenants::{self, NewTenant, Quotas, Tenant};
use agentry_store::testing::{Backend, TestDb};
use agentry_store::{PlatformScope, UserScope, users};
use agentry_tools::tool::{Tool, ToolContext, ToolError, ToolOutput, ToolRegistry, ToolSpec};
use async_trait::async_trait;
use serde_json::{Value, json};
use tokio::sync::mpsc::UnboundedReceiver;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wire {
    OpenAi,
    Anthropic,
    /// The built-in scripted model: no HTTP at all.
    Scripted,
}

pub struct Options {
    /// Use the server's own tool provider (built-ins + RBAC + the MCP pool) instead of the test
    /// one.
    pub platform_tools: bool,
    pub mcp: Option<Arc<dyn agentry_actors::mcp_pool::McpConfigSource>>,
    pub mcp_pool: agentry_actors::mcp_pool::McpPoolConfig,
    pub hitl_timeout: Duration,
    pub quotas: Quotas,
    pub extra_tools: Vec<Arc<dyn Tool>>,
    pub session_timeout: Duration,
    /// The model config's `base_delay_ms`: paces the client's retries and the loop's own.
    pub base_delay_ms: u64,
    /// A tenant supervisor without live sessions this long is stopped.
    pub tenant_idle_after: Duration,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            platform_tools: false,
            mcp: None,
            mcp_pool: agentry_actors::mcp_pool::McpPoolConfig::default(),
            hitl_timeout: Duration::from_secs(30),
            quotas: Quotas::default(),
            extra_tools: Vec::new(),
            session_timeout: Duration::from_secs(3600),
            base_delay_ms: 10,
            tenant_idle_after: Duration::from_secs(600),
        }
    }
}

/// Built-in tools (files, todos, interaction, system) plus the test's own.
pub struct TestTools {
    cfg: BuiltinConfig,
    extra: Vec<Arc<dyn Tool>>,
}

#[async_trait]
impl ToolProvider for TestTools {
    async fn tools_for(&self, _req: &ToolRequest) -> ToolSet {
        let mut registry: ToolRegistry = builtin_registry(
            &self.cfg,
            &[
                BuiltinService::Files,
                BuiltinService::Todos,
                BuiltinService::Interaction,
                BuiltinService::System,
            ],
        );
        for t in &self.extra {
            registry.upsert(t.clone()).expect("test tool registers");
        }
        ToolSet {
            registry,
            policy: Arc::new(AllowAll),
            warnings: Vec::new(),
        }
    }
}

pub struct Harness {
    pub engine: Engine,
    pub db: TestDb,
    pub fake: Option<FakeModelServer>,
    pub tenant: Tenant,
    pub user: UserScope,
    pub data_dir: tempfile::TempDir,
}

impl Harness {
    pub async fn new(backend: Backend, wire: Wire) -> Option<Harness> {
        Self::with(backend, wire, Options::default()).await
    }

    pub async fn with(backend: Backend, wire: Wire, opts: Options) -> Option<Harness> {
        let db = TestDb::open(backend).await?;
        let fake = (wire != Wire::Scripted).then(|| FakeModelServer::start(FakeConfig::default()));
        let model_cfg = match (&fake, wire) {
            (Some(f), Wire::OpenAi) => ModelConfig {
                base_url: Some(f.base_url_openai()),
                api_key: Some("test-key".into()),
                max_retries: 1,
                base_delay_ms: opts.base_delay_ms,
                timeout_secs: 20,
                ..ModelConfig::for_provider(Provider::OpenAi)
            },
            (Some(f), Wire::Anthropic) => ModelConfig {
                base_url: Some(f.base_url_anthropic()),
                api_key: Some("test-key".into()),
                max_retries: 1,
                base_delay_ms: opts.base_delay_ms,
                timeout_secs: 20,
                ..ModelConfig::for_provider(Provider::Anthropic)
            },
            _ => ModelConfig::default(),
        };
        let data_dir = tempfile::tempdir().unwrap();
        let memory = Arc::new(agentry_builtin::memory::MemoryBank::new(
            db.db.clone(),
            None,
            agentry_builtin::memory::MemoryConfig::default(),
        ));
        let deps = EngineDeps {
            db: db.db.clone(),
            writer: db.writer.clone(),
            draining: Default::default(),
            models: Arc::new(ConfiguredModels::new(model_cfg, reqwest::Client::new())),
            tools: if opts.platform_tools {
                Arc::new(
                    agentry_actors::tools::PlatformTools::new(BuiltinConfig::default())
                        .with_memory(memory.clone()),
                )
            } else {
                Arc::new(TestTools {
                    cfg: BuiltinConfig::default(),
                    extra: opts.extra_tools,
                })
            },
            mcp: opts.mcp,
            config: EngineConfig {
                hitl_timeout: opts.hitl_timeout,
                session_timeout: opts.session_timeout,
                data_dir: data_dir.path().to_path_buf(),
                cancel_grace: Duration::from_millis(200),
                event_flush_interval: Duration::from_millis(20),
                mcp_pool: opts.mcp_pool,
                ..EngineConfig::default()
            },
            runtime: tokio::runtime::Handle::current(),
            coordination: None,
            memory: Some(memory),
            assistants: Default::default(),
            fresh_sessions: Default::default(),
            remote_agents: Arc::new(
                agentry_actors::remote_agents::RemoteAgents::new(&Default::default(), None)
                    .unwrap(),
            ),
        };
        let engine = Engine::start(deps, 0, opts.tenant_idle_after);
        let tenant = tenants::create(
            &db.db,
            &PlatformScope::new(),
            NewTenant {
                name: format!("t-{}", uuid::Uuid::now_v7()),
                quotas: opts.quotas,
                features_enabled: vec![],
                tool_permissions: None,
                // The harness's user is a member whose tests switch approvals off at will.
                policy: agentry_store::tenants::TenantPolicy {
                    members_may_auto_approve: true,
                    ..Default::default()
                },
            },
        )
        .await
        .unwrap();
        let u = users::create(&db.db, &tenant.scope(), "alice", Role::Member)
            .await
            .unwrap();
        let user = UserScope {
            tenant: tenant.scope(),
            user_id: u.id,
            role: Role::Member,
            custom_role: None,
        };
        Some(Harness {
            engine,
            db,
            fake,
            tenant,
            user,
            data_dir,
        })
    }

    pub fn fake(&self) -> &FakeModelServer {
        self.fake
            .as_ref()
            .expect("this harness has a fake model server")
    }

    pub async fn new_session(&self, auto_approve: bool) -> SessionHandle {
        let s = self
            .engine
            .create_session(
                &self.tenant,
                &self.user,
                agentry_actors::CreateSession {
                    auto_approve: Some(auto_approve),
                    ..Default::default()
                },
            )
            .await
            .unwrap();
        self.engine
            .open_session(&self.tenant, &self.user, s.id)
            .await
            .unwrap()
    }

    /// Subscribe (live), send a message, and return the subscription's receiver and the run id.
    pub async fn send(&self, handle: &SessionHandle, message: &str) -> (Events, RunId) {
        let events = self.subscribe(handle).await;
        let accepted = self
            .engine
            .start_chat(handle, &self.user, message.to_string(), false)
            .await
            .expect("chat accepted");
        (events, accepted.run_id)
    }

    pub async fn subscribe(&self, handle: &SessionHandle) -> Events {
        let (to, rx) = channel_subscriber();
        self.engine.subscribe(handle, None, to).await.unwrap();
        Events { rx }
    }

    pub async fn chat(
        &self,
        session: SessionId,
        message: &str,
    ) -> Result<agentry_actors::ChatStarted, agentry_actors::EngineError> {
        self.engine
            .chat(
                &self.tenant,
                &self.user,
                ChatCommand {
                    session_id: Some(session),
                    message: message.to_string(),
                    ..ChatCommand::default()
                },
            )
            .await
    }
}

pub struct Events {
    pub rx: UnboundedReceiver<SessionEvent>,
}

impl Events {
    /// The next event, within `timeout`.
    pub async fn next(&mut self, timeout: Duration) -> ExecutionEvent {
        let ev = tokio::time::timeout(timeout, self.rx.recv())
            .await
            .expect("timed out waiting for an event")
            .expect("subscription closed");
        (*ev.event).clone()
    }

    /// Events until (and including) the `done` of `run`.
    pub async fn until_done(&mut self, run: RunId) -> Vec<ExecutionEvent> {
        let mut out = Vec::new();
        loop {
            let ev = self.next(Duration::from_secs(30)).await;
            let done = ev.is_done() && ev.run_id == run.to_string();
            out.push(ev);
            if done {
                return out;
            }
        }
    }

    /// Events until one matches `pred` (included).
    pub async fn until(&mut self, pred: impl Fn(&ExecutionEvent) -> bool) -> Vec<ExecutionEvent> {
        let mut out = Vec::new();
        loop {
            let ev = self.next(Duration::from_secs(30)).await;
            let hit = pred(&ev);
            out.push(ev);
            if hit {
                return out;
            }
        }
    }
}

pub fn types(events: &[ExecutionEvent]) -> Vec<&'static str> {
    events.iter().map(|e| e.event_type()).collect()
}

pub fn done(events: &[ExecutionEvent]) -> agentry_schema::events::DoneData {
    match &events.last().expect("events").payload {
        EventPayload::Done(d) => d.clone(),
        other => panic!("last event is not done: {other:?}"),
    }
}

pub fn hitl_request_id(events: &[ExecutionEvent]) -> agentry_schema::ids::ApprovalId {
    events
        .iter()
        .find_map(|e| match &e.payload {
            EventPayload::HitlRequest(h) => Some(h.request_id.parse().unwrap()),
            _ => None,
        })
        .expect("a hitl_request")
}

/// Asserts the stream is ordered and gap-free by seq, with exactly one `done` at the end.
pub fn assert_well_formed(events: &[ExecutionEvent]) {
    for w in events.windows(2) {
        assert_eq!(
            w[1].seq,
            w[0].seq + 1,
            "seq gap or reorder: {} then {}",
            w[0].seq,
            w[1].seq
        );
    }
    let dones = events.iter().filter(|e| e.is_done()).count();
    assert_eq!(dones, 1, "exactly one done: {:?}", types(events));
    assert!(events.last().unwrap().is_done());
}

/// A tool that panics the first `panics` times it is called, then answers.
pub struct Flaky {
    spec: ToolSpec,
    panics: AtomicU32,
    pub calls: AtomicU32,
}

impl Flaky {
    pub fn new(panics: u32) -> Arc<Flaky> {
        Arc::new(Flaky {
            spec: ToolSpec::new(
                "test",
                "flaky",
                "Panics at first, then works",
                json!({"type": "object"}),
            ),
            panics: AtomicU32::new(panics),
            calls: AtomicU32::new(0),
        })
    }
}

#[async_trait]
impl Tool for Flaky {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }
    async fn call(&self, _args: Value, _ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        if self.panics.load(Ordering::SeqCst) > 0 {
            self.panics.fetch_sub(1, Ordering::SeqCst);
            panic!("flaky tool panicked on purpose");
        }
        Ok(ToolOutput::ok(json!({"ok": true})))
    }
}

/// A tool that sleeps (cancellable), for cancel tests.
pub struct Sleepy {
    spec: ToolSpec,
}

impl Sleepy {
    pub fn new() -> Arc<Sleepy> {
        Self::with_timeout(Duration::from_secs(60))
    }

    /// A sleepy tool the loop abandons after `timeout`.
    pub fn with_timeout(timeout: Duration) -> Arc<Sleepy> {
        Arc::new(Sleepy {
            spec: ToolSpec::new(
                "test",
                "sleepy",
                "Sleeps for ms milliseconds",
                json!({"type": "object", "properties": {"ms": {"type": "integer"}}, "required": ["ms"]}),
            )
            .with_timeout(timeout),
        })
    }
}

#[async_trait]
impl Tool for Sleepy {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }
    async fn call(&self, args: Value, ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
        let ms = args["ms"].as_u64().unwrap_or(0);
        tokio::select! {
            _ = ctx.cancel.cancelled() => Err(ToolError::Cancelled),
            _ = tokio::time::sleep(Duration::from_millis(ms)) => Ok(ToolOutput::ok(json!({"slept_ms": ms}))),
        }
    }
}

/// A tool that asks the user a question (as an MCP elicitation does) and returns the answer.
/// Its own timeout is short; the user may take longer.
pub struct Asker {
    spec: ToolSpec,
}

impl Asker {
    pub fn new(timeout: Duration) -> Arc<Asker> {
        Arc::new(Asker {
            spec: ToolSpec::new(
                "test",
                "asker",
                "Asks the user for a name",
                json!({"type": "object"}),
            )
            .with_timeout(timeout),
        })
    }
}

#[async_trait]
impl Tool for Asker {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }
    async fn call(&self, _args: Value, ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
        let answer = ctx
            .interaction
            .ask(agentry_schema::events::Question {
                text: "Your name?".into(),
                question_type: "text".into(),
                options: Vec::new(),
                timeout: 0,
                schema: None,
                function_call: None,
            })
            .await
            .map_err(|e| ToolError::failed(e.to_string()))?;
        Ok(ToolOutput::ok(json!({"name": answer})))
    }
}

/// A tool that fails with the errors it is given, in order, then succeeds; it counts its calls.
pub struct Failing {
    spec: ToolSpec,
    errors: std::sync::Mutex<Vec<ToolError>>,
    pub calls: AtomicU32,
}

impl Failing {
    pub fn new(name: &str, errors: Vec<ToolError>) -> Arc<Failing> {
        Arc::new(Failing {
            spec: ToolSpec::new("test", name, "Fails as scripted", json!({"type": "object"})),
            errors: std::sync::Mutex::new(errors.into_iter().rev().collect()),
            calls: AtomicU32::new(0),
        })
    }
}

#[async_trait]
impl Tool for Failing {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }
    async fn call(&self, _args: Value, _ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        match self.errors.lock().unwrap().pop() {
            Some(e) => Err(e),
            None => Ok(ToolOutput::ok(json!({"ok": true}))),
        }
    }
}

/// A tool that runs and reports failure in its result (like a command exiting non-zero).
pub struct ReportsFailure {
    spec: ToolSpec,
}

impl ReportsFailure {
    pub fn new() -> Arc<ReportsFailure> {
        Arc::new(ReportsFailure {
            spec: ToolSpec::new(
                "test",
                "exits_nonzero",
                "Runs and reports a failure",
                json!({"type": "object"}),
            ),
        })
    }
}

#[async_trait]
impl Tool for ReportsFailure {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }
    async fn call(&self, _args: Value, _ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
        Ok(ToolOutput::failed(
            json!({"exit_code": 1, "stderr": "no such thing"}),
        ))
    }
}

/// Sets the tenant's `default` assistant to `spec` (what a tenant admin's PUT does).
pub async fn set_default_assistant(h: &Harness, spec: agentry_store::assistants::AssistantSpec) {
    let scope = h.tenant.scope();
    agentry_store::assistants::ensure_default(&h.db.db, &scope, spec.clone())
        .await
        .unwrap();
    agentry_store::assistants::update(
        &h.db.db,
        &scope,
        &agentry_schema::ids::AssistantId::default_assistant(),
        spec,
    )
    .await
    .unwrap();
}

/// The results of the run's tool calls, in order.
pub fn tool_results(events: &[ExecutionEvent]) -> Vec<agentry_schema::events::ToolResultData> {
    events
        .iter()
        .filter_map(|e| match &e.payload {
            EventPayload::ToolResult(r) => Some(r.clone()),
            _ => None,
        })
        .collect()
}

/// The run's `error` events, in order.
pub fn errors(events: &[ExecutionEvent]) -> Vec<agentry_schema::events::ErrorData> {
    events
        .iter()
        .filter_map(|e| match &e.payload {
            EventPayload::Error(x) => Some(x.clone()),
            _ => None,
        })
        .collect()
}

/// The final answer (`text` with `is_final`).
pub fn final_text(events: &[ExecutionEvent]) -> Option<String> {
    events.iter().rev().find_map(|e| match &e.payload {
        EventPayload::Text(t) if t.is_final => Some(t.content.clone()),
        _ => None,
    })
}

impl Harness {
    /// Decide on a pending request of `handle`'s session as the harness user; panics on refusal.
    pub async fn decide(
        &self,
        handle: &SessionHandle,
        request: agentry_schema::ids::ApprovalId,
        decision: agentry_schema::frames::Decision,
    ) {
        self.engine
            .decide(
                &self.tenant,
                &self.user,
                handle.session.id,
                request,
                decision,
            )
            .await
            .expect("decision accepted");
    }
}
