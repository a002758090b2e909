//! Tools a server marks `execution.taskSupport: "required"`: they may only be called as MCP
//! *tasks*, which this client does not implement, so a plain `tools/call` always fails (-32601).
//! They are left out of the server's tool list rather than offered to a model that cannot use
//! them; `"optional"` and `"forbidden"` tools stay.
//!
//! rmcp 3.9's `Tool` has no `execution` field: the flag is dropped when `tools/list` is parsed.
//! So the transports read it from the raw answer before rmcp parses it: the ids of the
//! `tools/list` requests sent are noted ([`TaskSupport::expect`], from the transport's `send`),
//! and each raw message the server sends with one of those ids is looked at
//! ([`TaskSupport::observe`]): by the stdio transport line by line ([`TapRead`]), by the HTTP
//! client on the body or event stream of a `tools/list` POST. A page that lists a tool again
//! without the flag clears it.

use std::collections::BTreeSet;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use serde_json::Value;
use tokio::io::{AsyncRead, ReadBuf};

/// The longest line of a stdio server that is looked at (a `tools/list` answer larger than this
/// is passed on untouched and its flags are not seen).
const MAX_TAPPED_LINE: usize = 8 * 1024 * 1024;
/// `tools/list` requests whose answers are awaited; more than this (answers that never came)
/// and the oldest are forgotten.
const MAX_PENDING: usize = 64;

#[derive(Default)]
pub(crate) struct TaskSupport {
    inner: Mutex<State>,
}

#[derive(Default)]
struct State {
    /// Ids (as JSON text) of `tools/list` requests sent and not yet answered.
    pending: Vec<String>,
    /// Tools the server's latest listing marks `taskSupport: "required"`.
    required: BTreeSet<String>,
    /// Tools already logged as left out (once per connection).
    logged: BTreeSet<String>,
}

impl TaskSupport {
    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A `tools/list` request with this id is being sent.
    pub(crate) fn expect(&self, id: &impl serde::Serialize) {
        let Ok(id) = serde_json::to_string(id) else {
            return;
        };
        let mut s = self.state();
        if s.pending.len() >= MAX_PENDING {
            s.pending.remove(0);
        }
        s.pending.push(id);
    }

    /// Whether a `tools/list` answer is awaited (so raw messages are worth parsing).
    pub(crate) fn awaiting(&self) -> bool {
        !self.state().pending.is_empty()
    }

    /// A raw message from the server: if it answers a `tools/list` request, note which of its
    /// tools require tasks.
    pub(crate) fn observe(&self, message: &Value) {
        let Some(id) = message
            .get("id")
            .and_then(|id| serde_json::to_string(id).ok())
        else {
            return;
        };
        let mut s = self.state();
        let Some(at) = s.pending.iter().position(|p| *p == id) else {
            return;
        };
        s.pending.remove(at);
        let Some(tools) = message.pointer("/result/tools").and_then(Value::as_array) else {
            return;
        };
        for tool in tools {
            let Some(name) = tool.get("name").and_then(Value::as_str) else {
                continue;
            };
            let required = tool
                .pointer("/execution/taskSupport")
                .and_then(Value::as_str)
                == Some("required");
            if required {
                s.required.insert(name.to_string());
            } else {
                s.required.remove(name);
            }
        }
    }

    /// A raw message given as text (a stdio line, an HTTP body, an SSE event's data).
    pub(crate) fn observe_text(&self, text: &[u8]) {
        if !self.awaiting() || !contains(text, b"\"tools\"") {
            return;
        }
        if let Ok(v) = serde_json::from_slice::<Value>(text) {
            self.observe(&v);
        }
    }

    /// Leave out the tools that require tasks, logging each once per connection.
    pub(crate) fn retain_callable<T>(
        &self,
        server: &str,
        tools: &mut Vec<T>,
        name: impl Fn(&T) -> &str,
    ) {
        let mut s = self.state();
        if s.required.is_empty() {
            return;
        }
        let State {
            required, logged, ..
        } = &mut *s;
        tools.retain(|t| {
            let n = name(t);
            if !required.contains(n) {
                return true;
            }
            if logged.insert(n.to_string()) {
                tracing::info!(
                    server,
                    tool = n,
                    "MCP tool left out: it requires task-augmented calls (execution.taskSupport: required), which Agentry does not make"
                );
            }
            false
        });
    }
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}

/// A stdio server's stdout, as read by rmcp, with each line also shown to [`TaskSupport`].
pub(crate) struct TapRead<R> {
    inner: R,
    tap: Arc<super::handler::Shared>,
    line: Vec<u8>,
    /// The current line grew past [`MAX_TAPPED_LINE`]: skip to its end.
    skipping: bool,
}

impl<R> TapRead<R> {
    pub(crate) fn new(inner: R, tap: Arc<super::handler::Shared>) -> Self {
        Self {
            inner,
            tap,
            line: Vec::new(),
            skipping: false,
        }
    }

    fn feed(&mut self, mut bytes: &[u8]) {
        // Nothing awaited: no line needs keeping (a `tools/list` answer comes only after its
        // request was sent, and the request is noted before it is written).
        if !self.tap.task_support.awaiting() && self.line.is_empty() {
            if let Some(end) = bytes.iter().rposition(|b| *b == b'\n') {
                self.skipping = false;
                bytes = &bytes[end + 1..];
            }
            if !self.skipping {
                self.keep(bytes);
            }
            return;
        }
        while !bytes.is_empty() {
            match bytes.iter().position(|b| *b == b'\n') {
                Some(end) => {
                    if !self.skipping {
                        self.keep(&bytes[..end]);
                        if !self.skipping {
                            self.tap.task_support.observe_text(&self.line);
                        }
                    }
                    self.line.clear();
                    self.skipping = false;
                    bytes = &bytes[end + 1..];
                }
                None => {
                    if !self.skipping {
                        self.keep(bytes);
                    }
                    bytes = &[];
                }
            }
        }
    }

    fn keep(&mut self, bytes: &[u8]) {
        if self.line.len() + bytes.len() > MAX_TAPPED_LINE {
            self.line.clear();
            self.skipping = true;
        } else {
            self.line.extend_from_slice(bytes);
        }
    }
}

impl<R: AsyncRead + Unpin> AsyncRead for TapRead<R> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        let r = Pin::new(&mut this.inner).poll_read(cx, buf);
        if let Poll::Ready(Ok(())) = &r {
            let new = buf.filled()[before..].to_vec();
            this.feed(&new);
        }
        r
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn only_answers_to_tools_list_requests_count_and_a_later_page_clears_the_flag() {
        let t = TaskSupport::default();
        let page = |id: Value, required: &str| {
            json!({"jsonrpc": "2.0", "id": id, "result": {"tools": [
                {"name": "slow", "inputSchema": {}, "execution": {"taskSupport": required}},
                {"name": "plain", "inputSchema": {}},
            ]}})
        };
        // Not awaited: ignored.
        t.observe(&page(json!(7), "required"));
        let mut tools = vec!["slow", "plain"];
        t.retain_callable("s", &mut tools, |n| n);
        assert_eq!(tools, ["slow", "plain"]);
        t.expect(&json!(7));
        t.observe_text(page(json!(7), "required").to_string().as_bytes());
        t.retain_callable("s", &mut tools, |n| n);
        assert_eq!(tools, ["plain"]);
        // `optional` is callable without tasks.
        t.expect(&json!("a"));
        t.observe(&page(json!("a"), "optional"));
        let mut tools = vec!["slow", "plain"];
        t.retain_callable("s", &mut tools, |n| n);
        assert_eq!(tools, ["slow", "plain"]);
        assert!(!t.awaiting());
    }

    #[tokio::test]
    async fn the_tap_sees_whole_lines_however_they_are_split() {
        use tokio::io::AsyncReadExt;
        let shared = super::super::handler::Shared::new("s", Default::default());
        shared.task_support.expect(&json!(3));
        let answer = json!({"jsonrpc": "2.0", "id": 3, "result": {"tools": [
            {"name": "slow", "inputSchema": {}, "execution": {"taskSupport": "required"}}]}});
        let text =
            format!("{{\"jsonrpc\":\"2.0\",\"method\":\"notifications/message\"}}\n{answer}\n");
        let (mut w, r) = tokio::io::duplex(7);
        let writer = tokio::spawn(async move {
            use tokio::io::AsyncWriteExt;
            w.write_all(text.as_bytes()).await.unwrap();
        });
        let mut tap = TapRead::new(r, shared.clone());
        let mut out = String::new();
        tap.read_to_string(&mut out).await.unwrap();
        writer.await.unwrap();
        assert!(out.ends_with("}\n"), "passed on untouched");
        let mut tools = vec!["slow".to_string()];
        shared
            .task_support
            .retain_callable("s", &mut tools, |n| n.as_str());
        assert!(tools.is_empty());
    }
}
