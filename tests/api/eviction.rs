//! The cap on live sessions (`session.max_live`): past it the least recently used idle session
//! actors stop, and an evicted session is as usable as before (its history replays over REST
//! and the WebSocket, its chat continues with the next `seq`); a session waiting for an
//! approval is never evicted.

use std::time::{Duration, Instant};

use reqwest::Method;
use serde_json::{Value, json};

use crate::ctx::Ctx;
use crate::mcp::ws_connect;
use crate::streaming::{next_json, send, until_done_or_hitl};

pub const CAP: usize = 2;

/// The live-session gauge of `/metrics`.
async fn live_sessions(ctx: &Ctx) -> f64 {
    crate::observability::sample(&ctx.metrics().await, "agentry_live_sessions", &[])
}

async fn stored_events(ctx: &Ctx, key: &str, session: &str) -> Vec<Value> {
    let path = format!("/api/v1/sessions/{session}/events?after_seq=0&limit=1000");
    ctx.ok(Method::GET, &path, key, None, 200).await["events"]
        .as_array()
        .unwrap()
        .clone()
}

fn seqs(events: &[Value]) -> Vec<u64> {
    events.iter().map(|e| e["seq"].as_u64().unwrap()).collect()
}

pub async fn evicted_sessions_stay_usable_and_a_waiting_approval_is_never_evicted(ctx: &Ctx) {
    let t = ctx.tenant().await;
    let key = &t.member.key;

    // A run waiting for an approval, with nobody watching it: its socket is gone.
    let waiting = crate::streaming::new_session(ctx, key).await;
    let mut ws = ws_connect(ctx, key, &waiting).await;
    let write = r#"/tool write_file {"file_path": "evict.txt", "content": "kept"}"#;
    send(
        &mut ws,
        json!({"type": "chat", "payload": {"message": write}}),
    )
    .await;
    let evs = until_done_or_hitl(&mut ws).await;
    let hitl = evs.last().unwrap().clone();
    assert_eq!(hitl["event_type"], "hitl_request", "{evs:?}");
    let request = hitl["data"]["request_id"].as_str().unwrap().to_string();
    drop(ws);
    // Once its events are stored, nothing but the waiting run keeps it live: from then on the
    // cap asks it to leave whenever it is the least recently used.
    let deadline = Instant::now() + Duration::from_secs(60);
    while !stored_events(ctx, key, &waiting)
        .await
        .iter()
        .any(|e| e["event_type"] == "hitl_request")
    {
        assert!(
            Instant::now() < deadline,
            "the hitl_request was never stored"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    // Many more sessions than the cap, one finished REST run each: the waiting session comes
    // round as the least recently used again and again.
    let mut runs = Vec::new();
    for i in 0..3 * (CAP + 5) {
        let r = ctx
            .ok(
                Method::POST,
                "/api/v1/chat",
                key,
                Some(json!({ "message": format!("first {i}") })),
                200,
            )
            .await;
        let sid = r["session_id"].as_str().unwrap().to_string();
        runs.push((sid, r["events"].as_array().unwrap().clone()));
    }

    // The idle ones leave until the cap holds (the waiting one stays, so at most CAP - 1
    // others). Not timed: a generous bound for a loaded machine, polled.
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let live = live_sessions(ctx).await;
        if live <= CAP as f64 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "{live} live sessions, cap {CAP}, after 60 s"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    // The waiting approval was not evicted with its session: deciding it continues the run.
    let decide = format!("/api/v1/sessions/{waiting}/approvals/{request}");
    ctx.ok(
        Method::POST,
        &decide,
        key,
        Some(json!({"type": "approve"})),
        200,
    )
    .await;
    let deadline = Instant::now() + Duration::from_secs(60);
    let done = loop {
        let events = stored_events(ctx, key, &waiting).await;
        if let Some(done) = events.iter().find(|e| e["event_type"] == "done") {
            break done.clone();
        }
        assert!(
            Instant::now() < deadline,
            "the approved run never ended: {events:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(done["data"]["status"], "completed", "{done}");

    // Every session, evicted or not, replays its history exactly as it was sent, and goes on.
    for (i, (sid, sent)) in runs.iter().enumerate() {
        let stored = stored_events(ctx, key, sid).await;
        assert_eq!(
            &stored, sent,
            "session {i}: the stored stream is what the client saw"
        );

        // Replay over the WebSocket (through the session's actor, started again if evicted).
        let mut ws = ws_connect_after(ctx, key, sid, 0).await;
        let mut replayed = Vec::new();
        while replayed.len() < sent.len() {
            replayed.push(next_json(&mut ws).await);
        }
        assert_eq!(
            &replayed, sent,
            "session {i}: the socket replays the same events"
        );

        // Chat continues on the socket, numbered on from the last event, without a gap.
        send(
            &mut ws,
            json!({"type": "chat", "payload": {"message": format!("again {i}")}}),
        )
        .await;
        let more = until_done_or_hitl(&mut ws).await;
        assert_eq!(more.last().unwrap()["event_type"], "done", "{more:?}");
        assert_eq!(more.last().unwrap()["data"]["status"], "completed");
        let last = sent.last().unwrap()["seq"].as_u64().unwrap();
        let expect: Vec<u64> = (last + 1..=last + more.len() as u64).collect();
        assert_eq!(
            seqs(&more),
            expect,
            "session {i}: numbering goes on without a gap"
        );
        drop(ws);

        // The conversation is whole: both messages and both answers, in order.
        let msgs = ctx
            .ok(
                Method::GET,
                &format!("/api/v1/sessions/{sid}/messages"),
                key,
                None,
                200,
            )
            .await;
        let contents: Vec<String> = msgs["items"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| m["content"].as_str().unwrap().to_string())
            .collect();
        assert_eq!(
            contents,
            [
                format!("first {i}"),
                format!("(scripted) You said: first {i}"),
                format!("again {i}"),
                format!("(scripted) You said: again {i}"),
            ],
            "session {i}"
        );
    }
}

async fn ws_connect_after(
    ctx: &Ctx,
    key: &str,
    session: &str,
    after: u64,
) -> crate::streaming::Socket {
    let req = crate::mcp::ws_request(ctx, key, session, &format!("?after_seq={after}"));
    tokio_tungstenite::connect_async(req).await.unwrap().0
}
