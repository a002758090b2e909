//! One durable truth per run, through the real binary killed with `kill -9` (issue 12, item 1;
//! the at-most-once rule of issue 10): a `seq` a client saw keeps its meaning after a restart,
//! every run ends with exactly one `done`, a run whose end could not be written is never run
//! again, and a tool call a crash interrupted is not run twice.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use agentry_fake_model::{DefaultReply, FakeConfig, FakeModelServer, FakeReply};
use agentry_schema::ids::{RunId, SessionId};
use agentry_store::executions::{self, ExecutionFilter, ExecutionStatus};
use agentry_store::{PageRequest, TenantScope, events, tool_calls};
use futures::StreamExt;
use reqwest::Method;
use serde_json::{Value, json};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;
use tokio_tungstenite::tungstenite::Message;

use crate::ctx::Ctx;
use crate::fake_model::chat;
use crate::mcp::{ws_connect, ws_request};
use crate::outage::{upstream_of, via};
use crate::streaming::{Socket, WAIT, new_session, next_json};

/// A fake model (OpenAI wire) and a gateway using it; `db_url` is the test's own connection,
/// `env` may point the server elsewhere (through a relay).
pub async fn start(
    default_reply: DefaultReply,
    db_url: Option<&str>,
    extra: &[(&str, &str)],
) -> (FakeModelServer, Ctx) {
    let fake = FakeModelServer::start(FakeConfig {
        api_key: Some("fake-model-key".into()),
        default_reply,
        ..FakeConfig::default()
    });
    let base = fake.base_url_openai();
    let mut env = vec![
        ("AGENTRY_LLM__PROVIDER", "openai"),
        ("AGENTRY_LLM__BASE_URL", base.as_str()),
        ("AGENTRY_LLM__API_KEY", "fake-model-key"),
        ("AGENTRY_LLM__MODEL", "fake-large"),
    ];
    env.extend_from_slice(extra);
    let ctx = Ctx::start_with(&env, db_url).await;
    (fake, ctx)
}

fn long_stream(words: usize, delay_ms: u64) -> FakeReply {
    let text: Vec<String> = (0..words).map(|i| format!("w{i}")).collect();
    FakeReply::text(&text.join(" "))
        .in_chunks(words)
        .with_chunk_delay(Duration::from_millis(delay_ms))
}

async fn reconnect(ctx: &Ctx, key: &str, session: &str, after: u64) -> Socket {
    let req = ws_request(ctx, key, session, &format!("?after_seq={after}"));
    tokio_tungstenite::connect_async(req).await.unwrap().0
}

async fn until_done(ws: &mut Socket) -> Vec<Value> {
    let mut out = Vec::new();
    loop {
        let ev = next_json(ws).await;
        let done = ev["event_type"] == "done";
        out.push(ev);
        if done {
            return out;
        }
    }
}

/// The session's stored stream, by `seq`.
async fn stored(ctx: &Ctx, scope: &TenantScope, session: &str) -> BTreeMap<u64, Value> {
    let sid: SessionId = session.parse().unwrap();
    events::list_after(&ctx.db, scope, sid, 0, 100_000)
        .await
        .unwrap()
        .into_iter()
        .map(|e| (e.seq, serde_json::to_value(&e).unwrap()))
        .collect()
}

/// Every event a client saw is, at its `seq`, the same event in the store: an event leaves
/// the server only once it is stored, so a crash leaves no gap and never reuses a `seq`.
fn same_meaning(seen: &[Value], stored: &BTreeMap<u64, Value>, what: &str) {
    let mut last = 0;
    for e in seen {
        let seq = e["seq"].as_u64().unwrap();
        assert!(seq > last, "{what}: seq {seq} after {last}");
        last = seq;
        match stored.get(&seq) {
            Some(s) => assert_eq!(
                s, e,
                "{what}: seq {seq} names another event after the restart"
            ),
            None => panic!("{what}: seq {seq} was sent to a client but is not stored: {e}"),
        }
    }
}

/// Wait until none of the tenant's runs is unfinished; returns them all.
async fn settled(ctx: &Ctx, scope: &TenantScope) -> Vec<executions::Execution> {
    let deadline = Instant::now() + WAIT;
    loop {
        let (runs, _) = executions::list(
            &ctx.db,
            scope,
            &ExecutionFilter::default(),
            PageRequest::new(1000, 0),
        )
        .await
        .unwrap();
        let open: Vec<_> = runs
            .iter()
            .filter(|r| {
                matches!(
                    r.status,
                    ExecutionStatus::Running
                        | ExecutionStatus::WaitingApproval
                        | ExecutionStatus::Queued
                )
            })
            .map(|r| (r.id, r.status))
            .collect();
        if open.is_empty() {
            return runs;
        }
        assert!(
            Instant::now() < deadline,
            "runs still unfinished after the restart: {open:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The `done` events stored for a run.
async fn dones_of(ctx: &Ctx, scope: &TenantScope, session: SessionId, run: RunId) -> Vec<Value> {
    events::list_after(&ctx.db, scope, session, 0, 100_000)
        .await
        .unwrap()
        .into_iter()
        .filter(|e| e.run_id == run.to_string() && e.event_type() == "done")
        .map(|e| serde_json::to_value(&e).unwrap())
        .collect()
}

/// How many sessions stream beside the resumed one when the server is killed.
const STREAMING_BESIDE: usize = 5;

/// kill -9 while slow models stream in several sessions: every event a client saw is stored
/// at its `seq` after the restart (no gap, no reuse), and the client that resumes from its
/// last `seq` gets the resume notice, then the rest of the run to its one `done`.
pub async fn seqs_keep_their_meaning_across_kill9(ctx: &mut Ctx, fake: &FakeModelServer) {
    let t = ctx.tenant().await;
    let key = t.member.key.clone();
    let sid = new_session(ctx, &key).await;
    for _ in 0..=STREAMING_BESIDE {
        fake.push(long_stream(300, 15));
    }
    for _ in 0..=STREAMING_BESIDE {
        fake.push(FakeReply::text("the resumed answer"));
    }
    // The sessions beside it start streaming first; the resumed one is read until the kill.
    let mut beside = Vec::new();
    for _ in 0..STREAMING_BESIDE {
        let other = new_session(ctx, &key).await;
        let mut ws = ws_connect(ctx, &key, &other).await;
        chat(&mut ws, "stream beside it").await;
        beside.push((other, ws, Vec::<Value>::new()));
    }
    let mut ws = ws_connect(ctx, &key, &sid).await;
    chat(&mut ws, "stream for a while").await;
    let mut seen = Vec::new();
    while seen
        .iter()
        .filter(|e: &&Value| e["event_type"] == "text")
        .count()
        < 40
    {
        seen.push(next_json(&mut ws).await);
    }
    for (_, ws, got) in &mut beside {
        while got.iter().filter(|e| e["event_type"] == "text").count() < 10 {
            got.push(next_json(ws).await);
        }
    }
    ctx.server.crash_and_restart().await;
    // Whatever reached the sockets before the kill was seen by the clients too.
    for (_, ws, got) in &mut beside {
        while let Ok(Some(Ok(Message::Text(t)))) =
            tokio::time::timeout(Duration::from_millis(100), ws.next()).await
        {
            got.push(serde_json::from_str(&t).unwrap());
        }
    }
    settled(ctx, &t.scope()).await;
    for (other, _, got) in &beside {
        let store = stored(ctx, &t.scope(), other).await;
        same_meaning(got, &store, "kill -9, a session streaming beside");
    }
    let last = seen.last().unwrap()["seq"].as_u64().unwrap();
    let mut ws = reconnect(ctx, &key, &sid, last).await;
    let after = until_done(&mut ws).await;
    // First what was sent after `last` before the kill (stored, since nothing leaves the
    // server unstored), then the resume notice.
    let notice_at = after
        .iter()
        .position(|e| e["event_type"] == "error")
        .unwrap_or_else(|| panic!("no resume notice: {after:?}"));
    assert!(
        after[..notice_at].iter().all(|e| e["event_type"] == "text"),
        "before the notice only the stream's text sent before the kill: {after:?}"
    );
    let first = &after[notice_at];
    assert_eq!(first["data"]["recoverable"], true, "{first}");
    assert!(
        first["data"]["error"]
            .as_str()
            .unwrap()
            .contains("resuming"),
        "the resumed client gets the resume notice: {first}"
    );
    let done = after.last().unwrap();
    assert_eq!(done["data"]["status"], "completed", "{done}");
    let store = stored(ctx, &t.scope(), &sid).await;
    let all: Vec<Value> = seen.iter().chain(after.iter()).cloned().collect();
    same_meaning(&all, &store, "kill -9 mid-stream");
    for e in &after {
        let seq = e["seq"].as_u64().unwrap();
        assert_eq!(
            store.get(&seq),
            Some(e),
            "every event after the restart is stored"
        );
    }
    // A client that replays the whole session now sees the same numbers as the live one.
    let mut ws = reconnect(ctx, &key, &sid, 0).await;
    let replay = until_done_of(&mut ws, done["run_id"].as_str().unwrap()).await;
    same_meaning(&replay, &store, "replay");
    same_meaning(
        &all,
        &replay
            .iter()
            .map(|e| (e["seq"].as_u64().unwrap(), e.clone()))
            .collect(),
        "live vs replay",
    );
}

/// kill -9 mid-run of a tenant admin's key narrowed to a custom role: the run resumed after the
/// restart is offered only the role's tools, as before the crash (it took the admin's before
/// the run's role was recorded).
pub async fn a_resumed_run_keeps_its_keys_role(ctx: &mut Ctx, fake: &FakeModelServer) {
    let t = ctx.tenant().await;
    ctx.ok(
        Method::POST,
        "/api/v1/tenant/roles",
        &t.admin.key,
        Some(json!({"name": "reader", "tools": ["files:read_file"], "areas": ["chat"]})),
        201,
    )
    .await;
    let key = ctx
        .ok(
            Method::POST,
            "/api/v1/tenant/api-keys",
            &t.admin.key,
            Some(json!({"user_id": t.admin.user_id, "name": "narrow", "custom_role": "reader"})),
            201,
        )
        .await["key"]
        .as_str()
        .unwrap()
        .to_string();
    let sid = new_session(ctx, &key).await;
    fake.push(long_stream(300, 15));
    fake.push(FakeReply::text("the resumed answer"));
    let before = fake.requests().len();
    let mut ws = ws_connect(ctx, &key, &sid).await;
    chat(&mut ws, "stream for a while").await;
    let mut last = 0;
    let mut texts = 0;
    while texts < 20 {
        let e = next_json(&mut ws).await;
        texts += usize::from(e["event_type"] == "text");
        last = e["seq"].as_u64().unwrap_or(last);
    }
    ctx.server.crash_and_restart().await;
    let mut ws = reconnect(ctx, &key, &sid, last).await;
    let after = until_done(&mut ws).await;
    assert_eq!(
        after.last().unwrap()["data"]["status"],
        "completed",
        "{after:?}"
    );
    let requests = fake.requests();
    assert!(
        requests.len() >= before + 2,
        "the model was asked before and after the restart"
    );
    for (i, r) in requests[before..].iter().enumerate() {
        let tools = crate::policy::offered(r);
        assert_eq!(
            tools,
            std::collections::BTreeSet::from(["read_file".to_string()]),
            "model request {i} (the first before the crash, the rest after) offers the key's role's tools"
        );
    }
}

/// A background `/v1/responses` response whose server is killed (`kill -9`) mid-run: the run
/// is recovered like any other, and the response polls to `completed` after the restart, its
/// events resumable from the log (issue 26 item 6).
pub async fn a_background_response_survives_kill9(ctx: &mut Ctx, fake: &FakeModelServer) {
    let t = ctx.tenant().await;
    let key = t.member.key.clone();
    // 10 s of streaming: killed after the first words, so the length costs nothing, but a
    // loaded machine's slow polls must not see the run end before the kill.
    fake.push(long_stream(400, 25));
    fake.push(FakeReply::text("the resumed answer"));
    let bg = ctx
        .ok(
            Method::POST,
            "/v1/responses",
            &key,
            Some(json!({"model": "default", "input": "stream for a while", "background": true})),
            200,
        )
        .await;
    assert_eq!(bg["status"], "in_progress", "{bg}");
    let path = format!("/v1/responses/{}", bg["id"].as_str().unwrap());
    // Killed once the model is streaming (the read-back shows the message growing).
    let deadline = Instant::now() + WAIT;
    loop {
        let r = ctx.ok(Method::GET, &path, &key, None, 200).await;
        assert_eq!(r["status"], "in_progress", "killed before it ended: {r}");
        if r["output"][0]["content"][0]["text"]
            .as_str()
            .is_some_and(|t| t.len() > 20)
        {
            break;
        }
        assert!(Instant::now() < deadline, "the model never streamed: {r}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    ctx.server.crash_and_restart().await;
    let deadline = Instant::now() + WAIT;
    let done = loop {
        let r = ctx.ok(Method::GET, &path, &key, None, 200).await;
        if r["status"] != "in_progress" {
            break r;
        }
        assert!(
            Instant::now() < deadline,
            "never ended after the restart: {r}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(done["status"], "completed", "{done}");
    assert_eq!(done["background"], true, "{done}");
    let texts: Vec<&str> = done["output"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|i| i["content"][0]["text"].as_str())
        .collect();
    assert!(
        texts.iter().any(|t| t.contains("the resumed answer")),
        "{done}"
    );
    let res = ctx
        .request(
            Method::GET,
            &format!("{path}?stream=true&starting_after=1"),
            Some(&key),
        )
        .send()
        .await
        .unwrap();
    let frames = crate::openai_responses::frames(&res.text().await.unwrap());
    let seqs: Vec<u64> = frames
        .iter()
        .map(|(_, d)| d["sequence_number"].as_u64().unwrap())
        .collect();
    assert_eq!(seqs, (2..2 + seqs.len() as u64).collect::<Vec<_>>());
    let (last, data) = frames.last().unwrap();
    assert_eq!(last, "response.completed");
    assert_eq!(data["response"]["output"], done["output"]);
}

/// Issue 26: a response that ended at an approval request, and one that ended at a client
/// function call, outlive a `kill -9` of the server: after the restart, the approval answered
/// by `previous_response_id` + `mcp_approval_response` and the function's output sent by
/// `previous_response_id` + `function_call_output` continue the same runs to their answers (the
/// resumed runs ask again under the same ids; nothing is refused or interrupted).
pub async fn paused_responses_survive_kill9(ctx: &mut Ctx) {
    let t = ctx.tenant().await;
    let key = t.member.key.clone();
    let asked = ctx
        .ok(
            Method::POST,
            "/v1/responses",
            &key,
            Some(json!({"model": "default",
                "input": r#"/tool write_file {"file_path": "after_restart.txt", "content": "kept"}"#})),
            200,
        )
        .await;
    let request = asked["output"]
        .as_array()
        .unwrap()
        .iter()
        .find(|i| i["type"] == "mcp_approval_request")
        .unwrap_or_else(|| panic!("{asked}"))["id"]
        .clone();
    let tool = json!({"type": "function", "name": "get_weather",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}});
    let called = ctx
        .ok(
            Method::POST,
            "/v1/responses",
            &key,
            Some(
                json!({"model": "default", "input": "/tool get_weather {\"city\": \"Rome\"}",
                "tools": [tool]}),
            ),
            200,
        )
        .await;
    let call = &called["output"][0];
    assert_eq!(call["type"], "function_call", "{called}");

    ctx.server.crash_and_restart().await;

    let approved = until_taken(ctx, &key, json!({"model": "default", "previous_response_id": asked["id"],
        "input": [{"type": "mcp_approval_response", "approval_request_id": request, "approve": true}]}))
    .await;
    assert_eq!(approved["status"], "completed", "{approved}");
    assert_eq!(
        approved["agentry_run_id"], asked["agentry_run_id"],
        "{approved}"
    );
    assert_eq!(
        (
            &approved["output"][0]["type"],
            &approved["output"][0]["name"],
            &approved["output"][0]["status"]
        ),
        (
            &json!("mcp_call"),
            &json!("write_file"),
            &json!("completed")
        ),
        "{approved}"
    );
    let text = approved["output"]
        .as_array()
        .unwrap()
        .iter()
        .find(|i| i["type"] == "message")
        .unwrap_or_else(|| panic!("no answer: {approved}"))["content"][0]["text"]
        .clone();
    assert!(
        text.as_str()
            .unwrap()
            .starts_with("(scripted) Tool write_file returned:"),
        "{approved}"
    );
    let file = ctx
        .call(
            Method::GET,
            "/api/v1/files/after_restart.txt",
            Some(&key),
            None,
        )
        .await;
    assert_eq!(file.status, 200, "{}", file.body);

    let answered = until_taken(ctx, &key, json!({"model": "default", "previous_response_id": called["id"],
        "input": [{"type": "function_call_output", "call_id": call["call_id"], "output": "rain in Rome"}]}))
    .await;
    assert_eq!(answered["status"], "completed", "{answered}");
    assert_eq!(
        answered["agentry_run_id"], called["agentry_run_id"],
        "{answered}"
    );
    assert_eq!(
        answered["output"].as_array().unwrap().len(),
        1,
        "{answered}"
    );
    assert_eq!(
        answered["output"][0]["content"][0]["text"],
        "(scripted) Tool get_weather returned: rain in Rome",
        "{answered}"
    );
    // Read back after the restart: the same.
    let got = ctx
        .ok(
            Method::GET,
            &format!("/v1/responses/{}", answered["id"].as_str().unwrap()),
            &key,
            None,
            200,
        )
        .await;
    assert_eq!(got["output"], answered["output"], "{got}");
}

/// POST a `/v1/responses` request until it is taken: right after a restart the recovered run
/// may not have asked again yet (409 `approval_not_pending`); anything else, or no success
/// within [`WAIT`], fails.
async fn until_taken(ctx: &Ctx, key: &str, body: Value) -> Value {
    let deadline = Instant::now() + WAIT;
    loop {
        let r = ctx
            .call(Method::POST, "/v1/responses", Some(key), Some(&body))
            .await;
        if r.status == 200 {
            return r.body;
        }
        assert_eq!(
            (r.status, r.code()),
            (409, "approval_not_pending"),
            "{}",
            r.body
        );
        assert!(Instant::now() < deadline, "never taken: {}", r.body);
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn until_done_of(ws: &mut Socket, run: &str) -> Vec<Value> {
    let mut out = Vec::new();
    loop {
        let ev = next_json(ws).await;
        let stop = ev["event_type"] == "done" && ev["run_id"] == run;
        out.push(ev);
        if stop {
            return out;
        }
    }
}

/// Many short runs while the server is killed (`kill -9`) four times: after the last restart
/// every run has ended, and each has exactly one `done` in its stream.
pub async fn churn_every_run_has_exactly_one_done(ctx: &mut Ctx) {
    let t = ctx.tenant().await;
    let key = t.member.key.clone();
    let base = Arc::new(Mutex::new(ctx.server.base.clone()));
    let stop = Arc::new(AtomicBool::new(false));
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(30))
        .build()
        .unwrap();
    let mut workers = Vec::new();
    for w in 0..6 {
        let (base, stop, http, key) = (base.clone(), stop.clone(), http.clone(), key.clone());
        workers.push(tokio::spawn(async move {
            let mut i = 0;
            while !stop.load(Ordering::SeqCst) {
                i += 1;
                let b = base.lock().unwrap().clone();
                let session = http
                    .post(format!("{b}/api/v1/sessions"))
                    .bearer_auth(&key)
                    .json(&json!({}))
                    .send()
                    .await;
                let sid = match session {
                    Ok(r) if r.status().is_success() => r.json::<Value>().await.ok(),
                    _ => None,
                };
                let Some(sid) = sid.and_then(|s| s["session_id"].as_str().map(str::to_string))
                else {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                };
                let _ = http
                    .post(format!("{b}/api/v1/chat"))
                    .bearer_auth(&key)
                    .json(&json!({"message": format!("worker {w} run {i}"), "session_id": sid}))
                    .send()
                    .await;
            }
        }));
    }
    for _ in 0..4 {
        tokio::time::sleep(Duration::from_millis(1200)).await;
        ctx.server.crash_and_restart().await;
        *base.lock().unwrap() = ctx.server.base.clone();
    }
    tokio::time::sleep(Duration::from_millis(800)).await;
    stop.store(true, Ordering::SeqCst);
    for w in workers {
        tokio::time::timeout(WAIT, w).await.unwrap().unwrap();
    }
    let scope = t.scope();
    let runs = settled(ctx, &scope).await;
    assert!(
        // Only that the churn happened: how many runs fit in the fixed windows between the kills
        // depends on the machine's load (a busy 2-core machine managed 12-18, a quiet one 40+).
        runs.len() >= 8,
        "only {} runs: the churn did not churn",
        runs.len()
    );
    let mut bad = Vec::new();
    for r in &runs {
        let dones = dones_of(ctx, &scope, r.session_id, r.id).await;
        if dones.len() != 1 {
            bad.push((r.id, r.status, dones));
        }
    }
    assert!(
        bad.is_empty(),
        "{} of {} runs without exactly one done: {bad:?}",
        bad.len(),
        runs.len()
    );
}

/// kill -9 while an auto-approved shell command runs, then restart: the command ran once (and
/// the orphan it left was killed, so it never finished), the model is told the call was
/// interrupted, and the audit says so.
pub async fn an_interrupted_tool_call_is_not_run_again(ctx: &mut Ctx, fake: &FakeModelServer) {
    let t = ctx.tenant().await;
    let key = t.admin.key.clone();
    let s = ctx
        .ok(
            Method::POST,
            "/api/v1/sessions",
            &key,
            Some(json!({"auto_approve": true})),
            201,
        )
        .await;
    let sid = s["session_id"].as_str().unwrap().to_string();
    fake.push(FakeReply::tool_call(
        "call_long",
        "execute",
        json!({"command": "echo start>>log; sleep 6; echo end>>log"}),
    ));
    fake.push(FakeReply::text("I cannot tell whether it finished."));
    let mut ws = ws_connect(ctx, &key, &sid).await;
    chat(&mut ws, "run the long command").await;
    let log = ctx
        .server
        .data_dir
        .path()
        .join("workspaces")
        .join(&t.id)
        .join(&t.admin.user_id)
        .join("log");
    let deadline = Instant::now() + WAIT;
    while !std::fs::read_to_string(&log).is_ok_and(|l| l.contains("start")) {
        assert!(Instant::now() < deadline, "the command never started");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let started = Instant::now();
    let asked = fake.requests().len();
    ctx.server.crash_and_restart().await;
    let mut ws = reconnect(ctx, &key, &sid, 0).await;
    let events = until_done(&mut ws).await;
    let done = events.last().unwrap();
    assert_eq!(done["data"]["status"], "completed", "{events:?}");
    let run: RunId = done["run_id"].as_str().unwrap().parse().unwrap();
    let ran = std::fs::read_to_string(&log).unwrap();
    assert_eq!(
        ran.matches("start").count(),
        1,
        "the interrupted command ran again: {ran:?}"
    );
    let result = events
        .iter()
        .find(|e| e["event_type"] == "tool_result" && e["data"]["tool_call_id"] == "call_long")
        .unwrap_or_else(|| panic!("no result for the interrupted call: {events:?}"));
    assert_eq!(result["data"]["status"], "error", "{result}");
    assert_eq!(
        result["data"]["result"]["error"]["code"], "interrupted",
        "{result}"
    );
    // The model decides with the interrupted result in its conversation.
    let reqs = fake.requests();
    assert_eq!(
        reqs.len(),
        asked + 1,
        "the model is asked once after the restart"
    );
    let last = &reqs.last().unwrap().raw_body;
    assert!(last.contains("its outcome is unknown"), "{last}");
    let audit = tool_calls::list_by_execution(&ctx.db, &t.scope(), run)
        .await
        .unwrap();
    assert_eq!(audit.len(), 1, "one audit row for the one call: {audit:?}");
    assert_eq!(audit[0].tool_call_id, "call_long");
    assert!(
        audit[0]
            .error
            .as_deref()
            .is_some_and(|e| e.starts_with("interrupted")),
        "{audit:?}"
    );
    assert_eq!(
        audit[0].input["command"],
        "echo start>>log; sleep 6; echo end>>log"
    );
    // The process group the crashed server left is killed at start (the sandbox's part): the
    // command never finishes either.
    tokio::time::sleep(Duration::from_secs(8).saturating_sub(started.elapsed())).await;
    let ran = std::fs::read_to_string(&log).unwrap();
    assert_eq!(
        ran, "start\n",
        "the orphaned command went on after the crash"
    );
}

/// A TCP relay to the database that the test opens and closes: closed, it drops every relayed
/// connection and refuses new ones by accepting and closing them at once. Unlike
/// [`crate::outage::Relay`]'s `Refused`, it keeps its port bound: another test's listener must not
/// get the port while the server still points at it (on a busy machine one did, and the
/// "cut" database answered).
pub struct Switch {
    pub addr: SocketAddr,
    open: Arc<AtomicBool>,
    conns: Arc<Mutex<Vec<JoinHandle<()>>>>,
    accept: JoinHandle<()>,
}

impl Switch {
    pub async fn start(upstream: String) -> Switch {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let open = Arc::new(AtomicBool::new(true));
        let conns: Arc<Mutex<Vec<JoinHandle<()>>>> = Arc::default();
        let (o, c) = (open.clone(), conns.clone());
        let accept = tokio::spawn(async move {
            while let Ok((mut inbound, _)) = listener.accept().await {
                // Checked and registered under the lock `close` takes, so no connection slips
                // through a closing relay.
                let mut conns = c.lock().unwrap();
                if !o.load(Ordering::SeqCst) {
                    drop(inbound);
                    continue;
                }
                let upstream = upstream.clone();
                conns.push(tokio::spawn(async move {
                    if let Ok(mut out) = TcpStream::connect(&upstream).await {
                        let _ = tokio::io::copy_bidirectional(&mut inbound, &mut out).await;
                    }
                }));
            }
        });
        Switch {
            addr,
            open,
            conns,
            accept,
        }
    }

    pub fn close(&self) {
        let mut conns = self.conns.lock().unwrap();
        self.open.store(false, Ordering::SeqCst);
        for t in conns.drain(..) {
            t.abort();
        }
    }

    pub fn reopen(&self) {
        self.open.store(true, Ordering::SeqCst);
    }
}

impl Drop for Switch {
    fn drop(&mut self) {
        self.accept.abort();
        self.close();
    }
}

/// The database goes away while a run streams its answer and stays away through `kill -9`:
/// the client gets `error` and a `failed` `done`; after the restart (database back) the run is
/// recorded as failed with that same `done` at the same `seq`, and the model is not called
/// again.
pub async fn a_run_whose_end_cannot_be_written_is_never_run_twice(
    ctx: &mut Ctx,
    fake: &FakeModelServer,
    relay: &Switch,
) {
    let t = ctx.tenant().await;
    let key = t.member.key.clone();
    let sid = new_session(ctx, &key).await;
    // Long enough that the database is cut mid-stream even on a loaded machine, not while the
    // run's end is being committed (a commit whose answer is lost is the one case where the
    // stored end and the one the client was told differ).
    fake.push(long_stream(80, 50));
    let mut ws = ws_connect(ctx, &key, &sid).await;
    chat(&mut ws, "answer slowly").await;
    let mut seen = Vec::new();
    while !seen.iter().any(|e: &Value| e["event_type"] == "text") {
        seen.push(next_json(&mut ws).await);
    }
    relay.close();
    seen.extend(until_done(&mut ws).await);
    let done = seen.last().unwrap().clone();
    assert_eq!(done["data"]["status"], "failed", "{seen:?}");
    assert!(
        seen.iter()
            .any(|e| e["event_type"] == "error" && e["data"]["recoverable"] == false),
        "{seen:?}"
    );
    let asked = fake.request_count();
    ctx.server.crash().await;
    relay.reopen();
    ctx.server.restart().await;
    let scope = t.scope();
    let runs = settled(ctx, &scope).await;
    assert_eq!(runs.len(), 1, "{runs:?}");
    let run = &runs[0];
    assert_eq!(run.status, ExecutionStatus::Failed, "{run:?}");
    assert_eq!(done["run_id"], run.id.to_string());
    let dones = dones_of(ctx, &scope, run.session_id, run.id).await;
    assert_eq!(
        dones,
        vec![done.clone()],
        "exactly the done the client saw is stored"
    );
    let store = stored(ctx, &scope, &sid).await;
    same_meaning(&seen, &store, "database lost at the end of a run");
    // Give a wrongly resumed run time to call the model: it must not.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(
        fake.request_count(),
        asked,
        "the run was run again after the restart"
    );
    let mut ws = reconnect(ctx, &key, &sid, 0).await;
    let replay = until_done(&mut ws).await;
    assert_eq!(replay.last(), Some(&done));
    // The session works again.
    fake.push(FakeReply::text("fine now"));
    chat(&mut ws, "again").await;
    let next = until_done(&mut ws).await;
    assert_eq!(
        next.last().unwrap()["data"]["status"],
        "completed",
        "{next:?}"
    );
}

/// The server's database URL through `relay`, with a short connect timeout so an outage is
/// noticed quickly.
pub fn relayed_env(pg: &str, relay: &Switch) -> Vec<(String, String)> {
    vec![
        ("AGENTRY_DATABASE__URL".into(), via(pg, relay.addr)),
        ("AGENTRY_DATABASE__CONNECT_TIMEOUT_SECS".into(), "1".into()),
    ]
}

pub async fn pg_relay(pg: &str) -> Switch {
    Switch::start(upstream_of(pg)).await
}
