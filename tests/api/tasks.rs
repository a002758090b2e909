//! Delegation with the `task` tool (issue 16, item 2; docs/agents.md): a run delegates to a
//! child run of the same tenant, user and session, in its own context; the child's events reach
//! the same client nested (`parent_run_id`), its approvals are decided there, its answer comes
//! back as the call's result; cancel, depth and fan-out limits, parallel children, a crash
//! mid-child, and nobody else seeing or deciding the child.
//!
//! The model is the fake model server in auto mode: each request is answered from the
//! conversation it carries (`/tool NAME {json}` lines are tool calls, `/sleep MS` waits), so a
//! parent's message scripts its child's through the task description.

use std::time::{Duration, Instant};

use agentry_fake_model::FakeModelServer;
use agentry_schema::ids::{RunId, SessionId};
use agentry_store::executions::{self, ExecutionFilter, ExecutionStatus};
use agentry_store::{PageRequest, events};
use reqwest::Method;
use serde_json::{Value, json};

use crate::ctx::{Ctx, TenantFx};
use crate::fake_model::chat;
use crate::mcp::ws_connect;
use crate::streaming::{Socket, WAIT, next_json, send};

/// An orchestrator assistant (its `task` calls need no approval) and a session of the member
/// with it.
async fn orchestrator_session(ctx: &Ctx, t: &TenantFx) -> String {
    ctx.ok(
        Method::POST,
        "/api/v1/agents",
        &t.admin.key,
        Some(json!({"id": "boss", "name": "Boss", "profile": "orchestrator"})),
        201,
    )
    .await;
    let s = ctx
        .ok(
            Method::POST,
            "/api/v1/sessions",
            &t.member.key,
            Some(json!({"assistant_id": "boss"})),
            201,
        )
        .await;
    s["session_id"].as_str().unwrap().to_string()
}

/// `/tool task {...}`: the scripted model's call of `task` with these arguments.
fn task_line(args: Value) -> String {
    format!("/tool task {args}")
}

/// Events until the `done` of a run a person started (a child's `done` does not end it).
async fn until_top_done(ws: &mut Socket) -> Vec<Value> {
    let mut out = Vec::new();
    loop {
        let ev = next_json(ws).await;
        let stop = ev["event_type"] == "done" && ev.get("parent_run_id").is_none();
        out.push(ev);
        if stop {
            return out;
        }
    }
}

/// Events until the first `hitl_request`, which is returned last.
async fn until_hitl(ws: &mut Socket) -> Vec<Value> {
    let mut out = Vec::new();
    loop {
        let ev = next_json(ws).await;
        assert!(
            !(ev["event_type"] == "done" && ev.get("parent_run_id").is_none()),
            "the run ended before asking: {out:?} {ev}"
        );
        let stop = ev["event_type"] == "hitl_request";
        out.push(ev);
        if stop {
            return out;
        }
    }
}

fn of_run<'a>(events: &'a [Value], run: &str) -> Vec<&'a Value> {
    events.iter().filter(|e| e["run_id"] == run).collect()
}

fn kinds(events: &[&Value]) -> Vec<String> {
    events
        .iter()
        .map(|e| e["event_type"].as_str().unwrap().to_string())
        .collect()
}

fn position(events: &[Value], f: impl Fn(&Value) -> bool) -> usize {
    events
        .iter()
        .position(f)
        .unwrap_or_else(|| panic!("no such event in {events:?}"))
}

/// The child runs of `parent`, as `GET /executions?parent_execution_id=` lists them.
async fn children_of(ctx: &Ctx, key: &str, parent: &str) -> Vec<Value> {
    let r = ctx
        .ok(
            Method::GET,
            &format!("/api/v1/executions?parent_execution_id={parent}"),
            key,
            None,
            200,
        )
        .await;
    r["items"].as_array().unwrap().clone()
}

/// A parent delegates to a child; the child calls a tool that needs approval; the client
/// approves on the same socket; the child answers; the parent's model reads that answer. The
/// events' order and `parent_run_id`, the executions' tree, usage roll-up, the child's own
/// context, and: nobody else sees or decides the child.
pub async fn a_parent_delegates_and_the_client_approves_the_childs_tool(
    ctx: &Ctx,
    fake: &FakeModelServer,
) {
    let t = ctx.tenant().await;
    let other = ctx.tenant().await;
    let sid = orchestrator_session(ctx, &t).await;
    let mut ws = ws_connect(ctx, &t.member.key, &sid).await;
    let description =
        r#"/tool write_file {"file_path": "child.txt", "content": "written by the child"}"#;
    let seen = fake.requests().len();
    chat(
        &mut ws,
        &task_line(json!({"description": description, "profile": "general"})),
    )
    .await;
    let asked = until_hitl(&mut ws).await;
    let parent = asked[0]["run_id"].as_str().unwrap().to_string();
    assert_eq!(asked[0]["event_type"], "tool_call", "{asked:?}");
    assert_eq!(asked[0]["data"]["tool_name"], "task");
    assert!(asked[0].get("parent_run_id").is_none(), "{}", asked[0]);
    let hitl = asked.last().unwrap();
    let child = hitl["run_id"].as_str().unwrap().to_string();
    assert_ne!(child, parent);
    assert_eq!(hitl["parent_run_id"], parent.as_str(), "{hitl}");
    assert_eq!(
        hitl["data"]["action_requests"][0]["name"], "write_file",
        "{hitl}"
    );
    // The child's tool call came first, nested.
    let child_events = of_run(&asked, &child);
    assert_eq!(kinds(&child_events), ["tool_call", "hitl_request"]);
    assert!(
        child_events
            .iter()
            .all(|e| e["parent_run_id"] == parent.as_str())
    );
    let request = hitl["data"]["request_id"].as_str().unwrap().to_string();

    // Nobody else decides it: another member of the tenant, another tenant's admin.
    for key in [&t.member2.key, &other.admin.key] {
        let r = ctx
            .call(
                Method::POST,
                &format!("/api/v1/sessions/{sid}/approvals/{request}"),
                Some(key),
                Some(&json!({"type": "approve"})),
            )
            .await;
        assert_eq!(r.status, 404, "{}", r.body);
    }
    // Nor sees the child run.
    for key in [&t.member2.key, &other.admin.key] {
        let r = ctx
            .call(
                Method::GET,
                &format!("/api/v1/executions/{child}"),
                Some(key),
                None,
            )
            .await;
        assert_eq!(r.status, 404, "{}", r.body);
    }
    assert!(children_of(ctx, &other.admin.key, &parent).await.is_empty());

    send(
        &mut ws,
        json!({"type": "hitl_decision", "payload": {"request_id": request, "type": "approve"}}),
    )
    .await;
    let rest = until_top_done(&mut ws).await;
    // The child's result, answer and `done`, then the parent's result, answer and `done`.
    let child_rest = of_run(&rest, &child);
    let child_kinds = kinds(&child_rest);
    assert_eq!(
        child_kinds.first().map(String::as_str),
        Some("tool_result"),
        "{rest:?}"
    );
    assert!(
        child_kinds.iter().any(|k| k == "file_operation"),
        "{rest:?}"
    );
    assert!(child_kinds.iter().any(|k| k == "text"), "{rest:?}");
    assert_eq!(
        child_kinds.iter().filter(|k| *k == "done").count(),
        1,
        "{rest:?}"
    );
    assert!(
        child_rest
            .iter()
            .all(|e| e["parent_run_id"] == parent.as_str())
    );
    let child_done = child_rest.last().unwrap();
    assert_eq!(child_done["event_type"], "done", "{rest:?}");
    assert_eq!(child_done["data"]["status"], "completed", "{child_done}");
    let child_answer = child_rest
        .iter()
        .find(|e| e["event_type"] == "text" && e["data"]["is_final"] == true)
        .expect("the child's answer")["data"]["content"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        child_answer.starts_with("(scripted) Tool write_file returned"),
        "{child_answer}"
    );
    let i_child_done = position(&rest, |e| e["run_id"] == child && e["event_type"] == "done");
    let i_result = position(&rest, |e| {
        e["run_id"] == parent && e["event_type"] == "tool_result"
    });
    let i_parent_done = rest.len() - 1;
    assert!(
        i_child_done < i_result && i_result < i_parent_done,
        "{rest:?}"
    );
    let result = &rest[i_result]["data"];
    assert_eq!(result["status"], "success", "{result}");
    assert_eq!(result["result"]["status"], "completed", "{result}");
    assert_eq!(result["result"]["run_id"], child.as_str(), "{result}");
    assert_eq!(
        result["result"]["answer"],
        child_answer.as_str(),
        "{result}"
    );
    let parent_done = &rest[i_parent_done];
    assert_eq!(parent_done["run_id"], parent.as_str());
    assert_eq!(parent_done["data"]["status"], "completed", "{parent_done}");
    // Every event of the whole exchange is in `seq` order.
    let seqs: Vec<u64> = asked
        .iter()
        .chain(&rest)
        .map(|e| e["seq"].as_u64().unwrap())
        .collect();
    assert!(seqs.windows(2).all(|w| w[0] < w[1]), "{seqs:?}");

    // What the model was sent: four requests, in order — the parent's, the child's two, the
    // parent's again.
    let reqs = &fake.requests()[seen..];
    assert_eq!(
        reqs.len(),
        4,
        "{:?}",
        reqs.iter().map(|r| &r.raw_body).collect::<Vec<_>>()
    );
    // The child's context is its own: the system prompt of its profile and the description.
    let first_child = &reqs[1].body["messages"];
    assert_eq!(first_child.as_array().unwrap().len(), 2, "{first_child}");
    assert!(
        first_child[0]["content"]
            .as_str()
            .unwrap()
            .starts_with("You are Boss (general), a general-purpose assistant"),
        "{first_child}"
    );
    assert_eq!(first_child[1]["role"], "user");
    assert_eq!(first_child[1]["content"], description);
    // The parent's model read the child's answer as the `task` call's result.
    let last = &reqs[3].body["messages"];
    let tool_msg = last.as_array().unwrap().last().unwrap();
    assert_eq!(tool_msg["role"], "tool", "{last}");
    let content: Value = serde_json::from_str(tool_msg["content"].as_str().unwrap()).unwrap();
    assert_eq!(content["answer"], child_answer.as_str(), "{tool_msg}");
    // Usage rolls up: the parent's `done` counts its two calls and the child's.
    let total = |e: &Value| e["data"]["token_usage"]["total"].as_u64().unwrap();
    assert!(total(child_done) > 0);
    assert!(
        total(parent_done) > total(child_done),
        "{parent_done} {child_done}"
    );

    // The audit is a tree: the child's execution names its parent and the call.
    let kids = children_of(ctx, &t.member.key, &parent).await;
    assert_eq!(kids.len(), 1, "{kids:?}");
    assert_eq!(kids[0]["id"], child.as_str());
    assert_eq!(kids[0]["parent_execution_id"], parent.as_str());
    assert_eq!(kids[0]["parent_tool_call_id"], "call_1");
    assert_eq!(kids[0]["status"], "completed");
    assert_eq!(kids[0]["input"], description);
    let top = ctx
        .ok(
            Method::GET,
            &format!("/api/v1/executions?session_id={sid}&top_level=true"),
            &t.member.key,
            None,
            200,
        )
        .await;
    let top: Vec<&str> = top["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["id"].as_str().unwrap())
        .collect();
    assert_eq!(top, [parent.as_str()]);
    let detail = ctx
        .ok(
            Method::GET,
            &format!("/api/v1/executions/{child}"),
            &t.member.key,
            None,
            200,
        )
        .await;
    let call = &detail["tool_calls"][0];
    assert_eq!(call["tool_name"], "write_file", "{detail}");
    assert_eq!(call["approved"], true, "{detail}");
    assert_eq!(call["approved_by"], t.member.user_id.as_str(), "{detail}");
    // The session's history holds the parent's exchange only, not the child's messages.
    let history = ctx
        .ok(
            Method::GET,
            &format!("/api/v1/sessions/{sid}/messages"),
            &t.member.key,
            None,
            200,
        )
        .await;
    let items = history["items"].as_array().unwrap();
    assert!(
        items.iter().all(|m| m["run_id"] != child.as_str()),
        "{history}"
    );
    assert!(
        items.iter().any(|m| m["run_id"] == parent.as_str()),
        "{history}"
    );
}

/// The parent is cancelled while its child waits for its model: both end `cancelled`, the
/// child's `done` first; both executions say so.
pub async fn cancelling_the_parent_cancels_the_child(ctx: &Ctx) {
    let t = ctx.tenant().await;
    let sid = orchestrator_session(ctx, &t).await;
    let mut ws = ws_connect(ctx, &t.member.key, &sid).await;
    chat(
        &mut ws,
        &task_line(json!({"description": "/sleep 30000\nslow work"})),
    )
    .await;
    let first = next_json(&mut ws).await;
    assert_eq!(first["data"]["tool_name"], "task", "{first}");
    let parent = first["run_id"].as_str().unwrap().to_string();
    // Wait for the child to be running.
    let deadline = Instant::now() + WAIT;
    let child = loop {
        let kids = children_of(ctx, &t.member.key, &parent).await;
        if let Some(k) = kids.first() {
            assert_eq!(k["status"], "running", "{k}");
            break k["id"].as_str().unwrap().to_string();
        }
        assert!(Instant::now() < deadline, "no child run started");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let asked = Instant::now();
    send(&mut ws, json!({"type": "cancel", "payload": {}})).await;
    let rest = until_top_done(&mut ws).await;
    assert!(asked.elapsed() < Duration::from_secs(5), "{rest:?}");
    let i_child = position(&rest, |e| e["run_id"] == child && e["event_type"] == "done");
    let child_done = &rest[i_child];
    assert_eq!(child_done["parent_run_id"], parent.as_str(), "{child_done}");
    assert_eq!(child_done["data"]["status"], "cancelled", "{child_done}");
    let done = rest.last().unwrap();
    assert_eq!(done["run_id"], parent.as_str());
    assert_eq!(done["data"]["status"], "cancelled", "{done}");
    assert!(i_child < rest.len() - 1);
    for (id, want) in [(&parent, "cancelled"), (&child, "cancelled")] {
        let e = ctx
            .ok(
                Method::GET,
                &format!("/api/v1/executions/{id}"),
                &t.member.key,
                None,
                200,
            )
            .await;
        assert_eq!(e["status"], want, "{e}");
    }
    // Exactly one `done` each, stored.
    let scope = t.scope();
    let session: SessionId = sid.parse().unwrap();
    for run in [&parent, &child] {
        assert_eq!(dones(ctx, &scope, session, run).await.len(), 1, "{run}");
    }
}

/// The `done` events stored for `run`.
async fn dones(
    ctx: &Ctx,
    scope: &agentry_store::TenantScope,
    session: SessionId,
    run: &str,
) -> Vec<Value> {
    events::list_after(&ctx.db, scope, session, 0, 100_000)
        .await
        .unwrap()
        .into_iter()
        .filter(|e| e.run_id == run && e.event_type() == "done")
        .map(|e| serde_json::to_value(&e).unwrap())
        .collect()
}

/// With `tasks.max_depth = 1` a child's own `task` call gets a clear tool error and starts no
/// grandchild; the child still answers. With `tasks.max_per_step = 2`, of three `task` calls in
/// one step two run — at the same time — and the third gets a clear tool error.
pub async fn depth_and_fan_out_limits_and_parallel_children(ctx: &Ctx) {
    let t = ctx.tenant().await;
    let sid = orchestrator_session(ctx, &t).await;
    let mut ws = ws_connect(ctx, &t.member.key, &sid).await;

    // Depth: the child (an orchestrator itself) tries to delegate further.
    let deeper = task_line(json!({"description": "go deeper"}));
    chat(
        &mut ws,
        &task_line(json!({"description": deeper, "profile": "orchestrator"})),
    )
    .await;
    let evs = until_top_done(&mut ws).await;
    let parent = evs[0]["run_id"].as_str().unwrap().to_string();
    let children: Vec<&str> = evs
        .iter()
        .filter(|e| e["parent_run_id"] == parent.as_str())
        .map(|e| e["run_id"].as_str().unwrap())
        .collect();
    let child = children[0].to_string();
    assert!(children.iter().all(|c| *c == child), "one child: {evs:?}");
    assert!(
        evs.iter().all(|e| e["parent_run_id"] != child.as_str()),
        "no grandchild started: {evs:?}"
    );
    let refused = evs
        .iter()
        .find(|e| e["run_id"] == child && e["event_type"] == "tool_result")
        .expect("the child's task call has a result");
    assert_eq!(refused["data"]["status"], "error", "{refused}");
    let text = refused["data"]["result"].to_string();
    assert!(text.contains("tasks.max_depth"), "{text}");
    assert!(text.contains("depth 1"), "{text}");
    let child_done = evs
        .iter()
        .find(|e| e["run_id"] == child && e["event_type"] == "done")
        .unwrap();
    assert_eq!(child_done["data"]["status"], "completed", "{child_done}");
    assert_eq!(evs.last().unwrap()["data"]["status"], "completed");

    // Fan-out and parallelism: three calls, two allowed per step; each child waits 1.5 s for
    // its model.
    let lines: Vec<String> = ["one", "two", "three"]
        .iter()
        .map(|w| task_line(json!({"description": format!("/sleep 1500\n{w}")})))
        .collect();
    let started = Instant::now();
    chat(&mut ws, &lines.join("\n")).await;
    let evs = until_top_done(&mut ws).await;
    let took = started.elapsed();
    let parent = evs[0]["run_id"].as_str().unwrap().to_string();
    assert_eq!(
        evs.last().unwrap()["data"]["status"],
        "completed",
        "{evs:?}"
    );
    let results: Vec<&Value> = evs
        .iter()
        .filter(|e| e["run_id"] == parent && e["event_type"] == "tool_result")
        .collect();
    assert_eq!(results.len(), 3, "{evs:?}");
    for (r, word) in results[..2].iter().zip(["one", "two"]) {
        assert_eq!(r["data"]["status"], "success", "{r}");
        assert_eq!(
            r["data"]["result"]["answer"],
            format!("(scripted) You said: {word}"),
            "{r}"
        );
    }
    assert_eq!(results[2]["data"]["status"], "error", "{}", results[2]);
    assert!(
        results[2]["data"]["result"]
            .to_string()
            .contains("tasks.max_per_step"),
        "{}",
        results[2]
    );
    let kids = children_of(ctx, &t.member.key, &parent).await;
    assert_eq!(kids.len(), 2, "the refused call started no run: {kids:?}");
    // The two ran at the same time: each started before the other ended.
    let at =
        |k: &Value, f: &str| chrono::DateTime::parse_from_rfc3339(k[f].as_str().unwrap()).unwrap();
    for (a, b) in [(&kids[0], &kids[1]), (&kids[1], &kids[0])] {
        assert!(at(a, "started_at") < at(b, "completed_at"), "{kids:?}");
    }
    // One after the other they would take 3 s of model time at least.
    tracing_took(took);
}

fn tracing_took(took: Duration) {
    eprintln!("three task calls (two children of 1.5 s each, in parallel) took {took:?}");
}

/// `kill -9` while a child waits for its model, then restart: the child ends `interrupted`
/// (not run again: its model is not asked again), the parent resumes, reads its `task` call as
/// interrupted and answers; one `done` each.
pub async fn a_crash_mid_child_ends_it_once_and_the_parent_resumes(
    ctx: &mut Ctx,
    fake: &FakeModelServer,
) {
    let t = ctx.tenant().await;
    let sid = orchestrator_session(ctx, &t).await;
    let mut ws = ws_connect(ctx, &t.member.key, &sid).await;
    chat(
        &mut ws,
        &task_line(json!({"description": "/sleep 60000\nnever answered"})),
    )
    .await;
    let first = next_json(&mut ws).await;
    let parent = first["run_id"].as_str().unwrap().to_string();
    let scope = t.scope();
    let parent_id: RunId = parent.parse().unwrap();
    let deadline = Instant::now() + WAIT;
    let child = loop {
        let (kids, _) = executions::list(
            &ctx.db,
            &scope,
            &ExecutionFilter {
                parent_execution_id: Some(parent_id),
                ..Default::default()
            },
            PageRequest::new(10, 0),
        )
        .await
        .unwrap();
        let asked = fake
            .requests()
            .iter()
            .any(|r| r.raw_body.contains("never answered") && !r.raw_body.contains("/tool task"));
        if let (Some(k), true) = (kids.first(), asked) {
            break k.id;
        }
        assert!(Instant::now() < deadline, "the child never asked its model");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    drop(ws);
    let asked_before = fake.requests().len();
    ctx.server.crash_and_restart().await;

    // Both runs settle.
    let deadline = Instant::now() + WAIT;
    let (p, c) = loop {
        let p = executions::get(&ctx.db, &scope, parent_id)
            .await
            .unwrap()
            .unwrap();
        let c = executions::get(&ctx.db, &scope, child)
            .await
            .unwrap()
            .unwrap();
        if p.status.is_finished() && c.status.is_finished() {
            break (p, c);
        }
        assert!(
            Instant::now() < deadline,
            "unfinished after the restart: {:?} {:?}",
            p.status,
            c.status
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(c.status, ExecutionStatus::Interrupted);
    assert_eq!(p.status, ExecutionStatus::Completed, "{p:?}");
    let session: SessionId = sid.parse().unwrap();
    let child_dones = dones(ctx, &scope, session, &child.to_string()).await;
    assert_eq!(child_dones.len(), 1, "{child_dones:?}");
    assert_eq!(child_dones[0]["data"]["status"], "interrupted");
    assert_eq!(child_dones[0]["parent_run_id"], parent.as_str());
    let parent_dones = dones(ctx, &scope, session, &parent).await;
    assert_eq!(parent_dones.len(), 1, "{parent_dones:?}");
    assert_eq!(parent_dones[0]["data"]["status"], "completed");
    // The child was not run again; the parent's model read the call as interrupted.
    let after = &fake.requests()[asked_before..];
    assert!(
        after
            .iter()
            .all(|r| !r.raw_body.contains("\"content\":\"/sleep 60000")),
        "the child's model was asked again"
    );
    assert_eq!(
        after.len(),
        1,
        "only the parent's model is asked after the restart"
    );
    let last = after[0].body["messages"]
        .as_array()
        .unwrap()
        .last()
        .unwrap()
        .clone();
    assert_eq!(last["role"], "tool", "{last}");
    assert!(
        last["content"].as_str().unwrap().contains("interrupted"),
        "{last}"
    );
}
