//! The web console in a real browser: one `agentry serve` (port 0, its own SQLite file, the
//! built-in scripted model), and `tests/console/console.test.mjs` driving Debian's `chromium`
//! through `playwright-core` (both installed by `scripts/test.sh`, the latter with
//! `scripts/install-browser-test-deps.sh`). Screenshots of every page land in
//! `target/console-screenshots/`.

use crate::support;

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use support::Server;

const ADMIN_KEY: &str = "console-test-platform-admin-key-0123456789";
const INSTALL_HINT: &str = "run scripts/install-browser-test-deps.sh (apt-get install chromium; npm installs playwright-core into .cache/browser-test)";

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// What the browser test needs, or why it cannot run. In CI a missing part fails the test.
fn requirements() -> Result<(PathBuf, PathBuf), String> {
    let chromium = std::env::var("AGENTRY_CHROMIUM").unwrap_or_else(|_| "/usr/bin/chromium".into());
    let chromium = PathBuf::from(chromium);
    if !chromium.exists() {
        return Err(format!(
            "chromium is not installed at {}",
            chromium.display()
        ));
    }
    let cache = std::env::var("AGENTRY_BROWSER_TEST_CACHE")
        .map(PathBuf::from)
        .unwrap_or_else(|_| repo().join(".cache/browser-test"));
    let playwright = cache.join("node_modules/playwright-core/index.mjs");
    if !playwright.exists() {
        return Err(format!(
            "playwright-core is not installed at {}",
            playwright.display()
        ));
    }
    Ok((chromium, playwright))
}

#[tokio::test]
async fn the_web_console_works_in_a_real_browser() {
    let (chromium, playwright) = match requirements() {
        Ok(r) => r,
        Err(why) if std::env::var("CI").is_err() => {
            eprintln!("SKIPPING the browser test: {why}: {INSTALL_HINT}");
            return;
        }
        Err(why) => panic!("{why}: {INSTALL_HINT}"),
    };
    // An OAuth-protected MCP server and its authorization server, for the "Sign in" button.
    let oauth =
        agentry_mcp::testing::OAuthFixture::start(&["--protected-mcp", "--user", "alice@idp"])
            .await;
    let server = Server::start(&[
        ("AGENTRY_AUTH__ADMIN_KEY", ADMIN_KEY),
        (
            "AGENTRY_MCP__ENCRYPTION_KEY",
            "passphrase:a long enough console test passphrase",
        ),
        // The test's MCP servers are on loopback: this server's own /mcp, and a closed port.
        ("AGENTRY_TOOLS__ALLOW_PRIVATE_ADDRESSES", "true"),
    ])
    .await;
    let artifacts = std::env::var("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|_| repo().join("target"))
        .join("console-screenshots");
    let script = repo().join("tests/console/console.test.mjs");
    let run = tokio::process::Command::new("node")
        .arg(&script)
        .env("AGENTRY_BASE", &server.base)
        .env("AGENTRY_ADMIN_KEY", ADMIN_KEY)
        .env("PLAYWRIGHT_CORE", &playwright)
        .env("CHROMIUM", &chromium)
        .env("ARTIFACTS", &artifacts)
        // The reference "everything" MCP server (an image tool), run as a stdio server.
        .env("NODE22", agentry_mcp::testing::node())
        .env("EVERYTHING_JS", agentry_mcp::testing::everything_js())
        .env("OAUTH_MCP_URL", oauth.url("mcp_url"))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .output();
    let out = tokio::time::timeout(Duration::from_secs(300), run)
        .await
        .expect("the browser test finished within 5 minutes")
        .expect("node runs (Node.js is installed)");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    println!("{stdout}");
    eprintln!("{stderr}");
    assert!(
        out.status.success(),
        "the browser test failed (screenshots in {}):\n{stdout}\n{stderr}",
        artifacts.display()
    );
    assert!(stdout.contains("console: 1 passed, 0 failed"), "{stdout}");
}
