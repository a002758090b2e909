//! One assistant as an MCP tool ([`AskAssistant`], `ask_<assistant>`): a real chat run through
//! the engine to its `done`, its approvals and questions put to the MCP client's user by
//! elicitation, an MCP cancel cancelling the run.

use std::sync::Arc;
use std::time::Duration;

use agentry_actors::{ChatCommand, CreateSession, Engine, EngineError};
use agentry_mcp::server::{approval_question, is_yes};
use agentry_schema::events::{DoneStatus, EventPayload, HitlKind, HitlRequestData};
use agentry_schema::frames::Decision;
use agentry_schema::ids::{ApprovalId, AssistantId, SessionId};
use agentry_store::UserScope;
use agentry_store::tenants::Tenant;
use agentry_tools::tool::{InteractionError, Tool, ToolContext, ToolError, ToolOutput, ToolSpec};
use async_trait::async_trait;
use futures::StreamExt;
use serde_json::{Value, json};

/// The RBAC service of the `ask_<assistant>` tools.
pub(crate) const ASSISTANTS_SERVICE: &str = "assistants";
/// How long a cancelled `ask_<assistant>` call waits for its run's `done`.
const CANCEL_WAIT: Duration = Duration::from_millis(1500);

/// An engine failure as the tool error an MCP client sees.
pub(crate) fn engine_tool_error(e: EngineError) -> ToolError {
    match e {
        EngineError::NotFound(what) => ToolError::NotFound(what),
        EngineError::BadRequest(m) => ToolError::invalid(m),
        EngineError::Validation { field, message } => ToolError::InvalidArguments {
            message,
            details: json!({ "field": field }),
        },
        EngineError::Quota { .. } => ToolError::QuotaExceeded(e.to_string()),
        EngineError::Forbidden(m) => ToolError::PermissionDenied(m),
        EngineError::Unavailable | EngineError::DatabaseUnavailable | EngineError::ShuttingDown => {
            ToolError::Unavailable(e.to_string())
        }
        other => ToolError::failed(other.to_string()),
    }
}

/// `ask_<assistant>` as an MCP tool name: `^[a-zA-Z0-9_-]{1,64}$`.
pub fn ask_tool_name(assistant: &str) -> String {
    let clean: String = assistant
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect();
    let mut name = format!("ask_{clean}");
    name.truncate(64);
    name
}

/// One assistant as a tool: `{message, session_id?}` runs a chat to its `done`.
pub(crate) struct AskAssistant {
    pub(crate) spec: ToolSpec,
    engine: Engine,
    tenant: Arc<Tenant>,
    user: UserScope,
    assistant: AssistantId,
}

impl AskAssistant {
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn new(
        engine: Engine,
        tenant: Arc<Tenant>,
        user: UserScope,
        assistant: AssistantId,
        title: &str,
        description: &str,
        timeout: Duration,
    ) -> Self {
        let name = ask_tool_name(assistant.as_str());
        let mut spec = ToolSpec::new(
            ASSISTANTS_SERVICE,
            &name,
            &format!(
                "Ask the assistant {:?} ({title}): {description} Runs a full chat (it may use \
                 its tools, asking you to approve the risky ones) and returns its answer. Pass \
                 the returned session_id to continue the same conversation.",
                assistant.as_str()
            ),
            json!({
                "type": "object",
                "properties": {
                    "message": {"type": "string", "minLength": 1, "description": "What to say to the assistant"},
                    "session_id": {"type": "string", "description": "Continue this conversation (from an earlier answer's structuredContent)"},
                },
                "required": ["message"],
                "additionalProperties": false,
            }),
        )
        .with_timeout(timeout);
        spec.service_tool = assistant.as_str().to_string();
        AskAssistant {
            spec,
            engine,
            tenant,
            user,
            assistant,
        }
    }

    /// Put a `hitl_request` of the run to the MCP client's user and send the decision back.
    async fn decide(&self, session: SessionId, req: &HitlRequestData, ctx: &ToolContext) {
        let Ok(request_id) = req.request_id.parse::<ApprovalId>() else {
            tracing::warn!(request_id = %req.request_id, "a hitl_request with a bad id");
            return;
        };
        let decision = match (req.kind, &req.question) {
            (HitlKind::Question, Some(q)) => match ctx.interaction.ask(q.clone()).await {
                Ok(answer) => Decision::Answer { answer },
                Err(e) => Decision::Reject {
                    message: Some(no_answer(&e)),
                },
            },
            _ => {
                let calls: Vec<String> = req
                    .action_requests
                    .iter()
                    .map(|a| format!("{} {}", a.name, a.args))
                    .collect();
                let q = approval_question(
                    format!(
                        "The assistant {:?} wants to call: {}. Allow it?",
                        self.assistant.as_str(),
                        calls.join("; ")
                    ),
                    req.question.as_ref().map(|q| q.timeout).unwrap_or(300),
                );
                match ctx.interaction.ask(q).await {
                    Ok(a) if is_yes(&a) => Decision::Approve { message: None },
                    Ok(_) => Decision::Reject {
                        message: Some("rejected by the MCP client's user".into()),
                    },
                    // Never approve for a user who could not be asked.
                    Err(e) => Decision::Reject {
                        message: Some(no_answer(&e)),
                    },
                }
            }
        };
        if let Err(e) = self
            .engine
            .decide(&self.tenant, &self.user, session, request_id, decision)
            .await
        {
            // Timed out or the run ended meanwhile: its `done` says how.
            tracing::debug!(error = %e, "an /mcp decision was not taken");
        }
    }
}

fn no_answer(e: &InteractionError) -> String {
    format!("the MCP client's user could not be asked or did not answer: {e}")
}

#[async_trait]
impl Tool for AskAssistant {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    async fn call(&self, args: Value, ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
        let message = args["message"].as_str().unwrap_or_default().to_string();
        let session_id = match args.get("session_id").and_then(Value::as_str) {
            Some(raw) => {
                let id: SessionId = raw
                    .parse()
                    .map_err(|e| ToolError::invalid(format!("session_id: {e}")))?;
                let existing = self
                    .engine
                    .load_session(&self.tenant, &self.user, id)
                    .await
                    .map_err(engine_tool_error)?;
                if existing.assistant_id != self.assistant {
                    return Err(ToolError::invalid(format!(
                        "session {id} is a conversation with {:?}; use ask_{} for it, or leave \
                         session_id out to start a new one",
                        existing.assistant_id.as_str(),
                        existing.assistant_id.as_str()
                    )));
                }
                Some(id)
            }
            None => None,
        };
        // rmcp runs calls on plain tokio tasks: the run's stream needs no actor.
        let mut run = self
            .engine
            .stream_run(
                &self.tenant,
                &self.user,
                ChatCommand {
                    session_id,
                    new_session: CreateSession {
                        assistant_id: Some(self.assistant.clone()),
                        metadata: Some(json!({"source": "mcp"})),
                        ..Default::default()
                    },
                    message,
                    enqueue: false,
                    subscriber: None,
                    request_id: None,
                    client_tools: Vec::new(),
                },
            )
            .await
            .map_err(engine_tool_error)?;
        let (session, run_id) = (run.session_id(), run.run_id().to_string());
        let mut text = String::new();
        let mut errors = Vec::new();
        let mut status = None;
        loop {
            let ev = tokio::select! {
                ev = run.next() => ev,
                _ = ctx.cancel.cancelled() => {
                    // An MCP cancel of the call cancels the run; its `done` follows within a second.
                    let _ = self.engine.cancel(&self.tenant, &self.user, session).await;
                    let _ = tokio::time::timeout(CANCEL_WAIT, run.finish()).await;
                    return Err(ToolError::Cancelled);
                }
            };
            let Some(ev) = ev else { break };
            // A `task` child run's events: its questions and approvals are the caller's to
            // decide like the run's own; its text, errors and `done` are its parent's business.
            let child = ev.event.parent_run_id.is_some();
            match &ev.event.payload {
                _ if child && !matches!(ev.event.payload, EventPayload::HitlRequest(_)) => {}
                EventPayload::Text(t) if t.is_final => text = t.content.clone(),
                EventPayload::Error(e) => errors.push(e.error.clone()),
                EventPayload::HitlRequest(req) => {
                    tokio::select! {
                        _ = self.decide(session, req, ctx) => {}
                        _ = ctx.cancel.cancelled() => {}
                    }
                }
                EventPayload::Done(d) => status = Some(d.status),
                _ => {}
            }
        }
        let Some(status) = status else {
            return Err(ToolError::failed(
                "the session stopped before its run ended; see GET /api/v1/sessions/{id}/events",
            ));
        };
        let run = run_id;
        if text.is_empty() && status != DoneStatus::Completed {
            text = match errors.last() {
                Some(e) => format!("The run ended {}: {e}", status.as_str()),
                None => format!("The run ended {}.", status.as_str()),
            };
        }
        let content = json!({
            "text": text,
            "session_id": session.to_string(),
            "run_id": run,
            "status": status.as_str(),
        });
        Ok(if status == DoneStatus::Completed {
            ToolOutput::ok(content)
        } else {
            ToolOutput::failed(content)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ask_tool_names_fit_the_mcp_pattern() {
        let re = regex_lite_check;
        assert_eq!(ask_tool_name("default"), "ask_default");
        assert_eq!(ask_tool_name("sre.bot/1"), "ask_sre_bot_1");
        let long = "a".repeat(100);
        assert_eq!(ask_tool_name(&long).len(), 64);
        for id in ["default", "x y", "ünïcode", &long] {
            assert!(re(&ask_tool_name(id)), "{id}");
        }
    }

    fn regex_lite_check(name: &str) -> bool {
        (1..=64).contains(&name.len())
            && name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
    }
}
