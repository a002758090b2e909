//! The memory tools (`remember`, `recall`): a user's long-term memories in the store, scoped to
//! the tenant and user of the call. The loop also puts the most recent memories in the system
//! prompt.

use std::sync::Arc;

use agentry_store::PlatformScope;
use agentry_store::memories::{self, NewMemory};
use agentry_tools::tool::{Tool, ToolContext, ToolError, ToolOutput, ToolSpec};
use async_trait::async_trait;
use sea_orm::DatabaseConnection;
use serde_json::{Value, json};

pub const SERVICE: &str = "memory";
const KINDS: [&str; 4] = ["fact", "preference", "decision", "context"];

pub fn memory_tools(db: DatabaseConnection) -> Vec<Arc<dyn Tool>> {
    vec![
        Arc::new(Remember {
            db: db.clone(),
            spec: ToolSpec::new(
                SERVICE,
                "remember",
                "Store something worth remembering about the user across conversations (a fact, a preference, a decision).",
                json!({
                    "type": "object",
                    "properties": {
                        "content": {"type": "string", "minLength": 1, "maxLength": 4000},
                        "kind": {"type": "string", "enum": KINDS, "default": "fact"}
                    },
                    "required": ["content"]
                }),
            ),
        }),
        Arc::new(Recall {
            db,
            spec: ToolSpec::new(
                SERVICE,
                "recall",
                "Search the user's stored memories by words.",
                json!({
                    "type": "object",
                    "properties": {
                        "query": {"type": "string", "minLength": 1},
                        "limit": {"type": "integer", "minimum": 1, "maximum": 50, "default": 10}
                    },
                    "required": ["query"]
                }),
            ),
        }),
    ]
}

struct Remember {
    db: DatabaseConnection,
    spec: ToolSpec,
}

#[async_trait]
impl Tool for Remember {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    async fn call(&self, args: Value, ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
        let content = args["content"]
            .as_str()
            .unwrap_or_default()
            .trim()
            .to_string();
        if content.is_empty() {
            return Err(ToolError::invalid("content must not be empty"));
        }
        let kind = args["kind"].as_str().unwrap_or("fact").to_string();
        let m = memories::create(
            &self.db,
            &PlatformScope::new().tenant(ctx.tenant_id),
            NewMemory {
                user_id: ctx.user_id,
                assistant_id: None,
                kind,
                content,
                metadata: json!({"source": "conversation", "session_id": ctx.session_id.to_string()}),
                expires_at: None,
            },
        )
        .await
        .map_err(|e| ToolError::Failed { message: format!("could not store the memory: {e}"), retryable: true })?;
        Ok(ToolOutput::ok(
            json!({"stored": true, "id": m.id.to_string()}),
        ))
    }
}

struct Recall {
    db: DatabaseConnection,
    spec: ToolSpec,
}

#[async_trait]
impl Tool for Recall {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    async fn call(&self, args: Value, ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
        let query = args["query"].as_str().unwrap_or_default();
        let limit = args["limit"].as_u64().unwrap_or(10).clamp(1, 50);
        let found = memories::search(
            &self.db,
            &PlatformScope::new().tenant(ctx.tenant_id),
            ctx.user_id,
            query,
            limit,
        )
        .await
        .map_err(|e| ToolError::Failed {
            message: format!("could not search memories: {e}"),
            retryable: true,
        })?;
        let items: Vec<Value> = found
            .iter()
            .map(|m| json!({"id": m.id.to_string(), "kind": m.kind, "content": m.content, "created_at": m.created_at}))
            .collect();
        Ok(ToolOutput::ok(
            json!({"memories": items, "count": items.len()}),
        ))
    }
}
