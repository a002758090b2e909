//! Outbound webhooks, for whatever notifies a receiver of the tenant's choosing: A2A push
//! notifications (docs/a2a.md) now, completion webhooks later (issue 28). One module does the
//! sending so every webhook is signed, retried and checked against the network rule the same
//! way:
//!
//! - **Durable**: [`Webhooks::enqueue`] writes the notification to the outbox
//!   (`webhook_deliveries`) and wakes the worker through a bounded channel without waiting (a
//!   full channel is fine: the worker reads the outbox anyway). The worker sends what is due —
//!   after a restart too, on any replica; an attempt is claimed first, so replicas never send
//!   the same attempt at once.
//! - **In order**: the deliveries of one stream (one receiver's notifications about one subject)
//!   go out one at a time, oldest first; different streams go out concurrently, so a slow or
//!   dead receiver delays only its own.
//! - **Signed** by the Standard Webhooks scheme (`webhook-id`, `webhook-timestamp`,
//!   `webhook-signature: v1,<base64 HMAC-SHA256 of "{id}.{timestamp}.{body}">`) with the
//!   tenant's secret (`whsec_…`, made on first use, sealed at rest, readable by a tenant admin
//!   at `GET /api/v1/tenant/webhook-secret`), plus the receiver's own headers (sealed in the
//!   outbox).
//! - **Retried** with exponential backoff ([`backoff`]: 1 s doubling to at most 5 min, jittered)
//!   while the answer is not 2xx, for at most [`DELIVERY_WINDOW`] after the notification was made;
//!   then the delivery is `failed`.
//! - **Under the network rule** of every outbound URL (`tools.allow_private_addresses`,
//!   `tools.allowed_networks`): checked when a URL is configured ([`Webhooks::check_url`]) and on
//!   every attempt, the connection pinned to the addresses checked; redirects are not followed.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use agentry_builtin::BuiltinConfig;
use agentry_builtin::net_guard::{self, GuardedResolver};
use agentry_schema::error::ErrorCode;
use agentry_schema::ids::{RunId, TenantId};
use agentry_sealing::SecretBox;
use agentry_store::webhooks::{self as outbox, Delivery, NewDelivery, Outcome};
use agentry_store::{PlatformScope, TenantScope};
use agentry_tools::tool::ToolError;
use backon::BackoffBuilder;
use base64::Engine;
use chrono::Utc;
use sea_orm::DatabaseConnection;
use tokio::sync::{Semaphore, mpsc};

use crate::error::{ApiError, ApiResult};

/// How long a notification is tried for, from when it was made.
pub const DELIVERY_WINDOW: Duration = Duration::from_secs(3600);
/// One attempt's time limit (the spec recommends 10-30 s).
pub const ATTEMPT_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a claimed attempt keeps its delivery from other workers: well over an attempt.
const CLAIM: Duration = Duration::from_secs(60);
/// The longest the worker sleeps without being woken (another replica's new deliveries).
const IDLE_POLL: Duration = Duration::from_secs(5);
/// Pending deliveries read per pass; attempts in flight at once.
const SCAN: u64 = 500;
const IN_FLIGHT: usize = 32;
/// The Standard Webhooks secret prefix.
const SECRET_PREFIX: &str = "whsec_";
/// Response bodies kept in `last_error`, at most.
const ERROR_BODY: usize = 512;

/// The retry schedule: the delay before attempt `n + 1` after `n` failed attempts.
pub fn backoff(failed: u32) -> Duration {
    backon::ExponentialBuilder::default()
        .with_min_delay(Duration::from_secs(1))
        .with_factor(2.0)
        .with_max_delay(Duration::from_secs(300))
        .with_jitter()
        .with_max_times(failed as usize + 1)
        .build()
        .nth(failed.saturating_sub(1) as usize)
        .unwrap_or(Duration::from_secs(300))
}

/// A notification for [`Webhooks::enqueue`].
pub struct Outgoing<'a> {
    /// Deliveries of one stream go out in order, one at a time.
    pub stream: &'a str,
    /// What made it (`a2a_push`).
    pub source: &'a str,
    pub url: &'a str,
    /// Sent with every attempt besides the signature headers: the content type, the receiver's
    /// own credentials. Sealed at rest.
    pub headers: Vec<(String, String)>,
    pub body: &'a str,
}

pub struct Webhooks {
    db: DatabaseConnection,
    secrets: Option<SecretBox>,
    policy: BuiltinConfig,
    http: reqwest::Client,
    wake: mpsc::Sender<()>,
    woken: Mutex<Option<mpsc::Receiver<()>>>,
    /// Tenants' signing keys, opened (a secret never changes once made).
    keys: Mutex<HashMap<TenantId, Arc<Vec<u8>>>>,
}

fn no_key() -> ApiError {
    ApiError::new(
        ErrorCode::ServiceUnavailable,
        "this server has no encryption key (AGENTRY_MCP__ENCRYPTION_KEY), so it cannot keep \
         webhook secrets or credentials; ask the platform operator",
    )
}

impl Webhooks {
    pub fn new(
        db: DatabaseConnection,
        secrets: Option<SecretBox>,
        policy: &BuiltinConfig,
    ) -> Arc<Webhooks> {
        let guard = Arc::new(GuardedResolver::new(policy));
        let http = reqwest::Client::builder()
            .no_proxy()
            .dns_resolver(guard)
            .redirect(reqwest::redirect::Policy::none())
            .timeout(ATTEMPT_TIMEOUT)
            .build()
            .unwrap_or_default();
        let (wake, woken) = mpsc::channel(1);
        Arc::new(Webhooks {
            db,
            secrets,
            policy: policy.clone(),
            http,
            wake,
            woken: Mutex::new(Some(woken)),
            keys: Mutex::default(),
        })
    }

    /// Start the delivery worker (once; on the current runtime).
    pub fn start(self: &Arc<Self>, shutdown: tokio_util::sync::CancellationToken) {
        let Some(woken) = self.woken.lock().unwrap_or_else(|p| p.into_inner()).take() else {
            return;
        };
        let me = self.clone();
        tokio::spawn(async move {
            tokio::select! {
                () = me.work(woken) => {}
                () = shutdown.cancelled() => {}
            }
        });
    }

    fn sealer(&self) -> ApiResult<&SecretBox> {
        self.secrets.as_ref().ok_or_else(no_key)
    }

    /// Seal a receiver's secret (a token, credentials) for storage.
    pub fn seal(&self, secret: &str) -> ApiResult<String> {
        self.sealer()?
            .seal(secret)
            .map_err(|e| ApiError::internal("sealing a webhook credential", e))
    }

    /// Open what [`Webhooks::seal`] sealed.
    pub fn open(&self, sealed: &str) -> ApiResult<String> {
        self.sealer()?
            .open(sealed)
            .map_err(|e| ApiError::internal("opening a webhook credential", e))
    }

    /// Refuse a receiver URL the network rule refuses (or that does not resolve), as a
    /// validation error of `field`.
    pub async fn check_url(&self, field: &str, url: &str) -> ApiResult<()> {
        match net_guard::check_url(url, &self.policy).await {
            Ok(_) => Ok(()),
            Err(ToolError::Failed { message, .. }) => Err(ApiError::validation(
                field,
                format!(
                    "the webhook URL is refused: {message}; give a host name that resolves, or an \
                     IP address"
                ),
            )),
            Err(e) => Err(ApiError::validation(
                field,
                format!("the webhook URL is refused: {e}"),
            )),
        }
    }

    /// The tenant's signing secret (`whsec_` and base64), made on first use.
    pub async fn tenant_secret(&self, scope: &TenantScope) -> ApiResult<String> {
        let sealer = self.sealer()?;
        let sealed = match outbox::get_secret(&self.db, scope).await? {
            Some(s) => s,
            None => {
                let fresh = format!(
                    "{SECRET_PREFIX}{}",
                    base64::engine::general_purpose::STANDARD.encode(rand::random::<[u8; 32]>())
                );
                let sealed = sealer
                    .seal(&fresh)
                    .map_err(|e| ApiError::internal("sealing the webhook secret", e))?;
                outbox::put_secret_once(&self.db, scope, &sealed).await?
            }
        };
        sealer
            .open(&sealed)
            .map_err(|e| ApiError::internal("opening the webhook secret", e))
    }

    async fn signing_key(&self, scope: &TenantScope) -> ApiResult<Arc<Vec<u8>>> {
        let tenant = scope.tenant_id();
        if let Some(k) = self
            .keys
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&tenant)
        {
            return Ok(k.clone());
        }
        let secret = self.tenant_secret(scope).await?;
        let key = base64::engine::general_purpose::STANDARD
            .decode(secret.trim_start_matches(SECRET_PREFIX))
            .map_err(|e| ApiError::internal("the webhook secret", e))?;
        let key = Arc::new(key);
        self.keys
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(tenant, key.clone());
        Ok(key)
    }

    /// Queue a notification: stored first, then the worker is woken (never waited for).
    pub async fn enqueue(&self, scope: &TenantScope, n: Outgoing<'_>) -> ApiResult<()> {
        let headers_sealed = if n.headers.is_empty() {
            None
        } else {
            Some(
                self.sealer()?
                    .seal_json(&n.headers)
                    .map_err(|e| ApiError::internal("sealing webhook headers", e))?,
            )
        };
        let msg_id = format!("msg_{}", uuid::Uuid::now_v7().simple());
        let give_up_at = Utc::now()
            + chrono::Duration::from_std(DELIVERY_WINDOW).unwrap_or(chrono::Duration::hours(1));
        outbox::enqueue(
            &self.db,
            scope,
            NewDelivery {
                msg_id: &msg_id,
                stream: n.stream,
                source: n.source,
                url: n.url,
                headers_sealed,
                payload: n.body,
                give_up_at,
            },
        )
        .await?;
        self.poke();
        Ok(())
    }

    fn poke(&self) {
        // Full: the worker is to look anyway.
        let _ = self.wake.try_send(());
    }

    async fn work(self: Arc<Self>, mut woken: mpsc::Receiver<()>) {
        let platform = PlatformScope::new();
        let slots = Arc::new(Semaphore::new(IN_FLIGHT));
        loop {
            let now = Utc::now();
            match outbox::due(&self.db, &platform, now, SCAN).await {
                Ok(due) => {
                    for d in due {
                        let Ok(slot) = slots.clone().acquire_owned().await else {
                            return;
                        };
                        let until = Utc::now()
                            + chrono::Duration::from_std(CLAIM).unwrap_or(chrono::Duration::MAX);
                        match outbox::claim(&self.db, &platform, &d, until).await {
                            Ok(true) => {
                                let me = self.clone();
                                tokio::spawn(async move {
                                    me.attempt(d).await;
                                    drop(slot);
                                    me.poke();
                                });
                            }
                            Ok(false) => {}
                            Err(e) => {
                                tracing::warn!(error = %e, "claiming a webhook delivery failed")
                            }
                        }
                    }
                }
                Err(e) => tracing::warn!(error = %e, "reading the webhook outbox failed"),
            }
            let sleep = match outbox::next_due(&self.db, &platform).await {
                Ok(Some(at)) => (at - Utc::now()).to_std().unwrap_or(Duration::ZERO),
                _ => IDLE_POLL,
            }
            .clamp(Duration::from_millis(50), IDLE_POLL);
            tokio::select! {
                w = woken.recv() => if w.is_none() { return },
                () = tokio::time::sleep(sleep) => {}
            }
        }
    }

    async fn attempt(&self, d: Delivery) {
        let platform = PlatformScope::new();
        let result = self.send(&d).await;
        let outcome = match result {
            Ok(status) => Outcome::Delivered { status },
            Err(Failure {
                status,
                error,
                retry,
            }) => {
                let next = Utc::now()
                    + chrono::Duration::from_std(backoff(d.attempts as u32 + 1))
                        .unwrap_or(chrono::Duration::MAX);
                let next = (retry && next < d.give_up_at).then_some(next);
                tracing::info!(
                    delivery = d.id, url = %d.url, attempts = d.attempts + 1, error = %error,
                    retry_at = ?next, "a webhook delivery failed"
                );
                Outcome::Failed {
                    status,
                    error,
                    next,
                }
            }
        };
        if let Err(e) = outbox::record(&self.db, &platform, &d, outcome).await {
            tracing::warn!(error = %e, delivery = d.id, "recording a webhook attempt failed");
        }
    }

    async fn send(&self, d: &Delivery) -> Result<i32, Failure> {
        let scope = PlatformScope::new().tenant(d.tenant_id);
        // The network rule, on every attempt (an IP literal never reaches the resolver).
        if let Err(e) = net_guard::check_url(&d.url, &self.policy).await {
            let retry = matches!(e, ToolError::Failed { .. });
            return Err(Failure::new(None, format!("URL refused: {e}"), retry));
        }
        let key = self
            .signing_key(&scope)
            .await
            .map_err(|e| Failure::new(None, e.message, true))?;
        let headers: Vec<(String, String)> = match &d.headers_sealed {
            None => Vec::new(),
            Some(sealed) => self
                .sealer()
                .and_then(|s| {
                    s.open_json(sealed, "webhook headers")
                        .map_err(|e| ApiError::internal("opening webhook headers", e))
                })
                .map_err(|e| Failure::new(None, e.message, false))?,
        };
        let timestamp = Utc::now().timestamp();
        let signature = standardwebhooks::Webhook::from_bytes(key.to_vec())
            .and_then(|w| w.sign(&d.msg_id, timestamp, d.payload.as_bytes()))
            .map_err(|e| Failure::new(None, format!("signing: {e}"), false))?;
        let mut req = self
            .http
            .post(&d.url)
            .header("webhook-id", &d.msg_id)
            .header("webhook-timestamp", timestamp.to_string())
            .header("webhook-signature", signature)
            .body(d.payload.clone());
        for (name, value) in &headers {
            req = req.header(name, value);
        }
        match req.send().await {
            Ok(res) if res.status().is_success() => Ok(res.status().as_u16() as i32),
            Ok(res) => {
                let status = res.status().as_u16() as i32;
                let body = res.text().await.unwrap_or_default();
                let body: String = body.chars().take(ERROR_BODY).collect();
                Err(Failure::new(
                    Some(status),
                    format!("the receiver answered {status}: {body}"),
                    true,
                ))
            }
            Err(e) => Err(Failure::new(None, format!("{e}"), true)),
        }
    }
}

struct Failure {
    status: Option<i32>,
    error: String,
    /// Worth another attempt (a refused URL is not).
    retry: bool,
}

impl Failure {
    fn new(status: Option<i32>, error: String, retry: bool) -> Failure {
        Failure {
            status,
            error,
            retry,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_from_a_second_up_to_five_minutes() {
        for (failed, low, high) in [(1, 1, 2), (2, 2, 4), (3, 4, 8), (12, 300, 600)] {
            let d = backoff(failed).as_secs_f64();
            assert!(
                (low as f64..=high as f64).contains(&d),
                "after {failed} failures: {d}"
            );
        }
    }
}

/// The A2A tasks this process watches for their push notifications (one watcher per task,
/// whatever its number of configs). Here, below both the state and the A2A adapter.
#[derive(Default, Clone)]
pub struct Watchers(Arc<Mutex<HashSet<RunId>>>);

impl Watchers {
    pub(crate) fn start(&self, task: RunId) -> bool {
        self.0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(task)
    }

    pub(crate) fn stop(&self, task: RunId) {
        self.0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&task);
    }
}
