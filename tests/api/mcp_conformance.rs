//! The official `@modelcontextprotocol/conformance` *server* scenarios against `/mcp`: both
//! installed suite versions (0.1.16, and 0.2.0-alpha.12 on protocol revisions 2025-11-25 and
//! 2026-07-28), each against its own baseline (needs Node 22 and the packages from
//! `scripts/install-mcp-test-servers.sh`).
//!
//! The conformance CLI cannot send an API key, and `/mcp` answers 401 without one, so it talks
//! to a small loopback proxy ([`KeyProxy`]) that adds `Authorization: Bearer <key>` to every
//! request and passes everything else through untouched (the `Host` header included, so the
//! DNS-rebinding scenario still sees the server's own check).
//!
//! Many scenarios call fixture tools, resources and prompts a server must define for the suite
//! (`test_simple_text`, `test://static-text`, `test_simple_prompt`, …). Agentry serves its real
//! tools and no resources or prompts of its own, so those fail by design; they are listed in
//! `mcp_conformance_expected_failures*.yaml` (one per suite version and revision), and the CLI's
//! baseline check fails this test both when another scenario fails and when a listed one starts
//! passing (the list is then stale). docs/mcp.md records the tables.

use std::path::Path;
use std::process::Command;

use agentry_mcp::testing::{cache_dir, node};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};

use crate::ctx::Ctx;

/// Adds the key to each request of each connection; responses are copied back as they come.
pub struct KeyProxy {
    pub port: u16,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for KeyProxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl KeyProxy {
    pub async fn start(upstream: u16, key: String) -> KeyProxy {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let task = tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let key = key.clone();
                tokio::spawn(async move {
                    let _ = relay(client, upstream, &key).await;
                });
            }
        });
        KeyProxy { port, task }
    }
}

/// One client connection: request heads are read line by line and get the key (any
/// `Authorization` of the client is dropped); bodies are `Content-Length` long (the CLI's fetch
/// sends no chunked requests).
async fn relay(client: TcpStream, upstream: u16, key: &str) -> std::io::Result<()> {
    let server = TcpStream::connect(("127.0.0.1", upstream)).await?;
    let (client_r, mut client_w) = client.into_split();
    let (mut server_r, mut server_w) = server.into_split();
    let back = tokio::spawn(async move {
        let _ = tokio::io::copy(&mut server_r, &mut client_w).await;
    });
    let mut reader = BufReader::new(client_r);
    loop {
        let mut head = Vec::new();
        let mut length = 0usize;
        let mut first = true;
        loop {
            let mut line = String::new();
            if reader.read_line(&mut line).await? == 0 {
                back.abort();
                return Ok(());
            }
            if line == "\r\n" {
                break;
            }
            let lower = line.to_ascii_lowercase();
            if lower.starts_with("authorization:") {
                continue;
            }
            if let Some(v) = lower.strip_prefix("content-length:") {
                length = v.trim().parse().unwrap_or(0);
            }
            head.extend_from_slice(line.as_bytes());
            if first {
                // Right after the request line.
                head.extend_from_slice(format!("Authorization: Bearer {key}\r\n").as_bytes());
                first = false;
            }
        }
        head.extend_from_slice(b"\r\n");
        let mut body = vec![0u8; length];
        reader.read_exact(&mut body).await?;
        head.extend_from_slice(&body);
        server_w.write_all(&head).await?;
    }
}

/// One run of the conformance CLI: which installed suite, which protocol revision, the baseline
/// of expected failures, and scenarios that must be among the passes.
struct SuiteRun {
    /// Under the MCP cache directory (`scripts/install-mcp-test-servers.sh`).
    package: &'static str,
    label: &'static str,
    spec_version: Option<&'static str>,
    baseline: &'static str,
    must_pass: &'static [&'static str],
}

const RUNS: [SuiteRun; 3] = [
    SuiteRun {
        package: "npm",
        label: "0.1.16",
        spec_version: None,
        baseline: "mcp_conformance_expected_failures.yaml",
        must_pass: &[
            "server-initialize",
            "logging-set-level",
            "ping",
            "tools-list",
            "server-sse-multiple-streams",
            "resources-list",
            "prompts-list",
            "dns-rebinding-protection",
        ],
    },
    SuiteRun {
        package: "conformance-next",
        label: "0.2.0-alpha.12 --spec-version 2025-11-25",
        spec_version: Some("2025-11-25"),
        baseline: "mcp_conformance_expected_failures_0.2_2025-11-25.yaml",
        must_pass: &[
            "server-initialize",
            "server-session-lifecycle",
            "logging-set-level",
            "tools-list",
            "resources-list",
            "prompts-list",
            "dns-rebinding-protection",
        ],
    },
    SuiteRun {
        package: "conformance-next",
        label: "0.2.0-alpha.12 --spec-version 2026-07-28",
        spec_version: Some("2026-07-28"),
        baseline: "mcp_conformance_expected_failures_0.2_2026-07-28.yaml",
        must_pass: &[
            "tools-list",
            "resources-list",
            "prompts-list",
            "sep-2164-resource-not-found",
            "caching",
            "http-header-validation",
            "input-required-result-validate-input",
        ],
    },
];

/// Every installed suite version on every protocol revision it tests, one after another (they
/// would compete for the two cores otherwise); each against its own baseline.
pub async fn server_scenarios(ctx: &Ctx) {
    // Three full suites are some 2,000 requests within minutes: more than the default
    // requests_per_minute (600) admits.
    let t = ctx
        .tenant_with(serde_json::json!({"requests_per_minute": 1_000_000}))
        .await;
    let proxy = KeyProxy::start(ctx.server.port, t.admin.key.clone()).await;
    let url = format!("http://127.0.0.1:{}/mcp", proxy.port);
    let mut problems = Vec::new();
    for run in &RUNS {
        if let Err(problem) = suite_run(run, &url).await {
            problems.push(problem);
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n\n"));
}

async fn suite_run(run: &'static SuiteRun, url: &str) -> Result<(), String> {
    let cli = cache_dir()
        .join(run.package)
        .join("node_modules/@modelcontextprotocol/conformance/dist/index.js");
    assert!(
        cli.exists(),
        "conformance {} is not installed at {}: run scripts/install-mcp-test-servers.sh",
        run.label,
        cli.display()
    );
    let baseline = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/api")
        .join(run.baseline);
    let results = tempfile::tempdir().unwrap();
    let node = node();
    let path = format!(
        "{}:{}",
        node.parent().unwrap().display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let url = url.to_string();
    let out = tokio::task::spawn_blocking(move || {
        let mut cmd = Command::new(&node);
        cmd.arg(&cli)
            .args(["server", "--url", &url, "--suite", "all"])
            .arg("--expected-failures")
            .arg(&baseline);
        if let Some(v) = run.spec_version {
            cmd.args(["--spec-version", v]);
        }
        cmd.env("PATH", &path)
            .current_dir(results.path())
            .output()
            .expect("run the conformance CLI")
    })
    .await
    .unwrap();
    let output = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    if !(out.status.success() && output.contains("Baseline check passed")) {
        return Err(format!(
            "conformance {}: the /mcp results differ from {} (exit {:?}):\n{output}",
            run.label,
            run.baseline,
            out.status.code()
        ));
    }
    // The scenarios that must pass did run and pass.
    for must in run.must_pass {
        if !output
            .lines()
            .any(|l| l.starts_with("✓") && l.contains(&format!(" {must}:")))
        {
            return Err(format!(
                "conformance {}: {must} did not pass:\n{output}",
                run.label
            ));
        }
    }
    Ok(())
}
