//! The Redis side of cluster mode (issue 13): one shared [`redis::aio::ConnectionManager`],
//! built at start-up and handed to everything that coordinates replicas (session leases,
//! quotas, cache invalidation), with this replica's id and the key prefix every key lives under.
//!
//! While Redis is unreachable, commands fail after [`COMMAND_TIMEOUT`] instead of waiting, and
//! the manager reconnects by itself when Redis answers again; [`Coordination::reachable`] is
//! the last verdict of a background ping, for the readiness probe and for refusing new work
//! at once.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use redis::aio::{ConnectionManager, ConnectionManagerConfig};

/// How long one Redis command may take before it counts as failed.
pub const COMMAND_TIMEOUT: Duration = Duration::from_millis(1000);
/// How long opening a connection to Redis may take.
pub const CONNECT_TIMEOUT: Duration = Duration::from_millis(1000);
/// Time between two pings of the background probe.
pub const PROBE_INTERVAL: Duration = Duration::from_millis(250);
/// A verdict older than this (the probe itself stuck) no longer counts as reachable.
const STALE_AFTER: Duration = Duration::from_secs(3);

#[derive(Debug, thiserror::Error)]
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
        })
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
