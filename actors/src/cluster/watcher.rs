//! Failover (cluster mode, issue 13): every replica says it is alive, and watches for sessions
//! whose owner is not.
//!
//! - **Heartbeat.** `<prefix>:replica:<id>:alive` is set with a TTL of `cluster.replica_ttl_ms`
//!   every quarter of it, from a thread and a Redis connection of its own, so a busy runtime
//!   does not make a live replica look dead. A replica stopped by `kill -9`, or paused past the
//!   TTL, is dead to the others: its session leases can be claimed at once (the claim checks
//!   the holder's key), and its late writes are refused by their fencing tokens.
//! - **Watcher.** Every [`SCAN_EVERY`], each replica lists the sessions that have a run going,
//!   waiting for a person, or queued, and takes over (the session recovers here: it claims the
//!   lease, resumes the run from its checkpoint with the at-most-once rule for a tool that was
//!   running) each one whose lease holder is dead, or whose lease has been free for longer than
//!   a live owner takes to renew it (a Redis that lost its data: the owner takes its lease back
//!   at its next renewal, so a free lease that stays free has no owner). Several replicas may
//!   try at once; the claim lets one win. After Redis was unreachable (every liveness key may
//!   have expired meanwhile) the watcher waits until Redis has answered for longer than
//!   `cluster.replica_ttl_ms`, so live replicas have said so again before anyone counts as
//!   dead.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use agentry_schema::ids::{SessionId, TenantId};
use agentry_schema::tenancy::TenantStatus;
use agentry_store::coordination::{Coordination, LeaseState};
use agentry_store::{PlatformScope, executions, sessions, tenants};

use crate::engine::Engine;
use crate::error::EngineError;
use crate::session::TakeOver;
use crate::tenant::StartSession;

/// How often the watcher looks for sessions to take over.
pub const SCAN_EVERY: Duration = Duration::from_millis(500);

/// Start the heartbeat thread and the watcher (cluster mode).
pub(crate) fn start(engine: &Engine) {
    let Some(coordination) = engine.deps().coordination.clone() else {
        return;
    };
    let ttl = engine.deps().config.replica_ttl;
    let beat = coordination.clone();
    if let Err(e) = std::thread::Builder::new()
        .name("agentry-heartbeat".into())
        .spawn(move || heartbeat(&beat, ttl))
    {
        tracing::error!(error = %e, "starting the replica heartbeat failed: this replica's sessions will be taken over by others");
    }
    engine
        .deps()
        .runtime
        .spawn(watch(engine.clone(), coordination));
}

fn heartbeat(coordination: &Coordination, ttl: Duration) {
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            tracing::error!(error = %e, "the replica heartbeat has no runtime");
            return;
        }
    };
    runtime.block_on(async {
        let every = ttl / 4;
        let answer = Duration::from_millis(1000).min(every);
        let mut conn = None;
        let mut failing = false;
        loop {
            if conn.is_none() {
                conn = tokio::time::timeout(
                    answer,
                    coordination.client().get_multiplexed_async_connection(),
                )
                .await
                .ok()
                .and_then(Result::ok);
            }
            let ok = match conn.as_mut() {
                Some(c) => matches!(
                    tokio::time::timeout(answer, coordination.heartbeat(c, ttl)).await,
                    Ok(Ok(()))
                ),
                None => false,
            };
            if !ok {
                conn = None;
            }
            if ok == failing {
                failing = !ok;
                if failing {
                    tracing::warn!("the replica heartbeat does not reach Redis; once it is out for cluster.replica_ttl_ms, other replicas take this one's sessions over");
                } else {
                    tracing::info!("the replica heartbeat reaches Redis again");
                }
            }
            // While failing, try again sooner: the key must be back before it is missed.
            tokio::time::sleep(if ok { every } else { every.min(Duration::from_millis(200)) })
                .await;
        }
    });
}

async fn watch(engine: Engine, coordination: Coordination) {
    // A live owner renews (or takes back) its lease every third of its TTL: a lease free
    // for longer than that, and a margin, has no owner.
    let free_for = engine.deps().config.session_lease_ttl / 3 + Duration::from_secs(1);
    // After Redis was away every replica's liveness key may have expired: a holder counts as
    // dead only once Redis has answered long enough for a live one to have said so again.
    let settle = engine.deps().config.replica_ttl + Duration::from_secs(1);
    let mut reachable_since: Option<Instant> = None;
    let mut free_since: HashMap<SessionId, Instant> = HashMap::new();
    loop {
        tokio::time::sleep(SCAN_EVERY).await;
        if !coordination.reachable() {
            reachable_since = None;
            continue;
        }
        if reachable_since.get_or_insert_with(Instant::now).elapsed() < settle {
            continue;
        }
        let open =
            match executions::sessions_with_open_runs(&engine.deps().db, &PlatformScope::new())
                .await
            {
                Ok(o) => o,
                Err(e) => {
                    tracing::debug!(error = %e, "the failover watcher could not list open runs");
                    continue;
                }
            };
        free_since.retain(|s, _| open.iter().any(|(_, o)| o == s));
        if open.is_empty() {
            continue;
        }
        let keys: Vec<String> = open.iter().map(|(_, s)| s.to_string()).collect();
        let states = match coordination.lease_states(&keys).await {
            Ok(s) => s,
            Err(e) => {
                tracing::debug!(error = %e, "the failover watcher could not read the leases");
                continue;
            }
        };
        for ((tenant, session), state) in open.into_iter().zip(states) {
            let take = match state {
                LeaseState::Live => {
                    free_since.remove(&session);
                    false
                }
                LeaseState::HolderDead => true,
                LeaseState::Free => {
                    free_since
                        .entry(session)
                        .or_insert_with(Instant::now)
                        .elapsed()
                        >= free_for
                }
            };
            if take {
                free_since.remove(&session);
                if let Err(e) = take_over(&engine, tenant, session).await {
                    tracing::warn!(error = %e, session_id = %session, "taking over a session failed; the next scan tries again");
                }
            }
        }
    }
}

/// Recover the session here: a new actor does as it starts, a live one when told.
async fn take_over(
    engine: &Engine,
    tenant: TenantId,
    session: SessionId,
) -> Result<(), EngineError> {
    let db = &engine.deps().db;
    let Some(tenant) = tenants::get(db, &PlatformScope::new(), tenant).await? else {
        return Ok(());
    };
    if tenant.status == TenantStatus::Suspended {
        return Ok(());
    }
    let Some(session) = sessions::get(db, &tenant.scope(), session).await? else {
        return Ok(());
    };
    let sup = engine.supervisor(&tenant).await?;
    let held = sup
        .send(StartSession {
            session,
            home: None,
        })
        .await?;
    held.addr.send(TakeOver).await?;
    Ok(())
}
