//! Shared by the real-server tests: where the installed servers are, configs for them, and a
//! test user / event sink.
#![allow(dead_code)]

use std::net::TcpListener;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use agentry_schema::events::{EventPayload, Question};
use agentry_schema::ids::{RunId, SessionId, TenantId, UserId};
use agentry_tools::tool::{
    EventSink, InteractionError, ToolContext, UserInteraction, WorkspaceInfo,
};
use async_trait::async_trait;
use serde_json::Value;
use tokio_util::sync::CancellationToken;

pub use agentry_mcp::testing::*;

pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// server-everything in `streamableHttp` mode on 127.0.0.1:`port`. Killed on drop.
pub struct HttpEverything {
    pub port: u16,
    child: Child,
}

impl HttpEverything {
    pub fn start(port: u16) -> Self {
        let preload =
            Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/support/listen-loopback.cjs");
        let child = Command::new(node())
            .arg("--require")
            .arg(preload)
            .arg(everything_js())
            .arg("streamableHttp")
            .env("PORT", port.to_string())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start server-everything");
        let deadline = Instant::now() + Duration::from_secs(30);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(
                Instant::now() < deadline,
                "server-everything did not listen on {port}"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        Self { port, child }
    }

    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}/mcp", self.port)
    }

    pub fn stop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for HttpEverything {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Answers questions from a script, recording every question.
#[derive(Default)]
pub struct ScriptedUser {
    pub answers: Mutex<Vec<Result<Value, InteractionError>>>,
    pub questions: Mutex<Vec<Question>>,
}

impl ScriptedUser {
    pub fn new(answers: Vec<Result<Value, InteractionError>>) -> Arc<Self> {
        Arc::new(Self {
            answers: Mutex::new(answers.into_iter().rev().collect()),
            questions: Mutex::new(Vec::new()),
        })
    }

    pub fn questions(&self) -> Vec<Question> {
        self.questions.lock().unwrap().clone()
    }
}

#[async_trait]
impl UserInteraction for ScriptedUser {
    async fn ask(&self, question: Question) -> Result<Value, InteractionError> {
        self.questions.lock().unwrap().push(question);
        self.answers
            .lock()
            .unwrap()
            .pop()
            .unwrap_or(Err(InteractionError::Unavailable(
                "no scripted answer left".into(),
            )))
    }
}

#[derive(Default)]
pub struct Events(pub Mutex<Vec<EventPayload>>);

impl EventSink for Events {
    fn emit(&self, payload: EventPayload) {
        self.0.lock().unwrap().push(payload);
    }
}

impl Events {
    pub fn all(&self) -> Vec<EventPayload> {
        self.0.lock().unwrap().clone()
    }
}

pub fn ctx_with(
    tool_call_id: &str,
    user: Arc<dyn UserInteraction>,
    events: Arc<Events>,
    cancel: CancellationToken,
) -> ToolContext {
    ToolContext {
        tenant_id: TenantId::new(),
        user_id: UserId::new(),
        role: agentry_schema::tenancy::Role::Member,
        custom_role: None,
        session_id: SessionId::new(),
        run_id: RunId::new(),
        tool_call_id: tool_call_id.to_string(),
        assistant_id: None,
        workspace: WorkspaceInfo {
            root: std::env::temp_dir(),
            quota_bytes: 1 << 20,
            sandbox: Default::default(),
        },
        cancel,
        interaction: user,
        events,
    }
}

pub fn ctx(tool_call_id: &str) -> ToolContext {
    ctx_with(
        tool_call_id,
        ScriptedUser::new(vec![]),
        Arc::new(Events::default()),
        CancellationToken::new(),
    )
}

/// Pids whose process group is `pgid` (from /proc).
pub fn processes_in_group(pgid: i32) -> Vec<i32> {
    let mut pids = Vec::new();
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return pids;
    };
    for e in entries.flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        // pid (comm) state ppid pgrp ...; comm may contain spaces, so split after ')'.
        let Some(rest) = stat.rsplit_once(')').map(|(_, r)| r) else {
            continue;
        };
        let fields: Vec<&str> = rest.split_whitespace().collect();
        // fields[0] = state, [1] = ppid, [2] = pgrp
        if fields.first() == Some(&"Z") {
            continue;
        }
        if fields.get(2).and_then(|g| g.parse::<i32>().ok()) == Some(pgid) {
            pids.push(pid);
        }
    }
    pids
}

/// Poll `f` until it holds or `within` passes.
pub async fn eventually(within: Duration, mut f: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + within;
    loop {
        if f() {
            return true;
        }
        if Instant::now() > deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

pub fn text_of(v: &Value) -> String {
    v["text"].as_str().unwrap_or_default().to_string()
}

/// Logs to the test output when `RUST_LOG` is set (`RUST_LOG=agentry_mcp=debug`).
pub fn init_tracing() {
    if std::env::var("RUST_LOG").is_ok() {
        let _ = tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
            .with_test_writer()
            .try_init();
    }
}
