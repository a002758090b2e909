//! The execution event stream: the only output of a run (DESIGN §5).
//!
//! Every event travels in one envelope, `{event_type, seq, session_id, run_id, parent_run_id?,
//! timestamp, data}`, and round-trips through JSON unchanged. REST, WebSocket, SSE and the CLI are all views of a
//! stream of these.

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Deserializes a field that is there as `Some`, even when it is `null`: an absent field is
/// `None` (through `#[serde(default)]`) and an explicit `null` stays `Some(Null)`, so every event
/// reads back exactly as it was written.
fn present<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<Value>, D::Error> {
    Value::deserialize(d).map(Some)
}

/// One event of a session's stream, as sent on the wire.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ExecutionEvent {
    /// Increases by one per event within a session; clients resume from the last one they saw.
    pub seq: u64,
    pub session_id: String,
    /// The run that produced the event. Events outside a run (a frame error, say) carry "".
    pub run_id: String,
    /// For a child run (started by another run's `task` call): the run that started it. Absent
    /// for a run a person started, so older clients read every event as before.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent_run_id: Option<String>,
    /// Seconds since the Unix epoch, with sub-second precision.
    pub timestamp: f64,
    #[serde(flatten)]
    pub payload: EventPayload,
}

impl ExecutionEvent {
    pub fn new(
        seq: u64,
        session_id: impl Into<String>,
        run_id: impl Into<String>,
        payload: EventPayload,
    ) -> Self {
        Self {
            seq,
            session_id: session_id.into(),
            run_id: run_id.into(),
            parent_run_id: None,
            timestamp: now_timestamp(),
            payload,
        }
    }

    /// The event of a child run: `parent` is the run whose `task` call started it.
    pub fn with_parent(mut self, parent: Option<String>) -> Self {
        self.parent_run_id = parent;
        self
    }

    /// Whether this is the `done` of a run a person started (not of a `task` child run): what
    /// a client reading a session's stream waits for.
    pub fn is_top_level_done(&self) -> bool {
        self.is_done() && self.parent_run_id.is_none()
    }

    pub fn event_type(&self) -> &'static str {
        self.payload.event_type()
    }

    pub fn is_done(&self) -> bool {
        matches!(self.payload, EventPayload::Done(_))
    }

    /// The wire form. Serializing these types cannot fail (no maps with non-string keys, no
    /// non-finite floats: timestamps come from the clock), so this never returns an error.
    pub fn to_json(&self) -> String {
        serde_json::to_string(self).unwrap_or_else(|e| {
            // Unreachable for well-formed events; still, never panic on the hot path.
            format!(r#"{{"event_type":"error","seq":{},"session_id":"","run_id":"","timestamp":0.0,"data":{{"error":"event encoding failed: {e}","error_code":"internal_error","recoverable":false}}}}"#, self.seq)
        })
    }
}

/// Current wall-clock time as fractional seconds since the epoch.
pub fn now_timestamp() -> f64 {
    let now = chrono::Utc::now();
    now.timestamp() as f64 + f64::from(now.timestamp_subsec_micros()) / 1_000_000.0
}

/// The typed body of an event; `event_type` is the tag, `data` the content.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "event_type", content = "data", rename_all = "snake_case")]
pub enum EventPayload {
    Text(TextData),
    ToolCall(ToolCallData),
    ToolResult(ToolResultData),
    HitlRequest(HitlRequestData),
    TodoUpdate(TodoUpdateData),
    FileOperation(FileOperationData),
    Progress(ProgressData),
    Error(ErrorData),
    Done(DoneData),
}

impl EventPayload {
    pub fn event_type(&self) -> &'static str {
        match self {
            EventPayload::Text(_) => "text",
            EventPayload::ToolCall(_) => "tool_call",
            EventPayload::ToolResult(_) => "tool_result",
            EventPayload::HitlRequest(_) => "hitl_request",
            EventPayload::TodoUpdate(_) => "todo_update",
            EventPayload::FileOperation(_) => "file_operation",
            EventPayload::Progress(_) => "progress",
            EventPayload::Error(_) => "error",
            EventPayload::Done(_) => "done",
        }
    }

    pub fn text(content: impl Into<String>, is_final: bool) -> Self {
        EventPayload::Text(TextData {
            content: content.into(),
            is_final,
        })
    }

    pub fn error(
        error_code: impl Into<String>,
        error: impl Into<String>,
        recoverable: bool,
    ) -> Self {
        EventPayload::Error(ErrorData {
            error: error.into(),
            error_code: error_code.into(),
            recoverable,
            details: None,
        })
    }

    /// An error event carrying `details` (left out of the JSON when empty).
    pub fn error_with_details(
        error_code: impl Into<String>,
        error: impl Into<String>,
        recoverable: bool,
        details: Value,
    ) -> Self {
        let has_details = details.as_object().is_none_or(|o| !o.is_empty());
        EventPayload::Error(ErrorData {
            error: error.into(),
            error_code: error_code.into(),
            recoverable,
            details: has_details.then_some(details),
        })
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TextData {
    pub content: String,
    pub is_final: bool,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolCallData {
    pub tool_name: String,
    pub tool_args: Value,
    pub tool_call_id: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ToolStatus {
    Success,
    Error,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolResultData {
    pub tool_call_id: String,
    pub result: Value,
    pub status: ToolStatus,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum HitlKind {
    /// A tool call waits for approve / edit / reject.
    Approval,
    /// A tool (or an MCP server's elicitation) asks the user a question.
    Question,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ActionRequest {
    pub name: String,
    pub args: Value,
    pub description: String,
    /// The tool call this request gates, so a client can match it to the `tool_call` event.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_call_id: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Question {
    pub text: String,
    /// `text`, `choice`, `confirm` or `preference`; free-form so MCP elicitation fits too.
    pub question_type: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub options: Vec<String>,
    /// Seconds the server waits for an answer.
    pub timeout: u64,
    /// For MCP elicitation: the JSON Schema the answer must satisfy.
    #[serde(
        default,
        deserialize_with = "present",
        skip_serializing_if = "Option::is_none"
    )]
    pub schema: Option<Value>,
    /// `question_type` [`FUNCTION_CALL_QUESTION`]: the client function tool the model called
    /// (name, arguments, the model's call id). The client runs it and answers with its output;
    /// nothing of it runs on the server.
    /// (Boxed: rare, and it would make every event payload larger.)
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub function_call: Option<Box<ActionRequest>>,
}

/// The `question_type` of a client function tool's call: the answer is the function's output.
pub const FUNCTION_CALL_QUESTION: &str = "function_call";

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HitlRequestData {
    pub request_id: String,
    pub kind: HitlKind,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub action_requests: Vec<ActionRequest>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub question: Option<Question>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TodoStatus {
    Pending,
    InProgress,
    Completed,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Todo {
    pub content: String,
    pub status: TodoStatus,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TodoUpdateData {
    pub todos: Vec<Todo>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FileOperationKind {
    Read,
    Write,
    Edit,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileMetrics {
    pub lines_read: u64,
    pub lines_written: u64,
    pub lines_added: u64,
    pub lines_removed: u64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FileOperationData {
    pub operation: FileOperationKind,
    pub file_path: String,
    pub metrics: FileMetrics,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub diff: Option<String>,
    pub status: ToolStatus,
}

/// Progress of a long tool call (MCP `notifications/progress`). Not one of the eight core types
/// of DESIGN §5: clients that do not know it may ignore it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ProgressData {
    pub tool_call_id: String,
    pub progress: f64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub total: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ErrorData {
    pub error: String,
    pub error_code: String,
    pub recoverable: bool,
    /// What REST would put in the error body's `details` (the quota's name and limit of a
    /// `quota_exceeded`, say), so a WebSocket client learns as much as a REST one.
    #[serde(
        default,
        deserialize_with = "present",
        skip_serializing_if = "Option::is_none"
    )]
    pub details: Option<Value>,
}

/// How a run ended. Exactly one `done` per run carries one of these.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DoneStatus {
    Completed,
    Cancelled,
    Rejected,
    Failed,
    Timeout,
    Interrupted,
}

impl DoneStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            DoneStatus::Completed => "completed",
            DoneStatus::Cancelled => "cancelled",
            DoneStatus::Rejected => "rejected",
            DoneStatus::Failed => "failed",
            DoneStatus::Timeout => "timeout",
            DoneStatus::Interrupted => "interrupted",
        }
    }

    /// `done.cancelled` is true when the run was stopped by someone rather than finishing.
    pub fn is_cancelled(self) -> bool {
        matches!(self, DoneStatus::Cancelled | DoneStatus::Rejected)
    }
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct TokenUsage {
    pub input: u64,
    pub output: u64,
    pub total: u64,
}

impl TokenUsage {
    pub fn new(input: u64, output: u64) -> Self {
        Self {
            input,
            output,
            total: input + output,
        }
    }

    pub fn add(&mut self, other: TokenUsage) {
        self.input += other.input;
        self.output += other.output;
        self.total = self.input + self.output;
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DoneData {
    pub status: DoneStatus,
    pub cancelled: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    pub token_usage: TokenUsage,
    /// The run's OpenTelemetry trace id (32 hex digits), when traces are exported; the same id
    /// as `trace_id` on its execution.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trace_id: Option<String>,
}

impl DoneData {
    pub fn new(status: DoneStatus, reason: Option<String>, token_usage: TokenUsage) -> Self {
        Self {
            status,
            cancelled: status.is_cancelled(),
            reason,
            token_usage,
            trace_id: None,
        }
    }

    pub fn with_trace_id(mut self, trace_id: Option<String>) -> Self {
        self.trace_id = trace_id;
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn text_event_has_the_documented_wire_shape() {
        let ev = ExecutionEvent {
            seq: 17,
            session_id: "s".into(),
            run_id: "r".into(),
            parent_run_id: None,
            timestamp: 1732240000.123,
            payload: EventPayload::text("Hel", false),
        };
        let v: Value = serde_json::from_str(&ev.to_json()).unwrap();
        assert_eq!(
            v,
            json!({"event_type":"text","seq":17,"session_id":"s","run_id":"r",
                   "timestamp":1732240000.123,"data":{"content":"Hel","is_final":false}})
        );
    }

    #[test]
    fn done_marks_rejected_and_cancelled_as_cancelled() {
        assert!(DoneData::new(DoneStatus::Rejected, None, TokenUsage::default()).cancelled);
        assert!(DoneData::new(DoneStatus::Cancelled, None, TokenUsage::default()).cancelled);
        assert!(!DoneData::new(DoneStatus::Completed, None, TokenUsage::default()).cancelled);
        assert!(!DoneData::new(DoneStatus::Timeout, None, TokenUsage::default()).cancelled);
    }
}
