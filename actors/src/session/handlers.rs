//! Thin handlers: each forwards to a SessionActor method.

use std::time::Instant;

use actix::prelude::*;
use agentry_schema::events::EventPayload;
use agentry_schema::ids::RunId;
use agentry_store::executions::{self, ExecutionStatus, NewExecution};
use tokio::sync::oneshot;

use super::messages::*;
use super::{QueuedRun, RunStart, SessionActor};
use crate::agent::sink::HumanOutcome;
use crate::error::EngineError;
use crate::hitl::ApprovalClosed;
use crate::live_sessions::Evict;

impl Handler<Subscribe> for SessionActor {
    type Result = AtomicResponse<Self, Result<SubscriptionId, EngineError>>;

    fn handle(&mut self, msg: Subscribe, _ctx: &mut Self::Context) -> Self::Result {
        // Cluster mode, another replica runs the session: its events come through the tail.
        if self.watching() && self.recovered {
            return self.subscribe_watching(msg);
        }
        let Some(after) = msg.after_seq else {
            let id = self.add_subscriber(msg.subscriber);
            return AtomicResponse::new(Box::pin(fut::ready(Ok(id))));
        };
        if after + 1 >= self.log.first_in_ring() {
            self.replay_from_ring(after, &msg.subscriber);
            let id = self.add_subscriber(msg.subscriber);
            return AtomicResponse::new(Box::pin(fut::ready(Ok(id))));
        }
        // Older than memory: page through the store up to the ring, then the ring. The
        // response is atomic, so no event is published in between.
        let db = self.deps.db.clone();
        let scope = self.scope;
        let sid = self.session.id;
        let upto = self.log.first_in_ring();
        let fut = async move {
            let mut out = Vec::new();
            let mut cursor = after;
            while cursor + 1 < upto {
                let page =
                    agentry_store::events::list_after(&db, &scope, sid, cursor, 1000).await?;
                let Some(last) = page.last().map(|e| e.seq) else {
                    break;
                };
                out.extend(page.into_iter().filter(|e| e.seq < upto));
                cursor = last;
            }
            Ok::<_, agentry_store::StoreError>(out)
        };
        AtomicResponse::new(Box::pin(fut.into_actor(self).map(move |res, act, _ctx| {
            let stored = res.map_err(EngineError::from)?;
            let mut last = after;
            for e in stored {
                last = e.seq;
                let json = e.to_json();
                msg.subscriber.send(SessionEvent {
                    event: std::sync::Arc::new(e),
                    json: json.into(),
                });
            }
            act.replay_from_ring(last, &msg.subscriber);
            Ok(act.add_subscriber(msg.subscriber))
        })))
    }
}

impl Handler<Unsubscribe> for SessionActor {
    type Result = ();
    fn handle(&mut self, msg: Unsubscribe, _: &mut Self::Context) {
        self.subscribers.remove(&msg.0);
        self.last_activity = Instant::now();
    }
}

impl Handler<StartChat> for SessionActor {
    type Result = ResponseActFuture<Self, Result<ChatAccepted, EngineError>>;

    fn handle(&mut self, msg: StartChat, ctx: &mut Self::Context) -> Self::Result {
        if self.shutting_down {
            return Box::pin(fut::ready(Err(EngineError::Unavailable)));
        }
        self.last_activity = Instant::now();
        if self.run.is_none() && self.queue.is_empty() && !self.unrecorded.is_empty() {
            // The session is free but its last run's end still waits for the database (an
            // outage): its client already has the run's `done`. Write it now instead of at the
            // next retry, then take the chat; still down, the chat gets `database_unavailable`
            // (retry), not `run_in_progress` (issue 31 item 5).
            let write = self.record_unrecorded();
            return Box::pin(write.then(move |(), act, ctx| {
                if act.unrecorded.is_empty() {
                    <Self as Handler<StartChat>>::handle(act, msg, ctx)
                } else {
                    Box::pin(fut::ready(Err(EngineError::DatabaseUnavailable)))
                }
            }));
        }
        let run_id = RunId::new();
        let span = self.run_span(&msg.span, run_id);
        if self.busy() {
            // A queued run starts from its stored row, which does not keep a client's tools.
            if !msg.enqueue || !msg.client_tools.is_empty() {
                return Box::pin(fut::ready(Err(EngineError::RunInProgress)));
            }
            // Queued: its place is taken now, in the order messages arrive; it is stored
            // before the answer (acknowledged means stored) and started when its turn comes.
            let db = self.deps.db.clone();
            let scope = self.scope;
            let new = NewExecution {
                id: run_id,
                user_id: msg.user.user_id,
                session_id: self.session.id,
                assistant_id: self.session.assistant_id.to_string(),
                input: msg.message,
                trace_id: agentry_schema::trace_context::trace_id(&span),
                status: ExecutionStatus::Queued,
                role: Some(msg.user.grant()),
            };
            if let Some(r) = msg.request_id {
                self.run_requests.insert(run_id, r);
            }
            self.run_spans.insert(run_id, span);
            self.queue.push_back(QueuedRun {
                run_id,
                user: msg.user,
                stored: false,
            });
            let fut = async move { executions::create(&db, &scope, new).await };
            return Box::pin(fut.into_actor(self).map(move |res, act, ctx| {
                match res {
                    Ok(_) => {
                        if let Some(q) = act.queue.iter_mut().find(|q| q.run_id == run_id) {
                            q.stored = true;
                        }
                    }
                    Err(_) => {
                        act.queue.retain(|q| q.run_id != run_id);
                        act.run_requests.remove(&run_id);
                        act.run_spans.remove(&run_id);
                    }
                }
                // The active run may have ended while the row was written.
                act.start_next(ctx);
                res.map_err(EngineError::from)?;
                Ok(ChatAccepted {
                    run_id,
                    queued: true,
                })
            }));
        }
        if let Some(r) = msg.request_id {
            self.run_requests.insert(run_id, r);
        }
        self.run_spans.insert(run_id, span);
        let (tx, rx) = oneshot::channel();
        self.start_run(
            ctx,
            run_id,
            msg.user,
            RunStart::Fresh {
                message: msg.message,
                client_tools: msg.client_tools,
            },
            0,
            Some(tx),
        );
        Box::pin(
            async move { rx.await.unwrap_or(Err(EngineError::Unavailable)) }
                .into_actor(self)
                .map(move |res, act, _| {
                    if res.is_err() {
                        act.run_requests.remove(&run_id);
                    }
                    res
                }),
        )
    }
}

impl Handler<CancelRun> for SessionActor {
    type Result = Result<RunId, EngineError>;
    fn handle(&mut self, _: CancelRun, ctx: &mut Self::Context) -> Self::Result {
        self.last_activity = Instant::now();
        self.cancel_run(ctx)
    }
}

impl Handler<GetStatus> for SessionActor {
    type Result = MessageResult<GetStatus>;
    fn handle(&mut self, _: GetStatus, _: &mut Self::Context) -> Self::Result {
        MessageResult(SessionStatus {
            active_run: self.run.as_ref().map(|r| r.run_id),
            queued: self.queue.len(),
            pending_approvals: self.approvals.keys().copied().collect(),
            subscribers: self.subscribers.values().filter(|s| s.connected()).count(),
            last_seq: self.log.last_seq(),
        })
    }
}

impl Handler<AssistantChanged> for SessionActor {
    type Result = ();
    fn handle(&mut self, msg: AssistantChanged, _: &mut Self::Context) {
        if msg.0 == self.session.assistant_id {
            // A run starting now may have read the old row: it must not keep it.
            self.assistant_changes += 1;
        }
        if self
            .assistant
            .as_ref()
            .is_some_and(|(a, _)| a.0.id == msg.0)
        {
            self.assistant = None;
        }
    }
}

impl Handler<AssistantsChanged> for SessionActor {
    type Result = ();
    fn handle(&mut self, _: AssistantsChanged, _: &mut Self::Context) {
        self.assistant_changes += 1;
        self.assistant = None;
    }
}

impl Handler<TenantChanged> for SessionActor {
    type Result = ();
    fn handle(&mut self, msg: TenantChanged, _: &mut Self::Context) {
        self.tenant = msg.0;
    }
}

impl Handler<Shutdown> for SessionActor {
    type Result = ();
    fn handle(&mut self, _: Shutdown, ctx: &mut Self::Context) {
        self.shutting_down = true;
        self.queue.clear();
        if self.cancel_run(ctx).is_err() && self.run.is_none() {
            self.stop_on_purpose(ctx);
        }
    }
}

impl Handler<Emit> for SessionActor {
    type Result = ();
    fn handle(&mut self, msg: Emit, _: &mut Self::Context) {
        // Events of a run that already ended (aborted after a cancel) are dropped: `done` was
        // its last word.
        if self.emitting(msg.run_id, msg.child) {
            match msg.child {
                Some(c) => self.publish_as(Some(c.run), Some(c.parent), msg.payload),
                None => self.publish(Some(msg.run_id), msg.payload),
            }
        }
    }
}

impl Handler<StartChild> for SessionActor {
    type Result = bool;
    fn handle(&mut self, msg: StartChild, _: &mut Self::Context) -> bool {
        self.start_child(msg.root, msg.child, msg.depth, msg.progress)
    }
}

impl Handler<ForgetChild> for SessionActor {
    type Result = ();
    fn handle(&mut self, msg: ForgetChild, _: &mut Self::Context) {
        if let Some(run) = self.run.as_mut().filter(|r| r.run_id == msg.root) {
            run.children.remove(&msg.child.run);
        }
    }
}

impl Handler<EndChild> for SessionActor {
    type Result = ();
    fn handle(&mut self, msg: EndChild, ctx: &mut Self::Context) {
        self.end_child(ctx, msg.root, msg.child, msg.outcome, msg.reply);
    }
}

impl Handler<OpenApproval> for SessionActor {
    type Result = ();
    fn handle(&mut self, msg: OpenApproval, _: &mut Self::Context) {
        if let Some(run) = self.run.as_mut().filter(|r| r.run_id == msg.run_id) {
            run.asked_human = true;
        }
        let live = self.emitting(msg.run_id, msg.child)
            && self.run.as_ref().is_some_and(|r| !r.cancel.is_cancelled());
        let id = msg.request.id;
        if !live {
            self.desk.close(id, HumanOutcome::Cancelled);
            return;
        }
        // Filed under the top-level run: its end (or cancel) closes its children's requests too.
        self.approvals.insert(id, msg.run_id);
        let payload = EventPayload::HitlRequest(msg.request.data);
        match msg.child {
            Some(c) => self.publish_as(Some(c.run), Some(c.parent), payload),
            None => self.publish(Some(msg.run_id), payload),
        }
    }
}

impl Handler<ApprovalClosed> for SessionActor {
    type Result = ();
    fn handle(&mut self, msg: ApprovalClosed, _: &mut Self::Context) {
        self.approvals.remove(&msg.id);
        crate::metrics::record_hitl_wait(msg.waited, msg.decided);
    }
}

impl Handler<RunFinished> for SessionActor {
    type Result = ();
    fn handle(&mut self, msg: RunFinished, ctx: &mut Self::Context) {
        self.on_run_finished(ctx, msg.run_id, msg.result);
    }
}

impl Handler<FlushEvents> for SessionActor {
    type Result = ();
    fn handle(&mut self, _: FlushEvents, ctx: &mut Self::Context) {
        self.log.flush_asked = false;
        self.flush(ctx);
    }
}

impl Handler<SeqReserved> for SessionActor {
    type Result = ();
    fn handle(&mut self, msg: SeqReserved, _: &mut Self::Context) {
        self.on_reserved(msg.upto);
    }
}

impl Handler<AddMissingDone> for SessionActor {
    type Result = ();
    fn handle(&mut self, msg: AddMissingDone, ctx: &mut Self::Context) {
        for (run_id, parent) in msg.0 {
            match parent {
                Some(parent) => self.interrupt_child(ctx, run_id, parent),
                None => self.interrupt(ctx, run_id, |_, _| {}),
            }
        }
    }
}

impl Handler<Evict> for SessionActor {
    type Result = ();
    fn handle(&mut self, _: Evict, ctx: &mut Self::Context) {
        if !self.leave_if_idle(ctx) {
            self.residency.refused();
        }
    }
}
