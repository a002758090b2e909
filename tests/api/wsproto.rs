//! The WebSocket protocol at its edges (RFC 6455): fragmented messages are put together (the
//! frame limit applying to the whole), text that is not UTF-8 closes with 1007, protocol errors
//! with 1002, and a client's close completes.

use std::time::{Duration, Instant};

use futures::{SinkExt, StreamExt};
use serde_json::json;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::protocol::frame::coding::{CloseCode, Data, OpCode};
use tokio_tungstenite::tungstenite::protocol::frame::{CloseFrame, Frame};

use crate::ctx::Ctx;
use crate::mcp::ws_connect;
use crate::streaming::{Socket, new_session, next_json};

async fn socket(ctx: &Ctx) -> Socket {
    let t = ctx.tenant().await;
    let sid = new_session(ctx, &t.member.key).await;
    ws_connect(ctx, &t.member.key, &sid).await
}

fn fragment(data: &[u8], op: OpCode, last: bool) -> Message {
    Message::Frame(Frame::message(data.to_vec(), op, last))
}

/// The close frame the server ends with.
async fn closed_with(ws: &mut Socket, what: &str) -> CloseCode {
    loop {
        let msg = tokio::time::timeout(Duration::from_secs(10), ws.next())
            .await
            .unwrap_or_else(|_| panic!("{what}: still open after 10 s"));
        match msg {
            Some(Ok(Message::Close(Some(CloseFrame { code, .. })))) => return code,
            Some(Ok(Message::Text(t))) => eprintln!("{what}: {t}"),
            Some(Ok(_)) => {}
            other => panic!("{what}: ended without a close code: {other:?}"),
        }
    }
}

pub async fn fragments_utf8_protocol_errors_and_close(ctx: &Ctx) {
    // A ping in three fragments → pong.
    let mut ws = socket(ctx).await;
    let ping = json!({"type": "ping", "payload": {}})
        .to_string()
        .into_bytes();
    let (a, rest) = ping.split_at(5);
    let (b, c) = rest.split_at(7);
    ws.send(fragment(a, OpCode::Data(Data::Text), false))
        .await
        .unwrap();
    ws.send(fragment(b, OpCode::Data(Data::Continue), false))
        .await
        .unwrap();
    ws.send(fragment(c, OpCode::Data(Data::Continue), true))
        .await
        .unwrap();
    assert_eq!(next_json(&mut ws).await["type"], "pong");

    // A fragmented message over the frame limit (256 KiB) as a whole, each fragment under it:
    // refused with payload_too_large, and the socket stays usable.
    let chunk = vec![b'x'; 100 * 1024];
    ws.send(fragment(
        b"{\"type\":\"chat\",\"payload\":{\"message\":\"",
        OpCode::Data(Data::Text),
        false,
    ))
    .await
    .unwrap();
    for _ in 0..3 {
        ws.send(fragment(&chunk, OpCode::Data(Data::Continue), false))
            .await
            .unwrap();
    }
    ws.send(fragment(b"\"}}", OpCode::Data(Data::Continue), true))
        .await
        .unwrap();
    let ev = next_json(&mut ws).await;
    assert_eq!(ev["data"]["error_code"], "payload_too_large", "{ev}");
    ws.send(Message::text(ping_text())).await.unwrap();
    assert_eq!(next_json(&mut ws).await["type"], "pong");

    // A clean close completes at once: the server answers the close and drops TCP (not after
    // actix's 1 s `client_disconnect_timeout`, as it did). It takes a few milliseconds; the
    // bound leaves room for a loaded machine and still fails if the one-second linger returns.
    ws.send(Message::Close(Some(CloseFrame {
        code: CloseCode::Normal,
        reason: "bye".into(),
    })))
    .await
    .unwrap();
    let asked = Instant::now();
    let mut answered = None;
    loop {
        match tokio::time::timeout(Duration::from_secs(5), ws.next()).await {
            Ok(Some(Ok(Message::Close(frame)))) => answered = frame.map(|f| f.code),
            Ok(Some(Ok(_))) => {}
            Ok(None | Some(Err(_))) => break,
            Err(_) => panic!("the server held the connection for 5 s after the close"),
        }
    }
    let took = asked.elapsed();
    eprintln!("a client's close completed in {took:?}");
    assert_eq!(
        answered,
        Some(CloseCode::Normal),
        "the close was not answered"
    );
    assert!(took < Duration::from_millis(500), "the close took {took:?}");

    // Text that is not UTF-8 → 1007, unfragmented and fragmented.
    let mut ws = socket(ctx).await;
    ws.send(fragment(
        &[0x7b, 0xff, 0xfe, 0x7d],
        OpCode::Data(Data::Text),
        true,
    ))
    .await
    .unwrap();
    assert_eq!(
        closed_with(&mut ws, "invalid UTF-8").await,
        CloseCode::Invalid
    );
    // A close the server starts ends promptly too: once the client has answered it, the server
    // drops TCP at once (not after the 1 s linger). Same generous bound as above.
    let closed = Instant::now();
    loop {
        match tokio::time::timeout(Duration::from_secs(5), ws.next()).await {
            Ok(Some(Ok(_))) => {}
            Ok(None | Some(Err(_))) => break,
            Err(_) => panic!("the server held the connection for 5 s after its own close"),
        }
    }
    let took = closed.elapsed();
    eprintln!("a close the server started completed in {took:?}");
    assert!(took < Duration::from_millis(500), "the close took {took:?}");
    let mut ws = socket(ctx).await;
    ws.send(fragment(&[0x7b, 0xc3], OpCode::Data(Data::Text), false))
        .await
        .unwrap();
    ws.send(fragment(&[0x28, 0x7d], OpCode::Data(Data::Continue), true))
        .await
        .unwrap();
    assert_eq!(
        closed_with(&mut ws, "invalid UTF-8 in fragments").await,
        CloseCode::Invalid
    );

    // A reserved opcode and a continuation without a message → 1002.
    let mut ws = socket(ctx).await;
    ws.send(fragment(b"{}", OpCode::Data(Data::Reserved(3)), true))
        .await
        .unwrap();
    assert_eq!(
        closed_with(&mut ws, "reserved opcode").await,
        CloseCode::Protocol
    );
    let mut ws = socket(ctx).await;
    ws.send(fragment(b"{}", OpCode::Data(Data::Continue), true))
        .await
        .unwrap();
    assert_eq!(
        closed_with(&mut ws, "stray continuation").await,
        CloseCode::Protocol
    );
}

fn ping_text() -> String {
    json!({"type": "ping", "payload": {}}).to_string()
}
