//! The SQL-statement budget of one run (issue 11, docs/benchmarks.md): what a one-tool run on a
//! live session costs the database, counted by the server itself (`agentry_db_statements_total`)
//! over the real binary, the fake model and a WebSocket, as `agentry-bench runs` drives it.

use reqwest::Method;
use serde_json::{Value, json};

use crate::ctx::Ctx;
use crate::mcp::ws_connect;
use crate::observability::sample;
use crate::streaming::{Socket, send, until_done_or_hitl};

/// SQL statements one one-tool run (model → `write_todos` → model → answer) may send on a
/// session whose actor is live, besides its events: the run's start (3, with its history
/// window read back in the same job), one transaction per step (2 + 3) and the end (4, with
/// the events not stored yet). Each is a job of the writer, group-committed with other
/// sessions'.
pub const STATEMENTS_PER_ONE_TOOL_RUN: u64 = 13;

/// The same on PostgreSQL, where the start, each step and the end are one statement each
/// (`agentry_store::run_writes`, issue 24): the start, the two steps and the end (4), and the
/// deferred checkpoint inserts of the steps' batches (2); 12 before, like SQLite's.
pub const STATEMENTS_PER_ONE_TOOL_RUN_POSTGRES: u64 = 6;

/// Events are stored before they are sent (issue 24): one multi-row insert per burst of
/// events, as many as the writer's timing makes (a burst is whatever was numbered while the
/// previous batch was being written), never more than one per event.
const EVENT_INSERT: &str = "INSERT INTO \"session_events\"";

/// Runs measured; the fewest statements any of them took is the run path's own figure (a
/// periodic event flush that lands inside a slow run adds one).
const RUNS: usize = 5;

pub async fn statements(ctx: &Ctx) -> u64 {
    let m = ctx.metrics().await;
    ["select", "insert", "update", "delete", "other"]
        .iter()
        .map(|k| sample(&m, "agentry_db_statements_total", &[("kind", k)]) as u64)
        .sum()
}

/// The statements the server logged so far (`agentry_store::sql` at trace, see
/// [`crate::BUDGET_ENV`]), oldest first.
fn sql_log(ctx: &Ctx) -> Vec<String> {
    ctx.server
        .log_lines(|l| l["target"] == "agentry_store::sql")
        .iter()
        .map(|l| l["message"].as_str().unwrap_or_default().to_string())
        .collect()
}

async fn one_tool_run(ws: &mut Socket, tag: &str) -> Vec<Value> {
    let message = format!(
        "/tool write_todos {{\"todos\": [{{\"content\": \"{tag}\", \"status\": \"pending\"}}]}}\n{tag}"
    );
    send(ws, json!({"type": "chat", "payload": {"message": message}})).await;
    let events = until_done_or_hitl(ws).await;
    let done = events.last().unwrap();
    assert_eq!(done["event_type"], "done", "{events:?}");
    assert_eq!(done["data"]["status"], "completed", "{events:?}");
    assert!(
        events
            .iter()
            .any(|e| e["event_type"] == "tool_result" && e["data"]["status"] == "success"),
        "{events:?}"
    );
    events
}

/// Per run, after a warm-up run: the fewest statements of [`RUNS`] one-tool runs, which must
/// be within `budget` ([`STATEMENTS_PER_ONE_TOOL_RUN`], or on PostgreSQL
/// [`STATEMENTS_PER_ONE_TOOL_RUN_POSTGRES`]).
pub async fn one_tool_run_stays_within_the_statement_budget(ctx: &Ctx, budget: u64) -> Vec<u64> {
    let t = ctx.tenant().await;
    let key = &t.admin.key;
    ctx.ok(
        Method::POST,
        "/api/v1/agents",
        key,
        Some(json!({"id": "budget", "tools": ["write_todos"], "auto_approve": true})),
        201,
    )
    .await;
    let s = ctx
        .ok(
            Method::POST,
            "/api/v1/sessions",
            key,
            Some(json!({"assistant_id": "budget"})),
            201,
        )
        .await;
    let session = s["session_id"].as_str().unwrap().to_string();
    let mut ws = ws_connect(ctx, key, &session).await;
    one_tool_run(&mut ws, "warm-up").await;
    let mut per_run = Vec::new();
    let mut logged = Vec::new();
    for i in 0..RUNS {
        let (before, lines) = (statements(ctx).await, sql_log(ctx).len());
        let events = one_tool_run(&mut ws, &format!("run {i}")).await;
        let total = statements(ctx).await - before;
        let log = sql_log(ctx).split_off(lines);
        let event_inserts = log.iter().filter(|l| l.starts_with(EVENT_INSERT)).count() as u64;
        assert!(
            event_inserts <= events.len() as u64,
            "run {i}: {event_inserts} event inserts for {} events:\n{}",
            events.len(),
            log.join("\n")
        );
        per_run.push(total - event_inserts.min(total));
        logged.push(log);
    }
    let (fewest_at, fewest) = per_run
        .iter()
        .copied()
        .enumerate()
        .min_by_key(|(_, n)| *n)
        .unwrap();
    let statements = logged[fewest_at].join("\n");
    eprintln!(
        "SQL statements per one-tool run besides its event inserts: {per_run:?}; the fewest:\n{statements}"
    );
    assert!(
        fewest <= budget,
        "a one-tool run sent {fewest} SQL statements besides its event inserts (runs: {per_run:?}); the budget is {budget}:\n{statements}"
    );
    assert!(fewest > 0, "the server counted no statements: {per_run:?}");
    per_run
}

/// A live session keeps its assistant between runs, but a change through the API reaches it
/// at once: the very next run sends the model the new system prompt.
pub async fn a_changed_assistant_reaches_the_live_session_at_once(
    ctx: &Ctx,
    fake: &agentry_fake_model::FakeModelServer,
) {
    let t = ctx.tenant().await;
    let key = &t.admin.key;
    let spec = |prompt: &str| json!({"system_prompt": prompt, "tools": ["write_todos"], "auto_approve": true});
    let mut create = spec("the first prompt");
    create["id"] = json!("kept");
    ctx.ok(Method::POST, "/api/v1/agents", key, Some(create), 201)
        .await;
    let s = ctx
        .ok(
            Method::POST,
            "/api/v1/sessions",
            key,
            Some(json!({"assistant_id": "kept"})),
            201,
        )
        .await;
    let mut ws = ws_connect(ctx, key, s["session_id"].as_str().unwrap()).await;
    let system_of_last = || {
        let last = fake.requests().pop().expect("the model was called");
        last.body.to_string()
    };
    one_tool_run(&mut ws, "kept 1").await;
    assert!(system_of_last().contains("the first prompt"));
    ctx.ok(
        Method::PUT,
        "/api/v1/agents/kept",
        key,
        Some(spec("the second prompt")),
        200,
    )
    .await;
    one_tool_run(&mut ws, "kept 2").await;
    let body = system_of_last();
    assert!(
        body.contains("the second prompt") && !body.contains("the first prompt"),
        "{body}"
    );
}
