//! Tenant programs run in the sandbox (issue 10), end to end through the real binary: every
//! probe below must fail, with the default backend and with `landlock`. Landlock is skipped only
//! where the kernel lacks it, saying so; with `CI=true` it fails instead.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use agentry_fake_model::{FakeReply, FakeToolCall};
use reqwest::Method;
use serde_json::{Value, json};

use crate::ctx::{ADMIN_KEY, Ctx};
use crate::fake_model::{Wire, start};
use crate::mcp::{run_over_ws, servers_path, ws_connect};

/// Small limits, so the fork bomb and the memory hog stay harmless; node (the MCP reference
/// servers) needs about 1 GiB of address space.
const LIMITS: &[(&str, &str)] = &[
    ("AGENTRY_SANDBOX__MAX_PROCESSES", "32"),
    ("AGENTRY_SANDBOX__MEMORY_BYTES", "1073741824"),
];

/// The server's sandbox backend from `/api/v1/health`, or `None` (skip) when `want` does not
/// work on this host and CI is not set.
async fn backend_of(ctx: &Ctx, want: &str) -> Option<()> {
    let h: Value = ctx
        .http
        .get(ctx.url("/api/v1/health"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let sandbox = &h["sandbox"];
    if sandbox["backend"] == want {
        return Some(());
    }
    let why = sandbox["error"].as_str().unwrap_or("?").to_string();
    if want == "landlock" && std::env::var("CI").map_or(true, |v| v != "true") {
        eprintln!("SKIPPING the landlock end-to-end sandbox suite: {why}");
        return None;
    }
    panic!("the {want} sandbox is not in use: {sandbox}");
}

fn member_workspace(ctx: &Ctx, tenant: &str, user: &str) -> PathBuf {
    let ws = ctx
        .server
        .data_dir
        .path()
        .join("workspaces")
        .join(tenant)
        .join(user);
    std::fs::create_dir_all(&ws).unwrap();
    ws.canonicalize().unwrap()
}

/// The results of a run's tool calls, by call id.
fn results(events: &[Value]) -> HashMap<String, Value> {
    events
        .iter()
        .filter(|e| e["event_type"] == "tool_result")
        .map(|e| {
            (
                e["data"]["tool_call_id"].as_str().unwrap().to_string(),
                e["data"]["result"].clone(),
            )
        })
        .collect()
}

fn stdout_of(r: &Value) -> String {
    r["stdout"].as_str().unwrap_or("").to_string()
}

pub async fn tenant_programs_cannot_reach_the_platform(backend: &str) {
    let mut env = vec![("AGENTRY_SANDBOX__BACKEND", backend)];
    env.extend_from_slice(LIMITS);
    let (fake, ctx) = start(Wire::OpenAi, &env).await;
    let Some(()) = backend_of(&ctx, backend).await else {
        return;
    };
    let t = ctx
        .tenant_with(json!({"features_enabled": ["stdio_mcp"]}))
        .await;
    let data = ctx.server.data_dir.path().canonicalize().unwrap();
    let other = member_workspace(&ctx, &t.id, &t.member.user_id);
    std::fs::write(other.join("secret.txt"), "the member's secret").unwrap();
    let pid = ctx.server.child.id().unwrap();
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();

    let probes: Vec<(&str, String)> = vec![
        ("works", "echo hello > probe.txt && cat probe.txt".into()),
        ("environ", format!("cat /proc/{pid}/environ")),
        (
            "sqlite",
            format!("head -c 64 {}/agentry.db", data.display()),
        ),
        ("data_dir", format!("ls {}", data.display())),
        ("other_ws", format!("cat {}/secret.txt", other.display())),
        (
            "tcp",
            format!(
                "python3 -c \"import socket; socket.create_connection(('127.0.0.1', {port}), 3); print('CONNECTED')\""
            ),
        ),
        (
            "fork",
            "i=0; while [ $i -lt 300 ]; do sleep 5 & i=$((i+1)); done; echo SPAWNED-ALL".into(),
        ),
        (
            "memory",
            "python3 -c 'b = bytearray(1536 * 1024 * 1024); print(\"GOT\", len(b))'".into(),
        ),
    ];
    fake.push(FakeReply::tool_calls(
        probes
            .iter()
            .map(|(id, cmd)| FakeToolCall::new(id, "execute", json!({ "command": cmd })))
            .collect(),
    ));
    fake.push(FakeReply::text("probed"));
    let sid = crate::streaming::new_session(&ctx, &t.admin.key).await;
    let events = run_over_ws(&ctx, &t.admin.key, &sid, "probe the sandbox").await;
    let r = results(&events);
    let show = |id: &str| format!("{id}: {}", r.get(id).cloned().unwrap_or(Value::Null));

    assert_eq!(stdout_of(&r["works"]), "hello\n", "{}", show("works"));
    // Every probe ran (in the sandbox): none was stopped before by the command guard.
    for (id, _) in &probes {
        assert!(r[*id].get("exit_code").is_some(), "{}", show(id));
    }
    assert!(
        !stdout_of(&r["environ"]).contains(ADMIN_KEY),
        "{}",
        show("environ")
    );
    assert!(
        !stdout_of(&r["environ"]).contains("AGENTRY_"),
        "{}",
        show("environ")
    );
    assert!(
        !stdout_of(&r["sqlite"]).contains("SQLite"),
        "{}",
        show("sqlite")
    );
    assert!(
        !stdout_of(&r["data_dir"]).contains("agentry.db"),
        "{}",
        show("data_dir")
    );
    assert!(
        !stdout_of(&r["other_ws"]).contains("secret"),
        "{}",
        show("other_ws")
    );
    assert!(
        !stdout_of(&r["tcp"]).contains("CONNECTED"),
        "{}",
        show("tcp")
    );
    listener.set_nonblocking(true).unwrap();
    assert!(
        listener.accept().is_err(),
        "a connection reached the listener"
    );
    assert!(
        !stdout_of(&r["fork"]).contains("SPAWNED-ALL"),
        "{}",
        show("fork")
    );
    assert!(
        r["fork"]["stderr"]
            .as_str()
            .unwrap_or("")
            .to_lowercase()
            .contains("fork"),
        "{}",
        show("fork")
    );
    assert!(
        !stdout_of(&r["memory"]).contains("GOT"),
        "{}",
        show("memory")
    );
    assert!(
        r["memory"]["stderr"]
            .as_str()
            .unwrap_or("")
            .contains("MemoryError"),
        "{}",
        show("memory")
    );

    // A stdio MCP server is a program too: `sh -c 'cat …'` aimed at the same places writes
    // what it could read into its working directory (the admin's workspace).
    let mine = member_workspace(&ctx, &t.id, &t.admin.user_id);
    let script = format!(
        "cat /proc/{pid}/environ > l1 2>&1; head -c 64 {data}/agentry.db > l2 2>&1; \
         cat {other}/secret.txt > l3 2>&1; ls {data} > l4 2>&1; echo ran > l0",
        data = data.display(),
        other = other.display()
    );
    ctx.ok(
        Method::POST,
        &servers_path(&t.admin.user_id),
        &t.admin.key,
        Some(json!({"name": "leak", "command": "sh", "args": ["-c", script]})),
        201,
    )
    .await;
    fake.push(FakeReply::text("ok"));
    let sid = crate::streaming::new_session(&ctx, &t.admin.key).await;
    run_over_ws(&ctx, &t.admin.key, &sid, "start my servers").await;
    let deadline = Instant::now() + Duration::from_secs(30);
    while !mine.join("l0").exists() {
        assert!(Instant::now() < deadline, "the stdio server never ran");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let read = |f: &str| std::fs::read_to_string(mine.join(f)).unwrap_or_default();
    assert!(!read("l1").contains(ADMIN_KEY), "l1: {}", read("l1"));
    assert!(!read("l2").contains("SQLite"), "l2: {}", read("l2"));
    assert!(
        !read("l3").contains("member's secret"),
        "l3: {}",
        read("l3")
    );
    assert!(!read("l4").contains("agentry.db"), "l4: {}", read("l4"));
}

/// The process groups a server has recorded as running.
fn recorded_groups(data_dir: &Path) -> Vec<i32> {
    std::fs::read_dir(data_dir.join("sandbox/groups"))
        .map(|d| {
            d.flatten()
                .filter_map(|e| std::fs::read(e.path()).ok())
                .filter_map(|b| serde_json::from_slice::<Value>(&b).ok())
                .filter(|v| v["owner"]["kind"] == "execute")
                .filter_map(|v| v["pgid"].as_i64().map(|p| p as i32))
                .collect()
        })
        .unwrap_or_default()
}

fn group_alive(pgid: i32) -> bool {
    // Signal 0 to the group: only whether any member exists.
    std::process::Command::new("kill")
        .args(["-0", "--", &format!("-{pgid}")])
        .stderr(std::process::Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// kill -9 of the server during a long command, then a restart on the same data dir: the old
/// process group is gone and the command never finished.
pub async fn no_orphan_survives_a_crash() {
    let (fake, mut ctx) = start(Wire::OpenAi, &[]).await;
    let t = ctx.tenant().await;
    let ws = member_workspace(&ctx, &t.id, &t.admin.user_id);
    fake.push(FakeReply::tool_call(
        "long",
        "execute",
        json!({"command": "echo start >> log; sleep 20; echo end >> log"}),
    ));
    fake.push(FakeReply::text("done"));
    let sid = crate::streaming::new_session(&ctx, &t.admin.key).await;
    let mut ws_conn = ws_connect(&ctx, &t.admin.key, &sid).await;
    crate::fake_model::chat(&mut ws_conn, "run it").await;
    // Approve, then wait until the command has started.
    let events = crate::streaming::until_done_or_hitl(&mut ws_conn).await;
    let request = crate::streaming::pending_request(&events);
    crate::streaming::send(
        &mut ws_conn,
        json!({"type": "hitl_decision", "payload": {"request_id": request, "type": "approve"}}),
    )
    .await;
    let deadline = Instant::now() + Duration::from_secs(30);
    while std::fs::read_to_string(ws.join("log")).unwrap_or_default() != "start\n" {
        assert!(Instant::now() < deadline, "the command never started");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let groups = recorded_groups(ctx.server.data_dir.path());
    assert_eq!(groups.len(), 1, "one recorded group: {groups:?}");
    let pgid = groups[0];

    ctx.server.child.start_kill().unwrap();
    ctx.server.child.wait().await.unwrap();
    drop(ws_conn);
    assert!(group_alive(pgid), "the command was orphaned by the crash");

    let data_dir = std::mem::replace(&mut ctx.server.data_dir, tempfile::tempdir().unwrap());
    let _restarted = crate::support::Server::start_in(data_dir, &[]).await;
    let deadline = Instant::now() + Duration::from_secs(15);
    while group_alive(pgid) {
        assert!(
            Instant::now() < deadline,
            "the old process group survived the restart"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(
        !std::fs::read_to_string(ws.join("log"))
            .unwrap_or_default()
            .contains("end"),
        "the command went on after the crash"
    );
}
