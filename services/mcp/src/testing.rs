//! Where the MCP reference servers used by tests are installed, and configs for them (feature
//! `testing`). `scripts/install-mcp-test-servers.sh` installs them into `.cache/mcp`.

use std::path::{Path, PathBuf};

use agentry_schema::secret::Secret;

use crate::client::{McpServerConfig, McpTransportConfig};

pub const INSTALL_HINT: &str =
    "run scripts/install-mcp-test-servers.sh (installs the MCP test servers into .cache/mcp)";

/// Where the installed servers are: `AGENTRY_MCP_CACHE` or `<repo>/.cache/mcp`.
pub fn cache_dir() -> PathBuf {
    if let Ok(dir) = std::env::var("AGENTRY_MCP_CACHE") {
        return PathBuf::from(dir);
    }
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../.cache/mcp")
}

pub fn require(path: PathBuf, what: &str) -> PathBuf {
    assert!(
        path.exists(),
        "{what} is not installed at {}: {INSTALL_HINT}",
        path.display()
    );
    path
}

/// Node 22 from the cache (`AGENTRY_MCP_NODE` overrides).
pub fn node() -> PathBuf {
    if let Ok(p) = std::env::var("AGENTRY_MCP_NODE") {
        return PathBuf::from(p);
    }
    require(
        cache_dir().join("npm/node_modules/node/bin/node"),
        "node 22",
    )
}

pub fn everything_js() -> PathBuf {
    require(
        cache_dir().join("npm/node_modules/@modelcontextprotocol/server-everything/dist/index.js"),
        "@modelcontextprotocol/server-everything",
    )
}

pub fn filesystem_js() -> PathBuf {
    require(
        cache_dir().join("npm/node_modules/@modelcontextprotocol/server-filesystem/dist/index.js"),
        "@modelcontextprotocol/server-filesystem",
    )
}

pub fn time_server() -> PathBuf {
    require(
        cache_dir().join("venv/bin/mcp-server-time"),
        "mcp-server-time",
    )
}

pub fn everything(name: &str) -> McpServerConfig {
    let mut c = McpServerConfig::stdio(name, node().to_string_lossy(), &[]);
    set_args(
        &mut c,
        vec![everything_js().to_string_lossy().into(), "stdio".into()],
    );
    c
}

pub fn filesystem(name: &str, root: &Path) -> McpServerConfig {
    let mut c = McpServerConfig::stdio(name, node().to_string_lossy(), &[]);
    set_args(
        &mut c,
        vec![
            filesystem_js().to_string_lossy().into(),
            root.to_string_lossy().into(),
        ],
    );
    c
}

pub fn time(name: &str) -> McpServerConfig {
    McpServerConfig::stdio(
        name,
        time_server().to_string_lossy(),
        &["--local-timezone", "UTC"],
    )
}

/// `tests/support/probe_server.py` (a small server on the official Python SDK, `mcp`) on the
/// venv's Python. Its `wait_until_cancelled` tool records a server-side cancellation in the file
/// named by the `PROBE_CANCEL_MARKER` env var (see [`set_env`]).
pub fn probe(name: &str) -> McpServerConfig {
    let python = require(
        cache_dir().join("venv/bin/python"),
        "the mcp-server-time venv",
    );
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/support/probe_server.py");
    McpServerConfig::stdio(name, python.to_string_lossy(), &[&script.to_string_lossy()])
}

pub fn set_args(c: &mut McpServerConfig, args: Vec<String>) {
    if let McpTransportConfig::Stdio(s) = &mut c.transport {
        s.args = args;
    }
}

pub fn set_env(c: &mut McpServerConfig, key: &str, value: &str) {
    if let McpTransportConfig::Stdio(s) = &mut c.transport {
        s.env.insert(key.to_string(), Secret::new(value));
    }
}
