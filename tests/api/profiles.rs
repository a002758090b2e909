//! Agent profiles (issue 16, docs/agents.md): each built-in profile sends the model its own
//! prompt and tool set; an assistant's own fields win over its profile's; tenant admins manage
//! their own profiles over REST, which no other tenant sees and no member may change.

use agentry_fake_model::FakeModelServer;
use reqwest::Method;
use serde_json::{Value, json};

use crate::ctx::{Ctx, TenantFx};
use crate::mcp::{types, ws_connect};
use crate::streaming::{pending_request, send, until_done_or_hitl};

/// The system prompt and the tool names of the model request at `index` (OpenAI wire).
pub fn prompt_and_tools(fake: &FakeModelServer, index: usize) -> (String, Vec<String>) {
    let reqs = fake.requests();
    let body = &reqs[index].body;
    let system = body["messages"][0].clone();
    assert_eq!(system["role"], "system", "{body}");
    let tools = body["tools"]
        .as_array()
        .map(|t| {
            t.iter()
                .map(|t| t["function"]["name"].as_str().unwrap().to_string())
                .collect()
        })
        .unwrap_or_default();
    (system["content"].as_str().unwrap().to_string(), tools)
}

/// Chat once with assistant `id` over REST; return the model request it made.
async fn one_chat(
    ctx: &Ctx,
    fake: &FakeModelServer,
    key: &str,
    id: &str,
    message: &str,
) -> (String, Vec<String>) {
    let before = fake.requests().len();
    let r = ctx
        .ok(
            Method::POST,
            "/api/v1/chat",
            key,
            Some(json!({"message": message, "assistant_id": id})),
            200,
        )
        .await;
    let events = r["events"].as_array().unwrap();
    assert_eq!(events.last().unwrap()["data"]["status"], "completed", "{r}");
    assert!(fake.requests().len() > before, "the model was not asked");
    prompt_and_tools(fake, before)
}

async fn create_agent(ctx: &Ctx, t: &TenantFx, body: Value) -> Value {
    ctx.ok(
        Method::POST,
        "/api/v1/agents",
        &t.admin.key,
        Some(body),
        201,
    )
    .await
}

/// Issue 16: general, devops, sre and orchestrator each send the model their own prompt
/// (filled in: the assistant's name, no placeholder left) and their own tool set.
pub async fn builtin_profiles_send_their_own_prompt_and_tools(ctx: &Ctx, fake: &FakeModelServer) {
    let t = ctx.tenant().await;
    let mut seen: Vec<(String, String, Vec<String>)> = Vec::new();
    for profile in ["general", "devops", "sre", "orchestrator"] {
        let id = format!("as-{profile}");
        let a = create_agent(
            ctx,
            &t,
            json!({"id": id, "name": format!("The {profile}"), "profile": profile}),
        )
        .await;
        assert_eq!(a["profile"], profile);
        assert_eq!(a["system_prompt"], Value::Null, "inherited, not copied");
        assert_eq!(a["effective"]["profile"], profile);
        let (prompt, tools) = one_chat(ctx, fake, &t.admin.key, &id, "hello").await;
        assert!(
            prompt.starts_with(&format!("You are The {profile}, ")),
            "{profile}: {prompt}"
        );
        assert!(
            !prompt.contains("{{"),
            "{profile}: a placeholder is left: {prompt}"
        );
        assert!(
            prompt.contains(&chrono::Utc::now().format("%Y-%m-%d").to_string()),
            "{profile}: no date in {prompt}"
        );
        // `effective` says what the model got.
        let effective = &a["effective"]["system_prompt"];
        assert!(
            effective.as_str().unwrap().contains("{{assistant_name}}"),
            "{effective}"
        );
        seen.push((profile.to_string(), prompt, tools));
    }
    let tools_of = |p: &str| &seen.iter().find(|(n, _, _)| n == p).unwrap().2;
    let has = |p: &str, tool: &str| tools_of(p).iter().any(|t| t == tool);
    // general: every built-in tool (the admin's role allows them all).
    for tool in [
        "read_file",
        "write_file",
        "execute",
        "fetch_url",
        "restart_service",
    ] {
        assert!(has("general", tool), "general lacks {tool}");
    }
    // devops: services, shell, files and system; no web.
    for tool in [
        "execute",
        "restart_service",
        "write_file",
        "get_system_stats",
    ] {
        assert!(
            has("devops", tool),
            "devops lacks {tool}: {:?}",
            tools_of("devops")
        );
    }
    assert!(!has("devops", "fetch_url") && !has("devops", "http_request"));
    // sre: reads files, stats, service status, fetches runbooks; writes no file.
    for tool in [
        "read_file",
        "grep",
        "get_system_stats",
        "get_service_status",
        "fetch_url",
    ] {
        assert!(has("sre", tool), "sre lacks {tool}: {:?}", tools_of("sre"));
    }
    for tool in ["write_file", "edit_file", "copy_file", "http_request"] {
        assert!(!has("sre", tool), "sre has {tool}");
    }
    // orchestrator: few direct tools.
    assert!(has("orchestrator", "write_todos") && has("orchestrator", "ask_question"));
    for tool in ["read_file", "execute", "write_file", "get_system_stats"] {
        assert!(!has("orchestrator", tool), "orchestrator has {tool}");
    }
    assert!(tools_of("orchestrator").len() < tools_of("sre").len());
    // Four different prompts, four different tool sets, each about its job.
    for (i, (a, pa, ta)) in seen.iter().enumerate() {
        for (b, pb, tb) in &seen[i + 1..] {
            assert_ne!(pa, pb, "{a} and {b} send the same prompt");
            assert_ne!(ta, tb, "{a} and {b} send the same tools");
        }
    }
    let prompt_of = |p: &str| &seen.iter().find(|(n, _, _)| n == p).unwrap().1;
    assert!(prompt_of("sre").contains("read-only"));
    assert!(prompt_of("devops").contains("roll it back"));
    assert!(prompt_of("orchestrator").contains("`task`"));
}

/// An assistant's own prompt, tools and approvals win over its profile's; fields it leaves out
/// come from the profile — a tenant's own profile included.
pub async fn an_assistants_own_fields_override_its_profile(ctx: &Ctx, fake: &FakeModelServer) {
    let t = ctx.tenant().await;
    let key = &t.admin.key;
    // A tenant profile that asks before every read.
    ctx.ok(
        Method::POST,
        "/api/v1/profiles",
        key,
        Some(json!({
            "id": "careful", "system_prompt": "You are {{assistant_name}}, careful. Tools: {{tools}}.",
            "tools": ["files:read_file", "files:list_directory", "todos:*"],
            "interrupt_on": ["read_file"], "recursion_limit": 4,
        })),
        201,
    )
    .await;
    create_agent(
        ctx,
        &t,
        json!({"id": "inherits", "name": "Kim", "profile": "careful"}),
    )
    .await;
    let a = create_agent(
        ctx,
        &t,
        json!({
            "id": "overrides", "profile": "careful", "system_prompt": "Be brief, {{assistant_name}}.",
            "tools": ["files:*"], "interrupt_on": [], "recursion_limit": 9,
        }),
    )
    .await;
    assert_eq!(
        a["effective"]["system_prompt"],
        "Be brief, {{assistant_name}}."
    );
    assert_eq!(a["effective"]["interrupt_on"], json!([]));
    assert_eq!(a["effective"]["recursion_limit"], 9);
    assert_eq!(a["effective"]["timeout_secs"], 600, "the profile's");
    let got = ctx
        .ok(
            Method::GET,
            "/api/v1/agents/inherits",
            &t.member.key,
            None,
            200,
        )
        .await;
    assert_eq!(got["effective"]["interrupt_on"], json!(["read_file"]));
    assert_eq!(got["effective"]["recursion_limit"], 4);
    assert_eq!(
        got["effective"]["tools"],
        json!(["files:read_file", "files:list_directory", "todos:*"])
    );

    let (prompt, tools) = one_chat(ctx, fake, key, "inherits", "hi").await;
    assert_eq!(
        prompt,
        "You are Kim, careful. Tools: list_directory, read_file, write_todos."
    );
    assert_eq!(tools, ["list_directory", "read_file", "write_todos"]);
    let (prompt, tools) = one_chat(ctx, fake, key, "overrides", "hi").await;
    assert_eq!(prompt, "Be brief, overrides.");
    assert!(
        tools.contains(&"write_file".to_string()) && !tools.contains(&"write_todos".to_string())
    );

    // The profile's approval default: a read waits for a person…
    let s = ctx
        .ok(
            Method::POST,
            "/api/v1/sessions",
            key,
            Some(json!({"assistant_id": "inherits"})),
            201,
        )
        .await;
    let mut ws = ws_connect(ctx, key, s["session_id"].as_str().unwrap()).await;
    send(
        &mut ws,
        json!({"type": "chat", "payload": {"message": "/tool read_file {\"file_path\": \"x.txt\"}"}}),
    )
    .await;
    let evs = until_done_or_hitl(&mut ws).await;
    assert_eq!(types(&evs), ["tool_call", "hitl_request"], "{evs:?}");
    send(
        &mut ws,
        json!({"type": "hitl_decision", "payload": {"request_id": pending_request(&evs), "type": "reject"}}),
    )
    .await;
    let evs = until_done_or_hitl(&mut ws).await;
    assert_eq!(evs.last().unwrap()["data"]["status"], "rejected", "{evs:?}");
    // …and the assistant's own empty `interrupt_on` wins: no approval.
    let s = ctx
        .ok(
            Method::POST,
            "/api/v1/sessions",
            key,
            Some(json!({"assistant_id": "overrides"})),
            201,
        )
        .await;
    let mut ws = ws_connect(ctx, key, s["session_id"].as_str().unwrap()).await;
    send(
        &mut ws,
        json!({"type": "chat", "payload": {"message": "/tool read_file {\"file_path\": \"x.txt\"}"}}),
    )
    .await;
    let evs = until_done_or_hitl(&mut ws).await;
    assert!(!types(&evs).contains(&"hitl_request"), "{evs:?}");
    assert_eq!(evs.last().unwrap()["event_type"], "done");

    // A changed profile reaches the assistants that use it at their next run.
    ctx.ok(
        Method::PUT,
        "/api/v1/profiles/careful",
        key,
        Some(json!({"system_prompt": "Changed for {{assistant_name}}.", "tools": ["todos:*"]})),
        200,
    )
    .await;
    let (prompt, tools) = one_chat(ctx, fake, key, "inherits", "again").await;
    assert_eq!(
        (prompt.as_str(), tools),
        ("Changed for Kim.", vec!["write_todos".to_string()])
    );
}

/// Profiles over REST: the built-in ones are listed and fixed; a tenant admin creates,
/// replaces and deletes its own (not one an assistant uses); members read only; another tenant
/// sees nothing and cannot point its assistants at them.
pub async fn profiles_flow(ctx: &Ctx) {
    let t = ctx.tenant().await;
    let other = ctx.tenant().await;
    let adm = &t.admin.key;
    let list = ctx
        .ok(Method::GET, "/api/v1/profiles", &t.member.key, None, 200)
        .await;
    let ids: Vec<&str> = list
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["general", "devops", "sre", "orchestrator"]);
    assert!(
        list.as_array()
            .unwrap()
            .iter()
            .all(|p| p["builtin"] == true)
    );
    let sre = ctx
        .ok(
            Method::GET,
            "/api/v1/profiles/sre",
            &t.member.key,
            None,
            200,
        )
        .await;
    assert_eq!(sre["interrupt_on"][0], "start_service", "{sre}");
    assert_eq!(sre["created_at"], Value::Null);

    let spec = json!({
        "id": "triage", "name": "Triage", "description": "first look",
        "system_prompt": "You triage for {{assistant_name}}.", "tools": ["files:read_file", "system:*"],
        "interrupt_on": ["execute"], "recursion_limit": 12, "timeout_secs": 90,
    });
    let created = ctx
        .ok(
            Method::POST,
            "/api/v1/profiles",
            adm,
            Some(spec.clone()),
            201,
        )
        .await;
    for (k, v) in spec.as_object().unwrap() {
        assert_eq!(&created[k], v, "{k}");
    }
    assert_eq!(created["builtin"], false);
    assert_eq!(
        ctx.ok(
            Method::GET,
            "/api/v1/profiles/triage",
            &t.member.key,
            None,
            200
        )
        .await,
        created
    );
    // Conflicts: the same id, a built-in id.
    for id in ["triage", "sre"] {
        let r = ctx
            .call(
                Method::POST,
                "/api/v1/profiles",
                Some(adm),
                Some(&json!({"id": id})),
            )
            .await;
        assert_eq!((r.status, r.code()), (409, "conflict"), "{id}: {}", r.body);
    }
    for method in [Method::PUT, Method::DELETE] {
        let r = ctx
            .call(
                method.clone(),
                "/api/v1/profiles/devops",
                Some(adm),
                Some(&json!({})),
            )
            .await;
        assert_eq!(
            (r.status, r.code()),
            (409, "conflict"),
            "{method}: {}",
            r.body
        );
    }
    // Bad input names its field; the path id is a slug.
    for (body, field) in [
        (json!({"id": "x", "recursion_limit": 0}), "recursion_limit"),
        (json!({"id": "x", "timeout_secs": 86401}), "timeout_secs"),
        (
            json!({"id": "x", "tools": ["files:*", "rm -rf"]}),
            "tools[1]",
        ),
        (
            json!({"id": "x", "interrupt_on": ["!shell:*"]}),
            "interrupt_on[0]",
        ),
        (json!({"id": "Bad Id"}), "id"),
        (json!({"id": "x", "promt": "typo"}), "promt"),
    ] {
        let r = ctx
            .call(Method::POST, "/api/v1/profiles", Some(adm), Some(&body))
            .await;
        assert_eq!(
            (r.status, r.body["details"]["field"].as_str()),
            (422, Some(field)),
            "{body}: {}",
            r.body
        );
    }
    let r = ctx
        .call(
            Method::GET,
            "/api/v1/profiles/Not%20A%20Slug",
            Some(adm),
            None,
        )
        .await;
    assert_eq!((r.status, r.code()), (400, "bad_request"));
    assert_eq!(
        ctx.call(Method::GET, "/api/v1/profiles/nope", Some(adm), None)
            .await
            .status,
        404
    );
    assert_eq!(
        ctx.call(
            Method::PUT,
            "/api/v1/profiles/nope",
            Some(adm),
            Some(&json!({}))
        )
        .await
        .status,
        404
    );
    // Members read but do not write.
    for (method, path) in [
        (Method::POST, "/api/v1/profiles"),
        (Method::PUT, "/api/v1/profiles/triage"),
        (Method::DELETE, "/api/v1/profiles/triage"),
    ] {
        let r = ctx
            .call(
                method.clone(),
                path,
                Some(&t.member.key),
                Some(&json!({"id": "mine"})),
            )
            .await;
        assert_eq!((r.status, r.code()), (403, "forbidden"), "{method} {path}");
    }
    // Another tenant: not found, not changeable, not usable; its own "triage" is its own.
    let okey = &other.admin.key;
    for method in [Method::GET, Method::PUT, Method::DELETE] {
        let r = ctx
            .call(
                method.clone(),
                "/api/v1/profiles/triage",
                Some(okey),
                Some(&json!({})),
            )
            .await;
        assert_eq!((r.status, r.code()), (404, "not_found"), "{method}");
    }
    let r = ctx
        .call(
            Method::POST,
            "/api/v1/agents",
            Some(okey),
            Some(&json!({"id": "borrower", "profile": "triage"})),
        )
        .await;
    assert_eq!(
        (r.status, r.body["details"]["field"].as_str()),
        (422, Some("profile")),
        "{}",
        r.body
    );
    let theirs = ctx
        .ok(Method::GET, "/api/v1/profiles", okey, None, 200)
        .await;
    assert_eq!(theirs.as_array().unwrap().len(), 4, "{theirs}");

    // An assistant uses it: effective shows the profile's values; the profile cannot go.
    let a = ctx
        .ok(
            Method::POST,
            "/api/v1/agents",
            adm,
            Some(json!({"id": "triager", "profile": "triage", "timeout_secs": 30})),
            201,
        )
        .await;
    assert_eq!(a["timeout_secs"], 30);
    assert_eq!(a["recursion_limit"], Value::Null);
    assert_eq!(
        a["effective"],
        json!({
            "profile": "triage", "system_prompt": "You triage for {{assistant_name}}.",
            "tools": ["files:read_file", "system:*"], "interrupt_on": ["execute"],
            "auto_approve": false, "recursion_limit": 12, "timeout_secs": 30, "max_retries": 3,
            "model_connection": null,
        })
    );
    let r = ctx
        .call(Method::DELETE, "/api/v1/profiles/triage", Some(adm), None)
        .await;
    assert_eq!((r.status, r.code()), (409, "conflict"), "{}", r.body);
    assert_eq!(r.details()["assistants"], json!(["triager"]));
    let replaced = ctx
        .ok(
            Method::PUT,
            "/api/v1/profiles/triage",
            adm,
            Some(json!({"recursion_limit": 7})),
            200,
        )
        .await;
    assert_eq!(replaced["created_at"], created["created_at"]);
    assert_eq!(
        replaced["name"], "triage",
        "a PUT replaces: the name is back to the id"
    );
    let a = ctx
        .ok(Method::GET, "/api/v1/agents/triager", adm, None, 200)
        .await;
    assert_eq!(a["effective"]["recursion_limit"], 7);
    ctx.ok(
        Method::PUT,
        "/api/v1/agents/triager",
        adm,
        Some(json!({"profile": "devops"})),
        200,
    )
    .await;
    let r = ctx
        .call(Method::DELETE, "/api/v1/profiles/triage", Some(adm), None)
        .await;
    assert_eq!(r.status, 204);
    assert_eq!(
        ctx.call(Method::DELETE, "/api/v1/profiles/triage", Some(adm), None)
            .await
            .status,
        404
    );
}
