//! Embeddings over the OpenAI-compatible wire (`POST {base_url}/embeddings`): OpenAI, Ollama,
//! vLLM, LiteLLM and anything else that speaks it. Long-term memory (docs/memory.md) embeds
//! each memory and each query with it.

use std::time::Duration;

use agentry_schema::secret::Secret;
use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::LlmError;
use crate::http::{Transport, read_json};
use crate::retry::RetryPolicy;

/// Turns texts into vectors.
#[async_trait]
pub trait Embedder: Send + Sync {
    /// The model's name: vectors of two models do not compare, so it is stored with each.
    fn model(&self) -> &str;

    /// One vector per input, in order.
    async fn embed(&self, inputs: &[String]) -> Result<Vec<Vec<f32>>, LlmError>;
}

/// The platform's embeddings endpoint (`[embeddings]`, `AGENTRY_EMBEDDINGS__*`). Without a
/// `base_url` there is none, and memory search matches words instead of meaning.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct EmbeddingsConfig {
    /// API root of an OpenAI-compatible endpoint, e.g. `https://api.openai.com/v1` or
    /// `http://localhost:11434/v1`; `/embeddings` is appended.
    pub base_url: Option<String>,
    pub api_key: Option<Secret>,
    pub model: String,
    /// Sent as `dimensions` when set (models that can shorten their vectors).
    pub dimensions: Option<u32>,
    /// Limit on one request.
    pub timeout_secs: u64,
    /// Retries of 429, 5xx, timeouts and connection failures.
    pub max_retries: u32,
}

impl Default for EmbeddingsConfig {
    fn default() -> Self {
        EmbeddingsConfig {
            base_url: None,
            api_key: None,
            model: "text-embedding-3-small".into(),
            dimensions: None,
            timeout_secs: 30,
            max_retries: 2,
        }
    }
}

impl EmbeddingsConfig {
    /// The configured endpoint's client; `None` when no `base_url` is set.
    pub fn build(&self, client: reqwest::Client) -> Option<OpenAiEmbeddings> {
        let base = self
            .base_url
            .as_deref()
            .map(str::trim)
            .filter(|s| !s.is_empty())?;
        let mut e = OpenAiEmbeddings::new(client, base, self.api_key.clone(), &self.model)
            .with_timeout(Duration::from_secs(self.timeout_secs.max(1)))
            .with_retry(RetryPolicy {
                max_retries: self.max_retries,
                ..RetryPolicy::default()
            });
        e.dimensions = self.dimensions;
        Some(e)
    }
}

/// Inputs per request: providers cap a batch (OpenAI at 2048), and a smaller batch keeps one
/// request's body and time bounded.
pub const MAX_BATCH: usize = 256;

/// An OpenAI-compatible embeddings endpoint.
#[derive(Debug, Clone)]
pub struct OpenAiEmbeddings {
    base_url: String,
    api_key: Option<Secret>,
    model: String,
    dimensions: Option<u32>,
    transport: Transport,
}

impl OpenAiEmbeddings {
    /// `base_url` is the API root (`…/v1`); without `api_key` no `Authorization` is sent.
    pub fn new(
        client: reqwest::Client,
        base_url: &str,
        api_key: Option<Secret>,
        model: &str,
    ) -> Self {
        Self {
            base_url: base_url.trim_end_matches('/').to_string(),
            api_key: api_key.filter(|k| !k.is_empty()),
            model: model.to_string(),
            dimensions: None,
            transport: Transport {
                client,
                timeout: Duration::from_secs(30),
                retry: RetryPolicy::default(),
            },
        }
    }

    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.transport.timeout = timeout;
        self
    }

    pub fn with_retry(mut self, retry: RetryPolicy) -> Self {
        self.transport.retry = retry;
        self
    }

    pub fn endpoint(&self) -> String {
        format!("{}/embeddings", self.base_url)
    }

    async fn embed_batch(&self, inputs: &[String]) -> Result<Vec<Vec<f32>>, LlmError> {
        let mut body = json!({
            "model": self.model,
            "input": inputs,
            "encoding_format": "float",
        });
        if let Some(d) = self.dimensions {
            body["dimensions"] = json!(d);
        }
        let url = self.endpoint();
        let response = self
            .transport
            .send("openai", || {
                let builder = self.transport.client.post(&url).json(&body);
                match &self.api_key {
                    Some(key) => builder.bearer_auth(key.expose()),
                    None => builder,
                }
            })
            .await?;
        let json = read_json(response, self.transport.timeout).await?;
        decode_embeddings(&json, inputs.len())
    }
}

/// The vectors of an embeddings response, in input order (`data[].index` says which input
/// each is for; the order of `data` itself is not promised).
pub fn decode_embeddings(json: &Value, expected: usize) -> Result<Vec<Vec<f32>>, LlmError> {
    let data = json
        .get("data")
        .and_then(Value::as_array)
        .ok_or_else(|| LlmError::Decode("the embeddings response has no `data` array".into()))?;
    let mut out: Vec<Option<Vec<f32>>> = vec![None; expected];
    for (position, item) in data.iter().enumerate() {
        let index = item
            .get("index")
            .and_then(Value::as_u64)
            .and_then(|i| usize::try_from(i).ok())
            .unwrap_or(position);
        let vector: Vec<f32> = item
            .get("embedding")
            .and_then(Value::as_array)
            .ok_or_else(|| {
                LlmError::Decode(format!(
                    "embedding {index} is not an array of numbers (base64 answers are not asked for)"
                ))
            })?
            .iter()
            .map(|n| n.as_f64().map(|f| f as f32))
            .collect::<Option<_>>()
            .ok_or_else(|| LlmError::Decode(format!("embedding {index} holds a non-number")))?;
        if vector.is_empty() {
            return Err(LlmError::Decode(format!("embedding {index} is empty")));
        }
        match out.get_mut(index) {
            Some(slot) => *slot = Some(vector),
            None => {
                return Err(LlmError::Decode(format!(
                    "embedding index {index} is out of range for {expected} inputs"
                )));
            }
        }
    }
    out.into_iter()
        .enumerate()
        .map(|(i, v)| v.ok_or_else(|| LlmError::Decode(format!("no embedding for input {i}"))))
        .collect()
}

#[async_trait]
impl Embedder for OpenAiEmbeddings {
    fn model(&self) -> &str {
        &self.model
    }

    #[tracing::instrument(level = "debug", skip_all, fields(model = %self.model, inputs = inputs.len()))]
    async fn embed(&self, inputs: &[String]) -> Result<Vec<Vec<f32>>, LlmError> {
        let mut out = Vec::with_capacity(inputs.len());
        for batch in inputs.chunks(MAX_BATCH) {
            out.extend(self.embed_batch(batch).await?);
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vectors_come_back_in_input_order_whatever_the_order_of_data() {
        let json = json!({"data": [
            {"index": 1, "embedding": [0.5, 0.25]},
            {"index": 0, "embedding": [1.0, -2.0]},
        ]});
        assert_eq!(
            decode_embeddings(&json, 2).unwrap(),
            vec![vec![1.0, -2.0], vec![0.5, 0.25]]
        );
    }

    #[test]
    fn a_missing_or_malformed_vector_is_an_error_not_a_guess() {
        for bad in [
            json!({"data": [{"index": 0, "embedding": [1.0]}]}),
            json!({"data": [{"index": 0, "embedding": "AAAA"}, {"index": 1, "embedding": [1.0]}]}),
            json!({"data": [{"index": 5, "embedding": [1.0]}, {"index": 1, "embedding": [1.0]}]}),
            json!({"data": [{"index": 0, "embedding": []}, {"index": 1, "embedding": [1.0]}]}),
            json!({"object": "list"}),
        ] {
            assert!(
                matches!(decode_embeddings(&bad, 2), Err(LlmError::Decode(_))),
                "{bad}"
            );
        }
    }
}
