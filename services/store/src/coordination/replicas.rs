//! Which replicas are alive (cluster mode): each replica keeps the key
//! `<prefix>:replica:<id>:alive` with a short TTL, renewed by a heartbeat on a thread of its
//! own (so a busy runtime cannot starve it). A replica whose key is gone is dead, or stalled
//! past the TTL: its session leases may be taken over at once (see `CLAIM`), and the watcher of
//! every other replica takes its sessions that have a run going.

use std::sync::LazyLock;
use std::time::Duration;

use super::{Coordination, CoordinationError, ms};

/// The state of a session's lease, as [`Coordination::lease_states`] sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LeaseState {
    /// Held by a live replica (maybe this one).
    Live,
    /// Held by a replica whose liveness key is gone: it may be taken over now.
    HolderDead,
    /// Nobody holds it.
    Free,
}

/// KEYS: session lease keys. ARGV: the prefix of the liveness keys. One number per key:
/// 0 live, 1 holder dead, 2 free.
const STATES: &str = r"
local out = {}
for i, k in ipairs(KEYS) do
  local cur = redis.call('GET', k)
  if not cur then
    out[i] = 2
  else
    local sep = string.find(cur, '|', 1, true)
    local owner = string.sub(cur, 1, sep - 1)
    if redis.call('EXISTS', ARGV[1] .. owner .. ':alive') == 1 then out[i] = 0 else out[i] = 1 end
  end
end
return out
";

static STATES_SCRIPT: LazyLock<redis::Script> = LazyLock::new(|| redis::Script::new(STATES));

/// A session's lease holder, as [`Coordination::session_owner`] found it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Owner {
    pub replica: String,
    pub token: i64,
    /// How long the lease lasts unless renewed.
    pub expires_in: Duration,
    /// Its replica's liveness key is there.
    pub alive: bool,
}

impl Coordination {
    fn alive_key(&self, replica: &str) -> String {
        self.key(&format!("replica:{replica}:alive"))
    }

    /// Say this replica is alive for `ttl` more, on `conn` (the heartbeat's own connection).
    pub async fn heartbeat(
        &self,
        conn: &mut impl redis::aio::ConnectionLike,
        ttl: Duration,
    ) -> Result<(), CoordinationError> {
        let _: () = redis::cmd("SET")
            .arg(self.alive_key(self.replica_id()))
            .arg(chrono::Utc::now().timestamp_millis())
            .arg("PX")
            .arg(ms(ttl))
            .query_async(conn)
            .await?;
        Ok(())
    }

    /// Who holds the session's lease, if anyone.
    pub async fn session_owner(&self, session: &str) -> Result<Option<Owner>, CoordinationError> {
        let (lease, _) = self.session_keys(session);
        let mut conn = self.connection();
        let (value, pttl): (Option<String>, i64) = redis::pipe()
            .get(&lease)
            .pttl(&lease)
            .query_async(&mut conn)
            .await?;
        let Some(value) = value else { return Ok(None) };
        let Some((replica, token)) = value.split_once('|') else {
            return Err(CoordinationError::Refused(format!(
                "a session lease holds {value:?}"
            )));
        };
        let alive: bool = redis::cmd("EXISTS")
            .arg(self.alive_key(replica))
            .query_async(&mut conn)
            .await?;
        Ok(Some(Owner {
            replica: replica.to_string(),
            token: token.parse().unwrap_or(0),
            expires_in: Duration::from_millis(u64::try_from(pttl).unwrap_or(0)),
            alive,
        }))
    }

    /// The lease state of each session, in order.
    pub async fn lease_states(
        &self,
        sessions: &[String],
    ) -> Result<Vec<LeaseState>, CoordinationError> {
        if sessions.is_empty() {
            return Ok(Vec::new());
        }
        let mut invocation = STATES_SCRIPT.prepare_invoke();
        for s in sessions {
            invocation.key(self.session_keys(s).0);
        }
        invocation.arg(self.key("replica:"));
        let mut conn = self.connection();
        let states: Vec<i64> = invocation.invoke_async(&mut conn).await?;
        Ok(states
            .into_iter()
            .map(|s| match s {
                0 => LeaseState::Live,
                1 => LeaseState::HolderDead,
                _ => LeaseState::Free,
            })
            .collect())
    }
}
