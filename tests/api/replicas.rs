//! Three replicas of the real binary on one database and one Redis (issue 13; docs/operations.md,
//! "Running N replicas"): any replica serves any session (commands forwarded to the owner, events
//! fanned out to every replica with a subscriber, SSE resume with `Last-Event-ID`), failover
//! after `kill -9` of the owner, quotas across processes, and Redis lost under load.
//!
//! One set of three replicas ([`Trio`]) serves several scenarios in turn, to keep the suite
//! lean. Their Redis goes through a relay the test controls, so one scenario can take it away.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use agentry_fake_model::{FakeConfig, FakeModelServer, FakeReply};
use futures::StreamExt;
use reqwest::Method;
use serde_json::{Value, json};

use crate::ctx::{Ctx, TenantFx};
use crate::mcp::ws_request;
use crate::outage::{Link, Relay};
use crate::streaming::{Socket, new_session, next_json, send};

/// How long a test waits for something that takes a few seconds on a quiet machine (the
/// machine running the suite may be loaded): a bound that catches a hang, not a speed.
const GENEROUS: Duration = Duration::from_secs(60);

pub struct Trio {
    pub fake: FakeModelServer,
    /// `a`, `b`, `c`: replicas with those ids.
    pub replicas: Vec<Ctx>,
    /// Between the replicas and Redis, on a runtime of its own: the test's bursts of requests
    /// must not slow the replicas' Redis traffic down.
    relay: std::sync::Arc<Relay>,
    relay_runtime: Option<tokio::runtime::Runtime>,
    pub prefix: String,
}

impl Drop for Trio {
    fn drop(&mut self) {
        if let Some(rt) = self.relay_runtime.take() {
            rt.shutdown_background();
        }
    }
}

impl Trio {
    /// Three replicas on `db_url`, their Redis (the test one) through a relay, the fake model
    /// (the scripted model's decisions unless a reply is queued).
    pub async fn start(db_url: &str) -> Trio {
        let redis = reqwest::Url::parse(&crate::cluster::redis_url()).unwrap();
        let upstream = format!(
            "{}:{}",
            redis.host_str().unwrap(),
            redis.port().unwrap_or(6379)
        );
        let relay_runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        let relay = std::sync::Arc::new(relay_runtime.spawn(Relay::start(upstream)).await.unwrap());
        let relayed = format!("redis://127.0.0.1:{}{}", relay.addr.port(), redis.path());
        let prefix = crate::ctx::unique("trio");
        let fake = FakeModelServer::start(FakeConfig {
            api_key: Some("fake-model-key".into()),
            ..FakeConfig::default()
        });
        let base = fake.base_url_openai();
        let mut replicas = Vec::new();
        for id in ["a", "b", "c"] {
            let env = [
                ("AGENTRY_LLM__PROVIDER", "openai"),
                ("AGENTRY_LLM__BASE_URL", base.as_str()),
                ("AGENTRY_LLM__API_KEY", "fake-model-key"),
                ("AGENTRY_LLM__MODEL", "fake-large"),
                ("AGENTRY_REDIS__URL", relayed.as_str()),
                ("AGENTRY_REDIS__KEY_PREFIX", prefix.as_str()),
                ("AGENTRY_CLUSTER__REPLICA_ID", id),
                // Bursts of 100 requests on a loaded machine: wait for a database connection
                // rather than answer 503 (which the tests would have to accept).
                ("AGENTRY_DATABASE__ACQUIRE_TIMEOUT_SECS", "15"),
            ];
            replicas.push(Ctx::start_with(&env, Some(db_url)).await);
        }
        Trio {
            fake,
            replicas,
            relay,
            relay_runtime: Some(relay_runtime),
            prefix,
        }
    }

    /// Let Redis through, refuse it, or black-hole it.
    pub async fn redis(&self, link: Link) {
        let relay = self.relay.clone();
        let rt = self.relay_runtime.as_ref().expect("the relay runs");
        rt.spawn(async move { relay.set(link).await })
            .await
            .unwrap();
    }

    pub fn a(&self) -> &Ctx {
        &self.replicas[0]
    }
    pub fn b(&self) -> &Ctx {
        &self.replicas[1]
    }
    pub fn c(&self) -> &Ctx {
        &self.replicas[2]
    }
}

/// A WebSocket on `ctx` for `session`, replaying after `after` when given.
pub async fn watch(ctx: &Ctx, key: &str, session: &str, after: Option<u64>) -> Socket {
    let query = after.map(|a| format!("?after_seq={a}")).unwrap_or_default();
    match tokio_tungstenite::connect_async(ws_request(ctx, key, session, &query)).await {
        Ok((ws, _)) => ws,
        Err(tokio_tungstenite::tungstenite::Error::Http(res)) => panic!(
            "the WebSocket upgrade on port {} was refused: {} {}",
            ctx.server.port,
            res.status(),
            String::from_utf8_lossy(res.body().as_deref().unwrap_or_default())
        ),
        Err(e) => panic!("the WebSocket on port {} failed: {e}", ctx.server.port),
    }
}

/// Session events from `ws` (skipping frames about the connection, `seq` 0) until one
/// satisfies `stop`, which is returned last. Frames with `seq` 0 go to `side` if given.
pub async fn events_until(
    ws: &mut Socket,
    mut side: Option<&mut Vec<Value>>,
    stop: impl Fn(&Value) -> bool,
) -> Vec<Value> {
    let mut out = Vec::new();
    let deadline = Instant::now() + GENEROUS;
    loop {
        assert!(
            Instant::now() < deadline,
            "the awaited event did not come within {GENEROUS:?}; got {out:?}"
        );
        let ev = next_json(ws).await;
        if ev["seq"].as_u64().unwrap_or(0) == 0 {
            if let Some(side) = side.as_deref_mut() {
                side.push(ev);
            }
            continue;
        }
        let done = stop(&ev);
        out.push(ev);
        if done {
            return out;
        }
    }
}

/// The next frame about the connection (`seq` 0: a refused frame's error), skipping session
/// events, which go to `seen`.
pub async fn next_refusal(ws: &mut Socket, seen: &mut Vec<Value>) -> Value {
    loop {
        let ev = next_json(ws).await;
        if ev["seq"].as_u64().unwrap_or(0) == 0 && ev["type"] != "pong" {
            return ev;
        }
        seen.push(ev);
    }
}

/// The session's stored events, all of them, in order.
pub async fn stored(ctx: &Ctx, key: &str, session: &str) -> Vec<Value> {
    let mut out = Vec::new();
    let mut after = 0;
    loop {
        let page = ctx
            .ok(
                Method::GET,
                &format!("/api/v1/sessions/{session}/events?after_seq={after}"),
                key,
                None,
                200,
            )
            .await;
        out.extend(page["events"].as_array().unwrap().iter().cloned());
        after = page["next_after_seq"].as_u64().unwrap();
        if !page["has_more"].as_bool().unwrap() {
            return out;
        }
    }
}

fn seqs(events: &[Value]) -> Vec<u64> {
    events.iter().map(|e| e["seq"].as_u64().unwrap()).collect()
}

/// Strictly increasing `seq`s (no duplicate, in order).
fn increasing(events: &[Value], what: &str) {
    let s = seqs(events);
    assert!(
        s.windows(2).all(|w| w[0] < w[1]),
        "{what}: seqs not strictly increasing: {s:?}"
    );
}

/// Each run of `events` ends with exactly one `done`.
fn one_done_per_run(events: &[Value]) -> BTreeMap<String, usize> {
    let mut dones = BTreeMap::new();
    for e in events {
        let run = e["run_id"].as_str().unwrap().to_string();
        let n = dones.entry(run).or_insert(0);
        if e["event_type"] == "done" {
            *n += 1;
        }
    }
    for (run, n) in &dones {
        assert_eq!(*n, 1, "run {run} has {n} `done` events: {events:?}");
    }
    dones
}

/// Poll `check` until it returns `Some`, for up to [`GENEROUS`].
async fn eventually<T, F, Fut>(what: &str, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = Instant::now() + GENEROUS;
    loop {
        if let Some(v) = check().await {
            return v;
        }
        assert!(Instant::now() < deadline, "{what}: not within {GENEROUS:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The status of run `run` as stored.
async fn run_status(ctx: &Ctx, key: &str, run: &str) -> String {
    ctx.ok(
        Method::GET,
        &format!("/api/v1/executions/{run}"),
        key,
        None,
        200,
    )
    .await["status"]
        .as_str()
        .unwrap()
        .to_string()
}

/// A WebSocket on replica A drives a session that replica C runs: it replays what C sent, its
/// chat is answered by C (`run_in_progress`, then queued with `enqueue`), its approval reaches
/// C's waiting run (tool, `done`), its cancel stops C's next run; the session then continues
/// over REST on replica B. A's socket sees every event of the three runs, in order, once; an
/// SSE stream opened on C with `Last-Event-ID` gets exactly the stored events after it.
pub async fn any_replica_serves_any_session(trio: &Trio, t: &TenantFx) {
    let (a, b, c) = (trio.a(), trio.b(), trio.c());
    let key = t.member.key.as_str();
    let sid = new_session(c, key).await;

    // Run 1 on C: it waits for an approval.
    let mut ws_c = watch(c, key, &sid, None).await;
    let write = r#"/tool write_file {"file_path": "trio.txt", "content": "from C"}"#;
    send(
        &mut ws_c,
        json!({"type": "chat", "payload": {"message": write}}),
    )
    .await;
    let first = events_until(&mut ws_c, None, |e| e["event_type"] == "hitl_request").await;
    let hitl = first.last().unwrap().clone();
    let run1 = hitl["run_id"].as_str().unwrap().to_string();
    let request = hitl["data"]["request_id"].as_str().unwrap().to_string();

    // A socket on A replays C's events so far, from the start.
    let mut ws_a = watch(a, key, &sid, Some(0)).await;
    let replayed = events_until(&mut ws_a, None, |e| e["seq"] == hitl["seq"]).await;
    assert_eq!(replayed, first, "A replays what C sent");

    // A chat on A while C's run waits: C answers (run_in_progress), not A.
    send(
        &mut ws_a,
        json!({"type": "chat", "payload": {"message": "hello from A"}}),
    )
    .await;
    let mut seen_a = replayed;
    let refusal = next_refusal(&mut ws_a, &mut seen_a).await;
    assert_eq!(
        refusal["data"]["error_code"], "run_in_progress",
        "{refusal}"
    );
    // Queued with enqueue, on C: it runs after run 1 (a model that sleeps 30 s).
    send(
        &mut ws_a,
        json!({"type": "chat", "payload": {"message": "/sleep 30000\nslow", "enqueue": true}}),
    )
    .await;
    // The approval, sent on A, reaches C's waiting run: the tool runs, run 1 ends.
    send(
        &mut ws_a,
        json!({"type": "hitl_decision", "payload": {"request_id": request, "type": "approve"}}),
    )
    .await;
    let mut side = Vec::new();
    let rest1 = events_until(&mut ws_a, Some(&mut side), |e| {
        e["event_type"] == "done" && e["run_id"] == run1.as_str()
    })
    .await;
    assert!(side.is_empty(), "no frame refused: {side:?}");
    assert!(
        rest1
            .iter()
            .any(|e| e["event_type"] == "tool_result" && e["data"]["status"] == "success"),
        "{rest1:?}"
    );
    assert_eq!(rest1.last().unwrap()["data"]["status"], "completed");
    seen_a.extend(rest1);
    // The file was written once, by C's run, in the member's workspace (one per server).
    let written: Vec<_> = trio
        .replicas
        .iter()
        .filter(|r| {
            r.server
                .data_dir
                .path()
                .join("workspaces")
                .join(&t.id)
                .join(&t.member.user_id)
                .join("trio.txt")
                .exists()
        })
        .collect();
    assert_eq!(written.len(), 1, "the tool ran on one replica");

    // Run 2 (the queued message) runs on C; cancelled from A.
    let run2 = eventually("the queued run starts", || async {
        let runs = c
            .ok(
                Method::GET,
                &format!("/api/v1/executions?session_id={sid}"),
                key,
                None,
                200,
            )
            .await;
        runs["items"]
            .as_array()
            .or_else(|| runs.as_array())
            .unwrap()
            .iter()
            .find(|r| r["id"] != run1.as_str() && r["status"] == "running")
            .map(|r| r["id"].as_str().unwrap().to_string())
    })
    .await;
    send(&mut ws_a, json!({"type": "cancel", "payload": {}})).await;
    let rest2 = events_until(&mut ws_a, Some(&mut side), |e| {
        e["event_type"] == "done" && e["run_id"] == run2.as_str()
    })
    .await;
    assert!(side.is_empty(), "the cancel was not refused: {side:?}");
    assert_eq!(rest2.last().unwrap()["data"]["status"], "cancelled");
    seen_a.extend(rest2);

    // The session goes on over REST on B (C let it go when its run ended).
    let chat = json!({"message": "hello from B", "session_id": sid});
    let out = eventually("B runs the session", || async {
        let r = b
            .call(Method::POST, "/api/v1/chat", Some(key), Some(&chat))
            .await;
        match r.status {
            200 => Some(r.body),
            _ => {
                assert!(
                    ["run_in_progress", "session_owned_elsewhere"].contains(&r.code()),
                    "{}",
                    r.body
                );
                None
            }
        }
    })
    .await;
    let run3_events = out["events"].as_array().unwrap().clone();
    let run3 = out["run_id"].as_str().unwrap().to_string();
    assert_eq!(run3_events.last().unwrap()["event_type"], "done");
    assert_eq!(run_status(a, key, &run3).await, "completed");
    // A's socket sees B's run as well.
    let rest3 = events_until(&mut ws_a, Some(&mut side), |e| {
        e["event_type"] == "done" && e["run_id"] == run3.as_str()
    })
    .await;
    assert_eq!(rest3, run3_events, "A sees B's run as B's client did");
    seen_a.extend(rest3);

    // What A's socket saw is the stored stream: every event, in order, once.
    let all = stored(b, key, &sid).await;
    increasing(&all, "stored");
    increasing(&seen_a, "A's socket");
    assert_eq!(seen_a, all, "A saw exactly the stored stream");
    assert_eq!(one_done_per_run(&all).len(), 3);

    // SSE on C resumed after run 1's approval request: the stored events after it, live.
    let resp = c
        .http
        .get(c.url(&format!("/api/v1/sessions/{sid}/events")))
        .bearer_auth(key)
        .header("accept", "text/event-stream")
        .header("last-event-id", hitl["seq"].to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    assert_eq!(
        resp.headers()["content-type"].to_str().unwrap(),
        "text/event-stream"
    );
    let want: Vec<Value> = all
        .iter()
        .filter(|e| e["seq"].as_u64() > hitl["seq"].as_u64())
        .cloned()
        .collect();
    let mut body = resp.bytes_stream();
    let mut text = String::new();
    let got = tokio::time::timeout(GENEROUS, async {
        loop {
            let chunk = body.next().await.expect("the stream stays open").unwrap();
            text.push_str(std::str::from_utf8(&chunk).unwrap());
            let events: Vec<Value> = crate::streaming::sse_events(&text)
                .into_iter()
                .map(|(_, e)| e)
                .collect();
            if events.len() >= want.len() {
                return events;
            }
        }
    })
    .await
    .expect("the SSE replay arrives");
    assert_eq!(got, want, "SSE resumes after Last-Event-ID");
    let ids: Vec<u64> = crate::streaming::sse_events(&text)
        .into_iter()
        .map(|(id, _)| id)
        .collect();
    assert_eq!(ids, seqs(&want), "each SSE `id:` is the event's seq");
    drop(ws_c);
}

/// The events of `ws` from now until run `run`'s `done`, each with when it arrived.
async fn timed_until_done(ws: &mut Socket, run: &str) -> Vec<(Instant, Value)> {
    let mut out = Vec::new();
    let deadline = Instant::now() + GENEROUS;
    loop {
        assert!(
            Instant::now() < deadline,
            "no done within {GENEROUS:?}; got {out:?}"
        );
        let ev = next_json(ws).await;
        if ev["seq"].as_u64().unwrap_or(0) == 0 {
            continue;
        }
        let done = ev["event_type"] == "done" && ev["run_id"] == run;
        out.push((Instant::now(), ev));
        if done {
            return out;
        }
    }
}

/// Every event a client saw is the stored one at its `seq` (a client may have seen an event
/// whose number was skipped by nobody else: none is reused).
fn saw_the_stored_stream(seen: &[Value], stored: &[Value], what: &str) {
    let by_seq: BTreeMap<u64, &Value> = stored
        .iter()
        .map(|e| (e["seq"].as_u64().unwrap(), e))
        .collect();
    for e in seen {
        let seq = e["seq"].as_u64().unwrap();
        assert_eq!(
            by_seq.get(&seq).copied(),
            Some(e),
            "{what}: event {seq} is not the stored one"
        );
    }
}

/// `kill -9` of the replica that runs a streaming run (C): within seconds another replica takes
/// the session over and resumes the run from its checkpoint. A socket watching on B sees the
/// resume notice and the rest of the run; a client reconnecting to A after the last `seq` it saw
/// gets the stored stream from there; the run has exactly one `done`, and the message is
/// stored. Returns how long after the kill B's socket saw the resumed run's first event.
pub async fn failover_of_a_streaming_run(trio: &mut Trio, t: &TenantFx) -> Duration {
    let key = t.member.key.as_str();
    let sid = new_session(trio.c(), key).await;
    let words: Vec<String> = (0..80).map(|i| format!("w{i}")).collect();
    trio.fake.push(
        FakeReply::text(&words.join(" "))
            .in_chunks(80)
            .with_chunk_delay(Duration::from_millis(100)),
    );
    let mut ws_b = watch(trio.b(), key, &sid, Some(0)).await;
    let mut ws_c = watch(trio.c(), key, &sid, None).await;
    send(
        &mut ws_c,
        json!({"type": "chat", "payload": {"message": "stream for a while"}}),
    )
    .await;
    let mut before = events_until(&mut ws_b, None, |e| e["event_type"] == "text").await;
    for _ in 0..5 {
        before.extend(events_until(&mut ws_b, None, |e| e["event_type"] == "text").await);
    }
    let run = before[0]["run_id"].as_str().unwrap().to_string();
    let last_before = before.last().unwrap()["seq"].as_u64().unwrap();

    let killed = Instant::now();
    trio.replicas[2].server.crash().await;
    drop(ws_c);
    let after = timed_until_done(&mut ws_b, &run).await;
    let took = after[0].0 - killed;
    let after: Vec<Value> = after.into_iter().map(|(_, e)| e).collect();
    let notice = after
        .iter()
        .find(|e| e["event_type"] == "error")
        .unwrap_or_else(|| panic!("no resume notice: {after:?}"));
    assert_eq!(notice["data"]["recoverable"], true, "{notice}");
    assert!(
        notice["data"]["error"]
            .as_str()
            .unwrap()
            .contains("another one is resuming the run"),
        "{notice}"
    );
    assert_eq!(after.last().unwrap()["data"]["status"], "completed");

    // Reconnecting to A after the last event seen before the kill: the stored stream from there.
    let mut ws_a = watch(trio.a(), key, &sid, Some(last_before)).await;
    let resumed = events_until(&mut ws_a, None, |e| {
        e["event_type"] == "done" && e["run_id"] == run.as_str()
    })
    .await;
    let all = stored(trio.a(), key, &sid).await;
    increasing(&all, "stored");
    one_done_per_run(&all);
    let want: Vec<Value> = all
        .iter()
        .filter(|e| e["seq"].as_u64().unwrap() > last_before)
        .cloned()
        .collect();
    assert_eq!(
        resumed, want,
        "the reconnected client gets the stream gap-free"
    );
    let mut seen_b = before;
    seen_b.extend(after);
    increasing(&seen_b, "B's socket");
    saw_the_stored_stream(&seen_b, &all, "B's socket");
    // The acknowledged message is there.
    let messages = trio
        .a()
        .ok(
            Method::GET,
            &format!("/api/v1/sessions/{sid}/messages"),
            key,
            None,
            200,
        )
        .await;
    assert!(
        messages["items"]
            .as_array()
            .unwrap()
            .iter()
            .any(|m| m["content"] == "stream for a while"),
        "{messages}"
    );
    trio.replicas[2].server.restart().await;
    took
}

/// `kill -9` of the replica whose run waits for an approval (C): the request survives. A
/// decision sent to B for it is refused with 503 while the run moves, then taken once another
/// replica resumed the run (which asks again, same request id); the tool runs once and the run
/// ends with exactly one `done`, which a socket on A sees. Returns how long after the kill the
/// request was asked again.
pub async fn failover_of_an_approval_wait(trio: &mut Trio, t: &TenantFx) -> Duration {
    let key = t.member.key.as_str();
    let sid = new_session(trio.c(), key).await;
    let mut ws_c = watch(trio.c(), key, &sid, None).await;
    let write = r#"/tool write_file {"file_path": "failover.txt", "content": "once"}"#;
    send(
        &mut ws_c,
        json!({"type": "chat", "payload": {"message": write}}),
    )
    .await;
    let asked = events_until(&mut ws_c, None, |e| e["event_type"] == "hitl_request").await;
    let hitl = asked.last().unwrap().clone();
    let run = hitl["run_id"].as_str().unwrap().to_string();
    let request = hitl["data"]["request_id"].as_str().unwrap().to_string();
    let mut ws_a = watch(trio.a(), key, &sid, Some(hitl["seq"].as_u64().unwrap())).await;

    let killed = Instant::now();
    trio.replicas[2].server.crash().await;
    drop(ws_c);
    // Asked again on whichever replica took it over, under the same id.
    let again = events_until(&mut ws_a, None, |e| e["event_type"] == "hitl_request").await;
    let took = killed.elapsed();
    let reasked = again.last().unwrap();
    assert_eq!(reasked["data"]["request_id"], request.as_str(), "{reasked}");
    assert_eq!(reasked["run_id"], run.as_str());
    // Decided on B (the owner may be A or B: forwarded if need be).
    let b = trio.b();
    let path = format!("/api/v1/sessions/{sid}/approvals/{request}");
    eventually("the decision is taken", || async {
        let r = b
            .call(
                Method::POST,
                &path,
                Some(key),
                Some(&json!({"type": "approve"})),
            )
            .await;
        match r.status {
            200 => Some(()),
            503 => {
                assert!(r.headers.contains_key("retry-after"), "{}", r.body);
                None
            }
            _ => panic!("the decision on B: {} {}", r.status, r.body),
        }
    })
    .await;
    let rest = events_until(&mut ws_a, None, |e| {
        e["event_type"] == "done" && e["run_id"] == run.as_str()
    })
    .await;
    assert_eq!(
        rest.last().unwrap()["data"]["status"],
        "completed",
        "{rest:?}"
    );
    let all = stored(trio.a(), key, &sid).await;
    increasing(&all, "stored");
    one_done_per_run(&all);
    let written = trio
        .replicas
        .iter()
        .filter(|r| {
            r.server
                .data_dir
                .path()
                .join("workspaces")
                .join(&t.id)
                .join(&t.member.user_id)
                .join("failover.txt")
                .exists()
        })
        .count();
    assert_eq!(written, 1, "the approved tool ran once");
    trio.replicas[2].server.restart().await;
    took
}

fn count(rs: &[crate::ctx::Resp], status: u16) -> usize {
    rs.iter().filter(|r| r.status == status).count()
}

/// Quotas across the three server processes (issue 13, item 5): 100 requests at once, spread
/// over the replicas, against a tenant's `requests_per_minute`, `max_sessions_per_user` and
/// `max_concurrent_runs`: exactly the limit is admitted (no over-admit), every other one is
/// refused 429 naming the quota. Ten parallel runs against `tokens_per_day` overshoot it by at
/// most one model call's reservation.
pub async fn quotas_hold_across_replicas(trio: &Trio) {
    let a = trio.a();
    // requests_per_minute: the limit, and 429 for the rest.
    let t = a.tenant_with(json!({"requests_per_minute": 10})).await;
    let rs = futures::future::join_all((0..100).map(|i| {
        let (r, key) = (&trio.replicas[i % 3], &t.member.key);
        async move {
            r.call(Method::GET, "/api/v1/sessions", Some(key), None)
                .await
        }
    }))
    .await;
    assert_eq!(
        count(&rs, 200),
        10,
        "requests_per_minute 10 over three replicas"
    );
    assert!(
        rs.iter()
            .filter(|r| r.status != 200)
            .all(|r| r.status == 429 && r.details()["quota"] == "requests_per_minute"),
        "the others are refused by the quota"
    );

    // max_sessions_per_user: the limit.
    let t = a.tenant_with(json!({"max_sessions_per_user": 7})).await;
    let rs = futures::future::join_all((0..100).map(|i| {
        let (r, key) = (&trio.replicas[i % 3], &t.member.key);
        async move {
            r.call(
                Method::POST,
                "/api/v1/sessions",
                Some(key),
                Some(&json!({})),
            )
            .await
        }
    }))
    .await;
    assert_eq!(
        count(&rs, 201),
        7,
        "max_sessions_per_user 7 over three replicas"
    );
    assert!(
        rs.iter()
            .filter(|r| r.status != 201)
            .all(|r| r.status == 429 && r.details()["quota"] == "max_sessions_per_user")
    );
    let listed = a
        .ok(Method::GET, "/api/v1/sessions", &t.member.key, None, 200)
        .await;
    assert_eq!(listed["total"], 7, "nothing else was created");

    // max_concurrent_runs: 100 runs that wait for an approval, each in its own session.
    let t = a
        .tenant_with(json!({"max_concurrent_runs": 3, "requests_per_minute": 10000}))
        .await;
    let key = t.member.key.clone();
    let sessions: Vec<String> =
        futures::future::join_all((0..100).map(|i| new_session(&trio.replicas[i % 3], &key))).await;
    let write = r#"/tool write_file {"file_path": "slot.txt", "content": "x"}"#;
    let starts = futures::future::join_all((0..100).map(|i| {
        let (r, key, sid) = (&trio.replicas[i % 3], key.clone(), sessions[i].clone());
        async move {
            r.http
                .post(r.url("/api/v1/chat/stream"))
                .bearer_auth(&key)
                .json(&json!({"message": write, "session_id": sid}))
                .send()
                .await
                .unwrap()
        }
    }))
    .await;
    let (mut admitted, mut overloaded) = (Vec::new(), 0);
    for (i, res) in starts.into_iter().enumerate() {
        match res.status().as_u16() {
            200 => admitted.push((i, res)),
            429 => {
                let body: Value = res.json().await.unwrap();
                assert_eq!(body["details"]["quota"], "max_concurrent_runs", "{body}");
            }
            // A machine too loaded to hand out a database connection in time: refused, honestly.
            503 => {
                let body: Value = res.json().await.unwrap();
                assert_eq!(body["error_code"], "database_unavailable", "{body}");
                overloaded += 1;
            }
            other => panic!(
                "a run start answered {other}: {}",
                res.text().await.unwrap()
            ),
        }
    }
    assert!(
        admitted.len() <= 3,
        "max_concurrent_runs 3 over three replicas: {} admitted",
        admitted.len()
    );
    if overloaded == 0 {
        assert_eq!(
            admitted.len(),
            3,
            "max_concurrent_runs 3: the limit is admitted"
        );
    }
    // Their slots come back when they end (cancelled here, from any replica).
    for (i, _) in &admitted {
        let r = &trio.replicas[(i + 1) % 3];
        r.ok(
            Method::POST,
            &format!("/api/v1/sessions/{}/cancel", sessions[*i]),
            &key,
            None,
            200,
        )
        .await;
    }
    drop(admitted);

    // tokens_per_day: ten parallel runs spread over the replicas overshoot by at most one
    // model call's reservation (its prompt's estimate plus the answer's allowance).
    const RESERVE_OUTPUT: u64 = 1024;
    let budget = 12_000;
    let t = a.tenant_with(json!({"tokens_per_day": budget})).await;
    let message = "/sleep 300\n/tool write_todos {\"todos\": [{\"content\": \"count tokens\", \"status\": \"pending\"}]}";
    let runs = futures::future::join_all((0..10).map(|i| {
        let r = &trio.replicas[i % 3];
        let key = if i % 2 == 0 {
            &t.member.key
        } else {
            &t.member2.key
        };
        async move {
            r.call(
                Method::POST,
                "/api/v1/chat",
                Some(key),
                Some(&json!({"message": message})),
            )
            .await
        }
    }))
    .await;
    let (mut used, mut max_input, mut refused) = (0, 0, 0);
    for r in &runs {
        if r.status == 429 {
            assert_eq!(r.details()["quota"], "tokens_per_day", "{}", r.body);
            refused += 1;
            continue;
        }
        assert_eq!(r.status, 200, "{}", r.body);
        let done = r.body["events"].as_array().unwrap().last().unwrap().clone();
        let usage = &done["data"]["token_usage"];
        used += usage["total"].as_u64().unwrap();
        max_input = max_input.max(usage["input"].as_u64().unwrap());
        if done["data"]["status"] != "completed" {
            assert_eq!(done["data"]["reason"], "quota_exceeded", "{done}");
            refused += 1;
        }
    }
    eprintln!("tokens_per_day {budget} over three replicas: {used} used, {refused} refused");
    assert!(refused >= 1, "ten runs do not fit in {budget} tokens");
    let one_reservation = max_input + RESERVE_OUTPUT;
    assert!(
        used <= budget + one_reservation,
        "{used} tokens used of {budget}: more than one reservation ({one_reservation}) over"
    );
}

/// Delete every Redis key of the trio: a Redis restarted without its data.
async fn forget_redis(prefix: &str) {
    let client = redis::Client::open(crate::cluster::redis_url()).unwrap();
    let mut conn = client.get_multiplexed_async_connection().await.unwrap();
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg(format!("{prefix}:*"))
        .query_async(&mut conn)
        .await
        .unwrap();
    if !keys.is_empty() {
        let _: i64 = redis::cmd("DEL")
            .arg(keys)
            .query_async(&mut conn)
            .await
            .unwrap();
    }
}

/// The session's lease in Redis (`<replica>|<token>`), if any.
async fn lease_of(trio: &Trio, session: &str) -> Option<String> {
    let client = redis::Client::open(crate::cluster::redis_url()).unwrap();
    let mut conn = client.get_multiplexed_async_connection().await.unwrap();
    redis::cmd("GET")
        .arg(format!("{}:session:{session}:owner", trio.prefix))
        .query_async(&mut conn)
        .await
        .unwrap()
}

/// Runs back to back on one replica keep the session's lease. A run's end gives the lease back
/// in the background, and a claim by the same replica gets the same `<replica>|<token>` value
/// back: a give-back that landed after the next run's claim deleted that run's lease, so the
/// run went on without one and another replica's watcher could count the session as free
/// (found by `agentry-bench cluster-cancel`). The next claim now waits for the give-back.
pub async fn back_to_back_runs_keep_the_lease(trio: &Trio, t: &TenantFx) {
    let a = trio.a();
    let key = &t.member.key;
    let session = new_session(a, key).await;
    let mut ws = watch(a, key, &session, None).await;
    for round in 0..5 {
        send(
            &mut ws,
            json!({"type": "chat", "payload": {"message": format!("/echo quick {round}")}}),
        )
        .await;
        events_until(&mut ws, None, |e| e["event_type"] == "done").await;
        // At once, as a client that chats again on `done`: this run waits for an approval.
        let write = r#"/tool write_file {"file_path": "lease.txt", "content": "kept"}"#;
        send(
            &mut ws,
            json!({"type": "chat", "payload": {"message": write}}),
        )
        .await;
        let asked = events_until(&mut ws, None, |e| e["event_type"] == "hitl_request").await;
        let run = asked.last().unwrap()["run_id"]
            .as_str()
            .unwrap()
            .to_string();
        // Past the moment a late give-back would have landed, the run still waiting.
        tokio::time::sleep(Duration::from_millis(300)).await;
        let lease = lease_of(trio, &session).await;
        assert!(
            lease.as_deref().is_some_and(|l| l.starts_with("a|")),
            "round {round}: run {run} on replica a holds no lease (owner key: {lease:?})"
        );
        send(&mut ws, json!({"type": "cancel", "payload": {}})).await;
        let rest = events_until(&mut ws, None, |e| e["event_type"] == "done").await;
        let done = rest.last().unwrap();
        assert_eq!(done["run_id"], run.as_str());
        assert_eq!(done["data"]["status"], "cancelled", "{done}");
    }
}

/// Redis restarted (without its data) under load (issue 13, item 6): clients keep chatting on
/// all three replicas while a long run streams. While Redis is away every replica's readiness
/// is red and new runs get 503 `coordination_unavailable` with `Retry-After`; the run in
/// flight finishes; when Redis is back everything works again without a restart, and every
/// acknowledged chat is stored with its run's one `done`.
pub async fn redis_restarted_under_load(trio: &Trio, t: &TenantFx) {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};
    let key = t.member.key.clone();
    // The long run, on A.
    let long = new_session(trio.a(), &key).await;
    let words: Vec<String> = (0..40).map(|i| format!("w{i}")).collect();
    trio.fake.push(
        FakeReply::text(&words.join(" "))
            .in_chunks(40)
            .with_chunk_delay(Duration::from_millis(100)),
    );
    let mut ws = watch(trio.a(), &key, &long, None).await;
    send(
        &mut ws,
        json!({"type": "chat", "payload": {"message": "long"}}),
    )
    .await;
    events_until(&mut ws, None, |e| e["event_type"] == "text").await;

    // Load: one client per replica, chatting in its own session.
    let stop = Arc::new(AtomicBool::new(false));
    let mut clients = Vec::new();
    for r in &trio.replicas {
        let sid = new_session(r, &key).await;
        let (stop, key, http, url) = (
            stop.clone(),
            key.clone(),
            r.http.clone(),
            r.url("/api/v1/chat"),
        );
        clients.push(tokio::spawn(async move {
            let mut answers: Vec<(u16, Value, bool)> = Vec::new();
            let mut i = 0;
            while !stop.load(Ordering::SeqCst) {
                i += 1;
                let res = http
                    .post(&url)
                    .bearer_auth(&key)
                    .json(&json!({"message": format!("load {i}"), "session_id": sid}))
                    .send()
                    .await
                    .unwrap();
                let status = res.status().as_u16();
                let retry = res.headers().contains_key("retry-after");
                let body: Value = res.json().await.unwrap();
                answers.push((status, body, retry));
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            (sid, answers)
        }));
    }
    tokio::time::sleep(Duration::from_millis(500)).await;

    trio.redis(Link::Refused).await;
    forget_redis(&trio.prefix).await;
    for r in &trio.replicas {
        eventually("readiness turns red", || async {
            let res = r
                .call(Method::GET, "/api/v1/health/ready", None, None)
                .await;
            (res.status == 503 && res.code() == "coordination_unavailable").then_some(())
        })
        .await;
    }
    // The long run finishes on A while Redis is away.
    let rest = events_until(&mut ws, None, |e| e["event_type"] == "done").await;
    assert_eq!(rest.last().unwrap()["data"]["status"], "completed");
    tokio::time::sleep(Duration::from_secs(1)).await;
    trio.redis(Link::Up).await;
    for r in &trio.replicas {
        eventually("readiness turns green", || async {
            let res = r
                .call(Method::GET, "/api/v1/health/ready", None, None)
                .await;
            (res.status == 200).then_some(())
        })
        .await;
    }
    // Runs start again on every replica.
    let back = Instant::now();
    tokio::time::sleep(Duration::from_secs(2)).await;
    stop.store(true, Ordering::SeqCst);
    let mut acknowledged = Vec::new();
    for c in clients {
        let (sid, answers) = c.await.unwrap();
        let refused = answers
            .iter()
            .filter(|(s, _, _)| *s == 503)
            .inspect(|(_, body, retry)| {
                assert_eq!(body["error_code"], "coordination_unavailable", "{body}");
                assert!(retry, "a 503 carries Retry-After: {body}");
            })
            .count();
        assert!(refused > 0, "a client saw 503 while Redis was away");
        assert!(
            answers.last().is_some_and(|(s, _, _)| *s == 200),
            "chats work again {:?} after Redis came back: {:?}",
            back.elapsed(),
            answers.last()
        );
        for (status, body, _) in &answers {
            match status {
                200 => {
                    acknowledged.push((sid.clone(), body["run_id"].as_str().unwrap().to_string()))
                }
                503 => {}
                other => panic!("a chat answered {other}: {body}"),
            }
        }
    }
    // Nothing acknowledged is lost: each acknowledged run is stored, completed, with one done.
    let mut streams: BTreeMap<String, Vec<Value>> = BTreeMap::new();
    let sessions: std::collections::BTreeSet<String> = acknowledged
        .iter()
        .map(|(s, _)| s.clone())
        .chain([long.clone()])
        .collect();
    for sid in sessions {
        let all = stored(trio.b(), &key, &sid).await;
        increasing(&all, "stored");
        one_done_per_run(&all);
        streams.insert(sid, all);
    }
    for (sid, run) in &acknowledged {
        assert!(
            streams[sid]
                .iter()
                .any(|e| e["run_id"] == run.as_str() && e["event_type"] == "done"),
            "acknowledged run {run} has its done stored"
        );
        assert_eq!(run_status(trio.c(), &key, run).await, "completed");
    }
}

/// A load balancer without stickiness: every TCP connection goes to the next replica, round
/// robin. Counts the connections each replica got.
pub struct RoundRobin {
    pub addr: std::net::SocketAddr,
    pub per_replica: std::sync::Arc<std::sync::Mutex<Vec<usize>>>,
    task: tokio::task::JoinHandle<()>,
}

impl RoundRobin {
    pub async fn start(upstreams: Vec<u16>) -> RoundRobin {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let per_replica = std::sync::Arc::new(std::sync::Mutex::new(vec![0; upstreams.len()]));
        let counts = per_replica.clone();
        let task = tokio::spawn(async move {
            let mut next = 0;
            loop {
                let Ok((mut inbound, _)) = listener.accept().await else {
                    return;
                };
                let i = next % upstreams.len();
                next += 1;
                counts.lock().unwrap()[i] += 1;
                let port = upstreams[i];
                tokio::spawn(async move {
                    if let Ok(mut outbound) =
                        tokio::net::TcpStream::connect(("127.0.0.1", port)).await
                    {
                        let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
                    }
                });
            }
        });
        RoundRobin {
            addr,
            per_replica,
            task,
        }
    }
}

impl Drop for RoundRobin {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// `/mcp` behind a load balancer without stickiness (issue 13, item 3): rmcp's own client,
/// opening a new connection for every request, goes through a round-robin balancer over the
/// three replicas. Its MCP session lives on the replica that answered `initialize`; every other
/// request (the tool list, a call that asks the user by elicitation, the user's answer, an
/// `ask_default` chat, the session's end) lands on any replica and is proxied there. Another
/// user's key gets 404 for the session on every replica, and so does everyone once it ended.
pub async fn mcp_without_stickiness(trio: &Trio, t: &TenantFx) {
    use crate::mcp_server::User;
    use rmcp::model::CallToolRequestParams;
    use rmcp::service::ServiceExt;
    use rmcp::transport::StreamableHttpClientTransport;
    use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
    let lb = RoundRobin::start(trio.replicas.iter().map(|r| r.server.port).collect()).await;
    let url = format!("http://127.0.0.1:{}/mcp", lb.addr.port());
    let config = StreamableHttpClientTransportConfig::with_uri(url.clone())
        .auth_header(t.member.key.clone());
    // No connection reuse: each request is balanced on its own.
    let http = reqwest::Client::builder()
        .pool_max_idle_per_host(0)
        .build()
        .unwrap();
    let user = User::answering(vec![json!(true)]);
    let client = user
        .clone()
        .serve(StreamableHttpClientTransport::with_client(http, config))
        .await
        .expect("the MCP client connects through the balancer");
    let call = |name: &str, args: Value| {
        let params = CallToolRequestParams::new(name.to_string())
            .with_arguments(args.as_object().cloned().unwrap_or_default());
        let client = &client;
        async move {
            tokio::time::timeout(GENEROUS, client.call_tool(params))
                .await
                .expect("the call answers")
                .expect("the call succeeds")
        }
    };
    let tools = client.list_all_tools().await.unwrap();
    assert!(tools.iter().any(|t| t.name == "ask_default"));
    // An approval asked by elicitation, answered on whichever replica the answer lands.
    let r = call(
        "write_file",
        json!({"file_path": "mcp-lb.txt", "content": "through any replica"}),
    )
    .await;
    assert_eq!(r.is_error, Some(false), "{r:?}");
    assert_eq!(
        user.asked.lock().unwrap().len(),
        1,
        "the user was asked once"
    );
    // A chat with the default assistant, through the engine.
    let r = call("ask_default", json!({"message": "hello over /mcp"})).await;
    assert_eq!(r.is_error, Some(false), "{r:?}");
    let counts = lb.per_replica.lock().unwrap().clone();
    assert!(
        counts.iter().all(|n| *n > 0),
        "every replica got requests of the one MCP session: {counts:?}"
    );
    eprintln!("/mcp connections per replica: {counts:?}");

    // A session as raw HTTP: another user's key gets 404 for it on every replica.
    let initialized = trio
        .a()
        .send(
            trio.a()
                .request(Method::POST, "/mcp", Some(&t.member.key))
                .header("accept", "application/json, text/event-stream")
                .json(&json!({
                    "jsonrpc": "2.0", "id": 1, "method": "initialize",
                    "params": {"protocolVersion": "2025-11-25", "capabilities": {},
                               "clientInfo": {"name": "raw", "version": "0"}}
                })),
        )
        .await;
    assert_eq!(initialized.status, 200, "{}", initialized.body);
    let sid = initialized.headers["mcp-session-id"]
        .to_str()
        .unwrap()
        .to_string();
    let list = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"});
    for (r, key, want) in [
        (trio.b(), &t.member2.key, 404),
        (trio.c(), &t.member2.key, 404),
        (trio.a(), &t.member2.key, 404),
        (trio.c(), &t.member.key, 200),
    ] {
        let res = r
            .send(
                r.request(Method::POST, "/mcp", Some(key))
                    .header("accept", "application/json, text/event-stream")
                    .header("mcp-session-id", &sid)
                    .header("mcp-protocol-version", "2025-11-25")
                    .json(&list),
            )
            .await;
        assert_eq!(res.status, want, "{}", res.body);
    }
    // Ended on B (proxied to A): gone everywhere.
    let res = trio
        .b()
        .send(
            trio.b()
                .request(Method::DELETE, "/mcp", Some(&t.member.key))
                .header("mcp-session-id", &sid)
                .header("mcp-protocol-version", "2025-11-25"),
        )
        .await;
    assert!(res.status == 204 || res.status == 202, "{}", res.body);
    for r in &trio.replicas {
        let res = r
            .send(
                r.request(Method::POST, "/mcp", Some(&t.member.key))
                    .header("accept", "application/json, text/event-stream")
                    .header("mcp-session-id", &sid)
                    .header("mcp-protocol-version", "2025-11-25")
                    .json(&list),
            )
            .await;
        assert_eq!(res.status, 404, "{}", res.body);
    }
    client.cancel().await.unwrap();
    virtual_server_on_any_replica(trio, t).await;
}

/// The tools a `tools/list` answer names (JSON or one SSE event).
fn listed_tools(r: &crate::ctx::Resp) -> Vec<String> {
    let msg: Value = match &r.body {
        Value::String(sse) => sse
            .lines()
            .filter_map(|l| l.strip_prefix("data:"))
            .find_map(|d| serde_json::from_str(d.trim()).ok())
            .unwrap_or_else(|| panic!("no JSON-RPC message in {sse}")),
        v => v.clone(),
    };
    let mut names: Vec<String> = msg["result"]["tools"]
        .as_array()
        .unwrap_or_else(|| panic!("no tools in {msg}"))
        .iter()
        .map(|t| t["name"].as_str().unwrap().to_string())
        .collect();
    names.sort();
    names
}

/// A virtual server (`/mcp/{name}`) of a session that lives on A, used through the other
/// replicas: its subset is served wherever the request lands; the same session at `/mcp` is
/// unknown (404) on every replica; a change made on B is seen by the session on A.
async fn virtual_server_on_any_replica(trio: &Trio, t: &TenantFx) {
    let base = "/api/v1/tenant/mcp-virtual-servers";
    trio.b()
        .ok(
            Method::POST,
            base,
            &t.admin.key,
            Some(json!({"name": "desk", "tools": ["files:read_file", "assistants:*"]})),
            201,
        )
        .await;
    // A learns of the new server from B's announcement (or its cache's expiry).
    let started = Instant::now();
    let initialized = loop {
        let r = trio
            .a()
            .send(crate::mcp_server::initialize_at(
                trio.a(),
                "/mcp/desk",
                Some(&t.member.key),
            ))
            .await;
        if r.status == 200 || started.elapsed() > GENEROUS {
            break r;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(initialized.status, 200, "{}", initialized.body);
    let sid = initialized.headers["mcp-session-id"]
        .to_str()
        .unwrap()
        .to_string();
    let list = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"});
    let on = |r: &Ctx, path: &str| {
        r.request(Method::POST, path, Some(&t.member.key))
            .header("accept", "application/json, text/event-stream")
            .header("mcp-session-id", &sid)
            .header("mcp-protocol-version", "2025-11-25")
            .json(&list)
    };
    for r in [trio.b(), trio.c()] {
        let res = r.send(on(r, "/mcp/desk")).await;
        assert_eq!(res.status, 200, "{}", res.body);
        assert_eq!(listed_tools(&res), ["ask_default", "read_file"]);
    }
    for r in &trio.replicas {
        let res = r.send(on(r, "/mcp")).await;
        assert_eq!(res.status, 404, "the session is desk's: {}", res.body);
    }
    trio.c()
        .ok(
            Method::PUT,
            &format!("{base}/desk"),
            &t.admin.key,
            Some(json!({"tools": ["files:read_file"]})),
            200,
        )
        .await;
    let started = Instant::now();
    loop {
        let res = trio.b().send(on(trio.b(), "/mcp/desk")).await;
        assert_eq!(res.status, 200, "{}", res.body);
        if listed_tools(&res) == ["read_file"] {
            break;
        }
        assert!(
            started.elapsed() < GENEROUS,
            "the change on C never reached the session on A: {:?}",
            listed_tools(&res)
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Issue 26: a Responses API conversation needs no replica of its own. A response made on C
/// that waits for an approval is read back on A, approved on B (the decision goes to C, which
/// runs the session; B follows the run's events), and continued by `previous_response_id` on A:
/// the response id is all the state, and every replica reads it from the shared event log.
pub async fn responses_across_replicas(trio: &Trio, t: &TenantFx) {
    let (a, b, c) = (trio.a(), trio.b(), trio.c());
    let key = t.member.key.as_str();
    let write = r#"/tool write_file {"file_path": "responses.txt", "content": "from C"}"#;
    let asked = c
        .ok(
            Method::POST,
            "/v1/responses",
            key,
            Some(json!({"model": "default", "input": write})),
            200,
        )
        .await;
    let id = asked["id"].as_str().unwrap();
    let request = asked["output"][0].clone();
    assert_eq!(request["type"], "mcp_approval_request", "{asked}");

    let read = a
        .ok(Method::GET, &format!("/v1/responses/{id}"), key, None, 200)
        .await;
    assert_eq!(read["output"], asked["output"], "{read}");
    assert_eq!(read["status"], "completed");

    let approved = b
        .ok(
            Method::POST,
            "/v1/responses",
            key,
            Some(
                json!({"model": "default", "previous_response_id": id, "input": [
                {"type": "mcp_approval_response", "approval_request_id": request["id"],
                 "approve": true}]}),
            ),
            200,
        )
        .await;
    assert_eq!(approved["status"], "completed", "{approved}");
    assert_eq!(approved["agentry_run_id"], asked["agentry_run_id"]);
    assert_eq!(approved["output"][0]["type"], "mcp_call", "{approved}");
    assert_eq!(approved["output"][0]["status"], "completed", "{approved}");
    let answer = approved["output"][1]["content"][0]["text"]
        .as_str()
        .unwrap();
    assert!(
        answer.starts_with("(scripted) Tool write_file returned:"),
        "{approved}"
    );

    let next = a
        .ok(
            Method::POST,
            "/v1/responses",
            key,
            Some(json!({"model": "default", "input": "/echo on A",
                        "previous_response_id": approved["id"]})),
            200,
        )
        .await;
    assert_eq!(next["output"][0]["content"][0]["text"], "on A", "{next}");
    assert_eq!(next["agentry_session_id"], asked["agentry_session_id"]);
    let again = c
        .ok(
            Method::GET,
            &format!("/v1/responses/{}", approved["id"].as_str().unwrap()),
            key,
            None,
            200,
        )
        .await;
    assert_eq!(again["output"], approved["output"], "{again}");

    // Background: made on C, its events resumed on A while C runs it (A follows the run
    // through the session's shared stream), ending with the final event.
    let bg = c
        .ok(
            Method::POST,
            "/v1/responses",
            key,
            Some(
                json!({"model": "default", "input": "/sleep 800\n/echo in the background",
                        "background": true}),
            ),
            200,
        )
        .await;
    assert_eq!(bg["status"], "in_progress", "{bg}");
    let bg_id = bg["id"].as_str().unwrap();
    let res = a
        .request(
            Method::GET,
            &format!("/v1/responses/{bg_id}?stream=true&starting_after=1"),
            Some(key),
        )
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 200);
    let frames = crate::openai_responses::frames(&res.text().await.unwrap());
    let seqs: Vec<u64> = frames
        .iter()
        .map(|(_, d)| d["sequence_number"].as_u64().unwrap())
        .collect();
    assert_eq!(
        seqs,
        (2..2 + seqs.len() as u64).collect::<Vec<_>>(),
        "{frames:?}"
    );
    let (last, data) = frames.last().unwrap();
    assert_eq!(last, "response.completed", "{frames:?}");
    assert_eq!(
        data["response"]["output"][0]["content"][0]["text"], "in the background",
        "{data}"
    );
    assert_eq!(data["response"]["background"], true, "{data}");

    // Made on C, cancelled on B, read back cancelled on A.
    let slow = c
        .ok(
            Method::POST,
            "/v1/responses",
            key,
            Some(json!({"model": "default", "input": "/sleep 30000\nnever",
                        "background": true})),
            200,
        )
        .await;
    let slow_id = slow["id"].as_str().unwrap();
    let cancelled = b
        .ok(
            Method::POST,
            &format!("/v1/responses/{slow_id}/cancel"),
            key,
            None,
            200,
        )
        .await;
    assert_eq!(cancelled["status"], "cancelled", "{cancelled}");
    let read = a
        .ok(
            Method::GET,
            &format!("/v1/responses/{slow_id}"),
            key,
            None,
            200,
        )
        .await;
    assert_eq!(read["status"], "cancelled", "{read}");
}
