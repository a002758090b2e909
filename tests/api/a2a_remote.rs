//! Remote A2A agents as `task` targets (issue 27, item 5; docs/a2a.md, "Remote agents"):
//! a scripted agent built on the official Python `a2a-sdk` server (tests/api/a2a_remote_agent.py,
//! on 127.0.0.2, the one loopback address the test servers' network rule allows) is registered
//! by a tenant admin over REST and used as a `task` target through the real binary: its card
//! checked, its credential sealed; a delegation streamed as the child run's events; its
//! `input-required` question reaching the user and the answer going back on the same task;
//! cancelling the parent sending `CancelTask`; a hanging agent and a dead one failing the child
//! run with a clear error within the timeout while the parent goes on; a bad card, a private
//! URL and another tenant's ids refused.

use std::process::Stdio;
use std::time::{Duration, Instant};

use reqwest::Method;
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};

use crate::ctx::{Ctx, TenantFx};
use crate::fake_model::chat;
use crate::mcp::ws_connect;
use crate::streaming::{Socket, WAIT, next_json, send};

/// The token the scripted agent wants (`Authorization: Bearer …`).
const REMOTE_TOKEN: &str = "remote-secret-token";

/// A server on 127.0.0.2 that answers every request with one A2A v1.0 card whose JSON-RPC
/// interface is itself (nothing answers JSON-RPC there: the card is all the registration
/// reads). Its URL; it runs until the test's runtime ends.
pub async fn static_card_server() -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.2:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let card = json!({
        "name": "Static agent",
        "description": "A card and nothing else",
        "version": "1.0.0",
        "supportedInterfaces": [{"url": format!("{base}/rpc"), "protocolBinding": "JSONRPC", "protocolVersion": "1.0"}],
        "capabilities": {"streaming": true},
        "defaultInputModes": ["text/plain"],
        "defaultOutputModes": ["text/plain"],
        "skills": [{"id": "static", "name": "Static", "description": "Nothing", "tags": []}]
    })
    .to_string();
    tokio::spawn(async move {
        while let Ok((mut conn, _)) = listener.accept().await {
            let card = card.clone();
            tokio::spawn(async move {
                let mut head = Vec::new();
                let mut buf = [0u8; 1024];
                while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                    match conn.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => head.extend_from_slice(&buf[..n]),
                    }
                }
                let reply = format!(
                    "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{card}",
                    card.len()
                );
                let _ = conn.write_all(reply.as_bytes()).await;
            });
        }
    });
    base
}

/// The scripted remote agent (tests/api/a2a_remote_agent.py), listening on `host`.
pub struct RemoteAgent {
    child: tokio::process::Child,
    pub base: String,
    http: reqwest::Client,
}

impl RemoteAgent {
    pub async fn start(host: &str) -> RemoteAgent {
        let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../tests/api/a2a_remote_agent.py");
        let mut child = tokio::process::Command::new(crate::ctx::python())
            .arg(script)
            .env("REMOTE_HOST", host)
            .env("REMOTE_TOKEN", REMOTE_TOKEN)
            .env("NO_PROXY", "127.0.0.1,127.0.0.2")
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .kill_on_drop(true)
            .spawn()
            .expect("start the scripted A2A agent");
        let stdout = child.stdout.take().unwrap();
        let mut lines = BufReader::new(stdout).lines();
        let first = tokio::time::timeout(Duration::from_secs(60), lines.next_line())
            .await
            .expect("the scripted A2A agent says where it listens within 60 s")
            .unwrap()
            .expect("the scripted A2A agent printed nothing");
        let base = first
            .strip_prefix("LISTENING ")
            .unwrap_or_else(|| panic!("unexpected first line {first:?}"))
            .trim()
            .to_string();
        tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
        RemoteAgent {
            child,
            base,
            http: reqwest::Client::new(),
        }
    }

    /// What the agent saw: `{"tasks": {id: {"messages": [...], "cancelled": bool}}, "auth": [...]}`.
    pub async fn seen(&self) -> Value {
        self.http
            .get(format!("{}/seen", self.base))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap()
    }

    /// Waits until `f` holds of what the agent saw.
    async fn until(&self, what: &str, f: impl Fn(&Value) -> bool) -> Value {
        let deadline = Instant::now() + WAIT;
        loop {
            let seen = self.seen().await;
            if f(&seen) {
                return seen;
            }
            assert!(Instant::now() < deadline, "{what}: {seen}");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

impl Drop for RemoteAgent {
    fn drop(&mut self) {
        let _ = self.child.start_kill();
    }
}

/// An orchestrator assistant (its `task` calls need no approval) and a session of the member.
async fn session(ctx: &Ctx, t: &TenantFx) -> String {
    ctx.ok(
        Method::POST,
        "/api/v1/agents",
        &t.admin.key,
        Some(json!({"id": "boss", "name": "Boss", "profile": "orchestrator"})),
        201,
    )
    .await;
    let s = ctx
        .ok(
            Method::POST,
            "/api/v1/sessions",
            &t.member.key,
            Some(json!({"assistant_id": "boss"})),
            201,
        )
        .await;
    s["session_id"].as_str().unwrap().to_string()
}

fn task_line(description: &str, remote: &str) -> String {
    format!(
        "/tool task {}",
        json!({"description": description, "remote_agent": remote})
    )
}

/// Events until the `done` of the run a person started.
async fn until_top_done(ws: &mut Socket) -> Vec<Value> {
    let mut out = Vec::new();
    loop {
        let ev = next_json(ws).await;
        let stop = ev["event_type"] == "done" && ev.get("parent_run_id").is_none();
        out.push(ev);
        if stop {
            return out;
        }
    }
}

fn of_run<'a>(events: &'a [Value], run: &str) -> Vec<&'a Value> {
    events.iter().filter(|e| e["run_id"] == run).collect()
}

fn the_child(events: &[Value]) -> String {
    events
        .iter()
        .find_map(|e| {
            e.get("parent_run_id")
                .map(|_| e["run_id"].as_str().unwrap().to_string())
        })
        .unwrap_or_else(|| panic!("no child event in {events:?}"))
}

/// The parent's `tool_result` of its `task` call.
fn task_result(events: &[Value], parent: &str) -> Value {
    events
        .iter()
        .find(|e| e["run_id"] == parent && e["event_type"] == "tool_result")
        .unwrap_or_else(|| panic!("no tool_result of the parent in {events:?}"))["data"]
        .clone()
}

async fn register(ctx: &Ctx, key: &str, body: Value) -> crate::ctx::Resp {
    ctx.call(
        Method::POST,
        "/api/v1/remote-agents",
        Some(key),
        Some(&body),
    )
    .await
}

/// A registration whose card fails a check: 422 `validation_error`, `details.card` naming
/// the check, the message saying why.
async fn refused(ctx: &Ctx, key: &str, id: &str, url: String, check: &str, says: &str) {
    let r = register(ctx, key, json!({"id": id, "url": url})).await;
    assert_eq!(
        (r.status, r.code()),
        (422, "validation_error"),
        "{}",
        r.body
    );
    assert_eq!(r.body["details"]["card"], check, "{}", r.body);
    assert!(
        r.body["message"].as_str().unwrap().contains(says),
        "{}",
        r.body
    );
}

/// Registration over REST: the card checked, the credential sealed and never shown, the
/// network rule, a tenant admin's right, another tenant's ids.
pub async fn registration(ctx: &Ctx, remote: &RemoteAgent) {
    let t = ctx.tenant().await;
    let other = ctx.tenant().await;
    let body = json!({"id": "helper", "url": remote.base,
                      "auth": {"type": "bearer", "token": REMOTE_TOKEN}, "timeout_secs": 30});
    // A member may not register one.
    let r = register(ctx, &t.member.key, body.clone()).await;
    assert_eq!((r.status, r.code()), (403, "forbidden"), "{}", r.body);
    let r = register(ctx, &t.admin.key, body.clone()).await;
    assert_eq!(r.status, 201, "{}", r.body);
    let a = &r.body;
    assert_eq!(a["id"], "helper");
    assert_eq!(a["name"], "Scripted remote agent", "{a}");
    assert_eq!(a["endpoint_url"], format!("{}/", remote.base), "{a}");
    assert_eq!(a["auth"], "bearer");
    assert_eq!(a["credential_set"], true);
    assert_eq!(a["timeout_secs"], 30);
    assert_eq!(a["skills"][0]["id"], "scripted", "{a}");
    assert!(
        !a.to_string().contains(REMOTE_TOKEN),
        "the token is never shown: {a}"
    );
    // Sealed at rest.
    let stored = agentry_store::remote_agents::get(&ctx.db, &t.scope(), &"helper".parse().unwrap())
        .await
        .unwrap()
        .unwrap();
    let sealed = stored.spec.credential_sealed.unwrap();
    assert!(
        sealed.starts_with("v1:") && !sealed.contains(REMOTE_TOKEN),
        "{sealed}"
    );
    // Again: 409.
    let r = register(ctx, &t.admin.key, body.clone()).await;
    assert_eq!((r.status, r.code()), (409, "conflict"), "{}", r.body);
    // The member lists and reads it.
    let list = ctx
        .ok(
            Method::GET,
            "/api/v1/remote-agents",
            &t.member.key,
            None,
            200,
        )
        .await;
    assert_eq!(list.as_array().unwrap().len(), 1, "{list}");
    ctx.ok(
        Method::GET,
        "/api/v1/remote-agents/helper",
        &t.member.key,
        None,
        200,
    )
    .await;
    // Another tenant: nothing, and its delete finds nothing.
    let list = ctx
        .ok(
            Method::GET,
            "/api/v1/remote-agents",
            &other.admin.key,
            None,
            200,
        )
        .await;
    assert_eq!(list, json!([]));
    for method in [Method::GET, Method::DELETE] {
        let r = ctx
            .call(
                method,
                "/api/v1/remote-agents/helper",
                Some(&other.admin.key),
                None,
            )
            .await;
        assert_eq!((r.status, r.code()), (404, "not_found"), "{}", r.body);
    }
    // A card that fails the checks: 422, saying why.
    refused(
        ctx,
        &t.admin.key,
        "old",
        format!("{}/v03", remote.base),
        "invalid_card",
        "A2A v1.0",
    )
    .await;
    // No card there at all.
    refused(
        ctx,
        &t.admin.key,
        "nothing",
        format!("{}/nothing-here", remote.base),
        "unreachable",
        "404",
    )
    .await;
    // A private (loopback) address the platform does not allow: refused before any request.
    let port = remote.base.rsplit(':').next().unwrap();
    refused(
        ctx,
        &t.admin.key,
        "private",
        format!("http://127.0.0.1:{port}"),
        "refused",
        "loopback",
    )
    .await;
    // Not a URL; a bad id; a header the client sets itself.
    for (bad, field) in [
        (json!({"id": "x", "url": "ftp://127.0.0.2/"}), "url"),
        (json!({"id": "Not A Slug", "url": remote.base}), "id"),
        (
            json!({"id": "x", "url": remote.base, "auth": {"type": "api_key", "header": "Content-Type", "key": "k"}}),
            "auth.header",
        ),
    ] {
        let r = register(ctx, &t.admin.key, bad).await;
        assert_eq!(
            (r.status, r.code()),
            (422, "validation_error"),
            "{}",
            r.body
        );
        assert_eq!(r.body["details"]["field"], field, "{}", r.body);
    }
    // The private one was never asked for its card; the refused ones were not stored.
    let list = ctx
        .ok(
            Method::GET,
            "/api/v1/remote-agents",
            &t.admin.key,
            None,
            200,
        )
        .await;
    assert_eq!(list.as_array().unwrap().len(), 1, "{list}");
    // Deleted by its tenant's admin; then gone.
    ctx.ok(
        Method::DELETE,
        "/api/v1/remote-agents/helper",
        &t.admin.key,
        None,
        204,
    )
    .await;
    let r = ctx
        .call(
            Method::GET,
            "/api/v1/remote-agents/helper",
            Some(&t.admin.key),
            None,
        )
        .await;
    assert_eq!(r.status, 404, "{}", r.body);
}

/// Delegation through the real binary: streaming, the question, cancel, a hanging and a dead
/// agent.
pub async fn delegation(ctx: &Ctx, remote: &RemoteAgent) {
    let t = ctx.tenant().await;
    for (id, url, timeout) in [
        ("helper", remote.base.clone(), 30),
        ("sleepy", remote.base.clone(), 3),
        ("dead", format!("{}/dead", remote.base), 30),
    ] {
        let r = register(
            ctx,
            &t.admin.key,
            json!({"id": id, "url": url, "timeout_secs": timeout,
                   "auth": {"type": "bearer", "token": REMOTE_TOKEN}}),
        )
        .await;
        assert_eq!(r.status, 201, "{id}: {}", r.body);
    }
    let sid = session(ctx, &t).await;
    let mut ws = ws_connect(ctx, &t.member.key, &sid).await;

    // 1. Streaming: the remote task's chunks are the child's `text` events, nested under the
    // parent; its answer is the call's result.
    chat(&mut ws, &task_line("stream: hello there", "helper")).await;
    let events = until_top_done(&mut ws).await;
    let parent = events[0]["run_id"].as_str().unwrap().to_string();
    assert_eq!(events[0]["data"]["tool_name"], "task", "{events:?}");
    let child = the_child(&events);
    let child_events = of_run(&events, &child);
    assert!(
        child_events
            .iter()
            .all(|e| e["parent_run_id"] == parent.as_str()),
        "{events:?}"
    );
    let chunks: Vec<&str> = child_events
        .iter()
        .filter(|e| e["event_type"] == "text" && e["data"]["is_final"] == false)
        .map(|e| e["data"]["content"].as_str().unwrap())
        .collect();
    assert!(chunks.len() >= 3, "streamed in chunks: {events:?}");
    assert_eq!(chunks.concat(), "Remote says: hello there", "{events:?}");
    let last = child_events.last().unwrap();
    assert_eq!(last["event_type"], "done", "{events:?}");
    assert_eq!(last["data"]["status"], "completed", "{last}");
    let result = task_result(&events, &parent);
    assert_eq!(result["status"], "success", "{result}");
    assert_eq!(
        result["result"]["answer"], "Remote says: hello there",
        "{result}"
    );
    assert_eq!(result["result"]["run_id"], child.as_str());
    assert_eq!(result["result"]["remote_agent"], "helper");
    let remote_task = result["result"]["remote_task_id"]
        .as_str()
        .unwrap()
        .to_string();
    assert_eq!(events.last().unwrap()["data"]["status"], "completed");
    // The child run is in the audit like a local one: `a2a:helper`, its parent, completed.
    let exec = ctx
        .ok(
            Method::GET,
            &format!("/api/v1/executions/{child}"),
            &t.member.key,
            None,
            200,
        )
        .await;
    assert_eq!(exec["status"], "completed", "{exec}");
    assert_eq!(exec["assistant_id"], "a2a:helper", "{exec}");
    assert_eq!(exec["parent_execution_id"], parent.as_str(), "{exec}");
    let calls = ctx
        .ok(
            Method::GET,
            &format!("/api/v1/tool-calls?execution_id={parent}&tool_name=task"),
            &t.member.key,
            None,
            200,
        )
        .await;
    assert_eq!(
        calls["items"].as_array().unwrap().len(),
        1,
        "the task call is audited: {calls}"
    );
    // The agent got the description, with the sealed token opened.
    let seen = remote.seen().await;
    assert_eq!(
        seen["tasks"][&remote_task]["messages"],
        json!(["stream: hello there"]),
        "{seen}"
    );
    assert!(
        seen["auth"].as_array().unwrap().iter().all(|a| a == true),
        "every call carried the token: {seen}"
    );

    // 2. The remote agent asks (`input-required`): the user gets the question, nested; the
    // answer goes back as a message on the same remote task.
    chat(&mut ws, &task_line("ask: paint the shed", "helper")).await;
    let mut asked = Vec::new();
    let hitl = loop {
        let ev = next_json(&mut ws).await;
        asked.push(ev.clone());
        if ev["event_type"] == "hitl_request" {
            break ev;
        }
        assert!(
            !(ev["event_type"] == "done" && ev.get("parent_run_id").is_none()),
            "the run ended before asking: {asked:?}"
        );
    };
    let parent = asked[0]["run_id"].as_str().unwrap().to_string();
    assert_eq!(hitl["parent_run_id"], parent.as_str(), "{hitl}");
    assert_eq!(hitl["data"]["kind"], "question", "{hitl}");
    assert_eq!(
        hitl["data"]["question"]["text"], "Which colour for: paint the shed?",
        "{hitl}"
    );
    let request = hitl["data"]["request_id"].as_str().unwrap();
    send(
        &mut ws,
        json!({"type": "hitl_decision", "payload": {"request_id": request, "type": "answer", "answer": "green"}}),
    )
    .await;
    let events = until_top_done(&mut ws).await;
    let result = task_result(&events, &parent);
    assert_eq!(result["status"], "success", "{result}");
    assert_eq!(
        result["result"]["answer"], "Painting paint the shed green",
        "{result}"
    );
    let remote_task = result["result"]["remote_task_id"].as_str().unwrap();
    let seen = remote.seen().await;
    assert_eq!(
        seen["tasks"][remote_task]["messages"],
        json!(["ask: paint the shed", "green"]),
        "the answer went to the same task: {seen}"
    );

    // 3. Cancelling the parent cancels the remote task (`CancelTask`).
    chat(&mut ws, &task_line("hang: forever", "helper")).await;
    let first = next_json(&mut ws).await;
    let parent = first["run_id"].as_str().unwrap().to_string();
    let seen = remote
        .until("the remote task started", |s| {
            s["tasks"].as_object().is_some_and(|m| {
                m.values()
                    .any(|t| t["messages"] == json!(["hang: forever"]))
            })
        })
        .await;
    let hung = seen["tasks"]
        .as_object()
        .unwrap()
        .iter()
        .find(|(_, t)| t["messages"] == json!(["hang: forever"]))
        .unwrap()
        .0
        .clone();
    let asked = Instant::now();
    send(&mut ws, json!({"type": "cancel", "payload": {}})).await;
    let events = until_top_done(&mut ws).await;
    assert!(asked.elapsed() < Duration::from_secs(15), "{events:?}");
    let child = the_child(&events);
    let child_done = events
        .iter()
        .find(|e| e["run_id"] == child && e["event_type"] == "done")
        .unwrap();
    assert_eq!(child_done["data"]["status"], "cancelled", "{child_done}");
    assert_eq!(child_done["parent_run_id"], parent.as_str(), "{child_done}");
    assert_eq!(events.last().unwrap()["data"]["status"], "cancelled");
    remote
        .until("CancelTask reached the remote agent", |s| {
            s["tasks"][&hung]["cancelled"] == true
        })
        .await;

    // 4. A hanging agent: the child run fails within its timeout (3 s) with a clear error,
    // the remote task is cancelled, and the parent goes on to its answer.
    let started = Instant::now();
    chat(&mut ws, &task_line("hang: again", "sleepy")).await;
    let events = until_top_done(&mut ws).await;
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "{:?}",
        started.elapsed()
    );
    let parent = events[0]["run_id"].as_str().unwrap().to_string();
    let child = the_child(&events);
    let child_done = events
        .iter()
        .find(|e| e["run_id"] == child && e["event_type"] == "done")
        .unwrap();
    assert_eq!(child_done["data"]["status"], "timeout", "{child_done}");
    let result = task_result(&events, &parent);
    assert_eq!(result["status"], "error", "{result}");
    assert_eq!(result["result"]["status"], "timeout", "{result}");
    assert!(
        result["result"]["error"]
            .as_str()
            .unwrap()
            .contains("did not finish within its timeout (3 s)"),
        "{result}"
    );
    let done = events.last().unwrap();
    assert_eq!(done["run_id"], parent.as_str());
    assert_eq!(
        done["data"]["status"], "completed",
        "the parent goes on: {done}"
    );
    let timed_out = result["result"]["remote_task_id"]
        .as_str()
        .unwrap()
        .to_string();
    remote
        .until("the timed-out task was cancelled", |s| {
            s["tasks"][&timed_out]["cancelled"] == true
        })
        .await;

    // 5. A dead agent (its card names an endpoint nothing listens on): a clear error at once.
    chat(&mut ws, &task_line("stream: anyone?", "dead")).await;
    let events = until_top_done(&mut ws).await;
    let parent = events[0]["run_id"].as_str().unwrap().to_string();
    let result = task_result(&events, &parent);
    assert_eq!(result["result"]["status"], "failed", "{result}");
    assert!(
        result["result"]["error"]
            .as_str()
            .unwrap()
            .contains("could not be reached"),
        "{result}"
    );
    assert_eq!(events.last().unwrap()["data"]["status"], "completed");

    // An agent the tenant did not register: the call fails, says where to look.
    chat(&mut ws, &task_line("stream: x", "nobody")).await;
    let events = until_top_done(&mut ws).await;
    let parent = events[0]["run_id"].as_str().unwrap().to_string();
    let result = task_result(&events, &parent);
    assert_eq!(result["status"], "error", "{result}");
    assert!(
        result.to_string().contains("GET /api/v1/remote-agents"),
        "{result}"
    );
}

/// The statuses of the routes that only a scenario makes (the matrix, edge and outage tests make
/// the others), against a card server of this test's own: 409 for an id taken, 422 for a card
/// that fails, 404 for a remote agent the tenant does not have.
pub async fn rest_statuses(ctx: &Ctx) {
    let t = ctx.tenant().await;
    let card = static_card_server().await;
    let body = json!({"id": "statuses", "url": card});
    assert_eq!(register(ctx, &t.admin.key, body.clone()).await.status, 201);
    let r = register(ctx, &t.admin.key, body).await;
    assert_eq!((r.status, r.code()), (409, "conflict"), "{}", r.body);
    // This server itself, on 127.0.0.1: a loopback address the network rule refuses.
    let r = register(
        ctx,
        &t.admin.key,
        json!({"id": "loopback", "url": ctx.url("/a2a/x")}),
    )
    .await;
    assert_eq!(
        (r.status, r.code()),
        (422, "validation_error"),
        "{}",
        r.body
    );
    assert_eq!(r.body["details"]["card"], "refused", "{}", r.body);
    for method in [Method::GET, Method::DELETE] {
        let r = ctx
            .call(
                method,
                "/api/v1/remote-agents/nobody",
                Some(&t.admin.key),
                None,
            )
            .await;
        assert_eq!((r.status, r.code()), (404, "not_found"), "{}", r.body);
    }
}

/// Without an encryption key a credential cannot be stored: 503; without one it registers.
pub async fn without_encryption_key(ctx: &Ctx) {
    let t = ctx.tenant().await;
    let card = static_card_server().await;
    let r = register(
        ctx,
        &t.admin.key,
        json!({"id": "keyed", "url": card, "auth": {"type": "bearer", "token": "t"}}),
    )
    .await;
    assert_eq!(
        (r.status, r.code()),
        (503, "service_unavailable"),
        "{}",
        r.body
    );
    assert!(r.message().contains("encryption key"), "{}", r.body);
    let r = register(ctx, &t.admin.key, json!({"id": "open", "url": card})).await;
    assert_eq!(r.status, 201, "{}", r.body);
}
