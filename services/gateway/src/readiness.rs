//! [`DatabaseProbe`]: the last known reachability of the database, refreshed in the background,
//! so `/api/v1/health` and `/api/v1/health/ready` answer at once from memory instead of waiting
//! out a connection attempt while the database is away.
//!
//! The probe pings over a pool of its own (one connection): a request pool busy with work does
//! not make the server look unready, and an unreachable database shows as red within
//! [`PROBE_INTERVAL`] + [`PROBE_TIMEOUT`].

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use sea_orm::DatabaseConnection;

/// Time between two pings.
pub const PROBE_INTERVAL: Duration = Duration::from_millis(250);
/// A ping that has not answered after this long counts as a failure.
pub const PROBE_TIMEOUT: Duration = Duration::from_millis(750);
/// A verdict older than this (the probe itself stuck) no longer counts as reachable.
const STALE_AFTER: Duration = Duration::from_secs(3);

#[derive(Debug, Clone, Copy)]
struct Verdict {
    reachable: bool,
    at: Instant,
}

pub struct DatabaseProbe {
    db: DatabaseConnection,
    last: Mutex<Verdict>,
}

impl DatabaseProbe {
    /// A probe over `db` (its own small pool), believed reachable: the server just opened it.
    pub fn new(db: DatabaseConnection) -> Arc<Self> {
        Arc::new(Self {
            db,
            last: Mutex::new(Verdict {
                reachable: true,
                at: Instant::now(),
            }),
        })
    }

    /// Is the database reachable, by the latest ping that is recent enough?
    pub fn reachable(&self) -> bool {
        let v = *self.last.lock().unwrap_or_else(|p| p.into_inner());
        v.reachable && v.at.elapsed() < STALE_AFTER
    }

    fn record(&self, reachable: bool) {
        let mut last = self.last.lock().unwrap_or_else(|p| p.into_inner());
        if last.reachable != reachable {
            if reachable {
                tracing::info!("readiness: the database answers again");
            } else {
                tracing::warn!("readiness: the database does not answer");
            }
        }
        *last = Verdict {
            reachable,
            at: Instant::now(),
        };
    }

    /// Ping once, bounded by [`PROBE_TIMEOUT`].
    pub async fn check(&self) -> bool {
        let ok = matches!(
            tokio::time::timeout(PROBE_TIMEOUT, agentry_store::ping(&self.db)).await,
            Ok(Ok(()))
        );
        self.record(ok);
        ok
    }

    /// Ping every [`PROBE_INTERVAL`] for as long as the server runs.
    pub fn spawn(self: &Arc<Self>) {
        let probe = self.clone();
        actix_web::rt::spawn(async move {
            loop {
                probe.check().await;
                tokio::time::sleep(PROBE_INTERVAL).await;
            }
        });
    }
}
