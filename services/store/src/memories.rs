//! Long-term memories (docs/memory.md): a user's own, an assistant's shared knowledge and the
//! tenant's, each with an optional expiry, where it came from, and the embedding of its content.
//!
//! This module stores and filters; ranking by meaning is the memory service's
//! (`agentry_builtin::memory`). Every read here leaves out expired memories, and every query
//! is of one tenant ([`TenantScope`]).

use chrono::{DateTime, Utc};
use sea_orm::sea_query::{Expr, Func};
use sea_orm::{
    ActiveModelTrait, ColumnTrait, Condition, ConnectionTrait, EntityTrait, PaginatorTrait,
    QueryFilter, QueryOrder, QuerySelect, Set,
};
use serde_json::Value;

use agentry_schema::entities::memory;
use agentry_schema::ids::{MemoryId, RunId, SessionId, TenantId, UserId};
use agentry_schema::memory::MemoryScope;

use crate::{PageRequest, Result, TenantScope, corrupt, now, sanitize_json, sanitize_text};

/// A stored vector and the model that made it: vectors of two models do not compare.
#[derive(Debug, Clone, PartialEq)]
pub struct Embedding {
    pub model: String,
    pub vector: Vec<f32>,
}

impl Embedding {
    /// Little-endian `f32`s: the same bytes on every backend, 4 bytes a dimension.
    fn to_bytes(&self) -> Vec<u8> {
        self.vector.iter().flat_map(|f| f.to_le_bytes()).collect()
    }

    fn from_bytes(model: String, bytes: &[u8]) -> Option<Self> {
        if bytes.is_empty() || !bytes.len().is_multiple_of(4) {
            return None;
        }
        let vector = bytes
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect();
        Some(Embedding { model, vector })
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct Memory {
    pub id: MemoryId,
    pub tenant_id: TenantId,
    /// The owner of a `user` memory; the author of a shared one.
    pub user_id: UserId,
    pub scope: MemoryScope,
    /// The assistant of an `assistant` memory.
    pub assistant_id: Option<String>,
    /// `fact`, `preference`, `decision` or `context`.
    pub kind: String,
    pub content: String,
    pub metadata: Value,
    pub embedding: Option<Embedding>,
    pub source_session_id: Option<SessionId>,
    pub source_run_id: Option<RunId>,
    pub expires_at: Option<DateTime<Utc>>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

impl TryFrom<memory::Model> for Memory {
    type Error = crate::StoreError;
    fn try_from(m: memory::Model) -> Result<Self> {
        let scope = MemoryScope::parse(&m.scope)
            .ok_or_else(|| corrupt("memories.scope", format!("unknown scope {:?}", m.scope)))?;
        let embedding = match (m.embedding_model, m.embedding) {
            (Some(model), Some(bytes)) => Embedding::from_bytes(model, &bytes),
            _ => None,
        };
        Ok(Memory {
            id: MemoryId(m.id),
            tenant_id: m.tenant_id.into(),
            user_id: m.user_id.into(),
            scope,
            assistant_id: m.assistant_id,
            kind: m.kind,
            content: m.content,
            metadata: m.metadata,
            embedding,
            source_session_id: m.source_session_id.map(SessionId),
            source_run_id: m.source_run_id.map(RunId),
            expires_at: m.expires_at,
            created_at: m.created_at,
            updated_at: m.updated_at,
        })
    }
}

fn convert(rows: Vec<memory::Model>) -> Result<Vec<Memory>> {
    rows.into_iter().map(Memory::try_from).collect()
}

#[derive(Debug, Clone, PartialEq)]
pub struct NewMemory {
    /// The owner of a `user` memory; the author of a shared one.
    pub user_id: UserId,
    pub scope: MemoryScope,
    /// Set for (and only for) the `assistant` scope.
    pub assistant_id: Option<String>,
    pub kind: String,
    pub content: String,
    pub metadata: Value,
    pub embedding: Option<Embedding>,
    pub source_session_id: Option<SessionId>,
    pub source_run_id: Option<RunId>,
    pub expires_at: Option<DateTime<Utc>>,
}

impl NewMemory {
    /// A `fact` of `user`'s own, without expiry, source or embedding.
    pub fn of_user(user_id: UserId, content: impl Into<String>) -> Self {
        NewMemory {
            user_id,
            scope: MemoryScope::User,
            assistant_id: None,
            kind: "fact".into(),
            content: content.into(),
            metadata: Value::Object(Default::default()),
            embedding: None,
            source_session_id: None,
            source_run_id: None,
            expires_at: None,
        }
    }
}

pub async fn create(
    db: &impl ConnectionTrait,
    scope: &TenantScope,
    new: NewMemory,
) -> Result<Memory> {
    let ts = now();
    let (model, bytes) = match &new.embedding {
        Some(e) => (Some(e.model.clone()), Some(e.to_bytes())),
        None => (None, None),
    };
    memory::ActiveModel {
        id: Set(MemoryId::new().0),
        tenant_id: Set(scope.uuid()),
        user_id: Set(new.user_id.0),
        scope: Set(new.scope.as_str().to_string()),
        assistant_id: Set(new.assistant_id),
        kind: Set(new.kind),
        content: Set(sanitize_text(new.content)),
        metadata: Set(sanitize_json(new.metadata)),
        embedding: Set(bytes),
        embedding_model: Set(model),
        source_session_id: Set(new.source_session_id.map(|s| s.0)),
        source_run_id: Set(new.source_run_id.map(|r| r.0)),
        expires_at: Set(new.expires_at),
        created_at: Set(ts),
        updated_at: Set(ts),
    }
    .insert(db)
    .await?
    .try_into()
}

fn live(now: DateTime<Utc>) -> Condition {
    Condition::any()
        .add(memory::Column::ExpiresAt.is_null())
        .add(memory::Column::ExpiresAt.gt(now))
}

/// Who reads: a user, talking to an assistant (or to none, over REST).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reader {
    pub user_id: UserId,
    /// The assistant whose `assistant` memories are in view; `None`: every assistant's (the
    /// tenant's users may read all shared knowledge).
    pub assistant_id: Option<String>,
}

/// The memories `reader` sees among `scopes`: its own `user` ones, every `tenant` one, and the
/// `assistant` ones of its assistant.
fn visible(reader: &Reader, scopes: &[MemoryScope]) -> Condition {
    let mut any = Condition::any();
    for s in scopes {
        let c = Condition::all().add(memory::Column::Scope.eq(s.as_str()));
        any = any.add(match s {
            MemoryScope::User => c.add(memory::Column::UserId.eq(reader.user_id.0)),
            MemoryScope::Tenant => c,
            MemoryScope::Assistant => match &reader.assistant_id {
                Some(a) => c.add(memory::Column::AssistantId.eq(a.as_str())),
                None => c,
            },
        });
    }
    if scopes.is_empty() {
        // No scope asked: nothing, rather than everything.
        any = any.add(memory::Column::Scope.eq("none"));
    }
    any
}

fn of_reader(
    scope: &TenantScope,
    reader: &Reader,
    scopes: &[MemoryScope],
) -> sea_orm::Select<memory::Entity> {
    memory::Entity::find()
        .filter(memory::Column::TenantId.eq(scope.uuid()))
        .filter(live(now()))
        .filter(visible(reader, scopes))
}

/// The unexpired memories `reader` sees in `scopes`, newest first.
pub async fn list(
    db: &impl ConnectionTrait,
    scope: &TenantScope,
    reader: &Reader,
    scopes: &[MemoryScope],
    page: PageRequest,
) -> Result<(Vec<Memory>, u64)> {
    let q = of_reader(scope, reader, scopes);
    let total = q.clone().count(db).await?;
    let items = q
        .order_by_desc(memory::Column::CreatedAt)
        .order_by_desc(memory::Column::Id)
        .limit(page.limit)
        .offset(page.offset)
        .all(db)
        .await?;
    Ok((convert(items)?, total))
}

/// Every unexpired memory `reader` sees in `scopes`, newest first, at most `cap`: the
/// candidates a search ranks in process.
pub async fn candidates(
    db: &impl ConnectionTrait,
    scope: &TenantScope,
    reader: &Reader,
    scopes: &[MemoryScope],
    cap: u64,
) -> Result<Vec<Memory>> {
    convert(
        of_reader(scope, reader, scopes)
            .order_by_desc(memory::Column::CreatedAt)
            .limit(cap)
            .all(db)
            .await?,
    )
}

/// An unexpired memory of the tenant, whoever's it is (the caller decides who may see it).
pub async fn get(
    db: &impl ConnectionTrait,
    scope: &TenantScope,
    id: MemoryId,
) -> Result<Option<Memory>> {
    memory::Entity::find_by_id(id.0)
        .filter(crate::tenant_of_row(
            db.get_database_backend(),
            memory::Column::TenantId,
            scope,
        ))
        .filter(live(now()))
        .one(db)
        .await?
        .map(Memory::try_from)
        .transpose()
}

/// What an update changes; `None` leaves a field.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct MemoryChange {
    pub content: Option<String>,
    pub kind: Option<String>,
    pub expires_at: Option<Option<DateTime<Utc>>>,
    /// A new embedding (`Some(None)`: none, e.g. the content changed and embedding failed).
    pub embedding: Option<Option<Embedding>>,
}

/// Change a memory of the tenant; `None` when there is no such (unexpired) memory.
pub async fn update(
    db: &impl ConnectionTrait,
    scope: &TenantScope,
    id: MemoryId,
    change: MemoryChange,
) -> Result<Option<Memory>> {
    let Some(row) = memory::Entity::find_by_id(id.0)
        .filter(crate::tenant_of_row(
            db.get_database_backend(),
            memory::Column::TenantId,
            scope,
        ))
        .filter(live(now()))
        .one(db)
        .await?
    else {
        return Ok(None);
    };
    let mut am: memory::ActiveModel = row.into();
    if let Some(c) = change.content {
        am.content = Set(sanitize_text(c));
    }
    if let Some(k) = change.kind {
        am.kind = Set(k);
    }
    if let Some(e) = change.expires_at {
        am.expires_at = Set(e);
    }
    if let Some(e) = change.embedding {
        am.embedding_model = Set(e.as_ref().map(|e| e.model.clone()));
        am.embedding = Set(e.as_ref().map(Embedding::to_bytes));
    }
    am.updated_at = Set(now());
    Ok(Some(am.update(db).await?.try_into()?))
}

/// Store the embedding of a memory that had none (or another model's); its `updated_at` stays.
pub async fn set_embedding(
    db: &impl ConnectionTrait,
    scope: &TenantScope,
    id: MemoryId,
    embedding: &Embedding,
) -> Result<()> {
    memory::Entity::update_many()
        .col_expr(memory::Column::Embedding, Expr::value(embedding.to_bytes()))
        .col_expr(
            memory::Column::EmbeddingModel,
            Expr::value(embedding.model.clone()),
        )
        .filter(memory::Column::Id.eq(id.0))
        .filter(crate::tenant_of_row(
            db.get_database_backend(),
            memory::Column::TenantId,
            scope,
        ))
        .exec(db)
        .await?;
    Ok(())
}

pub async fn delete(db: &impl ConnectionTrait, scope: &TenantScope, id: MemoryId) -> Result<bool> {
    Ok(memory::Entity::delete_many()
        .filter(memory::Column::Id.eq(id.0))
        .filter(crate::tenant_of_row(
            db.get_database_backend(),
            memory::Column::TenantId,
            scope,
        ))
        .exec(db)
        .await?
        .rows_affected
        > 0)
}

/// Words too common to say what a query is about (a substring match would find them in
/// nearly every memory).
const STOP_WORDS: [&str; 48] = [
    "a", "an", "the", "and", "or", "of", "to", "in", "on", "at", "for", "with", "we", "our", "us",
    "i", "my", "me", "you", "your", "is", "are", "was", "be", "it", "its", "this", "that", "what",
    "which", "who", "how", "do", "does", "did", "has", "have", "by", "as", "about", "from", "can",
    "will", "would", "should", "there", "any", "some",
];

/// Lowercased words of a query (at most 16, common words left out), for the word match.
pub fn query_words(query: &str) -> Vec<String> {
    query
        .split(|c: char| !c.is_alphanumeric())
        .map(str::to_lowercase)
        .filter(|w| !w.is_empty() && !STOP_WORDS.contains(&w.as_str()))
        .take(16)
        .collect()
}

/// Memories `reader` sees in `scopes` containing any word of `query`, best match first (most
/// words matched, then newest), with the number of words matched. Case-insensitive; works the
/// same on every backend. The search without embeddings.
pub async fn keyword_search(
    db: &impl ConnectionTrait,
    scope: &TenantScope,
    reader: &Reader,
    scopes: &[MemoryScope],
    query: &str,
    limit: u64,
) -> Result<Vec<(usize, Memory)>> {
    let words = query_words(query);
    if words.is_empty() {
        return Ok(Vec::new());
    }
    let mut any = Condition::any();
    for w in &words {
        // LIKE is case-sensitive on PostgreSQL: compare the lowercased content with the
        // (lowercase) word, the same on every backend. Words are letters and digits only, so
        // they hold no LIKE wildcard. SQLite's lower() folds ASCII only; the re-check below
        // decides.
        // (`ExprTrait` is named here only: in scope it would shadow `ColumnTrait::eq` & co.)
        let lowered = Expr::expr(Func::lower(Expr::col((
            memory::Entity,
            memory::Column::Content,
        ))));
        any = any.add(sea_orm::sea_query::ExprTrait::like(
            lowered,
            format!("%{w}%"),
        ));
    }
    let candidates = convert(
        of_reader(scope, reader, scopes)
            .filter(any)
            .order_by_desc(memory::Column::CreatedAt)
            .limit(1000)
            .all(db)
            .await?,
    )?;
    let mut scored: Vec<(usize, Memory)> = candidates
        .into_iter()
        .map(|m| {
            let lc = m.content.to_lowercase();
            (words.iter().filter(|w| lc.contains(w.as_str())).count(), m)
        })
        .filter(|(score, _)| *score > 0)
        .collect();
    scored.sort_by(|a, b| b.0.cmp(&a.0).then(b.1.created_at.cmp(&a.1.created_at)));
    scored.truncate(usize::try_from(limit).unwrap_or(usize::MAX));
    Ok(scored)
}
