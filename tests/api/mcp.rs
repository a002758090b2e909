//! Users' MCP servers over REST, and their tools in a chat: issue 5's "done when" against the
//! real binary, real MCP servers (`scripts/install-mcp-test-servers.sh`) and the fake model.

use std::time::{Duration, Instant};

use agentry_fake_model::{FakeConfig, FakeModelServer, FakeReply};
use agentry_mcp::testing::{everything_js, filesystem_js, node};
use futures::{SinkExt, StreamExt};
use reqwest::Method;
use serde_json::{Value, json};
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;

use crate::ctx::{ADMIN_KEY, Ctx, unique};
use crate::observability::sample;

pub const MCP_KEY: &str = "passphrase:a long enough test passphrase";
/// The one network the test servers let users' MCP servers reach (`tools.allowed_networks`):
/// their URLs use the IP literal 127.0.0.2, so no test asks a DNS resolver.
pub const TEST_MCP_NETWORK: &str = "127.0.0.2/32";

pub fn servers_path(user: &str) -> String {
    format!("/api/v1/users/{user}/mcp-servers")
}

/// Every REST rule of the per-user MCP servers (on a server with an encryption key).
pub async fn mcp_servers_flow(ctx: &Ctx) {
    let t = ctx
        .tenant_with(
            json!({"features_enabled": ["stdio_mcp"], "max_mcp_servers": 2,
                            "policy": {"stdio_mcp_role": "member"}}),
        )
        .await;
    let plain = ctx.tenant().await; // no stdio feature
    let me = &t.member;
    let path = servers_path(&me.user_id);
    let secret_token = "tok-SHOULD-NEVER-BE-SHOWN";

    // Add an HTTP server with a token (sealed) and a local one.
    let http = json!({"name": "remote", "url": "http://127.0.0.2:9/mcp", "auth": {"type": "bearer", "token": secret_token}});
    let added = ctx
        .ok(Method::POST, &path, &me.key, Some(http.clone()), 201)
        .await;
    assert_eq!(added["status"], "disconnected");
    assert_eq!(added["auth"]["token"], "***");
    assert!(!added.to_string().contains(secret_token));
    let stdio = json!({"name": "everything", "command": node().to_string_lossy(), "args": [everything_js().to_string_lossy(), "stdio"], "env": {"SOME_SECRET": "shh-value"}});
    let added = ctx
        .ok(Method::POST, &path, &me.key, Some(stdio.clone()), 201)
        .await;
    assert_eq!(added["env"]["SOME_SECRET"], "***");
    // Stored sealed: the database never holds the plain value.
    let row = agentry_store::mcp_servers::get_by_name(
        &ctx.db,
        &t.scope(),
        me.user_id.parse().unwrap(),
        "remote",
    )
    .await
    .unwrap()
    .unwrap();
    assert!(
        !row.headers_encrypted
            .clone()
            .unwrap_or_default()
            .contains(secret_token)
    );
    assert!(row.headers_encrypted.unwrap().starts_with("v1:"));

    // A duplicate name → 409; over max_mcp_servers → 429.
    let r = ctx
        .call(Method::POST, &path, Some(&me.key), Some(&http))
        .await;
    assert_eq!((r.status, r.code()), (409, "conflict"), "{}", r.body);
    let third = json!({"name": "third", "url": "http://127.0.0.2:9/other"});
    let r = ctx
        .call(Method::POST, &path, Some(&me.key), Some(&third))
        .await;
    assert_eq!((r.status, r.code()), (429, "quota_exceeded"), "{}", r.body);
    assert_eq!(r.body["details"]["quota"], "max_mcp_servers");
    assert!(r.headers.contains_key("retry-after"));

    // Invalid configs name the problem (422); env references and private URLs are refused.
    for (bad, field) in [
        (
            json!({"name": "a__b", "url": "http://127.0.0.2:9/x"}),
            "name",
        ),
        (json!({"name": "x", "url": "ftp://127.0.0.2/mcp"}), "url"),
        (
            json!({"name": "x", "url": "http://127.0.0.2:9/x", "auth": {"type": "bearer", "token_env": "AGENTRY_AUTH__ADMIN_KEY"}}),
            "auth",
        ),
        (
            json!({"name": "x", "url": "http://127.0.0.1:8000/mcp"}),
            "url",
        ),
        (
            json!({"name": "x", "url": "http://169.254.169.254/latest"}),
            "url",
        ),
        (json!({"name": "x"}), ""),
    ] {
        let r = ctx
            .call(Method::POST, &path, Some(&me.key), Some(&bad))
            .await;
        assert_eq!(r.status, 422, "{bad}: {}", r.body);
        assert!(r.body.to_string().contains(field), "{bad}: {}", r.body);
    }
    // Host names: one that /etc/hosts maps to loopback is refused for its address, one that
    // cannot be a DNS name (a 64-character label) for its form, before any resolver is asked.
    // (A well-formed name that does not resolve is refused the same way — `net_guard` tests,
    // with a resolver that never leaves the machine.)
    let long_label = format!("http://{}.localhost:9/mcp", "a".repeat(64));
    for (url, says) in [
        ("http://localhost:9/mcp", "loopback"),
        (long_label.as_str(), "not a valid host name"),
    ] {
        let r = ctx
            .call(
                Method::POST,
                &path,
                Some(&me.key),
                Some(&json!({"name": "named", "url": url})),
            )
            .await;
        assert_eq!(
            (r.status, r.code()),
            (422, "validation_error"),
            "{url}: {}",
            r.body
        );
        assert_eq!(r.body["details"]["field"], "url", "{}", r.body);
        assert!(
            r.body["message"].as_str().unwrap().contains(says),
            "{url}: {}",
            r.body
        );
    }
    let r = ctx
        .send(
            ctx.request(Method::POST, &path, Some(&me.key))
                .header("content-type", "application/json")
                .body("{nope"),
        )
        .await;
    assert_eq!((r.status, r.code()), (400, "invalid_json"));

    // Local servers need the tenant's feature (403 otherwise).
    let other = servers_path(&plain.member.user_id);
    let r = ctx
        .call(Method::POST, &other, Some(&plain.member.key), Some(&stdio))
        .await;
    assert_eq!((r.status, r.code()), (403, "forbidden"), "{}", r.body);

    // Visibility: a member sees only their own servers; a tenant admin any user's; another
    // tenant nothing (404 before anything is read).
    let r = ctx
        .call(Method::GET, &path, Some(&t.member2.key), None)
        .await;
    assert_eq!(r.status, 404);
    let listed = ctx.ok(Method::GET, &path, &t.admin.key, None, 200).await;
    assert_eq!(listed.as_array().unwrap().len(), 2);
    let r = ctx
        .call(Method::GET, &path, Some(&plain.admin.key), None)
        .await;
    assert_eq!(r.status, 404);
    let r = ctx.call(Method::GET, &path, None, None).await;
    assert_eq!(r.status, 401);
    let r = ctx.call(Method::GET, &path, Some(ADMIN_KEY), None).await;
    assert_eq!(r.status, 403);
    let r = ctx
        .call(
            Method::GET,
            "/api/v1/users/not-a-uuid/mcp-servers",
            Some(&me.key),
            None,
        )
        .await;
    assert_eq!(r.status, 400);

    // Get one, replace it (name must match the path), delete it.
    let one = ctx
        .ok(Method::GET, &format!("{path}/remote"), &me.key, None, 200)
        .await;
    assert_eq!(one["url"], "http://127.0.0.2:9/mcp");
    let r = ctx
        .call(Method::GET, &format!("{path}/nope"), Some(&me.key), None)
        .await;
    assert_eq!(r.status, 404);
    let replaced = ctx
        .ok(
            Method::PUT,
            &format!("{path}/remote"),
            &me.key,
            Some(json!({"name": "remote", "url": "http://127.0.0.2:9/v2", "disabled": true})),
            200,
        )
        .await;
    assert_eq!(
        (replaced["url"].as_str(), replaced["disabled"].as_bool()),
        (Some("http://127.0.0.2:9/v2"), Some(true))
    );
    let r = ctx
        .call(
            Method::PUT,
            &format!("{path}/remote"),
            Some(&me.key),
            Some(&json!({"name": "renamed", "url": "http://127.0.0.2:9/x"})),
        )
        .await;
    assert_eq!(r.status, 422);
    let r = ctx
        .call(
            Method::PUT,
            &format!("{path}/ghost"),
            Some(&me.key),
            Some(&json!({"name": "ghost", "url": "http://127.0.0.2:9/x"})),
        )
        .await;
    assert_eq!(r.status, 404);
    let r = ctx
        .call(
            Method::PUT,
            &format!("{other}/x"),
            Some(&plain.member.key),
            Some(&json!({"name": "x", "command": "sh"})),
        )
        .await;
    assert!(matches!(r.status, 403 | 404), "{}", r.body);
    let r = ctx
        .call(
            Method::PUT,
            &format!("{path}/remote"),
            Some(&me.key),
            Some(&json!({"name": "remote", "url": "http://10.0.0.1/mcp"})),
        )
        .await;
    assert_eq!(r.status, 422);
    ctx.ok(
        Method::DELETE,
        &format!("{path}/remote"),
        &me.key,
        None,
        204,
    )
    .await;
    let r = ctx
        .call(
            Method::DELETE,
            &format!("{path}/remote"),
            Some(&me.key),
            None,
        )
        .await;
    assert_eq!(r.status, 404);
    let listed = ctx.ok(Method::GET, &path, &me.key, None, 200).await;
    assert_eq!(listed.as_array().unwrap().len(), 1);
}

/// On a server without `mcp.encryption_key`, secrets cannot be stored (503), servers without
/// secrets can.
pub async fn mcp_without_key(ctx: &Ctx) {
    let t = ctx.tenant().await;
    let path = servers_path(&t.member.user_id);
    let r = ctx
        .call(Method::POST, &path, Some(&t.member.key), Some(&json!({"name": "s", "url": "http://127.0.0.2:9/x", "auth": {"type": "bearer", "token": "t"}})))
        .await;
    assert_eq!(
        (r.status, r.code()),
        (503, "service_unavailable"),
        "{}",
        r.body
    );
    assert!(
        r.body["message"]
            .as_str()
            .unwrap()
            .contains("encryption_key")
    );
    ctx.ok(
        Method::POST,
        &path,
        &t.member.key,
        Some(json!({"name": "s", "url": "http://127.0.0.2:9/x"})),
        201,
    )
    .await;
    // Replacing it with a secret is refused the same way, and leaves it as it was.
    let r = ctx
        .call(Method::PUT, &format!("{path}/s"), Some(&t.member.key), Some(&json!({"name": "s", "url": "http://127.0.0.2:9/y", "auth": {"type": "bearer", "token": "t"}})))
        .await;
    assert_eq!(
        (r.status, r.code()),
        (503, "service_unavailable"),
        "{}",
        r.body
    );
    let kept = ctx
        .ok(Method::GET, &format!("{path}/s"), &t.member.key, None, 200)
        .await;
    assert_eq!(kept["url"], "http://127.0.0.2:9/x", "{kept}");
}

/// The upgrade request for a session's WebSocket, with the key in `Authorization` and an
/// optional query (`"?after_seq=3"`).
pub fn ws_request(
    ctx: &Ctx,
    key: &str,
    session: &str,
    query: &str,
) -> tokio_tungstenite::tungstenite::handshake::client::Request {
    let mut req = format!(
        "ws://127.0.0.1:{}/ws/chat/{session}{query}",
        ctx.server.port
    )
    .into_client_request()
    .unwrap();
    req.headers_mut()
        .insert("authorization", format!("Bearer {key}").parse().unwrap());
    req
}

pub async fn ws_connect(
    ctx: &Ctx,
    key: &str,
    session: &str,
) -> tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>> {
    tokio_tungstenite::connect_async(ws_request(ctx, key, session, ""))
        .await
        .unwrap()
        .0
}

/// Send a chat frame and collect events until `done`; approve every approval request.
pub async fn run_over_ws(ctx: &Ctx, key: &str, session: &str, message: &str) -> Vec<Value> {
    let mut ws = ws_connect(ctx, key, session).await;
    ws.send(Message::text(
        json!({"type": "chat", "payload": {"message": message}}).to_string(),
    ))
    .await
    .unwrap();
    let mut events = Vec::new();
    loop {
        let msg = tokio::time::timeout(Duration::from_secs(60), ws.next())
            .await
            .expect("an event within 60 s")
            .unwrap()
            .unwrap();
        let Message::Text(text) = msg else { continue };
        let ev: Value = serde_json::from_str(&text).unwrap();
        if ev["event_type"] == "hitl_request" {
            let id = ev["data"]["request_id"].as_str().unwrap().to_string();
            ws.send(Message::text(
                json!({"type": "hitl_decision", "payload": {"request_id": id, "type": "approve"}})
                    .to_string(),
            ))
            .await
            .unwrap();
        }
        let done = ev["event_type"] == "done";
        events.push(ev);
        if done {
            return events;
        }
    }
}

pub fn types(events: &[Value]) -> Vec<&str> {
    events
        .iter()
        .map(|e| e["event_type"].as_str().unwrap())
        .collect()
}

/// A user configures MCP servers over REST, chats, and the agent calls their tools: a
/// destructive one after an approval, every call audited; a killed server is reconnected.
pub async fn mcp_tools_in_a_chat(ctx: &Ctx, fake: &FakeModelServer) {
    let t = ctx
        .tenant_with(
            json!({"features_enabled": ["stdio_mcp"], "policy": {"stdio_mcp_role": "member"}}),
        )
        .await;
    let me = &t.member;
    // The server runs sandboxed: it sees the user's workspace, nothing else of the host.
    let root_path = ctx
        .server
        .data_dir
        .path()
        .join("workspaces")
        .join(&t.id)
        .join(&me.user_id);
    std::fs::create_dir_all(&root_path).unwrap();
    let root_path = root_path.canonicalize().unwrap();
    let path = servers_path(&me.user_id);
    ctx.ok(
        Method::POST,
        &path,
        &me.key,
        Some(json!({"name": "fs", "command": node().to_string_lossy(), "args": [filesystem_js().to_string_lossy(), root_path.to_string_lossy()]})),
        201,
    )
    .await;
    let session = ctx
        .ok(
            Method::POST,
            "/api/v1/sessions",
            &me.key,
            Some(json!({})),
            201,
        )
        .await;
    let sid = session["session_id"].as_str().unwrap().to_string();

    // A destructive tool (write_file is annotated so): approval, then the file exists.
    let target = root_path.join("note.txt");
    fake.push(FakeReply::tool_call(
        "w1",
        "fs__write_file",
        json!({"path": target.to_string_lossy(), "content": "from the agent"}),
    ));
    fake.push(FakeReply::text("written"));
    let events = run_over_ws(ctx, &me.key, &sid, "write a note").await;
    let ty = types(&events);
    assert!(ty.contains(&"hitl_request"), "{ty:?}");
    assert_eq!(events.last().unwrap()["data"]["status"], "completed");
    assert_eq!(std::fs::read_to_string(&target).unwrap(), "from the agent");
    let run = events[0]["run_id"].as_str().unwrap().to_string();
    let exec = ctx
        .ok(
            Method::GET,
            &format!("/api/v1/executions/{run}"),
            &me.key,
            None,
            200,
        )
        .await;
    let calls = exec["tool_calls"].as_array().unwrap();
    assert_eq!(calls.len(), 1);
    assert_eq!(calls[0]["tool_name"], "fs__write_file");
    assert_eq!(calls[0]["approved"], true);

    // The pool reports the live connection.
    let listed = ctx.ok(Method::GET, &path, &me.key, None, 200).await;
    assert_eq!(listed[0]["status"], "connected", "{listed}");

    // Kill the server's processes; the pool notices and reconnects; the next call works.
    let marker = root_path.to_string_lossy().to_string();
    let pids = |marker: &str| -> Vec<String> {
        let out = std::process::Command::new("pgrep")
            .arg("-f")
            .arg(marker)
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout)
            .split_whitespace()
            .map(str::to_owned)
            .collect()
    };
    let killed = pids(&marker);
    let out = std::process::Command::new("pkill")
        .arg("-9")
        .arg("-f")
        .arg(&marker)
        .output()
        .unwrap();
    assert!(out.status.success(), "pkill found the server");
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let listed = ctx.ok(Method::GET, &path, &me.key, None, 200).await;
        // A killed process can still be listed (and the pool still say "connected") for a
        // moment under load: wait for a new server process, none of the killed ones left.
        let now = pids(&marker);
        if listed[0]["status"] == "connected"
            && !now.is_empty()
            && now.iter().all(|p| !killed.contains(p))
        {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the killed server was not reconnected: {listed}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    fake.push(FakeReply::tool_call(
        "r1",
        "fs__read_text_file",
        json!({"path": target.to_string_lossy()}),
    ));
    fake.push(FakeReply::text("read"));
    let events = run_over_ws(ctx, &me.key, &sid, "read it").await;
    assert!(
        !types(&events).contains(&"hitl_request"),
        "reading needs no approval"
    );
    let result = events
        .iter()
        .find(|e| e["event_type"] == "tool_result")
        .unwrap();
    assert_eq!(result["data"]["status"], "success");
    assert!(
        result["data"]["result"]
            .to_string()
            .contains("from the agent")
    );

    // The metrics saw both calls, the reconnect, and (sampled every second) the connection.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let m = ctx.metrics().await;
        let connected = sample(&m, "agentry_mcp_connections", &[("state", "connected")]);
        if connected >= 1.0 {
            assert!(
                sample(&m, "agentry_mcp_calls_total", &[("outcome", "ok")]) >= 2.0,
                "{m}"
            );
            assert!(
                sample(&m, "agentry_mcp_reconnects_total", &[]) >= 1.0,
                "{m}"
            );
            assert!(m.contains("agentry_mcp_call_duration_seconds_count"), "{m}");
            break;
        }
        assert!(
            Instant::now() < deadline,
            "no connected MCP connection: {m}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    // Another user of the tenant does not get these tools.
    fake.push(FakeReply::tool_call(
        "x1",
        "fs__read_text_file",
        json!({"path": target.to_string_lossy()}),
    ));
    fake.push(FakeReply::text("no"));
    let other = ctx
        .ok(
            Method::POST,
            "/api/v1/sessions",
            &t.member2.key,
            Some(json!({})),
            201,
        )
        .await;
    let events = run_over_ws(
        ctx,
        &t.member2.key,
        other["session_id"].as_str().unwrap(),
        "read it",
    )
    .await;
    let result = events
        .iter()
        .find(|e| e["event_type"] == "tool_result")
        .unwrap();
    assert_eq!(
        result["data"]["result"]["error"]["code"], "not_found",
        "{result}"
    );
}

/// Servers from the platform's MCP config file reach every user, and a change to the file is
/// picked up without a restart.
pub async fn mcp_config_file(fake: &FakeModelServer) {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("mcp.yaml");
    let yaml = |name: &str| {
        format!(
            "mcp_servers:\n  local_services:\n    - name: {name}\n      command: {}\n      args: [{}, stdio]\n",
            node().display(),
            everything_js().display()
        )
    };
    std::fs::write(&file, yaml("everything")).unwrap();
    let file_s = file.to_string_lossy().to_string();
    let ctx = Ctx::start_with(
        &[
            ("AGENTRY_LLM__PROVIDER", "openai"),
            ("AGENTRY_LLM__BASE_URL", &fake.base_url_openai()),
            ("AGENTRY_LLM__API_KEY", "test"),
            ("AGENTRY_MCP__CONFIG_FILE", &file_s),
        ],
        None,
    )
    .await;
    let t = ctx.tenant().await;
    let s = ctx
        .ok(
            Method::POST,
            "/api/v1/sessions",
            &t.member.key,
            Some(json!({})),
            201,
        )
        .await;
    let sid = s["session_id"].as_str().unwrap().to_string();
    fake.push(FakeReply::tool_call(
        "e1",
        "everything__echo",
        json!({"message": "from the file"}),
    ));
    fake.push(FakeReply::text("ok"));
    let events = run_over_ws(&ctx, &t.member.key, &sid, "echo").await;
    let result = events
        .iter()
        .find(|e| e["event_type"] == "tool_result")
        .unwrap();
    assert!(
        result["data"]["result"]
            .to_string()
            .contains("Echo: from the file"),
        "{result}"
    );

    // Rename the server in the file: the old tools go away, the new ones arrive.
    std::fs::write(&file, yaml("renamed")).unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        fake.push(FakeReply::tool_call(
            &unique("e"),
            "renamed__echo",
            json!({"message": "after reload"}),
        ));
        fake.push(FakeReply::text("ok"));
        let events = run_over_ws(&ctx, &t.member.key, &sid, "echo again").await;
        let result = events
            .iter()
            .find(|e| e["event_type"] == "tool_result")
            .unwrap();
        if result["data"]["status"] == "success" {
            assert!(
                result["data"]["result"]
                    .to_string()
                    .contains("after reload")
            );
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the config file change was not picked up: {result}"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// The fake model server for tests that chat.
pub fn fake() -> FakeModelServer {
    FakeModelServer::start(FakeConfig::default())
}

/// Env for a server that talks to `fake`.
pub fn model_env(fake: &FakeModelServer) -> Vec<(&'static str, String)> {
    vec![
        ("AGENTRY_LLM__PROVIDER", "openai".to_string()),
        ("AGENTRY_LLM__BASE_URL", fake.base_url_openai()),
        ("AGENTRY_LLM__API_KEY", "test".to_string()),
    ]
}

/// Issue 18: a server that hangs at start costs the user's unrelated runs nothing. Before, every
/// run connected all of the user's servers first and waited up to `connect_wait` for them
/// (+10 s a run by default, for as long as the server kept hanging).
///
/// The server here accepts connections and never answers; its connect timeout is the default
/// 30 s and the pool's `connect_wait` is 15 s, so a run that waited for it would take 15 s.
/// - Adding the server starts its connect in the background; a run of an assistant whose tools
///   cannot include the server's neither waits for it nor connects it again.
/// - The first run that may use it waits for its first attempt (bounded by `connect_wait`);
///   a later run, while that attempt still hangs, does not wait again.
pub async fn a_hanging_server_costs_unrelated_runs_nothing(ctx: &Ctx, fake: &FakeModelServer) {
    let t = ctx.tenant().await;
    let me = &t.admin;
    let listener = tokio::net::TcpListener::bind("127.0.0.2:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let accepted = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let seen = accepted.clone();
    let hold = tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((sock, _)) = listener.accept().await {
            seen.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            held.push(sock);
        }
    });
    let path = servers_path(&me.user_id);
    ctx.ok(
        Method::POST,
        &path,
        &me.key,
        Some(json!({"name": "hang", "url": format!("http://127.0.0.2:{port}/mcp")})),
        201,
    )
    .await;
    ctx.ok(
        Method::POST,
        "/api/v1/agents",
        &me.key,
        Some(json!({"id": "todos-only", "tools": ["write_todos"], "auto_approve": true})),
        201,
    )
    .await;
    let session = |assistant: Option<&str>| {
        let body = match assistant {
            Some(a) => json!({"assistant_id": a}),
            None => json!({}),
        };
        async move {
            ctx.ok(Method::POST, "/api/v1/sessions", &me.key, Some(body), 201)
                .await["session_id"]
                .as_str()
                .unwrap()
                .to_string()
        }
    };
    let status = || async {
        let listed = ctx.ok(Method::GET, &path, &me.key, None, 200).await;
        listed
            .as_array()
            .unwrap()
            .iter()
            .find(|s| s["name"] == "hang")
            .map(|s| s["status"].as_str().unwrap().to_string())
            .unwrap()
    };

    // An unrelated run: its assistant may use `write_todos` only.
    let narrow = session(Some("todos-only")).await;
    fake.push(FakeReply::text("done"));
    let started = Instant::now();
    let events = run_over_ws(ctx, &me.key, &narrow, "hello").await;
    let took = started.elapsed();
    assert_eq!(events.last().unwrap()["data"]["status"], "completed");
    assert!(
        took < Duration::from_secs(10),
        "the unrelated run took {took:?}"
    );
    // Adding the server started its connect in the background (one connection; the unrelated
    // run made none), and it is still hanging.
    assert_eq!(status().await, "connecting");
    assert_eq!(accepted.load(std::sync::atomic::Ordering::SeqCst), 1);

    // A run that may use it: the first waits for its first attempt (at most `connect_wait`)…
    let wide = session(None).await;
    fake.push(FakeReply::text("first"));
    let events = run_over_ws(ctx, &me.key, &wide, "hello").await;
    assert_eq!(events.last().unwrap()["data"]["status"], "completed");
    assert!(
        events
            .iter()
            .any(|e| e.to_string().contains("still connecting")),
        "{events:?}"
    );
    assert_eq!(status().await, "connecting");
    // …and the next does not wait again while that attempt hangs.
    fake.push(FakeReply::text("second"));
    let started = Instant::now();
    let events = run_over_ws(ctx, &me.key, &wide, "again").await;
    let took = started.elapsed();
    assert_eq!(events.last().unwrap()["data"]["status"], "completed");
    assert!(
        took < Duration::from_secs(10),
        "the second run waited for the hanging server: {took:?}"
    );
    assert!(
        events
            .iter()
            .any(|e| e.to_string().contains("still connecting")),
        "{events:?}"
    );
    hold.abort();
}
