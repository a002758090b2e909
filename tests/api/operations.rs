//! What an operator sees of a running server: one JSON access-log line per request (never the
//! key), an error line for a failed run and a warning for a refused key, each carrying the
//! request id; and SIGTERM: no new runs, every WebSocket closed with 1001, a quick exit when
//! idle, and a run still going at the timeout left for recovery.

use std::time::{Duration, Instant};

use agentry_fake_model::{FakeModelServer, FakeReply};
use futures::StreamExt;
use reqwest::Method;
use serde_json::{Value, json};
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;

use crate::ctx::{Ctx, unique};
use crate::mcp::ws_connect;
use crate::streaming::{Socket, new_session, send};

/// The JSON log lines with this request id, waiting up to 10 s for at least `want` of them.
async fn lines_of(ctx: &Ctx, request_id: &str, want: usize) -> Vec<Value> {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let found = ctx
            .server
            .log_lines(|v| v["request_id"] == request_id || v["span"]["request_id"] == request_id);
        if found.len() >= want || Instant::now() >= deadline {
            return found;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn only<'a>(lines: &'a [Value], target: &str) -> Vec<&'a Value> {
    lines.iter().filter(|l| l["target"] == target).collect()
}

/// A run the model fails (`model_error`) and a refused key each leave one structured line with
/// the request id; every request has its access line with the route pattern, status, duration
/// and tenant.
pub async fn failures_are_logged_with_the_request_id(ctx: &Ctx, fake: &FakeModelServer) {
    let t = ctx.tenant().await;
    let key = &t.member.key;
    let sid = new_session(ctx, key).await;

    // The model answers 400: the run fails with model_error.
    fake.push(FakeReply::error(400, "this model refuses the request"));
    let rid = unique("failed-run");
    let r = ctx
        .send(
            ctx.request(Method::POST, "/api/v1/chat", Some(key))
                .header("x-request-id", &rid)
                .json(&json!({"session_id": sid, "message": "please fail"})),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    let done = r.body["events"].as_array().unwrap().last().unwrap().clone();
    assert_eq!(done["data"]["status"], "failed", "{done}");
    let lines = lines_of(ctx, &rid, 2).await;
    let runs = only(&lines, "agentry::runs");
    assert_eq!(runs.len(), 1, "one line for the failed run: {lines:#?}");
    let run = runs[0];
    assert_eq!(run["level"], "ERROR", "{run}");
    assert_eq!(run["status"], "failed", "{run}");
    assert_eq!(run["reason"], "model_error", "{run}");
    assert_eq!(run["run_id"], r.body["run_id"], "{run}");
    assert_eq!(run["session_id"], sid, "{run}");
    assert_eq!(run["tenant_id"], t.id, "{run}");
    let access = only(&lines, "agentry::access");
    assert_eq!(access.len(), 1, "{lines:#?}");
    let a = access[0];
    assert_eq!(a["level"], "INFO");
    assert_eq!(a["method"], "POST");
    assert_eq!(a["route"], "/api/v1/chat");
    assert_eq!(a["status"], 200);
    assert_eq!(a["tenant_id"], t.id);
    assert!(a["duration_ms"].as_f64().unwrap() > 0.0, "{a}");

    // A made-up key: one warning, with the request id, and the key nowhere in the log.
    let bogus = format!("ak_{}", unique("bogus-key-material"));
    let rid = unique("refused");
    let r = ctx
        .send(
            ctx.request(Method::GET, "/api/v1/me", Some(&bogus))
                .header("x-request-id", &rid),
        )
        .await;
    assert_eq!(r.status, 401, "{}", r.body);
    let lines = lines_of(ctx, &rid, 1).await;
    assert_eq!(lines.len(), 1, "{lines:#?}");
    let l = &lines[0];
    assert_eq!(l["target"], "agentry::access");
    assert_eq!(l["level"], "WARN", "{l}");
    assert_eq!(l["status"], 401);
    assert!(
        l.get("tenant_id").is_none(),
        "a refused key has no tenant: {l}"
    );

    // A route pattern stands for ids; an unknown route is `unmatched` with its path.
    let rid = unique("pattern");
    let path = format!("/api/v1/sessions/{sid}");
    ctx.send(
        ctx.request(Method::GET, &path, Some(key))
            .header("x-request-id", &rid),
    )
    .await;
    let lines = lines_of(ctx, &rid, 1).await;
    assert_eq!(
        lines[0]["route"], "/api/v1/sessions/{session_id}",
        "{lines:?}"
    );
    assert!(lines[0].get("path").is_none(), "{lines:?}");
    let rid = unique("unmatched");
    let r = ctx
        .send(
            ctx.request(Method::GET, "/api/v1/no-such-thing", None)
                .header("x-request-id", &rid),
        )
        .await;
    assert_eq!(r.status, 404);
    let lines = lines_of(ctx, &rid, 1).await;
    assert_eq!(lines[0]["route"], "unmatched", "{lines:?}");
    assert_eq!(lines[0]["path"], "/api/v1/no-such-thing", "{lines:?}");

    // Over a WebSocket, the run's line carries the id of the upgrade request.
    let rid = unique("ws-failed-run");
    let mut upgrade = crate::mcp::ws_request(ctx, key, &sid, "");
    upgrade
        .headers_mut()
        .insert("x-request-id", rid.parse().unwrap());
    let mut ws = tokio_tungstenite::connect_async(upgrade).await.unwrap().0;
    fake.push(FakeReply::error(400, "this model refuses again"));
    send(
        &mut ws,
        json!({"type": "chat", "payload": {"message": "fail again"}}),
    )
    .await;
    let evs = crate::streaming::until_done_or_hitl(&mut ws).await;
    assert_eq!(evs.last().unwrap()["data"]["status"], "failed", "{evs:?}");
    let lines = lines_of(ctx, &rid, 2).await;
    let runs = only(&lines, "agentry::runs");
    assert_eq!(runs.len(), 1, "{lines:#?}");
    assert_eq!(runs[0]["reason"], "model_error", "{lines:#?}");
    drop(ws);

    let all = ctx.server.logs.lock().unwrap().join("\n");
    for secret in [bogus.as_str(), key.as_str(), crate::ctx::ADMIN_KEY] {
        assert!(!all.contains(secret), "a key reached the log");
    }
}

/// Reads until the server closes the socket; its close frame.
async fn close_frame(ws: &mut Socket) -> Option<(CloseCode, String)> {
    loop {
        match tokio::time::timeout(Duration::from_secs(10), ws.next()).await {
            Ok(Some(Ok(Message::Close(Some(frame))))) => {
                return Some((frame.code, frame.reason.to_string()));
            }
            Ok(Some(Ok(Message::Close(None)))) | Ok(None) | Ok(Some(Err(_))) | Err(_) => {
                return None;
            }
            Ok(Some(Ok(_))) => {}
        }
    }
}

/// An idle server with three WebSockets open stops within 3 s of SIGTERM, each client having
/// been told 1001 "going away".
pub async fn sigterm_closes_idle_sockets_and_exits_quickly(mut ctx: Ctx) {
    let t = ctx.tenant().await;
    let mut sockets = Vec::new();
    for _ in 0..3 {
        let sid = new_session(&ctx, &t.member.key).await;
        sockets.push(ws_connect(&ctx, &t.member.key, &sid).await);
    }
    let started = Instant::now();
    ctx.server.terminate();
    for ws in &mut sockets {
        let (code, reason) = close_frame(ws).await.expect("a close frame");
        assert_eq!(code, CloseCode::Away, "{reason}");
        assert!(reason.contains("shutting down"), "{reason}");
    }
    let status = tokio::time::timeout(Duration::from_secs(10), ctx.server.child.wait())
        .await
        .expect("the server exits")
        .unwrap();
    let took = started.elapsed();
    assert!(status.success(), "{status:?}");
    assert!(
        took < Duration::from_secs(3),
        "an idle server stops at once: {took:?}"
    );
}

/// While a run is going, a stopping server refuses new runs with 503 and `Retry-After`, closes
/// the sockets, waits the shutdown timeout for the run, then exits leaving the run `running` for
/// the next start to resume.
pub async fn sigterm_refuses_new_runs_and_leaves_a_long_run_for_recovery(mut ctx: Ctx) {
    let t = ctx.tenant().await;
    let key = t.member.key.clone();
    let sid = new_session(&ctx, &key).await;
    let mut ws = ws_connect(&ctx, &key, &sid).await;
    send(
        &mut ws,
        json!({"type": "chat", "payload": {"message": "/sleep 600000\nlate"}}),
    )
    .await;
    // The run is running once its row says so.
    let deadline = Instant::now() + Duration::from_secs(30);
    let run_id = loop {
        let page = ctx
            .ok(
                Method::GET,
                &format!("/api/v1/executions?session_id={sid}"),
                &key,
                None,
                200,
            )
            .await;
        if let Some(run) = page["items"].as_array().and_then(|i| i.first())
            && run["status"] == "running"
        {
            break run["id"].as_str().unwrap().to_string();
        }
        assert!(Instant::now() < deadline, "the run never started: {page}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let started = Instant::now();
    ctx.server.terminate();
    let (code, _) = close_frame(&mut ws).await.expect("a close frame");
    assert_eq!(code, CloseCode::Away);
    let other = new_session(&ctx, &t.member2.key).await;
    let r = ctx
        .call(
            Method::POST,
            "/api/v1/chat",
            Some(&t.member2.key),
            Some(&json!({"session_id": other, "message": "too late"})),
        )
        .await;
    assert_eq!(r.status, 503, "{}", r.body);
    assert_eq!(r.code(), "service_unavailable");
    assert!(r.headers.contains_key("retry-after"));
    // Readiness turned red with the signal, so load balancers stop sending work here.
    let ready = ctx
        .call(Method::GET, "/api/v1/health/ready", None, None)
        .await;
    assert_eq!(ready.status, 503, "{}", ready.body);
    assert_eq!(ready.body["status"], "not_ready", "{}", ready.body);
    assert_eq!(
        ready.body["checks"]["shutdown"], "draining",
        "{}",
        ready.body
    );
    assert_eq!(ready.body["checks"]["database"], "ok", "{}", ready.body);
    assert_eq!(ready.code(), "service_unavailable", "{}", ready.body);
    assert!(ready.headers.contains_key("retry-after"));
    let status = tokio::time::timeout(Duration::from_secs(30), ctx.server.child.wait())
        .await
        .expect("the server exits after its shutdown timeout")
        .unwrap();
    assert!(status.success(), "{status:?}");
    assert!(
        started.elapsed() >= Duration::from_secs(2),
        "the run had the shutdown timeout (2 s) to finish"
    );
    let run = agentry_store::executions::get(&ctx.db, &t.scope(), run_id.parse().unwrap())
        .await
        .unwrap()
        .expect("the run's row");
    assert_eq!(
        run.status,
        agentry_store::executions::ExecutionStatus::Running,
        "left for the next start to resume"
    );
}

pub const METRICS_TOKEN: &str = "metrics-scrape-token-0123456789";

/// `/metrics` with a token: refused without it; with it, the model calls (latency and errors by
/// provider and model), tool calls by tool and outcome, approvals waiting, tokens by tenant, the
/// process and the database pool are all there.
pub async fn metrics_need_the_token_and_cover_models_tools_and_the_process(ctx: &Ctx) {
    for auth in [None, Some("Bearer wrong-token"), Some(METRICS_TOKEN)] {
        let mut rb = ctx.request(Method::GET, "/metrics", None);
        if let Some(a) = auth {
            rb = rb.header("authorization", a);
        }
        let r = ctx.send(rb).await;
        assert_eq!(r.status, 401, "{auth:?}: {}", r.body);
        assert_eq!(r.code(), "unauthorized");
    }
    let t = ctx.tenant().await;
    let key = &t.member.key;
    let sid = new_session(ctx, key).await;
    let mut ws = ws_connect(ctx, key, &sid).await;
    // A tool without approval, one that does not exist, then one waiting for approval.
    for message in [
        r#"/tool list_directory {"path": "."}"#,
        r#"/tool no_such_tool {}"#,
    ] {
        send(
            &mut ws,
            json!({"type": "chat", "payload": {"message": message}}),
        )
        .await;
        crate::streaming::until_done_or_hitl(&mut ws).await;
    }
    send(
        &mut ws,
        json!({"type": "chat", "payload": {"message": r#"/tool write_file {"file_path": "m.txt", "content": "x"}"#}}),
    )
    .await;
    let evs = crate::streaming::until_done_or_hitl(&mut ws).await;
    let request = evs.last().unwrap()["data"]["request_id"].clone();
    let scrape = || async {
        let r = ctx
            .http
            .get(ctx.url("/metrics"))
            .bearer_auth(METRICS_TOKEN)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200);
        r.text().await.unwrap()
    };
    use crate::observability::sample;
    // The approval's actor counts itself when it starts, which can be just after the
    // `hitl_request` reached the client: wait for the gauge (bounded), don't race it.
    let mut m = scrape().await;
    for _ in 0..100 {
        if sample(&m, "agentry_approvals_waiting", &[]) == 1.0 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        m = scrape().await;
    }
    assert_eq!(sample(&m, "agentry_approvals_waiting", &[]), 1.0, "{m}");
    send(
        &mut ws,
        json!({"type": "hitl_decision", "payload": {"request_id": request, "type": "approve"}}),
    )
    .await;
    crate::streaming::until_done_or_hitl(&mut ws).await;
    // Likewise the actor uncounts itself when it stops, after it handed the decision on.
    let mut m = scrape().await;
    for _ in 0..100 {
        if sample(&m, "agentry_approvals_waiting", &[]) == 0.0 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        m = scrape().await;
    }
    assert_eq!(sample(&m, "agentry_approvals_waiting", &[]), 0.0, "{m}");
    let model = [("provider", "openai"), ("model", "fake-large")];
    let ok = [model[0], model[1], ("outcome", "ok")];
    // The two failed runs of the logging test (REST and WebSocket) were one model call each.
    let failed = [model[0], model[1], ("outcome", "error")];
    assert!(
        sample(&m, "agentry_model_call_duration_seconds_count", &ok) >= 6.0,
        "{m}"
    );
    assert!(
        sample(&m, "agentry_model_call_duration_seconds_sum", &ok) > 0.0,
        "{m}"
    );
    assert_eq!(
        sample(&m, "agentry_model_call_duration_seconds_count", &failed),
        2.0,
        "{m}"
    );
    assert_eq!(
        sample(
            &m,
            "agentry_model_errors_total",
            &[model[0], model[1], ("kind", "bad_request")]
        ),
        2.0,
        "{m}"
    );
    for (tool, outcome) in [
        ("list_directory", "success"),
        ("write_file", "success"),
        ("no_such_tool", "failed"),
    ] {
        let labels = [("tool", tool), ("outcome", outcome)];
        assert_eq!(
            sample(&m, "agentry_tool_calls_total", &labels),
            1.0,
            "{tool}: {m}"
        );
        assert_eq!(
            sample(&m, "agentry_tool_call_duration_seconds_count", &labels),
            1.0
        );
    }
    assert!(
        sample(&m, "agentry_tokens_total", &[("tenant", &t.id)]) > 0.0,
        "opted in: {m}"
    );
    assert!(
        sample(&m, "process_resident_memory_bytes", &[]) > 1e6,
        "{m}"
    );
    assert!(sample(&m, "process_open_fds", &[]) > 3.0, "{m}");
    assert!(sample(&m, "process_max_fds", &[]) >= sample(&m, "process_open_fds", &[]));
    assert!(sample(&m, "process_cpu_seconds_total", &[]) > 0.0, "{m}");
    assert!(
        m.contains("# TYPE process_cpu_seconds_total counter\n"),
        "CPU time only grows: {m}"
    );
    // Models, tools, approvals, the process and the pool, as Prometheus itself wants them.
    crate::observability::passes_promtool(&m);
    let idle = sample(&m, "agentry_db_pool_connections", &[("state", "idle")]);
    let in_use = sample(&m, "agentry_db_pool_connections", &[("state", "in_use")]);
    assert!(idle + in_use >= 1.0, "the pool has a connection: {m}");
    // database.max_connections (20 by default), on every backend.
    let pool = 20.0;
    assert_eq!(
        sample(&m, "agentry_db_pool_max_connections", &[]),
        pool,
        "{m}"
    );
}
