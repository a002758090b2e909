//! Outbound webhooks: each tenant's signing secret (`webhook_secrets`, sealed by the caller) and
//! the delivery outbox (`webhook_deliveries`). A notification is a row before anything is sent,
//! so a restarted server — or another replica — delivers what was not delivered yet. The
//! deliveries of one `stream` go out one at a time in `id` order ([`due`] hands on only the
//! oldest pending one of each stream), and an attempt is [`claim`]ed first, so two replicas
//! never send the same attempt at once.

use chrono::{DateTime, Utc};
use sea_orm::sea_query::Expr;
use sea_orm::{
    ActiveModelTrait, ColumnTrait, ConnectionTrait, EntityTrait, QueryFilter, QueryOrder,
    QuerySelect, Set,
};

use agentry_schema::entities::{webhook_delivery as delivery, webhook_secret as secret};
use agentry_schema::ids::TenantId;

use crate::{PlatformScope, Result, StoreError, TenantScope, now};

/// A delivery's `status`.
pub const PENDING: &str = "pending";
pub const DELIVERED: &str = "delivered";
pub const FAILED: &str = "failed";

/// The tenant's sealed signing secret, if it has one.
pub async fn get_secret(db: &impl ConnectionTrait, scope: &TenantScope) -> Result<Option<String>> {
    Ok(secret::Entity::find_by_id(scope.uuid())
        .one(db)
        .await?
        .map(|m| m.secret_sealed))
}

/// Keep `sealed` as the tenant's secret unless it has one already (another request or replica
/// made it first); the secret kept, sealed.
pub async fn put_secret_once(
    db: &impl ConnectionTrait,
    scope: &TenantScope,
    sealed: &str,
) -> Result<String> {
    let inserted = secret::ActiveModel {
        tenant_id: Set(scope.uuid()),
        secret_sealed: Set(sealed.to_string()),
        created_at: Set(now()),
    }
    .insert(db)
    .await;
    match inserted {
        Ok(m) => Ok(m.secret_sealed),
        Err(e) => match StoreError::conflict_on_unique(e, String::new) {
            StoreError::Conflict(_) => get_secret(db, scope)
                .await?
                .ok_or_else(|| StoreError::NotFound("the tenant's webhook secret".into())),
            other => Err(other),
        },
    }
}

/// A notification to send.
pub struct NewDelivery<'a> {
    pub msg_id: &'a str,
    pub stream: &'a str,
    pub source: &'a str,
    pub url: &'a str,
    pub headers_sealed: Option<String>,
    pub payload: &'a str,
    pub give_up_at: DateTime<Utc>,
}

/// A stored delivery.
#[derive(Clone)]
pub struct Delivery {
    pub id: i64,
    pub tenant_id: TenantId,
    pub msg_id: String,
    pub stream: String,
    pub source: String,
    pub url: String,
    pub headers_sealed: Option<String>,
    pub payload: String,
    pub status: String,
    pub attempts: i32,
    pub next_attempt_at: DateTime<Utc>,
    pub give_up_at: DateTime<Utc>,
    pub last_status: Option<i32>,
    pub last_error: Option<String>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

impl std::fmt::Debug for Delivery {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Delivery")
            .field("id", &self.id)
            .field("msg_id", &self.msg_id)
            .field("stream", &self.stream)
            .field("url", &self.url)
            .field("status", &self.status)
            .field("attempts", &self.attempts)
            .finish_non_exhaustive()
    }
}

fn of(m: delivery::Model) -> Delivery {
    Delivery {
        id: m.id,
        tenant_id: TenantId(m.tenant_id),
        msg_id: m.msg_id,
        stream: m.stream,
        source: m.source,
        url: m.url,
        headers_sealed: m.headers_sealed,
        payload: m.payload,
        status: m.status,
        attempts: m.attempts,
        next_attempt_at: m.next_attempt_at,
        give_up_at: m.give_up_at,
        last_status: m.last_status,
        last_error: m.last_error,
        created_at: m.created_at,
        updated_at: m.updated_at,
    }
}

/// Queue a notification; due at once.
pub async fn enqueue(
    db: &impl ConnectionTrait,
    scope: &TenantScope,
    d: NewDelivery<'_>,
) -> Result<i64> {
    let t = now();
    let m = delivery::ActiveModel {
        tenant_id: Set(scope.uuid()),
        msg_id: Set(d.msg_id.to_string()),
        stream: Set(d.stream.to_string()),
        source: Set(d.source.to_string()),
        url: Set(d.url.to_string()),
        headers_sealed: Set(d.headers_sealed),
        payload: Set(d.payload.to_string()),
        status: Set(PENDING.to_string()),
        attempts: Set(0),
        next_attempt_at: Set(t),
        give_up_at: Set(d.give_up_at),
        last_status: Set(None),
        last_error: Set(None),
        created_at: Set(t),
        updated_at: Set(t),
        ..Default::default()
    }
    .insert(db)
    .await?;
    Ok(m.id)
}

/// The deliveries to attempt now, across tenants: the oldest pending one of each stream whose
/// next attempt is due (a later one of a stream waits for it), among the `scan` oldest pending.
pub async fn due(
    db: &impl ConnectionTrait,
    _platform: &PlatformScope,
    at: DateTime<Utc>,
    scan: u64,
) -> Result<Vec<Delivery>> {
    let pending = delivery::Entity::find()
        .filter(delivery::Column::Status.eq(PENDING))
        .order_by_asc(delivery::Column::Id)
        .limit(scan)
        .all(db)
        .await?;
    let mut seen = std::collections::HashSet::new();
    Ok(pending
        .into_iter()
        .filter(|m| seen.insert((m.tenant_id, m.stream.clone())))
        .filter(|m| m.next_attempt_at <= at)
        .map(of)
        .collect())
}

/// The earliest next attempt of a pending delivery, for the worker's sleep.
pub async fn next_due(
    db: &impl ConnectionTrait,
    _platform: &PlatformScope,
) -> Result<Option<DateTime<Utc>>> {
    Ok(delivery::Entity::find()
        .filter(delivery::Column::Status.eq(PENDING))
        .order_by_asc(delivery::Column::NextAttemptAt)
        .one(db)
        .await?
        .map(|m| m.next_attempt_at))
}

/// Take `d`'s attempt: push its next attempt to `until` (so no other worker starts it meanwhile)
/// if nobody took it since it was read. Whether this worker has it.
pub async fn claim(
    db: &impl ConnectionTrait,
    _platform: &PlatformScope,
    d: &Delivery,
    until: DateTime<Utc>,
) -> Result<bool> {
    let r = delivery::Entity::update_many()
        .col_expr(delivery::Column::NextAttemptAt, Expr::value(until))
        .filter(delivery::Column::Id.eq(d.id))
        .filter(delivery::Column::Status.eq(PENDING))
        .filter(delivery::Column::NextAttemptAt.eq(d.next_attempt_at))
        .exec(db)
        .await?;
    Ok(r.rows_affected == 1)
}

/// How an attempt went.
pub enum Outcome {
    /// The receiver answered 2xx.
    Delivered { status: i32 },
    /// It did not; try again at `next` (or give up: `next` is `None`).
    Failed {
        status: Option<i32>,
        error: String,
        next: Option<DateTime<Utc>>,
    },
}

/// Record an attempt of `d`.
pub async fn record(
    db: &impl ConnectionTrait,
    _platform: &PlatformScope,
    d: &Delivery,
    outcome: Outcome,
) -> Result<()> {
    let t = now();
    let mut am = delivery::ActiveModel {
        id: Set(d.id),
        attempts: Set(d.attempts + 1),
        updated_at: Set(t),
        ..Default::default()
    };
    match outcome {
        Outcome::Delivered { status } => {
            am.status = Set(DELIVERED.to_string());
            am.last_status = Set(Some(status));
            am.last_error = Set(None);
        }
        Outcome::Failed {
            status,
            error,
            next,
        } => {
            am.last_status = Set(status);
            am.last_error = Set(Some(error));
            match next {
                Some(next) => am.next_attempt_at = Set(next),
                None => am.status = Set(FAILED.to_string()),
            }
        }
    }
    am.update(db).await?;
    Ok(())
}

/// A tenant's deliveries of the streams starting with `prefix`, newest first (at most `limit`).
pub async fn list(
    db: &impl ConnectionTrait,
    scope: &TenantScope,
    prefix: &str,
    limit: u64,
) -> Result<Vec<Delivery>> {
    Ok(delivery::Entity::find()
        .filter(delivery::Column::TenantId.eq(scope.uuid()))
        .filter(delivery::Column::Stream.starts_with(prefix))
        .order_by_desc(delivery::Column::Id)
        .limit(limit)
        .all(db)
        .await?
        .into_iter()
        .map(of)
        .collect())
}
