//! `memory-search`: how long a semantic memory search takes as one scope grows (docs/memory.md,
//! "Scale"). The server runs with the fake model server as its embeddings endpoint; the
//! memories are written straight into its database (with their fake vectors), because
//! storing 100,000 of them through the API would measure the writes, not the search. Then
//! `GET /api/v1/memories/search` is timed at each size.

use std::time::{Duration, Instant};

use agentry_schema::ids::{TenantId, UserId};
use agentry_schema::memory::MemoryScope;
use agentry_store::memories::{self, Embedding, NewMemory};
use agentry_store::{DbOptions, PlatformScope};
use anyhow::{Context, Result, bail};
use sea_orm::TransactionTrait;
use serde::Serialize;
use serde_json::{Value, json};

use crate::harness::{EMBEDDING_MODEL, Harness, ModelProfile, Target};
use crate::report::Record;
use crate::scenarios::{Errors, Frame, fmt_summary};
use crate::stats::summarize;

#[derive(Debug, Clone, Serialize)]
pub struct MemoryParams {
    /// Memories in the scope at each measurement, ascending.
    pub sizes: Vec<u64>,
    /// Searches timed at each size (after one untimed).
    pub queries: u64,
    /// Dimensions of the stored and queried vectors: the fake embeddings (64) padded with
    /// zeros, which keeps every cosine and so every ranking, while the server reads, decodes
    /// and multiplies vectors as large as a real model's (1536: `text-embedding-3-small`).
    pub dims: usize,
}

/// The fake embedding of `text`, zero-padded to `dims`.
fn padded(text: &str, dims: usize) -> Vec<f32> {
    let mut v = agentry_fake_model::fake_embedding(text);
    if v.len() < dims {
        v.resize(dims, 0.0);
    }
    v
}

/// Words the seeded memories are made of: concept words of the fake embeddings' lexicon and
/// plain ones, so the vectors differ and rankings are real work.
const WORDS: [&str; 24] = [
    "postgresql",
    "coffee",
    "kubernetes",
    "berlin",
    "invoice",
    "monday",
    "dog",
    "vim",
    "grafana",
    "flight",
    "rust",
    "jazz",
    "alpha",
    "bravo",
    "charlie",
    "delta",
    "echo",
    "foxtrot",
    "golf",
    "hotel",
    "india",
    "juliet",
    "kilo",
    "lima",
];

const QUERIES: [&str; 5] = [
    "which relational datastore do we use",
    "what does the user drink in the morning",
    "where is the team based",
    "when is the weekly meeting",
    "how is monitoring set up",
];

fn content(i: u64) -> String {
    let w = |k: u64| WORDS[((i / k) % WORDS.len() as u64) as usize];
    format!("Note {i}: {} {} {} {}", w(1), w(7), w(31), w(101))
}

/// Seed memories `from..to` of `user` (user scope), in transactions of 1,000.
async fn seed(
    db: &sea_orm::DatabaseConnection,
    tenant: TenantId,
    user: UserId,
    from: u64,
    to: u64,
    dims: usize,
) -> Result<()> {
    let scope = PlatformScope::new().tenant(tenant);
    let mut i = from;
    while i < to {
        let end = (i + 1000).min(to);
        let txn = db.begin().await?;
        for n in i..end {
            let text = content(n);
            let vector = padded(&text, dims);
            memories::create(
                &txn,
                &scope,
                NewMemory {
                    embedding: Some(Embedding {
                        model: EMBEDDING_MODEL.into(),
                        vector,
                    }),
                    ..NewMemory::of_user(user, text)
                },
            )
            .await?;
        }
        txn.commit().await?;
        i = end;
    }
    Ok(())
}

pub async fn memory_search(target: &Target, p: &MemoryParams) -> Result<Record> {
    let frame = Frame::new("memory-search", "memory-search".into());
    let max = p.sizes.iter().copied().max().unwrap_or(0);
    let h = Harness::start_with_embeddings(
        target,
        ModelProfile::INSTANT,
        // Every memory of the scope is a candidate: the figure is the brute force's.
        &[("AGENTRY_MEMORY__MAX_CANDIDATES", max.max(1).to_string())],
    )
    .await?;
    if p.dims < agentry_fake_model::FAKE_EMBEDDING_DIMENSIONS {
        bail!(
            "--dims must be at least the fake embeddings' {}",
            agentry_fake_model::FAKE_EMBEDDING_DIMENSIONS
        );
    }
    // The queries' vectors, as large as the stored ones.
    for q in QUERIES {
        h.model.set_embedding(q, padded(q, p.dims));
    }
    let errors = Errors::default();
    let me: Value = h
        .http
        .get(h.url("/api/v1/me"))
        .bearer_auth(&h.key)
        .send()
        .await?
        .error_for_status()?
        .json()
        .await?;
    let tenant: TenantId = me["tenant_id"]
        .as_str()
        .context("no tenant_id in /me")?
        .parse()?;
    let user: UserId = me["user_id"]
        .as_str()
        .context("no user_id in /me")?
        .parse()?;
    let db = agentry_store::connect(&DbOptions {
        url: h.database_url(target),
        max_connections: 2,
        connect_timeout: Duration::from_secs(10),
        acquire_timeout: Duration::from_secs(30),
    })
    .await
    .context("connecting to the server's database")?;
    let mut seeded = 0;
    let mut rows = Vec::new();
    let mut headline = Vec::new();
    for &size in &p.sizes {
        let t0 = Instant::now();
        seed(&db, tenant, user, seeded, size, p.dims).await?;
        seeded = seeded.max(size);
        eprintln!(
            "    {size} memories seeded ({:.1} s)",
            t0.elapsed().as_secs_f64()
        );
        let mut samples = Vec::new();
        for q in 0..=p.queries {
            let query = QUERIES[(q % QUERIES.len() as u64) as usize];
            let t = Instant::now();
            let url = reqwest::Url::parse_with_params(
                &h.url("/api/v1/memories/search"),
                &[
                    ("q", query),
                    ("scope", MemoryScope::User.as_str()),
                    ("limit", "10"),
                ],
            )?;
            let r = h.http.get(url).bearer_auth(&h.key).send().await;
            let took = t.elapsed();
            match r {
                Ok(r) if r.status().is_success() => {
                    let body: Value = r.json().await?;
                    if body["search"] != "semantic" {
                        bail!("the search was not semantic: {body}");
                    }
                    if q > 0 {
                        samples.push(took);
                    }
                }
                Ok(r) => errors.add(format!("search answered {}", r.status())),
                Err(e) => errors.add(e),
            }
        }
        let latency = summarize(&samples);
        headline.push(format!("{size}: {}", fmt_summary(&latency)));
        rows.push(json!({"memories": size, "search_latency": latency}));
    }
    db.close().await.ok();
    let figures = json!({"sizes": rows, "embedding_dimensions": p.dims});
    let record = frame.record(
        target,
        p,
        figures,
        format!("memory search in one scope, {}", headline.join("; ")),
        &errors,
    );
    h.stop().await;
    Ok(record)
}
