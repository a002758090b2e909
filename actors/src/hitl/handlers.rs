use actix::Handler;

use super::HitlApproval;
use super::messages::*;
use crate::engine::sink::HumanOutcome;
use crate::error::EngineError;

impl Handler<Resolve> for HitlApproval {
    type Result = Result<(), EngineError>;

    fn handle(&mut self, msg: Resolve, ctx: &mut Self::Context) -> Self::Result {
        if self.reply.is_none() {
            return Err(EngineError::ApprovalNotPending(self.id.to_string()));
        }
        HitlApproval::check(self.kind, &msg.decision)?;
        self.close(
            HumanOutcome::Decided {
                decision: msg.decision,
                by: msg.by,
            },
            ctx,
        );
        Ok(())
    }
}

impl Handler<CancelApproval> for HitlApproval {
    type Result = ();

    fn handle(&mut self, _: CancelApproval, ctx: &mut Self::Context) {
        self.close(HumanOutcome::Cancelled, ctx);
    }
}
