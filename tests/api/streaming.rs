//! Chatting through the real binary with the built-in scripted model (docs/models.md): REST
//! `POST /chat`, Server-Sent Events `POST /chat/stream` and the WebSocket `/ws/chat/{id}`, with
//! approvals, cancellation, queued messages, replay after a reconnect, and the refusals
//! (bad input, busy session, quotas, a full server) — each refusal changing nothing.

use std::time::Duration;

use futures::{SinkExt, StreamExt};
use reqwest::Method;
use serde_json::{Value, json};
use tokio_tungstenite::tungstenite::Message;

use crate::ctx::{Ctx, TenantFx};
use crate::mcp::{types, ws_connect, ws_request};

pub type Socket =
    tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

pub const WAIT: Duration = Duration::from_secs(60);

/// The next JSON text frame (events, errors, pongs), skipping WebSocket control frames.
pub async fn next_json(ws: &mut Socket) -> Value {
    // One deadline for the text frame, not one per frame: the server's pings would otherwise
    // keep a socket that never gets its event waiting for ever (a silent hang, not a failure).
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let msg = tokio::time::timeout_at(deadline, ws.next())
            .await
            .expect("a text frame within 60 s")
            .expect("the socket stays open")
            .expect("a well-formed frame");
        if let Message::Text(text) = msg {
            return serde_json::from_str(&text).expect("frames are JSON");
        }
    }
}

pub async fn send(ws: &mut Socket, frame: Value) {
    ws.send(Message::text(frame.to_string())).await.unwrap();
}

/// Events until (and with) `done`; stops early at a `hitl_request`, returned last.
pub async fn until_done_or_hitl(ws: &mut Socket) -> Vec<Value> {
    let mut events = Vec::new();
    loop {
        let ev = next_json(ws).await;
        let stop = ev["event_type"] == "done" || ev["event_type"] == "hitl_request";
        events.push(ev);
        if stop {
            return events;
        }
    }
}

/// The answer: the deltas (`is_final: false`) put together, which must equal the final text
/// event's content when there is one.
/// The `request_id` of the `hitl_request` that ends `events` (what `until_done_or_hitl` stopped
/// at when the run waits).
pub fn pending_request(events: &[Value]) -> String {
    events.last().unwrap()["data"]["request_id"]
        .as_str()
        .unwrap()
        .to_string()
}

pub fn text_of(events: &[Value]) -> String {
    let texts = events.iter().filter(|e| e["event_type"] == "text");
    let deltas: String = texts
        .clone()
        .filter(|e| e["data"]["is_final"] != true)
        .map(|e| e["data"]["content"].as_str().unwrap_or_default())
        .collect();
    let finals: Vec<&str> = texts
        .filter(|e| e["data"]["is_final"] == true)
        .map(|e| e["data"]["content"].as_str().unwrap_or_default())
        .collect();
    match finals.as_slice() {
        [] => deltas,
        [last] => {
            assert_eq!(*last, deltas, "the final text is the deltas put together");
            deltas
        }
        more => panic!("more than one final text in one run: {more:?}"),
    }
}

pub async fn session_count(ctx: &Ctx, key: &str) -> u64 {
    ctx.ok(Method::GET, "/api/v1/sessions", key, None, 200)
        .await["total"]
        .as_u64()
        .unwrap()
}

pub async fn new_session(ctx: &Ctx, key: &str) -> String {
    let s = ctx
        .ok(
            Method::POST,
            "/api/v1/sessions",
            key,
            Some(json!({ "metadata": { "purpose": "streaming test" } })),
            201,
        )
        .await;
    assert_eq!(s["assistant_id"], "default", "{s}");
    assert_eq!(s["metadata"]["purpose"], "streaming test", "{s}");
    s["session_id"].as_str().unwrap().to_string()
}

/// Parse an SSE body into `(id, event)` pairs.
pub fn sse_events(body: &str) -> Vec<(u64, Value)> {
    let mut out = Vec::new();
    let mut id = None;
    for line in body.lines() {
        if let Some(v) = line.strip_prefix("id: ") {
            id = Some(v.parse::<u64>().expect("numeric SSE id"));
        } else if let Some(v) = line.strip_prefix("data: ") {
            let ev: Value = serde_json::from_str(v).expect("SSE data is one JSON event");
            out.push((id.take().expect("an id before each data line"), ev));
        }
    }
    out
}

/// Start a long run over SSE and return once the server has accepted it (headers received):
/// the response to read to its end, and the session id.
pub async fn start_sleeping_run(
    ctx: &Ctx,
    key: &str,
    session: Option<&str>,
    ms: u64,
) -> (reqwest::Response, String) {
    let mut body = json!({ "message": format!("/sleep {ms}\nthen answer") });
    if let Some(s) = session {
        body["session_id"] = json!(s);
    }
    let res = ctx
        .request(Method::POST, "/api/v1/chat/stream", Some(key))
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 200);
    let sid = res.headers()["x-session-id"].to_str().unwrap().to_string();
    (res, sid)
}

/// REST and SSE chat: answers, continuation, refusals that create nothing, a busy session,
/// queueing, and cancellation.
pub async fn rest_and_sse(ctx: &Ctx) {
    let t = ctx.tenant().await;
    let key = &t.member.key;

    // A new session per message without `session_id`; the scripted model answers.
    let r = ctx
        .ok(
            Method::POST,
            "/api/v1/chat",
            key,
            Some(json!({ "message": "hello there" })),
            200,
        )
        .await;
    let events = r["events"].as_array().unwrap();
    assert_eq!(text_of(events), "(scripted) You said: hello there");
    let last = events.last().unwrap();
    assert_eq!(last["event_type"], "done", "{r}");
    assert_eq!(last["data"]["cancelled"], false, "{r}");
    let seqs: Vec<u64> = events.iter().map(|e| e["seq"].as_u64().unwrap()).collect();
    assert!(seqs.windows(2).all(|w| w[0] < w[1]), "{seqs:?}");
    let sid = r["session_id"].as_str().unwrap().to_string();
    assert!(events.iter().all(|e| e["run_id"] == r["run_id"]));

    // Continue it; the conversation is stored in order.
    let r2 = ctx
        .ok(
            Method::POST,
            "/api/v1/chat",
            key,
            Some(json!({ "message": "/echo second", "session_id": sid })),
            200,
        )
        .await;
    assert_eq!(r2["session_id"], sid.as_str());
    assert_eq!(text_of(r2["events"].as_array().unwrap()), "second");
    let msgs = ctx
        .ok(
            Method::GET,
            &format!("/api/v1/sessions/{sid}/messages"),
            key,
            None,
            200,
        )
        .await;
    let contents: Vec<&str> = msgs["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["content"].as_str().unwrap())
        .collect();
    assert_eq!(
        contents,
        [
            "hello there",
            "(scripted) You said: hello there",
            "/echo second",
            "second"
        ]
    );

    // Refusals: each names the problem and creates no session.
    let before = session_count(ctx, key).await;
    for (body, status, code) in [
        (json!({ "message": "  " }), 422, "validation_error"),
        (
            json!({ "message": "hi", "session_id": "nope" }),
            422,
            "validation_error",
        ),
        (
            json!({ "message": "hi", "assistant_id": "no such agent!" }),
            422,
            "validation_error",
        ),
        (json!({ "mesage": "typo" }), 422, "validation_error"),
        (
            json!({ "message": "hi", "session_id": uuid::Uuid::now_v7().to_string() }),
            404,
            "not_found",
        ),
        (
            json!({ "message": "hi", "assistant_id": "ghost" }),
            404,
            "not_found",
        ),
    ] {
        for path in ["/api/v1/chat", "/api/v1/chat/stream"] {
            let r = ctx.call(Method::POST, path, Some(key), Some(&body)).await;
            assert_eq!(
                (r.status, r.code()),
                (status, code),
                "{path} {body}: {}",
                r.body
            );
        }
    }
    for path in ["/api/v1/chat", "/api/v1/chat/stream", "/api/v1/sessions"] {
        let r = ctx
            .send(
                ctx.request(Method::POST, path, Some(key))
                    .header("content-type", "application/json")
                    .body("{\"message\": "),
            )
            .await;
        assert_eq!((r.status, r.code()), (400, "invalid_json"), "{path}");
    }
    for body in [
        json!({ "assistant_id": "ghost" }),
        json!({ "metadata": [1, 2] }),
        json!({ "auto_aprove": true }),
    ] {
        let r = ctx
            .call(Method::POST, "/api/v1/sessions", Some(key), Some(&body))
            .await;
        let want = if body.get("assistant_id").is_some() {
            404
        } else {
            422
        };
        assert_eq!(r.status, want, "{body}: {}", r.body);
    }
    assert_eq!(
        session_count(ctx, key).await,
        before,
        "refusals created nothing"
    );

    // SSE: `id:` is the event's seq, one JSON event per `data:` line, ending at `done`.
    let res = ctx
        .request(Method::POST, "/api/v1/chat/stream", Some(key))
        .json(&json!({ "message": "stream me", "session_id": sid }))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 200);
    assert_eq!(res.headers()["content-type"], "text/event-stream");
    assert_eq!(res.headers()["x-session-id"].to_str().unwrap(), sid);
    let run = res.headers()["x-run-id"].to_str().unwrap().to_string();
    let body = res.text().await.unwrap();
    let sse = sse_events(&body);
    assert!(
        sse.iter()
            .all(|(id, ev)| ev["seq"] == *id && ev["run_id"] == run.as_str())
    );
    let evs: Vec<Value> = sse.into_iter().map(|(_, e)| e).collect();
    assert_eq!(text_of(&evs), "(scripted) You said: stream me");
    assert_eq!(types(&evs).last(), Some(&"done"));

    // A busy session refuses a second message (409) unless it is queued.
    let (running, busy) = start_sleeping_run(ctx, key, None, 1_500).await;
    for path in ["/api/v1/chat", "/api/v1/chat/stream"] {
        let r = ctx
            .call(
                Method::POST,
                path,
                Some(key),
                Some(&json!({ "message": "me too", "session_id": busy })),
            )
            .await;
        assert_eq!(
            (r.status, r.code()),
            (409, "run_in_progress"),
            "{path}: {}",
            r.body
        );
    }
    let queued = ctx
        .ok(
            Method::POST,
            "/api/v1/chat",
            key,
            Some(json!({ "message": "/echo after you", "session_id": busy, "enqueue": true })),
            200,
        )
        .await;
    assert_eq!(text_of(queued["events"].as_array().unwrap()), "after you");
    let first: Vec<Value> = sse_events(&running.text().await.unwrap())
        .into_iter()
        .map(|(_, e)| e)
        .collect();
    assert_eq!(text_of(&first), "(scripted) You said: then answer");

    // Cancel over REST: the stream ends with `done{cancelled: true}`; a second cancel finds
    // nothing to cancel.
    let (running, busy) = start_sleeping_run(ctx, key, None, 120_000).await;
    let sent = std::time::Instant::now();
    let c = ctx
        .ok(
            Method::POST,
            &format!("/api/v1/sessions/{busy}/cancel"),
            key,
            None,
            200,
        )
        .await;
    assert_eq!(c["status"], "cancelled");
    let evs: Vec<Value> = sse_events(&running.text().await.unwrap())
        .into_iter()
        .map(|(_, e)| e)
        .collect();
    let took = sent.elapsed();
    assert!(
        took < Duration::from_secs(1),
        "done came {took:?} after the cancel"
    );
    let done = evs.last().unwrap();
    assert_eq!(done["event_type"], "done", "{evs:?}");
    assert_eq!(done["data"]["cancelled"], true, "{done}");
    assert_eq!(done["run_id"], c["run_id"]);
    let again = ctx
        .call(
            Method::POST,
            &format!("/api/v1/sessions/{busy}/cancel"),
            Some(key),
            None,
        )
        .await;
    assert_eq!((again.status, again.code()), (404, "no_active_run"));
    let runs = ctx
        .ok(
            Method::GET,
            &format!("/api/v1/executions?session_id={busy}"),
            key,
            None,
            200,
        )
        .await;
    assert_eq!(runs["items"][0]["status"], "cancelled", "{runs}");

    // Deleting a session removes it and what it held.
    ctx.ok(
        Method::DELETE,
        &format!("/api/v1/sessions/{sid}"),
        key,
        None,
        204,
    )
    .await;
    for path in [
        format!("/api/v1/sessions/{sid}"),
        format!("/api/v1/sessions/{sid}/messages"),
    ] {
        let r = ctx.call(Method::GET, &path, Some(key), None).await;
        assert_eq!(r.status, 404, "{path}");
    }
}

/// The WebSocket: a chat, an approval decided over REST and one over the socket, bad frames,
/// ping, cancel, and replay with `?after_seq=` and the `resume` frame.
pub async fn websocket(ctx: &Ctx) {
    let t = ctx.tenant().await;
    let key = &t.member.key;
    let sid = new_session(ctx, key).await;
    let mut ws = ws_connect(ctx, key, &sid).await;

    // Bad frames get an `error` event (seq 0) and the socket stays usable.
    for (frame, code) in [
        ("not json", "invalid_json"),
        (r#"{"type": "shout", "payload": {}}"#, "invalid_frame"),
        (r#"{"type": "chat", "payload": {}}"#, "invalid_frame"),
        (
            r#"{"type": "hitl_decision", "payload": {"request_id": "x", "type": "approve"}}"#,
            "invalid_frame",
        ),
    ] {
        ws.send(Message::text(frame)).await.unwrap();
        let ev = next_json(&mut ws).await;
        assert_eq!(ev["event_type"], "error", "{frame}: {ev}");
        assert_eq!(ev["seq"], 0, "{ev}");
        assert_eq!(ev["data"]["error_code"], code, "{frame}: {ev}");
    }
    send(&mut ws, json!({"type": "ping", "payload": {}})).await;
    assert_eq!(next_json(&mut ws).await["type"], "pong");
    // A frame over `server.frame_limit_bytes` (256 KiB) is refused and the socket stays open.
    let big = json!({"type": "chat", "payload": {"message": "x".repeat(300 * 1024)}});
    send(&mut ws, big).await;
    let ev = next_json(&mut ws).await;
    assert_eq!(ev["data"]["error_code"], "payload_too_large", "{ev}");
    send(&mut ws, json!({"type": "ping", "payload": {}})).await;
    assert_eq!(next_json(&mut ws).await["type"], "pong");

    // A chat over the socket.
    send(
        &mut ws,
        json!({"type": "chat", "payload": {"message": "over the socket"}}),
    )
    .await;
    let evs = until_done_or_hitl(&mut ws).await;
    assert_eq!(text_of(&evs), "(scripted) You said: over the socket");
    assert_eq!(types(&evs).last(), Some(&"done"));
    let after = evs.last().unwrap()["seq"].as_u64().unwrap();

    // A tool that needs approval: decided over REST (the socket sees the rest of the run).
    let write = r#"/tool write_file {"file_path": "notes.txt", "content": "hi"}"#;
    send(
        &mut ws,
        json!({"type": "chat", "payload": {"message": write}}),
    )
    .await;
    let evs = until_done_or_hitl(&mut ws).await;
    let hitl = evs.last().unwrap().clone();
    assert_eq!(hitl["event_type"], "hitl_request", "{evs:?}");
    let request = hitl["data"]["request_id"].as_str().unwrap().to_string();
    let decide = format!("/api/v1/sessions/{sid}/approvals/{request}");
    // A wrong decision for an approval, or garbage, changes nothing…
    for body in [
        json!({"type": "answer", "answer": "yes"}),
        json!({"type": "maybe"}),
    ] {
        let r = ctx
            .call(Method::POST, &decide, Some(key), Some(&body))
            .await;
        assert!(
            matches!(r.status, 400 | 422),
            "{body}: {} {}",
            r.status,
            r.body
        );
    }
    // …another user of the tenant cannot decide it…
    let r = ctx
        .call(
            Method::POST,
            &decide,
            Some(&t.member2.key),
            Some(&json!({"type": "approve"})),
        )
        .await;
    assert_eq!(r.status, 404, "{}", r.body);
    let unknown = format!("/api/v1/sessions/{sid}/approvals/{}", uuid::Uuid::now_v7());
    let r = ctx
        .call(
            Method::POST,
            &unknown,
            Some(key),
            Some(&json!({"type": "approve"})),
        )
        .await;
    assert_eq!(r.status, 404, "{}", r.body);
    // …the owner approves, the tool runs and the run ends.
    let ok = ctx
        .ok(
            Method::POST,
            &decide,
            key,
            Some(json!({"type": "approve"})),
            200,
        )
        .await;
    assert_eq!(
        (ok["status"].as_str(), ok["type"].as_str()),
        (Some("accepted"), Some("approve"))
    );
    let evs = until_done_or_hitl(&mut ws).await;
    let kinds = types(&evs);
    assert!(kinds.contains(&"tool_result"), "{kinds:?}");
    assert!(kinds.contains(&"file_operation"), "{kinds:?}");
    assert_eq!(kinds.last(), Some(&"done"));
    assert!(
        text_of(&evs).contains("Tool write_file returned"),
        "{evs:?}"
    );
    let r = ctx
        .call(
            Method::POST,
            &decide,
            Some(key),
            Some(&json!({"type": "approve"})),
        )
        .await;
    assert_eq!((r.status, r.code()), (409, "approval_not_pending"));

    // Rejected over the socket: the tool does not run and the run ends rejected (DESIGN §4).
    send(
        &mut ws,
        json!({"type": "chat", "payload": {"message": write.replace("notes", "other")}}),
    )
    .await;
    let evs = until_done_or_hitl(&mut ws).await;
    let request = pending_request(&evs);
    send(
        &mut ws,
        json!({"type": "hitl_decision", "payload": {"request_id": request, "type": "reject", "message": "not now"}}),
    )
    .await;
    let evs = until_done_or_hitl(&mut ws).await;
    assert!(!types(&evs).contains(&"file_operation"), "{evs:?}");
    assert_eq!(types(&evs).last(), Some(&"done"));
    let done = &evs.last().unwrap()["data"];
    assert_eq!(
        (&done["status"], &done["cancelled"]),
        (&json!("rejected"), &json!(true)),
        "{done}"
    );
    let listed = ctx
        .ok(
            Method::GET,
            &format!("/api/v1/executions?session_id={sid}"),
            key,
            None,
            200,
        )
        .await;
    assert!(listed["total"].as_u64().unwrap() >= 3, "{listed}");

    // Cancel over the socket.
    send(
        &mut ws,
        json!({"type": "chat", "payload": {"message": "/sleep 120000\nlate"}}),
    )
    .await;
    // The chat and cancel frames are handled concurrently, so a cancel sent at once could
    // arrive before the run exists: wait until the run's row is there.
    let runs = listed["total"].as_u64().unwrap();
    let deadline = std::time::Instant::now() + WAIT;
    while ctx
        .ok(
            Method::GET,
            &format!("/api/v1/executions?session_id={sid}"),
            key,
            None,
            200,
        )
        .await["total"]
        == runs
    {
        assert!(
            std::time::Instant::now() < deadline,
            "the run never started"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let sent = std::time::Instant::now();
    send(&mut ws, json!({"type": "cancel", "payload": {}})).await;
    let evs = until_done_or_hitl(&mut ws).await;
    let took = sent.elapsed();
    let done = evs.last().unwrap();
    assert_eq!(done["event_type"], "done");
    assert_eq!(done["data"]["cancelled"], true, "{done}");
    assert!(
        took < Duration::from_secs(1),
        "done came {took:?} after the cancel"
    );
    let last_seq = done["seq"].as_u64().unwrap();
    drop(ws);

    // Past twice the limit the codec refuses to buffer it: the socket is closed (1009).
    let mut huge = ws_connect(ctx, key, &sid).await;
    let frame = json!({"type": "chat", "payload": {"message": "x".repeat(600 * 1024)}});
    // The server may close while the frame is still being written.
    let _ = huge.send(Message::text(frame.to_string())).await;
    loop {
        match tokio::time::timeout(WAIT, huge.next())
            .await
            .expect("closed within 60 s")
        {
            Some(Ok(Message::Close(Some(c)))) => {
                assert_eq!(u16::from(c.code), 1009, "{c:?}");
                break;
            }
            Some(Ok(Message::Close(None))) | None | Some(Err(_)) => break,
            Some(Ok(_)) => continue,
        }
    }

    // Reconnecting with `?after_seq=` replays exactly what came after it, in order.
    let req = ws_request(ctx, key, &sid, &format!("?after_seq={after}"));
    let mut ws = tokio_tungstenite::connect_async(req).await.unwrap().0;
    let mut replayed = Vec::new();
    while replayed.last().is_none_or(|s| *s < last_seq) {
        replayed.push(next_json(&mut ws).await["seq"].as_u64().unwrap());
    }
    assert_eq!(replayed, ((after + 1)..=last_seq).collect::<Vec<_>>());
    // The `resume` frame does the same on an open socket.
    send(
        &mut ws,
        json!({"type": "resume", "payload": {"after_seq": last_seq - 2}}),
    )
    .await;
    let again: Vec<u64> = [next_json(&mut ws).await, next_json(&mut ws).await]
        .iter()
        .map(|e| e["seq"].as_u64().unwrap())
        .collect();
    assert_eq!(again, [last_seq - 1, last_seq]);
}

/// Quotas refuse with 429 and `Retry-After`, before anything is created.
pub async fn quotas(ctx: &Ctx) {
    let t: TenantFx = ctx.tenant_with(json!({ "max_sessions_per_user": 1 })).await;
    let key = &t.member.key;
    new_session(ctx, key).await;
    for (path, body) in [
        ("/api/v1/sessions", json!({})),
        ("/api/v1/chat", json!({ "message": "hi" })),
        ("/api/v1/chat/stream", json!({ "message": "hi" })),
    ] {
        let r = ctx.call(Method::POST, path, Some(key), Some(&body)).await;
        assert_eq!(
            (r.status, r.code()),
            (429, "quota_exceeded"),
            "{path}: {}",
            r.body
        );
        assert!(r.headers.contains_key("retry-after"), "{path}");
    }
    assert_eq!(session_count(ctx, key).await, 1);
    // Another user of the tenant has their own allowance.
    new_session(ctx, &t.member2.key).await;
}

/// A server holding `server.max_connections` WebSockets refuses the next with 503.
pub async fn full_server(ctx: &Ctx) {
    let t = ctx.tenant().await;
    let key = &t.member.key;
    let sid = new_session(ctx, key).await;
    let mut held = ws_connect(ctx, key, &sid).await;
    let req = ws_request(ctx, key, &sid, "");
    match tokio_tungstenite::connect_async(req.clone()).await {
        Err(tokio_tungstenite::tungstenite::Error::Http(res)) => {
            assert_eq!(res.status(), 503);
            assert!(res.headers().contains_key("retry-after"));
        }
        other => panic!("a second socket should be refused: {:?}", other.map(|_| ())),
    }
    // Closing the first frees its slot.
    held.close(None).await.unwrap();
    drop(held);
    let mut tries = 0;
    loop {
        match tokio_tungstenite::connect_async(req.clone()).await {
            Ok(_) => break,
            Err(_) if tries < 50 => {
                tries += 1;
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(e) => panic!("the slot was never freed: {e}"),
        }
    }
}

/// What a run says, without what differs between sessions and runs by nature.
/// The same message as a sync `/chat` and then as `/chat/stream`, each in a new session: the
/// events of each.
pub async fn rest_then_sse(ctx: &Ctx, key: &str, message: &str) -> (Vec<Value>, Vec<Value>) {
    let rest = ctx
        .ok(
            Method::POST,
            "/api/v1/chat",
            key,
            Some(json!({ "message": message })),
            200,
        )
        .await;
    let rest = rest["events"].as_array().unwrap().clone();
    let body = ctx
        .request(Method::POST, "/api/v1/chat/stream", Some(key))
        .json(&json!({ "message": message }))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let sse = sse_events(&body).into_iter().map(|(_, e)| e).collect();
    (rest, sse)
}

pub fn script_of(events: &[Value]) -> Vec<(String, Value)> {
    events
        .iter()
        .map(|e| {
            (
                e["event_type"].as_str().unwrap().to_string(),
                e["data"].clone(),
            )
        })
        .collect()
}

/// The same script gives the same events over `/chat`, `/chat/stream` and the WebSocket; two
/// sockets watching one session both get every event; a long run in one session does not hold
/// up another; an approval can be edited.
pub async fn one_stream_many_views(ctx: &Ctx) {
    let t = ctx.tenant().await;
    let key = &t.member.key;
    let script = r#"/tool list_directory {"path": "."}"#;

    let (rest, sse) = rest_then_sse(ctx, key, script).await;
    let sid = new_session(ctx, key).await;
    let mut ws1 = ws_connect(ctx, key, &sid).await;
    let mut ws2 = ws_connect(ctx, key, &sid).await;
    send(
        &mut ws1,
        json!({"type": "chat", "payload": {"message": script}}),
    )
    .await;
    let over_ws = until_done_or_hitl(&mut ws1).await;
    let watcher = until_done_or_hitl(&mut ws2).await;
    assert!(types(&rest).contains(&"tool_result"), "{rest:?}");
    assert_eq!(script_of(&rest), script_of(&sse), "REST and SSE differ");
    assert_eq!(
        script_of(&rest),
        script_of(&over_ws),
        "REST and WebSocket differ"
    );
    assert_eq!(
        over_ws, watcher,
        "both sockets get every event, identically"
    );

    // A run that sleeps in one session does not hold up another session of the same user.
    let (sleeping, busy) = start_sleeping_run(ctx, key, None, 120_000).await;
    send(
        &mut ws2,
        json!({"type": "chat", "payload": {"message": "/echo not blocked"}}),
    )
    .await;
    let evs = until_done_or_hitl(&mut ws1).await;
    assert_eq!(text_of(&evs), "not blocked");
    assert_eq!(until_done_or_hitl(&mut ws2).await, evs);
    ctx.ok(
        Method::POST,
        &format!("/api/v1/sessions/{busy}/cancel"),
        key,
        None,
        200,
    )
    .await;
    assert!(
        sleeping
            .text()
            .await
            .unwrap()
            .contains("\"cancelled\":true")
    );

    // Edit: the tool runs with the arguments the user gave instead.
    let write = r#"/tool write_file {"file_path": "draft.txt", "content": "draft"}"#;
    send(
        &mut ws1,
        json!({"type": "chat", "payload": {"message": write}}),
    )
    .await;
    let evs = until_done_or_hitl(&mut ws1).await;
    let hitl = evs.last().unwrap();
    assert_eq!(
        hitl["data"]["action_requests"][0]["name"], "write_file",
        "{hitl}"
    );
    let request = hitl["data"]["request_id"].as_str().unwrap().to_string();
    send(
        &mut ws1,
        json!({"type": "hitl_decision", "payload": {"request_id": request, "type": "edit",
            "args": {"file_path": "final.txt", "content": "edited by a human"}}}),
    )
    .await;
    let evs = until_done_or_hitl(&mut ws1).await;
    assert_eq!(types(&evs).last(), Some(&"done"));
    let read = |file: &'static str| {
        let body = json!({ "message": format!(r#"/tool read_file {{"file_path": "{file}"}}"#), "session_id": sid });
        async move {
            let r = ctx
                .ok(Method::POST, "/api/v1/chat", key, Some(body), 200)
                .await;
            text_of(r["events"].as_array().unwrap())
        }
    };
    let edited = read("final.txt").await;
    assert!(edited.contains("edited by a human"), "{edited}");
    let missing = read("draft.txt").await;
    assert!(
        missing.contains("Tool read_file failed"),
        "the original arguments never ran: {missing}"
    );
}

/// With `hitl.timeout_secs = 1`, an undecided approval is rejected and the run goes on to
/// `done`; deciding it afterwards is 409.
pub async fn approval_times_out(ctx: &Ctx) {
    let t = ctx.tenant().await;
    let key = &t.member.key;
    let sid = new_session(ctx, key).await;
    let mut ws = ws_connect(ctx, key, &sid).await;
    let write = r#"/tool write_file {"file_path": "late.txt", "content": "x"}"#;
    send(
        &mut ws,
        json!({"type": "chat", "payload": {"message": write}}),
    )
    .await;
    let evs = until_done_or_hitl(&mut ws).await;
    let request = pending_request(&evs);
    let evs = until_done_or_hitl(&mut ws).await;
    let result = evs
        .iter()
        .find(|e| e["event_type"] == "tool_result")
        .expect("the call gets a result");
    assert_eq!(result["data"]["status"], "error", "{result}");
    assert!(result.to_string().contains("hitl_timeout"), "{result}");
    assert_eq!(types(&evs).last(), Some(&"done"));
    let r = ctx
        .call(
            Method::POST,
            &format!("/api/v1/sessions/{sid}/approvals/{request}"),
            Some(key),
            Some(&json!({"type": "approve"})),
        )
        .await;
    assert_eq!((r.status, r.code()), (409, "approval_not_pending"));
}

/// With a 1 s heartbeat and a 2 s client timeout, a client that stops answering pings is
/// dropped and its connection slot given back.
pub async fn silent_clients_are_dropped(ctx: &Ctx) {
    let t = ctx.tenant().await;
    let key = &t.member.key;
    let sid = new_session(ctx, key).await;
    let gauge = || async {
        ctx.metrics()
            .await
            .lines()
            .find(|l| l.starts_with("agentry_ws_connections "))
            .map(|l| l.rsplit(' ').next().unwrap().parse::<f64>().unwrap())
            .unwrap_or(0.0)
    };
    // Never polled, so it never answers a ping.
    let silent = ws_connect(ctx, key, &sid).await;
    assert_eq!(gauge().await, 1.0);
    let mut waited = 0;
    while gauge().await > 0.0 {
        assert!(waited < 300, "the silent client was never dropped");
        tokio::time::sleep(Duration::from_millis(100)).await;
        waited += 1;
    }
    // An answering client on the same server stays connected through several heartbeats.
    let mut live = ws_connect(ctx, key, &sid).await;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(4);
    while tokio::time::Instant::now() < deadline {
        // Reading answers the server's pings (tungstenite replies on its own).
        let _ = tokio::time::timeout(Duration::from_millis(200), live.next()).await;
    }
    send(&mut live, json!({"type": "ping", "payload": {}})).await;
    assert_eq!(next_json(&mut live).await["type"], "pong");
    drop(silent);

    // Deleting the session ends its sockets: an `error` event, then a close.
    ctx.ok(
        Method::DELETE,
        &format!("/api/v1/sessions/{sid}"),
        key,
        None,
        204,
    )
    .await;
    let ev = next_json(&mut live).await;
    assert_eq!(
        (ev["event_type"].as_str(), ev["data"]["error_code"].as_str()),
        (Some("error"), Some("not_found")),
        "{ev}"
    );
    loop {
        match tokio::time::timeout(WAIT, live.next())
            .await
            .expect("closed within 60 s")
        {
            Some(Ok(Message::Close(_))) | None | Some(Err(_)) => break,
            Some(Ok(_)) => continue,
        }
    }
}

/// `docs/examples/ws_chat.mjs`, the small WebSocket client the docs point to, run with Node 22
/// against the real server: it authenticates with the browser subprotocol, asks on stdin about
/// the approval, and ends at `done`.
pub async fn example_client(ctx: &Ctx) {
    use tokio::io::AsyncWriteExt;
    let t = ctx.tenant().await;
    let script =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/examples/ws_chat.mjs");
    let base = format!("http://127.0.0.1:{}", ctx.server.port);
    // `node ws_chat.mjs OPTIONS… BASE KEY ARGS…`
    let run = |options: &[&str], args: &[&str], stdin: &'static str| {
        let mut cmd = tokio::process::Command::new(agentry_mcp::testing::node());
        cmd.arg(&script)
            .args(options)
            .arg(&base)
            .arg(&t.member.key)
            .args(args);
        cmd.stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .kill_on_drop(true);
        let what = format!("ws_chat.mjs {options:?} {args:?}");
        async move {
            let mut child = cmd.spawn().expect("node runs");
            let mut input = child.stdin.take().unwrap();
            input.write_all(stdin.as_bytes()).await.unwrap();
            let out = tokio::time::timeout(WAIT, child.wait_with_output())
                .await
                .unwrap_or_else(|_| panic!("{what} did not end within 60 s"))
                .unwrap();
            let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
            let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
            (out.status.success(), stdout, stderr)
        }
    };
    let (ok, out, err) = run(
        &[],
        &[r#"/tool write_file {"file_path": "from-node.txt", "content": "hi"}"#],
        "y\n",
    )
    .await;
    assert!(ok, "stdout:\n{out}\nstderr:\n{err}");
    assert!(out.contains("[tool_call] write_file"), "{out}");
    assert!(out.contains("[tool_result success]"), "{out}");
    assert!(out.contains("[done] completed"), "{out}");
    assert!(err.contains("approve? [y/N]"), "{err}");
    let session = out
        .lines()
        .find_map(|l| l.strip_prefix("session "))
        .expect("it prints the session")
        .to_string();
    let (ok, out, err) = run(&[], &["/echo again", &session], "").await;
    assert!(ok, "stdout:\n{out}\nstderr:\n{err}");
    assert!(out.contains("again"), "{out}");
    let msgs = ctx
        .ok(
            Method::GET,
            &format!("/api/v1/sessions/{session}/messages"),
            &t.member.key,
            None,
            200,
        )
        .await;
    assert_eq!(msgs["total"], 6, "{msgs}");

    // `--cancel-after MS`: the client cancels its own slow run.
    let (ok, out, err) = run(
        &["--cancel-after", "300"],
        &["/sleep 120000\nlate", &session],
        "",
    )
    .await;
    assert!(ok, "stdout:\n{out}\nstderr:\n{err}");
    assert!(err.contains("[cancel sent after 300 ms]"), "{err}");
    assert!(out.contains("[done] cancelled (cancelled)"), "{out}");
    let key = &t.member.key;
    async fn last_seq(ctx: &Ctx, key: &str, session: &str) -> u64 {
        let path = format!("/api/v1/sessions/{session}/events?after_seq=0&limit=1000");
        let page = ctx.ok(Method::GET, &path, key, None, 200).await;
        page["events"].as_array().unwrap().last().unwrap()["seq"]
            .as_u64()
            .unwrap()
    }
    let before = last_seq(ctx, key, &session).await.to_string();

    // `--resume SEQ` while a run is going: it follows that run to its `done`, and only it.
    let (running, _) = start_sleeping_run(ctx, key, Some(&session), 3_000).await;
    let (ok, out, err) = run(&["--resume", &before], &[&session], "").await;
    assert!(ok, "stdout:\n{out}\nstderr:\n{err}");
    assert!(out.contains("(scripted) You said: then answer"), "{out}");
    assert!(out.contains("[done] completed"), "{out}");
    assert!(
        !out.contains("again") && !out.contains("[tool_call]"),
        "{out}"
    );
    running.text().await.unwrap();
    // `--resume 0` replays the session from its first run, up to that run's `done`.
    let (ok, out, _) = run(&["--resume", "0"], &[&session], "").await;
    assert!(ok, "{out}");
    assert!(out.contains("[tool_call] write_file"), "{out}");
    assert!(out.contains("[done] completed"), "{out}");
    assert!(!out.contains("then answer"), "{out}");
    // Nothing after the last event and nothing running: it says so and ends.
    let end = last_seq(ctx, key, &session).await.to_string();
    let (ok, out, _) = run(&["--resume", &end], &[&session], "").await;
    assert!(ok, "{out}");
    assert!(out.contains(&format!("[nothing after seq {end}")), "{out}");
}
