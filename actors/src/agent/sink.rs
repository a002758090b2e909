//! The agent loop's view of its session: where events go and how a human is asked.

use std::time::Duration;

use agentry_schema::events::{EventPayload, HitlRequestData};
use agentry_schema::frames::Decision;
use agentry_schema::ids::{ApprovalId, UserId};
use async_trait::async_trait;

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
}
