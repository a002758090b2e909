//! API keys: shown once at creation, stored as a visible prefix plus a SHA-256 hash, compared in
//! constant time, expirable and revocable.
//!
//! A key reads `agk_<8 prefix chars>_<40 secret chars>`; the first 12 characters (`agk_` and the
//! prefix) identify the row, the hash of the whole key authenticates it.

use chrono::{DateTime, Utc};
use rand::distr::{Alphanumeric, SampleString};
use sea_orm::sea_query::Expr;
use sea_orm::{
    ActiveModelTrait, ColumnTrait, ConnectionTrait, EntityTrait, QueryFilter, QueryOrder, Set,
};
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

use agentry_schema::entities::api_key;
use agentry_schema::ids::{ApiKeyId, TenantId, UserId};
use agentry_schema::roles::{Grant, RoleName};
use agentry_schema::tenancy::Role;

use crate::{PlatformScope, Result, StoreError, TenantScope, now, parse_role};

pub const KEY_PREFIX: &str = "agk_";
const PREFIX_LEN: usize = KEY_PREFIX.len() + 8;

#[derive(Debug, Clone, PartialEq)]
pub struct ApiKey {
    pub id: ApiKeyId,
    pub tenant_id: TenantId,
    pub user_id: UserId,
    pub name: String,
    pub prefix: String,
    pub role: Role,
    /// The key's custom role (then `role` is `Member`).
    pub custom_role: Option<RoleName>,
    pub expires_at: Option<DateTime<Utc>>,
    pub revoked_at: Option<DateTime<Utc>>,
    pub last_used_at: Option<DateTime<Utc>>,
    pub created_at: DateTime<Utc>,
}

impl TryFrom<api_key::Model> for ApiKey {
    type Error = StoreError;
    fn try_from(m: api_key::Model) -> Result<Self> {
        let grant = parse_role(&m.role)?;
        Ok(ApiKey {
            id: m.id.into(),
            tenant_id: m.tenant_id.into(),
            user_id: m.user_id.into(),
            name: m.name,
            prefix: m.prefix,
            role: grant.role,
            custom_role: grant.custom,
            expires_at: m.expires_at,
            revoked_at: m.revoked_at,
            last_used_at: m.last_used_at,
            created_at: m.created_at,
        })
    }
}

impl ApiKey {
    pub fn grant(&self) -> Grant {
        Grant {
            role: self.role,
            custom: self.custom_role,
        }
    }
}

/// A freshly created key: the row, and the key itself, which is never retrievable again.
#[derive(Debug, Clone)]
pub struct CreatedKey {
    pub key: ApiKey,
    pub secret: String,
}

fn hash(key: &str) -> String {
    hex::encode(Sha256::digest(key.as_bytes()))
}

pub async fn create(
    db: &impl ConnectionTrait,
    scope: &TenantScope,
    user_id: UserId,
    name: &str,
    role: impl Into<Grant>,
    expires_at: Option<DateTime<Utc>>,
) -> Result<CreatedKey> {
    let role: Grant = role.into();
    let mut rng = rand::rng();
    let prefix = format!("{KEY_PREFIX}{}", Alphanumeric.sample_string(&mut rng, 8));
    let secret = format!("{prefix}_{}", Alphanumeric.sample_string(&mut rng, 40));
    let m = api_key::ActiveModel {
        id: Set(ApiKeyId::new().0),
        tenant_id: Set(scope.uuid()),
        user_id: Set(user_id.0),
        name: Set(name.to_string()),
        prefix: Set(prefix),
        key_hash: Set(hash(&secret)),
        role: Set(role.as_str().to_string()),
        expires_at: Set(expires_at),
        revoked_at: Set(None),
        last_used_at: Set(None),
        created_at: Set(now()),
    }
    .insert(db)
    .await?;
    Ok(CreatedKey {
        key: m.try_into()?,
        secret,
    })
}

/// The tenant's keys (optionally one user's, optionally those whose prefix starts with
/// `prefix`), newest first.
pub async fn list(
    db: &impl ConnectionTrait,
    scope: &TenantScope,
    user_id: Option<UserId>,
    prefix: Option<&str>,
) -> Result<Vec<ApiKey>> {
    let mut q = api_key::Entity::find().filter(api_key::Column::TenantId.eq(scope.uuid()));
    if let Some(u) = user_id {
        q = q.filter(api_key::Column::UserId.eq(u.0));
    }
    if let Some(p) = prefix {
        q = q.filter(api_key::Column::Prefix.starts_with(p));
    }
    q.order_by_desc(api_key::Column::CreatedAt)
        .all(db)
        .await?
        .into_iter()
        .map(ApiKey::try_from)
        .collect()
}

pub async fn get(
    db: &impl ConnectionTrait,
    scope: &TenantScope,
    id: ApiKeyId,
) -> Result<Option<ApiKey>> {
    api_key::Entity::find_by_id(id.0)
        .filter(crate::tenant_of_row(
            db.get_database_backend(),
            api_key::Column::TenantId,
            scope,
        ))
        .one(db)
        .await?
        .map(ApiKey::try_from)
        .transpose()
}

/// Revoke a key. Revoking twice keeps the first revocation time.
pub async fn revoke(
    db: &impl ConnectionTrait,
    scope: &TenantScope,
    id: ApiKeyId,
) -> Result<ApiKey> {
    api_key::Entity::update_many()
        .col_expr(api_key::Column::RevokedAt, Expr::value(now()))
        .filter(api_key::Column::TenantId.eq(scope.uuid()))
        .filter(api_key::Column::Id.eq(id.0))
        .filter(api_key::Column::RevokedAt.is_null())
        .exec(db)
        .await?;
    get(db, scope, id)
        .await?
        .ok_or_else(|| StoreError::NotFound(format!("api key {id}")))
}

#[derive(Debug, Clone, PartialEq)]
pub enum KeyCheck {
    Valid(ApiKey),
    /// Unknown prefix, wrong secret or malformed: indistinguishable to the caller.
    Invalid,
    Expired,
    Revoked,
}

/// Check a presented key. Only the prefix is used to find the row; the hash comparison is
/// constant-time.
pub async fn authenticate(
    db: &impl ConnectionTrait,
    _: &PlatformScope,
    presented: &str,
) -> Result<KeyCheck> {
    if presented.len() < PREFIX_LEN || !presented.starts_with(KEY_PREFIX) || !presented.is_ascii() {
        return Ok(KeyCheck::Invalid);
    }
    let prefix = &presented[..PREFIX_LEN];
    let Some(row) = api_key::Entity::find()
        .filter(api_key::Column::Prefix.eq(prefix))
        .one(db)
        .await?
    else {
        return Ok(KeyCheck::Invalid);
    };
    let matches: bool = hash(presented)
        .as_bytes()
        .ct_eq(row.key_hash.as_bytes())
        .into();
    if !matches {
        return Ok(KeyCheck::Invalid);
    }
    let key = ApiKey::try_from(row)?;
    if key.revoked_at.is_some() {
        return Ok(KeyCheck::Revoked);
    }
    if key.expires_at.is_some_and(|t| t <= Utc::now()) {
        return Ok(KeyCheck::Expired);
    }
    Ok(KeyCheck::Valid(key))
}

/// Record use, at most once a minute per key so authentication is not a write per request.
pub async fn touch_last_used(db: &impl ConnectionTrait, key: &ApiKey) -> Result<()> {
    let ts = now();
    if key
        .last_used_at
        .is_some_and(|t| ts - t < chrono::Duration::seconds(60))
    {
        return Ok(());
    }
    api_key::Entity::update_many()
        .col_expr(api_key::Column::LastUsedAt, Expr::value(ts))
        .filter(api_key::Column::Id.eq(key.id.0))
        .exec(db)
        .await?;
    Ok(())
}
