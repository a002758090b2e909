//! HitlApproval's contract. Input: a decision or a cancel. Output (to the session): closed.

use std::time::Duration;

use actix::Message;
use agentry_schema::frames::Decision;
use agentry_schema::ids::{ApprovalId, UserId};

use crate::error::EngineError;

/// A human decided. Refused (and the approval stays pending) when the decision does not fit the
/// request's kind.
#[derive(Message)]
#[rtype(result = "Result<(), EngineError>")]
pub struct Resolve {
    pub decision: Decision,
    pub by: Option<UserId>,
}

/// The run ended while waiting.
#[derive(Message)]
#[rtype(result = "()")]
pub struct CancelApproval;

/// Sent to the session when the approval is over, however it ended.
#[derive(Message)]
#[rtype(result = "()")]
pub struct ApprovalClosed {
    pub id: ApprovalId,
    pub waited: Duration,
    pub decided: bool,
}
