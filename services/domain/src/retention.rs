//! The retention sweep (docs/operations.md, "Retention"): every `retention.interval_secs` it
//! deletes sessions idle past `session.retention_days` with everything they own, prunes each
//! session's checkpoints to the newest `retention.checkpoints_per_session` (the newest of a run
//! that is not finished always stays), deletes expired memories, and, with
//! `retention.event_days`, the stored events of runs that ended before then (each run keeps its
//! `done`). Each sweep is logged and counted in `/metrics`.
//!
//! Exactly one sweeper runs: per process on a single node (which holds its database alone), and
//! per cluster in cluster mode, where the replica holding the Redis duty `retention` sweeps. The
//! holder renews the duty every [`DUTY_RENEW`] and keeps it while it lives; when it dies, another
//! replica takes the duty over within [`DUTY_TTL`]. A sweep whose holder loses the duty (Redis
//! away, a pause past the TTL) stops at its next batch.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use agentry_schema::ids::{SessionId, TenantId};
use agentry_store::retention::{self, IdleSession};
use agentry_store::{PlatformScope, tenants};
use chrono::{DateTime, Utc};

use tokio_util::sync::CancellationToken;

use crate::HasDomain;

/// The duty's name in Redis (`<prefix>:duty:retention`).
pub const DUTY: &str = "retention";
/// How long the duty stays with a holder that stopped renewing it.
pub const DUTY_TTL: Duration = Duration::from_secs(30);
/// How often the holder renews it (and the others try to take it).
pub const DUTY_RENEW: Duration = Duration::from_secs(10);

/// Rows looked at per batch: each batch is one short transaction per tenant or session.
const BATCH: u64 = 500;

pub const SWEEPS: &str = "agentry_retention_sweeps_total";
pub const REMOVED: &str = "agentry_retention_removed_total";
pub const SWEEP_SECONDS: &str = "agentry_retention_sweep_duration_seconds";
pub const SWEEPER: &str = "agentry_retention_sweeper";

/// What one sweep removed.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Removed {
    pub sessions: u64,
    pub checkpoints: u64,
    pub memories: u64,
    pub events: u64,
}

/// What the sweep keeps (the `retention` settings and `session.retention_days`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Policy {
    /// Time between two sweeps; the first runs this long after the start.
    pub interval: Duration,
    /// Sessions idle longer than this many days go; 0 keeps them.
    pub session_days: u64,
    /// Checkpoints kept per session, newest first (besides the newest of each unfinished run).
    pub checkpoints_per_session: u64,
    /// Events of runs that ended more than this many days ago go (each run keeps its `done`);
    /// 0 keeps them.
    pub event_days: u64,
}

/// Start the sweeper (and, in cluster mode, the loop that holds its duty) until `shutdown`.
pub fn spawn(host: Arc<impl HasDomain>, policy: Policy, shutdown: CancellationToken) {
    let coordination = host.domain().coordination.cloned();
    let holding = Arc::new(AtomicBool::new(coordination.is_none()));
    metrics::gauge!(SWEEPER).set(if holding.load(Ordering::Relaxed) {
        1.0
    } else {
        0.0
    });
    if let Some(coordination) = coordination {
        let holding = holding.clone();
        let shutdown = shutdown.clone();
        tokio::task::spawn_local(async move {
            loop {
                let held = match coordination.claim_duty(DUTY, DUTY_TTL).await {
                    Ok(held) => held,
                    Err(e) => {
                        tracing::warn!(error = %e, "could not renew the retention duty; not sweeping until Redis answers");
                        false
                    }
                };
                if held != holding.swap(held, Ordering::SeqCst) {
                    tracing::info!(
                        replica_id = coordination.replica_id(),
                        held,
                        "{} the cluster's retention sweep",
                        if held {
                            "this replica runs"
                        } else {
                            "this replica no longer runs"
                        }
                    );
                }
                metrics::gauge!(SWEEPER).set(if held { 1.0 } else { 0.0 });
                tokio::select! {
                    _ = shutdown.cancelled() => {
                        if holding.swap(false, Ordering::SeqCst)
                            && let Err(e) = coordination.release_duty(DUTY).await
                        {
                            tracing::warn!(error = %e, "could not give the retention duty back; it passes on when it expires");
                        }
                        return;
                    }
                    _ = tokio::time::sleep(DUTY_RENEW) => {}
                }
            }
        });
    }
    let mut sweeper = Sweeper {
        host,
        policy,
        holding,
        events_from: None,
    };
    // On the engine's runtime, beside the runs' database writes, not on the main arbiter.
    let runtime = sweeper.host.domain().engine.deps().runtime.clone();
    runtime.spawn(async move {
        let every = sweeper.policy.interval;
        loop {
            tokio::select! {
                _ = shutdown.cancelled() => return,
                _ = tokio::time::sleep(every) => {}
            }
            if !sweeper.holding.load(Ordering::SeqCst) {
                continue;
            }
            let started = Instant::now();
            match sweeper.sweep().await {
                Ok(r) => {
                    let took = started.elapsed();
                    metrics::counter!(SWEEPS).increment(1);
                    metrics::histogram!(SWEEP_SECONDS).record(took.as_secs_f64());
                    for (kind, n) in [
                        ("sessions", r.sessions),
                        ("checkpoints", r.checkpoints),
                        ("memories", r.memories),
                        ("events", r.events),
                    ] {
                        metrics::counter!(REMOVED, "kind" => kind).increment(n);
                    }
                    let total = r.sessions + r.checkpoints + r.memories + r.events;
                    if total > 0 {
                        tracing::info!(
                            sessions = r.sessions,
                            checkpoints = r.checkpoints,
                            memories = r.memories,
                            events = r.events,
                            took_ms = took.as_millis() as u64,
                            "retention sweep removed old data"
                        );
                    } else {
                        tracing::debug!(took_ms = took.as_millis() as u64, "retention sweep: nothing to remove");
                    }
                }
                Err(e) => tracing::warn!(error = %e, "retention sweep stopped early; the next one goes on"),
            }
        }
    });
}

struct Sweeper<H> {
    host: Arc<H>,
    policy: Policy,
    /// This process runs the sweep (always on a single node; the duty's holder in a cluster).
    holding: Arc<AtomicBool>,
    /// Runs that ended before this have had their events trimmed (in this process's life).
    events_from: Option<DateTime<Utc>>,
}

#[derive(Debug, thiserror::Error)]
enum SweepError {
    #[error(transparent)]
    Store(#[from] agentry_store::StoreError),
    #[error(transparent)]
    Engine(#[from] agentry_actors::EngineError),
    #[error("this replica lost the retention duty mid-sweep")]
    DutyLost,
}

impl<H: HasDomain> Sweeper<H> {
    fn still_mine(&self) -> Result<(), SweepError> {
        if self.holding.load(Ordering::SeqCst) {
            Ok(())
        } else {
            Err(SweepError::DutyLost)
        }
    }

    async fn sweep(&mut self) -> Result<Removed, SweepError> {
        let policy = self.policy;
        let now = agentry_store::now();
        let mut removed = Removed::default();
        if policy.session_days > 0 {
            let days = i64::try_from(policy.session_days).unwrap_or(i64::MAX / 2);
            let cutoff = now - chrono::Duration::days(days.min(365 * 1000));
            removed.sessions = self.sessions(cutoff).await?;
        }
        removed.checkpoints = self.checkpoints().await?;
        self.still_mine()?;
        removed.memories =
            retention::expire_memories(self.host.domain().db, &PlatformScope::new(), now).await?;
        if policy.event_days > 0 {
            let days = i64::try_from(policy.event_days).unwrap_or(i64::MAX / 2);
            let before = now - chrono::Duration::days(days.min(365 * 1000));
            removed.events = self.events(before).await?;
        }
        Ok(removed)
    }

    /// Sessions idle since before `cutoff`, tenant by tenant, batch by batch.
    async fn sessions(&self, cutoff: DateTime<Utc>) -> Result<u64, SweepError> {
        let platform = PlatformScope::new();
        let mut total = 0;
        loop {
            self.still_mine()?;
            let batch =
                retention::idle_sessions(self.host.domain().db, &platform, cutoff, BATCH).await?;
            let full = batch.len() as u64 == BATCH;
            let mut by_tenant: BTreeMap<TenantId, Vec<SessionId>> = BTreeMap::new();
            for IdleSession {
                tenant_id,
                session_id,
                ..
            } in batch
            {
                by_tenant.entry(tenant_id).or_default().push(session_id);
            }
            let mut deleted_now = 0;
            for (tenant_id, ids) in by_tenant {
                let Some(tenant) =
                    tenants::get(self.host.domain().db, &platform, tenant_id).await?
                else {
                    continue; // deleted meanwhile, with its sessions
                };
                let gone = retention::delete_idle_sessions(
                    self.host.domain().db,
                    &tenant.scope(),
                    &ids,
                    cutoff,
                )
                .await?;
                self.host
                    .domain()
                    .engine
                    .sessions_swept(&tenant, &gone)
                    .await?;
                deleted_now += gone.len() as u64;
            }
            total += deleted_now;
            // A full batch of which nothing could go (all became active meanwhile) would come
            // back the same: leave the rest to the next sweep.
            if !full || deleted_now == 0 {
                return Ok(total);
            }
        }
    }

    async fn checkpoints(&self) -> Result<u64, SweepError> {
        let keep = self.policy.checkpoints_per_session;
        let mut after = None;
        let mut total = 0;
        loop {
            self.still_mine()?;
            let (looked, deleted, last) = retention::prune_checkpoints(
                self.host.domain().db,
                &PlatformScope::new(),
                keep,
                after,
                BATCH,
            )
            .await?;
            total += deleted;
            if looked < BATCH {
                return Ok(total);
            }
            after = last;
        }
    }

    async fn events(&mut self, before: DateTime<Utc>) -> Result<u64, SweepError> {
        let mut total = 0;
        loop {
            self.still_mine()?;
            let from = self.events_from;
            let (looked, deleted, newest) = retention::trim_events(
                self.host.domain().db,
                &PlatformScope::new(),
                from,
                before,
                BATCH,
            )
            .await?;
            total += deleted;
            self.events_from = newest;
            // Short, or a batch of runs that all ended at the same instant as the last: done
            // for this sweep.
            if looked < BATCH || newest == from {
                return Ok(total);
            }
        }
    }
}
