//! Losing the database under a running server (docs/operations.md, "Database loss"): a TCP relay
//! to PostgreSQL that the test controls refuses connections or black-holes them (accepts, then
//! never answers), and the server must answer 503 `database_unavailable` with `Retry-After`
//! within about its acquire timeout (2 s) on every route — REST, SSE and WebSocket — report
//! not-ready at once, and work again when the database comes back, without a restart.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::future::join_all;
use reqwest::Method;
use serde_json::{Value, json};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::ctx::{Ctx, Resp};
use crate::mcp::ws_connect;
use crate::streaming::{new_session, next_json, send, text_of, until_done_or_hitl};

/// What the relay does with traffic.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Link {
    /// Relays both ways.
    Up,
    /// Not listening: connections are refused; relayed ones are closed.
    Refused,
    /// Accepts connections and holds them open without relaying a byte, as a network partition
    /// does; relayed ones go silent.
    BlackHoled,
}

/// A TCP relay to the database that can refuse or black-hole, then come back on the same port.
pub struct Relay {
    pub addr: SocketAddr,
    upstream: String,
    link: watch::Sender<Link>,
    /// Sockets held open, silent, while black-holed.
    held: Arc<Mutex<Vec<TcpStream>>>,
    accept: Mutex<Option<JoinHandle<()>>>,
}

impl Relay {
    pub async fn start(upstream: String) -> Relay {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let relay = Relay {
            addr: listener.local_addr().unwrap(),
            upstream,
            link: watch::channel(Link::Up).0,
            held: Arc::default(),
            accept: Mutex::new(None),
        };
        relay.listen(listener);
        relay
    }

    fn listen(&self, listener: TcpListener) {
        let upstream = self.upstream.clone();
        let link = self.link.clone();
        let held = self.held.clone();
        let task = tokio::spawn(async move {
            while let Ok((mut inbound, _)) = listener.accept().await {
                if *link.borrow() == Link::BlackHoled {
                    held.lock().unwrap().push(inbound);
                    continue;
                }
                let (upstream, held) = (upstream.clone(), held.clone());
                let mut changes = link.subscribe();
                tokio::spawn(async move {
                    let Ok(mut out) = TcpStream::connect(&upstream).await else {
                        return;
                    };
                    tokio::select! {
                        _ = tokio::io::copy_bidirectional(&mut inbound, &mut out) => {}
                        changed = changes.wait_for(|l| *l != Link::Up) => {
                            if changed.is_ok_and(|l| *l == Link::BlackHoled) {
                                held.lock().unwrap().extend([inbound, out]);
                            }
                        }
                    }
                });
            }
        });
        *self.accept.lock().unwrap() = Some(task);
    }

    pub async fn set(&self, to: Link) {
        let from = *self.link.borrow();
        self.link.send_replace(to);
        if to == Link::Refused
            && let Some(task) = self.accept.lock().unwrap().take()
        {
            task.abort();
        }
        if to == Link::Up {
            self.held.lock().unwrap().clear();
            if from == Link::Refused {
                // The same port again, so the server's URL stays valid.
                let mut tries = 0;
                let listener = loop {
                    match TcpListener::bind(self.addr).await {
                        Ok(l) => break l,
                        Err(e) if tries < 50 => {
                            tries += 1;
                            eprintln!("rebinding the relay: {e}");
                            tokio::time::sleep(Duration::from_millis(100)).await;
                        }
                        Err(e) => panic!("cannot rebind the relay on {}: {e}", self.addr),
                    }
                };
                self.listen(listener);
            }
        }
    }
}

/// `host:port` a database URL points at.
pub fn upstream_of(db_url: &str) -> String {
    let u = reqwest::Url::parse(db_url).unwrap();
    format!("{}:{}", u.host_str().unwrap(), u.port().unwrap_or(5432))
}

/// The same database URL, through the relay.
pub fn via(db_url: &str, relay: SocketAddr) -> String {
    let mut u = reqwest::Url::parse(db_url).unwrap();
    u.set_host(Some("127.0.0.1")).unwrap();
    u.set_port(Some(relay.port())).unwrap();
    u.to_string()
}

/// `database.acquire_timeout_secs` (the default): how long new work waits for the database
/// before it is answered `database_unavailable` (docs/operations.md, "Database loss").
const ACQUIRE: Duration = Duration::from_secs(2);

/// What a loaded machine may add to a bound: these are behaviours, not benchmarks, but one
/// wait for the database too many (two acquire timeouts) is over it.
const MARGIN: Duration = Duration::from_millis(1500);

/// New work refused for an unreachable database is answered within this.
const PROMPT: Duration = ACQUIRE.saturating_add(MARGIN);

/// A key no cache holds: checking it needs the database.
const UNCACHED_KEY: &str = "agk_Outage00_0000000000000000000000000000000000000000";

fn assert_database_unavailable(what: &str, r: &Resp) {
    assert_eq!(
        (r.status, r.code()),
        (503, "database_unavailable"),
        "{what}: {}",
        r.body
    );
    let retry: u64 = r
        .headers
        .get("retry-after")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("{what}: no Retry-After"));
    assert!(retry >= 1, "{what}: Retry-After {retry}");
    let message = r.message();
    assert!(
        !message.contains("pool") && !message.contains("sqlx"),
        "{what}: driver text reached the client: {message}"
    );
}

/// Every operation `/openapi.json` documents with a key answers 503 `database_unavailable` with
/// `Retry-After` while the database is refused (the key cannot be checked), and readiness turns
/// red; the relay comes back up afterwards.
pub async fn every_keyed_route(ctx: &Ctx, relay: &Relay) {
    let r = ctx
        .call(Method::GET, "/api/v1/health/ready", None, None)
        .await;
    assert_eq!((r.status, r.body["status"].as_str()), (200, Some("ready")));
    let doc = ctx
        .call(Method::GET, "/openapi.json", None, None)
        .await
        .body;
    relay.set(Link::Refused).await;
    let ready = until_ready_is(ctx, 503).await;
    assert_eq!(
        ready.body["checks"]["database"], "unreachable",
        "{}",
        ready.body
    );
    assert_database_unavailable("GET /api/v1/health/ready", &ready);
    let r = ctx.call(Method::GET, "/api/v1/health", None, None).await;
    assert_eq!(
        (r.status, r.body["status"].as_str()),
        (200, Some("degraded"))
    );
    let mut calls = Vec::new();
    for (path, item) in doc["paths"].as_object().unwrap() {
        for (method, op) in item.as_object().unwrap() {
            if op["security"] == json!([{}]) {
                continue;
            }
            let concrete = path
                .split('/')
                .map(|seg| {
                    if seg.starts_with('{') {
                        uuid::Uuid::new_v4().to_string()
                    } else {
                        seg.to_string()
                    }
                })
                .collect::<Vec<_>>()
                .join("/");
            let method: Method = method.to_uppercase().parse().unwrap();
            let what = format!("{method} {path}");
            calls.push(async move {
                let r = ctx
                    .send(
                        ctx.request(method, &concrete, Some(UNCACHED_KEY))
                            .timeout(Duration::from_secs(30)),
                    )
                    .await;
                (what, r)
            });
        }
    }
    assert!(calls.len() > 40, "only {} keyed operations", calls.len());
    for (what, r) in join_all(calls).await {
        assert_database_unavailable(&what, &r);
    }
    // The OAuth callback takes no key (a browser comes back to it): the same 503.
    let callback = "/api/v1/mcp/oauth/callback";
    let r = ctx
        .send(
            ctx.request(Method::GET, &format!("{callback}?state=s&code=c"), None)
                .timeout(Duration::from_secs(30)),
        )
        .await;
    assert_database_unavailable("GET callback", &r);
    let r = ctx
        .send(
            ctx.request(Method::POST, callback, None)
                .header("content-type", "application/x-www-form-urlencoded")
                .body("state=s&code=c")
                .timeout(Duration::from_secs(30)),
        )
        .await;
    assert_database_unavailable("POST callback", &r);
    relay.set(Link::Up).await;
    until_ready_is(ctx, 200).await;
}

/// Poll readiness until it answers `status`; every answer must come at once (it is read from
/// memory). Returns the answer.
async fn until_ready_is(ctx: &Ctx, status: u16) -> Resp {
    let since = Instant::now();
    loop {
        let asked = Instant::now();
        let r = ctx
            .send(
                ctx.request(Method::GET, "/api/v1/health/ready", None)
                    .timeout(Duration::from_secs(10)),
            )
            .await;
        let took = asked.elapsed();
        assert!(
            took < Duration::from_secs(1),
            "readiness took {took:?} to answer"
        );
        if r.status == status {
            eprintln!("readiness answered {status} after {:?}", since.elapsed());
            return r;
        }
        assert!(
            since.elapsed() < Duration::from_secs(20),
            "readiness still answers {} after 20 s",
            r.status
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// A chat frame refused while the database is away: an `error` event that says to retry and
/// when (a socket has no `Retry-After` header), without the driver's text.
fn assert_socket_refusal(ev: &Value) {
    assert_eq!(ev["event_type"], "error", "{ev}");
    assert_eq!(ev["data"]["error_code"], "database_unavailable", "{ev}");
    assert_eq!(ev["data"]["recoverable"], true, "{ev}");
    assert!(
        ev["data"]["details"]["retry_after_secs"].as_u64() > Some(0),
        "no retry delay: {ev}"
    );
    let message = ev["data"]["error"].as_str().unwrap_or_default();
    assert!(!message.contains("pool"), "driver text: {ev}");
    assert!(
        !message.contains("Retry-After"),
        "no such header on a socket: {ev}"
    );
}

/// `rb` sent through [`Ctx::send`], with how long it took.
async fn timed(ctx: &Ctx, rb: reqwest::RequestBuilder) -> (Resp, Duration) {
    let asked = Instant::now();
    let r = ctx.send(rb.timeout(Duration::from_secs(30))).await;
    (r, asked.elapsed())
}

/// The database refused, then black-holed, ~10 s each, under a server with an open WebSocket:
/// chat and session routes (REST and SSE) and the socket's chat frames answer
/// `database_unavailable` within about the 2 s acquire timeout, readiness goes red within about
/// a second, and after each outage chats work again on the same server and the same socket.
pub async fn refused_and_black_holed(ctx: &Ctx, relay: &Relay) {
    let t = ctx.tenant().await;
    let key = t.member.key.as_str();
    let sid = new_session(ctx, key).await;
    let mut ws = ws_connect(ctx, key, &sid).await;
    let chat = |message: &str| json!({"type": "chat", "payload": {"message": message}});
    send(&mut ws, chat("before")).await;
    assert_eq!(
        text_of(&until_done_or_hitl(&mut ws).await),
        "(scripted) You said: before"
    );
    const OUTAGE: Duration = Duration::from_secs(10);
    for link in [Link::Refused, Link::BlackHoled] {
        // The member's key is in the server's cache, so requests reach the routes themselves.
        ctx.ok(Method::GET, "/api/v1/sessions", key, None, 200)
            .await;
        relay.set(link).await;
        let cut = Instant::now();
        until_ready_is(ctx, 503).await;
        let red = cut.elapsed();
        let post = |path: &str, body: Value| ctx.request(Method::POST, path, Some(key)).json(&body);
        let ws_refusal = async {
            let asked = Instant::now();
            send(&mut ws, chat("during the outage")).await;
            let ev = next_json(&mut ws).await;
            (ev, asked.elapsed())
        };
        let (chat_r, create_r, list_r, stream_r, (ev, ws_took)) = tokio::join!(
            timed(
                ctx,
                post(
                    "/api/v1/chat",
                    json!({"message": "hi", "session_id": sid.clone()})
                )
            ),
            timed(ctx, post("/api/v1/sessions", json!({}))),
            timed(ctx, ctx.request(Method::GET, "/api/v1/sessions", Some(key))),
            timed(ctx, post("/api/v1/chat/stream", json!({"message": "hi"}))),
            ws_refusal,
        );
        for (what, (r, took)) in [
            ("POST /api/v1/chat", chat_r),
            ("POST /api/v1/sessions", create_r),
            ("GET /api/v1/sessions", list_r),
            ("POST /api/v1/chat/stream", stream_r),
        ] {
            eprintln!("{link:?}: {what} answered {} in {took:?}", r.status);
            assert_database_unavailable(&format!("{link:?}: {what}"), &r);
            assert!(took < PROMPT, "{link:?}: {what} took {took:?}");
        }
        eprintln!("{link:?}: readiness red after {red:?}; WebSocket refusal in {ws_took:?}: {ev}");
        assert_socket_refusal(&ev);
        assert!(ws_took < PROMPT, "{link:?}: the socket took {ws_took:?}");
        tokio::time::sleep(OUTAGE.saturating_sub(cut.elapsed())).await;

        relay.set(Link::Up).await;
        let back = Instant::now();
        until_ready_is(ctx, 200).await;
        eprintln!(
            "{link:?}: ready again {:?} after the database came back",
            back.elapsed()
        );
        // The same server and the same socket work again.
        send(&mut ws, chat("after")).await;
        let evs = until_done_or_hitl(&mut ws).await;
        assert_eq!(text_of(&evs), "(scripted) You said: after", "{evs:?}");
        let r = ctx
            .ok(
                Method::POST,
                "/api/v1/chat",
                key,
                Some(json!({"message": "again", "session_id": sid.clone()})),
                200,
            )
            .await;
        assert_eq!(r["session_id"], sid.as_str());
        // The socket watched that run too.
        let evs = until_done_or_hitl(&mut ws).await;
        assert_eq!(text_of(&evs), "(scripted) You said: again", "{evs:?}");
    }
}

/// A run's end is retried this long before the run ends `failed` (`END_BOUND` in
/// `actors/src/agent/recorder.rs`; docs/operations.md says why it is not the 2 s of new work).
const END_BOUND: Duration = Duration::from_secs(8);

/// A run in flight when the database goes away (refused, then in a second round black-holed)
/// ends `failed` (its end could not be written) within the end's bound after its model
/// answered; while the database is still away the session's next chat is refused
/// `database_unavailable` as promptly as any new work (not `run_in_progress`: the client has
/// the run's `done`); and once the database is back the very next chat on the same socket is
/// taken — the session does not answer `run_in_progress` while the failed run's end waits for
/// its next retry (issue 31 item 5).
pub async fn a_run_in_flight_ends_failed_and_its_session_takes_the_next_chat(
    ctx: &Ctx,
    relay: &Relay,
) {
    let t = ctx.tenant().await;
    let key = t.member.key.as_str();
    let chat = |message: &str| json!({"type": "chat", "payload": {"message": message}});
    for link in [Link::Refused, Link::BlackHoled] {
        let sid = new_session(ctx, key).await;
        let mut ws = ws_connect(ctx, key, &sid).await;
        // The model answers 1.5 s after the chat; the database goes away 0.5 s in.
        send(&mut ws, chat("/sleep 1500\n/echo in flight")).await;
        tokio::time::sleep(Duration::from_millis(500)).await;
        relay.set(link).await;
        let cut = Instant::now();
        let evs = until_done_or_hitl(&mut ws).await;
        let held = cut.elapsed();
        let done = evs.last().unwrap();
        assert_eq!(done["event_type"], "done", "{link:?}: {evs:?}");
        assert_eq!(done["data"]["status"], "failed", "{link:?}: {done}");
        eprintln!("{link:?}: the run in flight got its failed done {held:?} after the cut");
        // About a second of the model's answer is left at the cut, then the end's bound.
        let bound = Duration::from_secs(1) + END_BOUND + MARGIN;
        assert!(
            held < bound,
            "{link:?}: the run in flight got its done {held:?} after the cut (bound {bound:?})"
        );

        // Still away: refused like any new work, at once.
        let asked = Instant::now();
        send(&mut ws, chat("during the outage")).await;
        let refused = next_json(&mut ws).await;
        let took = asked.elapsed();
        eprintln!("{link:?}: a chat after the failed done was refused in {took:?}: {refused}");
        // The key's cache entry (5 s) has expired by now: this is the socket's own check of
        // the caller refused, not the engine's.
        assert_socket_refusal(&refused);
        assert!(took < PROMPT, "{link:?}: the refusal took {took:?}");

        relay.set(Link::Up).await;
        until_ready_is(ctx, 200).await;
        send(&mut ws, chat("after the outage")).await;
        let first = next_json(&mut ws).await;
        assert_ne!(
            first["event_type"], "error",
            "{link:?}: the next chat after the outage was refused: {first}"
        );
        let mut evs = vec![first.clone()];
        if first["event_type"] != "done" {
            evs.extend(until_done_or_hitl(&mut ws).await);
        }
        assert_eq!(
            text_of(&evs),
            "(scripted) You said: after the outage",
            "{link:?}: {evs:?}"
        );
    }
}
