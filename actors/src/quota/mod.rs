//! Tenant quotas: requests per minute, concurrent runs, sessions per user and tokens per day,
//! with `>=` semantics (a limit of N admits exactly N; 0 means no limit). docs/admin.md states
//! each one's exact rule.
//!
//! Callers hold a [`QuotaHandle`]: one per tenant, kept in the engine's quota table so that
//! admission costs one hop (to the [`QuotaActor`] in single-node mode, or one Redis round trip
//! with [`RedisQuota`] in cluster mode). The single-node logic is [`QuotaState`], plain methods
//! tested without a mailbox; the actor serialises access so concurrent requests can never be
//! admitted past a limit.
//!
//! Tokens per day are reserved before each model call ([`QuotaHandle::reserve_tokens`]) and the
//! reservation is replaced by the call's real usage after it, so parallel runs cannot overshoot
//! the budget by more than one call's reservation.
//!
//! A run's first model call is reserved when the run is admitted ([`QuotaHandle::admit_run`]),
//! before anything of the run is stored: a burst of requests against a nearly spent budget is
//! admitted only as far as the budget holds, and the rest is refused with 429 instead of
//! starting runs whose first model call would then fail. The run's first call turns that hold
//! into its own reservation.

mod handle;
mod handlers;
pub mod messages;
pub mod redis;

pub use handle::*;
pub use redis::RedisQuota;

use std::collections::{HashMap, VecDeque};
use std::time::{Duration, Instant};

use actix::{Actor, Context};
use agentry_schema::ids::UserId;
use agentry_store::tenants::Quotas;
use chrono::{DateTime, NaiveDate, Utc};

pub use messages::*;

/// Which quota said no, and when to try again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QuotaRejection {
    pub quota: &'static str,
    pub limit: u64,
    pub retry_after: Duration,
}

pub type QuotaDecision = Result<(), QuotaRejection>;

#[derive(Debug, Clone)]
pub struct QuotaState {
    quotas: Quotas,
    /// Admission times inside the last minute.
    requests: VecDeque<Instant>,
    running: u32,
    sessions: HashMap<UserId, u64>,
    tokens_day: NaiveDate,
    tokens_used: u64,
    /// Tokens reserved by model calls in flight (see [`QuotaState::reserve_tokens`]).
    tokens_reserved: u64,
}

const MINUTE: Duration = Duration::from_secs(60);

impl QuotaState {
    /// `tokens_used_today` comes from the store, so a restart does not reset the daily budget.
    pub fn new(quotas: Quotas, tokens_used_today: u64, now: DateTime<Utc>) -> Self {
        QuotaState {
            quotas,
            requests: VecDeque::new(),
            running: 0,
            sessions: HashMap::new(),
            tokens_day: now.date_naive(),
            tokens_used: tokens_used_today,
            tokens_reserved: 0,
        }
    }

    pub fn quotas(&self) -> Quotas {
        self.quotas
    }

    pub fn set_quotas(&mut self, quotas: Quotas) {
        self.quotas = quotas;
    }

    pub fn running(&self) -> u32 {
        self.running
    }

    /// One API request.
    pub fn admit_request(&mut self, now: Instant) -> QuotaDecision {
        let limit = self.quotas.requests_per_minute;
        while self
            .requests
            .front()
            .is_some_and(|t| now.duration_since(*t) >= MINUTE)
        {
            self.requests.pop_front();
        }
        if limit > 0 && self.requests.len() >= limit as usize {
            let oldest = self.requests.front().copied().unwrap_or(now);
            let wait = MINUTE.saturating_sub(now.duration_since(oldest));
            return Err(QuotaRejection {
                quota: "requests_per_minute",
                limit: u64::from(limit),
                retry_after: wait.max(Duration::from_secs(1)),
            });
        }
        self.requests.push_back(now);
        Ok(())
    }

    fn roll_day(&mut self, now: DateTime<Utc>) {
        if now.date_naive() != self.tokens_day {
            self.tokens_day = now.date_naive();
            self.tokens_used = 0;
        }
    }

    pub(crate) fn until_midnight(now: DateTime<Utc>) -> Duration {
        let tomorrow = now.date_naive().succ_opt().unwrap_or(now.date_naive());
        let midnight = tomorrow
            .and_hms_opt(0, 0, 0)
            .map(|t| t.and_utc())
            .unwrap_or(now);
        (midnight - now)
            .to_std()
            .unwrap_or(Duration::from_secs(1))
            .max(Duration::from_secs(1))
    }

    /// The daily budget is spent when the tokens used today plus those reserved by calls in
    /// flight (and held by admitted runs for their first call) reach it.
    pub fn budget_spent(&mut self, now: DateTime<Utc>) -> QuotaDecision {
        self.roll_day(now);
        let budget = self.quotas.tokens_per_day;
        if budget > 0 && self.tokens_used.saturating_add(self.tokens_reserved) >= budget {
            return Err(QuotaRejection {
                quota: "tokens_per_day",
                limit: budget,
                retry_after: Self::until_midnight(now),
            });
        }
        Ok(())
    }

    /// A run wants to start: concurrent runs and the daily token budget.
    pub fn acquire_run(&mut self, now: DateTime<Utc>) -> QuotaDecision {
        self.budget_spent(now)?;
        let limit = self.quotas.max_concurrent_runs;
        if limit > 0 && self.running >= limit {
            return Err(QuotaRejection {
                quota: "max_concurrent_runs",
                limit: u64::from(limit),
                retry_after: Duration::from_secs(1),
            });
        }
        self.running += 1;
        Ok(())
    }

    /// A run wants to start and hold `hold` tokens of the daily budget for its first model call:
    /// [`QuotaState::acquire_run`], then the hold is reserved (when the tenant has a budget).
    /// Returns the tokens held.
    pub fn admit_run(&mut self, hold: u64, now: DateTime<Utc>) -> Result<u64, QuotaRejection> {
        self.acquire_run(now)?;
        if self.quotas.tokens_per_day == 0 {
            return Ok(0);
        }
        self.tokens_reserved = self.tokens_reserved.saturating_add(hold);
        Ok(hold)
    }

    /// A run's first model call takes over the `held` tokens its admission reserved and
    /// reserves `estimate` instead, checked as any call is ([`QuotaState::reserve_tokens`], with
    /// the hold given back first). Refused, the hold is given back all the same.
    pub fn convert_tokens(
        &mut self,
        held: u64,
        estimate: u64,
        now: DateTime<Utc>,
    ) -> QuotaDecision {
        self.tokens_reserved = self.tokens_reserved.saturating_sub(held);
        self.reserve_tokens(estimate, now)
    }

    /// A run ended (its tokens were counted call by call, [`QuotaState::settle_tokens`]).
    pub fn release_run(&mut self) {
        self.running = self.running.saturating_sub(1);
    }

    /// A model call wants to start and reserves `estimate` tokens: admitted while the tokens
    /// used today plus those reserved are below the budget. Every admitted call could use its
    /// whole reservation, so the budget is overshot by at most one call's reservation (the last
    /// one admitted below it), however many run in parallel.
    pub fn reserve_tokens(&mut self, estimate: u64, now: DateTime<Utc>) -> QuotaDecision {
        self.budget_spent(now)?;
        self.tokens_reserved = self.tokens_reserved.saturating_add(estimate);
        Ok(())
    }

    /// A model call ended: its reservation is given back and what it really used is counted.
    /// A reservation made before midnight is given back the same way; its usage counts for the
    /// new day.
    pub fn settle_tokens(&mut self, reserved: u64, used: u64, now: DateTime<Utc>) {
        self.tokens_reserved = self.tokens_reserved.saturating_sub(reserved);
        self.add_tokens(used, now);
    }

    pub fn add_tokens(&mut self, tokens: u64, now: DateTime<Utc>) {
        self.roll_day(now);
        self.tokens_used = self.tokens_used.saturating_add(tokens);
    }

    pub fn tokens_used(&self) -> u64 {
        self.tokens_used
    }

    pub fn tokens_reserved(&self) -> u64 {
        self.tokens_reserved
    }

    /// A user wants a new session; `stored` is how many they have in the database. It is needed
    /// only the first time this user is seen (afterwards the in-memory count, which includes
    /// sessions being created right now, wins): without it, a user not seen yet is answered
    /// `Ok(false)` — read the count and ask again — and one seen is reserved without it (no
    /// read of the user's sessions per new session).
    pub fn reserve_session(
        &mut self,
        user: UserId,
        stored: Option<u64>,
    ) -> Result<bool, QuotaRejection> {
        let current = match (self.sessions.get(&user), stored) {
            (Some(n), _) => *n,
            (None, Some(stored)) => stored,
            (None, None) => return Ok(false),
        };
        let limit = self.quotas.max_sessions_per_user;
        if limit > 0 && current >= u64::from(limit) {
            return Err(QuotaRejection {
                quota: "max_sessions_per_user",
                limit: u64::from(limit),
                retry_after: Duration::from_secs(60),
            });
        }
        self.sessions.insert(user, current + 1);
        Ok(true)
    }

    /// A session of `user` was deleted (or its creation failed).
    pub fn release_session(&mut self, user: UserId) {
        if let Some(n) = self.sessions.get_mut(&user) {
            *n = n.saturating_sub(1);
        }
    }
}

pub struct QuotaActor {
    pub(crate) state: QuotaState,
}

impl QuotaActor {
    pub fn new(state: QuotaState) -> Self {
        Self { state }
    }
}

impl Actor for QuotaActor {
    type Context = Context<Self>;
}

/// Restarted in place by the tenant's supervisor after a stop or a panic
/// ([`crate::supervise::start_supervised`]), with its counts: the runs it admitted still hold
/// their slots and release them as they end.
impl actix::Supervised for QuotaActor {}

#[cfg(test)]
mod tests {
    use super::*;

    fn quotas(rpm: u32, runs: u32, sessions: u32, tokens: u64) -> Quotas {
        Quotas {
            requests_per_minute: rpm,
            max_concurrent_runs: runs,
            max_sessions_per_user: sessions,
            tokens_per_day: tokens,
            ..Quotas::default()
        }
    }

    #[test]
    fn a_limit_of_n_admits_exactly_n_requests_per_minute() {
        let mut q = QuotaState::new(quotas(3, 0, 0, 0), 0, Utc::now());
        let t0 = Instant::now();
        for _ in 0..3 {
            q.admit_request(t0).unwrap();
        }
        let r = q.admit_request(t0 + Duration::from_secs(10)).unwrap_err();
        assert_eq!(r.quota, "requests_per_minute");
        assert!(
            r.retry_after <= Duration::from_secs(60) && r.retry_after >= Duration::from_secs(49)
        );
        q.admit_request(t0 + Duration::from_secs(60)).unwrap();
    }

    #[test]
    fn concurrent_runs_and_tokens() {
        let now = Utc::now();
        let mut q = QuotaState::new(quotas(0, 2, 0, 100), 0, now);
        q.acquire_run(now).unwrap();
        q.acquire_run(now).unwrap();
        assert_eq!(q.acquire_run(now).unwrap_err().quota, "max_concurrent_runs");
        q.release_run();
        q.reserve_tokens(60, now).unwrap();
        q.settle_tokens(60, 100, now);
        let r = q.acquire_run(now).unwrap_err();
        assert_eq!(r.quota, "tokens_per_day");
        // A new day resets the budget.
        q.acquire_run(now + chrono::Duration::days(1)).unwrap();
    }

    #[test]
    fn sessions_per_user_count_from_the_store_then_in_memory() {
        let mut q = QuotaState::new(quotas(0, 0, 2, 0), 0, Utc::now());
        let (a, b) = (UserId::new(), UserId::new());
        q.reserve_session(a, Some(1)).unwrap();
        assert_eq!(
            q.reserve_session(a, Some(0)).unwrap_err().quota,
            "max_sessions_per_user"
        );
        q.release_session(a);
        q.reserve_session(a, Some(0)).unwrap();
        q.reserve_session(b, Some(0)).unwrap();
        q.reserve_session(b, Some(0)).unwrap();
        assert!(q.reserve_session(b, Some(0)).is_err());
        // Without the stored count: a user not seen yet needs it, one seen does not.
        let c = UserId::new();
        assert_eq!(q.reserve_session(c, None), Ok(false));
        assert_eq!(q.reserve_session(c, Some(1)), Ok(true));
        assert_eq!(
            q.reserve_session(c, None).unwrap_err().quota,
            "max_sessions_per_user"
        );
        q.release_session(c);
        assert_eq!(q.reserve_session(c, None), Ok(true));
    }

    #[test]
    fn reservations_count_against_the_budget_until_settled() {
        let now = Utc::now();
        let mut q = QuotaState::new(quotas(0, 0, 0, 1000), 0, now);
        // Reservations are admitted while used + reserved < budget: the last one admitted may
        // cross it, by at most its own size.
        q.reserve_tokens(400, now).unwrap();
        q.reserve_tokens(400, now).unwrap();
        q.reserve_tokens(400, now).unwrap();
        assert_eq!(q.tokens_reserved(), 1200);
        assert_eq!(
            q.reserve_tokens(1, now).unwrap_err().quota,
            "tokens_per_day"
        );
        assert_eq!(q.acquire_run(now).unwrap_err().quota, "tokens_per_day");
        // Calls that used less than they reserved give the rest back.
        q.settle_tokens(400, 100, now);
        q.settle_tokens(400, 100, now);
        assert_eq!((q.tokens_used(), q.tokens_reserved()), (200, 400));
        q.reserve_tokens(400, now).unwrap();
        q.settle_tokens(400, 0, now);
        q.settle_tokens(400, 350, now);
        assert_eq!((q.tokens_used(), q.tokens_reserved()), (550, 0));
        // A settle never takes the reserved count below zero.
        q.settle_tokens(5000, 0, now);
        assert_eq!(q.tokens_reserved(), 0);
    }

    /// Any interleaving of reserve and settle from parallel calls, each using at most what it
    /// reserved, ends at most one reservation over the budget.
    #[test]
    fn parallel_calls_overshoot_by_at_most_one_reservation() {
        let now = Utc::now();
        let budget = 3000;
        let estimate = 700;
        let mut q = QuotaState::new(quotas(0, 0, 0, budget), 0, now);
        let mut in_flight = 0u32;
        let mut seed = 7u64;
        for _ in 0..10_000 {
            seed = seed
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            if seed >> 62 == 0 && in_flight > 0 {
                in_flight -= 1;
                q.settle_tokens(estimate, (seed >> 20) % (estimate + 1), now);
            } else if q.reserve_tokens(estimate, now).is_ok() {
                in_flight += 1;
            }
        }
        for _ in 0..in_flight {
            q.settle_tokens(estimate, estimate, now);
        }
        assert!(
            q.tokens_used() >= budget,
            "the budget was used: {}",
            q.tokens_used()
        );
        assert!(
            q.tokens_used() < budget + estimate,
            "overshoot {} over one reservation",
            q.tokens_used() - budget
        );
    }

    /// A burst of runs against a budget: admission holds each run's first call, so only as
    /// many runs are admitted as the budget holds; each first call takes its hold over; a run
    /// that ends before its first call gives its hold back.
    #[test]
    fn admission_holds_the_first_call_of_each_run() {
        let now = Utc::now();
        let mut q = QuotaState::new(quotas(0, 0, 0, 10_000), 0, now);
        let admitted = (0..100).filter(|_| q.admit_run(2_000, now).is_ok()).count();
        assert_eq!(admitted, 5, "5 holds of 2,000 reach the budget of 10,000");
        assert_eq!(q.admit_run(2_000, now).unwrap_err().quota, "tokens_per_day");
        // Each first call takes its own hold over (the same size or less: always admitted).
        for _ in 0..4 {
            q.convert_tokens(2_000, 1_800, now).unwrap();
        }
        assert_eq!(q.tokens_reserved(), 4 * 1_800 + 2_000);
        // One admitted run is cancelled before its first call: its hold goes back.
        q.settle_tokens(2_000, 0, now);
        q.release_run();
        assert_eq!(q.tokens_reserved(), 4 * 1_800);
        // No budget: nothing is held.
        let mut free = QuotaState::new(quotas(0, 0, 0, 0), 0, now);
        assert_eq!(free.admit_run(2_000, now), Ok(0));
        assert_eq!(free.tokens_reserved(), 0);
    }

    #[test]
    fn zero_means_no_limit() {
        let now = Utc::now();
        let mut q = QuotaState::new(quotas(0, 0, 0, 0), u64::MAX / 2, now);
        for _ in 0..1000 {
            q.admit_request(Instant::now()).unwrap();
            q.acquire_run(now).unwrap();
            q.reserve_session(UserId::default(), Some(0)).unwrap();
        }
    }
}
