//! Converting between stored messages and the model's conversation.

use agentry_llm::{ChatMessage, ToolCall};
use agentry_schema::ids::RunId;
use agentry_store::messages::{Message, MessageRole, NewMessage};
use serde_json::{Value, json};

/// The conversation the model sees, from stored messages (oldest first). Tool results whose
/// request fell outside the window are dropped: providers refuse orphaned tool results.
pub fn to_chat(messages: &[Message]) -> Vec<ChatMessage> {
    let mut out = Vec::with_capacity(messages.len());
    let mut open_calls: Vec<String> = Vec::new();
    for m in messages {
        match m.role {
            MessageRole::User => {
                open_calls.clear();
                out.push(ChatMessage::User {
                    content: m.content.clone(),
                });
            }
            MessageRole::Assistant => {
                let tool_calls = parse_tool_calls(m.tool_calls.as_ref());
                open_calls = tool_calls.iter().map(|c| c.id.clone()).collect();
                out.push(ChatMessage::Assistant {
                    content: m.content.clone(),
                    tool_calls,
                });
            }
            MessageRole::Tool => {
                let Some(id) = &m.tool_call_id else { continue };
                if !open_calls.contains(id) {
                    continue;
                }
                let meta = m.tool_calls.clone().unwrap_or(Value::Null);
                out.push(ChatMessage::Tool {
                    images: Vec::new(),
                    tool_call_id: id.clone(),
                    name: meta
                        .get("name")
                        .and_then(Value::as_str)
                        .unwrap_or_default()
                        .to_string(),
                    content: m.content.clone(),
                    is_error: meta
                        .get("is_error")
                        .and_then(Value::as_bool)
                        .unwrap_or(false),
                });
            }
            MessageRole::System => {}
        }
    }
    // An assistant turn whose tool calls never got results (a crash between the two) would be
    // refused by providers: give each missing result an explicit error.
    let mut fixed = Vec::with_capacity(out.len());
    let mut i = 0;
    while i < out.len() {
        let msg = out[i].clone();
        fixed.push(msg.clone());
        if let ChatMessage::Assistant { tool_calls, .. } = &msg {
            let mut answered = Vec::new();
            let mut j = i + 1;
            while let Some(ChatMessage::Tool { tool_call_id, .. }) = out.get(j) {
                answered.push(tool_call_id.clone());
                fixed.push(out[j].clone());
                j += 1;
            }
            let at_end = j >= out.len();
            for c in tool_calls {
                if !answered.contains(&c.id) && !at_end {
                    fixed.push(ChatMessage::Tool {
                        images: Vec::new(),
                        tool_call_id: c.id.clone(),
                        name: c.name.clone(),
                        content: json!({"error": {"code": "interrupted", "message": "this tool call did not complete"}}).to_string(),
                        is_error: true,
                    });
                }
            }
            i = j;
        } else {
            i += 1;
        }
    }
    fixed
}

pub fn parse_tool_calls(v: Option<&Value>) -> Vec<ToolCall> {
    v.and_then(|v| serde_json::from_value::<Vec<ToolCall>>(v.clone()).ok())
        .unwrap_or_default()
}

pub fn assistant_message(run: RunId, content: &str, calls: &[ToolCall]) -> NewMessage {
    NewMessage {
        run_id: Some(run),
        role: MessageRole::Assistant,
        content: content.to_string(),
        tool_calls: (!calls.is_empty()).then(|| json!(calls)),
        tool_call_id: None,
    }
}

pub fn tool_message(run: RunId, call: &ToolCall, content: &str, is_error: bool) -> NewMessage {
    NewMessage {
        run_id: Some(run),
        role: MessageRole::Tool,
        content: content.to_string(),
        // Tool rows keep the tool's name and error flag here; providers want both back.
        tool_calls: Some(json!({"name": call.name, "is_error": is_error})),
        tool_call_id: Some(call.id.clone()),
    }
}
