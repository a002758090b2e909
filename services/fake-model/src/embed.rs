//! Deterministic embeddings for `POST /v1/embeddings`: texts about the same thing get close
//! vectors without a model, so tests can assert a semantic ranking.
//!
//! A vector has [`DIMENSIONS`] dimensions: the first [`CONCEPTS`] count the words of a small
//! built-in concept lexicon ("relational", "datastore" and "PostgreSQL" are all the concept
//! *database*), the rest a hashed bag of the other words (weighted lower, so shared words count
//! but shared meaning counts more). Stop words are left out; the vector is unit length. A test
//! that needs an exact vector registers it for a text ([`crate::FakeModelServer::set_embedding`]).

/// Length of every fake vector.
pub const DIMENSIONS: usize = 64;
/// Dimensions that stand for concepts; the rest hash words.
pub const CONCEPTS: usize = 16;
/// Weight of a hashed word against a concept's 1.
const WORD_WEIGHT: f32 = 0.3;

/// The concept lexicon: each line is one concept's words (lowercase, singular).
const LEXICON: [&[&str]; CONCEPTS] = [
    &[
        "database",
        "datastore",
        "db",
        "rdbms",
        "sql",
        "relational",
        "postgres",
        "postgresql",
        "mysql",
        "mariadb",
        "sqlite",
        "oracle",
        "table",
        "query",
    ],
    &[
        "kubernetes",
        "k8s",
        "cluster",
        "docker",
        "container",
        "deploy",
        "deployment",
        "cloud",
        "aws",
        "gcp",
        "azure",
        "nomad",
        "infrastructure",
    ],
    &[
        "coffee", "tea", "espresso", "drink", "latte", "beverage", "caffeine",
    ],
    &[
        "food",
        "lunch",
        "dinner",
        "vegetarian",
        "vegan",
        "meal",
        "pizza",
        "eat",
        "diet",
    ],
    &[
        "rust",
        "python",
        "java",
        "golang",
        "typescript",
        "javascript",
        "language",
        "programming",
    ],
    &[
        "meeting",
        "calendar",
        "schedule",
        "monday",
        "tuesday",
        "wednesday",
        "thursday",
        "friday",
        "standup",
        "weekly",
    ],
    &[
        "city", "berlin", "paris", "london", "office", "remote", "timezone", "live",
    ],
    &["dog", "cat", "pet", "puppy", "kitten"],
    &["vim", "emacs", "vscode", "editor", "ide"],
    &["flight", "travel", "trip", "vacation", "holiday", "hotel"],
    &["invoice", "billing", "payment", "price", "cost", "budget"],
    &[
        "password",
        "secret",
        "credential",
        "security",
        "token",
        "vulnerability",
    ],
    &[
        "monitoring",
        "alert",
        "grafana",
        "prometheus",
        "metric",
        "oncall",
        "pager",
    ],
    &[
        "wife", "husband", "daughter", "son", "family", "kid", "child", "children",
    ],
    &["music", "song", "jazz", "guitar", "piano"],
    &["weather", "rain", "sunny", "snow", "forecast"],
];

const STOP_WORDS: [&str; 40] = [
    "a", "an", "the", "and", "or", "of", "to", "in", "on", "at", "for", "with", "we", "our", "us",
    "i", "my", "me", "you", "your", "is", "are", "was", "be", "it", "its", "this", "that", "run",
    "use", "uses", "using", "what", "which", "do", "does", "has", "have", "by", "as",
];

/// A word as the lexicon spells it: lowercase, a plural `s` dropped.
fn normal(word: &str) -> String {
    let w = word.to_lowercase();
    if w.len() > 3 && w.ends_with('s') && !w.ends_with("ss") {
        w[..w.len() - 1].to_string()
    } else {
        w
    }
}

fn concept_of(word: &str) -> Option<usize> {
    LEXICON.iter().position(|words| words.contains(&word))
}

/// FNV-1a: stable across runs and platforms (std's hasher is seeded per process).
fn fnv(word: &str) -> u64 {
    word.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// The fake embedding of `text`: unit length, [`DIMENSIONS`] long; the same text always gets
/// the same vector. A text of stop words only gets a fixed vector of its own.
pub fn fake_embedding(text: &str) -> Vec<f32> {
    let mut v = vec![0.0f32; DIMENSIONS];
    for raw in text.split(|c: char| !c.is_alphanumeric()) {
        if raw.is_empty() {
            continue;
        }
        let word = normal(raw);
        if STOP_WORDS.contains(&word.as_str()) {
            continue;
        }
        match concept_of(&word).or_else(|| concept_of(&raw.to_lowercase())) {
            Some(c) => v[c] += 1.0,
            None => {
                let slot = CONCEPTS + (fnv(&word) % (DIMENSIONS - CONCEPTS) as u64) as usize;
                v[slot] += WORD_WEIGHT;
            }
        }
    }
    let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt();
    if norm == 0.0 {
        v[DIMENSIONS - 1] = 1.0;
        return v;
    }
    v.iter_mut().for_each(|x| *x /= norm);
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cos(a: &[f32], b: &[f32]) -> f32 {
        a.iter().zip(b).map(|(x, y)| x * y).sum()
    }

    #[test]
    fn meaning_beats_words() {
        let q = fake_embedding("relational datastore");
        let pg = fake_embedding("We run PostgreSQL 16");
        let coffee = fake_embedding("My favourite drink is coffee");
        let k8s = fake_embedding("Our services are deployed on Kubernetes");
        assert!(cos(&q, &pg) > 0.8, "{}", cos(&q, &pg));
        assert!(cos(&q, &coffee) < 0.2, "{}", cos(&q, &coffee));
        assert!(cos(&q, &k8s) < 0.2, "{}", cos(&q, &k8s));
    }

    #[test]
    fn vectors_are_unit_length_and_deterministic() {
        for t in ["", "the a an", "We run PostgreSQL 16", "zzz qqq"] {
            let v = fake_embedding(t);
            assert_eq!(v.len(), DIMENSIONS);
            assert!((cos(&v, &v) - 1.0).abs() < 1e-5, "{t:?}");
            assert_eq!(v, fake_embedding(t));
        }
    }
}
