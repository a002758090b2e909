//! The Redis side of cluster mode (issue 13): one shared [`redis::aio::ConnectionManager`],
//! built at start-up and handed to everything that coordinates replicas (session leases,
//! quotas, cache invalidation), with this replica's id and the key prefix every key lives under.
//!
//! While Redis is unreachable, commands fail after [`COMMAND_TIMEOUT`] instead of waiting, and
//! the manager reconnects by itself when Redis answers again; [`Coordination::reachable`] is
//! the last verdict of a background ping, for the readiness probe and for refusing new work
//! at once.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, LazyLock};
use std::time::{Duration, Instant};

use redis::aio::{ConnectionManager, ConnectionManagerConfig};

mod bus;
mod peers;
mod replicas;
mod streams;

pub use bus::{Bus, ForwardError, Handler, TailItem, TailStream};
pub use replicas::{LeaseState, Owner};
pub use streams::{STREAM_MAXLEN, STREAM_TTL, StreamEvent};

/// How long one Redis command may take before it counts as failed.
pub const COMMAND_TIMEOUT: Duration = Duration::from_millis(1000);
/// How long opening a connection to Redis may take.
pub const CONNECT_TIMEOUT: Duration = Duration::from_millis(1000);
/// Time between two pings of the background probe.
pub const PROBE_INTERVAL: Duration = Duration::from_millis(250);
/// A verdict older than this (the probe itself stuck) no longer counts as reachable.
const STALE_AFTER: Duration = Duration::from_secs(3);

#[derive(Debug, Clone, thiserror::Error)]
pub enum CoordinationError {
    /// Redis does not answer (refused, timed out, dropped): retry later.
    #[error("Redis does not answer: {0}")]
    Unavailable(String),
    /// Redis answered with an error, or a reply had an unexpected shape.
    #[error("Redis refused a command: {0}")]
    Refused(String),
}

impl From<redis::RedisError> for CoordinationError {
    fn from(e: redis::RedisError) -> Self {
        if e.is_io_error()
            || e.is_timeout()
            || e.is_connection_dropped()
            || e.is_connection_refusal()
            || e.is_unrecoverable_error()
        {
            CoordinationError::Unavailable(e.to_string())
        } else {
            CoordinationError::Refused(e.to_string())
        }
    }
}

/// What [`Coordination::connect`] needs.
#[derive(Debug, Clone)]
pub struct CoordinationOptions {
    /// `redis://[user:password@]host:port[/db]`.
    pub url: String,
    /// Every key and channel starts with `{key_prefix}:`, so several deployments (or tests) can
    /// share one Redis.
    pub key_prefix: String,
    /// This replica's id (unique among the live replicas).
    pub replica_id: String,
    /// How long start-up waits for Redis to answer.
    pub startup_timeout: Duration,
}

struct Probe {
    reachable: AtomicBool,
    /// Milliseconds since `epoch` of the last verdict.
    at_ms: AtomicU64,
    epoch: Instant,
}

/// The cluster's coordination handle: cheap to clone, shared by every user in the process.
#[derive(Clone)]
pub struct Coordination {
    redis: ConnectionManager,
    client: redis::Client,
    replica_id: Arc<str>,
    prefix: Arc<str>,
    probe: Arc<Probe>,
    /// The replicas' message bus, once started ([`Coordination::start_bus`]).
    bus: Arc<std::sync::OnceLock<Bus>>,
}

impl std::fmt::Debug for Coordination {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Coordination")
            .field("replica_id", &self.replica_id)
            .field("prefix", &self.prefix)
            .finish_non_exhaustive()
    }
}

impl Coordination {
    /// Connect to Redis, waiting up to `startup_timeout` for it to answer a PING.
    pub async fn connect(opts: &CoordinationOptions) -> Result<Coordination, CoordinationError> {
        let client = redis::Client::open(opts.url.as_str())
            .map_err(|e| CoordinationError::Refused(format!("redis.url: {e}")))?;
        let config = ConnectionManagerConfig::new()
            .set_connection_timeout(Some(CONNECT_TIMEOUT))
            .set_response_timeout(Some(COMMAND_TIMEOUT))
            // Reconnect attempts happen again on the next command after these run out, so
            // keep them few and short: a command during an outage fails fast.
            .set_number_of_retries(2)
            .set_min_delay(Duration::from_millis(50))
            .set_max_delay(Duration::from_millis(500));
        let deadline = Instant::now() + opts.startup_timeout;
        let redis = loop {
            let attempt = async {
                let mut manager =
                    ConnectionManager::new_with_config(client.clone(), config.clone()).await?;
                let _: String = redis::cmd("PING").query_async(&mut manager).await?;
                Ok::<_, redis::RedisError>(manager)
            };
            match tokio::time::timeout(COMMAND_TIMEOUT * 3, attempt).await {
                Ok(Ok(m)) => break m,
                Ok(Err(e)) if Instant::now() >= deadline => return Err(e.into()),
                Err(_) if Instant::now() >= deadline => {
                    return Err(CoordinationError::Unavailable(
                        "no answer to PING within the start-up timeout".into(),
                    ));
                }
                _ => tokio::time::sleep(Duration::from_millis(200)).await,
            }
        };
        let epoch = Instant::now();
        Ok(Coordination {
            redis,
            client,
            replica_id: opts.replica_id.as_str().into(),
            prefix: opts.key_prefix.as_str().into(),
            probe: Arc::new(Probe {
                reachable: AtomicBool::new(true),
                at_ms: AtomicU64::new(0),
                epoch,
            }),
            bus: Arc::default(),
        })
    }

    /// Start the replicas' message bus (its tasks run on `runtime` for as long as the process
    /// does). Starting it twice keeps the first.
    pub fn start_bus(&self, runtime: &tokio::runtime::Handle) -> Bus {
        self.bus.get_or_init(|| Bus::start(self, runtime)).clone()
    }

    /// The bus, once started.
    pub fn bus(&self) -> Option<&Bus> {
        self.bus.get()
    }

    /// This replica's id.
    pub fn replica_id(&self) -> &str {
        &self.replica_id
    }

    /// The shared connection (a clone of the one manager: cheap, multiplexed).
    pub fn connection(&self) -> ConnectionManager {
        self.redis.clone()
    }

    /// The client, for connections that cannot be shared (pub/sub subscribers).
    pub fn client(&self) -> &redis::Client {
        &self.client
    }

    /// `{prefix}:{suffix}`: the name of a key or channel of this deployment.
    pub fn key(&self, suffix: &str) -> String {
        format!("{}:{suffix}", self.prefix)
    }

    /// Ping once, bounded by [`COMMAND_TIMEOUT`], and record the verdict.
    pub async fn check(&self) -> bool {
        let mut conn = self.redis.clone();
        let ok = matches!(
            tokio::time::timeout(
                COMMAND_TIMEOUT,
                redis::cmd("PING").query_async::<String>(&mut conn)
            )
            .await,
            Ok(Ok(_))
        );
        self.record(ok);
        ok
    }

    fn record(&self, ok: bool) {
        let was = self.probe.reachable.swap(ok, Ordering::SeqCst);
        let ms = u64::try_from(self.probe.epoch.elapsed().as_millis()).unwrap_or(u64::MAX);
        self.probe.at_ms.store(ms, Ordering::SeqCst);
        if was != ok {
            if ok {
                tracing::info!(replica_id = %self.replica_id, "Redis answers again");
            } else {
                tracing::warn!(
                    replica_id = %self.replica_id,
                    "Redis does not answer: new runs are refused with coordination_unavailable until it does"
                );
            }
        }
    }

    /// Is Redis reachable, by the latest ping that is recent enough? Before the first probe
    /// ran, the successful connect at start-up counts.
    pub fn reachable(&self) -> bool {
        let at = Duration::from_millis(self.probe.at_ms.load(Ordering::SeqCst));
        self.probe.reachable.load(Ordering::SeqCst)
            && self.probe.epoch.elapsed().saturating_sub(at) < STALE_AFTER
    }

    /// Ping every [`PROBE_INTERVAL`] for as long as the process runs.
    pub fn spawn_probe(&self) {
        let me = self.clone();
        tokio::spawn(async move {
            loop {
                me.check().await;
                tokio::time::sleep(PROBE_INTERVAL).await;
            }
        });
    }
}

/// Who owns a session's live run, as [`Coordination::claim_session`] found it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SessionClaim {
    /// This replica owns it, with this fencing token (the same one while it keeps the lease).
    Owned { token: i64, fresh: bool },
    /// Another replica does, for at most `expires_in` more unless it renews.
    Elsewhere { owner: String, expires_in: Duration },
}

/// Take the session's lease unless another live replica holds it. KEYS: the lease, the
/// session's token counter. ARGV: this replica's id, the TTL in ms, the lowest token the
/// database allows (the session's stored fence: a Redis that lost its data must not hand out an
/// older token), the prefix of the replicas' liveness keys. The lease's value is
/// `<replica id>|<token>`; replica ids never contain `|`. A lease whose holder's liveness key is
/// gone (the replica died or stalled past `cluster.replica_ttl_ms`) is taken over at once,
/// without waiting for the lease's own TTL: the holder's writes are fenced from then on.
const CLAIM: &str = r"
local cur = redis.call('GET', KEYS[1])
if cur then
  local sep = string.find(cur, '|', 1, true)
  local owner = string.sub(cur, 1, sep - 1)
  local tok = string.sub(cur, sep + 1)
  if owner == ARGV[1] then
    redis.call('PEXPIRE', KEYS[1], ARGV[2])
    return {1, tok, owner, 0, 0}
  end
  if redis.call('EXISTS', ARGV[4] .. owner .. ':alive') == 1 then
    return {0, tok, owner, redis.call('PTTL', KEYS[1]), 0}
  end
end
local tok = redis.call('INCR', KEYS[2])
local floor = tonumber(ARGV[3])
if tok <= floor then
  tok = floor + 1
  redis.call('SET', KEYS[2], tok)
end
redis.call('SET', KEYS[1], ARGV[1] .. '|' .. tok, 'PX', ARGV[2])
return {1, tostring(tok), ARGV[1], 0, 1}
";

/// Renew the lease if this replica still holds it with this token. A lease Redis lost (a
/// restart, an eviction) is taken back, unless a newer token was handed out meanwhile.
/// KEYS: the lease, the counter. ARGV: `<replica id>|<token>`, the TTL in ms, the token.
const RENEW: &str = r"
local cur = redis.call('GET', KEYS[1])
if cur == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return 1
end
if not cur then
  local issued = tonumber(redis.call('GET', KEYS[2]) or '0')
  if issued <= tonumber(ARGV[3]) then
    redis.call('SET', KEYS[2], ARGV[3])
    redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
    return 1
  end
end
return 0
";

/// Give the lease up if it is still this replica's with this token.
const RELEASE: &str = r"
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('DEL', KEYS[1])
  return 1
end
return 0
";

static CLAIM_SCRIPT: LazyLock<redis::Script> = LazyLock::new(|| redis::Script::new(CLAIM));
static RENEW_SCRIPT: LazyLock<redis::Script> = LazyLock::new(|| redis::Script::new(RENEW));
static RELEASE_SCRIPT: LazyLock<redis::Script> = LazyLock::new(|| redis::Script::new(RELEASE));

pub(crate) fn ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX).max(1)
}

impl Coordination {
    pub(crate) fn session_keys(&self, session: &str) -> (String, String) {
        (
            self.key(&format!("session:{session}:owner")),
            self.key(&format!("session:{session}:token")),
        )
    }

    /// Own the session's live run for `ttl` (renew with [`Coordination::renew_session`]), or
    /// learn which replica does. `min_token`: the session's fence in the database.
    pub async fn claim_session(
        &self,
        session: &str,
        min_token: i64,
        ttl: Duration,
    ) -> Result<SessionClaim, CoordinationError> {
        let (lease, counter) = self.session_keys(session);
        let mut conn = self.redis.clone();
        let (owned, token, owner, pttl, fresh): (i64, String, String, i64, i64) = CLAIM_SCRIPT
            .key(lease)
            .key(counter)
            .arg(&*self.replica_id)
            .arg(ms(ttl))
            .arg(min_token)
            .arg(self.key("replica:"))
            .invoke_async(&mut conn)
            .await?;
        let token: i64 = token
            .parse()
            .map_err(|_| CoordinationError::Refused(format!("a session lease holds {token:?}")))?;
        Ok(if owned == 1 {
            SessionClaim::Owned {
                token,
                fresh: fresh == 1,
            }
        } else {
            SessionClaim::Elsewhere {
                owner,
                expires_in: Duration::from_millis(u64::try_from(pttl).unwrap_or(0)),
            }
        })
    }

    /// Keep the session's lease for `ttl` more. `false`: it is not ours any more (it expired
    /// and another replica claimed the session): stop writing for it.
    pub async fn renew_session(
        &self,
        session: &str,
        token: i64,
        ttl: Duration,
    ) -> Result<bool, CoordinationError> {
        let (lease, counter) = self.session_keys(session);
        let mut conn = self.redis.clone();
        let renewed: i64 = RENEW_SCRIPT
            .key(lease)
            .key(counter)
            .arg(format!("{}|{token}", self.replica_id))
            .arg(ms(ttl))
            .arg(token)
            .invoke_async(&mut conn)
            .await?;
        Ok(renewed == 1)
    }

    /// Give the session's lease up (its run ended), if it is still ours with `token`.
    pub async fn release_session(
        &self,
        session: &str,
        token: i64,
    ) -> Result<(), CoordinationError> {
        let (lease, _) = self.session_keys(session);
        let mut conn = self.redis.clone();
        let _: i64 = RELEASE_SCRIPT
            .key(lease)
            .arg(format!("{}|{token}", self.replica_id))
            .invoke_async(&mut conn)
            .await?;
        Ok(())
    }
}

impl Coordination {
    /// Publish `payload` on the channel `{prefix}:{suffix}` (at most once, to whoever listens
    /// now).
    pub async fn publish(&self, suffix: &str, payload: &str) -> Result<(), CoordinationError> {
        let mut conn = self.redis.clone();
        let _: i64 = redis::cmd("PUBLISH")
            .arg(self.key(suffix))
            .arg(payload)
            .query_async(&mut conn)
            .await?;
        Ok(())
    }

    /// Listen to the channel `{prefix}:{suffix}` on a connection of its own (a subscribed
    /// connection cannot be shared). The stream ends when the connection is lost.
    pub async fn subscribe(
        &self,
        suffix: &str,
    ) -> Result<redis::aio::PubSubStream, CoordinationError> {
        let mut pubsub = self.client.get_async_pubsub().await?;
        pubsub.subscribe(self.key(suffix)).await?;
        Ok(pubsub.into_on_message())
    }
}

/// Take or keep a cluster-wide duty (one holder at a time): KEYS: the duty's key. ARGV: this
/// replica's id, the TTL in ms. 1: this replica holds it for the TTL; 0: another does.
const CLAIM_DUTY: &str = r"
local cur = redis.call('GET', KEYS[1])
if cur == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return 1
end
if cur then
  return 0
end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
return 1
";

static CLAIM_DUTY_SCRIPT: LazyLock<redis::Script> =
    LazyLock::new(|| redis::Script::new(CLAIM_DUTY));

impl Coordination {
    /// Hold the cluster-wide duty `name` (the retention sweep, say) for `ttl` more, taking it
    /// if nobody holds it: `true` while this replica is the one. A holder that dies leaves it
    /// to the next claimant after `ttl`; call again well within `ttl` to keep it.
    pub async fn claim_duty(&self, name: &str, ttl: Duration) -> Result<bool, CoordinationError> {
        let mut conn = self.redis.clone();
        let held: i64 = CLAIM_DUTY_SCRIPT
            .key(self.key(&format!("duty:{name}")))
            .arg(&*self.replica_id)
            .arg(ms(ttl))
            .invoke_async(&mut conn)
            .await?;
        Ok(held == 1)
    }

    /// Give the duty up (a graceful stop), if this replica holds it.
    pub async fn release_duty(&self, name: &str) -> Result<(), CoordinationError> {
        let mut conn = self.redis.clone();
        let _: i64 = RELEASE_SCRIPT
            .key(self.key(&format!("duty:{name}")))
            .arg(&*self.replica_id)
            .invoke_async(&mut conn)
            .await?;
        Ok(())
    }
}
