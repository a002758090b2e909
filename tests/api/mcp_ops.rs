//! A user's MCP servers as an operator and their user see them (issue 18, item 6): the pool's
//! history of each server over REST (`last_error`, `last_error_at`, `connected_since`,
//! `reconnects`, `calls`), per-server metrics, `connect_timeout_secs` and `cwd` over REST, the
//! background connect of a server just added, and tools that require MCP tasks left out.

use std::time::{Duration, Instant};

use reqwest::Method;
use serde_json::{Value, json};

use crate::ctx::{Ctx, Member, TenantFx};
use crate::mcp::servers_path;
use crate::mcp_server::{User, call, connect};

/// The probe server (official Python SDK) as a REST body, with `args` after the script.
fn probe(name: &str, args: &[&str], extra: Value) -> Value {
    let cfg = agentry_mcp::testing::probe(name);
    let agentry_mcp::client::McpTransportConfig::Stdio(mut s) = cfg.transport else {
        unreachable!("the probe is a stdio server")
    };
    s.args.extend(args.iter().map(|a| a.to_string()));
    let mut body = json!({"name": name, "command": s.command, "args": s.args});
    body.as_object_mut()
        .unwrap()
        .extend(extra.as_object().unwrap().clone());
    body
}

/// What the sandbox must show a user's probe server: the test caches (the MCP cache, the venv;
/// the script's directory is in the repo) and the Python installation the venv's interpreter links to.
pub fn sandbox_paths_for_the_probe() -> String {
    let python = agentry_mcp::testing::require(
        agentry_mcp::testing::venv_dir().join("bin/python"),
        "the test venv",
    );
    let real = std::fs::canonicalize(&python).unwrap();
    let prefix = real.parent().and_then(|p| p.parent()).unwrap();
    let script = agentry_mcp::testing::probe("p");
    let agentry_mcp::client::McpTransportConfig::Stdio(s) = script.transport else {
        unreachable!()
    };
    let script_dir = std::path::Path::new(&s.args[0])
        .parent()
        .unwrap()
        .to_path_buf();
    format!(
        "{},{},{}",
        agentry_mcp::testing::sandbox_read_only_paths(),
        prefix.display(),
        script_dir.display()
    )
}

fn workspace(ctx: &Ctx, t: &TenantFx, m: &Member) -> std::path::PathBuf {
    ctx.server
        .data_dir
        .path()
        .join("workspaces")
        .join(&t.id)
        .join(&m.user_id)
}

fn text(r: &rmcp::model::CallToolResult) -> String {
    r.content
        .iter()
        .filter_map(|c| c.as_text().map(|t| t.text.clone()))
        .collect::<Vec<_>>()
        .join("\n")
}

/// GET one server until `until` holds (at most `within`); the last view either way.
async fn server_until(
    ctx: &Ctx,
    key: &str,
    path: &str,
    within: Duration,
    until: impl Fn(&Value) -> bool,
) -> Value {
    let deadline = Instant::now() + within;
    loop {
        let got = ctx.ok(Method::GET, path, key, None, 200).await;
        if until(&got) || Instant::now() >= deadline {
            return got;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Everything a server's view reports of its history, checked against what the test made happen:
/// - a server added over REST is connected in the background, before any run or `/mcp` call;
/// - `calls` counts ok / error / timeout per user and server (another user's server of the same
///   name keeps its own counts), `reconnects` and `last_error(_at)` follow a server that died
///   and came back, `connected_since` moves with the new connection;
/// - the per-server metrics carry `server="user:<name>"`;
/// - `connect_timeout_secs` and a workspace-relative `cwd` are stored and used; bad values are
///   422 naming the field;
/// - `taskSupport: required` tools are not offered (the reference server's
///   `simulate-research-query`).
pub async fn server_history_over_rest(ctx: &Ctx) {
    let t = ctx
        .tenant_with(
            json!({"features_enabled": ["stdio_mcp"], "policy": {"stdio_mcp_role": "member"}}),
        )
        .await;
    let me = &t.member;
    let path = servers_path(&me.user_id);

    // Bad connection fields: 422 naming the field, nothing stored.
    for (extra, field) in [
        (json!({"connect_timeout_secs": 0}), "connect_timeout_secs"),
        (json!({"connect_timeout_secs": 301}), "connect_timeout_secs"),
        (json!({"cwd": "/etc"}), "cwd"),
        (json!({"cwd": "../other-user"}), "cwd"),
        (json!({"cwd": "a/../../b"}), "cwd"),
    ] {
        let r = ctx
            .call(
                Method::POST,
                &path,
                Some(&me.key),
                Some(&probe("p", &[], extra.clone())),
            )
            .await;
        assert_eq!(
            (r.status, r.code()),
            (422, "validation_error"),
            "{extra}: {}",
            r.body
        );
        assert!(r.body.to_string().contains(field), "{extra}: {}", r.body);
    }
    let r = ctx
        .call(
            Method::POST,
            &path,
            Some(&me.key),
            Some(&json!({"name": "h", "url": "http://127.0.0.2:9/mcp", "cwd": "x"})),
        )
        .await;
    assert_eq!(r.status, 422, "{}", r.body);
    assert!(r.body.to_string().contains("cwd"), "{}", r.body);
    assert!(
        ctx.ok(Method::GET, &path, &me.key, None, 200)
            .await
            .as_array()
            .unwrap()
            .is_empty()
    );

    // The probe runs in `srv` of the member's workspace: its `cwd` tool tells where it runs.
    std::fs::create_dir_all(workspace(ctx, &t, me).join("srv")).unwrap();
    let body = probe(
        "probe",
        &["--ops"],
        json!({"cwd": "srv", "connect_timeout_secs": 20, "timeout_secs": 2}),
    );
    let added = ctx
        .ok(Method::POST, &path, &me.key, Some(body.clone()), 201)
        .await;
    assert_eq!(added["cwd"], "srv", "{added}");
    assert_eq!(added["connect_timeout_secs"], 20, "{added}");
    let one = format!("{path}/probe");
    // Connected in the background: nothing has used it yet.
    let got = server_until(ctx, &me.key, &one, Duration::from_secs(30), |v| {
        v["status"] == "connected"
    })
    .await;
    assert_eq!(got["status"], "connected", "{got}");
    assert_eq!(got["connect_timeout_secs"], 20, "{got}");
    assert_eq!(got["cwd"], "srv", "{got}");
    assert_eq!(got["reconnects"], 0, "{got}");
    assert_eq!(
        got["calls"],
        json!({"ok": 0, "error": 0, "timeout": 0}),
        "{got}"
    );
    assert!(got.get("last_error").is_none(), "{got}");
    let since = got["connected_since"]
        .as_str()
        .expect("connected_since")
        .to_string();
    chrono::DateTime::parse_from_rfc3339(&since).expect("an RFC 3339 time");

    // Calls through `/mcp` (the pool's tools): two ok, one timeout (timeout_secs 2).
    let client = connect(ctx, &me.key, User::answering(vec![])).await;
    let listed: Vec<String> = client
        .list_all_tools()
        .await
        .unwrap()
        .into_iter()
        .map(|t| t.name.to_string())
        .collect();
    assert!(
        listed.iter().any(|n| n == "probe__working_directory"),
        "{listed:?}"
    );
    let r = call(&client, "probe__working_directory", json!({})).await;
    assert_ne!(r.is_error, Some(true), "{r:?}");
    let dir = format!("{}/srv\"", me.user_id);
    assert!(text(&r).contains(&dir), "runs in {}", text(&r));
    let r = call(&client, "probe__tool_01", json!({})).await;
    assert_ne!(r.is_error, Some(true), "{r:?}");
    let r = call(&client, "probe__wait_until_cancelled", json!({})).await;
    assert_eq!(r.is_error, Some(true), "{r:?}");
    let got = ctx.ok(Method::GET, &one, &me.key, None, 200).await;
    assert_eq!(
        got["calls"],
        json!({"ok": 2, "error": 0, "timeout": 1}),
        "{got}"
    );

    // The server dies under a call: an error, then it is brought back in the background.
    let r = call(&client, "probe__exit_now", json!({})).await;
    assert_eq!(r.is_error, Some(true), "{r:?}");
    let got = server_until(ctx, &me.key, &one, Duration::from_secs(30), |v| {
        v["reconnects"] == 1 && v["status"] == "connected"
    })
    .await;
    assert_eq!(got["reconnects"], 1, "{got}");
    assert_eq!(got["status"], "connected", "{got}");
    assert_eq!(got["calls"]["error"], 1, "{got}");
    assert!(
        got["last_error"].as_str().is_some_and(|e| !e.is_empty()),
        "{got}"
    );
    chrono::DateTime::parse_from_rfc3339(got["last_error_at"].as_str().unwrap()).unwrap();
    let again = got["connected_since"].as_str().unwrap();
    assert!(again > since.as_str(), "{again} after {since}");
    client.cancel().await.unwrap();

    // The list shows the same history.
    let listed = ctx.ok(Method::GET, &path, &me.key, None, 200).await;
    let entry = listed
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["name"] == "probe")
        .unwrap();
    assert_eq!(entry["reconnects"], 1, "{entry}");
    assert_eq!(entry["calls"], got["calls"], "{entry}");

    // Another user's server of the same name has its own history; theirs is not reachable.
    let other = &t.member2;
    let theirs = servers_path(&other.user_id);
    ctx.ok(
        Method::POST,
        &theirs,
        &other.key,
        Some(probe("probe", &[], json!({}))),
        201,
    )
    .await;
    let got = server_until(
        ctx,
        &other.key,
        &format!("{theirs}/probe"),
        Duration::from_secs(30),
        |v| v["status"] == "connected",
    )
    .await;
    assert_eq!(
        got["calls"],
        json!({"ok": 0, "error": 0, "timeout": 0}),
        "{got}"
    );
    assert_eq!(got["reconnects"], 0, "{got}");
    let r = ctx.call(Method::GET, &one, Some(&other.key), None).await;
    assert_eq!(r.status, 404, "{}", r.body);
    let stranger = ctx.tenant().await;
    let r = ctx
        .call(Method::GET, &one, Some(&stranger.admin.key), None)
        .await;
    assert_eq!(r.status, 404, "{}", r.body);

    // Per-server metrics: a user's server is `user:<name>`.
    let metrics = ctx.metrics().await;
    let line = |name: &str, must: &[&str]| {
        metrics
            .lines()
            .find(|l| l.starts_with(name) && must.iter().all(|m| l.contains(m)))
            .map(str::to_string)
    };
    for (outcome, at_least) in [("ok", 2.0), ("timeout", 1.0), ("error", 1.0)] {
        let l = line(
            "agentry_mcp_server_calls_total{",
            &["server=\"user:probe\"", &format!("outcome=\"{outcome}\"")],
        )
        .unwrap_or_else(|| panic!("no {outcome} series:\n{metrics}"));
        let n: f64 = l.rsplit(' ').next().unwrap().parse().unwrap();
        assert!(n >= at_least, "{l}");
    }
    let l = line(
        "agentry_mcp_server_reconnects_total{",
        &["server=\"user:probe\""],
    )
    .unwrap_or_else(|| panic!("no reconnects series:\n{metrics}"));
    assert!(
        l.rsplit(' ').next().unwrap().parse::<f64>().unwrap() >= 1.0,
        "{l}"
    );
    assert!(
        line(
            "agentry_mcp_server_connections{",
            &["server=\"user:probe\"", "state=\"connected\""]
        )
        .is_some(),
        "{metrics}"
    );
    assert!(
        line(
            "agentry_mcp_server_call_duration_seconds_count{",
            &["server=\"user:probe\""]
        )
        .is_some(),
        "{metrics}"
    );

    // Every family, the per-server ones too, is described and typed as Prometheus wants.
    crate::observability::passes_promtool(&metrics);

    // A tool that may only be called as an MCP task is not offered, in the view or over `/mcp`.
    crate::mcp_server::add_everything(ctx, me).await;
    let got = server_until(
        ctx,
        &me.key,
        &format!("{path}/everything"),
        Duration::from_secs(30),
        |v| v["status"] == "connected",
    )
    .await;
    let offered: Vec<&str> = got["tools"]
        .as_array()
        .unwrap_or_else(|| panic!("no tools: {got}"))
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert!(offered.contains(&"everything__echo"), "{offered:?}");
    assert!(
        !offered.contains(&"everything__simulate-research-query"),
        "{offered:?}"
    );
    let client = connect(ctx, &me.key, User::answering(vec![])).await;
    let listed: Vec<String> = client
        .list_all_tools()
        .await
        .unwrap()
        .into_iter()
        .map(|t| t.name.to_string())
        .collect();
    assert!(listed.iter().any(|n| n == "everything__echo"), "{listed:?}");
    assert!(
        !listed.iter().any(|n| n.contains("simulate-research-query")),
        "{listed:?}"
    );
    client.cancel().await.unwrap();

    // GET → PUT round trip keeps the connection fields; the view-only history is ignored.
    let got = ctx.ok(Method::GET, &one, &me.key, None, 200).await;
    let put = ctx.ok(Method::PUT, &one, &me.key, Some(got), 200).await;
    assert_eq!(put["cwd"], "srv", "{put}");
    assert_eq!(put["connect_timeout_secs"], 20, "{put}");
    // A changed configuration starts a new history.
    let got = server_until(ctx, &me.key, &one, Duration::from_secs(30), |v| {
        v["status"] == "connected"
    })
    .await;
    assert_eq!(got["reconnects"], 0, "{got}");
    assert_eq!(
        got["calls"],
        json!({"ok": 0, "error": 0, "timeout": 0}),
        "{got}"
    );
}

/// Issue 18, item 3: a stdio server that hangs at start (it never answers `initialize`) costs
/// the user's unrelated runs nothing, and adding a server starts its connect at once, in the
/// background. `connect_wait` is 15 s here and the server's connect timeout 60 s.
/// - Right after the POST the server is `connecting` (nothing used it yet).
/// - A run of an assistant that may use only `write_todos` takes no longer than with no
///   server at all (asserted under 10 s, against the 15 s a wait would take).
/// - The first run that may use it waits only for what is left of the first attempt's
///   `connect_wait`, counted from the POST; the next one does not wait.
///
/// The times are printed (`measured:`) for docs/mcp.md.
pub async fn a_hung_stdio_server_costs_unrelated_runs_nothing(
    ctx: &Ctx,
    fake: &agentry_fake_model::FakeModelServer,
) {
    use agentry_fake_model::FakeReply;
    let t = ctx
        .tenant_with(
            json!({"features_enabled": ["stdio_mcp"], "policy": {"stdio_mcp_role": "member"}}),
        )
        .await;
    let me = &t.admin;
    ctx.ok(
        Method::POST,
        "/api/v1/agents",
        &me.key,
        Some(json!({"id": "todos-only", "tools": ["write_todos"], "auto_approve": true})),
        201,
    )
    .await;
    let session = |assistant: Option<&str>| {
        let body = match assistant {
            Some(a) => json!({"assistant_id": a}),
            None => json!({}),
        };
        async move {
            ctx.ok(Method::POST, "/api/v1/sessions", &me.key, Some(body), 201)
                .await["session_id"]
                .as_str()
                .unwrap()
                .to_string()
        }
    };
    let timed_run = |session: String, reply: &'static str| async move {
        fake.push(FakeReply::text(reply));
        let started = Instant::now();
        let events = crate::mcp::run_over_ws(ctx, &me.key, &session, "hello").await;
        let took = started.elapsed();
        assert_eq!(
            events.last().unwrap()["data"]["status"],
            "completed",
            "{events:?}"
        );
        (took, events)
    };
    let narrow = session(Some("todos-only")).await;
    let (baseline, _) = timed_run(narrow.clone(), "baseline").await;

    let path = servers_path(&me.user_id);
    let added_at = Instant::now();
    ctx.ok(
        Method::POST,
        &path,
        &me.key,
        Some(json!({"name": "hung", "command": "sleep", "args": ["3600"],
                    "connect_timeout_secs": 60})),
        201,
    )
    .await;
    let status = ctx
        .ok(Method::GET, &format!("{path}/hung"), &me.key, None, 200)
        .await;

    let (unrelated, events) = timed_run(narrow, "unrelated").await;
    let wide = session(None).await;
    let (first_wide, first_events) = timed_run(wide.clone(), "first").await;
    let first_after_add = added_at.elapsed();
    let (second_wide, second_events) = timed_run(wide, "second").await;
    eprintln!(
        "measured: baseline run {baseline:?}; after adding a hung stdio server: unrelated run \
         {unrelated:?}, first run that may use it {first_wide:?} (ended {first_after_add:?} after \
         the POST), the next {second_wide:?}"
    );

    assert_eq!(
        status["status"], "connecting",
        "connected in the background: {status}"
    );
    assert!(
        unrelated < Duration::from_secs(10),
        "the unrelated run took {unrelated:?}"
    );
    assert!(
        !events.iter().any(|e| e.to_string().contains("MCP server")),
        "the unrelated run heard of the hung server: {events:?}"
    );
    assert!(
        first_after_add < Duration::from_secs(15) + Duration::from_secs(10),
        "the first wide run waited past the first attempt's connect_wait: {first_after_add:?}"
    );
    for events in [&first_events, &second_events] {
        assert!(
            events
                .iter()
                .any(|e| e.to_string().contains("still connecting")),
            "{events:?}"
        );
    }
    assert!(
        second_wide < Duration::from_secs(10),
        "the second run waited for the hung server: {second_wide:?}"
    );
}
