//! A WebSocket client of one session: send client frames, read events.

use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use futures::{SinkExt, StreamExt};
use serde_json::{Value, json};
use tokio::net::TcpStream;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::{MaybeTlsStream, WebSocketStream};

/// One event as received, with the time it was read.
#[derive(Debug, Clone)]
pub struct Received {
    pub at: Instant,
    pub event: Value,
}

impl Received {
    pub fn event_type(&self) -> &str {
        self.event
            .get("event_type")
            .and_then(Value::as_str)
            .unwrap_or("")
    }

    pub fn data(&self) -> &Value {
        &self.event["data"]
    }
}

pub struct SessionSocket {
    socket: WebSocketStream<MaybeTlsStream<TcpStream>>,
}

impl SessionSocket {
    pub async fn connect(url: &str, key: &str) -> Result<Self> {
        let mut request = url
            .into_client_request()
            .context("building the WebSocket request")?;
        request.headers_mut().insert(
            "authorization",
            format!("Bearer {key}")
                .parse()
                .context("the key is not a valid header value")?,
        );
        // TCP_NODELAY, as browsers set it on WebSockets: with Nagle's algorithm a `cancel` or
        // `hitl_decision` frame written while the server still owes the ACK of the `chat`
        // frame waits for its delayed ACK (~40 ms), and the figure would measure that.
        let (socket, _) = tokio_tungstenite::connect_async_with_config(request, None, true)
            .await
            .with_context(|| format!("connecting to {url}"))?;
        Ok(SessionSocket { socket })
    }

    async fn send(&mut self, frame: Value) -> Result<()> {
        self.socket
            .send(Message::text(frame.to_string()))
            .await
            .context("sending a frame")
    }

    pub async fn chat(&mut self, message: &str) -> Result<()> {
        self.send(json!({"type": "chat", "payload": {"message": message}}))
            .await
    }

    pub async fn cancel(&mut self) -> Result<()> {
        self.send(json!({"type": "cancel", "payload": {}})).await
    }

    pub async fn approve(&mut self, request_id: &str) -> Result<()> {
        self.send(json!({"type": "hitl_decision",
                         "payload": {"request_id": request_id, "type": "approve"}}))
            .await
    }

    /// The next event, waiting at most `limit`.
    pub async fn next_event(&mut self, limit: Duration) -> Result<Received> {
        let deadline = tokio::time::Instant::now() + limit;
        loop {
            let message = tokio::time::timeout_at(deadline, self.socket.next())
                .await
                .with_context(|| format!("no event within {limit:?}"))?;
            let at = Instant::now();
            match message {
                Some(Ok(Message::Text(text))) => {
                    let event: Value = serde_json::from_str(text.as_str())
                        .with_context(|| format!("an event that is not JSON: {text}"))?;
                    return Ok(Received { at, event });
                }
                Some(Ok(Message::Close(frame))) => bail!("the server closed the socket: {frame:?}"),
                // Pings are answered by the library on the next read.
                Some(Ok(_)) => continue,
                Some(Err(e)) => return Err(e).context("reading the socket"),
                None => bail!("the socket ended"),
            }
        }
    }

    /// Read until this run's `done`; every event read, in order. An `error` event is kept
    /// (the caller decides); a non-`completed` done is the caller's to judge too.
    pub async fn until_done(&mut self, limit: Duration) -> Result<Vec<Received>> {
        let mut events = Vec::new();
        loop {
            let event = self.next_event(limit).await?;
            let done = event.event_type() == "done";
            events.push(event);
            if done {
                return Ok(events);
            }
        }
    }

    /// Keep the connection alive (answering the server's pings) until `stop` resolves; then
    /// close it. An error means the connection was lost.
    pub async fn hold(mut self, stop: impl std::future::Future<Output = ()>) -> Result<()> {
        tokio::pin!(stop);
        loop {
            tokio::select! {
                _ = &mut stop => {
                    let _ = self.socket.close(None).await;
                    return Ok(());
                }
                message = self.socket.next() => match message {
                    Some(Ok(Message::Close(frame))) => bail!("the server closed the socket: {frame:?}"),
                    Some(Ok(_)) => {}
                    Some(Err(e)) => return Err(e).context("reading the socket"),
                    None => bail!("the socket ended"),
                }
            }
        }
    }
}
