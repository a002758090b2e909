//! What an operator watches: the engine's metrics in `/metrics` move with what the server does
//! (live sessions, runs by status, tokens by tenant, approval waits, quota rejections, open
//! WebSockets), and the Swagger UI at `/docs/` is served from the binary, with no network.

use std::time::{Duration, Instant};

use reqwest::Method;
use serde_json::{Value, json};

use crate::ctx::Ctx;
use crate::mcp::ws_connect;
use crate::streaming::{new_session, send, until_done_or_hitl};

/// The value of the sample `name{labels}` (labels in any order), 0 when absent: a counter that
/// was never incremented is not rendered.
pub fn sample(text: &str, name: &str, labels: &[(&str, &str)]) -> f64 {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| {
            let (series, value) = l.rsplit_once(' ')?;
            let (metric, rest) = match series.split_once('{') {
                Some((m, r)) => (m, r.trim_end_matches('}')),
                None => (series, ""),
            };
            if metric != name {
                return None;
            }
            let have: Vec<&str> = rest.split(',').filter(|s| !s.is_empty()).collect();
            let want: Vec<String> = labels.iter().map(|(k, v)| format!("{k}=\"{v}\"")).collect();
            (have.len() == want.len() && want.iter().all(|w| have.contains(&w.as_str())))
                .then(|| value.parse::<f64>().ok())?
        })
        .next()
        .unwrap_or(0.0)
}

/// The promtool that checks `/metrics`: `AGENTRY_TEST_PROMTOOL`, the one
/// `scripts/install-api-test-deps.sh` unpacks into `.cache/promtool`, or `promtool` on PATH.
fn promtool() -> Option<std::path::PathBuf> {
    if let Ok(p) = std::env::var("AGENTRY_TEST_PROMTOOL") {
        return Some(p.into());
    }
    let cached =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../.cache/promtool/promtool");
    if cached.exists() {
        return Some(cached);
    }
    std::env::var_os("PATH").and_then(|path| {
        std::env::split_paths(&path)
            .map(|d| d.join("promtool"))
            .find(|p| p.exists())
    })
}

/// `promtool check metrics` on a scrape: the exposition parses and passes Prometheus' own lint
/// (a `# HELP` for every family, counters named `_total`, no gauge named like a counter, …).
/// Without promtool the check is skipped, saying so; with `CI=true` that fails instead.
pub fn passes_promtool(text: &str) {
    let Some(promtool) = promtool() else {
        assert!(
            std::env::var("CI").is_err(),
            "promtool is missing: run scripts/install-api-test-deps.sh"
        );
        eprintln!(
            "SKIPPING `promtool check metrics`: no promtool (scripts/install-api-test-deps.sh)"
        );
        return;
    };
    use std::io::Write;
    let mut child = std::process::Command::new(&promtool)
        .args(["check", "metrics"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("running {}: {e}", promtool.display()));
    child
        .stdin
        .take()
        .unwrap()
        .write_all(text.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "`promtool check metrics` refused /metrics ({}):\n{}{}\n--- the page\n{text}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A snapshot of the engine's metrics for one tenant.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Engine {
    live_sessions: f64,
    ws: f64,
    completed: f64,
    cancelled: f64,
    rejected: f64,
    tokens: f64,
    hitl_decided: f64,
    hitl_timed_out: f64,
    session_quota: f64,
    run_quota: f64,
}

async fn engine(ctx: &Ctx, tenant: &str) -> Engine {
    let m = ctx.metrics().await;
    Engine {
        live_sessions: sample(&m, "agentry_live_sessions", &[]),
        ws: sample(&m, "agentry_ws_connections", &[]),
        completed: sample(&m, "agentry_runs_total", &[("status", "completed")]),
        cancelled: sample(&m, "agentry_runs_total", &[("status", "cancelled")]),
        rejected: sample(&m, "agentry_runs_total", &[("status", "rejected")]),
        tokens: sample(&m, "agentry_tokens_total", &[("tenant", tenant)]),
        hitl_decided: sample(
            &m,
            "agentry_hitl_wait_seconds_count",
            &[("outcome", "decided")],
        ),
        hitl_timed_out: sample(
            &m,
            "agentry_hitl_wait_seconds_count",
            &[("outcome", "timed_out_or_cancelled")],
        ),
        session_quota: sample(
            &m,
            "agentry_quota_rejections_total",
            &[("quota", "max_sessions_per_user")],
        ),
        run_quota: sample(
            &m,
            "agentry_quota_rejections_total",
            &[("quota", "max_concurrent_runs")],
        ),
    }
}

fn done_tokens(evs: &[Value]) -> f64 {
    let done = evs.last().unwrap();
    assert_eq!(done["event_type"], "done", "{evs:?}");
    done["data"]["token_usage"]["total"].as_f64().unwrap()
}

/// On a server of its own (the engine's metrics are per process): a completed run, an approved
/// tool, a rejected one, a cancelled run and two quota refusals each move exactly their metric.
pub async fn engine_metrics(ctx: &Ctx) {
    let t = ctx.tenant_with(json!({ "max_concurrent_runs": 1 })).await;
    let key = &t.member.key;
    let m0 = engine(ctx, &t.id).await;
    assert_eq!(m0.tokens, 0.0, "a new tenant has used no tokens");

    let sid = new_session(ctx, key).await;
    let mut ws = ws_connect(ctx, key, &sid).await;
    let chat = |m: &str| json!({"type": "chat", "payload": {"message": m}});
    send(&mut ws, chat("hello metrics")).await;
    let mut tokens = done_tokens(&until_done_or_hitl(&mut ws).await);
    let m1 = engine(ctx, &t.id).await;
    assert_eq!(m1.live_sessions, m0.live_sessions + 1.0, "{m1:?}");
    assert_eq!(m1.ws, m0.ws + 1.0, "{m1:?}");
    assert_eq!(m1.completed, m0.completed + 1.0, "{m1:?}");
    assert!(tokens > 0.0);
    assert_eq!(m1.tokens, tokens, "tokens by tenant: {m1:?}");

    // An approval decided after a short wait, then one rejected.
    for decision in ["approve", "reject"] {
        send(
            &mut ws,
            chat(r#"/tool write_file {"file_path": "m.txt", "content": "x"}"#),
        )
        .await;
        let evs = until_done_or_hitl(&mut ws).await;
        let request = evs.last().unwrap()["data"]["request_id"].clone();
        tokio::time::sleep(Duration::from_millis(50)).await; // a wait the histogram can see
        send(
            &mut ws,
            json!({"type": "hitl_decision", "payload": {"request_id": request, "type": decision}}),
        )
        .await;
        tokens += done_tokens(&until_done_or_hitl(&mut ws).await);
    }
    // A run cancelled while the model "thinks", and a second run refused meanwhile.
    send(&mut ws, chat("/sleep 120000\nlate")).await;
    let other = new_session(ctx, &t.member2.key).await;
    // The run's row is written once it holds the tenant's only slot.
    let deadline = Instant::now() + Duration::from_secs(60);
    while ctx
        .ok(
            Method::GET,
            &format!("/api/v1/executions?session_id={sid}"),
            key,
            None,
            200,
        )
        .await["total"]
        != 4
    {
        assert!(Instant::now() < deadline, "the run never started");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let r = ctx
        .call(
            Method::POST,
            "/api/v1/chat",
            Some(&t.member2.key),
            Some(&json!({"message": "me too", "session_id": other})),
        )
        .await;
    assert_eq!(r.status, 429, "{}", r.body);
    send(&mut ws, json!({"type": "cancel", "payload": {}})).await;
    tokens += done_tokens(&until_done_or_hitl(&mut ws).await);
    let full = ctx.tenant_with(json!({ "max_sessions_per_user": 1 })).await;
    new_session(ctx, &full.member.key).await;
    let r = ctx
        .call(
            Method::POST,
            "/api/v1/sessions",
            Some(&full.member.key),
            Some(&json!({})),
        )
        .await;
    assert_eq!(r.status, 429);

    let m2 = engine(ctx, &t.id).await;
    assert_eq!(m2.completed, m1.completed + 1.0, "approved: {m2:?}");
    assert_eq!(m2.rejected, m1.rejected + 1.0, "rejected: {m2:?}");
    assert_eq!(m2.cancelled, m1.cancelled + 1.0, "cancelled: {m2:?}");
    assert_eq!(m2.hitl_decided, m1.hitl_decided + 2.0, "{m2:?}");
    assert_eq!(m2.hitl_timed_out, m1.hitl_timed_out, "{m2:?}");
    assert_eq!(m2.tokens, tokens, "every run's tokens, by tenant: {m2:?}");
    assert_eq!(m2.run_quota, m1.run_quota + 1.0, "{m2:?}");
    assert_eq!(m2.session_quota, m1.session_quota + 1.0, "{m2:?}");
    let text = ctx.metrics().await;
    let waited = sample(
        &text,
        "agentry_hitl_wait_seconds_sum",
        &[("outcome", "decided")],
    );
    assert!(waited >= 0.1, "two waits of at least 50 ms: {waited}");
    passes_promtool(&text);
    for help in [
        "agentry_live_sessions",
        "agentry_runs_total",
        "agentry_tokens_total",
        "agentry_hitl_wait_seconds",
        "agentry_quota_rejections_total",
        "agentry_ws_connections",
    ] {
        assert!(
            text.contains(&format!("# HELP {help} ")),
            "{help} is described"
        );
    }

    // Closing the socket and deleting the session bring the gauges back.
    drop(ws);
    ctx.ok(
        Method::DELETE,
        &format!("/api/v1/sessions/{sid}"),
        key,
        None,
        204,
    )
    .await;
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let m3 = engine(ctx, &t.id).await;
        // member2's session is still live (its chat was refused, but it was opened).
        if m3.ws == m0.ws && m3.live_sessions == m0.live_sessions + 1.0 {
            break;
        }
        assert!(Instant::now() < deadline, "gauges stuck at {m3:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// `/docs` is the Swagger UI bundled in the binary: the page, its script and its styles come
/// from this server (nothing on a CDN), and it loads `/openapi.json`.
pub async fn swagger_ui(ctx: &Ctx) {
    let no_redirects = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    let r = no_redirects.get(ctx.url("/docs")).send().await.unwrap();
    assert!(r.status().is_redirection(), "{}", r.status());
    assert_eq!(r.headers()["location"], "/docs/");

    let get = |path: &str| {
        let url = ctx.url(path);
        async move {
            let r = ctx.http.get(url).send().await.unwrap();
            let status = r.status().as_u16();
            let kind = r.headers()["content-type"].to_str().unwrap().to_string();
            (status, kind, r.text().await.unwrap())
        }
    };
    let (status, kind, page) = get("/docs/").await;
    assert_eq!(status, 200, "{page}");
    assert!(kind.starts_with("text/html"), "{kind}");
    assert!(page.contains("swagger-ui"), "{page}");
    assert!(
        !page.contains("https://") && !page.contains("http://"),
        "the page loads nothing from elsewhere: {page}"
    );
    // Every script and stylesheet the page names is served here.
    let assets: Vec<&str> = page
        .split(['"', '\''])
        .filter(|s| s.ends_with(".js") || s.ends_with(".css"))
        .collect();
    assert!(
        assets.iter().any(|a| a.contains("swagger-ui-bundle.js")),
        "{assets:?}"
    );
    for asset in &assets {
        let path = format!("/docs/{}", asset.trim_start_matches("./"));
        let (status, kind, body) = get(&path).await;
        assert_eq!(status, 200, "{path}");
        let want = if asset.ends_with(".js") {
            "javascript"
        } else {
            "text/css"
        };
        assert!(kind.contains(want), "{path}: {kind}");
        if asset.contains("swagger-ui-bundle.js") {
            assert!(
                body.len() > 100_000 && body.contains("SwaggerUIBundle"),
                "{path}: the real bundle, {} bytes",
                body.len()
            );
        }
    }
    let (status, _, init) = get("/docs/swagger-initializer.js").await;
    assert_eq!(status, 200);
    assert!(init.contains("/openapi.json"), "{init}");
    let (status, _, missing) = get("/docs/no-such-asset.js").await;
    assert_eq!(status, 404, "{missing}");
}
