//! Who sees what: a member sees their own sessions, messages, events and runs; a tenant admin
//! sees the tenant's; another tenant sees nothing of it (404, never 403). Pages come in order.

use reqwest::Method;
use serde_json::Value;

use crate::ctx::Ctx;

fn ids(page: &Value, field: &str) -> Vec<String> {
    page["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i[field].as_str().unwrap().to_string())
        .collect()
}

pub async fn members_admins_and_tenants(ctx: &Ctx) {
    let a = ctx.tenant().await;
    let b = ctx.tenant().await;
    let s1 = ctx.seed_session(&a, &a.member.user_id, 3, 3).await;
    let s2 = ctx.seed_session(&a, &a.member2.user_id, 3, 3).await;
    let sb = ctx.seed_session(&b, &b.member.user_id, 3, 3).await;
    let (s1id, s2id, sbid) = (
        s1.session_id.to_string(),
        s2.session_id.to_string(),
        sb.session_id.to_string(),
    );

    // Lists.
    let m1 = ctx
        .ok(Method::GET, "/api/v1/sessions", &a.member.key, None, 200)
        .await;
    assert_eq!(
        (ids(&m1, "session_id"), m1["total"].as_u64()),
        (vec![s1id.clone()], Some(1))
    );
    assert_eq!(m1["items"][0]["user_id"], a.member.user_id.as_str());
    assert_eq!(m1["items"][0]["assistant_id"], "default");
    assert_eq!(m1["items"][0]["state"], "idle");
    assert_eq!(m1["items"][0]["metadata"]["seeded"], true);
    let adm = ctx
        .ok(Method::GET, "/api/v1/sessions", &a.admin.key, None, 200)
        .await;
    let mut got = ids(&adm, "session_id");
    got.sort();
    let mut want = vec![s1id.clone(), s2id.clone()];
    want.sort();
    assert_eq!(got, want);
    let only2 = ctx
        .ok(
            Method::GET,
            &format!("/api/v1/sessions?user_id={}", a.member2.user_id),
            &a.admin.key,
            None,
            200,
        )
        .await;
    assert_eq!(ids(&only2, "session_id"), vec![s2id.clone()]);
    let own = ctx
        .ok(
            Method::GET,
            &format!("/api/v1/sessions?user_id={}", a.member.user_id),
            &a.member.key,
            None,
            200,
        )
        .await;
    assert_eq!(ids(&own, "session_id"), vec![s1id.clone()]);
    let r = ctx
        .call(
            Method::GET,
            &format!("/api/v1/sessions?user_id={}", a.member2.user_id),
            Some(&a.member.key),
            None,
        )
        .await;
    assert_eq!((r.status, r.code()), (403, "forbidden"));
    let bl = ctx
        .ok(Method::GET, "/api/v1/sessions", &b.admin.key, None, 200)
        .await;
    assert_eq!(ids(&bl, "session_id"), vec![sbid.clone()]);
    // B's admin filtering by A's user finds nothing.
    let bl = ctx
        .ok(
            Method::GET,
            &format!("/api/v1/sessions?user_id={}", a.member.user_id),
            &b.admin.key,
            None,
            200,
        )
        .await;
    assert_eq!(bl["total"], 0);

    // Rows: own → 200, a colleague's (member) → 404, admin → 200, another tenant → 404.
    for suffix in ["", "/messages", "/events"] {
        let own = format!("/api/v1/sessions/{s1id}{suffix}");
        let other = format!("/api/v1/sessions/{s2id}{suffix}");
        let foreign = format!("/api/v1/sessions/{sbid}{suffix}");
        assert_eq!(
            ctx.call(Method::GET, &own, Some(&a.member.key), None)
                .await
                .status,
            200,
            "{own}"
        );
        let r = ctx
            .call(Method::GET, &other, Some(&a.member.key), None)
            .await;
        assert_eq!((r.status, r.code()), (404, "not_found"), "{other}");
        assert_eq!(
            ctx.call(Method::GET, &other, Some(&a.admin.key), None)
                .await
                .status,
            200,
            "{other}"
        );
        for key in [&a.admin.key, &a.member.key] {
            let r = ctx.call(Method::GET, &foreign, Some(key), None).await;
            assert_eq!((r.status, r.code()), (404, "not_found"), "{foreign}");
        }
        assert_eq!(
            ctx.call(Method::GET, &own, Some(&b.admin.key), None)
                .await
                .status,
            404
        );
    }
    let info = ctx
        .ok(
            Method::GET,
            &format!("/api/v1/sessions/{s1id}"),
            &a.member.key,
            None,
            200,
        )
        .await;
    assert_eq!(info["session_id"], s1id.as_str());
    assert!(info["created_at"].is_string() && info["last_active"].is_string());

    // Runs.
    let e1 = ctx
        .ok(Method::GET, "/api/v1/executions", &a.member.key, None, 200)
        .await;
    assert_eq!(ids(&e1, "id"), vec![s1.run_id.to_string()]);
    let ea = ctx
        .ok(Method::GET, "/api/v1/executions", &a.admin.key, None, 200)
        .await;
    assert_eq!(ea["total"], 2);
    let by_session = ctx
        .ok(
            Method::GET,
            &format!("/api/v1/executions?session_id={s2id}"),
            &a.admin.key,
            None,
            200,
        )
        .await;
    assert_eq!(ids(&by_session, "id"), vec![s2.run_id.to_string()]);
    let done = ctx
        .ok(
            Method::GET,
            "/api/v1/executions?status=completed",
            &a.admin.key,
            None,
            200,
        )
        .await;
    assert_eq!(done["total"], 2);
    let running = ctx
        .ok(
            Method::GET,
            "/api/v1/executions?status=running",
            &a.admin.key,
            None,
            200,
        )
        .await;
    assert_eq!(running["total"], 0);
    // A member filtering by a colleague's session sees nothing of it.
    let none = ctx
        .ok(
            Method::GET,
            &format!("/api/v1/executions?session_id={s2id}"),
            &a.member.key,
            None,
            200,
        )
        .await;
    assert_eq!(none["total"], 0);
    let eb = ctx
        .ok(Method::GET, "/api/v1/executions", &b.admin.key, None, 200)
        .await;
    assert_eq!(ids(&eb, "id"), vec![sb.run_id.to_string()]);

    let detail = ctx
        .ok(
            Method::GET,
            &format!("/api/v1/executions/{}", s1.run_id),
            &a.member.key,
            None,
            200,
        )
        .await;
    assert_eq!(detail["id"], s1.run_id.to_string());
    assert_eq!(detail["session_id"], s1id.as_str());
    assert_eq!(detail["status"], "completed");
    assert_eq!(detail["steps"], 3);
    assert_eq!(
        detail["token_usage"],
        serde_json::json!({ "input": 100, "output": 20, "total": 120 })
    );
    assert!(detail["completed_at"].is_string());
    let calls = detail["tool_calls"].as_array().unwrap();
    assert_eq!(calls.len(), 2);
    assert_eq!(
        (
            calls[0]["tool_name"].as_str(),
            calls[1]["tool_name"].as_str()
        ),
        (Some("read_file"), Some("write_file"))
    );
    assert!(calls[0]["approved"].is_null());
    assert_eq!(calls[1]["approved"], true);
    assert_eq!(calls[1]["approved_by"], a.member.user_id.as_str());
    assert_eq!(calls[0]["input"]["file_path"], "a.txt");
    assert_eq!(calls[0]["duration_ms"], 7);
    let approvals = detail["approvals"].as_array().unwrap();
    assert_eq!(approvals.len(), 1);
    assert_eq!(
        (
            approvals[0]["status"].as_str(),
            approvals[0]["kind"].as_str()
        ),
        (Some("approved"), Some("approval"))
    );
    for (key, want) in [
        (&a.member.key, 404),
        (&a.admin.key, 200),
        (&b.admin.key, 404),
    ] {
        let r = ctx
            .call(
                Method::GET,
                &format!("/api/v1/executions/{}", s2.run_id),
                Some(key),
                None,
            )
            .await;
        assert_eq!(r.status, want);
    }
    let r = ctx
        .call(
            Method::GET,
            &format!("/api/v1/executions/{}", uuid::Uuid::new_v4()),
            Some(&a.admin.key),
            None,
        )
        .await;
    assert_eq!((r.status, r.code()), (404, "not_found"));
}

/// Messages page by `limit`/`offset`, oldest first; events by `after_seq`/`limit`, in order,
/// with no gap and no duplicate across pages.
pub async fn pagination(ctx: &Ctx) {
    let t = ctx.tenant().await;
    let s = ctx.seed_session(&t, &t.member.user_id, 25, 30).await;
    let key = &t.member.key;
    let base = format!("/api/v1/sessions/{}", s.session_id);
    let contents = |page: &Value| -> Vec<String> {
        page["items"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| m["content"].as_str().unwrap().to_string())
            .collect()
    };
    let p = ctx
        .ok(
            Method::GET,
            &format!("{base}/messages?limit=10"),
            key,
            None,
            200,
        )
        .await;
    assert_eq!(
        (
            p["total"].as_u64(),
            p["limit"].as_u64(),
            p["offset"].as_u64()
        ),
        (Some(25), Some(10), Some(0))
    );
    assert_eq!(
        contents(&p),
        (0..10).map(|i| format!("message {i}")).collect::<Vec<_>>()
    );
    assert_eq!(p["items"][0]["role"], "user");
    assert_eq!(p["items"][1]["role"], "assistant");
    assert_eq!(p["items"][0]["run_id"], s.run_id.to_string());
    let p = ctx
        .ok(
            Method::GET,
            &format!("{base}/messages?limit=10&offset=20"),
            key,
            None,
            200,
        )
        .await;
    assert_eq!(
        contents(&p),
        (20..25).map(|i| format!("message {i}")).collect::<Vec<_>>()
    );
    let p = ctx
        .ok(
            Method::GET,
            &format!("{base}/messages?offset=100"),
            key,
            None,
            200,
        )
        .await;
    assert_eq!((contents(&p).len(), p["total"].as_u64()), (0, Some(25)));
    let p = ctx
        .ok(Method::GET, &format!("{base}/messages"), key, None, 200)
        .await;
    assert_eq!(contents(&p).len(), 25);

    // Events: walk the pages.
    let mut after = 0;
    let mut seen = Vec::new();
    loop {
        let page = ctx
            .ok(
                Method::GET,
                &format!("{base}/events?after_seq={after}&limit=7"),
                key,
                None,
                200,
            )
            .await;
        assert_eq!(page["session_id"], s.session_id.to_string());
        let evs = page["events"].as_array().unwrap();
        for e in evs {
            assert_eq!(e["event_type"], "text");
            assert_eq!(e["data"]["content"], format!("part {}", e["seq"]));
            seen.push(e["seq"].as_u64().unwrap());
        }
        let next = page["next_after_seq"].as_u64().unwrap();
        if !page["has_more"].as_bool().unwrap() {
            assert_eq!(next, 30);
            break;
        }
        assert_eq!(evs.len(), 7);
        after = next;
    }
    assert_eq!(seen, (1..=30).collect::<Vec<_>>());
    let tail = ctx
        .ok(
            Method::GET,
            &format!("{base}/events?after_seq=30"),
            key,
            None,
            200,
        )
        .await;
    assert_eq!(
        (
            tail["events"].as_array().unwrap().len(),
            tail["next_after_seq"].as_u64(),
            tail["has_more"].as_bool()
        ),
        (0, Some(30), Some(false))
    );
}
