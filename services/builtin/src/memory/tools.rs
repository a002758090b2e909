//! The memory tools: `remember`, `recall` and `forget`, over the [`MemoryBank`] of the
//! caller's tenant, user and assistant (from the [`ToolContext`]).

use std::sync::Arc;

use agentry_schema::ids::MemoryId;
use agentry_schema::memory::{MEMORY_KINDS, MemoryScope};
use agentry_store::PlatformScope;
use agentry_tools::tool::{Tool, ToolContext, ToolError, ToolOutput, ToolSpec};
use async_trait::async_trait;
use serde_json::{Value, json};

use super::{Fact, MemoryBank, MemoryError, Who};

pub const SERVICE: &str = "memory";

/// Longest expiry a tool may set, in days (ten years).
const MAX_EXPIRY_DAYS: i64 = 3650;

pub fn memory_tools(bank: Arc<MemoryBank>) -> Vec<Arc<dyn Tool>> {
    let scopes: Vec<&str> = MemoryScope::ALL.iter().map(|s| s.as_str()).collect();
    vec![
        Arc::new(Remember {
            bank: bank.clone(),
            spec: ToolSpec::new(
                SERVICE,
                "remember",
                "Store something worth remembering across conversations (a fact, a preference, a decision). \
                 Scope `user` (default) is the user's own; `assistant` (this assistant's knowledge for every user) \
                 and `tenant` (the whole organisation's) are for tenant admins. A near-duplicate of a stored memory \
                 refreshes it instead of adding another.",
                json!({
                    "type": "object",
                    "properties": {
                        "content": {"type": "string", "minLength": 1, "maxLength": super::MAX_CONTENT_CHARS},
                        "kind": {"type": "string", "enum": MEMORY_KINDS, "default": "fact"},
                        "scope": {"type": "string", "enum": scopes, "default": "user"},
                        "expires_in_days": {"type": "integer", "minimum": 1, "maximum": MAX_EXPIRY_DAYS,
                            "description": "Forget it after this many days; left out: keep it."}
                    },
                    "required": ["content"],
                    "additionalProperties": false
                }),
            ),
        }),
        Arc::new(Recall {
            bank: bank.clone(),
            spec: ToolSpec::new(
                SERVICE,
                "recall",
                "Search the memories you can see (the user's own, this assistant's and the tenant's) by meaning; \
                 best match first. Say what you are looking for in words.",
                json!({
                    "type": "object",
                    "properties": {
                        "query": {"type": "string", "minLength": 1, "maxLength": 2000},
                        "scope": {"type": "string", "enum": scopes,
                            "description": "Only this scope; left out: all you can see."},
                        "limit": {"type": "integer", "minimum": 1, "maximum": 50, "default": 10}
                    },
                    "required": ["query"],
                    "additionalProperties": false
                }),
            ),
        }),
        Arc::new(Forget {
            bank,
            spec: ToolSpec::new(
                SERVICE,
                "forget",
                "Delete a memory by the id `recall` or `remember` gave (the user's own; shared ones only for tenant admins).",
                json!({
                    "type": "object",
                    "properties": {"id": {"type": "string", "minLength": 1, "maxLength": 64}},
                    "required": ["id"],
                    "additionalProperties": false
                }),
            ),
        }),
    ]
}

fn who(ctx: &ToolContext) -> Who {
    Who {
        // The engine tells the tool its tenant; the tool acts only inside it.
        tenant: PlatformScope::new().tenant(ctx.tenant_id),
        user_id: ctx.user_id,
        assistant_id: ctx.assistant_id.clone(),
        // Tenant admins write the shared scopes.
        admin: ctx.role == agentry_schema::tenancy::Role::Admin,
    }
}

fn tool_error(e: MemoryError) -> ToolError {
    match e {
        MemoryError::Invalid { field, message } => ToolError::InvalidArguments {
            message,
            details: json!({"field": field}),
        },
        MemoryError::Forbidden(m) => ToolError::PermissionDenied(m),
        MemoryError::NotFound(id) => ToolError::NotFound(format!("memory {id}")),
        MemoryError::Store(e) => ToolError::Failed {
            message: format!("the memory store failed: {e}"),
            retryable: true,
        },
    }
}

fn scope_arg(args: &Value) -> Result<Option<MemoryScope>, ToolError> {
    match args.get("scope").and_then(Value::as_str) {
        None => Ok(None),
        Some(s) => MemoryScope::parse(s).map(Some).ok_or_else(|| {
            ToolError::invalid(format!(
                "unknown scope {s:?}: use user, assistant or tenant"
            ))
        }),
    }
}

fn view(m: &agentry_store::memories::Memory) -> Value {
    json!({
        "id": m.id.to_string(),
        "scope": m.scope.as_str(),
        "kind": m.kind,
        "content": m.content,
        "expires_at": m.expires_at,
        "updated_at": m.updated_at,
    })
}

struct Remember {
    bank: Arc<MemoryBank>,
    spec: ToolSpec,
}

#[async_trait]
impl Tool for Remember {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    async fn call(&self, args: Value, ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
        let mut fact = Fact::new(args["content"].as_str().unwrap_or_default());
        fact.kind = args["kind"].as_str().unwrap_or("fact").to_string();
        fact.scope = scope_arg(&args)?.unwrap_or_default();
        fact.expires_at = match args.get("expires_in_days").and_then(Value::as_i64) {
            None => None,
            Some(d) if (1..=MAX_EXPIRY_DAYS).contains(&d) => {
                Some(chrono::Utc::now() + chrono::Duration::days(d))
            }
            Some(_) => {
                return Err(ToolError::invalid(format!(
                    "expires_in_days must be 1–{MAX_EXPIRY_DAYS}"
                )));
            }
        };
        fact.source_session_id = Some(ctx.session_id);
        fact.source_run_id = Some(ctx.run_id);
        let r = self
            .bank
            .remember(&who(ctx), fact)
            .await
            .map_err(tool_error)?;
        Ok(ToolOutput::ok(json!({
            "stored": true,
            "merged": r.merged,
            "id": r.memory.id.to_string(),
            "scope": r.memory.scope.as_str(),
            "embedded": r.memory.embedding.is_some(),
        })))
    }
}

struct Recall {
    bank: Arc<MemoryBank>,
    spec: ToolSpec,
}

#[async_trait]
impl Tool for Recall {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    async fn call(&self, args: Value, ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
        let query = args["query"].as_str().unwrap_or_default();
        let limit = args["limit"].as_u64().unwrap_or(10).clamp(1, 50) as usize;
        let scopes = match scope_arg(&args)? {
            Some(s) => vec![s],
            None => MemoryScope::ALL.to_vec(),
        };
        let found = self
            .bank
            .search(&who(ctx), query, &scopes, limit)
            .await
            .map_err(tool_error)?;
        let items: Vec<Value> = found
            .hits
            .iter()
            .map(|(m, score)| {
                let mut v = view(m);
                v["score"] = json!((score * 1000.0).round() / 1000.0);
                v
            })
            .collect();
        let mut out = json!({
            "memories": items,
            "count": items.len(),
            "search": found.mode.as_str(),
        });
        if let Some(note) = found.mode.note() {
            out["note"] = json!(note);
        }
        Ok(ToolOutput::ok(out))
    }
}

struct Forget {
    bank: Arc<MemoryBank>,
    spec: ToolSpec,
}

#[async_trait]
impl Tool for Forget {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    async fn call(&self, args: Value, ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
        let raw = args["id"].as_str().unwrap_or_default();
        let id: MemoryId = raw
            .trim()
            .parse()
            .map_err(|_| ToolError::invalid(format!("{raw:?} is not a memory id")))?;
        let m = self.bank.forget(&who(ctx), id).await.map_err(tool_error)?;
        Ok(ToolOutput::ok(
            json!({"forgotten": true, "id": m.id.to_string(), "content": m.content}),
        ))
    }
}
