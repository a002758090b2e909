//! Custom roles (issue 17, item 5; docs/admin.md, "Roles"): a tenant admin defines roles with
//! their own tool patterns (prefix wildcards included) and REST areas; users and keys hold them;
//! a key's role is its user's or, for a tenant admin's key, any role of the tenant; the role's
//! tools are all the model is offered and all it may call; its areas are all it may reach, over
//! REST, SSE, WebSocket, `/v1` and `/mcp`; a change bites at once; a held role cannot be deleted;
//! another tenant never sees or uses it.

use agentry_fake_model::FakeModelServer;
use reqwest::Method;
use serde_json::{Value, json};

use crate::ctx::{Ctx, unique};
use crate::policy::offered_to;

async fn create_role(ctx: &Ctx, key: &str, body: Value, want: u16) -> Value {
    ctx.ok(Method::POST, "/api/v1/tenant/roles", key, Some(body), want)
        .await
}

/// A user of the tenant with `custom_role`, made by its admin, and a key of theirs.
async fn holder(ctx: &Ctx, admin_key: &str, role: &str) -> (String, String) {
    let u = ctx
        .ok(
            Method::POST,
            "/api/v1/tenant/users",
            admin_key,
            Some(json!({ "name": unique(role), "custom_role": role })),
            201,
        )
        .await;
    assert_eq!(u["role"], "member", "{u}");
    assert_eq!(u["custom_role"], role, "{u}");
    let user_id = u["id"].as_str().unwrap().to_string();
    let k = ctx
        .ok(
            Method::POST,
            "/api/v1/tenant/api-keys",
            admin_key,
            Some(json!({ "user_id": user_id, "name": "k" })),
            201,
        )
        .await;
    assert_eq!(
        k["custom_role"], role,
        "the key inherits its user's role: {k}"
    );
    (user_id, k["key"].as_str().unwrap().to_string())
}

fn error_code(v: &Value) -> &str {
    v["error_code"].as_str().unwrap_or("")
}

/// The whole flow; `fake` (the server's model) adds what the model is offered and may call.
pub async fn custom_roles(ctx: &Ctx, fake: Option<&FakeModelServer>) {
    let t = ctx.tenant().await;
    let admin = t.admin.key.as_str();

    // Defining: checked names, patterns and areas; admins only; no duplicates.
    let analyst = create_role(
        ctx,
        admin,
        json!({
            "name": "analyst",
            "description": "Reads files, chats; nothing else",
            "tools": ["files:read_*", "files:list_directory", "files:read_file"],
            "areas": ["chat", "files", "chat"],
        }),
        201,
    )
    .await;
    assert_eq!(analyst["builtin"], false);
    assert_eq!(
        analyst["tools"],
        json!(["files:read_*", "files:list_directory", "files:read_file"])
    );
    assert_eq!(analyst["areas"], json!(["chat", "files"]), "deduplicated");
    for (body, field) in [
        (json!({"name": "Analyst", "tools": [], "areas": []}), "name"),
        (json!({"name": "member", "tools": [], "areas": []}), "name"),
        (json!({"name": "admin", "tools": [], "areas": []}), "name"),
        (json!({"tools": [], "areas": []}), "name"),
        (
            json!({"name": "x", "tools": ["files"], "areas": []}),
            "tools[0]",
        ),
        (
            json!({"name": "x", "tools": ["*:read_file"], "areas": []}),
            "tools[0]",
        ),
        (
            json!({"name": "x", "tools": ["files:re*d"], "areas": []}),
            "tools[0]",
        ),
    ] {
        let r = create_role(ctx, admin, body.clone(), 422).await;
        assert_eq!(error_code(&r), "validation_error", "{body}: {r}");
        assert_eq!(r["details"]["field"], field, "{body}: {r}");
    }
    let r = create_role(
        ctx,
        admin,
        json!({"name": "x", "tools": [], "areas": ["root"]}),
        422,
    )
    .await;
    assert!(r["message"].as_str().unwrap().contains("root"), "{r}");
    let r = create_role(
        ctx,
        admin,
        json!({"name": "analyst", "tools": [], "areas": []}),
        409,
    )
    .await;
    assert_eq!(error_code(&r), "conflict", "{r}");
    create_role(
        ctx,
        &t.member.key,
        json!({"name": "sneaky", "tools": ["*:*"], "areas": ["chat"]}),
        403,
    )
    .await;

    // Listing: the built-ins with the permissions in force, then the custom ones.
    let roles = ctx
        .ok(Method::GET, "/api/v1/tenant/roles", admin, None, 200)
        .await;
    let names: Vec<&str> = roles
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["admin", "member", "analyst"], "{roles}");
    let member = ctx
        .ok(Method::GET, "/api/v1/tenant/roles/member", admin, None, 200)
        .await;
    assert_eq!(member["builtin"], true);
    assert!(
        member["tools"]
            .as_array()
            .unwrap()
            .contains(&json!("!shell:*")),
        "{member}"
    );
    ctx.ok(Method::GET, "/api/v1/tenant/roles/nobody", admin, None, 404)
        .await;
    let r = ctx
        .ok(
            Method::PUT,
            "/api/v1/tenant/roles/member",
            admin,
            Some(json!({"tools": ["*:*"], "areas": []})),
            409,
        )
        .await;
    assert_eq!(error_code(&r), "conflict", "{r}");

    // Holding: users and keys, never beyond the user's own role.
    for (body, field) in [
        (
            json!({"name": unique("u"), "custom_role": "ghost"}),
            "custom_role",
        ),
        (
            json!({"name": unique("u"), "custom_role": "analyst", "role": "admin"}),
            "role",
        ),
    ] {
        let r = ctx
            .ok(Method::POST, "/api/v1/tenant/users", admin, Some(body), 422)
            .await;
        assert_eq!(r["details"]["field"], field, "{r}");
    }
    let (analyst_user, analyst_key) = holder(ctx, admin, "analyst").await;
    // A member may not get a key of another role (it could grant more than `member` does)...
    let r = ctx
        .ok(
            Method::POST,
            "/api/v1/tenant/api-keys",
            admin,
            Some(json!({"user_id": t.member.user_id, "name": "k", "custom_role": "analyst"})),
            422,
        )
        .await;
    assert_eq!(r["details"]["field"], "custom_role", "{r}");
    // ...nor the analyst a plain member key.
    let r = ctx
        .ok(
            Method::POST,
            "/api/v1/tenant/api-keys",
            admin,
            Some(json!({"user_id": analyst_user, "name": "k", "role": "member"})),
            422,
        )
        .await;
    assert!(r["message"].as_str().unwrap().contains("analyst"), "{r}");
    // A tenant admin's key may have any role of the tenant, and then has only that role.
    let admin_as_analyst = ctx
        .ok(
            Method::POST,
            "/api/v1/tenant/api-keys",
            admin,
            Some(json!({"user_id": t.admin.user_id, "name": "narrow", "custom_role": "analyst"})),
            201,
        )
        .await;
    let admin_as_analyst = admin_as_analyst["key"].as_str().unwrap().to_string();
    for key in [&analyst_key, &admin_as_analyst] {
        let me = ctx.ok(Method::GET, "/api/v1/me", key, None, 200).await;
        assert_eq!(me["role"], "member", "{me}");
        assert_eq!(me["custom_role"], "analyst", "{me}");
        ctx.ok(Method::GET, "/api/v1/tenant/users", key, None, 403)
            .await;
    }

    // Areas: what the role lists is reachable, nothing else, on every transport.
    ctx.ok(Method::GET, "/api/v1/sessions", &analyst_key, None, 200)
        .await;
    let r = ctx
        .ok(Method::GET, "/api/v1/memories", &analyst_key, None, 403)
        .await;
    assert_eq!(error_code(&r), "forbidden", "{r}");
    assert_eq!(r["details"], json!({"role": "analyst", "area": "memories"}));
    for path in [
        "/api/v1/executions",
        "/api/v1/mcp-servers",
        "/api/v1/skills",
    ] {
        ctx.ok(Method::GET, path, &analyst_key, None, 403).await;
    }
    let r = ctx
        .call(Method::POST, "/mcp", Some(&analyst_key), Some(&json!({})))
        .await;
    assert_eq!(r.status, 403, "/mcp is its own area: {}", r.body);

    // Tools: only the role's patterns are offered, and a call beyond them is refused.
    if let Some(fake) = fake {
        tools_of_the_role(ctx, fake, &analyst_key).await;
    }

    // A change bites at once: memories become reachable, the role's tools follow.
    let changed = ctx
        .ok(
            Method::PUT,
            "/api/v1/tenant/roles/analyst",
            admin,
            Some(json!({"tools": ["files:*", "memory:*"], "areas": ["chat", "files", "memories"]})),
            200,
        )
        .await;
    assert_eq!(changed["areas"], json!(["chat", "files", "memories"]));
    ctx.ok(Method::GET, "/api/v1/memories", &analyst_key, None, 200)
        .await;
    if let Some(fake) = fake {
        let (tools, _) = offered_to(ctx, fake, &analyst_key, "hello").await;
        assert!(tools.contains("write_file"), "{tools:?}");
    }
    let r = ctx
        .ok(
            Method::PUT,
            "/api/v1/tenant/roles/analyst",
            admin,
            Some(json!({"name": "renamed", "tools": [], "areas": []})),
            422,
        )
        .await;
    assert_eq!(r["details"]["field"], "name", "{r}");

    // Another tenant: the name means nothing there.
    let other = ctx.tenant().await;
    ctx.ok(
        Method::GET,
        "/api/v1/tenant/roles/analyst",
        &other.admin.key,
        None,
        404,
    )
    .await;
    let r = ctx
        .ok(
            Method::POST,
            "/api/v1/tenant/users",
            &other.admin.key,
            Some(json!({"name": unique("u"), "custom_role": "analyst"})),
            422,
        )
        .await;
    assert_eq!(r["details"]["field"], "custom_role", "{r}");

    // A role without the chat area cannot chat on any transport.
    create_role(
        ctx,
        admin,
        json!({"name": "read-only-file-viewer", "tools": ["files:read_file"], "areas": ["files"]}),
        201,
    )
    .await;
    let (_, reader_key) = holder(ctx, admin, "read-only-file-viewer").await;
    for (method, path, body) in [
        (Method::POST, "/api/v1/chat", json!({"message": "hi"})),
        (Method::GET, "/api/v1/sessions", Value::Null),
        (
            Method::POST,
            "/v1/chat/completions",
            json!({"model": "x", "messages": [{"role": "user", "content": "hi"}]}),
        ),
    ] {
        let body = (!body.is_null()).then_some(body);
        let r = ctx
            .call(method.clone(), path, Some(&reader_key), body.as_ref())
            .await;
        assert_eq!(r.status, 403, "{method} {path}: {}", r.body);
    }
    let ws = ctx
        .http
        .get(ctx.url("/ws/chat/00000000-0000-7000-8000-000000000000"))
        .bearer_auth(&reader_key)
        .header("connection", "upgrade")
        .header("upgrade", "websocket")
        .header("sec-websocket-version", "13")
        .header("sec-websocket-key", "dGhlIHNhbXBsZSBub25jZQ==")
        .send()
        .await
        .unwrap();
    assert_eq!(ws.status(), 403, "the WebSocket upgrade is refused too");

    // Deleting: refused while held (users and unrevoked keys), then gone.
    let r = ctx
        .ok(
            Method::DELETE,
            "/api/v1/tenant/roles/analyst",
            admin,
            None,
            409,
        )
        .await;
    assert_eq!(r["details"]["users"], 1, "{r}");
    assert_eq!(r["details"]["keys"], 2, "{r}");
    let u = ctx
        .ok(
            Method::PATCH,
            &format!("/api/v1/tenant/users/{analyst_user}"),
            admin,
            Some(json!({"custom_role": null})),
            200,
        )
        .await;
    assert_eq!(u["custom_role"], Value::Null, "{u}");
    assert_eq!(u["role"], "member", "{u}");
    // The analyst's old key now has the user's role: member.
    let me = ctx
        .ok(Method::GET, "/api/v1/me", &analyst_key, None, 200)
        .await;
    assert_eq!(me["custom_role"], Value::Null, "{me}");
    let keys = ctx
        .ok(Method::GET, "/api/v1/tenant/api-keys", admin, None, 200)
        .await;
    for k in keys["items"].as_array().unwrap() {
        if k["custom_role"] == "analyst" {
            let id = k["id"].as_str().unwrap();
            ctx.ok(
                Method::DELETE,
                &format!("/api/v1/tenant/api-keys/{id}"),
                admin,
                None,
                200,
            )
            .await;
        }
    }
    ctx.ok(
        Method::DELETE,
        "/api/v1/tenant/roles/analyst",
        admin,
        None,
        204,
    )
    .await;
    ctx.ok(
        Method::GET,
        "/api/v1/tenant/roles/analyst",
        admin,
        None,
        404,
    )
    .await;
}

/// The analyst's tools: read and list, nothing else, and a call beyond them is refused.
async fn tools_of_the_role(ctx: &Ctx, fake: &FakeModelServer, analyst_key: &str) {
    let (tools, _) = offered_to(ctx, fake, analyst_key, "hello").await;
    assert!(tools.contains("read_file"), "{tools:?}");
    assert!(tools.contains("list_directory"), "{tools:?}");
    for not in ["write_file", "execute", "remember", "web_fetch"] {
        assert!(
            !tools.contains(not),
            "{not} is not the analyst's: {tools:?}"
        );
    }
    let (_, r) = offered_to(
        ctx,
        fake,
        analyst_key,
        r#"/tool write_file {"path": "pwned.txt", "content": "x"}"#,
    )
    .await;
    let result = r["events"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["event_type"] == "tool_result")
        .cloned()
        .unwrap_or_else(|| panic!("a tool result: {r}"));
    assert_eq!(result["data"]["status"], "error", "{result}");
    let text = result["data"]["result"].to_string();
    assert!(text.contains("permission_denied"), "{text}");
    assert!(
        text.contains("analyst"),
        "the denial names the role: {text}"
    );
}
