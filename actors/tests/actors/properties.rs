//! Properties of the engine (seed 000 properties 7, 8, 13, 14, 29; seed 002 properties 2, 4,
//! 8, 15, 16), each over at least 100 generated cases, against the real engine.
//!
//! The engine properties run against both wire formats of the fake model server (issue 3): the
//! cases alternate between an OpenAI and an Anthropic harness, so each wire gets half of them
//! and every property still has at least 100 in total.

use crate::support;

use std::time::Duration;

use actix::prelude::*;
use agentry_actors::agent::{CHECKPOINT_VERSION, RunCheckpoint, RunState};
use agentry_actors::quota::{AcquireRun, AdmitRequest, QuotaActor, QuotaState};
use agentry_fake_model::{Endpoint, FakeReply};
use agentry_llm::ToolCall;
use agentry_schema::events::{DoneStatus, EventPayload, Todo, TodoStatus, TokenUsage};
use agentry_schema::frames::Decision;
use agentry_store::PageRequest;
use agentry_store::checkpoints::{self, NewCheckpoint};
use agentry_store::messages::{self, MessageRole};
use agentry_store::tenants::Quotas;
use agentry_store::testing::Backend;
use proptest::prelude::*;
use proptest::strategy::ValueTree;
use proptest::test_runner::{Config, TestRunner};
use serde_json::json;
use support::*;

const CASES: usize = 100;

/// Both wire formats of the fake model server, each with its own engine and database. Case `i`
/// runs on `harnesses[i % 2]`.
async fn both_wires(opts: impl Fn() -> Options) -> Option<[Harness; 2]> {
    let openai = Harness::with(Backend::Sqlite, Wire::OpenAi, opts()).await?;
    let anthropic = Harness::with(Backend::Sqlite, Wire::Anthropic, opts()).await?;
    Some([openai, anthropic])
}

fn wire_name(i: usize) -> &'static str {
    ["openai", "anthropic"][i % 2]
}

/// Each harness's model calls really went over its own wire.
fn assert_each_wire_was_used(hs: &[Harness; 2]) {
    for (h, endpoint) in hs
        .iter()
        .zip([Endpoint::OpenAiChat, Endpoint::AnthropicMessages])
    {
        let requests = h.fake().requests();
        assert!(!requests.is_empty(), "no model call over {endpoint:?}");
        assert!(
            requests.iter().all(|r| r.endpoint == endpoint),
            "a request went over the wrong wire"
        );
    }
}

fn cases<S: Strategy>(strategy: S) -> Vec<S::Value> {
    let mut runner = TestRunner::new(Config {
        cases: CASES as u32,
        failure_persistence: None,
        ..Config::default()
    });
    (0..CASES)
        .map(|_| strategy.new_tree(&mut runner).expect("strategy").current())
        .collect()
}

/// One model answer in a generated script.
#[derive(Debug, Clone)]
enum Turn {
    /// A tool that needs no approval and succeeds.
    Stats,
    /// A tool call the model gets wrong (an error result goes back to it).
    BadArgs,
    /// A tool that does not exist.
    Unknown,
    /// Plain text, ending the run.
    Text,
    /// The provider fails with this status (retried by the client up to its max, then fatal).
    ModelError(u16),
}

fn turn() -> impl Strategy<Value = Turn> {
    prop_oneof![
        4 => Just(Turn::Stats),
        2 => Just(Turn::BadArgs),
        1 => Just(Turn::Unknown),
        1 => Just(Turn::Text),
        1 => prop_oneof![Just(400u16), Just(401), Just(500), Just(503)].prop_map(Turn::ModelError),
    ]
}

/// Any script of tools, bad calls and errors: the stream is ordered and gap-free, ends in
/// exactly one `done`; errors become `error` events (never a panic) — a model error a
/// non-recoverable one before a failed `done`, a tool error a recoverable one right after its
/// call's `tool_result`, with the tool error's code, and the run goes on; a run that finishes
/// normally has `done.cancelled == false`.
#[actix_rt::test]
async fn every_run_ends_in_one_done_with_a_gap_free_stream_and_errors_as_events() {
    let Some(hs) = both_wires(Options::default).await else {
        return;
    };
    let sessions = [hs[0].new_session(true).await, hs[1].new_session(true).await];
    for (i, script) in cases(prop::collection::vec(turn(), 0..5))
        .into_iter()
        .enumerate()
    {
        let (h, s, wire) = (&hs[i % 2], &sessions[i % 2], wire_name(i));
        let mut expect_failed = false;
        // A refused key (401) is `model_auth_failed`; any other model failure `model_error`.
        let mut fatal_code = "model_error";
        for (j, t) in script.iter().enumerate() {
            match t {
                Turn::Stats => h.fake().push(FakeReply::tool_call(
                    &format!("c{i}_{j}"),
                    "write_todos",
                    json!({"todos": [{"content": format!("step {j}"), "status": "pending"}]}),
                )),
                Turn::BadArgs => h.fake().push(FakeReply::tool_call(
                    &format!("c{i}_{j}"),
                    "read_file",
                    json!({"file_path": [1]}),
                )),
                Turn::Unknown => h.fake().push(FakeReply::tool_call(
                    &format!("c{i}_{j}"),
                    "nope",
                    json!({}),
                )),
                Turn::Text => h.fake().push(FakeReply::text("early answer")),
                Turn::ModelError(code) => {
                    // The client retries 5xx once (max_retries 1 in the harness): push enough.
                    let n = if *code >= 500 { 2 } else { 1 };
                    for _ in 0..n {
                        h.fake().push(FakeReply::error(*code, "scripted failure"));
                    }
                }
            }
            if matches!(t, Turn::Text) {
                break;
            }
            if let Turn::ModelError(code) = t {
                expect_failed = true;
                if *code == 401 {
                    fatal_code = "model_auth_failed";
                }
                break;
            }
        }
        if !expect_failed && !script.iter().any(|t| matches!(t, Turn::Text)) {
            h.fake().push(FakeReply::text("final answer"));
        }
        let (mut ev, run) = h.send(s, &format!("case {i}")).await;
        let all = ev.until_done(run).await;
        assert_well_formed(&all);
        let d = done(&all);
        // The tool calls that ran: the turns before the first text or model error.
        let ran: Vec<(usize, &Turn)> = script
            .iter()
            .enumerate()
            .take_while(|(_, t)| !matches!(t, Turn::Text | Turn::ModelError(_)))
            .collect();
        for (j, t) in &ran {
            let id = format!("c{i}_{j}");
            let at = all
                .iter()
                .position(
                    |e| matches!(&e.payload, EventPayload::ToolResult(r) if r.tool_call_id == id),
                )
                .unwrap_or_else(|| panic!("{wire} case {i}: no result for {id}: {script:?}"));
            let next = all.get(at + 1).map(|e| &e.payload);
            let expected_code = match t {
                Turn::BadArgs => Some("validation_error"),
                Turn::Unknown => Some("not_found"),
                _ => None,
            };
            match (expected_code, next) {
                (Some(code), Some(EventPayload::Error(x))) => {
                    assert_eq!(x.error_code, code, "{wire} case {i}: {id}");
                    assert!(x.recoverable, "{wire} case {i}: {id}");
                }
                (Some(_), other) => {
                    panic!("{wire} case {i}: no error event after {id}'s result: {other:?}")
                }
                (None, Some(EventPayload::Error(x))) => {
                    panic!("{wire} case {i}: a successful call {id} got an error event: {x:?}")
                }
                (None, _) => {}
            }
        }
        let tool_errors = ran
            .iter()
            .filter(|(_, t)| matches!(t, Turn::BadArgs | Turn::Unknown))
            .count();
        let errs = errors(&all);
        assert_eq!(
            errs.iter().filter(|e| e.recoverable).count(),
            tool_errors,
            "{wire} case {i}: one recoverable error per failed call: {script:?}"
        );
        if expect_failed {
            assert_eq!(d.status, DoneStatus::Failed, "{wire} case {i}: {script:?}");
            let fatal: Vec<_> = errs.iter().filter(|e| !e.recoverable).collect();
            assert_eq!(fatal.len(), 1, "{wire} case {i}: {script:?}");
            assert_eq!(
                fatal[0].error_code, fatal_code,
                "{wire} case {i}: {script:?}"
            );
            assert!(matches!(
                &all[all.len() - 2].payload,
                EventPayload::Error(x) if !x.recoverable
            ));
        } else {
            assert_eq!(
                (d.status, d.cancelled),
                (DoneStatus::Completed, false),
                "{wire} case {i}: {script:?}"
            );
            assert!(errs.iter().all(|e| e.recoverable), "{wire} case {i}");
        }
        assert_eq!(
            h.fake().pending(),
            0,
            "{wire} case {i}: every scripted reply was consumed"
        );
    }
    assert_each_wire_was_used(&hs);
}

#[derive(Debug, Clone, Copy)]
enum Verdict {
    Approve,
    Edit,
    Reject,
}

/// With approvals on, decisions decide: calls run until the first reject, which ends the run
/// with `done{cancelled: true, status: rejected}`. With `auto_approve`, every call runs and no
/// `hitl_request` is ever sent.
#[actix_rt::test]
async fn decisions_decide_and_auto_approve_approves_all() {
    let Some(hs) = both_wires(Options::default).await else {
        return;
    };
    let verdict = prop_oneof![
        Just(Verdict::Approve),
        Just(Verdict::Edit),
        Just(Verdict::Reject)
    ];
    let auto_sessions = [hs[0].new_session(true).await, hs[1].new_session(true).await];
    let manual_sessions = [
        hs[0].new_session(false).await,
        hs[1].new_session(false).await,
    ];
    for (i, (auto, verdicts)) in cases((any::<bool>(), prop::collection::vec(verdict, 1..4)))
        .into_iter()
        .enumerate()
    {
        let (h, auto_s, manual_s) = (&hs[i % 2], &auto_sessions[i % 2], &manual_sessions[i % 2]);
        let wire = wire_name(i);
        let n = verdicts.len();
        let call = |j: usize| {
            FakeReply::tool_call(
                &format!("w{i}_{j}"),
                "write_file",
                json!({"file_path": format!("p{i}/{j}.txt"), "content": "x"}),
            )
        };
        let first_reject = verdicts.iter().position(|v| matches!(v, Verdict::Reject));
        if auto {
            for j in 0..n {
                h.fake().push(call(j));
            }
            h.fake().push(FakeReply::text("all written"));
        } else {
            h.fake().push(call(0));
        }
        let s = if auto { auto_s } else { manual_s };
        let (mut ev, run) = h.send(s, &format!("case {i}")).await;
        let mut all = Vec::new();
        if !auto {
            for (j, v) in verdicts.iter().enumerate() {
                let upto = ev
                    .until(|e| matches!(e.payload, EventPayload::HitlRequest(_)))
                    .await;
                let rid = hitl_request_id(&upto);
                all.extend(upto);
                let decision = match v {
                    Verdict::Approve => Decision::Approve { message: None },
                    Verdict::Edit => Decision::Edit {
                        args: json!({"file_path": format!("p{i}/edited.txt"), "content": "e"}),
                        message: None,
                    },
                    Verdict::Reject => Decision::Reject { message: None },
                };
                // What the model answers after this call ran.
                if !matches!(v, Verdict::Reject) {
                    h.fake().push(if j + 1 < n {
                        call(j + 1)
                    } else {
                        FakeReply::text("all written")
                    });
                }
                h.decide(s, rid, decision).await;
                if matches!(v, Verdict::Reject) {
                    break;
                }
            }
        }
        all.extend(ev.until_done(run).await);
        assert_well_formed(&all);
        let d = done(&all);
        let hitl = all
            .iter()
            .filter(|e| matches!(e.payload, EventPayload::HitlRequest(_)))
            .count();
        let ran = all.iter().filter(|e| matches!(&e.payload, EventPayload::ToolResult(r) if r.status == agentry_schema::events::ToolStatus::Success)).count();
        if auto {
            assert_eq!(hitl, 0, "{wire} case {i}");
            assert_eq!(ran, n, "{wire} case {i}");
            assert_eq!(
                (d.status, d.cancelled),
                (DoneStatus::Completed, false),
                "{wire} case {i}"
            );
        } else if let Some(k) = first_reject {
            assert_eq!(hitl, k + 1, "{wire} case {i}");
            assert_eq!(ran, k, "{wire} case {i}: calls before the reject ran");
            assert_eq!(
                (d.status, d.cancelled),
                (DoneStatus::Rejected, true),
                "{wire} case {i}"
            );
            assert_eq!(
                h.fake().pending(),
                0,
                "{wire}: no model call after a reject"
            );
        } else {
            assert_eq!((hitl, ran), (n, n), "{wire} case {i}");
            assert_eq!(
                (d.status, d.cancelled),
                (DoneStatus::Completed, false),
                "{wire} case {i}"
            );
        }
    }
    assert_each_wire_was_used(&hs);
}

/// After N tool calls the stored history holds all N requests and their results, in order.
#[actix_rt::test]
async fn history_holds_every_call_and_result_in_order() {
    let Some(hs) = both_wires(Options::default).await else {
        return;
    };
    for (i, n) in cases(0usize..6).into_iter().enumerate() {
        let (h, wire) = (&hs[i % 2], wire_name(i));
        let s = h.new_session(true).await;
        for j in 0..n {
            h.fake().push(FakeReply::tool_call(
                &format!("h{i}_{j}"),
                "write_todos",
                json!({"todos": [{"content": format!("item {i}.{j}"), "status": "pending"}]}),
            ));
        }
        h.fake().push(FakeReply::text("done"));
        let (mut ev, run) = h.send(&s, "go").await;
        ev.until_done(run).await;
        let msgs = messages::list(
            &h.db.db,
            &h.tenant.scope(),
            s.session.id,
            PageRequest::default(),
        )
        .await
        .unwrap();
        assert_eq!(msgs.len(), 2 + 2 * n, "{wire} case {i}");
        assert_eq!(msgs[0].role, MessageRole::User);
        for j in 0..n {
            let call = &msgs[1 + 2 * j];
            let result = &msgs[2 + 2 * j];
            assert_eq!(call.role, MessageRole::Assistant);
            assert_eq!(
                call.tool_calls.as_ref().unwrap()[0]["id"],
                format!("h{i}_{j}")
            );
            assert_eq!(result.role, MessageRole::Tool);
            assert_eq!(
                result.tool_call_id.as_deref(),
                Some(format!("h{i}_{j}").as_str())
            );
            assert!(
                result.content.contains(&format!("item {i}.{j}")),
                "{wire}: the result itself is stored: {}",
                result.content
            );
        }
        assert_eq!(msgs.last().unwrap().content, "done");
    }
    assert_each_wire_was_used(&hs);
}

/// No decision within `hitl_timeout` is a reject.
#[actix_rt::test]
async fn a_hitl_timeout_always_rejects() {
    let Some(hs) = both_wires(|| Options {
        hitl_timeout: Duration::from_millis(25),
        ..Options::default()
    })
    .await
    else {
        return;
    };
    let sessions = [
        hs[0].new_session(false).await,
        hs[1].new_session(false).await,
    ];
    for (i, path) in cases("[a-z]{1,8}\\.txt").into_iter().enumerate() {
        let (h, s, wire) = (&hs[i % 2], &sessions[i % 2], wire_name(i));
        h.fake().push(FakeReply::tool_call(
            &format!("t{i}"),
            "write_file",
            json!({"file_path": path, "content": "x"}),
        ));
        let (mut ev, run) = h.send(s, "write").await;
        let all = ev.until_done(run).await;
        let d = done(&all);
        assert_eq!(
            (d.status, d.cancelled, d.reason.as_deref()),
            (DoneStatus::Rejected, true, Some("hitl_timeout")),
            "{wire} case {i}"
        );
    }
    assert_each_wire_was_used(&hs);
}

/// Checkpoints round-trip through JSON and through every backend unchanged.
#[actix_rt::test]
async fn checkpoints_round_trip_through_the_store() {
    let todo_status = prop_oneof![
        Just(TodoStatus::Pending),
        Just(TodoStatus::InProgress),
        Just(TodoStatus::Completed)
    ];
    let node = prop_oneof![Just(RunState::Reason), Just(RunState::Act)];
    let strat = (
        0u32..1000,
        node,
        any::<i64>(),
        prop::collection::vec(("[a-z0-9_]{1,10}", "[a-z_]{1,12}", any::<i32>()), 0..4),
        prop::collection::vec((".{0,20}", todo_status), 0..4),
        (0u64..1 << 40, 0u64..1 << 40),
    );
    let all_cases = cases(strat);
    for backend in Backend::ALL {
        let Some(t) = agentry_store::testing::TestDb::open(backend).await else {
            continue;
        };
        let scope =
            agentry_store::PlatformScope::new().tenant(agentry_schema::ids::TenantId::new());
        for (i, (step, node, window_start, pending, todos, (inp, out))) in
            all_cases.iter().cloned().enumerate()
        {
            let cp = RunCheckpoint {
                version: CHECKPOINT_VERSION,
                step,
                node,
                window_start,
                pending: pending
                    .into_iter()
                    .map(|(id, name, n)| ToolCall {
                        id,
                        name,
                        arguments: json!({"n": n}),
                    })
                    .collect(),
                todos: todos
                    .into_iter()
                    .map(|(content, status)| Todo {
                        content: agentry_store::sanitize_text(content),
                        status,
                    })
                    .collect(),
                usage: TokenUsage::new(inp, out),
                // Every other case has a call in flight (the at-most-once marker).
                in_flight: (i % 2 == 0).then(|| agentry_actors::agent::InFlight {
                    call: ToolCall {
                        id: format!("call_{i}"),
                        name: "execute".into(),
                        arguments: json!({"command": "echo ünïcode", "n": i}),
                    },
                    args: json!({"command": "echo edited", "n": i}),
                    approved: Some(true),
                    approved_by: None,
                }),
                trace_parent: (i % 3 == 0)
                    .then(|| format!("00-4bf92f3577b34da6a3ce929d0e0e{i:04x}-00f067aa0ba902b7-01")),
                // A client's function tools round-trip too (a resumed run offers them again).
                client_tools: if i % 4 == 1 {
                    vec![agentry_schema::api::ClientTool {
                        name: format!("client_fn_{i}"),
                        description: "ünïcode".into(),
                        parameters: json!({"type": "object", "properties": {"n": {"type": "integer"}}}),
                    }]
                } else {
                    vec![]
                },
            };
            assert_eq!(RunCheckpoint::from_json(&cp.to_json()).unwrap(), cp);
            let run = agentry_schema::ids::RunId::new();
            checkpoints::save(
                &t.db,
                &scope,
                NewCheckpoint {
                    session_id: agentry_schema::ids::SessionId::new(),
                    execution_id: run,
                    step,
                    node: node.as_str().into(),
                    state: cp.to_json(),
                },
            )
            .await
            .unwrap();
            let back = checkpoints::latest(&t.db, &scope, run)
                .await
                .unwrap()
                .unwrap();
            assert_eq!(
                RunCheckpoint::from_json(&back.state).unwrap(),
                cp,
                "{} case {i}",
                backend.name()
            );
        }
    }
}

/// Under 100 concurrent requests, a quota never admits more than its limit (and admits
/// exactly the limit: `>=` semantics).
#[actix_rt::test]
async fn quotas_never_admit_more_than_the_limit_under_concurrency() {
    for (i, (runs, rpm)) in cases((1u32..40, 1u32..80)).into_iter().enumerate() {
        let quotas = Quotas {
            max_concurrent_runs: runs,
            requests_per_minute: rpm,
            tokens_per_day: 0,
            ..Quotas::default()
        };
        let q = QuotaActor::new(QuotaState::new(quotas, 0, chrono::Utc::now())).start();
        let acquired = futures::future::join_all((0..100).map(|_| q.send(AcquireRun))).await;
        let admitted = acquired.iter().filter(|r| matches!(r, Ok(Ok(())))).count();
        assert_eq!(
            admitted, runs as usize,
            "case {i}: max_concurrent_runs {runs}"
        );
        let rejected = acquired
            .iter()
            .find_map(|r| r.as_ref().ok().and_then(|r| r.err()))
            .unwrap();
        assert_eq!(rejected.quota, "max_concurrent_runs");
        let requests = futures::future::join_all((0..100).map(|_| q.send(AdmitRequest))).await;
        let admitted = requests.iter().filter(|r| matches!(r, Ok(Ok(())))).count();
        assert_eq!(
            admitted,
            (rpm as usize).min(100),
            "case {i}: requests_per_minute {rpm}"
        );
    }
}
