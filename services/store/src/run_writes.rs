//! A run's durable points as few statements as the backend allows.
//!
//! A run's start, each of its steps and its end are one writer job each (see
//! `actors/src/agent/recorder.rs`); each job is several statements: the session's row (state,
//! event numbers, the fencing token), the run's row, messages, audit rows, and at the start the
//! model's history. On SQLite a statement is a function call on the writer's thread. On
//! PostgreSQL each one is a round trip to another process: the writer's thread and a backend
//! wake up, hand a message over loopback and go back to sleep, and both sides pay a statement's
//! set-up. Issue 24 measured 14 statements and 29 context switches per one-tool run there, and
//! PostgreSQL's own CPU as mostly per statement and per round trip, not per row.
//!
//! So on PostgreSQL a job's statements go as **one** statement: data-modifying `WITH` clauses,
//! one per write, and a final `SELECT` that says whether the session's row was matched and
//! returns what the job reads back (the history, with the message just inserted). PostgreSQL
//! runs every data-modifying clause of a statement exactly once, against the snapshot the
//! statement started with, so the clauses see nothing of each other's rows: the final `SELECT`
//! takes the new message from the insert's `RETURNING`, and the older messages from the
//! table. The statements are built by the same builders as the separate ones (the rows and
//! conditions cannot drift apart), and the outcome is the same: if the session's row was not
//! matched (a deleted session, a stale fencing token) the job fails with the same error and the
//! writer's transaction, with all of the statement's writes, is rolled back.
//!
//! SQLite and MySQL keep the statements one by one (MySQL has no data-modifying `WITH`).

use sea_orm::sea_query::{
    Alias, CommonTableExpression, Expr, InsertStatement, Query, SelectStatement, UnionType,
    WithClause,
};
use sea_orm::{
    ActiveModelTrait, ConnectionTrait, DatabaseBackend, EntityName, EntityTrait, FromQueryResult,
    IdenStatic, Iterable, QueryTrait,
};

use agentry_schema::entities::{execution, message, session, tool_call_log};
use agentry_schema::events::TokenUsage;
use agentry_schema::ids::{RunId, SessionId};

use crate::approvals::{self, ApprovalDecision};
use crate::executions::{self, ExecutionStatus, NewExecution, RunEnd};
use crate::messages::{self, Message, NewMessage};
use crate::sessions::{self, SessionState};
use crate::tool_calls::{self, NewToolCallLog};
use crate::{Result, StoreError, TenantScope, now};

/// A new run's start: the session running with its event numbers reserved up to
/// `reserve_upto` (under the fencing token `fence` in cluster mode), the run's row, the user's
/// message, and with `history = Some((after, n))` the session's last `n` messages above the id
/// `after`, oldest first, the new message last.
pub async fn start_fresh(
    txn: &impl ConnectionTrait,
    scope: &TenantScope,
    session_id: SessionId,
    reserve_upto: u64,
    fence: Option<i64>,
    new: NewExecution,
    history: Option<(i64, u64)>,
) -> Result<Option<Vec<Message>>> {
    let backend = txn.get_database_backend();
    let run_id = new.id;
    let message = NewMessage::user(new.input.clone(), Some(run_id));
    if backend != DatabaseBackend::Postgres {
        sessions::touch_fenced(
            txn,
            scope,
            session_id,
            SessionState::Running,
            Some(reserve_upto),
            fence,
        )
        .await?;
        executions::insert(txn, scope, new).await?;
        messages::save_many(txn, scope, session_id, vec![message]).await?;
        return match history {
            Some((after, n)) => Ok(Some(
                messages::last_n_after(txn, scope, session_id, after, n).await?,
            )),
            None => Ok(None),
        };
    }
    let mut touch = sessions::update_row_query(
        backend,
        scope,
        session_id,
        Some(SessionState::Running),
        Some(reserve_upto),
        fence,
    );
    touch.returning(Query::returning().column(session::Column::Id));
    let mut inserted = messages::insert_many_query(scope, session_id, vec![message]);
    inserted.returning(Query::returning().columns(message::Column::iter()));
    let with = WithClause::new()
        .cte(cte("s", touch))
        .cte(cte("e", executions::insert_query(scope, new)))
        .cte(cte("m", inserted))
        .to_owned();
    // The new message, and whether the session's row was matched (on every row).
    let mut select = rows_of("m");
    if let Some((after, n)) = history
        && n > 1
    {
        // The older messages: the window's `n - 1` newest above `after` (the new one is
        // newer than all of them).
        let older =
            messages::last_n_after_select(backend, scope, session_id, after, n - 1).into_query();
        let mut from_older = Query::select();
        from_older
            .columns(message::Column::iter().map(|c| (Alias::new("h"), c)))
            .expr_as(touched(), Alias::new("touched"))
            .from_subquery(older, Alias::new("h"));
        select.union(UnionType::All, from_older);
    }
    let rows = txn.query_all(&select.with(with)).await?;
    let mut out = Vec::with_capacity(rows.len());
    let mut matched = false;
    for row in rows {
        matched = row.try_get::<i64>("", "touched")? > 0;
        out.push(Message::try_from(message::Model::from_query_result(
            &row, "",
        )?)?);
    }
    if !matched {
        return Err(sessions::untouched(txn, scope, session_id, fence).await);
    }
    out.sort_by_key(|m| m.id);
    Ok(history.map(|(_, n)| {
        let skip = out
            .len()
            .saturating_sub(usize::try_from(n).unwrap_or(usize::MAX));
        out.split_off(skip)
    }))
}

fn cte(
    name: &str,
    query: impl Into<sea_orm::sea_query::SubQueryStatement>,
) -> CommonTableExpression {
    CommonTableExpression::new()
        .query(query)
        .table_name(Alias::new(name))
        .to_owned()
}

/// `SELECT <message columns>, <touched> FROM <table>`.
fn rows_of(table: &str) -> SelectStatement {
    Query::select()
        .columns(message::Column::iter().map(|c| (Alias::new(table), c)))
        .expr_as(touched(), Alias::new("touched"))
        .from(Alias::new(table))
        .to_owned()
}

/// How many session rows the statement's `s` clause matched (0 or 1).
fn touched() -> Expr {
    count_of("s")
}

/// A step's rows (see `RunRecorder::commit_step`): the session's state when it changes (and the
/// fencing token's check in cluster mode), the step's messages and audit rows, and the run's
/// row when its status changes. The checkpoint is the caller's.
pub struct StepWrite {
    pub session_id: SessionId,
    pub run_id: RunId,
    /// The run's and the session's new status, if it changes.
    pub status: Option<(ExecutionStatus, SessionState)>,
    pub fence: Option<i64>,
    /// Decisions on the run's approvals (written after the session's row is checked).
    pub decisions: Vec<ApprovalDecision>,
    pub messages: Vec<NewMessage>,
    pub tool_calls: Vec<NewToolCallLog>,
    pub steps: u32,
    pub usage: TokenUsage,
}

/// Write a step's rows ([`StepWrite`]): in one statement on PostgreSQL.
pub async fn step(txn: &impl ConnectionTrait, scope: &TenantScope, w: StepWrite) -> Result<()> {
    let backend = txn.get_database_backend();
    // A step with decisions (rare: a person answered) keeps its statements one by one, so that
    // the session's row is locked before the approvals' rows, as every other writer locks them.
    if backend != DatabaseBackend::Postgres || !w.decisions.is_empty() {
        match w.status {
            Some((_, sess)) => {
                sessions::touch_fenced(txn, scope, w.session_id, sess, None, w.fence).await?
            }
            None => {
                if let Some(token) = w.fence {
                    sessions::fence(txn, scope, w.session_id, token).await?;
                }
            }
        }
        for d in &w.decisions {
            approvals::record(txn, scope, d).await?;
        }
        messages::save_many(txn, scope, w.session_id, w.messages).await?;
        tool_calls::insert_many(txn, scope, w.tool_calls).await?;
        if let Some((exec, _)) = w.status {
            executions::update(txn, scope, w.run_id, exec, w.steps, w.usage, None).await?;
        }
        return Ok(());
    }
    let checks_session = w.status.is_some() || w.fence.is_some();
    if !checks_session && w.messages.is_empty() && w.tool_calls.is_empty() {
        // Only the caller's checkpoint (deferred to the transaction's end).
        return Ok(());
    }
    let mut with = WithClause::new();
    let mut select = Query::select();
    if checks_session {
        let mut touch = sessions::update_row_query(
            backend,
            scope,
            w.session_id,
            w.status.map(|(_, s)| s),
            None,
            w.fence,
        );
        touch.returning(Query::returning().column(session::Column::Id));
        with.cte(cte("s", touch));
        select.expr_as(touched(), Alias::new("touched"));
    } else {
        select.expr_as(Expr::val(1i64), Alias::new("touched"));
    }
    if !w.messages.is_empty() {
        with.cte(cte(
            "m",
            messages::insert_many_query(scope, w.session_id, w.messages),
        ));
    }
    if !w.tool_calls.is_empty() {
        with.cte(cte("t", tool_calls::insert_many_query(scope, w.tool_calls)));
    }
    if let Some((exec, _)) = w.status {
        let mut update =
            executions::update_query(backend, scope, w.run_id, exec, w.steps, w.usage, None);
        update.returning(Query::returning().column(execution::Column::Id));
        with.cte(cte("x", update));
        select.expr_as(count_of("x"), Alias::new("updated"));
    } else {
        select.expr_as(Expr::val(1i64), Alias::new("updated"));
    }
    let row = txn.query_one(&select.with(with)).await?.ok_or_else(|| {
        StoreError::Db(sea_orm::DbErr::Custom(
            "a step's write returned no row".into(),
        ))
    })?;
    if row.try_get::<i64>("", "touched")? == 0 {
        return Err(sessions::untouched(txn, scope, w.session_id, w.fence).await);
    }
    if row.try_get::<i64>("", "updated")? == 0 {
        return Err(StoreError::NotFound(format!("execution {}", w.run_id)));
    }
    Ok(())
}

/// [`executions::record_end_in`]'s session, run, message and audit rows on PostgreSQL, in one
/// statement: the session idle (or, for a `task` child, only its event numbers raised) under the
/// fencing token, the run's final status unless it has one, and the last step's messages and
/// audit rows only if that status was written (an end written again adds nothing twice).
/// Returns whether the session's row was matched.
pub(crate) async fn end_rows_pg(
    txn: &impl ConnectionTrait,
    scope: &TenantScope,
    end: &RunEnd,
) -> Result<bool> {
    let backend = DatabaseBackend::Postgres;
    let last_seq = end.events.iter().map(|e| e.seq).max().unwrap_or(0);
    let state = (!end.child).then_some(SessionState::Idle);
    let mut touch = sessions::update_row_query(
        backend,
        scope,
        end.session_id,
        state,
        Some(last_seq),
        end.fence,
    );
    touch.returning(Query::returning().column(session::Column::Id));
    let mut ended = executions::end_query(backend, scope, end);
    ended.returning(Query::returning().column(execution::Column::Id));
    let mut with = WithClause::new();
    with.cte(cte("s", touch)).cte(cte("x", ended));
    let ts = now();
    let messages = end
        .messages
        .iter()
        .cloned()
        .map(|m| messages::new_row(scope, end.session_id, m, ts))
        .collect();
    if let Some(insert) = insert_each_from::<message::ActiveModel>(messages, "x")? {
        with.cte(cte("m", insert));
    }
    let calls = end
        .tool_calls
        .iter()
        .cloned()
        .map(|c| tool_calls::new_row(scope, c, ts))
        .collect();
    if let Some(insert) = insert_each_from::<tool_call_log::ActiveModel>(calls, "x")? {
        with.cte(cte("t", insert));
    }
    let select = Query::select()
        .expr_as(touched(), Alias::new("touched"))
        .to_owned();
    let touched = match txn.query_one(&select.with(with)).await? {
        Some(row) => row.try_get::<i64>("", "touched")?,
        None => 0,
    };
    Ok(touched > 0)
}

/// `INSERT INTO <rows' table> (<their set columns>) SELECT <row 1> FROM <from> UNION ALL …`:
/// the rows, in order, once for each row of `from` (a clause of the statement that returns
/// one row or none). `None` for no rows.
fn insert_each_from<A: ActiveModelTrait>(
    rows: Vec<A>,
    from: &str,
) -> Result<Option<InsertStatement>> {
    let Some(first) = rows.first() else {
        return Ok(None);
    };
    let columns: Vec<_> = <A::Entity as EntityTrait>::Column::iter()
        .filter(|c| first.get(*c).is_set())
        .collect();
    let mut select: Option<SelectStatement> = None;
    for row in rows {
        let mut one = Query::select();
        for c in &columns {
            match row.get(*c).into_value() {
                Some(v) => one.expr(Expr::val(v)),
                None => {
                    return Err(StoreError::Invalid(format!(
                        "a row of {} leaves {} unset",
                        <A::Entity as Default>::default().table_name(),
                        c.as_str()
                    )));
                }
            };
        }
        one.from(Alias::new(from));
        match &mut select {
            None => select = Some(one),
            Some(all) => {
                all.union(UnionType::All, one);
            }
        }
    }
    let Some(select) = select else {
        return Ok(None);
    };
    let mut insert = Query::insert();
    insert
        .into_table(<A::Entity as Default>::default().table_ref())
        .columns(columns)
        .select_from(select)
        .map_err(|e| StoreError::Invalid(format!("building an insert: {e}")))?;
    Ok(Some(insert))
}

/// How many rows the statement's `<table>` clause returned.
fn count_of(table: &str) -> Expr {
    Expr::cust(format!(r#"(SELECT COUNT(*) FROM "{table}")"#))
}
