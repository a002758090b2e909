//! The `todos` service: `write_todos` replaces the run's plan with the list it is given and
//! emits it as a `todo_update` event. The list itself lives in the run's checkpoint (the loop
//! keeps the last `todo_update`); the tool only validates and echoes it.

use std::sync::Arc;

use agentry_schema::events::{EventPayload, Todo, TodoStatus, TodoUpdateData};
use async_trait::async_trait;
use serde::Deserialize;
use serde_json::{Value, json};

use super::{BuiltinConfig, parse_args};
use agentry_tools::tool::{Tool, ToolContext, ToolError, ToolOutput, ToolSpec};

/// Longest text of one item.
const MAX_CONTENT_CHARS: usize = 2000;

pub fn tools(cfg: &BuiltinConfig) -> Vec<Arc<dyn Tool>> {
    vec![Arc::new(WriteTodos::new(cfg))]
}

pub struct WriteTodos {
    spec: ToolSpec,
    max_items: usize,
}

#[derive(Deserialize)]
struct TodosArgs {
    todos: Vec<Todo>,
}

impl WriteTodos {
    pub fn new(cfg: &BuiltinConfig) -> Self {
        let spec = ToolSpec::new(
            "todos",
            "write_todos",
            "Replace the task list with the full list given. Use it to plan multi-step work and \
             to mark progress: each item has content and a status (pending, in_progress, \
             completed); keep one item in_progress at a time.",
            json!({
                "type": "object",
                "properties": {
                    "todos": {
                        "type": "array",
                        "maxItems": cfg.todos_max_items,
                        "items": {
                            "type": "object",
                            "properties": {
                                "content": {"type": "string", "minLength": 1},
                                "status": {"type": "string", "enum": ["pending", "in_progress", "completed"]}
                            },
                            "required": ["content", "status"]
                        }
                    }
                },
                "required": ["todos"]
            }),
        );
        Self {
            spec,
            max_items: cfg.todos_max_items,
        }
    }
}

#[async_trait]
impl Tool for WriteTodos {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    async fn call(&self, args: Value, _ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
        let args: TodosArgs = parse_args("write_todos", args)?;
        if args.todos.len() > self.max_items {
            return Err(ToolError::invalid(format!(
                "{} items is more than the limit of {}; merge or drop some",
                args.todos.len(),
                self.max_items
            )));
        }
        let mut problems = Vec::new();
        let mut todos = Vec::with_capacity(args.todos.len());
        for (i, todo) in args.todos.into_iter().enumerate() {
            let content = todo.content.trim().to_string();
            if content.is_empty() {
                problems.push(
                    json!({"path": format!("/todos/{i}/content"), "message": "content is empty"}),
                );
            } else if content.chars().count() > MAX_CONTENT_CHARS {
                problems.push(json!({"path": format!("/todos/{i}/content"),
                                     "message": format!("content is longer than {MAX_CONTENT_CHARS} characters")}));
            }
            todos.push(Todo {
                content,
                status: todo.status,
            });
        }
        if !problems.is_empty() {
            return Err(ToolError::InvalidArguments {
                message: format!("{} todo item(s) are not valid", problems.len()),
                details: json!({"violations": problems}),
            });
        }
        let count = |s: TodoStatus| todos.iter().filter(|t| t.status == s).count();
        let content = json!({
            "todos": todos,
            "summary": {
                "total": todos.len(),
                "pending": count(TodoStatus::Pending),
                "in_progress": count(TodoStatus::InProgress),
                "completed": count(TodoStatus::Completed),
            }
        });
        Ok(ToolOutput::ok(content).with_event(EventPayload::TodoUpdate(TodoUpdateData { todos })))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::ctx;
    use agentry_tools::tool::ToolRegistry;

    #[tokio::test]
    async fn the_list_is_returned_and_emitted_as_todo_update() {
        let tmp = tempfile::tempdir().unwrap();
        let tool = WriteTodos::new(&BuiltinConfig::default());
        let out = tool
            .call(
                json!({"todos": [
                    {"content": " write the parser ", "status": "completed"},
                    {"content": "test it", "status": "in_progress"},
                    {"content": "document it", "status": "pending"}
                ]}),
                &ctx(tmp.path()),
            )
            .await
            .unwrap();
        assert_eq!(
            out.content["summary"],
            json!({"total": 3, "pending": 1, "in_progress": 1, "completed": 1})
        );
        assert_eq!(
            out.content["todos"][0],
            json!({"content": "write the parser", "status": "completed"})
        );
        let [EventPayload::TodoUpdate(update)] = out.events.as_slice() else {
            panic!("{:?}", out.events)
        };
        assert_eq!(update.todos.len(), 3);
        assert_eq!(update.todos[1].status, TodoStatus::InProgress);
        let wire = serde_json::to_value(&out.events[0]).unwrap();
        assert_eq!(wire["event_type"], "todo_update");
        assert_eq!(wire["data"]["todos"][2]["status"], "pending");
    }

    #[tokio::test]
    async fn invalid_lists_get_structured_errors() {
        let tmp = tempfile::tempdir().unwrap();
        let cfg = BuiltinConfig {
            todos_max_items: 2,
            ..BuiltinConfig::default()
        };
        let tool = Arc::new(WriteTodos::new(&cfg));
        let err = tool
            .call(
                json!({"todos": [{"content": "  ", "status": "pending"}]}),
                &ctx(tmp.path()),
            )
            .await
            .unwrap_err();
        let ToolError::InvalidArguments { details, .. } = &err else {
            panic!("{err:?}")
        };
        assert_eq!(details["violations"][0]["path"], "/todos/0/content");
        let err = tool
            .call(
                json!({"todos": [{"content": "x", "status": "done"}]}),
                &ctx(tmp.path()),
            )
            .await
            .unwrap_err();
        assert!(matches!(err, ToolError::InvalidArguments { .. }));
        // The registry's schema check catches the same before the call.
        let mut reg = ToolRegistry::new();
        reg.register(tool).unwrap();
        let three = json!({"todos": [
            {"content": "a", "status": "pending"}, {"content": "b", "status": "pending"},
            {"content": "c", "status": "pending"}]});
        assert!(matches!(
            reg.validate("write_todos", &three),
            Err(ToolError::InvalidArguments { .. })
        ));
        assert!(reg.validate("write_todos", &json!({"todos": []})).is_ok());
    }
}
