//! Each session's live event stream in Redis (cluster mode): the owner of a session appends
//! every event it sends to the Redis stream `<prefix>:session:<id>:events` (entry id
//! `<seq>-0`, so the stream is ordered by `seq` and refuses a number twice) and, in the same
//! script, publishes the batch on the channel `<prefix>:events:<id>`, so replicas that watch
//! the session get it at once. The stream keeps the recent events (about
//! [`STREAM_MAXLEN`], for [`STREAM_TTL`] after the last one): a replica that joins late or
//! missed a message reads them back from there, and whatever is older from `session_events`.
//!
//! An append carries the owner's fencing token and is refused once a newer token was handed
//! out for the session (another replica took it over): a paused owner's late events reach no
//! one.

use std::sync::{Arc, LazyLock};
use std::time::Duration;

use super::{Coordination, CoordinationError, ms};

/// About how many events each session's stream keeps (`MAXLEN ~`).
pub const STREAM_MAXLEN: usize = 2000;
/// How long a session's stream lives after its last event.
pub const STREAM_TTL: Duration = Duration::from_secs(600);

/// KEYS: the stream, the session's token counter. ARGV: the token (`""`: unfenced), MAXLEN, the
/// TTL in ms, the channel, then `seq`, JSON pairs in order. Returns -1 when fenced, otherwise
/// how many were appended; those are published as one message, one event per line. An entry
/// whose `seq` the stream already passed (a late duplicate) is skipped.
const APPEND: &str = r"
if ARGV[1] ~= '' then
  local issued = tonumber(redis.call('GET', KEYS[2]) or '0')
  if tonumber(ARGV[1]) < issued then return -1 end
end
local out = {}
for i = 5, #ARGV, 2 do
  local ok = redis.pcall('XADD', KEYS[1], 'MAXLEN', '~', ARGV[2], ARGV[i] .. '-0', 'e', ARGV[i + 1])
  if type(ok) ~= 'table' or not ok.err then
    out[#out + 1] = ARGV[i + 1]
  end
end
if #out > 0 then
  redis.call('PEXPIRE', KEYS[1], ARGV[3])
  redis.call('PUBLISH', ARGV[4], table.concat(out, '\n'))
end
return #out
";

static APPEND_SCRIPT: LazyLock<redis::Script> = LazyLock::new(|| redis::Script::new(APPEND));

/// One event as the stream holds it: its `seq` and its wire JSON.
pub type StreamEvent = (u64, Arc<str>);

impl Coordination {
    fn stream_key(&self, session: &str) -> String {
        self.key(&format!("session:{session}:events"))
    }

    /// The channel a session's events are published on (full name, prefix included).
    pub fn events_channel(&self, session: &str) -> String {
        self.key(&format!("events:{session}"))
    }

    /// The prefix of every session's events channel (to recognize them when they arrive).
    pub fn events_channel_prefix(&self) -> String {
        self.key("events:")
    }

    /// Append events (in `seq` order) to the session's stream and publish them, under `token`.
    /// `Ok(false)`: refused, a newer owner holds the session.
    pub async fn append_events(
        &self,
        session: &str,
        token: Option<i64>,
        events: &[StreamEvent],
    ) -> Result<bool, CoordinationError> {
        if events.is_empty() {
            return Ok(true);
        }
        let (_, counter) = self.session_keys(session);
        let mut invocation = APPEND_SCRIPT.key(self.stream_key(session));
        invocation
            .key(counter)
            .arg(token.map(|t| t.to_string()).unwrap_or_default())
            .arg(STREAM_MAXLEN)
            .arg(ms(STREAM_TTL))
            .arg(self.events_channel(session));
        for (seq, json) in events {
            invocation.arg(*seq).arg(json.as_bytes());
        }
        let mut conn = self.connection();
        let appended: i64 = invocation.invoke_async(&mut conn).await?;
        Ok(appended >= 0)
    }

    /// The stream's events with `after < seq <= upto` (no `upto`: to the end), in order, at
    /// most `count`.
    pub async fn events_after(
        &self,
        session: &str,
        after: u64,
        upto: Option<u64>,
        count: usize,
    ) -> Result<Vec<StreamEvent>, CoordinationError> {
        let end = upto.map_or_else(|| "+".to_string(), |u| format!("{u}-0"));
        let mut conn = self.connection();
        let entries: Vec<(String, Vec<(String, String)>)> = redis::cmd("XRANGE")
            .arg(self.stream_key(session))
            .arg(format!("{}-0", after.saturating_add(1)))
            .arg(end)
            .arg("COUNT")
            .arg(count)
            .query_async(&mut conn)
            .await?;
        Ok(entries
            .into_iter()
            .filter_map(|(id, fields)| {
                let seq = id.split('-').next()?.parse().ok()?;
                let json = fields.into_iter().find(|(k, _)| k == "e")?.1;
                Some((seq, json.into()))
            })
            .collect())
    }

    /// The highest `seq` in the session's stream (`None`: no stream, it expired or was never
    /// written).
    pub async fn last_event(&self, session: &str) -> Result<Option<u64>, CoordinationError> {
        let mut conn = self.connection();
        let entries: Vec<(String, Vec<(String, String)>)> = redis::cmd("XREVRANGE")
            .arg(self.stream_key(session))
            .arg("+")
            .arg("-")
            .arg("COUNT")
            .arg(1)
            .query_async(&mut conn)
            .await?;
        Ok(entries
            .first()
            .and_then(|(id, _)| id.split('-').next()?.parse().ok()))
    }
}
