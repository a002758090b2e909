//! SessionActor's contract.
//!
//! Input (from the gateway, through the engine facade): subscribe, chat, cancel, decide, status,
//! shutdown; (from the process's live sessions) evict ([`crate::live_sessions::Evict`]).
//! Output (to subscribers): [`SessionEvent`]; (to its supervisor, a `Recipient` it is given)
//! [`SessionStopped`]. Internal (from the session's own run
//! task and approval actors): emit, open approval, run finished, approval closed.

use std::sync::Arc;

use actix::{Message, Recipient};
use agentry_schema::events::{EventPayload, ExecutionEvent};
use agentry_schema::ids::{ApprovalId, RunId, SessionId, UserId};
use agentry_store::UserScope;
use agentry_store::sessions::Session;
use agentry_store::tenants::Tenant;
use tokio::sync::mpsc;

use agentry_schema::events::DoneStatus;

use crate::agent::sink::{ChildTag, HumanRequest};
use crate::agent::{RunOutcome, SharedProgress};
use crate::error::EngineError;

// ---- output ----

/// One event of the session's stream, with its wire JSON encoded once for every subscriber.
#[derive(Message, Clone, Debug)]
#[rtype(result = "()")]
pub struct SessionEvent {
    pub event: Arc<ExecutionEvent>,
    pub json: Arc<str>,
}

/// Who receives a session's events: an actor (the WebSocket connection) or a channel (every
/// adapter that is plain async code: REST, SSE, `/mcp`, `/v1/chat/completions`). A channel needs
/// no actor of its own, so an adapter running on a plain tokio task can subscribe.
#[derive(Clone, Debug)]
pub enum Subscriber {
    Actor(Recipient<SessionEvent>),
    Channel(mpsc::UnboundedSender<SessionEvent>),
}

impl Subscriber {
    /// Deliver one event; a subscriber that is gone is dropped at the next fan-out.
    pub fn send(&self, ev: SessionEvent) {
        match self {
            Subscriber::Actor(to) => to.do_send(ev),
            Subscriber::Channel(tx) => {
                let _ = tx.send(ev);
            }
        }
    }

    /// Still listening: the actor runs, or the channel's receiver is alive.
    pub fn connected(&self) -> bool {
        match self {
            Subscriber::Actor(to) => to.connected(),
            Subscriber::Channel(tx) => !tx.is_closed(),
        }
    }
}

impl From<Recipient<SessionEvent>> for Subscriber {
    fn from(to: Recipient<SessionEvent>) -> Self {
        Subscriber::Actor(to)
    }
}

impl From<mpsc::UnboundedSender<SessionEvent>> for Subscriber {
    fn from(tx: mpsc::UnboundedSender<SessionEvent>) -> Self {
        Subscriber::Channel(tx)
    }
}

/// Sent by a session actor to its supervisor when it stops. The supervisor hands the actor a
/// `Recipient` of it, so the session knows nothing of the supervisor.
#[derive(Message)]
#[rtype(result = "()")]
pub struct SessionStopped {
    pub session_id: SessionId,
    pub user_id: UserId,
    /// Which start of the session actor stopped.
    pub instance: u64,
    /// It did not stop but was dropped after a handler panicked: start it again now, for these
    /// subscribers (its recovery resumes the run it had).
    pub restart: Option<Box<RestartSession>>,
}

/// What a crashed session actor's successor starts with (see [`SessionStopped::restart`]).
pub struct RestartSession {
    pub session: Session,
    pub subscribers: Vec<Subscriber>,
}

// ---- input ----

/// Start receiving the session's events. With `after_seq`, everything after that `seq` is
/// replayed first (from memory, or from the store when it is older), with no gap and no
/// duplicate; without it, only new events arrive.
#[derive(Message)]
#[rtype(result = "Result<SubscriptionId, EngineError>")]
pub struct Subscribe {
    pub after_seq: Option<u64>,
    pub subscriber: Subscriber,
}

pub type SubscriptionId = u64;

/// The session's stream position now: the highest `seq` whoever watches it has been sent (on
/// a watcher in cluster mode, the owner's stream head). A client that is told "connected"
/// after this was read and then subscribes from it misses nothing numbered after (issue 31,
/// item 2: a chat sent on another replica right after a WebSocket opened).
#[derive(Message)]
#[rtype(result = "Result<u64, EngineError>")]
pub struct Position;

#[derive(Message)]
#[rtype(result = "()")]
pub struct Unsubscribe(pub SubscriptionId);

/// A user message. Refused with `RunInProgress` while a run is active unless `enqueue`.
#[derive(Message)]
#[rtype(result = "Result<ChatAccepted, EngineError>")]
pub struct StartChat {
    pub user: UserScope,
    pub message: String,
    /// Functions the client declared for the run (the Responses API's function tools). A
    /// message with any is not queued behind another run (`RunInProgress` instead).
    pub client_tools: Vec<agentry_schema::api::ClientTool>,
    pub enqueue: bool,
    /// The id of the request that sent the message, for the log line of a run that fails.
    pub request_id: Option<String>,
    /// The span of the request or frame that sent the message: the run's span is its child.
    pub span: tracing::Span,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChatAccepted {
    pub run_id: RunId,
    /// True when the message waits behind the active run.
    pub queued: bool,
}

/// Cancel the active run: `done{cancelled: true, reason: "user_cancelled"}` follows promptly.
#[derive(Message)]
#[rtype(result = "Result<RunId, EngineError>")]
pub struct CancelRun;

/// The session's live state.
#[derive(Message)]
#[rtype(result = "SessionStatus")]
pub struct GetStatus;

#[derive(Debug, Clone, PartialEq)]
pub struct SessionStatus {
    pub active_run: Option<RunId>,
    pub queued: usize,
    pub pending_approvals: Vec<ApprovalId>,
    pub subscribers: usize,
    pub last_seq: u64,
}

/// An assistant of the tenant changed or was deleted (through this server): a session that
/// keeps it for its runs loads it again. Sent to the tenant's supervisor, which tells its
/// sessions.
#[derive(Message, Clone)]
#[rtype(result = "()")]
pub struct AssistantChanged(pub agentry_schema::ids::AssistantId);

/// Something every assistant of the tenant may depend on changed (a profile, a model
/// connection, a skill): sessions load their assistant again for their next run.
#[derive(Message, Clone)]
#[rtype(result = "()")]
pub struct AssistantsChanged;

/// The tenant's settings changed (quotas, features).
#[derive(Message)]
#[rtype(result = "()")]
pub struct TenantChanged(pub Arc<Tenant>);

/// Stop the session: cancel its run (its `done` is still sent) and stop the actor. Used when
/// the session is deleted.
#[derive(Message)]
#[rtype(result = "()")]
pub struct Shutdown;

// ---- internal ----

/// An event from the session's run task. `run_id` is the session's active (top-level) run;
/// `child`, when the event comes from one of its `task` child runs.
#[derive(Message)]
#[rtype(result = "()")]
pub(crate) struct Emit {
    pub run_id: RunId,
    pub child: Option<ChildTag>,
    pub payload: EventPayload,
}

/// A `task` call of the active run `root` (or of one of its children) starts a child run:
/// see [`crate::agent::sink::RunSink::start_child`].
#[derive(Message)]
#[rtype(result = "bool")]
pub(crate) struct StartChild {
    pub root: RunId,
    pub child: ChildTag,
    pub depth: u32,
    pub progress: SharedProgress,
}

/// A registered child run that never started: forgotten without a `done`.
#[derive(Message)]
#[rtype(result = "()")]
pub(crate) struct ForgetChild {
    pub root: RunId,
    pub child: ChildTag,
}

/// A child run's loop is over: its end is recorded and its `done` published, then `reply`
/// gets the status the clients were told (`None`: it was ended already).
#[derive(Message)]
#[rtype(result = "()")]
pub(crate) struct EndChild {
    pub root: RunId,
    pub child: ChildTag,
    pub outcome: RunOutcome,
    pub reply: tokio::sync::oneshot::Sender<Option<DoneStatus>>,
}

/// The run task needs a human. The request is already open on the approval desk (a decision
/// goes there, not here); the session publishes its `hitl_request`, or cancels it when the run
/// is over.
#[derive(Message)]
#[rtype(result = "()")]
pub(crate) struct OpenApproval {
    pub run_id: RunId,
    pub child: Option<ChildTag>,
    pub request: HumanRequest,
}

/// The run task ended (or panicked). Sent through the mailbox after all of the task's events,
/// so `done` always comes last.
#[derive(Message)]
#[rtype(result = "()")]
pub(crate) struct RunFinished {
    pub run_id: RunId,
    pub result: Result<RunOutcome, String>,
}

/// Write the held events now (see `SessionActor::flush`): sent by the actor to itself when an
/// event is numbered, so the events of one burst go in one batch.
#[derive(Message)]
#[rtype(result = "()")]
pub(crate) struct FlushEvents;

/// A reservation of event numbers landed (`Some(upto)`) or failed (`None`, retried later).
#[derive(Message)]
#[rtype(result = "()")]
pub(crate) struct SeqReserved {
    pub upto: Option<u64>,
}

/// Start-up recovery found runs of this session with a final status but no `done` in the
/// stream (a crash between the two writes, before they were one transaction): each gets a
/// `done{interrupted}`; their status stays. Each run comes with its parent, for a `task`
/// child run (its `done` carries `parent_run_id`).
#[derive(Message)]
#[rtype(result = "()")]
pub struct AddMissingDone(pub Vec<(RunId, Option<RunId>)>);
