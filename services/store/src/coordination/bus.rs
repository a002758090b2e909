//! The replicas' message bus over Redis (cluster mode), on one pub/sub connection per process:
//!
//! - **Session tails.** A replica with subscribers for a session another replica runs listens
//!   on the session's events channel ([`Bus::tail`]); the owner's events arrive in order, a
//!   batch per message ([`TailItem::Events`]). After the connection was lost and came back,
//!   every tail gets [`TailItem::Resync`]: messages sent meanwhile were lost, read them back
//!   from the session's stream.
//! - **Forwarded commands.** [`Bus::request`] publishes a command on the channel of the replica
//!   that owns the session (`<prefix>:replica:<id>:cmd`) and waits for its answer on this
//!   replica's reply channel, up to a timeout; the [`Handler`] given to [`Bus::serve`] answers
//!   the commands sent here. Pub/sub delivers at most once: a lost command or answer is a
//!   timeout, never a command run twice by this path.
//! - **The events of the sessions this replica runs** ([`Bus::mirror`]): appended to each
//!   session's stream and published, in order, by one task, so the stream never sees a later
//!   event before an earlier one.

use std::collections::{HashMap, VecDeque};
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use futures::StreamExt;
use futures::future::BoxFuture;
use serde_json::{Value, json};
use tokio::sync::{mpsc, oneshot};

use super::{Coordination, CoordinationError, StreamEvent};

/// What a session tail receives.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TailItem {
    /// Events the owner sent, in order (their wire JSON).
    Events(Vec<Arc<str>>),
    /// The bus lost its connection and is back: messages may have been missed.
    Resync,
}

/// Answers a command another replica forwarded here (its JSON body → the answer's).
pub type Handler = Arc<dyn Fn(Value) -> BoxFuture<'static, Value> + Send + Sync>;

#[derive(Debug, Clone, thiserror::Error)]
pub enum ForwardError {
    /// Nobody listens on the replica's channel: it is gone (or reconnecting).
    #[error("replica {0} is not listening")]
    NotListening(String),
    /// It did not answer in time.
    #[error("replica {replica} did not answer within {} ms", .waited.as_millis())]
    Timeout { replica: String, waited: Duration },
    #[error(transparent)]
    Coordination(#[from] CoordinationError),
}

impl From<redis::RedisError> for ForwardError {
    fn from(e: redis::RedisError) -> Self {
        ForwardError::Coordination(e.into())
    }
}

/// How long (re)connecting or (un)subscribing may take.
const PUBSUB_TIMEOUT: Duration = Duration::from_secs(2);
/// How often the bus pings its pub/sub connection (a black-holed one never ends by itself).
const PUBSUB_PING: Duration = Duration::from_secs(2);
/// How long the mirror keeps trying one batch while Redis does not answer before it drops it
/// (tails read dropped events back from the database when they notice).
const MIRROR_PATIENCE: Duration = Duration::from_secs(3);

enum Control {
    Subscribe {
        channel: String,
        ack: oneshot::Sender<bool>,
    },
    Unsubscribe {
        channel: String,
    },
}

struct Mirror {
    session: String,
    token: Option<i64>,
    events: Vec<StreamEvent>,
    /// A barrier ([`Bus::mirrored`]): answered once every batch queued before it is done.
    barrier: Option<oneshot::Sender<()>>,
}

type TailSenders = Vec<(u64, mpsc::UnboundedSender<TailItem>)>;

struct Inner {
    coord: Coordination,
    cmd_channel: String,
    reply_channel: String,
    events_prefix: String,
    control: mpsc::UnboundedSender<Control>,
    tails: Mutex<HashMap<String, TailSenders>>,
    next_tail: AtomicU64,
    pending: Mutex<HashMap<u64, oneshot::Sender<Value>>>,
    next_request: AtomicU64,
    handler: Mutex<Option<Handler>>,
    connected: AtomicBool,
    /// Connections made (see [`Bus::connections`]).
    connections: AtomicU64,
    mirror: mpsc::UnboundedSender<Mirror>,
}

/// The bus: cheap to clone.
#[derive(Clone)]
pub struct Bus {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Bus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Bus")
            .field("connected", &self.inner.connected.load(Ordering::Relaxed))
            .finish_non_exhaustive()
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl Bus {
    /// Start the bus's tasks on `runtime` (they live as long as the process).
    pub(super) fn start(coord: &Coordination, runtime: &tokio::runtime::Handle) -> Bus {
        let (control, control_rx) = mpsc::unbounded_channel();
        let (mirror, mirror_rx) = mpsc::unbounded_channel();
        let me = coord.replica_id();
        let inner = Arc::new(Inner {
            cmd_channel: coord.key(&format!("replica:{me}:cmd")),
            reply_channel: coord.key(&format!("replica:{me}:reply")),
            events_prefix: coord.events_channel_prefix(),
            coord: coord.clone(),
            control,
            tails: Mutex::default(),
            next_tail: AtomicU64::new(1),
            pending: Mutex::default(),
            next_request: AtomicU64::new(1),
            handler: Mutex::default(),
            connected: AtomicBool::new(false),
            connections: AtomicU64::new(0),
            mirror,
        });
        runtime.spawn(listen(inner.clone(), control_rx));
        runtime.spawn(mirror_loop(inner.coord.clone(), mirror_rx));
        Bus { inner }
    }

    /// Answer the commands other replicas forward here with `handler`.
    pub fn serve(&self, handler: Handler) {
        *lock(&self.inner.handler) = Some(handler);
    }

    /// Is the pub/sub connection up (tails live, forwarding possible)?
    pub fn connected(&self) -> bool {
        self.inner.connected.load(Ordering::SeqCst)
    }

    /// How many times the pub/sub connection was made since the bus started (1 while it has
    /// never been lost).
    pub fn connections(&self) -> u64 {
        self.inner.connections.load(Ordering::SeqCst)
    }

    /// Listen to a session's events. `subscribed`: the subscription is confirmed, so every
    /// event published from now on arrives; otherwise the bus is reconnecting and the tail gets
    /// [`TailItem::Resync`] once it is back. Dropping the stream stops listening.
    pub async fn tail(&self, session: &str) -> (TailStream, bool) {
        let channel = self.inner.coord.events_channel(session);
        let (tx, rx) = mpsc::unbounded_channel();
        let id = self.inner.next_tail.fetch_add(1, Ordering::Relaxed);
        let first = {
            let mut tails = lock(&self.inner.tails);
            let entry = tails.entry(channel.clone()).or_default();
            entry.push((id, tx));
            entry.len() == 1
        };
        let stream = TailStream {
            rx,
            inner: self.inner.clone(),
            channel: channel.clone(),
            id,
        };
        if !first {
            // Another tail of this process has it subscribed already (or waits for it).
            return (stream, self.connected());
        }
        let (ack, ack_rx) = oneshot::channel();
        if self
            .inner
            .control
            .send(Control::Subscribe { channel, ack })
            .is_err()
        {
            return (stream, false);
        }
        let subscribed = matches!(
            tokio::time::timeout(PUBSUB_TIMEOUT * 2, ack_rx).await,
            Ok(Ok(true))
        );
        (stream, subscribed)
    }

    /// Send a command to `replica` and wait up to `wait` for its answer.
    pub async fn request(
        &self,
        replica: &str,
        body: Value,
        wait: Duration,
    ) -> Result<Value, ForwardError> {
        if !self.connected() {
            return Err(CoordinationError::Unavailable(
                "the replicas' message bus is reconnecting".into(),
            )
            .into());
        }
        let id = self.inner.next_request.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = oneshot::channel();
        lock(&self.inner.pending).insert(id, tx);
        let forget = || lock(&self.inner.pending).remove(&id);
        let payload = json!({
            "id": id,
            "reply_to": self.inner.reply_channel,
            "body": body,
        })
        .to_string();
        let channel = self.inner.coord.key(&format!("replica:{replica}:cmd"));
        let mut conn = self.inner.coord.connection();
        let receivers: Result<i64, redis::RedisError> = redis::cmd("PUBLISH")
            .arg(channel)
            .arg(payload)
            .query_async(&mut conn)
            .await;
        match receivers {
            Ok(0) => {
                forget();
                return Err(ForwardError::NotListening(replica.to_string()));
            }
            Ok(_) => {}
            Err(e) => {
                forget();
                return Err(e.into());
            }
        }
        match tokio::time::timeout(wait, rx).await {
            Ok(Ok(answer)) => Ok(answer),
            _ => {
                forget();
                Err(ForwardError::Timeout {
                    replica: replica.to_string(),
                    waited: wait,
                })
            }
        }
    }

    /// Append a session's events to its stream and publish them, after every event mirrored
    /// before (one task, in order). `token`: the owner's fencing token.
    pub fn mirror(&self, session: &str, token: Option<i64>, events: Vec<StreamEvent>) {
        if events.is_empty() {
            return;
        }
        let _ = self.inner.mirror.send(Mirror {
            session: session.to_string(),
            token,
            events,
            barrier: None,
        });
    }

    /// Wait until every batch [`Bus::mirror`] took before this call is appended (or given up
    /// on). A session's next lease claim waits for it: the claim raises the session's token, so
    /// a batch of the previous run still queued behind it would be refused as stale and its
    /// events (its `done` among them) would reach other replicas' tails only from the database.
    pub async fn mirrored(&self) {
        let (tx, rx) = oneshot::channel();
        let barrier = Mirror {
            session: String::new(),
            token: None,
            events: Vec::new(),
            barrier: Some(tx),
        };
        if self.inner.mirror.send(barrier).is_ok() {
            // Each queued batch is tried for at most MIRROR_PATIENCE; past that much the loop is
            // stuck on Redis, and the claim that follows fails on its own.
            let _ = tokio::time::timeout(MIRROR_PATIENCE * 2, rx).await;
        }
    }
}

/// A session tail's events (see [`Bus::tail`]); dropping it stops listening.
pub struct TailStream {
    rx: mpsc::UnboundedReceiver<TailItem>,
    inner: Arc<Inner>,
    channel: String,
    id: u64,
}

impl futures::Stream for TailStream {
    type Item = TailItem;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<TailItem>> {
        self.rx.poll_recv(cx)
    }
}

impl Drop for TailStream {
    fn drop(&mut self) {
        let last = {
            let mut tails = lock(&self.inner.tails);
            let Some(entry) = tails.get_mut(&self.channel) else {
                return;
            };
            entry.retain(|(id, _)| *id != self.id);
            let last = entry.is_empty();
            if last {
                tails.remove(&self.channel);
            }
            last
        };
        if last {
            let _ = self.inner.control.send(Control::Unsubscribe {
                channel: self.channel.clone(),
            });
        }
    }
}

impl Inner {
    fn dispatch(self: &Arc<Self>, msg: redis::Msg) {
        let channel = msg.get_channel_name();
        let payload = msg.get_payload_bytes();
        if channel == self.cmd_channel {
            let me = self.clone();
            let payload = payload.to_vec();
            tokio::spawn(async move { me.answer(&payload).await });
        } else if channel == self.reply_channel {
            let Ok(reply) = serde_json::from_slice::<Value>(payload) else {
                tracing::warn!("an unreadable reply on the replicas' bus");
                return;
            };
            let waiting = reply["id"]
                .as_u64()
                .and_then(|id| lock(&self.pending).remove(&id));
            if let Some(tx) = waiting {
                let _ = tx.send(reply["body"].clone());
            }
        } else if channel.starts_with(&self.events_prefix) {
            let Ok(text) = std::str::from_utf8(payload) else {
                return;
            };
            let events: Vec<Arc<str>> = text.split('\n').map(Arc::from).collect();
            let mut tails = lock(&self.tails);
            if let Some(entry) = tails.get_mut(channel) {
                entry.retain(|(_, tx)| tx.send(TailItem::Events(events.clone())).is_ok());
            }
        }
    }

    /// Run a forwarded command and send its answer back.
    async fn answer(&self, payload: &[u8]) {
        let Ok(request) = serde_json::from_slice::<Value>(payload) else {
            tracing::warn!("an unreadable command on the replicas' bus");
            return;
        };
        let (Some(id), Some(reply_to)) = (request["id"].as_u64(), request["reply_to"].as_str())
        else {
            return;
        };
        let handler = lock(&self.handler).clone();
        let body = match handler {
            Some(h) => h(request["body"].clone()).await,
            None => {
                json!({"error": {"error_code": "service_unavailable", "message": "this replica is starting"}})
            }
        };
        let reply = json!({"id": id, "body": body}).to_string();
        let mut conn = self.coord.connection();
        if let Err(e) = redis::cmd("PUBLISH")
            .arg(reply_to)
            .arg(reply)
            .query_async::<i64>(&mut conn)
            .await
        {
            tracing::warn!(error = %e, "answering a forwarded command failed; its sender times out");
        }
    }

    fn resync_tails(&self) {
        let mut tails = lock(&self.tails);
        for entry in tails.values_mut() {
            entry.retain(|(_, tx)| tx.send(TailItem::Resync).is_ok());
        }
    }
}

/// The pub/sub connection: (re)connect, subscribe to this replica's channels and every tail's,
/// then dispatch messages and subscription changes until the connection is lost.
async fn listen(inner: Arc<Inner>, mut control: mpsc::UnboundedReceiver<Control>) {
    let mut first = true;
    loop {
        let connected = tokio::time::timeout(PUBSUB_TIMEOUT, async {
            let pubsub = inner.coord.client().get_async_pubsub().await?;
            let (mut sink, stream) = pubsub.split();
            let mut channels = vec![inner.cmd_channel.clone(), inner.reply_channel.clone()];
            channels.extend(lock(&inner.tails).keys().cloned());
            sink.subscribe(&channels).await?;
            Ok::<_, redis::RedisError>((sink, stream))
        })
        .await;
        let (mut sink, mut stream) = match connected {
            Ok(Ok(c)) => c,
            failed => {
                if let Ok(Err(e)) = failed {
                    tracing::debug!(error = %e, "connecting the replicas' bus failed; retrying");
                }
                // Subscriptions asked for meanwhile are made at the next connection.
                while let Ok(c) = control.try_recv() {
                    if let Control::Subscribe { ack, .. } = c {
                        let _ = ack.send(false);
                    }
                }
                tokio::time::sleep(Duration::from_millis(500)).await;
                continue;
            }
        };
        inner.connected.store(true, Ordering::SeqCst);
        inner.connections.fetch_add(1, Ordering::SeqCst);
        if !first {
            tracing::info!("the replicas' bus is connected again; session tails catch up");
            inner.resync_tails();
        }
        first = false;
        let mut ping = tokio::time::interval(PUBSUB_PING);
        ping.tick().await;
        loop {
            tokio::select! {
                msg = stream.next() => match msg {
                    Some(m) => inner.dispatch(m),
                    None => break,
                },
                ctl = control.recv() => match ctl {
                    Some(Control::Subscribe { channel, ack }) => {
                        let ok = matches!(
                            tokio::time::timeout(PUBSUB_TIMEOUT, sink.subscribe(&channel)).await,
                            Ok(Ok(()))
                        );
                        let _ = ack.send(ok);
                        if !ok {
                            break;
                        }
                    }
                    Some(Control::Unsubscribe { channel }) => {
                        // Subscribed again meanwhile: keep it.
                        if lock(&inner.tails).contains_key(&channel) {
                            continue;
                        }
                        if !matches!(
                            tokio::time::timeout(PUBSUB_TIMEOUT, sink.unsubscribe(&channel)).await,
                            Ok(Ok(()))
                        ) {
                            break;
                        }
                    }
                    None => return,
                },
                _ = ping.tick() => {
                    // In subscribe mode the answer is the array ["pong", "bus"], not a string:
                    // read as a String it failed every time, and the bus reconnected (and its
                    // tails resynchronised) at every ping.
                    let pong = tokio::time::timeout(
                        PUBSUB_TIMEOUT,
                        sink.ping_message::<redis::Value>("bus"),
                    )
                    .await;
                    if !matches!(pong, Ok(Ok(_))) {
                        break;
                    }
                }
            }
        }
        inner.connected.store(false, Ordering::SeqCst);
        tracing::warn!("the replicas' bus lost its Redis connection; reconnecting");
    }
}

/// Append mirrored events to their sessions' streams, in order. Consecutive batches of one
/// session go in one script call. While Redis does not answer, a batch is tried for
/// [`MIRROR_PATIENCE`] and then dropped: the events are in the database, where tails find them.
async fn mirror_loop(coord: Coordination, mut rx: mpsc::UnboundedReceiver<Mirror>) {
    let mut backlog: VecDeque<Mirror> = VecDeque::new();
    let mut dropped = 0usize;
    let mut last_warning: Option<Instant> = None;
    loop {
        if backlog.is_empty() {
            match rx.recv().await {
                Some(m) => backlog.push_back(m),
                None => return,
            }
        }
        while let Ok(m) = rx.try_recv() {
            backlog.push_back(m);
        }
        let Some(mut batch) = backlog.pop_front() else {
            continue;
        };
        if let Some(done) = batch.barrier.take() {
            let _ = done.send(());
            continue;
        }
        while backlog.front().is_some_and(|n| {
            n.barrier.is_none() && n.session == batch.session && n.token == batch.token
        }) {
            if let Some(next) = backlog.pop_front() {
                batch.events.extend(next.events);
            }
        }
        let started = Instant::now();
        loop {
            match coord
                .append_events(&batch.session, batch.token, &batch.events)
                .await
            {
                Ok(true) => break,
                Ok(false) => {
                    tracing::warn!(
                        session_id = %batch.session,
                        token = ?batch.token,
                        "refused to mirror events with a stale fencing token: another replica owns the session now"
                    );
                    break;
                }
                Err(e) if started.elapsed() >= MIRROR_PATIENCE => {
                    dropped += batch.events.len();
                    if last_warning.is_none_or(|t| t.elapsed() >= Duration::from_secs(5)) {
                        tracing::warn!(
                            error = %e,
                            dropped,
                            "events not mirrored to Redis (it does not answer): replicas watching those sessions read them from the database when they notice"
                        );
                        last_warning = Some(Instant::now());
                        dropped = 0;
                    }
                    break;
                }
                Err(_) => tokio::time::sleep(Duration::from_millis(200)).await,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::coordination::CoordinationOptions;

    /// The keepalive ping is answered in subscribe mode (an array, not a string): the bus keeps
    /// its one connection across several pings instead of reconnecting at each.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_keepalive_ping_keeps_the_connection() {
        let url = std::env::var("AGENTRY_TEST_REDIS_URL")
            .unwrap_or_else(|_| "redis://127.0.0.1:6379/10".into());
        let coord = Coordination::connect(&CoordinationOptions {
            url: url.clone(),
            key_prefix: format!("agentry-test:bus-ping:{}", uuid::Uuid::new_v4()),
            replica_id: "r1".into(),
            startup_timeout: Duration::from_secs(5),
        })
        .await
        .unwrap_or_else(|e| {
            panic!("Redis at {url} (start it, or set AGENTRY_TEST_REDIS_URL): {e}")
        });
        let bus = coord.start_bus(&tokio::runtime::Handle::current());
        let deadline = Instant::now() + Duration::from_secs(5);
        while !bus.connected() {
            assert!(Instant::now() < deadline, "the bus never connected");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        // Three pings' worth of time (each ping waits up to PUBSUB_TIMEOUT for its answer).
        tokio::time::sleep(PUBSUB_PING * 3 + Duration::from_millis(500)).await;
        assert!(bus.connected());
        assert_eq!(bus.connections(), 1, "the bus reconnected at its pings");
    }

    /// `mirrored` returns only once every batch queued before it is in Redis: what a session's
    /// next lease claim waits for, so the previous run's last events (its `done`) are not
    /// refused as stale by the token the claim raises.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn mirrored_waits_for_every_batch_queued_before_it() {
        let url = std::env::var("AGENTRY_TEST_REDIS_URL")
            .unwrap_or_else(|_| "redis://127.0.0.1:6379/10".into());
        let coord = Coordination::connect(&CoordinationOptions {
            url: url.clone(),
            key_prefix: format!("agentry-test:bus-mirrored:{}", uuid::Uuid::new_v4()),
            replica_id: "r1".into(),
            startup_timeout: Duration::from_secs(5),
        })
        .await
        .unwrap_or_else(|e| {
            panic!("Redis at {url} (start it, or set AGENTRY_TEST_REDIS_URL): {e}")
        });
        let bus = coord.start_bus(&tokio::runtime::Handle::current());
        // Batches of different sessions are not merged: each is its own script call, so the
        // queue is still busy when `mirrored` is called.
        let sessions: Vec<String> = (0..200).map(|i| format!("s{i}")).collect();
        for s in &sessions {
            bus.mirror(
                s,
                Some(1),
                vec![(1, Arc::from(format!("{{\"s\":\"{s}\"}}")))],
            );
        }
        bus.mirrored().await;
        for s in &sessions {
            let got = coord.events_after(s, 0, None, 10).await.unwrap();
            assert_eq!(got.len(), 1, "session {s}'s batch was not in Redis yet");
        }
    }
}
