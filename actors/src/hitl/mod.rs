//! The approval desk: every pending approval or question of the process, by id.
//!
//! A decision is the hottest human-facing path: someone is waiting for the run to go on. It goes
//! from the adapter (REST, WebSocket, `/mcp`, `/v1`) straight to the waiting run, through this
//! map and the run's oneshot: one hop, without passing through the registry, the tenant
//! supervisor, the session actor or an actor per approval (it used to take five). The session
//! only hears afterwards that the request closed, for its status and metrics.
//!
//! Whoever takes an entry out of the map decides its outcome, so a decision, the timeout and a
//! cancel can race and exactly one of them wins.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use actix::{Message, Recipient};
use agentry_schema::events::HitlKind;
use agentry_schema::frames::Decision;
use agentry_schema::ids::{ApprovalId, RunId, SessionId, TenantId, UserId};
use agentry_store::UserScope;
use tokio::sync::oneshot;

use crate::agent::sink::HumanOutcome;
use crate::error::EngineError;

/// Sent to the session when one of its requests is over, however it ended.
#[derive(Message, Debug)]
#[rtype(result = "()")]
pub struct ApprovalClosed {
    pub id: ApprovalId,
    pub waited: Duration,
    pub decided: bool,
}

/// Who waits for a request, and so who may answer it.
#[derive(Debug, Clone, Copy)]
pub struct Waiter {
    pub tenant: TenantId,
    pub session: SessionId,
    /// The session's owner: they, or an admin of the tenant, may decide.
    pub owner: UserId,
    pub run: RunId,
    pub kind: HitlKind,
}

struct Pending {
    waiter: Waiter,
    reply: oneshot::Sender<HumanOutcome>,
    session: Recipient<ApprovalClosed>,
    opened: Instant,
}

#[derive(Default)]
pub struct ApprovalDesk {
    pending: Mutex<HashMap<ApprovalId, Pending>>,
}

impl ApprovalDesk {
    pub fn new() -> Self {
        Self::default()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<ApprovalId, Pending>> {
        // A panic while holding the lock cannot leave the map half-changed (every change is one
        // insert or remove), so a poisoned lock is still good.
        self.pending
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// A run needs a human: register the request before anyone can learn its id (its
    /// `hitl_request` goes out after this). The receiver gets the outcome.
    pub fn open(
        &self,
        id: ApprovalId,
        waiter: Waiter,
        session: Recipient<ApprovalClosed>,
    ) -> oneshot::Receiver<HumanOutcome> {
        let (tx, rx) = oneshot::channel();
        let replaced = self.lock().insert(
            id,
            Pending {
                waiter,
                reply: tx,
                session,
                opened: Instant::now(),
            },
        );
        if replaced.is_none() {
            crate::metrics::approvals_waiting(1.0);
        }
        rx
    }

    /// End a request with `outcome` (the timeout, a cancel). False when it was already over.
    pub fn close(&self, id: ApprovalId, outcome: HumanOutcome) -> bool {
        let Some(p) = self.lock().remove(&id) else {
            return false;
        };
        Self::deliver(id, p, outcome);
        true
    }

    fn deliver(id: ApprovalId, p: Pending, outcome: HumanOutcome) {
        let decided = matches!(outcome, HumanOutcome::Decided { .. });
        // The run may be gone (aborted); nothing to tell it then.
        let _ = p.reply.send(outcome);
        crate::metrics::approvals_waiting(-1.0);
        p.session.do_send(ApprovalClosed {
            id,
            waited: p.opened.elapsed(),
            decided,
        });
    }

    /// A decision by `user` on request `id` of session `session` of `tenant`. `Ok(true)`: the
    /// run has it. `Ok(false)`: no such request is pending for this caller (another tenant's,
    /// another user's session, over, or never existed: the caller finds out which from the
    /// store, off this path). An error: the decision does not fit the request's kind, and the
    /// request stays pending.
    pub fn decide(
        &self,
        id: ApprovalId,
        tenant: TenantId,
        session: SessionId,
        user: &UserScope,
        decision: Decision,
    ) -> Result<bool, EngineError> {
        let pending = {
            let mut map = self.lock();
            let Some(p) = map.get(&id) else {
                return Ok(false);
            };
            let w = &p.waiter;
            let may = w.tenant == tenant
                && user.tenant.tenant_id() == tenant
                && w.session == session
                && (w.owner == user.user_id || user.is_admin());
            if !may {
                return Ok(false);
            }
            check(w.kind, &decision)?;
            map.remove(&id)
        };
        let Some(p) = pending else {
            return Ok(false);
        };
        Self::deliver(
            id,
            p,
            HumanOutcome::Decided {
                decision,
                by: Some(user.user_id),
            },
        );
        Ok(true)
    }

    /// How many requests are pending (metrics, tests).
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
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
