//! Roles and the tenant policy (DESIGN §13): what the platform admin sets per tenant, and the
//! rights it gives or withholds from the tenant's members and admins.

use std::collections::BTreeSet;

use agentry_fake_model::{FakeModelServer, RecordedRequest};
use reqwest::Method;
use serde_json::{Value, json};

use crate::ctx::{ADMIN_KEY, Ctx};
use crate::mcp::{types, ws_connect};
use crate::streaming::{send, until_done_or_hitl};

fn tenant_path(id: &str) -> String {
    format!("/api/v1/admin/tenants/{id}")
}

/// The policy is stored, shown, merged by PATCH, reset by PUT, and checked: a bad value is a
/// 422 naming the field and changes nothing.
pub async fn tenant_policy(ctx: &Ctx) {
    // Without a policy: the strict defaults, every field shown.
    let plain = ctx.tenant().await;
    let got = ctx
        .ok(Method::GET, &tenant_path(&plain.id), ADMIN_KEY, None, 200)
        .await;
    assert_eq!(
        got["policy"],
        json!({"stdio_mcp_role": "admin", "members_may_auto_approve": false,
               "own_models_only": false, "sandbox": {"egress": false}})
    );

    // Set on creation.
    let t = ctx
        .tenant_with(json!({"policy": {
            "stdio_mcp_role": "member",
            "sandbox": {"cpu_secs": 5, "max_processes": 64, "memory_bytes": 268435456}
        }}))
        .await;
    let path = tenant_path(&t.id);
    let got = ctx.ok(Method::GET, &path, ADMIN_KEY, None, 200).await;
    assert_eq!(got["policy"]["stdio_mcp_role"], "member");
    assert_eq!(got["policy"]["members_may_auto_approve"], false);
    assert_eq!(
        got["policy"]["sandbox"],
        json!({"egress": false, "cpu_secs": 5, "max_processes": 64, "memory_bytes": 268435456})
    );

    // PATCH merges: only the named fields change; `null` returns one field to its default.
    let got = ctx
        .ok(
            Method::PATCH,
            &path,
            ADMIN_KEY,
            Some(json!({"policy": {"members_may_auto_approve": true,
                                   "sandbox": {"cpu_secs": null, "egress": true}}})),
            200,
        )
        .await;
    assert_eq!(got["policy"]["stdio_mcp_role"], "member");
    assert_eq!(got["policy"]["members_may_auto_approve"], true);
    assert_eq!(
        got["policy"]["sandbox"],
        json!({"egress": true, "max_processes": 64, "memory_bytes": 268435456})
    );
    // A PATCH of something else leaves the policy alone.
    let got = ctx
        .ok(
            Method::PATCH,
            &path,
            ADMIN_KEY,
            Some(json!({"max_users": 50})),
            200,
        )
        .await;
    assert_eq!(got["policy"]["members_may_auto_approve"], true);
    let before = got["policy"].clone();

    // Bad values: 422 naming the field, and nothing changes.
    let bad: [(Value, &str); 7] = [
        (json!({"stdio_mcp_role": "root"}), "policy.stdio_mcp_role"),
        (
            json!({"members_may_auto_approve": "yes"}),
            "policy.members_may_auto_approve",
        ),
        (
            json!({"sandbox": {"cpu_secs": 0}}),
            "policy.sandbox.cpu_secs",
        ),
        (
            json!({"sandbox": {"max_open_files": -3}}),
            "policy.sandbox.max_open_files",
        ),
        (
            json!({"sandbox": {"memory_bytes": u64::MAX}}),
            "policy.sandbox.memory_bytes",
        ),
        (
            json!({"sandbox": {"network": true}}),
            "policy.sandbox.network",
        ),
        (json!({"shell": true}), "policy.shell"),
    ];
    for (policy, field) in bad {
        for method in [Method::PATCH, Method::PUT] {
            let mut body = json!({ "policy": policy });
            if method == Method::PUT {
                body["name"] = got["name"].clone();
            }
            let r = ctx
                .call(method.clone(), &path, Some(ADMIN_KEY), Some(&body))
                .await;
            assert_eq!(r.status, 422, "{method} {body}: {}", r.body);
            assert_eq!(r.code(), "validation_error");
            assert_eq!(r.body["details"]["field"], field, "{method} {body}");
        }
        let r = ctx
            .call(
                Method::POST,
                "/api/v1/admin/tenants",
                Some(ADMIN_KEY),
                Some(&json!({"name": crate::ctx::unique("bad"), "policy": policy})),
            )
            .await;
        assert_eq!(r.status, 422, "POST {policy}: {}", r.body);
        assert_eq!(r.body["details"]["field"], field);
    }
    let r = ctx
        .call(
            Method::PATCH,
            &path,
            Some(ADMIN_KEY),
            Some(&json!({"policy": [1]})),
        )
        .await;
    assert_eq!((r.status, r.code()), (422, "validation_error"));
    let now = ctx.ok(Method::GET, &path, ADMIN_KEY, None, 200).await;
    assert_eq!(now["policy"], before, "a refused change changed nothing");

    // `"policy": null` in a PATCH, and a PUT without a policy, return to the defaults.
    let got = ctx
        .ok(
            Method::PATCH,
            &path,
            ADMIN_KEY,
            Some(json!({"policy": null})),
            200,
        )
        .await;
    assert_eq!(got["policy"], plain_policy());
    ctx.ok(
        Method::PATCH,
        &path,
        ADMIN_KEY,
        Some(json!({"policy": {"stdio_mcp_role": "member"}})),
        200,
    )
    .await;
    let got = ctx
        .ok(
            Method::PUT,
            &path,
            ADMIN_KEY,
            Some(json!({"name": now["name"]})),
            200,
        )
        .await;
    assert_eq!(got["policy"], plain_policy());

    // Tenant admins and members cannot see or set it: the admin API is the platform's.
    for key in [&t.admin.key, &t.member.key] {
        let r = ctx
            .call(
                Method::PATCH,
                &path,
                Some(key),
                Some(&json!({"policy": {"members_may_auto_approve": true}})),
            )
            .await;
        assert_eq!(r.status, 403, "{}", r.body);
    }
}

fn plain_policy() -> Value {
    json!({"stdio_mcp_role": "admin", "members_may_auto_approve": false,
           "own_models_only": false, "sandbox": {"egress": false}})
}

fn session_path(id: &str) -> String {
    format!("/api/v1/sessions/{id}")
}

async fn session_with(ctx: &Ctx, key: &str, body: Value, want: u16) -> Value {
    ctx.ok(Method::POST, "/api/v1/sessions", key, Some(body), want)
        .await
}

/// A run over the socket until `done` or a `hitl_request` (returned last).
async fn run_until_done_or_hitl(ctx: &Ctx, key: &str, session: &str, message: &str) -> Vec<Value> {
    let mut ws = ws_connect(ctx, key, session).await;
    send(
        &mut ws,
        json!({"type": "chat", "payload": {"message": message}}),
    )
    .await;
    until_done_or_hitl(&mut ws).await
}

/// `auto_approve` switches approvals off, so it is a tenant admin's right (or the members', by
/// the tenant policy): refused to a member with 403 and nothing created, shown on the session,
/// and honoured at run time only while whoever runs the session still has the right.
pub async fn auto_approve_rights(ctx: &Ctx) {
    let t = ctx.tenant().await;
    let sessions_before = ctx
        .ok(Method::GET, "/api/v1/sessions", &t.member.key, None, 200)
        .await["total"]
        .clone();

    // A member may not; a refused request creates nothing.
    let r = ctx
        .call(
            Method::POST,
            "/api/v1/sessions",
            Some(&t.member.key),
            Some(&json!({"auto_approve": true})),
        )
        .await;
    assert_eq!((r.status, r.code()), (403, "forbidden"), "{}", r.body);
    let msg = r.body["message"].as_str().unwrap();
    assert!(
        msg.contains("auto_approve") && msg.contains("members_may_auto_approve"),
        "the message names the right: {msg}"
    );
    let after = ctx
        .ok(Method::GET, "/api/v1/sessions", &t.member.key, None, 200)
        .await;
    assert_eq!(after["total"], sessions_before, "nothing was created");
    // `false` (or leaving it out) is everyone's.
    let s = session_with(ctx, &t.member.key, json!({"auto_approve": false}), 201).await;
    assert_eq!(s["auto_approve"], false);

    // A member cannot give an agent `auto_approve` either: agents are the tenant admin's.
    for method in [Method::POST, Method::PUT] {
        let r = ctx
            .call(
                method.clone(),
                "/api/v1/agents/auto-agent",
                Some(&t.member.key),
                Some(&json!({"auto_approve": true})),
            )
            .await;
        assert_eq!(
            (r.status, r.code()),
            (403, "forbidden"),
            "{method}: {}",
            r.body
        );
    }

    // A tenant admin may, and the session shows it.
    let s = session_with(ctx, &t.admin.key, json!({"auto_approve": true}), 201).await;
    assert_eq!(s["auto_approve"], true, "{s}");
    let sid = s["session_id"].as_str().unwrap();
    let got = ctx
        .ok(Method::GET, &session_path(sid), &t.admin.key, None, 200)
        .await;
    assert_eq!(got["auto_approve"], true, "{got}");
    // …and its write runs without asking.
    let evs = run_until_done_or_hitl(
        ctx,
        &t.admin.key,
        sid,
        r#"/tool write_file {"file_path": "auto.txt", "content": "no approval"}"#,
    )
    .await;
    assert_eq!(types(&evs).last(), Some(&"done"), "{evs:?}");
    assert!(!types(&evs).contains(&"hitl_request"), "{evs:?}");

    // With the tenant policy, members may too.
    let path = tenant_path(&t.id);
    ctx.ok(
        Method::PATCH,
        &path,
        ADMIN_KEY,
        Some(json!({"policy": {"members_may_auto_approve": true}})),
        200,
    )
    .await;
    let s = session_with(ctx, &t.member.key, json!({"auto_approve": true}), 201).await;
    assert_eq!(s["auto_approve"], true);
    let member_sid = s["session_id"].as_str().unwrap().to_string();

    // The platform admin takes the right back: the member's session keeps its flag, but its
    // next run asks for approval again.
    ctx.ok(
        Method::PATCH,
        &path,
        ADMIN_KEY,
        Some(json!({"policy": {"members_may_auto_approve": false}})),
        200,
    )
    .await;
    let evs = run_until_done_or_hitl(
        ctx,
        &t.member.key,
        &member_sid,
        r#"/tool write_file {"file_path": "asked.txt", "content": "needs approval"}"#,
    )
    .await;
    assert_eq!(
        types(&evs).last(),
        Some(&"hitl_request"),
        "a revoked right is not honoured: {evs:?}"
    );
    ctx.ok(
        Method::POST,
        &format!("{}/cancel", session_path(&member_sid)),
        &t.member.key,
        None,
        200,
    )
    .await;
}

/// The tool names a model request offered, on either wire.
pub fn offered(req: &RecordedRequest) -> BTreeSet<String> {
    req.body["tools"]
        .as_array()
        .map(|tools| {
            tools
                .iter()
                .filter_map(|t| {
                    t["function"]["name"]
                        .as_str()
                        .or_else(|| t["name"].as_str())
                        .map(str::to_string)
                })
                .collect()
        })
        .unwrap_or_default()
}

/// One REST chat in a new session; the tools the model was offered for it.
pub async fn offered_to(
    ctx: &Ctx,
    fake: &FakeModelServer,
    key: &str,
    message: &str,
) -> (BTreeSet<String>, Value) {
    let before = fake.requests().len();
    let r = ctx
        .ok(
            Method::POST,
            "/api/v1/chat",
            key,
            Some(json!({ "message": message })),
            200,
        )
        .await;
    let reqs = fake.requests();
    assert!(reqs.len() > before, "the model was asked");
    (offered(&reqs[before]), r)
}

/// Tools a caller may not use are never offered to the model, and a call the model makes to
/// one anyway is refused, audited and not run.
pub async fn tools_offered_to_the_model(ctx: &Ctx, fake: &FakeModelServer) {
    let t = ctx.tenant().await;
    let (admin_tools, _) = offered_to(ctx, fake, &t.admin.key, "hello").await;
    let (member_tools, _) = offered_to(ctx, fake, &t.member.key, "hello").await;
    for tool in [
        "execute",
        "start_service",
        "stop_service",
        "restart_service",
    ] {
        assert!(
            admin_tools.contains(tool),
            "admins get {tool}: {admin_tools:?}"
        );
        assert!(
            !member_tools.contains(tool),
            "members are not offered {tool}: {member_tools:?}"
        );
    }
    for tool in [
        "read_file",
        "write_file",
        "get_service_status",
        "write_todos",
    ] {
        assert!(
            member_tools.contains(tool),
            "members keep {tool}: {member_tools:?}"
        );
    }

    // A member whose model calls the shell anyway: refused as denied, audited, not run.
    let (_, r) = offered_to(
        ctx,
        fake,
        &t.member.key,
        r#"/tool execute {"command": "touch pwned"}"#,
    )
    .await;
    let events = r["events"].as_array().unwrap();
    let result = events
        .iter()
        .find(|e| e["event_type"] == "tool_result")
        .unwrap_or_else(|| panic!("a tool result: {events:?}"));
    assert_eq!(result["data"]["status"], "error", "{result}");
    assert!(
        result["data"]["result"]
            .to_string()
            .contains("permission_denied"),
        "{result}"
    );
    assert!(
        !types(events).contains(&"hitl_request"),
        "a denied call never reaches an approval: {events:?}"
    );
    let workspace = ctx
        .server
        .data_dir
        .path()
        .join("workspaces")
        .join(&t.id)
        .join(&t.member.user_id);
    assert!(!workspace.join("pwned").exists(), "the command did not run");

    // The tenant's own permissions narrow what is offered, to the tool.
    let narrow = ctx
        .tenant_with(json!({"tool_permissions": {"member": ["files:read_file", "todos:*"]}}))
        .await;
    let (member_tools, _) = offered_to(ctx, fake, &narrow.member.key, "hello").await;
    assert_eq!(
        member_tools,
        BTreeSet::from(["read_file".to_string(), "write_todos".to_string()]),
    );
    let (admin_tools, _) = offered_to(ctx, fake, &narrow.admin.key, "hello").await;
    assert!(admin_tools.contains("execute") && admin_tools.contains("write_file"));
    // A denied tool is not even named in the error the model gets for an unknown tool.
    let (_, r) = offered_to(ctx, fake, &narrow.member.key, r#"/tool no_such_tool {}"#).await;
    let result = r["events"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["event_type"] == "tool_result")
        .cloned()
        .unwrap_or_default();
    let text = result["data"]["result"].to_string();
    assert!(text.contains("read_file"), "{text}");
    assert!(
        !text.contains("write_file") && !text.contains("execute"),
        "{text}"
    );
}

fn servers_path(user: &str) -> String {
    format!("/api/v1/users/{user}/mcp-servers")
}

/// A stdio server that would run `id` on the host: what an attacker would add.
fn stdio_server(name: &str) -> Value {
    json!({"name": name, "command": "sh", "args": ["-c", "id > /tmp/agentry-pwned"]})
}

fn names(list: &Value) -> Vec<&str> {
    list.as_array()
        .unwrap()
        .iter()
        .map(|s| s["name"].as_str().unwrap())
        .collect()
}

/// Adding (or changing) a stdio server needs the tenant's `stdio_mcp` feature and the role the
/// tenant policy names; removing one does not.
pub async fn stdio_rights(ctx: &Ctx) {
    let t = ctx
        .tenant_with(json!({"features_enabled": ["stdio_mcp"]}))
        .await;
    let mine = servers_path(&t.member.user_id);

    // A member, even with the feature on, is refused with the right named; nothing is stored.
    let r = ctx
        .call(
            Method::POST,
            &mine,
            Some(&t.member.key),
            Some(&stdio_server("evil")),
        )
        .await;
    assert_eq!((r.status, r.code()), (403, "forbidden"), "{}", r.body);
    assert!(
        r.body["message"]
            .as_str()
            .unwrap()
            .contains("stdio_mcp_role"),
        "{}",
        r.body
    );
    let listed = ctx.ok(Method::GET, &mine, &t.member.key, None, 200).await;
    assert!(names(&listed).is_empty(), "{listed}");

    // A tenant admin may add one, for themselves or for the member.
    ctx.ok(
        Method::POST,
        &servers_path(&t.admin.user_id),
        &t.admin.key,
        Some(stdio_server("admins")),
        201,
    )
    .await;
    ctx.ok(
        Method::POST,
        &mine,
        &t.admin.key,
        Some(stdio_server("given")),
        201,
    )
    .await;
    // The member may not change the program it runs, nor turn an entry into another program…
    let r = ctx
        .call(
            Method::PUT,
            &format!("{mine}/given"),
            Some(&t.member.key),
            Some(&json!({"name": "given", "command": "sh", "args": ["-c", "cat /etc/shadow"]})),
        )
        .await;
    assert_eq!((r.status, r.code()), (403, "forbidden"), "{}", r.body);
    let got = ctx
        .ok(
            Method::GET,
            &format!("{mine}/given"),
            &t.member.key,
            None,
            200,
        )
        .await;
    assert_eq!(
        got["args"],
        json!(["-c", "id > /tmp/agentry-pwned"]),
        "unchanged"
    );
    // …but may remove it.
    ctx.ok(
        Method::DELETE,
        &format!("{mine}/given"),
        &t.member.key,
        None,
        204,
    )
    .await;

    // With `stdio_mcp_role: member`, members may.
    ctx.ok(
        Method::PATCH,
        &tenant_path(&t.id),
        ADMIN_KEY,
        Some(json!({"policy": {"stdio_mcp_role": "member"}})),
        200,
    )
    .await;
    ctx.ok(
        Method::POST,
        &mine,
        &t.member.key,
        Some(stdio_server("allowed")),
        201,
    )
    .await;

    // Without the feature, not even a tenant admin.
    let plain = ctx.tenant().await;
    let r = ctx
        .call(
            Method::POST,
            &servers_path(&plain.admin.user_id),
            Some(&plain.admin.key),
            Some(&stdio_server("nope")),
        )
        .await;
    assert_eq!((r.status, r.code()), (403, "forbidden"), "{}", r.body);
    assert!(
        r.body["message"].as_str().unwrap().contains("stdio_mcp"),
        "{}",
        r.body
    );
}

/// A `PUT` that sends a server back as `GET` showed it keeps its secrets; a new value replaces
/// one, `null` removes one, and `***` with nothing stored behind it is refused.
pub async fn masked_secrets_survive_a_put(ctx: &Ctx) {
    let t = ctx
        .tenant_with(json!({"features_enabled": ["stdio_mcp"]}))
        .await;
    let path = servers_path(&t.admin.user_id);
    let key = &t.admin.key;
    ctx.ok(
        Method::POST,
        &path,
        key,
        Some(json!({"name": "tools", "command": "true",
                    "env": {"API_KEY": "s3cret-value", "REGION": "eu-1"}})),
        201,
    )
    .await;
    let one = format!("{path}/tools");
    let mut view = ctx.ok(Method::GET, &one, key, None, 200).await;
    assert_eq!(view["env"], json!({"API_KEY": "***", "REGION": "***"}));

    // The view sent back unchanged (status and all): the secrets stay.
    ctx.ok(Method::PUT, &one, key, Some(view.clone()), 200)
        .await;
    assert_eq!(
        env_of(ctx, &t, "tools").await,
        pairs(&[("API_KEY", "s3cret-value"), ("REGION", "eu-1")])
    );

    // Keep one, replace nothing, remove one, add one.
    view["env"] = json!({"API_KEY": "***", "REGION": null, "NEW": "added"});
    view["args"] = json!(["changed"]);
    let got = ctx
        .ok(Method::PUT, &one, key, Some(view.clone()), 200)
        .await;
    assert_eq!(got["env"], json!({"API_KEY": "***", "NEW": "***"}));
    assert_eq!(got["args"], json!(["changed"]));
    assert_eq!(
        env_of(ctx, &t, "tools").await,
        pairs(&[("API_KEY", "s3cret-value"), ("NEW", "added")])
    );
    // Replace one.
    view["env"] = json!({"API_KEY": "rotated", "NEW": "***"});
    ctx.ok(Method::PUT, &one, key, Some(view.clone()), 200)
        .await;
    assert_eq!(
        env_of(ctx, &t, "tools").await,
        pairs(&[("API_KEY", "rotated"), ("NEW", "added")])
    );

    // `***` where nothing is stored: refused, naming the field, and nothing changes.
    view["env"] = json!({"API_KEY": "***", "GHOST": "***"});
    let r = ctx.call(Method::PUT, &one, Some(key), Some(&view)).await;
    assert_eq!(
        (r.status, r.code()),
        (422, "validation_error"),
        "{}",
        r.body
    );
    assert_eq!(r.body["details"]["field"], "env.GHOST");
    let r = ctx
        .call(
            Method::POST,
            &path,
            Some(key),
            Some(&json!({"name": "copy", "command": "true", "env": {"API_KEY": "***"}})),
        )
        .await;
    assert_eq!(
        (r.status, r.code()),
        (422, "validation_error"),
        "{}",
        r.body
    );
    assert_eq!(
        env_of(ctx, &t, "tools").await,
        pairs(&[("API_KEY", "rotated"), ("NEW", "added")])
    );
    let r = ctx
        .call(Method::GET, &format!("{path}/copy"), Some(key), None)
        .await;
    assert_eq!(r.status, 404, "the refused server was not stored");
}

/// The env of a stored server, opened with the test server's key.
async fn env_of(ctx: &Ctx, t: &crate::ctx::TenantFx, name: &str) -> Vec<(String, String)> {
    let row = agentry_store::mcp_servers::get_by_name(
        &ctx.db,
        &t.scope(),
        t.admin.user_id.parse().unwrap(),
        name,
    )
    .await
    .unwrap()
    .unwrap();
    let key = agentry_sealing::SecretBox::from_config(Some(&agentry_schema::secret::Secret::new(
        crate::mcp::MCP_KEY,
    )))
    .unwrap();
    let stored = agentry_gateway::mcp_stored::stored_of(&row);
    let config = agentry_mcp::stored::join_from_storage(&stored, Some(&key)).unwrap();
    let agentry_mcp::client::McpTransportConfig::Stdio(s) = config.transport else {
        panic!("a stdio server")
    };
    s.env
        .iter()
        .map(|(k, v)| (k.clone(), v.expose().to_string()))
        .collect()
}

fn pairs(p: &[(&str, &str)]) -> Vec<(String, String)> {
    p.iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// The name of the platform's server in [`platform_config`].
pub const PLATFORM_SERVER: &str = "everything";

/// An MCP config file with one platform server, for a server started with it
/// (`AGENTRY_MCP__CONFIG_FILE`). Keep the directory alive as long as the server.
pub fn platform_config() -> (tempfile::TempDir, String) {
    use agentry_mcp::testing::{everything_js, node};
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("mcp.yaml");
    std::fs::write(
        &file,
        format!(
            "mcp_servers:\n  local_services:\n    - name: {PLATFORM_SERVER}\n      description: the platform's test server\n      command: {}\n      args: [{}, stdio]\n",
            node().display(),
            everything_js().display()
        ),
    )
    .unwrap();
    let path = file.to_string_lossy().into_owned();
    (dir, path)
}

/// The platform's MCP servers are in every user's list, with their status, marked read-only
/// and shown without how they are reached; they cannot be changed, removed or shadowed there.
pub async fn platform_servers(ctx: &Ctx) {
    let t = ctx
        .tenant_with(json!({"features_enabled": ["stdio_mcp"]}))
        .await;
    let mine = servers_path(&t.member.user_id);
    let listed = ctx.ok(Method::GET, &mine, &t.member.key, None, 200).await;
    let platform = listed
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["name"] == PLATFORM_SERVER)
        .cloned()
        .unwrap_or_else(|| panic!("the platform server is listed: {listed}"));
    assert_eq!(platform["source"], "platform", "{platform}");
    assert_eq!(platform["read_only"], true, "{platform}");
    assert_eq!(platform["transport"], "stdio", "{platform}");
    assert_eq!(platform["description"], "the platform's test server");
    assert_eq!(
        platform["status"], "disconnected",
        "not used yet: {platform}"
    );
    for hidden in ["command", "args", "env", "url", "headers"] {
        assert!(
            platform.get(hidden).is_none(),
            "{hidden} is the operator's: {platform}"
        );
    }

    // Once a run of the user has used it, its status is live.
    ctx.ok(
        Method::POST,
        "/api/v1/chat",
        &t.member.key,
        Some(json!({"message": "hello"})),
        200,
    )
    .await;
    let one = format!("{mine}/{PLATFORM_SERVER}");
    let mut status = Value::Null;
    for _ in 0..100 {
        status = ctx.ok(Method::GET, &one, &t.member.key, None, 200).await;
        if status["status"] == "connected" {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
    assert_eq!(status["status"], "connected", "{status}");
    assert_eq!(status["read_only"], true);

    // Read-only: no PUT, no DELETE, no server of the same name (409, saying why).
    let r = ctx
        .call(
            Method::PUT,
            &one,
            Some(&t.admin.key),
            Some(&json!({"name": PLATFORM_SERVER, "command": "sh"})),
        )
        .await;
    assert_eq!((r.status, r.code()), (409, "conflict"), "{}", r.body);
    assert!(r.body["message"].as_str().unwrap().contains("platform"));
    let r = ctx
        .call(Method::DELETE, &one, Some(&t.admin.key), None)
        .await;
    assert_eq!((r.status, r.code()), (409, "conflict"), "{}", r.body);
    let r = ctx
        .call(
            Method::POST,
            &servers_path(&t.admin.user_id),
            Some(&t.admin.key),
            Some(&json!({"name": PLATFORM_SERVER, "command": "sh", "args": ["-c", "id"]})),
        )
        .await;
    assert_eq!((r.status, r.code()), (409, "conflict"), "{}", r.body);
    assert!(r.body["message"].as_str().unwrap().contains("platform"));
    let after = ctx.ok(Method::GET, &mine, &t.member.key, None, 200).await;
    assert_eq!(
        names(&after),
        [PLATFORM_SERVER],
        "still only the platform's"
    );

    // A user's server stored under that name before the platform took it is listed as not used,
    // and its owner can still delete it.
    agentry_store::mcp_servers::create(
        &ctx.db,
        &t.scope(),
        agentry_store::mcp_servers::NewMcpServer {
            user_id: t.member.user_id.parse().unwrap(),
            name: PLATFORM_SERVER.into(),
            transport: "stdio".into(),
            command: Some("sh".into()),
            args: vec!["-c".into(), "id".into()],
            url: None,
            env_encrypted: None,
            headers_encrypted: None,
            disabled: false,
            timeout_secs: 60,
            policy: None,
        },
    )
    .await
    .unwrap();
    let listed = ctx.ok(Method::GET, &mine, &t.member.key, None, 200).await;
    let users_own = listed
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["source"] == "user")
        .cloned()
        .unwrap_or_else(|| panic!("{listed}"));
    assert_eq!(users_own["status"], "error", "{users_own}");
    assert!(
        users_own["status_message"]
            .as_str()
            .unwrap()
            .contains("not used"),
        "{users_own}"
    );
    ctx.ok(Method::DELETE, &one, &t.member.key, None, 204).await;
    let after = ctx.ok(Method::GET, &mine, &t.member.key, None, 200).await;
    assert_eq!(names(&after), [PLATFORM_SERVER]);
}

/// Write `file` in the caller's workspace through a run (an auto-approved session).
async fn write_through_a_run(ctx: &Ctx, key: &str, file: &str) {
    let s = session_with(ctx, key, json!({"auto_approve": true}), 201).await;
    let r = ctx
        .ok(
            Method::POST,
            "/api/v1/chat",
            key,
            Some(json!({
                "session_id": s["session_id"],
                "message": format!(r#"/tool write_file {{"file_path": "{file}", "content": "kept?"}}"#),
            })),
            200,
        )
        .await;
    let events = r["events"].as_array().unwrap();
    assert_eq!(
        events.last().unwrap()["data"]["status"],
        "completed",
        "{events:?}"
    );
}

/// `DELETE` of a user removes their workspace; `DELETE` of a tenant removes all of its
/// workspaces. Nobody else's files are touched.
pub async fn deletion_removes_workspaces(ctx: &Ctx) {
    let allow = json!({"policy": {"members_may_auto_approve": true}});
    let a = ctx.tenant_with(allow.clone()).await;
    let b = ctx.tenant_with(allow).await;
    let root = ctx.server.data_dir.path().join("workspaces");
    let ws = |t: &str, u: &str| root.join(t).join(u);
    for (key, t, u) in [
        (&a.admin.key, &a.id, &a.admin.user_id),
        (&a.member.key, &a.id, &a.member.user_id),
        (&b.member.key, &b.id, &b.member.user_id),
    ] {
        write_through_a_run(ctx, key, "notes/keep.txt").await;
        assert!(ws(t, u).join("notes/keep.txt").is_file(), "written for {u}");
    }

    // A user: their workspace goes, their tenant's other users' stay.
    ctx.ok(
        Method::DELETE,
        &format!("{}/users/{}", tenant_path(&a.id), a.member.user_id),
        ADMIN_KEY,
        None,
        204,
    )
    .await;
    assert!(
        !ws(&a.id, &a.member.user_id).exists(),
        "the user's workspace is gone"
    );
    assert!(ws(&a.id, &a.admin.user_id).join("notes/keep.txt").is_file());
    // A tenant admin deleting one of their users does the same.
    write_through_a_run(ctx, &a.member2.key, "x.txt").await;
    ctx.ok(
        Method::DELETE,
        &format!("/api/v1/tenant/users/{}", a.member2.user_id),
        &a.admin.key,
        None,
        204,
    )
    .await;
    assert!(!ws(&a.id, &a.member2.user_id).exists());

    // A tenant: every workspace of it goes; another tenant's stay.
    ctx.ok(Method::DELETE, &tenant_path(&a.id), ADMIN_KEY, None, 204)
        .await;
    assert!(
        !root.join(&a.id).exists(),
        "the tenant's workspaces are gone"
    );
    assert!(
        ws(&b.id, &b.member.user_id)
            .join("notes/keep.txt")
            .is_file()
    );
    // Deleting a tenant that never wrote a file is fine too.
    let empty = ctx.tenant().await;
    ctx.ok(
        Method::DELETE,
        &tenant_path(&empty.id),
        ADMIN_KEY,
        None,
        204,
    )
    .await;
}
