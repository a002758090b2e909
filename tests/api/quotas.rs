//! Tenant quotas at the edge: `requests_per_minute`, `max_concurrent_runs` and `tokens_per_day`
//! refuse with 429, `Retry-After` and the quota's name in `details` over REST, and with an
//! `error` event naming it over the WebSocket; each refusal leaves nothing behind, and other
//! tenants are not affected.

use reqwest::Method;
use serde_json::{Value, json};
use tokio_tungstenite::tungstenite;

use crate::ctx::{ADMIN_KEY, Ctx, Resp};
use crate::mcp::{ws_connect, ws_request};
use crate::streaming::{
    new_session, next_json, send, session_count, start_sleeping_run, until_done_or_hitl,
};

/// A 429 that names `quota` and `limit`, with a `Retry-After` of whole seconds in `1..=max`.
fn assert_quota(r: &Resp, quota: &str, limit: u64, max_retry: u64, what: &str) {
    assert_eq!(
        (r.status, r.code()),
        (429, "quota_exceeded"),
        "{what}: {}",
        r.body
    );
    assert_eq!(r.details()["quota"], quota, "{what}: {}", r.body);
    assert_eq!(r.details()["limit"], limit, "{what}: {}", r.body);
    let retry: u64 = r.headers["retry-after"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap_or_else(|_| panic!("{what}: Retry-After is not seconds"));
    assert!(
        (1..=max_retry).contains(&retry),
        "{what}: Retry-After {retry}"
    );
}

/// The `error` event a refused WebSocket frame gets, naming the quota.
fn assert_quota_event(ev: &Value, quota: &str, limit: u64) {
    assert_eq!(ev["event_type"], "error", "{ev}");
    assert_eq!(ev["seq"], 0, "not part of the session's stream: {ev}");
    assert_eq!(ev["data"]["error_code"], "quota_exceeded", "{ev}");
    assert_eq!(ev["data"]["details"]["quota"], quota, "{ev}");
    assert_eq!(ev["data"]["details"]["limit"], limit, "{ev}");
    assert!(
        ev["data"]["error"].as_str().unwrap().contains(quota),
        "the message names it: {ev}"
    );
}

/// `requests_per_minute` counts every request of the tenant's keys, whichever user: the next
/// one is 429 (REST and the WebSocket upgrade alike). The platform admin and other tenants go on.
pub async fn requests_per_minute(ctx: &Ctx) {
    let limit = 4;
    let t = ctx
        .tenant_with(json!({ "requests_per_minute": limit }))
        .await;
    let other = ctx.tenant().await;
    let sid = new_session(ctx, &t.member.key).await;
    for key in [&t.member.key, &t.member2.key, &t.admin.key] {
        ctx.ok(Method::GET, "/api/v1/sessions", key, None, 200)
            .await;
    }
    for (key, path) in [
        (&t.member.key, "/api/v1/sessions"),
        (&t.member2.key, "/api/v1/executions"),
        (&t.admin.key, "/api/v1/agents"),
    ] {
        let r = ctx.call(Method::GET, path, Some(key), None).await;
        assert_quota(&r, "requests_per_minute", limit, 60, path);
    }
    let r = ctx
        .call(
            Method::POST,
            "/api/v1/chat",
            Some(&t.member.key),
            Some(&json!({ "message": "hi", "session_id": sid })),
        )
        .await;
    assert_quota(&r, "requests_per_minute", limit, 60, "POST /chat");
    match tokio_tungstenite::connect_async(ws_request(ctx, &t.member.key, &sid, "")).await {
        Err(tungstenite::Error::Http(res)) => {
            assert_eq!(res.status(), 429);
            assert!(res.headers().contains_key("retry-after"));
            let body: Value = serde_json::from_slice(res.body().as_deref().unwrap_or_default())
                .expect("the refusal is our error JSON");
            assert_eq!(body["details"]["quota"], "requests_per_minute", "{body}");
        }
        other => panic!("the upgrade should be refused: {:?}", other.map(|_| ())),
    }
    // Another tenant has its own allowance.
    ctx.ok(
        Method::GET,
        "/api/v1/sessions",
        &other.member.key,
        None,
        200,
    )
    .await;
}

/// `requests_per_minute` is checked before routing, so every operation a tenant key calls
/// answers 429 once the minute is used up, as `/openapi.json` documents. Walks the document, so
/// a new route is covered without a change here. The public routes (`/`, `/health*`,
/// `/metrics`, `/openapi.json`) need no key, but one sent to them counts. The platform admin's
/// `/admin` routes are left out (a tenant key is refused there anyway).
pub async fn requests_per_minute_on_every_keyed_route(ctx: &Ctx) {
    let doc = ctx
        .call(Method::GET, "/openapi.json", None, None)
        .await
        .body;
    let t = ctx.tenant_with(json!({ "requests_per_minute": 1 })).await;
    ctx.ok(Method::GET, "/api/v1/me", &t.member.key, None, 200)
        .await;
    let mut checked = 0;
    for (path, item) in doc["paths"].as_object().unwrap() {
        if path.starts_with("/api/v1/admin") {
            continue;
        }
        for (method, _) in item.as_object().unwrap() {
            // Any value fits: the limit is checked before the path or body is looked at. Public
            // routes (`/`, `/health*`, `/metrics`) count a request that carries a key too.
            let concrete = path
                .split('/')
                .map(|seg| {
                    if seg.starts_with('{') {
                        uuid::Uuid::new_v4().to_string()
                    } else {
                        seg.to_string()
                    }
                })
                .collect::<Vec<_>>()
                .join("/");
            let m = Method::from_bytes(method.to_uppercase().as_bytes()).unwrap();
            let body = (m != Method::GET && m != Method::DELETE).then(|| json!({}));
            let r = ctx
                .call(m, &concrete, Some(&t.member.key), body.as_ref())
                .await;
            assert_quota(
                &r,
                "requests_per_minute",
                1,
                60,
                &format!("{method} {path}"),
            );
            checked += 1;
        }
    }
    assert!(checked > 30, "only {checked} operations checked");
}

/// `max_concurrent_runs: 1`: while one run sleeps, a second run of the tenant (another user,
/// another session) is refused over `/chat`, `/chat/stream` and the WebSocket; once the first
/// ends, the next is admitted.
pub async fn max_concurrent_runs(ctx: &Ctx) {
    // Room for one more session each: a refused chat that kept its session would use it up,
    // and the next refusal would name max_sessions_per_user instead.
    let t = ctx
        .tenant_with(json!({ "max_concurrent_runs": 1, "max_sessions_per_user": 2 }))
        .await;
    let (running, busy) = start_sleeping_run(ctx, &t.member.key, None, 120_000).await;
    let key = &t.member2.key;
    let sid = new_session(ctx, key).await;
    let sessions = session_count(ctx, key).await;
    for path in ["/api/v1/chat", "/api/v1/chat/stream"] {
        for body in [
            json!({ "message": "me too", "session_id": sid }),
            json!({ "message": "me too" }),
        ] {
            let r = ctx.call(Method::POST, path, Some(key), Some(&body)).await;
            assert_quota(&r, "max_concurrent_runs", 1, 1, path);
        }
    }
    let mut ws = ws_connect(ctx, key, &sid).await;
    send(
        &mut ws,
        json!({"type": "chat", "payload": {"message": "me too"}}),
    )
    .await;
    assert_quota_event(&next_json(&mut ws).await, "max_concurrent_runs", 1);
    let runs = ctx
        .ok(Method::GET, "/api/v1/executions", key, None, 200)
        .await;
    assert_eq!(runs["total"], 0, "refused runs leave no execution: {runs}");
    assert_eq!(
        session_count(ctx, key).await,
        sessions,
        "a refused chat without session_id creates no session"
    );
    // …and gives its reservation back: the second session is still there to be made.
    new_session(ctx, key).await;

    // The first run ends; its slot is free again.
    ctx.ok(
        Method::POST,
        &format!("/api/v1/sessions/{busy}/cancel"),
        &t.member.key,
        None,
        200,
    )
    .await;
    assert!(running.text().await.unwrap().contains("\"cancelled\":true"));
    send(
        &mut ws,
        json!({"type": "chat", "payload": {"message": "/echo my turn"}}),
    )
    .await;
    let evs = until_done_or_hitl(&mut ws).await;
    assert_eq!(
        evs.last().unwrap()["data"]["status"],
        "completed",
        "{evs:?}"
    );
}

/// `tokens_per_day`: the run that crosses the budget finishes; the next is refused until
/// midnight UTC (`Retry-After` at most a day), for every user of the tenant.
pub async fn tokens_per_day(ctx: &Ctx) {
    let budget = 10;
    let t = ctx.tenant_with(json!({ "tokens_per_day": budget })).await;
    let r = ctx
        .ok(
            Method::POST,
            "/api/v1/chat",
            &t.member.key,
            Some(json!({ "message": "spend the budget" })),
            200,
        )
        .await;
    let done = r["events"].as_array().unwrap().last().unwrap().clone();
    assert_eq!(done["data"]["status"], "completed", "{done}");
    let used = done["data"]["token_usage"]["total"].as_u64().unwrap();
    assert!(used >= budget, "the run used {used} of {budget} tokens");
    let sid = r["session_id"].as_str().unwrap().to_string();
    for (key, path) in [
        (&t.member.key, "/api/v1/chat"),
        (&t.member2.key, "/api/v1/chat/stream"),
    ] {
        let r = ctx
            .call(
                Method::POST,
                path,
                Some(key),
                Some(&json!({ "message": "more" })),
            )
            .await;
        assert_quota(&r, "tokens_per_day", budget, 86_400, path);
    }
    let mut ws = ws_connect(ctx, &t.member.key, &sid).await;
    send(
        &mut ws,
        json!({"type": "chat", "payload": {"message": "more"}}),
    )
    .await;
    assert_quota_event(&next_json(&mut ws).await, "tokens_per_day", budget);
    // Raising the budget lets the tenant go on at once.
    ctx.ok(
        Method::PATCH,
        &format!("/api/v1/admin/tenants/{}", t.id),
        ADMIN_KEY,
        Some(json!({ "tokens_per_day": 1_000_000 })),
        200,
    )
    .await;
    send(
        &mut ws,
        json!({"type": "chat", "payload": {"message": "/echo budget raised"}}),
    )
    .await;
    let evs = until_done_or_hitl(&mut ws).await;
    assert_eq!(
        evs.last().unwrap()["data"]["status"],
        "completed",
        "{evs:?}"
    );
}

/// `tokens_per_day` holds against parallel runs: each model call reserves its tokens before it
/// starts (the prompt's estimate plus `quota.reserve_output_tokens`, 1,024 by default) and its
/// real usage replaces the reservation after it. Ten one-tool runs (two model calls each, about
/// 4,000 tokens a run) start together against a budget of 12,000 tokens; checked only at the
/// start of each run, they all ran (a budget of 3,000 let ten runs use 23,320). Now the
/// tenant ends at most one call's reservation over the budget, and the runs that did not fit are
/// refused (429 at the start, or an `error` `quota_exceeded` and a `failed` `done` at a later
/// call), naming the quota.
pub async fn tokens_per_day_parallel_runs(ctx: &Ctx) {
    const RESERVE_OUTPUT: u64 = 1024;
    // About three runs' worth: several runs' calls are admitted together.
    let budget = 12_000;
    let t = ctx.tenant_with(json!({ "tokens_per_day": budget })).await;
    // The model answers slowly, so the ten runs' calls overlap.
    let message = "/sleep 300\n/tool write_todos {\"todos\": [{\"content\": \"count tokens\", \"status\": \"pending\"}]}";
    let runs = futures::future::join_all((0..10).map(|i| {
        let key = if i % 2 == 0 {
            t.member.key.clone()
        } else {
            t.member2.key.clone()
        };
        async move {
            ctx.call(
                Method::POST,
                "/api/v1/chat",
                Some(&key),
                Some(&json!({ "message": message, "session_id": null })),
            )
            .await
        }
    }))
    .await;
    let (mut used, mut max_input, mut completed, mut refused) = (0, 0, 0, 0);
    for r in &runs {
        if r.status == 429 {
            assert_quota(
                r,
                "tokens_per_day",
                budget,
                86_400,
                "a run refused at its start",
            );
            refused += 1;
            continue;
        }
        assert_eq!(r.status, 200, "{}", r.body);
        let events = r.body["events"].as_array().unwrap();
        let done = events.last().unwrap();
        assert_eq!(done["event_type"], "done", "{done}");
        let usage = &done["data"]["token_usage"];
        used += usage["total"].as_u64().unwrap();
        max_input = max_input.max(usage["input"].as_u64().unwrap());
        match done["data"]["status"].as_str().unwrap() {
            "completed" => completed += 1,
            "failed" => {
                // Refused at a later model call: the error names the quota, then `done`.
                let err = events
                    .iter()
                    .rev()
                    .find(|e| e["event_type"] == "error")
                    .unwrap_or_else(|| panic!("a failed run says why: {events:?}"));
                assert_eq!(err["data"]["error_code"], "quota_exceeded", "{err}");
                assert_eq!(err["data"]["details"]["quota"], "tokens_per_day", "{err}");
                assert_eq!(done["data"]["reason"], "quota_exceeded", "{done}");
                refused += 1;
            }
            other => panic!("unexpected end {other}: {done}"),
        }
    }
    eprintln!(
        "tokens_per_day {budget}: {completed} runs completed, {refused} refused, {used} tokens \
         used, largest run input {max_input}"
    );
    assert!(completed >= 1, "some runs fit in the budget");
    assert!(
        refused >= 1,
        "ten runs do not fit in {budget} tokens: used {used}"
    );
    // One call's reservation is its prompt's estimate (which the fake model's usage counts the
    // same way, and no call's input is more than its run's) plus the answer's allowance.
    let one_reservation = max_input + RESERVE_OUTPUT;
    assert!(
        used <= budget + one_reservation,
        "the runs used {used} tokens of a {budget} budget: more than one reservation \
         ({one_reservation}) over"
    );
    // The store agrees, and the budget is spent for every user of the tenant.
    let r = ctx
        .call(
            Method::POST,
            "/api/v1/chat",
            Some(&t.member2.key),
            Some(&json!({ "message": "more" })),
        )
        .await;
    if used >= budget {
        assert_quota(
            &r,
            "tokens_per_day",
            budget,
            86_400,
            "after the budget is spent",
        );
    }
}

/// `requests_per_minute` counts each WebSocket frame that starts work (chat, hitl_decision) as
/// REST counts each request: with a limit of 5, the session's creation and the upgrade count 2,
/// three chat frames run, and the fourth gets an `error` event naming the quota. So does a
/// decision; the socket stays open (ping answers), and a cancel is not counted.
pub async fn requests_per_minute_on_one_socket(ctx: &Ctx) {
    let limit = 5;
    let t = ctx
        .tenant_with(json!({ "requests_per_minute": limit }))
        .await;
    let sid = new_session(ctx, &t.member.key).await;
    let mut ws = ws_connect(ctx, &t.member.key, &sid).await;
    for i in 0..3 {
        send(
            &mut ws,
            json!({"type": "chat", "payload": {"message": format!("/echo run {i}")}}),
        )
        .await;
        let evs = until_done_or_hitl(&mut ws).await;
        assert_eq!(
            evs.last().unwrap()["data"]["status"],
            "completed",
            "chat frame {i}: {evs:?}"
        );
    }
    send(
        &mut ws,
        json!({"type": "chat", "payload": {"message": "/echo one too many"}}),
    )
    .await;
    assert_quota_event(&next_json(&mut ws).await, "requests_per_minute", limit);
    send(
        &mut ws,
        json!({"type": "hitl_decision", "payload": {
            "request_id": uuid::Uuid::new_v4().to_string(), "type": "approve"}}),
    )
    .await;
    assert_quota_event(&next_json(&mut ws).await, "requests_per_minute", limit);
    // Not counted: a cancel (there is no run: its own error, not the quota's), and a ping.
    send(&mut ws, json!({"type": "cancel", "payload": {}})).await;
    let ev = next_json(&mut ws).await;
    assert_eq!(ev["data"]["error_code"], "no_active_run", "{ev}");
    send(&mut ws, json!({"type": "ping", "payload": {}})).await;
    let pong = next_json(&mut ws).await;
    assert_eq!(pong["type"], "pong", "the socket stays open: {pong}");
    // REST shares the count.
    let r = ctx
        .call(Method::GET, "/api/v1/executions", Some(&t.admin.key), None)
        .await;
    assert_quota(
        &r,
        "requests_per_minute",
        limit,
        60,
        "REST after the socket's frames",
    );
}
