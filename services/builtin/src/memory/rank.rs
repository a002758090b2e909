//! How a search orders memories: cosine similarity of the embeddings, blended with the share of
//! the query's words the memory contains and how recent it is. Pure functions, unit-tested.

use chrono::{DateTime, Utc};

/// Weights of the semantic blend: meaning first; words and recency break near-ties.
pub const SIMILARITY_WEIGHT: f32 = 0.7;
pub const KEYWORD_WEIGHT: f32 = 0.2;
pub const RECENCY_WEIGHT: f32 = 0.1;
/// Weight of the word match when there is no similarity (the keyword fallback).
pub const KEYWORD_ONLY_WEIGHT: f32 = 0.9;
/// A memory this many days old counts half as recent as a new one.
pub const RECENCY_HALF_LIFE_DAYS: f32 = 30.0;

/// Cosine similarity; `None` when the lengths differ (another model's vector) or a vector is
/// zero.
pub fn cosine(a: &[f32], b: &[f32]) -> Option<f32> {
    if a.len() != b.len() || a.is_empty() {
        return None;
    }
    let (mut dot, mut na, mut nb) = (0.0f32, 0.0f32, 0.0f32);
    for (x, y) in a.iter().zip(b) {
        dot += x * y;
        na += x * x;
        nb += y * y;
    }
    if na == 0.0 || nb == 0.0 {
        return None;
    }
    Some((dot / (na.sqrt() * nb.sqrt())).clamp(-1.0, 1.0))
}

/// The share (0–1) of `words` (lowercase) that `content` contains.
pub fn keyword_share(words: &[String], content: &str) -> f32 {
    if words.is_empty() {
        return 0.0;
    }
    let lc = content.to_lowercase();
    let hits = words.iter().filter(|w| lc.contains(w.as_str())).count();
    hits as f32 / words.len() as f32
}

/// 1 for a memory written now, halving every [`RECENCY_HALF_LIFE_DAYS`].
pub fn recency(written: DateTime<Utc>, now: DateTime<Utc>) -> f32 {
    let days = (now - written).num_seconds().max(0) as f32 / 86_400.0;
    0.5f32.powf(days / RECENCY_HALF_LIFE_DAYS)
}

/// One memory's parts of the score.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Signals {
    /// `None`: the memory has no comparable vector.
    pub similarity: Option<f32>,
    pub keyword: f32,
    pub recency: f32,
}

impl Signals {
    /// The blended score, 0–1.
    pub fn score(&self) -> f32 {
        // A memory without a comparable vector scores as one with similarity 0: its words and
        // recency still count, on the same scale as the others.
        SIMILARITY_WEIGHT * self.similarity.unwrap_or(0.0).max(0.0)
            + KEYWORD_WEIGHT * self.keyword
            + RECENCY_WEIGHT * self.recency
    }

    /// Whether the memory is about the query at all: similar enough, or sharing a word.
    /// Recency alone never makes a memory relevant.
    pub fn relevant(&self, min_similarity: f32) -> bool {
        self.similarity.is_some_and(|s| s >= min_similarity) || self.keyword > 0.0
    }
}

/// The score of a keyword-fallback hit: mostly the word share, recency breaking ties.
pub fn keyword_score(keyword: f32, recency: f32) -> f32 {
    KEYWORD_ONLY_WEIGHT * keyword + RECENCY_WEIGHT * recency
}

/// A text as duplicates compare: lowercase words joined by one space, punctuation dropped.
pub fn normalized(text: &str) -> String {
    text.split(|c: char| !c.is_alphanumeric())
        .filter(|w| !w.is_empty())
        .map(str::to_lowercase)
        .collect::<Vec<_>>()
        .join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cosine_of_parallel_orthogonal_and_mismatched_vectors() {
        assert!((cosine(&[1.0, 2.0], &[2.0, 4.0]).unwrap() - 1.0).abs() < 1e-6);
        assert!(cosine(&[1.0, 0.0], &[0.0, 3.0]).unwrap().abs() < 1e-6);
        assert_eq!(cosine(&[1.0], &[1.0, 0.0]), None);
        assert_eq!(cosine(&[0.0, 0.0], &[1.0, 0.0]), None);
    }

    #[test]
    fn meaning_outweighs_words_and_recency_only_breaks_ties() {
        let now = Utc::now();
        let similar_old = Signals {
            similarity: Some(0.9),
            keyword: 0.0,
            recency: recency(now - chrono::Duration::days(365), now),
        };
        let unrelated_new_with_a_word = Signals {
            similarity: Some(0.05),
            keyword: 0.5,
            recency: 1.0,
        };
        assert!(similar_old.score() > unrelated_new_with_a_word.score());
        let a = Signals {
            similarity: Some(0.8),
            keyword: 0.0,
            recency: 1.0,
        };
        let b = Signals { recency: 0.5, ..a };
        assert!(a.score() > b.score());
        assert!(
            !Signals {
                similarity: Some(0.1),
                keyword: 0.0,
                recency: 1.0
            }
            .relevant(0.3)
        );
        assert!(similar_old.relevant(0.3));
        assert!(unrelated_new_with_a_word.relevant(0.3));
    }

    #[test]
    fn recency_halves_every_half_life() {
        let now = Utc::now();
        assert!((recency(now, now) - 1.0).abs() < 1e-6);
        let r = recency(now - chrono::Duration::days(30), now);
        assert!((r - 0.5).abs() < 1e-3, "{r}");
        assert!((recency(now + chrono::Duration::days(1), now) - 1.0).abs() < 1e-6);
    }

    #[test]
    fn duplicates_compare_by_words_not_case_or_punctuation() {
        assert_eq!(
            normalized("  We run PostgreSQL-16!  "),
            normalized("we run postgresql 16")
        );
        assert_ne!(
            normalized("we run postgresql 16"),
            normalized("we ran postgresql 16")
        );
    }

    #[test]
    fn keyword_share_counts_words_found() {
        let words = vec!["rust".to_string(), "kubernetes".to_string()];
        assert_eq!(keyword_share(&words, "Rust on Kubernetes"), 1.0);
        assert_eq!(keyword_share(&words, "rust only"), 0.5);
        assert_eq!(keyword_share(&[], "anything"), 0.0);
    }
}
