//! Where the MCP reference servers used by tests are installed, and configs for them (feature
//! `testing`). `scripts/install-mcp-test-servers.sh` installs them into `.cache/mcp`, and
//! `scripts/install-api-test-deps.sh` the Python ones into the tests' one venv (`.cache/venv`).

use std::path::{Path, PathBuf};

use agentry_schema::secret::Secret;

use crate::client::{McpServerConfig, McpTransportConfig};

pub const INSTALL_HINT: &str = "run scripts/install-mcp-test-servers.sh (installs the MCP test servers into .cache/mcp) \
     and scripts/install-api-test-deps.sh (the Python venv, .cache/venv)";

/// Where the installed servers are: `AGENTRY_MCP_CACHE` or `<repo>/.cache/mcp`.
pub fn cache_dir() -> PathBuf {
    if let Ok(dir) = std::env::var("AGENTRY_MCP_CACHE") {
        return PathBuf::from(dir);
    }
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../.cache/mcp")
}

/// The one Python venv of the tests (`AGENTRY_VENV` or `<repo>/.cache/venv`, made by
/// `scripts/install-api-test-deps.sh`): `mcp-server-time` and with it the official Python MCP
/// SDK (`mcp`), next to the API checks' tools.
pub fn venv_dir() -> PathBuf {
    if let Ok(dir) = std::env::var("AGENTRY_VENV") {
        return PathBuf::from(dir);
    }
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../.cache/venv")
}

/// What a sandboxed MCP server from the test installs must be able to read
/// (`AGENTRY_SANDBOX__READ_ONLY_PATHS`): the MCP cache (node, the npm servers) and the venv.
pub fn sandbox_read_only_paths() -> String {
    format!("{},{}", cache_dir().display(), venv_dir().display())
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
    require(venv_dir().join("bin/mcp-server-time"), "mcp-server-time")
}

/// The official TypeScript SDK (`@modelcontextprotocol/sdk`), for a test's client script.
pub fn ts_sdk_dir() -> PathBuf {
    require(
        cache_dir().join("clients/node_modules/@modelcontextprotocol/sdk"),
        "@modelcontextprotocol/sdk",
    )
}

/// MCP Inspector's launcher (`mcp-inspector`; `--cli` runs its command-line client).
pub fn inspector_js() -> PathBuf {
    require(
        cache_dir().join(
            "clients/node_modules/@modelcontextprotocol/inspector/clients/launcher/build/index.js",
        ),
        "@modelcontextprotocol/inspector",
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
        venv_dir().join("bin/python"),
        "the test venv (with mcp-server-time)",
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

/// `tests/support/oauth_fixture.py` running: a real OAuth 2.1 authorization server (and, with
/// `--protected-mcp`, an OAuth-protected MCP server) on the official Python SDK, bound to
/// 127.0.0.1 on free ports. The script's header documents its options and routes. Killed when
/// dropped (and it exits by itself when this process's end closes its stdin).
pub struct OAuthFixture {
    /// What the fixture printed: `issuer`, `token_endpoint`, `jwks_uri`, `mcp_url`, ….
    pub info: serde_json::Value,
    http: reqwest::Client,
    _child: tokio::process::Child,
}

impl OAuthFixture {
    /// Start the fixture with these command-line options (e.g. `["--protected-mcp",
    /// "--token-ttl", "5"]`); returns once it answers.
    pub async fn start(args: &[&str]) -> OAuthFixture {
        use tokio::io::AsyncBufReadExt;
        let python = require(
            venv_dir().join("bin/python"),
            "the Python venv with the official MCP SDK (mcp)",
        );
        let script =
            Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/support/oauth_fixture.py");
        let mut child = tokio::process::Command::new(python)
            .arg(&script)
            .arg("--exit-on-eof")
            .args(args)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::inherit())
            .kill_on_drop(true)
            .spawn()
            .expect("start tests/support/oauth_fixture.py");
        let stdout = child.stdout.take().expect("the fixture's stdout");
        let mut lines = tokio::io::BufReader::new(stdout).lines();
        let line = tokio::time::timeout(std::time::Duration::from_secs(60), lines.next_line())
            .await
            .expect("the OAuth fixture printed its URLs within 60 s")
            .expect("read the OAuth fixture's stdout")
            .expect("the OAuth fixture exited before printing its URLs (see its stderr above)");
        let info: serde_json::Value = serde_json::from_str(&line)
            .unwrap_or_else(|e| panic!("the OAuth fixture printed {line:?}, not JSON: {e}"));
        OAuthFixture {
            info,
            http: reqwest::Client::builder()
                .no_proxy()
                .redirect(reqwest::redirect::Policy::none())
                .build()
                .expect("an HTTP client"),
            _child: child,
        }
    }

    /// One of the URLs it printed (`issuer`, `jwks_uri`, `mcp_url`, …).
    pub fn url(&self, name: &str) -> &str {
        self.info[name]
            .as_str()
            .unwrap_or_else(|| panic!("the OAuth fixture printed no {name}: {}", self.info))
    }

    async fn test_call(
        &self,
        method: reqwest::Method,
        path: &str,
        body: serde_json::Value,
    ) -> serde_json::Value {
        let r = self
            .http
            .request(method, format!("{}{path}", self.url("test_url")))
            .json(&body)
            .send()
            .await
            .expect("call the OAuth fixture");
        assert!(
            r.status().is_success(),
            "the OAuth fixture answered {} to {path}",
            r.status()
        );
        r.json().await.expect("the OAuth fixture answers JSON")
    }

    /// A token signed by the fixture's key with its usual claims, overridden by `claims`
    /// (`null` removes one; `"ttl": -60` makes it expired; `"key": "unknown"` signs it with a key
    /// the JWKS never lists).
    pub async fn mint(&self, claims: serde_json::Value) -> String {
        let r = self.test_call(reqwest::Method::POST, "/mint", claims).await;
        r["access_token"]
            .as_str()
            .expect("a minted token")
            .to_string()
    }

    /// A new signing key (new `kid`); the old one stays in the JWKS only with `keep_old`.
    pub async fn rotate_key(&self, keep_old: bool) -> String {
        let r = self
            .test_call(
                reqwest::Method::POST,
                "/rotate",
                serde_json::json!({"keep_old": keep_old}),
            )
            .await;
        r["kid"].as_str().expect("the new kid").to_string()
    }

    /// The user (and claims) later authorization requests that name none approve as.
    pub async fn set_defaults(&self, user: &str, claims: serde_json::Value) {
        self.test_call(
            reqwest::Method::POST,
            "/defaults",
            serde_json::json!({"user": user, "claims": claims}),
        )
        .await;
    }

    /// What the token endpoint and the protected MCP server saw, oldest first.
    pub async fn requests(&self) -> Vec<serde_json::Value> {
        let r = self
            .http
            .get(format!("{}/requests", self.url("test_url")))
            .send()
            .await
            .expect("call the OAuth fixture");
        r.json().await.expect("the OAuth fixture answers JSON")
    }

    /// The browser step: open `authorization_url` (adding the fixture's test-only `user` and
    /// `claims` parameters) and return where the server redirects (the client's redirect URI with
    /// `code`, `state` and `iss`, or with `error`).
    pub async fn approve(
        &self,
        authorization_url: &str,
        user: &str,
        claims: serde_json::Value,
    ) -> String {
        let mut url = url::Url::parse(authorization_url).expect("an authorization URL");
        url.query_pairs_mut()
            .append_pair("user", user)
            .append_pair("claims", &claims.to_string());
        let r = self
            .http
            .get(url)
            .send()
            .await
            .expect("open the authorization URL");
        assert_eq!(
            r.status(),
            302,
            "the authorization endpoint answered {}",
            r.status()
        );
        r.headers()["location"]
            .to_str()
            .expect("a Location header")
            .to_string()
    }
}
