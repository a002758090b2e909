//! SessionActor: one per live session. It owns the session's event log (a `seq` per event, a
//! ring of recent events for replay, batched persistence), its subscribers, its active run (the
//! agent loop as a task on the engine runtime), the queue of enqueued messages, and the
//! approval actors of that run.
//!
//! Exactly one `done` per run: only this actor emits it, when the run task reports its outcome,
//! panics past the restart budget, or is aborted after a cancel.

mod handlers;
pub mod messages;
mod remote;

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::panic::AssertUnwindSafe;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use actix::prelude::*;
use agentry_schema::error::ErrorCode;
use agentry_schema::events::{DoneData, DoneStatus, EventPayload, ExecutionEvent, TokenUsage};
use agentry_schema::ids::{ApprovalId, AssistantId, RunId, SessionId, UserId};
use agentry_schema::tenancy::Role;
use agentry_store::assistants::{self, Assistant, AssistantSpec};
use agentry_store::checkpoints;
use agentry_store::executions::{self, ExecutionStatus, NewExecution, RunEnd};
use agentry_store::sessions::{self, Session};
use agentry_store::tenants::Tenant;
use agentry_store::{TenantScope, UserScope, events as store_events, users};
use futures::FutureExt;
use tokio::sync::oneshot;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use crate::agent::recorder::{HistoryRead, StartRows};
use crate::agent::sink::{ChildTag, HumanOutcome, HumanRequest, RunSink};
use crate::agent::{
    Progress, RunCheckpoint, RunInput, RunOutcome, RunRecorder, SharedProgress, run_agent,
};
use crate::deps::{ASSISTANT_REUSE, EngineDeps, KeptAssistant};
use crate::error::EngineError;
use crate::hitl::{ApprovalDesk, Waiter};
use crate::live_sessions::Residency;
use crate::quota::QuotaHandle;
pub use messages::*;
pub use remote::TakeOver;

/// How often an unrecorded run end is tried again.
const UNRECORDED_RETRY: Duration = Duration::from_secs(2);

fn execution_status(status: DoneStatus) -> ExecutionStatus {
    match status {
        DoneStatus::Completed => ExecutionStatus::Completed,
        DoneStatus::Cancelled => ExecutionStatus::Cancelled,
        DoneStatus::Rejected => ExecutionStatus::Rejected,
        DoneStatus::Failed => ExecutionStatus::Failed,
        DoneStatus::Timeout => ExecutionStatus::Timeout,
        DoneStatus::Interrupted => ExecutionStatus::Interrupted,
    }
}

/// How many event numbers a session reserves at a time, and how few may be left before it
/// reserves the next block ahead of need. One reservation is one small write per block, folded
/// into the run-start write when a run starts.
const SEQ_BLOCK: u64 = 256;
const SEQ_LOW_WATER: u64 = 128;

/// How the session log keeps events.
///
/// An event leaves the server only once it is stored (or, while the database is away, written
/// to the local journal of unrecorded runs): every event a client saw is in `GET …/events`
/// after any crash, and a `seq`, once sent, never names another event. A numbered event waits
/// in `held`, in order, while the batch it belongs to is written ([`SessionActor::flush`]);
/// the write is one writer job, group-committed with every other session's. Event numbers
/// are still reserved ahead (`sessions.seq_reserved`), so a restart numbers above anything a
/// crashed actor numbered.
struct EventLog {
    next_seq: u64,
    /// Sent events, for replay.
    ring: VecDeque<SessionEvent>,
    cap: usize,
    /// Every event with `seq <= persisted_upto` is in the store; only those may leave the ring,
    /// so a replay never finds a hole between the store and memory.
    persisted_upto: u64,
    /// A batch of `held` is being written (up to this `seq`).
    flushing: bool,
    /// A [`FlushEvents`] is on its way to the actor.
    flush_asked: bool,
    /// Every `seq <= ending_upto` is carried by a run's end record (written, being written, or
    /// retried until written): a flush leaves those to it.
    ending_upto: u64,
    /// Every `seq <= reserved` is durably reserved for this session.
    reserved: u64,
    /// A reservation is being written.
    reserving: bool,
    /// Every `seq <= journaled_upto` is in the local journal of unrecorded runs.
    journaled_upto: u64,
    /// Numbered, not sent yet: waiting for a reservation (or behind one of `barriers`).
    held: VecDeque<SessionEvent>,
    /// The `seq`s of child runs' `done`s whose ends are being written: each, and everything
    /// after it, stays held until its write lands, so the stream stays in `seq` order (siblings
    /// and the parent go on emitting meanwhile) and a `done` is never sent without its status.
    barriers: std::collections::BTreeSet<u64>,
}

impl EventLog {
    /// A log that numbers from above `floor`: the highest `seq` the session ever stored or
    /// reserved.
    fn new(floor: u64, cap: usize) -> Self {
        EventLog {
            next_seq: floor + 1,
            ring: VecDeque::new(),
            cap: cap.max(16),
            persisted_upto: floor,
            flushing: false,
            flush_asked: false,
            ending_upto: floor,
            reserved: floor,
            reserving: false,
            journaled_upto: floor,
            held: VecDeque::new(),
            barriers: Default::default(),
        }
    }

    /// Give the event the next `seq` (it is not sent yet: see [`EventLog::accept`]); `parent`:
    /// the run that started the event's run, for a `task` child run's.
    fn number_tagged(
        &mut self,
        session_id: &str,
        run_id: &str,
        parent: Option<RunId>,
        payload: EventPayload,
    ) -> SessionEvent {
        let event = ExecutionEvent::new(self.next_seq, session_id, run_id, payload)
            .with_parent(parent.map(|p| p.to_string()));
        self.next_seq += 1;
        let json: Arc<str> = event.to_json().into();
        SessionEvent {
            event: Arc::new(event),
            json,
        }
    }

    fn sendable(&self, seq: u64) -> bool {
        seq <= self.persisted_upto.max(self.journaled_upto)
    }

    /// A numbered event: what may be sent now (it, or nothing while earlier ones wait).
    fn accept(&mut self, ev: SessionEvent) -> Option<SessionEvent> {
        if self.held.is_empty() && self.sendable(ev.event.seq) {
            self.keep(ev.clone());
            Some(ev)
        } else {
            self.held.push_back(ev);
            None
        }
    }

    /// The held events that may be sent now, in order.
    fn release(&mut self) -> Vec<SessionEvent> {
        let mut out = Vec::new();
        while let Some(ev) = self.held.front() {
            let behind_barrier = self.barriers.first().is_some_and(|b| ev.event.seq >= *b);
            if !self.sendable(ev.event.seq) || behind_barrier {
                break;
            }
            if let Some(ev) = self.held.pop_front() {
                self.keep(ev.clone());
                out.push(ev);
            }
        }
        out
    }

    /// A sent (so stored, or journaled) event stays for replay.
    fn keep(&mut self, ev: SessionEvent) {
        self.ring.push_back(ev);
        self.evict();
    }

    /// The held events to store next: those not stored yet, before the first barrier (a
    /// child's `done` is stored with its run's end, and what follows it waits for that).
    fn to_store(&self) -> Vec<ExecutionEvent> {
        let barrier = self.barriers.first().copied().unwrap_or(u64::MAX);
        self.held
            .iter()
            .take_while(|e| e.event.seq < barrier)
            .filter(|e| {
                e.event.seq
                    > self
                        .persisted_upto
                        .max(self.journaled_upto)
                        .max(self.ending_upto)
            })
            .map(|e| (*e.event).clone())
            .collect()
    }

    /// The next reservation to make, if the reserved numbers run low.
    fn wants_reservation(&self) -> Option<u64> {
        (!self.reserving && self.reserved < self.next_seq + SEQ_LOW_WATER)
            .then_some(self.next_seq + SEQ_BLOCK)
    }

    /// Events sent or held that may not be stored yet, in order.
    fn not_stored(&self) -> Vec<ExecutionEvent> {
        self.ring
            .iter()
            .chain(self.held.iter())
            .filter(|e| e.event.seq > self.persisted_upto)
            .map(|e| (*e.event).clone())
            .collect()
    }

    fn evict(&mut self) {
        while self.ring.len() > self.cap
            && self
                .ring
                .front()
                .is_some_and(|e| e.event.seq <= self.persisted_upto)
        {
            self.ring.pop_front();
        }
    }

    fn first_in_ring(&self) -> u64 {
        self.ring
            .front()
            .map(|e| e.event.seq)
            .unwrap_or(self.next_seq)
    }

    fn last_seq(&self) -> u64 {
        self.next_seq - 1
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// Admitted; its rows are being written before the loop starts.
    Starting,
    Running,
    /// The loop is over; the outcome is being recorded before `done` goes out.
    Finishing,
}

/// A run slot of the tenant's quota (`max_concurrent_runs`), held by an admitted run. It is
/// given back exactly once: when the run ends, or when whatever holds it is dropped instead: a
/// start abandoned half-way, a loop restarted after a panic, or a session actor that panicked
/// and was dropped without `stopped`. (Its tokens are not counted here: each model call settles
/// its own reservation with its real usage.)
pub(crate) struct RunSlot {
    quota: QuotaHandle,
    run_id: RunId,
}

impl Drop for RunSlot {
    fn drop(&mut self) {
        self.quota.release_run(self.run_id);
    }
}

struct ActiveRun {
    run_id: RunId,
    /// Its quota slot, once admitted.
    slot: Option<RunSlot>,
    input: Option<RunInput>,
    cancel: CancellationToken,
    abort: Option<tokio::task::AbortHandle>,
    progress: SharedProgress,
    phase: Phase,
    restarts: u32,
    /// It continues a run from before a crash or restart.
    resumed: bool,
    /// It opened an approval or a question (its end cancels any left pending).
    asked_human: bool,
    /// The run's span (`agent.run`): its loop, model and tool calls are its children.
    span: tracing::Span,
    /// Its `task` child runs (and theirs) still going, by id: their events are published while
    /// they are here, and the run's end ends those left.
    children: HashMap<RunId, LiveChild>,
}

/// A `task` child run still going (see [`ActiveRun::children`]).
struct LiveChild {
    parent: RunId,
    depth: u32,
    progress: SharedProgress,
}

/// A message waiting behind the active run. Its place in the queue is taken when the message
/// arrives, so messages run in the order the session received them, whichever row write ends
/// first; it starts only once its row is `stored`.
#[derive(Debug, Clone, Copy)]
struct QueuedRun {
    run_id: RunId,
    user: UserScope,
    stored: bool,
}

/// How a run gets its rows written before the loop starts.
enum RunStart {
    /// A new message: create the execution, store the message. `client_tools`: the functions
    /// its client declared for the run (kept in the run's checkpoints).
    Fresh {
        message: String,
        client_tools: Vec<agentry_schema::api::ClientTool>,
    },
    /// A queued execution: mark it running, store its message.
    Queued,
    /// After a crash or a panic: continue from this checkpoint (or from the stored
    /// conversation when there is none).
    Resume(Option<Box<RunCheckpoint>>),
}

pub struct SessionActor {
    session: Session,
    tenant: Arc<Tenant>,
    scope: TenantScope,
    deps: Arc<EngineDeps>,
    quota: QuotaHandle,
    mcp: Option<Addr<crate::mcp_pool::McpPoolActor>>,
    supervisor: Recipient<SessionStopped>,
    log: EventLog,
    session_key: String,
    subscribers: BTreeMap<SubscriptionId, Subscriber>,
    next_sub: SubscriptionId,
    run: Option<ActiveRun>,
    queue: VecDeque<QueuedRun>,
    /// The run's requests open on the desk (for the status and to cancel them with the run).
    approvals: HashMap<ApprovalId, RunId>,
    /// Where its runs' approvals and questions wait for a decision.
    desk: Arc<ApprovalDesk>,
    /// The request that started each accepted run, until the run ends (for its log line).
    run_requests: HashMap<RunId, String>,
    /// The span of each run accepted but not started yet.
    run_spans: HashMap<RunId, tracing::Span>,
    last_activity: Instant,
    shutting_down: bool,
    /// `stopped` (or the drop after a panic) did its work.
    wound_down: bool,
    /// This actor chose to stop; any other stop is a crash.
    stop_requested: bool,
    instance: u64,
    /// Set when the actor starts: where reservations report back.
    me: Option<Addr<SessionActor>>,
    /// Ends of runs that could not be written within the retry bound: the run ended in memory
    /// (and in the local journal); the write is tried again until it lands.
    unrecorded: Vec<RunEnd>,
    unrecorded_tried: Instant,
    /// The assistant its last run used, and when it was loaded: the next run reuses it for
    /// [`ASSISTANT_REUSE`] (or until this server changes it, [`AssistantChanged`]).
    assistant: Option<(KeptAssistant, Instant)>,
    /// How many changes to its assistant this actor has heard of: a run start that loaded the
    /// assistant keeps it only if none came while it loaded (the row it read may be the old one).
    assistant_changes: u64,
    /// The model's history window as its last run started (the last `history_window` stored
    /// messages, oldest first): the next run's start reads only the messages stored after it
    /// ([`HistoryRead`]). Messages are never changed once stored, and a session's own runs
    /// write theirs one after another, so the window plus what came after it is exactly what
    /// a full read would return. Let go with the other buffers when nobody watches.
    window: Option<Arc<Vec<agentry_store::messages::Message>>>,
    /// Its place among the process's live sessions (the cap, eviction, who holds it).
    residency: Residency,
    /// Start-up recovery is done: before, the actor's numbering and runs are not known yet.
    recovered: bool,
    /// Giving back its unused event numbers before it leaves.
    leaving: bool,
    /// Cluster mode: this replica's lease on the session, held while it runs one of its runs
    /// (and renewed every third of its TTL); see [`claim`].
    lease: Option<Lease>,
    /// Cluster mode: the background give-back of the last lease, still going. The next claim
    /// waits for it: a claim by the same replica gets the same lease value back, and a give-back
    /// that landed after it would delete the new lease of the run now going.
    releasing: Option<tokio::task::JoinHandle<()>>,
    /// Cluster mode: the fencing token of the latest lease this actor held. Its writes carry
    /// it, so once another replica took the session over they are refused.
    fence: Option<i64>,
    /// Cluster mode: the lease was lost to another replica; what this actor's run still emits
    /// goes to nobody (the new owner's stream is the session's).
    lease_lost: bool,
    /// Cluster mode: the owner's events, while another replica runs the session and someone
    /// here watches it (see [`remote`]).
    tail: Option<remote::Tail>,
}

/// This replica's lease on the session (cluster mode).
#[derive(Debug, Clone, Copy)]
struct Lease {
    token: i64,
    renewing: bool,
}

/// A lease just claimed: its token, and (when it was not this replica's already) the session's
/// event floor read after the claim, since another replica may have numbered events meanwhile,
/// with the events the previous owner stored after the position of this replica's tail.
#[derive(Debug, Clone)]
struct Claimed {
    token: i64,
    floor: Option<u64>,
    /// With a fresh lease: the session's unfinished run, read with the floor.
    active: Option<RunId>,
    drained: Vec<SessionEvent>,
}

/// Cluster mode: own the session's live run, or learn that another replica does. Fails fast
/// while Redis does not answer: no run starts without an owner. `tail`: where this replica's
/// tail of the session is, if it has one (what was stored after it is handed on first).
async fn claim(
    deps: &EngineDeps,
    coordination: &agentry_store::coordination::Coordination,
    scope: &TenantScope,
    session_id: SessionId,
    tail: Option<u64>,
) -> Result<Claimed, EngineError> {
    use agentry_store::coordination::SessionClaim;
    if !coordination.reachable() {
        return Err(EngineError::CoordinationUnavailable);
    }
    // The previous run's events still queued for the session's stream go in first: the claim
    // raises the token, which would refuse them as stale.
    if let Some(bus) = coordination.bus() {
        bus.mirrored().await;
    }
    let stored = sessions::fence_of(&deps.db, scope, session_id).await?;
    match coordination
        .claim_session(
            &session_id.to_string(),
            stored,
            deps.config.session_lease_ttl,
        )
        .await?
    {
        SessionClaim::Owned { token, fresh } => {
            let (floor, active) = if fresh {
                let (floor, active) =
                    sessions::floor_and_active(&deps.db, scope, session_id, true).await?;
                (Some(floor), active)
            } else {
                (None, None)
            };
            let drained = match (fresh, tail) {
                (true, Some(after)) => {
                    remote::events_between(deps, scope, session_id, after, floor).await?
                }
                _ => Vec::new(),
            };
            Ok(Claimed {
                token,
                floor,
                active,
                drained,
            })
        }
        SessionClaim::Elsewhere { owner, expires_in } => Err(EngineError::SessionOwnedElsewhere {
            owner,
            retry_after: expires_in.max(Duration::from_secs(1)),
        }),
    }
}

impl SessionActor {
    #[allow(clippy::too_many_arguments)] // what a session gets from its supervisor, one by one
    pub fn new(
        session: Session,
        tenant: Arc<Tenant>,
        deps: Arc<EngineDeps>,
        quota: QuotaHandle,
        mcp: Option<Addr<crate::mcp_pool::McpPoolActor>>,
        supervisor: Recipient<SessionStopped>,
        residency: Residency,
        desk: Arc<ApprovalDesk>,
    ) -> Self {
        let cap = deps.config.event_ring;
        let instance = residency.instance;
        SessionActor {
            scope: tenant.scope(),
            session_key: session.id.to_string(),
            session,
            tenant,
            deps,
            quota,
            mcp,
            supervisor,
            log: EventLog::new(0, cap),
            subscribers: BTreeMap::new(),
            next_sub: 1,
            run: None,
            queue: VecDeque::new(),
            approvals: HashMap::new(),
            desk,
            run_requests: HashMap::new(),
            run_spans: HashMap::new(),
            last_activity: Instant::now(),
            shutting_down: false,
            wound_down: false,
            stop_requested: false,
            instance,
            me: None,
            unrecorded: Vec::new(),
            unrecorded_tried: Instant::now(),
            assistant: None,
            assistant_changes: 0,
            window: None,
            residency,
            recovered: false,
            leaving: false,
            lease: None,
            releasing: None,
            fence: None,
            lease_lost: false,
            tail: None,
        }
    }

    /// Subscribers carried over from the actor this one replaces (it panicked).
    pub(crate) fn with_subscribers(mut self, subscribers: Vec<Subscriber>) -> Self {
        for s in subscribers {
            self.add_subscriber(s);
        }
        self
    }

    fn stop_on_purpose(&mut self, ctx: &mut Context<Self>) {
        self.stop_requested = true;
        ctx.stop();
    }

    /// Nothing in flight and nobody watching: the actor may stop and lose nothing, since its
    /// next start reads everything back from the database.
    fn idle(&mut self) -> bool {
        self.subscribers.retain(|_, s| s.connected());
        self.recovered
            && !self.busy()
            && !self.shutting_down
            && !self.leaving
            && self.approvals.is_empty()
            && self.subscribers.is_empty()
            && self.log.held.is_empty()
            && !self.log.flushing
            && !self.log.reserving
    }

    /// Stop if idle and nobody holds the session (eviction past the live-session cap, or the
    /// idle timeout). Its unused event numbers are given back first, so the next actor of the
    /// session numbers on without skipping any. Returns false when it stays.
    fn leave_if_idle(&mut self, ctx: &mut Context<Self>) -> bool {
        if !self.idle() || self.residency.lease.held() {
            return false;
        }
        let last = self.log.last_seq();
        let reserved = self.log.reserved;
        if reserved <= last {
            return self.retire(ctx);
        }
        self.leaving = true;
        let writer = self.deps.writer.clone();
        let scope = self.scope;
        let sid = self.session.id;
        let fut = async move { release_seq(&writer, scope, sid, reserved, last).await };
        // `wait`: nothing else is handled until the numbers are given back; whoever got hold of
        // the session meanwhile is served afterwards (then the actor stays).
        ctx.wait(fut.into_actor(self).map(move |res, act, ctx| {
            act.leaving = false;
            match res {
                // Only this actor moves the reservation, so the release took effect.
                Ok(()) => act.log.reserved = last,
                Err(e) => {
                    tracing::debug!(error = %e, session_id = %act.session.id, "giving back unused event numbers failed; staying live");
                    act.residency.refused();
                    return;
                }
            }
            if !act.retire(ctx) {
                act.residency.refused();
            }
        }));
        true
    }

    fn retire(&mut self, ctx: &mut Context<Self>) -> bool {
        if self.idle() && self.residency.lease.try_retire() {
            tracing::debug!(session_id = %self.session.id, "session idle; stopping its actor");
            self.stop_on_purpose(ctx);
            true
        } else {
            false
        }
    }

    /// Once nobody watches and no run is going, the events stay in the database only: a
    /// subscriber that comes back replays from there. The other buffers are let go too.
    fn trim_if_unwatched(&mut self) {
        let holding = self.log.ring.capacity() > 0
            || self.log.held.capacity() > 0
            || self.assistant.is_some()
            || self.window.is_some();
        if !holding || self.run.is_some() {
            return;
        }
        self.subscribers.retain(|_, s| s.connected());
        if !self.subscribers.is_empty() {
            return;
        }
        let stored = self.log.persisted_upto;
        while self.log.ring.front().is_some_and(|e| e.event.seq <= stored) {
            self.log.ring.pop_front();
        }
        self.log.ring.shrink_to_fit();
        self.log.held.shrink_to_fit();
        if self
            .assistant
            .as_ref()
            .is_some_and(|(_, at)| at.elapsed() >= ASSISTANT_REUSE)
        {
            self.assistant = None;
        }
        self.window = None;
        self.queue.shrink_to_fit();
        self.approvals.shrink_to_fit();
        self.run_requests.shrink_to_fit();
        self.run_spans.shrink_to_fit();
    }

    /// A lease claimed for a run (or a recovery): hold it, hand on what the previous owner
    /// stored after this replica's tail, and number events above whatever another replica
    /// numbered while it held the session (the events kept for replay from before are not the
    /// session's latest any more then: replays read the store).
    fn took_lease(&mut self, ctx: &mut Context<Self>, claimed: Option<Claimed>) {
        let Some(c) = claimed else { return };
        self.end_tail(ctx, c.drained);
        self.lease = Some(Lease {
            token: c.token,
            renewing: false,
        });
        self.fence = Some(c.token);
        self.lease_lost = false;
        if let Some(floor) = c.floor
            && floor >= self.log.next_seq
        {
            self.log.next_seq = floor + 1;
            self.log.persisted_upto = self.log.persisted_upto.max(floor);
            self.log.ring.clear();
        }
    }

    /// The session has nothing to run here any more: give the lease back, after the unused
    /// event numbers (so the next owner, here or elsewhere, numbers on without a gap).
    fn release_lease(&mut self) {
        let Some(lease) = self.lease.take() else {
            return;
        };
        let Some(coordination) = self.deps.coordination.clone() else {
            return;
        };
        let last = self.log.last_seq();
        let all_stored = self.log.held.is_empty() && self.log.persisted_upto >= last;
        let reserved = self.log.reserved;
        if all_stored {
            // Lowering what this actor believes reserved is always safe: it reserves again
            // before it sends above it.
            self.log.reserved = self.log.reserved.min(last);
        }
        let (writer, scope, sid) = (self.deps.writer.clone(), self.scope, self.session.id);
        self.releasing = Some(self.deps.runtime.spawn(async move {
            if all_stored && let Err(e) = release_seq(&writer, scope, sid, reserved, last).await
            {
                tracing::debug!(error = %e, "giving back unused event numbers failed");
            }
            if let Err(e) = coordination
                .release_session(&sid.to_string(), lease.token)
                .await
            {
                tracing::warn!(error = %e, session_id = %sid, "releasing the session's lease failed; it expires by itself");
            }
        }));
    }

    /// Renew the lease while a run holds it. Lost (it expired and another replica claimed the
    /// session): the run here stops, and its late writes are refused by their fencing token.
    fn renew_lease(&mut self, ctx: &mut Context<Self>) {
        let Some(coordination) = self.deps.coordination.clone() else {
            return;
        };
        let Some(lease) = self.lease.as_mut().filter(|l| !l.renewing) else {
            return;
        };
        lease.renewing = true;
        let token = lease.token;
        let sid = self.session.id;
        let ttl = self.deps.config.session_lease_ttl;
        let fut = async move {
            coordination
                .renew_session(&sid.to_string(), token, ttl)
                .await
        };
        ctx.spawn(fut.into_actor(self).map(move |res, act, _ctx| {
            let Some(lease) = act.lease.as_mut().filter(|l| l.token == token) else {
                return;
            };
            lease.renewing = false;
            match res {
                Ok(true) => {}
                Ok(false) => {
                    tracing::error!(
                        session_id = %sid,
                        token,
                        "this replica lost the session's lease (not renewed in time; another replica took the session): its run here stops, and its late writes are refused"
                    );
                    act.lease = None;
                    act.lease_lost = true;
                    if let Some(run) = &act.run {
                        run.cancel.cancel();
                    }
                }
                Err(e) => tracing::warn!(
                    error = %e,
                    session_id = %sid,
                    "renewing the session's lease failed; the run goes on and tries again"
                ),
            }
        }));
    }

    fn busy(&self) -> bool {
        self.run.is_some() || !self.queue.is_empty() || !self.unrecorded.is_empty()
    }

    /// Assign the next `seq` and send the event once its `seq` is safe to send (see
    /// [`EventLog`]); it is kept for replay and persistence.
    fn publish(&mut self, run_id: Option<RunId>, payload: EventPayload) {
        self.publish_as(run_id, None, payload);
    }

    /// [`SessionActor::publish`] for an event that may be a child run's.
    fn publish_as(&mut self, run_id: Option<RunId>, parent: Option<RunId>, payload: EventPayload) {
        let run = run_id.map(|r| r.to_string()).unwrap_or_default();
        let ev = self
            .log
            .number_tagged(&self.session_key, &run, parent, payload);
        self.last_activity = Instant::now();
        if let Some(ev) = self.log.accept(ev) {
            self.fan_out(std::iter::once(ev));
        }
        self.ask_flush();
        self.reserve_ahead();
    }

    /// Have the held events written soon: a message to this actor, handled after whatever it
    /// is doing now, so the events numbered meanwhile go in the same batch.
    fn ask_flush(&mut self) {
        if self.log.held.is_empty() || self.log.flushing || self.log.flush_asked {
            return;
        }
        if let Some(me) = &self.me {
            self.log.flush_asked = true;
            me.do_send(FlushEvents);
        }
    }

    fn fan_out(&mut self, events: impl IntoIterator<Item = SessionEvent>) {
        // Another replica took the session over: its stream is the session's now.
        if self.lease_lost {
            return;
        }
        self.subscribers.retain(|_, s| s.connected());
        let mirrored = self.deps.coordination.is_some() && self.fence.is_some();
        let mut mirror = Vec::new();
        for ev in events {
            for s in self.subscribers.values() {
                s.send(ev.clone());
            }
            if mirrored {
                mirror.push((ev.event.seq, ev.json.clone()));
            }
        }
        self.mirror(mirror);
    }

    /// Send what was waiting and may go now.
    fn release_held(&mut self) {
        let out = self.log.release();
        if !out.is_empty() {
            self.fan_out(out);
        }
    }

    /// Reserve the next block of event numbers before they run out.
    fn reserve_ahead(&mut self) {
        let Some(upto) = self.log.wants_reservation() else {
            return;
        };
        let Some(me) = self.me.clone() else { return };
        self.log.reserving = true;
        let writer = self.deps.writer.clone();
        let scope = self.scope;
        let sid = self.session.id;
        self.deps.runtime.spawn(async move {
            let res = writer
                .write_for(sid.0, move |txn| {
                    Box::pin(async move { sessions::reserve_seq(txn, &scope, sid, upto).await })
                })
                .await;
            if let Err(e) = &res {
                tracing::warn!(error = %e, session_id = %sid, "reserving event numbers failed; will retry");
            }
            me.do_send(SeqReserved {
                upto: res.is_ok().then_some(upto),
            });
        });
    }

    fn on_reserved(&mut self, upto: Option<u64>) {
        self.log.reserving = false;
        if let Some(upto) = upto {
            self.log.reserved = self.log.reserved.max(upto);
            self.release_held();
        }
    }

    /// Write the held events to the store, one batch at a time, and send them once written.
    /// A failed write leaves them held; the next tick tries again (retrying at once would spin
    /// while the database is away).
    pub(super) fn flush(&mut self, ctx: &mut Context<Self>) {
        if self.log.flushing {
            return;
        }
        let batch = self.log.to_store();
        if batch.is_empty() {
            // Nothing to write, but a journaled or stored event may be waiting to be sent.
            self.release_held();
            return;
        }
        self.log.flushing = true;
        let writer = self.deps.writer.clone();
        let scope = self.scope;
        let sid = self.session.id;
        let fence = self.fence;
        let last = batch.last().map(|e| e.seq).unwrap_or_default();
        let fut = async move {
            // Idempotent: a run's end record may have stored some of these already.
            store_events::write_missing(&writer, &scope, sid, std::sync::Arc::new(batch), fence)
                .await
        };
        ctx.spawn(fut.into_actor(self).map(move |res, act, ctx| {
            act.log.flushing = false;
            match res {
                Ok(()) => act.stored_upto(last),
                // A newer owner of the session wrote: these events of this replica's lost run
                // are not stored (the refusal is logged) and not sent; the new owner's stream
                // is the one.
                Err(agentry_store::StoreError::Fenced { .. }) => {
                    act.log.held.retain(|e| e.event.seq > last);
                    act.stored_upto(last);
                }
                Err(e) => {
                    tracing::warn!(error = %e, session_id = %act.session.id, "storing events failed; they are sent once stored");
                    return;
                }
            }
            act.release_held();
            act.flush(ctx);
        }));
    }

    fn replay_from_ring(&self, after: u64, to: &Subscriber) -> u64 {
        let mut last = after;
        for ev in self.log.ring.iter().filter(|e| e.event.seq > after) {
            to.send(ev.clone());
            last = ev.event.seq;
        }
        last
    }

    fn add_subscriber(&mut self, to: Subscriber) -> SubscriptionId {
        let id = self.next_sub;
        self.next_sub += 1;
        self.subscribers.insert(id, to);
        self.last_activity = Instant::now();
        id
    }

    // ---- runs ----

    fn sink(&self, ctx: &Context<Self>, run_id: RunId) -> Arc<dyn RunSink> {
        Arc::new(ActorSink {
            addr: ctx.address(),
            run_id,
            child: None,
            desk: self.desk.clone(),
            tenant: self.tenant.id,
            session: self.session.id,
            owner: self.session.user_id,
        })
    }

    /// Admit a run and write its rows, then start the loop. `reply` gets the result of the
    /// admission (a chat request waits on it; queued and resumed runs report failures as events).
    /// The span of a run, child of `parent` (the request's or frame's; none: a trace of its own).
    pub(crate) fn run_span(&self, parent: &tracing::Span, run_id: RunId) -> tracing::Span {
        tracing::info_span!(
            parent: parent,
            "agent.run",
            otel.name = "agent run",
            run_id = %run_id,
            session_id = %self.session.id,
            tenant_id = %self.tenant.id,
            assistant_id = %self.session.assistant_id,
            agentry.run.status = tracing::field::Empty,
            agentry.run.resumed = tracing::field::Empty,
        )
    }

    fn start_run(
        &mut self,
        ctx: &mut Context<Self>,
        run_id: RunId,
        user: UserScope,
        start: RunStart,
        restarts: u32,
        reply: Option<oneshot::Sender<Result<ChatAccepted, EngineError>>>,
    ) {
        // A run resumed after a restart has no request: its span continues the trace its
        // checkpoint names, as a child of the run's span before the restart, so the trace id
        // stored on the execution and sent in `done` is the whole run's.
        let span = self.run_spans.remove(&run_id).unwrap_or_else(|| {
            let span = self.run_span(&tracing::Span::none(), run_id);
            if let RunStart::Resume(Some(cp)) = &start
                && let Some(tp) = &cp.trace_parent
            {
                agentry_schema::trace_context::continue_from(&span, tp);
            }
            span
        });
        if matches!(start, RunStart::Resume(_)) {
            span.record("agentry.run.resumed", true);
        }
        self.run = Some(ActiveRun {
            run_id,
            slot: None,
            input: None,
            cancel: CancellationToken::new(),
            abort: None,
            progress: Arc::new(Mutex::new(Progress::default())),
            phase: Phase::Starting,
            restarts,
            resumed: matches!(start, RunStart::Resume(_)),
            // A resumed run may have left a request pending (asked again, or closed at its end).
            asked_human: matches!(start, RunStart::Resume(_)),
            span: span.clone(),
            children: HashMap::new(),
        });
        self.last_activity = Instant::now();
        let deps = self.deps.clone();
        let tenant = self.tenant.clone();
        let session = self.session.clone();
        let kept = self
            .assistant
            .as_ref()
            .filter(|(a, at)| a.0.id == session.assistant_id && at.elapsed() < ASSISTANT_REUSE)
            .cloned();
        let assistant_changes = self.assistant_changes;
        // Moved, not shared: the run's start extends it in place (see `extend_window`), and it
        // comes back with the prepared run (a start that fails reads the whole window next).
        let window = self.window.take();
        let quota = self.quota.clone();
        let mcp = self.mcp.clone();
        let resuming = matches!(start, RunStart::Resume(_));
        let base = self.log.next_seq;
        let coordination = self.deps.coordination.clone();
        let scope = self.scope;
        let tail = self.tail_position();
        let releasing = self.releasing.take();
        self.log.reserving = true;
        let fut = async move {
            // The last lease's give-back lands before this claim, never after it.
            if let Some(releasing) = releasing {
                let _ = releasing.await;
            }
            // Cluster mode: the run needs the session's lease first (before a quota slot).
            let claimed = match &coordination {
                Some(c) => match claim(&deps, c, &scope, session.id, tail).await {
                    Ok(claimed) => Some(claimed),
                    Err(e) => return (Err(e), None, 0),
                },
                None => None,
            };
            // A lease that was not this replica's: a run its previous owner left unfinished
            // (it died) is resumed first; this message waits (the client retries).
            if let Some(c) = &claimed
                && c.floor.is_some()
                && !resuming
                && c.active.is_some_and(|a| a != run_id)
            {
                return (Err(EngineError::RunResuming), claimed, 0);
            }
            let base = claimed
                .as_ref()
                .and_then(|c| c.floor)
                .map_or(base, |floor| base.max(floor + 1));
            let reserve = base + SEQ_BLOCK;
            let fence = claimed.as_ref().map(|c| c.token);
            let res = async {
                // Admitted with its first model call's tokens held (issue 31 item 4): the
                // run's own handle goes to the run, whose first call takes the hold over.
                let quota = match quota
                    .admit_run(run_id, deps.config.reserve_output_tokens.saturating_mul(2))
                    .await
                {
                    Ok(admitted) => admitted,
                    // A run interrupted by a restart goes on even over the limit.
                    Err(crate::quota::QuotaError::Refused(_)) if resuming => quota.clone(),
                    Err(e) => return Err(e.into()),
                };
                // From here the slot is given back however this ends, even if this future is
                // dropped (the actor stopped or panicked).
                let slot = RunSlot {
                    quota: quota.clone(),
                    run_id,
                };
                prepare_run(
                    &deps, tenant, kept, window, &session, run_id, &user, start, mcp, quota,
                    reserve, fence,
                )
                .await
                .map(|p| (slot, p))
            }
            .await;
            (res, claimed, reserve)
        }
        .instrument(span);
        ctx.spawn(fut.into_actor(self).map(move |(res, claimed, reserve), act, ctx| {
            act.took_lease(ctx, claimed);
            let still_ours = act.run.as_ref().is_some_and(|r| r.run_id == run_id);
            // The run start reserved the next block of event numbers with its session write.
            act.on_reserved(res.is_ok().then_some(reserve));
            if let Ok((_, p)) = &res {
                if act.assistant_changes == assistant_changes {
                    act.assistant = Some((
                        (p.input.assistant.clone(), p.input.agent.clone()),
                        p.assistant_loaded,
                    ));
                }
                // The window does not depend on the assistant: kept whatever changed meanwhile.
                if let Some(window) = &p.input.history {
                    act.window = Some(window.clone());
                }
            }
            match res {
                Ok((slot, prepared)) if still_ours => {
                    if let Some(run) = act.run.as_mut() {
                        run.slot = Some(slot);
                    }
                    let cancelled = act.run.as_ref().is_some_and(|r| r.cancel.is_cancelled());
                    if let Some(tx) = reply {
                        let _ = tx.send(Ok(ChatAccepted {
                            run_id,
                            queued: false,
                        }));
                    }
                    if cancelled {
                        // Cancelled while its rows were being written.
                        act.finish_run(
                            ctx,
                            run_id,
                            RunOutcome::new(
                                DoneStatus::Cancelled,
                                Some("user_cancelled"),
                                &Progress::default(),
                            ),
                        );
                        return;
                    }
                    act.spawn_loop(ctx, prepared.input);
                }
                Ok(_) => {}
                Err(e) => {
                    if still_ours {
                        act.run = None;
                    }
                    if matches!(e, EngineError::RunResuming) {
                        // Its previous owner died with a run going: resume that one here.
                        act.recover(ctx);
                    }
                    match reply {
                        Some(tx) => {
                            let _ = tx.send(Err(e));
                        }
                        // Another replica owns the session (or Redis cannot say who does): the
                        // run is not this replica's to end; its owner carries it on.
                        None if matches!(
                            e,
                            EngineError::SessionOwnedElsewhere { .. }
                                | EngineError::CoordinationUnavailable
                                | EngineError::RunResuming
                        ) =>
                        {
                            tracing::info!(%run_id, session_id = %act.session.id, error = %e, "not resuming a run this replica does not own");
                            return;
                        }
                        None => {
                            // A queued or resumed run that cannot start still ends with done.
                            let code = match &e {
                                EngineError::Quota { .. } => ErrorCode::QuotaExceeded,
                                _ => e.code(),
                            };
                            act.publish(
                                Some(run_id),
                                EventPayload::error(code.as_str(), e.to_string(), false),
                            );
                            let mut outcome = RunOutcome::new(
                                DoneStatus::Failed,
                                Some(code.as_str()),
                                &Progress::default(),
                            );
                            outcome.error = Some(e.to_string());
                            act.end_run(ctx, run_id, None, outcome, |act, ctx, _, _| act.start_next(ctx));
                            return;
                        }
                    }
                    act.start_next(ctx);
                }
            }
        }));
    }

    fn spawn_loop(&mut self, ctx: &mut Context<Self>, input: RunInput) {
        let Some(run_id) = self.run.as_ref().map(|r| r.run_id) else {
            return;
        };
        let sink = self.sink(ctx, run_id);
        let Some(run) = self.run.as_mut() else { return };
        // A restart reads the conversation again: the window read with the start is the first
        // loop's only.
        run.input = Some(RunInput {
            history: None,
            ..input.clone()
        });
        run.phase = Phase::Running;
        let fut = run_agent(
            self.deps.clone(),
            input,
            sink,
            run.cancel.clone(),
            run.progress.clone(),
        )
        .instrument(run.span.clone());
        let addr = ctx.address();
        // On the session's own arbiter (the thread of the HTTP worker that opened it, most
        // often): the loop's events reach the session, and through it the client's socket,
        // without a thread hand-off. A panic is caught here and restarts the loop; the loop
        // blocks nothing (its tools and the model are awaited, blocking work goes to
        // `spawn_blocking`).
        let handle = actix::spawn(async move {
            let result = AssertUnwindSafe(fut)
                .catch_unwind()
                .await
                .map_err(panic_message);
            addr.do_send(RunFinished { run_id, result });
        });
        run.abort = Some(handle.abort_handle());
    }

    /// Whether events of the active run `root` (of its child `child`, if given) are published:
    /// the run is going and the child has not ended (a `done` is a run's last word).
    fn emitting(&self, root: RunId, child: Option<ChildTag>) -> bool {
        self.run.as_ref().is_some_and(|r| {
            r.run_id == root
                && r.phase == Phase::Running
                && child.is_none_or(|c| r.children.contains_key(&c.run))
        })
    }

    /// Register a `task` child run of the active run `root` (see [`RunSink::start_child`]).
    fn start_child(
        &mut self,
        root: RunId,
        child: ChildTag,
        depth: u32,
        progress: SharedProgress,
    ) -> bool {
        if !self.emitting(root, None) || self.run.as_ref().is_some_and(|r| r.cancel.is_cancelled())
        {
            return false;
        }
        if child.parent != root
            && !self.emitting(
                root,
                Some(ChildTag {
                    run: child.parent,
                    parent: root,
                }),
            )
        {
            // Its parent (a child itself) has ended already.
            return false;
        }
        if let Some(run) = self.run.as_mut() {
            run.children.insert(
                child.run,
                LiveChild {
                    parent: child.parent,
                    depth,
                    progress,
                },
            );
        }
        true
    }

    /// A child run's loop is over: record its end and publish its `done` (in one transaction,
    /// in its place in the stream), then tell the `task` call.
    fn end_child(
        &mut self,
        ctx: &mut Context<Self>,
        root: RunId,
        child: ChildTag,
        outcome: RunOutcome,
        reply: oneshot::Sender<Option<DoneStatus>>,
    ) {
        let live = self
            .run
            .as_mut()
            .filter(|r| r.run_id == root)
            .and_then(|r| r.children.remove(&child.run));
        if live.is_none() {
            // Ended already, with its top-level run.
            let _ = reply.send(None);
            return;
        }
        self.end_run(
            ctx,
            child.run,
            Some(child.parent),
            outcome,
            move |_, _, status, _| {
                let _ = reply.send(Some(status));
            },
        );
    }

    /// End the `task` children the active run leaves going, deepest first (each `done` before
    /// its parent's): `done{cancelled}` with `reason`. Returns their usage so far: it rolls up
    /// into the run's.
    fn end_children(&mut self, ctx: &mut Context<Self>, reason: &str) -> TokenUsage {
        let Some(run) = self.run.as_mut() else {
            return TokenUsage::default();
        };
        let mut left: Vec<(RunId, LiveChild)> = run.children.drain().collect();
        left.sort_by_key(|(_, c)| std::cmp::Reverse(c.depth));
        let mut usage = TokenUsage::default();
        for (id, child) in left {
            let p = child.progress.lock().map(|p| *p).unwrap_or_default();
            usage.add(p.usage);
            let outcome = RunOutcome::new(DoneStatus::Cancelled, Some(reason), &p);
            self.end_run(ctx, id, Some(child.parent), outcome, |_, _, _, _| {});
        }
        usage
    }

    /// The loop is over: record the outcome, then emit the run's one `done`.
    fn finish_run(&mut self, ctx: &mut Context<Self>, run_id: RunId, mut outcome: RunOutcome) {
        let Some(run) = self.run.as_mut().filter(|r| r.run_id == run_id) else {
            return;
        };
        if run.phase == Phase::Finishing {
            return;
        }
        run.phase = Phase::Finishing;
        run.span
            .record("agentry.run.status", outcome.status.as_str());
        if let Some(abort) = run.abort.take() {
            abort.abort();
        }
        // Its tokens were counted call by call, as each model call settled its reservation.
        drop(run.slot.take());
        self.close_approvals(Some(run_id));
        let reason = if outcome.status == DoneStatus::Cancelled {
            "user_cancelled"
        } else {
            "parent_ended"
        };
        let children = self.end_children(ctx, reason);
        outcome.usage.add(children);
        let tenant = self.tenant.id.to_string();
        let mut logged = outcome.clone();
        self.end_run(
            ctx,
            run_id,
            None,
            outcome,
            move |act, ctx, status, usage| {
                crate::metrics::record_run_done(status, &tenant, usage.total);
                // The status the clients were told (a run whose end could not be written is failed).
                logged.status = status;
                let request_id = act.run_requests.remove(&run_id);
                let trace_id = act
                    .run
                    .as_ref()
                    .filter(|r| r.run_id == run_id)
                    .and_then(|r| agentry_schema::trace_context::trace_id(&r.span));
                logged.log_end(
                    &act.session,
                    run_id,
                    request_id.as_deref(),
                    trace_id.as_deref(),
                );
                if act.run.as_ref().is_some_and(|r| r.run_id == run_id) {
                    act.run = None;
                }
                if act.shutting_down {
                    act.release_lease();
                    act.stop_on_purpose(ctx);
                } else {
                    act.start_next(ctx);
                }
            },
        );
    }

    /// Record the end of a run (its final status, its events not stored yet and its `done`, in
    /// one transaction), then send the `done`: a `done` is never sent or stored without its
    /// status. Database errors are retried within a bound ([`RunRecorder::end`]). Past it the
    /// run ends `failed` in memory: clients get an `error` and a `failed` `done`, the end goes
    /// to the local journal (reconciled at the next start, so the run is never run again) and
    /// its write is retried here until it lands. `then` gets the status the clients saw.
    fn end_run(
        &mut self,
        ctx: &mut Context<Self>,
        run_id: RunId,
        parent: Option<RunId>,
        outcome: RunOutcome,
        then: impl FnOnce(&mut Self, &mut Context<Self>, DoneStatus, agentry_schema::events::TokenUsage)
        + 'static,
    ) {
        let run = run_id.to_string();
        let trace_id = self
            .run
            .as_ref()
            .filter(|r| r.run_id == run_id)
            .and_then(|r| agentry_schema::trace_context::trace_id(&r.span));
        let done = self.log.number_tagged(
            &self.session_key,
            &run,
            parent,
            EventPayload::Done(
                DoneData::new(outcome.status, outcome.reason.clone(), outcome.usage)
                    .with_trace_id(trace_id.clone()),
            ),
        );
        let done_seq = done.event.seq;
        let mut events = self.log.not_stored();
        events.push((*done.event).clone());
        self.log.ending_upto = self.log.ending_upto.max(done_seq);
        if parent.is_some() {
            // A child's `done` keeps its place in the stream: it waits in `held`, with what
            // follows it, until its end is written (see `EventLog::barriers`).
            self.log.held.push_back(done.clone());
            self.log.barriers.insert(done_seq);
        }
        let status = execution_status(outcome.status);
        let error = outcome.error.clone().or_else(|| {
            outcome
                .reason
                .clone()
                .filter(|_| status != ExecutionStatus::Completed)
        });
        // A run that never asked anyone has no approval to cancel: the look is skipped.
        let asked = outcome.may_have_approvals
            || self
                .run
                .as_ref()
                .is_none_or(|r| r.run_id != run_id || r.asked_human);
        let end = RunEnd {
            run_id,
            session_id: self.session.id,
            status,
            steps: outcome.steps,
            usage: outcome.usage,
            error,
            events,
            messages: outcome.rows.messages.clone(),
            tool_calls: outcome.rows.tool_calls.clone(),
            decisions: outcome.rows.decisions.clone(),
            cancel_approvals: asked,
            fence: self.fence,
            child: parent.is_some(),
        };
        // Checkpoints are pruned only past what a run keeps (a short run never gets there); a
        // resumed run's count is unknown, so it prunes.
        let prune = outcome.checkpoints > self.deps.config.checkpoint_keep
            || self
                .run
                .as_ref()
                .is_none_or(|r| r.run_id != run_id || r.restarts > 0 || r.resumed);
        let deps = self.deps.clone();
        let scope = self.scope;
        let end = std::sync::Arc::new(end);
        let fut = async move {
            RunRecorder::end(&deps.writer, &scope, &end)
                .await
                .map(|()| end)
        };
        ctx.spawn(fut.into_actor(self).map(move |res, act, ctx| match res {
            Ok(_) => {
                act.stored_upto(done_seq);
                // Before the `done` goes out: whoever sees it sees the run's metrics and the
                // session free for the next run.
                then(act, ctx, outcome.status, outcome.usage);
                if parent.is_some() {
                    act.log.barriers.remove(&done_seq);
                } else if let Some(ev) = act.log.accept(done) {
                    act.fan_out(std::iter::once(ev));
                }
                act.release_held();
                if !prune {
                    return;
                }
                let deps = act.deps.clone();
                let (scope, sid) = (act.scope, act.session.id);
                act.deps.runtime.spawn(async move {
                    let keep = deps.config.checkpoint_keep;
                    let pruned = deps
                        .writer
                        .write_for(sid.0, move |txn| {
                            Box::pin(async move {
                                checkpoints::prune(txn, &scope, run_id, keep).await
                            })
                        })
                        .await;
                    if let Err(e) = pruned {
                        tracing::warn!(error = %e, %run_id, "pruning checkpoints failed");
                    }
                });
            }
            Err(e @ agentry_store::StoreError::Fenced { .. }) => {
                // Another replica took the session over (this one lost its lease) and carries
                // the run on from its checkpoint: nothing of this end may be written, and the
                // run's one `done` is the new owner's.
                tracing::error!(error = %e, %run_id, "the end of a run was refused: another replica owns the session now");
                act.lease = None;
                act.lease_lost = true;
                let stale = act.log.not_stored();
                if let Some(last) = stale.last() {
                    act.stored_upto(last.seq);
                }
                act.log.held.clear();
                act.log.barriers.clear();
                then(act, ctx, DoneStatus::Interrupted, outcome.usage);
            }
            Err(e) => {
                tracing::error!(error = %e, %run_id, "recording the end of a run failed; it ends as failed and is recorded once the database is back");
                let message = format!(
                    "the run's end could not be recorded ({}); it ended as failed and will be recorded when the database is back",
                    e.code().as_str()
                );
                if parent.is_some() {
                    // Its `done` is replaced by the `failed` one below.
                    act.log.held.retain(|e| e.event.seq != done_seq);
                    act.log.barriers.remove(&done_seq);
                }
                let error = act.log.number_tagged(
                    &act.session_key,
                    &run,
                    parent,
                    EventPayload::error(ErrorCode::InternalError.as_str(), message.clone(), false),
                );
                let failed = act.log.number_tagged(
                    &act.session_key,
                    &run,
                    parent,
                    EventPayload::Done(
                        DoneData::new(
                            DoneStatus::Failed,
                            Some(ErrorCode::InternalError.as_str().into()),
                            outcome.usage,
                        )
                        .with_trace_id(trace_id),
                    ),
                );
                let mut events = act.log.not_stored();
                events.push((*error.event).clone());
                events.push((*failed.event).clone());
                let end = RunEnd {
                    run_id,
                    session_id: act.session.id,
                    status: ExecutionStatus::Failed,
                    steps: outcome.steps,
                    usage: outcome.usage,
                    error: Some(message),
                    events,
                    messages: outcome.rows.messages,
                    tool_calls: outcome.rows.tool_calls,
                    decisions: outcome.rows.decisions,
                    cancel_approvals: true,
                    fence: act.fence,
                    child: parent.is_some(),
                };
                // Journaled, the events are safe to send: the next start stores them with the
                // same numbers before anything else is numbered.
                match crate::journal::append(&act.deps.config.data_dir, act.tenant.id, &end) {
                    Ok(()) => act.log.journaled_upto = failed.event.seq,
                    Err(e) => tracing::error!(error = %e, %run_id, "journaling the unrecorded end of a run failed; its last events wait for the database"),
                }
                act.unrecorded.push(end);
                act.unrecorded_tried = Instant::now();
                then(act, ctx, DoneStatus::Failed, outcome.usage);
                for ev in [error, failed] {
                    if let Some(ev) = act.log.accept(ev) {
                        act.fan_out(std::iter::once(ev));
                    }
                }
                act.release_held();
            }
        }));
    }

    /// Every event up to `seq` is stored.
    fn stored_upto(&mut self, seq: u64) {
        self.log.persisted_upto = self.log.persisted_upto.max(seq);
        self.log.evict();
    }

    /// Try the unrecorded run ends again (see [`SessionActor::end_run`]).
    fn retry_unrecorded(&mut self, ctx: &mut Context<Self>) {
        if self.unrecorded.is_empty() || self.unrecorded_tried.elapsed() < UNRECORDED_RETRY {
            return;
        }
        let write = self.record_unrecorded();
        ctx.spawn(write);
    }

    /// Write the unrecorded run ends now; those written are forgotten (idempotent: a timer's
    /// attempt and a chat's may overlap).
    pub(super) fn record_unrecorded(&mut self) -> impl ActorFuture<Self, Output = ()> + 'static {
        self.unrecorded_tried = Instant::now();
        let ends = self.unrecorded.clone();
        let deps = self.deps.clone();
        let scope = self.scope;
        let fut = async move {
            let mut written = Vec::new();
            for end in &ends {
                let one = std::sync::Arc::new(end.clone());
                if executions::write_end(&deps.writer, &scope, one)
                    .await
                    .is_ok()
                {
                    written.push(end.run_id);
                }
            }
            written
        };
        fut.into_actor(self).map(|written, act, _ctx| {
            for run_id in written {
                if let Some(i) = act.unrecorded.iter().position(|e| e.run_id == run_id) {
                    let end = act.unrecorded.remove(i);
                    tracing::info!(%run_id, "the end of a run was recorded after the database came back");
                    if let Some(last) = end.events.last() {
                        act.stored_upto(last.seq);
                    }
                }
            }
            if act.unrecorded.is_empty() && act.run.is_none() && act.queue.is_empty() {
                act.release_lease();
            }
        })
    }

    fn start_next(&mut self, ctx: &mut Context<Self>) {
        if self.run.is_some() {
            return;
        }
        if !self.shutting_down && !self.queue.is_empty() {
            // The next message starts once its row is written (it comes back here then).
            if let Some(q) = self.queue.front().filter(|q| q.stored).copied() {
                self.queue.pop_front();
                self.start_run(ctx, q.run_id, q.user, RunStart::Queued, 0, None);
            }
            return;
        }
        // A run whose end is not recorded yet still holds the session: another replica must
        // not resume it meanwhile.
        if self.unrecorded.is_empty() {
            self.release_lease();
        }
    }

    fn close_approvals(&mut self, run_id: Option<RunId>) {
        let ids: Vec<ApprovalId> = self
            .approvals
            .iter()
            .filter(|(_, r)| run_id.is_none_or(|x| x == **r))
            .map(|(id, _)| *id)
            .collect();
        for id in ids {
            self.approvals.remove(&id);
            self.desk.close(id, HumanOutcome::Cancelled);
        }
    }

    /// Cancel the active run. The loop gets `cancel_grace` to stop; then it is aborted. Either
    /// way `done{cancelled}` follows.
    fn cancel_run(&mut self, ctx: &mut Context<Self>) -> Result<RunId, EngineError> {
        let Some(run) = self.run.as_mut().filter(|r| r.phase != Phase::Finishing) else {
            return Err(EngineError::NoActiveRun);
        };
        let run_id = run.run_id;
        run.cancel.cancel();
        let starting = run.phase == Phase::Starting;
        self.close_approvals(Some(run_id));
        if !starting {
            ctx.run_later(self.deps.config.cancel_grace, move |act, ctx| {
                let Some(run) = act.run.as_ref().filter(|r| r.run_id == run_id && r.phase == Phase::Running) else {
                    return;
                };
                tracing::warn!(%run_id, "the run did not stop within the cancel grace period; aborting it");
                let p = run.progress.lock().map(|p| *p).unwrap_or_default();
                act.finish_run(ctx, run_id, RunOutcome::new(DoneStatus::Cancelled, Some("user_cancelled"), &p));
            });
        }
        Ok(run_id)
    }

    fn on_run_finished(
        &mut self,
        ctx: &mut Context<Self>,
        run_id: RunId,
        result: Result<RunOutcome, String>,
    ) {
        let Some(run) = self
            .run
            .as_mut()
            .filter(|r| r.run_id == run_id && r.phase == Phase::Running)
        else {
            return;
        };
        match result {
            Ok(outcome) => self.finish_run(ctx, run_id, outcome),
            Err(panic) => {
                let restarts = run.restarts;
                let user = run.input.as_ref().map(|i| UserScope {
                    tenant: self.scope,
                    user_id: i.user_id,
                    role: i.role,
                    custom_role: i.custom_role,
                });
                // The restarted loop stays in the crashed one's trace, as its child.
                let crashed = run.span.clone();
                tracing::error!(%run_id, restarts, "the agent loop panicked: {panic}");
                if restarts < self.deps.config.max_restarts && !run.cancel.is_cancelled() {
                    // The restarted loop settles its interrupted `task` call itself; the
                    // children it leaves end now, each with its `done`.
                    // (Their usage since the last checkpoint is lost, as the parent's is.)
                    let _ = self.end_children(ctx, "parent_crashed");
                    self.publish(
                        Some(run_id),
                        EventPayload::error(
                            ErrorCode::InternalError.as_str(),
                            "the run crashed; it is resuming from where it was last recorded",
                            true,
                        ),
                    );
                    let user = user.unwrap_or(UserScope {
                        tenant: self.scope,
                        user_id: self.session.user_id,
                        role: Role::Member,
                        custom_role: None,
                    });
                    let deps = self.deps.clone();
                    let scope = self.scope;
                    let fut = async move { checkpoints::latest(&deps.db, &scope, run_id).await };
                    ctx.spawn(fut.into_actor(self).map(move |cp, act, ctx| {
                        let cp = cp
                            .ok()
                            .flatten()
                            .and_then(|c| RunCheckpoint::from_json(&c.state).ok());
                        act.run = None;
                        let span = act.run_span(&crashed, run_id);
                        act.run_spans.insert(run_id, span);
                        act.start_run(
                            ctx,
                            run_id,
                            user,
                            RunStart::Resume(cp.map(Box::new)),
                            restarts + 1,
                            None,
                        );
                    }));
                } else {
                    let p = run.progress.lock().map(|p| *p).unwrap_or_default();
                    self.publish(
                        Some(run_id),
                        EventPayload::error(
                            ErrorCode::InternalError.as_str(),
                            "the run crashed repeatedly and was stopped",
                            false,
                        ),
                    );
                    let mut outcome =
                        RunOutcome::new(DoneStatus::Failed, Some("internal_error"), &p);
                    outcome.error = Some(format!("the agent loop panicked: {panic}"));
                    self.finish_run(ctx, run_id, outcome);
                }
            }
        }
    }

    /// After (re)start: number events above anything the session stored or reserved, pick up a
    /// run that was active when the process or actor died, and the queued messages.
    fn recover(&mut self, ctx: &mut Context<Self>) {
        let deps = self.deps.clone();
        let scope = self.scope;
        let session = self.session.clone();
        let tail = self.tail_position();
        let fut = async move { load_recovery(&deps, &scope, &session, tail).await };
        ctx.wait(fut.into_actor(self).map(move |res, act, ctx| {
            let rec = match res {
                Ok(r) => r,
                Err(e) => {
                    // Without its floor the session cannot number events safely: stop, and let
                    // the next use start a fresh actor.
                    tracing::error!(error = %e, session_id = %act.session.id, "loading the session's state failed; stopping its actor");
                    act.stop_on_purpose(ctx);
                    return;
                }
            };
            act.log = EventLog::new(rec.seq_floor, act.deps.config.event_ring);
            act.recovered = true;
            // Its floor was read after the claim already.
            act.took_lease(ctx, rec.lease.map(|l| Claimed { floor: None, ..l }));
            for (run_id, user) in rec.queued {
                if !act.queue.iter().any(|q| q.run_id == run_id) {
                    act.queue.push_back(QueuedRun {
                        run_id,
                        user,
                        stored: true,
                    });
                }
            }
            for (child, parent) in rec.children {
                act.publish_as(
                    Some(child),
                    Some(parent),
                    EventPayload::error(
                        ErrorCode::InternalError.as_str(),
                        "the server restarted during this sub-task; it was interrupted (its parent run resumes and reads its task call as interrupted)",
                        false,
                    ),
                );
                act.interrupt_child(ctx, child, parent);
            }
            match rec.active {
                Some((run_id, user, restart @ (Restart::From(_) | Restart::Fresh))) => {
                    let (note, cp) = match restart {
                        Restart::From(cp) if rec.took_over => ("the replica running this session stopped; another one is resuming the run from its last checkpoint", Some(cp)),
                        Restart::From(cp) => ("the server restarted during this run; it is resuming from its last checkpoint", Some(cp)),
                        _ if rec.took_over => ("the replica running this session stopped; another one is resuming the run from its stored conversation (it had not finished its first step)", None),
                        _ => ("the server restarted during this run; it is resuming from its stored conversation (it had not finished its first step)", None),
                    };
                    act.publish(
                        Some(run_id),
                        EventPayload::error(ErrorCode::InternalError.as_str(), note, true),
                    );
                    act.start_run(ctx, run_id, user, RunStart::Resume(cp), 0, None);
                }
                Some((run_id, _, Restart::Unreadable)) => {
                    act.publish(
                        Some(run_id),
                        EventPayload::error(
                            ErrorCode::InternalError.as_str(),
                            "the server restarted during this run and its checkpoint cannot be read; it was interrupted",
                            false,
                        ),
                    );
                    act.interrupt(ctx, run_id, |act, ctx| act.start_next(ctx));
                }
                None => act.start_next(ctx),
            }
        }));
    }

    /// End a run the previous process left without an end: `done{interrupted}`, recorded with
    /// its status (a run already final keeps its status and gets only the missing `done`).
    fn interrupt(
        &mut self,
        ctx: &mut Context<Self>,
        run_id: RunId,
        then: impl FnOnce(&mut Self, &mut Context<Self>) + 'static,
    ) {
        let outcome = RunOutcome::new(
            DoneStatus::Interrupted,
            Some("server_restarted"),
            &Progress::default(),
        );
        self.end_run(ctx, run_id, None, outcome, move |act, ctx, _, _| {
            then(act, ctx)
        });
    }

    /// [`SessionActor::interrupt`] for a `task` child run: its `done` names its parent.
    fn interrupt_child(&mut self, ctx: &mut Context<Self>, run_id: RunId, parent: RunId) {
        let outcome = RunOutcome::new(
            DoneStatus::Interrupted,
            Some("server_restarted"),
            &Progress::default(),
        );
        self.end_run(ctx, run_id, Some(parent), outcome, |_, _, _, _| {});
    }
}

/// Where an unfinished run of a previous process continues.
enum Restart {
    /// From its latest checkpoint.
    From(Box<RunCheckpoint>),
    /// It has none: it stopped before its first step was recorded, so no tool of it ran (the
    /// first call is preceded by its `in_flight` checkpoint) and nothing of it but the user's
    /// message is stored. It starts again from its stored conversation.
    Fresh,
    /// Its checkpoint cannot be read (a version this server does not know): what it did is
    /// unknown, so it is not run again; it ends `interrupted`.
    Unreadable,
}

struct Recovery {
    /// The highest `seq` the session stored or reserved: numbering continues above it.
    seq_floor: u64,
    active: Option<(RunId, UserScope, Restart)>,
    queued: Vec<(RunId, UserScope)>,
    /// Cluster mode: the lease claimed to pick up the unfinished run.
    lease: Option<Claimed>,
    /// Cluster mode: the run was another replica's, which stopped.
    took_over: bool,
    /// `task` child runs left unfinished (child, parent), deepest first: each ends
    /// `interrupted`. A child is not resumed: its parent resumes, and its `task` call, which
    /// the crash interrupted, reads as interrupted to its model (or, for a call that had not
    /// started yet, the call finds the child's end).
    children: Vec<(RunId, RunId)>,
}

/// Whom a recovered run acts for: the role it was started with (`exec.role`), never more
/// than its user has now — the rule a key follows (an admin's run keeps the narrower role its
/// key had; anyone else's takes the user's current role). Rows from before the role was
/// recorded take the user's.
async fn user_scope(
    deps: &EngineDeps,
    scope: &TenantScope,
    exec: &executions::Execution,
) -> UserScope {
    let user = users::get(&deps.db, scope, exec.user_id)
        .await
        .ok()
        .flatten();
    let grant = resumed_grant(user.map(|u| u.grant()), exec.role);
    UserScope {
        tenant: *scope,
        user_id: exec.user_id,
        role: grant.role,
        custom_role: grant.custom,
    }
}

/// [`user_scope`]'s rule, apart: `user` is the user's role now (`None`: gone), `started` the
/// run's recorded role.
fn resumed_grant(
    user: Option<agentry_schema::roles::Grant>,
    started: Option<agentry_schema::roles::Grant>,
) -> agentry_schema::roles::Grant {
    match (user, started) {
        (None, _) => Role::Member.into(),
        (Some(user), Some(started)) => started.under(user),
        (Some(user), None) => user,
    }
}

async fn load_recovery(
    deps: &EngineDeps,
    scope: &TenantScope,
    session: &Session,
    tail: Option<u64>,
) -> Result<Recovery, EngineError> {
    // A session this process created and has not started an actor for since has nothing to
    // recover: no run, no event (see [`FreshSessions`]).
    if deps.coordination.is_none() && deps.fresh_sessions.take(session.id) {
        return Ok(Recovery {
            seq_floor: 0,
            active: None,
            queued: Vec::new(),
            lease: None,
            took_over: false,
            children: Vec::new(),
        });
    }
    let unfinished = executions::active_for_session(&deps.db, scope, session.id).await?;
    let queued_runs = executions::queued_for_session(&deps.db, scope, session.id).await?;
    // Cluster mode: an unfinished (or queued) run is touched only by the replica that owns the
    // session. One live elsewhere (or a Redis that cannot say) is left alone: its owner carries
    // it on.
    let mut lease = None;
    let mut took_over = false;
    if (unfinished.is_some() || !queued_runs.is_empty())
        && let Some(c) = &deps.coordination
    {
        match claim(deps, c, scope, session.id, tail).await {
            Ok(claimed) => {
                if claimed.floor.is_some() && unfinished.is_some() {
                    // The previous owner died: what it streamed but had not stored is stored
                    // now, before this replica numbers anything.
                    took_over = true;
                    let adopted =
                        remote::adopt_streamed(deps, c, scope, session.id, claimed.token).await?;
                    tracing::info!(session_id = %session.id, adopted, "took over a session whose replica stopped");
                }
                lease = Some(claimed);
            }
            Err(e) => {
                tracing::info!(session_id = %session.id, error = %e, "leaving the session's unfinished run to its owner");
                return Ok(Recovery {
                    seq_floor: sessions::seq_floor(&deps.db, scope, session.id).await?,
                    active: None,
                    queued: Vec::new(),
                    lease: None,
                    took_over: false,
                    children: Vec::new(),
                });
            }
        }
    }
    let fence = lease.as_ref().map(|l| l.token);
    // Read after the claim: the floor includes whatever the previous owner numbered.
    let seq_floor = sessions::seq_floor(&deps.db, scope, session.id).await?;
    let mut children = Vec::new();
    for child in executions::unfinished_children(&deps.db, scope, session.id).await? {
        let Some(parent) = child.parent_execution_id else {
            continue;
        };
        if !end_if_done(deps, scope, session, &child, fence).await? {
            children.push((child.id, parent));
        }
    }
    let mut active = None;
    if let Some(exec) = unfinished {
        if end_if_done(deps, scope, session, &exec, fence).await? {
            // Its stream already ended it: its status is recorded, it never runs again.
        } else {
            // A request the interrupted run left pending stays pending: the resumed run asks
            // it again under the same id, so a decision sent for it still counts.
            let restart = match checkpoints::latest(&deps.db, scope, exec.id).await? {
                None => Restart::Fresh,
                Some(c) => match RunCheckpoint::from_json(&c.state) {
                    Ok(cp) => Restart::From(Box::new(cp)),
                    Err(e) => {
                        tracing::error!(run_id = %exec.id, error = %e, "the run's checkpoint cannot be read; it ends interrupted");
                        Restart::Unreadable
                    }
                },
            };
            let user = user_scope(deps, scope, &exec).await;
            active = Some((exec.id, user, restart));
        }
    }
    let mut queued = Vec::new();
    for exec in queued_runs {
        let user = user_scope(deps, scope, &exec).await;
        queued.push((exec.id, user));
    }
    Ok(Recovery {
        seq_floor,
        active,
        queued,
        lease,
        took_over,
        children,
    })
}

/// An unfinished run whose stream already holds its `done`: record the status that `done`
/// told (`true`), so it is never run again. `false`: it has no `done`.
async fn end_if_done(
    deps: &EngineDeps,
    scope: &TenantScope,
    session: &Session,
    exec: &executions::Execution,
    fence: Option<i64>,
) -> Result<bool, EngineError> {
    let Some(done) = store_events::done_of_run(&deps.db, scope, exec.id).await? else {
        return Ok(false);
    };
    let status = match &done.payload {
        EventPayload::Done(d) => execution_status(d.status),
        _ => ExecutionStatus::Interrupted,
    };
    executions::record_end(
        &deps.db,
        scope,
        &RunEnd {
            run_id: exec.id,
            session_id: session.id,
            status,
            steps: exec.steps,
            usage: exec.token_usage,
            error: exec.error.clone(),
            events: Vec::new(),
            messages: Vec::new(),
            tool_calls: Vec::new(),
            decisions: Vec::new(),
            cancel_approvals: true,
            fence,
            child: exec.parent_execution_id.is_some(),
        },
    )
    .await?;
    Ok(true)
}

struct PreparedRun {
    input: RunInput,
    /// When its assistant was loaded.
    assistant_loaded: Instant,
}

pub(crate) async fn load_assistant(
    deps: &EngineDeps,
    scope: &TenantScope,
    id: &AssistantId,
) -> Result<Assistant, EngineError> {
    if let Some(a) = assistants::get(&deps.db, scope, id).await? {
        return Ok(a);
    }
    if id.as_str() == AssistantId::DEFAULT {
        return Ok(assistants::ensure_default(&deps.db, scope, AssistantSpec::default()).await?);
    }
    Err(EngineError::NotFound(format!("assistant {id}")))
}

/// Whether the session's assistant exists (`default` always does: it is created on demand).
pub(crate) async fn assistant_exists(
    deps: &EngineDeps,
    scope: &TenantScope,
    id: &AssistantId,
) -> Result<(), EngineError> {
    if deps.assistants.get(scope.tenant_id(), id).is_some() {
        return Ok(());
    }
    load_assistant(deps, scope, id).await.map(|_| ())
}

#[allow(clippy::too_many_arguments)] // the run's identity, how it starts, what the session kept, its reservation and fence
/// Write what must be stored before a run starts (DESIGN §1.5: an acknowledged message is in the
/// database), in one transaction ([`RunRecorder::start`]), and build the loop's input. The
/// tenant is the one the session holds (kept current by its supervisor), and the assistant the
/// one it `kept` from its last run, if any: neither is read again.
async fn prepare_run(
    deps: &Arc<EngineDeps>,
    tenant: Arc<Tenant>,
    kept: Option<(KeptAssistant, Instant)>,
    window: Option<Arc<Vec<agentry_store::messages::Message>>>,
    session: &Session,
    run_id: RunId,
    user: &UserScope,
    start: RunStart,
    mcp: Option<Addr<crate::mcp_pool::McpPoolActor>>,
    quota: QuotaHandle,
    reserve_seq: u64,
    fence: Option<i64>,
) -> Result<PreparedRun, EngineError> {
    let scope = &tenant.scope();
    let kept = kept.or_else(|| deps.assistants.get(tenant.id, &session.assistant_id));
    let ((assistant, agent), assistant_loaded) = match kept {
        Some(kept) => kept,
        None => {
            let seen = deps.assistants.changes();
            let a = load_assistant(deps, scope, &session.assistant_id).await?;
            let agent = crate::profiles::effective(&deps.db, scope, &a).await?;
            let loaded = ((a, agent), Instant::now());
            deps.assistants.keep(tenant.id, loaded.clone(), seen);
            loaded
        }
    };
    let recorder = RunRecorder::new(deps.writer.clone(), *scope, session.id, run_id, fence);
    let mut client_tools = Vec::new();
    let (rows, resume) = match start {
        RunStart::Fresh {
            message,
            client_tools: declared,
        } => {
            client_tools = declared;
            (
                StartRows::Fresh(NewExecution {
                    id: run_id,
                    user_id: user.user_id,
                    session_id: session.id,
                    assistant_id: session.assistant_id.to_string(),
                    input: message,
                    // prepare_run runs in the run's span.
                    trace_id: agentry_schema::trace_context::trace_id(&tracing::Span::current()),
                    status: ExecutionStatus::Running,
                    role: Some(user.grant()),
                }),
                None,
            )
        }
        RunStart::Queued => {
            let exec = executions::get(&deps.db, scope, run_id)
                .await?
                .ok_or_else(|| EngineError::NotFound(format!("queued run {run_id}")))?;
            (StartRows::Queued { input: exec.input }, None)
        }
        // Without a checkpoint it starts again from its stored conversation (see `Restart`).
        RunStart::Resume(cp) => {
            if let Some(cp) = &cp {
                client_tools = cp.client_tools.clone();
            }
            (StartRows::Resume, cp.map(|c| *c))
        }
    };
    let n = deps.config.history_window.max(1);
    let read =
        matches!(rows, StartRows::Fresh(_) | StartRows::Queued { .. }).then(|| HistoryRead {
            after: window.as_ref().and_then(|w| w.last()).map_or(0, |m| m.id),
            n,
        });
    let history = recorder
        .start(rows, reserve_seq, read)
        .await?
        .map(|new| Arc::new(extend_window(window, new, n)));
    // A session's `auto_approve` counts only while whoever runs it still has the right: a
    // policy tightened after the session was made applies to its next run.
    let auto_approve = (session.auto_approve && tenant.policy().may_auto_approve(user.is_admin()))
        || agent.auto_approve;
    Ok(PreparedRun {
        input: RunInput {
            tenant,
            user_id: session.user_id,
            role: user.role,
            custom_role: user.custom_role,
            session_id: session.id,
            run_id,
            assistant,
            agent,
            auto_approve,
            resume,
            mcp,
            fence,
            quota,
            parent: None,
            history,
            client_tools,
        },
        assistant_loaded,
    })
}

/// The window of the last `n` messages after the stored messages `new` (oldest first, every
/// one newer than the `kept` window's last). The kept window is reused in place when nothing
/// else holds it (the previous run's loop let go of it when it built its conversation).
fn extend_window(
    kept: Option<Arc<Vec<agentry_store::messages::Message>>>,
    new: Vec<agentry_store::messages::Message>,
    n: u64,
) -> Vec<agentry_store::messages::Message> {
    let n = usize::try_from(n).unwrap_or(usize::MAX);
    let mut out = match kept {
        Some(kept) if new.len() < n => Arc::try_unwrap(kept).unwrap_or_else(|shared| {
            let from = shared.len().saturating_sub(n - new.len());
            shared[from..].to_vec()
        }),
        _ => Vec::with_capacity(new.len()),
    };
    out.extend(new);
    let excess = out.len().saturating_sub(n);
    out.drain(..excess);
    out
}

fn panic_message(p: Box<dyn std::any::Any + Send>) -> String {
    if let Some(s) = p.downcast_ref::<&str>() {
        (*s).to_string()
    } else if let Some(s) = p.downcast_ref::<String>() {
        s.clone()
    } else {
        "panic".to_string()
    }
}

/// The run task's handle on its session (a `task` child run's, with `child` set).
struct ActorSink {
    addr: Addr<SessionActor>,
    /// The session's active (top-level) run.
    run_id: RunId,
    child: Option<ChildTag>,
    desk: Arc<ApprovalDesk>,
    tenant: agentry_schema::ids::TenantId,
    session: agentry_schema::ids::SessionId,
    owner: UserId,
}

/// Cancels a request when the wait for it is dropped (the run task aborted): nobody can decide
/// on a run that is gone. A no-op once the request is over.
struct CloseOnDrop<'a> {
    desk: &'a ApprovalDesk,
    id: ApprovalId,
}

impl Drop for CloseOnDrop<'_> {
    fn drop(&mut self) {
        self.desk.close(self.id, HumanOutcome::Cancelled);
    }
}

#[async_trait::async_trait]
impl RunSink for ActorSink {
    fn emit(&self, payload: EventPayload) {
        self.addr.do_send(Emit {
            run_id: self.run_id,
            child: self.child,
            payload,
        });
    }

    fn child(&self, tag: ChildTag) -> Arc<dyn RunSink> {
        Arc::new(ActorSink {
            addr: self.addr.clone(),
            run_id: self.run_id,
            child: Some(tag),
            desk: self.desk.clone(),
            tenant: self.tenant,
            session: self.session,
            owner: self.owner,
        })
    }

    async fn start_child(&self, tag: ChildTag, depth: u32, progress: SharedProgress) -> bool {
        self.addr
            .send(StartChild {
                root: self.run_id,
                child: tag,
                depth,
                progress,
            })
            .await
            .unwrap_or(false)
    }

    fn forget_child(&self, tag: ChildTag) {
        self.addr.do_send(ForgetChild {
            root: self.run_id,
            child: tag,
        });
    }

    async fn end_child(&self, tag: ChildTag, outcome: RunOutcome) -> Option<DoneStatus> {
        let (reply, rx) = oneshot::channel();
        self.addr.do_send(EndChild {
            root: self.run_id,
            child: tag,
            outcome,
            reply,
        });
        rx.await.ok().flatten()
    }

    /// The request is opened on the desk here, before the session publishes it, so a decision
    /// can never arrive before the request is there; the decision comes back straight through
    /// the desk. The timeout is kept here too: no actor or timer per request.
    async fn ask_human(&self, request: HumanRequest) -> HumanOutcome {
        let id = request.id;
        let timeout = request.timeout;
        let waiter = Waiter {
            tenant: self.tenant,
            session: self.session,
            owner: self.owner,
            run: self.child.map_or(self.run_id, |c| c.run),
            kind: request.data.kind,
        };
        let mut rx = self.desk.open(id, waiter, self.addr.clone().recipient());
        let _close = CloseOnDrop {
            desk: &self.desk,
            id,
        };
        self.addr.do_send(OpenApproval {
            run_id: self.run_id,
            child: self.child,
            request,
        });
        match tokio::time::timeout(timeout, &mut rx).await {
            Ok(outcome) => outcome.unwrap_or(HumanOutcome::Cancelled),
            Err(_) => {
                // A decision may have won the race: then the channel holds it.
                self.desk.close(id, HumanOutcome::TimedOut);
                rx.await.unwrap_or(HumanOutcome::Cancelled)
            }
        }
    }
}

impl Actor for SessionActor {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Self::Context) {
        self.me = Some(ctx.address());
        self.recover(ctx);
        let flush_every = self.deps.config.event_flush_interval;
        ctx.run_interval(flush_every, |act, ctx| {
            act.flush(ctx);
            if !act.log.held.is_empty() {
                act.reserve_ahead();
            }
            act.retry_unrecorded(ctx);
            act.trim_if_unwatched();
            act.keep_tail(ctx);
        });
        if self.deps.coordination.is_some() {
            ctx.run_interval(self.deps.config.session_lease_ttl / 3, |act, ctx| {
                act.renew_lease(ctx);
            });
        }
        let timeout = self.deps.config.session_timeout;
        let check = (timeout / 4).clamp(Duration::from_millis(50), Duration::from_secs(30));
        ctx.run_interval(check, move |act, ctx| {
            if act.last_activity.elapsed() >= timeout {
                act.leave_if_idle(ctx);
            }
        });
    }

    /// Also reached when a handler panicked: the panic unwinds out of the arbiter's task, and
    /// actix, dropping the actor's context, stops it. Nobody asked for that stop, so this is a
    /// crash: its buffered events are still stored, its run's quota slot is given back (the run
    /// is dropped with the actor, see [`RunSlot`]), its approvals are cancelled, and its
    /// supervisor starts a fresh actor at once, which resumes the run from its checkpoint for
    /// the same subscribers.
    fn stopped(&mut self, _ctx: &mut Self::Context) {
        let crashed = !self.stop_requested;
        let draining = self.deps.draining.load(std::sync::atomic::Ordering::SeqCst);
        if crashed && !draining {
            tracing::error!(session_id = %self.session.id, "a session actor stopped without being asked to (a handler panicked); storing its events and restarting it");
        }
        self.wind_down(crashed);
    }
}

/// A backstop for an actor dropped without even `stopped` (its arbiter went away).
impl Drop for SessionActor {
    fn drop(&mut self) {
        if !self.wound_down {
            self.wind_down(true);
        }
    }
}

impl SessionActor {
    /// What a stopping actor does last. `crashed`: it did not stop but was dropped, and is to be
    /// started again.
    fn wind_down(&mut self, crashed: bool) {
        self.wound_down = true;
        // Whatever is still buffered goes to the store, and once everything sent is stored the
        // unused reservation is given back, so the next actor numbers on without a gap. The
        // actor is gone, so a plain task.
        self.residency.leave();
        let batch = self.log.not_stored();
        let unrecorded = std::mem::take(&mut self.unrecorded);
        // Everything numbered is stored below (held events too), so the numbers above the last
        // one are unused. An actor that never recovered knows no numbers: it gives none back.
        let (reserved, last_sent) = (
            self.log.reserved,
            self.recovered.then(|| self.log.last_seq()),
        );
        let db = self.deps.db.clone();
        let scope = self.scope;
        let sid = self.session.id;
        let fence = self.fence;
        // Stopping with a run still going (shutdown): its lease goes, so another replica can
        // resume it from its checkpoint without waiting for the TTL. A crashed actor keeps it:
        // the fresh one started here at once takes it back as this replica's.
        if let (false, Some(lease), Some(c)) =
            (crashed, self.lease.take(), self.deps.coordination.clone())
        {
            self.deps.runtime.spawn(async move {
                let _ = c.release_session(&sid.to_string(), lease.token).await;
            });
        }
        self.deps.runtime.spawn(async move {
            for end in &unrecorded {
                if let Err(e) = executions::record_end(&db, &scope, end).await {
                    tracing::warn!(error = %e, run_id = %end.run_id, "the end of a run is still unrecorded; the next start records it from the journal");
                }
            }
            if let Err(e) =
                store_events::append_missing_fenced(&db, &scope, sid, &batch, fence).await
            {
                tracing::warn!(error = %e, "storing the last events of a session failed");
                return;
            }
            if let Some(last) = last_sent
                && unrecorded.is_empty()
                && reserved > last
                && let Err(e) = sessions::release_seq(&db, &scope, sid, reserved, last).await
            {
                tracing::debug!(error = %e, "giving back unused event numbers failed");
            }
        });
        if let Some(run) = &self.run {
            run.cancel.cancel();
            if let Some(a) = &run.abort {
                a.abort();
            }
        }
        self.close_approvals(None);
        let draining = self.deps.draining.load(std::sync::atomic::Ordering::SeqCst);
        let restart = (crashed && !self.shutting_down && !draining).then(|| {
            Box::new(RestartSession {
                session: self.session.clone(),
                subscribers: std::mem::take(&mut self.subscribers)
                    .into_values()
                    .collect(),
            })
        });
        self.supervisor.do_send(SessionStopped {
            session_id: self.session.id,
            user_id: self.session.user_id,
            instance: self.instance,
            restart,
        });
    }
}

/// Give back the session's unused event numbers (see [`sessions::release_seq`]), through the
/// writer.
async fn release_seq(
    writer: &agentry_store::writer::Writer,
    scope: TenantScope,
    sid: SessionId,
    reserved: u64,
    last: u64,
) -> Result<(), agentry_store::StoreError> {
    writer
        .write_for(sid.0, move |txn| {
            Box::pin(async move { sessions::release_seq(txn, &scope, sid, reserved, last).await })
        })
        .await
}

#[cfg(test)]
mod tests {
    use agentry_schema::roles::{Grant, RoleName};

    use super::*;

    fn msgs(ids: std::ops::RangeInclusive<i64>) -> Vec<agentry_store::messages::Message> {
        ids.map(|id| agentry_store::messages::Message {
            id,
            session_id: SessionId::new(),
            run_id: None,
            role: agentry_store::messages::MessageRole::User,
            content: id.to_string(),
            tool_calls: None,
            tool_call_id: None,
            created_at: chrono::Utc::now(),
        })
        .collect()
    }

    fn ids(w: &[agentry_store::messages::Message]) -> Vec<i64> {
        w.iter().map(|m| m.id).collect()
    }

    /// The kept window plus what came after it is the last `n`, whatever their sizes.
    #[test]
    fn a_kept_window_extended_is_the_last_n() {
        assert_eq!(
            ids(&extend_window(None::<Arc<Vec<_>>>, msgs(1..=3), 5)),
            vec![1, 2, 3]
        );
        assert_eq!(
            ids(&extend_window(Some(Arc::new(msgs(1..=5))), msgs(6..=7), 5)),
            vec![3, 4, 5, 6, 7]
        );
        assert_eq!(
            ids(&extend_window(Some(Arc::new(msgs(1..=2))), msgs(3..=4), 5)),
            vec![1, 2, 3, 4]
        );
        assert_eq!(
            ids(&extend_window(Some(Arc::new(msgs(1..=5))), msgs(6..=10), 5)),
            vec![6, 7, 8, 9, 10]
        );
        assert_eq!(
            ids(&extend_window(Some(Arc::new(msgs(1..=5))), vec![], 5)),
            vec![1, 2, 3, 4, 5]
        );
        assert_eq!(
            ids(&extend_window(Some(Arc::new(msgs(1..=5))), msgs(6..=6), 1)),
            vec![6]
        );
        // Shared (another holder): copied, not changed.
        let shared = Arc::new(msgs(1..=5));
        assert_eq!(
            ids(&extend_window(Some(shared.clone()), msgs(6..=7), 5)),
            vec![3, 4, 5, 6, 7]
        );
        assert_eq!(ids(&shared), vec![1, 2, 3, 4, 5]);
    }

    #[test]
    fn a_recovered_run_keeps_its_narrower_role_and_never_exceeds_its_user() {
        let analyst = RoleName::parse("analyst").unwrap();
        let admin = Some(Role::Admin.into());
        // A tenant admin's narrowed key: the resumed run keeps the narrow role.
        assert_eq!(
            resumed_grant(admin, Some(Role::Member.into())),
            Role::Member.into()
        );
        assert_eq!(
            resumed_grant(admin, Some(Grant::custom(analyst))),
            Grant::custom(analyst)
        );
        assert_eq!(
            resumed_grant(admin, Some(Role::Admin.into())),
            Role::Admin.into()
        );
        // A user demoted since the run started: the user's role now.
        assert_eq!(
            resumed_grant(Some(Role::Member.into()), Some(Role::Admin.into())),
            Role::Member.into()
        );
        assert_eq!(
            resumed_grant(Some(Grant::custom(analyst)), Some(Role::Admin.into())),
            Grant::custom(analyst)
        );
        // Rows from before the role was recorded: the user's role, as before.
        assert_eq!(resumed_grant(admin, None), Role::Admin.into());
        // A user gone: nothing beyond member.
        assert_eq!(
            resumed_grant(None, Some(Role::Admin.into())),
            Role::Member.into()
        );
    }
}
