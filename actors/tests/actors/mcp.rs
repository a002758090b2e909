//! The MCP pool through full chat runs, against real MCP servers nobody here wrote
//! (`@modelcontextprotocol/server-everything`, `@modelcontextprotocol/server-filesystem`),
//! installed by `scripts/install-mcp-test-servers.sh`.

use crate::support;

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use actix::prelude::*;
use agentry_actors::mcp_pool::{
    McpConfigSource, McpPoolActor, McpPoolConfig, OpenConnections, Origin, PoolServer,
    ProcessGroups, UserConfigChanged, UserTools,
};
use agentry_fake_model::FakeReply;
use agentry_mcp::client::McpServerConfig;
use agentry_mcp::config_file::ServerPolicy;
use agentry_mcp::testing::{everything, filesystem, probe, set_env};
use agentry_schema::events::{DoneStatus, EventPayload, ToolStatus};
use agentry_schema::frames::Decision;
use agentry_schema::ids::UserId;
use agentry_store::tenants::Tenant;
use agentry_store::testing::Backend;
use agentry_store::tool_calls;
use async_trait::async_trait;
use proptest::prelude::*;
use proptest::strategy::ValueTree;
use serde_json::json;
use support::*;

/// Servers per user, changeable while the engine runs (as the REST API would).
#[derive(Default)]
struct Configs(Mutex<HashMap<UserId, Vec<PoolServer>>>);

impl Configs {
    fn set(&self, user: UserId, servers: Vec<McpServerConfig>) {
        let servers = servers
            .into_iter()
            .map(|config| PoolServer {
                config,
                policy: ServerPolicy::default(),
                origin: Origin::User,
            })
            .collect();
        self.0.lock().unwrap().insert(user, servers);
    }
}

#[async_trait]
impl McpConfigSource for Configs {
    async fn servers_for(&self, _tenant: &Tenant, user: UserId) -> (Vec<PoolServer>, Vec<String>) {
        (
            self.0
                .lock()
                .unwrap()
                .get(&user)
                .cloned()
                .unwrap_or_default(),
            Vec::new(),
        )
    }
}

fn pool_cfg() -> McpPoolConfig {
    McpPoolConfig {
        health_interval: Duration::from_millis(500),
        idle_timeout: Duration::from_secs(600),
        connect_wait: Duration::from_secs(30),
        backoff_base: Duration::from_millis(100),
        backoff_max: Duration::from_secs(2),
        sandbox: agentry_sandbox::SandboxHandle::unconfined_for_tests(),
        workspaces: std::env::temp_dir().join("agentry-actors-mcp-tests"),
        ..McpPoolConfig::default()
    }
}

async fn harness(configs: Arc<Configs>, session_timeout: Duration) -> Harness {
    harness_with(configs, session_timeout, Options::default()).await
}

async fn harness_with(configs: Arc<Configs>, session_timeout: Duration, opts: Options) -> Harness {
    harness_on(configs, session_timeout, opts, Wire::OpenAi).await
}

async fn harness_on(
    configs: Arc<Configs>,
    session_timeout: Duration,
    opts: Options,
    wire: Wire,
) -> Harness {
    let quotas = agentry_store::tenants::Quotas {
        max_mcp_servers: 5,
        ..Default::default()
    };
    let h = Harness::with(
        Backend::Sqlite,
        wire,
        Options {
            platform_tools: true,
            mcp: Some(configs as Arc<dyn McpConfigSource>),
            mcp_pool: pool_cfg(),
            session_timeout,
            quotas,
            ..opts
        },
    )
    .await
    .expect("sqlite is always available");
    // Local stdio servers are a per-tenant feature.
    let t = agentry_store::tenants::update(
        &h.db.db,
        &agentry_store::PlatformScope::new(),
        h.tenant.id,
        agentry_store::tenants::TenantUpdate {
            features_enabled: Some(vec!["stdio_mcp".into()]),
            ..Default::default()
        },
    )
    .await
    .unwrap();
    Harness { tenant: t, ..h }
}

async fn tool_names(h: &Harness, user: UserId) -> (BTreeSet<String>, Vec<String>) {
    let pool = h.engine.mcp_pool(&h.tenant).await.unwrap().unwrap();
    let reply = pool
        .send(UserTools {
            user,
            patterns: None,
        })
        .await
        .unwrap();
    (
        reply.tools.iter().map(|t| t.spec().name.clone()).collect(),
        reply.warnings,
    )
}

/// server-everything announces some tools after the handshake; wait until they are listed.
async fn wait_for_tool(h: &Harness, user: UserId, name: &str) {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let (names, _) = tool_names(h, user).await;
        if names.contains(name) {
            return;
        }
        assert!(Instant::now() < deadline, "{name} never listed: {names:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[actix_rt::test]
async fn a_chat_calls_an_mcp_tool_and_the_call_is_audited() {
    let configs = Arc::new(Configs::default());
    let h = harness(configs.clone(), Duration::from_secs(3600)).await;
    configs.set(h.user.user_id, vec![everything("everything")]);
    h.fake().push(FakeReply::tool_call(
        "e1",
        "everything__echo",
        json!({"message": "hello from the pool"}),
    ));
    h.fake().push(FakeReply::text("it echoed"));
    let s = h.new_session(false).await;
    let (mut ev, run) = h.send(&s, "echo something").await;
    let all = ev.until_done(run).await;
    assert_well_formed(&all);
    let result = tool_results(&all).first().cloned();
    let result = result.expect("a tool result");
    assert_eq!(result.status, ToolStatus::Success);
    assert!(
        result
            .result
            .to_string()
            .contains("Echo: hello from the pool"),
        "{}",
        result.result
    );
    assert_eq!(done(&all).status, DoneStatus::Completed);
    // The model was offered the MCP tools next to the built-ins.
    let offered = h.fake().requests()[0].body["tools"].to_string();
    assert!(offered.contains("everything__echo") && offered.contains("read_file"));
    let audit = tool_calls::list_by_execution(&h.db.db, &h.tenant.scope(), run)
        .await
        .unwrap();
    assert_eq!(audit[0].tool_name, "everything__echo");
    assert!(audit[0].output.is_some());
}

/// Issue 18: an MCP tool's image reaches the model as an image, in each wire format the fake
/// model speaks (Anthropic: an image block in the `tool_result`; OpenAI chat, whose tool
/// messages are text only: a user message of `image_url` parts right after the tool
/// messages), and the result's text describes it instead of carrying its base64.
#[actix_rt::test]
async fn an_mcp_image_reaches_the_model_as_an_image() {
    for wire in [Wire::OpenAi, Wire::Anthropic] {
        let configs = Arc::new(Configs::default());
        let h = harness_on(
            configs.clone(),
            Duration::from_secs(3600),
            Options::default(),
            wire,
        )
        .await;
        configs.set(h.user.user_id, vec![everything("everything")]);
        h.fake().push(FakeReply::tool_call(
            "i1",
            "everything__get-tiny-image",
            json!({}),
        ));
        h.fake().push(FakeReply::text("a tiny image"));
        let s = h.new_session(false).await;
        let (mut ev, run) = h.send(&s, "show me the tiny image").await;
        let all = ev.until_done(run).await;
        assert_eq!(done(&all).status, DoneStatus::Completed, "{wire:?}");
        let result = tool_results(&all).first().cloned().expect("a tool result");
        let text = result.result.to_string();
        assert!(
            text.contains("[image: image/png") && text.contains("passed to the model as an image"),
            "{wire:?}: {text}"
        );
        // The second request (after the tool ran) carries the image as an image part.
        let requests = h.fake().requests();
        let body = &requests.last().unwrap().body;
        let messages = body["messages"].as_array().unwrap();
        let image = match wire {
            Wire::OpenAi => messages
                .iter()
                .filter(|m| m["role"] == "user")
                .flat_map(|m| m["content"].as_array().cloned().unwrap_or_default())
                .find(|p| p["type"] == "image_url")
                .map(|p| p["image_url"]["url"].as_str().unwrap().to_string()),
            _ => messages
                .iter()
                .flat_map(|m| m["content"].as_array().cloned().unwrap_or_default())
                .filter(|b| b["type"] == "tool_result")
                .flat_map(|b| b["content"].as_array().cloned().unwrap_or_default())
                .find(|b| b["type"] == "image")
                .map(|b| {
                    format!(
                        "data:{};base64,{}",
                        b["source"]["media_type"].as_str().unwrap(),
                        b["source"]["data"].as_str().unwrap()
                    )
                }),
        };
        let image = image.unwrap_or_else(|| panic!("{wire:?}: no image part in {body}"));
        assert!(
            image.starts_with("data:image/png;base64,iVBOR"),
            "{wire:?}: {image}"
        );
        // …and not as text in the tool result.
        let tool_text = messages.iter().map(|m| m.to_string()).collect::<String>();
        let data = image.trim_start_matches("data:image/png;base64,");
        assert_eq!(
            tool_text.matches(data).count(),
            1,
            "{wire:?}: the image data is sent once, as the image part"
        );
    }
}

#[actix_rt::test]
async fn destructive_mcp_tools_need_approval() {
    let configs = Arc::new(Configs::default());
    let h = harness(configs.clone(), Duration::from_secs(3600)).await;
    let root = tempfile::tempdir().unwrap();
    let root_path = root.path().canonicalize().unwrap();
    configs.set(h.user.user_id, vec![filesystem("fs", &root_path)]);
    let target = root_path.join("from-mcp.txt");
    h.fake().push(FakeReply::tool_call(
        "w1",
        "fs__write_file",
        json!({"path": target.to_string_lossy(), "content": "written over MCP"}),
    ));
    h.fake().push(FakeReply::text("done"));
    let s = h.new_session(false).await;
    let (mut ev, run) = h.send(&s, "write through the filesystem server").await;
    let upto = ev
        .until(|e| matches!(e.payload, EventPayload::HitlRequest(_)))
        .await;
    assert!(!target.exists(), "nothing runs before the approval");
    h.decide(
        &s,
        hitl_request_id(&upto),
        Decision::Approve { message: None },
    )
    .await;
    let all = ev.until_done(run).await;
    assert_eq!(done(&all).status, DoneStatus::Completed);
    assert_eq!(
        std::fs::read_to_string(&target).unwrap(),
        "written over MCP"
    );
    // A read-only tool of the same server runs without asking.
    h.fake().push(FakeReply::tool_call(
        "r1",
        "fs__read_text_file",
        json!({"path": target.to_string_lossy()}),
    ));
    h.fake().push(FakeReply::text("read it"));
    let (mut ev, run) = h.send(&s, "read it back").await;
    let all = ev.until_done(run).await;
    assert!(!types(&all).contains(&"hitl_request"), "{:?}", types(&all));
    assert!(all.iter().any(|e| matches!(&e.payload, EventPayload::ToolResult(r) if r.result.to_string().contains("written over MCP"))));
}

#[actix_rt::test]
async fn a_server_that_fails_to_connect_never_blocks_the_run() {
    let configs = Arc::new(Configs::default());
    let h = harness(configs.clone(), Duration::from_secs(3600)).await;
    configs.set(
        h.user.user_id,
        vec![
            McpServerConfig::stdio("broken", "/nonexistent/mcp-server", &[]),
            everything("everything"),
        ],
    );
    h.fake().push(FakeReply::tool_call(
        "e1",
        "everything__echo",
        json!({"message": "still works"}),
    ));
    h.fake().push(FakeReply::text("fine"));
    let s = h.new_session(false).await;
    let t0 = Instant::now();
    let (mut ev, run) = h.send(&s, "go").await;
    let all = ev.until_done(run).await;
    assert!(t0.elapsed() < Duration::from_secs(20));
    let warning = errors(&all).first().cloned();
    let warning = warning.expect("a warning about the broken server");
    assert!(warning.recoverable);
    assert_eq!(warning.error_code, "mcp_error");
    assert!(warning.error.contains("broken"), "{}", warning.error);
    assert_eq!(done(&all).status, DoneStatus::Completed);
    assert!(all.iter().any(
        |e| matches!(&e.payload, EventPayload::ToolResult(r) if r.status == ToolStatus::Success)
    ));
}

#[actix_rt::test]
async fn a_killed_server_is_reconnected_by_the_pool() {
    let configs = Arc::new(Configs::default());
    let h = harness(configs.clone(), Duration::from_secs(3600)).await;
    configs.set(h.user.user_id, vec![everything("everything")]);
    let (names, _) = tool_names(&h, h.user.user_id).await;
    assert!(names.contains("everything__echo"));
    let pool = h.engine.mcp_pool(&h.tenant).await.unwrap().unwrap();
    let groups = pool
        .send(ProcessGroups {
            user: h.user.user_id,
        })
        .await
        .unwrap();
    let (_, pg) = groups[0].clone();
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(-pg),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
    // The pool notices, reconnects with backoff, and the server is usable again.
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let groups = pool
            .send(ProcessGroups {
                user: h.user.user_id,
            })
            .await
            .unwrap();
        if groups.first().is_some_and(|(_, new)| *new != pg) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the pool did not reconnect the killed server"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    h.fake().push(FakeReply::tool_call(
        "e1",
        "everything__echo",
        json!({"message": "back again"}),
    ));
    h.fake().push(FakeReply::text("ok"));
    let s = h.new_session(false).await;
    let (mut ev, run) = h.send(&s, "echo").await;
    let all = ev.until_done(run).await;
    assert!(all.iter().any(|e| matches!(&e.payload, EventPayload::ToolResult(r) if r.result.to_string().contains("back again"))), "{:?}", types(&all));
    assert_eq!(pool.send(OpenConnections).await.unwrap(), 1);
}

#[actix_rt::test]
async fn elicitation_from_a_server_is_answered_by_the_user_over_the_session() {
    let configs = Arc::new(Configs::default());
    let h = harness(configs.clone(), Duration::from_secs(3600)).await;
    configs.set(h.user.user_id, vec![everything("ev")]);
    wait_for_tool(&h, h.user.user_id, "ev__trigger-elicitation-request").await;
    h.fake().push(FakeReply::tool_call(
        "q1",
        "ev__trigger-elicitation-request",
        json!({}),
    ));
    h.fake().push(FakeReply::text("thanks"));
    let s = h.new_session(false).await;
    let (mut ev, run) = h.send(&s, "ask me").await;
    let upto = ev
        .until(|e| matches!(e.payload, EventPayload::HitlRequest(_)))
        .await;
    let EventPayload::HitlRequest(req) = &upto.last().unwrap().payload else {
        unreachable!()
    };
    let q = req.question.clone().expect("a question");
    assert_eq!(q.question_type, "elicitation");
    assert_eq!(
        q.schema.as_ref().unwrap()["properties"]["name"]["type"],
        "string"
    );
    h.decide(
        &s,
        hitl_request_id(&upto),
        Decision::Answer {
            answer: json!({"name": "Ada Lovelace", "check": true, "integer": 7}),
        },
    )
    .await;
    let all = ev.until_done(run).await;
    let result = tool_results(&all).first().map(|r| r.result.to_string());
    assert!(result.unwrap().contains("Ada Lovelace"));
    assert_eq!(done(&all).status, DoneStatus::Completed);
}

#[actix_rt::test]
async fn progress_from_a_server_surfaces_as_progress_events() {
    let configs = Arc::new(Configs::default());
    let h = harness(configs.clone(), Duration::from_secs(3600)).await;
    configs.set(h.user.user_id, vec![everything("ev")]);
    h.fake().push(FakeReply::tool_call(
        "p1",
        "ev__trigger-long-running-operation",
        json!({"duration": 1, "steps": 3}),
    ));
    h.fake().push(FakeReply::text("done"));
    let s = h.new_session(false).await;
    let (mut ev, run) = h.send(&s, "long job").await;
    let all = ev.until_done(run).await;
    let progress: Vec<_> = all
        .iter()
        .filter_map(|e| match &e.payload {
            EventPayload::Progress(p) => Some(p.clone()),
            _ => None,
        })
        .collect();
    assert!(progress.len() >= 2, "{:?}", types(&all));
    assert!(progress.iter().all(|p| p.tool_call_id == "p1"));
    assert!(progress.windows(2).all(|w| w[1].progress >= w[0].progress));
}

#[actix_rt::test]
async fn a_users_connections_close_when_their_last_session_stops() {
    let configs = Arc::new(Configs::default());
    let h = harness(configs.clone(), Duration::from_millis(300)).await;
    configs.set(h.user.user_id, vec![everything("everything")]);
    h.fake().push(FakeReply::tool_call(
        "e1",
        "everything__echo",
        json!({"message": "x"}),
    ));
    h.fake().push(FakeReply::text("ok"));
    let s = h.new_session(false).await;
    let (mut ev, run) = h.send(&s, "echo").await;
    ev.until_done(run).await;
    let pool = h.engine.mcp_pool(&h.tenant).await.unwrap().unwrap();
    let groups = pool
        .send(ProcessGroups {
            user: h.user.user_id,
        })
        .await
        .unwrap();
    assert_eq!(groups.len(), 1);
    // Nobody watches or holds the session any more: its actor may stop when idle.
    drop(ev);
    drop(s);
    let deadline = Instant::now() + Duration::from_secs(15);
    while pool.send(OpenConnections).await.unwrap() > 0 {
        assert!(
            Instant::now() < deadline,
            "the connection outlived the user's last session"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // And the server process is gone.
    let deadline = Instant::now() + Duration::from_secs(10);
    while agentry_mcp::client::stdio::process_group_alive(groups[0].1) {
        assert!(
            Instant::now() < deadline,
            "the server's processes outlived their connection"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Seed property 49: user A's MCP configuration change never changes user B's tools or
/// connections. Servers here point at a closed port, so each connect fails fast; what matters is
/// whose servers the pool touches.
#[actix_rt::test]
async fn one_users_mcp_config_never_changes_anothers() {
    let configs = Arc::new(Configs::default());
    let db = agentry_store::testing::TestDb::open(Backend::Sqlite)
        .await
        .unwrap();
    let tenant = agentry_store::tenants::create(
        &db.db,
        &agentry_store::PlatformScope::new(),
        agentry_store::tenants::NewTenant {
            name: "iso".into(),
            quotas: Default::default(),
            features_enabled: vec![],
            tool_permissions: None,
            policy: Default::default(),
        },
    )
    .await
    .unwrap();
    let pool = McpPoolActor::new(
        Arc::new(tenant),
        configs.clone(),
        McpPoolConfig {
            connect_wait: Duration::from_secs(5),
            ..pool_cfg()
        },
    )
    .start();
    let closed_url = |name: &str| McpServerConfig::http(name, "http://127.0.0.1:9/mcp");
    let names = prop::collection::btree_set("[a-z]{1,6}", 0..4);
    let mut runner = proptest::test_runner::TestRunner::default();
    // 40 random cases (about 0.35 s each: every lookup tries the closed port).
    for case in 0..40 {
        let (a_before, a_after, b) = (names.clone(), names.clone(), names.clone())
            .new_tree(&mut runner)
            .unwrap()
            .current();
        let (ua, ub) = (UserId::new(), UserId::new());
        configs.set(ua, a_before.iter().map(|n| closed_url(n)).collect());
        configs.set(ub, b.iter().map(|n| closed_url(n)).collect());
        let b_first = pool
            .send(UserTools {
                user: ub,
                patterns: None,
            })
            .await
            .unwrap();
        let _ = pool
            .send(UserTools {
                user: ua,
                patterns: None,
            })
            .await
            .unwrap();
        // A changes everything.
        configs.set(ua, a_after.iter().map(|n| closed_url(n)).collect());
        pool.send(UserConfigChanged {
            user: ua,
            server: None,
        })
        .await
        .unwrap();
        let _ = pool
            .send(UserTools {
                user: ua,
                patterns: None,
            })
            .await
            .unwrap();
        let b_second = pool
            .send(UserTools {
                user: ub,
                patterns: None,
            })
            .await
            .unwrap();
        // B's view only ever names B's servers, and did not change.
        let named = |w: &[String]| -> BTreeSet<String> {
            w.iter()
                .filter_map(|m| m.split('"').nth(1).map(str::to_string))
                .collect()
        };
        assert_eq!(named(&b_first.warnings), b, "case {case}");
        assert_eq!(named(&b_second.warnings), b, "case {case}");
        assert!(b_first.tools.is_empty() && b_second.tools.is_empty());
    }
}

/// Polls `f` until it holds or `within` passes.
async fn eventually(within: Duration, mut f: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + within;
    while !f() {
        if Instant::now() > deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    true
}

/// The probe server (official Python SDK) with markers for "the handler started" and "the
/// handler was cancelled".
fn probe_with_markers(
    dir: &std::path::Path,
) -> (McpServerConfig, std::path::PathBuf, std::path::PathBuf) {
    let started = dir.join("started");
    let cancelled = dir.join("cancelled");
    let mut cfg = probe("probe");
    set_env(&mut cfg, "PROBE_STARTED_MARKER", &started.to_string_lossy());
    set_env(
        &mut cfg,
        "PROBE_CANCEL_MARKER",
        &cancelled.to_string_lossy(),
    );
    (cfg, started, cancelled)
}

/// DESIGN §4: cancelling a run while an MCP tool runs sends the server
/// `notifications/cancelled` — its handler really stops — and `done{cancelled, user_cancelled}`
/// arrives within a second.
#[actix_rt::test]
async fn cancelling_a_run_cancels_the_mcp_call_on_the_server() {
    let configs = Arc::new(Configs::default());
    let h = harness(configs.clone(), Duration::from_secs(3600)).await;
    let dir = tempfile::tempdir().unwrap();
    let (cfg, started, cancelled) = probe_with_markers(dir.path());
    configs.set(h.user.user_id, vec![cfg]);
    h.fake().push(FakeReply::tool_call(
        "w1",
        "probe__wait_until_cancelled",
        json!({}),
    ));
    let s = h.new_session(false).await;
    let (mut ev, run) = h.send(&s, "wait").await;
    assert!(
        eventually(Duration::from_secs(20), || started.exists()).await,
        "the call never reached the server"
    );
    let t0 = Instant::now();
    h.engine
        .cancel(&h.tenant, &h.user, s.session.id)
        .await
        .unwrap();
    let all = ev.until_done(run).await;
    let elapsed = t0.elapsed();
    assert!(elapsed < Duration::from_secs(1), "cancel took {elapsed:?}");
    let d = done(&all);
    assert_eq!(
        (d.status, d.cancelled, d.reason.as_deref()),
        (DoneStatus::Cancelled, true, Some("user_cancelled"))
    );
    // The server's handler was cancelled (it records that itself)...
    assert!(
        eventually(Duration::from_secs(10), || cancelled.exists()).await,
        "the server never saw notifications/cancelled"
    );
    assert_eq!(std::fs::read_to_string(&cancelled).unwrap(), "cancelled");
    // ...by the notification, not by its connection closing: the same server is still up.
    let pool = h.engine.mcp_pool(&h.tenant).await.unwrap().unwrap();
    let groups = pool
        .send(ProcessGroups {
            user: h.user.user_id,
        })
        .await
        .unwrap();
    assert_eq!(groups.len(), 1);
    assert!(agentry_mcp::client::stdio::process_group_alive(groups[0].1));
}

/// The engine's per-call timeout stands still while the user answers an elicitation, like the
/// MCP client's own: an answer given well after the server's `timeout_secs` still completes the
/// call.
#[actix_rt::test]
async fn an_elicitation_answered_after_the_server_timeout_still_succeeds() {
    let configs = Arc::new(Configs::default());
    let h = harness(configs.clone(), Duration::from_secs(3600)).await;
    let mut cfg = everything("ev");
    cfg.timeout_secs = 1;
    configs.set(h.user.user_id, vec![cfg]);
    wait_for_tool(&h, h.user.user_id, "ev__trigger-elicitation-request").await;
    h.fake().push(FakeReply::tool_call(
        "q1",
        "ev__trigger-elicitation-request",
        json!({}),
    ));
    h.fake().push(FakeReply::text("thanks"));
    let s = h.new_session(false).await;
    let (mut ev, run) = h.send(&s, "ask me").await;
    let upto = ev
        .until(|e| matches!(e.payload, EventPayload::HitlRequest(_)))
        .await;
    // Twice the server's timeout.
    tokio::time::sleep(Duration::from_millis(2000)).await;
    h.decide(
        &s,
        hitl_request_id(&upto),
        Decision::Answer {
            answer: json!({"name": "Grace Hopper", "check": true, "integer": 3}),
        },
    )
    .await;
    let all = ev.until_done(run).await;
    let results = tool_results(&all);
    assert_eq!(
        results[0].status,
        ToolStatus::Success,
        "{}",
        results[0].result
    );
    assert!(results[0].result.to_string().contains("Grace Hopper"));
    assert!(errors(&all).is_empty(), "{:?}", errors(&all));
    assert_eq!(done(&all).status, DoneStatus::Completed);
}

/// A server that dies under a call fails that call at once with `mcp_error`: the loop does not
/// retry it on the dead connection (with this base delay, retries would take 14 s).
#[actix_rt::test]
async fn a_call_whose_server_dies_is_not_retried_on_the_dead_connection() {
    let configs = Arc::new(Configs::default());
    let h = harness_with(
        configs.clone(),
        Duration::from_secs(3600),
        Options {
            base_delay_ms: 2000,
            ..Options::default()
        },
    )
    .await;
    let dir = tempfile::tempdir().unwrap();
    let (cfg, started, _) = probe_with_markers(dir.path());
    configs.set(h.user.user_id, vec![cfg]);
    h.fake().push(FakeReply::tool_call(
        "k1",
        "probe__wait_until_cancelled",
        json!({}),
    ));
    h.fake().push(FakeReply::text("the server went away"));
    let s = h.new_session(false).await;
    let (mut ev, run) = h.send(&s, "wait").await;
    assert!(eventually(Duration::from_secs(20), || started.exists()).await);
    let pool = h.engine.mcp_pool(&h.tenant).await.unwrap().unwrap();
    let groups = pool
        .send(ProcessGroups {
            user: h.user.user_id,
        })
        .await
        .unwrap();
    assert_eq!(
        groups.len(),
        1,
        "the server is connected while its call runs"
    );
    let t0 = Instant::now();
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(-groups[0].1),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
    let all = ev.until_done(run).await;
    assert!(t0.elapsed() < Duration::from_secs(2), "{:?}", t0.elapsed());
    assert_well_formed(&all);
    let results = tool_results(&all);
    assert_eq!(results[0].status, ToolStatus::Error);
    assert_eq!(results[0].result["error"]["code"], "mcp_error");
    assert!(
        results[0].result["error"]["message"]
            .as_str()
            .unwrap()
            .starts_with("disconnected:"),
        "{}",
        results[0].result
    );
    let errs = errors(&all);
    assert_eq!(errs.len(), 1, "{errs:?}");
    assert_eq!(
        (errs[0].error_code.as_str(), errs[0].recoverable),
        ("mcp_error", true)
    );
    assert_eq!(done(&all).status, DoneStatus::Completed);
}

/// A tenant's pool that panics or stops is restarted in place by its supervisor: the address
/// the sessions hold serves the tenant again, and connections are made anew on their next use.
#[actix_rt::test]
async fn a_pool_that_panics_or_stops_is_restarted_and_serves_the_tenant_again() {
    use agentry_actors::test_hooks::{PanicNow, StopNow};
    let configs = Arc::new(Configs::default());
    let h = harness(configs.clone(), Duration::from_secs(3600)).await;
    configs.set(h.user.user_id, vec![everything("everything")]);
    wait_for_tool(&h, h.user.user_id, "everything__echo").await;
    let pool = h.engine.mcp_pool(&h.tenant).await.unwrap().unwrap();
    // The panicking message gets no reply; the pool does not die with it.
    assert!(pool.send(PanicNow).await.is_err());
    wait_for_tool(&h, h.user.user_id, "everything__echo").await;
    pool.send(StopNow).await.unwrap();
    wait_for_tool(&h, h.user.user_id, "everything__echo").await;
    // The same address, and a chat through it calls the tool.
    let again = h.engine.mcp_pool(&h.tenant).await.unwrap().unwrap();
    assert!(again == pool, "the pool has a new address");
    h.fake().push(FakeReply::tool_call(
        "e1",
        "everything__echo",
        json!({"message": "after the restart"}),
    ));
    h.fake().push(FakeReply::text("it echoed"));
    let s = h.new_session(false).await;
    let (mut ev, run) = h.send(&s, "echo something").await;
    let all = ev.until_done(run).await;
    let result = tool_results(&all).first().cloned().expect("a tool result");
    assert_eq!(result.status, ToolStatus::Success, "{}", result.result);
    assert!(
        result.result.to_string().contains("after the restart"),
        "{}",
        result.result
    );
    assert_eq!(done(&all).status, DoneStatus::Completed);
}
