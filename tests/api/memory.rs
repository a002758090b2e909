//! Long-term memory (issue 17, item 1; docs/memory.md) through the real server: the REST API
//! per scope with every documented answer, semantic search with the fake model's embeddings
//! ("relational datastore" finds "We run PostgreSQL 16"), the top-k memories relevant to the
//! message in the prompt the model receives, scope isolation (users, members against shared
//! scopes, assistants, tenants), expiry, `forget`, the keyword fallback without (or with a
//! failing) embeddings endpoint, and automatic extraction with duplicates merged.

use std::time::Duration;

use agentry_fake_model::{DefaultReply, FakeModelServer, FakeReply};
use reqwest::Method;
use serde_json::{Value, json};

use crate::ctx::{ADMIN_KEY, Ctx};

/// A server whose model and embeddings are the fake model server's.
pub async fn start_semantic(
    db_url: Option<&str>,
    extra: &[(&str, &str)],
) -> (FakeModelServer, Ctx) {
    let fake = agentry_fake_model::FakeModelServer::start(agentry_fake_model::FakeConfig {
        api_key: Some("fake-model-key".into()),
        default_reply: DefaultReply::Auto,
        ..agentry_fake_model::FakeConfig::default()
    });
    let base = fake.base_url_openai();
    let mut env = vec![
        ("AGENTRY_LLM__PROVIDER", "openai"),
        ("AGENTRY_LLM__BASE_URL", base.as_str()),
        ("AGENTRY_LLM__API_KEY", "fake-model-key"),
        ("AGENTRY_LLM__MODEL", "fake-large"),
        ("AGENTRY_EMBEDDINGS__BASE_URL", base.as_str()),
        ("AGENTRY_EMBEDDINGS__API_KEY", "fake-model-key"),
        ("AGENTRY_EMBEDDINGS__MODEL", "fake-embedding"),
    ];
    env.extend_from_slice(extra);
    let ctx = Ctx::start_with(&env, db_url).await;
    (fake, ctx)
}

async fn remember(ctx: &Ctx, key: &str, body: Value) -> Value {
    let r = ctx
        .call(Method::POST, "/api/v1/memories", Some(key), Some(&body))
        .await;
    assert_eq!(r.status, 201, "{}", r.body);
    r.body
}

async fn search(ctx: &Ctx, key: &str, query: &str) -> Value {
    ctx.ok(
        Method::GET,
        &format!("/api/v1/memories/search?{}", query),
        key,
        None,
        200,
    )
    .await
}

fn contents(items: &Value) -> Vec<String> {
    items
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["content"].as_str().unwrap().to_string())
        .collect()
}

async fn chat(ctx: &Ctx, key: &str, assistant: &str, message: &str) -> Value {
    let r = ctx
        .ok(
            Method::POST,
            "/api/v1/chat",
            key,
            Some(json!({"message": message, "assistant_id": assistant})),
            200,
        )
        .await;
    let events = r["events"].as_array().unwrap();
    assert_eq!(events.last().unwrap()["data"]["status"], "completed", "{r}");
    r
}

/// The system prompt of chat request `index`.
fn system_prompt(fake: &FakeModelServer, index: usize) -> String {
    crate::profiles::prompt_and_tools(fake, index).0
}

/// The result of the last tool call the model was shown (the last request's last tool
/// message).
fn last_tool_result(fake: &FakeModelServer) -> Value {
    let reqs = fake.requests();
    let messages = reqs.last().unwrap().body["messages"]
        .as_array()
        .unwrap()
        .clone();
    let tool = messages
        .iter()
        .rev()
        .find(|m| m["role"] == "tool")
        .expect("a tool message");
    serde_json::from_str(tool["content"].as_str().unwrap()).unwrap()
}

/// A tool call, then a closing text: one chat that calls `tool` with `args`; returns the
/// result the model got.
async fn call_tool(
    ctx: &Ctx,
    fake: &FakeModelServer,
    key: &str,
    assistant: &str,
    tool: &str,
    args: Value,
) -> Value {
    fake.push(FakeReply::tool_call(
        &crate::ctx::unique("call"),
        tool,
        args,
    ));
    fake.push(FakeReply::text("done"));
    chat(ctx, key, assistant, &format!("please use {tool}")).await;
    last_tool_result(fake)
}

/// REST: every route and every documented answer (the completeness test runs this), scopes
/// and who may write them, another user's and another tenant's memories invisible.
pub async fn memory_rest_flow(ctx: &Ctx) {
    let t = ctx.tenant().await;
    let b = ctx.tenant().await;
    let (admin, member, member2) = (&t.admin.key, &t.member.key, &t.member2.key);

    // Create: 201 with a Location; user scope by default.
    let r = ctx
        .call(
            Method::POST,
            "/api/v1/memories",
            Some(member),
            Some(&json!({"content": "Prefers dark mode", "kind": "preference"})),
        )
        .await;
    assert_eq!(r.status, 201, "{}", r.body);
    let mine = r.body["id"].as_str().unwrap().to_string();
    assert_eq!(
        r.headers["location"].to_str().unwrap(),
        format!("/api/v1/memories/{mine}")
    );
    assert_eq!(
        (
            r.body["scope"].as_str(),
            r.body["kind"].as_str(),
            r.body["user_id"].as_str(),
            r.body["embedded"].as_bool()
        ),
        (
            Some("user"),
            Some("preference"),
            Some(t.member.user_id.as_str()),
            Some(false)
        ),
        "no embeddings on this server: {}",
        r.body
    );
    // The same words again (case and punctuation aside): merged, 200, same id.
    let r = ctx
        .call(
            Method::POST,
            "/api/v1/memories",
            Some(member),
            Some(&json!({"content": "prefers DARK mode!", "kind": "preference"})),
        )
        .await;
    assert_eq!(
        (r.status, r.body["id"].as_str()),
        (200, Some(mine.as_str())),
        "{}",
        r.body
    );
    assert_eq!(r.body["content"], "prefers DARK mode!");
    // Shared scopes: admins only.
    for body in [
        json!({"content": "Company VPN is WireGuard", "scope": "tenant"}),
        json!({"content": "Support hours are 9-17", "scope": "assistant", "assistant_id": "default"}),
    ] {
        let r = ctx
            .call(Method::POST, "/api/v1/memories", Some(member), Some(&body))
            .await;
        assert_eq!((r.status, r.code()), (403, "forbidden"), "{}", r.body);
    }
    let tenant_mem = remember(
        ctx,
        admin,
        json!({"content": "Company VPN is WireGuard", "scope": "tenant"}),
    )
    .await;
    let tenant_id = tenant_mem["id"].as_str().unwrap().to_string();
    let assistant_mem = remember(
        ctx,
        admin,
        json!({"content": "Support hours are 9-17", "scope": "assistant", "assistant_id": "default"}),
    )
    .await;
    assert_eq!(assistant_mem["assistant_id"], "default");
    // Bad bodies: 422 naming the field, nothing stored; not JSON: 400.
    for (body, field) in [
        (json!({"content": "   "}), "content"),
        (json!({"content": "x".repeat(4001)}), "content"),
        (json!({"content": "x", "kind": "gossip"}), "kind"),
        (
            json!({"content": "x", "scope": "assistant"}),
            "assistant_id",
        ),
        (
            json!({"content": "x", "assistant_id": "default"}),
            "assistant_id",
        ),
        (
            json!({"content": "x", "expires_at": "2001-01-01T00:00:00Z"}),
            "expires_at",
        ),
        (
            json!({"content": "x", "scope": "assistant", "assistant_id": "nope"}),
            "assistant_id",
        ),
        (json!({"content": "x", "scope": "everyone"}), ""),
        (json!({"content": "x", "colour": "red"}), ""),
    ] {
        let r = ctx
            .call(Method::POST, "/api/v1/memories", Some(admin), Some(&body))
            .await;
        assert_eq!(
            (r.status, r.code()),
            (422, "validation_error"),
            "{body}: {}",
            r.body
        );
        if !field.is_empty() {
            assert_eq!(r.details()["field"], field, "{body}: {}", r.body);
        }
    }
    let r = ctx
        .send(
            ctx.request(Method::POST, "/api/v1/memories", Some(admin))
                .header("content-type", "application/json")
                .body("{not json"),
        )
        .await;
    assert_eq!(r.status, 400, "{}", r.body);
    // Not JSON by its type (415) and over the body limit (413), on both writes.
    let huge = json!({"content": "x".repeat(crate::ctx::BODY_LIMIT + 1)});
    for (method, path) in [
        (Method::POST, "/api/v1/memories".to_string()),
        (Method::PATCH, format!("/api/v1/memories/{mine}")),
    ] {
        let r = ctx
            .send(
                ctx.request(method.clone(), &path, Some(member))
                    .header("content-type", "text/plain")
                    .body("content"),
            )
            .await;
        assert_eq!(r.status, 415, "{method} {path}: {}", r.body);
        let r = ctx
            .call(method.clone(), &path, Some(member), Some(&huge))
            .await;
        assert_eq!(r.status, 413, "{method} {path}: {}", r.body);
    }

    // List per scope: the member's own, the tenant's, the assistant's.
    let own = ctx
        .ok(Method::GET, "/api/v1/memories", member, None, 200)
        .await;
    assert_eq!(
        (contents(&own["items"]), own["total"].as_u64()),
        (vec!["prefers DARK mode!".to_string()], Some(1))
    );
    let shared = ctx
        .ok(
            Method::GET,
            "/api/v1/memories?scope=tenant",
            member,
            None,
            200,
        )
        .await;
    assert_eq!(contents(&shared["items"]), vec!["Company VPN is WireGuard"]);
    let of_default = ctx
        .ok(
            Method::GET,
            "/api/v1/memories?scope=assistant&assistant_id=default",
            member,
            None,
            200,
        )
        .await;
    assert_eq!(
        contents(&of_default["items"]),
        vec!["Support hours are 9-17"]
    );
    let of_other = ctx
        .ok(
            Method::GET,
            "/api/v1/memories?scope=assistant&assistant_id=other",
            member,
            None,
            200,
        )
        .await;
    assert_eq!(of_other["total"], 0);
    // The second member and the admin do not see the first member's own memory.
    for key in [member2, admin] {
        let r = ctx
            .ok(Method::GET, "/api/v1/memories", key, None, 200)
            .await;
        assert!(
            !contents(&r["items"]).iter().any(|c| c.contains("DARK")),
            "{r}"
        );
        let r = ctx
            .call(
                Method::GET,
                &format!("/api/v1/memories/{mine}"),
                Some(key),
                None,
            )
            .await;
        assert_eq!((r.status, r.code()), (404, "not_found"), "{}", r.body);
        let r = search(ctx, key, "q=dark+mode").await;
        assert_eq!(r["items"], json!([]), "{r}");
    }
    for bad in [
        "/api/v1/memories?scope=everyone",
        "/api/v1/memories?assistant_id=default",
        "/api/v1/memories?scope=assistant&assistant_id=Not%20A%20Slug",
        "/api/v1/memories?limit=0",
        "/api/v1/memories?colour=red",
        "/api/v1/memories/search",
        "/api/v1/memories/search?q=%20",
        "/api/v1/memories/search?q=x&limit=51",
        "/api/v1/memories/search?q=x&scope=everyone",
    ] {
        let r = ctx.call(Method::GET, bad, Some(member), None).await;
        assert_eq!(
            (r.status, r.code()),
            (400, "invalid_query"),
            "{bad}: {}",
            r.body
        );
    }

    // Search over REST without embeddings: by words, and it says so.
    let r = search(ctx, member, "q=which+VPN+do+we+use").await;
    assert_eq!(r["search"], "keyword", "{r}");
    assert!(
        r["note"].as_str().unwrap().contains("no embeddings model"),
        "{r}"
    );
    assert_eq!(contents(&r["items"]), vec!["Company VPN is WireGuard"]);
    assert!(r["items"][0]["score"].as_f64().unwrap() > 0.0);
    let r = search(ctx, member, "q=VPN&scope=user").await;
    assert_eq!(r["items"], json!([]), "{r}");

    // Get, patch, delete: the member's own.
    let got = ctx
        .ok(
            Method::GET,
            &format!("/api/v1/memories/{mine}"),
            member,
            None,
            200,
        )
        .await;
    assert_eq!(got["content"], "prefers DARK mode!");
    let r = ctx
        .call(
            Method::GET,
            "/api/v1/memories/not-an-id",
            Some(member),
            None,
        )
        .await;
    assert_eq!(r.status, 400, "{}", r.body);
    let patched = ctx
        .ok(
            Method::PATCH,
            &format!("/api/v1/memories/{mine}"),
            member,
            Some(json!({"content": "Prefers light mode", "kind": "decision"})),
            200,
        )
        .await;
    assert_eq!(
        (patched["content"].as_str(), patched["kind"].as_str()),
        (Some("Prefers light mode"), Some("decision"))
    );
    for (body, field) in [
        (json!({"content": ""}), "content"),
        (json!({"kind": "gossip"}), "kind"),
        (json!({"expires_at": "2001-01-01T00:00:00Z"}), "expires_at"),
    ] {
        let r = ctx
            .call(
                Method::PATCH,
                &format!("/api/v1/memories/{mine}"),
                Some(member),
                Some(&body),
            )
            .await;
        assert_eq!(
            (r.status, r.details()["field"].as_str()),
            (422, Some(field)),
            "{body}: {}",
            r.body
        );
    }
    let r = ctx
        .call(
            Method::PATCH,
            "/api/v1/memories/not-an-id",
            Some(member),
            Some(&json!({})),
        )
        .await;
    assert_eq!(r.status, 400, "{}", r.body);
    // A member may read the tenant's memory but not change or delete it.
    ctx.ok(
        Method::GET,
        &format!("/api/v1/memories/{tenant_id}"),
        member,
        None,
        200,
    )
    .await;
    let r = ctx
        .call(
            Method::PATCH,
            &format!("/api/v1/memories/{tenant_id}"),
            Some(member),
            Some(&json!({"content": "hijacked"})),
        )
        .await;
    assert_eq!((r.status, r.code()), (403, "forbidden"), "{}", r.body);
    let r = ctx
        .call(
            Method::DELETE,
            &format!("/api/v1/memories/{tenant_id}"),
            Some(member),
            None,
        )
        .await;
    assert_eq!((r.status, r.code()), (403, "forbidden"), "{}", r.body);
    // Another tenant sees none of it, by id or by search, and cannot touch it.
    for id in [&mine, &tenant_id] {
        for (method, body) in [
            (Method::GET, None),
            (Method::PATCH, Some(json!({"content": "hijacked"}))),
            (Method::DELETE, None),
        ] {
            let r = ctx
                .call(
                    method.clone(),
                    &format!("/api/v1/memories/{id}"),
                    Some(&b.admin.key),
                    body.as_ref(),
                )
                .await;
            assert_eq!(r.status, 404, "{method} {id}: {}", r.body);
        }
    }
    let r = search(ctx, &b.admin.key, "q=VPN").await;
    assert_eq!(r["items"], json!([]), "{r}");
    let r = ctx
        .ok(
            Method::GET,
            "/api/v1/memories?scope=tenant",
            &b.admin.key,
            None,
            200,
        )
        .await;
    assert_eq!(r["total"], 0);
    // The platform key has no tenant.
    let r = ctx
        .call(Method::GET, "/api/v1/memories", Some(ADMIN_KEY), None)
        .await;
    assert_eq!(r.status, 403);
    // Delete: 204, then 404; a bad id 400.
    let r = ctx
        .call(
            Method::DELETE,
            &format!("/api/v1/memories/{mine}"),
            Some(member),
            None,
        )
        .await;
    assert_eq!(r.status, 204, "{}", r.body);
    let r = ctx
        .call(
            Method::DELETE,
            &format!("/api/v1/memories/{mine}"),
            Some(member),
            None,
        )
        .await;
    assert_eq!((r.status, r.code()), (404, "not_found"), "{}", r.body);
    let r = ctx
        .call(
            Method::PATCH,
            &format!("/api/v1/memories/{mine}"),
            Some(member),
            Some(&json!({"kind": "fact"})),
        )
        .await;
    assert_eq!(r.status, 404, "{}", r.body);
    let r = ctx
        .call(
            Method::DELETE,
            "/api/v1/memories/not-an-id",
            Some(member),
            None,
        )
        .await;
    assert_eq!(r.status, 400, "{}", r.body);
    // The admin deletes the tenant's memory.
    let r = ctx
        .call(
            Method::DELETE,
            &format!("/api/v1/memories/{tenant_id}"),
            Some(admin),
            None,
        )
        .await;
    assert_eq!(r.status, 204, "{}", r.body);
}

/// Memories that expire: returned before, never after (list, get, search), even before the
/// retention sweep deletes them.
pub async fn expiry(ctx: &Ctx) {
    let t = ctx.tenant().await;
    let key = &t.member.key;
    let soon = (chrono::Utc::now() + chrono::Duration::seconds(2)).to_rfc3339();
    let m = remember(
        ctx,
        key,
        json!({"content": "The office wifi password is hunter2", "expires_at": soon}),
    )
    .await;
    let keep = remember(ctx, key, json!({"content": "The office is in Berlin"})).await;
    let id = m["id"].as_str().unwrap();
    assert!(m["expires_at"].is_string(), "{m}");
    let r = search(ctx, key, "q=office").await;
    assert_eq!(r["items"].as_array().unwrap().len(), 2, "{r}");
    tokio::time::sleep(Duration::from_millis(2500)).await;
    let r = ctx
        .call(
            Method::GET,
            &format!("/api/v1/memories/{id}"),
            Some(key),
            None,
        )
        .await;
    assert_eq!(r.status, 404, "{}", r.body);
    let r = search(ctx, key, "q=office").await;
    assert_eq!(
        contents(&r["items"]),
        vec!["The office is in Berlin"],
        "{r}"
    );
    let r = ctx
        .ok(Method::GET, "/api/v1/memories", key, None, 200)
        .await;
    assert_eq!(contents(&r["items"]), vec!["The office is in Berlin"]);
    // An expiry can be lifted while the memory lives, and set again.
    let kid = keep["id"].as_str().unwrap();
    let later = (chrono::Utc::now() + chrono::Duration::days(1)).to_rfc3339();
    let r = ctx
        .ok(
            Method::PATCH,
            &format!("/api/v1/memories/{kid}"),
            key,
            Some(json!({"expires_at": later})),
            200,
        )
        .await;
    assert!(r["expires_at"].is_string(), "{r}");
    let r = ctx
        .ok(
            Method::PATCH,
            &format!("/api/v1/memories/{kid}"),
            key,
            Some(json!({"expires_at": null})),
            200,
        )
        .await;
    assert!(r["expires_at"].is_null(), "{r}");
}

/// Semantic search with the fake embeddings: "relational datastore" finds "We run PostgreSQL
/// 16" first (no word in common) and leaves out the unrelated memories; `recall` returns the
/// same ranking and says `semantic`.
pub async fn semantic_recall(ctx: &Ctx, fake: &FakeModelServer) {
    let t = ctx.tenant().await;
    let key = &t.member.key;
    for content in [
        "We run PostgreSQL 16",
        "My favourite drink is coffee",
        "Our services are deployed on Kubernetes",
        "The team standup is on Monday",
    ] {
        let m = remember(ctx, key, json!({"content": content})).await;
        assert_eq!(m["embedded"], true, "{m}");
    }
    let embedded = fake.embedding_requests();
    assert!(
        embedded
            .iter()
            .any(|r| r.body["input"] == json!(["We run PostgreSQL 16"])
                && r.body["model"] == "fake-embedding"
                && r.headers.get("authorization").map(String::as_str)
                    == Some("Bearer fake-model-key")),
        "the memory was embedded through /v1/embeddings: {:?}",
        embedded.iter().map(|r| &r.body).collect::<Vec<_>>()
    );
    let r = search(ctx, key, "q=relational+datastore").await;
    assert_eq!(r["search"], "semantic", "{r}");
    assert!(r["note"].is_null(), "{r}");
    assert_eq!(contents(&r["items"]), vec!["We run PostgreSQL 16"], "{r}");
    assert!(r["items"][0]["score"].as_f64().unwrap() > 0.5, "{r}");
    // Another user of the tenant asks the same: nothing (it is not theirs).
    let r = search(ctx, &t.member2.key, "q=relational+datastore").await;
    assert_eq!(r["items"], json!([]), "{r}");

    // The tool: same answer, and the model is told the search was semantic.
    let out = call_tool(
        ctx,
        fake,
        key,
        "default",
        "recall",
        json!({"query": "which relational datastore?"}),
    )
    .await;
    assert_eq!(out["search"], "semantic", "{out}");
    assert_eq!(
        out["memories"][0]["content"], "We run PostgreSQL 16",
        "{out}"
    );
    assert_eq!(out["count"], 1, "{out}");

    // A vector a test registers wins for that text: a query made to point at coffee.
    let coffee = agentry_fake_model::fake_embedding("coffee");
    fake.set_embedding("something hot to drink in the morning", coffee);
    let r = search(ctx, key, "q=something+hot+to+drink+in+the+morning").await;
    assert_eq!(
        contents(&r["items"])[0],
        "My favourite drink is coffee",
        "{r}"
    );
}

/// The prompt of each run carries the `memory.top_k` (2 here) memories most relevant to its
/// message, not the most recent ones; the tenant's knowledge and the assistant's own reach
/// it, another assistant's does not.
pub async fn top_k_injection(ctx: &Ctx, fake: &FakeModelServer) {
    let t = ctx.tenant().await;
    let key = &t.member.key;
    ctx.ok(
        Method::POST,
        "/api/v1/agents",
        &t.admin.key,
        Some(json!({"id": "dba"})),
        201,
    )
    .await;
    remember(ctx, key, json!({"content": "We run PostgreSQL 16"})).await;
    remember(ctx, &t.admin.key, json!({"content": "Backups of the MySQL replica run nightly", "scope": "assistant", "assistant_id": "dba"})).await;
    // Newer, and unrelated: a most-recent injection would pick these.
    for content in [
        "My favourite drink is coffee",
        "The team standup is on Monday",
        "I have a dog called Rex",
    ] {
        remember(ctx, key, json!({"content": content})).await;
    }
    let before = fake.requests().len();
    fake.push(FakeReply::text("PostgreSQL"));
    chat(ctx, key, "default", "Which relational datastore do we use?").await;
    let prompt = system_prompt(fake, before);
    assert!(
        prompt.contains("What you remember that bears on this message"),
        "{prompt}"
    );
    assert!(prompt.contains("We run PostgreSQL 16"), "{prompt}");
    for absent in ["coffee", "standup", "Rex", "MySQL replica"] {
        assert!(!prompt.contains(absent), "{absent} in the prompt: {prompt}");
    }
    // With the `dba` assistant its own knowledge is relevant too (two memories: top_k).
    let before = fake.requests().len();
    fake.push(FakeReply::text("both"));
    chat(ctx, key, "dba", "Which relational datastore do we use?").await;
    let prompt = system_prompt(fake, before);
    assert!(prompt.contains("We run PostgreSQL 16"), "{prompt}");
    assert!(
        prompt.contains("[fact, assistant knowledge] Backups of the MySQL replica run nightly"),
        "{prompt}"
    );
    // A message about something else brings other memories.
    let before = fake.requests().len();
    fake.push(FakeReply::text("Rex"));
    chat(ctx, key, "default", "What is my pet dog called?").await;
    let prompt = system_prompt(fake, before);
    assert!(prompt.contains("I have a dog called Rex"), "{prompt}");
    assert!(!prompt.contains("PostgreSQL"), "{prompt}");
    // The second member's prompt has none of the first one's.
    let before = fake.requests().len();
    fake.push(FakeReply::text("no idea"));
    chat(
        ctx,
        &t.member2.key,
        "default",
        "Which relational datastore do we use?",
    )
    .await;
    let prompt = system_prompt(fake, before);
    assert!(!prompt.contains("PostgreSQL"), "{prompt}");
}

/// The tools: `remember` with a scope (refused for members on shared scopes), `forget` (one's
/// own; shared ones only for admins; never another user's), and `recall` not finding what
/// was forgotten.
pub async fn tools_scopes_and_forget(ctx: &Ctx, fake: &FakeModelServer) {
    let t = ctx.tenant().await;
    let (member, admin) = (&t.member.key, &t.admin.key);
    let out = call_tool(
        ctx,
        fake,
        member,
        "default",
        "remember",
        json!({"content": "We deploy on Fridays", "kind": "decision"}),
    )
    .await;
    assert_eq!(
        (
            out["stored"].as_bool(),
            out["merged"].as_bool(),
            out["scope"].as_str()
        ),
        (Some(true), Some(false), Some("user")),
        "{out}"
    );
    let id = out["id"].as_str().unwrap().to_string();
    // The source is the run that stored it.
    let m = ctx
        .ok(
            Method::GET,
            &format!("/api/v1/memories/{id}"),
            member,
            None,
            200,
        )
        .await;
    assert!(
        m["source_run_id"].is_string() && m["source_session_id"].is_string(),
        "{m}"
    );
    // The same again through the tool: merged.
    let out = call_tool(
        ctx,
        fake,
        member,
        "default",
        "remember",
        json!({"content": "we deploy on fridays."}),
    )
    .await;
    assert_eq!(
        (out["merged"].as_bool(), out["id"].as_str()),
        (Some(true), Some(id.as_str())),
        "{out}"
    );
    let listed = ctx
        .ok(Method::GET, "/api/v1/memories", member, None, 200)
        .await;
    assert_eq!(listed["total"], 1, "{listed}");
    // A member may not write the tenant's memory; the tool says why.
    let out = call_tool(
        ctx,
        fake,
        member,
        "default",
        "remember",
        json!({"content": "Everyone gets a raise", "scope": "tenant"}),
    )
    .await;
    assert_eq!(out["error"]["code"], "permission_denied", "{out}");
    let r = ctx
        .ok(
            Method::GET,
            "/api/v1/memories?scope=tenant",
            member,
            None,
            200,
        )
        .await;
    assert_eq!(r["total"], 0);
    // The admin may; and the assistant scope is the run's assistant.
    let out = call_tool(
        ctx,
        fake,
        admin,
        "default",
        "remember",
        json!({"content": "Refunds need a ticket number", "scope": "assistant"}),
    )
    .await;
    assert_eq!(out["scope"], "assistant", "{out}");
    let shared = out["id"].as_str().unwrap().to_string();
    let m = ctx
        .ok(
            Method::GET,
            &format!("/api/v1/memories/{shared}"),
            member,
            None,
            200,
        )
        .await;
    assert_eq!(m["assistant_id"], "default");
    // The member cannot forget it, nor another user's memory (not found to them).
    let out = call_tool(
        ctx,
        fake,
        member,
        "default",
        "forget",
        json!({"id": shared}),
    )
    .await;
    assert_eq!(out["error"]["code"], "permission_denied", "{out}");
    let out = call_tool(
        ctx,
        fake,
        &t.member2.key,
        "default",
        "forget",
        json!({"id": id}),
    )
    .await;
    assert_eq!(out["error"]["code"], "not_found", "{out}");
    ctx.ok(
        Method::GET,
        &format!("/api/v1/memories/{id}"),
        member,
        None,
        200,
    )
    .await;
    // The owner forgets; recall no longer finds it.
    let out = call_tool(ctx, fake, member, "default", "forget", json!({"id": id})).await;
    assert_eq!(
        (out["forgotten"].as_bool(), out["content"].as_str()),
        (Some(true), Some("we deploy on fridays.")),
        "{out}"
    );
    let r = ctx
        .call(
            Method::GET,
            &format!("/api/v1/memories/{id}"),
            Some(member),
            None,
        )
        .await;
    assert_eq!(r.status, 404);
    let out = call_tool(
        ctx,
        fake,
        member,
        "default",
        "recall",
        json!({"query": "when do we deploy"}),
    )
    .await;
    assert!(
        !out.to_string().contains("Fridays") && !out.to_string().contains("fridays"),
        "{out}"
    );
    let out = call_tool(
        ctx,
        fake,
        member,
        "default",
        "forget",
        json!({"id": "nonsense"}),
    )
    .await;
    assert_eq!(out["error"]["code"], "validation_error", "{out}");
    // The admin forgets the shared one.
    let out = call_tool(ctx, fake, admin, "default", "forget", json!({"id": shared})).await;
    assert_eq!(out["forgotten"], true, "{out}");
}

/// Without an embeddings model the tools and REST match words, and say so; with one that
/// fails, too (and the memories stored meanwhile are embedded once it is back).
pub async fn keyword_fallback(ctx: &Ctx, fake: &FakeModelServer) {
    let t = ctx.tenant().await;
    let key = &t.member.key;
    remember(ctx, key, json!({"content": "We run PostgreSQL 16"})).await;
    let out = call_tool(
        ctx,
        fake,
        key,
        "default",
        "recall",
        json!({"query": "relational datastore"}),
    )
    .await;
    assert_eq!(out["search"], "keyword", "{out}");
    assert!(
        out["note"]
            .as_str()
            .unwrap()
            .contains("no embeddings model is configured"),
        "{out}"
    );
    assert_eq!(out["count"], 0, "words do not find meaning: {out}");
    let out = call_tool(
        ctx,
        fake,
        key,
        "default",
        "recall",
        json!({"query": "postgresql version"}),
    )
    .await;
    assert_eq!(
        out["memories"][0]["content"], "We run PostgreSQL 16",
        "{out}"
    );
    assert!(fake.embedding_requests().is_empty());
}

/// The embeddings endpoint failing: a memory is stored anyway (without a vector), search falls
/// back to words and says why; once the endpoint is back, a search embeds what was missed.
pub async fn failing_embeddings(ctx: &Ctx, fake: &FakeModelServer) {
    let t = ctx.tenant().await;
    let key = &t.member.key;
    fake.fail_embeddings(Some(500));
    let m = remember(ctx, key, json!({"content": "We run PostgreSQL 16"})).await;
    assert_eq!(m["embedded"], false, "{m}");
    let r = search(ctx, key, "q=postgresql").await;
    assert_eq!(r["search"], "keyword", "{r}");
    assert!(
        r["note"]
            .as_str()
            .unwrap()
            .contains("embeddings endpoint failed"),
        "{r}"
    );
    assert_eq!(contents(&r["items"]), vec!["We run PostgreSQL 16"]);
    fake.fail_embeddings(None);
    let r = search(ctx, key, "q=relational+datastore").await;
    assert_eq!(
        (r["search"].as_str(), contents(&r["items"])),
        (Some("semantic"), vec!["We run PostgreSQL 16".to_string()]),
        "{r}"
    );
    let id = m["id"].as_str().unwrap();
    let m = ctx
        .ok(
            Method::GET,
            &format!("/api/v1/memories/{id}"),
            key,
            None,
            200,
        )
        .await;
    assert_eq!(m["embedded"], true, "{m}");
}

/// `memory.auto_extract`: after a run the model is asked for facts (the extraction request
/// is recorded), they are stored in the user's scope with the run as source, and the same
/// fact from a later run refreshes the memory instead of repeating it.
pub async fn auto_extract(ctx: &Ctx, fake: &FakeModelServer) {
    let t = ctx.tenant().await;
    let key = &t.member.key;
    let before = fake.requests().len();
    fake.push(FakeReply::text("Noted."));
    fake.push(FakeReply::text(
        "{\"facts\": [\"We run PostgreSQL 16\", \"The team is based in Berlin\"]}",
    ));
    chat(
        ctx,
        key,
        "default",
        "FYI we run PostgreSQL 16 and the team is in Berlin",
    )
    .await;
    let listed = wait_for_total(ctx, key, 2).await;
    let mut got = contents(&listed["items"]);
    got.sort();
    assert_eq!(
        got,
        vec!["The team is based in Berlin", "We run PostgreSQL 16"]
    );
    assert!(listed["items"][0]["source_run_id"].is_string(), "{listed}");
    let extraction = &fake.requests()[before + 1];
    let system = extraction.body["messages"][0]["content"].as_str().unwrap();
    assert!(system.contains("extract long-term memories"), "{system}");
    assert!(
        extraction.body["messages"][1]["content"]
            .as_str()
            .unwrap()
            .contains("FYI we run PostgreSQL 16"),
        "{}",
        extraction.body
    );
    // The same fact again (other wording, same meaning by the fake vectors): merged.
    fake.push(FakeReply::text("Still noted."));
    fake.push(FakeReply::text("{\"facts\": [\"we run postgresql 16!\"]}"));
    let done = fake.requests().len() + 2;
    chat(ctx, key, "default", "Reminder: PostgreSQL 16 it is").await;
    for _ in 0..100 {
        if fake.requests().len() >= done {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // Give the bank the time to write after the model answered.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let listed = ctx
        .ok(Method::GET, "/api/v1/memories", key, None, 200)
        .await;
    assert_eq!(listed["total"], 2, "merged, not repeated: {listed}");
    assert!(
        contents(&listed["items"]).contains(&"we run postgresql 16!".to_string()),
        "{listed}"
    );
}

async fn wait_for_total(ctx: &Ctx, key: &str, total: u64) -> Value {
    for _ in 0..100 {
        let listed = ctx
            .ok(Method::GET, "/api/v1/memories", key, None, 200)
            .await;
        if listed["total"].as_u64() == Some(total) {
            return listed;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("the memories never reached {total}");
}

/// A tenant's own model connection with an `embedding_model` embeds that tenant's memories
/// (on the tenant's endpoint, not the platform's, which this server does not even have);
/// another tenant without one falls back to words.
pub async fn tenant_connection_embeddings(ctx: &Ctx) {
    let own = crate::models::tenant_fake(None);
    let t = ctx.tenant().await;
    let other = ctx.tenant().await;
    let r = ctx
        .call(
            Method::POST,
            "/api/v1/model-connections",
            Some(&t.admin.key),
            Some(&json!({"id": "own", "provider": "anthropic", "embedding_model": "e"})),
        )
        .await;
    assert_eq!(
        (r.status, r.details()["field"].as_str()),
        (422, Some("embedding_model")),
        "{}",
        r.body
    );
    let c = ctx
        .ok(
            Method::POST,
            "/api/v1/model-connections",
            &t.admin.key,
            Some(
                json!({"id": "own", "provider": "openai", "base_url": own.base_url_openai(),
                        "model": "m", "embedding_model": "tenant-embedding"}),
            ),
            201,
        )
        .await;
    assert_eq!(c["embedding_model"], "tenant-embedding", "{c}");
    let m = remember(
        ctx,
        &t.member.key,
        json!({"content": "We run PostgreSQL 16"}),
    )
    .await;
    assert_eq!(m["embedded"], true, "{m}");
    let r = search(ctx, &t.member.key, "q=relational+datastore").await;
    assert_eq!(
        (r["search"].as_str(), contents(&r["items"])),
        (Some("semantic"), vec!["We run PostgreSQL 16".to_string()]),
        "{r}"
    );
    let asked = own.embedding_requests();
    assert!(
        !asked.is_empty() && asked.iter().all(|r| r.body["model"] == "tenant-embedding"),
        "{asked:?}"
    );
    // The other tenant has no such connection: words.
    remember(
        ctx,
        &other.member.key,
        json!({"content": "We run PostgreSQL 16"}),
    )
    .await;
    let r = search(ctx, &other.member.key, "q=relational+datastore").await;
    assert_eq!(
        (r["search"].as_str(), r["items"].as_array().map(Vec::len)),
        (Some("keyword"), Some(0)),
        "{r}"
    );
    let before = own.embedding_requests().len();
    search(ctx, &other.member.key, "q=postgresql").await;
    assert_eq!(
        own.embedding_requests().len(),
        before,
        "another tenant's search used this tenant's endpoint"
    );
}
