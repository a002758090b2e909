//! A2A push notifications (docs/a2a.md, "Push notifications"): the config methods
//! (`CreateTaskPushNotificationConfig`, `GetTaskPushNotificationConfig`,
//! `ListTaskPushNotificationConfigs`, `DeleteTaskPushNotificationConfig`, and
//! `configuration.taskPushNotificationConfig` of `SendMessage`), and the watcher that turns a
//! task's state changes into notifications.
//!
//! A config is the caller's task's (anyone else's task is TaskNotFound), stored per tenant and
//! task with its token and credentials sealed; they are never answered back. A watcher follows
//! the task's run like `SubscribeToTask` does ([`agentry_actors::Engine::follow_run`]: the
//! session actor hands events to its subscribers without waiting), folds its events into
//! `statusUpdate`s and queues one notification per config into the webhook outbox
//! ([`crate::webhooks`]), which signs, sends, retries and keeps them. The run never waits for a
//! receiver.

use agentry_schema::ids::{RunId, SessionId};
use agentry_store::a2a_push::{self, NewPushConfig, PushConfig};
use agentry_store::{TenantScope, events};
use futures::StreamExt;
use serde_json::{Value, json};

use super::task::{TaskFold, TaskIds};
use super::{Agent, RpcError, RpcResult, str_param};
use crate::state::AppState;
use crate::webhooks::Outgoing;

/// The header the config's `token` goes in (the one `a2a-sdk`'s own push sender uses).
pub const TOKEN_HEADER: &str = "X-A2A-Notification-Token";
/// The content type of a notification (the spec's).
const CONTENT_TYPE: &str = "application/a2a+json";
/// The outbox `source` of A2A push notifications.
const SOURCE: &str = "a2a_push";
/// Configs per task, at most (and per `ListTaskPushNotificationConfigs` page).
const MAX_CONFIGS: u64 = 100;
/// The longest config id a client may choose.
const MAX_ID: usize = 128;

/// A config as a client sent it, checked.
pub(super) struct Wanted {
    id: Option<String>,
    url: String,
    token: Option<String>,
    auth: Option<(String, Option<String>)>,
}

/// Whether `s` may be sent as an HTTP header value (no control characters: no header
/// injection).
fn header_safe(s: &str) -> bool {
    !s.chars().any(|c| c.is_control())
}

/// An HTTP authentication scheme: an RFC 9110 token.
fn scheme_ok(s: &str) -> bool {
    !s.is_empty()
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || "!#$%&'*+-.^_`|~".contains(c))
}

/// Read a `TaskPushNotificationConfig` (`at` names it in errors: `params` or
/// `configuration.taskPushNotificationConfig`).
pub(super) fn parse_config(c: &serde_json::Map<String, Value>, at: &str) -> RpcResult<Wanted> {
    let field = |name: &str| {
        if at.is_empty() {
            name.to_string()
        } else {
            format!("{at}.{name}")
        }
    };
    let url = str_param(c, "url")?
        .ok_or_else(|| {
            RpcError::invalid_params(
                &field("url"),
                format!(
                    "`{}` (where to POST the notifications) is required",
                    field("url")
                ),
            )
        })?
        .to_string();
    let id = str_param(c, "id")?.map(str::to_string);
    if let Some(id) = &id
        && (id.len() > MAX_ID || !header_safe(id))
    {
        return Err(RpcError::invalid_params(
            &field("id"),
            format!(
                "`{}` must be at most {MAX_ID} printable characters",
                field("id")
            ),
        ));
    }
    let token = str_param(c, "token")?.map(str::to_string);
    if token.as_deref().is_some_and(|t| !header_safe(t)) {
        return Err(RpcError::invalid_params(
            &field("token"),
            "the token must be printable (it is sent as a header)",
        ));
    }
    let auth = match c.get("authentication") {
        None | Some(Value::Null) => None,
        Some(Value::Object(a)) => {
            let scheme = str_param(a, "scheme")?.unwrap_or_default();
            if !scheme_ok(scheme) {
                return Err(RpcError::invalid_params(
                    &field("authentication.scheme"),
                    "`authentication.scheme` must be an HTTP authentication scheme (`Bearer`, \
                     `Basic`, …)",
                ));
            }
            let credentials = str_param(a, "credentials")?.map(str::to_string);
            if credentials.as_deref().is_some_and(|t| !header_safe(t)) {
                return Err(RpcError::invalid_params(
                    &field("authentication.credentials"),
                    "the credentials must be printable (they are sent as a header)",
                ));
            }
            Some((scheme.to_string(), credentials))
        }
        Some(_) => {
            return Err(RpcError::invalid_params(
                &field("authentication"),
                "`authentication` must be an object {scheme, credentials}",
            ));
        }
    };
    Ok(Wanted {
        id,
        url,
        token,
        auth,
    })
}

/// A stored config as the methods answer it: never its token or credentials.
fn view(agent: &Agent, c: &PushConfig) -> Value {
    let mut v = json!({
        "tenant": agent.tenant.to_string(),
        "id": c.id,
        "taskId": c.task_id.to_string(),
        "url": c.url,
    });
    if let Some(scheme) = &c.auth_scheme {
        v["authentication"] = json!({"scheme": scheme});
    }
    v
}

fn config_not_found(task: &str, id: &str) -> RpcError {
    let mut e = RpcError::a2a(
        -32001,
        "TASK_NOT_FOUND",
        format!("task {task:?} has no push notification config {id:?}"),
    );
    e.metadata.insert("taskId".into(), json!(task));
    e.metadata.insert("configId".into(), json!(id));
    e
}

/// A task's standing as a notification: a `statusUpdate` with its current status.
fn standing(fold: &TaskFold) -> Value {
    json!({"statusUpdate": {
        "taskId": fold.ids.task,
        "contextId": fold.ids.context,
        "status": fold.current_status(),
    }})
}

/// Queue `update` for every config of `task` (those stored when it happens: a deleted config
/// gets no more). Errors are logged: a notification lost to a database error never fails the
/// task.
async fn notify(state: &AppState, scope: &TenantScope, task: RunId, update: &Value) {
    let configs = match a2a_push::list(&state.db, scope, task, None, MAX_CONFIGS).await {
        Ok(c) => c,
        Err(e) => {
            tracing::warn!(error = %e, task_id = %task, "reading a task's push configs failed");
            return;
        }
    };
    for c in &configs {
        if let Err(e) = notify_one(state, scope, c, update).await {
            tracing::warn!(error = %e.message, task_id = %task, config = %c.id,
                "queueing a push notification failed");
        }
    }
}

async fn notify_one(
    state: &AppState,
    scope: &TenantScope,
    c: &PushConfig,
    update: &Value,
) -> crate::error::ApiResult<()> {
    let hooks = &state.webhooks;
    let mut headers = vec![("content-type".to_string(), CONTENT_TYPE.to_string())];
    if let Some(t) = &c.token_sealed {
        headers.push((TOKEN_HEADER.to_string(), hooks.open(t)?));
    }
    if let Some(scheme) = &c.auth_scheme
        && let Some(cred) = &c.credentials_sealed
    {
        headers.push((
            "authorization".to_string(),
            format!("{scheme} {}", hooks.open(cred)?),
        ));
    }
    let stream = format!("a2a:{}:{}", c.task_id, c.id);
    hooks
        .enqueue(
            scope,
            Outgoing {
                stream: &stream,
                source: SOURCE,
                url: &c.url,
                headers,
                body: &update.to_string(),
            },
        )
        .await
}

impl Agent {
    /// Check a wanted config's URL and seal its secrets, before anything is stored or run.
    pub(super) async fn check_config(&self, w: &Wanted, at: &str) -> RpcResult<Sealed> {
        let field = if at.is_empty() {
            "url".to_string()
        } else {
            format!("{at}.url")
        };
        let hooks = &self.state.webhooks;
        hooks.check_url(&field, &w.url).await?;
        // The tenant's signing secret exists before the first notification is queued (and a
        // server without an encryption key refuses here, before a task starts).
        hooks.tenant_secret(&self.caller.scope()).await?;
        Ok(Sealed {
            token: w.token.as_deref().map(|t| hooks.seal(t)).transpose()?,
            credentials: match &w.auth {
                Some((_, Some(c))) => Some(hooks.seal(c)?),
                _ => None,
            },
        })
    }

    /// Store `w` for the task and start notifying: its standing at once, then each change.
    /// `fold` is the task as read so far, `after` the session seq to follow it from.
    pub(super) async fn attach(
        &self,
        task: RunId,
        session: SessionId,
        fold: TaskFold,
        after: u64,
        w: &Wanted,
        sealed: Sealed,
    ) -> RpcResult<Value> {
        let scope = self.caller.scope();
        let id =
            w.id.clone()
                .unwrap_or_else(|| uuid::Uuid::now_v7().to_string());
        let existing = a2a_push::list(&self.state.db, &scope, task, None, MAX_CONFIGS).await?;
        if existing.len() as u64 >= MAX_CONFIGS && !existing.iter().any(|c| c.id == id) {
            return Err(RpcError::invalid_params(
                "id",
                format!("a task has at most {MAX_CONFIGS} push notification configs"),
            ));
        }
        let stored = a2a_push::put(
            &self.state.db,
            &scope,
            NewPushConfig {
                task_id: task,
                id: &id,
                user_id: self.caller.user_id(),
                url: &w.url,
                token_sealed: sealed.token,
                auth_scheme: w.auth.as_ref().map(|(s, _)| s.clone()),
                credentials_sealed: sealed.credentials,
            },
        )
        .await?;
        notify_one(&self.state, &scope, &stored, &standing(&fold)).await?;
        if !fold.ended() {
            self.watch(task, session, fold, after).await?;
        }
        Ok(view(self, &stored))
    }

    /// Follow the task and queue a notification for each of its state changes, until it ends
    /// (one watcher per task in this process).
    async fn watch(
        &self,
        task: RunId,
        session: SessionId,
        mut fold: TaskFold,
        after: u64,
    ) -> RpcResult<()> {
        let watchers = self.state.push_watchers.clone();
        if !watchers.start(task) {
            return Ok(());
        }
        let mut run = match self.follow(session, task, after).await {
            Ok(r) => r,
            Err(e) => {
                watchers.stop(task);
                return Err(e);
            }
        };
        let state = self.state.clone();
        let scope = self.caller.scope();
        actix_web::rt::spawn(async move {
            while !fold.ended() {
                let updates = match run.next().await {
                    Some(ev) => fold.take(&ev.event),
                    None => fold.lose(),
                };
                for u in updates.iter().filter(|u| u.get("statusUpdate").is_some()) {
                    notify(&state, &scope, task, u).await;
                }
            }
            watchers.stop(task);
        });
        Ok(())
    }

    /// The caller's task `raw`, its fold and where to follow it from.
    async fn task_for_push(&self, raw: &str) -> RpcResult<(RunId, SessionId, TaskFold, u64)> {
        let found = self.find(raw).await?;
        let after = match found.fold.seen {
            Some(s) => s,
            None => events::first_seq_of_run(&self.state.db, &self.caller.scope(), found.run.id)
                .await?
                .map(|f| f.saturating_sub(1))
                .unwrap_or(0),
        };
        Ok((found.run.id, found.run.session_id, found.fold, after))
    }

    pub(super) async fn create_push_config(
        &self,
        params: &serde_json::Map<String, Value>,
    ) -> RpcResult<Value> {
        let raw = task_id_param(params)?;
        let w = parse_config(params, "")?;
        let (task, session, fold, after) = self.task_for_push(raw).await?;
        let sealed = self.check_config(&w, "").await?;
        self.attach(task, session, fold, after, &w, sealed).await
    }

    /// The config a request names (`taskId`, `id`), on the caller's own task: the task's id as
    /// sent, the task, the config's id.
    async fn named_config<'p>(
        &self,
        params: &'p serde_json::Map<String, Value>,
    ) -> RpcResult<(&'p str, RunId, &'p str)> {
        let raw = task_id_param(params)?;
        let id = str_param(params, "id")?.ok_or_else(|| {
            RpcError::invalid_params("id", "`id` (the push notification config's id) is required")
        })?;
        let task = self.own_run(raw).await?.id;
        Ok((raw, task, id))
    }

    pub(super) async fn get_push_config(
        &self,
        params: &serde_json::Map<String, Value>,
    ) -> RpcResult<Value> {
        let (raw, task, id) = self.named_config(params).await?;
        let c = a2a_push::get(&self.state.db, &self.caller.scope(), task, id)
            .await?
            .ok_or_else(|| config_not_found(raw, id))?;
        Ok(view(self, &c))
    }

    pub(super) async fn list_push_configs(
        &self,
        params: &serde_json::Map<String, Value>,
    ) -> RpcResult<Value> {
        let raw = task_id_param(params)?;
        let size = match super::int_param(params, "pageSize")? {
            None | Some(0) => MAX_CONFIGS,
            Some(n) if (1..=MAX_CONFIGS as i64).contains(&n) => n as u64,
            Some(_) => {
                return Err(RpcError::invalid_params(
                    "pageSize",
                    format!("`pageSize` must be 1 to {MAX_CONFIGS}"),
                ));
            }
        };
        let after = str_param(params, "pageToken")?;
        let task = self.own_run(raw).await?.id;
        let mut configs =
            a2a_push::list(&self.state.db, &self.caller.scope(), task, after, size + 1).await?;
        let more = configs.len() as u64 > size;
        configs.truncate(size as usize);
        let next = match configs.last() {
            Some(last) if more => last.id.clone(),
            _ => String::new(),
        };
        Ok(json!({
            "configs": configs.iter().map(|c| view(self, c)).collect::<Vec<_>>(),
            "nextPageToken": next,
        }))
    }

    /// Idempotent, as the spec asks: deleting a config that is not there (any more) is fine —
    /// on the caller's own task; another's is TaskNotFound.
    pub(super) async fn delete_push_config(
        &self,
        params: &serde_json::Map<String, Value>,
    ) -> RpcResult<Value> {
        let (_, task, id) = self.named_config(params).await?;
        a2a_push::delete(&self.state.db, &self.caller.scope(), task, id).await?;
        Ok(json!({}))
    }
}

/// A config's sealed secrets.
pub(super) struct Sealed {
    token: Option<String>,
    credentials: Option<String>,
}

fn task_id_param(params: &serde_json::Map<String, Value>) -> RpcResult<&str> {
    str_param(params, "taskId")?
        .ok_or_else(|| RpcError::invalid_params("taskId", "`taskId` (the task's id) is required"))
}

/// The ids of a task that just started, for its first fold.
pub(super) fn fresh_fold(task: RunId, session: SessionId, queued: bool) -> TaskFold {
    TaskFold::new(
        TaskIds {
            task: task.to_string(),
            context: session.to_string(),
        },
        queued,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn configs_are_checked_before_anything_is_stored() {
        let ok = |v: Value| parse_config(v.as_object().unwrap(), "").is_ok();
        assert!(ok(json!({"url": "http://example.com/h"})));
        assert!(ok(
            json!({"url": "http://x/h", "token": "t", "authentication": {"scheme": "Bearer", "credentials": "c"}})
        ));
        assert!(!ok(json!({"token": "t"})), "no url");
        assert!(!ok(json!({"url": "http://x/h", "token": "a\r\nX-Evil: 1"})));
        assert!(!ok(
            json!({"url": "http://x/h", "authentication": {"scheme": "Bearer x"}})
        ));
        assert!(!ok(
            json!({"url": "http://x/h", "authentication": {"scheme": "Bearer", "credentials": "a\nb"}})
        ));
        assert!(!ok(json!({"url": "http://x/h", "id": "x".repeat(129)})));
        assert!(!ok(
            json!({"url": "http://x/h", "authentication": "Bearer"})
        ));
    }
}
