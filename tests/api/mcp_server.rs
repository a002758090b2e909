//! `/mcp`, Agentry as an MCP server, from the outside: rmcp's own Streamable HTTP client (the
//! official Rust SDK, not our code) connects with a tenant key, lists and calls the built-in
//! tools and `ask_default`, answers approvals and questions by elicitation, and cancels; raw
//! HTTP checks the key and the session's owner.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use reqwest::Method;
use rmcp::ClientHandler;
use rmcp::model::{
    CallToolRequestParams, CallToolResult, ClientCapabilities, ClientConfig, ElicitRequestParams,
    ElicitResult, ElicitationAction, ErrorData, Implementation, JsonObject,
};
use rmcp::service::{RequestContext, RoleClient, RunningService, ServiceExt};
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use serde_json::{Value, json};

use crate::ctx::{ADMIN_KEY, Ctx, Member, TenantFx};

/// The MCP client's user: answers each elicitation with the next answer (declines when there
/// is none) and remembers what it was asked.
#[derive(Clone)]
pub struct User {
    elicitation: bool,
    answers: Arc<Mutex<VecDeque<Value>>>,
    pub asked: Arc<Mutex<Vec<String>>>,
    /// How long the user takes to answer.
    thinking: Duration,
}

impl User {
    pub fn answering(answers: Vec<Value>) -> Self {
        User {
            elicitation: true,
            answers: Arc::new(Mutex::new(answers.into())),
            asked: Arc::default(),
            thinking: Duration::ZERO,
        }
    }

    /// A user who takes `thinking` to answer each elicitation.
    pub fn slow(answers: Vec<Value>, thinking: Duration) -> Self {
        User {
            thinking,
            ..Self::answering(answers)
        }
    }

    /// A client that declares no elicitation support.
    pub fn unreachable() -> Self {
        User {
            elicitation: false,
            ..Self::answering(vec![])
        }
    }

    fn asked(&self) -> Vec<String> {
        self.asked.lock().unwrap().clone()
    }
}

impl ClientHandler for User {
    fn get_info(&self) -> ClientConfig {
        let caps = if self.elicitation {
            ClientCapabilities::builder().enable_elicitation().build()
        } else {
            ClientCapabilities::default()
        };
        ClientConfig::new(caps, Implementation::new("agentry-e2e", "0.0.0"))
    }

    async fn create_elicitation(
        &self,
        request: ElicitRequestParams,
        _context: RequestContext<RoleClient>,
    ) -> Result<ElicitResult, ErrorData> {
        if let ElicitRequestParams::FormElicitationParams { message, .. } = &request {
            self.asked.lock().unwrap().push(message.clone());
        }
        tokio::time::sleep(self.thinking).await;
        let next = self.answers.lock().unwrap().pop_front();
        Ok(match next {
            Some(a) => {
                ElicitResult::new(ElicitationAction::Accept).with_content(json!({"answer": a}))
            }
            None => ElicitResult::new(ElicitationAction::Decline),
        })
    }
}

pub type Client = RunningService<RoleClient, User>;

/// Connect rmcp's Streamable HTTP client to `/mcp` with `key`.
pub async fn connect(ctx: &Ctx, key: &str, user: User) -> Client {
    connect_to(ctx, "/mcp", key, user).await
}

/// Connect rmcp's Streamable HTTP client to `path` (`/mcp` or a virtual server) with `key`.
pub async fn connect_to(ctx: &Ctx, path: &str, key: &str, user: User) -> Client {
    let config =
        StreamableHttpClientTransportConfig::with_uri(ctx.url(path)).auth_header(key.to_string());
    let transport = StreamableHttpClientTransport::with_client(reqwest::Client::new(), config);
    user.serve(transport)
        .await
        .expect("the MCP client connects")
}

fn params(name: &str, args: Value) -> CallToolRequestParams {
    let args: JsonObject = args.as_object().cloned().unwrap_or_default();
    CallToolRequestParams::new(name.to_string()).with_arguments(args)
}

pub async fn call(client: &Client, name: &str, args: Value) -> CallToolResult {
    tokio::time::timeout(
        Duration::from_secs(60),
        client.call_tool(params(name, args)),
    )
    .await
    .unwrap_or_else(|_| panic!("{name} answered within 60 s"))
    .unwrap_or_else(|e| panic!("{name}: {e}"))
}

pub fn text(r: &CallToolResult) -> String {
    r.content
        .iter()
        .filter_map(|c| c.as_text().map(|t| t.text.clone()))
        .collect::<Vec<_>>()
        .join("\n")
}

pub fn workspace(ctx: &Ctx, t: &TenantFx, m: &Member) -> std::path::PathBuf {
    ctx.server
        .data_dir
        .path()
        .join("workspaces")
        .join(&t.id)
        .join(&m.user_id)
}

/// A tenant whose members may add stdio MCP servers.
pub fn stdio_tenant() -> Value {
    json!({"features_enabled": ["stdio_mcp"], "policy": {"stdio_mcp_role": "member"}})
}

/// The reference "everything" server (stdio) as `m`'s server `everything`.
pub fn everything_server() -> Value {
    json!({
        "name": "everything",
        "command": agentry_mcp::testing::node().to_string_lossy(),
        "args": [agentry_mcp::testing::everything_js().to_string_lossy(), "stdio"],
    })
}

/// Add [`everything_server`] as `m`'s server.
pub async fn add_everything(ctx: &Ctx, m: &Member) {
    ctx.ok(
        Method::POST,
        &crate::mcp::servers_path(&m.user_id),
        &m.key,
        Some(everything_server()),
        201,
    )
    .await;
}

/// The audit rows of the caller's runs whose tool is `tool`, newest run first.
async fn audited(ctx: &Ctx, key: &str, tool: &str) -> Vec<Value> {
    let runs = ctx
        .ok(Method::GET, "/api/v1/executions?limit=50", key, None, 200)
        .await;
    let mut rows = Vec::new();
    for run in runs["items"].as_array().unwrap() {
        let id = run["id"].as_str().unwrap().to_string();
        let detail = ctx
            .ok(
                Method::GET,
                &format!("/api/v1/executions/{id}"),
                key,
                None,
                200,
            )
            .await;
        for call in detail["tool_calls"].as_array().unwrap() {
            if call["tool_name"] == tool {
                let mut call = call.clone();
                call["run_status"] = run["status"].clone();
                rows.push(call);
            }
        }
    }
    rows
}

/// The tool-call pipeline's clock on `/mcp`: a tool's timeout stands still while its
/// elicitation waits for the user. The server runs the interaction tools with a 1 s timeout
/// (`AGENTRY_TOOLS__INTERACTION_TIMEOUT_SECS=1`); the user takes 3 s to answer, and the call
/// still gets the answer (a plain timeout would have ended it after 1 s). The call's audit row
/// has the answer.
pub async fn elicitation_stops_the_clock(ctx: &Ctx) {
    let t = ctx.tenant().await;
    let me = &t.member;
    let user = User::slow(vec![json!("Rome")], Duration::from_secs(3));
    let client = connect(ctx, &me.key, user.clone()).await;
    let started = std::time::Instant::now();
    let r = call(
        &client,
        "ask_question",
        json!({"question": "Which city?", "question_type": "choice", "options": ["Paris", "Rome"]}),
    )
    .await;
    assert!(
        started.elapsed() >= Duration::from_secs(3),
        "the user took 3 s"
    );
    assert_eq!(r.is_error, Some(false), "{r:?}");
    let out = r.structured_content.clone().unwrap();
    assert_eq!(out["answered"], true, "{out}");
    assert_eq!(out["choice"], "Rome", "{out}");
    assert_eq!(user.asked().len(), 1);
    assert!(
        user.asked()[0].contains("Which city?"),
        "{:?}",
        user.asked()
    );
    let rows = audited(ctx, &me.key, "ask_question").await;
    assert_eq!(rows.len(), 1, "{rows:?}");
    assert_eq!(rows[0]["run_status"], "completed", "{rows:?}");
    assert!(rows[0]["output"].to_string().contains("Rome"), "{rows:?}");
    client.cancel().await.unwrap();

    // The stopped clock never becomes a hang: a user who does not answer within the
    // question's own timeout (2 s) gets the tool's reported "no answer".
    let silent = User::slow(vec![json!("late")], Duration::from_secs(5));
    let client = connect(ctx, &me.key, silent).await;
    let r = call(
        &client,
        "ask_question",
        json!({"question": "Anyone?", "timeout": 2}),
    )
    .await;
    let out = r.structured_content.clone().unwrap();
    assert_eq!(out["answered"], false, "{out}");
    assert_eq!(out["reason"], "timed_out", "{out}");
    client.cancel().await.unwrap();
}

/// Built-in tools over `/mcp`: listed by RBAC, run in the caller's workspace, approvals by
/// elicitation (and refused without it), every call audited.
pub async fn builtin_tools(ctx: &Ctx) {
    let t = ctx.tenant().await;
    let me = &t.member;
    let user = User::answering(vec![json!(true)]);
    let client = connect(ctx, &me.key, user.clone()).await;

    let listed = client.list_all_tools().await.unwrap();
    let names: Vec<String> = listed.iter().map(|t| t.name.to_string()).collect();
    for want in [
        "read_file",
        "write_file",
        "list_directory",
        "write_todos",
        "remember",
        "ask_question",
        "ask_default",
    ] {
        assert!(names.contains(&want.to_string()), "{want} in {names:?}");
    }
    let write = listed.iter().find(|t| t.name == "write_file").unwrap();
    assert_eq!(
        write.annotations.as_ref().and_then(|a| a.destructive_hint),
        Some(true),
        "write_file needs approval and says so"
    );

    // write_file needs approval: the user is asked, says yes, the file lands in *this* user's
    // workspace.
    let r = call(
        &client,
        "write_file",
        json!({"file_path": "notes/mcp.txt", "content": "written over MCP\n"}),
    )
    .await;
    assert_eq!(r.is_error, Some(false), "{r:?}");
    let asked = user.asked();
    assert_eq!(asked.len(), 1, "{asked:?}");
    assert!(asked[0].contains("write_file"), "{asked:?}");
    let file = workspace(ctx, &t, me).join("notes/mcp.txt");
    assert_eq!(
        std::fs::read_to_string(&file).unwrap(),
        "written over MCP\n"
    );
    assert!(
        !workspace(ctx, &t, &t.member2)
            .join("notes/mcp.txt")
            .exists(),
        "another user's workspace is untouched"
    );

    // read_file needs none; it reads the same file back.
    let r = call(&client, "read_file", json!({"file_path": "notes/mcp.txt"})).await;
    assert_eq!(r.is_error, Some(false), "{r:?}");
    assert!(text(&r).contains("written over MCP"), "{}", text(&r));
    assert_eq!(user.asked().len(), 1, "reading asked nobody");

    // Invalid arguments: a validation error result, not a call.
    let r = call(&client, "read_file", json!({"path": "x"})).await;
    assert_eq!(r.is_error, Some(true));
    assert_eq!(
        r.structured_content.as_ref().unwrap()["error"]["code"],
        "validation_error"
    );

    // The user says no (no answers left: decline): refused, nothing written.
    let r = call(
        &client,
        "write_file",
        json!({"file_path": "notes/declined.txt", "content": "no"}),
    )
    .await;
    assert_eq!(r.is_error, Some(true));
    assert!(text(&r).contains("did not approve"), "{}", text(&r));
    assert!(!workspace(ctx, &t, me).join("notes/declined.txt").exists());
    client.cancel().await.unwrap();

    // A client that cannot ask its user never gets an unapproved call.
    let blind = connect(ctx, &me.key, User::unreachable()).await;
    let r = call(
        &blind,
        "write_file",
        json!({"file_path": "notes/blind.txt", "content": "no"}),
    )
    .await;
    assert_eq!(r.is_error, Some(true));
    assert!(text(&r).contains("elicitation"), "{}", text(&r));
    assert_eq!(
        r.structured_content.as_ref().unwrap()["error"]["code"],
        "permission_denied"
    );
    assert!(!workspace(ctx, &t, me).join("notes/blind.txt").exists());
    blind.cancel().await.unwrap();

    // Every call has its audit row: two writes refused, one approved; the read needed nothing.
    let writes = audited(ctx, &me.key, "write_file").await;
    assert_eq!(writes.len(), 3, "{writes:?}");
    let approved: Vec<&Value> = writes.iter().filter(|w| w["approved"] == true).collect();
    assert_eq!(approved.len(), 1, "{writes:?}");
    assert_eq!(approved[0]["input"]["file_path"], "notes/mcp.txt");
    assert_eq!(approved[0]["run_status"], "completed");
    assert_eq!(
        writes.iter().filter(|w| w["approved"] == false).count(),
        2,
        "{writes:?}"
    );
    assert!(
        writes
            .iter()
            .filter(|w| w["approved"] == false)
            .all(|w| w["run_status"] == "rejected")
    );
    let reads = audited(ctx, &me.key, "read_file").await;
    assert_eq!(reads.len(), 1, "{reads:?}");
    assert_eq!(reads[0]["approved"], Value::Null);
    assert!(reads[0]["output"].to_string().contains("written over MCP"));
    // The other member sees none of it.
    assert!(audited(ctx, &t.member2.key, "write_file").await.is_empty());

    // A tenant whose members may not use files: the file tools are not even listed.
    let strict = ctx.tenant().await;
    ctx.ok(
        Method::PATCH,
        &format!("/api/v1/admin/tenants/{}", strict.id),
        ADMIN_KEY,
        Some(json!({"tool_permissions": {"member": ["todos:*"], "admin": ["*:*"]}})),
        200,
    )
    .await;
    let member = connect(ctx, &strict.member.key, User::answering(vec![])).await;
    let names: Vec<String> = member
        .list_all_tools()
        .await
        .unwrap()
        .iter()
        .map(|t| t.name.to_string())
        .collect();
    assert!(names.contains(&"write_todos".to_string()), "{names:?}");
    assert!(!names.contains(&"read_file".to_string()), "{names:?}");
    let r = member
        .call_tool(params("read_file", json!({"file_path": "x"})))
        .await;
    assert!(r.is_err(), "a tool the role may not use is unknown: {r:?}");
    member.cancel().await.unwrap();
}

/// `ask_default`: a real chat through the engine, with its approval and question put to the
/// MCP client's user, a continued conversation, and a cancel.
pub async fn ask_assistant(ctx: &Ctx) {
    let t = ctx.tenant().await;
    let me = &t.member;
    let user = User::answering(vec![json!(true), json!("blue")]);
    let client = connect(ctx, &me.key, user.clone()).await;

    let r = call(&client, "ask_default", json!({"message": "hello over MCP"})).await;
    assert_eq!(r.is_error, Some(false), "{r:?}");
    assert_eq!(text(&r), "(scripted) You said: hello over MCP");
    let out = r.structured_content.clone().unwrap();
    assert_eq!(out["status"], "completed");
    let session = out["session_id"].as_str().unwrap().to_string();
    let run = out["run_id"].as_str().unwrap().to_string();
    // It is a real run of the user's, in a session of theirs.
    let exec = ctx
        .ok(
            Method::GET,
            &format!("/api/v1/executions/{run}"),
            &me.key,
            None,
            200,
        )
        .await;
    assert_eq!(exec["status"], "completed", "{exec}");
    assert_eq!(exec["input"], "hello over MCP");

    // The model calls write_file (approval) then ask_question (a question): both reach the
    // MCP client's user by elicitation.
    let message = "/tool write_file {\"file_path\": \"asked.txt\", \"content\": \"via ask\"}\n\
                   /tool ask_question {\"question\": \"Favourite colour?\"}";
    let r = call(
        &client,
        "ask_default",
        json!({"message": message, "session_id": session}),
    )
    .await;
    assert_eq!(r.is_error, Some(false), "{r:?}");
    let out = r.structured_content.clone().unwrap();
    assert_eq!(out["session_id"], session.as_str(), "the same conversation");
    assert_eq!(out["status"], "completed");
    let answer = text(&r);
    assert!(answer.contains("Tool write_file returned"), "{answer}");
    assert!(answer.contains("blue"), "{answer}");
    let asked = user.asked();
    assert_eq!(asked.len(), 2, "{asked:?}");
    assert!(
        asked[0].contains("write_file") && asked[0].contains("Allow"),
        "{asked:?}"
    );
    assert!(asked[1].contains("Favourite colour?"), "{asked:?}");
    assert_eq!(
        std::fs::read_to_string(workspace(ctx, &t, me).join("asked.txt")).unwrap(),
        "via ask"
    );
    // The loop audited its own call, approved.
    let rows = audited(ctx, &me.key, "write_file").await;
    assert_eq!(rows.len(), 1, "{rows:?}");
    assert_eq!(rows[0]["approved"], true);

    // A session of another assistant, or of another user, cannot be continued here.
    let r = call(
        &client,
        "ask_default",
        json!({"message": "hi", "session_id": uuid::Uuid::new_v4().to_string()}),
    )
    .await;
    assert_eq!(r.is_error, Some(true));
    assert_eq!(
        r.structured_content.as_ref().unwrap()["error"]["code"],
        "not_found"
    );
    client.cancel().await.unwrap();

    // Without elicitation, an approval the run needs is rejected, never granted.
    let blind = connect(ctx, &me.key, User::unreachable()).await;
    let r = call(
        &blind,
        "ask_default",
        json!({"message": "/tool write_file {\"file_path\": \"blind.txt\", \"content\": \"x\"}"}),
    )
    .await;
    assert_eq!(r.is_error, Some(true), "{r:?}");
    assert_eq!(r.structured_content.as_ref().unwrap()["status"], "rejected");
    assert!(!workspace(ctx, &t, me).join("blind.txt").exists());

    // Cancelling the MCP request cancels the run: dropping rmcp's call future sends
    // notifications/cancelled.
    let slow = blind.call_tool(params(
        "ask_default",
        json!({"message": "/sleep 30000\nslow"}),
    ));
    assert!(
        tokio::time::timeout(Duration::from_millis(1500), slow)
            .await
            .is_err(),
        "the slow run is still going"
    );
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let runs = ctx
            .ok(
                Method::GET,
                "/api/v1/executions?status=cancelled",
                &me.key,
                None,
                200,
            )
            .await;
        if runs["items"]
            .as_array()
            .unwrap()
            .iter()
            .any(|r| r["input"].as_str().is_some_and(|i| i.contains("slow")))
        {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the run was not cancelled: {runs}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    blind.cancel().await.unwrap();
}

/// A client on protocol 2026-07-28: no session, and the approval arrives as an
/// `input_required` result that rmcp's client answers and retries.
pub async fn sessionless_era(ctx: &Ctx) {
    use rmcp::model::ProtocolVersion;
    use rmcp::service::{ClientLifecycleMode, ClientServiceExt};
    let t = ctx.tenant().await;
    let me = &t.member;
    let user = User::answering(vec![json!(true)]);
    let mut config =
        StreamableHttpClientTransportConfig::with_uri(ctx.url("/mcp")).auth_header(me.key.clone());
    config.allow_stateless = true;
    let transport = StreamableHttpClientTransport::with_client(reqwest::Client::new(), config);
    let client = user
        .clone()
        .serve_with_lifecycle(
            transport,
            ClientLifecycleMode::Discover {
                preferred_versions: vec![ProtocolVersion::V_2026_07_28],
            },
        )
        .await
        .expect("a 2026-07-28 client connects");
    let names: Vec<String> = client
        .list_all_tools()
        .await
        .unwrap()
        .iter()
        .map(|t| t.name.to_string())
        .collect();
    assert!(names.contains(&"ask_default".to_string()), "{names:?}");
    let r = tokio::time::timeout(
        Duration::from_secs(60),
        client.call_tool(params(
            "write_file",
            json!({"file_path": "era.txt", "content": "2026"}),
        )),
    )
    .await
    .unwrap()
    .unwrap();
    assert_eq!(r.is_error, Some(false), "{r:?}");
    assert_eq!(user.asked().len(), 1);
    assert_eq!(
        std::fs::read_to_string(workspace(ctx, &t, me).join("era.txt")).unwrap(),
        "2026"
    );
    let r = call(&client, "ask_default", json!({"message": "new era"})).await;
    assert_eq!(text(&r), "(scripted) You said: new era");
    client.cancel().await.unwrap();
}

/// An `initialize` request as raw HTTP.
pub fn initialize(ctx: &Ctx, key: Option<&str>) -> reqwest::RequestBuilder {
    initialize_at(ctx, "/mcp", key)
}

/// An `initialize` request to `path` as raw HTTP.
pub fn initialize_at(ctx: &Ctx, path: &str, key: Option<&str>) -> reqwest::RequestBuilder {
    ctx.request(Method::POST, path, key)
        .header("accept", "application/json, text/event-stream")
        .json(&json!({
            "jsonrpc": "2.0", "id": 1, "method": "initialize",
            "params": {"protocolVersion": "2025-11-25", "capabilities": {},
                       "clientInfo": {"name": "raw", "version": "0"}}
        }))
}

pub fn on_session(
    ctx: &Ctx,
    key: Option<&str>,
    session: &str,
    body: Value,
) -> reqwest::RequestBuilder {
    on_session_at(ctx, "/mcp", key, session, body)
}

/// A request on MCP session `session` of `path`.
pub fn on_session_at(
    ctx: &Ctx,
    path: &str,
    key: Option<&str>,
    session: &str,
    body: Value,
) -> reqwest::RequestBuilder {
    ctx.request(Method::POST, path, key)
        .header("accept", "application/json, text/event-stream")
        .header("mcp-session-id", session)
        .header("mcp-protocol-version", "2025-11-25")
        .json(&body)
}

/// The key on every request, and a session only for the key that made it.
pub async fn keys_and_sessions(ctx: &Ctx) {
    let t = ctx.tenant().await;
    let other = ctx.tenant().await;

    for key in [
        None,
        Some("agk_NotAReal_0000000000000000000000000000000000000000"),
    ] {
        let r = ctx.send(initialize(ctx, key)).await;
        assert_eq!((r.status, r.code()), (401, "unauthorized"), "{}", r.body);
    }
    let r = ctx.send(initialize(ctx, Some(ADMIN_KEY))).await;
    assert_eq!((r.status, r.code()), (403, "forbidden"), "{}", r.body);
    // The key is checked first: a bad key with a body that is not even JSON is still a 401.
    let r = ctx
        .send(
            ctx.request(Method::POST, "/mcp", None)
                .header("content-type", "application/json")
                .body("{not json"),
        )
        .await;
    assert_eq!(r.status, 401);

    // X-API-Key works as on the REST API.
    let r = ctx
        .send(initialize(ctx, None).header("x-api-key", &t.member2.key))
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert!(r.headers.contains_key("mcp-session-id"));

    let r = ctx.send(initialize(ctx, Some(&t.member.key))).await;
    assert_eq!(r.status, 200, "{}", r.body);
    let session = r.headers["mcp-session-id"].to_str().unwrap().to_string();
    assert!(r.body.to_string().contains("serverInfo"), "{}", r.body);
    let initialized = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
    let list = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"});

    // Another tenant's key, and another user of the same tenant, do not find the session.
    for key in [&other.admin.key, &t.member2.key, &t.admin.key] {
        let r = ctx
            .send(on_session(ctx, Some(key), &session, list.clone()))
            .await;
        assert_eq!((r.status, r.code()), (404, "not_found"), "{}", r.body);
    }
    let r = ctx
        .send(on_session(ctx, None, &session, list.clone()))
        .await;
    assert_eq!(r.status, 401);
    // Its owner goes on using it.
    let r = ctx
        .send(on_session(ctx, Some(&t.member.key), &session, initialized))
        .await;
    assert_eq!(r.status, 202, "{}", r.body);
    let r = ctx
        .send(on_session(ctx, Some(&t.member.key), &session, list.clone()))
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert!(r.body.to_string().contains("ask_default"), "{}", r.body);
    // Deleting it by another key does nothing; by its owner ends it.
    let del = |key: &str| {
        ctx.request(Method::DELETE, "/mcp", Some(key))
            .header("mcp-session-id", &session)
            .header("mcp-protocol-version", "2025-11-25")
    };
    let r = ctx.send(del(&other.admin.key)).await;
    assert_eq!(r.status, 404);
    let r = ctx.send(del(&t.member.key)).await;
    assert_eq!(r.status, 204, "{}", r.body);
    let r = ctx
        .send(on_session(ctx, Some(&t.member.key), &session, list))
        .await;
    assert_eq!((r.status, r.code()), (404, "not_found"), "{}", r.body);

    // Transport mistakes answer our error JSON.
    let r = ctx
        .send(
            ctx.request(Method::POST, "/mcp", Some(&t.member.key))
                .header("accept", "application/json")
                .json(&json!({"jsonrpc": "2.0", "id": 1, "method": "ping"})),
        )
        .await;
    assert_eq!((r.status, r.code()), (406, "not_acceptable"), "{}", r.body);
    let r = ctx
        .send(ctx.request(Method::PUT, "/mcp", Some(&t.member.key)))
        .await;
    assert_eq!((r.status, r.code()), (405, "method_not_allowed"));
    assert_eq!(r.headers["allow"], "GET, POST, DELETE");
}

/// A Host header outside `mcp.server_allowed_hosts` is refused (DNS rebinding); a configured
/// name is answered.
pub async fn allowed_hosts(ctx: &Ctx) {
    let t = ctx.tenant().await;
    let configured = Ctx::start_with(
        &[(
            "AGENTRY_MCP__SERVER_ALLOWED_HOSTS",
            "agentry.test,localhost",
        )],
        None,
    )
    .await;
    let ct = configured.tenant().await;
    let r = configured
        .send(initialize(&configured, Some(&ct.member.key)).header("host", "agentry.test"))
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    // 127.0.0.1 is no longer in the list.
    let r = configured
        .send(initialize(&configured, Some(&ct.member.key)))
        .await;
    assert_eq!((r.status, r.code()), (403, "forbidden"), "{}", r.body);
    let r = ctx
        .send(initialize(ctx, Some(&t.member.key)).header("host", "evil.example"))
        .await;
    assert_eq!((r.status, r.code()), (403, "forbidden"), "{}", r.body);
    assert!(
        r.body["message"]
            .as_str()
            .unwrap()
            .contains("mcp.server_allowed_hosts")
    );
}

/// OAuth-first clients: every 401 of `/mcp` says `WWW-Authenticate: Bearer
/// resource_metadata="…"`, that URL answers the RFC 9728 metadata of `/mcp` (no key needed),
/// and an API key stays a valid bearer token. With `mcp.public_url` the metadata and the
/// challenge name the public URL, not the request's host.
pub async fn oauth_resource_metadata(ctx: &Ctx) {
    let t = ctx.tenant().await;
    let meta_url = ctx.url("/.well-known/oauth-protected-resource/mcp");
    let r = ctx.send(initialize(ctx, None)).await;
    assert_eq!(r.status, 401, "{}", r.body);
    assert_eq!(
        r.headers["www-authenticate"].to_str().unwrap(),
        format!("Bearer resource_metadata=\"{meta_url}\"")
    );
    // Credentials that are not a valid key: the same challenge, with `invalid_token`.
    for rb in [
        initialize(
            ctx,
            Some("agk_NotAReal_0000000000000000000000000000000000000000"),
        ),
        initialize(ctx, None).header("x-api-key", "nope"),
    ] {
        let r = ctx.send(rb).await;
        assert_eq!(r.status, 401, "{}", r.body);
        assert_eq!(
            r.headers["www-authenticate"].to_str().unwrap(),
            format!("Bearer resource_metadata=\"{meta_url}\", error=\"invalid_token\"")
        );
    }
    // On a session too (a GET stream without a key).
    let r = ctx
        .send(
            ctx.request(Method::GET, "/mcp", None)
                .header("accept", "text/event-stream")
                .header("mcp-session-id", "whatever"),
        )
        .await;
    assert_eq!(r.status, 401);
    assert!(r.headers.contains_key("www-authenticate"));

    // The URL the challenge names answers without a key.
    let r = ctx
        .send(ctx.request(
            Method::GET,
            "/.well-known/oauth-protected-resource/mcp",
            None,
        ))
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.body["resource"], ctx.url("/mcp"));
    assert_eq!(r.body["bearer_methods_supported"], json!(["header"]));
    // Built from this request's Host: not for a shared cache.
    assert_eq!(r.headers["cache-control"], "no-store");
    // Agentry validates no external authorization server's tokens, so it names none.
    assert!(r.body.get("authorization_servers").is_none(), "{}", r.body);
    let root = ctx
        .send(ctx.request(Method::GET, "/.well-known/oauth-protected-resource", None))
        .await;
    assert_eq!(root.status, 200, "{}", root.body);
    assert_eq!(root.body["resource"], ctx.url(""));
    let r = ctx
        .send(ctx.request(
            Method::POST,
            "/.well-known/oauth-protected-resource/mcp",
            None,
        ))
        .await;
    assert_eq!(r.status, 405);

    // The key as a bearer token: no challenge, a session.
    let r = ctx.send(initialize(ctx, Some(&t.member.key))).await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert!(!r.headers.contains_key("www-authenticate"));

    let public = Ctx::start_with(
        &[("AGENTRY_MCP__PUBLIC_URL", "https://agentry.example/")],
        None,
    )
    .await;
    let r = public.send(initialize(&public, None)).await;
    assert_eq!(r.status, 401);
    assert_eq!(
        r.headers["www-authenticate"].to_str().unwrap(),
        "Bearer resource_metadata=\"https://agentry.example/.well-known/oauth-protected-resource/mcp\""
    );
    let r = public
        .send(public.request(
            Method::GET,
            "/.well-known/oauth-protected-resource/mcp",
            None,
        ))
        .await;
    assert_eq!(r.body["resource"], "https://agentry.example/mcp");
    assert!(!r.headers.contains_key("cache-control"), "{:?}", r.headers);
}

/// The official Python SDK client works against `/mcp` with an API key as its bearer token.
pub async fn python_sdk_client(ctx: &Ctx) {
    let t = ctx.tenant().await;
    let ws = workspace(ctx, &t, &t.member);
    std::fs::create_dir_all(&ws).unwrap();
    std::fs::write(ws.join("py.txt"), "hello from the workspace").unwrap();
    let python = agentry_mcp::testing::venv_dir().join("bin/python");
    assert!(
        python.exists(),
        "{} is missing: run scripts/install-mcp-test-servers.sh",
        python.display()
    );
    let script = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/api/mcp_python_client.py");
    let out = tokio::time::timeout(
        Duration::from_secs(120),
        tokio::process::Command::new(python)
            .arg(&script)
            .env("AGENTRY_MCP_URL", ctx.url("/mcp"))
            .env("AGENTRY_KEY", &t.member.key)
            .env("NO_PROXY", "127.0.0.1")
            .output(),
    )
    .await
    .expect("the Python client ends within 120 s")
    .expect("run the Python MCP client");
    assert!(
        out.status.success(),
        "the Python MCP client failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let r: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "the client printed no JSON ({e}): {}",
            String::from_utf8_lossy(&out.stdout)
        )
    });
    assert_eq!(r["server"], "agentry", "{r}");
    assert_eq!(
        r["capabilities"],
        json!(["completions", "logging", "prompts", "resources", "tools"]),
        "{r}"
    );
    let tools: Vec<&str> = r["tools"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(Value::as_str)
        .collect();
    assert!(
        tools.contains(&"read_file") && tools.contains(&"ask_default"),
        "{r}"
    );
    assert_eq!(r["read_error"], false, "{r}");
    assert!(
        r["read_text"]
            .as_str()
            .unwrap()
            .contains("hello from the workspace"),
        "{r}"
    );
    assert_eq!(r["unknown_resource"], -32602, "{r}");
}

/// `/mcp` re-exports the caller's own MCP servers: a member's stdio reference server's tool is
/// listed under the name their agent sees (`everything__echo`), called through the same
/// pipeline and audited like any `/mcp` call; another user of the tenant, its admin and
/// another tenant neither see nor call it.
pub async fn reexports_the_callers_mcp_servers(ctx: &Ctx) {
    let stdio = stdio_tenant();
    let t = ctx.tenant_with(stdio.clone()).await;
    let other = ctx.tenant_with(stdio).await;
    // A server may not take a built-in service's name: `assistants` would pass its tools off
    // as `ask_<assistant>` ones over /mcp, `files` would share the files grants.
    for reserved in ["assistants", "Files"] {
        let r = ctx
            .send(
                ctx.request(
                    Method::POST,
                    &crate::mcp::servers_path(&t.member.user_id),
                    Some(&t.member.key),
                )
                .json(&json!({"name": reserved, "url": "http://127.0.0.2:9/mcp"})),
            )
            .await;
        assert_eq!(
            (r.status, r.code()),
            (422, "validation_error"),
            "{reserved}: {}",
            r.body
        );
        assert!(
            r.body["message"]
                .as_str()
                .unwrap()
                .contains("built-in tool service"),
            "{}",
            r.body
        );
    }
    add_everything(ctx, &t.member).await;
    let names = |tools: Vec<rmcp::model::Tool>| -> Vec<String> {
        tools.into_iter().map(|t| t.name.to_string()).collect()
    };

    let client = connect(ctx, &t.member.key, User::answering(vec![])).await;
    let listed = names(client.list_all_tools().await.unwrap());
    assert!(listed.iter().any(|n| n == "everything__echo"), "{listed:?}");
    // Beside the built-ins and the assistants.
    assert!(listed.iter().any(|n| n == "read_file") && listed.iter().any(|n| n == "ask_default"));
    let r = call(
        &client,
        "everything__echo",
        json!({"message": "through /mcp"}),
    )
    .await;
    assert_ne!(r.is_error, Some(true), "{r:?}");
    assert!(text(&r).contains("Echo: through /mcp"), "{r:?}");
    // Audited like the built-in calls: an execution with its tool-call row.
    let rows = audited(ctx, &t.member.key, "everything__echo").await;
    assert_eq!(rows.len(), 1, "{rows:?}");
    assert_eq!(rows[0]["run_status"], "completed", "{rows:?}");
    assert!(
        rows[0]["output"].to_string().contains("through /mcp"),
        "{rows:?}"
    );
    client.cancel().await.unwrap();

    for key in [&t.member2.key, &t.admin.key, &other.admin.key] {
        let c = connect(ctx, key, User::answering(vec![])).await;
        let listed = names(c.list_all_tools().await.unwrap());
        assert!(
            !listed.iter().any(|n| n.starts_with("everything__")),
            "{listed:?}"
        );
        let e = c
            .call_tool(params("everything__echo", json!({"message": "stolen"})))
            .await
            .expect_err("another caller cannot call the member's server");
        assert!(e.to_string().contains("unknown tool"), "{e}");
        c.cancel().await.unwrap();
    }
    assert!(
        audited(ctx, &other.admin.key, "everything__echo")
            .await
            .is_empty()
    );

    // The tenant's tool permissions narrow re-exported tools like built-ins (the RBAC service
    // of an MCP tool is its server): without `everything:echo` the member neither sees nor
    // calls it, and the server's other tools stay.
    ctx.ok(
        Method::PATCH,
        &format!("/api/v1/admin/tenants/{}", t.id),
        ADMIN_KEY,
        Some(json!({"tool_permissions": {"member": ["*:*", "!everything:echo"]}})),
        200,
    )
    .await;
    let c = connect(ctx, &t.member.key, User::answering(vec![])).await;
    let listed = names(c.list_all_tools().await.unwrap());
    assert!(
        !listed.iter().any(|n| n == "everything__echo"),
        "{listed:?}"
    );
    assert!(
        listed.iter().any(|n| n.starts_with("everything__")),
        "{listed:?}"
    );
    let e = c
        .call_tool(params("everything__echo", json!({"message": "denied"})))
        .await
        .expect_err("a denied tool is not callable");
    assert!(e.to_string().contains("unknown tool"), "{e}");
    c.cancel().await.unwrap();
    assert_eq!(
        audited(ctx, &t.member.key, "everything__echo").await.len(),
        1
    );
}

/// REST parity with the MCP config file: a user's server takes a tool allow-list, a rate limit
/// and a health check over REST, GET shows them, bad values are 422 naming the field, and the
/// pool applies them (here seen through `/mcp`: only the allowed tool, and the third call in a
/// minute refused by the limit of 2).
pub async fn rest_policy_of_a_users_server(ctx: &Ctx) {
    let t = ctx.tenant_with(stdio_tenant()).await;
    let path = crate::mcp::servers_path(&t.member.user_id);
    let server = |extra: Value| {
        let mut body = everything_server();
        body.as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        body
    };
    // Bad values are refused before anything is stored.
    for (extra, field) in [
        (json!({"allowed_tools": [""]}), "allowed_tools"),
        (json!({"rate_limit_per_minute": 0}), "rate_limit_per_minute"),
        (
            json!({"health_check": {"endpoint": "/health"}}),
            "health_check.endpoint",
        ),
        (
            json!({"health_check": {"interval_secs": 0}}),
            "health_check.interval_secs",
        ),
        (
            json!({"health_check": {"interval_secs": 5, "timeout_secs": 10}}),
            "health_check.timeout_secs",
        ),
    ] {
        let r = ctx
            .call(
                Method::POST,
                &path,
                Some(&t.member.key),
                Some(&server(extra.clone())),
            )
            .await;
        assert_eq!(
            (r.status, r.code()),
            (422, "validation_error"),
            "{extra}: {}",
            r.body
        );
        assert!(r.body.to_string().contains(field), "{extra}: {}", r.body);
    }
    let r = ctx
        .call(
            Method::POST,
            &path,
            Some(&t.member.key),
            Some(&server(json!({"health_check": {"every": 5}}))),
        )
        .await;
    assert_eq!(r.status, 422, "{}", r.body);
    // An HTTP server's health endpoint must stay on its own origin.
    let r = ctx
        .call(
            Method::POST,
            &path,
            Some(&t.member.key),
            Some(&json!({"name": "remote", "url": "http://127.0.0.2:9/mcp",
                         "health_check": {"endpoint": "//169.254.169.254/latest"}})),
        )
        .await;
    assert_eq!(
        (r.status, r.code()),
        (422, "validation_error"),
        "{}",
        r.body
    );
    assert!(
        ctx.call(Method::GET, &path, Some(&t.member.key), None)
            .await
            .body
            .as_array()
            .unwrap()
            .is_empty()
    );

    let policy = json!({"allowed_tools": ["echo"], "rate_limit_per_minute": 2,
                        "health_check": {"interval_secs": 60, "timeout_secs": 5}});
    let added = ctx
        .ok(
            Method::POST,
            &path,
            &t.member.key,
            Some(server(policy.clone())),
            201,
        )
        .await;
    assert_eq!(added["allowed_tools"], json!(["echo"]), "{added}");
    let got = ctx
        .ok(
            Method::GET,
            &format!("{path}/everything"),
            &t.member.key,
            None,
            200,
        )
        .await;
    for k in ["allowed_tools", "rate_limit_per_minute", "health_check"] {
        assert_eq!(got[k], policy[k], "{k}: {got}");
    }

    let client = connect(ctx, &t.member.key, User::answering(vec![])).await;
    let listed: Vec<String> = client
        .list_all_tools()
        .await
        .unwrap()
        .into_iter()
        .map(|t| t.name.to_string())
        .filter(|n| n.starts_with("everything__"))
        .collect();
    assert_eq!(listed, vec!["everything__echo"]);
    for i in 0..2 {
        let r = call(
            &client,
            "everything__echo",
            json!({"message": format!("call {i}")}),
        )
        .await;
        assert_ne!(r.is_error, Some(true), "{r:?}");
    }
    let r = call(
        &client,
        "everything__echo",
        json!({"message": "one too many"}),
    )
    .await;
    assert_eq!(r.is_error, Some(true), "{r:?}");
    assert!(
        text(&r).contains("rate limit of 2 calls per minute"),
        "{r:?}"
    );
    client.cancel().await.unwrap();

    // GET → PUT round-trips (the view's discovered `tools` are ignored); a PUT without the
    // policy removes it, and the server's other tools come back.
    let got = ctx
        .ok(
            Method::GET,
            &format!("{path}/everything"),
            &t.member.key,
            None,
            200,
        )
        .await;
    let mut same = got.clone();
    same["tools"] = json!([{"name": "echo", "description": "x"}]);
    let put = ctx
        .ok(
            Method::PUT,
            &format!("{path}/everything"),
            &t.member.key,
            Some(same),
            200,
        )
        .await;
    assert_eq!(put["allowed_tools"], json!(["echo"]), "{put}");
    let put = ctx
        .ok(
            Method::PUT,
            &format!("{path}/everything"),
            &t.member.key,
            Some(server(json!({}))),
            200,
        )
        .await;
    assert!(put.get("allowed_tools").is_none(), "{put}");
    let client = connect(ctx, &t.member.key, User::answering(vec![])).await;
    let listed = client.list_all_tools().await.unwrap();
    assert!(
        listed
            .iter()
            .filter(|t| t.name.starts_with("everything__"))
            .count()
            > 1,
        "{listed:?}"
    );
    client.cancel().await.unwrap();
}

/// The JSON-RPC error code of a failed request, or a panic naming what answered instead.
fn rpc_code<T: std::fmt::Debug>(r: Result<T, rmcp::ServiceError>) -> (i32, Option<Value>) {
    match r {
        Err(rmcp::ServiceError::McpError(e)) => (e.code.0, e.data),
        other => panic!("expected a JSON-RPC error, got {other:?}"),
    }
}

/// `/mcp` re-exports the caller's own MCP servers' resources, resource templates and prompts
/// (server-everything's), namespaced (`agentry://mcp/<server>/<uri>`, `<server>__<prompt>`),
/// reads and gets audited, completions forwarded; another user of the tenant, its admin and
/// another tenant see none of them and cannot read them by URI; a role denied every tool of
/// the server sees none either.
pub async fn reexports_the_callers_resources_and_prompts(ctx: &Ctx) {
    use rmcp::model::{
        ArgumentInfo, CompleteRequestParams, GetPromptRequestParams, ReadResourceRequestParams,
        Reference, ResourceContents,
    };
    let stdio = stdio_tenant();
    let t = ctx.tenant_with(stdio.clone()).await;
    let other = ctx.tenant_with(stdio).await;
    add_everything(ctx, &t.member).await;
    const DOC: &str = "agentry://mcp/everything/demo://resource/static/document/features.md";
    const TEXT_TEMPLATE: &str =
        "agentry://mcp/everything/demo://resource/dynamic/text/{resourceId}";
    let read = |uri: &str| ReadResourceRequestParams::new(uri.to_string());

    let client = connect(ctx, &t.member.key, User::answering(vec![])).await;
    let caps = client.peer_info().unwrap().capabilities.clone();
    assert!(
        caps.completions.is_some() && caps.resources.is_some() && caps.prompts.is_some(),
        "{caps:?}"
    );
    let resources = client.list_all_resources().await.unwrap();
    let uris: Vec<&str> = resources.iter().map(|r| r.uri.as_str()).collect();
    assert!(uris.contains(&DOC), "{uris:?}");
    assert!(
        uris.iter()
            .all(|u| u.starts_with("agentry://mcp/everything/")),
        "{uris:?}"
    );
    // Text inline as text, under the URI the client asked for.
    let doc = client.read_resource(read(DOC)).await.unwrap();
    match &doc.contents[..] {
        [ResourceContents::TextResourceContents { uri, text, .. }] => {
            assert_eq!(uri, DOC);
            assert!(text.contains("Everything Server - Features"), "{text}");
        }
        other => panic!("{other:?}"),
    }
    // Templates: listed namespaced, and a URI expanded from one reads through.
    let templates = client.list_all_resource_templates().await.unwrap();
    assert!(
        templates.iter().any(|t| t.uri_template == TEXT_TEMPLATE),
        "{templates:?}"
    );
    let dynamic = client
        .read_resource(read(&TEXT_TEMPLATE.replace("{resourceId}", "7")))
        .await
        .unwrap();
    match &dynamic.contents[..] {
        [ResourceContents::TextResourceContents { text, .. }] => {
            assert!(text.starts_with("Resource 7:"), "{text}")
        }
        other => panic!("{other:?}"),
    }
    // A blob passes through as base64.
    let blob = client
        .read_resource(read(
            "agentry://mcp/everything/demo://resource/dynamic/blob/2",
        ))
        .await
        .unwrap();
    match &blob.contents[..] {
        [ResourceContents::BlobResourceContents { blob, .. }] => {
            use base64::Engine as _;
            let bytes = base64::engine::general_purpose::STANDARD
                .decode(blob)
                .unwrap();
            assert!(
                String::from_utf8_lossy(&bytes).starts_with("Resource 2:"),
                "{blob}"
            );
        }
        other => panic!("{other:?}"),
    }
    // A URI of no server of the caller is "not found" with data.uri (nothing is asked); one the
    // server does not know is the server's error.
    let (code, data) = rpc_code(
        client
            .read_resource(read(
                "agentry://mcp/nosuch/demo://resource/static/document/features.md",
            ))
            .await,
    );
    assert_eq!(code, -32602);
    assert_eq!(
        data.unwrap()["uri"],
        "agentry://mcp/nosuch/demo://resource/static/document/features.md"
    );
    rpc_code(
        client
            .read_resource(read("agentry://mcp/everything/demo://nothing/here"))
            .await,
    );

    // Prompts under `<server>__<prompt>`, with their arguments.
    let prompts = client.list_all_prompts().await.unwrap();
    let names: Vec<&str> = prompts.iter().map(|p| p.name.as_str()).collect();
    assert!(
        names.contains(&"everything__simple-prompt") && names.contains(&"everything__args-prompt"),
        "{names:?}"
    );
    let mut args = JsonObject::new();
    args.insert("city".into(), json!("Paris"));
    let got = client
        .get_prompt(GetPromptRequestParams::new("everything__args-prompt").with_arguments(args))
        .await
        .unwrap();
    assert_eq!(
        got.messages[0].content.as_text().map(|t| t.text.as_str()),
        Some("What's weather in Paris?"),
        "{got:?}"
    );
    // Completions go to the server that owns the prompt.
    let done = client
        .complete(CompleteRequestParams::new(
            Reference::for_prompt("everything__completable-prompt"),
            ArgumentInfo::new("department", "Eng"),
        ))
        .await
        .unwrap();
    assert_eq!(done.completion.values, vec!["Engineering".to_string()]);
    let (code, _) = rpc_code(
        client
            .get_prompt(GetPromptRequestParams::new("nosuch__args-prompt"))
            .await,
    );
    assert_eq!(code, -32602);
    client.cancel().await.unwrap();

    // Audited like tool calls: every read and get that reached the server.
    let reads = audited(ctx, &t.member.key, "resources/read").await;
    assert_eq!(reads.len(), 4, "{reads:?}");
    assert!(
        reads.iter().any(|r| r["run_status"] == "completed"
            && r["input"]["uri"] == DOC
            && r["output"].to_string().contains("text")),
        "{reads:?}"
    );
    assert!(
        reads.iter().any(|r| r["run_status"] == "failed"),
        "{reads:?}"
    );
    let gets = audited(ctx, &t.member.key, "prompts/get").await;
    assert_eq!(gets.len(), 1, "{gets:?}");
    assert_eq!(gets[0]["input"]["name"], "everything__args-prompt");

    // Nobody else sees or reaches them.
    for key in [&t.member2.key, &t.admin.key, &other.admin.key] {
        let c = connect(ctx, key, User::answering(vec![])).await;
        let uris: Vec<String> = c
            .list_all_resources()
            .await
            .unwrap()
            .into_iter()
            .map(|r| r.uri)
            .collect();
        assert!(!uris.iter().any(|u| u.contains("everything")), "{uris:?}");
        assert!(c.list_all_resource_templates().await.unwrap().is_empty());
        assert!(
            !c.list_all_prompts()
                .await
                .unwrap()
                .iter()
                .any(|p| p.name.starts_with("everything__"))
        );
        assert_eq!(rpc_code(c.read_resource(read(DOC)).await).0, -32602);
        assert_eq!(
            rpc_code(
                c.get_prompt(GetPromptRequestParams::new("everything__simple-prompt"))
                    .await
            )
            .0,
            -32602
        );
        c.cancel().await.unwrap();
    }
    // Nothing of theirs reached the member's server (the tenant admin sees the member's rows).
    assert_eq!(audited(ctx, &t.member.key, "resources/read").await.len(), 4);
    assert_eq!(audited(ctx, &t.admin.key, "resources/read").await.len(), 4);
    assert!(
        audited(ctx, &other.admin.key, "resources/read")
            .await
            .is_empty()
    );

    // A role that may use none of the server's tools sees none of its resources or prompts.
    ctx.ok(
        Method::PATCH,
        &format!("/api/v1/admin/tenants/{}", t.id),
        ADMIN_KEY,
        Some(json!({"tool_permissions": {"member": ["*:*", "!everything:*"]}})),
        200,
    )
    .await;
    let c = connect(ctx, &t.member.key, User::answering(vec![])).await;
    assert!(c.list_all_resources().await.unwrap().is_empty());
    assert!(c.list_all_prompts().await.unwrap().is_empty());
    assert_eq!(rpc_code(c.read_resource(read(DOC)).await).0, -32602);
    c.cancel().await.unwrap();
    assert_eq!(audited(ctx, &t.member.key, "resources/read").await.len(), 4);
}

/// Virtual servers: a tenant admin names a subset of tools (role patterns) served at
/// `/mcp/{name}`. The caller sees exactly those of their tools; the role still applies; another
/// tenant has no such server; a session stays on the path that made it; a change is seen on the
/// next list and a deletion ends the server's sessions; bad definitions are 422 and change
/// nothing; members may not define them.
pub async fn virtual_servers(ctx: &Ctx) {
    let stdio = stdio_tenant();
    let t = ctx.tenant_with(stdio).await;
    let other = ctx.tenant().await;
    let base = "/api/v1/tenant/mcp-virtual-servers";
    add_everything(ctx, &t.member).await;

    // Bad definitions: 422 naming the field, and nothing is made.
    for (body, field) in [
        (json!({"name": "Bad Name", "tools": ["files:*"]}), "name"),
        (json!({"tools": ["files:*"]}), "name"),
        (json!({"name": "x", "tools": ["no-colon"]}), "tools[0]"),
        (json!({"name": "x", "tools": ["!files:*"]}), "tools"),
        (json!({"name": "x", "tools": []}), "tools"),
    ] {
        let r = ctx
            .send(
                ctx.request(Method::POST, base, Some(&t.admin.key))
                    .json(&body),
            )
            .await;
        assert_eq!(
            (r.status, r.code()),
            (422, "validation_error"),
            "{body}: {}",
            r.body
        );
        assert_eq!(r.body["details"]["field"], field, "{body}: {}", r.body);
    }
    let r = ctx
        .send(
            ctx.request(Method::POST, base, Some(&t.admin.key))
                .json(&json!({"name": "x", "tools": ["*:*"], "extra": 1})),
        )
        .await;
    assert_eq!(r.status, 422, "{}", r.body);
    let r = ctx
        .send(
            ctx.request(Method::POST, base, Some(&t.member.key))
                .json(&json!({"name": "mine", "tools": ["*:*"]})),
        )
        .await;
    assert_eq!(r.status, 403, "{}", r.body);
    assert_eq!(
        ctx.ok(Method::GET, base, &t.admin.key, None, 200).await,
        json!([])
    );

    let made = ctx
        .ok(
            Method::POST,
            base,
            &t.admin.key,
            Some(json!({
                "name": "support",
                "description": "What the support desk's client may use",
                "tools": ["files:read_file", "everything:echo", "assistants:*", "files:read_file"],
            })),
            201,
        )
        .await;
    assert_eq!(made["path"], "/mcp/support", "{made}");
    assert_eq!(
        made["tools"],
        json!(["files:read_file", "everything:echo", "assistants:*"]),
        "{made}"
    );
    let r = ctx
        .send(
            ctx.request(Method::POST, base, Some(&t.admin.key))
                .json(&json!({"name": "support", "tools": ["*:*"]})),
        )
        .await;
    assert_eq!((r.status, r.code()), (409, "conflict"), "{}", r.body);
    assert_eq!(
        ctx.ok(
            Method::GET,
            &format!("{base}/support"),
            &t.admin.key,
            None,
            200
        )
        .await,
        made
    );
    // Another tenant has no such server, over REST or MCP.
    let r = ctx
        .send(ctx.request(
            Method::GET,
            &format!("{base}/support"),
            Some(&other.admin.key),
        ))
        .await;
    assert_eq!(r.status, 404, "{}", r.body);
    let r = ctx
        .send(initialize_at(ctx, "/mcp/support", Some(&other.admin.key)))
        .await;
    assert_eq!((r.status, r.code()), (404, "not_found"), "{}", r.body);
    assert!(
        r.body["message"].as_str().unwrap().contains("support"),
        "{}",
        r.body
    );
    for path in ["/mcp/nope", "/mcp/Bad%20Name"] {
        let r = ctx
            .send(initialize_at(ctx, path, Some(&t.member.key)))
            .await;
        assert_eq!(
            (r.status, r.code()),
            (404, "not_found"),
            "{path}: {}",
            r.body
        );
    }
    // The key comes first, with the OAuth challenge of `/mcp`.
    let r = ctx.send(initialize_at(ctx, "/mcp/support", None)).await;
    assert_eq!(r.status, 401, "{}", r.body);
    let challenge = r.headers["www-authenticate"].to_str().unwrap().to_string();
    assert!(
        challenge.contains("/.well-known/oauth-protected-resource/mcp\""),
        "{challenge}"
    );
    let meta = ctx
        .send(ctx.request(
            Method::GET,
            "/.well-known/oauth-protected-resource/mcp/support",
            None,
        ))
        .await;
    assert_eq!(meta.status, 200, "{}", meta.body);
    assert_eq!(meta.body["resource"], ctx.url("/mcp"), "{}", meta.body);

    let names = |tools: Vec<rmcp::model::Tool>| -> Vec<String> {
        let mut n: Vec<String> = tools.into_iter().map(|t| t.name.to_string()).collect();
        n.sort();
        n
    };
    let client = connect_to(ctx, "/mcp/support", &t.member.key, User::answering(vec![])).await;
    assert_eq!(
        names(client.list_all_tools().await.unwrap()),
        ["ask_default", "everything__echo", "read_file"]
    );
    let r = call(
        &client,
        "everything__echo",
        json!({"message": "via support"}),
    )
    .await;
    assert!(text(&r).contains("Echo: via support"), "{r:?}");
    assert_eq!(
        audited(ctx, &t.member.key, "everything__echo").await.len(),
        1
    );
    let e = client
        .call_tool(params("write_file", json!({"path": "x", "content": "y"})))
        .await
        .expect_err("a tool outside the virtual server is not callable there");
    assert!(e.to_string().contains("unknown tool"), "{e}");
    assert!(!workspace(ctx, &t, &t.member).join("x").exists());
    // Another member sees the same subset of their own tools (not the member's server).
    let c2 = connect_to(ctx, "/mcp/support", &t.member2.key, User::answering(vec![])).await;
    assert_eq!(
        names(c2.list_all_tools().await.unwrap()),
        ["ask_default", "read_file"]
    );
    c2.cancel().await.unwrap();
    // The role still applies: a virtual server never widens it.
    ctx.ok(
        Method::PATCH,
        &format!("/api/v1/admin/tenants/{}", t.id),
        ADMIN_KEY,
        Some(json!({"tool_permissions": {"member": ["*:*", "!files:read_file"]}})),
        200,
    )
    .await;
    assert_eq!(
        names(client.list_all_tools().await.unwrap()),
        ["ask_default", "everything__echo"]
    );

    // A session stays on the path that made it.
    let r = ctx
        .send(initialize_at(ctx, "/mcp/support", Some(&t.member.key)))
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    let session = r.headers["mcp-session-id"].to_str().unwrap().to_string();
    let list = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list", "params": {}});
    let r = ctx
        .send(on_session_at(
            ctx,
            "/mcp",
            Some(&t.member.key),
            &session,
            list.clone(),
        ))
        .await;
    assert_eq!(r.status, 404, "{}", r.body);

    // A change shows on the next list; a deletion ends the server's sessions.
    ctx.ok(
        Method::PUT,
        &format!("{base}/support"),
        &t.admin.key,
        Some(json!({"tools": ["everything:*"]})),
        200,
    )
    .await;
    let listed = names(client.list_all_tools().await.unwrap());
    assert!(
        !listed.is_empty() && listed.iter().all(|n| n.starts_with("everything__")),
        "{listed:?}"
    );
    let r = ctx
        .send(
            ctx.request(Method::PUT, &format!("{base}/support"), Some(&t.admin.key))
                .json(&json!({"name": "renamed", "tools": ["*:*"]})),
        )
        .await;
    assert_eq!(r.status, 422, "{}", r.body);
    ctx.ok(
        Method::DELETE,
        &format!("{base}/support"),
        &t.admin.key,
        None,
        204,
    )
    .await;
    assert!(client.list_all_tools().await.is_err());
    let r = ctx
        .send(on_session_at(
            ctx,
            "/mcp/support",
            Some(&t.member.key),
            &session,
            list,
        ))
        .await;
    assert_eq!(r.status, 404, "{}", r.body);
    let r = ctx
        .send(ctx.request(
            Method::DELETE,
            &format!("{base}/support"),
            Some(&t.admin.key),
        ))
        .await;
    assert_eq!(r.status, 404, "{}", r.body);
    client.cancel().await.ok();
}
