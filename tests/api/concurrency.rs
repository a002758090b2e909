//! Runs at the same time: two tenants chatting at once over WebSockets each see only their own
//! events and data, and a session blocked on a slow model or a pending approval does not hold
//! up another (seed property 36). Run on the fake model servers of [`crate::fake_model`].

use std::collections::BTreeSet;

use agentry_fake_model::FakeModelServer;
use reqwest::Method;
use serde_json::{Value, json};

use crate::ctx::{Ctx, TenantFx};
use crate::fake_model::{chat, model_asked, until_type};
use crate::mcp::{types, ws_connect, ws_request};
use crate::streaming::{new_session, pending_request, send, text_of, until_done_or_hitl};

/// The ids of a listing's `items`, under `field`.
fn ids(page: &Value, field: &str) -> BTreeSet<String> {
    page["items"]
        .as_array()
        .unwrap_or_else(|| panic!("a listing: {page}"))
        .iter()
        .map(|i| i[field].as_str().unwrap().to_string())
        .collect()
}

/// One tenant's side: its session and run.
struct Side {
    t: TenantFx,
    session: String,
    run: String,
}

/// `me` sees its own session, messages, events and run, and none of `other`'s (404, never 403,
/// so nothing says they exist).
async fn sees_only_its_own(ctx: &Ctx, me: &Side, other: &Side) {
    let key = &me.t.member.key;
    let sessions = ctx
        .ok(Method::GET, "/api/v1/sessions", key, None, 200)
        .await;
    assert_eq!(
        ids(&sessions, "session_id"),
        BTreeSet::from([me.session.clone()])
    );
    let runs = ctx
        .ok(Method::GET, "/api/v1/executions", key, None, 200)
        .await;
    assert_eq!(ids(&runs, "id"), BTreeSet::from([me.run.clone()]));
    let mine = ctx
        .ok(
            Method::GET,
            &format!("/api/v1/sessions/{}/messages", me.session),
            key,
            None,
            200,
        )
        .await;
    assert_eq!(mine["total"], 2, "{mine}");
    let s = &other.session;
    for path in [
        format!("/api/v1/sessions/{s}"),
        format!("/api/v1/sessions/{s}/messages"),
        format!("/api/v1/sessions/{s}/events"),
        format!("/api/v1/executions/{}", other.run),
        format!("/api/v1/executions?session_id={s}"),
    ] {
        let r = ctx.call(Method::GET, &path, Some(key), None).await;
        if path.contains("?session_id") {
            // A filter on someone else's session finds nothing rather than saying it exists.
            assert_eq!(
                (r.status, &r.body["total"]),
                (200, &json!(0)),
                "{path}: {}",
                r.body
            );
        } else {
            assert_eq!(
                (r.status, r.code()),
                (404, "not_found"),
                "{path}: {}",
                r.body
            );
        }
    }
    // The tenant's admin, who sees every session of the tenant, sees none of the other's.
    for (path, field, want) in [
        ("/api/v1/sessions", "session_id", &me.session),
        ("/api/v1/executions", "id", &me.run),
    ] {
        let page = ctx.ok(Method::GET, path, &me.t.admin.key, None, 200).await;
        assert_eq!(ids(&page, field), BTreeSet::from([want.clone()]), "{path}");
    }
    for path in [
        format!("/api/v1/sessions/{s}/cancel"),
        format!("/api/v1/sessions/{s}/approvals/{}", uuid::Uuid::now_v7()),
    ] {
        let r = ctx
            .call(
                Method::POST,
                &path,
                Some(key),
                Some(&json!({"type": "approve"})),
            )
            .await;
        assert_eq!(r.status, 404, "{path}: {}", r.body);
    }
    match tokio_tungstenite::connect_async(ws_request(ctx, key, s, "")).await {
        Err(tokio_tungstenite::tungstenite::Error::Http(res)) => assert_eq!(res.status(), 404),
        other => panic!("another tenant's socket opened: {:?}", other.map(|_| ())),
    }
}

/// Two tenants chat at the same time, each over its own WebSocket: the runs overlap, every
/// event a socket gets is its own session's, and afterwards neither can reach the other's data.
pub async fn two_tenants_at_once(ctx: &Ctx, fake: &FakeModelServer) {
    let (a, b) = (ctx.tenant().await, ctx.tenant().await);
    let sa = new_session(ctx, &a.member.key).await;
    let sb = new_session(ctx, &b.member.key).await;
    let mut wa = ws_connect(ctx, &a.member.key, &sa).await;
    let mut wb = ws_connect(ctx, &b.member.key, &sb).await;
    // Both wait on the model for a while, so the runs are live together.
    let before = fake.request_count();
    chat(&mut wa, "/sleep 700\nhello from A").await;
    chat(&mut wb, "/sleep 700\nhello from B").await;
    let (ea, eb) = tokio::join!(until_done_or_hitl(&mut wa), until_done_or_hitl(&mut wb));
    assert!(fake.request_count() >= before + 2);
    for (evs, session, said) in [(&ea, &sa, "A"), (&eb, &sb, "B")] {
        assert_eq!(
            evs.last().unwrap()["data"]["status"],
            "completed",
            "{evs:?}"
        );
        assert_eq!(
            text_of(evs),
            format!("(scripted) You said: hello from {said}")
        );
        let run = &evs[0]["run_id"];
        assert!(
            evs.iter()
                .all(|e| e["session_id"] == session.as_str() && e["run_id"] == *run),
            "a socket got another session's or run's event: {evs:?}"
        );
    }
    let side = |t: &TenantFx, session: &str, evs: &[Value]| Side {
        t: t.clone(),
        session: session.to_string(),
        run: evs[0]["run_id"].as_str().unwrap().to_string(),
    };
    let (a, b) = (side(&a, &sa, &ea), side(&b, &sb, &eb));
    // The runs really overlapped: each started before the other finished.
    let exec = |s: &Side| {
        let path = format!("/api/v1/executions/{}", s.run);
        let key = s.t.member.key.clone();
        async move { ctx.ok(Method::GET, &path, &key, None, 200).await }
    };
    let (xa, xb) = (exec(&a).await, exec(&b).await);
    let at = |x: &Value, f: &str| {
        x[f].as_str()
            .unwrap()
            .parse::<chrono::DateTime<chrono::Utc>>()
            .unwrap()
    };
    assert!(
        at(&xa, "started_at") < at(&xb, "completed_at")
            && at(&xb, "started_at") < at(&xa, "completed_at"),
        "the runs did not overlap: {xa} {xb}"
    );
    sees_only_its_own(ctx, &a, &b).await;
    sees_only_its_own(ctx, &b, &a).await;
}

/// One user, three sessions, three sockets: one waits on an approval, one on a model that has
/// not answered; the third still completes, and the other two then finish as decided.
pub async fn sessions_do_not_block_each_other(ctx: &Ctx, fake: &FakeModelServer) {
    let t = ctx.tenant().await;
    let key = &t.member.key;
    let (s1, s2, s3) = (
        new_session(ctx, key).await,
        new_session(ctx, key).await,
        new_session(ctx, key).await,
    );
    let mut waiting = ws_connect(ctx, key, &s1).await;
    let mut slow = ws_connect(ctx, key, &s2).await;
    let mut free = ws_connect(ctx, key, &s3).await;

    chat(
        &mut waiting,
        r#"/tool write_file {"file_path": "pending.txt", "content": "x"}"#,
    )
    .await;
    let hitl = until_type(&mut waiting, "hitl_request").await;
    let request = pending_request(&hitl);
    let before = fake.request_count();
    chat(&mut slow, "/sleep 120000\nmuch later").await;
    model_asked(fake, before).await;

    chat(&mut free, "/echo not blocked").await;
    let evs = until_done_or_hitl(&mut free).await;
    assert_eq!(text_of(&evs), "not blocked");
    assert_eq!(evs.last().unwrap()["data"]["status"], "completed");
    // …while the other two are still where they were.
    let status = |s: &str| {
        let path = format!("/api/v1/executions?session_id={s}");
        async move {
            ctx.ok(Method::GET, &path, key, None, 200).await["items"][0]["status"]
                .as_str()
                .unwrap()
                .to_string()
        }
    };
    assert_eq!(status(&s1).await, "waiting_approval");
    assert_eq!(status(&s2).await, "running");

    send(
        &mut waiting,
        json!({"type": "hitl_decision", "payload": {"request_id": request, "type": "approve"}}),
    )
    .await;
    let evs = until_type(&mut waiting, "done").await;
    assert!(types(&evs).contains(&"file_operation"), "{evs:?}");
    assert_eq!(evs.last().unwrap()["data"]["status"], "completed");
    send(&mut slow, json!({"type": "cancel", "payload": {}})).await;
    let evs = until_type(&mut slow, "done").await;
    assert_eq!(evs.last().unwrap()["data"]["status"], "cancelled");
}
