//! One run path (docs/engine.md, "One run path"): REST, SSE, WebSocket, `/mcp ask_*` and
//! `/v1/chat/completions` are adapters over the engine's one `stream_run`, so the same bad
//! input gets the same error code on every transport, and a refused message creates nothing.

use reqwest::Method;
use serde_json::{Value, json};

use crate::ctx::Ctx;
use crate::mcp_server::{User, call, connect};
use crate::streaming::{next_json, send};

async fn sessions(ctx: &Ctx, key: &str) -> u64 {
    ctx.ok(Method::GET, "/api/v1/sessions", key, None, 200)
        .await["total"]
        .as_u64()
        .unwrap()
}

pub async fn same_bad_message_same_code_everywhere(ctx: &Ctx) {
    let t = ctx.tenant().await;
    let key = &t.member.key;
    // A session for the socket to open (the others make their own, or should not).
    let sid = ctx
        .ok(Method::POST, "/api/v1/sessions", key, Some(json!({})), 201)
        .await["session_id"]
        .as_str()
        .unwrap()
        .to_string();
    let before = sessions(ctx, key).await;
    let mut ws = crate::mcp::ws_connect(ctx, key, &sid).await;
    let mcp = connect(ctx, key, User::unreachable()).await;

    for bad in ["", "  \n\t "] {
        let mut seen: Vec<(&str, Value)> = Vec::new();
        for path in ["/api/v1/chat", "/api/v1/chat/stream"] {
            let r = ctx
                .call(
                    Method::POST,
                    path,
                    Some(key),
                    Some(&json!({"message": bad})),
                )
                .await;
            assert_eq!(r.status, 422, "{path} {bad:?}: {}", r.body);
            seen.push((path, json!([r.code(), r.body["details"]["field"]])));
        }
        let r = ctx
            .call(
                Method::POST,
                "/v1/chat/completions",
                Some(key),
                Some(&json!({"model": "default", "messages": [{"role": "user", "content": bad}]})),
            )
            .await;
        assert_eq!(r.status, 422, "{bad:?}: {}", r.body);
        // OpenAI's `param` names its own field, `messages`.
        seen.push(("openai", json!([r.code(), "message"])));

        send(
            &mut ws,
            json!({"type": "chat", "payload": {"message": bad}}),
        )
        .await;
        let ev = next_json(&mut ws).await;
        assert_eq!(ev["event_type"], "error", "{ev}");
        assert_eq!(ev["seq"], 0, "not part of the session's stream: {ev}");
        seen.push((
            "ws",
            json!([ev["data"]["error_code"], ev["data"]["details"]["field"]]),
        ));

        let r = call(&mcp, "ask_default", json!({"message": bad})).await;
        assert_eq!(r.is_error, Some(true), "{r:?}");
        let err = &r.structured_content.as_ref().unwrap()["error"];
        // An empty string is refused by the tool's own schema (`minLength`), which names no
        // field; blank text gets past it and is refused by the engine like everywhere else.
        let field = if bad.is_empty() {
            json!("message")
        } else {
            err["details"]["field"].clone()
        };
        seen.push(("mcp", json!([err["code"], field])));

        for (transport, got) in &seen {
            assert_eq!(
                got,
                &json!(["validation_error", "message"]),
                "{transport} {bad:?}: {seen:?}"
            );
        }
    }
    // Nothing was created for any of them.
    assert_eq!(sessions(ctx, key).await, before);
    let _ = mcp.cancel().await;
}
