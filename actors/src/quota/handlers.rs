//! Thin handlers: each forwards to a [`QuotaState`](super::QuotaState) method.

use std::time::Instant;

use actix::Handler;
use chrono::Utc;

use super::messages::*;
use super::{QuotaActor, QuotaDecision};

impl Handler<AdmitRequest> for QuotaActor {
    type Result = QuotaDecision;
    fn handle(&mut self, _: AdmitRequest, _: &mut Self::Context) -> QuotaDecision {
        self.state.admit_request(Instant::now())
    }
}

impl Handler<AcquireRun> for QuotaActor {
    type Result = QuotaDecision;
    fn handle(&mut self, _: AcquireRun, _: &mut Self::Context) -> QuotaDecision {
        self.state.acquire_run(Utc::now())
    }
}

impl Handler<AdmitRun> for QuotaActor {
    type Result = Result<u64, super::QuotaRejection>;
    fn handle(&mut self, msg: AdmitRun, _: &mut Self::Context) -> Self::Result {
        self.state.admit_run(msg.hold, Utc::now())
    }
}

impl Handler<ConvertTokens> for QuotaActor {
    type Result = QuotaDecision;
    fn handle(&mut self, msg: ConvertTokens, _: &mut Self::Context) -> QuotaDecision {
        self.state
            .convert_tokens(msg.held, msg.estimate, Utc::now())
    }
}

impl Handler<CheckBudget> for QuotaActor {
    type Result = QuotaDecision;
    fn handle(&mut self, _: CheckBudget, _: &mut Self::Context) -> QuotaDecision {
        self.state.budget_spent(Utc::now())
    }
}

impl Handler<ReleaseRun> for QuotaActor {
    type Result = ();
    fn handle(&mut self, _: ReleaseRun, _: &mut Self::Context) {
        self.state.release_run();
    }
}

impl Handler<ReserveTokens> for QuotaActor {
    type Result = QuotaDecision;
    fn handle(&mut self, msg: ReserveTokens, _: &mut Self::Context) -> QuotaDecision {
        self.state.reserve_tokens(msg.estimate, Utc::now())
    }
}

impl Handler<SettleTokens> for QuotaActor {
    type Result = ();
    fn handle(&mut self, msg: SettleTokens, _: &mut Self::Context) {
        self.state.settle_tokens(msg.reserved, msg.used, Utc::now());
    }
}

impl Handler<ReserveSession> for QuotaActor {
    type Result = Result<bool, super::QuotaRejection>;
    fn handle(&mut self, msg: ReserveSession, _: &mut Self::Context) -> Self::Result {
        self.state.reserve_session(msg.user, msg.stored)
    }
}

impl Handler<ReleaseSession> for QuotaActor {
    type Result = ();
    fn handle(&mut self, msg: ReleaseSession, _: &mut Self::Context) {
        self.state.release_session(msg.user);
    }
}

impl Handler<UpdateQuotas> for QuotaActor {
    type Result = ();
    fn handle(&mut self, msg: UpdateQuotas, _: &mut Self::Context) {
        self.state.set_quotas(msg.0);
    }
}

impl Handler<GetUsage> for QuotaActor {
    type Result = actix::MessageResult<GetUsage>;
    fn handle(&mut self, _: GetUsage, _: &mut Self::Context) -> Self::Result {
        actix::MessageResult(QuotaSnapshot {
            running: self.state.running(),
            tokens_used_today: self.state.tokens_used(),
            tokens_reserved: self.state.tokens_reserved(),
            quotas: self.state.quotas(),
        })
    }
}
