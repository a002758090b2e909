//! Long-term memories of a user (optionally of one assistant), with a portable text search.

use chrono::{DateTime, Utc};
use sea_orm::{
    ActiveModelTrait, ColumnTrait, Condition, ConnectionTrait, EntityTrait, PaginatorTrait,
    QueryFilter, QueryOrder, QuerySelect, Set,
};
use serde_json::Value;

use agentry_schema::entities::memory;
use agentry_schema::ids::{TenantId, UserId};

use crate::{PageRequest, Result, TenantScope, now, sanitize_json, sanitize_text};

#[derive(Debug, Clone, PartialEq)]
pub struct Memory {
    pub id: uuid::Uuid,
    pub tenant_id: TenantId,
    pub user_id: UserId,
    pub assistant_id: Option<String>,
    /// `fact`, `preference`, `decision` or `context`.
    pub kind: String,
    pub content: String,
    pub metadata: Value,
    pub expires_at: Option<DateTime<Utc>>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

impl From<memory::Model> for Memory {
    fn from(m: memory::Model) -> Self {
        Memory {
            id: m.id,
            tenant_id: m.tenant_id.into(),
            user_id: m.user_id.into(),
            assistant_id: m.assistant_id,
            kind: m.kind,
            content: m.content,
            metadata: m.metadata,
            expires_at: m.expires_at,
            created_at: m.created_at,
            updated_at: m.updated_at,
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct NewMemory {
    pub user_id: UserId,
    pub assistant_id: Option<String>,
    pub kind: String,
    pub content: String,
    pub metadata: Value,
    pub expires_at: Option<DateTime<Utc>>,
}

pub async fn create(
    db: &impl ConnectionTrait,
    scope: &TenantScope,
    new: NewMemory,
) -> Result<Memory> {
    let ts = now();
    Ok(memory::ActiveModel {
        id: Set(uuid::Uuid::now_v7()),
        tenant_id: Set(scope.uuid()),
        user_id: Set(new.user_id.0),
        assistant_id: Set(new.assistant_id),
        kind: Set(new.kind),
        content: Set(sanitize_text(new.content)),
        metadata: Set(sanitize_json(new.metadata)),
        expires_at: Set(new.expires_at),
        created_at: Set(ts),
        updated_at: Set(ts),
    }
    .insert(db)
    .await?
    .into())
}

fn live(now: DateTime<Utc>) -> Condition {
    Condition::any()
        .add(memory::Column::ExpiresAt.is_null())
        .add(memory::Column::ExpiresAt.gt(now))
}

/// A user's unexpired memories, newest first.
pub async fn list(
    db: &impl ConnectionTrait,
    scope: &TenantScope,
    user_id: UserId,
    page: PageRequest,
) -> Result<(Vec<Memory>, u64)> {
    let q = memory::Entity::find()
        .filter(memory::Column::TenantId.eq(scope.uuid()))
        .filter(memory::Column::UserId.eq(user_id.0))
        .filter(live(now()));
    let total = q.clone().count(db).await?;
    let items = q
        .order_by_desc(memory::Column::CreatedAt)
        .limit(page.limit)
        .offset(page.offset)
        .all(db)
        .await?
        .into_iter()
        .map(Memory::from)
        .collect();
    Ok((items, total))
}

pub async fn get(
    db: &impl ConnectionTrait,
    scope: &TenantScope,
    user_id: UserId,
    id: uuid::Uuid,
) -> Result<Option<Memory>> {
    Ok(memory::Entity::find_by_id(id)
        .filter(memory::Column::TenantId.eq(scope.uuid()))
        .filter(memory::Column::UserId.eq(user_id.0))
        .one(db)
        .await?
        .map(Memory::from))
}

pub async fn delete(
    db: &impl ConnectionTrait,
    scope: &TenantScope,
    user_id: UserId,
    id: uuid::Uuid,
) -> Result<bool> {
    Ok(memory::Entity::delete_many()
        .filter(memory::Column::Id.eq(id))
        .filter(memory::Column::TenantId.eq(scope.uuid()))
        .filter(memory::Column::UserId.eq(user_id.0))
        .exec(db)
        .await?
        .rows_affected
        > 0)
}

/// Memories of the user containing any word of `query`, best match first (most words matched,
/// then newest). Case-insensitive; works the same on every backend.
pub async fn search(
    db: &impl ConnectionTrait,
    scope: &TenantScope,
    user_id: UserId,
    query: &str,
    limit: u64,
) -> Result<Vec<Memory>> {
    let words: Vec<String> = query
        .split_whitespace()
        .map(|w| w.to_lowercase())
        .filter(|w| !w.is_empty())
        .take(16)
        .collect();
    if words.is_empty() {
        return Ok(Vec::new());
    }
    let mut any = Condition::any();
    for w in &words {
        // LIKE is case-insensitive on SQLite (ASCII) and MySQL; PostgreSQL needs lower() on both
        // sides, which sea-query's `contains` does not add, so candidates are re-checked below.
        any = any.add(memory::Column::Content.contains(w.as_str()));
        let mut cap = w.clone();
        if let Some(f) = cap.get_mut(0..1) {
            f.make_ascii_uppercase();
        }
        any = any.add(memory::Column::Content.contains(cap.as_str()));
        any = any.add(memory::Column::Content.contains(w.to_uppercase().as_str()));
    }
    let candidates: Vec<Memory> = memory::Entity::find()
        .filter(memory::Column::TenantId.eq(scope.uuid()))
        .filter(memory::Column::UserId.eq(user_id.0))
        .filter(live(now()))
        .filter(any)
        .order_by_desc(memory::Column::CreatedAt)
        .limit(1000)
        .all(db)
        .await?
        .into_iter()
        .map(Memory::from)
        .collect();
    let mut scored: Vec<(usize, Memory)> = candidates
        .into_iter()
        .map(|m| {
            let lc = m.content.to_lowercase();
            (words.iter().filter(|w| lc.contains(w.as_str())).count(), m)
        })
        .filter(|(score, _)| *score > 0)
        .collect();
    scored.sort_by(|a, b| b.0.cmp(&a.0).then(b.1.created_at.cmp(&a.1.created_at)));
    Ok(scored
        .into_iter()
        .take(usize::try_from(limit).unwrap_or(usize::MAX))
        .map(|(_, m)| m)
        .collect())
}
