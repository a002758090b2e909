//! OpenAI-compatible chat completions (`POST {base_url}/chat/completions`): OpenAI, DeepSeek,
//! Ollama, vLLM and anything else that speaks the same wire format.
//!
//! Streaming uses `stream: true` with `stream_options.include_usage`, so the last chunk before
//! `data: [DONE]` carries the token usage. Tool calls arrive as deltas keyed by `index`; they are
//! assembled here and each complete call is emitted once, when the choice finishes.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::time::Duration;

use agentry_schema::events::TokenUsage;
use agentry_schema::secret::Secret;
use async_trait::async_trait;
use serde::de::{IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde::{Deserialize, Deserializer};
use serde_json::{Map, Value, json};

use crate::http::{
    Flow, SseDecoder, Transport, events_stream, is_json, json_error_message, parse_arguments,
    read_json, sse_stream, temperature_json,
};
use crate::retry::RetryPolicy;
use crate::sse::SseEvent;
use crate::{
    ChatMessage, ChatModel, ChatRequest, ChatStream, LlmError, StopReason, StreamEvent, ToolCall,
};

/// A chat completions endpoint.
#[derive(Debug, Clone)]
pub struct OpenAiModel {
    base_url: String,
    api_key: Option<Secret>,
    model: String,
    stream: bool,
    transport: Transport,
}

impl OpenAiModel {
    /// `base_url` is the API root, e.g. `https://api.openai.com/v1` or
    /// `http://localhost:11434/v1`; `/chat/completions` is appended. Without `api_key` no
    /// `Authorization` header is sent (local servers).
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

    /// Streamed (SSE) answers when true, one JSON document when false.
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
        format!("{}/chat/completions", self.base_url)
    }

    /// The JSON body sent for `request`, as a value (what [`OpenAiModel::request_bytes`]
    /// sends).
    pub fn request_body(&self, request: &ChatRequest) -> Value {
        serde_json::to_value(self.wire(request)).unwrap_or(Value::Null)
    }

    /// The body sent for `request`: serialized straight from the request, borrowing its
    /// messages and tool schemas (a model call's largest allocation was building this body as
    /// a `serde_json::Value` tree, copying every message and schema, and serializing that).
    pub fn request_bytes(&self, request: &ChatRequest) -> Result<bytes::Bytes, LlmError> {
        serde_json::to_vec(&self.wire(request))
            .map(bytes::Bytes::from)
            .map_err(|e| LlmError::Decode(format!("encoding the request: {e}")))
    }

    fn wire<'a>(&'a self, request: &'a ChatRequest) -> WireRequest<'a> {
        WireRequest {
            model: &self.model,
            messages: wire_messages(request),
            tools: request
                .tools
                .iter()
                .map(|tool| WireTool {
                    kind: "function",
                    function: WireFunction {
                        name: &tool.name,
                        description: &tool.description,
                        parameters: &tool.parameters,
                    },
                })
                .collect(),
            temperature: request.temperature.map(temperature_json),
            max_tokens: request.max_tokens,
            stream: self.stream,
            stream_options: self.stream.then_some(StreamOptions {
                include_usage: true,
            }),
        }
    }
}

#[derive(serde::Serialize)]
struct WireRequest<'a> {
    model: &'a str,
    messages: Vec<WireMessage<'a>>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    tools: Vec<WireTool<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    temperature: Option<Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    max_tokens: Option<u32>,
    stream: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    stream_options: Option<StreamOptions>,
}

#[derive(serde::Serialize)]
struct StreamOptions {
    include_usage: bool,
}

#[derive(serde::Serialize)]
struct WireTool<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    function: WireFunction<'a>,
}

#[derive(serde::Serialize)]
struct WireFunction<'a> {
    name: &'a str,
    description: &'a str,
    parameters: &'a Value,
}

#[derive(serde::Serialize)]
struct WireMessage<'a> {
    role: &'static str,
    content: WireContent<'a>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    tool_calls: Vec<WireCall<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tool_call_id: Option<&'a str>,
}

impl<'a> WireMessage<'a> {
    fn text(role: &'static str, content: &'a str) -> Self {
        WireMessage {
            role,
            content: WireContent::Text(content),
            tool_calls: Vec::new(),
            tool_call_id: None,
        }
    }
}

#[derive(serde::Serialize)]
#[serde(untagged)]
enum WireContent<'a> {
    Text(&'a str),
    /// OpenAI wants `content: null` rather than "" beside tool calls.
    Null(()),
    Parts(Value),
}

#[derive(serde::Serialize)]
struct WireCall<'a> {
    id: &'a str,
    #[serde(rename = "type")]
    kind: &'static str,
    function: WireCallFunction<'a>,
}

#[derive(serde::Serialize)]
struct WireCallFunction<'a> {
    name: &'a str,
    /// The arguments as JSON text, as the API wants them.
    arguments: String,
}

/// The conversation in chat completions form: the system prompt first, assistant messages with
/// `tool_calls` (arguments as JSON text), tool results as `tool` messages with `tool_call_id`.
fn wire_messages(request: &ChatRequest) -> Vec<WireMessage<'_>> {
    let mut messages = Vec::with_capacity(request.messages.len() + 1);
    if let Some(system) = request.system.as_deref().filter(|s| !s.is_empty()) {
        messages.push(WireMessage::text("system", system));
    }
    let mut pending_images = Vec::new();
    let mut rest = request.messages.iter().peekable();
    while let Some(message) = rest.next() {
        messages.push(match message {
            ChatMessage::User { content } => WireMessage::text("user", content),
            ChatMessage::Assistant {
                content,
                tool_calls,
            } => WireMessage {
                role: "assistant",
                content: if content.is_empty() && !tool_calls.is_empty() {
                    WireContent::Null(())
                } else {
                    WireContent::Text(content)
                },
                tool_calls: tool_calls
                    .iter()
                    .map(|call| WireCall {
                        id: &call.id,
                        kind: "function",
                        function: WireCallFunction {
                            name: &call.name,
                            arguments: call.arguments.to_string(),
                        },
                    })
                    .collect(),
                tool_call_id: None,
            },
            ChatMessage::Tool {
                tool_call_id,
                content,
                images,
                ..
            } => {
                pending_images.extend(images.iter().map(|i| (tool_call_id.clone(), i.clone())));
                WireMessage {
                    tool_call_id: Some(tool_call_id),
                    ..WireMessage::text("tool", content)
                }
            }
        });
        // A tool message can hold only text: the images of a turn's tool results follow all
        // of its tool messages (the API wants those right after the assistant's tool calls),
        // as one user message of image parts.
        let next_is_tool = matches!(rest.peek(), Some(ChatMessage::Tool { .. }));
        if !next_is_tool && !pending_images.is_empty() {
            messages.push(WireMessage {
                role: "user",
                content: WireContent::Parts(image_parts(std::mem::take(&mut pending_images))),
                tool_calls: Vec::new(),
                tool_call_id: None,
            });
        }
    }
    messages
}

/// The parts of a user message showing tool results' images (`(tool_call_id, image)`).
fn image_parts(images: Vec<(String, crate::ImagePart)>) -> Value {
    let mut parts = vec![json!({
        "type": "text",
        "text": "Images returned by the tool calls above:",
    })];
    for (call, image) in images {
        parts.push(json!({"type": "text", "text": format!("from tool call {call}:")}));
        parts.push(json!({
            "type": "image_url",
            "image_url": {"url": format!("data:{};base64,{}", image.mime_type, image.data)},
        }));
    }
    Value::Array(parts)
}

#[async_trait]
impl ChatModel for OpenAiModel {
    fn provider(&self) -> &str {
        "openai"
    }

    fn model(&self) -> &str {
        &self.model
    }

    #[tracing::instrument(level = "debug", skip_all, fields(provider = "openai", model = %self.model, stream = self.stream))]
    async fn stream(&self, request: &ChatRequest) -> Result<ChatStream, LlmError> {
        let body = self.request_bytes(request)?;
        let url = self.endpoint();
        let response = self
            .transport
            .send("openai", || {
                let builder = self
                    .transport
                    .client
                    .post(&url)
                    .header(reqwest::header::CONTENT_TYPE, "application/json")
                    .body(body.clone());
                match &self.api_key {
                    Some(key) => builder.bearer_auth(key.expose()),
                    None => builder,
                }
            })
            .await?;
        // A server that ignores `stream: true` and answers with one JSON document still works.
        if self.stream && !is_json(&response) {
            Ok(sse_stream(
                response,
                self.transport.timeout,
                ChunkDecoder::default(),
            ))
        } else {
            let json = read_json(response, self.transport.timeout).await?;
            Ok(events_stream(decode_completion(&json)?))
        }
    }
}

/// `finish_reason` to [`StopReason`]. Some servers (Ollama) say `stop` beside tool calls; the
/// presence of calls wins.
fn stop_reason(finish_reason: &str, has_tool_calls: bool) -> StopReason {
    if has_tool_calls {
        return StopReason::ToolUse;
    }
    match finish_reason {
        "stop" => StopReason::EndTurn,
        "tool_calls" | "function_call" => StopReason::ToolUse,
        "length" => StopReason::MaxTokens,
        _ => StopReason::Other,
    }
}

fn usage(value: &Value) -> Option<TokenUsage> {
    if !value.is_object() {
        return None;
    }
    let count = |key: &str| value.get(key).and_then(Value::as_u64).unwrap_or(0);
    Some(TokenUsage::new(
        count("prompt_tokens"),
        count("completion_tokens"),
    ))
}

/// A non-streamed `chat.completion` as events.
pub(crate) fn decode_completion(json: &Value) -> Result<Vec<StreamEvent>, LlmError> {
    if let Some(message) = json
        .get("error")
        .filter(|e| !e.is_null())
        .and_then(|_| json_error_message(json))
    {
        return Err(LlmError::Server {
            status: 500,
            message,
        });
    }
    let choice = json
        .pointer("/choices/0")
        .ok_or_else(|| LlmError::Decode("the completion has no choices".into()))?;
    let message = choice.get("message").unwrap_or(&Value::Null);
    let mut events = Vec::new();
    if let Some(text) = message.get("content").and_then(Value::as_str)
        && !text.is_empty()
    {
        events.push(StreamEvent::TextDelta(text.to_string()));
    }
    let calls = message
        .get("tool_calls")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    for (i, call) in calls.iter().enumerate() {
        let name = call
            .pointer("/function/name")
            .and_then(Value::as_str)
            .filter(|n| !n.is_empty())
            .ok_or_else(|| LlmError::Decode(format!("tool call #{i} has no function name")))?;
        let id = call
            .get("id")
            .and_then(Value::as_str)
            .filter(|id| !id.is_empty())
            .map(str::to_string)
            .unwrap_or_else(|| format!("call_{i}"));
        let arguments = match call.pointer("/function/arguments") {
            Some(Value::String(raw)) => parse_arguments(raw),
            // A few compatible servers send the arguments as an object.
            Some(value @ Value::Object(_)) => value.clone(),
            _ => Value::Object(Map::new()),
        };
        events.push(StreamEvent::ToolCall(ToolCall {
            id,
            name: name.to_string(),
            arguments,
        }));
    }
    if let Some(usage) = json.get("usage").and_then(usage) {
        events.push(StreamEvent::Usage(usage));
    }
    let finish = choice
        .get("finish_reason")
        .and_then(Value::as_str)
        .unwrap_or("stop");
    events.push(StreamEvent::Done(stop_reason(finish, !calls.is_empty())));
    Ok(events)
}

#[derive(Debug, Default)]
struct PartialCall {
    id: String,
    name: String,
    arguments: String,
}

/// One streamed `chat.completion.chunk`, read for the parts [`ChunkDecoder`] uses: the rest is
/// skipped, not built (a chunk arrives per word of an answer, and building each as a
/// `serde_json::Value` was a twentieth of the server's CPU per run). Text borrows from the
/// chunk where it has no escapes. As lenient as reading a `Value` was: a field of another type
/// than expected counts as absent.
#[derive(Deserialize)]
struct Chunk<'a> {
    #[serde(default)]
    error: Option<Value>,
    #[serde(default)]
    usage: Option<Value>,
    #[serde(default, borrow, deserialize_with = "lenient")]
    choices: Vec<ChunkChoice<'a>>,
}

#[derive(Deserialize)]
struct ChunkChoice<'a> {
    #[serde(default, borrow, deserialize_with = "lenient")]
    delta: Option<ChunkDelta<'a>>,
    #[serde(default, borrow)]
    finish_reason: Text<'a>,
}

#[derive(Deserialize, Default)]
struct ChunkDelta<'a> {
    #[serde(default, borrow)]
    content: Text<'a>,
    #[serde(default, borrow, deserialize_with = "lenient")]
    tool_calls: Option<Vec<CallDelta<'a>>>,
}

#[derive(Deserialize)]
struct CallDelta<'a> {
    #[serde(default)]
    index: Option<Value>,
    #[serde(default, borrow)]
    id: Text<'a>,
    #[serde(default, borrow, deserialize_with = "lenient")]
    function: Option<FunctionDelta<'a>>,
}

#[derive(Deserialize, Default)]
struct FunctionDelta<'a> {
    #[serde(default, borrow)]
    name: Text<'a>,
    #[serde(default)]
    arguments: Option<Value>,
}

/// A string field; any other JSON value (a number, `null`, an object) reads as absent.
#[derive(Default)]
struct Text<'a>(Option<Cow<'a, str>>);

impl<'de: 'a, 'a> Deserialize<'de> for Text<'a> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Text<'de>;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("any JSON value")
            }
            fn visit_borrowed_str<E>(self, v: &'de str) -> Result<Text<'de>, E> {
                Ok(Text(Some(Cow::Borrowed(v))))
            }
            fn visit_str<E>(self, v: &str) -> Result<Text<'de>, E> {
                Ok(Text(Some(Cow::Owned(v.to_owned()))))
            }
            fn visit_string<E>(self, v: String) -> Result<Text<'de>, E> {
                Ok(Text(Some(Cow::Owned(v))))
            }
            fn visit_bool<E>(self, _: bool) -> Result<Text<'de>, E> {
                Ok(Text(None))
            }
            fn visit_i64<E>(self, _: i64) -> Result<Text<'de>, E> {
                Ok(Text(None))
            }
            fn visit_u64<E>(self, _: u64) -> Result<Text<'de>, E> {
                Ok(Text(None))
            }
            fn visit_f64<E>(self, _: f64) -> Result<Text<'de>, E> {
                Ok(Text(None))
            }
            fn visit_unit<E>(self) -> Result<Text<'de>, E> {
                Ok(Text(None))
            }
            fn visit_none<E>(self) -> Result<Text<'de>, E> {
                Ok(Text(None))
            }
            fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Text<'de>, D::Error> {
                d.deserialize_any(V)
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut a: A) -> Result<Text<'de>, A::Error> {
                while a.next_element::<IgnoredAny>()?.is_some() {}
                Ok(Text(None))
            }
            fn visit_map<A: MapAccess<'de>>(self, mut a: A) -> Result<Text<'de>, A::Error> {
                while a.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
                Ok(Text(None))
            }
        }
        d.deserialize_any(V)
    }
}

/// A structured field read leniently: the value when it has the expected shape, the default
/// otherwise (the chunk itself stays valid JSON; its odd field is ignored, as before).
fn lenient<'de, D, T>(d: D) -> Result<T, D::Error>
where
    D: Deserializer<'de>,
    T: Deserialize<'de> + Default,
{
    let raw: &'de serde_json::value::RawValue = Deserialize::deserialize(d)?;
    Ok(serde_json::from_str(raw.get()).unwrap_or_default())
}

/// Assembles `chat.completion.chunk`s.
#[derive(Debug, Default)]
pub(crate) struct ChunkDecoder {
    calls: BTreeMap<u64, PartialCall>,
    finish_reason: Option<String>,
    usage: Option<TokenUsage>,
}

impl ChunkDecoder {
    fn finish(&mut self, out: &mut Vec<StreamEvent>) {
        if let Some(usage) = self.usage.take() {
            out.push(StreamEvent::Usage(usage));
        }
        let finish = self.finish_reason.as_deref().unwrap_or("stop");
        out.push(StreamEvent::Done(stop_reason(finish, false)));
    }

    /// Emit the assembled tool calls, in index order.
    fn flush_calls(&mut self, out: &mut Vec<StreamEvent>) -> Result<bool, LlmError> {
        let had_calls = !self.calls.is_empty();
        for (index, call) in std::mem::take(&mut self.calls) {
            if call.name.is_empty() {
                return Err(LlmError::Decode(format!(
                    "tool call at index {index} finished without a function name"
                )));
            }
            let id = if call.id.is_empty() {
                format!("call_{index}")
            } else {
                call.id
            };
            out.push(StreamEvent::ToolCall(ToolCall {
                id,
                name: call.name,
                arguments: parse_arguments(&call.arguments),
            }));
        }
        Ok(had_calls)
    }
}

impl SseDecoder for ChunkDecoder {
    fn on_event(&mut self, event: SseEvent, out: &mut Vec<StreamEvent>) -> Result<Flow, LlmError> {
        let data = event.data.trim();
        if data == "[DONE]" {
            if self.finish_reason.is_none() && !self.calls.is_empty() {
                self.flush_calls(out)?;
                self.finish_reason = Some("tool_calls".into());
            }
            if self.finish_reason.is_none() {
                return Err(LlmError::Decode(
                    "the stream ended ([DONE]) before the model finished its answer".into(),
                ));
            }
            self.finish(out);
            return Ok(Flow::Finished);
        }
        if data.is_empty() {
            return Ok(Flow::Continue);
        }
        let chunk: Chunk<'_> = serde_json::from_str(data)
            .map_err(|e| LlmError::Decode(format!("a streamed chunk is not JSON ({e}): {data}")))?;
        if chunk.error.as_ref().is_some_and(|e| !e.is_null()) {
            let whole: Value = serde_json::from_str(data).unwrap_or(Value::Null);
            let message = json_error_message(&whole).unwrap_or_else(|| data.to_string());
            return Err(LlmError::Server {
                status: 500,
                message,
            });
        }
        if let Some(usage) = chunk.usage.as_ref().and_then(usage) {
            self.usage = Some(usage);
        }
        let Some(choice) = chunk.choices.into_iter().next() else {
            return Ok(Flow::Continue);
        };
        let delta = choice.delta.unwrap_or_default();
        if let Some(text) = delta.content.0
            && !text.is_empty()
        {
            out.push(StreamEvent::TextDelta(text.into_owned()));
        }
        for (position, call) in delta.tool_calls.unwrap_or_default().into_iter().enumerate() {
            let index = call
                .index
                .as_ref()
                .and_then(Value::as_u64)
                .unwrap_or(position as u64);
            let partial = self.calls.entry(index).or_default();
            if let Some(id) = call.id.0
                && partial.id.is_empty()
            {
                partial.id = id.into_owned();
            }
            let function = call.function.unwrap_or_default();
            if let Some(name) = function.name.0 {
                partial.name.push_str(&name);
            }
            match function.arguments {
                Some(Value::String(piece)) => partial.arguments.push_str(&piece),
                Some(value @ Value::Object(_)) => partial.arguments = value.to_string(),
                _ => {}
            }
        }
        if let Some(finish) = choice.finish_reason.0 {
            let had_calls = self.flush_calls(out)?;
            self.finish_reason = Some(if had_calls {
                "tool_calls".to_string()
            } else {
                finish.into_owned()
            });
        }
        Ok(Flow::Continue)
    }

    fn on_end(&mut self, out: &mut Vec<StreamEvent>) -> Result<(), LlmError> {
        // Lenient: a server that finished the choice but closed without `[DONE]` still answered.
        if self.finish_reason.is_some() {
            self.finish(out);
            return Ok(());
        }
        Err(LlmError::Decode(
            "the stream ended before the model finished its answer".into(),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ImagePart;

    /// Tool messages take text only, and must directly follow the assistant's tool calls: the
    /// images of a turn's results come after all of its tool messages, as one user message.
    #[test]
    fn tool_images_follow_all_the_tool_messages_of_their_turn() {
        let call = |id: &str| ToolCall {
            id: id.into(),
            name: "t".into(),
            arguments: json!({}),
        };
        let tool = |id: &str, images: Vec<ImagePart>| ChatMessage::Tool {
            tool_call_id: id.into(),
            name: "t".into(),
            content: "[image: image/png, 3 bytes]".into(),
            is_error: false,
            images,
        };
        let png = ImagePart {
            mime_type: "image/png".into(),
            data: "AAAA".into(),
        };
        let request = ChatRequest {
            messages: vec![
                ChatMessage::User {
                    content: "go".into(),
                },
                ChatMessage::Assistant {
                    content: String::new(),
                    tool_calls: vec![call("a"), call("b")],
                },
                tool("a", vec![png.clone()]),
                tool("b", Vec::new()),
                ChatMessage::User {
                    content: "next".into(),
                },
            ],
            ..ChatRequest::default()
        };
        let wire = serde_json::to_value(wire_messages(&request)).unwrap();
        let wire = wire.as_array().unwrap();
        let roles: Vec<&str> = wire.iter().map(|m| m["role"].as_str().unwrap()).collect();
        assert_eq!(roles, ["user", "assistant", "tool", "tool", "user", "user"]);
        assert_eq!(wire[2]["content"], "[image: image/png, 3 bytes]");
        let parts = wire[4]["content"].as_array().unwrap();
        assert!(parts.iter().any(|p| p["type"] == "text"
            && p["text"].as_str().unwrap().contains("tool call a")));
        assert_eq!(
            parts.last().unwrap()["image_url"]["url"],
            "data:image/png;base64,AAAA"
        );
        assert_eq!(wire[5]["content"], "next");
        // Without images nothing is added.
        let mut plain = request.clone();
        plain.messages[2] = tool("a", Vec::new());
        assert_eq!(wire_messages(&plain).len(), 5);
    }

    fn sse(data: &str) -> SseEvent {
        SseEvent {
            event: None,
            data: data.to_string(),
        }
    }

    #[test]
    fn tool_call_deltas_are_assembled_by_index() {
        let mut decoder = ChunkDecoder::default();
        let mut out = Vec::new();
        let chunks = [
            r#"{"choices":[{"index":0,"delta":{"role":"assistant","content":"Let me"}}]}"#,
            r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":1,"id":"call_b","type":"function","function":{"name":"ls","arguments":""}}]}}]}"#,
            r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"call_a","type":"function","function":{"name":"read","arguments":"{\"pa"}}]}}]}"#,
            r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":1,"function":{"arguments":"{\"dir\":\"/\"}"}}]}}]}"#,
            r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"th\":\"a\"}"}}]}}]}"#,
            r#"{"choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"}]}"#,
            r#"{"choices":[],"usage":{"prompt_tokens":10,"completion_tokens":5,"total_tokens":15}}"#,
        ];
        for chunk in chunks {
            assert_eq!(
                decoder.on_event(sse(chunk), &mut out).unwrap(),
                Flow::Continue
            );
        }
        assert_eq!(
            decoder.on_event(sse("[DONE]"), &mut out).unwrap(),
            Flow::Finished
        );
        assert_eq!(
            out,
            vec![
                StreamEvent::TextDelta("Let me".into()),
                StreamEvent::ToolCall(ToolCall {
                    id: "call_a".into(),
                    name: "read".into(),
                    arguments: json!({"path": "a"})
                }),
                StreamEvent::ToolCall(ToolCall {
                    id: "call_b".into(),
                    name: "ls".into(),
                    arguments: json!({"dir": "/"})
                }),
                StreamEvent::Usage(TokenUsage::new(10, 5)),
                StreamEvent::Done(StopReason::ToolUse),
            ]
        );
    }

    /// Fields of another type than expected are ignored, not fatal (as when chunks were read
    /// as `serde_json::Value`); escaped text is unescaped; an `error` chunk is the server's.
    #[test]
    fn odd_fields_are_ignored_and_escapes_read() {
        let mut decoder = ChunkDecoder::default();
        let mut out = Vec::new();
        let chunks = [
            r#"{"id":"x","choices":[{"index":0,"delta":{"content":5}}],"usage":null}"#,
            r#"{"choices":[{"index":0,"delta":"odd","finish_reason":null}]}"#,
            r#"{"choices":{"not":"a list"}}"#,
            r#"{"choices":[{"delta":{"content":"say \"hi\"\n\u00e9","tool_calls":{"0":1}}}]}"#,
            r#"{"choices":[{"delta":{"tool_calls":[{"index":"0","id":7,"function":"odd"}]}}]}"#,
            r#"{"choices":[{"delta":{"tool_calls":[{"id":"c1","function":{"name":"ls","arguments":{"dir":"/"}}}]}}]}"#,
            r#"{"choices":[{"delta":{},"finish_reason":"stop"}]}"#,
        ];
        for chunk in chunks {
            assert_eq!(
                decoder.on_event(sse(chunk), &mut out).unwrap(),
                Flow::Continue,
                "{chunk}"
            );
        }
        decoder.on_event(sse("[DONE]"), &mut out).unwrap();
        assert_eq!(
            out,
            vec![
                StreamEvent::TextDelta("say \"hi\"\n\u{e9}".into()),
                StreamEvent::ToolCall(ToolCall {
                    id: "c1".into(),
                    name: "ls".into(),
                    arguments: json!({"dir": "/"})
                }),
                StreamEvent::Done(StopReason::ToolUse),
            ]
        );
        let err = ChunkDecoder::default()
            .on_event(
                sse(r#"{"error":{"message":"overloaded"},"choices":[]}"#),
                &mut Vec::new(),
            )
            .unwrap_err();
        assert!(
            matches!(&err, LlmError::Server { message, .. } if message.contains("overloaded")),
            "{err:?}"
        );
        assert!(matches!(
            ChunkDecoder::default().on_event(sse("{not json"), &mut Vec::new()),
            Err(LlmError::Decode(_))
        ));
    }

    #[test]
    fn done_before_finish_is_an_error() {
        let mut decoder = ChunkDecoder::default();
        let mut out = Vec::new();
        decoder
            .on_event(
                sse(r#"{"choices":[{"index":0,"delta":{"content":"hi"}}]}"#),
                &mut out,
            )
            .unwrap();
        assert!(matches!(
            decoder.on_event(sse("[DONE]"), &mut out),
            Err(LlmError::Decode(_))
        ));
    }

    #[test]
    fn finish_reasons_map() {
        assert_eq!(stop_reason("stop", false), StopReason::EndTurn);
        assert_eq!(stop_reason("length", false), StopReason::MaxTokens);
        assert_eq!(stop_reason("tool_calls", false), StopReason::ToolUse);
        assert_eq!(stop_reason("stop", true), StopReason::ToolUse);
        assert_eq!(stop_reason("content_filter", false), StopReason::Other);
    }
}
