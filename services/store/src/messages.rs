//! Messages of a session's conversation, in the order they were saved.

use chrono::{DateTime, Utc};
use sea_orm::{
    ActiveModelTrait, ColumnTrait, ConnectionTrait, EntityTrait, PaginatorTrait, QueryFilter,
    QueryOrder, QuerySelect, Set,
};
use serde_json::Value;

use agentry_schema::entities::message;
use agentry_schema::ids::{RunId, SessionId};

use crate::{
    PageRequest, Result, StoreError, TenantScope, corrupt, now, sanitize_json, sanitize_text,
};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MessageRole {
    User,
    Assistant,
    Tool,
    System,
}

impl MessageRole {
    pub fn as_str(self) -> &'static str {
        match self {
            MessageRole::User => "user",
            MessageRole::Assistant => "assistant",
            MessageRole::Tool => "tool",
            MessageRole::System => "system",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "user" => MessageRole::User,
            "assistant" => MessageRole::Assistant,
            "tool" => MessageRole::Tool,
            "system" => MessageRole::System,
            _ => return None,
        })
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct Message {
    pub id: i64,
    pub session_id: SessionId,
    pub run_id: Option<RunId>,
    pub role: MessageRole,
    pub content: String,
    /// For assistant messages: the tool calls `[{id, name, arguments}]`.
    pub tool_calls: Option<Value>,
    /// For tool messages: the call this is the result of.
    pub tool_call_id: Option<String>,
    pub created_at: DateTime<Utc>,
}

impl TryFrom<message::Model> for Message {
    type Error = StoreError;
    fn try_from(m: message::Model) -> Result<Self> {
        Ok(Message {
            id: m.id,
            session_id: m.session_id.into(),
            run_id: m.run_id.map(RunId::from),
            role: MessageRole::parse(&m.role).ok_or_else(|| corrupt("message.role", &m.role))?,
            content: m.content,
            tool_calls: m.tool_calls,
            tool_call_id: m.tool_call_id,
            created_at: m.created_at,
        })
    }
}

#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct NewMessage {
    pub run_id: Option<RunId>,
    pub role: MessageRole,
    pub content: String,
    pub tool_calls: Option<Value>,
    pub tool_call_id: Option<String>,
}

impl NewMessage {
    pub fn user(content: impl Into<String>, run_id: Option<RunId>) -> Self {
        Self {
            run_id,
            role: MessageRole::User,
            content: content.into(),
            tool_calls: None,
            tool_call_id: None,
        }
    }
}

pub async fn save(
    db: &impl ConnectionTrait,
    scope: &TenantScope,
    session_id: SessionId,
    new: NewMessage,
) -> Result<Message> {
    new_row(scope, session_id, new, now())
        .insert(db)
        .await?
        .try_into()
}

pub(crate) fn new_row(
    scope: &TenantScope,
    session_id: SessionId,
    new: NewMessage,
    ts: chrono::DateTime<chrono::Utc>,
) -> message::ActiveModel {
    message::ActiveModel {
        tenant_id: Set(scope.uuid()),
        session_id: Set(session_id.0),
        run_id: Set(new.run_id.map(|r| r.0)),
        role: Set(new.role.as_str().to_string()),
        content: Set(sanitize_text(new.content)),
        tool_calls: Set(new.tool_calls.map(sanitize_json)),
        tool_call_id: Set(new.tool_call_id.map(sanitize_text)),
        created_at: Set(ts),
        ..Default::default()
    }
}

/// Store messages in order, in one statement (their ids ascend in that order).
pub async fn save_many(
    db: &impl ConnectionTrait,
    scope: &TenantScope,
    session_id: SessionId,
    new: Vec<NewMessage>,
) -> Result<()> {
    if new.is_empty() {
        return Ok(());
    }
    db.execute(&insert_many_query(scope, session_id, new))
        .await?;
    Ok(())
}

/// [`save_many`]'s statement (`new` not empty), for a caller that sends it inside a bigger
/// one (`crate::run_writes`).
pub(crate) fn insert_many_query(
    scope: &TenantScope,
    session_id: SessionId,
    new: Vec<NewMessage>,
) -> sea_orm::sea_query::InsertStatement {
    use sea_orm::QueryTrait;
    let ts = now();
    message::Entity::insert_many(new.into_iter().map(|m| new_row(scope, session_id, m, ts)))
        .into_query()
}

/// The session's own conversation: no message of a `task` child run. A child run talks to the
/// model in a context of its own (its messages are stored with its run id); its parent's
/// history, and the next run's, must not hold them — the parent's `task` call and its result
/// stand for the whole sub-task.
///
/// On SQLite a correlated `NOT EXISTS` on the run's primary key: one index probe per message
/// looked at (the window's few dozen), where the `NOT IN` over the session's child runs read
/// all of the session's runs on every history read (0.4-0.9 ms per run after a few hundred
/// runs, the largest SQLite cost of a run). PostgreSQL planned the `NOT EXISTS` as a bitmap
/// scan of every message of the session, sorted (3 ms at 600 messages, growing with the
/// session), so PostgreSQL and MySQL keep the `NOT IN`, whose plan walks the session's index
/// backwards and stops at the window.
fn not_of_child_runs(
    backend: sea_orm::DatabaseBackend,
    session_id: SessionId,
) -> sea_orm::Condition {
    use agentry_schema::entities::execution;
    use sea_orm::sea_query::{Expr, ExprTrait, Query};
    if backend != sea_orm::DatabaseBackend::Sqlite {
        let children = Query::select()
            .column(execution::Column::Id)
            .from(execution::Entity)
            .and_where(
                Expr::col((execution::Entity, execution::Column::SessionId)).eq(session_id.0),
            )
            .and_where(
                Expr::col((execution::Entity, execution::Column::ParentExecutionId)).is_not_null(),
            )
            .to_owned();
        return sea_orm::Condition::any()
            .add(message::Column::RunId.is_null())
            .add(message::Column::RunId.not_in_subquery(children));
    }
    let child = Query::select()
        .expr(Expr::val(1))
        .from(execution::Entity)
        .and_where(
            Expr::col((execution::Entity, execution::Column::Id))
                .equals((message::Entity, message::Column::RunId)),
        )
        .and_where(
            Expr::col((execution::Entity, execution::Column::ParentExecutionId)).is_not_null(),
        )
        .to_owned();
    sea_orm::Condition::all().add(Expr::exists(child).not())
}

/// The messages of one run, oldest first: a `task` child run's whole context.
pub async fn of_run(
    db: &impl ConnectionTrait,
    scope: &TenantScope,
    session_id: SessionId,
    run_id: RunId,
) -> Result<Vec<Message>> {
    message::Entity::find()
        .filter(message::Column::TenantId.eq(scope.uuid()))
        .filter(message::Column::SessionId.eq(session_id.0))
        .filter(message::Column::RunId.eq(run_id.0))
        .order_by_asc(message::Column::Id)
        .all(db)
        .await?
        .into_iter()
        .map(Message::try_from)
        .collect()
}

/// A page of the conversation, oldest first (without the messages of `task` child runs).
pub async fn list(
    db: &impl ConnectionTrait,
    scope: &TenantScope,
    session_id: SessionId,
    page: PageRequest,
) -> Result<Vec<Message>> {
    message::Entity::find()
        .filter(message::Column::TenantId.eq(scope.uuid()))
        .filter(message::Column::SessionId.eq(session_id.0))
        .filter(not_of_child_runs(db.get_database_backend(), session_id))
        .order_by_asc(message::Column::Id)
        .limit(page.limit)
        .offset(page.offset)
        .all(db)
        .await?
        .into_iter()
        .map(Message::try_from)
        .collect()
}

/// The last `n` messages, oldest first (the model's history window; without the messages of
/// `task` child runs).
pub async fn last_n(
    db: &impl ConnectionTrait,
    scope: &TenantScope,
    session_id: SessionId,
    n: u64,
) -> Result<Vec<Message>> {
    last_n_after(db, scope, session_id, 0, n).await
}

/// [`last_n`] among the messages with an `id` above `after`: what a session that already holds
/// its window up to `after` reads to bring it up to date.
pub async fn last_n_after(
    db: &impl ConnectionTrait,
    scope: &TenantScope,
    session_id: SessionId,
    after: i64,
    n: u64,
) -> Result<Vec<Message>> {
    let mut rows: Vec<Message> =
        last_n_after_select(db.get_database_backend(), scope, session_id, after, n)
            .all(db)
            .await?
            .into_iter()
            .map(Message::try_from)
            .collect::<Result<_>>()?;
    rows.reverse();
    Ok(rows)
}

/// [`last_n_after`]'s query, newest first.
pub(crate) fn last_n_after_select(
    backend: sea_orm::DatabaseBackend,
    scope: &TenantScope,
    session_id: SessionId,
    after: i64,
    n: u64,
) -> sea_orm::Select<message::Entity> {
    message::Entity::find()
        .filter(message::Column::TenantId.eq(scope.uuid()))
        .filter(message::Column::SessionId.eq(session_id.0))
        .filter(message::Column::Id.gt(after))
        .filter(not_of_child_runs(backend, session_id))
        .order_by_desc(message::Column::Id)
        .limit(n)
}

pub async fn count(
    db: &impl ConnectionTrait,
    scope: &TenantScope,
    session_id: SessionId,
) -> Result<u64> {
    Ok(message::Entity::find()
        .filter(message::Column::TenantId.eq(scope.uuid()))
        .filter(message::Column::SessionId.eq(session_id.0))
        .filter(not_of_child_runs(db.get_database_backend(), session_id))
        .count(db)
        .await?)
}

pub async fn delete_all(
    db: &impl ConnectionTrait,
    scope: &TenantScope,
    session_id: SessionId,
) -> Result<u64> {
    Ok(message::Entity::delete_many()
        .filter(message::Column::TenantId.eq(scope.uuid()))
        .filter(message::Column::SessionId.eq(session_id.0))
        .exec(db)
        .await?
        .rows_affected)
}
