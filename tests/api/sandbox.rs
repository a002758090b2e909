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

/// `(parent, start time)` of a live process (not a zombie), from `/proc/<pid>/stat`.
fn proc_entry(pid: i32) -> Option<(i32, u64)> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let f: Vec<&str> = stat[stat.rfind(')')? + 1..].split_whitespace().collect();
    // f[0] is field 3 (state), f[1] the parent, f[19] the start time.
    if f.first() == Some(&"Z") {
        return None;
    }
    Some((f.get(1)?.parse().ok()?, f.get(19)?.parse().ok()?))
}

/// Every live descendant of `root`, with its start time (so a reused pid is not mistaken for it).
fn process_tree(root: i32) -> Vec<(i32, u64)> {
    let all: Vec<(i32, i32, u64)> = std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter_map(|pid| proc_entry(pid).map(|(ppid, start)| (pid, ppid, start)))
        .collect();
    let mut out = Vec::new();
    let mut todo = vec![root];
    while let Some(parent) = todo.pop() {
        for (pid, ppid, start) in &all {
            if *ppid == parent {
                out.push((*pid, *start));
                todo.push(*pid);
            }
        }
    }
    out
}

/// Every live process whose command line holds `token`.
fn naming(token: &str) -> Vec<(i32, u64)> {
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| cmdline(*pid).contains(token))
        .filter_map(|pid| proc_entry(pid).map(|(_, start)| (pid, start)))
        .collect()
}

fn cmdline(pid: i32) -> String {
    let raw = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
    String::from_utf8_lossy(&raw)
        .trim_end_matches('\0')
        .replace('\0', " ")
}

fn still_running(tree: &[(i32, u64)]) -> Vec<String> {
    tree.iter()
        .filter(|(pid, start)| proc_entry(*pid).is_some_and(|(_, s)| s == *start))
        .map(|(pid, _)| format!("{pid} {}", cmdline(*pid)))
        .collect()
}

/// `kill -9` of the server while an `execute` runs (issue 31, item 3): the command dies with the
/// server, on this backend, without waiting for a restart. Its side effect (a marker after
/// 8 s) never happens, and no process of its tree survives: not the command, not a child that
/// double-forked away from it, not one that left its process group with `setsid`. A restart on
/// the same data dir then finds nothing left to kill.
pub async fn a_killed_server_takes_its_commands_along(backend: &str) {
    let (fake, mut ctx) = start(Wire::OpenAi, &[("AGENTRY_SANDBOX__BACKEND", backend)]).await;
    let Some(()) = backend_of(&ctx, backend).await else {
        return;
    };
    let t = ctx.tenant().await;
    let ws = member_workspace(&ctx, &t.id, &t.admin.user_id);
    // A duration no other test uses: every process of this command names it on its command
    // line, so they are found even once they have left the server's tree.
    // 8 s and a bit: long enough that the server is killed and the tree is gone well before
    // the markers are due even on a loaded machine (with 3 s, a test starved for a few seconds
    // at idle priority saw a marker made before the kill).
    let token = format!("8.{:06}", rand::random::<u32>() % 1_000_000);
    let command = format!(
        "(sh -c 'sleep {token}; touch orphan' &); \
         (setsid sh -c 'sleep {token}; touch escaped' &); \
         echo started > started; sleep {token}; touch marker"
    );
    fake.push(FakeReply::tool_call(
        "long",
        "execute",
        json!({ "command": command }),
    ));
    fake.push(FakeReply::text("done"));
    let sid = crate::streaming::new_session(&ctx, &t.admin.key).await;
    let mut ws_conn = ws_connect(&ctx, &t.admin.key, &sid).await;
    crate::fake_model::chat(&mut ws_conn, "run it").await;
    let events = crate::streaming::until_done_or_hitl(&mut ws_conn).await;
    let request = crate::streaming::pending_request(&events);
    crate::streaming::send(
        &mut ws_conn,
        json!({"type": "hitl_decision", "payload": {"request_id": request, "type": "approve"}}),
    )
    .await;
    let deadline = Instant::now() + Duration::from_secs(30);
    while !ws.join("started").exists() {
        assert!(Instant::now() < deadline, "the command never started");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let started = Instant::now();
    // The background children are on their way once the command's own line ran.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let server = ctx.server.child.id().unwrap() as i32;
    let mut tree = process_tree(server);
    tree.extend(naming(&token));
    tree.sort_unstable();
    tree.dedup();
    let sleeps = tree
        .iter()
        .filter(|(pid, _)| cmdline(*pid) == format!("sleep {token}"))
        .count();
    assert_eq!(
        sleeps,
        3,
        "the command and its two background children run: {:?}",
        still_running(&tree)
    );
    let groups = recorded_groups(ctx.server.data_dir.path());
    assert_eq!(groups.len(), 1, "one recorded group: {groups:?}");

    ctx.server.crash().await;
    drop(ws_conn);
    let deadline = Instant::now() + Duration::from_secs(2);
    loop {
        let left = still_running(&tree);
        if left.is_empty() {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "{backend}: processes of the command outlived the killed server: {left:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // The markers tell something only if the tree was gone before they were due (the
    // background children's sleeps started a moment before `started` was written).
    let gone = started.elapsed();
    assert!(
        gone < Duration::from_secs(7),
        "{backend}: the tree was gone only {gone:?} after the command started, too close to its \
         8 s for the markers to tell anything (the machine was too slow for this test)"
    );
    // Well past the 8 s the markers needed.
    tokio::time::sleep(Duration::from_secs(9).saturating_sub(started.elapsed())).await;
    for marker in ["marker", "orphan", "escaped"] {
        assert!(
            !ws.join(marker).exists(),
            "{backend}: `{marker}` was made after the server was killed"
        );
    }

    // The restart finds the record of a group that is gone, and only removes it.
    ctx.server.restart().await;
    assert!(
        recorded_groups(ctx.server.data_dir.path()).is_empty(),
        "the old record was removed at the restart"
    );
    assert!(
        !ctx.server
            .logged_at_start("killed sandboxed processes a previous server left running"),
        "nothing was left for the restart to kill"
    );
}
