//! Shared helpers for the provider tests: build the real clients against a fake model server.
#![allow(dead_code)]

use std::sync::Arc;

use agentry_fake_model::{FakeConfig, FakeModelServer};
use agentry_llm::{
    ChatMessage, ChatModel, ChatRequest, ChatStream, LlmError, ModelConfig, Provider, StreamEvent,
    build_model,
};
use agentry_schema::secret::Secret;
use futures::StreamExt;

/// The two wire formats every behaviour is checked against.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wire {
    OpenAi,
    Anthropic,
}

pub const WIRES: [Wire; 2] = [Wire::OpenAi, Wire::Anthropic];

/// Every (wire, streaming) combination.
pub fn cases() -> Vec<(Wire, bool)> {
    WIRES
        .iter()
        .flat_map(|w| [(*w, true), (*w, false)])
        .collect()
}

pub fn server() -> FakeModelServer {
    FakeModelServer::start(FakeConfig::default())
}

pub fn config(server: &FakeModelServer, wire: Wire, stream: bool) -> ModelConfig {
    let (provider, base_url) = match wire {
        Wire::OpenAi => (Provider::OpenAi, server.base_url_openai()),
        Wire::Anthropic => (Provider::Anthropic, server.base_url_anthropic()),
    };
    ModelConfig {
        provider,
        base_url: Some(base_url),
        api_key: Some(Secret::new("test-key")),
        model: Some("fake-model-1".into()),
        timeout_secs: 10,
        max_retries: 3,
        base_delay_ms: 10,
        stream,
        ..ModelConfig::default()
    }
}

pub fn build(config: &ModelConfig) -> Arc<dyn ChatModel> {
    build_model(config, reqwest::Client::new()).unwrap()
}

pub fn model(server: &FakeModelServer, wire: Wire, stream: bool) -> Arc<dyn ChatModel> {
    build(&config(server, wire, stream))
}

pub fn user(text: &str) -> ChatRequest {
    ChatRequest {
        messages: vec![ChatMessage::User {
            content: text.to_string(),
        }],
        ..ChatRequest::default()
    }
}

/// Every item of the stream: the events before the first error, and that error.
pub async fn drain(mut stream: ChatStream) -> (Vec<StreamEvent>, Option<LlmError>) {
    let mut events = Vec::new();
    while let Some(item) = stream.next().await {
        match item {
            Ok(event) => events.push(event),
            Err(error) => {
                // Nothing may follow an error item.
                assert!(stream.next().await.is_none(), "items after an error");
                return (events, Some(error));
            }
        }
    }
    (events, None)
}

/// Call the model; the stream's items, or the error of the call itself.
pub async fn call(
    model: &dyn ChatModel,
    request: ChatRequest,
) -> Result<Vec<StreamEvent>, LlmError> {
    let stream = model.stream(&request).await?;
    let (events, error) = drain(stream).await;
    match error {
        Some(error) => Err(error),
        None => Ok(events),
    }
}

pub fn text_of(events: &[StreamEvent]) -> String {
    events
        .iter()
        .filter_map(|e| match e {
            StreamEvent::TextDelta(t) => Some(t.as_str()),
            _ => None,
        })
        .collect()
}

pub fn text_deltas(events: &[StreamEvent]) -> usize {
    events
        .iter()
        .filter(|e| matches!(e, StreamEvent::TextDelta(_)))
        .count()
}
