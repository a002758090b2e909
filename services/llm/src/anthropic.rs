//! The Anthropic Messages API (`POST {base_url}/v1/messages`).
//!
//! The system prompt is the top-level `system`; tool calls are `tool_use` content blocks whose
//! arguments stream as `input_json_delta` pieces; tool results go back as `tool_result` blocks in
//! a user message (consecutive results share one message, as the API requires).

use std::collections::BTreeMap;
use std::time::Duration;

use agentry_schema::events::TokenUsage;
use agentry_schema::secret::Secret;
use async_trait::async_trait;
use reqwest::StatusCode;
use serde_json::{Map, Value, json};

use crate::http::{
    Flow, SseDecoder, Transport, events_stream, is_json, parse_arguments, read_json, sse_stream,
    status_error, temperature_json,
};
use crate::retry::RetryPolicy;
use crate::sse::SseEvent;
use crate::{
    ChatMessage, ChatModel, ChatRequest, ChatStream, LlmError, StopReason, StreamEvent, ToolCall,
};

/// The `anthropic-version` header sent with every request.
pub const ANTHROPIC_VERSION: &str = "2023-06-01";

/// `max_tokens` is required by the Messages API; this is used when the request sets none.
pub const DEFAULT_ANTHROPIC_MAX_TOKENS: u32 = 4096;

/// An Anthropic Messages endpoint.
#[derive(Debug, Clone)]
pub struct AnthropicModel {
    base_url: String,
    api_key: Option<Secret>,
    model: String,
    stream: bool,
    transport: Transport,
}

impl AnthropicModel {
    /// `base_url` is the API root without `/v1`, e.g. `https://api.anthropic.com`.
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
            stream: true,
            transport: Transport {
                client,
                timeout: Duration::from_secs(120),
                retry: RetryPolicy::default(),
            },
        }
    }

    pub fn with_streaming(mut self, stream: bool) -> Self {
        self.stream = stream;
        self
    }

    /// Limit on waiting for the response head and on each gap between streamed chunks.
    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.transport.timeout = timeout;
        self
    }

    pub fn with_retry(mut self, retry: RetryPolicy) -> Self {
        self.transport.retry = retry;
        self
    }

    pub fn endpoint(&self) -> String {
        format!("{}/v1/messages", self.base_url)
    }

    /// The JSON body sent for `request`.
    pub fn request_body(&self, request: &ChatRequest) -> Value {
        let mut body = Map::new();
        body.insert("model".into(), json!(self.model));
        body.insert(
            "max_tokens".into(),
            json!(request.max_tokens.unwrap_or(DEFAULT_ANTHROPIC_MAX_TOKENS)),
        );
        if let Some(system) = request.system.as_deref().filter(|s| !s.is_empty()) {
            body.insert("system".into(), json!(system));
        }
        body.insert("messages".into(), Value::Array(wire_messages(request)));
        if !request.tools.is_empty() {
            let tools = request
                .tools
                .iter()
                .map(|tool| {
                    json!({
                        "name": tool.name,
                        "description": tool.description,
                        "input_schema": tool.parameters,
                    })
                })
                .collect();
            body.insert("tools".into(), Value::Array(tools));
        }
        if let Some(temperature) = request.temperature {
            body.insert("temperature".into(), temperature_json(temperature));
        }
        body.insert("stream".into(), json!(self.stream));
        Value::Object(body)
    }
}

/// The conversation as Messages API turns. Messages of the same role that follow each other are
/// merged into one turn (tool results after an assistant turn become one user turn, with any user
/// text after them). Empty assistant turns are dropped: the API rejects empty content.
fn wire_messages(request: &ChatRequest) -> Vec<Value> {
    let mut turns: Vec<(&'static str, Vec<Value>)> = Vec::new();
    for message in &request.messages {
        let (role, blocks) = match message {
            ChatMessage::User { content } => {
                ("user", vec![json!({ "type": "text", "text": content })])
            }
            ChatMessage::Assistant {
                content,
                tool_calls,
            } => {
                let mut blocks = Vec::with_capacity(tool_calls.len() + 1);
                if !content.is_empty() {
                    blocks.push(json!({ "type": "text", "text": content }));
                }
                for call in tool_calls {
                    let input = if call.arguments.is_object() {
                        call.arguments.clone()
                    } else {
                        // `input` must be an object; keep what the model sent where it can see it.
                        json!({ "__invalid_json__": call.arguments.to_string() })
                    };
                    blocks.push(json!({
                        "type": "tool_use",
                        "id": call.id,
                        "name": call.name,
                        "input": input,
                    }));
                }
                ("assistant", blocks)
            }
            ChatMessage::Tool {
                tool_call_id,
                content,
                is_error,
                images,
                ..
            } => {
                // Images the tool returned go with its result, as image blocks.
                let content = if images.is_empty() {
                    json!(content)
                } else {
                    let mut blocks = vec![json!({"type": "text", "text": content})];
                    blocks.extend(images.iter().map(|i| {
                        json!({"type": "image", "source": {
                            "type": "base64", "media_type": i.mime_type, "data": i.data,
                        }})
                    }));
                    Value::Array(blocks)
                };
                let mut block = json!({
                    "type": "tool_result",
                    "tool_use_id": tool_call_id,
                    "content": content,
                });
                if *is_error {
                    block["is_error"] = json!(true);
                }
                ("user", vec![block])
            }
        };
        if blocks.is_empty() {
            continue;
        }
        match turns.last_mut() {
            Some((last_role, last_blocks)) if *last_role == role => last_blocks.extend(blocks),
            _ => turns.push((role, blocks)),
        }
    }
    turns
        .into_iter()
        .map(|(role, blocks)| {
            // A lone text block is sent as plain string content, the common form.
            let content = match blocks.as_slice() {
                [single] if single["type"] == "text" => single["text"].clone(),
                _ => Value::Array(blocks),
            };
            json!({ "role": role, "content": content })
        })
        .collect()
}

#[async_trait]
impl ChatModel for AnthropicModel {
    fn provider(&self) -> &str {
        "anthropic"
    }

    fn model(&self) -> &str {
        &self.model
    }

    #[tracing::instrument(level = "debug", skip_all, fields(provider = "anthropic", model = %self.model, stream = self.stream))]
    async fn stream(&self, request: &ChatRequest) -> Result<ChatStream, LlmError> {
        let body = self.request_body(request);
        let url = self.endpoint();
        let response = self
            .transport
            .send("anthropic", || {
                let builder = self
                    .transport
                    .client
                    .post(&url)
                    .header("anthropic-version", ANTHROPIC_VERSION)
                    .json(&body);
                match &self.api_key {
                    Some(key) => builder.header("x-api-key", key.expose()),
                    None => builder,
                }
            })
            .await?;
        // A server that ignores `stream: true` and answers with one JSON document still works.
        if self.stream && !is_json(&response) {
            Ok(sse_stream(
                response,
                self.transport.timeout,
                EventDecoder::default(),
            ))
        } else {
            let json = read_json(response, self.transport.timeout).await?;
            Ok(events_stream(decode_message(&json)?))
        }
    }
}

fn stop_reason(reason: Option<&str>, has_tool_calls: bool) -> StopReason {
    match reason {
        Some("end_turn" | "stop_sequence") => StopReason::EndTurn,
        Some("tool_use") => StopReason::ToolUse,
        Some("max_tokens") => StopReason::MaxTokens,
        Some(_) => StopReason::Other,
        None if has_tool_calls => StopReason::ToolUse,
        None => StopReason::EndTurn,
    }
}

/// Input tokens count the prompt read from cache too: it is all prompt the model processed.
fn input_tokens(usage: &Value) -> Option<u64> {
    let count = |key: &str| usage.get(key).and_then(Value::as_u64);
    let base = count("input_tokens")?;
    Some(
        base + count("cache_creation_input_tokens").unwrap_or(0)
            + count("cache_read_input_tokens").unwrap_or(0),
    )
}

/// An `error` object (`{"type":"overloaded_error","message":…}`) as the [`LlmError`] its HTTP
/// status would have produced.
fn api_error(error: &Value) -> LlmError {
    let status = match error.get("type").and_then(Value::as_str).unwrap_or("") {
        "invalid_request_error" => 400,
        "authentication_error" => 401,
        "permission_error" => 403,
        "not_found_error" => 404,
        "request_too_large" => 413,
        "rate_limit_error" => 429,
        "overloaded_error" => 529,
        _ => 500,
    };
    let body = json!({ "error": error }).to_string();
    status_error(
        StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR),
        &body,
        None,
    )
}

/// A non-streamed `message` as events.
pub(crate) fn decode_message(json: &Value) -> Result<Vec<StreamEvent>, LlmError> {
    if json.get("type").and_then(Value::as_str) == Some("error") {
        return Err(api_error(json.get("error").unwrap_or(&Value::Null)));
    }
    let blocks = json
        .get("content")
        .and_then(Value::as_array)
        .ok_or_else(|| LlmError::Decode("the message has no content array".into()))?;
    let mut events = Vec::new();
    let mut has_tool_calls = false;
    for block in blocks {
        match block.get("type").and_then(Value::as_str) {
            Some("text") => {
                if let Some(text) = block.get("text").and_then(Value::as_str)
                    && !text.is_empty()
                {
                    events.push(StreamEvent::TextDelta(text.to_string()));
                }
            }
            Some("tool_use") => {
                events.push(StreamEvent::ToolCall(tool_call(
                    block,
                    block.get("input").cloned(),
                )?));
                has_tool_calls = true;
            }
            // thinking, redacted_thinking, server tool blocks: not part of the answer we relay.
            _ => {}
        }
    }
    if let Some(usage) = json.get("usage") {
        let output = usage
            .get("output_tokens")
            .and_then(Value::as_u64)
            .unwrap_or(0);
        events.push(StreamEvent::Usage(TokenUsage::new(
            input_tokens(usage).unwrap_or(0),
            output,
        )));
    }
    let reason = json.get("stop_reason").and_then(Value::as_str);
    events.push(StreamEvent::Done(stop_reason(reason, has_tool_calls)));
    Ok(events)
}

fn tool_call(block: &Value, input: Option<Value>) -> Result<ToolCall, LlmError> {
    let id = block
        .get("id")
        .and_then(Value::as_str)
        .filter(|id| !id.is_empty())
        .ok_or_else(|| LlmError::Decode("a tool_use block has no id".into()))?;
    let name = block
        .get("name")
        .and_then(Value::as_str)
        .filter(|n| !n.is_empty())
        .ok_or_else(|| LlmError::Decode(format!("tool_use block {id} has no name")))?;
    Ok(ToolCall {
        id: id.to_string(),
        name: name.to_string(),
        arguments: input.unwrap_or_else(|| Value::Object(Map::new())),
    })
}

#[derive(Debug)]
enum Block {
    Text,
    ToolUse {
        block: Value,
        partial_json: String,
    },
    /// thinking and other blocks we do not relay.
    Other,
}

/// Follows the Messages streaming events.
#[derive(Debug, Default)]
pub(crate) struct EventDecoder {
    started: bool,
    blocks: BTreeMap<u64, Block>,
    input_tokens: u64,
    output_tokens: u64,
    stop_reason: Option<String>,
    has_tool_calls: bool,
}

impl EventDecoder {
    fn finish(&mut self, out: &mut Vec<StreamEvent>) {
        out.push(StreamEvent::Usage(TokenUsage::new(
            self.input_tokens,
            self.output_tokens,
        )));
        out.push(StreamEvent::Done(stop_reason(
            self.stop_reason.as_deref(),
            self.has_tool_calls,
        )));
    }

    fn index(event: &Value) -> Result<u64, LlmError> {
        event
            .get("index")
            .and_then(Value::as_u64)
            .ok_or_else(|| LlmError::Decode(format!("a content block event has no index: {event}")))
    }
}

impl SseDecoder for EventDecoder {
    fn on_event(&mut self, event: SseEvent, out: &mut Vec<StreamEvent>) -> Result<Flow, LlmError> {
        let data: Value = serde_json::from_str(&event.data).map_err(|e| {
            LlmError::Decode(format!(
                "a streamed event is not JSON ({e}): {}",
                event.data
            ))
        })?;
        let kind = data
            .get("type")
            .and_then(Value::as_str)
            .or(event.event.as_deref())
            .unwrap_or("");
        match kind {
            "message_start" => {
                self.started = true;
                if let Some(usage) = data.pointer("/message/usage") {
                    self.input_tokens = input_tokens(usage).unwrap_or(0);
                    self.output_tokens = usage
                        .get("output_tokens")
                        .and_then(Value::as_u64)
                        .unwrap_or(0);
                }
            }
            "content_block_start" => {
                let index = Self::index(&data)?;
                let block = data.get("content_block").unwrap_or(&Value::Null);
                let entry = match block.get("type").and_then(Value::as_str) {
                    Some("text") => {
                        if let Some(text) = block.get("text").and_then(Value::as_str)
                            && !text.is_empty()
                        {
                            out.push(StreamEvent::TextDelta(text.to_string()));
                        }
                        Block::Text
                    }
                    Some("tool_use") => Block::ToolUse {
                        block: block.clone(),
                        partial_json: String::new(),
                    },
                    _ => Block::Other,
                };
                self.blocks.insert(index, entry);
            }
            "content_block_delta" => {
                let index = Self::index(&data)?;
                let delta = data.get("delta").unwrap_or(&Value::Null);
                match (
                    self.blocks.get_mut(&index),
                    delta.get("type").and_then(Value::as_str),
                ) {
                    (Some(Block::Text), Some("text_delta")) => {
                        if let Some(text) = delta.get("text").and_then(Value::as_str)
                            && !text.is_empty()
                        {
                            out.push(StreamEvent::TextDelta(text.to_string()));
                        }
                    }
                    (Some(Block::ToolUse { partial_json, .. }), Some("input_json_delta")) => {
                        if let Some(piece) = delta.get("partial_json").and_then(Value::as_str) {
                            partial_json.push_str(piece);
                        }
                    }
                    (None, _) => {
                        return Err(LlmError::Decode(format!(
                            "a delta for content block {index}, which never started"
                        )));
                    }
                    // thinking_delta, signature_delta, citations…
                    _ => {}
                }
            }
            "content_block_stop" => {
                let index = Self::index(&data)?;
                if let Some(Block::ToolUse {
                    block,
                    partial_json,
                }) = self.blocks.remove(&index)
                {
                    let input = if partial_json.trim().is_empty() {
                        block.get("input").cloned()
                    } else {
                        Some(parse_arguments(&partial_json))
                    };
                    out.push(StreamEvent::ToolCall(tool_call(&block, input)?));
                    self.has_tool_calls = true;
                }
            }
            "message_delta" => {
                if let Some(reason) = data.pointer("/delta/stop_reason").and_then(Value::as_str) {
                    self.stop_reason = Some(reason.to_string());
                }
                if let Some(usage) = data.get("usage") {
                    // Cumulative counts: the latest value replaces the earlier one.
                    if let Some(output) = usage.get("output_tokens").and_then(Value::as_u64) {
                        self.output_tokens = output;
                    }
                    if let Some(input) = input_tokens(usage) {
                        self.input_tokens = input;
                    }
                }
            }
            "message_stop" => {
                self.finish(out);
                return Ok(Flow::Finished);
            }
            "error" => return Err(api_error(data.get("error").unwrap_or(&Value::Null))),
            // ping, and event types added after this client was written.
            _ => {}
        }
        Ok(Flow::Continue)
    }

    fn on_end(&mut self, out: &mut Vec<StreamEvent>) -> Result<(), LlmError> {
        if self.started && self.stop_reason.is_some() && self.blocks.is_empty() {
            self.finish(out);
            return Ok(());
        }
        Err(LlmError::Decode(
            "the stream ended before the model finished its answer (no message_stop)".into(),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ToolSchema;

    fn event(data: Value) -> SseEvent {
        SseEvent {
            event: data["type"].as_str().map(str::to_string),
            data: data.to_string(),
        }
    }

    #[test]
    fn streamed_events_become_text_tool_calls_usage_and_stop() {
        let mut decoder = EventDecoder::default();
        let mut out = Vec::new();
        let events = [
            json!({"type":"message_start","message":{"id":"msg_1","type":"message","role":"assistant","content":[],"model":"m","stop_reason":null,"usage":{"input_tokens":20,"cache_read_input_tokens":5,"output_tokens":1}}}),
            json!({"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}),
            json!({"type":"ping"}),
            json!({"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Checking"}}),
            json!({"type":"content_block_stop","index":0}),
            json!({"type":"content_block_start","index":1,"content_block":{"type":"tool_use","id":"toolu_1","name":"ls","input":{}}}),
            json!({"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":""}}),
            json!({"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":"{\"dir\": "}}),
            json!({"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":"\"/tmp\"}"}}),
            json!({"type":"content_block_stop","index":1}),
            json!({"type":"content_block_start","index":2,"content_block":{"type":"tool_use","id":"toolu_2","name":"date","input":{}}}),
            json!({"type":"content_block_stop","index":2}),
            json!({"type":"message_delta","delta":{"stop_reason":"tool_use","stop_sequence":null},"usage":{"output_tokens":31}}),
        ];
        for e in events {
            assert_eq!(
                decoder.on_event(event(e), &mut out).unwrap(),
                Flow::Continue
            );
        }
        assert_eq!(
            decoder
                .on_event(event(json!({"type":"message_stop"})), &mut out)
                .unwrap(),
            Flow::Finished
        );
        assert_eq!(
            out,
            vec![
                StreamEvent::TextDelta("Checking".into()),
                StreamEvent::ToolCall(ToolCall {
                    id: "toolu_1".into(),
                    name: "ls".into(),
                    arguments: json!({"dir": "/tmp"})
                }),
                StreamEvent::ToolCall(ToolCall {
                    id: "toolu_2".into(),
                    name: "date".into(),
                    arguments: json!({})
                }),
                StreamEvent::Usage(TokenUsage::new(25, 31)),
                StreamEvent::Done(StopReason::ToolUse),
            ]
        );
    }

    #[test]
    fn error_events_map_to_errors() {
        let mut decoder = EventDecoder::default();
        let err = decoder
            .on_event(
                event(json!({"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}})),
                &mut Vec::new(),
            )
            .unwrap_err();
        assert_eq!(
            err,
            LlmError::Server {
                status: 529,
                message: "Overloaded".into()
            }
        );
        assert!(err.is_retryable());
    }

    #[test]
    fn tool_results_merge_into_one_user_turn() {
        let model = AnthropicModel::new(reqwest::Client::new(), "http://x/", None, "m");
        let request = ChatRequest {
            system: Some("be brief".into()),
            messages: vec![
                ChatMessage::User {
                    content: "hi".into(),
                },
                ChatMessage::Assistant {
                    content: String::new(),
                    tool_calls: vec![
                        ToolCall {
                            id: "a".into(),
                            name: "x".into(),
                            arguments: json!({}),
                        },
                        ToolCall {
                            id: "b".into(),
                            name: "y".into(),
                            arguments: json!({"k": 1}),
                        },
                    ],
                },
                ChatMessage::Tool {
                    images: Vec::new(),
                    tool_call_id: "a".into(),
                    name: "x".into(),
                    content: "1".into(),
                    is_error: false,
                },
                ChatMessage::Tool {
                    images: Vec::new(),
                    tool_call_id: "b".into(),
                    name: "y".into(),
                    content: "{\"error\":\"no\"}".into(),
                    is_error: true,
                },
            ],
            tools: vec![ToolSchema {
                name: "x".into(),
                description: "d".into(),
                parameters: json!({"type": "object"}),
            }],
            temperature: None,
            max_tokens: None,
        };
        let body = model.request_body(&request);
        assert_eq!(model.endpoint(), "http://x/v1/messages");
        assert_eq!(
            body,
            json!({
                "model": "m",
                "max_tokens": DEFAULT_ANTHROPIC_MAX_TOKENS,
                "system": "be brief",
                "stream": true,
                "tools": [{"name": "x", "description": "d", "input_schema": {"type": "object"}}],
                "messages": [
                    {"role": "user", "content": "hi"},
                    {"role": "assistant", "content": [
                        {"type": "tool_use", "id": "a", "name": "x", "input": {}},
                        {"type": "tool_use", "id": "b", "name": "y", "input": {"k": 1}},
                    ]},
                    {"role": "user", "content": [
                        {"type": "tool_result", "tool_use_id": "a", "content": "1"},
                        {"type": "tool_result", "tool_use_id": "b", "content": "{\"error\":\"no\"}", "is_error": true},
                    ]},
                ]
            })
        );
    }
}
