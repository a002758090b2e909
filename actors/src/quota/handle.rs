//! [`QuotaHandle`]: what every caller holds to ask a tenant's quotas, whichever keeps them — the
//! tenant's [`QuotaActor`] on one node ([`LocalQuota`]), or Redis in cluster mode
//! ([`super::RedisQuota`]). Each question is one hop: one mailbox message or one Lua script.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use actix::Addr;
use agentry_schema::ids::{RunId, UserId};
use agentry_store::tenants::Quotas;
use async_trait::async_trait;

use super::messages::*;
use super::{QuotaActor, QuotaRejection};
use crate::error::EngineError;

/// Why a quota question was not admitted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum QuotaError {
    /// A quota is used up: it names itself and when to retry.
    #[error("quota {} exceeded (limit {})", .0.quota, .0.limit)]
    Refused(QuotaRejection),
    /// Whoever keeps the quotas does not answer (the tenant's quota actor stopped). Admission
    /// fails closed: nothing is admitted that could not be counted.
    #[error("the tenant's quotas cannot be checked: {0}")]
    Unavailable(String),
    /// Redis does not answer in cluster mode. Fails closed too.
    #[error("the cluster's quota store (Redis) does not answer: {0}")]
    Coordination(String),
}

impl From<QuotaRejection> for QuotaError {
    fn from(r: QuotaRejection) -> Self {
        QuotaError::Refused(r)
    }
}

impl From<QuotaError> for EngineError {
    fn from(e: QuotaError) -> Self {
        match e {
            QuotaError::Refused(r) => {
                crate::metrics::record_quota_rejection(r.quota);
                EngineError::Quota {
                    quota: r.quota,
                    limit: r.limit,
                    retry_after: r.retry_after,
                }
            }
            QuotaError::Unavailable(_) => EngineError::Unavailable,
            QuotaError::Coordination(cause) => {
                tracing::warn!(error = %cause, "Redis does not answer: quota admission refused");
                EngineError::CoordinationUnavailable
            }
        }
    }
}

/// A reservation of daily tokens for one model call, as the backend knows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TokenTicket {
    /// Names the reservation where the backend keeps one per call (Redis leases).
    pub id: String,
    pub reserved: u64,
}

/// Where a tenant's quotas are kept. Admission calls (`admit_request`, `acquire_run`,
/// `reserve_tokens`, `reserve_session`) answer; releases are sent and not waited for (they
/// cannot be refused, and a lost one is healed: the actor's counts by the next restart, Redis's
/// by lease expiry).
#[async_trait]
pub trait QuotaBackend: Send + Sync + 'static {
    /// One API request or WebSocket work frame of the tenant (requests_per_minute).
    async fn admit_request(&self) -> Result<(), QuotaError>;
    /// Refused when the tenant's daily token budget is spent (a look: nothing is taken).
    async fn check_budget(&self) -> Result<(), QuotaError>;
    /// A run wants to start (max_concurrent_runs, and tokens_per_day not spent yet).
    async fn acquire_run(&self, run: RunId) -> Result<(), QuotaError>;
    /// [`QuotaBackend::acquire_run`], and, when the tenant has a daily budget, `hold` tokens
    /// reserved for the run's first model call in the same step. The ticket names the hold.
    async fn admit_run(&self, run: RunId, hold: u64) -> Result<Option<TokenTicket>, QuotaError>;
    /// A run's first model call: give `held` back and reserve `estimate`, checked as
    /// [`QuotaBackend::reserve_tokens`] is. Refused, the hold is given back all the same.
    async fn convert_tokens(
        &self,
        held: &TokenTicket,
        estimate: u64,
    ) -> Result<TokenTicket, QuotaError>;
    fn release_run(&self, run: RunId);
    /// A model call wants to start: reserve `estimate` tokens of the day's budget.
    async fn reserve_tokens(&self, estimate: u64) -> Result<TokenTicket, QuotaError>;
    /// The call ended having used `used` tokens.
    fn settle_tokens(&self, ticket: &TokenTicket, used: u64);
    /// `user` wants a new session; `stored` is their count in the database, if read. `Ok(false)`:
    /// not reserved, the count is needed (ask again with it); with a count, never `Ok(false)`.
    async fn reserve_session(&self, user: UserId, stored: Option<u64>) -> Result<bool, QuotaError>;
    fn release_session(&self, user: UserId);
    /// The tenant's quotas changed.
    fn set_quotas(&self, quotas: Quotas);
    /// False once the keeper is gone for good (a stopped actor): the engine makes a new one.
    fn is_alive(&self) -> bool;
    /// The single-node quota actor, for its usage snapshot (`GetUsage`); none in cluster mode.
    fn actor(&self) -> Option<Addr<QuotaActor>> {
        None
    }
}

/// A tenant's quotas, cheap to clone. The handle [`QuotaHandle::admit_run`] returns is the
/// run's own: it carries the tokens held for the run's first model call.
#[derive(Clone)]
pub struct QuotaHandle {
    backend: Arc<dyn QuotaBackend>,
    /// The reservation of the last first model call of a run seen through this tenant's
    /// handles: what admitting the next run holds (0: none seen yet).
    first_call: Arc<AtomicU64>,
    /// The run's admission hold, until its first model call takes it over (or the run ends).
    admission: Option<Arc<Admission>>,
}

/// Tokens held for a run's first model call since its admission.
struct Admission {
    backend: Arc<dyn QuotaBackend>,
    ticket: Mutex<Option<TokenTicket>>,
}

impl Admission {
    fn take(&self) -> Option<TokenTicket> {
        self.ticket
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take()
    }
}

impl Drop for Admission {
    /// A run dropped without a model call (cancelled, refused at a later step) gives its hold
    /// back.
    fn drop(&mut self) {
        if let Some(t) = self.take() {
            self.backend.settle_tokens(&t, 0);
        }
    }
}

impl std::fmt::Debug for QuotaHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("QuotaHandle")
    }
}

impl QuotaHandle {
    pub fn new(backend: impl QuotaBackend) -> Self {
        QuotaHandle {
            backend: Arc::new(backend),
            first_call: Arc::new(AtomicU64::new(0)),
            admission: None,
        }
    }

    /// The single-node keeper: the tenant's quota actor.
    pub fn local(addr: Addr<QuotaActor>) -> Self {
        Self::new(LocalQuota(addr))
    }

    pub async fn admit_request(&self) -> Result<(), QuotaError> {
        self.backend.admit_request().await
    }

    /// Refused with `tokens_per_day` when the daily budget is spent: asked before anything is
    /// created for a chat, so a request over a spent budget stores nothing, not even for a
    /// moment. The run's admission ([`QuotaHandle::admit_run`]) is what decides.
    pub async fn check_budget(&self) -> Result<(), QuotaError> {
        self.backend.check_budget().await
    }

    /// A run wants to start, without holding tokens (see [`QuotaHandle::admit_run`]).
    pub async fn acquire_run(&self, run: RunId) -> Result<(), QuotaError> {
        self.backend.acquire_run(run).await
    }

    /// A run wants to start: its slot (max_concurrent_runs) and, when the tenant has a daily
    /// budget, its first model call's tokens, held from now — the reservation of the last
    /// first call this tenant made, or `fallback` before there was one. Admitted while the
    /// tokens used today plus those reserved (holds included) are below the budget, so a burst
    /// is admitted only as far as the budget holds. Returns the run's own handle: its first
    /// [`QuotaHandle::reserve_tokens`] takes the hold over; [`QuotaHandle::release_run`] (or
    /// dropping every clone) gives back a hold never used.
    pub async fn admit_run(&self, run: RunId, fallback: u64) -> Result<QuotaHandle, QuotaError> {
        let hold = match self.first_call.load(Ordering::Relaxed) {
            0 => fallback,
            last => last,
        };
        let ticket = self.backend.admit_run(run, hold).await?;
        Ok(QuotaHandle {
            backend: self.backend.clone(),
            first_call: self.first_call.clone(),
            admission: Some(Arc::new(Admission {
                backend: self.backend.clone(),
                ticket: Mutex::new(ticket),
            })),
        })
    }

    pub fn release_run(&self, run: RunId) {
        if let Some(t) = self.admission.as_ref().and_then(|a| a.take()) {
            self.backend.settle_tokens(&t, 0);
        }
        self.backend.release_run(run)
    }

    /// Reserve `estimate` tokens for one model call. The reservation is given back when the
    /// returned guard is settled with the call's real usage, or dropped (a cancelled call
    /// counts only the usage it reported: none). A run's first call takes over the tokens its
    /// admission held.
    pub async fn reserve_tokens(&self, estimate: u64) -> Result<TokenReservation, QuotaError> {
        let ticket = match self.admission.as_ref().and_then(|a| a.take()) {
            Some(held) => {
                self.first_call.store(estimate, Ordering::Relaxed);
                self.backend.convert_tokens(&held, estimate).await?
            }
            None => self.backend.reserve_tokens(estimate).await?,
        };
        Ok(TokenReservation {
            backend: self.backend.clone(),
            ticket: Some(ticket),
        })
    }

    /// Count `used` tokens of a call that reserved none (the tenant had no daily budget; one
    /// may be set later today).
    pub fn count_tokens(&self, used: u64) {
        if used > 0 {
            self.backend.settle_tokens(
                &TokenTicket {
                    id: String::new(),
                    reserved: 0,
                },
                used,
            );
        }
    }

    /// Reserve one of `user`'s `max_sessions_per_user`; `stored` is how many they have in the
    /// database, if read. `Ok(false)`: not reserved, the keeper needs the count (ask again with
    /// it); with a count, never `Ok(false)`.
    pub async fn reserve_session(
        &self,
        user: UserId,
        stored: Option<u64>,
    ) -> Result<bool, QuotaError> {
        self.backend.reserve_session(user, stored).await
    }

    pub fn release_session(&self, user: UserId) {
        self.backend.release_session(user)
    }

    pub fn set_quotas(&self, quotas: Quotas) {
        self.backend.set_quotas(quotas)
    }

    pub fn is_alive(&self) -> bool {
        self.backend.is_alive()
    }

    pub fn actor(&self) -> Option<Addr<QuotaActor>> {
        self.backend.actor()
    }
}

/// Tokens reserved for one model call; settle it with the call's usage.
#[must_use = "a reservation is settled with the call's real usage"]
pub struct TokenReservation {
    backend: Arc<dyn QuotaBackend>,
    ticket: Option<TokenTicket>,
}

impl TokenReservation {
    pub fn reserved(&self) -> u64 {
        self.ticket.as_ref().map_or(0, |t| t.reserved)
    }

    /// The call is over and used `used` tokens.
    pub fn settle(mut self, used: u64) {
        if let Some(t) = self.ticket.take() {
            self.backend.settle_tokens(&t, used);
        }
    }
}

impl Drop for TokenReservation {
    fn drop(&mut self) {
        if let Some(t) = self.ticket.take() {
            self.backend.settle_tokens(&t, 0);
        }
    }
}

/// Single-node mode: the tenant's [`QuotaActor`], one mailbox hop per question.
pub struct LocalQuota(pub Addr<QuotaActor>);

fn gone(_: actix::MailboxError) -> QuotaError {
    QuotaError::Unavailable("the quota actor stopped".into())
}

#[async_trait]
impl QuotaBackend for LocalQuota {
    async fn admit_request(&self) -> Result<(), QuotaError> {
        Ok(self.0.send(AdmitRequest).await.map_err(gone)??)
    }

    async fn check_budget(&self) -> Result<(), QuotaError> {
        Ok(self.0.send(CheckBudget).await.map_err(gone)??)
    }

    async fn acquire_run(&self, _run: RunId) -> Result<(), QuotaError> {
        Ok(self.0.send(AcquireRun).await.map_err(gone)??)
    }

    async fn admit_run(&self, _run: RunId, hold: u64) -> Result<Option<TokenTicket>, QuotaError> {
        let held = self.0.send(AdmitRun { hold }).await.map_err(gone)??;
        Ok((held > 0).then(|| TokenTicket {
            id: String::new(),
            reserved: held,
        }))
    }

    async fn convert_tokens(
        &self,
        held: &TokenTicket,
        estimate: u64,
    ) -> Result<TokenTicket, QuotaError> {
        self.0
            .send(ConvertTokens {
                held: held.reserved,
                estimate,
            })
            .await
            .map_err(gone)??;
        Ok(TokenTicket {
            id: String::new(),
            reserved: estimate,
        })
    }

    fn release_run(&self, _run: RunId) {
        self.0.do_send(ReleaseRun);
    }

    async fn reserve_tokens(&self, estimate: u64) -> Result<TokenTicket, QuotaError> {
        self.0
            .send(ReserveTokens { estimate })
            .await
            .map_err(gone)??;
        Ok(TokenTicket {
            id: String::new(),
            reserved: estimate,
        })
    }

    fn settle_tokens(&self, ticket: &TokenTicket, used: u64) {
        self.0.do_send(SettleTokens {
            reserved: ticket.reserved,
            used,
        });
    }

    async fn reserve_session(&self, user: UserId, stored: Option<u64>) -> Result<bool, QuotaError> {
        Ok(self
            .0
            .send(ReserveSession { user, stored })
            .await
            .map_err(gone)??)
    }

    fn release_session(&self, user: UserId) {
        self.0.do_send(ReleaseSession { user });
    }

    fn set_quotas(&self, quotas: Quotas) {
        self.0.do_send(UpdateQuotas(quotas));
    }

    fn is_alive(&self) -> bool {
        self.0.connected()
    }

    fn actor(&self) -> Option<Addr<QuotaActor>> {
        Some(self.0.clone())
    }
}
