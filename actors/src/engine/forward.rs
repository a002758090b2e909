//! Client commands for a session another replica runs (cluster mode, issue 13): a chat, a
//! cancel or an approval's decision that reaches a replica which is not the session's owner
//! goes to the owner over the replicas' bus ([`agentry_store::coordination::Bus`]) and comes
//! back with the owner's answer, exactly as the owner would have given it to the client — or
//! with 503 `coordination_unavailable` once `cluster.forward_timeout_ms` passed without one.
//!
//! The caller is authenticated and the session checked visible to them on the replica the
//! request reached; the owner checks the session again (`load_session`) and runs the command
//! on its own live session. A forwarded command is never forwarded again: an owner that lost
//! the session meanwhile answers `session_owned_elsewhere` naming the new owner, and the
//! replica the client talks to tries that one (a few hops at most).

use std::time::Duration;

use agentry_schema::api::ClientTool;
use agentry_schema::error::ErrorCode;
use agentry_schema::frames::Decision;
use agentry_schema::ids::{ApprovalId, RunId, SessionId, TenantId, UserId};
use agentry_schema::tenancy::Role;
use agentry_store::coordination::{Coordination, ForwardError};
use agentry_store::{PlatformScope, UserScope};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::error::EngineError;
use agentry_store::tenants::Tenant;

use super::{Engine, SessionHandle};
use crate::session::ChatAccepted;

/// How many owners a command follows before it gives up (the session moved meanwhile).
const MAX_HOPS: usize = 3;

/// Who sent a forwarded command: the caller the first replica authenticated.
#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
pub(crate) struct Caller {
    tenant: TenantId,
    user: UserId,
    role: Role,
    #[serde(default)]
    custom_role: Option<agentry_schema::roles::RoleName>,
}

impl Caller {
    pub(crate) fn of(user: &UserScope) -> Caller {
        Caller {
            tenant: user.tenant.tenant_id(),
            user: user.user_id,
            role: user.role,
            custom_role: user.custom_role,
        }
    }
}

/// A command for the replica that runs a session.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub(crate) enum Command {
    Chat {
        caller: Caller,
        session: SessionId,
        message: String,
        /// The client's function tools for the run (none from an older replica).
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        client_tools: Vec<ClientTool>,
        enqueue: bool,
        request_id: Option<String>,
    },
    Cancel {
        caller: Caller,
        session: SessionId,
    },
    Decide {
        caller: Caller,
        session: SessionId,
        request: ApprovalId,
        decision: Decision,
    },
}

/// The answer to a forwarded command, as sent back.
fn answer(result: Result<Value, EngineError>) -> Value {
    match result {
        Ok(v) => json!({"ok": v}),
        Err(e) => {
            let message = match &e {
                // The cause stays in the owner's log, as it would for a local request.
                EngineError::Internal(cause) => {
                    tracing::error!(error = %cause, "a forwarded command failed");
                    "internal error".to_string()
                }
                e => e.to_string(),
            };
            json!({"error": {"error_code": e.code(), "message": message, "details": e.details()}})
        }
    }
}

/// A forwarded command's answer, back into a result.
fn unanswer(v: Value) -> Result<Value, EngineError> {
    if let Some(ok) = v.get("ok") {
        return Ok(ok.clone());
    }
    let err = &v["error"];
    let code = serde_json::from_value::<ErrorCode>(err["error_code"].clone())
        .unwrap_or(ErrorCode::InternalError);
    Err(EngineError::Remote {
        code,
        message: err["message"]
            .as_str()
            .unwrap_or("internal error")
            .to_string(),
        details: err["details"].clone(),
    })
}

/// The owner named by a `session_owned_elsewhere` answer, if that is what it is.
fn moved_to(e: &EngineError) -> Option<String> {
    match e {
        EngineError::SessionOwnedElsewhere { owner, .. } => Some(owner.clone()),
        EngineError::Remote {
            code: ErrorCode::SessionOwnedElsewhere,
            details,
            ..
        } => details["owner_replica"].as_str().map(str::to_string),
        _ => None,
    }
}

impl Engine {
    fn coordination(&self) -> Option<&Coordination> {
        self.deps().coordination.as_ref()
    }

    /// Send `cmd` to `owner` and wait for its answer.
    async fn forward(&self, owner: &str, cmd: &Command) -> Result<Value, EngineError> {
        let Some(bus) = self.coordination().and_then(|c| c.bus()) else {
            return Err(EngineError::CoordinationUnavailable);
        };
        let body = serde_json::to_value(cmd)
            .map_err(|e| EngineError::Internal(format!("encoding a forwarded command: {e}")))?;
        let wait = self.deps().config.forward_timeout;
        match bus.request(owner, body, wait).await {
            Ok(v) => unanswer(v),
            Err(ForwardError::Coordination(e)) => Err(e.into()),
            Err(e @ ForwardError::NotListening(_)) => {
                tracing::warn!(error = %e, owner, "forwarding a command to the session's owner failed");
                // Gone: another replica takes the session over once its heartbeat expires.
                Err(EngineError::OwnerUnreachable {
                    owner: owner.to_string(),
                    retry_after: self.deps().config.replica_ttl + Duration::from_secs(1),
                })
            }
            Err(e @ ForwardError::Timeout { .. }) => {
                tracing::warn!(error = %e, owner, "the session's owner did not answer a forwarded command");
                Err(EngineError::OwnerUnreachable {
                    owner: owner.to_string(),
                    retry_after: Duration::from_secs(2),
                })
            }
        }
    }

    /// Forward `cmd` to `owner`, following the session if it moved (at most [`MAX_HOPS`]).
    /// `local` runs the command here when the session turns out to be this replica's.
    async fn forward_following<F, Fut>(
        &self,
        mut owner: String,
        cmd: Command,
        local: F,
    ) -> Result<Value, EngineError>
    where
        F: Fn() -> Fut,
        Fut: std::future::Future<Output = Result<Value, EngineError>>,
    {
        let me = self
            .coordination()
            .map(|c| c.replica_id().to_string())
            .unwrap_or_default();
        let mut last = None;
        for _ in 0..MAX_HOPS {
            let res = if owner == me {
                local().await
            } else {
                self.forward(&owner, &cmd).await
            };
            match res.as_ref().err().and_then(moved_to) {
                Some(next) if next != owner => {
                    owner = next;
                    last = Some(res);
                }
                _ => return res,
            }
        }
        last.unwrap_or(Err(EngineError::CoordinationUnavailable))
    }

    /// A chat the session's local actor refused because `owner` runs the session: sent there.
    #[allow(clippy::too_many_arguments)] // the chat's fields, as `start_chat_here` takes them
    pub(crate) async fn forward_chat(
        &self,
        owner: String,
        handle: &SessionHandle,
        user: &UserScope,
        message: String,
        client_tools: Vec<ClientTool>,
        enqueue: bool,
        request_id: Option<String>,
    ) -> Result<ChatAccepted, EngineError> {
        let cmd = Command::Chat {
            caller: Caller::of(user),
            session: handle.session.id,
            message: message.clone(),
            client_tools: client_tools.clone(),
            enqueue,
            request_id: request_id.clone(),
        };
        let local = || {
            let (message, client_tools, request_id) =
                (message.clone(), client_tools.clone(), request_id.clone());
            async move {
                self.start_chat_here(handle, user, message, client_tools, enqueue, request_id)
                    .await
                    .map(|a| accepted_json(&a))
            }
        };
        let v = self.forward_following(owner, cmd, local).await?;
        accepted_of(&v)
    }

    /// Who runs the session, when it is another live replica. `RunResuming` when its owner
    /// is dead and another replica is about to take it over.
    pub(crate) async fn owner_elsewhere(
        &self,
        session: SessionId,
    ) -> Result<Option<String>, EngineError> {
        let Some(c) = self.coordination() else {
            return Ok(None);
        };
        match c.session_owner(&session.to_string()).await? {
            Some(o) if o.replica == c.replica_id() => Ok(None),
            Some(o) if o.alive => Ok(Some(o.replica)),
            Some(_) => Err(EngineError::RunResuming),
            None => Ok(None),
        }
    }

    /// A cancel for a session whose run is not here: sent to its owner, if another replica
    /// runs it.
    pub(crate) async fn forward_cancel(
        &self,
        tenant: &Tenant,
        user: &UserScope,
        session: SessionId,
    ) -> Result<RunId, EngineError> {
        let Some(owner) = self.owner_elsewhere(session).await? else {
            return Err(EngineError::NoActiveRun);
        };
        let cmd = Command::Cancel {
            caller: Caller::of(user),
            session,
        };
        let local = || async move {
            self.cancel_here(tenant, user, session)
                .await
                .map(|r| json!(r.to_string()))
        };
        let v = self.forward_following(owner, cmd, local).await?;
        run_id_of(&v)
    }

    /// A decision on a request that is pending in the store but not on this replica's desk:
    /// sent to the session's owner. `Ok(false)`: no other replica runs the session.
    pub(crate) async fn forward_decision(
        &self,
        tenant: &Tenant,
        user: &UserScope,
        session: SessionId,
        request: ApprovalId,
        decision: Decision,
    ) -> Result<bool, EngineError> {
        let Some(owner) = self.owner_elsewhere(session).await? else {
            return Ok(false);
        };
        let cmd = Command::Decide {
            caller: Caller::of(user),
            session,
            request,
            decision: decision.clone(),
        };
        let local = || {
            let decision = decision.clone();
            async move {
                self.decide_here(tenant, user, session, request, decision)
                    .await
                    .map(|()| Value::Null)
            }
        };
        self.forward_following(owner, cmd, local).await?;
        Ok(true)
    }

    /// Run a command another replica forwarded here, and say how it went.
    pub(crate) async fn answer_forwarded(&self, body: Value) -> Value {
        let cmd: Command = match serde_json::from_value(body) {
            Ok(c) => c,
            Err(e) => {
                return answer(Err(EngineError::BadRequest(format!(
                    "an unreadable forwarded command: {e}"
                ))));
            }
        };
        answer(self.run_forwarded(cmd).await)
    }

    async fn run_forwarded(&self, cmd: Command) -> Result<Value, EngineError> {
        let (Command::Chat { caller, .. }
        | Command::Cancel { caller, .. }
        | Command::Decide { caller, .. }) = &cmd;
        let tenant =
            agentry_store::tenants::get(&self.deps().db, &PlatformScope::new(), caller.tenant)
                .await?
                .ok_or_else(|| EngineError::NotFound(format!("tenant {}", caller.tenant)))?;
        let user = UserScope {
            tenant: tenant.scope(),
            user_id: caller.user,
            role: caller.role,
            custom_role: caller.custom_role,
        };
        match cmd {
            Command::Chat {
                session,
                message,
                client_tools,
                enqueue,
                request_id,
                ..
            } => {
                let handle = self.open_session(&tenant, &user, session).await?;
                self.start_chat_here(&handle, &user, message, client_tools, enqueue, request_id)
                    .await
                    .map(|a| accepted_json(&a))
            }
            Command::Cancel { session, .. } => self
                .cancel_here(&tenant, &user, session)
                .await
                .map(|r| json!(r.to_string())),
            Command::Decide {
                session,
                request,
                decision,
                ..
            } => self
                .decide_here(&tenant, &user, session, request, decision)
                .await
                .map(|()| Value::Null),
        }
    }
}

fn accepted_json(a: &ChatAccepted) -> Value {
    json!({"run_id": a.run_id.to_string(), "queued": a.queued})
}

fn accepted_of(v: &Value) -> Result<ChatAccepted, EngineError> {
    Ok(ChatAccepted {
        run_id: run_id_of(&v["run_id"])?,
        queued: v["queued"].as_bool().unwrap_or(false),
    })
}

fn run_id_of(v: &Value) -> Result<RunId, EngineError> {
    v.as_str()
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| EngineError::Internal(format!("a forwarded answer without a run id: {v}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_round_trip_with_their_code_and_details() {
        let ok = unanswer(answer(Ok(json!({"run_id": "x"})))).unwrap();
        assert_eq!(ok["run_id"], "x");
        let e = unanswer(answer(Err(EngineError::RunInProgress))).unwrap_err();
        assert_eq!(e.code(), ErrorCode::RunInProgress);
        assert_eq!(e.to_string(), EngineError::RunInProgress.to_string());
        let e = unanswer(answer(Err(EngineError::Quota {
            quota: "max_concurrent_runs",
            limit: 1,
            retry_after: Duration::from_secs(3),
        })))
        .unwrap_err();
        assert_eq!(e.code(), ErrorCode::QuotaExceeded);
        assert_eq!(e.details()["quota"], "max_concurrent_runs");
        assert_eq!(e.retry_after_secs(), Some(3));
        let moved = unanswer(answer(Err(EngineError::SessionOwnedElsewhere {
            owner: "b".into(),
            retry_after: Duration::from_secs(2),
        })))
        .unwrap_err();
        assert_eq!(moved_to(&moved).as_deref(), Some("b"));
        // An internal fault's cause stays with the owner.
        let e = unanswer(answer(Err(EngineError::Internal("secret".into())))).unwrap_err();
        assert_eq!(e.code(), ErrorCode::InternalError);
        assert!(!e.to_string().contains("secret"));
    }

    #[test]
    fn commands_round_trip() {
        let cmd = Command::Decide {
            caller: Caller {
                tenant: TenantId::new(),
                user: UserId::new(),
                role: Role::Member,
                custom_role: Some(agentry_schema::roles::RoleName::parse("analyst").unwrap()),
            },
            session: SessionId::new(),
            request: ApprovalId::new(),
            decision: Decision::Approve { message: None },
        };
        let v = serde_json::to_value(&cmd).unwrap();
        assert_eq!(v["op"], "decide");
        let back: Command = serde_json::from_value(v).unwrap();
        assert!(matches!(back, Command::Decide { .. }));
    }
}
