//! agentry-llm: the [`ChatModel`] trait and its providers.
//!
//! A model call takes a [`ChatRequest`] (system prompt, conversation, tool schemas) and yields a
//! stream of [`StreamEvent`]s: text deltas as they arrive, each tool call once it is complete
//! (assembled from the provider's deltas, with its id), token usage, and the stop reason.
//!
//! Providers:
//! - [`OpenAiModel`]: any OpenAI-compatible chat completions endpoint (OpenAI, DeepSeek, Ollama,
//!   vLLM), streaming or not, with function calling.
//! - [`AnthropicModel`]: the Anthropic Messages API.
//! - [`ScriptedModel`]: a deterministic stand-in that needs no key and no network (see
//!   [`scripted_reply`] and `docs/models.md`).
//!
//! [`Embedder`] / [`OpenAiEmbeddings`]: text embeddings over the OpenAI-compatible
//! `/embeddings` wire, for long-term memory.
//!
//! [`build_model`] turns a [`ModelConfig`] into one of them. HTTP providers retry 429, 5xx,
//! timeouts and connection failures with the jittered [`RetryPolicy`] before the stream starts.

mod anthropic;
mod config;
mod embeddings;
mod http;
mod openai;
mod retry;
mod scripted;
pub mod sse;

pub use anthropic::{ANTHROPIC_VERSION, AnthropicModel, DEFAULT_ANTHROPIC_MAX_TOKENS};
pub use config::{ModelConfig, Provider, ProviderEndpoint, build_model};
pub use embeddings::{
    Embedder, EmbeddingsConfig, MAX_BATCH as MAX_EMBEDDING_BATCH, OpenAiEmbeddings,
    decode_embeddings,
};
pub use openai::OpenAiModel;
pub use retry::{MAX_DELAY, MAX_RETRY_AFTER, RetryPolicy, parse_retry_after, retry_delay};
pub use scripted::{
    SCRIPTED_MAX_SLEEP, ScriptedAction, ScriptedModel, ScriptedReply, estimate_prompt_tokens,
    estimate_tokens, estimate_usage, scripted_reply, split_words,
};

use std::pin::Pin;
use std::time::Duration;

use agentry_schema::events::TokenUsage;
use async_trait::async_trait;
use futures::Stream;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// One message of the conversation sent to the model.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "role", rename_all = "snake_case")]
pub enum ChatMessage {
    User {
        content: String,
    },
    Assistant {
        content: String,
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        tool_calls: Vec<ToolCall>,
    },
    Tool {
        tool_call_id: String,
        /// The tool's name, which some providers want beside the id.
        name: String,
        /// The result (or the structured error) as JSON text.
        content: String,
        #[serde(default)]
        is_error: bool,
        /// Images the tool returned (an MCP tool's image content), for models that can look at
        /// them: Anthropic's `tool_result` carries them as image blocks, OpenAI's chat format
        /// (whose tool messages are text only) as a user message of image parts right after
        /// the tool messages. `content` also describes each one in words.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        images: Vec<ImagePart>,
    },
}

/// An image for the model: its media type and its bytes in base64.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ImagePart {
    pub mime_type: String,
    pub data: String,
}

/// A complete tool call requested by the model.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolCall {
    pub id: String,
    pub name: String,
    /// Parsed arguments. Arguments that are not valid JSON arrive as
    /// `{"__invalid_json__": "<raw text>"}` so the loop can tell the model.
    pub arguments: Value,
}

/// A tool as the model sees it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolSchema {
    pub name: String,
    pub description: String,
    /// JSON Schema of the arguments.
    pub parameters: Value,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ChatRequest {
    pub system: Option<String>,
    pub messages: Vec<ChatMessage>,
    pub tools: Vec<ToolSchema>,
    pub temperature: Option<f32>,
    pub max_tokens: Option<u32>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StopReason {
    /// The model finished its answer.
    EndTurn,
    /// The model wants tool results before it goes on.
    ToolUse,
    /// `max_tokens` cut the answer short.
    MaxTokens,
    Other,
}

/// One item of a model's streamed answer.
#[derive(Debug, Clone, PartialEq)]
pub enum StreamEvent {
    TextDelta(String),
    /// A complete tool call, emitted once its arguments are fully assembled.
    ToolCall(ToolCall),
    Usage(TokenUsage),
    /// The last item of every successful stream.
    Done(StopReason),
}

pub type ChatStream = Pin<Box<dyn Stream<Item = Result<StreamEvent, LlmError>> + Send>>;

/// Why a model call failed.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum LlmError {
    /// 429 from the provider. `retry_after` comes from the `Retry-After` header when present.
    #[error("the model provider is rate limiting (retry after {retry_after:?})")]
    RateLimited { retry_after: Option<Duration> },
    /// 5xx from the provider.
    #[error("the model provider failed with HTTP {status}: {message}")]
    Server { status: u16, message: String },
    #[error("the model request timed out after {0:?}")]
    Timeout(Duration),
    /// Connection refused, reset, DNS failure…
    #[error("could not reach the model provider: {0}")]
    Connect(String),
    /// 401/403: the key is wrong.
    #[error("the model provider refused the credentials (HTTP {status}): {message}")]
    Auth { status: u16, message: String },
    /// Other 4xx: the request is wrong and retrying will not help.
    #[error("the model provider rejected the request (HTTP {status}): {message}")]
    BadRequest { status: u16, message: String },
    /// The response could not be understood.
    #[error("could not decode the model's response: {0}")]
    Decode(String),
    /// Misconfiguration found when building a provider (no API key, bad URL…).
    #[error("model configuration error: {0}")]
    Config(String),
}

impl LlmError {
    /// 429, 5xx, timeouts and connection failures are worth retrying.
    pub fn is_retryable(&self) -> bool {
        matches!(
            self,
            LlmError::RateLimited { .. }
                | LlmError::Server { .. }
                | LlmError::Timeout(_)
                | LlmError::Connect(_)
        )
    }
}

/// A language model (or the scripted stand-in).
#[async_trait]
pub trait ChatModel: Send + Sync {
    /// `openai`, `anthropic` or `scripted`.
    fn provider(&self) -> &str;
    /// The model name sent to the provider.
    fn model(&self) -> &str;
    /// Start a streamed answer. Errors before the first byte (and retries of them) happen here;
    /// errors mid-stream arrive as stream items. The request is borrowed: a provider encodes
    /// it before the call, and the caller keeps it (for a retry, or as its conversation).
    async fn stream(&self, request: &ChatRequest) -> Result<ChatStream, LlmError>;
}

/// A whole answer, for callers that do not need the deltas (see [`collect_stream`]).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ChatResponse {
    pub text: String,
    pub tool_calls: Vec<ToolCall>,
    pub usage: TokenUsage,
    /// `None` only if the stream ended without its `Done` item.
    pub stop_reason: Option<StopReason>,
}

/// Drain a [`ChatStream`] into a [`ChatResponse`]; the first error item is returned as the error.
pub async fn collect_stream(mut stream: ChatStream) -> Result<ChatResponse, LlmError> {
    use futures::StreamExt;
    let mut response = ChatResponse::default();
    while let Some(item) = stream.next().await {
        match item? {
            StreamEvent::TextDelta(text) => response.text.push_str(&text),
            StreamEvent::ToolCall(call) => response.tool_calls.push(call),
            StreamEvent::Usage(usage) => response.usage.add(usage),
            StreamEvent::Done(reason) => response.stop_reason = Some(reason),
        }
    }
    Ok(response)
}

/// Call `model` and wait for the whole answer.
pub async fn complete(
    model: &dyn ChatModel,
    request: ChatRequest,
) -> Result<ChatResponse, LlmError> {
    collect_stream(model.stream(&request).await?).await
}
