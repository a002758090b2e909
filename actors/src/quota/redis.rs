//! Cluster mode: a tenant's quotas kept in Redis, so every replica counts against the same
//! limits. Each question is one Lua script: Redis runs a script atomically, so two replicas
//! can never both take the last slot (no read-then-write). Times come from Redis's own clock
//! (`TIME`), not the replicas'.
//!
//! Keys, all under `{prefix}q:{<tenant>}:` (the braces keep a tenant's keys in one slot of a
//! Redis Cluster):
//! - `rpm`: a sorted set of the last minute's requests, scored by their time (a sliding log:
//!   exact, as the single-node window).
//! - `runs`: a sorted set of running run ids, scored by the end of their lease. A replica
//!   renews the leases of its runs every third of the lease; a dead replica's runs fall out
//!   when their lease passes, and their slots come back.
//! - `tokres`: the token reservations of model calls in flight, `<id>:<tokens>`, leased the
//!   same way; `tok:<yyyymmdd>`: the tokens used that UTC day, seeded from the database the
//!   first time a replica asks that day.
//! - `s:<user>`: the user's session count, seeded from the database when missing, kept a day
//!   after its last change (then seeded again, which heals any drift).
//!
//! Redis not answering (within [`REDIS_TIMEOUT`]) is [`QuotaError::Coordination`]: admission
//! fails closed. Releases that fail are logged; their leases expire.

use std::collections::HashSet;
use std::sync::{Arc, Mutex, RwLock, Weak};
use std::time::Duration;

use agentry_schema::ids::{RunId, TenantId, UserId};
use agentry_store::tenants::Quotas;
use async_trait::async_trait;
use chrono::{DateTime, NaiveDate, Utc};
use redis::Script;
use redis::aio::ConnectionManager;

use super::handle::{QuotaBackend, QuotaError, TokenTicket};
use super::{QuotaRejection, QuotaState};

/// How long one quota question may wait for Redis before it fails closed.
pub const REDIS_TIMEOUT: Duration = Duration::from_secs(2);

/// How long a run slot or a token reservation outlives a replica that stops renewing it.
pub const DEFAULT_LEASE: Duration = Duration::from_secs(30);

/// Redis's clock in milliseconds, for every script.
const NOW: &str = r"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
";

/// Seed the day's token count (KEYS[used]) from the database when it is missing, then give
/// used + reserved (KEYS[res], after dropping expired reservations).
const TOKENS: &str = r"
local function day_tokens(used_key, res_key, seed, now)
  if redis.call('EXISTS', used_key) == 0 then
    redis.call('SET', used_key, seed, 'EX', 172800)
  end
  redis.call('ZREMRANGEBYSCORE', res_key, '-inf', now)
  local total = tonumber(redis.call('GET', used_key))
  for _, m in ipairs(redis.call('ZRANGE', res_key, 0, -1)) do
    total = total + tonumber(string.match(m, ':(%d+)$'))
  end
  return total
end
";

/// KEYS: rpm. ARGV: limit, member. Returns {1, 0} or {0, ms until a slot frees}.
const ADMIT_REQUEST: &str = r"
local limit = tonumber(ARGV[1])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now - 60000)
if redis.call('ZCARD', KEYS[1]) >= limit then
  local oldest = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
  return {0, 60000 - (now - tonumber(oldest[2]))}
end
redis.call('ZADD', KEYS[1], now, ARGV[2])
redis.call('PEXPIRE', KEYS[1], 61000)
return {1, 0}
";

/// KEYS: runs, tok:<day>, tokres. ARGV: run limit, run id, lease ms, budget, seed, and the
/// member (`<id>:<tokens>`) of the tokens held for the run's first model call ('' for none).
/// Returns 1, or 0 (max_concurrent_runs) or -1 (tokens_per_day).
const ACQUIRE_RUN: &str = r"
local limit, lease, budget = tonumber(ARGV[1]), tonumber(ARGV[3]), tonumber(ARGV[4])
if budget > 0 and day_tokens(KEYS[2], KEYS[3], ARGV[5], now) >= budget then
  return -1
end
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
if limit > 0 and redis.call('ZSCORE', KEYS[1], ARGV[2]) == false
   and redis.call('ZCARD', KEYS[1]) >= limit then
  return 0
end
redis.call('ZADD', KEYS[1], now + lease, ARGV[2])
redis.call('PEXPIRE', KEYS[1], lease * 2)
if budget > 0 and ARGV[6] ~= nil and ARGV[6] ~= '' then
  redis.call('ZADD', KEYS[3], now + lease, ARGV[6])
  redis.call('PEXPIRE', KEYS[3], lease * 2)
end
return 1
";

/// KEYS: tok:<day>, tokres. ARGV: budget, seed. Returns 1, or 0 when the budget is spent.
const CHECK_BUDGET: &str = r"
local budget = tonumber(ARGV[1])
if budget > 0 and day_tokens(KEYS[1], KEYS[2], ARGV[2], now) >= budget then
  return 0
end
return 1
";

/// KEYS: tok:<day>, tokres. ARGV: budget, the held member, the new member, lease ms, seed.
/// The hold goes whatever the answer; then as RESERVE_TOKENS.
const CONVERT_TOKENS: &str = r"
local budget, lease = tonumber(ARGV[1]), tonumber(ARGV[4])
redis.call('ZREM', KEYS[2], ARGV[2])
if budget > 0 and day_tokens(KEYS[1], KEYS[2], ARGV[5], now) >= budget then
  return 0
end
redis.call('ZADD', KEYS[2], now + lease, ARGV[3])
redis.call('PEXPIRE', KEYS[2], lease * 2)
return 1
";

/// KEYS: tok:<day>, tokres. ARGV: budget, member (`<id>:<tokens>`), lease ms, seed.
const RESERVE_TOKENS: &str = r"
local budget, lease = tonumber(ARGV[1]), tonumber(ARGV[3])
if budget > 0 and day_tokens(KEYS[1], KEYS[2], ARGV[4], now) >= budget then
  return 0
end
redis.call('ZADD', KEYS[2], now + lease, ARGV[2])
redis.call('PEXPIRE', KEYS[2], lease * 2)
return 1
";

/// KEYS: tok:<day>, tokres. ARGV: member ('' for none), used, seed.
const SETTLE_TOKENS: &str = r"
if ARGV[1] ~= '' then redis.call('ZREM', KEYS[2], ARGV[1]) end
local used = tonumber(ARGV[2])
if used > 0 then
  if redis.call('EXISTS', KEYS[1]) == 0 then
    redis.call('SET', KEYS[1], ARGV[3], 'EX', 172800)
  end
  redis.call('INCRBY', KEYS[1], used)
end
return 1
";

/// KEYS: s:<user>. ARGV: limit, stored.
const RESERVE_SESSION: &str = r"
local limit = tonumber(ARGV[1])
if redis.call('EXISTS', KEYS[1]) == 0 then
  redis.call('SET', KEYS[1], ARGV[2], 'EX', 86400)
end
if limit > 0 and tonumber(redis.call('GET', KEYS[1])) >= limit then
  return 0
end
redis.call('INCR', KEYS[1])
redis.call('EXPIRE', KEYS[1], 86400)
return 1
";

/// KEYS: s:<user>.
const RELEASE_SESSION: &str = r"
local n = tonumber(redis.call('GET', KEYS[1]) or '0')
if n > 0 then redis.call('DECR', KEYS[1]) end
return 1
";

/// KEYS: a leased sorted set. ARGV: lease ms, members. Pushes each member's lease on, if it
/// is still there (one that expired stays released).
const RENEW: &str = r"
local lease = tonumber(ARGV[1])
for i = 2, #ARGV do
  redis.call('ZADD', KEYS[1], 'XX', now + lease, ARGV[i])
end
redis.call('PEXPIRE', KEYS[1], lease * 2)
return 1
";

struct Scripts {
    admit_request: Script,
    acquire_run: Script,
    reserve_tokens: Script,
    convert_tokens: Script,
    check_budget: Script,
    settle_tokens: Script,
    reserve_session: Script,
    release_session: Script,
    renew: Script,
}

fn scripts() -> &'static Scripts {
    static SCRIPTS: std::sync::OnceLock<Scripts> = std::sync::OnceLock::new();
    SCRIPTS.get_or_init(|| {
        let with_now = |body: &str| Script::new(&format!("{NOW}{body}"));
        let with_tokens = |body: &str| Script::new(&format!("{NOW}{TOKENS}{body}"));
        Scripts {
            admit_request: with_now(ADMIT_REQUEST),
            acquire_run: with_tokens(ACQUIRE_RUN),
            reserve_tokens: with_tokens(RESERVE_TOKENS),
            convert_tokens: with_tokens(CONVERT_TOKENS),
            check_budget: with_tokens(CHECK_BUDGET),
            settle_tokens: Script::new(SETTLE_TOKENS),
            reserve_session: Script::new(RESERVE_SESSION),
            release_session: Script::new(RELEASE_SESSION),
            renew: with_now(RENEW),
        }
    })
}

struct Inner {
    conn: ConnectionManager,
    /// `{prefix}q:{<tenant>}:`
    keys: String,
    quotas: RwLock<Quotas>,
    lease: Duration,
    /// The database's count of tokens used on `seed_day`, when this handle was made: what a
    /// missing day key starts from (0 on any later day).
    seed_day: NaiveDate,
    seed_used: u64,
    /// Leases this replica holds and renews: run ids and token reservation members.
    runs: Mutex<HashSet<String>>,
    reservations: Mutex<HashSet<String>>,
}

/// A tenant's quotas in Redis (see the module doc).
#[derive(Clone)]
pub struct RedisQuota(Arc<Inner>);

fn coordination(e: impl std::fmt::Display) -> QuotaError {
    QuotaError::Coordination(e.to_string())
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl RedisQuota {
    /// The quotas of `tenant`, under `prefix` (one per deployment sharing a Redis), with
    /// `tokens_used_today` from the database. Starts the task that renews this replica's
    /// leases (it ends when the last clone is dropped). Call inside a tokio runtime.
    pub fn new(
        conn: ConnectionManager,
        prefix: &str,
        tenant: TenantId,
        quotas: Quotas,
        tokens_used_today: u64,
        lease: Duration,
    ) -> Self {
        let inner = Arc::new(Inner {
            conn,
            keys: format!("{prefix}q:{{{tenant}}}:"),
            quotas: RwLock::new(quotas),
            lease: lease.max(Duration::from_millis(300)),
            seed_day: Utc::now().date_naive(),
            seed_used: tokens_used_today,
            runs: Mutex::default(),
            reservations: Mutex::default(),
        });
        tokio::spawn(renew_leases(Arc::downgrade(&inner)));
        RedisQuota(inner)
    }

    fn quotas(&self) -> Quotas {
        *self.0.quotas.read().unwrap_or_else(|p| p.into_inner())
    }

    fn key(&self, name: &str) -> String {
        format!("{}{name}", self.0.keys)
    }

    fn day_key(&self, now: DateTime<Utc>) -> String {
        self.key(&format!("tok:{}", now.format("%Y%m%d")))
    }

    fn seed(&self, now: DateTime<Utc>) -> u64 {
        if now.date_naive() == self.0.seed_day {
            self.0.seed_used
        } else {
            0
        }
    }

    fn lease_ms(&self) -> u64 {
        u64::try_from(self.0.lease.as_millis()).unwrap_or(u64::MAX)
    }

    async fn run<T: redis::FromRedisValue>(
        &self,
        invocation: redis::ScriptInvocation<'_>,
    ) -> Result<T, QuotaError> {
        let mut conn = self.0.conn.clone();
        match tokio::time::timeout(REDIS_TIMEOUT, invocation.invoke_async(&mut conn)).await {
            Ok(Ok(v)) => Ok(v),
            Ok(Err(e)) => Err(coordination(e)),
            Err(_) => Err(coordination(format!(
                "no answer within {} ms",
                REDIS_TIMEOUT.as_millis()
            ))),
        }
    }

    /// A release that cannot be refused: sent in the background; if Redis does not take it,
    /// the lease (or the day key's expiry) heals the count.
    fn fire(&self, what: &'static str, f: impl FnOnce(RedisQuota) -> BoxedUnit) {
        let me = self.clone();
        let fut = f(me);
        match tokio::runtime::Handle::try_current() {
            Ok(rt) => {
                rt.spawn(async move {
                    if let Err(e) = fut.await {
                        tracing::warn!(error = %e, "quota release ({what}) not written to Redis; its lease will expire");
                    }
                });
            }
            Err(_) => tracing::warn!("quota release ({what}) outside a runtime: left to expire"),
        }
    }

    fn budget_refusal(&self, budget: u64) -> QuotaError {
        QuotaError::Refused(QuotaRejection {
            quota: "tokens_per_day",
            limit: budget,
            retry_after: QuotaState::until_midnight(Utc::now()),
        })
    }
}

type BoxedUnit =
    std::pin::Pin<Box<dyn std::future::Future<Output = Result<(), QuotaError>> + Send>>;

/// Every third of the lease, push on the leases this replica holds.
async fn renew_leases(inner: Weak<Inner>) {
    let period = match inner.upgrade() {
        Some(i) => i.lease / 3,
        None => return,
    };
    loop {
        tokio::time::sleep(period).await;
        let Some(inner) = inner.upgrade() else { return };
        let q = RedisQuota(inner);
        for (set, held) in [("runs", &q.0.runs), ("tokres", &q.0.reservations)] {
            let members: Vec<String> = lock(held).iter().cloned().collect();
            if members.is_empty() {
                continue;
            }
            let key = q.key(set);
            let mut inv = scripts().renew.key(&key);
            inv.arg(q.lease_ms());
            for m in &members {
                inv.arg(m);
            }
            if let Err(e) = q.run::<i64>(inv).await {
                tracing::warn!(error = %e, "renewing quota leases in Redis failed; retrying");
            }
        }
    }
}

#[async_trait]
impl QuotaBackend for RedisQuota {
    async fn admit_request(&self) -> Result<(), QuotaError> {
        let limit = self.quotas().requests_per_minute;
        if limit == 0 {
            return Ok(());
        }
        let key = self.key("rpm");
        let member = uuid::Uuid::new_v4().to_string();
        let mut inv = scripts().admit_request.key(&key);
        inv.arg(limit).arg(&member);
        let (ok, wait_ms): (i64, i64) = self.run(inv).await?;
        if ok == 1 {
            return Ok(());
        }
        let wait = Duration::from_millis(u64::try_from(wait_ms).unwrap_or(0));
        Err(QuotaError::Refused(QuotaRejection {
            quota: "requests_per_minute",
            limit: u64::from(limit),
            retry_after: wait.max(Duration::from_secs(1)),
        }))
    }

    async fn check_budget(&self) -> Result<(), QuotaError> {
        let budget = self.quotas().tokens_per_day;
        if budget == 0 {
            return Ok(());
        }
        let now = Utc::now();
        let (day, res) = (self.day_key(now), self.key("tokres"));
        let mut inv = scripts().check_budget.key(&day);
        inv.key(&res);
        inv.arg(budget).arg(self.seed(now));
        match self.run::<i64>(inv).await? {
            1 => Ok(()),
            _ => Err(self.budget_refusal(budget)),
        }
    }

    async fn acquire_run(&self, run: RunId) -> Result<(), QuotaError> {
        self.admit_run(run, 0).await.map(|_| ())
    }

    async fn admit_run(&self, run: RunId, hold: u64) -> Result<Option<TokenTicket>, QuotaError> {
        let q = self.quotas();
        let now = Utc::now();
        let (runs, day, res) = (self.key("runs"), self.day_key(now), self.key("tokres"));
        let id = run.to_string();
        let held = (q.tokens_per_day > 0 && hold > 0).then(|| TokenTicket {
            id: format!("{}:{hold}", uuid::Uuid::new_v4()),
            reserved: hold,
        });
        let mut inv = scripts().acquire_run.key(&runs);
        inv.key(&day).key(&res);
        inv.arg(q.max_concurrent_runs)
            .arg(&id)
            .arg(self.lease_ms())
            .arg(q.tokens_per_day)
            .arg(self.seed(now))
            .arg(held.as_ref().map_or("", |t| t.id.as_str()));
        // Held before the answer: a lease taken by a script whose answer is lost is renewed
        // (and released at the run's end) all the same.
        lock(&self.0.runs).insert(id.clone());
        if let Some(t) = &held {
            lock(&self.0.reservations).insert(t.id.clone());
        }
        let answer: Result<i64, _> = self.run(inv).await;
        match answer {
            Ok(1) => Ok(held),
            Ok(code) => {
                lock(&self.0.runs).remove(&id);
                if let Some(t) = &held {
                    lock(&self.0.reservations).remove(&t.id);
                }
                if code == -1 {
                    Err(self.budget_refusal(q.tokens_per_day))
                } else {
                    Err(QuotaError::Refused(QuotaRejection {
                        quota: "max_concurrent_runs",
                        limit: u64::from(q.max_concurrent_runs),
                        retry_after: Duration::from_secs(1),
                    }))
                }
            }
            Err(e) => {
                if let Some(t) = &held {
                    self.settle_tokens(t, 0);
                }
                self.release_run(run);
                Err(e)
            }
        }
    }

    async fn convert_tokens(
        &self,
        held: &TokenTicket,
        estimate: u64,
    ) -> Result<TokenTicket, QuotaError> {
        let budget = self.quotas().tokens_per_day;
        let now = Utc::now();
        let member = format!("{}:{estimate}", uuid::Uuid::new_v4());
        let (day, res) = (self.day_key(now), self.key("tokres"));
        let mut inv = scripts().convert_tokens.key(&day);
        inv.key(&res);
        inv.arg(budget)
            .arg(&held.id)
            .arg(&member)
            .arg(self.lease_ms())
            .arg(self.seed(now));
        lock(&self.0.reservations).remove(&held.id);
        lock(&self.0.reservations).insert(member.clone());
        let ticket = TokenTicket {
            id: member.clone(),
            reserved: estimate,
        };
        match self.run::<i64>(inv).await {
            Ok(1) => Ok(ticket),
            Ok(_) => {
                lock(&self.0.reservations).remove(&member);
                Err(self.budget_refusal(budget))
            }
            Err(e) => {
                // Neither may stay: the hold and the new member are taken out (or expire).
                self.settle_tokens(held, 0);
                self.settle_tokens(&ticket, 0);
                Err(e)
            }
        }
    }

    fn release_run(&self, run: RunId) {
        let id = run.to_string();
        lock(&self.0.runs).remove(&id);
        self.fire("run slot", move |q| {
            Box::pin(async move {
                let mut conn = q.0.conn.clone();
                let key = q.key("runs");
                tokio::time::timeout(
                    REDIS_TIMEOUT,
                    redis::cmd("ZREM")
                        .arg(&key)
                        .arg(&id)
                        .query_async::<i64>(&mut conn),
                )
                .await
                .map_err(|_| coordination("timed out"))?
                .map_err(coordination)?;
                Ok(())
            })
        });
    }

    async fn reserve_tokens(&self, estimate: u64) -> Result<TokenTicket, QuotaError> {
        let budget = self.quotas().tokens_per_day;
        let now = Utc::now();
        let member = format!("{}:{estimate}", uuid::Uuid::new_v4());
        let (day, res) = (self.day_key(now), self.key("tokres"));
        let mut inv = scripts().reserve_tokens.key(&day);
        inv.key(&res);
        inv.arg(budget)
            .arg(&member)
            .arg(self.lease_ms())
            .arg(self.seed(now));
        lock(&self.0.reservations).insert(member.clone());
        let ticket = TokenTicket {
            id: member.clone(),
            reserved: estimate,
        };
        match self.run::<i64>(inv).await {
            Ok(1) => Ok(ticket),
            Ok(_) => {
                lock(&self.0.reservations).remove(&member);
                Err(self.budget_refusal(budget))
            }
            Err(e) => {
                self.settle_tokens(&ticket, 0);
                Err(e)
            }
        }
    }

    fn settle_tokens(&self, ticket: &TokenTicket, used: u64) {
        if !ticket.id.is_empty() {
            lock(&self.0.reservations).remove(&ticket.id);
        }
        let member = ticket.id.clone();
        self.fire("token reservation", move |q| {
            Box::pin(async move {
                let now = Utc::now();
                let (day, res) = (q.day_key(now), q.key("tokres"));
                let mut inv = scripts().settle_tokens.key(&day);
                inv.key(&res);
                inv.arg(&member).arg(used).arg(q.seed(now));
                q.run::<i64>(inv).await.map(|_| ())
            })
        });
    }

    /// Redis seeds a user's count from the database the first time, in the script: the count
    /// is always asked for.
    async fn reserve_session(&self, user: UserId, stored: Option<u64>) -> Result<bool, QuotaError> {
        let Some(stored) = stored else {
            return Ok(false);
        };
        let limit = self.quotas().max_sessions_per_user;
        let key = self.key(&format!("s:{user}"));
        let mut inv = scripts().reserve_session.key(&key);
        inv.arg(limit).arg(stored);
        match self.run::<i64>(inv).await? {
            1 => Ok(true),
            _ => Err(QuotaError::Refused(QuotaRejection {
                quota: "max_sessions_per_user",
                limit: u64::from(limit),
                retry_after: Duration::from_secs(60),
            })),
        }
    }

    fn release_session(&self, user: UserId) {
        self.fire("session", move |q| {
            Box::pin(async move {
                let key = q.key(&format!("s:{user}"));
                let inv = scripts().release_session.key(&key);
                q.run::<i64>(inv).await.map(|_| ())
            })
        });
    }

    fn set_quotas(&self, quotas: Quotas) {
        *self.0.quotas.write().unwrap_or_else(|p| p.into_inner()) = quotas;
    }

    fn is_alive(&self) -> bool {
        true
    }
}
