//! A second A2A implementation against Agentry's A2A server (docs/a2a.md): the official
//! JavaScript SDK, `@a2a-js/sdk`, resolves the card and makes one send and one streaming round
//! trip over the JSON-RPC binding (tests/support/a2a_js_client.mjs).

use std::time::Duration;

use agentry_mcp::testing::{cache_dir, node};
use serde_json::Value;

use crate::ctx::Ctx;

/// Where scripts/install-mcp-test-servers.sh put `@a2a-js/sdk`.
fn sdk_dir() -> std::path::PathBuf {
    let dir = cache_dir().join("clients/node_modules/@a2a-js/sdk");
    assert!(
        dir.join("dist/client/index.js").is_file(),
        "@a2a-js/sdk is not installed in {}: run scripts/install-mcp-test-servers.sh",
        dir.display()
    );
    dir
}

pub async fn js_client(ctx: &Ctx) {
    let t = ctx.tenant().await;
    let agent = ctx.url(&format!("/a2a/{}/default", t.id));
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/support/a2a_js_client.mjs");
    let out = tokio::time::timeout(
        Duration::from_secs(120),
        tokio::process::Command::new(node())
            .arg(script)
            .env("A2A_SDK_DIR", sdk_dir())
            .env("A2A_AGENT", &agent)
            .env("A2A_KEY", &t.member.key)
            .env("NO_PROXY", "127.0.0.1")
            .output(),
    )
    .await
    .expect("the JavaScript A2A client ends within 120 s")
    .expect("run the JavaScript A2A client");
    assert!(
        out.status.success(),
        "the @a2a-js/sdk client failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let r: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "the client printed no JSON ({e}): {}",
            String::from_utf8_lossy(&out.stdout)
        )
    });

    // The card, as the SDK resolved it: the JSON-RPC interface at the agent's base URL.
    let iface = &r["card"]["interfaces"][0];
    assert_eq!(iface["url"], agent.as_str(), "{r}");
    assert_eq!(iface["protocolBinding"], "JSONRPC", "{r}");
    assert_eq!(iface["protocolVersion"], "1.0", "{r}");
    assert_eq!(iface["tenant"], t.id.as_str(), "{r}");
    assert_eq!(r["card"]["streaming"], true, "{r}");

    // SendMessage: a completed task whose answer is the scripted model's.
    let sent = &r["sent"];
    assert_eq!(sent["state"], "TASK_STATE_COMPLETED", "{r}");
    assert_eq!(sent["text"], "(scripted) You said: hello from javascript");
    // The task is the run, in the member's session.
    let exec = ctx
        .ok(
            reqwest::Method::GET,
            &format!("/api/v1/executions/{}", sent["id"].as_str().unwrap()),
            &t.member.key,
            None,
            200,
        )
        .await;
    assert_eq!(exec["session_id"], sent["context"], "{exec}");

    // SendStreamingMessage: the task first, artifact chunks, completed last; one task throughout.
    let s = &r["stream"];
    let kinds: Vec<&str> = s["kinds"]
        .as_array()
        .unwrap()
        .iter()
        .map(|k| k.as_str().unwrap())
        .collect();
    assert_eq!(kinds.first(), Some(&"task"), "{s}");
    assert!(kinds.contains(&"artifactUpdate"), "{s}");
    assert_eq!(kinds.last(), Some(&"statusUpdate"), "{s}");
    assert_eq!(
        s["states"].as_array().unwrap().last().unwrap(),
        "TASK_STATE_COMPLETED",
        "{s}"
    );
    assert_eq!(
        s["text"], "(scripted) You said: stream from javascript",
        "{s}"
    );
    let ids = s["ids"].as_array().unwrap();
    assert!(ids.iter().all(|i| i == &ids[0]), "{s}");
    assert_ne!(ids[0], sent["id"], "a new task");

    // A bad key: the SDK raised the error of the server's 401 (a JSON-RPC error body).
    let raw = ctx
        .send(
            ctx.request(
                reqwest::Method::POST,
                &format!("/a2a/{}/default", t.id),
                Some("agk_not_a_key"),
            )
            .header("A2A-Version", "1.0")
            .json(&serde_json::json!({"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {}})),
        )
        .await;
    assert_eq!(raw.status, 401, "{}", raw.body);
    let said = raw.body["error"]["message"].as_str().unwrap();
    assert!(
        r["bad_key"]["message"]
            .as_str()
            .unwrap_or("")
            .contains(said),
        "{r}: {said}"
    );
}
