//! Models per tenant (issue 16 item 4, docs/models.md "Tenant model connections"): each
//! tenant's assistants call the model with the tenant's own key; the key is sealed, never shown
//! and never logged; bad input is refused with nothing stored; an assistant's `max_retries`
//! governs its model calls; a refused key is `model_auth_failed` with nothing of the platform in
//! it; the platform admin can take the platform's model away from a tenant.
//!
//! The tenants' fake model servers listen on 127.0.0.2, the one network the test server lets
//! tenants reach (`tools.allowed_networks`); the platform's fake model on 127.0.0.1 is refused
//! to them like any other loopback address.

use std::time::Duration;

use agentry_fake_model::{DefaultReply, FakeConfig, FakeModelServer, FakeReply};
use futures::SinkExt;
use reqwest::Method;
use serde_json::{Value, json};
use tokio_tungstenite::tungstenite::Message;

use crate::ctx::{ADMIN_KEY, Ctx, Resp, TenantFx};
use crate::mcp::{types, ws_connect};
use crate::streaming::until_done_or_hitl;

/// The key the platform's own model (the server's `[llm]`) is configured with.
pub const PLATFORM_KEY: &str = "platform-key-NEVER-TO-A-TENANT";

/// A fake model server on 127.0.0.2 (reachable by tenants in the tests).
pub fn tenant_fake(api_key: Option<&str>) -> FakeModelServer {
    FakeModelServer::start(FakeConfig {
        host: "127.0.0.2".parse().unwrap(),
        api_key: api_key.map(str::to_string),
        default_reply: DefaultReply::Auto,
        ..FakeConfig::default()
    })
}

/// A server whose platform model is `platform` (an OpenAI-compatible fake on 127.0.0.1),
/// logging at debug level so the log check sees as much as the server ever says.
pub async fn start() -> (FakeModelServer, Ctx) {
    let platform = FakeModelServer::start(FakeConfig {
        api_key: Some(PLATFORM_KEY.into()),
        ..FakeConfig::default()
    });
    let base = platform.base_url_openai();
    let ctx = Ctx::start_with(
        &[
            ("AGENTRY_LLM__PROVIDER", "openai"),
            ("AGENTRY_LLM__BASE_URL", base.as_str()),
            ("AGENTRY_LLM__API_KEY", PLATFORM_KEY),
            ("AGENTRY_LLM__MODEL", "platform-model"),
            ("AGENTRY_LLM__BASE_DELAY_MS", "10"),
            ("RUST_LOG", "debug"),
        ],
        None,
    )
    .await;
    (platform, ctx)
}

/// Every response of these tests passes through here: none may quote a secret.
async fn call(ctx: &Ctx, method: Method, path: &str, key: &str, body: Option<Value>) -> Resp {
    let r = ctx.call(method, path, Some(key), body.as_ref()).await;
    let text = r.body.to_string();
    for secret in SECRETS {
        assert!(!text.contains(secret), "a response quotes a key: {text}");
    }
    r
}

async fn ok(
    ctx: &Ctx,
    method: Method,
    path: &str,
    key: &str,
    body: Option<Value>,
    want: u16,
) -> Value {
    let r = call(ctx, method.clone(), path, key, body).await;
    assert_eq!(r.status, want, "{method} {path}: {}", r.body);
    r.body
}

const KEY_A: &str = "sk-tenant-A-0000-SECRET-aaaa";
const KEY_B: &str = "sk-tenant-B-1111-SECRET-bbbb";
const KEY_A2: &str = "sk-tenant-A-2222-ROTATED-cccc";
const WRONG_KEY: &str = "sk-wrong-3333-SECRET-dddd";
const SECRETS: [&str; 5] = [KEY_A, KEY_B, KEY_A2, WRONG_KEY, PLATFORM_KEY];

/// The server's log lines never hold a key.
fn assert_no_key_logged(ctx: &Ctx) {
    let logs = ctx.server.logs.lock().unwrap().clone();
    assert!(!logs.is_empty());
    for line in &logs {
        for secret in SECRETS {
            assert!(!line.contains(secret), "the server logged a key: {line}");
        }
    }
}

async fn connection(ctx: &Ctx, t: &TenantFx, body: Value) -> Value {
    ok(
        ctx,
        Method::POST,
        "/api/v1/model-connections",
        &t.admin.key,
        Some(body),
        201,
    )
    .await
}

async fn agent(ctx: &Ctx, t: &TenantFx, body: Value) -> Value {
    ok(
        ctx,
        Method::POST,
        "/api/v1/agents",
        &t.admin.key,
        Some(body),
        201,
    )
    .await
}

/// One chat over REST with assistant `id`; the run's events.
async fn chat(
    ctx: &Ctx,
    key: &str,
    id: &str,
    session: Option<&str>,
    message: &str,
) -> (String, Vec<Value>) {
    let mut body = json!({"message": message, "assistant_id": id});
    if let Some(s) = session {
        body = json!({"message": message, "session_id": s});
    }
    let r = ok(ctx, Method::POST, "/api/v1/chat", key, Some(body), 200).await;
    (
        r["session_id"].as_str().unwrap().to_string(),
        r["events"].as_array().unwrap().clone(),
    )
}

fn done(events: &[Value]) -> &Value {
    let last = events.last().unwrap();
    assert_eq!(last["event_type"], "done", "{events:?}");
    &last["data"]
}

fn error_event(events: &[Value]) -> &Value {
    &events
        .iter()
        .find(|e| e["event_type"] == "error")
        .unwrap_or_else(|| panic!("no error event in {events:?}"))["data"]
}

/// Tenant A's assistant calls the model with A's key, tenant B's with B's (over REST and over
/// the WebSocket); keys are write-only; a changed key reaches a live session's next run;
/// another tenant's connection cannot be named; members cannot change connections.
pub async fn each_tenant_calls_with_its_own_key(ctx: &Ctx, platform: &FakeModelServer) {
    let fake = tenant_fake(None);
    let (a, b) = (ctx.tenant().await, ctx.tenant().await);
    let base = fake.base_url_openai();
    let made = connection(
        ctx,
        &a,
        json!({"id": "mine", "name": "A's OpenAI", "provider": "openai", "base_url": base,
               "model": "a-model", "api_key": KEY_A, "timeout_secs": 30, "max_retries": 2}),
    )
    .await;
    assert_eq!(made["api_key_set"], true, "{made}");
    assert_eq!(made["model"], "a-model");
    assert_eq!(made["base_url"], base.as_str());
    assert!(made.get("api_key").is_none(), "{made}");
    // The same id in another tenant is another connection.
    connection(
        ctx,
        &b,
        json!({"id": "mine", "provider": "openai", "base_url": base, "model": "b-model", "api_key": KEY_B}),
    )
    .await;
    connection(
        ctx,
        &b,
        json!({"id": "b-only", "provider": "anthropic", "base_url": fake.base_url_anthropic(), "api_key": KEY_B}),
    )
    .await;
    // Stored sealed: the database never holds the key.
    let row = agentry_store::model_connections::get(&ctx.db, &a.scope(), &"mine".parse().unwrap())
        .await
        .unwrap()
        .unwrap();
    let sealed = row.spec.api_key_sealed.clone().unwrap();
    assert!(
        sealed.starts_with("v1:") && !sealed.contains(KEY_A),
        "{sealed}"
    );

    // Members read, never write; nobody sees a key.
    let listed = ok(
        ctx,
        Method::GET,
        "/api/v1/model-connections",
        &a.member.key,
        None,
        200,
    )
    .await;
    assert_eq!(listed.as_array().unwrap().len(), 1, "{listed}");
    assert_eq!(listed[0]["id"], "mine");
    let r = call(
        ctx,
        Method::POST,
        "/api/v1/model-connections",
        &a.member.key,
        Some(json!({"id": "x", "provider": "openai"})),
    )
    .await;
    assert_eq!((r.status, r.code()), (403, "forbidden"), "{:?}", r.body);
    let r = call(
        ctx,
        Method::PUT,
        "/api/v1/model-connections/mine",
        &a.member.key,
        Some(json!({"provider": "openai"})),
    )
    .await;
    assert_eq!(r.status, 403);
    let r = call(
        ctx,
        Method::DELETE,
        "/api/v1/model-connections/mine",
        &a.member.key,
        None,
    )
    .await;
    assert_eq!(r.status, 403);
    // Another tenant's connection is invisible, and cannot be named by an assistant: the same
    // answer as for an id nobody has.
    let r = call(
        ctx,
        Method::GET,
        "/api/v1/model-connections/b-only",
        &a.admin.key,
        None,
    )
    .await;
    assert_eq!((r.status, r.code()), (404, "not_found"));
    let r = call(
        ctx,
        Method::POST,
        "/api/v1/agents",
        &a.admin.key,
        Some(json!({"id": "thief", "model_connection": "b-only"})),
    )
    .await;
    let r2 = call(
        ctx,
        Method::POST,
        "/api/v1/agents",
        &a.admin.key,
        Some(json!({"id": "thief", "model_connection": "nobody-has"})),
    )
    .await;
    assert_eq!(
        (r.status, r.code(), r.details()["field"].as_str()),
        (422, "validation_error", Some("model_connection")),
        "{:?}",
        r.body
    );
    assert_eq!(
        r.message().replace("b-only", "X"),
        r2.message().replace("nobody-has", "X")
    );
    let r = call(ctx, Method::GET, "/api/v1/agents/thief", &a.admin.key, None).await;
    assert_eq!(r.status, 404, "nothing was stored");
    // `provider` beside a connection is a contradiction.
    let r = call(
        ctx,
        Method::POST,
        "/api/v1/agents",
        &a.admin.key,
        Some(json!({"id": "both", "provider": "openai", "model_connection": "mine"})),
    )
    .await;
    assert_eq!(
        (r.status, r.details()["field"].as_str()),
        (422, Some("provider"))
    );

    let ag = agent(ctx, &a, json!({"id": "byok", "model_connection": "mine"})).await;
    assert_eq!(ag["model_connection"], "mine");
    assert_eq!(ag["effective"]["model_connection"], "mine");
    agent(ctx, &b, json!({"id": "byok", "model_connection": "mine"})).await;

    // A over REST.
    let platform_before = platform.request_count();
    let (session_a, events) = chat(ctx, &a.member.key, "byok", None, "/echo hello from A").await;
    assert_eq!(done(&events)["status"], "completed", "{events:?}");
    let seen = fake.requests();
    assert_eq!(seen.len(), 1);
    assert_eq!(
        seen[0].header("authorization"),
        Some(format!("Bearer {KEY_A}").as_str())
    );
    assert_eq!(seen[0].body["model"], "a-model");

    // B over the WebSocket.
    let s = ok(
        ctx,
        Method::POST,
        "/api/v1/sessions",
        &b.member.key,
        Some(json!({"assistant_id": "byok"})),
        201,
    )
    .await;
    let session_b = s["session_id"].as_str().unwrap();
    let mut ws = ws_connect(ctx, &b.member.key, session_b).await;
    ws.send(Message::text(
        json!({"type": "chat", "payload": {"message": "/echo hello from B"}}).to_string(),
    ))
    .await
    .unwrap();
    let events = until_done_or_hitl(&mut ws).await;
    assert_eq!(types(&events).last(), Some(&"done"), "{events:?}");
    assert_eq!(
        events.last().unwrap()["data"]["status"],
        "completed",
        "{events:?}"
    );
    let seen = fake.requests();
    assert_eq!(seen.len(), 2);
    assert_eq!(
        seen[1].header("authorization"),
        Some(format!("Bearer {KEY_B}").as_str())
    );
    assert_eq!(seen[1].body["model"], "b-model");
    assert_eq!(
        platform.request_count(),
        platform_before,
        "the platform's model was not asked"
    );

    // A's default assistant still runs on the platform's model, with the platform's key.
    let (_, events) = chat(ctx, &a.member.key, "default", None, "/echo platform").await;
    assert_eq!(done(&events)["status"], "completed", "{events:?}");
    assert_eq!(platform.request_count(), platform_before + 1);
    assert_eq!(
        platform.requests().last().unwrap().header("authorization"),
        Some(format!("Bearer {PLATFORM_KEY}").as_str())
    );

    // A PUT that leaves `api_key` out keeps the key; one with a new key rotates it, and the
    // live session's next run uses the new one.
    let kept = ok(
        ctx,
        Method::PUT,
        "/api/v1/model-connections/mine",
        &a.admin.key,
        Some(json!({"provider": "openai", "base_url": base, "model": "a-model-2"})),
        200,
    )
    .await;
    assert_eq!(
        (kept["api_key_set"].as_bool(), kept["model"].as_str()),
        (Some(true), Some("a-model-2")),
        "{kept}"
    );
    let (_, events) = chat(ctx, &a.member.key, "byok", Some(&session_a), "/echo again").await;
    assert_eq!(done(&events)["status"], "completed", "{events:?}");
    let last = fake.requests().last().unwrap().clone();
    assert_eq!(
        (last.header("authorization"), last.body["model"].as_str()),
        (Some(format!("Bearer {KEY_A}").as_str()), Some("a-model-2"))
    );
    ok(ctx, Method::PUT, "/api/v1/model-connections/mine", &a.admin.key,
        Some(json!({"provider": "openai", "base_url": base, "model": "a-model-2", "api_key": KEY_A2})), 200).await;
    let (_, events) = chat(
        ctx,
        &a.member.key,
        "byok",
        Some(&session_a),
        "/echo rotated",
    )
    .await;
    assert_eq!(done(&events)["status"], "completed", "{events:?}");
    assert_eq!(
        fake.requests().last().unwrap().header("authorization"),
        Some(format!("Bearer {KEY_A2}").as_str())
    );
    // `api_key: null` removes it: no Authorization header at all.
    let gone = ok(
        ctx,
        Method::PUT,
        "/api/v1/model-connections/mine",
        &a.admin.key,
        Some(json!({"provider": "openai", "base_url": base, "api_key": null})),
        200,
    )
    .await;
    assert_eq!(gone["api_key_set"], false);
    let (_, events) = chat(
        ctx,
        &a.member.key,
        "byok",
        Some(&session_a),
        "/echo keyless",
    )
    .await;
    assert_eq!(done(&events)["status"], "completed", "{events:?}");
    assert_eq!(
        fake.requests().last().unwrap().header("authorization"),
        None
    );

    // A connection in use cannot be deleted; once no assistant uses it, it can.
    let r = call(
        ctx,
        Method::DELETE,
        "/api/v1/model-connections/mine",
        &a.admin.key,
        None,
    )
    .await;
    assert_eq!((r.status, r.code()), (409, "conflict"));
    assert_eq!(r.details()["assistants"], json!(["byok"]));
    ok(
        ctx,
        Method::PUT,
        "/api/v1/agents/byok",
        &a.admin.key,
        Some(json!({})),
        200,
    )
    .await;
    let r = call(
        ctx,
        Method::DELETE,
        "/api/v1/model-connections/mine",
        &a.admin.key,
        None,
    )
    .await;
    assert_eq!(r.status, 204);
    let r = call(
        ctx,
        Method::GET,
        "/api/v1/model-connections/mine",
        &a.admin.key,
        None,
    )
    .await;
    assert_eq!(r.status, 404);

    // B's, untouched, still answers B; and nothing anywhere logged a key.
    let r = ok(
        ctx,
        Method::GET,
        "/api/v1/model-connections/mine",
        &b.admin.key,
        None,
        200,
    )
    .await;
    assert_eq!(r["api_key_set"], true);
    assert_no_key_logged(ctx);
}

/// Bad input: 422 naming the field (413 past the body limit), and nothing stored.
pub async fn bad_connections_are_refused_and_nothing_is_stored(ctx: &Ctx) {
    let t = ctx.tenant().await;
    let good = json!({"id": "c", "provider": "openai", "base_url": "http://127.0.0.2:9/v1", "api_key": "k"});
    let with = |k: &str, v: Value| {
        let mut b = good.clone();
        b[k] = v;
        b
    };
    let cases: Vec<(Value, &str, &str)> = vec![
        (
            with("provider", json!("gemini")),
            "provider",
            "unknown provider",
        ),
        (
            with("provider", json!("scripted")),
            "provider",
            "unknown provider",
        ),
        (with("provider", json!(7)), "provider", ""),
        (
            with("base_url", json!("not a url")),
            "base_url",
            "not a valid URL",
        ),
        (
            with("base_url", json!("ftp://127.0.0.2/v1")),
            "base_url",
            "http",
        ),
        (
            with("base_url", json!("http://user:pw@127.0.0.2:9/v1")),
            "base_url",
            "credentials",
        ),
        (
            with("base_url", json!("http://127.0.0.1:9/v1")),
            "base_url",
            "loopback",
        ),
        (
            with("base_url", json!("http://[::1]:9/v1")),
            "base_url",
            "loopback",
        ),
        (
            with("base_url", json!("http://10.1.2.3/v1")),
            "base_url",
            "private",
        ),
        (
            with("base_url", json!("http://169.254.169.254/latest")),
            "base_url",
            "link-local",
        ),
        (
            with("base_url", json!("http://0.0.0.0:8000/v1")),
            "base_url",
            "unspecified",
        ),
        (
            with(
                "base_url",
                json!(format!("http://127.0.0.2/{}", "a".repeat(2100))),
            ),
            "base_url",
            "at most",
        ),
        (with("model", json!("m".repeat(201))), "model", "at most"),
        (with("model", json!("")), "model", "empty"),
        (with("name", json!("n".repeat(201))), "name", "at most"),
        (
            with("api_key", json!("k".repeat(4097))),
            "api_key",
            "at most",
        ),
        (
            with("api_key", json!("has space")),
            "api_key",
            "visible ASCII",
        ),
        (with("api_key", json!("")), "api_key", "empty"),
        (with("timeout_secs", json!(0)), "timeout_secs", "between"),
        (with("timeout_secs", json!(601)), "timeout_secs", "between"),
        (with("max_retries", json!(11)), "max_retries", "between"),
        (with("id", json!("Bad Id")), "id", ""),
        (with("apikey", json!("x")), "apikey", "unknown field"),
    ];
    for (body, field, says) in cases {
        let r = call(
            ctx,
            Method::POST,
            "/api/v1/model-connections",
            &t.admin.key,
            Some(body.clone()),
        )
        .await;
        assert_eq!(
            (r.status, r.code()),
            (422, "validation_error"),
            "{body}: {:?}",
            r.body
        );
        assert_eq!(
            r.details()["field"].as_str(),
            Some(field),
            "{body}: {:?}",
            r.body
        );
        assert!(r.message().contains(says), "{body}: {}", r.message());
        assert!(
            !r.message().contains("kkkkkkkk") && !r.message().contains("has space"),
            "the key is quoted: {}",
            r.message()
        );
    }
    let r = call(
        ctx,
        Method::POST,
        "/api/v1/model-connections",
        &t.admin.key,
        Some(with("api_key", json!("k".repeat(20_000)))),
    )
    .await;
    assert_eq!((r.status, r.code()), (413, "payload_too_large"));
    let listed = ok(
        ctx,
        Method::GET,
        "/api/v1/model-connections",
        &t.admin.key,
        None,
        200,
    )
    .await;
    assert_eq!(listed, json!([]), "nothing was stored");
    // The same rules on a PUT, which changes nothing when refused.
    connection(ctx, &t, good.clone()).await;
    let r = call(
        ctx,
        Method::PUT,
        "/api/v1/model-connections/c",
        &t.admin.key,
        Some(json!({"provider": "openai", "base_url": "http://192.168.1.1/v1"})),
    )
    .await;
    assert_eq!(
        (r.status, r.details()["field"].as_str()),
        (422, Some("base_url"))
    );
    let kept = ok(
        ctx,
        Method::GET,
        "/api/v1/model-connections/c",
        &t.admin.key,
        None,
        200,
    )
    .await;
    assert_eq!(kept["base_url"], "http://127.0.0.2:9/v1");
    let r = call(
        ctx,
        Method::PUT,
        "/api/v1/model-connections/nope",
        &t.admin.key,
        Some(json!({"provider": "openai"})),
    )
    .await;
    assert_eq!(r.status, 404);
    let r = call(
        ctx,
        Method::GET,
        "/api/v1/model-connections/Bad%20Id",
        &t.admin.key,
        None,
    )
    .await;
    assert_eq!((r.status, r.code()), (400, "bad_request"));
    // The platform admin key has no tenant.
    let r = call(
        ctx,
        Method::GET,
        "/api/v1/model-connections",
        ADMIN_KEY,
        None,
    )
    .await;
    assert_eq!(r.status, 403);
}

/// `max_retries: 0` makes exactly one attempt, through a connection and on the platform's
/// model; a higher value retries up to it (within the connection's own cap).
pub async fn max_retries_governs_model_calls(ctx: &Ctx, platform: &FakeModelServer) {
    let fake = tenant_fake(None);
    let t = ctx.tenant().await;
    connection(ctx, &t, json!({"id": "c", "provider": "openai", "base_url": fake.base_url_openai(), "max_retries": 10})).await;
    connection(ctx, &t, json!({"id": "capped", "provider": "openai", "base_url": fake.base_url_openai(), "max_retries": 1})).await;
    agent(
        ctx,
        &t,
        json!({"id": "zero", "model_connection": "c", "max_retries": 0}),
    )
    .await;
    agent(
        ctx,
        &t,
        json!({"id": "two", "model_connection": "c", "max_retries": 2}),
    )
    .await;
    let capped = agent(
        ctx,
        &t,
        json!({"id": "five-capped", "model_connection": "capped", "max_retries": 5}),
    )
    .await;
    // What the assistant asked for stays its own; `effective` shows what its calls get: the
    // connection's cap (issue 16).
    assert_eq!(capped["max_retries"], 5, "{capped}");
    assert_eq!(capped["effective"]["max_retries"], 1, "{capped}");
    let read = ok(
        ctx,
        Method::GET,
        "/api/v1/agents/two",
        &t.admin.key,
        None,
        200,
    )
    .await;
    assert_eq!(
        read["effective"]["max_retries"], 2,
        "under the cap of 10: {read}"
    );
    agent(ctx, &t, json!({"id": "platform-zero", "max_retries": 0})).await;

    for (id, attempts) in [("zero", 1), ("two", 3), ("five-capped", 2)] {
        fake.clear_requests();
        fake.set_default_reply(DefaultReply::Always(FakeReply::error(503, "overloaded")));
        let (_, events) = chat(ctx, &t.member.key, id, None, "/echo hi").await;
        assert_eq!(done(&events)["status"], "failed", "{id}: {events:?}");
        assert_eq!(error_event(&events)["error_code"], "model_error", "{id}");
        assert_eq!(fake.requests().len(), attempts, "{id}");
    }
    fake.set_default_reply(DefaultReply::Auto);

    let before = platform.request_count();
    platform.push(FakeReply::error(503, "overloaded"));
    let (_, events) = chat(ctx, &t.member.key, "platform-zero", None, "/echo hi").await;
    assert_eq!(done(&events)["status"], "failed", "{events:?}");
    assert_eq!(
        platform.request_count(),
        before + 1,
        "one attempt, not the server's 4"
    );
}

/// A key the provider refuses (401/403) ends the run with `model_auth_failed`, saying which
/// connection to fix and nothing else: not the key, not the provider's text, and for the
/// platform's model not its address either.
pub async fn a_refused_key_is_model_auth_failed(ctx: &Ctx, platform: &FakeModelServer) {
    let fake = tenant_fake(Some("the-right-key"));
    let t = ctx.tenant().await;
    connection(ctx, &t, json!({"id": "bad", "provider": "openai", "base_url": fake.base_url_openai(), "api_key": WRONG_KEY})).await;
    connection(ctx, &t, json!({"id": "bad-anthropic", "provider": "anthropic", "base_url": fake.base_url_anthropic(), "api_key": WRONG_KEY})).await;
    agent(ctx, &t, json!({"id": "bad", "model_connection": "bad"})).await;
    agent(
        ctx,
        &t,
        json!({"id": "bad-anthropic", "model_connection": "bad-anthropic"}),
    )
    .await;
    for id in ["bad", "bad-anthropic"] {
        let before = fake.request_count();
        let (_, events) = chat(ctx, &t.member.key, id, None, "/echo hi").await;
        let d = done(&events);
        assert_eq!(
            (d["status"].as_str(), d["reason"].as_str()),
            (Some("failed"), Some("model_auth_failed")),
            "{events:?}"
        );
        let e = error_event(&events);
        assert_eq!(e["error_code"], "model_auth_failed", "{e}");
        let msg = e["error"].as_str().unwrap();
        assert!(msg.contains(&format!("{id:?}")), "{msg}");
        assert!(
            !msg.contains("127.0.0.2") && !msg.contains("Incorrect"),
            "{msg}"
        );
        assert_eq!(
            fake.request_count(),
            before + 1,
            "a refused key is not retried"
        );
    }
    // The platform's own key refused: the tenant hears that much and nothing of the platform.
    platform.set_api_key(Some("the-platform-rotated-its-key"));
    let (_, events) = chat(ctx, &t.member.key, "default", None, "/echo hi").await;
    platform.set_api_key(Some(PLATFORM_KEY));
    let e = error_event(&events);
    assert_eq!(e["error_code"], "model_auth_failed", "{e}");
    let text = serde_json::to_string(&events).unwrap();
    let platform_addr = platform.addr().to_string();
    for leak in [
        platform_addr.as_str(),
        "127.0.0.1",
        "platform-model",
        "Auth {",
        "LlmError",
        "openai",
    ] {
        assert!(!text.contains(leak), "{leak:?} leaked: {text}");
    }
    // The run's record says the same.
    let runs = ok(
        ctx,
        Method::GET,
        "/api/v1/executions?status=failed",
        &t.admin.key,
        None,
        200,
    )
    .await;
    for run in runs["items"].as_array().unwrap() {
        let err = run["error"].as_str().unwrap_or_default();
        assert!(!err.contains(&platform_addr), "{err}");
    }
    assert_no_key_logged(ctx);
}

/// The platform admin turns the platform's model off for a tenant: its assistants without a
/// connection fail at once with `model_not_configured`; those with one run; other tenants are
/// untouched.
pub async fn without_the_platform_model_an_assistant_needs_a_connection(
    ctx: &Ctx,
    platform: &FakeModelServer,
) {
    let fake = tenant_fake(None);
    let t = ctx.tenant().await;
    let other = ctx.tenant().await;
    connection(
        ctx,
        &t,
        json!({"id": "own", "provider": "openai", "base_url": fake.base_url_openai()}),
    )
    .await;
    agent(ctx, &t, json!({"id": "own", "model_connection": "own"})).await;
    let (session, events) = chat(ctx, &t.member.key, "default", None, "/echo before").await;
    assert_eq!(done(&events)["status"], "completed", "{events:?}");

    let patched = ok(
        ctx,
        Method::PATCH,
        &format!("/api/v1/admin/tenants/{}", t.id),
        ADMIN_KEY,
        Some(json!({"policy": {"own_models_only": true}})),
        200,
    )
    .await;
    assert_eq!(patched["policy"]["own_models_only"], true);
    // The tenant admin reads it, and cannot change it.
    let mine = ok(ctx, Method::GET, "/api/v1/tenant", &t.admin.key, None, 200).await;
    assert_eq!(mine["policy"]["own_models_only"], true);

    let before = platform.request_count();
    // The live session's next run hears of it.
    let (_, events) = chat(ctx, &t.member.key, "default", Some(&session), "/echo after").await;
    let d = done(&events);
    assert_eq!(
        (d["status"].as_str(), d["reason"].as_str()),
        (Some("failed"), Some("model_not_configured")),
        "{events:?}"
    );
    let msg = error_event(&events)["error"].as_str().unwrap().to_string();
    assert!(
        msg.contains("model_connection") && msg.contains("/api/v1/model-connections"),
        "{msg}"
    );
    assert_eq!(
        platform.request_count(),
        before,
        "the platform's model was not asked"
    );
    // Over the WebSocket too.
    let s = ok(
        ctx,
        Method::POST,
        "/api/v1/sessions",
        &t.member.key,
        Some(json!({})),
        201,
    )
    .await;
    let mut ws = ws_connect(ctx, &t.member.key, s["session_id"].as_str().unwrap()).await;
    ws.send(Message::text(
        json!({"type": "chat", "payload": {"message": "hi"}}).to_string(),
    ))
    .await
    .unwrap();
    let events = until_done_or_hitl(&mut ws).await;
    assert_eq!(
        error_event(&events)["error_code"],
        "model_not_configured",
        "{events:?}"
    );

    let (_, events) = chat(ctx, &t.member.key, "own", None, "/echo mine").await;
    assert_eq!(done(&events)["status"], "completed", "{events:?}");
    let (_, events) = chat(ctx, &other.member.key, "default", None, "/echo other").await;
    assert_eq!(done(&events)["status"], "completed", "{events:?}");

    // Back on.
    ok(
        ctx,
        Method::PATCH,
        &format!("/api/v1/admin/tenants/{}", t.id),
        ADMIN_KEY,
        Some(json!({"policy": {"own_models_only": null}})),
        200,
    )
    .await;
    tokio::time::sleep(Duration::from_millis(50)).await;
    let (_, events) = chat(ctx, &t.member.key, "default", Some(&session), "/echo again").await;
    assert_eq!(done(&events)["status"], "completed", "{events:?}");
}

/// Every status the model connection routes document, as the completeness check wants to see
/// them (the matrix covers 200/201/204/401/403/404 per caller).
pub async fn model_connections_rest(ctx: &Ctx) {
    let t = ctx.tenant().await;
    let admin = t.admin.key.as_str();
    let list = "/api/v1/model-connections";
    let body = json!({"id": "rest", "provider": "openai", "base_url": "http://127.0.0.2:9/v1", "api_key": "rest-key"});
    ok(ctx, Method::POST, list, admin, Some(body.clone()), 201).await;
    let r = call(ctx, Method::POST, list, admin, Some(body.clone())).await;
    assert_eq!((r.status, r.code()), (409, "conflict"), "{:?}", r.body);
    let one = format!("{list}/rest");
    for (method, path) in [(Method::POST, list), (Method::PUT, one.as_str())] {
        let raw = |ct: &str, b: String| {
            ctx.request(method.clone(), path, Some(admin))
                .header("content-type", ct)
                .body(b)
        };
        let r = ctx.send(raw("application/json", "{not json".into())).await;
        assert_eq!((r.status, r.code()), (400, "invalid_json"), "{method}");
        let r = ctx.send(raw("text/plain", body.to_string())).await;
        assert_eq!(
            (r.status, r.code()),
            (415, "unsupported_media_type"),
            "{method}"
        );
        let r = ctx
            .send(raw(
                "application/json",
                json!({"id": "x", "provider": "openai", "model": "m".repeat(40_000)}).to_string(),
            ))
            .await;
        assert_eq!((r.status, r.code()), (413, "payload_too_large"), "{method}");
        let r = call(
            ctx,
            method.clone(),
            path,
            admin,
            Some(json!({"id": "rest", "provider": "nope"})),
        )
        .await;
        assert_eq!((r.status, r.code()), (422, "validation_error"), "{method}");
    }
    for method in [Method::GET, Method::PUT, Method::DELETE] {
        let r = call(
            ctx,
            method.clone(),
            &format!("{list}/NOT_A_SLUG"),
            admin,
            Some(json!({"provider": "openai"})),
        )
        .await;
        assert_eq!((r.status, r.code()), (400, "bad_request"), "{method}");
        assert_eq!(r.details()["parameter"], "connection_id");
        let r = call(
            ctx,
            method.clone(),
            &format!("{list}/nope"),
            admin,
            Some(json!({"provider": "openai"})),
        )
        .await;
        assert_eq!((r.status, r.code()), (404, "not_found"), "{method}");
    }
    agent(
        ctx,
        &t,
        json!({"id": "rest-user", "model_connection": "rest"}),
    )
    .await;
    let r = call(ctx, Method::DELETE, &one, admin, None).await;
    assert_eq!((r.status, r.code()), (409, "conflict"));
    ok(
        ctx,
        Method::PUT,
        &one,
        admin,
        Some(json!({"provider": "anthropic", "timeout_secs": 5})),
        200,
    )
    .await;
}

/// A server without an encryption key stores connections without a key, and refuses a key
/// (503, nothing changed).
pub async fn model_connections_without_encryption_key(ctx: &Ctx) {
    let t = ctx.tenant().await;
    let admin = t.admin.key.as_str();
    let list = "/api/v1/model-connections";
    let r = call(
        ctx,
        Method::POST,
        list,
        admin,
        Some(json!({"id": "k", "provider": "openai", "api_key": "some-key"})),
    )
    .await;
    assert_eq!(
        (r.status, r.code()),
        (503, "service_unavailable"),
        "{:?}",
        r.body
    );
    assert!(r.message().contains("encryption key"), "{}", r.message());
    ok(
        ctx,
        Method::POST,
        list,
        admin,
        Some(json!({"id": "k", "provider": "openai"})),
        201,
    )
    .await;
    let r = call(
        ctx,
        Method::PUT,
        &format!("{list}/k"),
        admin,
        Some(json!({"provider": "openai", "api_key": "some-key"})),
    )
    .await;
    assert_eq!(
        (r.status, r.code()),
        (503, "service_unavailable"),
        "{:?}",
        r.body
    );
    let kept = ok(ctx, Method::GET, &format!("{list}/k"), admin, None, 200).await;
    assert_eq!(kept["api_key_set"], false);
}

/// Cluster mode: a connection changed on replica A reaches the live session on replica B at
/// its next run, through the changes channel over Redis, well before B's own reuse period of
/// its assistant's settings (5 s) would have let it notice.
pub async fn a_connection_changed_on_one_replica_reaches_a_live_session_on_another(db_url: &str) {
    let fake = tenant_fake(None);
    let redis = crate::cluster::redis_url();
    let prefix = crate::ctx::unique("byok-changes");
    let start = |id: &'static str| {
        let (redis, prefix) = (redis.clone(), prefix.clone());
        async move {
            Ctx::start_with(
                &[
                    ("AGENTRY_REDIS__URL", redis.as_str()),
                    ("AGENTRY_REDIS__KEY_PREFIX", prefix.as_str()),
                    ("AGENTRY_CLUSTER__REPLICA_ID", id),
                ],
                Some(db_url),
            )
            .await
        }
    };
    let a = start("byok-a").await;
    let b = start("byok-b").await;
    let t = a.tenant().await;
    let base = fake.base_url_openai();
    connection(
        &a,
        &t,
        json!({"id": "c", "provider": "openai", "base_url": base, "api_key": KEY_A}),
    )
    .await;
    agent(&a, &t, json!({"id": "byok", "model_connection": "c"})).await;
    // A live session on B, which has just loaded the assistant and its connection.
    let (session, events) = chat(&b, &t.member.key, "byok", None, "/echo one").await;
    assert_eq!(done(&events)["status"], "completed", "{events:?}");
    assert_eq!(
        fake.requests().last().unwrap().header("authorization"),
        Some(format!("Bearer {KEY_A}").as_str())
    );
    let loaded = std::time::Instant::now();
    ok(
        &a,
        Method::PUT,
        "/api/v1/model-connections/c",
        &t.admin.key,
        Some(
            json!({"provider": "openai", "base_url": base, "api_key": KEY_A2, "model": "rotated"}),
        ),
        200,
    )
    .await;
    loop {
        let (_, events) = chat(&b, &t.member.key, "byok", Some(&session), "/echo again").await;
        assert_eq!(done(&events)["status"], "completed", "{events:?}");
        let last = fake.requests().last().unwrap().clone();
        if last.header("authorization") == Some(format!("Bearer {KEY_A2}").as_str()) {
            assert_eq!(last.body["model"], "rotated");
            break;
        }
        assert!(
            loaded.elapsed() < Duration::from_secs(4),
            "B's live session still uses the old key {:?} after the change on A",
            loaded.elapsed()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    eprintln!(
        "the change on A reached B's session {:?} after B loaded it",
        loaded.elapsed()
    );
}

/// The platform's model out of reach: the tenant hears that, not where it lives.
pub async fn an_unreachable_platform_model_does_not_say_where_it_is() {
    // Nothing listens on port 9 (discard) of loopback: the connection is refused.
    let ctx = Ctx::start_with(
        &[
            ("AGENTRY_LLM__PROVIDER", "openai"),
            (
                "AGENTRY_LLM__BASE_URL",
                "http://127.0.0.1:9/internal-llm/v1",
            ),
            ("AGENTRY_LLM__API_KEY", PLATFORM_KEY),
        ],
        None,
    )
    .await;
    let t = ctx.tenant().await;
    agent(&ctx, &t, json!({"id": "once", "max_retries": 0})).await;
    let (_, events) = chat(&ctx, &t.member.key, "once", None, "/echo hi").await;
    let e = error_event(&events);
    assert_eq!(e["error_code"], "model_error", "{e}");
    let text = serde_json::to_string(&events).unwrap();
    for leak in ["127.0.0.1", "internal-llm", ":9/", PLATFORM_KEY] {
        assert!(!text.contains(leak), "{leak:?} leaked: {text}");
    }
    assert!(
        e["error"]
            .as_str()
            .unwrap()
            .contains("platform's model provider"),
        "{e}"
    );
}
