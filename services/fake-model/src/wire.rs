//! The two wire formats, both ways: requests parsed back into a [`ChatRequest`] (so auto mode can
//! ask the scripted model), and answers rendered as the providers render them: SSE frames or one
//! JSON document, and error bodies.

use std::collections::HashMap;

use agentry_llm::{ChatMessage, ChatRequest, ToolCall, ToolSchema};
use bytes::Bytes;
use serde_json::{Value, json};

use crate::FakeToolCall;

/// A request body that the real provider would refuse.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Invalid(pub String);

/// Text of an OpenAI `content` (a string, null, or an array of `{type:"text", text}` parts) or of
/// an Anthropic `content`/`system` (a string or an array of blocks).
/// The image parts of a content array: Anthropic `image` blocks (base64 source) and OpenAI
/// `image_url` parts with a `data:` URL.
fn images_of(content: &Value) -> Vec<agentry_llm::ImagePart> {
    let Value::Array(parts) = content else {
        return Vec::new();
    };
    parts
        .iter()
        .filter_map(|p| match p.get("type").and_then(Value::as_str) {
            Some("image") => Some(agentry_llm::ImagePart {
                mime_type: p.pointer("/source/media_type")?.as_str()?.to_string(),
                data: p.pointer("/source/data")?.as_str()?.to_string(),
            }),
            Some("image_url") => {
                let url = p.pointer("/image_url/url")?.as_str()?;
                let (mime_type, data) = url.strip_prefix("data:")?.split_once(";base64,")?;
                Some(agentry_llm::ImagePart {
                    mime_type: mime_type.to_string(),
                    data: data.to_string(),
                })
            }
            _ => None,
        })
        .collect()
}

fn text_of(content: &Value) -> String {
    match content {
        Value::String(s) => s.clone(),
        Value::Array(parts) => parts
            .iter()
            .filter(|p| p.get("type").and_then(Value::as_str) == Some("text"))
            .filter_map(|p| p.get("text").and_then(Value::as_str))
            .collect::<Vec<_>>()
            .join(""),
        _ => String::new(),
    }
}

fn parse_args(raw: &Value) -> Value {
    match raw {
        Value::String(s) if s.trim().is_empty() => json!({}),
        Value::String(s) => {
            serde_json::from_str(s).unwrap_or_else(|_| json!({ "__invalid_json__": s }))
        }
        Value::Null => json!({}),
        other => other.clone(),
    }
}

/// An OpenAI tool message has no error flag; a result whose JSON has a top-level `error` field
/// counts as failed (that is how Agentry's structured tool errors look).
fn looks_like_error(content: &str) -> bool {
    serde_json::from_str::<Value>(content).is_ok_and(|v| v.get("error").is_some())
}

fn common_checks(body: &Value) -> Result<&Vec<Value>, Invalid> {
    if !body.is_object() {
        return Err(Invalid("the request body must be a JSON object".into()));
    }
    if body
        .get("model")
        .and_then(Value::as_str)
        .is_none_or(str::is_empty)
    {
        return Err(Invalid("you must provide a model parameter".into()));
    }
    body.get("messages")
        .and_then(Value::as_array)
        .ok_or_else(|| Invalid("'messages' is a required property".into()))
}

/// A chat completions request body as a [`ChatRequest`].
pub fn parse_openai_request(body: &Value) -> Result<ChatRequest, String> {
    parse_openai(body).map_err(|Invalid(m)| m)
}

pub(crate) fn parse_openai(body: &Value) -> Result<ChatRequest, Invalid> {
    let messages = common_checks(body)?;
    let mut request = ChatRequest::default();
    let mut names: HashMap<String, String> = HashMap::new();
    let mut system = Vec::new();
    for (i, message) in messages.iter().enumerate() {
        let role = message.get("role").and_then(Value::as_str).unwrap_or("");
        let content = message.get("content").unwrap_or(&Value::Null);
        match role {
            "system" | "developer" => system.push(text_of(content)),
            "user" => {
                // The images of tool results (Agentry sends them as a user message of image
                // parts right after the tool messages, which can hold text only) belong to
                // those results: the scripted decision still sees a tool result last.
                let images = images_of(content);
                match request.messages.last_mut() {
                    Some(ChatMessage::Tool { images: last, .. }) if !images.is_empty() => {
                        last.extend(images)
                    }
                    _ => request.messages.push(ChatMessage::User {
                        content: text_of(content),
                    }),
                }
            }
            "assistant" => {
                let mut tool_calls = Vec::new();
                for call in message
                    .get("tool_calls")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                {
                    let id = call.get("id").and_then(Value::as_str).unwrap_or_default();
                    let name = call
                        .pointer("/function/name")
                        .and_then(Value::as_str)
                        .unwrap_or_default();
                    if id.is_empty() || name.is_empty() {
                        return Err(Invalid(format!(
                            "messages[{i}].tool_calls: each call needs an id and a function name"
                        )));
                    }
                    names.insert(id.to_string(), name.to_string());
                    tool_calls.push(ToolCall {
                        id: id.to_string(),
                        name: name.to_string(),
                        arguments: parse_args(
                            call.pointer("/function/arguments").unwrap_or(&Value::Null),
                        ),
                    });
                }
                request.messages.push(ChatMessage::Assistant {
                    content: text_of(content),
                    tool_calls,
                });
            }
            "tool" => {
                let id = message
                    .get("tool_call_id")
                    .and_then(Value::as_str)
                    .ok_or_else(|| {
                        Invalid(format!("messages[{i}]: a tool message needs tool_call_id"))
                    })?;
                let content = text_of(content);
                request.messages.push(ChatMessage::Tool {
                    images: Vec::new(),
                    tool_call_id: id.to_string(),
                    name: names
                        .get(id)
                        .cloned()
                        .unwrap_or_else(|| "unknown".to_string()),
                    is_error: looks_like_error(&content),
                    content,
                });
            }
            other => {
                return Err(Invalid(format!(
                    "messages[{i}].role: '{other}' is not one of system, developer, user, assistant, tool"
                )));
            }
        }
    }
    if !system.is_empty() {
        request.system = Some(system.join("\n"));
    }
    for tool in body
        .get("tools")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let function = tool.get("function").unwrap_or(&Value::Null);
        request.tools.push(ToolSchema {
            name: function
                .get("name")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_string(),
            description: function
                .get("description")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_string(),
            parameters: function.get("parameters").cloned().unwrap_or(Value::Null),
        });
    }
    request.max_tokens = body
        .get("max_tokens")
        .and_then(Value::as_u64)
        .map(|n| n as u32);
    Ok(request)
}

/// A Messages API request body as a [`ChatRequest`].
pub fn parse_anthropic_request(body: &Value) -> Result<ChatRequest, String> {
    parse_anthropic(body).map_err(|Invalid(m)| m)
}

pub(crate) fn parse_anthropic(body: &Value) -> Result<ChatRequest, Invalid> {
    let messages = common_checks(body)?;
    let max_tokens = body
        .get("max_tokens")
        .and_then(Value::as_u64)
        .ok_or_else(|| Invalid("max_tokens: Field required".into()))?;
    let mut request = ChatRequest {
        max_tokens: Some(max_tokens as u32),
        ..ChatRequest::default()
    };
    if let Some(system) = body.get("system") {
        request.system = Some(text_of(system));
    }
    let mut names: HashMap<String, String> = HashMap::new();
    for (i, message) in messages.iter().enumerate() {
        let role = message.get("role").and_then(Value::as_str).unwrap_or("");
        let content = message.get("content").unwrap_or(&Value::Null);
        let blocks: Vec<Value> = match content {
            Value::String(s) => vec![json!({"type": "text", "text": s})],
            Value::Array(blocks) => blocks.clone(),
            _ => {
                return Err(Invalid(format!(
                    "messages.{i}.content: Input should be a valid string or list"
                )));
            }
        };
        match role {
            "user" => {
                for block in &blocks {
                    match block.get("type").and_then(Value::as_str) {
                        // Clients merge consecutive user messages into one turn of several
                        // text blocks (the API wants turns to alternate); each block is one of
                        // those messages, so the scripted decision sees the same last message
                        // as over the chat completions format.
                        Some("text") => request.messages.push(ChatMessage::User {
                            content: block
                                .get("text")
                                .and_then(Value::as_str)
                                .unwrap_or("")
                                .to_string(),
                        }),
                        Some("tool_result") => {
                            let id = block
                                .get("tool_use_id")
                                .and_then(Value::as_str)
                                .ok_or_else(|| {
                                    Invalid(format!(
                                        "messages.{i}: a tool_result needs tool_use_id"
                                    ))
                                })?;
                            if !names.contains_key(id) {
                                return Err(Invalid(format!(
                                    "messages.{i}: unexpected `tool_use_id` found in `tool_result` blocks: {id}. Each `tool_result` block must have a corresponding `tool_use` block in the previous message."
                                )));
                            }
                            request.messages.push(ChatMessage::Tool {
                                images: images_of(block.get("content").unwrap_or(&Value::Null)),
                                tool_call_id: id.to_string(),
                                name: names[id].clone(),
                                content: text_of(block.get("content").unwrap_or(&Value::Null)),
                                is_error: block.get("is_error").and_then(Value::as_bool)
                                    == Some(true),
                            });
                        }
                        _ => {}
                    }
                }
            }
            "assistant" => {
                let mut text = String::new();
                let mut tool_calls = Vec::new();
                for block in &blocks {
                    match block.get("type").and_then(Value::as_str) {
                        Some("text") => {
                            text.push_str(block.get("text").and_then(Value::as_str).unwrap_or(""))
                        }
                        Some("tool_use") => {
                            let id = block.get("id").and_then(Value::as_str).unwrap_or("");
                            let name = block.get("name").and_then(Value::as_str).unwrap_or("");
                            if id.is_empty() || name.is_empty() {
                                return Err(Invalid(format!(
                                    "messages.{i}: a tool_use block needs an id and a name"
                                )));
                            }
                            names.insert(id.to_string(), name.to_string());
                            tool_calls.push(ToolCall {
                                id: id.to_string(),
                                name: name.to_string(),
                                arguments: block.get("input").cloned().unwrap_or(json!({})),
                            });
                        }
                        _ => {}
                    }
                }
                request.messages.push(ChatMessage::Assistant {
                    content: text,
                    tool_calls,
                });
            }
            other => {
                return Err(Invalid(format!(
                    "messages.{i}.role: Input should be 'user' or 'assistant', got '{other}'"
                )));
            }
        }
    }
    for tool in body
        .get("tools")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        request.tools.push(ToolSchema {
            name: tool
                .get("name")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_string(),
            description: tool
                .get("description")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_string(),
            parameters: tool.get("input_schema").cloned().unwrap_or(Value::Null),
        });
    }
    Ok(request)
}

/// The answer to render, whatever produced it.
#[derive(Debug, Clone)]
pub(crate) struct Answer {
    pub text: String,
    pub tool_calls: Vec<FakeToolCall>,
    pub max_tokens_reached: bool,
    pub input_tokens: u64,
    pub output_tokens: u64,
}

impl Answer {
    fn openai_finish(&self) -> &'static str {
        if self.max_tokens_reached {
            "length"
        } else if self.tool_calls.is_empty() {
            "stop"
        } else {
            "tool_calls"
        }
    }

    fn anthropic_stop(&self) -> &'static str {
        if self.max_tokens_reached {
            "max_tokens"
        } else if self.tool_calls.is_empty() {
            "end_turn"
        } else {
            "tool_use"
        }
    }
}

/// How text and argument text are cut into streamed pieces.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Pieces {
    /// 0 = per word (text) / 8 characters (arguments).
    pub chunks: usize,
}

impl Pieces {
    pub fn text(self, text: &str) -> Vec<String> {
        if self.chunks == 0 {
            agentry_llm::split_words(text)
        } else {
            split_even(text, self.chunks)
        }
    }

    pub fn arguments(self, text: &str) -> Vec<String> {
        if self.chunks == 0 {
            let count = text.chars().count().div_ceil(8);
            split_even(text, count.max(1))
        } else {
            split_even(text, self.chunks)
        }
    }
}

/// `text` in at most `n` pieces of nearly equal character counts (never splitting a character).
pub(crate) fn split_even(text: &str, n: usize) -> Vec<String> {
    let chars: Vec<char> = text.chars().collect();
    if chars.is_empty() || n == 0 {
        return Vec::new();
    }
    let n = n.min(chars.len());
    let (base, extra) = (chars.len() / n, chars.len() % n);
    let mut pieces = Vec::with_capacity(n);
    let mut at = 0;
    for i in 0..n {
        let len = base + usize::from(i < extra);
        pieces.push(chars[at..at + len].iter().collect());
        at += len;
    }
    pieces
}

fn sse_data(value: &Value) -> Bytes {
    Bytes::from(format!("data: {value}\n\n"))
}

fn sse_event(name: &str, value: &Value) -> Bytes {
    Bytes::from(format!("event: {name}\ndata: {value}\n\n"))
}

pub(crate) fn openai_stream(
    answer: &Answer,
    id: &str,
    model: &str,
    created: u64,
    pieces: Pieces,
    include_usage: bool,
    interleave: bool,
) -> Vec<Bytes> {
    let chunk = |delta: Value, finish: Value| {
        sse_data(&json!({
            "id": id,
            "object": "chat.completion.chunk",
            "created": created,
            "model": model,
            "system_fingerprint": "fp_fake",
            "choices": [{"index": 0, "delta": delta, "logprobs": null, "finish_reason": finish}],
        }))
    };
    let mut frames = vec![chunk(
        json!({"role": "assistant", "content": ""}),
        Value::Null,
    )];
    for piece in pieces.text(&answer.text) {
        frames.push(chunk(json!({ "content": piece }), Value::Null));
    }
    // Each call opens with its id and name, then its argument text in pieces.
    let mut per_call: Vec<Vec<Bytes>> = Vec::new();
    for (index, call) in answer.tool_calls.iter().enumerate() {
        let mut call_frames = vec![chunk(
            json!({"tool_calls": [{
                "index": index, "id": call.id, "type": "function",
                "function": {"name": call.name, "arguments": ""}
            }]}),
            Value::Null,
        )];
        for piece in pieces.arguments(&call.arguments) {
            call_frames.push(chunk(
                json!({"tool_calls": [{"index": index, "function": {"arguments": piece}}]}),
                Value::Null,
            ));
        }
        per_call.push(call_frames);
    }
    if interleave {
        let longest = per_call.iter().map(Vec::len).max().unwrap_or(0);
        for round in 0..longest {
            for call_frames in &per_call {
                if let Some(frame) = call_frames.get(round) {
                    frames.push(frame.clone());
                }
            }
        }
    } else {
        frames.extend(per_call.into_iter().flatten());
    }
    frames.push(chunk(json!({}), json!(answer.openai_finish())));
    if include_usage {
        frames.push(sse_data(&json!({
            "id": id,
            "object": "chat.completion.chunk",
            "created": created,
            "model": model,
            "choices": [],
            "usage": openai_usage(answer),
        })));
    }
    frames.push(Bytes::from_static(b"data: [DONE]\n\n"));
    frames
}

fn openai_usage(answer: &Answer) -> Value {
    json!({
        "prompt_tokens": answer.input_tokens,
        "completion_tokens": answer.output_tokens,
        "total_tokens": answer.input_tokens + answer.output_tokens,
    })
}

pub(crate) fn openai_json(answer: &Answer, id: &str, model: &str, created: u64) -> Value {
    let mut message = json!({
        "role": "assistant",
        "content": if answer.text.is_empty() && !answer.tool_calls.is_empty() {
            Value::Null
        } else {
            json!(answer.text)
        },
        "refusal": null,
    });
    if !answer.tool_calls.is_empty() {
        message["tool_calls"] = answer
            .tool_calls
            .iter()
            .map(|c| {
                json!({
                    "id": c.id, "type": "function",
                    "function": {"name": c.name, "arguments": c.arguments}
                })
            })
            .collect();
    }
    json!({
        "id": id,
        "object": "chat.completion",
        "created": created,
        "model": model,
        "system_fingerprint": "fp_fake",
        "choices": [{"index": 0, "message": message, "logprobs": null, "finish_reason": answer.openai_finish()}],
        "usage": openai_usage(answer),
    })
}

pub(crate) fn anthropic_stream(
    answer: &Answer,
    id: &str,
    model: &str,
    pieces: Pieces,
) -> Vec<Bytes> {
    let mut frames = vec![
        sse_event(
            "message_start",
            &json!({"type": "message_start", "message": {
                "id": id, "type": "message", "role": "assistant", "model": model,
                "content": [], "stop_reason": null, "stop_sequence": null,
                "usage": {"input_tokens": answer.input_tokens, "cache_creation_input_tokens": 0,
                          "cache_read_input_tokens": 0, "output_tokens": 1}
            }}),
        ),
        sse_event("ping", &json!({"type": "ping"})),
    ];
    let mut index = 0;
    if !answer.text.is_empty() {
        frames.push(sse_event(
            "content_block_start",
            &json!({"type": "content_block_start", "index": index,
                    "content_block": {"type": "text", "text": ""}}),
        ));
        for piece in pieces.text(&answer.text) {
            frames.push(sse_event(
                "content_block_delta",
                &json!({"type": "content_block_delta", "index": index,
                        "delta": {"type": "text_delta", "text": piece}}),
            ));
        }
        frames.push(sse_event(
            "content_block_stop",
            &json!({"type": "content_block_stop", "index": index}),
        ));
        index += 1;
    }
    for call in &answer.tool_calls {
        frames.push(sse_event(
            "content_block_start",
            &json!({"type": "content_block_start", "index": index,
                    "content_block": {"type": "tool_use", "id": call.id, "name": call.name, "input": {}}}),
        ));
        // The real API opens with an empty partial_json.
        let mut argument_pieces = vec![String::new()];
        argument_pieces.extend(pieces.arguments(&call.arguments));
        for piece in argument_pieces {
            frames.push(sse_event(
                "content_block_delta",
                &json!({"type": "content_block_delta", "index": index,
                        "delta": {"type": "input_json_delta", "partial_json": piece}}),
            ));
        }
        frames.push(sse_event(
            "content_block_stop",
            &json!({"type": "content_block_stop", "index": index}),
        ));
        index += 1;
    }
    frames.push(sse_event(
        "message_delta",
        &json!({"type": "message_delta",
                "delta": {"stop_reason": answer.anthropic_stop(), "stop_sequence": null},
                "usage": {"output_tokens": answer.output_tokens}}),
    ));
    frames.push(sse_event("message_stop", &json!({"type": "message_stop"})));
    frames
}

pub(crate) fn anthropic_json(answer: &Answer, id: &str, model: &str) -> Value {
    let mut content = Vec::new();
    if !answer.text.is_empty() {
        content.push(json!({"type": "text", "text": answer.text}));
    }
    for call in &answer.tool_calls {
        // The real API always returns an object; invalid argument text cannot be represented.
        let input = serde_json::from_str::<Value>(&call.arguments)
            .ok()
            .filter(Value::is_object)
            .unwrap_or_else(|| json!({}));
        content.push(json!({"type": "tool_use", "id": call.id, "name": call.name, "input": input}));
    }
    json!({
        "id": id,
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": content,
        "stop_reason": answer.anthropic_stop(),
        "stop_sequence": null,
        "usage": {"input_tokens": answer.input_tokens, "cache_creation_input_tokens": 0,
                  "cache_read_input_tokens": 0, "output_tokens": answer.output_tokens},
    })
}

/// The provider's error JSON around `message`.
pub(crate) fn error_body(endpoint: crate::Endpoint, status: u16, message: &str) -> Value {
    match endpoint {
        crate::Endpoint::OpenAiChat => {
            let (kind, code) = match status {
                401 => ("invalid_request_error", json!("invalid_api_key")),
                429 => ("requests", json!("rate_limit_exceeded")),
                500..=599 => ("server_error", Value::Null),
                _ => ("invalid_request_error", Value::Null),
            };
            json!({"error": {"message": message, "type": kind, "param": null, "code": code}})
        }
        crate::Endpoint::AnthropicMessages => {
            let kind = match status {
                400 => "invalid_request_error",
                401 => "authentication_error",
                403 => "permission_error",
                404 => "not_found_error",
                413 => "request_too_large",
                429 => "rate_limit_error",
                529 => "overloaded_error",
                _ => "api_error",
            };
            json!({"type": "error", "error": {"type": kind, "message": message}})
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn even_splits_keep_every_character() {
        assert_eq!(split_even("abcdefg", 3), vec!["abc", "de", "fg"]);
        assert_eq!(split_even("ab", 5), vec!["a", "b"]);
        assert_eq!(split_even("héé", 2), vec!["hé", "é"]);
        assert!(split_even("", 3).is_empty());
    }

    #[test]
    fn openai_requests_parse_back() {
        let body = json!({
            "model": "m",
            "messages": [
                {"role": "system", "content": "sys"},
                {"role": "user", "content": [{"type": "text", "text": "hi"}]},
                {"role": "assistant", "content": null, "tool_calls": [
                    {"id": "c1", "type": "function", "function": {"name": "ls", "arguments": "{\"a\":1}"}}
                ]},
                {"role": "tool", "tool_call_id": "c1", "content": "{\"error\":\"denied\"}"},
            ],
            "tools": [{"type": "function", "function": {"name": "ls", "description": "list", "parameters": {"type": "object"}}}]
        });
        let request = parse_openai(&body).unwrap();
        assert_eq!(request.system.as_deref(), Some("sys"));
        assert_eq!(
            request.messages[2],
            ChatMessage::Tool {
                images: Vec::new(),
                tool_call_id: "c1".into(),
                name: "ls".into(),
                content: "{\"error\":\"denied\"}".into(),
                is_error: true
            }
        );
        assert_eq!(request.tools[0].name, "ls");
        assert!(parse_openai(&json!({"messages": []})).is_err());
        assert!(parse_openai(&json!({"model": "m", "messages": [{"role": "bot"}]})).is_err());
    }

    #[test]
    fn anthropic_requests_parse_back() {
        let body = json!({
            "model": "m", "max_tokens": 10, "system": "sys",
            "messages": [
                {"role": "user", "content": "hi"},
                {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "ls", "input": {"a": 1}}]},
                {"role": "user", "content": [
                    {"type": "tool_result", "tool_use_id": "t1", "content": [{"type": "text", "text": "out"}], "is_error": true}
                ]},
            ]
        });
        let request = parse_anthropic(&body).unwrap();
        assert_eq!(request.system.as_deref(), Some("sys"));
        assert_eq!(
            request.messages.last().unwrap(),
            &ChatMessage::Tool {
                images: Vec::new(),
                tool_call_id: "t1".into(),
                name: "ls".into(),
                content: "out".into(),
                is_error: true
            }
        );
        // A turn of several text blocks (consecutive user messages merged by the client) is
        // as many user messages: `/sleep` in the last one still starts its line.
        let merged = json!({
            "model": "m", "max_tokens": 10,
            "messages": [{"role": "user", "content": [
                {"type": "text", "text": "talk"},
                {"type": "text", "text": "/sleep 5\nlate"},
            ]}]
        });
        assert_eq!(
            parse_anthropic(&merged).unwrap().messages,
            [
                ChatMessage::User {
                    content: "talk".into()
                },
                ChatMessage::User {
                    content: "/sleep 5\nlate".into()
                },
            ]
        );
        let mut no_max = body.clone();
        no_max.as_object_mut().unwrap().remove("max_tokens");
        assert_eq!(
            parse_anthropic(&no_max),
            Err(Invalid("max_tokens: Field required".into()))
        );
    }
}
