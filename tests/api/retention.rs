//! Retention that runs (issue 17, item 3; docs/operations.md, "Retention"): one sweep of the
//! real server removes backdated sessions (with their messages, events and checkpoints, their
//! live actors stopped), checkpoints past the newest few of a session, expired memories and the
//! events of old runs, and keeps what is active; each sweep is logged and counted. In cluster
//! mode only the replica holding the duty sweeps.

use std::time::{Duration, Instant};

use agentry_schema::entities::{checkpoint, execution, message, session_event};
use agentry_schema::events::{DoneData, DoneStatus, EventPayload, ExecutionEvent, TokenUsage};
use agentry_schema::ids::{AssistantId, RunId, SessionId, UserId};
use agentry_store::{TenantScope, checkpoints, events, executions, memories, messages, sessions};
use chrono::Utc;
use reqwest::Method;
use sea_orm::sea_query::Expr;
use sea_orm::{
    ColumnTrait, ConnectionTrait, EntityTrait, PaginatorTrait, QueryFilter, QueryOrder,
    QuerySelect, TransactionTrait,
};
use serde_json::{Value, json};

use crate::ctx::{Ctx, TenantFx};
use crate::observability::sample;

/// A sweep every 3 s (seeding happens right after one ends, well before the next), sessions
/// kept 30 days, 2 checkpoints per session, events of runs over 10 days old trimmed.
pub const ENV: &[(&str, &str)] = &[
    ("AGENTRY_SESSION__RETENTION_DAYS", "30"),
    ("AGENTRY_RETENTION__INTERVAL_SECS", "3"),
    ("AGENTRY_RETENTION__CHECKPOINTS_PER_SESSION", "2"),
    ("AGENTRY_RETENTION__EVENT_DAYS", "10"),
];

fn days_ago(n: i64) -> chrono::DateTime<Utc> {
    agentry_store::now() - chrono::Duration::days(n)
}

async fn sweeps(ctx: &Ctx) -> f64 {
    sample(&ctx.metrics().await, "agentry_retention_sweeps_total", &[])
}

/// Wait until the server finished `n` more sweeps than `from`.
async fn until_sweeps(ctx: &Ctx, from: f64, n: f64) -> f64 {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let now = sweeps(ctx).await;
        if now >= from + n {
            return now;
        }
        assert!(
            Instant::now() < deadline,
            "no retention sweep within 60 s (at {now})"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn ev(session: SessionId, run: RunId, seq: u64, payload: EventPayload) -> ExecutionEvent {
    ExecutionEvent::new(seq, session.to_string(), run.to_string(), payload)
}

/// A session of `user` whose one finished run has `events` events (its `done` last), two
/// messages and one checkpoint; idle since `idle_days` ago, the run ended `ended_days` ago.
async fn finished_session<C: ConnectionTrait>(
    db: &C,
    scope: &TenantScope,
    user: UserId,
    idle_days: i64,
    ended_days: i64,
    events_n: u64,
) -> (SessionId, RunId) {
    let s = sessions::create(
        db,
        scope,
        sessions::NewSession {
            id: None,
            user_id: user,
            assistant_id: AssistantId::default_assistant(),
            auto_approve: false,
            metadata: json!({}),
        },
    )
    .await
    .unwrap();
    let run = RunId::new();
    executions::create(
        db,
        scope,
        executions::NewExecution {
            id: run,
            user_id: user,
            session_id: s.id,
            assistant_id: "default".into(),
            input: "hello".into(),
            trace_id: None,
            status: executions::ExecutionStatus::Running,
            role: None,
        },
    )
    .await
    .unwrap();
    for (i, content) in ["hello", "hi"].iter().enumerate() {
        messages::save(
            db,
            scope,
            s.id,
            messages::NewMessage {
                run_id: Some(run),
                role: if i == 0 {
                    messages::MessageRole::User
                } else {
                    messages::MessageRole::Assistant
                },
                content: content.to_string(),
                tool_calls: None,
                tool_call_id: None,
            },
        )
        .await
        .unwrap();
    }
    checkpoints::save(
        db,
        scope,
        checkpoints::NewCheckpoint {
            session_id: s.id,
            execution_id: run,
            step: 1,
            node: "reason".into(),
            state: json!({}),
        },
    )
    .await
    .unwrap();
    let mut evs: Vec<ExecutionEvent> = (1..events_n)
        .map(|seq| {
            ev(
                s.id,
                run,
                seq,
                EventPayload::text(format!("part {seq}"), false),
            )
        })
        .collect();
    evs.push(ev(
        s.id,
        run,
        events_n,
        EventPayload::Done(DoneData::new(
            DoneStatus::Completed,
            None,
            TokenUsage::default(),
        )),
    ));
    events::append(db, scope, s.id, &evs).await.unwrap();
    executions::update(
        db,
        scope,
        run,
        executions::ExecutionStatus::Completed,
        1,
        TokenUsage::default(),
        None,
    )
    .await
    .unwrap();
    execution::Entity::update_many()
        .col_expr(
            execution::Column::CompletedAt,
            Expr::value(Some(days_ago(ended_days))),
        )
        .filter(execution::Column::Id.eq(run.0))
        .exec(db)
        .await
        .unwrap();
    sessions::set_last_active(db, scope, s.id, days_ago(idle_days))
        .await
        .unwrap();
    (s.id, run)
}

async fn checkpoint_of<C: ConnectionTrait>(
    db: &C,
    scope: &TenantScope,
    session: SessionId,
    run: RunId,
    step: u32,
) -> i64 {
    checkpoints::save(
        db,
        scope,
        checkpoints::NewCheckpoint {
            session_id: session,
            execution_id: run,
            step,
            node: "reason".into(),
            state: json!({"step": step}),
        },
    )
    .await
    .unwrap()
    .id
}

async fn count_of_session(ctx: &Ctx, s: SessionId) -> (u64, u64, u64) {
    let m = message::Entity::find()
        .filter(message::Column::SessionId.eq(s.0))
        .count(&ctx.db)
        .await
        .unwrap();
    let e = session_event::Entity::find()
        .filter(session_event::Column::SessionId.eq(s.0))
        .count(&ctx.db)
        .await
        .unwrap();
    let c = checkpoint::Entity::find()
        .filter(checkpoint::Column::SessionId.eq(s.0))
        .count(&ctx.db)
        .await
        .unwrap();
    (m, e, c)
}

/// A real run over REST in a new session of `t`'s member: its actor stays live afterwards.
async fn chatted_session(ctx: &Ctx, t: &TenantFx) -> SessionId {
    let s = ctx
        .ok(
            Method::POST,
            "/api/v1/sessions",
            &t.member.key,
            Some(json!({})),
            201,
        )
        .await;
    let id = s["session_id"].as_str().unwrap().to_string();
    ctx.ok(
        Method::POST,
        "/api/v1/chat",
        &t.member.key,
        Some(json!({"session_id": id, "message": "hello"})),
        200,
    )
    .await;
    id.parse().unwrap()
}

pub async fn one_sweep_removes_old_rows_and_keeps_active_ones(ctx: &Ctx) {
    let a = ctx.tenant_with(json!({"max_sessions_per_user": 2})).await;
    let b = ctx.tenant().await;
    let (sa, sb) = (a.scope(), b.scope());
    let member: UserId = a.member.user_id.parse().unwrap();
    let member2: UserId = a.member2.user_id.parse().unwrap();
    let b_member: UserId = b.member.user_id.parse().unwrap();

    // Two sessions of A's member used for real (live actors afterwards): its quota of two.
    let live1 = chatted_session(ctx, &a).await;
    let live2 = chatted_session(ctx, &a).await;
    let r = ctx
        .call(
            Method::POST,
            "/api/v1/sessions",
            Some(&a.member.key),
            Some(&json!({})),
        )
        .await;
    assert_eq!((r.status, r.code()), (429, "quota_exceeded"), "{}", r.body);
    let live_before = sample(&ctx.metrics().await, "agentry_live_sessions", &[]);
    assert!(live_before >= 2.0);

    // Seed between two sweeps, in one transaction, so the next sweep sees all of it at once.
    let s0 = until_sweeps(ctx, sweeps(ctx).await, 1.0).await;
    let txn = ctx.db.begin().await.unwrap();
    // Idle 60 days: go (A's member2, B's member). Idle 60 days but its run waits for a person:
    // stays. Idle 5 days: stays.
    let (old_a, old_a_run) = finished_session(&txn, &sa, member2, 60, 60, 4).await;
    let (old_b, _) = finished_session(&txn, &sb, b_member, 45, 45, 3).await;
    let (waiting, _) = finished_session(&txn, &sa, member2, 60, 60, 2).await;
    let waiting_run = RunId::new();
    executions::create(
        &txn,
        &sa,
        executions::NewExecution {
            id: waiting_run,
            user_id: member2,
            session_id: waiting,
            assistant_id: "default".into(),
            input: "approve me".into(),
            trace_id: None,
            status: executions::ExecutionStatus::Running,
            role: None,
        },
    )
    .await
    .unwrap();
    executions::update(
        &txn,
        &sa,
        waiting_run,
        executions::ExecutionStatus::WaitingApproval,
        1,
        TokenUsage::default(),
        None,
    )
    .await
    .unwrap();
    sessions::touch_fenced(
        &txn,
        &sa,
        waiting,
        sessions::SessionState::WaitingApproval,
        None,
        None,
    )
    .await
    .unwrap();
    sessions::set_last_active(&txn, &sa, waiting, days_ago(60))
        .await
        .unwrap();
    // Idle 5 days, its run ended 5 days ago: stays, events and all. Idle 5 days with a run
    // that ended 20 days ago (a session used again since): that run's events go, all but its
    // `done`.
    let (recent, _) = finished_session(&txn, &sa, member2, 5, 5, 5).await;
    let (reused, reused_old_run) = finished_session(&txn, &sa, member2, 5, 20, 6).await;
    // Checkpoints of the waiting session: its finished run's one, then the waiting run's
    // three, then five of another finished run. Kept: the session's newest two, and the
    // waiting run's newest.
    let crowded = waiting;
    let mut waiting_cps = Vec::new();
    for step in 1..=3 {
        waiting_cps.push(checkpoint_of(&txn, &sa, crowded, waiting_run, step).await);
    }
    let done_run = RunId::new();
    let mut done_cps = Vec::new();
    for step in 1..=5 {
        done_cps.push(checkpoint_of(&txn, &sa, crowded, done_run, step).await);
    }
    // Memories: one expired an hour ago, one expiring tomorrow, one forever.
    let mut memory_ids = Vec::new();
    for expires in [Some(-1), Some(24), None] {
        let m = memories::create(
            &txn,
            &sa,
            memories::NewMemory {
                expires_at: expires.map(|h| agentry_store::now() + chrono::Duration::hours(h)),
                ..memories::NewMemory::of_user(member, format!("expires in {expires:?} hours"))
            },
        )
        .await
        .unwrap();
        memory_ids.push(m.id);
    }
    // And the two real sessions, idle for 40 days.
    for s in [live1, live2] {
        sessions::set_last_active(&txn, &sa, s, days_ago(40))
            .await
            .unwrap();
    }
    txn.commit().await.unwrap();
    let (recent_cps_before, reused_events_before) = (
        count_of_session(ctx, crowded).await.2,
        count_of_session(ctx, reused).await.1,
    );
    assert_eq!((recent_cps_before, reused_events_before), (9, 6));

    // Two more sweeps: the first after the commit did everything.
    until_sweeps(ctx, s0, 2.0).await;

    // Gone, with everything they own; their runs stay (the audit trail).
    for s in [old_a, old_b, live1, live2] {
        let scope = if s == old_b { sb } else { sa };
        assert!(
            sessions::get(&ctx.db, &scope, s).await.unwrap().is_none(),
            "{s} kept"
        );
        assert_eq!(count_of_session(ctx, s).await, (0, 0, 0), "{s}'s rows kept");
    }
    assert!(
        executions::get(&ctx.db, &sa, old_a_run)
            .await
            .unwrap()
            .is_some(),
        "a swept session's run stays in the audit"
    );
    // The live actors were stopped: their sessions answer 404, and their user has their
    // session quota back.
    for s in [live1, live2] {
        let r = ctx
            .call(
                Method::GET,
                &format!("/api/v1/sessions/{s}"),
                Some(&a.member.key),
                None,
            )
            .await;
        assert_eq!(r.status, 404, "{}", r.body);
    }
    assert!(sample(&ctx.metrics().await, "agentry_live_sessions", &[]) <= live_before - 2.0);
    for _ in 0..2 {
        ctx.ok(
            Method::POST,
            "/api/v1/sessions",
            &a.member.key,
            Some(json!({})),
            201,
        )
        .await;
    }
    // Kept: the waiting session (its messages; of its old run's events only the `done`) and
    // the recent ones.
    for s in [waiting, recent, reused] {
        assert!(
            sessions::get(&ctx.db, &sa, s).await.unwrap().is_some(),
            "{s} swept"
        );
    }
    assert_eq!(count_of_session(ctx, waiting).await, (2, 1, 3));
    // Checkpoints of the crowded session: its newest two and the waiting run's newest.
    let left: Vec<i64> = checkpoint::Entity::find()
        .select_only()
        .column(checkpoint::Column::Id)
        .filter(checkpoint::Column::SessionId.eq(crowded.0))
        .order_by_asc(checkpoint::Column::Id)
        .into_tuple()
        .all(&ctx.db)
        .await
        .unwrap();
    assert_eq!(left, vec![waiting_cps[2], done_cps[3], done_cps[4]]);
    // Memories: the expired one went.
    let user_memories: Vec<uuid::Uuid> = agentry_schema::entities::memory::Entity::find()
        .filter(agentry_schema::entities::memory::Column::UserId.eq(member.0))
        .all(&ctx.db)
        .await
        .unwrap()
        .into_iter()
        .map(|m| m.id)
        .collect();
    assert_eq!(user_memories.len(), 2);
    assert!(!user_memories.contains(&memory_ids[0].0));
    // Events: the old run of the reused session keeps only its `done`; the recent run all.
    let reused_events: Vec<(Option<uuid::Uuid>, String)> = session_event::Entity::find()
        .select_only()
        .column(session_event::Column::RunId)
        .column(session_event::Column::EventType)
        .filter(session_event::Column::SessionId.eq(reused.0))
        .into_tuple()
        .all(&ctx.db)
        .await
        .unwrap();
    assert_eq!(
        reused_events,
        vec![(Some(reused_old_run.0), "done".to_string())]
    );
    assert_eq!(count_of_session(ctx, recent).await.1, 5);
    // The stored stream still replays, numbered as before: only the `done` of that run.
    let page = ctx
        .ok(
            Method::GET,
            &format!("/api/v1/sessions/{reused}/events"),
            &a.member2.key,
            None,
            200,
        )
        .await;
    let seqs: Vec<u64> = page["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["seq"].as_u64().unwrap())
        .collect();
    assert_eq!(seqs, vec![6]);

    // One sweep did all of it, and said so: in the log and in /metrics.
    let lines = ctx
        .server
        .log_lines(|l| l.to_string().contains("retention sweep removed old data"));
    let counts = |l: &Value, k: &str| l["fields"][k].as_u64().or_else(|| l[k].as_u64());
    let seeded_sweep: Vec<&Value> = lines
        .iter()
        .filter(|l| counts(l, "sessions") == Some(4))
        .collect();
    assert_eq!(
        seeded_sweep.len(),
        1,
        "one sweep removed the four sessions: {lines:#?}"
    );
    let l = seeded_sweep[0];
    // Checkpoints: six of the crowded session (the swept sessions' went with them). Events:
    // five of the reused session's old run, one of the waiting session's old run.
    assert_eq!(counts(l, "checkpoints"), Some(6), "{l}");
    assert_eq!(counts(l, "memories"), Some(1), "{l}");
    assert_eq!(counts(l, "events"), Some(6), "{l}");
    let m = ctx.metrics().await;
    let removed = |kind: &str| sample(&m, "agentry_retention_removed_total", &[("kind", kind)]);
    assert_eq!(removed("sessions"), 4.0);
    assert_eq!(removed("memories"), 1.0);
    assert_eq!(removed("events"), 6.0);
    assert!(removed("checkpoints") >= 6.0);
    assert_eq!(sample(&m, "agentry_retention_sweeper", &[]), 1.0);
}

/// Two replicas of one cluster: exactly one holds the duty and sweeps; when it stops, the
/// other takes the duty over and sweeps.
pub async fn one_sweeper_per_cluster(db_url: &str) {
    let redis = crate::cluster::redis_url();
    let prefix = crate::ctx::unique("retention");
    let env = |id: &'static str| {
        let mut env: Vec<(&str, &str)> = vec![
            ("AGENTRY_REDIS__URL", redis.as_str()),
            ("AGENTRY_REDIS__KEY_PREFIX", prefix.as_str()),
            ("AGENTRY_CLUSTER__REPLICA_ID", id),
            ("AGENTRY_RETENTION__INTERVAL_SECS", "1"),
        ];
        env.extend_from_slice(&ENV[..1]);
        env
    };
    let a = Ctx::start_with(&env("sweep-a"), Some(db_url)).await;
    let b = Ctx::start_with(&env("sweep-b"), Some(db_url)).await;
    // Both have been up for several sweep intervals: only one of them swept.
    let sweeper_of = |m: &str| sample(m, "agentry_retention_sweeper", &[]);
    let deadline = Instant::now() + Duration::from_secs(30);
    let (holder, other) = loop {
        let (ma, mb) = (a.metrics().await, b.metrics().await);
        let (na, nb) = (sweeps(&a).await, sweeps(&b).await);
        match (sweeper_of(&ma), sweeper_of(&mb)) {
            (1.0, 0.0) if na >= 3.0 => break (&a, &b),
            (0.0, 1.0) if nb >= 3.0 => break (&b, &a),
            (x, y) => {
                assert!(x + y <= 1.0, "two replicas hold the retention duty at once");
                assert!(
                    Instant::now() < deadline,
                    "no replica swept three times in 30 s"
                );
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(
        sweeps(other).await,
        0.0,
        "the replica without the duty never swept"
    );
    // The holder's sweeps do the work: a session idle for 60 days on the shared database goes.
    let t = holder.tenant().await;
    let (old, _) = finished_session(
        &holder.db,
        &t.scope(),
        t.member.user_id.parse().unwrap(),
        60,
        60,
        2,
    )
    .await;
    let deadline = Instant::now() + Duration::from_secs(30);
    while sessions::get(&holder.db, &t.scope(), old)
        .await
        .unwrap()
        .is_some()
    {
        assert!(
            Instant::now() < deadline,
            "the old session outlived 30 s of sweeps"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(sweeps(other).await, 0.0);
    // The holder stops (SIGTERM gives the duty back): the other replica sweeps from now on.
    holder.server.terminate();
    let deadline = Instant::now() + Duration::from_secs(45);
    while sweeps(other).await < 1.0 {
        assert!(
            Instant::now() < deadline,
            "the other replica did not take the sweep over within 45 s"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert_eq!(
        sample(&other.metrics().await, "agentry_retention_sweeper", &[]),
        1.0
    );
}
