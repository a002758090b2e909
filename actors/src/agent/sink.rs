//! The agent loop's view of its session: where events go and how a human is asked.

use std::time::Duration;

use std::sync::Arc;

use agentry_schema::events::{DoneStatus, EventPayload, HitlRequestData};
use agentry_schema::frames::Decision;
use agentry_schema::ids::{ApprovalId, RunId, UserId};
use async_trait::async_trait;

use super::{RunOutcome, SharedProgress};

/// A `task` child run as its session knows it: its id and the run whose call started it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ChildTag {
    pub run: RunId,
    pub parent: RunId,
}

/// A pending `hitl_request` (an approval or a question).
#[derive(Debug, Clone)]
pub struct HumanRequest {
    pub id: ApprovalId,
    pub data: HitlRequestData,
    pub timeout: Duration,
}

/// How a `hitl_request` ended.
#[derive(Debug, Clone, PartialEq)]
pub enum HumanOutcome {
    Decided {
        decision: Decision,
        by: Option<UserId>,
    },
    TimedOut,
    /// The run was cancelled (or the session went away) while waiting.
    Cancelled,
}

#[async_trait]
pub trait RunSink: Send + Sync {
    /// Emit an event of the run; the session assigns its `seq` and fans it out.
    fn emit(&self, payload: EventPayload);

    /// Emit the `hitl_request` and wait for the decision, the timeout, or cancellation.
    async fn ask_human(&self, request: HumanRequest) -> HumanOutcome;

    /// The sink of a child run of the same session: its events carry the child's `run_id` and
    /// `parent_run_id`, its questions reach the same clients.
    fn child(&self, tag: ChildTag) -> Arc<dyn RunSink>;

    /// Register a child run with the session before it starts: from then on its events are
    /// published, and the end of the top-level run (a cancel, say) ends it too. `false`: the
    /// top-level run is over, the child must not start.
    async fn start_child(&self, tag: ChildTag, depth: u32, progress: SharedProgress) -> bool;

    /// A registered child run must not start after all (its rows could not be written): it is
    /// forgotten without a `done` (it has no execution).
    fn forget_child(&self, tag: ChildTag);

    /// The child's loop is over: the session records its end and publishes its one `done`.
    /// `None`: the session had ended it already (its top-level run ended first).
    async fn end_child(&self, tag: ChildTag, outcome: RunOutcome) -> Option<DoneStatus>;
}
