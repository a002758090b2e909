//! `WS /ws/chat/{session_id}`: one [`WsConnection`] actor per socket.
//!
//! Client frames (`{"type", "payload"}`: chat, hitl_decision, cancel, ping, resume) become engine
//! calls — the same ones REST makes — and the session's events go out as JSON text frames, one
//! event per frame. A bad frame gets an `error` event and the connection stays open. Several
//! connections may watch one session; each gets every event. `resume {after_seq}` (or
//! `?after_seq=N` on the URL) replays what was missed, with no gap and no duplicate.
//!
//! Events that belong to the connection rather than to the session's stream (an error about a
//! frame, say) carry `seq: 0` and an empty `run_id`; `ping` is answered with
//! `{"type": "pong", "payload": {}}`.
//!
//! Heartbeats: the server pings every 15 s and drops a client that has sent nothing (not even
//! a pong) for 45 s, releasing its subscription. When the server stops (SIGTERM), every socket
//! is closed with 1001 "going away" at once, so clients reconnect (to another replica).

use std::any::Any;
use std::os::fd::{AsRawFd, RawFd};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use actix::prelude::*;
use actix_web::{HttpRequest, HttpResponse, web};
use actix_web_actors::ws;
use agentry_actors::{Engine, EngineError, SessionEvent, SessionHandle, SubscriptionId};
use agentry_schema::error::ErrorCode;
use agentry_schema::events::{EventPayload, ExecutionEvent};
use agentry_schema::frames::{ClientFrame, FrameError, parse_client_frame};
use agentry_schema::ids::{ApprovalId, SessionId};
use serde::Deserialize;
use tracing::Instrument;

use crate::access;
use crate::auth::{self, Forgotten, TenantCaller, WS_PROTOCOL, WsKey};
use crate::error::{ApiError, ApiResult};
use crate::extract::{ApiPath, ApiQuery, param};
use crate::request_id::RequestId;
use crate::routes::resource::endpoint;
use crate::state::AppState;

pub const WS_GAUGE: &str = "agentry_ws_connections";

pub fn configure(cfg: &mut web::ServiceConfig) {
    cfg.service(endpoint("/ws/chat/{session_id}").get(connect));
}

#[derive(Debug, Default, Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct WsQuery {
    /// Replay the session's events after this `seq` before the live stream.
    pub after_seq: Option<u64>,
}

/// Open the session's event stream over WebSocket.
#[utoipa::path(
    get,
    path = "/ws/chat/{session_id}",
    tag = "chat",
    params(("session_id" = String, Path, description = "Session id (UUID)"), WsQuery),
    responses(
        (status = 101, description = "Switching to the WebSocket protocol"),
        (status = 400, description = "A bad `session_id`, query, or not a WebSocket upgrade", body = agentry_schema::ErrorResponse),
        (status = 401, description = "No usable API key (header or `agentry.key.<key>` subprotocol)", body = agentry_schema::ErrorResponse),
        (status = 403, description = "The platform admin key (it has no tenant)", body = agentry_schema::ErrorResponse),
        (status = 404, description = "No such session visible to the caller", body = agentry_schema::ErrorResponse),
        (status = 503, description = "`server.max_connections` WebSockets are open (`Retry-After`)", body = agentry_schema::ErrorResponse),
    )
)]
pub async fn connect(
    caller: TenantCaller,
    state: web::Data<AppState>,
    id: ApiPath<param::Session>,
    query: ApiQuery<WsQuery>,
    request_id: RequestId,
    req: HttpRequest,
    stream: web::Payload,
) -> ApiResult<HttpResponse> {
    let key = WsKey::of(req.headers()).ok_or_else(auth::invalid_key)?;
    let session = access::session(&state.db, &caller, id.into_inner()).await?;
    let max = state.settings.server.max_connections;
    // Reserve a slot before the upgrade; released when the actor stops (or here on failure).
    let open = state.ws_connections.fetch_add(1, Ordering::SeqCst);
    if open >= max {
        state.ws_connections.fetch_sub(1, Ordering::SeqCst);
        return Err(ApiError::new(
            ErrorCode::ServiceUnavailable,
            format!("the server holds its maximum of {max} WebSocket connections; retry shortly"),
        )
        .with_retry_after(5));
    }
    let slot = Slot::taken(state.ws_connections.clone());
    let handle = state
        .engine
        .open_session(caller.tenant(), &caller.user(), session.id)
        .await?;
    // The connection's starting point is read before the upgrade is answered: whatever the
    // session numbers after the client was told it is connected reaches it, even a run started
    // on another replica before this socket's subscription got there (issue 31 item 2).
    let initial_after = match query.into_inner().after_seq {
        Some(after) => after,
        None => state.engine.position(&handle).await?,
    };
    let frame_limit = state.settings.server.frame_limit_bytes;
    let heartbeat = Duration::from_secs(state.settings.server.ws_heartbeat_secs);
    let client_timeout = Duration::from_secs(state.settings.server.ws_client_timeout_secs);
    let actor = WsConnection {
        state: state.clone(),
        key,
        heartbeat,
        client_timeout,
        engine: state.engine.clone(),
        caller,
        handle,
        subscription: None,
        expected: None,
        resyncing: false,
        last_seen: Instant::now(),
        frame_limit,
        initial_after: Some(initial_after),
        fragments: None,
        request_id: request_id.0,
        shutdown: state.shutdown.clone(),
        socket: req.conn_data::<ConnSocket>().copied(),
        last_start: None,
        _slot: slot,
    };
    ws::WsResponseBuilder::new(actor, &req, stream)
        .protocols(&[WS_PROTOCOL])
        // The codec refuses (and closes on) anything beyond twice the limit; frames between the
        // limit and that get an error event and the socket stays open.
        .frame_size(frame_limit.saturating_mul(2))
        .start()
        .map_err(|e| {
            ApiError::new(
                ErrorCode::BadRequest,
                format!("not a WebSocket upgrade: {e}"),
            )
        })
}

/// The descriptor of a connection's TCP socket (set by [`remember_socket`] for every plain TCP
/// connection), so that a WebSocket can end its connection promptly after a close handshake.
#[derive(Debug, Clone, Copy)]
pub struct ConnSocket(RawFd);

/// `HttpServer::on_connect`: note the connection's socket.
pub fn remember_socket(conn: &dyn Any, ext: &mut actix_web::dev::Extensions) {
    if let Some(tcp) = conn.downcast_ref::<actix_web::rt::net::TcpStream>() {
        ext.insert(ConnSocket(tcp.as_raw_fd()));
    }
}

/// A reserved connection slot, given back when dropped.
struct Slot(Arc<AtomicUsize>);

impl Slot {
    /// The count was already incremented by the caller.
    fn taken(count: Arc<AtomicUsize>) -> Self {
        metrics::gauge!(WS_GAUGE).increment(1.0);
        Slot(count)
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
        metrics::gauge!(WS_GAUGE).decrement(1.0);
    }
}

pub struct WsConnection {
    state: web::Data<AppState>,
    engine: Engine,
    /// The key the socket was opened with: checked again before each chat and decision, and at
    /// once when this replica revokes it or changes its user or tenant.
    key: WsKey,
    caller: TenantCaller,
    handle: SessionHandle,
    subscription: Option<SubscriptionId>,
    /// The next `seq` to forward; earlier ones are duplicates (after a resume). `None` until the
    /// first event.
    expected: Option<u64>,
    /// After a `resume` that replaced a subscription, events the old one had already queued for
    /// this actor arrive before the replay, with later seqs. Until the replay's first event
    /// (`expected`) comes, later ones are dropped — the replay brings them again, in order —
    /// instead of moving `expected` past the replay and losing it.
    resyncing: bool,
    last_seen: Instant,
    frame_limit: usize,
    initial_after: Option<u64>,
    /// A fragmented message being put together.
    fragments: Option<Fragments>,
    heartbeat: Duration,
    client_timeout: Duration,
    /// The upgrade request's id: runs started over this socket are logged with it.
    request_id: String,
    shutdown: tokio_util::sync::CancellationToken,
    /// The connection's socket, to end it promptly after the client's close.
    socket: Option<ConnSocket>,
    /// Answered (or dropped) when the last chat or decision this socket started has its
    /// answer: the next one waits for it, so the session receives them in the order sent, even
    /// when they are forwarded to another replica (see [`WsConnection::start_in_turn`]).
    last_start: Option<tokio::sync::oneshot::Receiver<()>>,
    _slot: Slot,
}

impl WsConnection {
    /// An event about this connection (not part of the session's stream): `seq` 0.
    fn send_error(
        &self,
        ctx: &mut ws::WebsocketContext<Self>,
        code: ErrorCode,
        message: impl Into<String>,
    ) {
        let ev = ExecutionEvent::new(
            0,
            self.handle.session.id.to_string(),
            "",
            EventPayload::error(code.as_str(), message, true),
        );
        ctx.text(ev.to_json());
    }

    /// A refused frame, with the same `details` REST would answer (a quota names itself). An
    /// internal fault reads as REST's does: its cause goes to the log, not to the client.
    fn engine_error(&self, ctx: &mut ws::WebsocketContext<Self>, e: EngineError) {
        let code = e.code();
        let (message, details) = match e {
            EngineError::Internal(_) => {
                let api = ApiError::from(e);
                (api.message, api.details)
            }
            e => (e.to_string(), e.details()),
        };
        let ev = ExecutionEvent::new(
            0,
            self.handle.session.id.to_string(),
            "",
            EventPayload::error_with_details(code.as_str(), message, true, details),
        );
        ctx.text(ev.to_json());
    }

    /// (Re)subscribe, replaying after `after` when given.
    fn subscribe(&mut self, ctx: &mut ws::WebsocketContext<Self>, after: Option<u64>) {
        let replaced = self.subscription.take();
        if let Some(old) = replaced {
            self.engine.unsubscribe(&self.handle, old);
        }
        self.expected = after.map(|a| a + 1);
        self.resyncing = replaced.is_some() && after.is_some();
        let engine = self.engine.clone();
        let handle = self.handle.clone();
        let me = ctx.address().recipient();
        let fut = async move { engine.subscribe(&handle, after, me).await };
        ctx.wait(fut.into_actor(self).map(|res, act, ctx| match res {
            Ok(id) => act.subscription = Some(id),
            Err(e) => {
                act.engine_error(ctx, e);
                act.close_with(
                    ctx,
                    ws::CloseCode::Again,
                    "the session is not available; reconnect",
                );
            }
        }));
    }

    fn on_text(&mut self, ctx: &mut ws::WebsocketContext<Self>, text: &str) {
        if text.len() > self.frame_limit {
            let e = FrameError::TooLarge {
                size: text.len(),
                limit: self.frame_limit,
            };
            return self.send_error(ctx, e.code(), e.to_string());
        }
        let frame = match parse_client_frame(text) {
            Ok(f) => f,
            Err(e) => return self.send_error(ctx, e.code(), e.to_string()),
        };
        match frame {
            ClientFrame::Ping(_) => ctx.text(r#"{"type":"pong","payload":{}}"#),
            ClientFrame::Resume(r) => self.subscribe(ctx, Some(r.after_seq)),
            ClientFrame::Chat(_) | ClientFrame::HitlDecision(_) => self.start_in_turn(ctx, frame),
            // Not in the line of chats and decisions: a cancel must get through at once, also
            // when the limit is reached (it starts no work and is not counted).
            ClientFrame::Cancel(_) => self.cancel(ctx),
        }
    }

    /// The caller may no longer act: say why and close with 1008 (policy). A check the database
    /// could not answer refuses only the frame.
    fn refuse(&mut self, ctx: &mut ws::WebsocketContext<Self>, e: ApiError) {
        let retryable = matches!(
            e.code,
            ErrorCode::DatabaseUnavailable | ErrorCode::ServiceUnavailable
        );
        // A socket has no `Retry-After` header: a frame refused for a while says so as the
        // engine's refusals do, recoverable with `details.retry_after_secs`.
        let (message, details) = match (retryable, e.retry_after) {
            (true, Some(secs)) => {
                let mut details = e.details;
                if !details.is_object() {
                    details = serde_json::Value::Object(Default::default());
                }
                details["retry_after_secs"] = secs.into();
                let message = if e.code == ErrorCode::DatabaseUnavailable {
                    EngineError::DatabaseUnavailable.to_string()
                } else {
                    e.message
                };
                (message, details)
            }
            _ => (e.message, e.details),
        };
        let event = ExecutionEvent::new(
            0,
            self.handle.session.id.to_string(),
            "",
            EventPayload::error_with_details(e.code.as_str(), message, retryable, details),
        );
        ctx.text(event.to_json());
        if retryable {
            return;
        }
        tracing::info!(session_id = %self.handle.session.id, code = %e.code, "closing a WebSocket whose caller may no longer act");
        self.close_with(ctx, ws::CloseCode::Policy, e.code.as_str());
    }

    /// Check and start a chat or a decision, in its turn.
    ///
    /// Chats and decisions go to the session one at a time, in the order they were sent: each
    /// waits until the one before has its answer (a chat is accepted once its message is
    /// stored, queued or started). Sent at once, the second could reach the session first — a
    /// forwarded command is answered by a task of its own on the owner — and a user's second
    /// instruction would run before their first (issue 31 item 1). The socket is not held
    /// meanwhile: events still flow, other frames are read, and a `cancel` (not in this line)
    /// goes through at once.
    ///
    /// In its turn, work starts only for a caller who may still act (the key checked again,
    /// through the auth cache) and within the tenant's `requests_per_minute`, which counts
    /// these frames as REST counts requests. A frame over a limit gets an `error` event and
    /// the socket stays open; a caller who may no longer act is told why and the socket closes.
    fn start_in_turn(&mut self, ctx: &mut ws::WebsocketContext<Self>, frame: ClientFrame) {
        let (kind, work) = match frame {
            ClientFrame::Chat(chat) => ("chat", Work::Chat(chat)),
            ClientFrame::HitlDecision(d) => match d.request_id.parse::<ApprovalId>() {
                Ok(request) => ("hitl_decision", Work::Decision(request, d.decision)),
                Err(e) => {
                    return self.send_error(
                        ctx,
                        ErrorCode::InvalidFrame,
                        format!("hitl_decision: {e}"),
                    );
                }
            },
            ClientFrame::Cancel(_) | ClientFrame::Ping(_) | ClientFrame::Resume(_) => return,
        };
        let (started, next) = tokio::sync::oneshot::channel::<()>();
        let before = self.last_start.replace(next);
        let (state, key) = (self.state.clone(), self.key.clone());
        let (engine, handle) = (self.engine.clone(), self.handle.clone());
        let session_id = self.handle.session.id;
        let request_id = self.request_id.clone();
        let fut = async move {
            if let Some(before) = before {
                // Answered or gone, either way it is this one's turn.
                let _ = before.await;
            }
            let caller = auth::recheck(&state, &key).await?;
            let res = async {
                engine.admit_request(caller.tenant()).await?;
                let (tenant, user) = (caller.tenant_arc(), caller.user());
                match work {
                    Work::Chat(chat) => {
                        // A spent `tokens_per_day` is refused before the session is asked: on
                        // three replicas, frames for one session from several sockets
                        // otherwise met the first one's admission and got `run_in_progress`
                        // (issue 31 item 4).
                        engine.check_token_budget(&tenant).await?;
                        engine
                            .start_chat_for(
                                &handle,
                                &user,
                                chat.message,
                                chat.enqueue,
                                Some(request_id),
                            )
                            .await
                            .map(drop)
                    }
                    Work::Decision(request, decision) => {
                        engine
                            .decide(&tenant, &user, session_id, request, decision)
                            .await
                    }
                }
            }
            .await;
            // The next frame's turn.
            drop(started);
            Ok::<_, ApiError>((caller, res))
        }
        .instrument(frame_span(kind, &self.request_id, session_id));
        ctx.spawn(fut.into_actor(self).map(|res, act, ctx| match res {
            Ok((caller, res)) => {
                act.caller = caller;
                if let Err(e) = res {
                    act.engine_error(ctx, e);
                }
            }
            Err(e) => act.refuse(ctx, e),
        }));
    }

    /// Cancel the session's run, at once.
    fn cancel(&mut self, ctx: &mut ws::WebsocketContext<Self>) {
        let engine = self.engine.clone();
        let tenant = self.caller.tenant_arc();
        let user = self.caller.user();
        let session_id = self.handle.session.id;
        let fut = async move { engine.cancel(&tenant, &user, session_id).await };
        ctx.spawn(fut.into_actor(self).map(|res, act, ctx| {
            if let Err(e) = res {
                act.engine_error(ctx, e);
            }
        }));
    }
}

/// What a chat or decision frame asks for, checked and started in its turn.
enum Work {
    Chat(agentry_schema::frames::ChatFrame),
    Decision(ApprovalId, agentry_schema::frames::Decision),
}

/// The span of a frame that starts work (a trace of its own; the socket's request id ties it
/// to the connection).
fn frame_span(kind: &str, request_id: &str, session_id: SessionId) -> tracing::Span {
    tracing::info_span!(
        "ws.frame",
        otel.name = %format!("ws {kind}"),
        otel.kind = "server",
        request_id = %request_id,
        session_id = %session_id,
        agentry.frame = %kind,
    )
}

/// A text or binary message arriving in fragments, put together up to `server.frame_limit_bytes`.
struct Fragments {
    text: bool,
    bytes: Vec<u8>,
    /// Went over the limit: the rest is dropped and the message refused when it ends.
    over: bool,
}

impl WsConnection {
    /// After the client's close: end the connection as soon as our close frame is out.
    ///
    /// actix-http keeps reading a request body that is not finished when the response ends —
    /// and a WebSocket's body never finishes — until the client hangs up or
    /// `client_disconnect_timeout` (1 s) passes, while the client waits for the server to close
    /// TCP first (RFC 6455 §7.1.1): every clean close took about a second. Shutting the socket's
    /// read side makes actix-http's next read see end-of-file: it still writes the close frame,
    /// then closes the connection at once. Nothing is lost: the client sends nothing after its
    /// close.
    ///
    /// The descriptor is valid here: this handler runs inside actix-http's poll of the response
    /// body, and actix-http owns the socket until that body ends.
    fn stop_reading(&self) {
        if let Some(ConnSocket(fd)) = self.socket
            && let Err(e) = nix::sys::socket::shutdown(fd, nix::sys::socket::Shutdown::Read)
        {
            tracing::debug!(error = %e, "could not shut the read side of a closed WebSocket");
        }
    }

    /// Close from our side. The client answers our close and then waits for us to end TCP
    /// (RFC 6455 §7.1.1), which actix-http would do only after `client_disconnect_timeout`
    /// (1 s): [`WsConnection::stop_reading`] ends it once our close frame is out. The client's
    /// answer is not needed: the connection is over either way.
    fn close_with(&mut self, ctx: &mut ws::WebsocketContext<Self>, code: ws::CloseCode, why: &str) {
        ctx.close(Some(ws::CloseReason {
            code,
            description: Some(why.into()),
        }));
        ctx.stop();
        self.stop_reading();
    }

    /// One fragment of a message (RFC 6455 §5.4); the whole message is handled like an
    /// unfragmented one when its last fragment arrives.
    fn on_fragment(&mut self, ctx: &mut ws::WebsocketContext<Self>, item: actix_http::ws::Item) {
        let (first, data, last) = match item {
            actix_http::ws::Item::FirstText(d) => (Some(true), d, false),
            actix_http::ws::Item::FirstBinary(d) => (Some(false), d, false),
            actix_http::ws::Item::Continue(d) => (None, d, false),
            actix_http::ws::Item::Last(d) => (None, d, true),
        };
        match (first, self.fragments.as_mut()) {
            (Some(text), None) => {
                self.fragments = Some(Fragments {
                    text,
                    bytes: Vec::new(),
                    over: false,
                })
            }
            (None, Some(_)) => {}
            (Some(_), Some(_)) => {
                return self.close_with(
                    ctx,
                    ws::CloseCode::Protocol,
                    "a new message began before the fragmented one ended",
                );
            }
            (None, None) => {
                return self.close_with(
                    ctx,
                    ws::CloseCode::Protocol,
                    "a continuation frame without a message to continue",
                );
            }
        }
        let limit = self.frame_limit;
        let Some(f) = self.fragments.as_mut() else {
            return;
        };
        if !f.over {
            if f.bytes.len() + data.len() > limit {
                f.over = true;
                f.bytes = Vec::new();
            } else {
                f.bytes.extend_from_slice(&data);
            }
        }
        if !last {
            return;
        }
        let Some(whole) = self.fragments.take() else {
            return;
        };
        if whole.over {
            let e = FrameError::TooLarge {
                size: limit + 1,
                limit,
            };
            return self.send_error(ctx, e.code(), e.to_string());
        }
        if !whole.text {
            return self.send_error(
                ctx,
                ErrorCode::InvalidFrame,
                "binary frames are not supported: send JSON text frames",
            );
        }
        match String::from_utf8(whole.bytes) {
            Ok(text) => self.on_text(ctx, &text),
            Err(_) => self.close_with(ctx, ws::CloseCode::Invalid, "text frames must be UTF-8"),
        }
    }
}

impl Actor for WsConnection {
    type Context = ws::WebsocketContext<Self>;

    fn started(&mut self, ctx: &mut Self::Context) {
        let after = self.initial_after;
        self.subscribe(ctx, after);
        let shutdown = self.shutdown.clone();
        ctx.spawn(
            async move { shutdown.cancelled().await }
                .into_actor(self)
                .map(|_, act, ctx| {
                    act.close_with(
                        ctx,
                        ws::CloseCode::Away,
                        "the server is shutting down; reconnect",
                    );
                }),
        );
        ctx.add_stream(tokio_stream::wrappers::BroadcastStream::new(
            self.state.auth.subscribe(),
        ));
        ctx.run_interval(self.heartbeat, |act, ctx| {
            if act.last_seen.elapsed() > act.client_timeout {
                tracing::debug!(session_id = %act.handle.session.id, "WebSocket client stopped answering; dropping it");
                act.close_with(ctx, ws::CloseCode::Away, "no heartbeat");
                return;
            }
            // A session actor with a subscriber only stops when the session is deleted (or its
            // tenant is removed): tell the client and let it go.
            if !act.handle.addr.connected() {
                act.send_error(
                    ctx,
                    ErrorCode::NotFound,
                    "the session was deleted; open another one",
                );
                act.close_with(ctx, ws::CloseCode::Normal, "session deleted");
                return;
            }
            ctx.ping(b"");
        });
    }

    fn stopped(&mut self, _: &mut Self::Context) {
        if let Some(id) = self.subscription.take() {
            self.engine.unsubscribe(&self.handle, id);
        }
    }
}

impl Handler<SessionEvent> for WsConnection {
    type Result = ();

    fn handle(&mut self, msg: SessionEvent, ctx: &mut Self::Context) {
        let seq = msg.event.seq;
        match self.expected {
            Some(next) if seq < next => return, // already sent on this connection
            Some(next) if self.resyncing && seq > next => return, // queued before the resume
            _ => {
                self.resyncing = false;
                self.expected = Some(seq + 1);
            }
        }
        ctx.text(msg.json.to_string());
    }
}

impl StreamHandler<Result<ws::Message, ws::ProtocolError>> for WsConnection {
    fn handle(&mut self, msg: Result<ws::Message, ws::ProtocolError>, ctx: &mut Self::Context) {
        self.last_seen = Instant::now();
        match msg {
            Ok(ws::Message::Text(text)) => self.on_text(ctx, &text),
            Ok(ws::Message::Ping(p)) => ctx.pong(&p),
            Ok(ws::Message::Pong(_)) => {}
            Ok(ws::Message::Binary(_)) => self.send_error(
                ctx,
                ErrorCode::InvalidFrame,
                "binary frames are not supported: send JSON text frames",
            ),
            Ok(ws::Message::Continuation(item)) => self.on_fragment(ctx, item),
            Ok(ws::Message::Nop) => {}
            Ok(ws::Message::Close(reason)) => {
                ctx.close(reason);
                ctx.stop();
                self.stop_reading();
            }
            Err(ws::ProtocolError::Overflow) => {
                let why = format!("frames are limited to {} bytes", self.frame_limit);
                self.close_with(ctx, ws::CloseCode::Size, &why);
            }
            // Text that is not UTF-8 (the codec reports it as an I/O error).
            Err(ws::ProtocolError::Io(e)) if e.to_string().contains("utf-8") => {
                self.close_with(ctx, ws::CloseCode::Invalid, "text frames must be UTF-8");
            }
            // The peer is gone: nobody to tell.
            Err(ws::ProtocolError::Io(e)) => {
                tracing::debug!(error = %e, "WebSocket connection lost");
                ctx.stop();
            }
            // An unmasked client frame, a reserved opcode, a bad control frame.
            Err(e) => {
                tracing::debug!(error = %e, "WebSocket protocol error");
                self.close_with(ctx, ws::CloseCode::Protocol, &e.to_string());
            }
        }
    }
}

type ForgottenItem = Result<Forgotten, tokio_stream::wrappers::errors::BroadcastStreamRecvError>;

/// This replica revoked a key or changed a tenant or its users: a socket it may concern checks
/// its key again now instead of at its next frame.
impl StreamHandler<ForgottenItem> for WsConnection {
    fn handle(&mut self, item: ForgottenItem, ctx: &mut Self::Context) {
        let concerned = match item {
            Ok(Forgotten::Key(id)) => Some(id) == self.caller.key_id(),
            Ok(Forgotten::Tenant(id)) => id == self.caller.tenant_id(),
            Err(_) => true, // missed some: check anyway
        };
        if !concerned {
            return;
        }
        let (state, key) = (self.state.clone(), self.key.clone());
        let check = async move { auth::recheck(&state, &key).await };
        ctx.spawn(check.into_actor(self).map(|res, act, ctx| match res {
            Ok(caller) => act.caller = caller,
            // Unknown for now: the next frame checks again.
            Err(e) if e.code == ErrorCode::DatabaseUnavailable => {}
            Err(e) => act.refuse(ctx, e),
        }));
    }

    /// The resolver lives as long as the server: nothing to do if its stream ends.
    fn finished(&mut self, _: &mut Self::Context) {}
}
