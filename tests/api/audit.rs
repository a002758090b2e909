//! Audit queries (issue 17, item 4): `GET /executions` and `GET /tool-calls` filtered by user,
//! assistant, status, tool and time, paged; tenant admins see the tenant's rows, members their
//! own, and another tenant nothing.

use agentry_schema::entities::{execution, tool_call_log};
use agentry_schema::ids::RunId;
use chrono::{DateTime, Duration, Utc};
use reqwest::Method;
use sea_orm::sea_query::Expr;
use sea_orm::{ColumnTrait, EntityTrait, QueryFilter};
use serde_json::Value;

use crate::ctx::{Ctx, Seeded, TenantFx};

fn field(page: &Value, name: &str) -> Vec<String> {
    let mut v: Vec<String> = page["items"]
        .as_array()
        .unwrap_or_else(|| panic!("not a page: {page}"))
        .iter()
        .map(|i| i[name].as_str().unwrap().to_string())
        .collect();
    v.sort();
    v
}

fn sorted(mut v: Vec<String>) -> Vec<String> {
    v.sort();
    v
}

/// Move a seeded run (and its tool calls) back in time, and onto `assistant`.
async fn backdate(ctx: &Ctx, run: RunId, at: DateTime<Utc>, assistant: &str) {
    execution::Entity::update_many()
        .col_expr(execution::Column::StartedAt, Expr::value(at))
        .col_expr(execution::Column::AssistantId, Expr::value(assistant))
        .filter(execution::Column::Id.eq(run.0))
        .exec(&ctx.db)
        .await
        .unwrap();
    tool_call_log::Entity::update_many()
        .col_expr(tool_call_log::Column::CreatedAt, Expr::value(at))
        .filter(tool_call_log::Column::ExecutionId.eq(run.0))
        .exec(&ctx.db)
        .await
        .unwrap();
}

/// One more audited call of `tool` in the seeded run, ending in `error`.
async fn add_call(ctx: &Ctx, t: &TenantFx, s: &Seeded, tool: &str, error: Option<&str>) {
    agentry_store::tool_calls::insert(
        &ctx.db,
        &t.scope(),
        agentry_store::tool_calls::NewToolCallLog {
            session_id: s.session_id,
            execution_id: s.run_id,
            tool_call_id: format!("call_{tool}"),
            tool_name: tool.into(),
            input: serde_json::json!({}),
            output: error.is_none().then(|| serde_json::json!({"ok": true})),
            error: error.map(str::to_string),
            duration_ms: 3,
            approved: None,
            approved_by: None,
        },
    )
    .await
    .unwrap();
}

async fn get(ctx: &Ctx, path: &str, key: &str) -> Value {
    ctx.ok(Method::GET, path, key, None, 200).await
}

pub async fn audit_queries(ctx: &Ctx) {
    let a = ctx.tenant().await;
    let b = ctx.tenant().await;
    // Tenant A: the member's run on `default` now (read_file, write_file, execute failed), the
    // second member's run on `analyst` ten days ago (read_file, write_file), and the admin's run
    // on `default` forty days ago. Tenant B: one run of its member, same tools.
    let m1 = ctx.seed_session(&a, &a.member.user_id, 2, 2).await;
    add_call(ctx, &a, &m1, "execute", Some("permission_denied")).await;
    let m2 = ctx.seed_session(&a, &a.member2.user_id, 2, 2).await;
    backdate(ctx, m2.run_id, Utc::now() - Duration::days(10), "analyst").await;
    let ad = ctx.seed_session(&a, &a.admin.user_id, 2, 2).await;
    backdate(ctx, ad.run_id, Utc::now() - Duration::days(40), "default").await;
    let bx = ctx.seed_session(&b, &b.member.user_id, 2, 2).await;
    add_call(ctx, &b, &bx, "execute", Some("permission_denied")).await;
    let run = |s: &Seeded| s.run_id.to_string();
    let (r1, r2, r3) = (run(&m1), run(&m2), run(&ad));

    // The tenant admin: every run of the tenant, filtered.
    let all = get(ctx, "/api/v1/executions", &a.admin.key).await;
    assert_eq!(
        field(&all, "id"),
        sorted(vec![r1.clone(), r2.clone(), r3.clone()])
    );
    let by_tool = get(ctx, "/api/v1/executions?tool_name=execute", &a.admin.key).await;
    assert_eq!(field(&by_tool, "id"), vec![r1.clone()], "{by_tool}");
    assert_eq!(by_tool["total"], 1);
    let by_assistant = get(ctx, "/api/v1/executions?assistant_id=analyst", &a.admin.key).await;
    assert_eq!(field(&by_assistant, "id"), vec![r2.clone()]);
    let by_user = get(
        ctx,
        &format!("/api/v1/executions?user_id={}", a.member2.user_id),
        &a.admin.key,
    )
    .await;
    assert_eq!(field(&by_user, "id"), vec![r2.clone()]);
    let from = (Utc::now() - Duration::days(20)).to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
    let to = (Utc::now() - Duration::days(5)).to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
    let window = get(
        ctx,
        &format!("/api/v1/executions?from={from}&to={to}"),
        &a.admin.key,
    )
    .await;
    assert_eq!(field(&window, "id"), vec![r2.clone()], "{window}");
    let combined = get(
        ctx,
        &format!("/api/v1/executions?status=completed&tool_name=read_file&from={from}"),
        &a.admin.key,
    )
    .await;
    assert_eq!(field(&combined, "id"), sorted(vec![r1.clone(), r2.clone()]));
    // Paging: newest first, two pages of one and the total on each.
    let p1 = get(ctx, "/api/v1/executions?limit=1", &a.admin.key).await;
    let p2 = get(ctx, "/api/v1/executions?limit=1&offset=1", &a.admin.key).await;
    assert_eq!(
        (p1["total"].as_u64(), p2["total"].as_u64()),
        (Some(3), Some(3))
    );
    assert_eq!(p1["items"][0]["id"], r1.as_str());
    assert_eq!(p2["items"][0]["id"], r2.as_str());

    // Every call of a tool, for an auditor: with who made it and through which assistant.
    let reads = get(ctx, "/api/v1/tool-calls?tool_name=read_file", &a.admin.key).await;
    assert_eq!(reads["total"], 3, "{reads}");
    assert_eq!(
        field(&reads, "execution_id"),
        sorted(vec![r1.clone(), r2.clone(), r3.clone()])
    );
    let newest = &reads["items"][0];
    assert_eq!(newest["user_id"], a.member.user_id.as_str());
    assert_eq!(newest["assistant_id"], "default");
    assert_eq!(newest["session_id"], m1.session_id.to_string());
    assert_eq!(newest["input"]["file_path"], "a.txt");
    let failed = get(ctx, "/api/v1/tool-calls?status=error", &a.admin.key).await;
    assert_eq!(field(&failed, "tool_name"), vec!["execute".to_string()]);
    assert_eq!(failed["items"][0]["error"], "permission_denied");
    let ok = get(ctx, "/api/v1/tool-calls?status=ok", &a.admin.key).await;
    assert_eq!(ok["total"], 6);
    let analyst = get(
        ctx,
        &format!("/api/v1/tool-calls?assistant_id=analyst&to={to}"),
        &a.admin.key,
    )
    .await;
    assert_eq!(
        field(&analyst, "tool_name"),
        vec!["read_file".to_string(), "write_file".to_string()]
    );
    assert!(
        analyst["items"]
            .as_array()
            .unwrap()
            .iter()
            .all(|c| c["user_id"] == a.member2.user_id.as_str())
    );
    let of_run = get(
        ctx,
        &format!(
            "/api/v1/tool-calls?execution_id={r3}&session_id={}",
            ad.session_id
        ),
        &a.admin.key,
    )
    .await;
    assert_eq!(of_run["total"], 2);
    let page2 = get(ctx, "/api/v1/tool-calls?limit=2&offset=6", &a.admin.key).await;
    assert_eq!(
        (
            page2["total"].as_u64(),
            page2["items"].as_array().unwrap().len()
        ),
        (Some(7), 1)
    );

    // A member: their own runs and calls only, whatever the filter.
    let mine = get(ctx, "/api/v1/executions", &a.member.key).await;
    assert_eq!(field(&mine, "id"), vec![r1.clone()]);
    let mine = get(
        ctx,
        "/api/v1/executions?assistant_id=analyst",
        &a.member.key,
    )
    .await;
    assert_eq!(
        mine["total"], 0,
        "the second member's analyst run is not the member's"
    );
    let my_calls = get(ctx, "/api/v1/tool-calls", &a.member.key).await;
    assert_eq!(my_calls["total"], 3);
    let my_calls = get(
        ctx,
        &format!("/api/v1/tool-calls?user_id={}", a.member.user_id),
        &a.member.key,
    )
    .await;
    assert_eq!(my_calls["total"], 3);
    // …and the filters cannot reach another user's rows: naming them is refused, naming
    // their session or run finds nothing.
    for path in [
        format!("/api/v1/executions?user_id={}", a.member2.user_id),
        format!("/api/v1/tool-calls?user_id={}", a.admin.user_id),
    ] {
        let r = ctx
            .call(Method::GET, &path, Some(&a.member.key), None)
            .await;
        assert_eq!(
            (r.status, r.code()),
            (403, "forbidden"),
            "{path}: {}",
            r.body
        );
    }
    for path in [
        format!("/api/v1/tool-calls?execution_id={r2}"),
        format!("/api/v1/tool-calls?session_id={}", m2.session_id),
        format!("/api/v1/executions?session_id={}", m2.session_id),
    ] {
        let r = get(ctx, &path, &a.member.key).await;
        assert_eq!(r["total"], 0, "{path}: {r}");
    }

    // Another tenant: its own rows only; A's ids find nothing, A's users are nobody there.
    let theirs = get(ctx, "/api/v1/tool-calls?tool_name=execute", &b.admin.key).await;
    assert_eq!(field(&theirs, "execution_id"), vec![bx.run_id.to_string()]);
    for path in [
        format!("/api/v1/tool-calls?execution_id={r1}"),
        format!("/api/v1/tool-calls?user_id={}", a.member.user_id),
        format!("/api/v1/executions?user_id={}", a.member.user_id),
        format!("/api/v1/executions?session_id={}", m1.session_id),
    ] {
        let r = get(ctx, &path, &b.admin.key).await;
        assert_eq!(r["total"], 0, "{path}: {r}");
    }

    // Bad filters: 400 naming the parameter, for both lists.
    for (path, param) in [
        ("/api/v1/executions?from=yesterday", "from"),
        ("/api/v1/executions?to=2026-13-01T00:00:00Z", "to"),
        (
            "/api/v1/executions?from=2026-11-02T00:00:00Z&to=2026-11-01T00:00:00Z",
            "from",
        ),
        ("/api/v1/executions?user_id=nobody", "user_id"),
        ("/api/v1/executions?tool_name=", "tool_name"),
        ("/api/v1/executions?status=done", "status"),
        ("/api/v1/tool-calls?status=failed", "status"),
        ("/api/v1/tool-calls?execution_id=42", "execution_id"),
        ("/api/v1/tool-calls?limit=0", "limit"),
        ("/api/v1/tool-calls?assistant_id=", "assistant_id"),
    ] {
        let r = ctx.call(Method::GET, path, Some(&a.admin.key), None).await;
        assert_eq!(
            (r.status, r.code()),
            (400, "invalid_query"),
            "{path}: {}",
            r.body
        );
        assert_eq!(r.details()["parameter"], param, "{path}: {}", r.body);
    }
    let r = ctx
        .call(
            Method::GET,
            "/api/v1/tool-calls?colour=red",
            Some(&a.admin.key),
            None,
        )
        .await;
    assert_eq!(r.status, 400, "{}", r.body);
}
