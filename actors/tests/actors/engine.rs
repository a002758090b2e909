//! The actor tree and the agent loop, end to end through the real model clients against the fake
//! model server (OpenAI and Anthropic wire formats), the real built-in tools and a real database.

use crate::support;

use std::time::{Duration, Instant};

use agentry_actors::EngineError;
use agentry_fake_model::FakeReply;
use agentry_schema::events::{DoneStatus, EventPayload, HitlKind, ToolStatus};
use agentry_schema::frames::Decision;
use agentry_schema::tenancy::Role;
use agentry_store::PageRequest;
use agentry_store::approvals::{self, ApprovalStatus};
use agentry_store::checkpoints;
use agentry_store::executions::{self, ExecutionStatus};
use agentry_store::messages::{self, MessageRole};
use agentry_store::testing::Backend;
use agentry_store::tool_calls;
use serde_json::json;
use support::*;

fn write_file(id: &str, path: &str, content: &str) -> FakeReply {
    FakeReply::tool_call(
        id,
        "write_file",
        json!({"file_path": path, "content": content}),
    )
}

/// The issue's "done when": a tool needing approval, approved, the full ordered stream ending in
/// one done, and every row in the database.
async fn approval_flow(backend: Backend, wire: Wire) {
    let Some(h) = Harness::new(backend, wire).await else {
        return;
    };
    h.fake()
        .push(write_file("call_1", "notes/hello.txt", "hello world\n"));
    h.fake().push(FakeReply::text("I wrote the file."));
    let s = h.new_session(false).await;
    let (mut ev, run) = h.send(&s, "please write a file").await;

    let upto = ev
        .until(|e| matches!(e.payload, EventPayload::HitlRequest(_)))
        .await;
    assert_eq!(types(&upto), vec!["tool_call", "hitl_request"]);
    let EventPayload::HitlRequest(req) = &upto[1].payload else {
        unreachable!()
    };
    assert_eq!(req.kind, HitlKind::Approval);
    assert_eq!(req.action_requests[0].name, "write_file");
    assert_eq!(
        req.action_requests[0].tool_call_id.as_deref(),
        Some("call_1")
    );
    let request_id = hitl_request_id(&upto);
    // The run waits: the file is not there yet.
    let file = h
        .data_dir
        .path()
        .join("workspaces")
        .join(h.tenant.id.to_string())
        .join(h.user.user_id.to_string())
        .join("notes/hello.txt");
    assert!(!file.exists());
    let exec = executions::get(&h.db.db, &h.tenant.scope(), run)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(exec.status, ExecutionStatus::WaitingApproval);

    h.decide(&s, request_id, Decision::Approve { message: None })
        .await;
    let rest = ev.until_done(run).await;
    let all: Vec<_> = upto.into_iter().chain(rest).collect();
    assert_well_formed(&all);
    let t = types(&all);
    assert_eq!(
        &t[..4],
        &["tool_call", "hitl_request", "tool_result", "file_operation"],
        "{t:?}"
    );
    assert!(t.contains(&"text"));
    let d = done(&all);
    assert_eq!((d.status, d.cancelled), (DoneStatus::Completed, false));
    assert!(d.token_usage.total > 0);
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "hello world\n");
    let final_text = final_text(&all);
    assert_eq!(final_text.as_deref(), Some("I wrote the file."));

    // The database tells the same story.
    let scope = h.tenant.scope();
    let msgs = messages::list(&h.db.db, &scope, s.session.id, PageRequest::default())
        .await
        .unwrap();
    assert_eq!(
        msgs.iter().map(|m| m.role).collect::<Vec<_>>(),
        vec![
            MessageRole::User,
            MessageRole::Assistant,
            MessageRole::Tool,
            MessageRole::Assistant
        ]
    );
    assert_eq!(msgs[0].content, "please write a file");
    assert_eq!(msgs[2].tool_call_id.as_deref(), Some("call_1"));
    let exec = executions::get(&h.db.db, &scope, run)
        .await
        .unwrap()
        .unwrap();
    assert_eq!((exec.status, exec.steps), (ExecutionStatus::Completed, 2));
    assert_eq!(exec.token_usage, d.token_usage);
    let appr = approvals::get(&h.db.db, &scope, request_id)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        (appr.status, appr.decided_by),
        (ApprovalStatus::Approved, Some(h.user.user_id))
    );
    let audit = tool_calls::list_by_execution(&h.db.db, &scope, run)
        .await
        .unwrap();
    assert_eq!(audit.len(), 1);
    assert_eq!(
        (
            audit[0].tool_name.as_str(),
            audit[0].approved,
            audit[0].approved_by
        ),
        ("write_file", Some(true), Some(h.user.user_id))
    );
    assert!(
        !checkpoints::list(&h.db.db, &scope, run)
            .await
            .unwrap()
            .is_empty()
    );

    // The model received the tool result the second time round, on the right wire format.
    let reqs = h.fake().requests();
    assert_eq!(reqs.len(), 2);
    let body = reqs[1].body.to_string();
    assert!(body.contains("call_1"), "{body}");
}

#[actix_rt::test]
async fn approval_flow_openai_sqlite() {
    approval_flow(Backend::Sqlite, Wire::OpenAi).await;
}

#[actix_rt::test]
async fn approval_flow_anthropic_sqlite() {
    approval_flow(Backend::Sqlite, Wire::Anthropic).await;
}

#[actix_rt::test]
async fn approval_flow_openai_postgres() {
    approval_flow(Backend::Postgres, Wire::OpenAi).await;
}

#[actix_rt::test]
async fn approval_flow_anthropic_postgres() {
    approval_flow(Backend::Postgres, Wire::Anthropic).await;
}

#[actix_rt::test]
async fn approval_flow_anthropic_mysql() {
    approval_flow(Backend::MySql, Wire::Anthropic).await;
}

/// The same flow with the scripted default model and no network at all.
#[actix_rt::test]
async fn scripted_model_runs_the_same_flow_offline() {
    let Some(h) = Harness::new(Backend::Sqlite, Wire::Scripted).await else {
        return;
    };
    let s = h.new_session(false).await;
    let (mut ev, run) = h
        .send(
            &s,
            r#"/tool write_file {"file_path": "a.txt", "content": "x"}"#,
        )
        .await;
    let upto = ev
        .until(|e| matches!(e.payload, EventPayload::HitlRequest(_)))
        .await;
    h.decide(
        &s,
        hitl_request_id(&upto),
        Decision::Approve { message: None },
    )
    .await;
    let all: Vec<_> = upto.into_iter().chain(ev.until_done(run).await).collect();
    assert_well_formed(&all);
    assert_eq!(done(&all).status, DoneStatus::Completed);
    let summary = final_text(&all);
    assert!(
        summary.unwrap().contains("write_file"),
        "the scripted model summarises the tool result"
    );
}

#[actix_rt::test]
async fn reject_ends_the_run_cancelled_and_rejected() {
    let Some(h) = Harness::new(Backend::Sqlite, Wire::OpenAi).await else {
        return;
    };
    h.fake().push(write_file("c1", "x.txt", "nope"));
    let s = h.new_session(false).await;
    let (mut ev, run) = h.send(&s, "write it").await;
    let upto = ev
        .until(|e| matches!(e.payload, EventPayload::HitlRequest(_)))
        .await;
    let rid = hitl_request_id(&upto);
    h.decide(
        &s,
        rid,
        Decision::Reject {
            message: Some("not now".into()),
        },
    )
    .await;
    let all: Vec<_> = upto.into_iter().chain(ev.until_done(run).await).collect();
    assert_well_formed(&all);
    let d = done(&all);
    assert_eq!(
        (d.status, d.cancelled, d.reason.as_deref()),
        (DoneStatus::Rejected, true, Some("rejected"))
    );
    let scope = h.tenant.scope();
    assert_eq!(
        executions::get(&h.db.db, &scope, run)
            .await
            .unwrap()
            .unwrap()
            .status,
        ExecutionStatus::Rejected
    );
    assert_eq!(
        approvals::get(&h.db.db, &scope, rid)
            .await
            .unwrap()
            .unwrap()
            .status,
        ApprovalStatus::Rejected
    );
    assert_eq!(h.fake().requests().len(), 1, "no model call after a reject");
    // A second decision is refused: the first one won.
    let again = h
        .engine
        .decide(
            &h.tenant,
            &h.user,
            s.session.id,
            rid,
            Decision::Approve { message: None },
        )
        .await;
    assert!(
        matches!(again, Err(EngineError::ApprovalNotPending(_))),
        "{again:?}"
    );
    // The conversation stays valid: the next run works and sees the rejection.
    h.fake().push(FakeReply::text("ok"));
    let (mut ev, run2) = h.send(&s, "fine").await;
    assert_eq!(
        done(&ev.until_done(run2).await).status,
        DoneStatus::Completed
    );
}

#[actix_rt::test]
async fn edit_runs_the_tool_with_the_new_arguments() {
    let Some(h) = Harness::new(Backend::Sqlite, Wire::OpenAi).await else {
        return;
    };
    h.fake().push(write_file("c1", "a.txt", "original"));
    h.fake().push(FakeReply::text("done"));
    let s = h.new_session(false).await;
    let (mut ev, run) = h.send(&s, "write").await;
    let upto = ev
        .until(|e| matches!(e.payload, EventPayload::HitlRequest(_)))
        .await;
    h.decide(
        &s,
        hitl_request_id(&upto),
        Decision::Edit {
            args: json!({"file_path": "b.txt", "content": "edited"}),
            message: None,
        },
    )
    .await;
    let all = ev.until_done(run).await;
    assert_eq!(done(&all).status, DoneStatus::Completed);
    let ws = h
        .data_dir
        .path()
        .join("workspaces")
        .join(h.tenant.id.to_string())
        .join(h.user.user_id.to_string());
    assert_eq!(std::fs::read_to_string(ws.join("b.txt")).unwrap(), "edited");
    assert!(!ws.join("a.txt").exists());
    let audit = tool_calls::list_by_execution(&h.db.db, &h.tenant.scope(), run)
        .await
        .unwrap();
    assert_eq!(audit[0].input["file_path"], "b.txt");
}

#[actix_rt::test]
async fn an_approval_that_times_out_is_a_reject() {
    let Some(h) = Harness::with(
        Backend::Sqlite,
        Wire::OpenAi,
        Options {
            hitl_timeout: Duration::from_millis(300),
            ..Options::default()
        },
    )
    .await
    else {
        return;
    };
    h.fake().push(write_file("c1", "a.txt", "x"));
    let s = h.new_session(false).await;
    let (mut ev, run) = h.send(&s, "write").await;
    let all = ev.until_done(run).await;
    assert_well_formed(&all);
    let d = done(&all);
    assert_eq!(
        (d.status, d.cancelled, d.reason.as_deref()),
        (DoneStatus::Rejected, true, Some("hitl_timeout"))
    );
    let rid = hitl_request_id(&all);
    assert_eq!(
        approvals::get(&h.db.db, &h.tenant.scope(), rid)
            .await
            .unwrap()
            .unwrap()
            .status,
        ApprovalStatus::TimedOut
    );
}

#[actix_rt::test]
async fn auto_approve_runs_tools_without_asking() {
    let Some(h) = Harness::new(Backend::Sqlite, Wire::Anthropic).await else {
        return;
    };
    h.fake().push(write_file("c1", "a.txt", "x"));
    h.fake().push(write_file("c2", "b.txt", "y"));
    h.fake().push(FakeReply::text("both written"));
    let s = h.new_session(true).await;
    let (mut ev, run) = h.send(&s, "write two").await;
    let all = ev.until_done(run).await;
    assert_well_formed(&all);
    assert!(!types(&all).contains(&"hitl_request"), "{:?}", types(&all));
    assert_eq!(
        types(&all).iter().filter(|t| **t == "tool_result").count(),
        2
    );
    assert_eq!(done(&all).status, DoneStatus::Completed);
    let audit = tool_calls::list_by_execution(&h.db.db, &h.tenant.scope(), run)
        .await
        .unwrap();
    assert!(audit.iter().all(|a| a.approved.is_none()));
}

#[actix_rt::test]
async fn a_member_may_not_switch_approvals_off_without_the_tenant_policy() {
    let Some(h) = Harness::new(Backend::Sqlite, Wire::OpenAi).await else {
        return;
    };
    let strict = agentry_store::tenants::Tenant {
        policy: Default::default(),
        ..h.tenant.clone()
    };
    let refused = h
        .engine
        .create_session(
            &strict,
            &h.user,
            agentry_actors::CreateSession {
                auto_approve: Some(true),
                ..Default::default()
            },
        )
        .await;
    assert!(
        matches!(&refused, Err(agentry_actors::EngineError::Forbidden(m)) if m.contains("members_may_auto_approve")),
        "{:?}",
        refused.map(|s| s.id)
    );
    let ok = h
        .engine
        .create_session(
            &strict,
            &h.user,
            agentry_actors::CreateSession {
                auto_approve: Some(false),
                ..Default::default()
            },
        )
        .await;
    assert!(ok.is_ok_and(|s| !s.auto_approve));
}

#[actix_rt::test]
async fn model_errors_become_error_events_and_a_failed_done() {
    let Some(h) = Harness::new(Backend::Sqlite, Wire::OpenAi).await else {
        return;
    };
    h.fake()
        .push(FakeReply::error(400, "the model does not exist"));
    let s = h.new_session(false).await;
    let (mut ev, run) = h.send(&s, "hi").await;
    let all = ev.until_done(run).await;
    assert_well_formed(&all);
    let err = errors(&all).first().cloned();
    let err = err.expect("an error event");
    assert_eq!(err.error_code, "model_error");
    assert!(!err.recoverable);
    assert!(
        err.error.contains("the model does not exist"),
        "{}",
        err.error
    );
    assert_eq!(done(&all).status, DoneStatus::Failed);
    let exec = executions::get(&h.db.db, &h.tenant.scope(), run)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(exec.status, ExecutionStatus::Failed);
    assert!(exec.error.unwrap().contains("does not exist"));
}

#[actix_rt::test]
async fn a_broken_stream_is_retried_with_a_recoverable_error() {
    let Some(h) = Harness::new(Backend::Sqlite, Wire::OpenAi).await else {
        return;
    };
    h.fake()
        .push(FakeReply::broken("this answer breaks off", 2));
    h.fake().push(FakeReply::text("second try works"));
    let s = h.new_session(false).await;
    let (mut ev, run) = h.send(&s, "hi").await;
    let all = ev.until_done(run).await;
    assert_well_formed(&all);
    let errs: Vec<_> = all
        .iter()
        .filter_map(|e| match &e.payload {
            EventPayload::Error(x) => Some(x.recoverable),
            _ => None,
        })
        .collect();
    assert_eq!(errs, vec![true]);
    assert_eq!(done(&all).status, DoneStatus::Completed);
}

#[actix_rt::test]
async fn tool_errors_go_back_to_the_model_not_the_run() {
    let Some(h) = Harness::new(Backend::Sqlite, Wire::OpenAi).await else {
        return;
    };
    // Unknown tool, invalid arguments, and a jail escape: all become error results.
    h.fake()
        .push(FakeReply::tool_call("c1", "no_such_tool", json!({})));
    h.fake().push(FakeReply::tool_call(
        "c2",
        "read_file",
        json!({"file_path": 42}),
    ));
    h.fake().push(FakeReply::tool_call(
        "c3",
        "read_file",
        json!({"file_path": "../../etc/passwd"}),
    ));
    h.fake().push(FakeReply::text("I could not do it"));
    let s = h.new_session(false).await;
    let (mut ev, run) = h.send(&s, "try things").await;
    let all = ev.until_done(run).await;
    assert_well_formed(&all);
    let results: Vec<_> = all
        .iter()
        .filter_map(|e| match &e.payload {
            EventPayload::ToolResult(r) => Some(r.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(results.len(), 3);
    assert!(results.iter().all(|r| r.status == ToolStatus::Error));
    assert_eq!(results[0].result["error"]["code"], "not_found");
    assert_eq!(results[1].result["error"]["code"], "validation_error");
    assert_eq!(
        results[1].result["error"]["details"]["violations"][0]["path"],
        "/file_path"
    );
    // Each failed call is also a recoverable `error` event right after its `tool_result`,
    // carrying the tool error's code.
    for (id, code) in [
        ("c1", "not_found"),
        ("c2", "validation_error"),
        ("c3", "permission_denied"),
    ] {
        let at = all
            .iter()
            .position(|e| matches!(&e.payload, EventPayload::ToolResult(r) if r.tool_call_id == id))
            .unwrap();
        let EventPayload::Error(err) = &all[at + 1].payload else {
            panic!("no error event after the result of {id}: {:?}", types(&all));
        };
        assert_eq!(err.error_code, code, "{id}");
        assert!(err.recoverable, "{id}");
        assert!(err.error.contains(id), "{}", err.error);
    }
    assert_eq!(errors(&all).len(), 3);
    assert_eq!(done(&all).status, DoneStatus::Completed);
    let audit = tool_calls::list_by_execution(&h.db.db, &h.tenant.scope(), run)
        .await
        .unwrap();
    assert_eq!(audit.len(), 3);
    assert!(audit.iter().all(|a| a.error.is_some()));
    // The model saw each error.
    let last = h.fake().requests().last().unwrap().body.to_string();
    assert!(
        last.contains("validation_error") && last.contains("not_found"),
        "{last}"
    );
}

#[actix_rt::test]
async fn cancel_lands_done_within_a_second() {
    let Some(h) = Harness::new(Backend::Sqlite, Wire::OpenAi).await else {
        return;
    };
    // A slow stream: 50 chunks, 100 ms apart.
    h.fake().push(
        FakeReply::text(&"word ".repeat(50))
            .in_chunks(50)
            .with_chunk_delay(Duration::from_millis(100)),
    );
    let s = h.new_session(false).await;
    let (mut ev, run) = h.send(&s, "talk slowly").await;
    ev.until(|e| matches!(e.payload, EventPayload::Text(_)))
        .await;
    let t0 = Instant::now();
    let cancelled = h
        .engine
        .cancel(&h.tenant, &h.user, s.session.id)
        .await
        .unwrap();
    assert_eq!(cancelled, run);
    let rest = ev.until_done(run).await;
    let elapsed = t0.elapsed();
    assert!(elapsed < Duration::from_secs(1), "cancel took {elapsed:?}");
    let d = done(&rest);
    assert_eq!(
        (d.status, d.cancelled, d.reason.as_deref()),
        (DoneStatus::Cancelled, true, Some("user_cancelled"))
    );
    assert_eq!(
        executions::get(&h.db.db, &h.tenant.scope(), run)
            .await
            .unwrap()
            .unwrap()
            .status,
        ExecutionStatus::Cancelled
    );
    // Nothing more arrives for that run, and the session is free again.
    assert!(
        tokio::time::timeout(Duration::from_millis(300), ev.rx.recv())
            .await
            .is_err()
    );
    let again = h.engine.cancel(&h.tenant, &h.user, s.session.id).await;
    assert!(matches!(again, Err(EngineError::NoActiveRun)));
}

#[actix_rt::test]
async fn cancel_while_waiting_for_approval_or_in_a_tool() {
    let Some(h) = Harness::with(
        Backend::Sqlite,
        Wire::OpenAi,
        Options {
            extra_tools: vec![Sleepy::new()],
            ..Options::default()
        },
    )
    .await
    else {
        return;
    };
    // Waiting for approval.
    h.fake().push(write_file("c1", "a.txt", "x"));
    let s = h.new_session(false).await;
    let (mut ev, run) = h.send(&s, "write").await;
    let upto = ev
        .until(|e| matches!(e.payload, EventPayload::HitlRequest(_)))
        .await;
    let rid = hitl_request_id(&upto);
    h.engine
        .cancel(&h.tenant, &h.user, s.session.id)
        .await
        .unwrap();
    let d = done(&ev.until_done(run).await);
    assert_eq!(d.status, DoneStatus::Cancelled);
    let appr = approvals::get(&h.db.db, &h.tenant.scope(), rid)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(appr.status, ApprovalStatus::Cancelled);
    // Inside a slow tool.
    h.fake()
        .push(FakeReply::tool_call("c2", "sleepy", json!({"ms": 30_000})));
    let (mut ev, run) = h.send(&s, "sleep").await;
    ev.until(|e| matches!(e.payload, EventPayload::ToolCall(_)))
        .await;
    let t0 = Instant::now();
    h.engine
        .cancel(&h.tenant, &h.user, s.session.id)
        .await
        .unwrap();
    let d = done(&ev.until_done(run).await);
    assert!(t0.elapsed() < Duration::from_secs(1));
    assert_eq!(d.status, DoneStatus::Cancelled);
}

#[actix_rt::test]
async fn a_chat_during_a_run_is_refused_unless_enqueued() {
    let Some(h) = Harness::new(Backend::Sqlite, Wire::OpenAi).await else {
        return;
    };
    h.fake()
        .push(FakeReply::text("slow answer").with_latency(Duration::from_millis(500)));
    h.fake().push(FakeReply::text("queued answer"));
    let s = h.new_session(false).await;
    let (mut ev, run1) = h.send(&s, "first").await;
    let refused = h
        .engine
        .start_chat(&s, &h.user, "second".into(), false)
        .await;
    assert!(
        matches!(refused, Err(EngineError::RunInProgress)),
        "{refused:?}"
    );
    let queued = h
        .engine
        .start_chat(&s, &h.user, "second".into(), true)
        .await
        .unwrap();
    assert!(queued.queued);
    assert_eq!(
        done(&ev.until_done(run1).await).status,
        DoneStatus::Completed
    );
    let second = ev.until_done(queued.run_id).await;
    assert_eq!(done(&second).status, DoneStatus::Completed);
    let msgs = messages::list(
        &h.db.db,
        &h.tenant.scope(),
        s.session.id,
        PageRequest::default(),
    )
    .await
    .unwrap();
    let contents: Vec<_> = msgs.iter().map(|m| m.content.as_str()).collect();
    assert_eq!(
        contents,
        vec!["first", "slow answer", "second", "queued answer"]
    );
}

#[actix_rt::test]
async fn questions_from_tools_become_hitl_questions_answered_with_text() {
    let Some(h) = Harness::new(Backend::Sqlite, Wire::OpenAi).await else {
        return;
    };
    h.fake().push(FakeReply::tool_call(
        "q1",
        "ask_question",
        json!({"question": "Which colour?", "question_type": "choice", "options": ["red", "blue"]}),
    ));
    h.fake().push(FakeReply::text("Blue it is."));
    let s = h.new_session(false).await;
    let (mut ev, run) = h.send(&s, "pick a colour with me").await;
    let upto = ev
        .until(|e| matches!(e.payload, EventPayload::HitlRequest(_)))
        .await;
    let EventPayload::HitlRequest(req) = &upto.last().unwrap().payload else {
        unreachable!()
    };
    assert_eq!(req.kind, HitlKind::Question);
    let q = req.question.clone().unwrap();
    assert_eq!(q.text, "Which colour?");
    assert_eq!(q.options, vec!["red", "blue"]);
    // An approval-style decision is refused for a question; the answer works.
    let rid = hitl_request_id(&upto);
    let wrong = h
        .engine
        .decide(
            &h.tenant,
            &h.user,
            s.session.id,
            rid,
            Decision::Approve { message: None },
        )
        .await;
    assert!(
        matches!(wrong, Err(EngineError::BadRequest(_))),
        "{wrong:?}"
    );
    h.decide(
        &s,
        rid,
        Decision::Answer {
            answer: json!("blue"),
        },
    )
    .await;
    let all = ev.until_done(run).await;
    let result = tool_results(&all).first().map(|r| r.result.clone());
    assert!(result.unwrap().to_string().contains("blue"));
    assert_eq!(done(&all).status, DoneStatus::Completed);
    assert_eq!(
        approvals::get(&h.db.db, &h.tenant.scope(), rid)
            .await
            .unwrap()
            .unwrap()
            .status,
        ApprovalStatus::Answered
    );
}

#[actix_rt::test]
async fn write_todos_emits_todo_update() {
    let Some(h) = Harness::new(Backend::Sqlite, Wire::Anthropic).await else {
        return;
    };
    h.fake().push(FakeReply::tool_call("t1", "write_todos", json!({"todos": [{"content": "plan", "status": "completed"}, {"content": "build", "status": "in_progress"}]})));
    h.fake().push(FakeReply::text("planned"));
    let s = h.new_session(false).await;
    let (mut ev, run) = h.send(&s, "plan it").await;
    let all = ev.until_done(run).await;
    let todos = all.iter().find_map(|e| match &e.payload {
        EventPayload::TodoUpdate(t) => Some(t.todos.clone()),
        _ => None,
    });
    let todos = todos.expect("todo_update");
    assert_eq!(todos.len(), 2);
    assert_eq!(todos[1].content, "build");
    // The model sees the list in its system prompt on the next call.
    let sys = h.fake().requests().last().unwrap().body["system"].to_string();
    assert!(sys.contains("build"), "{sys}");
}

#[actix_rt::test]
async fn recursion_limit_stops_a_looping_model() {
    let Some(h) = Harness::new(Backend::Sqlite, Wire::OpenAi).await else {
        return;
    };
    set_default_assistant(
        &h,
        agentry_store::assistants::AssistantSpec {
            recursion_limit: Some(3),
            ..Default::default()
        },
    )
    .await;
    for i in 0..5 {
        h.fake().push(FakeReply::tool_call(
            &format!("c{i}"),
            "get_system_stats",
            json!({}),
        ));
    }
    let s = h.new_session(false).await;
    let (mut ev, run) = h.send(&s, "loop").await;
    let all = ev.until_done(run).await;
    assert_well_formed(&all);
    assert_eq!(types(&all).iter().filter(|t| **t == "tool_call").count(), 3);
    let d = done(&all);
    assert_eq!(
        (d.status, d.reason.as_deref()),
        (DoneStatus::Failed, Some("recursion_limit"))
    );
}

#[actix_rt::test]
async fn a_run_whose_loop_panics_resumes_from_its_checkpoint() {
    let flaky = Flaky::new(1);
    let Some(h) = Harness::with(
        Backend::Sqlite,
        Wire::OpenAi,
        Options {
            extra_tools: vec![flaky.clone()],
            ..Options::default()
        },
    )
    .await
    else {
        return;
    };
    h.fake()
        .push(FakeReply::tool_call("f1", "flaky", json!({})));
    h.fake().push(FakeReply::text("recovered"));
    let s = h.new_session(false).await;
    let (mut ev, run) = h.send(&s, "go").await;
    let all = ev.until_done(run).await;
    assert_well_formed(&all);
    let errs: Vec<_> = all
        .iter()
        .filter_map(|e| match &e.payload {
            EventPayload::Error(x) => Some((x.recoverable, x.error.clone())),
            _ => None,
        })
        .collect();
    assert_eq!(errs.len(), 2, "{errs:?}");
    assert!(errs[0].0 && errs[0].1.contains("resuming"), "{errs:?}");
    assert!(errs[1].0 && errs[1].1.contains("interrupted"), "{errs:?}");
    assert_eq!(done(&all).status, DoneStatus::Completed);
    // At most once: the call that was running when the loop crashed is not run again; the
    // model gets an `interrupted` result and decides.
    assert_eq!(
        flaky.calls.load(std::sync::atomic::Ordering::SeqCst),
        1,
        "the interrupted call ran again after the restart"
    );
    let results: Vec<_> = all
        .iter()
        .filter_map(|e| match &e.payload {
            EventPayload::ToolResult(r) => Some(r.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(results.len(), 1, "{results:?}");
    assert_eq!(results[0].status, ToolStatus::Error);
    assert_eq!(results[0].result["error"]["code"], "interrupted");
    // The model was called only twice: the resume continued at the tool, not from scratch,
    // and its second request carries the interrupted result.
    let reqs = h.fake().requests();
    assert_eq!(reqs.len(), 2);
    assert!(
        reqs[1].raw_body.contains("its outcome is unknown"),
        "{}",
        reqs[1].raw_body
    );
    let audit = tool_calls::list_by_execution(&h.db.db, &h.tenant.scope(), run)
        .await
        .unwrap();
    assert_eq!(audit.len(), 1, "{audit:?}");
    assert!(
        audit[0]
            .error
            .as_deref()
            .is_some_and(|e| e.starts_with("interrupted")),
        "{audit:?}"
    );
}

#[actix_rt::test]
async fn a_loop_that_keeps_panicking_fails_with_one_done() {
    let Some(h) = Harness::with(
        Backend::Sqlite,
        Wire::OpenAi,
        Options {
            extra_tools: vec![Flaky::new(100)],
            ..Options::default()
        },
    )
    .await
    else {
        return;
    };
    for _ in 0..5 {
        h.fake()
            .push(FakeReply::tool_call("f1", "flaky", json!({})));
    }
    let s = h.new_session(false).await;
    let (mut ev, run) = h.send(&s, "go").await;
    let all = ev.until_done(run).await;
    assert_well_formed(&all);
    assert_eq!(done(&all).status, DoneStatus::Failed);
    let last_err = all.iter().rev().find_map(|e| match &e.payload {
        EventPayload::Error(x) => Some(x.recoverable),
        _ => None,
    });
    assert_eq!(last_err, Some(false));
}

#[actix_rt::test]
async fn resume_replays_what_a_subscriber_missed() {
    let Some(h) = Harness::new(Backend::Sqlite, Wire::OpenAi).await else {
        return;
    };
    h.fake()
        .push(FakeReply::text("one two three four five six").in_chunks(6));
    let s = h.new_session(false).await;
    let (mut ev, run) = h.send(&s, "count").await;
    let all = ev.until_done(run).await;
    // A late subscriber resuming after the 2nd event gets exactly the rest, in order.
    let after = all[1].seq;
    let (to, rx) = agentry_actors::channel_subscriber();
    h.engine.subscribe(&s, Some(after), to).await.unwrap();
    let mut late = Events { rx };
    let replayed = late.until_done(run).await;
    assert_eq!(replayed, all[2..].to_vec());
}

#[actix_rt::test]
async fn replay_reaches_into_the_store_after_the_actor_restarts() {
    let Some(h) = Harness::with(
        Backend::Sqlite,
        Wire::OpenAi,
        Options {
            session_timeout: Duration::from_millis(300),
            ..Options::default()
        },
    )
    .await
    else {
        return;
    };
    h.fake()
        .push(FakeReply::text("alpha beta gamma").in_chunks(3));
    let s = h.new_session(false).await;
    let (mut ev, run) = {
        let (to, rx) = agentry_actors::channel_subscriber();
        h.engine.subscribe(&s, None, to).await.unwrap();
        let acc = h
            .engine
            .start_chat(&s, &h.user, "hi".into(), false)
            .await
            .unwrap();
        (Events { rx }, acc.run_id)
    };
    let all = ev.until_done(run).await;
    // Nobody watches or holds the session: the idle actor stops; a new one serves the replay
    // from the store, seq continuing.
    drop(ev);
    let (old_addr, session_id) = (s.addr.clone(), s.session.id);
    drop(s);
    tokio::time::sleep(Duration::from_millis(1200)).await;
    let reopened = h
        .engine
        .open_session(&h.tenant, &h.user, session_id)
        .await
        .unwrap();
    assert!(!reopened.addr.eq(&old_addr), "a fresh actor");
    let (to, rx) = agentry_actors::channel_subscriber();
    h.engine.subscribe(&reopened, Some(0), to).await.unwrap();
    let mut replay = Events { rx };
    let got = replay.until_done(run).await;
    assert_eq!(got, all);
    h.fake().push(FakeReply::text("again"));
    let acc = h
        .engine
        .start_chat(&reopened, &h.user, "more".into(), false)
        .await
        .unwrap();
    let next = replay.until_done(acc.run_id).await;
    assert_eq!(
        next[0].seq,
        all.last().unwrap().seq + 1,
        "seq continues after a restart"
    );
}

#[actix_rt::test]
async fn members_cannot_reach_other_users_sessions() {
    let Some(h) = Harness::new(Backend::Sqlite, Wire::OpenAi).await else {
        return;
    };
    let s = h.new_session(false).await;
    let bob = agentry_store::users::create(&h.db.db, &h.tenant.scope(), "bob", Role::Member)
        .await
        .unwrap();
    let bob = agentry_store::UserScope {
        tenant: h.tenant.scope(),
        user_id: bob.id,
        role: Role::Member,
        custom_role: None,
    };
    let r = h.engine.open_session(&h.tenant, &bob, s.session.id).await;
    assert!(matches!(r, Err(EngineError::NotFound(_))));
    let admin = agentry_store::UserScope {
        role: Role::Admin,
        custom_role: None,
        ..bob
    };
    assert!(
        h.engine
            .open_session(&h.tenant, &admin, s.session.id)
            .await
            .is_ok()
    );
}

/// Crash recovery at start-up: a run left `running` with a checkpoint resumes from it; one
/// without a checkpoint (it stopped before its first step was recorded, so no tool of it ran)
/// starts again from its stored conversation; one whose checkpoint cannot be read is marked
/// interrupted with a `done` any subscriber can replay.
#[actix_rt::test]
async fn startup_recovery_resumes_or_interrupts_unfinished_runs() {
    use agentry_actors::agent::{CHECKPOINT_VERSION, RunCheckpoint, RunState};
    use agentry_schema::ids::RunId;
    use agentry_store::checkpoints::NewCheckpoint;
    use agentry_store::executions::NewExecution;
    use agentry_store::messages::NewMessage;
    let Some(h) = Harness::new(Backend::Sqlite, Wire::OpenAi).await else {
        return;
    };
    let scope = h.tenant.scope();
    let mk = |auto| {
        h.engine.create_session(
            &h.tenant,
            &h.user,
            agentry_actors::CreateSession {
                auto_approve: Some(auto),
                ..Default::default()
            },
        )
    };
    let (with_cp, without_cp, unreadable) = (
        mk(true).await.unwrap(),
        mk(true).await.unwrap(),
        mk(true).await.unwrap(),
    );
    // What a crashed process leaves behind: the user message, a running execution, and (for
    // two of them) a checkpoint about to call the model, one of a version this server does
    // not know.
    let mut runs = Vec::new();
    for s in [&with_cp, &without_cp, &unreadable] {
        let run = RunId::new();
        executions::create(
            &h.db.db,
            &scope,
            NewExecution {
                id: run,
                user_id: h.user.user_id,
                session_id: s.id,
                assistant_id: "default".into(),
                input: "hello".into(),
                trace_id: None,
                status: ExecutionStatus::Running,
                role: None,
            },
        )
        .await
        .unwrap();
        let m = messages::save(&h.db.db, &scope, s.id, NewMessage::user("hello", Some(run)))
            .await
            .unwrap();
        runs.push((run, m.id));
    }
    let cp = RunCheckpoint {
        version: CHECKPOINT_VERSION,
        step: 0,
        node: RunState::Reason,
        window_start: runs[0].1,
        pending: vec![],
        todos: vec![],
        usage: Default::default(),
        in_flight: None,
        trace_parent: None,
        client_tools: vec![],
    };
    let mut future = cp.to_json();
    future["version"] = serde_json::json!(CHECKPOINT_VERSION + 1);
    for (s, run, state) in [
        (&with_cp, runs[0].0, cp.to_json()),
        (&unreadable, runs[2].0, future),
    ] {
        checkpoints::save(
            &h.db.db,
            &scope,
            NewCheckpoint {
                session_id: s.id,
                execution_id: run,
                step: 0,
                node: "reason".into(),
                state,
            },
        )
        .await
        .unwrap();
    }
    h.fake().push(FakeReply::text("resumed answer"));
    h.fake().push(FakeReply::text("resumed answer"));

    let picked = h.engine.recover().await.unwrap();
    assert_eq!(picked, 3);
    for (s, (run, _), status) in [
        (&with_cp, runs[0], DoneStatus::Completed),
        (&without_cp, runs[1], DoneStatus::Completed),
        (&unreadable, runs[2], DoneStatus::Interrupted),
    ] {
        let handle = h
            .engine
            .open_session(&h.tenant, &h.user, s.id)
            .await
            .unwrap();
        let (to, rx) = agentry_actors::channel_subscriber();
        h.engine.subscribe(&handle, Some(0), to).await.unwrap();
        let all = Events { rx }.until_done(run).await;
        assert_well_formed(&all);
        assert_eq!(done(&all).status, status);
        let first_err = all.iter().find_map(|e| match &e.payload {
            EventPayload::Error(x) => Some(x.recoverable),
            _ => None,
        });
        assert_eq!(
            first_err,
            Some(status == DoneStatus::Completed),
            "resume is announced as recoverable, interruption not"
        );
        let expected = if status == DoneStatus::Completed {
            ExecutionStatus::Completed
        } else {
            ExecutionStatus::Interrupted
        };
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            let st = executions::get(&h.db.db, &scope, run)
                .await
                .unwrap()
                .unwrap()
                .status;
            if st == expected || Instant::now() > deadline {
                assert_eq!(st, expected);
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

/// `remember` stores a memory of the user; the next run's system prompt carries it; `recall`
/// finds it; another user of the same tenant never sees it (seed property 54).
#[actix_rt::test]
async fn memories_are_remembered_recalled_and_private_to_their_user() {
    let Some(h) = Harness::with(
        Backend::Sqlite,
        Wire::OpenAi,
        Options {
            platform_tools: true,
            ..Options::default()
        },
    )
    .await
    else {
        return;
    };
    h.fake().push(FakeReply::tool_call(
        "m1",
        "remember",
        json!({"content": "prefers answers in French", "kind": "preference"}),
    ));
    h.fake().push(FakeReply::text("noted"));
    let s = h.new_session(true).await;
    let (mut ev, run) = h.send(&s, "remember that I prefer French").await;
    assert_eq!(
        done(&ev.until_done(run).await).status,
        DoneStatus::Completed
    );

    h.fake().push(FakeReply::tool_call(
        "m2",
        "recall",
        json!({"query": "french"}),
    ));
    h.fake().push(FakeReply::text("you prefer French"));
    let (mut ev, run) = h.send(&s, "what do I prefer?").await;
    let all = ev.until_done(run).await;
    let recalled = tool_results(&all).first().map(|r| r.result.clone());
    let recalled = recalled.unwrap();
    assert_eq!(recalled["count"], 1, "{recalled}");
    let system = h.fake().requests().last().unwrap().body["messages"][0]["content"].to_string();
    assert!(system.contains("prefers answers in French"), "{system}");

    // Bob, same tenant, sees nothing of Alice's.
    let bob = agentry_store::users::create(&h.db.db, &h.tenant.scope(), "bob", Role::Member)
        .await
        .unwrap();
    let bob = agentry_store::UserScope {
        tenant: h.tenant.scope(),
        user_id: bob.id,
        role: Role::Member,
        custom_role: None,
    };
    let bs = h
        .engine
        .create_session(
            &h.tenant,
            &bob,
            agentry_actors::CreateSession {
                auto_approve: Some(true),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    let bh = h.engine.open_session(&h.tenant, &bob, bs.id).await.unwrap();
    h.fake().push(FakeReply::tool_call(
        "m3",
        "recall",
        json!({"query": "french"}),
    ));
    h.fake().push(FakeReply::text("nothing"));
    let (to, rx) = agentry_actors::channel_subscriber();
    h.engine.subscribe(&bh, None, to).await.unwrap();
    let acc = h
        .engine
        .start_chat(&bh, &bob, "what does alice prefer?".into(), false)
        .await
        .unwrap();
    let all = Events { rx }.until_done(acc.run_id).await;
    let recalled = tool_results(&all).first().map(|r| r.result.clone());
    assert_eq!(recalled.unwrap()["count"], 0);
    let system = h.fake().requests().last().unwrap().body["messages"][0]["content"].to_string();
    assert!(!system.contains("French"), "{system}");
}

/// A tool that ran and reported failure in its result (a non-zero exit) gets `tool_result
/// {status: error}` and no `error` event: the tool did its job, and said how it went.
#[actix_rt::test]
async fn a_reported_failure_is_a_result_not_an_error_event() {
    let Some(h) = Harness::with(
        Backend::Sqlite,
        Wire::Anthropic,
        Options {
            extra_tools: vec![ReportsFailure::new()],
            ..Options::default()
        },
    )
    .await
    else {
        return;
    };
    h.fake()
        .push(FakeReply::tool_call("x1", "exits_nonzero", json!({})));
    h.fake().push(FakeReply::text("it failed"));
    let s = h.new_session(true).await;
    let (mut ev, run) = h.send(&s, "run it").await;
    let all = ev.until_done(run).await;
    assert_well_formed(&all);
    let results = tool_results(&all);
    assert_eq!(results.len(), 1);
    assert_eq!(results[0].status, ToolStatus::Error);
    assert_eq!(results[0].result["exit_code"], 1);
    assert!(errors(&all).is_empty(), "{:?}", types(&all));
    assert_eq!(done(&all).status, DoneStatus::Completed);
}

async fn with_run_timeout_of_one_second(h: &Harness) {
    set_default_assistant(
        h,
        agentry_store::assistants::AssistantSpec {
            timeout_secs: Some(1),
            ..Default::default()
        },
    )
    .await;
}

/// The assistant's `timeout_secs` bounds the whole run: `done{status: timeout, reason:
/// run_timeout}` after a non-recoverable `error` event.
#[actix_rt::test]
async fn a_run_past_its_timeout_ends_with_a_timeout_done() {
    let Some(h) = Harness::with(
        Backend::Sqlite,
        Wire::OpenAi,
        Options {
            extra_tools: vec![Sleepy::new()],
            ..Options::default()
        },
    )
    .await
    else {
        return;
    };
    with_run_timeout_of_one_second(&h).await;
    h.fake()
        .push(FakeReply::tool_call("s1", "sleepy", json!({"ms": 10_000})));
    let s = h.new_session(true).await;
    let t0 = Instant::now();
    let (mut ev, run) = h.send(&s, "sleep long").await;
    let all = ev.until_done(run).await;
    let elapsed = t0.elapsed();
    assert_well_formed(&all);
    assert!(
        elapsed >= Duration::from_secs(1) && elapsed < Duration::from_secs(5),
        "{elapsed:?}"
    );
    let d = done(&all);
    assert_eq!(
        (d.status, d.cancelled, d.reason.as_deref()),
        (DoneStatus::Timeout, false, Some("run_timeout"))
    );
    let errs = errors(&all);
    assert_eq!(errs.len(), 1, "{:?}", types(&all));
    assert_eq!(errs[0].error_code, "timeout");
    assert!(!errs[0].recoverable);
    assert_eq!(
        executions::get(&h.db.db, &h.tenant.scope(), run)
            .await
            .unwrap()
            .unwrap()
            .status,
        ExecutionStatus::Timeout
    );
}

/// The run timeout counts the run's own time, not a person's: an approval given after longer
/// than the whole run timeout still lets the run finish.
#[actix_rt::test]
async fn time_spent_waiting_for_an_approval_does_not_count_against_the_run_timeout() {
    let Some(h) = Harness::new(Backend::Sqlite, Wire::OpenAi).await else {
        return;
    };
    with_run_timeout_of_one_second(&h).await;
    h.fake()
        .push(write_file("call_1", "notes/late.txt", "late\n"));
    h.fake().push(FakeReply::text("written"));
    let s = h.new_session(false).await;
    let (mut ev, run) = h.send(&s, "write it").await;
    let upto = ev
        .until(|e| matches!(e.payload, EventPayload::HitlRequest(_)))
        .await;
    // One and a half run timeouts.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    h.decide(
        &s,
        hitl_request_id(&upto),
        Decision::Approve { message: None },
    )
    .await;
    let all: Vec<_> = upto.into_iter().chain(ev.until_done(run).await).collect();
    assert_well_formed(&all);
    assert!(errors(&all).is_empty(), "{:?}", types(&all));
    let d = done(&all);
    assert_eq!(
        (d.status, d.reason.as_deref()),
        (DoneStatus::Completed, None)
    );
    assert_eq!(final_text(&all).as_deref(), Some("written"));
}

/// A call past its tool's timeout is abandoned: an error result with code `timeout` and a
/// recoverable `error` event; the model hears about it and the run goes on.
#[actix_rt::test]
async fn a_tool_past_its_timeout_fails_the_call_not_the_run() {
    let Some(h) = Harness::with(
        Backend::Sqlite,
        Wire::Anthropic,
        Options {
            extra_tools: vec![Sleepy::with_timeout(Duration::from_millis(300))],
            ..Options::default()
        },
    )
    .await
    else {
        return;
    };
    h.fake()
        .push(FakeReply::tool_call("s1", "sleepy", json!({"ms": 10_000})));
    h.fake().push(FakeReply::text("it took too long"));
    let s = h.new_session(true).await;
    let t0 = Instant::now();
    let (mut ev, run) = h.send(&s, "sleep").await;
    let all = ev.until_done(run).await;
    assert!(t0.elapsed() < Duration::from_secs(5), "{:?}", t0.elapsed());
    assert_well_formed(&all);
    let results = tool_results(&all);
    assert_eq!(results[0].status, ToolStatus::Error);
    assert_eq!(results[0].result["error"]["code"], "timeout");
    let errs = errors(&all);
    assert_eq!(errs.len(), 1, "{:?}", types(&all));
    assert_eq!(
        (errs[0].error_code.as_str(), errs[0].recoverable),
        ("timeout", true)
    );
    assert_eq!(done(&all).status, DoneStatus::Completed);
    assert_eq!(final_text(&all).as_deref(), Some("it took too long"));
    let last = h.fake().requests().last().unwrap().body.to_string();
    assert!(
        last.contains("timed out"),
        "the model saw the timeout: {last}"
    );
}

/// A tool's timeout counts the tool's own time only: a question it asks the user (as an MCP
/// elicitation does) may take longer than the whole timeout, and longer than the run timeout.
#[actix_rt::test]
async fn time_spent_answering_does_not_count_against_a_tool_timeout() {
    let Some(h) = Harness::with(
        Backend::Sqlite,
        Wire::OpenAi,
        Options {
            extra_tools: vec![Asker::new(Duration::from_millis(300))],
            ..Options::default()
        },
    )
    .await
    else {
        return;
    };
    with_run_timeout_of_one_second(&h).await;
    h.fake()
        .push(FakeReply::tool_call("a1", "asker", json!({})));
    h.fake().push(FakeReply::text("hello Ada"));
    let s = h.new_session(true).await;
    let (mut ev, run) = h.send(&s, "ask me").await;
    let upto = ev
        .until(|e| matches!(e.payload, EventPayload::HitlRequest(_)))
        .await;
    // Four times the tool's timeout, more than the run's.
    tokio::time::sleep(Duration::from_millis(1200)).await;
    h.decide(
        &s,
        hitl_request_id(&upto),
        Decision::Answer {
            answer: json!("Ada"),
        },
    )
    .await;
    let all = ev.until_done(run).await;
    let results = tool_results(&all);
    assert_eq!(results[0].status, ToolStatus::Success, "{:?}", results[0]);
    assert_eq!(results[0].result["name"], "Ada");
    assert!(errors(&all).is_empty(), "{:?}", types(&all));
    assert_eq!(done(&all).status, DoneStatus::Completed);
}

/// A backend that is unavailable for a moment is retried (up to `max_retries`); one whose
/// connection is gone for good is not — every retry would fail the same way.
#[actix_rt::test]
async fn unavailable_backends_are_retried_and_disconnected_ones_are_not() {
    let flaky = Failing::new(
        "flaky_backend",
        vec![
            agentry_tools::tool::ToolError::Unavailable("restarting".into()),
            agentry_tools::tool::ToolError::Unavailable("restarting".into()),
        ],
    );
    let gone = Failing::new(
        "gone_backend",
        vec![agentry_tools::tool::ToolError::Disconnected(
            "the server exited".into(),
        )],
    );
    let Some(h) = Harness::with(
        Backend::Sqlite,
        Wire::OpenAi,
        Options {
            extra_tools: vec![flaky.clone(), gone.clone()],
            ..Options::default()
        },
    )
    .await
    else {
        return;
    };
    h.fake()
        .push(FakeReply::tool_call("f1", "flaky_backend", json!({})));
    h.fake()
        .push(FakeReply::tool_call("g1", "gone_backend", json!({})));
    h.fake().push(FakeReply::text("done"));
    let s = h.new_session(true).await;
    let (mut ev, run) = h.send(&s, "go").await;
    let all = ev.until_done(run).await;
    assert_well_formed(&all);
    let results = tool_results(&all);
    assert_eq!(results[0].status, ToolStatus::Success);
    assert_eq!(flaky.calls.load(std::sync::atomic::Ordering::SeqCst), 3);
    assert_eq!(results[1].status, ToolStatus::Error);
    assert_eq!(results[1].result["error"]["code"], "mcp_error");
    assert_eq!(gone.calls.load(std::sync::atomic::Ordering::SeqCst), 1);
    let errs = errors(&all);
    assert_eq!(errs.len(), 1, "{:?}", types(&all));
    assert_eq!(
        (errs[0].error_code.as_str(), errs[0].recoverable),
        ("mcp_error", true)
    );
    assert_eq!(done(&all).status, DoneStatus::Completed);
}

/// The loop's own retries (a model answer that broke off, an unavailable tool backend) wait the
/// configured `base_delay * 2^n`, not a built-in default.
#[actix_rt::test]
async fn loop_retries_wait_the_configured_base_delay() {
    let flaky = Failing::new(
        "flaky_backend",
        vec![agentry_tools::tool::ToolError::Unavailable(
            "restarting".into(),
        )],
    );
    let Some(h) = Harness::with(
        Backend::Sqlite,
        Wire::OpenAi,
        Options {
            extra_tools: vec![flaky.clone()],
            // Longer than the built-in default (500 ms), so using the default shows.
            base_delay_ms: 1200,
            ..Options::default()
        },
    )
    .await
    else {
        return;
    };
    let s = h.new_session(true).await;

    // A model answer that breaks off mid-stream.
    h.fake()
        .push(FakeReply::broken("this answer breaks off", 2));
    h.fake().push(FakeReply::text("second try works"));
    let (mut ev, run) = h.send(&s, "hi").await;
    let upto = ev
        .until(|e| matches!(e.payload, EventPayload::Error(_)))
        .await;
    let t0 = Instant::now();
    let err = errors(&upto).pop().unwrap();
    assert!(err.recoverable);
    // The wait is the configured step plus jitter below one step: 1200 ms ≤ wait < 2400 ms.
    let waited: u64 = err
        .error
        .split("retrying in ")
        .nth(1)
        .and_then(|rest| rest.split(" ms").next())
        .and_then(|ms| ms.parse().ok())
        .unwrap_or_else(|| panic!("no retry wait in {:?}", err.error));
    assert!((1200..2400).contains(&waited), "{}", err.error);
    let all = ev.until_done(run).await;
    assert!(
        t0.elapsed() >= Duration::from_millis(1200),
        "{:?}",
        t0.elapsed()
    );
    assert_eq!(final_text(&all).as_deref(), Some("second try works"));

    // A tool backend that is unavailable once.
    h.fake()
        .push(FakeReply::tool_call("f1", "flaky_backend", json!({})));
    h.fake().push(FakeReply::text("done"));
    let (mut ev, run) = h.send(&s, "call it").await;
    ev.until(|e| matches!(e.payload, EventPayload::ToolCall(_)))
        .await;
    let t0 = Instant::now();
    let all = ev.until_done(run).await;
    let results = tool_results(&all);
    assert_eq!(results[0].status, ToolStatus::Success);
    assert_eq!(flaky.calls.load(std::sync::atomic::Ordering::SeqCst), 2);
    assert!(
        t0.elapsed() >= Duration::from_millis(1200),
        "{:?}",
        t0.elapsed()
    );
}

#[actix_rt::test]
async fn an_idle_tenant_supervisor_stops_and_comes_back_on_next_use() {
    let Some(h) = Harness::with(
        Backend::Sqlite,
        Wire::OpenAi,
        Options {
            session_timeout: Duration::from_millis(300),
            tenant_idle_after: Duration::from_millis(300),
            ..Options::default()
        },
    )
    .await
    else {
        return;
    };
    h.fake().push(FakeReply::text("first"));
    let s = h.new_session(false).await;
    let (to, rx) = agentry_actors::channel_subscriber();
    h.engine.subscribe(&s, None, to).await.unwrap();
    let run = h
        .engine
        .start_chat(&s, &h.user, "hi".into(), false)
        .await
        .unwrap()
        .run_id;
    Events { rx }.until_done(run).await;
    assert_eq!(h.engine.live_tenants().await.unwrap(), 1);
    let session_id = s.session.id;
    // Nobody holds the session: its actor stops after its idle timeout, then the tenant's
    // supervisor after its own.
    drop(s);
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while h.engine.live_tenants().await.unwrap() > 0 {
        assert!(
            std::time::Instant::now() < deadline,
            "the idle tenant's supervisor did not stop"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // The next use starts it again, and the session works.
    h.fake().push(FakeReply::text("second"));
    let reopened = h
        .engine
        .open_session(&h.tenant, &h.user, session_id)
        .await
        .unwrap();
    assert_eq!(h.engine.live_tenants().await.unwrap(), 1);
    let (to, rx) = agentry_actors::channel_subscriber();
    h.engine.subscribe(&reopened, None, to).await.unwrap();
    let run = h
        .engine
        .start_chat(&reopened, &h.user, "again".into(), false)
        .await
        .unwrap()
        .run_id;
    let events = Events { rx }.until_done(run).await;
    assert_eq!(done(&events).status, DoneStatus::Completed);
}

/// A decision goes to the waiting run through the approval desk alone, and only the session's
/// owner or an admin of its tenant can make it: another tenant's admin and another member get
/// "not found" with the right ids, a decision of the wrong kind is refused, and none of them
/// changes anything.
#[actix_rt::test]
async fn only_the_owner_or_an_admin_decides_and_refusals_change_nothing() {
    let Some(h) = Harness::new(Backend::Sqlite, Wire::OpenAi).await else {
        return;
    };
    h.fake().push(write_file("call_1", "notes/a.txt", "a\n"));
    h.fake().push(FakeReply::text("written"));
    let s = h.new_session(false).await;
    let (mut ev, run) = h.send(&s, "write").await;
    let upto = ev
        .until(|e| matches!(e.payload, EventPayload::HitlRequest(_)))
        .await;
    let id = hitl_request_id(&upto);
    assert_eq!(h.engine.approvals_pending(), 1);
    let approve = || Decision::Approve { message: None };

    let other = agentry_store::tenants::create(
        &h.db.db,
        &agentry_store::PlatformScope::new(),
        agentry_store::tenants::NewTenant {
            name: format!("other-{}", uuid::Uuid::now_v7()),
            quotas: Default::default(),
            features_enabled: vec![],
            tool_permissions: None,
            policy: Default::default(),
        },
    )
    .await
    .unwrap();
    let mallory = agentry_store::users::create(&h.db.db, &other.scope(), "mallory", Role::Admin)
        .await
        .unwrap();
    let mallory = agentry_store::UserScope {
        tenant: other.scope(),
        user_id: mallory.id,
        role: Role::Admin,
        custom_role: None,
    };
    let r = h
        .engine
        .decide(&other, &mallory, s.session.id, id, approve())
        .await;
    assert!(matches!(r, Err(EngineError::NotFound(_))), "{r:?}");
    // Even naming the victim's tenant next to its own scope (which the gateway's key never
    // pairs): refused, and nothing decided.
    let r = h
        .engine
        .decide(&h.tenant, &mallory, s.session.id, id, approve())
        .await;
    assert!(r.is_err(), "{r:?}");
    assert_eq!(h.engine.approvals_pending(), 1);

    let bob = agentry_store::users::create(&h.db.db, &h.tenant.scope(), "bob", Role::Member)
        .await
        .unwrap();
    let bob = agentry_store::UserScope {
        tenant: h.tenant.scope(),
        user_id: bob.id,
        role: Role::Member,
        custom_role: None,
    };
    let r = h
        .engine
        .decide(&h.tenant, &bob, s.session.id, id, approve())
        .await;
    assert!(matches!(r, Err(EngineError::NotFound(_))), "{r:?}");

    // The owner, naming another of their sessions: not found there.
    let s2 = h.new_session(false).await;
    let r = h
        .engine
        .decide(&h.tenant, &h.user, s2.session.id, id, approve())
        .await;
    assert!(matches!(r, Err(EngineError::NotFound(_))), "{r:?}");
    // The owner, answering an approval as if it were a question: refused, still pending.
    let r = h
        .engine
        .decide(
            &h.tenant,
            &h.user,
            s.session.id,
            id,
            Decision::Answer {
                answer: json!("yes"),
            },
        )
        .await;
    assert!(matches!(r, Err(EngineError::BadRequest(_))), "{r:?}");
    assert_eq!(h.engine.approvals_pending(), 1);
    let status = h.engine.status(&s).await.unwrap();
    assert_eq!(status.pending_approvals, vec![id]);
    let exec = executions::get(&h.db.db, &h.tenant.scope(), run)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(exec.status, ExecutionStatus::WaitingApproval);

    // An admin of the tenant may decide on a member's session.
    let admin = agentry_store::UserScope {
        role: Role::Admin,
        custom_role: None,
        ..bob
    };
    h.engine
        .decide(&h.tenant, &admin, s.session.id, id, approve())
        .await
        .unwrap();
    let rest = ev.until_done(run).await;
    assert_eq!(done(&rest).status, DoneStatus::Completed);
    let row = approvals::get(&h.db.db, &h.tenant.scope(), id)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        (row.status, row.decided_by),
        (ApprovalStatus::Approved, Some(admin.user_id))
    );
    assert_eq!(h.engine.approvals_pending(), 0);
    // Over: a conflict for whoever may see it; an id never issued: not found.
    let r = h
        .engine
        .decide(&h.tenant, &h.user, s.session.id, id, approve())
        .await;
    assert!(
        matches!(r, Err(EngineError::ApprovalNotPending(_))),
        "{r:?}"
    );
    let r = h
        .engine
        .decide(
            &h.tenant,
            &h.user,
            s.session.id,
            agentry_schema::ids::ApprovalId::new(),
            approve(),
        )
        .await;
    assert!(matches!(r, Err(EngineError::NotFound(_))), "{r:?}");
}

/// The tenant's quota actor restarted in place after a stop or a panic: the same address keeps
/// admitting, with the counts it had (today's tokens), and runs start and end through it.
#[actix_rt::test]
async fn a_quota_actor_that_stops_or_panics_is_restarted_with_its_counts() {
    use agentry_actors::quota::GetUsage;
    use agentry_actors::test_hooks::{PanicNow, StopNow};
    let Some(h) = Harness::new(Backend::Sqlite, Wire::OpenAi).await else {
        return;
    };
    h.fake().push(FakeReply::text("one"));
    let s = h.new_session(false).await;
    let (mut ev, run) = h.send(&s, "first").await;
    assert_eq!(
        done(&ev.until_done(run).await).status,
        DoneStatus::Completed
    );
    let quota = h.engine.quota(&h.tenant).await.unwrap().actor().unwrap();
    let before = quota.send(GetUsage).await.unwrap();
    assert!(before.tokens_used_today > 0, "{before:?}");

    quota.send(StopNow).await.unwrap();
    h.engine.admit_request(&h.tenant).await.unwrap();
    assert_eq!(
        quota.send(GetUsage).await.unwrap().tokens_used_today,
        before.tokens_used_today
    );
    // The message that panicked gets no reply; the next one is served.
    assert!(quota.send(PanicNow).await.is_err());
    h.engine.admit_request(&h.tenant).await.unwrap();
    assert!(h.engine.quota(&h.tenant).await.unwrap().actor().unwrap() == quota);

    h.fake().push(FakeReply::text("two"));
    let (mut ev, run) = h.send(&s, "second").await;
    assert_eq!(
        done(&ev.until_done(run).await).status,
        DoneStatus::Completed
    );
    let mut after = quota.send(GetUsage).await.unwrap();
    for _ in 0..100 {
        if after.running == 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
        after = quota.send(GetUsage).await.unwrap();
    }
    assert_eq!(after.running, 0, "{after:?}");
    assert!(
        after.tokens_used_today > before.tokens_used_today,
        "{after:?}"
    );
}

/// A session actor whose handler panics: the events it held in memory are stored, its run's
/// quota slot is given back (with `max_concurrent_runs` 1 a leaked slot would refuse every
/// later run), its approval is cancelled, and a fresh actor resumes the run for the same
/// subscriber, which sees exactly one `done`.
#[actix_rt::test]
async fn a_session_actor_that_panics_keeps_its_events_and_gives_back_its_run_slot() {
    use agentry_actors::quota::GetUsage;
    use agentry_actors::test_hooks::PanicNow;
    let Some(h) = Harness::with(
        Backend::Sqlite,
        Wire::OpenAi,
        Options {
            quotas: agentry_store::tenants::Quotas {
                max_concurrent_runs: 1,
                ..Default::default()
            },
            ..Options::default()
        },
    )
    .await
    else {
        return;
    };
    for _ in 0..3 {
        h.fake().push(write_file("call_1", "notes/p.txt", "p\n"));
        h.fake().push(FakeReply::text("written"));
    }
    let s = h.new_session(false).await;
    let (mut ev, run) = h.send(&s, "write").await;
    let upto = ev
        .until(|e| matches!(e.payload, EventPayload::HitlRequest(_)))
        .await;
    let asked = upto.last().unwrap().seq;
    let quota = h.engine.quota(&h.tenant).await.unwrap().actor().unwrap();
    assert_eq!(quota.send(GetUsage).await.unwrap().running, 1);

    assert!(s.addr.send(PanicNow).await.is_err());

    // The events the actor held (a running run's events wait for its end) were stored.
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let stored =
            agentry_store::events::list_after(&h.db.db, &h.tenant.scope(), s.session.id, 0, 100)
                .await
                .unwrap();
        if stored.iter().any(|e| e.seq == asked) {
            assert!(stored.iter().any(|e| e.seq == upto[0].seq));
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the hitl_request (seq {asked}) was never stored: {stored:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    // The same subscriber follows the run to its one `done`, approving what it is asked again.
    let mut after = Vec::new();
    let d = loop {
        let e = ev.next(Duration::from_secs(30)).await;
        after.push(e.clone());
        match &e.payload {
            EventPayload::HitlRequest(r) if e.run_id == run.to_string() => {
                h.engine
                    .decide(
                        &h.tenant,
                        &h.user,
                        s.session.id,
                        r.request_id.parse().unwrap(),
                        Decision::Approve { message: None },
                    )
                    .await
                    .unwrap();
            }
            EventPayload::Done(d) if e.run_id == run.to_string() => break d.clone(),
            _ => {}
        }
    };
    assert!(
        errors(&after).iter().any(|x| x.error.contains("restarted")),
        "{after:?}"
    );
    assert!(
        matches!(d.status, DoneStatus::Completed | DoneStatus::Interrupted),
        "{d:?}"
    );
    let seqs: Vec<u64> = upto.iter().chain(after.iter()).map(|e| e.seq).collect();
    assert!(seqs.windows(2).all(|w| w[0] < w[1]), "{seqs:?}");
    assert_eq!(h.engine.approvals_pending(), 0);
    let mut usage = quota.send(GetUsage).await.unwrap();
    for _ in 0..100 {
        if usage.running == 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
        usage = quota.send(GetUsage).await.unwrap();
    }
    assert_eq!(usage.running, 0, "a run slot leaked: {usage:?}");
    // And the tenant's one run slot admits the next run.
    let s2 = h.new_session(true).await;
    let (mut ev2, run2) = h.send(&s2, "again").await;
    let all = ev2.until_done(run2).await;
    assert_eq!(done(&all).status, DoneStatus::Completed, "{all:?}");
}
