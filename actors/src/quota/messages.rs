//! QuotaActor's contract. Input: admission requests and releases; output: a decision naming
//! the quota that refused and when to retry.

use actix::Message;
use agentry_schema::ids::UserId;
use agentry_store::tenants::Quotas;

use super::QuotaDecision;

/// One API request of the tenant (requests_per_minute).
#[derive(Message)]
#[rtype(result = "QuotaDecision")]
pub struct AdmitRequest;

/// A run wants to start (max_concurrent_runs, tokens_per_day).
#[derive(Message)]
#[rtype(result = "QuotaDecision")]
pub struct AcquireRun;

/// A run wants to start and hold `hold` tokens for its first model call (max_concurrent_runs,
/// tokens_per_day). Answers the tokens held.
#[derive(Message)]
#[rtype(result = "Result<u64, super::QuotaRejection>")]
pub struct AdmitRun {
    pub hold: u64,
}

/// A run's first model call takes over the `held` tokens of its admission and reserves
/// `estimate`.
#[derive(Message)]
#[rtype(result = "QuotaDecision")]
pub struct ConvertTokens {
    pub held: u64,
    pub estimate: u64,
}

/// Is the daily token budget spent? A look before anything is created for a chat; the run's
/// admission ([`AdmitRun`]) decides.
#[derive(Message)]
#[rtype(result = "QuotaDecision")]
pub struct CheckBudget;

/// A run ended (its tokens were counted call by call: [`SettleTokens`]).
#[derive(Message)]
#[rtype(result = "()")]
pub struct ReleaseRun;

/// A model call wants to start: reserve `estimate` tokens of the daily budget.
#[derive(Message)]
#[rtype(result = "QuotaDecision")]
pub struct ReserveTokens {
    pub estimate: u64,
}

/// A model call ended: give its reservation back and count what it really `used`.
#[derive(Message)]
#[rtype(result = "()")]
pub struct SettleTokens {
    pub reserved: u64,
    pub used: u64,
}

/// A user wants a new session; `stored` is their count in the database, if it was read (see
/// [`crate::quota::QuotaState::reserve_session`]).
#[derive(Message)]
#[rtype(result = "Result<bool, super::QuotaRejection>")]
pub struct ReserveSession {
    pub user: UserId,
    pub stored: Option<u64>,
}

/// A session was deleted, or its creation failed after the reservation.
#[derive(Message)]
#[rtype(result = "()")]
pub struct ReleaseSession {
    pub user: UserId,
}

/// The platform admin changed the tenant's quotas.
#[derive(Message)]
#[rtype(result = "()")]
pub struct UpdateQuotas(pub Quotas);

/// Current usage, for metrics and the admin API.
#[derive(Message)]
#[rtype(result = "QuotaSnapshot")]
pub struct GetUsage;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QuotaSnapshot {
    pub running: u32,
    pub tokens_used_today: u64,
    pub tokens_reserved: u64,
    pub quotas: Quotas,
}
