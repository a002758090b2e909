//! Converting between stored messages and the model's conversation.

use agentry_llm::{ChatMessage, ToolCall};
use agentry_schema::ids::RunId;
use agentry_store::messages::{Message, MessageRole, NewMessage};
use serde::Deserialize;
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
                let meta = m.tool_calls.as_ref().unwrap_or(&Value::Null);
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
    // Moved, not copied: this runs over the whole window at every run's start.
    let mut fixed = Vec::with_capacity(out.len());
    let mut rest = out.into_iter().peekable();
    while let Some(msg) = rest.next() {
        let is_call =
            matches!(&msg, ChatMessage::Assistant { tool_calls, .. } if !tool_calls.is_empty());
        let at = fixed.len();
        fixed.push(msg);
        if !is_call {
            continue;
        }
        let mut answered = Vec::new();
        while let Some(ChatMessage::Tool { tool_call_id, .. }) = rest.peek() {
            answered.push(tool_call_id.clone());
            fixed.extend(rest.next());
        }
        if rest.peek().is_none() {
            continue;
        }
        let ChatMessage::Assistant { tool_calls, .. } = &fixed[at] else {
            continue;
        };
        let missing: Vec<(String, String)> = tool_calls
            .iter()
            .filter(|c| !answered.contains(&c.id))
            .map(|c| (c.id.clone(), c.name.clone()))
            .collect();
        for (tool_call_id, name) in missing {
            fixed.push(ChatMessage::Tool {
                images: Vec::new(),
                tool_call_id,
                name,
                content: json!({"error": {"code": "interrupted", "message": "this tool call did not complete"}}).to_string(),
                is_error: true,
            });
        }
    }
    fixed
}

pub fn parse_tool_calls(v: Option<&Value>) -> Vec<ToolCall> {
    v.and_then(|v| Vec::<ToolCall>::deserialize(v).ok())
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

#[cfg(test)]
mod tests {
    use agentry_llm::ChatMessage;
    use agentry_schema::ids::SessionId;
    use agentry_store::messages::{Message, MessageRole};
    use serde_json::{Value, json};

    use super::to_chat;

    fn msg(
        id: i64,
        role: MessageRole,
        content: &str,
        calls: Option<Value>,
        of: Option<&str>,
    ) -> Message {
        Message {
            id,
            session_id: SessionId::new(),
            run_id: None,
            role,
            content: content.into(),
            tool_calls: calls,
            tool_call_id: of.map(Into::into),
            created_at: chrono::Utc::now(),
        }
    }

    fn call(id: &str) -> Value {
        json!({"id": id, "name": "ls", "arguments": {}})
    }

    /// Shapes of the conversation, by role and tool call id: a result whose request fell out
    /// of the window is dropped; a call with no result before the next turn gets an explicit
    /// "interrupted" result; the last turn's open calls are left open (its run is going on).
    #[test]
    fn orphans_dropped_and_unanswered_calls_answered_only_before_a_later_turn() {
        let meta = || Some(json!({"name": "ls", "is_error": false}));
        let window = [
            msg(1, MessageRole::Tool, "orphan", meta(), Some("gone")),
            msg(2, MessageRole::User, "hi", None, None),
            msg(
                3,
                MessageRole::Assistant,
                "",
                Some(json!([call("a"), call("b")])),
                None,
            ),
            msg(4, MessageRole::Tool, "result a", meta(), Some("a")),
            msg(5, MessageRole::User, "again", None, None),
            msg(
                6,
                MessageRole::Assistant,
                "",
                Some(json!([call("c")])),
                None,
            ),
        ];
        let shape: Vec<String> = to_chat(&window)
            .iter()
            .map(|m| match m {
                ChatMessage::User { content } => format!("user {content}"),
                ChatMessage::Assistant { tool_calls, .. } => format!(
                    "assistant {}",
                    tool_calls
                        .iter()
                        .map(|c| c.id.as_str())
                        .collect::<Vec<_>>()
                        .join(",")
                ),
                ChatMessage::Tool {
                    tool_call_id,
                    content,
                    is_error,
                    ..
                } => format!(
                    "tool {tool_call_id} {}",
                    if *is_error {
                        "interrupted"
                    } else {
                        content.as_str()
                    }
                ),
            })
            .collect();
        assert_eq!(
            shape,
            [
                "user hi",
                "assistant a,b",
                "tool a result a",
                "tool b interrupted",
                "user again",
                "assistant c",
            ]
        );
    }
}
