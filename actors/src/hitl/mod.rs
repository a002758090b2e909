//! HitlApproval: one actor per pending approval or question. It waits for a human decision,
//! refuses decisions that do not fit its kind, and turns its timeout into `TimedOut` (the loop
//! treats that as a reject). The first decision wins; the actor stops after it.

mod handlers;
pub mod messages;

use std::time::{Duration, Instant};

use actix::{Actor, ActorContext, AsyncContext, Context, Recipient};
use agentry_schema::events::HitlKind;
use agentry_schema::frames::Decision;
use agentry_schema::ids::ApprovalId;
use tokio::sync::oneshot;

use crate::engine::sink::HumanOutcome;
use crate::error::EngineError;
pub use messages::*;

pub struct HitlApproval {
    id: ApprovalId,
    kind: HitlKind,
    timeout: Duration,
    reply: Option<oneshot::Sender<HumanOutcome>>,
    session: Recipient<ApprovalClosed>,
    opened: Instant,
}

impl HitlApproval {
    pub fn new(
        id: ApprovalId,
        kind: HitlKind,
        timeout: Duration,
        reply: oneshot::Sender<HumanOutcome>,
        session: Recipient<ApprovalClosed>,
    ) -> Self {
        Self {
            id,
            kind,
            timeout,
            reply: Some(reply),
            session,
            opened: Instant::now(),
        }
    }

    /// Whether `decision` answers a request of `kind`.
    pub fn check(kind: HitlKind, decision: &Decision) -> Result<(), EngineError> {
        match (kind, decision) {
            (
                HitlKind::Approval,
                Decision::Approve { .. } | Decision::Edit { .. } | Decision::Reject { .. },
            ) => Ok(()),
            (HitlKind::Approval, Decision::Answer { .. }) => Err(EngineError::BadRequest(
                "this request is an approval: decide with type approve, edit or reject".into(),
            )),
            (HitlKind::Question, Decision::Answer { .. } | Decision::Reject { .. }) => Ok(()),
            (HitlKind::Question, _) => Err(EngineError::BadRequest(
                "this request is a question: reply with type answer (or reject to decline)".into(),
            )),
        }
    }

    fn close(&mut self, outcome: HumanOutcome, ctx: &mut Context<Self>) {
        let resolved = matches!(outcome, HumanOutcome::Decided { .. });
        if let Some(tx) = self.reply.take() {
            // The loop may be gone (cancelled); nothing to tell then.
            let _ = tx.send(outcome);
        }
        self.session.do_send(ApprovalClosed {
            id: self.id,
            waited: self.opened.elapsed(),
            decided: resolved,
        });
        ctx.stop();
    }
}

impl Actor for HitlApproval {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Self::Context) {
        crate::metrics::approvals_waiting(1.0);
        ctx.run_later(self.timeout, |act, ctx| {
            act.close(HumanOutcome::TimedOut, ctx)
        });
    }

    fn stopped(&mut self, _: &mut Self::Context) {
        crate::metrics::approvals_waiting(-1.0);
    }
}
