//! The official MCP clients against `/mcp`, each run as a user would run it: the TypeScript SDK
//! (`@modelcontextprotocol/sdk`) and MCP Inspector's command-line client (`@modelcontextprotocol/
//! inspector --cli`), with an API key as the bearer token and with OAuth (each client's own
//! flow: discovery from the 401, dynamic registration, authorization code with PKCE) against the
//! OAuth test fixture (`tests/support/oauth_fixture.py`), which Agentry trusts through
//! `[mcp.oauth]`. The Python SDK's OAuth flow is in `mcp_oauth.rs`.

use std::process::Stdio;
use std::time::Duration;

use agentry_mcp::testing::{OAuthFixture, inspector_js, node, ts_sdk_dir};
use serde_json::{Value, json};
use tokio::io::AsyncBufReadExt;

use crate::ctx::Ctx;
use crate::mcp_server::workspace;

const CLIENT_TIMEOUT: Duration = Duration::from_secs(120);

fn script(name: &str) -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/support")
        .join(name)
}

/// tests/support/mcp_ts_client.mjs with `env`: what it printed.
async fn ts_client(ctx: &Ctx, env: &[(&str, &str)]) -> Value {
    let out = tokio::time::timeout(
        CLIENT_TIMEOUT,
        tokio::process::Command::new(node())
            .arg(script("mcp_ts_client.mjs"))
            .env("MCP_SDK_DIR", ts_sdk_dir())
            .env("MCP_URL", ctx.url("/mcp"))
            .envs(env.iter().copied())
            .env("NO_PROXY", "127.0.0.1")
            .output(),
    )
    .await
    .expect("the TypeScript client ends within 120 s")
    .expect("run the TypeScript client");
    assert!(
        out.status.success(),
        "the TypeScript SDK client failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "the TypeScript client printed no JSON ({e}): {}",
            String::from_utf8_lossy(&out.stdout)
        )
    })
}

/// MCP Inspector's CLI, with its state in a fresh home and secrets in memory; a browser it would
/// open is a no-op (the test is the browser).
fn inspector(home: &std::path::Path) -> tokio::process::Command {
    let bin = home.join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    let fake = bin.join("xdg-open");
    std::fs::write(&fake, "#!/bin/sh\nexit 0\n").unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&fake, std::fs::Permissions::from_mode(0o755)).unwrap();
    let path = format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let mut cmd = tokio::process::Command::new(node());
    cmd.arg(inspector_js())
        .arg("--cli")
        .env("HOME", home)
        .env("PATH", path)
        .env("BROWSER", "true")
        .env("MCP_INSPECTOR_SECRET_STORE", "memory")
        .env("NO_PROXY", "127.0.0.1")
        .env("NO_COLOR", "1")
        .kill_on_drop(true);
    cmd
}

/// Run Inspector's CLI with `args` and a key: its JSON result.
async fn inspector_with_key(ctx: &Ctx, key: &str, args: &[&str]) -> Value {
    let home = tempfile::tempdir().unwrap();
    let out = tokio::time::timeout(
        CLIENT_TIMEOUT,
        inspector(home.path())
            .arg(ctx.url("/mcp"))
            .args(["--transport", "http", "--format", "json"])
            .args(["--header", &format!("Authorization: Bearer {key}")])
            .args(args)
            .stdin(Stdio::null())
            .output(),
    )
    .await
    .expect("Inspector ends within 120 s")
    .expect("run MCP Inspector");
    assert!(
        out.status.success(),
        "MCP Inspector failed ({}):\n{}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "Inspector printed no JSON ({e}): {}",
            String::from_utf8_lossy(&out.stdout)
        )
    })
}

/// Run Inspector's CLI with `args` and no key: it does OAuth itself. When it asks its user to
/// open the authorization URL, the fixture approves as `user` (with `claims`) and the redirect is
/// delivered to Inspector's own callback listener, as a browser would.
async fn inspector_with_oauth(
    ctx: &Ctx,
    fx: &OAuthFixture,
    user: &str,
    claims: Value,
    args: &[&str],
) -> Value {
    let home = tempfile::tempdir().unwrap();
    let callback_port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .unwrap()
        .port();
    let mut child = inspector(home.path())
        .arg(ctx.url("/mcp"))
        .args(["--transport", "http", "--format", "json"])
        .args([
            "--callback-url",
            &format!("http://127.0.0.1:{callback_port}/oauth/callback"),
        ])
        .args(args)
        // No TTY in a test: this tells Inspector a person is there to open the URL.
        .env("MCP_AUTO_OPEN_ENABLED", "true")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start MCP Inspector");
    let stderr = child.stderr.take().unwrap();
    let mut lines = tokio::io::BufReader::new(stderr).lines();
    let mut seen = Vec::new();
    let authorization_url = tokio::time::timeout(CLIENT_TIMEOUT, async {
        while let Some(line) = lines.next_line().await.unwrap() {
            if let Some(url) = line.split("Please navigate to: ").nth(1) {
                return url.trim().to_string();
            }
            seen.push(line);
        }
        panic!(
            "Inspector ended without asking for authorization:\n{}",
            seen.join("\n")
        );
    })
    .await
    .expect("Inspector asks for authorization within 120 s");
    let callback = fx.approve(&authorization_url, user, claims).await;
    assert!(
        callback.starts_with(&format!(
            "http://127.0.0.1:{callback_port}/oauth/callback?code="
        )),
        "{callback}"
    );
    let browser = reqwest::Client::builder().no_proxy().build().unwrap();
    let r = browser
        .get(&callback)
        .send()
        .await
        .expect("deliver the redirect");
    assert!(
        r.status().is_success(),
        "Inspector's callback answered {}",
        r.status()
    );
    // Drain stderr so Inspector never blocks on it.
    let drain = tokio::spawn(async move {
        let mut rest = Vec::new();
        while let Ok(Some(l)) = lines.next_line().await {
            rest.push(l);
        }
        rest
    });
    let out = tokio::time::timeout(CLIENT_TIMEOUT, child.wait_with_output())
        .await
        .expect("Inspector ends within 120 s")
        .expect("wait for MCP Inspector");
    let rest = drain.await.unwrap_or_default();
    assert!(
        out.status.success(),
        "MCP Inspector failed ({}):\n{}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        rest.join("\n")
    );
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "Inspector printed no JSON ({e}): {}",
            String::from_utf8_lossy(&out.stdout)
        )
    })
}

fn tool_names(listed: &Value) -> Vec<&str> {
    listed["result"]["tools"]
        .as_array()
        .unwrap_or_else(|| panic!("no tools in {listed}"))
        .iter()
        .filter_map(|t| t["name"].as_str())
        .collect()
}

fn call_text(called: &Value) -> String {
    called["result"]["content"]
        .as_array()
        .unwrap_or_else(|| panic!("no content in {called}"))
        .iter()
        .filter_map(|c| c["text"].as_str())
        .collect()
}

/// With a key: the TypeScript SDK (initialize, tools/list, a write approved by elicitation, a
/// read) and Inspector (tools/list, a call). With OAuth: both again, logging in themselves.
pub async fn official_clients(fx: &OAuthFixture, ctx: &Ctx) {
    let t = ctx.tenant().await;
    let ws = workspace(ctx, &t, &t.member);
    std::fs::create_dir_all(&ws).unwrap();
    std::fs::write(ws.join("seen.txt"), "seen by every client").unwrap();

    // The TypeScript SDK with the member's key.
    let r = ts_client(
        ctx,
        &[
            ("MCP_KEY", &t.member.key),
            (
                "CALL",
                r#"[["write_file", {"file_path": "from-ts.txt", "content": "the TypeScript SDK wrote this"}],
                    ["read_file", {"file_path": "seen.txt"}]]"#,
            ),
        ],
    )
    .await;
    assert_eq!(r["server"], "agentry", "{r}");
    let tools: Vec<&str> = r["tools"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(Value::as_str)
        .collect();
    assert!(
        tools.contains(&"read_file") && tools.contains(&"ask_default"),
        "{r}"
    );
    assert_eq!(
        r["elicitations"], 1,
        "the write asked for approval once: {r}"
    );
    assert_eq!(r["results"][0]["error"], false, "{r}");
    assert_eq!(
        std::fs::read_to_string(ws.join("from-ts.txt")).unwrap(),
        "the TypeScript SDK wrote this"
    );
    assert!(
        r["results"][1]["text"]
            .as_str()
            .unwrap()
            .contains("seen by every client"),
        "{r}"
    );

    // Inspector's CLI with the key.
    let listed = inspector_with_key(ctx, &t.member.key, &["--method", "tools/list"]).await;
    assert!(tool_names(&listed).contains(&"read_file"), "{listed}");
    let called = inspector_with_key(
        ctx,
        &t.member.key,
        &[
            "--method",
            "tools/call",
            "--tool-name",
            "read_file",
            "--tool-arg",
            "file_path=seen.txt",
        ],
    )
    .await;
    assert!(
        call_text(&called).contains("seen by every client"),
        "{called}"
    );

    // The TypeScript SDK's own OAuth, approved as the member of t.
    let claims = json!({"agentry_tenant": t.id});
    let r = ts_client(
        ctx,
        &[
            ("OAUTH_USER", &t.member.user_id),
            ("OAUTH_CLAIMS", &claims.to_string()),
            ("CALL", r#"[["read_file", {"file_path": "seen.txt"}]]"#),
        ],
    )
    .await;
    assert_eq!(r["oauth"]["registered"], true, "{r}");
    assert_eq!(r["oauth"]["has_refresh_token"], true, "{r}");
    assert!(
        r["results"][0]["text"]
            .as_str()
            .unwrap()
            .contains("seen by every client"),
        "{r}"
    );

    // Inspector's own OAuth, approved as the member of t.
    let called = inspector_with_oauth(
        ctx,
        fx,
        &t.member.user_id,
        claims.clone(),
        &[
            "--method",
            "tools/call",
            "--tool-name",
            "read_file",
            "--tool-arg",
            "file_path=seen.txt",
        ],
    )
    .await;
    assert!(
        call_text(&called).contains("seen by every client"),
        "{called}"
    );

    // Each flow registered its own client and traded a code for a token.
    let codes = fx
        .requests()
        .await
        .into_iter()
        .filter(|e| {
            e["endpoint"] == "token" && e["grant_type"] == "authorization_code" && e["ok"] == true
        })
        .count();
    assert_eq!(codes, 2, "one authorization per OAuth client");
}
