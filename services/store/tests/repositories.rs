//! The repository suite, run against SQLite, PostgreSQL and MySQL/MariaDB alike.
//!
//! Every test creates its own tenant(s), so tests share the server databases safely.

use std::collections::BTreeSet;
use std::time::Duration;

use agentry_schema::events::{EventPayload, ExecutionEvent, TokenUsage};
use agentry_schema::ids::{ApprovalId, AssistantId, ProfileId, RunId, SessionId, UserId};
use agentry_schema::tenancy::{Role, TenantStatus};
use agentry_store::api_keys::{self, KeyCheck};
use agentry_store::approvals::{self, ApprovalStatus, NewApproval};
use agentry_store::assistants::{self, AssistantSpec};
use agentry_store::checkpoints::{self, NewCheckpoint};
use agentry_store::executions::{self, ExecutionFilter, ExecutionStatus, NewExecution};
use agentry_store::mcp_servers::{self, NewMcpServer};
use agentry_store::memories::{self, NewMemory};
use agentry_store::messages::{self, MessageRole, NewMessage};
use agentry_store::model_connections::{self, ConnectionSpec};
use agentry_store::profiles::{self, ProfileSpec};
use agentry_store::sessions::{self, NewSession, SessionState};
use agentry_store::skills::{self, NewSkill, SkillOwner};
use agentry_store::tenants::{self, NewTenant, Quotas, TenantUpdate};
use agentry_store::testing::{Backend, TestDb};
use agentry_store::tool_calls::{self, NewToolCallLog};
use agentry_store::{
    PageRequest, PlatformScope, StoreError, TenantScope, a2a_push, events, usage, users, webhooks,
};
use proptest::prelude::*;
use sea_orm::DatabaseConnection;
use serde_json::json;

fn platform() -> PlatformScope {
    PlatformScope::new()
}

async fn new_tenant(db: &DatabaseConnection) -> TenantScope {
    let t = tenants::create(
        db,
        &platform(),
        NewTenant {
            name: format!("t-{}", uuid::Uuid::now_v7()),
            quotas: Quotas::default(),
            features_enabled: vec![],
            tool_permissions: None,
            policy: Default::default(),
        },
    )
    .await
    .unwrap();
    t.scope()
}

fn new_session(user: UserId) -> NewSession {
    NewSession {
        id: None,
        user_id: user,
        assistant_id: AssistantId::default_assistant(),
        auto_approve: false,
        metadata: json!({}),
    }
}

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

/// Generates one `#[test]` per backend for each listed async test body.
macro_rules! per_backend {
    ($($name:ident),+ $(,)?) => {
        mod sqlite { use super::*; $( #[test] fn $name() { run(Backend::Sqlite, super::$name) } )+ }
        mod postgres { use super::*; $( #[test] fn $name() { run(Backend::Postgres, super::$name) } )+ }
        mod mysql { use super::*; $( #[test] fn $name() { run(Backend::MySql, super::$name) } )+ }
    };
}

fn run<F, Fut>(backend: Backend, body: F)
where
    F: FnOnce(DatabaseConnection) -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    rt().block_on(async {
        let Some(t) = TestDb::open(backend).await else {
            return;
        };
        body(t.db.clone()).await;
        drop(t);
    });
}

per_backend!(
    a_runs_start_and_steps_write_their_rows_in_one_go_and_nothing_when_refused,
    session_crud_round_trips,
    deleting_a_session_deletes_its_messages_checkpoints_and_events,
    messages_come_back_in_order,
    checkpoints_latest_and_prune,
    list_by_user_and_assistant,
    tenants_crud_and_duplicate_names,
    users_and_roles,
    api_keys_authenticate_expire_and_revoke,
    the_generated_admin_key_is_one_per_database_and_checked_by_hash,
    the_database_lease_admits_one_single_node_server_or_one_cluster,
    an_owner_whose_fencing_token_is_stale_writes_nothing,
    assistants_default_and_crud,
    profiles_crud_per_tenant,
    skills_per_tenant_and_user,
    model_connections_crud_per_tenant,
    executions_lifecycle_and_listing,
    approvals_first_decision_wins,
    tool_call_audit_rows,
    audit_lists_filter_by_user_assistant_tool_outcome_and_time,
    events_append_replay_and_max_seq,
    runs_page_by_update_time_with_a_cursor,
    a_runs_end_is_one_idempotent_write_and_reservations_only_rise,
    mcp_servers_unique_per_user,
    push_configs_per_tenant_and_task,
    the_webhook_outbox_goes_in_order_per_stream_and_claims_once,
    memories_search_and_isolation,
    usage_by_day_counts_runs_tokens_and_calls,
    deleting_a_tenant_removes_its_rows,
    prop_session_store_round_trip,
    prop_message_pagination,
    prop_cleanup_expired_removes_exactly_the_expired,
    prop_tenant_isolation,
);

async fn session_crud_round_trips(db: DatabaseConnection) {
    let scope = new_tenant(&db).await;
    let user = UserId::new();
    let mut s = sessions::create(
        &db,
        &scope,
        NewSession {
            metadata: json!({"k": [1, "two", null]}),
            auto_approve: true,
            ..new_session(user)
        },
    )
    .await
    .unwrap();
    assert_eq!(
        sessions::get(&db, &scope, s.id).await.unwrap().as_ref(),
        Some(&s)
    );
    s.state = SessionState::WaitingApproval;
    s.metadata = json!({"title": "hello"});
    s.last_active = agentry_store::now();
    sessions::update(&db, &scope, &s).await.unwrap();
    assert_eq!(
        sessions::get(&db, &scope, s.id).await.unwrap(),
        Some(s.clone())
    );
    sessions::touch_fenced(&db, &scope, s.id, SessionState::Running, None, None)
        .await
        .unwrap();
    let got = sessions::get(&db, &scope, s.id).await.unwrap().unwrap();
    assert_eq!(got.state, SessionState::Running);
    assert!(got.last_active >= s.last_active);
    // Another tenant sees nothing and cannot change it.
    let other = new_tenant(&db).await;
    assert_eq!(sessions::get(&db, &other, s.id).await.unwrap(), None);
    assert!(matches!(
        sessions::update(&db, &other, &s).await,
        Err(StoreError::NotFound(_))
    ));
    assert!(!sessions::delete(&db, &other, s.id).await.unwrap());
    assert!(sessions::delete(&db, &scope, s.id).await.unwrap());
    assert_eq!(sessions::get(&db, &scope, s.id).await.unwrap(), None);
    // A client-chosen id that already exists is a conflict.
    let fixed = SessionId::new();
    sessions::create(
        &db,
        &scope,
        NewSession {
            id: Some(fixed),
            ..new_session(user)
        },
    )
    .await
    .unwrap();
    assert!(matches!(
        sessions::create(
            &db,
            &scope,
            NewSession {
                id: Some(fixed),
                ..new_session(user)
            }
        )
        .await,
        Err(StoreError::Conflict(_))
    ));
}

async fn deleting_a_session_deletes_its_messages_checkpoints_and_events(db: DatabaseConnection) {
    let scope = new_tenant(&db).await;
    let s = sessions::create(&db, &scope, new_session(UserId::new()))
        .await
        .unwrap();
    let keep = sessions::create(&db, &scope, new_session(UserId::new()))
        .await
        .unwrap();
    let run = RunId::new();
    for sid in [s.id, keep.id] {
        messages::save(&db, &scope, sid, NewMessage::user("hi", None))
            .await
            .unwrap();
        checkpoints::save(
            &db,
            &scope,
            NewCheckpoint {
                session_id: sid,
                execution_id: run,
                step: 1,
                node: "reason".into(),
                state: json!({}),
            },
        )
        .await
        .unwrap();
        let ev = ExecutionEvent::new(
            1,
            sid.to_string(),
            run.to_string(),
            EventPayload::text("x", true),
        );
        events::append(&db, &scope, sid, &[ev]).await.unwrap();
    }
    assert!(sessions::delete(&db, &scope, s.id).await.unwrap());
    assert_eq!(messages::count(&db, &scope, s.id).await.unwrap(), 0);
    assert_eq!(events::max_seq(&db, &scope, s.id).await.unwrap(), 0);
    assert_eq!(messages::count(&db, &scope, keep.id).await.unwrap(), 1);
    assert_eq!(events::max_seq(&db, &scope, keep.id).await.unwrap(), 1);
    let cps = checkpoints::list(&db, &scope, run).await.unwrap();
    assert_eq!(cps.len(), 1);
    assert_eq!(cps[0].session_id, keep.id);
}

async fn messages_come_back_in_order(db: DatabaseConnection) {
    let scope = new_tenant(&db).await;
    let s = sessions::create(&db, &scope, new_session(UserId::new()))
        .await
        .unwrap();
    let run = RunId::new();
    let big = "x".repeat(100_000); // beyond MySQL TEXT's 64 KiB
    messages::save(&db, &scope, s.id, NewMessage::user("q", Some(run)))
        .await
        .unwrap();
    messages::save(
        &db,
        &scope,
        s.id,
        NewMessage {
            run_id: Some(run),
            role: MessageRole::Assistant,
            content: String::new(),
            tool_calls: Some(json!([{"id": "c1", "name": "t", "arguments": {"a": 1}}])),
            tool_call_id: None,
        },
    )
    .await
    .unwrap();
    messages::save(
        &db,
        &scope,
        s.id,
        NewMessage {
            run_id: Some(run),
            role: MessageRole::Tool,
            content: big.clone(),
            tool_calls: None,
            tool_call_id: Some("c1".into()),
        },
    )
    .await
    .unwrap();
    let all = messages::list(&db, &scope, s.id, PageRequest::default())
        .await
        .unwrap();
    assert_eq!(
        all.iter().map(|m| m.role).collect::<Vec<_>>(),
        vec![MessageRole::User, MessageRole::Assistant, MessageRole::Tool]
    );
    assert_eq!(all[2].content.len(), big.len());
    assert_eq!(all[2].tool_call_id.as_deref(), Some("c1"));
    assert_eq!(all[1].tool_calls.as_ref().unwrap()[0]["arguments"]["a"], 1);
    let last2 = messages::last_n(&db, &scope, s.id, 2).await.unwrap();
    assert_eq!(
        last2.iter().map(|m| m.id).collect::<Vec<_>>(),
        vec![all[1].id, all[2].id]
    );
    assert_eq!(messages::delete_all(&db, &scope, s.id).await.unwrap(), 3);
    assert_eq!(messages::count(&db, &scope, s.id).await.unwrap(), 0);
}

async fn checkpoints_latest_and_prune(db: DatabaseConnection) {
    let scope = new_tenant(&db).await;
    let sid = SessionId::new();
    let run = RunId::new();
    assert_eq!(checkpoints::latest(&db, &scope, run).await.unwrap(), None);
    for step in 1..=7u32 {
        checkpoints::save(
            &db,
            &scope,
            NewCheckpoint {
                session_id: sid,
                execution_id: run,
                step,
                node: "act".into(),
                state: json!({"step": step, "todos": ["a"]}),
            },
        )
        .await
        .unwrap();
    }
    let latest = checkpoints::latest(&db, &scope, run)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(latest.step, 7);
    assert_eq!(latest.state, json!({"step": 7, "todos": ["a"]}));
    assert_eq!(checkpoints::prune(&db, &scope, run, 3).await.unwrap(), 4);
    let left: Vec<u32> = checkpoints::list(&db, &scope, run)
        .await
        .unwrap()
        .iter()
        .map(|c| c.step)
        .collect();
    assert_eq!(left, vec![5, 6, 7]);
    let other = new_tenant(&db).await;
    assert_eq!(checkpoints::latest(&db, &other, run).await.unwrap(), None);
    assert_eq!(checkpoints::prune(&db, &other, run, 0).await.unwrap(), 0);
    assert_eq!(checkpoints::list(&db, &scope, run).await.unwrap().len(), 3);
}

async fn list_by_user_and_assistant(db: DatabaseConnection) {
    let scope = new_tenant(&db).await;
    let (alice, bob) = (UserId::new(), UserId::new());
    let ops = AssistantId::try_from("ops").unwrap();
    let a1 = sessions::create(&db, &scope, new_session(alice))
        .await
        .unwrap();
    let a2 = sessions::create(
        &db,
        &scope,
        NewSession {
            assistant_id: ops.clone(),
            ..new_session(alice)
        },
    )
    .await
    .unwrap();
    let b1 = sessions::create(
        &db,
        &scope,
        NewSession {
            assistant_id: ops.clone(),
            ..new_session(bob)
        },
    )
    .await
    .unwrap();
    sessions::touch_fenced(&db, &scope, a1.id, SessionState::Idle, None, None)
        .await
        .unwrap(); // a1 is now the most recent
    let alice_s: Vec<SessionId> =
        sessions::list_by_user(&db, &scope, alice, PageRequest::default())
            .await
            .unwrap()
            .iter()
            .map(|s| s.id)
            .collect();
    assert_eq!(alice_s, vec![a1.id, a2.id]);
    let ops_s: BTreeSet<SessionId> =
        sessions::list_by_assistant(&db, &scope, &ops, PageRequest::default())
            .await
            .unwrap()
            .iter()
            .map(|s| s.id)
            .collect();
    assert_eq!(ops_s, BTreeSet::from([a2.id, b1.id]));
    assert_eq!(
        sessions::count_by_user(&db, &scope, alice).await.unwrap(),
        2
    );
    let (page, total) = sessions::list(&db, &scope, None, PageRequest::new(1, 1))
        .await
        .unwrap();
    assert_eq!(total, 3);
    assert_eq!(page.len(), 1);
}

async fn tenants_crud_and_duplicate_names(db: DatabaseConnection) {
    let name = format!("acme-{}", uuid::Uuid::now_v7());
    let quotas = Quotas {
        max_users: 3,
        max_concurrent_runs: 2,
        tokens_per_day: 1234,
        ..Quotas::default()
    };
    let t = tenants::create(
        &db,
        &platform(),
        NewTenant {
            name: name.clone(),
            quotas,
            features_enabled: vec!["stdio_mcp".into()],
            tool_permissions: None,
            policy: tenants::TenantPolicy {
                stdio_mcp_role: tenants::StdioMcpRole::Member,
                sandbox: tenants::SandboxPolicy {
                    max_processes: Some(16),
                    memory_bytes: Some(u64::from(u32::MAX) * 4),
                    ..Default::default()
                },
                ..Default::default()
            },
        },
    )
    .await
    .unwrap();
    assert_eq!(t.policy().sandbox.max_processes, Some(16));
    assert_eq!(t.status, TenantStatus::Active);
    assert_eq!(t.quotas, quotas);
    assert!(t.has_feature("stdio_mcp"));
    assert!(matches!(
        tenants::create(
            &db,
            &platform(),
            NewTenant {
                name: name.clone(),
                quotas,
                features_enabled: vec![],
                tool_permissions: None,
                policy: Default::default(),
            }
        )
        .await,
        Err(StoreError::Conflict(_))
    ));
    let got = tenants::get_by_name(&db, &platform(), &name)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(got, t);
    let upd = tenants::update(
        &db,
        &platform(),
        t.id,
        TenantUpdate {
            status: Some(TenantStatus::Suspended),
            quotas: Some(Quotas {
                max_users: 9,
                ..quotas
            }),
            policy: Some(tenants::TenantPolicy {
                members_may_auto_approve: true,
                ..t.policy.clone()
            }),
            ..Default::default()
        },
    )
    .await
    .unwrap();
    assert_eq!(upd.status, TenantStatus::Suspended);
    assert!(upd.policy().members_may_auto_approve);
    assert_eq!(upd.policy().stdio_mcp_role, tenants::StdioMcpRole::Member);
    assert_eq!(
        upd.policy().sandbox.memory_bytes,
        Some(u64::from(u32::MAX) * 4)
    );
    assert_eq!(upd.quotas.max_users, 9);
    assert_eq!(upd.name, name);
    assert_eq!(tenants::get_own(&db, &t.scope()).await.unwrap(), upd);
    // The shared test database holds tenants from other tests and earlier runs: page through all
    // of them (oldest first) and find ours, checking the pages add up to the reported total.
    let mut offset = 0u64;
    let mut seen = 0u64;
    let mut found = false;
    loop {
        let (page, total) = tenants::list(&db, &platform(), PageRequest::new(500, offset))
            .await
            .unwrap();
        assert!(total >= 1);
        seen += page.len() as u64;
        found |= page.iter().any(|x| x.id == t.id);
        if page.is_empty() || found {
            break;
        }
        offset += page.len() as u64;
    }
    assert!(found, "the new tenant is listed (looked at {seen} tenants)");
    assert!(matches!(
        tenants::update(
            &db,
            &platform(),
            agentry_schema::ids::TenantId::new(),
            TenantUpdate::default()
        )
        .await,
        Err(StoreError::NotFound(_))
    ));
}

async fn users_and_roles(db: DatabaseConnection) {
    let scope = new_tenant(&db).await;
    let alice = users::create(&db, &scope, "alice", Role::Admin)
        .await
        .unwrap();
    let bob = users::create(&db, &scope, "bob", Role::Member)
        .await
        .unwrap();
    assert!(matches!(
        users::create(&db, &scope, "alice", Role::Member).await,
        Err(StoreError::Conflict(_))
    ));
    assert_eq!(
        users::get(&db, &scope, alice.id)
            .await
            .unwrap()
            .unwrap()
            .role,
        Role::Admin
    );
    let (list, total) = users::list(&db, &scope, PageRequest::default())
        .await
        .unwrap();
    assert_eq!(total, 2);
    assert_eq!(
        list.iter().map(|u| u.name.as_str()).collect::<Vec<_>>(),
        vec!["alice", "bob"]
    );
    let bob2 = users::update(&db, &scope, bob.id, Some(Role::Admin.into()), Some(true))
        .await
        .unwrap();
    assert_eq!((bob2.role, bob2.disabled), (Role::Admin, true));
    let other = new_tenant(&db).await;
    assert_eq!(users::get(&db, &other, bob.id).await.unwrap(), None);
    // Same name in another tenant is fine.
    users::create(&db, &other, "alice", Role::Member)
        .await
        .unwrap();
    assert!(users::delete(&db, &scope, bob.id).await.unwrap());
    assert_eq!(users::count(&db, &scope).await.unwrap(), 1);
}

async fn the_generated_admin_key_is_one_per_database_and_checked_by_hash(db: DatabaseConnection) {
    use agentry_store::platform_admin_key::{self as pak, AtStart};
    let p = platform();
    let first = pak::replace(&db, &p).await.unwrap();
    assert!(pak::looks_like(&first.secret), "{}", first.info.prefix);
    assert!(first.secret.starts_with(&first.info.prefix));
    assert_eq!(pak::get(&db, &p).await.unwrap(), Some(first.info.clone()));
    // A later start keeps the stored key and cannot show it again.
    match pak::ensure(&db, &p).await.unwrap() {
        AtStart::Existing(info) => assert_eq!(info, first.info),
        AtStart::Generated(_) => panic!("a stored key was replaced at start"),
    }
    assert!(pak::matches(&db, &p, &first.secret).await.unwrap());
    let mut wrong = first.secret.clone();
    let last = if wrong.ends_with('a') { "b" } else { "a" };
    wrong.replace_range(wrong.len() - 1.., last);
    assert!(!pak::matches(&db, &p, &wrong).await.unwrap());
    assert!(!pak::matches(&db, &p, &first.info.prefix).await.unwrap());
    assert!(!pak::matches(&db, &p, "").await.unwrap());
    // Replacing makes the old key useless.
    let second = pak::replace(&db, &p).await.unwrap();
    assert_ne!(second.secret, first.secret);
    assert!(!pak::matches(&db, &p, &first.secret).await.unwrap());
    assert!(pak::matches(&db, &p, &second.secret).await.unwrap());
    // Removed: nothing matches; two starts at once agree on one new key.
    assert!(pak::delete(&db, &p).await.unwrap());
    assert!(!pak::delete(&db, &p).await.unwrap());
    assert!(!pak::matches(&db, &p, &second.secret).await.unwrap());
    let (a, b) = tokio::join!(pak::ensure(&db, &p), pak::ensure(&db, &p));
    let (a, b) = (a.unwrap(), b.unwrap());
    let generated: Vec<_> = [&a, &b]
        .into_iter()
        .filter_map(|s| match s {
            AtStart::Generated(g) => Some(g.clone()),
            AtStart::Existing(_) => None,
        })
        .collect();
    assert_eq!(generated.len(), 1, "{a:?} {b:?}");
    assert!(pak::matches(&db, &p, &generated[0].secret).await.unwrap());
    assert!(pak::delete(&db, &p).await.unwrap());
}

async fn api_keys_authenticate_expire_and_revoke(db: DatabaseConnection) {
    let scope = new_tenant(&db).await;
    let u = users::create(&db, &scope, "k", Role::Member).await.unwrap();
    let created = api_keys::create(&db, &scope, u.id, "ci", Role::Member, None)
        .await
        .unwrap();
    assert!(created.secret.starts_with(&created.key.prefix));
    let KeyCheck::Valid(k) = api_keys::authenticate(&db, &platform(), &created.secret)
        .await
        .unwrap()
    else {
        panic!("fresh key must be valid")
    };
    assert_eq!(
        (k.tenant_id, k.user_id, k.role),
        (scope.tenant_id(), u.id, Role::Member)
    );
    // Wrong secret with the right prefix, garbage, and truncation are all simply invalid.
    let mut wrong = created.secret.clone();
    wrong.pop();
    wrong.push(if created.secret.ends_with('a') {
        'b'
    } else {
        'a'
    });
    for bad in [
        wrong.as_str(),
        "agk_",
        "nonsense",
        &created.secret[..20],
        "agk_ÿÿÿÿÿÿÿÿÿÿÿÿÿÿÿÿ",
    ] {
        assert_eq!(
            api_keys::authenticate(&db, &platform(), bad).await.unwrap(),
            KeyCheck::Invalid,
            "{bad}"
        );
    }
    api_keys::touch_last_used(&db, &k).await.unwrap();
    let listed = api_keys::list(&db, &scope, None, Some(&created.key.prefix[..6]))
        .await
        .unwrap();
    assert_eq!(listed.len(), 1);
    assert!(listed[0].last_used_at.is_some());
    let revoked = api_keys::revoke(&db, &scope, k.id).await.unwrap();
    assert!(revoked.revoked_at.is_some());
    assert_eq!(
        api_keys::authenticate(&db, &platform(), &created.secret)
            .await
            .unwrap(),
        KeyCheck::Revoked
    );
    let past = agentry_store::now() - chrono::Duration::seconds(5);
    let expired = api_keys::create(&db, &scope, u.id, "old", Role::Admin, Some(past))
        .await
        .unwrap();
    assert_eq!(
        api_keys::authenticate(&db, &platform(), &expired.secret)
            .await
            .unwrap(),
        KeyCheck::Expired
    );
    let other = new_tenant(&db).await;
    assert!(matches!(
        api_keys::revoke(&db, &other, expired.key.id).await,
        Err(StoreError::NotFound(_))
    ));
}

async fn assistants_default_and_crud(db: DatabaseConnection) {
    let scope = new_tenant(&db).await;
    let (d1, d2) = tokio::join!(
        assistants::ensure_default(&db, &scope, AssistantSpec::default()),
        assistants::ensure_default(&db, &scope, AssistantSpec::default())
    );
    assert_eq!(d1.unwrap().id, d2.unwrap().id);
    let id = AssistantId::try_from("sre").unwrap();
    let spec = AssistantSpec {
        name: "SRE".into(),
        provider: Some("openai".into()),
        model: Some("gpt-x".into()),
        tools: Some(vec!["files:*".into(), "execute".into()]),
        interrupt_on: Some(vec!["write_file".into()]),
        auto_approve: true,
        recursion_limit: Some(7),
        ..AssistantSpec::default()
    };
    let a = assistants::create(&db, &scope, &id, spec.clone())
        .await
        .unwrap();
    assert_eq!(a.spec, spec);
    assert!(matches!(
        assistants::create(&db, &scope, &id, spec.clone()).await,
        Err(StoreError::Conflict(_))
    ));
    let upd = assistants::update(
        &db,
        &scope,
        &id,
        AssistantSpec {
            tools: None,
            ..spec.clone()
        },
    )
    .await
    .unwrap();
    assert_eq!(upd.spec.tools, None);
    assert_eq!(upd.created_at, a.created_at);
    // Inherited fields (None) and an empty override (Some([])) stay apart on every backend.
    let inheriting = assistants::update(
        &db,
        &scope,
        &id,
        AssistantSpec {
            interrupt_on: None,
            system_prompt: None,
            recursion_limit: None,
            timeout_secs: None,
            profile: ProfileId::try_from("sre").unwrap(),
            ..spec.clone()
        },
    )
    .await
    .unwrap();
    let read = assistants::get(&db, &scope, &id).await.unwrap().unwrap();
    assert_eq!(read.spec, inheriting.spec);
    assert_eq!(
        (
            read.spec.interrupt_on,
            read.spec.system_prompt,
            read.spec.recursion_limit
        ),
        (None, None, None)
    );
    let empty = assistants::update(
        &db,
        &scope,
        &id,
        AssistantSpec {
            interrupt_on: Some(Vec::new()),
            system_prompt: Some("Own.".into()),
            ..spec.clone()
        },
    )
    .await
    .unwrap();
    assert_eq!(
        assistants::get(&db, &scope, &id)
            .await
            .unwrap()
            .unwrap()
            .spec,
        empty.spec
    );
    assert_eq!(empty.spec.interrupt_on, Some(Vec::new()));
    assert_eq!(
        assistants::using_profile(&db, &scope, &ProfileId::try_from("general").unwrap())
            .await
            .unwrap()
            .len(),
        2
    );
    assert_eq!(assistants::list(&db, &scope).await.unwrap().len(), 2);
    assert!(matches!(
        assistants::delete(&db, &scope, &AssistantId::default_assistant()).await,
        Err(StoreError::Invalid(_))
    ));
    assert!(assistants::delete(&db, &scope, &id).await.unwrap());
    assert!(!assistants::delete(&db, &scope, &id).await.unwrap());
}

async fn profiles_crud_per_tenant(db: DatabaseConnection) {
    let scope = new_tenant(&db).await;
    let other = new_tenant(&db).await;
    let id = ProfileId::try_from("triage").unwrap();
    let spec = ProfileSpec {
        name: "Triage".into(),
        description: "first look".into(),
        system_prompt: "You triage. {{tools}}".into(),
        tools: Some(vec!["files:read_file".into(), "system:*".into()]),
        interrupt_on: vec!["execute".into()],
        recursion_limit: 12,
        timeout_secs: 90,
    };
    let p = profiles::create(&db, &scope, &id, spec.clone())
        .await
        .unwrap();
    assert_eq!(p.spec, spec);
    assert!(matches!(
        profiles::create(&db, &scope, &id, spec.clone()).await,
        Err(StoreError::Conflict(_))
    ));
    // Another tenant neither sees it nor can change it, and may use the same id.
    assert_eq!(profiles::get(&db, &other, &id).await.unwrap(), None);
    assert!(matches!(
        profiles::update(&db, &other, &id, spec.clone()).await,
        Err(StoreError::NotFound(_))
    ));
    assert!(!profiles::delete(&db, &other, &id).await.unwrap());
    profiles::create(&db, &other, &id, spec.clone())
        .await
        .unwrap();
    let upd = profiles::update(
        &db,
        &scope,
        &id,
        ProfileSpec {
            tools: None,
            ..spec.clone()
        },
    )
    .await
    .unwrap();
    assert_eq!(upd.spec.tools, None);
    assert_eq!(upd.created_at, p.created_at);
    assert_eq!(
        profiles::get(&db, &scope, &id).await.unwrap().unwrap().spec,
        upd.spec
    );
    assert_eq!(profiles::list(&db, &scope).await.unwrap().len(), 1);
    assert!(profiles::delete(&db, &scope, &id).await.unwrap());
    assert_eq!(profiles::list(&db, &scope).await.unwrap().len(), 0);
    assert_eq!(profiles::list(&db, &other).await.unwrap().len(), 1);
}

async fn model_connections_crud_per_tenant(db: DatabaseConnection) {
    use agentry_schema::ids::ModelConnectionId;
    let scope = new_tenant(&db).await;
    let other = new_tenant(&db).await;
    let id = ModelConnectionId::try_from("acme-openai").unwrap();
    let spec = ConnectionSpec {
        name: "Acme's OpenAI".into(),
        provider: "openai".into(),
        base_url: Some(format!("https://llm.example/{}", "p".repeat(1900))),
        model: "gpt-x".into(),
        api_key_sealed: Some(format!("v1:0badc0de:{}", "s".repeat(6000))),
        timeout_secs: 60,
        max_retries: 2,
        embedding_model: Some("text-embedding-3-small".into()),
    };
    assert!(
        !format!("{spec:?}").contains("sssss"),
        "Debug never shows the key"
    );
    let c = model_connections::create(&db, &scope, &id, spec.clone())
        .await
        .unwrap();
    assert_eq!(c.spec, spec);
    assert!(matches!(
        model_connections::create(&db, &scope, &id, spec.clone()).await,
        Err(StoreError::Conflict(_))
    ));
    // Another tenant neither sees it nor can change it, and may use the same id.
    assert_eq!(
        model_connections::get(&db, &other, &id).await.unwrap(),
        None
    );
    assert!(matches!(
        model_connections::update(&db, &other, &id, spec.clone()).await,
        Err(StoreError::NotFound(_))
    ));
    assert!(!model_connections::delete(&db, &other, &id).await.unwrap());
    model_connections::create(&db, &other, &id, spec.clone())
        .await
        .unwrap();
    let upd = model_connections::update(
        &db,
        &scope,
        &id,
        ConnectionSpec {
            base_url: None,
            api_key_sealed: None,
            ..spec.clone()
        },
    )
    .await
    .unwrap();
    assert_eq!((upd.spec.base_url, upd.spec.api_key_sealed), (None, None));
    assert_eq!(upd.created_at, c.created_at);
    // An assistant that uses it is found by it.
    let a = AssistantId::try_from("byok").unwrap();
    assistants::create(
        &db,
        &scope,
        &a,
        AssistantSpec {
            model_connection: Some(id.clone()),
            ..AssistantSpec::default()
        },
    )
    .await
    .unwrap();
    assert_eq!(
        assistants::get(&db, &scope, &a)
            .await
            .unwrap()
            .unwrap()
            .spec
            .model_connection,
        Some(id.clone())
    );
    assert_eq!(
        assistants::using_connection(&db, &scope, &id)
            .await
            .unwrap(),
        vec![a.clone()]
    );
    assert!(
        assistants::using_connection(&db, &other, &id)
            .await
            .unwrap()
            .is_empty()
    );
    assert_eq!(model_connections::count(&db, &scope).await.unwrap(), 1);
    assert!(model_connections::delete(&db, &scope, &id).await.unwrap());
    assert_eq!(model_connections::list(&db, &scope).await.unwrap().len(), 0);
    assert_eq!(model_connections::list(&db, &other).await.unwrap().len(), 1);
    // Deleting the tenant takes its connections with it.
    tenants::delete(&db, &platform(), other.tenant_id())
        .await
        .unwrap();
    assert_eq!(model_connections::list(&db, &other).await.unwrap().len(), 0);
}

fn skill(name: &str, description: &str, extra: &[(&str, &[u8])]) -> NewSkill {
    let mut files = vec![(
        "SKILL.md".to_string(),
        format!("---\nname: {name}\ndescription: {description}\n---\nDo it.\n").into_bytes(),
    )];
    files.extend(extra.iter().map(|(p, c)| (p.to_string(), c.to_vec())));
    NewSkill {
        name: agentry_schema::ids::SkillName::try_from(name).unwrap(),
        description: description.into(),
        instructions: "Do it.\n".into(),
        files,
    }
}

/// Skills (issue 16): tenant and user skills, files as bytes (a 200 KiB blob passes MySQL's
/// 64 KiB `BLOB`), replace, a user's own shadowing the tenant's, another tenant seeing nothing,
/// and deleting a user or a tenant taking their skills along.
async fn skills_per_tenant_and_user(db: DatabaseConnection) {
    let scope = new_tenant(&db).await;
    let other = new_tenant(&db).await;
    let alice = users::create(&db, &scope, "alice", Role::Member)
        .await
        .unwrap();
    let bob = users::create(&db, &scope, "bob", Role::Member)
        .await
        .unwrap();
    let big: Vec<u8> = (0..200 * 1024).map(|i| (i % 251) as u8).collect();
    let name = agentry_schema::ids::SkillName::try_from("deploy").unwrap();
    let t = skills::put(
        &db,
        &scope,
        SkillOwner::Tenant,
        skill(
            "deploy",
            "Tenant deploys",
            &[("scripts/run.sh", b"echo hi"), ("data.bin", &big)],
        ),
        Some(alice.id),
        false,
    )
    .await
    .unwrap();
    assert_eq!((t.file_count, t.owner), (3, SkillOwner::Tenant));
    assert!(matches!(
        skills::put(
            &db,
            &scope,
            SkillOwner::Tenant,
            skill("deploy", "again", &[]),
            None,
            false
        )
        .await,
        Err(StoreError::Conflict(_))
    ));
    assert_eq!(
        skills::file(&db, &scope, SkillOwner::Tenant, &name, "data.bin")
            .await
            .unwrap(),
        Some(big.clone())
    );
    let listed: Vec<String> = skills::files(&db, &scope, SkillOwner::Tenant, &name)
        .await
        .unwrap()
        .into_iter()
        .map(|f| format!("{}:{}", f.path, f.size))
        .collect();
    assert_eq!(
        listed,
        ["SKILL.md:56", "data.bin:204800", "scripts/run.sh:7"]
    );
    // Alice's own `deploy` shadows the tenant's for her only.
    skills::put(
        &db,
        &scope,
        SkillOwner::User(alice.id),
        skill("deploy", "Alice deploys", &[]),
        Some(alice.id),
        false,
    )
    .await
    .unwrap();
    skills::put(
        &db,
        &scope,
        SkillOwner::User(alice.id),
        skill("notes", "Alice notes", &[]),
        Some(alice.id),
        false,
    )
    .await
    .unwrap();
    let seen = |v: Vec<skills::SkillSummary>| -> Vec<String> {
        v.into_iter()
            .map(|s| format!("{}={}", s.name, s.description))
            .collect()
    };
    assert_eq!(
        seen(skills::list_visible(&db, &scope, alice.id).await.unwrap()),
        ["deploy=Alice deploys", "notes=Alice notes"]
    );
    assert_eq!(
        seen(skills::list_visible(&db, &scope, bob.id).await.unwrap()),
        ["deploy=Tenant deploys"]
    );
    let found = skills::find_visible(&db, &scope, bob.id, &name)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(found.description, "Tenant deploys");
    // Another tenant sees none of it, even knowing the user's id.
    assert!(
        skills::list_visible(&db, &other, alice.id)
            .await
            .unwrap()
            .is_empty()
    );
    assert!(
        skills::find_visible(&db, &other, alice.id, &name)
            .await
            .unwrap()
            .is_none()
    );
    assert!(
        skills::file(&db, &other, SkillOwner::Tenant, &name, "SKILL.md")
            .await
            .unwrap()
            .is_none()
    );
    // Replace: the old files go.
    skills::put(
        &db,
        &scope,
        SkillOwner::Tenant,
        skill("deploy", "Tenant deploys v2", &[]),
        None,
        true,
    )
    .await
    .unwrap();
    assert_eq!(
        skills::files(&db, &scope, SkillOwner::Tenant, &name)
            .await
            .unwrap()
            .len(),
        1
    );
    assert_eq!(
        skills::get(&db, &scope, SkillOwner::Tenant, &name)
            .await
            .unwrap()
            .unwrap()
            .created_at,
        t.created_at
    );
    // Deleting Alice deletes her skills; the tenant's stay.
    assert!(users::delete(&db, &scope, alice.id).await.unwrap());
    assert!(
        skills::list(&db, &scope, SkillOwner::User(alice.id))
            .await
            .unwrap()
            .is_empty()
    );
    assert!(
        skills::file(&db, &scope, SkillOwner::User(alice.id), &name, "SKILL.md")
            .await
            .unwrap()
            .is_none()
    );
    assert!(
        skills::delete(&db, &scope, SkillOwner::Tenant, &name)
            .await
            .unwrap()
    );
    assert!(
        !skills::delete(&db, &scope, SkillOwner::Tenant, &name)
            .await
            .unwrap()
    );
    assert!(
        skills::file(&db, &scope, SkillOwner::Tenant, &name, "SKILL.md")
            .await
            .unwrap()
            .is_none()
    );
    // A tenant's deletion takes its skills along.
    skills::put(
        &db,
        &other,
        SkillOwner::Tenant,
        skill("deploy", "x", &[]),
        None,
        false,
    )
    .await
    .unwrap();
    assert!(
        tenants::delete(&db, &platform(), other.tenant_id())
            .await
            .unwrap()
    );
    assert!(
        skills::list(&db, &other, SkillOwner::Tenant)
            .await
            .unwrap()
            .is_empty()
    );
}

async fn executions_lifecycle_and_listing(db: DatabaseConnection) {
    let scope = new_tenant(&db).await;
    let user = UserId::new();
    let sid = SessionId::new();
    let run = RunId::new();
    let e = executions::create(
        &db,
        &scope,
        NewExecution {
            id: run,
            user_id: user,
            session_id: sid,
            assistant_id: "default".into(),
            input: "hi".into(),
            trace_id: Some("abc".into()),
            status: ExecutionStatus::Running,
            // The longest a custom role's name may be: the column holds it on every backend.
            role: Some(agentry_schema::roles::Grant::custom(
                agentry_schema::roles::RoleName::parse(&"r".repeat(32)).unwrap(),
            )),
        },
    )
    .await
    .unwrap();
    assert_eq!(e.status, ExecutionStatus::Running);
    let stored = executions::get(&db, &scope, run).await.unwrap().unwrap();
    assert_eq!(
        stored.role.map(|g| g.as_str().to_string()),
        Some("r".repeat(32)),
        "the run's role is kept for its recovery"
    );
    assert_eq!(
        executions::active_for_session(&db, &scope, sid)
            .await
            .unwrap()
            .map(|x| x.id),
        Some(run)
    );
    executions::update(
        &db,
        &scope,
        run,
        ExecutionStatus::WaitingApproval,
        2,
        TokenUsage::new(10, 5),
        None,
    )
    .await
    .unwrap();
    let unfinished = executions::list_unfinished(&db, &platform()).await.unwrap();
    assert!(
        unfinished
            .iter()
            .any(|x| x.id == run && x.status == ExecutionStatus::WaitingApproval)
    );
    executions::update(
        &db,
        &scope,
        run,
        ExecutionStatus::Failed,
        3,
        TokenUsage::new(20, 7),
        Some("boom"),
    )
    .await
    .unwrap();
    let done = executions::get(&db, &scope, run).await.unwrap().unwrap();
    assert_eq!(
        (done.status, done.steps, done.token_usage),
        (ExecutionStatus::Failed, 3, TokenUsage::new(20, 7))
    );
    assert_eq!(done.error.as_deref(), Some("boom"));
    assert!(done.completed_at.is_some());
    assert_eq!(
        executions::active_for_session(&db, &scope, sid)
            .await
            .unwrap(),
        None
    );
    let (list, total) = executions::list(
        &db,
        &scope,
        &ExecutionFilter {
            status: Some(ExecutionStatus::Failed),
            ..Default::default()
        },
        PageRequest::default(),
    )
    .await
    .unwrap();
    assert_eq!((list.len(), total), (1, 1));
    let since = agentry_store::now() - chrono::Duration::hours(1);
    assert_eq!(
        executions::tokens_since(&db, &scope, since).await.unwrap(),
        27
    );
    let other = new_tenant(&db).await;
    assert!(matches!(
        executions::update(
            &db,
            &other,
            run,
            ExecutionStatus::Completed,
            1,
            TokenUsage::default(),
            None
        )
        .await,
        Err(StoreError::NotFound(_))
    ));
}

async fn approvals_first_decision_wins(db: DatabaseConnection) {
    let scope = new_tenant(&db).await;
    let id = ApprovalId::new();
    let sid = SessionId::new();
    approvals::create(
        &db,
        &scope,
        NewApproval {
            id,
            session_id: sid,
            execution_id: RunId::new(),
            kind: "approval".into(),
            tool_call_id: Some("c1".into()),
            request: json!({"name": "execute"}),
        },
    )
    .await
    .unwrap();
    assert_eq!(
        approvals::list_pending_for_session(&db, &scope, sid)
            .await
            .unwrap()
            .len(),
        1
    );
    let who = UserId::new();
    assert!(
        approvals::decide(
            &db,
            &scope,
            id,
            ApprovalStatus::Approved,
            Some(json!({"type": "approve"})),
            Some(who)
        )
        .await
        .unwrap()
    );
    assert!(
        !approvals::decide(&db, &scope, id, ApprovalStatus::Rejected, None, None)
            .await
            .unwrap()
    );
    let a = approvals::get(&db, &scope, id).await.unwrap().unwrap();
    assert_eq!(
        (a.status, a.decided_by),
        (ApprovalStatus::Approved, Some(who))
    );
    assert!(
        approvals::list_pending_for_session(&db, &scope, sid)
            .await
            .unwrap()
            .is_empty()
    );
    let other = new_tenant(&db).await;
    assert_eq!(approvals::get(&db, &other, id).await.unwrap(), None);
}

async fn tool_call_audit_rows(db: DatabaseConnection) {
    let scope = new_tenant(&db).await;
    let run = RunId::new();
    for (i, err) in [None, Some("bad args")].into_iter().enumerate() {
        tool_calls::insert(
            &db,
            &scope,
            NewToolCallLog {
                session_id: SessionId::new(),
                execution_id: run,
                tool_call_id: format!("c{i}"),
                tool_name: "read_file".into(),
                input: json!({"path": "a.txt"}),
                output: err.is_none().then(|| json!({"content": "x"})),
                error: err.map(str::to_string),
                duration_ms: 12,
                approved: Some(i == 0),
                approved_by: None,
            },
        )
        .await
        .unwrap();
    }
    let rows = tool_calls::list_by_execution(&db, &scope, run)
        .await
        .unwrap();
    assert_eq!(rows.len(), 2);
    assert_eq!(rows[0].tool_call_id, "c0");
    assert_eq!(rows[1].error.as_deref(), Some("bad args"));
    assert_eq!(rows[0].output, Some(json!({"content": "x"})));
}

async fn audit_lists_filter_by_user_assistant_tool_outcome_and_time(db: DatabaseConnection) {
    use agentry_schema::entities::{execution, tool_call_log};
    use sea_orm::sea_query::Expr;
    use sea_orm::{ColumnTrait, EntityTrait, QueryFilter};
    let scope = new_tenant(&db).await;
    let other = new_tenant(&db).await;
    let (alice, bob) = (UserId::new(), UserId::new());
    let old = agentry_store::now() - chrono::Duration::days(30);
    // alice: a run on `default` (read_file ok, execute failed); bob: an old run on `analyst`
    // (read_file ok). The other tenant: a run of alice's id with execute.
    let mut runs = Vec::new();
    for (scope, user, assistant, calls) in [
        (
            &scope,
            alice,
            "default",
            vec![("read_file", None), ("execute", Some("denied"))],
        ),
        (&scope, bob, "analyst", vec![("read_file", None)]),
        (&other, alice, "default", vec![("execute", None)]),
    ] {
        let run = RunId::new();
        let sid = SessionId::new();
        executions::create(
            &db,
            scope,
            NewExecution {
                id: run,
                user_id: user,
                session_id: sid,
                assistant_id: assistant.into(),
                input: "hi".into(),
                trace_id: None,
                status: ExecutionStatus::Running,
                role: None,
            },
        )
        .await
        .unwrap();
        for (i, (tool, err)) in calls.into_iter().enumerate() {
            tool_calls::insert(
                &db,
                scope,
                NewToolCallLog {
                    session_id: sid,
                    execution_id: run,
                    tool_call_id: format!("c{i}"),
                    tool_name: tool.into(),
                    input: json!({}),
                    output: None,
                    error: err.map(str::to_string),
                    duration_ms: 1,
                    approved: None,
                    approved_by: None,
                },
            )
            .await
            .unwrap();
        }
        runs.push(run);
    }
    execution::Entity::update_many()
        .col_expr(execution::Column::StartedAt, Expr::value(old))
        .filter(execution::Column::Id.eq(runs[1].0))
        .exec(&db)
        .await
        .unwrap();
    tool_call_log::Entity::update_many()
        .col_expr(tool_call_log::Column::CreatedAt, Expr::value(old))
        .filter(tool_call_log::Column::ExecutionId.eq(runs[1].0))
        .exec(&db)
        .await
        .unwrap();
    let page = PageRequest::default();
    let run_ids = |f: ExecutionFilter| {
        let db = db.clone();
        async move {
            let (items, total) = executions::list(&db, &scope, &f, page).await.unwrap();
            assert_eq!(items.len() as u64, total);
            items.into_iter().map(|e| e.id).collect::<Vec<_>>()
        }
    };
    assert_eq!(
        run_ids(ExecutionFilter {
            tool_name: Some("execute".into()),
            ..Default::default()
        })
        .await,
        vec![runs[0]]
    );
    assert_eq!(
        run_ids(ExecutionFilter {
            assistant_id: Some("analyst".into()),
            ..Default::default()
        })
        .await,
        vec![runs[1]]
    );
    let week_ago = agentry_store::now() - chrono::Duration::days(7);
    assert_eq!(
        run_ids(ExecutionFilter {
            to: Some(week_ago),
            ..Default::default()
        })
        .await,
        vec![runs[1]]
    );
    assert_eq!(
        run_ids(ExecutionFilter {
            from: Some(week_ago),
            tool_name: Some("read_file".into()),
            user_id: Some(alice),
            ..Default::default()
        })
        .await,
        vec![runs[0]]
    );
    let calls = |f: tool_calls::ToolCallFilter, scope: TenantScope| {
        let db = db.clone();
        async move {
            let (items, total) = tool_calls::list(&db, &scope, &f, page).await.unwrap();
            assert_eq!(items.len() as u64, total);
            items
                .into_iter()
                .map(|c| (c.call.tool_name, c.user_id, c.assistant_id))
                .collect::<Vec<_>>()
        }
    };
    use tool_calls::{CallOutcome, ToolCallFilter};
    assert_eq!(
        calls(
            ToolCallFilter {
                tool_name: Some("read_file".into()),
                ..Default::default()
            },
            scope
        )
        .await,
        vec![
            ("read_file".to_string(), alice, "default".to_string()),
            ("read_file".to_string(), bob, "analyst".to_string())
        ],
        "newest first, each with its run's user and assistant"
    );
    assert_eq!(
        calls(
            ToolCallFilter {
                user_id: Some(bob),
                ..Default::default()
            },
            scope
        )
        .await,
        vec![("read_file".to_string(), bob, "analyst".to_string())]
    );
    assert_eq!(
        calls(
            ToolCallFilter {
                outcome: Some(CallOutcome::Error),
                ..Default::default()
            },
            scope
        )
        .await,
        vec![("execute".to_string(), alice, "default".to_string())]
    );
    assert_eq!(
        calls(
            ToolCallFilter {
                assistant_id: Some("default".into()),
                outcome: Some(CallOutcome::Ok),
                from: Some(week_ago),
                ..Default::default()
            },
            scope
        )
        .await,
        vec![("read_file".to_string(), alice, "default".to_string())]
    );
    // The other tenant's alice-run is not in this tenant's audit, nor this one's in its.
    assert_eq!(
        calls(
            ToolCallFilter {
                user_id: Some(alice),
                ..Default::default()
            },
            other
        )
        .await,
        vec![("execute".to_string(), alice, "default".to_string())]
    );
    assert!(
        calls(
            ToolCallFilter {
                execution_id: Some(runs[0]),
                ..Default::default()
            },
            other
        )
        .await
        .is_empty()
    );
}

async fn events_append_replay_and_max_seq(db: DatabaseConnection) {
    let scope = new_tenant(&db).await;
    let sid = SessionId::new();
    let run = RunId::new();
    let evs: Vec<ExecutionEvent> = (1..=5)
        .map(|i| {
            ExecutionEvent::new(
                i,
                sid.to_string(),
                run.to_string(),
                EventPayload::text(format!("chunk {i}"), i == 5),
            )
        })
        .collect();
    events::append(&db, &scope, sid, &evs[..3]).await.unwrap();
    events::append(&db, &scope, sid, &evs[3..]).await.unwrap();
    assert_eq!(events::max_seq(&db, &scope, sid).await.unwrap(), 5);
    assert_eq!(
        events::list_after(&db, &scope, sid, 2, 100).await.unwrap(),
        evs[2..].to_vec()
    );
    assert_eq!(
        events::list_after(&db, &scope, sid, 0, 2).await.unwrap(),
        evs[..2].to_vec()
    );
    assert!(matches!(
        events::append(&db, &scope, sid, &evs[..1]).await,
        Err(StoreError::Conflict(_))
    ));
    let other = new_tenant(&db).await;
    assert!(
        events::list_after(&db, &other, sid, 0, 100)
            .await
            .unwrap()
            .is_empty()
    );
}

/// Issue 27 (A2A `ListTasks`): one user's top-level runs of one assistant, most recently
/// updated first, paged by a keyset cursor that never repeats or skips a row (ties on the
/// update time broken by id), with the total; a status filter; a run's first stored `seq`.
async fn runs_page_by_update_time_with_a_cursor(db: DatabaseConnection) {
    let scope = new_tenant(&db).await;
    let (user, other_user) = (UserId::new(), UserId::new());
    let sid = SessionId::new();
    let mk = |user: UserId, assistant: &str| NewExecution {
        id: RunId::new(),
        user_id: user,
        session_id: sid,
        assistant_id: assistant.into(),
        input: "hi".into(),
        trace_id: None,
        status: ExecutionStatus::Running,
        role: None,
    };
    let mut mine = Vec::new();
    for _ in 0..5 {
        let e = executions::create(&db, &scope, mk(user, "default"))
            .await
            .unwrap();
        mine.push(e.id);
    }
    // Not listed: another user's, another assistant's.
    executions::create(&db, &scope, mk(other_user, "default"))
        .await
        .unwrap();
    executions::create(&db, &scope, mk(user, "other"))
        .await
        .unwrap();
    executions::update(
        &db,
        &scope,
        mine[1],
        ExecutionStatus::Completed,
        1,
        TokenUsage::default(),
        None,
    )
    .await
    .unwrap();
    let page =
        |after| executions::list_by_update(&db, &scope, user, "default", None, &[], None, after, 2);
    let (mut seen, mut after, mut pages) = (Vec::new(), None, 0);
    loop {
        let (rows, total) = page(after).await.unwrap();
        assert_eq!(total, 5);
        pages += 1;
        let Some(last) = rows.last() else { break };
        after = Some(executions::UpdateCursor {
            updated_at: last.updated_at,
            id: last.id,
        });
        seen.extend(rows.iter().map(|r| (r.updated_at, r.id)));
        assert!(pages < 10, "the cursor does not advance: {seen:?}");
    }
    let mut want = seen.clone();
    want.sort_by(|a, b| b.cmp(a));
    assert_eq!(seen, want, "newest update first, then id");
    let ids: BTreeSet<RunId> = seen.iter().map(|(_, id)| *id).collect();
    assert_eq!(ids, mine.iter().copied().collect::<BTreeSet<_>>());
    assert_eq!(seen.len(), 5, "no row twice");
    // The one updated last comes first.
    assert_eq!(seen[0].1, mine[1]);
    let (done, total) = executions::list_by_update(
        &db,
        &scope,
        user,
        "default",
        Some(sid),
        &[ExecutionStatus::Completed],
        None,
        None,
        10,
    )
    .await
    .unwrap();
    assert_eq!((done.len(), total, done[0].id), (1, 1, mine[1]));
    let other = new_tenant(&db).await;
    let (rows, total) =
        executions::list_by_update(&db, &other, user, "default", None, &[], None, None, 10)
            .await
            .unwrap();
    assert!(rows.is_empty() && total == 0);
    // A run's first stored event.
    let evs: Vec<ExecutionEvent> = (3..=4)
        .map(|i| {
            ExecutionEvent::new(
                i,
                sid.to_string(),
                mine[0].to_string(),
                EventPayload::text("x", false),
            )
        })
        .collect();
    events::append(&db, &scope, sid, &evs).await.unwrap();
    assert_eq!(
        events::first_seq_of_run(&db, &scope, mine[0])
            .await
            .unwrap(),
        Some(3)
    );
    assert_eq!(
        events::first_seq_of_run(&db, &scope, mine[2])
            .await
            .unwrap(),
        None
    );
    assert_eq!(
        events::first_seq_of_run(&db, &other, mine[0])
            .await
            .unwrap(),
        None
    );
}

/// Issue 12, item 1: `seq` reservations never go down (except an explicit give-back of what
/// this holder reserved), and a run's end stores its events, status and `done` together,
/// idempotently, never overwriting another final status.
async fn a_runs_end_is_one_idempotent_write_and_reservations_only_rise(db: DatabaseConnection) {
    let scope = new_tenant(&db).await;
    let user = users::create(&db, &scope, "u", Role::Member).await.unwrap();
    let s = sessions::create(&db, &scope, new_session(user.id))
        .await
        .unwrap();
    assert_eq!(sessions::seq_floor(&db, &scope, s.id).await.unwrap(), 0);
    sessions::reserve_seq(&db, &scope, s.id, 300).await.unwrap();
    sessions::reserve_seq(&db, &scope, s.id, 100).await.unwrap();
    assert_eq!(sessions::seq_floor(&db, &scope, s.id).await.unwrap(), 300);
    sessions::touch_fenced(&db, &scope, s.id, SessionState::Running, Some(500), None)
        .await
        .unwrap();
    assert_eq!(sessions::seq_floor(&db, &scope, s.id).await.unwrap(), 500);
    let other = sessions::create(&db, &scope, new_session(user.id))
        .await
        .unwrap();
    assert_eq!(
        sessions::seq_floor(&db, &scope, other.id).await.unwrap(),
        0,
        "a reservation is per session"
    );

    let mk_run = |status| NewExecution {
        id: RunId::new(),
        user_id: user.id,
        session_id: s.id,
        assistant_id: "default".into(),
        input: "hi".into(),
        trace_id: None,
        status,
        role: None,
    };
    let run = executions::create(&db, &scope, mk_run(ExecutionStatus::Running))
        .await
        .unwrap()
        .id;
    // A `task` child of the run, started later and still running, is not the session's
    // unfinished run: the top-level one is.
    executions::insert_child(&db, &scope, mk_run(ExecutionStatus::Running), run, "call-1")
        .await
        .unwrap();
    assert_eq!(
        sessions::floor_and_active(&db, &scope, s.id, true)
            .await
            .unwrap(),
        (500, Some(run)),
        "one statement reads the floor and the unfinished top-level run"
    );
    assert_eq!(
        sessions::floor_and_active(&db, &scope, other.id, true)
            .await
            .unwrap(),
        (0, None)
    );
    assert_eq!(
        sessions::floor_and_active(&db, &new_tenant(&db).await, s.id, true)
            .await
            .unwrap(),
        (0, None),
        "another tenant reads nothing of the session"
    );
    let approval = ApprovalId::new();
    approvals::create(
        &db,
        &scope,
        NewApproval {
            id: approval,
            session_id: s.id,
            execution_id: run,
            kind: "approval".into(),
            tool_call_id: Some("c1".into()),
            request: json!({}),
        },
    )
    .await
    .unwrap();
    let ev =
        |seq: u64, payload| ExecutionEvent::new(seq, s.id.to_string(), run.to_string(), payload);
    let text = |seq| ev(seq, EventPayload::text(format!("t{seq}"), false));
    let (t1, t2, t3) = (text(1), text(2), text(3));
    events::append(&db, &scope, s.id, &[t1.clone(), t2.clone()])
        .await
        .unwrap();
    let done = ev(
        4,
        EventPayload::Done(agentry_schema::events::DoneData::new(
            agentry_schema::events::DoneStatus::Completed,
            None,
            TokenUsage::new(3, 4),
        )),
    );
    let end = executions::RunEnd {
        run_id: run,
        session_id: s.id,
        status: ExecutionStatus::Completed,
        steps: 2,
        usage: TokenUsage::new(3, 4),
        error: None,
        // seq 2 is stored already: it is left as it is (this copy has another timestamp).
        events: vec![text(2), t3.clone(), done.clone()],
        messages: vec![messages::NewMessage {
            run_id: Some(run),
            role: messages::MessageRole::Assistant,
            content: "the final answer".into(),
            tool_calls: None,
            tool_call_id: None,
        }],
        fence: None,
        decisions: Vec::new(),
        tool_calls: vec![agentry_store::tool_calls::NewToolCallLog {
            session_id: s.id,
            execution_id: run,
            tool_call_id: "call-end".into(),
            tool_name: "write_todos".into(),
            input: serde_json::json!({}),
            output: None,
            error: Some("rejected".into()),
            duration_ms: 0,
            approved: Some(false),
            approved_by: None,
        }],
        cancel_approvals: true,
        child: false,
    };
    let messages_before = messages::count(&db, &scope, s.id).await.unwrap();
    assert_eq!(events::done_of_run(&db, &scope, run).await.unwrap(), None);
    executions::record_end(&db, &scope, &end).await.unwrap();
    assert_eq!(
        sessions::floor_and_active(&db, &scope, s.id, true)
            .await
            .unwrap()
            .1,
        None,
        "an ended run is not the session's unfinished run"
    );
    let stored = events::list_after(&db, &scope, s.id, 0, 100).await.unwrap();
    assert_eq!(stored, vec![t1, t2, t3, done.clone()]);
    assert_eq!(
        events::done_of_run(&db, &scope, run).await.unwrap(),
        Some(done.clone())
    );
    let e = executions::get(&db, &scope, run).await.unwrap().unwrap();
    assert_eq!(
        (e.status, e.steps, e.token_usage),
        (ExecutionStatus::Completed, 2, TokenUsage::new(3, 4))
    );
    assert!(e.completed_at.is_some());
    assert_eq!(
        approvals::get(&db, &scope, approval)
            .await
            .unwrap()
            .unwrap()
            .status,
        ApprovalStatus::Cancelled
    );
    let sess = sessions::get(&db, &scope, s.id).await.unwrap().unwrap();
    assert_eq!(sess.state, SessionState::Idle);
    assert_eq!(sessions::seq_floor(&db, &scope, s.id).await.unwrap(), 500);

    // The same end again (a retry after a lost commit) changes nothing; another end never
    // overwrites the final status.
    executions::record_end(&db, &scope, &end).await.unwrap();
    let failed = executions::RunEnd {
        status: ExecutionStatus::Failed,
        error: Some("late".into()),
        events: vec![],
        ..end.clone()
    };
    executions::record_end(&db, &scope, &failed).await.unwrap();
    // The last step's message and audit row went in once, with the end that ended the run.
    assert_eq!(
        messages::count(&db, &scope, s.id).await.unwrap(),
        messages_before + 1
    );
    let audit = agentry_store::tool_calls::list_by_execution(&db, &scope, run)
        .await
        .unwrap();
    assert_eq!(
        audit
            .iter()
            .filter(|a| a.tool_call_id == "call-end")
            .count(),
        1,
        "{audit:?}"
    );
    assert_eq!(
        executions::get(&db, &scope, run)
            .await
            .unwrap()
            .unwrap()
            .status,
        ExecutionStatus::Completed
    );
    assert_eq!(
        events::list_after(&db, &scope, s.id, 0, 100)
            .await
            .unwrap()
            .len(),
        4
    );

    // A run that ended without a `done` in its stream is found by start-up recovery; one with
    // its `done` is not.
    let bare = executions::create(&db, &scope, mk_run(ExecutionStatus::Running))
        .await
        .unwrap()
        .id;
    executions::update(
        &db,
        &scope,
        bare,
        ExecutionStatus::Completed,
        1,
        TokenUsage::default(),
        None,
    )
    .await
    .unwrap();
    let since = chrono::Utc::now() - chrono::Duration::hours(1);
    let found: Vec<RunId> = executions::finished_without_done(&db, &platform(), since)
        .await
        .unwrap()
        .into_iter()
        .filter(|e| e.session_id == s.id)
        .map(|e| e.id)
        .collect();
    assert_eq!(found, vec![bare]);

    // Giving back unused numbers works only for the holder of the current reservation.
    sessions::release_seq(&db, &scope, s.id, 499, 4)
        .await
        .unwrap();
    assert_eq!(sessions::seq_floor(&db, &scope, s.id).await.unwrap(), 500);
    sessions::release_seq(&db, &scope, s.id, 500, 4)
        .await
        .unwrap();
    assert_eq!(sessions::seq_floor(&db, &scope, s.id).await.unwrap(), 4);
}

async fn mcp_servers_unique_per_user(db: DatabaseConnection) {
    let scope = new_tenant(&db).await;
    let (a, b) = (UserId::new(), UserId::new());
    let new = |user, name: &str| NewMcpServer {
        user_id: user,
        name: name.into(),
        transport: "stdio".into(),
        command: Some("npx".into()),
        args: vec!["-y".into(), "srv".into()],
        url: None,
        env_encrypted: Some("ciphertext".into()),
        headers_encrypted: None,
        disabled: false,
        timeout_secs: 30,
        policy: None,
    };
    let row = mcp_servers::create(&db, &scope, new(a, "fs"))
        .await
        .unwrap();
    assert_eq!(row.args, vec!["-y", "srv"]);
    assert!(matches!(
        mcp_servers::create(&db, &scope, new(a, "fs")).await,
        Err(StoreError::Conflict(_))
    ));
    mcp_servers::create(&db, &scope, new(b, "fs"))
        .await
        .unwrap();
    assert_eq!(row.policy, None);
    let policy = serde_json::json!({"allowed_tools": ["read"], "rate_limit_per_minute": 5});
    let replaced = mcp_servers::replace(
        &db,
        &scope,
        NewMcpServer {
            disabled: true,
            policy: Some(policy.clone()),
            ..new(a, "fs")
        },
    )
    .await
    .unwrap();
    assert_eq!((replaced.id, replaced.disabled), (row.id, true));
    let got = mcp_servers::get_by_name(&db, &scope, a, "fs")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(got.policy, Some(policy));
    assert_eq!(mcp_servers::count_by_user(&db, &scope, a).await.unwrap(), 1);
    assert!(
        mcp_servers::delete_by_name(&db, &scope, a, "fs")
            .await
            .unwrap()
    );
    assert!(
        mcp_servers::list_by_user(&db, &scope, a)
            .await
            .unwrap()
            .is_empty()
    );
    assert_eq!(
        mcp_servers::list_by_user(&db, &scope, b)
            .await
            .unwrap()
            .len(),
        1
    );
}

async fn memories_search_and_isolation(db: DatabaseConnection) {
    use agentry_schema::memory::MemoryScope::{Assistant, Tenant, User};
    use memories::{Embedding, MemoryChange, Reader};
    let scope = new_tenant(&db).await;
    let (a, b) = (UserId::new(), UserId::new());
    let mk = |user, content: &str| NewMemory::of_user(user, content);
    let reader = |user, assistant: Option<&str>| Reader {
        user_id: user,
        assistant_id: assistant.map(str::to_string),
    };
    let all = [User, Assistant, Tenant];
    memories::create(&db, &scope, mk(a, "Prefers Rust over Go"))
        .await
        .unwrap();
    let k8s = memories::create(
        &db,
        &scope,
        NewMemory {
            embedding: Some(Embedding {
                model: "m".into(),
                vector: vec![0.5, -1.25, 3.0],
            }),
            source_run_id: Some(RunId::new()),
            ..mk(a, "Deploys on Kubernetes with Rust services")
        },
    )
    .await
    .unwrap();
    memories::create(&db, &scope, mk(a, "Likes tea"))
        .await
        .unwrap();
    memories::create(&db, &scope, mk(b, "Rust everywhere"))
        .await
        .unwrap();
    memories::create(
        &db,
        &scope,
        NewMemory {
            expires_at: Some(agentry_store::now() - chrono::Duration::seconds(1)),
            ..mk(a, "rust expired")
        },
    )
    .await
    .unwrap();
    // Shared knowledge: the tenant's, and the `support` assistant's.
    memories::create(
        &db,
        &scope,
        NewMemory {
            scope: Tenant,
            ..mk(b, "The tenant standard is Rust 1.85")
        },
    )
    .await
    .unwrap();
    memories::create(
        &db,
        &scope,
        NewMemory {
            scope: Assistant,
            assistant_id: Some("support".into()),
            ..mk(b, "Support answers mention the Rust SLA")
        },
    )
    .await
    .unwrap();

    // The vector comes back as stored, bit for bit.
    let got = memories::get(&db, &scope, k8s.id).await.unwrap().unwrap();
    assert_eq!(got.embedding, k8s.embedding);
    assert_eq!(got.embedding.unwrap().vector, vec![0.5, -1.25, 3.0]);
    assert_eq!(got.source_run_id, k8s.source_run_id);

    let words = |hits: Vec<(usize, memories::Memory)>| {
        hits.into_iter().map(|(_, m)| m.content).collect::<Vec<_>>()
    };
    let hits = memories::keyword_search(
        &db,
        &scope,
        &reader(a, None),
        &[User],
        "rust kubernetes",
        10,
    )
    .await
    .unwrap();
    assert_eq!(
        words(hits),
        vec![
            "Deploys on Kubernetes with Rust services",
            "Prefers Rust over Go"
        ]
    );
    // A's own three (the expired one is gone), plus the tenant's, plus `support`'s when A talks
    // to `support` — but not when A talks to another assistant.
    let count = |r: Reader, scopes: Vec<agentry_schema::memory::MemoryScope>| {
        let db = db.clone();
        async move {
            memories::list(&db, &scope, &r, &scopes, PageRequest::default())
                .await
                .unwrap()
                .1
        }
    };
    assert_eq!(count(reader(a, None), vec![User]).await, 3);
    assert_eq!(count(reader(a, Some("support")), all.to_vec()).await, 5);
    assert_eq!(count(reader(a, Some("other")), all.to_vec()).await, 4);
    assert_eq!(count(reader(b, Some("support")), vec![User]).await, 1);
    assert_eq!(count(reader(a, None), vec![]).await, 0);
    let hits = memories::keyword_search(&db, &scope, &reader(b, Some("support")), &all, "rust", 10)
        .await
        .unwrap();
    assert_eq!(hits.len(), 3, "{hits:?}");
    let other = new_tenant(&db).await;
    assert!(
        memories::keyword_search(&db, &other, &reader(a, Some("support")), &all, "rust", 10)
            .await
            .unwrap()
            .is_empty()
    );
    assert!(memories::get(&db, &other, k8s.id).await.unwrap().is_none());
    assert!(!memories::delete(&db, &other, k8s.id).await.unwrap());
    assert!(
        memories::update(&db, &other, k8s.id, MemoryChange::default())
            .await
            .unwrap()
            .is_none()
    );

    // Update: new content drops the old vector when told; expiry set in the past hides it.
    let changed = memories::update(
        &db,
        &scope,
        k8s.id,
        MemoryChange {
            content: Some("Deploys on Nomad".into()),
            embedding: Some(None),
            ..MemoryChange::default()
        },
    )
    .await
    .unwrap()
    .unwrap();
    assert_eq!(
        (changed.content.as_str(), changed.embedding),
        ("Deploys on Nomad", None)
    );
    memories::set_embedding(
        &db,
        &scope,
        k8s.id,
        &Embedding {
            model: "m2".into(),
            vector: vec![1.0],
        },
    )
    .await
    .unwrap();
    let got = memories::get(&db, &scope, k8s.id).await.unwrap().unwrap();
    assert_eq!(got.embedding.unwrap().model, "m2");
    memories::update(
        &db,
        &scope,
        k8s.id,
        MemoryChange {
            expires_at: Some(Some(agentry_store::now() - chrono::Duration::seconds(1))),
            ..MemoryChange::default()
        },
    )
    .await
    .unwrap()
    .unwrap();
    assert!(memories::get(&db, &scope, k8s.id).await.unwrap().is_none());
    assert_eq!(count(reader(a, None), vec![User]).await, 2);
    let c = memories::candidates(&db, &scope, &reader(a, None), &all, 100)
        .await
        .unwrap();
    // No assistant named: every assistant's knowledge is in view (as over REST).
    assert_eq!(c.len(), 4, "two own, the tenant's, support's: {c:?}");
    assert!(memories::delete(&db, &scope, c[0].id).await.unwrap());
    assert!(!memories::delete(&db, &scope, c[0].id).await.unwrap());
}

async fn usage_by_day_counts_runs_tokens_and_calls(db: DatabaseConnection) {
    let scope = new_tenant(&db).await;
    for i in 0..3u64 {
        let run = RunId::new();
        executions::create(
            &db,
            &scope,
            NewExecution {
                id: run,
                user_id: UserId::new(),
                session_id: SessionId::new(),
                assistant_id: "default".into(),
                input: "x".into(),
                trace_id: None,
                status: ExecutionStatus::Running,
                role: None,
            },
        )
        .await
        .unwrap();
        executions::update(
            &db,
            &scope,
            run,
            ExecutionStatus::Completed,
            1,
            TokenUsage::new(10 * (i + 1), 1),
            None,
        )
        .await
        .unwrap();
        tool_calls::insert(
            &db,
            &scope,
            NewToolCallLog {
                session_id: SessionId::new(),
                execution_id: run,
                tool_call_id: "c".into(),
                tool_name: "t".into(),
                input: json!({}),
                output: None,
                error: None,
                duration_ms: 1,
                approved: None,
                approved_by: None,
            },
        )
        .await
        .unwrap();
    }
    let now = agentry_store::now();
    let days = usage::by_day(
        &db,
        &scope,
        now - chrono::Duration::days(1),
        now + chrono::Duration::seconds(1),
    )
    .await
    .unwrap();
    let total_runs: u64 = days.iter().map(|d| d.runs).sum();
    let total_tokens: u64 = days.iter().map(|d| d.total_tokens).sum();
    let calls: u64 = days.iter().map(|d| d.tool_calls).sum();
    assert_eq!((total_runs, total_tokens, calls), (3, 63, 3));
}

async fn deleting_a_tenant_removes_its_rows(db: DatabaseConnection) {
    let scope = new_tenant(&db).await;
    let keep = new_tenant(&db).await;
    for sc in [scope, keep] {
        let u = users::create(&db, &sc, "u", Role::Member).await.unwrap();
        let s = sessions::create(&db, &sc, new_session(u.id)).await.unwrap();
        messages::save(&db, &sc, s.id, NewMessage::user("m", None))
            .await
            .unwrap();
    }
    assert!(
        tenants::delete(&db, &platform(), scope.tenant_id())
            .await
            .unwrap()
    );
    assert!(
        tenants::get(&db, &platform(), scope.tenant_id())
            .await
            .unwrap()
            .is_none()
    );
    assert_eq!(users::count(&db, &scope).await.unwrap(), 0);
    assert_eq!(
        sessions::list(&db, &scope, None, PageRequest::default())
            .await
            .unwrap()
            .1,
        0
    );
    assert_eq!(users::count(&db, &keep).await.unwrap(), 1);
    assert_eq!(
        sessions::list(&db, &keep, None, PageRequest::default())
            .await
            .unwrap()
            .1,
        1
    );
}

// ---- properties (>= 100 cases each, per backend) ----

/// Runs a property against one database, many cases, inside the test's runtime.
async fn check<S, F, Fut>(strategy: S, mut body: F)
where
    S: Strategy,
    S::Value: Clone + std::fmt::Debug,
    F: FnMut(S::Value) -> Fut,
    Fut: std::future::Future<Output = Result<(), String>>,
{
    use proptest::test_runner::{Config, TestRunner};
    let mut runner = TestRunner::new(Config {
        cases: 100,
        failure_persistence: None,
        ..Config::default()
    });
    // proptest's runner is synchronous; evaluate each generated case on this runtime.
    let mut cases = Vec::new();
    for _ in 0..100 {
        let tree = strategy.new_tree(&mut runner).expect("strategy");
        cases.push(proptest::strategy::ValueTree::current(&tree));
    }
    for case in cases {
        if let Err(msg) = body(case.clone()).await {
            panic!("property failed for {case:?}: {msg}");
        }
    }
}

macro_rules! ensure {
    ($cond:expr, $($arg:tt)*) => { if !$cond { return Err(format!($($arg)*)); } };
}

async fn prop_session_store_round_trip(db: DatabaseConnection) {
    let scope = new_tenant(&db).await;
    let strat = (
        "[a-z][a-z0-9_-]{0,20}",
        any::<bool>(),
        prop::collection::btree_map(
            "[a-z]{1,6}",
            prop_oneof![
                any::<i32>().prop_map(|n| json!(n)),
                ".{0,12}".prop_map(|s| json!(s)),
                any::<bool>().prop_map(|b| json!(b))
            ],
            0..5,
        ),
    );
    check(strat, |(assistant, auto, meta)| {
        let db = db.clone();
        async move {
            let new = NewSession {
                id: None,
                user_id: UserId::new(),
                assistant_id: AssistantId::try_from(assistant.as_str())
                    .map_err(|e| e.to_string())?,
                auto_approve: auto,
                metadata: json!(meta),
            };
            let created = sessions::create(&db, &scope, new.clone())
                .await
                .map_err(|e| e.to_string())?;
            let got = sessions::get(&db, &scope, created.id)
                .await
                .map_err(|e| e.to_string())?;
            ensure!(
                got.as_ref() == Some(&created),
                "get != create: {got:?} vs {created:?}"
            );
            ensure!(
                created.metadata == agentry_store::sanitize_json(new.metadata.clone())
                    && created.auto_approve == auto
                    && created.assistant_id == new.assistant_id,
                "fields changed"
            );
            Ok(())
        }
    })
    .await;
}

async fn prop_message_pagination(db: DatabaseConnection) {
    let scope = new_tenant(&db).await;
    // One session holding 30 messages; every (limit, offset) must slice it exactly.
    let s = sessions::create(&db, &scope, new_session(UserId::new()))
        .await
        .unwrap();
    let mut ids = Vec::new();
    for i in 0..30 {
        let m = messages::save(&db, &scope, s.id, NewMessage::user(format!("m{i}"), None))
            .await
            .unwrap();
        ids.push(m.id);
    }
    check((0u64..40, 0u64..40), |(limit, offset)| {
        let db = db.clone();
        let ids = ids.clone();
        async move {
            let page = messages::list(&db, &scope, s.id, PageRequest::new(limit, offset))
                .await
                .map_err(|e| e.to_string())?;
            let got: Vec<i64> = page.iter().map(|m| m.id).collect();
            let start = (offset as usize).min(ids.len());
            let end = (start + limit as usize).min(ids.len());
            ensure!(
                got == ids[start..end],
                "limit {limit} offset {offset}: got {got:?}"
            );
            let contents: Vec<String> = page.iter().map(|m| m.content.clone()).collect();
            let expected: Vec<String> = (start..end).map(|i| format!("m{i}")).collect();
            ensure!(contents == expected, "order broken: {contents:?}");
            Ok(())
        }
    })
    .await;
}

async fn prop_cleanup_expired_removes_exactly_the_expired(db: DatabaseConnection) {
    // Ages in minutes and states; timeout 30 min. Expired = idle/closed and older than timeout.
    let state = prop_oneof![
        Just(SessionState::Idle),
        Just(SessionState::Closed),
        Just(SessionState::Running),
        Just(SessionState::WaitingApproval)
    ];
    check(prop::collection::vec((0i64..60, state), 0..8), |specs| {
        let db = db.clone();
        async move {
            let scope = new_tenant(&db).await;
            let now = agentry_store::now();
            let mut expected = BTreeSet::new();
            let mut kept = BTreeSet::new();
            for (age, st) in &specs {
                let s = sessions::create(&db, &scope, new_session(UserId::new()))
                    .await
                    .map_err(|e| e.to_string())?;
                sessions::touch_fenced(&db, &scope, s.id, *st, None, None)
                    .await
                    .map_err(|e| e.to_string())?;
                // Ages sit a whole minute away from the cutoff so clock skew cannot matter.
                let at = now - chrono::Duration::minutes(*age) - chrono::Duration::seconds(30);
                sessions::set_last_active(&db, &scope, s.id, at)
                    .await
                    .map_err(|e| e.to_string())?;
                let is_expired =
                    *age >= 30 && matches!(st, SessionState::Idle | SessionState::Closed);
                if is_expired {
                    expected.insert(s.id)
                } else {
                    kept.insert(s.id)
                };
            }
            let removed: BTreeSet<SessionId> =
                sessions::cleanup_expired(&db, &scope, Duration::from_secs(30 * 60))
                    .await
                    .map_err(|e| e.to_string())?
                    .into_iter()
                    .collect();
            ensure!(
                removed == expected,
                "removed {removed:?}, expected {expected:?}"
            );
            let left: BTreeSet<SessionId> =
                sessions::list(&db, &scope, None, PageRequest::new(100, 0))
                    .await
                    .map_err(|e| e.to_string())?
                    .0
                    .into_iter()
                    .map(|s| s.id)
                    .collect();
            ensure!(left == kept, "left {left:?}, expected {kept:?}");
            Ok(())
        }
    })
    .await;
}

async fn prop_tenant_isolation(db: DatabaseConnection) {
    check((0usize..4, 0usize..4, 0usize..3), |(na, nb, msgs)| {
        let db = db.clone();
        async move {
            let (a, b) = (new_tenant(&db).await, new_tenant(&db).await);
            let user = UserId::new(); // the same user id in both tenants must not leak either
            let mut a_ids = BTreeSet::new();
            for (scope, n) in [(a, na), (b, nb)] {
                for _ in 0..n {
                    let s = sessions::create(&db, &scope, new_session(user))
                        .await
                        .map_err(|e| e.to_string())?;
                    for i in 0..msgs {
                        messages::save(&db, &scope, s.id, NewMessage::user(format!("{i}"), None))
                            .await
                            .map_err(|e| e.to_string())?;
                    }
                    if scope == a {
                        a_ids.insert(s.id);
                    }
                }
            }
            let listed: BTreeSet<SessionId> =
                sessions::list_by_user(&db, &a, user, PageRequest::new(100, 0))
                    .await
                    .map_err(|e| e.to_string())?
                    .into_iter()
                    .map(|s| s.id)
                    .collect();
            ensure!(
                listed == a_ids,
                "tenant A listed {listed:?}, owns {a_ids:?}"
            );
            let (all, total) = sessions::list(&db, &a, None, PageRequest::new(100, 0))
                .await
                .map_err(|e| e.to_string())?;
            ensure!(
                total == na as u64 && all.iter().all(|s| s.tenant_id == a.tenant_id()),
                "tenant-wide list leaked"
            );
            for s in sessions::list(&db, &b, None, PageRequest::new(100, 0))
                .await
                .map_err(|e| e.to_string())?
                .0
            {
                ensure!(
                    messages::count(&db, &a, s.id)
                        .await
                        .map_err(|e| e.to_string())?
                        == 0,
                    "A sees B's messages"
                );
                ensure!(
                    sessions::get(&db, &a, s.id)
                        .await
                        .map_err(|e| e.to_string())?
                        .is_none(),
                    "A gets B's session"
                );
            }
            Ok(())
        }
    })
    .await;
}

/// The database lease (issue 13): one single-node server, or replicas with distinct ids, never
/// both; a lease past its TTL, or held by a process of this host that is gone, is taken over,
/// and its old holder's renewals then fail. Inside a transaction rolled back at the end, so the
/// shared test database keeps no lease.
async fn the_database_lease_admits_one_single_node_server_or_one_cluster(db: DatabaseConnection) {
    use agentry_store::server_lease::{self, Holder, ServeMode};
    use sea_orm::{EntityTrait, TransactionTrait};
    let txn = db.begin().await.unwrap();
    agentry_schema::entities::server_lease::Entity::delete_many()
        .exec(&txn)
        .await
        .unwrap();
    let p = platform();
    let ttl = Duration::from_secs(30);
    let holder = |mode, id: &str, host: &str, pid| Holder {
        mode,
        replica_id: id.into(),
        host: host.into(),
        pid,
    };
    let a = holder(ServeMode::Single, "a", "host-a", 10);
    let b = holder(ServeMode::Single, "b", "host-b", 20);
    let c = holder(ServeMode::Cluster, "c", "host-c", 30);
    let c_again = holder(ServeMode::Cluster, "c", "host-d", 40);
    let d = holder(ServeMode::Cluster, "d", "host-d", 41);

    server_lease::acquire(&txn, &p, &a, ttl)
        .await
        .unwrap()
        .unwrap();
    // A second single-node server is refused, told who holds the database.
    let held = server_lease::acquire(&txn, &p, &b, ttl)
        .await
        .unwrap()
        .unwrap_err();
    assert_eq!(
        (held.replica_id.as_str(), held.host.as_str(), held.pid),
        ("a", "host-a", 10)
    );
    let why = held.explain(ServeMode::Single);
    assert!(
        why.contains("another single-node server") && why.contains("\"a\""),
        "{why}"
    );
    assert!(
        held.expires_in_secs() > 0 && held.expires_in_secs() <= 31,
        "{held:?}"
    );
    assert!(server_lease::renew(&txn, &p, &a, ttl).await.unwrap());
    // So is a replica of a cluster.
    let held = server_lease::acquire(&txn, &p, &c, ttl)
        .await
        .unwrap()
        .unwrap_err();
    assert_eq!(held.mode, "single");
    assert!(
        held.explain(ServeMode::Cluster)
            .contains("a single-node server serves")
    );

    // Released: replicas may come, each with its own id; single-node servers may not.
    assert!(server_lease::release(&txn, &p, &a).await.unwrap());
    assert!(!server_lease::renew(&txn, &p, &a, ttl).await.unwrap());
    server_lease::acquire(&txn, &p, &c, ttl)
        .await
        .unwrap()
        .unwrap();
    let held = server_lease::acquire(&txn, &p, &c_again, ttl)
        .await
        .unwrap()
        .unwrap_err();
    assert_eq!((held.host.as_str(), held.pid), ("host-c", 30));
    assert!(
        held.explain(ServeMode::Cluster)
            .contains("replica id \"c\"")
    );
    server_lease::acquire(&txn, &p, &d, ttl)
        .await
        .unwrap()
        .unwrap();
    let held = server_lease::acquire(&txn, &p, &b, ttl)
        .await
        .unwrap()
        .unwrap_err();
    assert_eq!(held.mode, "cluster");
    let mut live: Vec<String> = server_lease::live(&txn, &p)
        .await
        .unwrap()
        .into_iter()
        .map(|l| l.name)
        .collect();
    live.sort();
    assert_eq!(live, ["replica:c", "replica:d"]);

    // Expired leases are taken over, and the old holder cannot renew any more.
    assert!(server_lease::release(&txn, &p, &c).await.unwrap());
    assert!(server_lease::release(&txn, &p, &d).await.unwrap());
    server_lease::acquire(&txn, &p, &a, Duration::ZERO)
        .await
        .unwrap()
        .unwrap();
    server_lease::acquire(&txn, &p, &b, ttl)
        .await
        .unwrap()
        .unwrap();
    assert!(!server_lease::renew(&txn, &p, &a, ttl).await.unwrap());
    assert!(server_lease::renew(&txn, &p, &b, ttl).await.unwrap());

    // On this host, a holder whose process is gone is taken over before its lease expires;
    // one whose process lives (this test) is not.
    assert!(server_lease::release(&txn, &p, &b).await.unwrap());
    let me = Holder::this_process(ServeMode::Single, "me".into());
    let gone = Holder {
        replica_id: "gone".into(),
        pid: 999_999_999,
        ..me.clone()
    };
    server_lease::acquire(&txn, &p, &gone, ttl)
        .await
        .unwrap()
        .unwrap();
    server_lease::acquire(&txn, &p, &me, ttl)
        .await
        .unwrap()
        .unwrap();
    assert!(!server_lease::renew(&txn, &p, &gone, ttl).await.unwrap());
    let elsewhere = holder(ServeMode::Single, "other", "host-x", 50);
    let held = server_lease::acquire(&txn, &p, &elsewhere, ttl)
        .await
        .unwrap()
        .unwrap_err();
    assert_eq!(held.replica_id, "me");
    txn.rollback().await.unwrap();
}

/// A database that comes up while the server starts: `connect` keeps trying (the jittered
/// backoff) until it answers; one that never comes up is given up on at `connect_timeout`.
#[tokio::test]
async fn connect_waits_for_a_database_that_comes_up_and_gives_up_on_one_that_does_not() {
    if Backend::Postgres.skipped() {
        return;
    }
    let target = Backend::Postgres.url(std::path::Path::new("."));
    let upstream = url::Url::parse(&target).unwrap();
    let upstream = format!(
        "{}:{}",
        upstream.host_str().unwrap(),
        upstream.port().unwrap_or(5432)
    );
    let free_port = || {
        std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port()
    };
    let with_port = |port: u16| {
        let mut u = url::Url::parse(&target).unwrap();
        u.set_port(Some(port)).unwrap();
        u.to_string()
    };
    let opts = |url: String, connect_timeout: Duration| agentry_store::DbOptions {
        url,
        max_connections: 2,
        connect_timeout,
        acquire_timeout: Duration::from_secs(5),
    };

    // Nothing listens for the first 700 ms (refused), then a proxy to PostgreSQL does.
    let port = free_port();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(700)).await;
        let listener = tokio::net::TcpListener::bind(("127.0.0.1", port))
            .await
            .unwrap();
        loop {
            let (mut inbound, _) = listener.accept().await.unwrap();
            let upstream = upstream.clone();
            tokio::spawn(async move {
                let mut outbound = tokio::net::TcpStream::connect(upstream).await.unwrap();
                let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
            });
        }
    });
    let started = std::time::Instant::now();
    let db = agentry_store::connect(&opts(with_port(port), Duration::from_secs(30)))
        .await
        .expect("connects once the database is up");
    assert!(started.elapsed() >= Duration::from_millis(700));
    db.ping().await.unwrap();

    // Never up: an error, well before the 30 s a retry without a deadline could take.
    let started = std::time::Instant::now();
    let err = agentry_store::connect(&opts(with_port(free_port()), Duration::from_secs(1)))
        .await
        .unwrap_err();
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "{:?}: {err}",
        started.elapsed()
    );
}

/// Fencing (issue 13): once a newer owner of a session wrote with its token, the old owner's
/// events and run end are refused and change nothing; its own token keeps working until then,
/// and a single-node write (no token) is never refused.
async fn an_owner_whose_fencing_token_is_stale_writes_nothing(db: DatabaseConnection) {
    let scope = new_tenant(&db).await;
    let user = users::create(
        &db,
        &scope,
        &format!("u-{}", uuid::Uuid::now_v7()),
        Role::Member,
    )
    .await
    .unwrap();
    let s = sessions::create(&db, &scope, new_session(user.id))
        .await
        .unwrap();
    assert_eq!(sessions::fence_of(&db, &scope, s.id).await.unwrap(), 0);
    let run = executions::create(
        &db,
        &scope,
        NewExecution {
            id: RunId::new(),
            user_id: user.id,
            session_id: s.id,
            assistant_id: "default".into(),
            input: "hi".into(),
            trace_id: None,
            status: ExecutionStatus::Running,
            role: None,
        },
    )
    .await
    .unwrap()
    .id;
    let ev = |seq: u64| {
        ExecutionEvent::new(
            seq,
            s.id.to_string(),
            run.to_string(),
            EventPayload::text(format!("t{seq}"), false),
        )
    };
    // The first owner (token 1) writes.
    events::append_missing_fenced(&db, &scope, s.id, &[ev(1)], Some(1))
        .await
        .unwrap();
    assert_eq!(sessions::fence_of(&db, &scope, s.id).await.unwrap(), 1);
    // A newer owner (token 2) writes once: from now on token 1 is stale.
    events::append_missing_fenced(&db, &scope, s.id, &[ev(2)], Some(2))
        .await
        .unwrap();
    let refused = events::append_missing_fenced(&db, &scope, s.id, &[ev(3)], Some(1)).await;
    assert!(
        matches!(
            refused,
            Err(StoreError::Fenced {
                token: 1,
                current: 2,
                ..
            })
        ),
        "{refused:?}"
    );
    let end = executions::RunEnd {
        run_id: run,
        session_id: s.id,
        status: ExecutionStatus::Failed,
        steps: 1,
        usage: TokenUsage::new(1, 1),
        error: Some("the old owner's end".into()),
        events: vec![ev(4)],
        messages: vec![],
        tool_calls: vec![],
        decisions: Vec::new(),
        cancel_approvals: true,
        fence: Some(1),
        child: false,
    };
    let refused = executions::record_end(&db, &scope, &end).await;
    assert!(
        matches!(refused, Err(StoreError::Fenced { .. })),
        "{refused:?}"
    );
    assert_eq!(
        refused.unwrap_err().code().as_str(),
        "session_owned_elsewhere"
    );
    // Nothing of the stale writes is there: the run is still running, only seqs 1 and 2 exist.
    let exec = executions::get(&db, &scope, run).await.unwrap().unwrap();
    assert_eq!(exec.status, ExecutionStatus::Running);
    let stored: Vec<u64> = events::list_after(&db, &scope, s.id, 0, 100)
        .await
        .unwrap()
        .iter()
        .map(|e| e.seq)
        .collect();
    assert_eq!(stored, [1, 2]);
    // The new owner's end goes in; a token can never go back down.
    executions::record_end(
        &db,
        &scope,
        &executions::RunEnd {
            fence: Some(2),
            status: ExecutionStatus::Completed,
            error: None,
            ..end.clone()
        },
    )
    .await
    .unwrap();
    assert_eq!(
        executions::get(&db, &scope, run)
            .await
            .unwrap()
            .unwrap()
            .status,
        ExecutionStatus::Completed
    );
    assert!(sessions::fence(&db, &scope, s.id, 1).await.is_err());
    sessions::fence(&db, &scope, s.id, 2).await.unwrap();
    assert_eq!(sessions::fence_of(&db, &scope, s.id).await.unwrap(), 2);
    // A single-node write carries no token and is not fenced.
    events::append_missing_fenced(&db, &scope, s.id, &[ev(9)], None)
        .await
        .unwrap();
    // Another tenant's session is not found, whatever the token.
    let other = new_tenant(&db).await;
    assert!(matches!(
        sessions::fence(&db, &other, s.id, 99).await,
        Err(StoreError::NotFound(_))
    ));
}

/// `run_writes::start_fresh` and `run_writes::step`: one statement each on PostgreSQL, one by
/// one elsewhere; the same rows and answers on every backend, and nothing written when the
/// session's row is not matched (the writer's transaction is rolled back, as here).
async fn a_runs_start_and_steps_write_their_rows_in_one_go_and_nothing_when_refused(
    db: DatabaseConnection,
) {
    use agentry_store::TransactionTrait;
    use agentry_store::run_writes::{self, StepWrite};
    let scope = new_tenant(&db).await;
    let user = users::create(&db, &scope, "starter", Role::Member)
        .await
        .unwrap();
    let s = sessions::create(&db, &scope, new_session(user.id))
        .await
        .unwrap();
    let fresh = |input: &str| NewExecution {
        id: RunId::new(),
        user_id: user.id,
        session_id: s.id,
        assistant_id: "default".into(),
        input: input.into(),
        trace_id: None,
        status: ExecutionStatus::Running,
        role: None,
    };
    // A first run without a history read: the run, the message, the session running.
    let first = fresh("first");
    let txn = db.begin().await.unwrap();
    let read = run_writes::start_fresh(&txn, &scope, s.id, 40, None, first.clone(), None)
        .await
        .unwrap();
    txn.commit().await.unwrap();
    assert_eq!(read, None);
    let e = executions::get(&db, &scope, first.id)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        (e.status, e.input.as_str()),
        (ExecutionStatus::Running, "first")
    );
    let sess = sessions::get(&db, &scope, s.id).await.unwrap().unwrap();
    assert_eq!(sess.state, SessionState::Running);
    assert_eq!(sessions::seq_floor(&db, &scope, s.id).await.unwrap(), 40);
    // Its steps: the model's call (the status changes: waiting for a person), then the tool's
    // result with its audit row.
    let call = NewMessage {
        run_id: Some(first.id),
        role: MessageRole::Assistant,
        content: String::new(),
        tool_calls: Some(json!([{"id": "c1", "name": "t", "arguments": "{}"}])),
        tool_call_id: None,
    };
    let result = NewMessage {
        run_id: Some(first.id),
        role: MessageRole::Tool,
        content: "the result".into(),
        tool_calls: None,
        tool_call_id: Some("c1".into()),
    };
    let audit = NewToolCallLog {
        session_id: s.id,
        execution_id: first.id,
        tool_call_id: "c1".into(),
        tool_name: "t".into(),
        input: json!({}),
        output: Some(json!("the result")),
        error: None,
        duration_ms: 3,
        approved: Some(true),
        approved_by: None,
    };
    let step = |status, messages, tool_calls| StepWrite {
        session_id: s.id,
        run_id: first.id,
        status,
        fence: None,
        decisions: Vec::new(),
        messages,
        tool_calls,
        steps: 1,
        usage: TokenUsage::new(5, 6),
    };
    let txn = db.begin().await.unwrap();
    run_writes::step(
        &txn,
        &scope,
        step(
            Some((
                ExecutionStatus::WaitingApproval,
                SessionState::WaitingApproval,
            )),
            vec![call],
            vec![],
        ),
    )
    .await
    .unwrap();
    txn.commit().await.unwrap();
    let e = executions::get(&db, &scope, first.id)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        (e.status, e.token_usage),
        (ExecutionStatus::WaitingApproval, TokenUsage::new(5, 6))
    );
    let sess = sessions::get(&db, &scope, s.id).await.unwrap().unwrap();
    assert_eq!(sess.state, SessionState::WaitingApproval);
    let txn = db.begin().await.unwrap();
    run_writes::step(&txn, &scope, step(None, vec![result], vec![audit]))
        .await
        .unwrap();
    txn.commit().await.unwrap();
    let logged = tool_calls::list_by_execution(&db, &scope, first.id)
        .await
        .unwrap();
    assert_eq!(logged.len(), 1);
    assert_eq!(
        (
            logged[0].output.clone(),
            logged[0].approved,
            logged[0].duration_ms
        ),
        (Some(json!("the result")), Some(true), 3)
    );
    // A status change for a run that is not there is refused, and writes nothing.
    let txn = db.begin().await.unwrap();
    let refused = run_writes::step(
        &txn,
        &scope,
        StepWrite {
            run_id: RunId::new(),
            ..step(
                Some((ExecutionStatus::Running, SessionState::Running)),
                vec![NewMessage::user("never", None)],
                vec![],
            )
        },
    )
    .await;
    drop(txn);
    assert!(
        matches!(refused, Err(StoreError::NotFound(_))),
        "{refused:?}"
    );

    // A second run reads its history in the same go: the last n, oldest first, its own
    // message last; or only what came after the id a live session holds.
    let all = messages::last_n(&db, &scope, s.id, 50).await.unwrap();
    assert_eq!(all.len(), 3);
    let second = fresh("second");
    let txn = db.begin().await.unwrap();
    let read = run_writes::start_fresh(&txn, &scope, s.id, 80, None, second.clone(), Some((0, 3)))
        .await
        .unwrap()
        .unwrap();
    txn.commit().await.unwrap();
    let contents: Vec<_> = read.iter().map(|m| m.content.as_str()).collect();
    assert_eq!(contents, ["", "the result", "second"]);
    assert_eq!(read, messages::last_n(&db, &scope, s.id, 3).await.unwrap());
    let third = fresh("third");
    let txn = db.begin().await.unwrap();
    let read = run_writes::start_fresh(
        &txn,
        &scope,
        s.id,
        90,
        None,
        third.clone(),
        Some((read[1].id, 50)),
    )
    .await
    .unwrap()
    .unwrap();
    txn.commit().await.unwrap();
    let contents: Vec<_> = read.iter().map(|m| m.content.as_str()).collect();
    assert_eq!(contents, ["second", "third"]);
    assert_eq!(read[1].run_id, Some(third.id));
    let txn = db.begin().await.unwrap();
    let only = run_writes::start_fresh(&txn, &scope, s.id, 95, None, fresh("alone"), Some((0, 1)))
        .await
        .unwrap()
        .unwrap();
    drop(txn);
    assert_eq!(
        only.iter().map(|m| m.content.as_str()).collect::<Vec<_>>(),
        ["alone"]
    );

    // Refused starts write nothing: another tenant's session (not found), a stale fencing token.
    let other = new_tenant(&db).await;
    let stray = fresh("stray");
    let txn = db.begin().await.unwrap();
    let refused =
        run_writes::start_fresh(&txn, &other, s.id, 99, None, stray.clone(), Some((0, 50))).await;
    drop(txn);
    assert!(
        matches!(refused, Err(StoreError::NotFound(_))),
        "{refused:?}"
    );
    assert!(
        executions::get(&db, &scope, stray.id)
            .await
            .unwrap()
            .is_none()
    );
    assert!(
        executions::get(&db, &other, stray.id)
            .await
            .unwrap()
            .is_none()
    );
    sessions::fence(&db, &scope, s.id, 7).await.unwrap();
    let txn = db.begin().await.unwrap();
    let refused =
        run_writes::start_fresh(&txn, &scope, s.id, 99, Some(6), stray.clone(), None).await;
    drop(txn);
    assert!(
        matches!(refused, Err(StoreError::Fenced { .. })),
        "{refused:?}"
    );
    assert!(
        executions::get(&db, &scope, stray.id)
            .await
            .unwrap()
            .is_none()
    );
    assert_eq!(
        messages::last_n(&db, &scope, s.id, 50).await.unwrap().len(),
        5,
        "three runs' messages and two of the first run's steps"
    );
    assert_eq!(sessions::seq_floor(&db, &scope, s.id).await.unwrap(), 90);
}

async fn push_configs_per_tenant_and_task(db: DatabaseConnection) {
    let (scope, other) = (new_tenant(&db).await, new_tenant(&db).await);
    let (task, user) = (RunId::new(), UserId::new());
    let new = |id: &'static str, url: &'static str| a2a_push::NewPushConfig {
        task_id: task,
        id,
        user_id: user,
        url,
        token_sealed: Some("sealed-token".into()),
        auth_scheme: Some("Bearer".into()),
        credentials_sealed: None,
    };
    a2a_push::put(&db, &scope, new("b", "http://x/1"))
        .await
        .unwrap();
    a2a_push::put(&db, &scope, new("a", "http://x/2"))
        .await
        .unwrap();
    // The same id again replaces the config.
    let replaced = a2a_push::put(&db, &scope, new("b", "http://x/3"))
        .await
        .unwrap();
    assert_eq!(replaced.url, "http://x/3");
    let all = a2a_push::list(&db, &scope, task, None, 10).await.unwrap();
    let ids: Vec<&str> = all.iter().map(|c| c.id.as_str()).collect();
    assert_eq!(ids, ["a", "b"]);
    let after = a2a_push::list(&db, &scope, task, Some("a"), 10)
        .await
        .unwrap();
    assert_eq!(after.len(), 1);
    assert_eq!(after[0].token_sealed.as_deref(), Some("sealed-token"));
    // Another tenant sees nothing of it, and cannot delete it.
    assert!(
        a2a_push::get(&db, &other, task, "a")
            .await
            .unwrap()
            .is_none()
    );
    assert!(!a2a_push::delete(&db, &other, task, "a").await.unwrap());
    assert!(a2a_push::delete(&db, &scope, task, "a").await.unwrap());
    assert!(!a2a_push::delete(&db, &scope, task, "a").await.unwrap());
    assert_eq!(
        a2a_push::list(&db, &scope, task, None, 10)
            .await
            .unwrap()
            .len(),
        1
    );
}

async fn the_webhook_outbox_goes_in_order_per_stream_and_claims_once(db: DatabaseConnection) {
    let scope = new_tenant(&db).await;
    // The secret: the first one kept stays.
    assert_eq!(webhooks::get_secret(&db, &scope).await.unwrap(), None);
    assert_eq!(
        webhooks::put_secret_once(&db, &scope, "s1").await.unwrap(),
        "s1"
    );
    assert_eq!(
        webhooks::put_secret_once(&db, &scope, "s2").await.unwrap(),
        "s1"
    );
    let stream_a = format!("a:{}", uuid::Uuid::now_v7());
    let stream_b = format!("b:{}", uuid::Uuid::now_v7());
    let later = chrono::Utc::now() + chrono::Duration::hours(1);
    let put = |stream: &str, payload: &str| {
        let (stream, payload) = (stream.to_string(), payload.to_string());
        let db = db.clone();
        async move {
            webhooks::enqueue(
                &db,
                &scope,
                webhooks::NewDelivery {
                    msg_id: &format!("msg_{payload}"),
                    stream: &stream,
                    source: "test",
                    url: "http://127.0.0.1:9/h",
                    headers_sealed: None,
                    payload: &payload,
                    give_up_at: later,
                },
            )
            .await
            .unwrap()
        }
    };
    let a1 = put(&stream_a, "a1").await;
    let a2 = put(&stream_a, "a2").await;
    let b1 = put(&stream_b, "b1").await;
    assert!(a1 < a2 && a2 < b1);
    let mine = |all: Vec<webhooks::Delivery>| -> Vec<i64> {
        all.into_iter()
            .filter(|d| d.tenant_id == scope.tenant_id())
            .map(|d| d.id)
            .collect()
    };
    let now = chrono::Utc::now() + chrono::Duration::seconds(1);
    // One of each stream: a2 waits for a1.
    let due = webhooks::due(&db, &platform(), now, 100_000).await.unwrap();
    let first = due.iter().find(|d| d.id == a1).unwrap().clone();
    assert_eq!(mine(due), [a1, b1]);
    // Claimed once: a second claim of what was read is refused.
    assert!(
        webhooks::claim(&db, &platform(), &first, later)
            .await
            .unwrap()
    );
    assert!(
        !webhooks::claim(&db, &platform(), &first, later)
            .await
            .unwrap()
    );
    let due = webhooks::due(&db, &platform(), now, 100_000).await.unwrap();
    assert_eq!(mine(due), [b1], "a1 is claimed, a2 waits behind it");
    // A failed attempt: retried later, still ahead of a2.
    webhooks::record(
        &db,
        &platform(),
        &first,
        webhooks::Outcome::Failed {
            status: Some(500),
            error: "the receiver answered 500".into(),
            next: Some(later),
        },
    )
    .await
    .unwrap();
    let listed = webhooks::list(&db, &scope, "a:", 10).await.unwrap();
    let a1_row = listed.iter().find(|d| d.id == a1).unwrap();
    assert_eq!((a1_row.attempts, a1_row.last_status), (1, Some(500)));
    assert_eq!(a1_row.status, webhooks::PENDING);
    let due = webhooks::due(&db, &platform(), now, 100_000).await.unwrap();
    assert_eq!(mine(due), [b1]);
    // Delivered: the next of the stream is due.
    let a1_row = a1_row.clone();
    webhooks::record(
        &db,
        &platform(),
        &a1_row,
        webhooks::Outcome::Delivered { status: 204 },
    )
    .await
    .unwrap();
    let due = webhooks::due(&db, &platform(), now, 100_000).await.unwrap();
    assert_eq!(mine(due), [a2, b1]);
    // Given up: failed, and no longer due.
    let b1_row = webhooks::list(&db, &scope, "b:", 10)
        .await
        .unwrap()
        .remove(0);
    webhooks::record(
        &db,
        &platform(),
        &b1_row,
        webhooks::Outcome::Failed {
            status: None,
            error: "connection refused".into(),
            next: None,
        },
    )
    .await
    .unwrap();
    let b1_row = webhooks::list(&db, &scope, "b:", 10)
        .await
        .unwrap()
        .remove(0);
    assert_eq!(
        (b1_row.status.as_str(), b1_row.attempts),
        (webhooks::FAILED, 1)
    );
    let due = webhooks::due(&db, &platform(), now, 100_000).await.unwrap();
    assert_eq!(mine(due), [a2]);
    // Deleting the tenant takes its webhook rows along.
    tenants::delete(&db, &platform(), scope.tenant_id())
        .await
        .unwrap();
    assert!(
        webhooks::list(&db, &scope, "", 10)
            .await
            .unwrap()
            .is_empty()
    );
    assert_eq!(webhooks::get_secret(&db, &scope).await.unwrap(), None);
}
