//! The audit of MCP calls ([`McpAudit`]): each built-in call, re-exported tool call, resource
//! read and prompt get is one execution with its tool-call row, in one session per MCP session
//! of the user.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use agentry_actors::{CreateSession, Engine};
use agentry_mcp::server::{CallAudit, CallRecord};
use agentry_schema::ids::{AssistantId, RunId, SessionId, TenantId, UserId};
use agentry_store::executions::{self, ExecutionStatus, NewExecution};
use agentry_store::tenants::Tenant;
use agentry_store::{UserScope, sessions, tool_calls};
use agentry_tools::tool::{ToolError, ToolSpec};
use async_trait::async_trait;
use sea_orm::DatabaseConnection;
use serde_json::{Value, json};

use crate::ask::{ASSISTANTS_SERVICE, engine_tool_error};

/// Whose calls share one audit session: the tenant, the user and the MCP session.
pub(crate) type AuditKey = (TenantId, UserId, Option<String>);

/// The audit of `/mcp` calls: each built-in call is one execution (so it shows under
/// `GET /api/v1/executions` with its tool-call row), in one session per MCP session of the user
/// (metadata `{"source": "mcp"}`), made on the first call.
pub(crate) struct McpAudit {
    pub(crate) engine: Engine,
    pub(crate) db: DatabaseConnection,
    pub(crate) tenant: Arc<Tenant>,
    pub(crate) user: UserScope,
    pub(crate) key: AuditKey,
    pub(crate) sessions: Arc<Mutex<HashMap<AuditKey, SessionId>>>,
}

impl McpAudit {
    fn known_session(&self) -> Option<SessionId> {
        self.sessions
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&self.key)
            .copied()
    }

    async fn session(&self) -> Result<SessionId, ToolError> {
        let scope = self.tenant.scope();
        if let Some(id) = self.known_session() {
            match sessions::get(&self.db, &scope, id).await {
                Ok(Some(_)) => return Ok(id),
                // Deleted (by the user, or as expired): record into a new one.
                Ok(None) => {}
                Err(e) => return Err(ToolError::Unavailable(format!("the audit store: {e}"))),
            }
        }
        let created = self
            .engine
            .create_session(
                &self.tenant,
                &self.user,
                CreateSession {
                    metadata: Some(json!({"source": "mcp", "mcp_session_id": self.key.2})),
                    ..Default::default()
                },
            )
            .await
            .map_err(engine_tool_error)?;
        self.sessions
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(self.key.clone(), created.id);
        Ok(created.id)
    }

    async fn write(
        &self,
        (session, run): (SessionId, RunId),
        call: CallRecord,
    ) -> Result<(), String> {
        let scope = self.tenant.scope();
        let (status, output, error) = match &call.result {
            Ok(out) if !out.is_error => {
                (ExecutionStatus::Completed, Some(out.content.clone()), None)
            }
            Ok(out) => (
                ExecutionStatus::Failed,
                Some(out.content.clone()),
                Some(out.content.to_string()),
            ),
            Err(ToolError::Cancelled) => {
                (ExecutionStatus::Cancelled, None, Some("cancelled".into()))
            }
            Err(e) if call.approved == Some(false) => {
                (ExecutionStatus::Rejected, None, Some(e.to_string()))
            }
            Err(ToolError::Timeout(_)) => {
                (ExecutionStatus::Timeout, None, Some("timed out".into()))
            }
            Err(e) => (ExecutionStatus::Failed, None, Some(e.to_string())),
        };
        // A run recorded beside the session's actor: its start-up must read what is stored.
        self.engine.run_recorded_outside(session);
        executions::create(
            &self.db,
            &scope,
            NewExecution {
                id: run,
                user_id: self.user.user_id,
                session_id: session,
                assistant_id: AssistantId::DEFAULT.to_string(),
                input: match call.tool.name.as_str() {
                    // A resource read or prompt get re-exported from a server of the caller.
                    m @ (crate::reexport::READ | crate::reexport::GET) => {
                        format!("MCP {m} {}", call.tool.service_tool)
                    }
                    name => format!("MCP tools/call {name}"),
                },
                trace_id: None,
                status: ExecutionStatus::Running,
                role: Some(self.user.grant()),
            },
        )
        .await
        .map_err(|e| e.to_string())?;
        tool_calls::insert(
            &self.db,
            &scope,
            tool_calls::NewToolCallLog {
                session_id: session,
                execution_id: run,
                tool_call_id: call.tool_call_id,
                tool_name: call.tool.name.clone(),
                input: call.args,
                output,
                error: error.clone(),
                duration_ms: u64::try_from(call.duration.as_millis()).unwrap_or(u64::MAX),
                approved: call.approved,
                // The caller is the one the MCP client asked.
                approved_by: call.approved.map(|_| self.user.user_id),
            },
        )
        .await
        .map_err(|e| e.to_string())?;
        executions::update(
            &self.db,
            &scope,
            run,
            status,
            1,
            Default::default(),
            error.as_deref(),
        )
        .await
        .map_err(|e| e.to_string())
    }
}

#[async_trait]
impl CallAudit for McpAudit {
    async fn begin(
        &self,
        tool: &ToolSpec,
        _args: &Value,
    ) -> Result<Option<(SessionId, RunId)>, ToolError> {
        if tool.service == ASSISTANTS_SERVICE {
            // The assistant's run is its own execution, its tool calls audited by the loop.
            return Ok(None);
        }
        Ok(Some((self.session().await?, RunId::new())))
    }

    async fn record(&self, ids: (SessionId, RunId), call: CallRecord) {
        let tool = call.tool.name.clone();
        if let Err(e) = self.write(ids, call).await {
            tracing::error!(tool = %tool, error = %e, "writing the audit of an /mcp call failed");
        }
    }
}
