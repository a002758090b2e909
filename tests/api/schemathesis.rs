//! schemathesis (installed into `.cache/venv` by scripts/install-api-test-deps.sh) against the
//! real server's `/openapi.json`: generated requests, valid and invalid, with a tenant admin's
//! key and with the platform admin's; the server must answer no 5xx, only documented statuses,
//! and bodies that match the documented schemas.
//!
//! Bounded so CI stays lean (10 examples per operation, the `examples`, `coverage` and
//! `fuzzing` phases, a fixed seed). Left out, and why:
//! - the WebSocket route (`GET /ws/chat/{session_id}`): not HTTP once upgraded; `wsproto.rs`,
//!   `streaming.rs` and the authorization matrix cover it;
//! - adding or replacing a user's MCP server: the server resolves the URL's host name, and a
//!   generated name would be looked up in DNS, off this machine; `mcp.rs` covers both routes.
//!   Registering a remote A2A agent likewise (it resolves the URL and fetches its card):
//!   `a2a_remote.rs` and the authorization matrix cover that route; its list, get and delete run.
//!   The key-revoking and user-changing tenant operations run last, on their own, since a
//!   generated request may revoke or disable the caller.

use std::path::PathBuf;

use serde_json::json;

use crate::ctx::{ADMIN_KEY, Ctx};

fn schemathesis() -> Option<PathBuf> {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..");
    let bin = std::env::var_os("AGENTRY_VENV")
        .map(PathBuf::from)
        .unwrap_or_else(|| root.join(".cache/venv"))
        .join("bin/schemathesis");
    if bin.exists() {
        return Some(bin);
    }
    assert!(
        std::env::var_os("CI").is_none(),
        "{} is missing: run scripts/install-api-test-deps.sh",
        bin.display()
    );
    eprintln!("SKIPPED: schemathesis is not installed (scripts/install-api-test-deps.sh)");
    None
}

async fn run(bin: &PathBuf, ctx: &Ctx, what: &str, key: &str, filters: &[&str]) {
    let dir = tempfile::tempdir().unwrap();
    let out = tokio::process::Command::new(bin)
        .current_dir(dir.path())
        .env("NO_COLOR", "1")
        .args(["run", &ctx.url("/openapi.json")])
        .args(["--header", &format!("Authorization: Bearer {key}")])
        .args([
            "--checks",
            "not_a_server_error,status_code_conformance,response_schema_conformance",
        ])
        // One worker: hypothesis describes strategies from lambda sources in a way that is not
        // thread safe ("AST constructor recursion depth mismatch" with two).
        .args(["--max-examples", "10", "--workers", "1", "--seed", "1"])
        .args(["--phases", "examples,coverage,fuzzing", "--no-shrink"])
        .args(["--request-timeout", "30"])
        .args(filters)
        .output()
        .await
        .expect("running schemathesis");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let summary = stdout
        .lines()
        .rev()
        .find(|l| l.contains("generated"))
        .unwrap_or_default()
        .to_string();
    eprintln!("schemathesis, {what}: {}", summary.trim());
    assert!(
        out.status.success(),
        "schemathesis, {what}, found failures:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        summary.contains("generated"),
        "schemathesis, {what}, tested nothing:\n{stdout}"
    );
}

pub async fn fuzz(ctx: &Ctx) {
    let Some(bin) = schemathesis() else { return };
    // A tenant whose rate limit does not get in the way of a few thousand requests.
    let t = ctx
        .tenant_with(json!({"requests_per_minute": 2_147_483_647_u32}))
        .await;
    let risky = [
        "tenant_revoke_key",
        "tenant_update_user",
        "tenant_delete_user",
    ];
    let mut tenant_filters = vec!["--exclude-path-regex", "^/(api/v1/admin|ws/)"];
    for id in ["add_server", "replace_server", "create_remote_agent"]
        .iter()
        .chain(risky.iter())
    {
        tenant_filters.extend(["--exclude-operation-id", id]);
    }
    run(&bin, ctx, "tenant admin", &t.admin.key, &tenant_filters).await;
    let mut last = vec![];
    for id in &risky {
        last.extend(["--include-operation-id", id]);
    }
    run(
        &bin,
        ctx,
        "tenant admin, key and user changes",
        &t.admin.key,
        &last,
    )
    .await;
    run(
        &bin,
        ctx,
        "platform admin",
        ADMIN_KEY,
        &["--include-path-regex", "^/api/v1/admin"],
    )
    .await;
}
