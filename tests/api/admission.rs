//! Quota admission under a burst (issue 31 item 4): `tokens_per_day` refuses at admission,
//! with 429 `quota_exceeded`, before anything is created. Once a tenant's daily budget is
//! spent, a burst of concurrent requests on every chat route — REST, SSE, the OpenAI-compatible
//! API and WebSocket frames, with and without a session, spread over every replica — is refused
//! whole, and the database holds exactly what it held before: no session, no run, no message.

use agentry_schema::entities::{execution, message, session};
use reqwest::Method;
use sea_orm::{ColumnTrait, EntityTrait, PaginatorTrait, QueryFilter};
use serde_json::{Value, json};

use crate::ctx::{Ctx, Resp, TenantFx};
use crate::mcp::ws_connect;
use crate::streaming::{next_json, send};

/// Rows the tenant has: sessions, runs, messages.
pub async fn stored(ctx: &Ctx, t: &TenantFx) -> (u64, u64, u64) {
    let tenant: uuid::Uuid = t.id.parse().unwrap();
    let sessions = session::Entity::find()
        .filter(session::Column::TenantId.eq(tenant))
        .count(&ctx.db)
        .await
        .unwrap();
    let runs = execution::Entity::find()
        .filter(execution::Column::TenantId.eq(tenant))
        .count(&ctx.db)
        .await
        .unwrap();
    let messages = message::Entity::find()
        .filter(message::Column::TenantId.eq(tenant))
        .count(&ctx.db)
        .await
        .unwrap();
    (sessions, runs, messages)
}

/// Spend a budget of `budget` tokens with one run on `ctx`; returns its session.
pub async fn spend(ctx: &Ctx, t: &TenantFx, budget: u64) -> String {
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
    r["session_id"].as_str().unwrap().to_string()
}

fn refused(r: &Resp, what: &str) {
    assert_eq!(r.status, 429, "{what}: {}", r.body);
    let retry = r
        .headers
        .get("retry-after")
        .map(|v| v.to_str().unwrap().to_string());
    assert!(
        retry.is_some_and(|s| s.parse::<u64>().is_ok_and(|n| (1..=86_400).contains(&n))),
        "{what}: Retry-After until midnight UTC: {:?}",
        r.headers
    );
    // Our error JSON, or OpenAI's on /v1.
    let (code, quota) = if r.body.get("error").is_some_and(Value::is_object) {
        (
            r.body["error"]["code"].clone(),
            r.body["error"]["details"]["quota"].clone(),
        )
    } else {
        (
            r.body["error_code"].clone(),
            r.body["details"]["quota"].clone(),
        )
    };
    assert_eq!(code, "quota_exceeded", "{what}: {}", r.body);
    assert_eq!(quota, "tokens_per_day", "{what}: {}", r.body);
}

/// `replicas` serve the same tenant (one node: a single one). `burst` requests at once after
/// the budget is spent, over every chat route and replica: all 429, nothing stored.
pub async fn a_spent_budget_refuses_a_burst_and_stores_nothing(replicas: &[&Ctx], burst: usize) {
    let budget = 10;
    let a = replicas[0];
    let t = a
        .tenant_with(json!({ "tokens_per_day": budget, "requests_per_minute": 0 }))
        .await;
    let sid = spend(a, &t, budget).await;
    let before = stored(a, &t).await;
    // Sockets opened before the burst, one per replica, each sends a chat frame in it.
    let mut sockets = Vec::new();
    for r in replicas {
        sockets.push(ws_connect(r, &t.member.key, &sid).await);
    }
    let requests = futures::future::join_all((0..burst).map(|i| {
        let r = replicas[i % replicas.len()];
        let key = if i % 2 == 0 {
            t.member.key.clone()
        } else {
            t.member2.key.clone()
        };
        let sid = sid.clone();
        let owner = t.member.key.clone();
        async move {
            let (what, res) = match i % 5 {
                0 => (
                    "POST /chat",
                    r.call(
                        Method::POST,
                        "/api/v1/chat",
                        Some(&key),
                        Some(&json!({ "message": format!("burst {i}") })),
                    )
                    .await,
                ),
                1 => (
                    "POST /chat/stream",
                    r.call(
                        Method::POST,
                        "/api/v1/chat/stream",
                        Some(&key),
                        Some(&json!({ "message": format!("burst {i}") })),
                    )
                    .await,
                ),
                2 => (
                    "POST /v1/chat/completions",
                    r.call(
                        Method::POST,
                        "/v1/chat/completions",
                        Some(&key),
                        Some(&json!({
                            "model": "default",
                            "messages": [{"role": "user", "content": format!("burst {i}")}],
                            "stream": i % 10 == 2,
                        })),
                    )
                    .await,
                ),
                3 => (
                    "POST /chat into the session",
                    r.call(
                        Method::POST,
                        "/api/v1/chat",
                        Some(&owner),
                        Some(&json!({ "message": format!("burst {i}"), "session_id": sid })),
                    )
                    .await,
                ),
                _ => (
                    "POST /chat/stream into the session",
                    r.call(
                        Method::POST,
                        "/api/v1/chat/stream",
                        Some(&owner),
                        Some(&json!({ "message": format!("burst {i}"), "session_id": sid })),
                    )
                    .await,
                ),
            };
            (what, res)
        }
    }));
    let frames = futures::future::join_all(sockets.iter_mut().enumerate().map(|(i, ws)| async move {
        for n in 0..3 {
            send(
                ws,
                json!({"type": "chat", "payload": {"message": format!("frame {i}.{n}"), "enqueue": n > 0}}),
            )
            .await;
        }
        let mut events = Vec::new();
        for _ in 0..3 {
            events.push(next_json(ws).await);
        }
        events
    }));
    let (answers, events) = futures::join!(requests, frames);
    let mut by_route = std::collections::BTreeMap::<&str, usize>::new();
    for (what, r) in &answers {
        refused(r, what);
        *by_route.entry(*what).or_default() += 1;
    }
    for ev in events.iter().flatten() {
        assert_eq!(
            ev["event_type"], "error",
            "a chat frame over the spent budget: {ev}"
        );
        assert_eq!(ev["seq"], 0, "{ev}");
        assert_eq!(ev["data"]["error_code"], "quota_exceeded", "{ev}");
        assert_eq!(ev["data"]["details"]["quota"], "tokens_per_day", "{ev}");
    }
    eprintln!(
        "{burst} requests and {} frames over {} replica(s) after the budget was spent: all refused ({by_route:?})",
        events.iter().flatten().count(),
        replicas.len()
    );
    // Give anything that would have been written in the background the time to land.
    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    assert_eq!(
        stored(a, &t).await,
        before,
        "(sessions, runs, messages) after the refused burst"
    );
    // The REST lists agree.
    for key in [&t.member.key, &t.member2.key] {
        let runs = a
            .ok(Method::GET, "/api/v1/executions?limit=100", key, None, 200)
            .await;
        for run in runs["items"].as_array().unwrap() {
            assert_eq!(run["status"], "completed", "only the spending run: {run}");
        }
    }
}

/// A burst that crosses the budget is admitted only as far as the budget holds: each admitted
/// run holds its first model call's tokens from its admission (as large as the tenant's last
/// first call, learned here by one warm-up run per replica), so the requests that do not fit
/// are refused with 429 before anything is stored, and every admitted run completes — none is
/// stored as a `failed` run that ran out of budget at its first call. The budget ends at most
/// one call's reservation over.
pub async fn a_burst_is_admitted_only_as_far_as_the_budget_holds(replicas: &[&Ctx], burst: usize) {
    const RESERVE_OUTPUT: u64 = 1024;
    let budget: u64 = 14_000;
    let a = replicas[0];
    let t = a
        .tenant_with(json!({
            "tokens_per_day": budget,
            "requests_per_minute": 0,
            "max_concurrent_runs": 0,
            "max_sessions_per_user": 0,
        }))
        .await;
    // Same-sized messages: the warm-up's first call is what each burst run's first call costs.
    let mut warm_up = 0;
    for (i, r) in replicas.iter().enumerate() {
        let w = r
            .ok(
                Method::POST,
                "/api/v1/chat",
                &t.member.key,
                Some(json!({ "message": format!("/sleep 300\nburst w{i}") })),
                200,
            )
            .await;
        let done = w["events"].as_array().unwrap().last().unwrap().clone();
        assert_eq!(done["data"]["status"], "completed", "{done}");
        warm_up += done["data"]["token_usage"]["total"].as_u64().unwrap();
    }
    let (sessions_before, runs_before, _) = stored(a, &t).await;
    let answers = futures::future::join_all((0..burst).map(|i| {
        let r = replicas[i % replicas.len()];
        let key = if i % 2 == 0 {
            t.member.key.clone()
        } else {
            t.member2.key.clone()
        };
        async move {
            r.call(
                Method::POST,
                "/api/v1/chat",
                Some(&key),
                Some(&json!({ "message": format!("/sleep 300\nburst {i:02}") })),
            )
            .await
        }
    }))
    .await;
    let (mut completed, mut refused_n, mut used, mut max_input) = (0, 0, warm_up, 0);
    for r in &answers {
        if r.status == 429 {
            refused(r, "a request over the budget");
            refused_n += 1;
            continue;
        }
        assert_eq!(r.status, 200, "{}", r.body);
        let done = r.body["events"].as_array().unwrap().last().unwrap().clone();
        assert_eq!(
            done["data"]["status"], "completed",
            "an admitted run ran out of budget instead of being refused at admission: {}",
            r.body
        );
        completed += 1;
        used += done["data"]["token_usage"]["total"].as_u64().unwrap();
        max_input = max_input.max(done["data"]["token_usage"]["input"].as_u64().unwrap());
    }
    eprintln!(
        "tokens_per_day {budget}, burst of {burst} over {} replica(s): {completed} completed, \
         {refused_n} refused at admission, {used} tokens used",
        replicas.len()
    );
    assert!(completed >= 1, "some runs fit");
    assert!(refused_n >= 1, "{burst} runs do not fit in {budget} tokens");
    assert!(
        used <= budget + max_input + RESERVE_OUTPUT,
        "{used} tokens used of {budget}: more than one reservation over"
    );
    // Refused requests left nothing: one session and one run per admitted request.
    let (sessions, runs, _) = stored(a, &t).await;
    assert_eq!(sessions - sessions_before, completed as u64, "sessions");
    assert_eq!(runs - runs_before, completed as u64, "runs");
}
