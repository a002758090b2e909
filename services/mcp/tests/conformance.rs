//! The official `@modelcontextprotocol/conformance` client scenarios, run against Agentry's MCP
//! client (`agentry-mcp-conformance-client`, which drives `McpConnection`). Needs Node 22 and the
//! conformance package from `scripts/install-mcp-test-servers.sh`. The auth scenarios (OAuth) are
//! not run: Agentry's client authenticates with static bearer / API-key / basic credentials.

mod support;

use std::process::Command;

use support::*;

/// Every non-OAuth client scenario of conformance 0.1.16.
const SCENARIOS: &[&str] = &[
    "initialize",
    "tools_call",
    "elicitation-sep1034-client-defaults",
    "sse-retry",
];

#[test]
fn conformance_client_scenarios_pass() {
    let cli = cache_dir().join("npm/node_modules/@modelcontextprotocol/conformance/dist/index.js");
    assert!(
        cli.exists(),
        "conformance is not installed at {}: {INSTALL_HINT}",
        cli.display()
    );
    let node = node();
    let node_dir = node.parent().unwrap().to_path_buf();
    let path = format!(
        "{}:{}",
        node_dir.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let client = env!("CARGO_BIN_EXE_agentry-mcp-conformance-client");
    let results = tempfile::tempdir().unwrap();
    let mut failed = Vec::new();
    for scenario in SCENARIOS {
        let out = Command::new(&node)
            .arg(&cli)
            .args(["client", "--command", client, "--scenario", scenario])
            .env("PATH", &path)
            .current_dir(results.path())
            .output()
            .expect("run the conformance CLI");
        let output = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        let passed = out.status.success()
            && output.contains("OVERALL: PASSED")
            && !output.contains("OVERALL: FAILED");
        if !passed {
            failed.push(format!(
                "{scenario}: exit {:?}\n{output}",
                out.status.code()
            ));
        }
    }
    assert!(
        failed.is_empty(),
        "conformance scenarios failed:\n{}",
        failed.join("\n---\n")
    );
}
