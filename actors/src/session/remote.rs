//! A session in cluster mode (issue 13): its events reach every replica that has a subscriber
//! for it, whichever replica runs it.
//!
//! - **The owner** (this replica holds the session's lease) sends every event it sends its own
//!   subscribers to the session's Redis stream as well ([`SessionActor::mirror`]), under its
//!   fencing token: a replica that lost the session has its late events refused there too.
//! - **A watcher** (the lease is another replica's, or nobody's) with subscribers *tails* the
//!   session ([`Tail`]): it listens to the session's channel and hands the owner's events to its
//!   subscribers in `seq` order. `tail.upto` is the last `seq` handed on; an event after a gap
//!   first reads the gap back (the stored events, then the stream), and after the bus
//!   reconnected the tail catches up the same way. A subscriber that resumes (`after_seq`) gets
//!   the stored events, then the stream's, up to `tail.upto`, then the live tail: no gap and no
//!   duplicate, whichever replica it connects to.
//! - **A watcher that becomes the owner** (its claim of the lease was fresh) first hands on what
//!   the previous owner stored after `tail.upto` (its run's end is stored before it lets the
//!   lease go), then numbers its own events above the session's floor.
//! - **Takeover** ([`TakeOver`]): the watcher of another replica found the session's owner dead
//!   with a run going or waiting; the session recovers here (claims the lease, stores what the
//!   dead owner streamed but had not stored, resumes the run from its checkpoint).

use std::sync::Arc;

use actix::prelude::*;
use agentry_schema::events::ExecutionEvent;
use agentry_schema::ids::SessionId;
use agentry_store::coordination::{Coordination, StreamEvent, TailItem};
use agentry_store::{TenantScope, events as store_events};

use super::{SessionActor, SessionEvent, Subscribe, SubscriptionId};
use crate::deps::EngineDeps;
use crate::error::EngineError;

/// How many events one read of the store or the stream returns.
const PAGE: u64 = 1000;

/// This replica's tail of a session another replica runs.
pub(super) struct Tail {
    /// Every event with `seq <= upto` was handed to the subscribers (or is older than they
    /// asked for, or a number never used).
    pub(super) upto: u64,
    stream: SpawnHandle,
}

/// Take the session over: its owner died with a run going or waiting (sent by the replica's
/// watcher). A session this replica already runs ignores it.
#[derive(Message)]
#[rtype(result = "()")]
pub struct TakeOver;

fn parse(json: &str) -> Option<SessionEvent> {
    let event: ExecutionEvent = serde_json::from_str(json).ok()?;
    Some(SessionEvent {
        event: Arc::new(event),
        json: json.into(),
    })
}

fn wrap(event: ExecutionEvent) -> SessionEvent {
    let json = event.to_json();
    SessionEvent {
        event: Arc::new(event),
        json: json.into(),
    }
}

/// The session's events with `after < seq <= upto` (no `upto`: all), in order: the stored ones,
/// then the stream's above them (sent, not stored yet). The store holds a prefix of the stream
/// (a session stores its events in order), so the two join without a hole.
pub(super) async fn events_between(
    deps: &EngineDeps,
    scope: &TenantScope,
    session: SessionId,
    after: u64,
    upto: Option<u64>,
) -> Result<Vec<SessionEvent>, EngineError> {
    let mut out = Vec::new();
    let mut cursor = after;
    loop {
        if upto.is_some_and(|u| cursor >= u) {
            return Ok(out);
        }
        let page = store_events::list_after(&deps.db, scope, session, cursor, PAGE).await?;
        let full = page.len() as u64 == PAGE;
        for e in page {
            if upto.is_some_and(|u| e.seq > u) {
                return Ok(out);
            }
            cursor = e.seq;
            out.push(wrap(e));
        }
        if !full {
            break;
        }
    }
    if let Some(c) = &deps.coordination {
        loop {
            let streamed = match c
                .events_after(&session.to_string(), cursor, upto, PAGE as usize)
                .await
            {
                Ok(s) => s,
                // The stored events are what there is: the rest comes live, or at the next
                // catch-up.
                Err(e) => {
                    tracing::debug!(error = %e, session_id = %session, "reading the session's stream failed");
                    break;
                }
            };
            let full = streamed.len() == PAGE as usize;
            for (seq, json) in streamed {
                if seq <= cursor {
                    continue;
                }
                if let Some(ev) = parse(&json) {
                    cursor = seq;
                    out.push(ev);
                }
            }
            if !full {
                break;
            }
        }
    }
    Ok(out)
}

/// Where the session's stream is now: the highest `seq` stored or streamed.
async fn head(
    deps: &EngineDeps,
    coordination: &Coordination,
    scope: &TenantScope,
    session: SessionId,
) -> Result<u64, EngineError> {
    let stored = store_events::max_seq(&deps.db, scope, session).await?;
    let streamed = coordination
        .last_event(&session.to_string())
        .await
        .ok()
        .flatten()
        .unwrap_or(0);
    Ok(stored.max(streamed))
}

/// Store what a dead owner streamed but had not stored, under this replica's new token, so
/// every replica replays the same stream it saw live. Call right after a fresh claim.
pub(super) async fn adopt_streamed(
    deps: &EngineDeps,
    coordination: &Coordination,
    scope: &TenantScope,
    session: SessionId,
    token: i64,
) -> Result<usize, EngineError> {
    let stored = store_events::max_seq(&deps.db, scope, session).await?;
    let streamed: Vec<ExecutionEvent> = coordination
        .events_after(&session.to_string(), stored, None, usize::MAX >> 1)
        .await?
        .into_iter()
        .filter_map(|(_, json)| serde_json::from_str(&json).ok())
        .collect();
    if !streamed.is_empty() {
        store_events::append_missing_fenced(&deps.db, scope, session, &streamed, Some(token))
            .await?;
    }
    Ok(streamed.len())
}

impl SessionActor {
    /// Cluster mode, and this replica does not hold the session's lease: its events come from
    /// whoever runs it.
    pub(super) fn watching(&self) -> bool {
        self.deps.coordination.is_some() && self.lease.is_none()
    }

    /// The owner's events, to the session's stream (cluster mode; a no-op otherwise).
    pub(super) fn mirror(&self, events: Vec<StreamEvent>) {
        if events.is_empty() {
            return;
        }
        if let Some(bus) = self.deps.coordination.as_ref().and_then(|c| c.bus()) {
            bus.mirror(&self.session_key, self.fence, events);
        }
    }

    /// Hand events to every subscriber (a watcher's: not numbered, kept or stored here).
    fn hand_on(&mut self, events: Vec<SessionEvent>) {
        let Some(tail) = self.tail.as_mut() else {
            return;
        };
        self.subscribers.retain(|_, s| s.connected());
        for ev in events {
            if ev.event.seq <= tail.upto {
                continue;
            }
            tail.upto = ev.event.seq;
            for s in self.subscribers.values() {
                s.send(ev.clone());
            }
        }
        self.last_activity = std::time::Instant::now();
    }

    /// Start or stop tailing as the session's state asks: a watcher with subscribers tails, an
    /// owner or a session nobody watches does not. Checked at every tick, so it follows every
    /// change (a run ended here and the lease went, the lease was lost, the last subscriber
    /// left).
    pub(super) fn keep_tail(&mut self, ctx: &mut Context<Self>) {
        let wanted =
            self.watching() && self.recovered && self.subscribers.values().any(|s| s.connected());
        match (&self.tail, wanted) {
            (None, true) => {
                // Whoever watched saw everything this actor sent: the tail goes on from there.
                let from = self.log.last_seq();
                self.start_tail(ctx, Some(from));
            }
            (Some(_), false) => self.stop_tail(ctx),
            _ => {}
        }
    }

    fn stop_tail(&mut self, ctx: &mut Context<Self>) {
        if let Some(tail) = self.tail.take() {
            ctx.cancel_future(tail.stream);
        }
    }

    /// Listen to the session's channel, then hand on what was sent after `from` (`None`: the
    /// subscribers have no position yet; the tail starts at the stream's head). Nothing else is
    /// handled meanwhile, so no event overtakes the catch-up.
    fn start_tail(&mut self, ctx: &mut Context<Self>, from: Option<u64>) {
        let (Some(coordination), deps) = (self.deps.coordination.clone(), self.deps.clone()) else {
            return;
        };
        let Some(bus) = coordination.bus().cloned() else {
            return;
        };
        let (scope, sid) = (self.scope, self.session.id);
        let fut = async move {
            let (stream, _subscribed) = bus.tail(&sid.to_string()).await;
            let caught = match from {
                Some(after) => events_between(&deps, &scope, sid, after, None)
                    .await
                    .map(|evs| (after, evs)),
                None => head(&deps, &coordination, &scope, sid)
                    .await
                    .map(|h| (h, Vec::new())),
            };
            (stream, caught)
        };
        ctx.wait(fut.into_actor(self).map(|(stream, caught), act, ctx| {
            let (upto, events) = caught.unwrap_or_else(|e| {
                tracing::warn!(error = %e, session_id = %act.session.id, "catching up a session's events failed; the next event catches up");
                (act.log.last_seq(), Vec::new())
            });
            act.stop_tail(ctx);
            let stream = ctx.add_stream(stream);
            act.tail = Some(Tail { upto, stream });
            act.hand_on(events);
        }));
    }

    /// Read back what the tail missed after `upto` (to `until`), hand it on, then `then`.
    fn fill(&mut self, ctx: &mut Context<Self>, until: Option<u64>, then: Vec<SessionEvent>) {
        let Some(after) = self.tail.as_ref().map(|t| t.upto) else {
            return;
        };
        let deps = self.deps.clone();
        let (scope, sid) = (self.scope, self.session.id);
        let fut = async move { events_between(&deps, &scope, sid, after, until).await };
        ctx.wait(fut.into_actor(self).map(move |res, act, _ctx| {
            match res {
                Ok(events) => act.hand_on(events),
                Err(e) => {
                    tracing::debug!(error = %e, session_id = %act.session.id, "reading back a gap in a session's events failed");
                }
            }
            // Whatever could not be read back was never sent (numbers a replica skipped).
            act.hand_on(then);
        }));
    }

    /// A resume (or a first subscription) on a watcher: the tail starts if it is not running,
    /// the events after `after_seq` up to `tail.upto` are replayed from the store and the
    /// stream, then the subscriber follows the tail. Atomic: no tail event is handed on in
    /// between, so none is missed or doubled.
    pub(super) fn subscribe_watching(
        &mut self,
        msg: Subscribe,
    ) -> AtomicResponse<Self, Result<SubscriptionId, EngineError>> {
        let deps = self.deps.clone();
        let bus = deps.coordination.as_ref().and_then(|c| c.bus()).cloned();
        let (scope, sid) = (self.scope, self.session.id);
        let running = self.tail.as_ref().map(|t| t.upto);
        let after = msg.after_seq;
        let fut = async move {
            let started = match (running, bus, &deps.coordination) {
                (None, Some(bus), Some(c)) => {
                    let (stream, _subscribed) = bus.tail(&sid.to_string()).await;
                    Some((stream, head(&deps, c, &scope, sid).await?))
                }
                _ => None,
            };
            let upto = running.or(started.as_ref().map(|(_, h)| *h)).unwrap_or(0);
            let replay = match after {
                Some(a) if a < upto => events_between(&deps, &scope, sid, a, Some(upto)).await?,
                _ => Vec::new(),
            };
            Ok::<_, EngineError>((started, replay))
        };
        AtomicResponse::new(Box::pin(fut.into_actor(self).map(move |res, act, ctx| {
            let (started, replay) = res?;
            if let Some((stream, upto)) = started {
                act.stop_tail(ctx);
                let stream = ctx.add_stream(stream);
                act.tail = Some(Tail { upto, stream });
            }
            for ev in replay {
                msg.subscriber.send(ev);
            }
            Ok(act.add_subscriber(msg.subscriber))
        })))
    }

    /// This replica now holds the lease: hand on what the previous owner stored after the
    /// tail's position (`drained`, read after the claim), and stop tailing.
    pub(super) fn end_tail(&mut self, ctx: &mut Context<Self>, drained: Vec<SessionEvent>) {
        if self.tail.is_some() {
            self.hand_on(drained);
        }
        self.stop_tail(ctx);
    }

    /// Where the tail is, for a claim that may end it (its drain reads from there).
    pub(super) fn tail_position(&self) -> Option<u64> {
        self.tail.as_ref().map(|t| t.upto)
    }
}

impl StreamHandler<TailItem> for SessionActor {
    fn handle(&mut self, item: TailItem, ctx: &mut Self::Context) {
        if self.tail.is_none() || !self.watching() {
            return;
        }
        match item {
            TailItem::Events(lines) => {
                let mut events: Vec<SessionEvent> = lines.iter().filter_map(|l| parse(l)).collect();
                events.sort_by_key(|e| e.event.seq);
                let upto = self.tail.as_ref().map_or(0, |t| t.upto);
                match events.iter().position(|e| e.event.seq > upto) {
                    Some(first) if events[first].event.seq > upto + 1 => {
                        let until = events[first].event.seq - 1;
                        self.fill(ctx, Some(until), events);
                    }
                    Some(_) => self.hand_on(events),
                    None => {}
                }
            }
            TailItem::Resync => self.fill(ctx, None, Vec::new()),
        }
    }

    /// A tail's stream ends only when the actor drops it: the actor goes on (the default
    /// would stop it).
    fn finished(&mut self, _ctx: &mut Self::Context) {}
}

impl Handler<super::Position> for SessionActor {
    type Result = ResponseActFuture<Self, Result<u64, EngineError>>;

    fn handle(&mut self, _: super::Position, _ctx: &mut Self::Context) -> Self::Result {
        let here = self.log.last_seq();
        let (watching, tailing) = (self.watching(), self.tail.as_ref().map(|t| t.upto));
        let (deps, scope, sid) = (self.deps.clone(), self.scope, self.session.id);
        Box::pin(
            async move {
                match (watching, tailing, deps.coordination.clone()) {
                    (true, Some(upto), _) => Ok(upto.max(here)),
                    (true, None, Some(c)) => Ok(head(&deps, &c, &scope, sid).await?.max(here)),
                    _ => Ok(here),
                }
            }
            .into_actor(self),
        )
    }
}

impl Handler<TakeOver> for SessionActor {
    type Result = ();

    fn handle(&mut self, _: TakeOver, ctx: &mut Self::Context) {
        if self.recovered && self.lease.is_none() && self.run.is_none() && !self.shutting_down {
            tracing::info!(session_id = %self.session.id, "taking over a session whose replica stopped");
            self.recover(ctx);
        }
    }
}
