//! Revocation reaches open WebSockets (docs/operations.md, "Revocation"): a socket whose key is
//! revoked, whose user is disabled or deleted, or whose tenant is suspended gets an `error`
//! event and a close with 1008 — at once when the change is made through this server, and at
//! its next chat frame (within `auth.cache_ttl_secs`) when it was made elsewhere.

use std::time::Duration;

use futures::StreamExt;
use reqwest::Method;
use serde_json::{Value, json};
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;

use crate::ctx::{ADMIN_KEY, Ctx, Member};
use crate::mcp::ws_connect;
use crate::streaming::{Socket, new_session, next_json, send};

/// The error event and the 1008 close that end a socket whose caller may no longer act.
async fn closed_for(ws: &mut Socket, code: &str, what: &str) {
    let mut error = None;
    loop {
        let msg = tokio::time::timeout(Duration::from_secs(10), ws.next())
            .await
            .unwrap_or_else(|_| panic!("{what}: the socket stayed open 10 s"));
        match msg {
            Some(Ok(Message::Text(t))) => {
                let ev: Value = serde_json::from_str(&t).unwrap();
                if ev["event_type"] == "error" {
                    error = Some(ev);
                }
            }
            Some(Ok(Message::Close(frame))) => {
                let frame = frame.unwrap_or_else(|| panic!("{what}: a close without a code"));
                assert_eq!(frame.code, CloseCode::Policy, "{what}: {frame:?}");
                let ev = error.unwrap_or_else(|| panic!("{what}: closed without an error event"));
                assert_eq!(ev["data"]["error_code"], code, "{what}: {ev}");
                return;
            }
            Some(Ok(_)) => {}
            other => panic!("{what}: the socket ended without a close frame: {other:?}"),
        }
    }
}

async fn pong(ws: &mut Socket) {
    send(ws, json!({"type": "ping", "payload": {}})).await;
    assert_eq!(next_json(ws).await["type"], "pong");
}

async fn socket_of(ctx: &Ctx, m: &Member) -> Socket {
    let sid = new_session(ctx, &m.key).await;
    let mut ws = ws_connect(ctx, &m.key, &sid).await;
    pong(&mut ws).await;
    ws
}

/// Changes made through this server close the sockets they concern at once, with no frame
/// from the client; sockets they do not concern stay open.
pub async fn through_this_server(ctx: &Ctx) {
    let t = ctx.tenant().await;
    let users = format!("/api/v1/admin/tenants/{}/users", t.id);

    // Revoke: the key's socket closes; another key of the same user keeps working.
    let revoked = ctx.member(&t.id, "member").await;
    let mut ws = socket_of(ctx, &revoked).await;
    let mut bystander = socket_of(ctx, &t.member).await;
    ctx.ok(
        Method::DELETE,
        &format!("/api/v1/tenant/api-keys/{}", revoked.key_id),
        &t.admin.key,
        None,
        200,
    )
    .await;
    closed_for(&mut ws, "unauthorized", "revoked key").await;
    pong(&mut bystander).await;

    // Disable the user.
    let disabled = ctx.member(&t.id, "member").await;
    let mut ws = socket_of(ctx, &disabled).await;
    ctx.ok(
        Method::PATCH,
        &format!("{users}/{}", disabled.user_id),
        ADMIN_KEY,
        Some(json!({"disabled": true})),
        200,
    )
    .await;
    closed_for(&mut ws, "unauthorized", "disabled user").await;
    pong(&mut bystander).await;

    // Delete the user.
    let deleted = ctx.member(&t.id, "member").await;
    let mut ws = socket_of(ctx, &deleted).await;
    ctx.ok(
        Method::DELETE,
        &format!("{users}/{}", deleted.user_id),
        ADMIN_KEY,
        None,
        204,
    )
    .await;
    closed_for(&mut ws, "unauthorized", "deleted user").await;
    pong(&mut bystander).await;

    // Suspend the tenant: every socket of it closes, another tenant's does not.
    let other = ctx.tenant().await;
    let mut elsewhere = socket_of(ctx, &other.member).await;
    ctx.ok(
        Method::PATCH,
        &format!("/api/v1/admin/tenants/{}", t.id),
        ADMIN_KEY,
        Some(json!({"status": "suspended"})),
        200,
    )
    .await;
    closed_for(&mut bystander, "tenant_suspended", "suspended tenant").await;
    pong(&mut elsewhere).await;
}

/// A change the server was not told about (another replica made it; here the test writes the
/// database itself) bites at the next chat frame once the key's cache entry is older than
/// `auth.cache_ttl_secs` (1 s on this server): the frame starts nothing.
pub async fn at_the_next_chat_frame(ctx: &Ctx) {
    let t = ctx.tenant().await;
    let m = ctx.member(&t.id, "member").await;
    let sid = new_session(ctx, &m.key).await;
    let mut ws = ws_connect(ctx, &m.key, &sid).await;
    pong(&mut ws).await;
    agentry_store::api_keys::revoke(&ctx.db, &t.scope(), m.key_id.parse().unwrap())
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(1500)).await;
    send(
        &mut ws,
        json!({"type": "chat", "payload": {"message": "after the revocation"}}),
    )
    .await;
    closed_for(&mut ws, "unauthorized", "revoked elsewhere").await;
    // Nothing ran: the session has no messages.
    let r = ctx
        .ok(
            Method::GET,
            &format!("/api/v1/sessions/{sid}/messages"),
            &t.admin.key,
            None,
            200,
        )
        .await;
    assert_eq!(r["total"], 0, "{r}");
}
