//! The platform admin key a server generates on its first start when `auth.admin_key` is not
//! configured: shown once, stored as a visible prefix plus a SHA-256 hash (like tenant keys), in
//! the database so every replica accepts it.
//!
//! There is at most one, in the row `slot = 'platform'`: two replicas starting together both try
//! to insert it, the primary key lets one win, and the other reads the winner's.
//!
//! A key reads `aga_<8 prefix chars>_<40 secret chars>`.

use chrono::{DateTime, Utc};
use rand::distr::{Alphanumeric, SampleString};
use sea_orm::{
    ActiveModelTrait, ConnectionTrait, EntityTrait, Set, SqlErr, TransactionSession,
    TransactionTrait,
};
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

use agentry_schema::entities::platform_admin_key;

use crate::{PlatformScope, Result, now};

pub const ADMIN_KEY_PREFIX: &str = "aga_";
const PREFIX_LEN: usize = ADMIN_KEY_PREFIX.len() + 8;
const SLOT: &str = "platform";

/// The stored key's public facts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredAdminKey {
    pub prefix: String,
    pub created_at: DateTime<Utc>,
}

/// A key just generated: the only time its secret exists outside its holder's hands.
#[derive(Clone)]
pub struct GeneratedAdminKey {
    pub info: StoredAdminKey,
    pub secret: String,
}

impl std::fmt::Debug for GeneratedAdminKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GeneratedAdminKey")
            .field("info", &self.info)
            .finish_non_exhaustive()
    }
}

/// What a start found: a key it generated (to show once), or the one stored before.
#[derive(Debug, Clone)]
pub enum AtStart {
    Generated(GeneratedAdminKey),
    Existing(StoredAdminKey),
}

fn hash(key: &str) -> String {
    hex::encode(Sha256::digest(key.as_bytes()))
}

fn fresh() -> (platform_admin_key::ActiveModel, GeneratedAdminKey) {
    let mut rng = rand::rng();
    let prefix = format!(
        "{ADMIN_KEY_PREFIX}{}",
        Alphanumeric.sample_string(&mut rng, 8)
    );
    let secret = format!("{prefix}_{}", Alphanumeric.sample_string(&mut rng, 40));
    let created_at = now();
    let row = platform_admin_key::ActiveModel {
        slot: Set(SLOT.to_string()),
        prefix: Set(prefix.clone()),
        key_hash: Set(hash(&secret)),
        created_at: Set(created_at),
    };
    (
        row,
        GeneratedAdminKey {
            info: StoredAdminKey { prefix, created_at },
            secret,
        },
    )
}

fn info(m: platform_admin_key::Model) -> StoredAdminKey {
    StoredAdminKey {
        prefix: m.prefix,
        created_at: m.created_at,
    }
}

/// The stored key, if any.
pub async fn get(db: &impl ConnectionTrait, _: &PlatformScope) -> Result<Option<StoredAdminKey>> {
    Ok(platform_admin_key::Entity::find_by_id(SLOT.to_string())
        .one(db)
        .await?
        .map(info))
}

/// Generate and store a key unless one is stored already.
pub async fn ensure(db: &impl ConnectionTrait, scope: &PlatformScope) -> Result<AtStart> {
    if let Some(existing) = get(db, scope).await? {
        return Ok(AtStart::Existing(existing));
    }
    let (row, generated) = fresh();
    match row.insert(db).await {
        Ok(_) => Ok(AtStart::Generated(generated)),
        // Another replica inserted first: its key is the one.
        Err(e)
            if matches!(
                crate::sql_err(&e),
                Some(SqlErr::UniqueConstraintViolation(_))
            ) =>
        {
            match get(db, scope).await? {
                Some(existing) => Ok(AtStart::Existing(existing)),
                None => Err(e.into()),
            }
        }
        Err(e) => Err(e.into()),
    }
}

/// Replace the stored key (or store the first) with a new one; the old one stops working.
pub async fn replace<C: ConnectionTrait + TransactionTrait>(
    db: &C,
    _: &PlatformScope,
) -> Result<GeneratedAdminKey> {
    let (row, generated) = fresh();
    let txn = db.begin().await?;
    platform_admin_key::Entity::delete_by_id(SLOT.to_string())
        .exec(&txn)
        .await?;
    row.insert(&txn).await?;
    txn.commit().await?;
    Ok(generated)
}

/// Remove the stored key: no generated key works any more. True when there was one.
pub async fn delete(db: &impl ConnectionTrait, _: &PlatformScope) -> Result<bool> {
    Ok(platform_admin_key::Entity::delete_by_id(SLOT.to_string())
        .exec(db)
        .await?
        .rows_affected
        > 0)
}

/// Does `key` match the stored key? Compared by hash, in constant time.
pub async fn matches(db: &impl ConnectionTrait, _: &PlatformScope, key: &str) -> Result<bool> {
    if key.len() < PREFIX_LEN || !key.starts_with(ADMIN_KEY_PREFIX) {
        return Ok(false);
    }
    let Some(row) = platform_admin_key::Entity::find_by_id(SLOT.to_string())
        .one(db)
        .await?
    else {
        return Ok(false);
    };
    Ok(bool::from(
        hash(key).as_bytes().ct_eq(row.key_hash.as_bytes()),
    ))
}

/// Does `key` look like a generated platform admin key (so it is worth a database look-up)?
pub fn looks_like(key: &str) -> bool {
    key.starts_with(ADMIN_KEY_PREFIX) && key.len() == PREFIX_LEN + 1 + 40
}
