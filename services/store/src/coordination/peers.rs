//! What replicas tell each other about themselves (cluster mode): a secret that proves a
//! request came from another replica (proxied `/mcp` requests carry it, so they are not counted
//! twice against a quota), and small records every replica can read (which replica holds an MCP
//! session, and where to reach it).

use std::time::Duration;

use rand::distr::{Alphanumeric, SampleString};

use super::{Coordination, CoordinationError, ms};

impl Coordination {
    /// The cluster's peer secret: made by the first replica that asks (`SET NX`), read by the
    /// others. Whoever can read Redis can read it; nobody else can.
    pub async fn peer_secret(&self) -> Result<String, CoordinationError> {
        let key = self.key("peer_secret");
        let mut conn = self.connection();
        let mine = Alphanumeric.sample_string(&mut rand::rng(), 40);
        let (_, secret): (Option<String>, String) = redis::pipe()
            .cmd("SET")
            .arg(&key)
            .arg(&mine)
            .arg("NX")
            .cmd("GET")
            .arg(&key)
            .query_async(&mut conn)
            .await?;
        Ok(secret)
    }

    /// Keep `value` under `{prefix}:{suffix}` for `ttl`.
    pub async fn put(
        &self,
        suffix: &str,
        value: &str,
        ttl: Duration,
    ) -> Result<(), CoordinationError> {
        let mut conn = self.connection();
        let _: () = redis::cmd("SET")
            .arg(self.key(suffix))
            .arg(value)
            .arg("PX")
            .arg(ms(ttl))
            .query_async(&mut conn)
            .await?;
        Ok(())
    }

    /// The value under `{prefix}:{suffix}`, if any.
    pub async fn get(&self, suffix: &str) -> Result<Option<String>, CoordinationError> {
        let mut conn = self.connection();
        Ok(redis::cmd("GET")
            .arg(self.key(suffix))
            .query_async(&mut conn)
            .await?)
    }

    /// Drop `{prefix}:{suffix}`.
    pub async fn forget(&self, suffix: &str) -> Result<(), CoordinationError> {
        let mut conn = self.connection();
        let _: i64 = redis::cmd("DEL")
            .arg(self.key(suffix))
            .query_async(&mut conn)
            .await?;
        Ok(())
    }
}
