//! The test context: a real `agentry serve` on port 0, a reqwest client, and a connection to the
//! server's own database for seeding rows the engine would write (sessions, messages, events,
//! runs, tool calls, approvals).
//!
//! Every response goes through [`Ctx::send`], which checks what must hold for *any* response:
//! an `X-Request-Id`, never a 500, and for errors the `{error_code, message, details}` body
//! whose code matches the status.

use std::collections::BTreeSet;
use std::time::Duration;

use agentry_schema::error::ErrorCode;
use agentry_schema::events::{EventPayload, ExecutionEvent, TokenUsage};
use agentry_schema::ids::{ApprovalId, AssistantId, RunId, SessionId, TenantId, UserId};
use agentry_store::{
    DbOptions, TenantScope, approvals, events, executions, messages, sessions, tool_calls,
};
use reqwest::Method;
use reqwest::header::HeaderMap;
use sea_orm::DatabaseConnection;
use serde_json::{Value, json};

use crate::support::Server;

pub const ADMIN_KEY: &str = "test-platform-admin-key-0123456789";
/// Small, so oversize bodies are cheap to send.
pub const BODY_LIMIT: usize = 16 * 1024;

/// The venv scripts/install-api-test-deps.sh makes (with the protocols' official Python
/// clients in it: `openai`, `openai-agents`, `a2a-sdk`, …).
pub fn python() -> std::path::PathBuf {
    let venv = std::env::var("AGENTRY_VENV")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|_| {
            std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../.cache/venv")
        });
    let py = venv.join("bin/python");
    assert!(
        py.exists(),
        "{} is missing: run scripts/install-api-test-deps.sh",
        py.display()
    );
    py
}

/// Run the client script `tests/api/<script>` (a protocol's official client against the real
/// server) with `env`, loopback only and no OpenAI settings of the caller's: what it printed on
/// stdout, as JSON. A script that fails or prints no JSON fails the test.
pub async fn run_client(script: &str, env: &[(&str, &str)]) -> Value {
    let script = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/api")
        .join(script);
    let out = tokio::process::Command::new(python())
        .arg(&script)
        .envs(env.iter().copied())
        .env("NO_PROXY", "127.0.0.1")
        .env_remove("OPENAI_API_KEY")
        .env_remove("OPENAI_BASE_URL")
        .output()
        .await
        .expect("run the client script");
    assert!(
        out.status.success(),
        "{} failed:\n{}",
        script.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "{} printed no JSON ({e}): {}",
            script.display(),
            String::from_utf8_lossy(&out.stdout)
        )
    })
}

pub struct Ctx {
    pub server: Server,
    pub http: reqwest::Client,
    pub db: DatabaseConnection,
}

#[derive(Debug)]
pub struct Resp {
    pub status: u16,
    pub body: Value,
    pub headers: HeaderMap,
}

/// Agentry's error inside a JSON-RPC error body (under `/a2a/`): the `error.data` entry that
/// carries `{error_code, details}`.
pub fn a2a_agentry_error(body: &Value) -> Option<&Value> {
    body["error"]["data"]
        .as_array()?
        .iter()
        .find(|d| d["@type"] == "type.agentry.dev/agentry.ErrorResponse")
}

impl Resp {
    /// The error code: `error_code`, under `/v1/` OpenAI's `error.code`, under `/a2a/` the
    /// Agentry entry of the JSON-RPC error's `data`.
    pub fn code(&self) -> &str {
        self.body["error_code"]
            .as_str()
            .or_else(|| self.body["error"]["code"].as_str())
            .or_else(|| a2a_agentry_error(&self.body).and_then(|e| e["error_code"].as_str()))
            .unwrap_or_default()
    }

    /// The error's `message` (under `/v1/` inside OpenAI's `error`).
    pub fn message(&self) -> &str {
        self.body["message"]
            .as_str()
            .or_else(|| self.body["error"]["message"].as_str())
            .unwrap_or_default()
    }

    /// The error's `details` (under `/v1/` inside OpenAI's `error`, under `/a2a/` in the
    /// JSON-RPC error's `data`).
    pub fn details(&self) -> &Value {
        if let Some(e) = a2a_agentry_error(&self.body) {
            &e["details"]
        } else if self.body["error"].is_object() {
            &self.body["error"]["details"]
        } else {
            &self.body["details"]
        }
    }
}

/// A user of a tenant with one key.
#[derive(Debug, Clone)]
pub struct Member {
    pub user_id: String,
    pub key: String,
    pub key_id: String,
}

/// A tenant with an admin and two members, each with a key.
#[derive(Debug, Clone)]
pub struct TenantFx {
    pub id: String,
    pub admin: Member,
    pub member: Member,
    pub member2: Member,
}

impl TenantFx {
    pub fn scope(&self) -> TenantScope {
        agentry_store::PlatformScope::new().tenant(self.id.parse::<TenantId>().unwrap())
    }
}

/// Rows of one seeded session.
#[derive(Debug, Clone)]
pub struct Seeded {
    pub session_id: SessionId,
    pub run_id: RunId,
    /// The run's (decided) approval.
    pub approval_id: ApprovalId,
}

pub fn unique(prefix: &str) -> String {
    format!(
        "{prefix}-{}",
        &uuid::Uuid::new_v4().simple().to_string()[..12]
    )
}

impl Ctx {
    /// SQLite, the admin API on, a small body limit.
    pub async fn start() -> Ctx {
        Self::start_with(&[], None).await
    }

    /// Extra env pairs (they win over the defaults here) and an optional database URL.
    pub async fn start_with(env: &[(&str, &str)], db_url: Option<&str>) -> Ctx {
        let limit = BODY_LIMIT.to_string();
        let mut all: Vec<(&str, &str)> = vec![
            ("AGENTRY_AUTH__ADMIN_KEY", ADMIN_KEY),
            ("AGENTRY_SERVER__BODY_LIMIT_BYTES", &limit),
            ("AGENTRY_MCP__ENCRYPTION_KEY", crate::mcp::MCP_KEY),
            // Users' MCP servers in tests live at 127.0.0.2 (nothing listens there): an IP
            // literal, so adding one never asks a resolver, and the rest of loopback stays
            // refused as on a real server.
            (
                "AGENTRY_TOOLS__ALLOWED_NETWORKS",
                crate::mcp::TEST_MCP_NETWORK,
            ),
        ];
        if let Some(url) = db_url {
            all.push(("AGENTRY_DATABASE__URL", url));
        }
        all.extend_from_slice(env);
        let server = Server::start(&all).await;
        let url = match db_url {
            Some(u) => u.to_string(),
            None => format!(
                "sqlite://{}?mode=rwc",
                server.data_dir.path().join("agentry.db").display()
            ),
        };
        let db = agentry_store::connect(&DbOptions {
            url,
            max_connections: 4,
            connect_timeout: Duration::from_secs(10),
            acquire_timeout: Duration::from_secs(10),
        })
        .await
        .expect("the test connects to the server's database");
        Ctx {
            server,
            http: reqwest::Client::builder()
                // The server closes a connection idle for its keep-alive (actix's 5 s). A
                // pooled connection reused just as the server closes it fails the request
                // ("connection closed before message completed"): a test that waits a few
                // seconds between requests (a timeout, a heartbeat) hit that under load. Idle
                // connections are dropped well before the server would close them.
                .pool_idle_timeout(Duration::from_secs(2))
                .build()
                .expect("the test's HTTP client"),
            db,
        }
    }

    pub fn url(&self, path: &str) -> String {
        self.server.url(path)
    }

    /// Send and check the invariants of every response.
    pub async fn send(&self, rb: reqwest::RequestBuilder) -> Resp {
        let req = rb.build().unwrap();
        let is_head = req.method() == Method::HEAD;
        let what = format!("{} {}", req.method(), req.url().path());
        let path = req.url().path().to_string();
        let res = self.http.execute(req).await.unwrap();
        let status = res.status().as_u16();
        let headers = res.headers().clone();
        let bytes = res.bytes().await.unwrap();
        assert!(
            headers.contains_key("x-request-id"),
            "{what}: no X-Request-Id"
        );
        assert!(
            status < 500 || status == 503,
            "{what}: {status} {}",
            String::from_utf8_lossy(&bytes)
        );
        let is_json = headers
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.starts_with("application/json"));
        let body: Value = if bytes.is_empty() {
            Value::Null
        } else if is_json {
            serde_json::from_slice(&bytes).unwrap_or_else(|e| panic!("{what}: bad JSON {e}"))
        } else {
            Value::String(String::from_utf8_lossy(&bytes).into_owned())
        };
        if status >= 400 && !is_head {
            assert!(is_json, "{what}: error {status} is not JSON: {body}");
            // The OpenAI-compatible routes answer OpenAI's shape, with our code as `code`; the
            // A2A agents a JSON-RPC error, with our code in its `data`.
            let openai = path.starts_with("/v1/");
            let a2a = path.starts_with("/a2a/");
            if a2a {
                assert_eq!(
                    body["jsonrpc"], "2.0",
                    "{what}: not a JSON-RPC error: {body}"
                );
                assert!(
                    body["error"]["code"].is_i64(),
                    "{what}: no JSON-RPC code: {body}"
                );
            }
            let err = match (openai, a2a) {
                (true, _) => &body["error"],
                (_, true) => a2a_agentry_error(&body)
                    .unwrap_or_else(|| panic!("{what}: no Agentry error in {body}")),
                _ => &body,
            };
            let code = err[if openai { "code" } else { "error_code" }]
                .as_str()
                .unwrap_or_else(|| panic!("{what}: no error code in {body}"));
            let code = ErrorCode::from_name(code)
                .unwrap_or_else(|| panic!("{what}: unknown error code {code}"));
            assert_eq!(code.http_status(), status, "{what}: {body}");
            let message = if a2a {
                &body["error"]["message"]
            } else {
                &err["message"]
            };
            assert!(
                message.as_str().is_some_and(|m| !m.is_empty()),
                "{what}: no message in {body}"
            );
            assert!(
                err["details"].is_object(),
                "{what}: details is not an object: {body}"
            );
            if openai {
                assert!(err["type"].is_string(), "{what}: no type in {body}");
                assert!(
                    err.as_object().unwrap().contains_key("param"),
                    "{what}: no param in {body}"
                );
            }
        }
        Resp {
            status,
            body,
            headers,
        }
    }

    pub fn request(
        &self,
        method: Method,
        path: &str,
        key: Option<&str>,
    ) -> reqwest::RequestBuilder {
        let rb = self.http.request(method, self.url(path));
        match key {
            Some(k) => rb.bearer_auth(k),
            None => rb,
        }
    }

    pub async fn call(
        &self,
        method: Method,
        path: &str,
        key: Option<&str>,
        body: Option<&Value>,
    ) -> Resp {
        let mut rb = self.request(method, path, key);
        if let Some(b) = body {
            rb = rb.json(b);
        }
        self.send(rb).await
    }

    /// Call and insist on a status; return the body.
    pub async fn ok(
        &self,
        method: Method,
        path: &str,
        key: &str,
        body: Option<Value>,
        want: u16,
    ) -> Value {
        let r = self
            .call(method.clone(), path, Some(key), body.as_ref())
            .await;
        assert_eq!(r.status, want, "{method} {path}: {}", r.body);
        r.body
    }

    /// A tenant (quotas from `extra`) with an admin and two members, each with a key.
    pub async fn tenant_with(&self, extra: Value) -> TenantFx {
        let name = unique("tenant");
        let mut body = json!({ "name": name });
        if let (Some(b), Some(e)) = (body.as_object_mut(), extra.as_object()) {
            b.extend(e.clone());
        }
        let t = self
            .ok(
                Method::POST,
                "/api/v1/admin/tenants",
                ADMIN_KEY,
                Some(body),
                201,
            )
            .await;
        let id = t["id"].as_str().unwrap().to_string();
        let admin = self.member(&id, "admin").await;
        let member = self.member(&id, "member").await;
        let member2 = self.member(&id, "member").await;
        TenantFx {
            id,
            admin,
            member,
            member2,
        }
    }

    pub async fn tenant(&self) -> TenantFx {
        self.tenant_with(json!({})).await
    }

    /// A new user of the tenant with `role`, and a key, made with the platform admin key.
    pub async fn member(&self, tenant_id: &str, role: &str) -> Member {
        let u = self
            .ok(
                Method::POST,
                &format!("/api/v1/admin/tenants/{tenant_id}/users"),
                ADMIN_KEY,
                Some(json!({ "name": unique(role), "role": role })),
                201,
            )
            .await;
        let user_id = u["id"].as_str().unwrap().to_string();
        let k = self
            .ok(
                Method::POST,
                &format!("/api/v1/admin/tenants/{tenant_id}/api-keys"),
                ADMIN_KEY,
                Some(json!({ "user_id": user_id, "name": "test key" })),
                201,
            )
            .await;
        Member {
            user_id,
            key: k["key"].as_str().unwrap().to_string(),
            key_id: k["id"].as_str().unwrap().to_string(),
        }
    }

    /// What the engine would have written for one finished run of `user` in a new session:
    /// `messages` messages, `events` events (seq 1..=events), a run with token usage, two
    /// tool-call audit rows and one decided approval.
    pub async fn seed_session(
        &self,
        t: &TenantFx,
        user_id: &str,
        messages_n: usize,
        events_n: usize,
    ) -> Seeded {
        let scope = t.scope();
        let user: UserId = user_id.parse().unwrap();
        let db = &self.db;
        let s = sessions::create(
            db,
            &scope,
            sessions::NewSession {
                id: None,
                user_id: user,
                assistant_id: AssistantId::default_assistant(),
                auto_approve: false,
                metadata: json!({ "seeded": true }),
            },
        )
        .await
        .unwrap();
        let run = RunId::new();
        executions::create(
            db,
            &scope,
            executions::NewExecution {
                id: run,
                user_id: user,
                session_id: s.id,
                assistant_id: "default".into(),
                input: "message 0".into(),
                trace_id: None,
                status: executions::ExecutionStatus::Running,
                role: None,
            },
        )
        .await
        .unwrap();
        for i in 0..messages_n {
            let role = if i % 2 == 0 {
                messages::MessageRole::User
            } else {
                messages::MessageRole::Assistant
            };
            messages::save(
                db,
                &scope,
                s.id,
                messages::NewMessage {
                    run_id: Some(run),
                    role,
                    content: format!("message {i}"),
                    tool_calls: None,
                    tool_call_id: None,
                },
            )
            .await
            .unwrap();
        }
        let evs: Vec<ExecutionEvent> = (1..=events_n as u64)
            .map(|seq| {
                ExecutionEvent::new(
                    seq,
                    s.id.to_string(),
                    run.to_string(),
                    EventPayload::text(format!("part {seq}"), false),
                )
            })
            .collect();
        events::append(db, &scope, s.id, &evs).await.unwrap();
        for (i, tool) in ["read_file", "write_file"].iter().enumerate() {
            tool_calls::insert(
                db,
                &scope,
                tool_calls::NewToolCallLog {
                    session_id: s.id,
                    execution_id: run,
                    tool_call_id: format!("call_{i}"),
                    tool_name: tool.to_string(),
                    input: json!({ "file_path": "a.txt" }),
                    output: Some(json!({ "ok": true })),
                    error: None,
                    duration_ms: 7,
                    approved: (i == 1).then_some(true),
                    approved_by: (i == 1).then_some(user),
                },
            )
            .await
            .unwrap();
        }
        let approval = ApprovalId::new();
        approvals::create(
            db,
            &scope,
            approvals::NewApproval {
                id: approval,
                session_id: s.id,
                execution_id: run,
                kind: "approval".into(),
                tool_call_id: Some("call_1".into()),
                request: json!({ "action_requests": [{ "name": "write_file" }] }),
            },
        )
        .await
        .unwrap();
        approvals::decide(
            db,
            &scope,
            approval,
            approvals::ApprovalStatus::Approved,
            None,
            Some(user),
        )
        .await
        .unwrap();
        executions::update(
            db,
            &scope,
            run,
            executions::ExecutionStatus::Completed,
            3,
            TokenUsage::new(100, 20),
            None,
        )
        .await
        .unwrap();
        Seeded {
            session_id: s.id,
            run_id: run,
            approval_id: approval,
        }
    }

    /// `(method, route pattern, status)` of every request the server counted.
    pub async fn observed(&self) -> BTreeSet<(String, String, u16)> {
        parse_observed(&self.metrics().await)
    }

    /// The server's `/metrics` text.
    /// `GET /api/v1/executions/{run}` with `key`: the run as the REST API shows it.
    pub async fn execution(&self, key: &str, run: &str) -> Value {
        self.ok(
            Method::GET,
            &format!("/api/v1/executions/{run}"),
            key,
            None,
            200,
        )
        .await
    }

    pub async fn metrics(&self) -> String {
        self.http
            .get(self.url("/metrics"))
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap()
    }
}

/// Parse `agentry_http_requests_total{method="GET",route="/x",status="200"} 3` lines.
pub fn parse_observed(metrics: &str) -> BTreeSet<(String, String, u16)> {
    let label = |line: &str, name: &str| -> Option<String> {
        let start = line.find(&format!("{name}=\""))? + name.len() + 2;
        let end = line[start..].find('"')? + start;
        Some(line[start..end].to_string())
    };
    metrics
        .lines()
        .filter(|l| l.starts_with("agentry_http_requests_total{"))
        .filter_map(|l| {
            Some((
                label(l, "method")?,
                label(l, "route")?,
                label(l, "status")?.parse().ok()?,
            ))
        })
        .collect()
}
