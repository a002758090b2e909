//! Long-term memory (docs/memory.md): its scopes and its REST bodies.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use crate::api::double_option;

/// Who a memory is for.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "lowercase")]
pub enum MemoryScope {
    /// One user's own: only that user sees it.
    #[default]
    User,
    /// One assistant's shared knowledge: every user of the tenant who talks to that assistant
    /// sees it; tenant admins write it.
    Assistant,
    /// The tenant's: every user sees it; tenant admins write it.
    Tenant,
}

impl MemoryScope {
    pub const ALL: [MemoryScope; 3] = [
        MemoryScope::User,
        MemoryScope::Assistant,
        MemoryScope::Tenant,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            MemoryScope::User => "user",
            MemoryScope::Assistant => "assistant",
            MemoryScope::Tenant => "tenant",
        }
    }

    /// The scope [`MemoryScope::as_str`] names; `None` for anything else.
    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|m| m.as_str() == s)
    }

    /// Shared scopes are written by tenant admins only.
    pub fn is_shared(self) -> bool {
        self != MemoryScope::User
    }
}

impl std::fmt::Display for MemoryScope {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The kinds a memory may have.
pub const MEMORY_KINDS: [&str; 4] = ["fact", "preference", "decision", "context"];

/// One memory.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct MemoryInfo {
    pub id: String,
    pub scope: MemoryScope,
    /// The assistant of an `assistant` memory; null otherwise.
    pub assistant_id: Option<String>,
    /// The owner of a `user` memory; who wrote a shared one.
    pub user_id: String,
    /// `fact`, `preference`, `decision` or `context`.
    pub kind: String,
    pub content: String,
    /// The session and run that stored it (null when stored over REST).
    pub source_session_id: Option<String>,
    pub source_run_id: Option<String>,
    /// After this instant the memory is gone (never returned, then deleted by the retention
    /// sweep); null: kept until deleted.
    pub expires_at: Option<DateTime<Utc>>,
    /// Whether its embedding is stored (semantic search finds it by meaning).
    pub embedded: bool,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

/// `POST /memories`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct CreateMemoryRequest {
    /// 1–4000 characters.
    pub content: String,
    /// `fact` (default), `preference`, `decision` or `context`.
    #[serde(default)]
    pub kind: Option<String>,
    /// Default `user`. `assistant` and `tenant` are for tenant admins.
    #[serde(default)]
    pub scope: Option<MemoryScope>,
    /// Required for (and only for) the `assistant` scope: an assistant of the tenant.
    #[serde(default)]
    pub assistant_id: Option<String>,
    /// In the future; left out: no expiry.
    #[serde(default)]
    pub expires_at: Option<DateTime<Utc>>,
}

/// `PATCH /memories/{memory_id}`: fields left out stay.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct UpdateMemoryRequest {
    #[serde(default)]
    pub content: Option<String>,
    #[serde(default)]
    pub kind: Option<String>,
    /// A future instant, or `null` for no expiry.
    #[serde(
        default,
        deserialize_with = "double_option",
        skip_serializing_if = "Option::is_none"
    )]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<String>, format = DateTime))]
    pub expires_at: Option<Option<DateTime<Utc>>>,
}

/// One search result.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct MemoryHit {
    #[serde(flatten)]
    pub memory: MemoryInfo,
    /// The blended relevance (cosine similarity, word match, recency), 0–1; higher is better.
    pub score: f32,
}

/// `GET /memories/search`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct MemorySearchResponse {
    pub items: Vec<MemoryHit>,
    /// `semantic` (by meaning, with embeddings) or `keyword` (by words: no embeddings model is
    /// configured, or it failed; `note` says which).
    pub search: String,
    pub note: Option<String>,
}
