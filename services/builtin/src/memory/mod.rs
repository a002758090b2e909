//! Long-term memory (docs/memory.md): the [`MemoryBank`] that stores, finds and forgets
//! memories in three scopes, and the `remember`, `recall` and `forget` tools ([`memory_tools`])
//! that call it. The REST API and the agent loop (the top-k memories relevant to each message,
//! automatic extraction after a run) call the same bank.
//!
//! Search is by meaning when an embeddings endpoint is configured: every memory is stored with
//! its vector, and a query ranks the scope's unexpired memories in process (brute force: one
//! cosine per candidate, see docs/memory.md for the scale this suits) by cosine similarity
//! blended with word match and recency ([`rank`]). Without embeddings, or when the endpoint
//! fails, search falls back to matching words, and says so.

pub mod extract;
pub mod rank;
mod tools;

use std::sync::Arc;

use agentry_llm::Embedder;
use agentry_schema::ids::{MemoryId, RunId, SessionId, UserId};
use agentry_schema::memory::{MEMORY_KINDS, MemoryScope};
use agentry_store::memories::{self, Embedding, Memory, MemoryChange, NewMemory, Reader};
use agentry_store::{PageRequest, StoreError, TenantScope};
use chrono::{DateTime, Utc};
use sea_orm::DatabaseConnection;

pub use tools::{SERVICE, memory_tools};

/// Longest memory, in characters.
pub const MAX_CONTENT_CHARS: usize = 4000;

/// Knobs of long-term memory (`[memory]`, `AGENTRY_MEMORY__*`).
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(default)]
pub struct MemoryConfig {
    /// Memories put in each run's system prompt: the most relevant to the message; 0: none.
    pub top_k: usize,
    /// Cosine similarity from which a memory counts as about the query (a shared word also
    /// counts). Depends on the embeddings model; 0.3 suits OpenAI's `text-embedding-3-*`.
    pub min_similarity: f32,
    /// At or above this similarity (or with the same words), a new memory is the same as an
    /// existing one of its scope, which is refreshed instead of repeated.
    pub merge_similarity: f32,
    /// After each completed run, ask the model for facts worth remembering from the exchange
    /// and store them in the user's scope (duplicates merged). Off by default: it costs one
    /// more model call per run.
    pub auto_extract: bool,
    /// Memories a search ranks, newest first; older ones are not searched by meaning. Brute
    /// force in process: see docs/memory.md, "Scale".
    pub max_candidates: u64,
}

impl Default for MemoryConfig {
    fn default() -> Self {
        MemoryConfig {
            top_k: 5,
            min_similarity: 0.3,
            merge_similarity: 0.92,
            auto_extract: false,
            max_candidates: 20_000,
        }
    }
}

/// Who asks: a user of a tenant, talking to an assistant (tools, runs) or to none (REST).
#[derive(Debug, Clone)]
pub struct Who {
    pub tenant: TenantScope,
    pub user_id: UserId,
    /// The assistant of the call; `None` over REST, where every assistant's shared knowledge
    /// is readable.
    pub assistant_id: Option<String>,
    /// Tenant admins write the shared scopes.
    pub admin: bool,
}

impl Who {
    fn reader(&self) -> Reader {
        Reader {
            user_id: self.user_id,
            assistant_id: self.assistant_id.clone(),
        }
    }

    /// Whether this caller sees `m` at all.
    pub fn sees(&self, m: &Memory) -> bool {
        match m.scope {
            MemoryScope::User => m.user_id == self.user_id,
            MemoryScope::Tenant => true,
            MemoryScope::Assistant => self
                .assistant_id
                .as_deref()
                .is_none_or(|a| m.assistant_id.as_deref() == Some(a)),
        }
    }

    /// Whether this caller may change or delete `m` (it sees it, and a shared one only as a
    /// tenant admin).
    pub fn may_write(&self, m: &Memory) -> bool {
        self.sees(m) && (m.scope == MemoryScope::User || self.admin)
    }
}

#[derive(Debug, thiserror::Error)]
pub enum MemoryError {
    #[error("{message}")]
    Invalid {
        field: &'static str,
        message: String,
    },
    #[error("{0}")]
    Forbidden(String),
    #[error("no memory {0} that you can see")]
    NotFound(MemoryId),
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// What to remember.
#[derive(Debug, Clone, PartialEq)]
pub struct Fact {
    pub content: String,
    pub kind: String,
    pub scope: MemoryScope,
    /// The assistant of an `assistant` memory (the caller's own when left out).
    pub assistant_id: Option<String>,
    pub expires_at: Option<DateTime<Utc>>,
    pub source_session_id: Option<SessionId>,
    pub source_run_id: Option<RunId>,
}

impl Fact {
    /// A `fact` of the caller's own scope.
    pub fn new(content: impl Into<String>) -> Self {
        Fact {
            content: content.into(),
            kind: "fact".into(),
            scope: MemoryScope::User,
            assistant_id: None,
            expires_at: None,
            source_session_id: None,
            source_run_id: None,
        }
    }
}

/// A stored memory, and whether it merged into one that was there.
#[derive(Debug, Clone)]
pub struct Remembered {
    pub memory: Memory,
    pub merged: bool,
}

/// How a search found its results.
#[derive(Debug, Clone, PartialEq)]
pub enum SearchMode {
    Semantic,
    /// By words; the reason says why not by meaning.
    Keyword {
        reason: String,
    },
}

impl SearchMode {
    pub fn as_str(&self) -> &'static str {
        match self {
            SearchMode::Semantic => "semantic",
            SearchMode::Keyword { .. } => "keyword",
        }
    }

    pub fn note(&self) -> Option<&str> {
        match self {
            SearchMode::Semantic => None,
            SearchMode::Keyword { reason } => Some(reason),
        }
    }
}

/// Search results, best first, each with its score (0–1).
#[derive(Debug, Clone)]
pub struct Found {
    pub hits: Vec<(Memory, f32)>,
    pub mode: SearchMode,
}

pub const NO_EMBEDDINGS: &str = "no embeddings model is configured, so memories were matched by words, not by meaning (see docs/memory.md)";

/// Which embeddings endpoint embeds a tenant's memories.
#[async_trait::async_trait]
pub trait EmbedderSource: Send + Sync {
    /// The endpoint for `tenant`; `None`: none (memories are matched by words).
    async fn embedder_for(&self, tenant: &TenantScope) -> Option<Arc<dyn Embedder>>;
}

/// One endpoint (or none) for every tenant: the platform's `[embeddings]`.
pub struct PlatformEmbedder(pub Option<Arc<dyn Embedder>>);

#[async_trait::async_trait]
impl EmbedderSource for PlatformEmbedder {
    async fn embedder_for(&self, _tenant: &TenantScope) -> Option<Arc<dyn Embedder>> {
        self.0.clone()
    }
}

type MaybeEmbedder = Option<Arc<dyn Embedder>>;

/// Long-term memory of every tenant: the store, and where each tenant's embeddings come from.
#[derive(Clone)]
pub struct MemoryBank {
    db: DatabaseConnection,
    embedders: Arc<dyn EmbedderSource>,
    config: MemoryConfig,
}

impl MemoryBank {
    /// A bank whose every tenant uses `embedder` (or none).
    pub fn new(
        db: DatabaseConnection,
        embedder: Option<Arc<dyn Embedder>>,
        config: MemoryConfig,
    ) -> Self {
        Self::with_source(db, Arc::new(PlatformEmbedder(embedder)), config)
    }

    /// A bank that asks `embedders` for each tenant's endpoint (a tenant's own model
    /// connection, else the platform's).
    pub fn with_source(
        db: DatabaseConnection,
        embedders: Arc<dyn EmbedderSource>,
        config: MemoryConfig,
    ) -> Self {
        MemoryBank {
            db,
            embedders,
            config,
        }
    }

    pub fn config(&self) -> &MemoryConfig {
        &self.config
    }

    async fn embedder(&self, who: &Who) -> MaybeEmbedder {
        self.embedders.embedder_for(&who.tenant).await
    }

    /// The embeddings of `texts`; `Ok(None)` without an embeddings endpoint.
    async fn embed(
        &self,
        embedder: &MaybeEmbedder,
        texts: &[String],
    ) -> Result<Option<Vec<Embedding>>, String> {
        let Some(e) = embedder else {
            return Ok(None);
        };
        let vectors = e.embed(texts).await.map_err(|err| err.to_string())?;
        Ok(Some(
            vectors
                .into_iter()
                .map(|vector| Embedding {
                    model: e.model().to_string(),
                    vector,
                })
                .collect(),
        ))
    }

    /// The embedding of one text; `None` without an endpoint or when it fails (the memory is
    /// stored anyway and embedded by a later search).
    async fn embed_one(&self, embedder: &MaybeEmbedder, text: &str) -> Option<Embedding> {
        match self.embed(embedder, &[text.to_string()]).await {
            Ok(v) => v.and_then(|mut v| v.pop()),
            Err(e) => {
                tracing::warn!(error = %e, "embedding a memory failed; it is stored without a vector");
                None
            }
        }
    }

    /// Check `fact` for `who`: its fields, and the right to write its scope.
    fn check(&self, who: &Who, fact: &mut Fact) -> Result<(), MemoryError> {
        fact.content = fact.content.trim().to_string();
        if fact.content.is_empty() {
            return Err(MemoryError::Invalid {
                field: "content",
                message: "`content` must not be empty".into(),
            });
        }
        if fact.content.chars().count() > MAX_CONTENT_CHARS {
            return Err(MemoryError::Invalid {
                field: "content",
                message: format!("`content` must be at most {MAX_CONTENT_CHARS} characters"),
            });
        }
        check_kind(&fact.kind)?;
        if let Some(at) = fact.expires_at
            && at <= Utc::now()
        {
            return Err(MemoryError::Invalid {
                field: "expires_at",
                message: "`expires_at` must be in the future".into(),
            });
        }
        if fact.scope.is_shared() && !who.admin {
            return Err(MemoryError::Forbidden(format!(
                "only tenant admins write {} memories; remember it in your own (`user`) scope",
                fact.scope
            )));
        }
        match fact.scope {
            MemoryScope::Assistant => {
                if fact.assistant_id.is_none() {
                    fact.assistant_id = who.assistant_id.clone();
                }
                if fact.assistant_id.is_none() {
                    return Err(MemoryError::Invalid {
                        field: "assistant_id",
                        message: "an `assistant` memory needs `assistant_id`".into(),
                    });
                }
            }
            _ => {
                if fact.assistant_id.is_some() {
                    return Err(MemoryError::Invalid {
                        field: "assistant_id",
                        message: "`assistant_id` is only for the `assistant` scope".into(),
                    });
                }
            }
        }
        Ok(())
    }

    /// Store `fact` for `who`, or refresh the memory of its scope that says the same (same
    /// words, or embeddings at least `merge_similarity` alike): duplicates are merged, not
    /// repeated.
    #[tracing::instrument(skip_all, fields(tenant_id = %who.tenant.tenant_id(), scope = %fact.scope))]
    pub async fn remember(&self, who: &Who, mut fact: Fact) -> Result<Remembered, MemoryError> {
        self.check(who, &mut fact)?;
        let embedder = self.embedder(who).await;
        let embedding = self.embed_one(&embedder, &fact.content).await;
        // The duplicate is looked for among what the new memory's readers would see in its
        // scope (for an assistant memory, that assistant's).
        let owner = Reader {
            user_id: who.user_id,
            assistant_id: fact.assistant_id.clone(),
        };
        let same_scope = memories::candidates(
            &self.db,
            &who.tenant,
            &owner,
            &[fact.scope],
            self.config.max_candidates,
        )
        .await?;
        let wanted = rank::normalized(&fact.content);
        let duplicate = same_scope.into_iter().find(|m| {
            rank::normalized(&m.content) == wanted
                || match (&embedding, &m.embedding) {
                    (Some(a), Some(b)) if a.model == b.model => rank::cosine(&a.vector, &b.vector)
                        .is_some_and(|s| s >= self.config.merge_similarity),
                    _ => false,
                }
        });
        if let Some(existing) = duplicate {
            // The newer wording wins (it is what was just said); the memory keeps its id and
            // the longer of the two lives.
            let expires_at = match (existing.expires_at, fact.expires_at) {
                (None, _) | (_, None) => None,
                (Some(a), Some(b)) => Some(a.max(b)),
            };
            let updated = memories::update(
                &self.db,
                &who.tenant,
                existing.id,
                MemoryChange {
                    content: Some(fact.content),
                    kind: Some(fact.kind),
                    expires_at: Some(expires_at),
                    embedding: embedding.map(Some),
                },
            )
            .await?
            .ok_or(MemoryError::NotFound(existing.id))?;
            return Ok(Remembered {
                memory: updated,
                merged: true,
            });
        }
        let memory = memories::create(
            &self.db,
            &who.tenant,
            NewMemory {
                user_id: who.user_id,
                scope: fact.scope,
                assistant_id: fact.assistant_id,
                kind: fact.kind,
                content: fact.content,
                metadata: serde_json::json!({}),
                embedding,
                source_session_id: fact.source_session_id,
                source_run_id: fact.source_run_id,
                expires_at: fact.expires_at,
            },
        )
        .await?;
        Ok(Remembered {
            memory,
            merged: false,
        })
    }

    /// The memories `who` sees in `scopes` that are about `query`, best first, at most
    /// `limit`.
    #[tracing::instrument(skip_all, fields(tenant_id = %who.tenant.tenant_id()))]
    pub async fn search(
        &self,
        who: &Who,
        query: &str,
        scopes: &[MemoryScope],
        limit: usize,
    ) -> Result<Found, MemoryError> {
        let query = query.trim();
        if query.is_empty() {
            return Err(MemoryError::Invalid {
                field: "query",
                message: "the query must not be empty".into(),
            });
        }
        let reader = who.reader();
        let embedder = self.embedder(who).await;
        let query_vector = match self.embed(&embedder, &[query.to_string()]).await {
            Ok(Some(mut v)) => v.pop(),
            Ok(None) => None,
            Err(e) => {
                tracing::warn!(error = %e, "embedding a memory query failed; matching words instead");
                return self
                    .keyword(
                        who,
                        &reader,
                        query,
                        scopes,
                        limit,
                        format!(
                            "the embeddings endpoint failed ({e}), so memories were matched by words, not by meaning"
                        ),
                    )
                    .await;
            }
        };
        let Some(query_vector) = query_vector else {
            return self
                .keyword(who, &reader, query, scopes, limit, NO_EMBEDDINGS.into())
                .await;
        };
        let mut candidates = memories::candidates(
            &self.db,
            &who.tenant,
            &reader,
            scopes,
            self.config.max_candidates,
        )
        .await?;
        self.embed_missing(who, &embedder, &mut candidates, &query_vector.model)
            .await;
        let words = memories::query_words(query);
        let now = Utc::now();
        let mut hits: Vec<(Memory, f32)> = candidates
            .into_iter()
            .filter_map(|m| {
                let signals = rank::Signals {
                    similarity: m
                        .embedding
                        .as_ref()
                        .filter(|e| e.model == query_vector.model)
                        .and_then(|e| rank::cosine(&query_vector.vector, &e.vector)),
                    keyword: rank::keyword_share(&words, &m.content),
                    recency: rank::recency(m.updated_at, now),
                };
                signals
                    .relevant(self.config.min_similarity)
                    .then(|| (m, signals.score()))
            })
            .collect();
        hits.sort_by(|a, b| {
            b.1.total_cmp(&a.1)
                .then(b.0.updated_at.cmp(&a.0.updated_at))
        });
        hits.truncate(limit);
        Ok(Found {
            hits,
            mode: SearchMode::Semantic,
        })
    }

    /// Memories stored while embeddings were off or failing (or by another model) get their
    /// vector now, a batch per search, so they are found by meaning from then on.
    async fn embed_missing(
        &self,
        who: &Who,
        embedder: &MaybeEmbedder,
        candidates: &mut [Memory],
        model: &str,
    ) {
        let missing: Vec<usize> = candidates
            .iter()
            .enumerate()
            .filter(|(_, m)| m.embedding.as_ref().is_none_or(|e| e.model != model))
            .map(|(i, _)| i)
            .take(agentry_llm::MAX_EMBEDDING_BATCH)
            .collect();
        if missing.is_empty() {
            return;
        }
        let texts: Vec<String> = missing
            .iter()
            .map(|&i| candidates[i].content.clone())
            .collect();
        let vectors = match self.embed(embedder, &texts).await {
            Ok(Some(v)) => v,
            Ok(None) => return,
            Err(e) => {
                tracing::warn!(error = %e, "embedding stored memories failed; they are matched by words");
                return;
            }
        };
        for (i, e) in missing.into_iter().zip(vectors) {
            if let Err(err) =
                memories::set_embedding(&self.db, &who.tenant, candidates[i].id, &e).await
            {
                tracing::warn!(error = %err, "storing a memory's embedding failed");
            }
            candidates[i].embedding = Some(e);
        }
    }

    async fn keyword(
        &self,
        who: &Who,
        reader: &Reader,
        query: &str,
        scopes: &[MemoryScope],
        limit: usize,
        reason: String,
    ) -> Result<Found, MemoryError> {
        let words = memories::query_words(query);
        let now = Utc::now();
        let found = memories::keyword_search(
            &self.db,
            &who.tenant,
            reader,
            scopes,
            query,
            u64::try_from(limit).unwrap_or(u64::MAX),
        )
        .await?;
        Ok(Found {
            hits: found
                .into_iter()
                .map(|(_, m)| {
                    let score = rank::keyword_score(
                        rank::keyword_share(&words, &m.content),
                        rank::recency(m.updated_at, now),
                    );
                    (m, score)
                })
                .collect(),
            mode: SearchMode::Keyword { reason },
        })
    }

    /// The `k` memories most relevant to `message` that a run of `who` sees (every scope), for
    /// its system prompt. Memory is context, not a requirement: a failure leaves them out.
    pub async fn relevant(&self, who: &Who, message: &str, k: usize) -> Vec<Memory> {
        if k == 0 || message.trim().is_empty() {
            return Vec::new();
        }
        match self.search(who, message, &MemoryScope::ALL, k).await {
            Ok(found) => found.hits.into_iter().map(|(m, _)| m).collect(),
            Err(e) => {
                tracing::warn!(error = %e, "finding the memories for the prompt failed; none are put in");
                Vec::new()
            }
        }
    }

    /// The memories `who` sees in `scopes`, newest first.
    pub async fn list(
        &self,
        who: &Who,
        scopes: &[MemoryScope],
        page: PageRequest,
    ) -> Result<(Vec<Memory>, u64), MemoryError> {
        Ok(memories::list(&self.db, &who.tenant, &who.reader(), scopes, page).await?)
    }

    /// One memory `who` sees.
    pub async fn get(&self, who: &Who, id: MemoryId) -> Result<Memory, MemoryError> {
        memories::get(&self.db, &who.tenant, id)
            .await?
            .filter(|m| who.sees(m))
            .ok_or(MemoryError::NotFound(id))
    }

    /// Change a memory: its content (embedded again), kind or expiry.
    pub async fn update(
        &self,
        who: &Who,
        id: MemoryId,
        content: Option<String>,
        kind: Option<String>,
        expires_at: Option<Option<DateTime<Utc>>>,
    ) -> Result<Memory, MemoryError> {
        let current = self.get(who, id).await?;
        if !who.may_write(&current) {
            return Err(MemoryError::Forbidden(format!(
                "only tenant admins change {} memories",
                current.scope
            )));
        }
        let content = match content {
            None => None,
            Some(c) => {
                let c = c.trim().to_string();
                if c.is_empty() || c.chars().count() > MAX_CONTENT_CHARS {
                    return Err(MemoryError::Invalid {
                        field: "content",
                        message: format!("`content` must be 1–{MAX_CONTENT_CHARS} characters"),
                    });
                }
                Some(c)
            }
        };
        if let Some(k) = &kind {
            check_kind(k)?;
        }
        if let Some(Some(at)) = expires_at
            && at <= Utc::now()
        {
            return Err(MemoryError::Invalid {
                field: "expires_at",
                message: "`expires_at` must be in the future (delete the memory to forget it now)"
                    .into(),
            });
        }
        let embedding = match &content {
            Some(c) => {
                let embedder = self.embedder(who).await;
                Some(self.embed_one(&embedder, c).await)
            }
            None => None,
        };
        memories::update(
            &self.db,
            &who.tenant,
            id,
            MemoryChange {
                content,
                kind,
                expires_at,
                embedding,
            },
        )
        .await?
        .ok_or(MemoryError::NotFound(id))
    }

    /// Delete a memory `who` may write; returns it.
    pub async fn forget(&self, who: &Who, id: MemoryId) -> Result<Memory, MemoryError> {
        let current = self.get(who, id).await?;
        if !who.may_write(&current) {
            return Err(MemoryError::Forbidden(format!(
                "only tenant admins forget {} memories",
                current.scope
            )));
        }
        if !memories::delete(&self.db, &who.tenant, id).await? {
            return Err(MemoryError::NotFound(id));
        }
        Ok(current)
    }
}

fn check_kind(kind: &str) -> Result<(), MemoryError> {
    if MEMORY_KINDS.contains(&kind) {
        Ok(())
    } else {
        Err(MemoryError::Invalid {
            field: "kind",
            message: format!(
                "unknown kind {:?}: use one of {}",
                kind.chars().take(40).collect::<String>(),
                MEMORY_KINDS.join(", ")
            ),
        })
    }
}
