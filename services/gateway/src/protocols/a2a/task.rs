//! An A2A task is an Agentry run: its state, artifacts and input-required request are a fold of
//! the run's events ([`TaskFold`]), the same whether the events come live (a stream) or are
//! read back from the session's stored log (`GetTask`), so both give the same task. Each step of
//! the fold also returns the A2A stream events it makes (`statusUpdate`, `artifactUpdate`).
//!
//! - Each text message the assistant writes is one artifact (`text-1`, `text-2`, …), streamed
//!   as `artifactUpdate` chunks (`append` after the first, `lastChunk` on the last).
//! - A `hitl_request` (an approval or a question) makes the task `TASK_STATE_INPUT_REQUIRED`,
//!   the request as a data part of the status message; the run's next event makes it working.
//! - The run's `done` makes it terminal: completed, canceled, rejected (a rejected approval), or
//!   failed (failed, timeout, interrupted, or the session gone before its end).

use std::collections::HashSet;

use agentry_schema::events::{
    DoneStatus, EventPayload, ExecutionEvent, HitlKind, HitlRequestData, TokenUsage,
};
use agentry_store::executions::{Execution, ExecutionStatus};
use chrono::{DateTime, SecondsFormat, TimeZone, Utc};
use serde_json::{Value, json};

/// A2A's task states (`TaskState` in a2a.proto), as their ProtoJSON names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TaskState {
    Submitted,
    Working,
    InputRequired,
    Completed,
    Canceled,
    Failed,
    Rejected,
}

impl TaskState {
    pub const ALL: [TaskState; 7] = [
        TaskState::Submitted,
        TaskState::Working,
        TaskState::InputRequired,
        TaskState::Completed,
        TaskState::Canceled,
        TaskState::Failed,
        TaskState::Rejected,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            TaskState::Submitted => "TASK_STATE_SUBMITTED",
            TaskState::Working => "TASK_STATE_WORKING",
            TaskState::InputRequired => "TASK_STATE_INPUT_REQUIRED",
            TaskState::Completed => "TASK_STATE_COMPLETED",
            TaskState::Canceled => "TASK_STATE_CANCELED",
            TaskState::Failed => "TASK_STATE_FAILED",
            TaskState::Rejected => "TASK_STATE_REJECTED",
        }
    }

    pub fn parse(raw: &str) -> Option<TaskState> {
        Self::ALL.into_iter().find(|s| s.as_str() == raw)
    }

    /// Completed, canceled, failed or rejected: the task takes no more messages.
    pub fn is_terminal(self) -> bool {
        matches!(
            self,
            TaskState::Completed | TaskState::Canceled | TaskState::Failed | TaskState::Rejected
        )
    }

    /// Where a stream (and a blocking `SendMessage`) stops: terminal, or waiting for input.
    pub fn ends_a_stream(self) -> bool {
        self.is_terminal() || self == TaskState::InputRequired
    }

    pub fn of_done(status: DoneStatus) -> TaskState {
        match status {
            DoneStatus::Completed => TaskState::Completed,
            DoneStatus::Cancelled => TaskState::Canceled,
            DoneStatus::Rejected => TaskState::Rejected,
            DoneStatus::Failed | DoneStatus::Timeout | DoneStatus::Interrupted => TaskState::Failed,
        }
    }

    /// The state of a run as its row says it (what `ListTasks` shows without reading events).
    pub fn of_execution(status: ExecutionStatus) -> TaskState {
        match status {
            ExecutionStatus::Queued => TaskState::Submitted,
            ExecutionStatus::Running => TaskState::Working,
            ExecutionStatus::WaitingApproval => TaskState::InputRequired,
            ExecutionStatus::Completed => TaskState::Completed,
            ExecutionStatus::Cancelled => TaskState::Canceled,
            ExecutionStatus::Rejected => TaskState::Rejected,
            ExecutionStatus::Failed | ExecutionStatus::Timeout | ExecutionStatus::Interrupted => {
                TaskState::Failed
            }
        }
    }

    /// The run statuses a `ListTasks` status filter stands for.
    pub fn executions(self) -> &'static [ExecutionStatus] {
        match self {
            TaskState::Submitted => &[ExecutionStatus::Queued],
            TaskState::Working => &[ExecutionStatus::Running],
            TaskState::InputRequired => &[ExecutionStatus::WaitingApproval],
            TaskState::Completed => &[ExecutionStatus::Completed],
            TaskState::Canceled => &[ExecutionStatus::Cancelled],
            TaskState::Rejected => &[ExecutionStatus::Rejected],
            TaskState::Failed => &[
                ExecutionStatus::Failed,
                ExecutionStatus::Timeout,
                ExecutionStatus::Interrupted,
            ],
        }
    }
}

/// An ISO 8601 UTC timestamp with milliseconds, as A2A's JSON bindings write them.
pub fn iso(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(SecondsFormat::Millis, true)
}

fn iso_of_event(ts: f64) -> String {
    let ms = (ts * 1000.0).round() as i64;
    iso(Utc
        .timestamp_millis_opt(ms)
        .single()
        .unwrap_or_else(Utc::now))
}

/// A text part.
pub fn text_part(text: &str) -> Value {
    json!({"text": text})
}

/// Who a task is: its run and session (the A2A `id` and `contextId`).
#[derive(Debug, Clone)]
pub struct TaskIds {
    pub task: String,
    pub context: String,
}

impl TaskIds {
    pub fn message(&self, id: &str, role: &str, parts: Vec<Value>) -> Value {
        json!({
            "messageId": id,
            "contextId": self.context,
            "taskId": self.task,
            "role": role,
            "parts": parts,
        })
    }

    /// The user message that started the run (its text as the run stored it).
    pub fn input_message(&self, input: &str) -> Value {
        self.message(
            &format!("{}-input", self.task),
            "ROLE_USER",
            vec![text_part(input)],
        )
    }
}

/// The status message of a task waiting for a person: the request as a data part (what to
/// answer on the same task), and a sentence saying so.
pub fn input_required_message(ids: &TaskIds, seq: u64, h: &HitlRequestData) -> Value {
    let (text, data) = match h.kind {
        HitlKind::Approval => {
            let calls: Vec<String> = h
                .action_requests
                .iter()
                .map(|a| format!("{} {}", a.name, a.args))
                .collect();
            (
                format!(
                    "Approval needed for {}. Reply on this task with a data part \
                     {{\"type\": \"approve\"}}, {{\"type\": \"reject\", \"message\": \"…\"}} or \
                     {{\"type\": \"edit\", \"args\": {{…}}}}.",
                    calls.join(", ")
                ),
                json!({
                    "kind": "approval",
                    "requestId": h.request_id,
                    "actionRequests": h.action_requests.iter().map(|a| json!({
                        "name": a.name,
                        "args": a.args,
                        "description": a.description,
                        "toolCallId": a.tool_call_id,
                    })).collect::<Vec<_>>(),
                }),
            )
        }
        HitlKind::Question => {
            let q = h.question.as_ref();
            (
                format!(
                    "{} (reply on this task with the answer as text, or a data part \
                     {{\"type\": \"answer\", \"answer\": …}})",
                    q.map(|q| q.text.as_str()).unwrap_or("A question")
                ),
                json!({
                    "kind": "question",
                    "requestId": h.request_id,
                    "question": q.map(|q| json!({
                        "text": q.text,
                        "questionType": q.question_type,
                        "options": q.options,
                        "timeoutSecs": q.timeout,
                    })),
                }),
            )
        }
    };
    ids.message(
        &format!("{}-request-{seq}", ids.task),
        "ROLE_AGENT",
        vec![
            text_part(&text),
            json!({"data": data, "mediaType": "application/json"}),
        ],
    )
}

/// One text message of the assistant, as an artifact.
#[derive(Debug, Clone)]
struct TextArtifact {
    id: String,
    text: String,
    /// Streamed so far (a chunk is held back until the next, so the last can say `lastChunk`).
    sent: bool,
    held: Option<String>,
}

/// What the fold knows of how the run stands.
#[derive(Debug, Clone, PartialEq)]
pub enum Standing {
    /// Accepted behind another run of the session.
    Queued,
    Working,
    /// Waiting for a decision: the request's seq and data.
    Waiting(u64, Box<HitlRequestData>),
    Done(DoneStatus),
    /// The session stopped before the run's `done` (deleted meanwhile).
    Lost,
}

/// A run's events folded into an A2A task.
pub struct TaskFold {
    pub ids: TaskIds,
    tree: HashSet<String>,
    /// The last seq taken (a subscription may hand on an event twice).
    pub seen: Option<u64>,
    artifacts: Vec<TextArtifact>,
    open: Option<usize>,
    pub standing: Standing,
    last_error: Option<(String, String)>,
    pub usage: TokenUsage,
    updated: Option<f64>,
}

impl TaskFold {
    pub fn new(ids: TaskIds, queued: bool) -> TaskFold {
        TaskFold {
            tree: HashSet::from([ids.task.clone()]),
            ids,
            seen: None,
            artifacts: Vec::new(),
            open: None,
            standing: if queued {
                Standing::Queued
            } else {
                Standing::Working
            },
            last_error: None,
            usage: TokenUsage::default(),
            updated: None,
        }
    }

    pub fn state(&self) -> TaskState {
        match &self.standing {
            Standing::Queued => TaskState::Submitted,
            Standing::Working => TaskState::Working,
            Standing::Waiting(..) => TaskState::InputRequired,
            Standing::Done(s) => TaskState::of_done(*s),
            Standing::Lost => TaskState::Failed,
        }
    }

    pub fn ended(&self) -> bool {
        matches!(self.standing, Standing::Done(_) | Standing::Lost)
    }

    /// The pending request, when the task waits for input.
    pub fn waiting(&self) -> Option<(u64, &HitlRequestData)> {
        match &self.standing {
            Standing::Waiting(seq, h) => Some((*seq, h.as_ref())),
            _ => None,
        }
    }

    /// Take one event of the session; the A2A stream events it makes, in order.
    pub fn take(&mut self, ev: &ExecutionEvent) -> Vec<Value> {
        let mut out = Vec::new();
        if self.ended() || self.seen.is_some_and(|s| ev.seq <= s) {
            return out;
        }
        if ev.run_id != self.ids.task {
            match &ev.parent_run_id {
                Some(p) if self.tree.contains(p) => {
                    self.tree.insert(ev.run_id.clone());
                }
                _ => return out,
            }
        }
        self.seen = Some(ev.seq);
        self.updated = Some(ev.timestamp);
        let own = ev.run_id == self.ids.task;
        // Any event after a request (the decision taken, the run going on) resumes the task.
        let resumed = matches!(self.standing, Standing::Waiting(..) | Standing::Queued)
            && !matches!(
                ev.payload,
                EventPayload::HitlRequest(_) | EventPayload::Done(_)
            );
        if resumed {
            self.standing = Standing::Working;
            out.push(self.status_update(TaskState::Working, None));
        }
        match &ev.payload {
            EventPayload::HitlRequest(h) => {
                self.close(&mut out);
                let message = input_required_message(&self.ids, ev.seq, h);
                self.standing = Standing::Waiting(ev.seq, Box::new(h.clone()));
                out.push(self.status_update(TaskState::InputRequired, Some(message)));
            }
            _ if !own => {}
            EventPayload::Text(t) if !t.is_final && !t.content.is_empty() => {
                self.delta(&t.content, &mut out);
            }
            EventPayload::Text(t) if !t.is_final => {}
            EventPayload::Text(t) => {
                let streamed = self
                    .open
                    .is_some_and(|i| !self.artifacts[i].text.is_empty());
                if !streamed && !t.content.is_empty() {
                    self.delta(&t.content, &mut out);
                }
                if let Some(i) = self.open
                    && !t.content.is_empty()
                {
                    self.artifacts[i].text = t.content.clone();
                }
                self.close(&mut out);
            }
            EventPayload::ToolCall(_) => self.close(&mut out),
            EventPayload::Error(e) => {
                self.last_error = Some((e.error_code.clone(), e.error.clone()));
            }
            EventPayload::Done(d) => {
                self.close(&mut out);
                self.usage = d.token_usage;
                self.standing = Standing::Done(d.status);
                let message = self.end_message();
                out.push(self.status_update(self.state(), message));
            }
            _ => {}
        }
        out
    }

    /// The session ended before the run did.
    pub fn lose(&mut self) -> Vec<Value> {
        let mut out = Vec::new();
        if self.ended() {
            return out;
        }
        self.close(&mut out);
        self.standing = Standing::Lost;
        let message = self.end_message();
        out.push(self.status_update(TaskState::Failed, message));
        out
    }

    fn delta(&mut self, text: &str, out: &mut Vec<Value>) {
        let i = match self.open {
            Some(i) => i,
            None => {
                self.artifacts.push(TextArtifact {
                    id: format!("text-{}", self.artifacts.len() + 1),
                    text: String::new(),
                    sent: false,
                    held: None,
                });
                let i = self.artifacts.len() - 1;
                self.open = Some(i);
                i
            }
        };
        self.artifacts[i].text.push_str(text);
        if let Some(prev) = self.artifacts[i].held.replace(text.to_string()) {
            out.push(self.chunk(i, &prev, false));
        }
    }

    /// Close the open text artifact: its held-back chunk goes out as the last one.
    fn close(&mut self, out: &mut Vec<Value>) {
        let Some(i) = self.open.take() else { return };
        let last = self.artifacts[i].held.take().unwrap_or_default();
        out.push(self.chunk(i, &last, true));
    }

    fn chunk(&mut self, i: usize, text: &str, last: bool) -> Value {
        let a = &mut self.artifacts[i];
        let append = a.sent;
        a.sent = true;
        json!({"artifactUpdate": {
            "taskId": self.ids.task,
            "contextId": self.ids.context,
            "artifact": {"artifactId": a.id, "name": "answer", "parts": [text_part(text)]},
            "append": append,
            "lastChunk": last,
        }})
    }

    fn status(&self, state: TaskState, message: Option<Value>) -> Value {
        let mut status = json!({
            "state": state.as_str(),
            "timestamp": self.updated.map(iso_of_event).unwrap_or_else(|| iso(Utc::now())),
        });
        if let Some(m) = message {
            status["message"] = m;
        }
        status
    }

    fn status_update(&self, state: TaskState, message: Option<Value>) -> Value {
        json!({"statusUpdate": {
            "taskId": self.ids.task,
            "contextId": self.ids.context,
            "status": self.status(state, message),
        }})
    }

    /// The status message of an ended task: why it failed, when it did.
    fn end_message(&self) -> Option<Value> {
        let why = match &self.standing {
            Standing::Done(s) if TaskState::of_done(*s) == TaskState::Failed => self
                .last_error
                .as_ref()
                .map(|(code, msg)| format!("{msg} ({code})"))
                .unwrap_or_else(|| format!("the run ended {}", s.as_str())),
            Standing::Lost => "the session was deleted before the run ended".to_string(),
            _ => return None,
        };
        Some(self.ids.message(
            &format!("{}-end", self.ids.task),
            "ROLE_AGENT",
            vec![text_part(&why)],
        ))
    }

    /// The task's current status (with the request of an input-required task).
    pub fn current_status(&self) -> Value {
        let message = match &self.standing {
            Standing::Waiting(seq, h) => Some(input_required_message(&self.ids, *seq, h)),
            _ => self.end_message(),
        };
        self.status(self.state(), message)
    }

    /// The artifacts so far (an open one with the text written so far).
    pub fn artifacts(&self) -> Vec<Value> {
        self.artifacts
            .iter()
            .filter(|a| !a.text.is_empty())
            .map(|a| json!({"artifactId": a.id, "name": "answer", "parts": [text_part(&a.text)]}))
            .collect()
    }

    /// The Task object: `history` the given messages (the caller applies `historyLength`).
    pub fn task(&self, history: Vec<Value>, with_artifacts: bool) -> Value {
        let mut task = json!({
            "id": self.ids.task,
            "contextId": self.ids.context,
            "status": self.current_status(),
            "metadata": {"agentry": {
                "sessionId": self.ids.context,
                "runId": self.ids.task,
                "tokenUsage": {
                    "input": self.usage.input,
                    "output": self.usage.output,
                    "total": self.usage.total,
                },
            }},
        });
        if with_artifacts {
            task["artifacts"] = json!(self.artifacts());
        }
        if !history.is_empty() {
            task["history"] = json!(history);
        }
        task
    }
}

/// A task of `ListTasks`, from its run's row alone (state and input; no events read).
pub fn task_of_row(run: &Execution, history_length: Option<usize>) -> Value {
    let ids = TaskIds {
        task: run.id.to_string(),
        context: run.session_id.to_string(),
    };
    let mut task = json!({
        "id": ids.task,
        "contextId": ids.context,
        "status": {
            "state": TaskState::of_execution(run.status).as_str(),
            "timestamp": iso(run.updated_at),
        },
        "metadata": {"agentry": {
            "sessionId": ids.context,
            "runId": ids.task,
            "tokenUsage": {
                "input": run.token_usage.input,
                "output": run.token_usage.output,
                "total": run.token_usage.total,
            },
        }},
    });
    if history_length != Some(0) {
        task["history"] = json!([ids.input_message(&run.input)]);
    }
    task
}

#[cfg(test)]
mod tests {
    use super::*;
    use agentry_schema::events::{ActionRequest, DoneData, TextData};

    fn ev(seq: u64, run: &str, payload: EventPayload) -> ExecutionEvent {
        ExecutionEvent {
            seq,
            session_id: "s".into(),
            run_id: run.into(),
            parent_run_id: None,
            timestamp: 1_700_000_000.0 + seq as f64,
            payload,
        }
    }

    fn text(content: &str, is_final: bool) -> EventPayload {
        EventPayload::Text(TextData {
            content: content.into(),
            is_final,
        })
    }

    fn fold() -> TaskFold {
        TaskFold::new(
            TaskIds {
                task: "r".into(),
                context: "s".into(),
            },
            false,
        )
    }

    #[test]
    fn text_streams_as_chunks_of_one_artifact_the_last_marked() {
        let mut f = fold();
        let mut out = Vec::new();
        out.extend(f.take(&ev(1, "r", text("Hel", false))));
        out.extend(f.take(&ev(2, "r", text("lo", false))));
        out.extend(f.take(&ev(3, "r", text("Hello", true))));
        let chunks: Vec<(&str, bool, bool)> = out
            .iter()
            .map(|u| {
                let a = &u["artifactUpdate"];
                (
                    a["artifact"]["parts"][0]["text"].as_str().unwrap(),
                    a["append"].as_bool().unwrap(),
                    a["lastChunk"].as_bool().unwrap(),
                )
            })
            .collect();
        assert_eq!(chunks, [("Hel", false, false), ("lo", true, true)]);
        assert_eq!(f.artifacts()[0]["parts"][0]["text"], "Hello");
        let done = f.take(&ev(
            4,
            "r",
            EventPayload::Done(DoneData::new(
                DoneStatus::Completed,
                None,
                TokenUsage::default(),
            )),
        ));
        assert_eq!(
            done[0]["statusUpdate"]["status"]["state"],
            "TASK_STATE_COMPLETED"
        );
        assert!(f.ended());
        // Replayed events change nothing.
        assert!(f.take(&ev(3, "r", text("Hello", true))).is_empty());
    }

    #[test]
    fn a_request_makes_the_task_input_required_and_the_next_event_working() {
        let mut f = fold();
        let h = HitlRequestData {
            request_id: "a".into(),
            kind: HitlKind::Approval,
            action_requests: vec![ActionRequest {
                name: "write_file".into(),
                args: json!({"file_path": "x"}),
                description: "d".into(),
                tool_call_id: Some("call_1".into()),
            }],
            question: None,
        };
        let out = f.take(&ev(1, "r", EventPayload::HitlRequest(h)));
        assert_eq!(f.state(), TaskState::InputRequired);
        let status = &out[0]["statusUpdate"]["status"];
        assert_eq!(status["state"], "TASK_STATE_INPUT_REQUIRED");
        assert_eq!(status["message"]["parts"][1]["data"]["requestId"], "a");
        assert_eq!(
            status["message"]["parts"][1]["data"]["actionRequests"][0]["name"],
            "write_file"
        );
        let out = f.take(&ev(2, "r", text("ok", true)));
        assert_eq!(f.state(), TaskState::Working);
        assert_eq!(
            out[0]["statusUpdate"]["status"]["state"],
            "TASK_STATE_WORKING"
        );
        // Another run's events are not the task's.
        assert!(f.take(&ev(3, "other", text("x", true))).is_empty());
    }

    #[test]
    fn states_name_a2a_enums_and_terminal_ones_end_streams() {
        for s in TaskState::ALL {
            assert_eq!(TaskState::parse(s.as_str()), Some(s));
            assert!(s.as_str().starts_with("TASK_STATE_"));
            assert_eq!(
                s.ends_a_stream(),
                s.is_terminal() || s == TaskState::InputRequired
            );
            for e in s.executions() {
                assert_eq!(TaskState::of_execution(*e), s);
            }
        }
        assert_eq!(TaskState::parse("TASK_STATE_UNSPECIFIED"), None);
    }
}
