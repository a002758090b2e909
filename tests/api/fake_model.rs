//! The chat flows of the gateway issue against the fake model server (`agentry-fake-model`), over
//! both wire formats the real provider clients speak: approvals (approve, edit, reject, timeout),
//! cancel over WebSocket and REST within 1 s, the same events over `/chat`, `/chat/stream` and
//! the WebSocket, and resuming while a run is still streaming; [`crate::concurrency`] adds two
//! tenants running at once and sessions that do not block each other, on the same servers.
//!
//! One fake model and one gateway per wire format serve every scenario (the machine has two
//! cores); each scenario uses its own tenant so their workspaces and sessions never meet.

use std::time::{Duration, Instant};

use agentry_fake_model::{Endpoint, FakeConfig, FakeModelServer, FakeReply};
use reqwest::Method;
use serde_json::{Value, json};

use crate::ctx::Ctx;
use crate::mcp::{types, ws_connect, ws_request};
use crate::streaming::{
    Socket, WAIT, new_session, next_json, pending_request, rest_then_sse, script_of, send, text_of,
    until_done_or_hitl,
};

/// Which provider client the gateway uses to reach the fake model.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wire {
    OpenAi,
    Anthropic,
}

impl Wire {
    pub fn endpoint(self) -> Endpoint {
        match self {
            Wire::OpenAi => Endpoint::OpenAiChat,
            Wire::Anthropic => Endpoint::AnthropicMessages,
        }
    }
}

/// Undecided approvals are rejected after this long on the fake-model servers: short enough to
/// test the timeout, long enough for a test that decides at once never to race it.
pub const HITL_TIMEOUT_SECS: u64 = 3;

/// A fake model and a gateway whose default model is it (`AGENTRY_LLM__*`, docs/models.md).
/// The fake must outlive the gateway, so both are returned.
pub async fn start(wire: Wire, extra: &[(&str, &str)]) -> (FakeModelServer, Ctx) {
    let fake = FakeModelServer::start(FakeConfig {
        api_key: Some("fake-model-key".into()),
        ..FakeConfig::default()
    });
    let (provider, base) = match wire {
        Wire::OpenAi => ("openai", fake.base_url_openai()),
        Wire::Anthropic => ("anthropic", fake.base_url_anthropic()),
    };
    let mut env = vec![
        ("AGENTRY_LLM__PROVIDER", provider),
        ("AGENTRY_LLM__BASE_URL", base.as_str()),
        ("AGENTRY_LLM__API_KEY", "fake-model-key"),
        ("AGENTRY_LLM__MODEL", "fake-large"),
    ];
    env.extend_from_slice(extra);
    let ctx = Ctx::start_with(&env, None).await;
    (fake, ctx)
}

/// Everything the fake received since `from` went over `wire` for model `fake-large`: the
/// gateway really used the configured provider, not the built-in scripted model.
fn assert_served_by(fake: &FakeModelServer, wire: Wire, from: usize) -> usize {
    let reqs = fake.requests();
    assert!(reqs.len() > from, "the fake model was never asked");
    for r in &reqs[from..] {
        assert_eq!(r.endpoint, wire.endpoint(), "{}", r.raw_body);
        assert_eq!(r.body["model"], "fake-large", "{}", r.raw_body);
    }
    reqs.len()
}

pub async fn chat(ws: &mut Socket, message: &str) {
    send(ws, json!({"type": "chat", "payload": {"message": message}})).await;
}

fn done_of(events: &[Value]) -> &Value {
    let done = events.last().expect("some events");
    assert_eq!(done["event_type"], "done", "{events:?}");
    done
}

/// Read events until one of type `kind`; everything read is returned, that one last.
pub async fn until_type(ws: &mut Socket, kind: &str) -> Vec<Value> {
    let mut out = Vec::new();
    loop {
        let ev = next_json(ws).await;
        let stop = ev["event_type"] == kind;
        out.push(ev);
        if stop {
            return out;
        }
    }
}

/// Approve, edit, reject and let an approval time out, all over the socket.
pub async fn approvals(ctx: &Ctx, fake: &FakeModelServer, wire: Wire) {
    let t = ctx.tenant().await;
    let key = &t.member.key;
    let sid = new_session(ctx, key).await;
    let mut ws = ws_connect(ctx, key, &sid).await;
    let seen = fake.requests().len();

    // Approve: the tool runs and the model hears its result.
    chat(
        &mut ws,
        r#"/tool write_file {"file_path": "notes.txt", "content": "approved text"}"#,
    )
    .await;
    let evs = until_done_or_hitl(&mut ws).await;
    assert_eq!(types(&evs), ["tool_call", "hitl_request"], "{evs:?}");
    let hitl = &evs[1]["data"];
    assert_eq!(hitl["kind"], "approval", "{hitl}");
    assert_eq!(hitl["action_requests"][0]["name"], "write_file", "{hitl}");
    assert_eq!(
        hitl["action_requests"][0]["args"]["content"], "approved text",
        "{hitl}"
    );
    let request = hitl["request_id"].as_str().unwrap().to_string();
    send(
        &mut ws,
        json!({"type": "hitl_decision", "payload": {"request_id": request, "type": "approve"}}),
    )
    .await;
    let evs = until_done_or_hitl(&mut ws).await;
    let result = evs
        .iter()
        .find(|e| e["event_type"] == "tool_result")
        .expect("a tool result");
    assert_eq!(result["data"]["status"], "success", "{result}");
    assert!(types(&evs).contains(&"file_operation"), "{evs:?}");
    let done = done_of(&evs);
    assert_eq!(
        (&done["data"]["status"], &done["data"]["cancelled"]),
        (&json!("completed"), &json!(false)),
        "{done}"
    );
    assert!(
        text_of(&evs).starts_with("(scripted) Tool write_file returned"),
        "{evs:?}"
    );
    // The second model call carried the tool's result back over the wire.
    let seen_now = assert_served_by(fake, wire, seen);
    let last = &fake.requests()[seen_now - 1];
    assert!(
        last.raw_body.contains("call_1") && last.raw_body.contains("notes.txt"),
        "the tool result went back to the model: {}",
        last.raw_body
    );

    // Edit: the tool runs with the human's arguments, not the model's.
    chat(
        &mut ws,
        r#"/tool write_file {"file_path": "draft.txt", "content": "draft"}"#,
    )
    .await;
    let evs = until_done_or_hitl(&mut ws).await;
    let request = pending_request(&evs);
    send(
        &mut ws,
        json!({"type": "hitl_decision", "payload": {"request_id": request, "type": "edit",
            "args": {"file_path": "final.txt", "content": "edited by a human"}}}),
    )
    .await;
    let evs = until_done_or_hitl(&mut ws).await;
    assert_eq!(done_of(&evs)["data"]["status"], "completed", "{evs:?}");
    let op = evs
        .iter()
        .find(|e| e["event_type"] == "file_operation")
        .expect("a file operation");
    assert!(
        op["data"]["file_path"]
            .as_str()
            .is_some_and(|p| p.ends_with("final.txt")),
        "{op}"
    );
    chat(&mut ws, r#"/tool read_file {"file_path": "final.txt"}"#).await;
    let evs = until_done_or_hitl(&mut ws).await;
    assert!(
        text_of(&evs).contains("edited by a human"),
        "the edited arguments ran: {evs:?}"
    );

    // Reject: the run ends rejected (`cancelled: true`), the tool never ran.
    chat(
        &mut ws,
        r#"/tool write_file {"file_path": "never.txt", "content": "no"}"#,
    )
    .await;
    let evs = until_done_or_hitl(&mut ws).await;
    let request = pending_request(&evs);
    let asked = fake.requests().len();
    send(
        &mut ws,
        json!({"type": "hitl_decision", "payload": {"request_id": request, "type": "reject", "message": "not now"}}),
    )
    .await;
    let evs = until_done_or_hitl(&mut ws).await;
    assert!(!types(&evs).contains(&"file_operation"), "{evs:?}");
    let done = done_of(&evs);
    assert_eq!(done["data"]["status"], "rejected", "{done}");
    assert_eq!(done["data"]["cancelled"], true, "{done}");
    assert_eq!(
        fake.requests().len(),
        asked,
        "a rejected run does not ask the model again"
    );
    let run = done["run_id"].as_str().unwrap();
    let detail = ctx
        .ok(
            Method::GET,
            &format!("/api/v1/executions/{run}"),
            key,
            None,
            200,
        )
        .await;
    assert_eq!(detail["status"], "rejected", "{detail}");
    assert_eq!(detail["tool_calls"][0]["approved"], false, "{detail}");
    assert_eq!(detail["approvals"][0]["status"], "rejected", "{detail}");

    // Timeout: no decision within `hitl.timeout_secs` is a reject.
    chat(
        &mut ws,
        r#"/tool write_file {"file_path": "late.txt", "content": "x"}"#,
    )
    .await;
    let evs = until_done_or_hitl(&mut ws).await;
    assert_eq!(evs.last().unwrap()["event_type"], "hitl_request");
    let asked_at = Instant::now();
    let evs = until_done_or_hitl(&mut ws).await;
    let waited = asked_at.elapsed();
    assert!(
        waited >= Duration::from_secs(HITL_TIMEOUT_SECS - 1),
        "the approval was given up after {waited:?}, before its {HITL_TIMEOUT_SECS} s"
    );
    let result = evs
        .iter()
        .find(|e| e["event_type"] == "tool_result")
        .expect("the call gets a result");
    assert_eq!(result["data"]["status"], "error", "{result}");
    assert!(result.to_string().contains("hitl_timeout"), "{result}");
    let done = done_of(&evs);
    assert_eq!(
        (&done["data"]["status"], &done["data"]["reason"]),
        (&json!("rejected"), &json!("hitl_timeout")),
        "{done}"
    );
    assert_served_by(fake, wire, seen);
}

/// A Server-Sent Events response read event by event, as it arrives.
pub struct SseReader {
    res: reqwest::Response,
    buf: Vec<u8>,
}

impl SseReader {
    pub fn new(res: reqwest::Response) -> Self {
        Self {
            res,
            buf: Vec::new(),
        }
    }

    /// The next `data:` event, or `None` at the end of the body.
    pub async fn next(&mut self) -> Option<Value> {
        loop {
            if let Some(pos) = self.buf.iter().position(|b| *b == b'\n') {
                let line: Vec<u8> = self.buf.drain(..=pos).collect();
                let line = String::from_utf8(line).expect("SSE is UTF-8");
                if let Some(data) = line.trim_end().strip_prefix("data: ") {
                    return Some(serde_json::from_str(data).expect("one JSON event per line"));
                }
                continue;
            }
            let chunk = tokio::time::timeout(WAIT, self.res.chunk())
                .await
                .expect("SSE data within 60 s")
                .expect("the stream stays readable")?;
            self.buf.extend_from_slice(&chunk);
        }
    }

    pub async fn until(&mut self, kind: &str) -> Vec<Value> {
        let mut out = Vec::new();
        loop {
            let ev = self.next().await.expect("the stream ends after done");
            let stop = ev["event_type"] == kind;
            out.push(ev);
            if stop {
                return out;
            }
        }
    }
}

/// A reply that streams for a few seconds, so a test can act while it is mid-stream.
fn long_stream(words: usize, delay_ms: u64) -> FakeReply {
    let text: Vec<String> = (0..words).map(|i| format!("w{i}")).collect();
    FakeReply::text(&text.join(" "))
        .in_chunks(words)
        .with_chunk_delay(Duration::from_millis(delay_ms))
}

/// The slowest a cancel may take to land `done` (DESIGN §4: within 1 s).
const CANCEL_LIMIT: Duration = Duration::from_secs(1);

fn assert_cancelled(done: &Value, took: Duration, how: &str) {
    assert_eq!(done["event_type"], "done", "{how}: {done}");
    assert_eq!(done["data"]["cancelled"], true, "{how}: {done}");
    assert_eq!(done["data"]["status"], "cancelled", "{how}: {done}");
    assert_eq!(done["data"]["reason"], "user_cancelled", "{how}: {done}");
    assert!(
        took < CANCEL_LIMIT,
        "{how}: done{{cancelled}} came {took:?} after the cancel"
    );
}

/// Wait until the fake model has received more than `before` requests: the run is waiting on
/// the model's answer.
pub async fn model_asked(fake: &FakeModelServer, before: u64) {
    let deadline = Instant::now() + WAIT;
    while fake.request_count() <= before {
        assert!(Instant::now() < deadline, "the model was never asked");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Cancel over the socket and over REST, both while the model is streaming its answer and
/// while the run waits for the answer to start; each lands `done{cancelled: true}` within 1 s
/// of the cancel being sent.
pub async fn cancels(ctx: &Ctx, fake: &FakeModelServer, wire: Wire) {
    let t = ctx.tenant().await;
    let key = &t.member.key;
    let seen = fake.requests().len();

    // WebSocket, mid-stream.
    let sid = new_session(ctx, key).await;
    let mut ws = ws_connect(ctx, key, &sid).await;
    fake.push(long_stream(600, 50));
    chat(&mut ws, "talk for a while").await;
    until_type(&mut ws, "text").await;
    let t0 = Instant::now();
    send(&mut ws, json!({"type": "cancel", "payload": {}})).await;
    let evs = until_type(&mut ws, "done").await;
    assert_cancelled(done_of(&evs), t0.elapsed(), "WS cancel mid-stream");
    let texts = types(&evs).iter().filter(|t| **t == "text").count();
    assert!(
        texts < 100,
        "the stream stopped at the cancel: {texts} more text events"
    );

    // WebSocket, before the model's first byte (`/sleep` delays the fake's response head).
    let before = fake.request_count();
    chat(&mut ws, "/sleep 120000\nanswer late").await;
    model_asked(fake, before).await;
    let t0 = Instant::now();
    send(&mut ws, json!({"type": "cancel", "payload": {}})).await;
    let evs = until_type(&mut ws, "done").await;
    assert_cancelled(done_of(&evs), t0.elapsed(), "WS cancel before the answer");

    // REST cancel, watched over SSE (mid-stream) and over the socket.
    fake.push(long_stream(600, 50));
    let res = ctx
        .request(Method::POST, "/api/v1/chat/stream", Some(key))
        .json(&json!({ "message": "talk for a while", "session_id": sid }))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 200);
    let mut sse = SseReader::new(res);
    sse.until("text").await;
    until_type(&mut ws, "text").await;
    let t0 = Instant::now();
    let c = ctx
        .ok(
            Method::POST,
            &format!("/api/v1/sessions/{sid}/cancel"),
            key,
            None,
            200,
        )
        .await;
    let evs = sse.until("done").await;
    assert_cancelled(done_of(&evs), t0.elapsed(), "REST cancel seen over SSE");
    assert_eq!(done_of(&evs)["run_id"], c["run_id"]);
    let evs = until_type(&mut ws, "done").await;
    assert_cancelled(done_of(&evs), t0.elapsed(), "REST cancel seen over WS");
    assert!(sse.next().await.is_none(), "the SSE body ends after done");

    // REST cancel before the first byte.
    let before = fake.request_count();
    chat(&mut ws, "/sleep 120000\nanswer late").await;
    model_asked(fake, before).await;
    let t0 = Instant::now();
    ctx.ok(
        Method::POST,
        &format!("/api/v1/sessions/{sid}/cancel"),
        key,
        None,
        200,
    )
    .await;
    let evs = until_type(&mut ws, "done").await;
    assert_cancelled(done_of(&evs), t0.elapsed(), "REST cancel before the answer");

    // Every run of the session ended cancelled.
    let runs = ctx
        .ok(
            Method::GET,
            &format!("/api/v1/executions?session_id={sid}"),
            key,
            None,
            200,
        )
        .await;
    let statuses: Vec<&str> = runs["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["status"].as_str().unwrap())
        .collect();
    assert_eq!(statuses, ["cancelled"; 4], "{runs}");
    assert_served_by(fake, wire, seen);
}

/// The same script gives the same events over `/chat`, `/chat/stream` and the WebSocket.
pub async fn same_events_everywhere(ctx: &Ctx, fake: &FakeModelServer, wire: Wire) {
    let t = ctx.tenant().await;
    let key = &t.member.key;
    let seen = fake.requests().len();
    let script = r#"/tool list_directory {"path": "."}"#;
    let (rest, sse) = rest_then_sse(ctx, key, script).await;
    let sid = new_session(ctx, key).await;
    let mut ws = ws_connect(ctx, key, &sid).await;
    chat(&mut ws, script).await;
    let over_ws = until_done_or_hitl(&mut ws).await;
    let kinds = types(&rest);
    assert_eq!(kinds[..2], ["tool_call", "tool_result"], "{rest:?}");
    assert_eq!(kinds.last(), Some(&"done"), "{rest:?}");
    assert!(
        kinds[2..kinds.len() - 1].iter().all(|k| *k == "text"),
        "{rest:?}"
    );
    assert!(text_of(&rest).starts_with("(scripted) Tool list_directory returned"));
    assert_eq!(script_of(&rest), script_of(&sse), "REST and SSE differ");
    assert_eq!(script_of(&rest), script_of(&over_ws), "REST and WS differ");
    // Two model calls per run (the call, then the summary), all over the configured wire.
    assert_eq!(assert_served_by(fake, wire, seen) - seen, 6);
}

/// Seqs of `events`, which must go up by one with exactly one `done`, the last.
fn assert_contiguous(events: &[Value], what: &str) {
    let seqs: Vec<u64> = events.iter().map(|e| e["seq"].as_u64().unwrap()).collect();
    let first = seqs[0];
    let want: Vec<u64> = (first..first + seqs.len() as u64).collect();
    assert_eq!(seqs, want, "{what}: a gap or a duplicate");
    let dones = types(events).iter().filter(|t| **t == "done").count();
    assert_eq!(dones, 1, "{what}: {events:?}");
    assert_eq!(types(events).last(), Some(&"done"), "{what}");
}

/// Disconnect while the model is still streaming and come back with `?after_seq=`, then with
/// the `resume` frame on a socket that was already receiving the live stream: no gap, no
/// duplicate, one `done`, and the whole answer.
pub async fn resume_while_running(ctx: &Ctx, fake: &FakeModelServer) {
    let t = ctx.tenant().await;
    let key = &t.member.key;
    let sid = new_session(ctx, key).await;
    let words = 60;
    let whole: Vec<String> = (0..words).map(|i| format!("w{i}")).collect();
    let whole = whole.join(" ");

    // `?after_seq=` on a new connection.
    fake.push(long_stream(words, 50));
    let mut ws = ws_connect(ctx, key, &sid).await;
    chat(&mut ws, "stream something").await;
    let mut got = Vec::new();
    while types(&got).iter().filter(|t| **t == "text").count() < 5 {
        got.push(next_json(&mut ws).await);
    }
    drop(ws);
    let after = got.last().unwrap()["seq"].as_u64().unwrap();
    let run = got[0]["run_id"].as_str().unwrap().to_string();
    let req = ws_request(ctx, key, &sid, &format!("?after_seq={after}"));
    let mut ws = tokio_tungstenite::connect_async(req).await.unwrap().0;
    // Still running when we came back: what follows is partly replay, partly live.
    let exec = ctx
        .ok(
            Method::GET,
            &format!("/api/v1/executions/{run}"),
            key,
            None,
            200,
        )
        .await;
    assert_eq!(exec["status"], "running", "{exec}");
    got.extend(until_type(&mut ws, "done").await);
    assert_contiguous(&got, "?after_seq");
    assert_eq!(text_of(&got), whole);
    let last_done = got.last().unwrap()["seq"].as_u64().unwrap();

    // The `resume` frame on a socket that joined the live stream: the replay restarts at the
    // run's first event, whatever was already queued for the socket. Events that the old
    // subscription queued in the moment of the resume once hid the replay; a fast stream and
    // many resumes make that moment likely to hold some.
    const ROUNDS: usize = 15;
    fake.push(long_stream(words * 20, 1));
    let mut ws = ws_connect(ctx, key, &sid).await;
    chat(&mut ws, "stream more").await;
    for round in 0..ROUNDS {
        for _ in 0..10 {
            next_json(&mut ws).await;
        }
        send(
            &mut ws,
            json!({"type": "resume", "payload": {"after_seq": last_done}}),
        )
        .await;
        // Frames already on the wire when the server read the resume may come first; from the
        // replay's first event on, everything must follow in order.
        let mut evs = Vec::new();
        let restarted = tokio::time::timeout(Duration::from_secs(10), async {
            loop {
                let ev = next_json(&mut ws).await;
                if ev["seq"] == last_done + 1 {
                    return ev;
                }
            }
        });
        evs.push(restarted.await.unwrap_or_else(|_| {
            panic!(
                "round {round}: the replay never restarted at seq {}",
                last_done + 1
            )
        }));
        if round == ROUNDS - 1 {
            evs.extend(until_type(&mut ws, "done").await);
            assert_contiguous(&evs, "resume frame");
            let all: Vec<String> = (0..words * 20).map(|i| format!("w{i}")).collect();
            assert_eq!(text_of(&evs), all.join(" "));
        } else {
            // A stretch of the replay, checked in order, before resuming again.
            for _ in 0..5 {
                evs.push(next_json(&mut ws).await);
            }
            let seqs: Vec<u64> = evs.iter().map(|e| e["seq"].as_u64().unwrap()).collect();
            let want: Vec<u64> = (last_done + 1..last_done + 7).collect();
            assert_eq!(seqs, want, "round {round}");
        }
    }
}

/// Every scenario above and those of [`crate::concurrency`] on one fake model and one gateway
/// speaking `wire`.
pub async fn all_flows(wire: Wire) {
    let timeout = HITL_TIMEOUT_SECS.to_string();
    let (fake, ctx) = start(wire, &[("AGENTRY_HITL__TIMEOUT_SECS", &timeout)]).await;
    same_events_everywhere(&ctx, &fake, wire).await;
    approvals(&ctx, &fake, wire).await;
    cancels(&ctx, &fake, wire).await;
    resume_while_running(&ctx, &fake).await;
    crate::concurrency::two_tenants_at_once(&ctx, &fake).await;
    crate::concurrency::sessions_do_not_block_each_other(&ctx, &fake).await;
}
