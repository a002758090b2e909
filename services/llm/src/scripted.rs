//! The scripted model: a deterministic stand-in for a language model, so the server, demos and
//! examples work with no API key and no network. It is not a language model and does not pretend
//! to be one: every reply it writes starts with `(scripted)` (except `/echo`).
//!
//! All decisions live in the pure function [`scripted_reply`] (conversation in, reply out), which
//! the fake model server reuses for its "auto" mode. `docs/models.md` documents the behaviour;
//! the rules, for the last message of the conversation:
//!
//! 1. Tool results at the end of the conversation: summarize them, one line per result:
//!    `Tool NAME returned: …` or `Tool NAME failed: …` (content shortened to
//!    [`SUMMARY_MAX_CHARS`] characters, whitespace collapsed).
//! 2. Otherwise the last user message, line by line:
//!    - `/sleep MS` lines wait MS milliseconds before answering (summed, capped at
//!      [`SCRIPTED_MAX_SLEEP`]); the other rules see the message without them.
//!    - A message starting with `/echo` replies exactly the text after `/echo ` (all of it,
//!      following lines included).
//!    - Each `/tool NAME {json}` line is one tool call, in order; no JSON means `{}`. Ids are
//!      `call_N`, numbered after the tool calls already in the conversation so they stay unique.
//!      Bad JSON (or JSON that is not an object) gets a text reply saying so, and no call.
//!    - Anything else: `(scripted) You said: <message>`.
//!
//! Text is streamed in word-sized deltas. Token usage is estimated as characters / 4, rounded up.

use std::collections::VecDeque;
use std::time::Duration;

use agentry_schema::events::TokenUsage;
use async_trait::async_trait;
use serde_json::Value;

use crate::{
    ChatMessage, ChatModel, ChatRequest, ChatStream, LlmError, StopReason, StreamEvent, ToolCall,
};

/// The longest `/sleep` the scripted model honours.
pub const SCRIPTED_MAX_SLEEP: Duration = Duration::from_secs(600);

/// How much of a tool result a summary line quotes.
pub const SUMMARY_MAX_CHARS: usize = 200;

/// What the scripted model answers.
#[derive(Debug, Clone, PartialEq)]
pub enum ScriptedAction {
    Text(String),
    ToolCalls(Vec<ToolCall>),
}

#[derive(Debug, Clone, PartialEq)]
pub struct ScriptedReply {
    /// Wait this long before the first byte (`/sleep`).
    pub delay: Duration,
    pub action: ScriptedAction,
}

impl ScriptedReply {
    fn text(text: impl Into<String>) -> Self {
        Self {
            delay: Duration::ZERO,
            action: ScriptedAction::Text(text.into()),
        }
    }

    pub fn stop_reason(&self) -> StopReason {
        match self.action {
            ScriptedAction::Text(_) => StopReason::EndTurn,
            ScriptedAction::ToolCalls(_) => StopReason::ToolUse,
        }
    }

    /// The reply as stream items: word-sized text deltas or the tool calls, then `usage`, then
    /// `Done`.
    pub fn events(&self, usage: TokenUsage) -> Vec<StreamEvent> {
        let mut events: Vec<StreamEvent> = match &self.action {
            ScriptedAction::Text(text) => split_words(text)
                .into_iter()
                .map(StreamEvent::TextDelta)
                .collect(),
            ScriptedAction::ToolCalls(calls) => {
                calls.iter().cloned().map(StreamEvent::ToolCall).collect()
            }
        };
        events.push(StreamEvent::Usage(usage));
        events.push(StreamEvent::Done(self.stop_reason()));
        events
    }
}

/// Decide the scripted model's reply to a conversation. Pure and deterministic.
pub fn scripted_reply(request: &ChatRequest) -> ScriptedReply {
    let messages = &request.messages;
    let trailing_results = messages
        .iter()
        .rev()
        .take_while(|m| matches!(m, ChatMessage::Tool { .. }))
        .count();
    if trailing_results > 0 {
        return summarize_results(&messages[messages.len() - trailing_results..]);
    }
    let Some(user_text) = messages.iter().rev().find_map(|m| match m {
        ChatMessage::User { content } => Some(content.as_str()),
        _ => None,
    }) else {
        return ScriptedReply::text("(scripted) There is no user message to answer.");
    };
    let earlier_calls = messages
        .iter()
        .map(|m| match m {
            ChatMessage::Assistant { tool_calls, .. } => tool_calls.len(),
            _ => 0,
        })
        .sum::<usize>();
    reply_to_user(user_text, earlier_calls)
}

fn summarize_results(results: &[ChatMessage]) -> ScriptedReply {
    let lines: Vec<String> = results
        .iter()
        .filter_map(|m| match m {
            ChatMessage::Tool {
                name,
                content,
                is_error,
                ..
            } => {
                let verb = if *is_error { "failed" } else { "returned" };
                Some(format!("Tool {name} {verb}: {}", shorten(content)))
            }
            _ => None,
        })
        .collect();
    ScriptedReply::text(format!("(scripted) {}", lines.join("\n")))
}

/// Whitespace collapsed to single spaces, cut at [`SUMMARY_MAX_CHARS`] with an ellipsis.
fn shorten(content: &str) -> String {
    let collapsed = content.split_whitespace().collect::<Vec<_>>().join(" ");
    if collapsed.is_empty() {
        return "(nothing)".to_string();
    }
    match collapsed.char_indices().nth(SUMMARY_MAX_CHARS) {
        Some((cut, _)) => format!("{}…", &collapsed[..cut]),
        None => collapsed,
    }
}

/// `line` is the command `name` (`/tool`, `/sleep`, `/echo`) followed by whitespace or nothing:
/// the rest of the line.
fn command<'a>(line: &'a str, name: &str) -> Option<&'a str> {
    let rest = line.trim_start().strip_prefix(name)?;
    if rest.is_empty() || rest.starts_with(char::is_whitespace) {
        Some(rest)
    } else {
        None
    }
}

fn reply_to_user(text: &str, earlier_calls: usize) -> ScriptedReply {
    let mut delay = Duration::ZERO;
    let mut body_lines = Vec::new();
    for line in text.lines() {
        match command(line, "/sleep") {
            Some(arg) => match arg.trim().parse::<u64>() {
                Ok(ms) => delay = delay.saturating_add(Duration::from_millis(ms)),
                Err(_) => {
                    return ScriptedReply::text(format!(
                        "(scripted) /sleep needs a number of milliseconds, got `{}`.",
                        arg.trim()
                    ));
                }
            },
            None => body_lines.push(line),
        }
    }
    let delay = delay.min(SCRIPTED_MAX_SLEEP);
    let body = body_lines.join("\n");
    let reply = |action| ScriptedReply { delay, action };

    if let Some(rest) = command(&body, "/echo") {
        let echoed = rest.strip_prefix([' ', '\t']).unwrap_or(rest);
        return reply(ScriptedAction::Text(echoed.to_string()));
    }

    let mut calls = Vec::new();
    for line in &body_lines {
        let Some(rest) = command(line, "/tool") else {
            continue;
        };
        let rest = rest.trim();
        let (name, args) = match rest.find(char::is_whitespace) {
            Some(i) => (&rest[..i], rest[i..].trim()),
            None => (rest, ""),
        };
        if name.is_empty() {
            return reply(ScriptedAction::Text(
                "(scripted) /tool needs a tool name: /tool NAME {json}".to_string(),
            ));
        }
        let arguments = if args.is_empty() {
            Value::Object(Default::default())
        } else {
            match serde_json::from_str::<Value>(args) {
                Ok(value @ Value::Object(_)) => value,
                Ok(_) => {
                    return reply(ScriptedAction::Text(format!(
                        "(scripted) The arguments for tool {name} must be a JSON object, got: {args}"
                    )));
                }
                Err(e) => {
                    return reply(ScriptedAction::Text(format!(
                        "(scripted) The arguments for tool {name} are not valid JSON ({e}): {args}"
                    )));
                }
            }
        };
        calls.push(ToolCall {
            id: format!("call_{}", earlier_calls + calls.len() + 1),
            name: name.to_string(),
            arguments,
        });
    }
    if !calls.is_empty() {
        return reply(ScriptedAction::ToolCalls(calls));
    }

    let said = body.trim();
    if said.is_empty() {
        reply(ScriptedAction::Text(
            "(scripted) You sent an empty message.".to_string(),
        ))
    } else {
        reply(ScriptedAction::Text(format!("(scripted) You said: {said}")))
    }
}

/// Split `text` into word-sized pieces (each word with the whitespace after it) whose
/// concatenation is `text`.
pub fn split_words(text: &str) -> Vec<String> {
    let mut pieces = Vec::new();
    let mut start = 0;
    let mut previous_was_space = false;
    let mut piece_has_word = false;
    for (i, c) in text.char_indices() {
        let is_space = c.is_whitespace();
        if previous_was_space && !is_space && piece_has_word {
            pieces.push(text[start..i].to_string());
            start = i;
        }
        piece_has_word |= !is_space;
        previous_was_space = is_space;
    }
    if start < text.len() {
        pieces.push(text[start..].to_string());
    }
    pieces
}

/// Characters / 4, rounded up: a deterministic stand-in for a tokenizer.
pub fn estimate_tokens(text: &str) -> u64 {
    (text.chars().count() as u64).div_ceil(4)
}

/// Estimated usage of answering `request` with `reply`: the prompt (system, messages, tool
/// schemas) in, the reply text or tool calls out.
pub fn estimate_usage(request: &ChatRequest, reply: &ScriptedReply) -> TokenUsage {
    let input = estimate_prompt_tokens(request);
    let output = match &reply.action {
        ScriptedAction::Text(text) => estimate_tokens(text),
        ScriptedAction::ToolCalls(calls) => calls.iter().map(call_tokens).sum(),
    };
    TokenUsage::new(input, output)
}

/// Estimated input tokens of `request`: its system prompt, messages and tool schemas, at four
/// characters a token. (The daily token budget reserves this before each model call.)
pub fn estimate_prompt_tokens(request: &ChatRequest) -> u64 {
    let mut input = request.system.as_deref().map_or(0, estimate_tokens);
    for message in &request.messages {
        input += match message {
            ChatMessage::User { content } => estimate_tokens(content),
            ChatMessage::Assistant {
                content,
                tool_calls,
            } => estimate_tokens(content) + tool_calls.iter().map(call_tokens).sum::<u64>(),
            ChatMessage::Tool { content, .. } => estimate_tokens(content),
        };
    }
    for tool in &request.tools {
        input += estimate_tokens(&tool.name)
            + estimate_tokens(&tool.description)
            + estimate_tokens(&tool.parameters.to_string());
    }
    input
}

fn call_tokens(call: &ToolCall) -> u64 {
    estimate_tokens(&call.name) + estimate_tokens(&call.arguments.to_string())
}

/// The embedded default model. See the module documentation for what it answers.
#[derive(Debug, Clone)]
pub struct ScriptedModel {
    model: String,
    word_delay: Duration,
}

impl Default for ScriptedModel {
    fn default() -> Self {
        Self::new()
    }
}

impl ScriptedModel {
    pub fn new() -> Self {
        Self {
            model: "scripted".to_string(),
            word_delay: Duration::ZERO,
        }
    }

    /// The name reported by [`ChatModel::model`].
    pub fn with_model_name(mut self, model: &str) -> Self {
        self.model = model.to_string();
        self
    }

    /// Pause between text deltas, to make streaming visible in demos.
    pub fn with_word_delay(mut self, delay: Duration) -> Self {
        self.word_delay = delay;
        self
    }
}

struct Playback {
    delay: Duration,
    word_delay: Duration,
    events: VecDeque<StreamEvent>,
    first: bool,
}

#[async_trait]
impl ChatModel for ScriptedModel {
    fn provider(&self) -> &str {
        "scripted"
    }

    fn model(&self) -> &str {
        &self.model
    }

    async fn stream(&self, request: &ChatRequest) -> Result<ChatStream, LlmError> {
        let reply = scripted_reply(request);
        let usage = estimate_usage(request, &reply);
        let playback = Playback {
            delay: reply.delay,
            word_delay: self.word_delay,
            events: reply.events(usage).into(),
            first: true,
        };
        // The waits happen while the stream is polled, so dropping the stream cancels them.
        Ok(Box::pin(futures::stream::unfold(
            playback,
            |mut playback| async move {
                let event = playback.events.pop_front()?;
                let wait = if playback.first {
                    playback.delay
                } else if matches!(event, StreamEvent::TextDelta(_)) {
                    playback.word_delay
                } else {
                    Duration::ZERO
                };
                playback.first = false;
                if !wait.is_zero() {
                    tokio::time::sleep(wait).await;
                }
                Some((Ok(event), playback))
            },
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn user(text: &str) -> ChatRequest {
        ChatRequest {
            messages: vec![ChatMessage::User {
                content: text.to_string(),
            }],
            ..ChatRequest::default()
        }
    }

    fn text(reply: ScriptedReply) -> String {
        match reply.action {
            ScriptedAction::Text(t) => t,
            other => panic!("expected text, got {other:?}"),
        }
    }

    #[test]
    fn plain_messages_are_answered_in_text() {
        assert_eq!(
            text(scripted_reply(&user("  hello there  "))),
            "(scripted) You said: hello there"
        );
        assert_eq!(
            text(scripted_reply(&user(""))),
            "(scripted) You sent an empty message."
        );
        assert_eq!(
            text(scripted_reply(&ChatRequest::default())),
            "(scripted) There is no user message to answer."
        );
    }

    #[test]
    fn echo_replies_exactly() {
        assert_eq!(
            text(scripted_reply(&user("/echo  two  spaces\nand a line"))),
            " two  spaces\nand a line"
        );
        assert_eq!(text(scripted_reply(&user("/echo"))), "");
        // `/echoes` is not the command.
        assert_eq!(
            text(scripted_reply(&user("/echoes"))),
            "(scripted) You said: /echoes"
        );
    }

    #[test]
    fn tool_lines_become_calls_numbered_after_earlier_ones() {
        let mut request = user("please\n/tool ls {\"dir\": \"/tmp\"}\n/tool date");
        request.messages.insert(
            0,
            ChatMessage::Assistant {
                content: String::new(),
                tool_calls: vec![ToolCall {
                    id: "call_1".into(),
                    name: "x".into(),
                    arguments: json!({}),
                }],
            },
        );
        let reply = scripted_reply(&request);
        assert_eq!(reply.stop_reason(), StopReason::ToolUse);
        assert_eq!(
            reply.action,
            ScriptedAction::ToolCalls(vec![
                ToolCall {
                    id: "call_2".into(),
                    name: "ls".into(),
                    arguments: json!({"dir": "/tmp"})
                },
                ToolCall {
                    id: "call_3".into(),
                    name: "date".into(),
                    arguments: json!({})
                },
            ])
        );
    }

    #[test]
    fn bad_tool_lines_are_explained() {
        let reply = text(scripted_reply(&user("/tool ls {oops")));
        assert!(
            reply.starts_with("(scripted) The arguments for tool ls are not valid JSON"),
            "{reply}"
        );
        let reply = text(scripted_reply(&user("/tool ls [1]")));
        assert_eq!(
            reply,
            "(scripted) The arguments for tool ls must be a JSON object, got: [1]"
        );
        assert_eq!(
            text(scripted_reply(&user("/tool"))),
            "(scripted) /tool needs a tool name: /tool NAME {json}"
        );
    }

    #[test]
    fn tool_results_are_summarized() {
        let long = "x".repeat(300);
        let request = ChatRequest {
            messages: vec![
                ChatMessage::User {
                    content: "/tool a\n/tool b".into(),
                },
                ChatMessage::Tool {
                    images: Vec::new(),
                    tool_call_id: "call_1".into(),
                    name: "a".into(),
                    content: format!("{{\"out\":\n  \"{long}\"}}"),
                    is_error: false,
                },
                ChatMessage::Tool {
                    images: Vec::new(),
                    tool_call_id: "call_2".into(),
                    name: "b".into(),
                    content: "{\"error\":\"denied\"}".into(),
                    is_error: true,
                },
            ],
            ..ChatRequest::default()
        };
        let summary = text(scripted_reply(&request));
        let lines: Vec<&str> = summary.lines().collect();
        assert_eq!(lines.len(), 2);
        let expected_first = format!(
            "(scripted) Tool a returned: {}…",
            &format!("{{\"out\": \"{long}\"}}")[..SUMMARY_MAX_CHARS]
        );
        assert_eq!(lines[0], expected_first);
        assert_eq!(lines[1], "Tool b failed: {\"error\":\"denied\"}");
    }

    #[test]
    fn sleep_lines_delay_and_are_removed() {
        let reply = scripted_reply(&user("/sleep 150\nhi\n/sleep 50"));
        assert_eq!(reply.delay, Duration::from_millis(200));
        assert_eq!(text(reply), "(scripted) You said: hi");
        let reply = scripted_reply(&user("/sleep 99999999999"));
        assert_eq!(reply.delay, SCRIPTED_MAX_SLEEP);
        assert_eq!(
            text(scripted_reply(&user("/sleep soon"))),
            "(scripted) /sleep needs a number of milliseconds, got `soon`."
        );
    }

    #[test]
    fn words_split_and_rejoin() {
        assert_eq!(
            split_words("(scripted) You said:  hi\nthere "),
            vec!["(scripted) ", "You ", "said:  ", "hi\n", "there "]
        );
        assert_eq!(split_words("  lead"), vec!["  lead"]);
        assert!(split_words("").is_empty());
    }

    #[test]
    fn usage_is_chars_over_four() {
        assert_eq!(estimate_tokens(""), 0);
        assert_eq!(estimate_tokens("abcd"), 1);
        assert_eq!(estimate_tokens("abcde"), 2);
        assert_eq!(estimate_tokens("ééééé"), 2);
        let request = user("12345678");
        let reply = scripted_reply(&request);
        // "(scripted) You said: 12345678" is 29 characters.
        assert_eq!(estimate_usage(&request, &reply), TokenUsage::new(2, 8));
    }
}
