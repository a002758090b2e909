//! How events look on a terminal: plain functions from an event to text, so they are tested
//! without a terminal.

use agentry_schema::events::{
    ActionRequest, EventPayload, ExecutionEvent, HitlRequestData, TodoStatus, ToolStatus,
};
use serde_json::Value;

/// Where a piece of output goes: the conversation on stdout, notes about it on stderr.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Out {
    Stdout(String),
    Stderr(String),
}

/// A tool result is cut to this many characters on screen (the full value is in the API).
const RESULT_CHARS: usize = 600;

fn cut(s: &str, max: usize) -> String {
    match s.char_indices().nth(max) {
        Some((i, _)) => format!("{}…", &s[..i]),
        None => s.to_string(),
    }
}

pub fn todo_status(s: TodoStatus) -> &'static str {
    match s {
        TodoStatus::Pending => "pending",
        TodoStatus::InProgress => "in progress",
        TodoStatus::Completed => "done",
    }
}

/// `value` as indented JSON, each line prefixed with `indent`.
fn pretty(value: &Value, indent: &str) -> String {
    let text = serde_json::to_string_pretty(value).unwrap_or_else(|_| value.to_string());
    text.lines().map(|l| format!("{indent}{l}\n")).collect()
}

/// A unified diff of what a file-changing call would do, when its arguments say it.
pub fn proposed_diff(action: &ActionRequest) -> Option<String> {
    let path = action.args.get("file_path")?.as_str()?;
    let (old, new) = match action.name.as_str() {
        "edit_file" => (
            action.args.get("old_string")?.as_str()?,
            action.args.get("new_string")?.as_str()?,
        ),
        "write_file" => ("", action.args.get("content")?.as_str()?),
        _ => return None,
    };
    let diff = similar::TextDiff::from_lines(old, new);
    let text = diff
        .unified_diff()
        .context_radius(3)
        .header(&format!("a/{path}"), &format!("b/{path}"))
        .to_string();
    Some(text)
}

/// An approval or a question, readably: the tool, its arguments as indented JSON, and the diff
/// a file edit would make.
pub fn hitl_request(h: &HitlRequestData) -> String {
    let mut s = String::from("\n");
    if let Some(q) = &h.question {
        s.push_str(&format!("? {}\n", q.text));
        for (i, o) in q.options.iter().enumerate() {
            s.push_str(&format!("  {}. {o}\n", i + 1));
        }
        if let Some(schema) = &q.schema {
            s.push_str("  answer with JSON matching:\n");
            s.push_str(&pretty(schema, "    "));
        }
        return s;
    }
    if h.action_requests.is_empty() {
        s.push_str("! approval needed\n");
    }
    for a in &h.action_requests {
        s.push_str(&format!("! approval needed: {}", a.name));
        // The engine's own description repeats the name and the arguments; show others.
        if !a.description.is_empty() && !a.description.starts_with(&a.name) {
            s.push_str(&format!(" — {}", a.description));
        }
        s.push('\n');
        s.push_str(&pretty(&a.args, "    "));
        if let Some(diff) = proposed_diff(a) {
            for line in diff.lines() {
                s.push_str(&format!("    {line}\n"));
            }
        }
    }
    s
}

/// The prompt for a pending request.
pub fn hitl_prompt(h: &HitlRequestData) -> &'static str {
    if h.question.is_some() {
        "answer (or /decline)> "
    } else {
        "approve? [y]es / [n]o [reason] / e {json}> "
    }
}

/// One event as terminal output; `None` for what is not shown.
pub fn event(ev: &ExecutionEvent) -> Option<Out> {
    Some(match &ev.payload {
        EventPayload::Text(t) if !t.is_final => Out::Stdout(t.content.clone()),
        EventPayload::Text(_) => Out::Stdout("\n".into()),
        EventPayload::ToolCall(c) => Out::Stdout(format!(
            "→ {} {}\n",
            c.tool_name,
            cut(&c.tool_args.to_string(), 300)
        )),
        EventPayload::ToolResult(r) => {
            let mark = if r.status == ToolStatus::Success {
                "✓"
            } else {
                "✗"
            };
            Out::Stdout(format!(
                "{mark} {}\n",
                cut(&r.result.to_string(), RESULT_CHARS)
            ))
        }
        EventPayload::HitlRequest(h) => Out::Stdout(hitl_request(h)),
        EventPayload::TodoUpdate(t) => {
            let mut s = String::from("todos:\n");
            for todo in &t.todos {
                s.push_str(&format!(
                    "  [{}] {}\n",
                    todo_status(todo.status),
                    todo.content
                ));
            }
            Out::Stdout(s)
        }
        EventPayload::FileOperation(f) => {
            let mut s = format!(
                "  {} {} (+{} -{})\n",
                format!("{:?}", f.operation).to_lowercase(),
                f.file_path,
                f.metrics.lines_added,
                f.metrics.lines_removed
            );
            if let Some(diff) = &f.diff {
                for line in diff.lines().take(40) {
                    s.push_str(&format!("    {line}\n"));
                }
            }
            Out::Stdout(s)
        }
        EventPayload::Progress(p) => Out::Stdout(format!(
            "  … {}{}\n",
            p.progress,
            p.total.map(|t| format!("/{t}")).unwrap_or_default()
        )),
        EventPayload::Error(e) => Out::Stderr(format!(
            "[{}{}] {}\n",
            e.error_code,
            if e.recoverable { ", recoverable" } else { "" },
            e.error
        )),
        EventPayload::Done(d) => Out::Stderr(format!(
            "[done: {}{} · tokens {} in / {} out]\n",
            d.status.as_str(),
            d.reason
                .as_deref()
                .map(|r| format!(" ({r})"))
                .unwrap_or_default(),
            d.token_usage.input,
            d.token_usage.output
        )),
    })
}

/// The nesting of `task` child runs: each child's events are shown indented under its parent,
/// one step per level (`│ ` in the margin).
#[derive(Debug, Default)]
pub struct Nesting {
    depth: std::collections::HashMap<String, usize>,
    /// Child runs whose heading line was shown.
    headed: std::collections::HashSet<String>,
}

impl Nesting {
    /// How deep the event's run is, learning it from its `parent_run_id` (a child whose parent
    /// was not seen, joined mid-way, counts as one level down).
    fn depth_of(&mut self, ev: &ExecutionEvent) -> usize {
        let Some(parent) = &ev.parent_run_id else {
            return 0;
        };
        let d = self.depth.get(parent).copied().unwrap_or(0) + 1;
        self.depth.insert(ev.run_id.clone(), d);
        d
    }

    /// The event as terminal output, indented by its run's depth. A child's text is shown once,
    /// whole, when its answer is final (its deltas would interleave with its siblings'); its
    /// first event is headed by the sub-task's run id.
    pub fn render(&mut self, ev: &ExecutionEvent) -> Option<Out> {
        let depth = self.depth_of(ev);
        if depth == 0 {
            return event(ev);
        }
        let out = match &ev.payload {
            EventPayload::Text(t) if !t.is_final => return None,
            EventPayload::Text(t) => Out::Stdout(format!("{}\n", t.content)),
            EventPayload::Done(d) => Out::Stderr(format!(
                "[sub-task done: {}{} · tokens {} in / {} out]\n",
                d.status.as_str(),
                d.reason
                    .as_deref()
                    .map(|r| format!(" ({r})"))
                    .unwrap_or_default(),
                d.token_usage.input,
                d.token_usage.output
            )),
            _ => event(ev)?,
        };
        let new = self.headed.insert(ev.run_id.clone());
        let margin = "  ".repeat(depth - 1) + "│ ";
        let indent = |text: &str| -> String {
            let mut s: String = text
                .trim_start_matches('\n')
                .lines()
                .map(|l| format!("{margin}{l}\n"))
                .collect();
            if new {
                s.insert_str(
                    0,
                    &format!("{}┌ sub-task {}\n", "  ".repeat(depth - 1), ev.run_id),
                );
            }
            s
        };
        Some(match out {
            Out::Stdout(t) => Out::Stdout(indent(&t)),
            Out::Stderr(t) => Out::Stderr(indent(&t)),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use agentry_schema::events::HitlKind;
    use serde_json::json;

    #[test]
    fn todos_read_as_words() {
        assert_eq!(todo_status(TodoStatus::InProgress), "in progress");
        assert_eq!(todo_status(TodoStatus::Pending), "pending");
    }

    #[test]
    fn approvals_show_pretty_arguments_and_the_diff_of_an_edit() {
        let h = HitlRequestData {
            request_id: "r".into(),
            kind: HitlKind::Approval,
            action_requests: vec![ActionRequest {
                name: "edit_file".into(),
                args: json!({"file_path": "a.txt", "old_string": "hello\n", "new_string": "bye\n"}),
                description: "Edit a.txt".into(),
                tool_call_id: None,
            }],
            question: None,
        };
        let text = hitl_request(&h);
        assert!(
            text.contains("! approval needed: edit_file — Edit a.txt"),
            "{text}"
        );
        assert!(
            text.contains("    {\n      \"file_path\": \"a.txt\","),
            "{text}"
        );
        assert!(
            text.contains("    --- a/a.txt\n    +++ b/a.txt\n"),
            "{text}"
        );
        assert!(text.contains("    -hello\n    +bye\n"), "{text}");
        // No escaped JSON inside JSON.
        assert!(!text.contains("\\\""), "{text}");
    }

    #[test]
    fn child_runs_are_indented_under_their_parent() {
        let mut n = Nesting::default();
        let ev = |run: &str, parent: Option<&str>, payload| {
            ExecutionEvent::new(1, "s", run, payload).with_parent(parent.map(str::to_string))
        };
        let top = n.render(&ev("p", None, EventPayload::text("hi", false)));
        assert_eq!(top, Some(Out::Stdout("hi".into())));
        // A child's deltas wait for its final answer, shown whole and indented.
        assert_eq!(
            n.render(&ev("c", Some("p"), EventPayload::text("par", false))),
            None
        );
        let Some(Out::Stdout(first)) = n.render(&ev(
            "c",
            Some("p"),
            EventPayload::ToolCall(agentry_schema::events::ToolCallData {
                tool_name: "read_file".into(),
                tool_args: json!({"file_path": "a"}),
                tool_call_id: "t1".into(),
            }),
        )) else {
            panic!("a child's tool call is shown");
        };
        assert!(first.starts_with("┌ sub-task c\n│ → read_file"), "{first}");
        let Some(Out::Stdout(grandchild)) = n.render(&ev(
            "g",
            Some("c"),
            EventPayload::text("deep answer\nline 2", true),
        )) else {
            panic!("a grandchild's answer is shown");
        };
        assert_eq!(grandchild, "  ┌ sub-task g\n  │ deep answer\n  │ line 2\n");
    }

    #[test]
    fn long_results_are_cut_on_a_character_boundary() {
        let s = "é".repeat(RESULT_CHARS + 10);
        let c = cut(&s, RESULT_CHARS);
        assert_eq!(c.chars().count(), RESULT_CHARS + 1);
        assert!(c.ends_with('…'));
    }
}
