//! How one MCP server is reached: [`McpServerConfig`].
//!
//! The same shape is read from the YAML config file, sent to the REST API and stored per user.
//! On the wire it is flat (seed 000's `{name, command, args, env, disabled}` and seed 004's
//! `transport: "stdio" | "http"`):
//!
//! ```json
//! {"name": "fs", "transport": "stdio", "command": "npx", "args": ["-y", "…"], "env": {"K": "v"}}
//! {"name": "gh", "transport": "http", "url": "https://…/mcp",
//!  "auth": {"type": "bearer", "token_env": "GITHUB_TOKEN"}, "timeout_secs": 60}
//! ```
//!
//! `transport` may be left out when the entry has exactly one of `command` / `url`. Secrets (env
//! values, header values, literal tokens) are [`Secret`]s: they never print, and serializing a
//! config masks them as `"***"` — a serialized config is a view, not a backup.
//!
//! Deserializing validates (a bad entry never exists as a value); [`McpServerConfig::validate`]
//! runs the same checks on a value built in code and reports every problem at once.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use agentry_schema::secret::Secret;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// Separator between the server's name and the tool's name in the agent's tool names.
pub const TOOL_NAME_SEPARATOR: &str = "__";
/// Longest allowed server name.
pub const MAX_SERVER_NAME_LEN: usize = 64;
/// Default per-call timeout.
pub const DEFAULT_TIMEOUT_SECS: u64 = 60;
/// Default time allowed for spawn/connect plus the MCP handshake.
pub const DEFAULT_CONNECT_TIMEOUT_SECS: u64 = 30;
/// Header used by [`HttpAuth::ApiKey`] when none is given.
pub const DEFAULT_API_KEY_HEADER: &str = "X-API-Key";

/// One configured MCP server.
#[derive(Debug, Clone, PartialEq)]
pub struct McpServerConfig {
    /// `[a-zA-Z0-9_-]{1,64}` without `__`: tool names are `<name>__<tool>`.
    pub name: String,
    pub transport: McpTransportConfig,
    /// Per `tools/call` timeout.
    pub timeout_secs: u64,
    /// Spawn or HTTP connect plus the handshake.
    pub connect_timeout_secs: u64,
    /// A disabled server is kept in the config but never connected.
    pub disabled: bool,
}

#[derive(Debug, Clone, PartialEq)]
pub enum McpTransportConfig {
    Stdio(StdioConfig),
    Http(HttpConfig),
}

/// A local server run as a child process speaking MCP on stdin/stdout.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct StdioConfig {
    /// The program, run directly (no shell). A bare name is looked up on the allow-listed `PATH`.
    pub command: String,
    pub args: Vec<String>,
    /// Added to the child's allow-listed environment (see `client::stdio`).
    pub env: BTreeMap<String, Secret>,
    /// Working directory; the parent's when unset.
    pub cwd: Option<PathBuf>,
}

/// A remote server over Streamable HTTP.
#[derive(Debug, Clone, PartialEq)]
pub struct HttpConfig {
    /// `http://` or `https://` URL of the MCP endpoint.
    pub url: String,
    /// Extra headers sent on every request (values are secrets: they may carry keys).
    pub headers: BTreeMap<String, Secret>,
    pub auth: HttpAuth,
}

/// How an HTTP server is authenticated. `*_env` names an environment variable of the Agentry
/// process, read at connect time (a missing variable is a connect error naming it); the literal
/// forms are for secrets that come from the API (stored encrypted by the store).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case", deny_unknown_fields)]
pub enum HttpAuth {
    #[default]
    None,
    /// `Authorization: Bearer <token>`; exactly one of `token_env`, `token`.
    #[serde(alias = "bearer_token")]
    Bearer {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        token_env: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        token: Option<Secret>,
    },
    /// `<header>: <key>`; exactly one of `key_env`, `key`.
    ApiKey {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        key_env: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        key: Option<Secret>,
        #[serde(default = "default_api_key_header")]
        header: String,
    },
    /// `Authorization: Basic base64(user:password)`, both from the environment.
    Basic {
        username_env: String,
        password_env: String,
    },
    /// OAuth 2.1 as the MCP authorization spec describes it: the authorization server is found
    /// from the server's 401 (`WWW-Authenticate`, protected-resource metadata, then the
    /// authorization-server metadata). See `client::oauth`.
    #[serde(rename = "oauth")]
    OAuth(OAuthConfig),
}

/// How an OAuth client gets its token.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OAuthGrant {
    /// A person signs in through a browser (PKCE); tokens are kept per user and refreshed.
    #[default]
    AuthorizationCode,
    /// A machine client: the token is fetched with the client's own id and secret, no person.
    ClientCredentials,
}

/// `auth: {type: oauth, …}`. Every field is optional for `authorization_code`: with no
/// `client_id` the client registers itself (a Client ID Metadata Document when
/// `client_metadata_url` is given and the authorization server supports it, else dynamic client
/// registration). `client_credentials` needs `client_id` and a secret.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OAuthConfig {
    #[serde(default)]
    pub grant: OAuthGrant,
    /// A client registered with the authorization server beforehand.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_id: Option<String>,
    /// The pre-registered client's secret, from the environment.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_secret_env: Option<String>,
    /// The pre-registered client's secret (stored sealed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_secret: Option<Secret>,
    /// Scopes to ask for; when empty, the server's challenge or metadata decides.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub scopes: Vec<String>,
    /// HTTPS URL of this client's Client ID Metadata Document (SEP-991).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_metadata_url: Option<String>,
}

fn default_api_key_header() -> String {
    DEFAULT_API_KEY_HEADER.to_string()
}

/// One problem with a config: which field and what is wrong with it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigIssue {
    pub field: String,
    pub message: String,
}

/// Every problem found in one server's config.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid MCP server config{}: {}", server_label(.server), join_issues(.issues))]
pub struct ConfigError {
    /// The server's name, when it had one.
    pub server: Option<String>,
    pub issues: Vec<ConfigIssue>,
}

fn server_label(server: &Option<String>) -> String {
    match server {
        Some(s) if !s.is_empty() => format!(" {s:?}"),
        _ => String::new(),
    }
}

fn join_issues(issues: &[ConfigIssue]) -> String {
    issues
        .iter()
        .map(|i| format!("{}: {}", i.field, i.message))
        .collect::<Vec<_>>()
        .join("; ")
}

impl McpServerConfig {
    /// A stdio server with default timeouts.
    pub fn stdio(name: impl Into<String>, command: impl Into<String>, args: &[&str]) -> Self {
        Self {
            name: name.into(),
            transport: McpTransportConfig::Stdio(StdioConfig {
                command: command.into(),
                args: args.iter().map(|a| a.to_string()).collect(),
                env: BTreeMap::new(),
                cwd: None,
            }),
            timeout_secs: DEFAULT_TIMEOUT_SECS,
            connect_timeout_secs: DEFAULT_CONNECT_TIMEOUT_SECS,
            disabled: false,
        }
    }

    /// A Streamable HTTP server without auth, with default timeouts.
    pub fn http(name: impl Into<String>, url: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            transport: McpTransportConfig::Http(HttpConfig {
                url: url.into(),
                headers: BTreeMap::new(),
                auth: HttpAuth::None,
            }),
            timeout_secs: DEFAULT_TIMEOUT_SECS,
            connect_timeout_secs: DEFAULT_CONNECT_TIMEOUT_SECS,
            disabled: false,
        }
    }

    pub fn timeout(&self) -> Duration {
        Duration::from_secs(self.timeout_secs)
    }

    pub fn connect_timeout(&self) -> Duration {
        Duration::from_secs(self.connect_timeout_secs)
    }

    /// `"stdio"` or `"http"`.
    pub fn transport_kind(&self) -> &'static str {
        match self.transport {
            McpTransportConfig::Stdio(_) => "stdio",
            McpTransportConfig::Http(_) => "http",
        }
    }

    /// Check every rule; all problems are reported together.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let mut issues = Vec::new();
        let mut issue = |field: &str, message: String| {
            issues.push(ConfigIssue {
                field: field.to_string(),
                message,
            })
        };
        if let Err(m) = validate_server_name(&self.name) {
            issue("name", m);
        }
        if self.timeout_secs == 0 {
            issue("timeout_secs", "must be at least 1 second".into());
        }
        if self.connect_timeout_secs == 0 {
            issue("connect_timeout_secs", "must be at least 1 second".into());
        }
        match &self.transport {
            McpTransportConfig::Stdio(s) => {
                if s.command.trim().is_empty() {
                    issue("command", "must not be empty".into());
                } else if s.command.contains('\0') {
                    issue("command", "must not contain NUL".into());
                }
                if s.args.iter().any(|a| a.contains('\0')) {
                    issue("args", "must not contain NUL".into());
                }
                for key in s.env.keys() {
                    if let Err(m) = validate_env_name(key) {
                        issue(&format!("env.{key}"), m);
                    }
                }
                for (key, value) in &s.env {
                    if value.expose().contains('\0') {
                        issue(&format!("env.{key}"), "value must not contain NUL".into());
                    }
                }
            }
            McpTransportConfig::Http(h) => {
                match url::Url::parse(&h.url) {
                    Ok(u) if u.scheme() == "http" || u.scheme() == "https" => {
                        if u.host_str().is_none_or(str::is_empty) {
                            issue("url", format!("{:?} has no host", h.url));
                        }
                    }
                    Ok(u) => issue(
                        "url",
                        format!(
                            "scheme {:?} is not supported (use http or https)",
                            u.scheme()
                        ),
                    ),
                    Err(e) => issue("url", format!("{:?} is not a URL: {e}", h.url)),
                }
                for (name, value) in &h.headers {
                    if let Err(m) = validate_header(name, value.expose()) {
                        issue(&format!("headers.{name}"), m);
                    }
                }
                match &h.auth {
                    HttpAuth::None => {}
                    HttpAuth::Bearer { token_env, token } => {
                        check_one_of(&mut issue, "auth", "token_env", token_env, "token", token)
                    }
                    HttpAuth::ApiKey {
                        key_env,
                        key,
                        header,
                    } => {
                        check_one_of(&mut issue, "auth", "key_env", key_env, "key", key);
                        if let Err(m) = validate_header(header, "x") {
                            issue("auth.header", m);
                        }
                    }
                    HttpAuth::Basic {
                        username_env,
                        password_env,
                    } => {
                        if let Err(m) = validate_env_name(username_env) {
                            issue("auth.username_env", m);
                        }
                        if let Err(m) = validate_env_name(password_env) {
                            issue("auth.password_env", m);
                        }
                    }
                    HttpAuth::OAuth(o) => validate_oauth(o, &mut issue),
                }
            }
        }
        if issues.is_empty() {
            Ok(())
        } else {
            Err(ConfigError {
                server: Some(self.name.clone()),
                issues,
            })
        }
    }
}

fn check_one_of(
    issue: &mut impl FnMut(&str, String),
    prefix: &str,
    env_field: &str,
    env: &Option<String>,
    literal_field: &str,
    literal: &Option<Secret>,
) {
    match (env, literal) {
        (Some(_), Some(_)) => issue(
            prefix,
            format!("give either {env_field} or {literal_field}, not both"),
        ),
        (None, None) => issue(
            prefix,
            format!("needs {env_field} (an environment variable) or {literal_field}"),
        ),
        (Some(var), None) => {
            if let Err(m) = validate_env_name(var) {
                issue(&format!("{prefix}.{env_field}"), m);
            }
        }
        (None, Some(s)) => {
            if s.is_empty() {
                issue(
                    &format!("{prefix}.{literal_field}"),
                    "must not be empty".into(),
                );
            }
        }
    }
}

fn validate_oauth(o: &OAuthConfig, issue: &mut impl FnMut(&str, String)) {
    if o.client_id
        .as_deref()
        .is_some_and(|id| id.trim().is_empty())
    {
        issue("auth.client_id", "must not be empty".into());
    }
    match (&o.client_secret_env, &o.client_secret) {
        (Some(_), Some(_)) => issue(
            "auth",
            "give either client_secret_env or client_secret, not both".into(),
        ),
        (Some(var), None) => {
            if let Err(m) = validate_env_name(var) {
                issue("auth.client_secret_env", m);
            }
        }
        (None, Some(s)) if s.is_empty() => issue("auth.client_secret", "must not be empty".into()),
        _ => {}
    }
    let has_secret = o.client_secret_env.is_some() || o.client_secret.is_some();
    if has_secret && o.client_id.is_none() {
        issue(
            "auth.client_id",
            "a client secret belongs to a pre-registered client: give its client_id too".into(),
        );
    }
    if o.grant == OAuthGrant::ClientCredentials && (o.client_id.is_none() || !has_secret) {
        issue(
            "auth.grant",
            "client_credentials needs client_id and client_secret (or client_secret_env)".into(),
        );
    }
    for scope in &o.scopes {
        if scope.is_empty()
            || scope
                .chars()
                .any(|c| c.is_whitespace() || c == '"' || c == '\\')
        {
            issue(
                "auth.scopes",
                format!("{scope:?} is not a scope (no spaces, quotes or backslashes)"),
            );
        }
    }
    if let Some(url) = &o.client_metadata_url {
        match url::Url::parse(url) {
            Ok(u) if u.scheme() == "https" && u.path() != "/" && !u.path().is_empty() => {}
            _ => issue(
                "auth.client_metadata_url",
                format!("{url:?} must be an https URL with a path (SEP-991)"),
            ),
        }
    }
}

/// `[a-zA-Z0-9_-]{1,64}` and no `__` (the tool-name separator).
pub fn validate_server_name(name: &str) -> Result<(), String> {
    if name.is_empty() {
        return Err("must not be empty".into());
    }
    if name.len() > MAX_SERVER_NAME_LEN {
        return Err(format!(
            "is {} characters long; at most {MAX_SERVER_NAME_LEN} are allowed",
            name.len()
        ));
    }
    if let Some(c) = name
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || *c == '_' || *c == '-'))
    {
        return Err(format!(
            "{name:?} contains {c:?}; only letters, digits, '_' and '-' are allowed"
        ));
    }
    if name.contains(TOOL_NAME_SEPARATOR) {
        return Err(format!(
            "{name:?} contains \"__\", which separates server and tool in tool names"
        ));
    }
    if let Some(taken) = RESERVED_SERVER_NAMES
        .iter()
        .find(|r| r.eq_ignore_ascii_case(name))
    {
        return Err(format!(
            "{name:?} is the name of Agentry's built-in tool service `{taken}`; permissions \
             (`{taken}:*`) and the audit tell tools apart by it, so an MCP server may not take it"
        ));
    }
    Ok(())
}

/// The services of Agentry's own tools (docs/tools.md) and of `/mcp`'s `ask_<assistant>`:
/// an MCP server's name is the service of its tools in permissions (`github:create_issue`), so
/// a server named like one would share its grants and denials, and `/mcp` would take its tools
/// for the assistants' (whose calls are audited by their runs, not one by one).
pub const RESERVED_SERVER_NAMES: &[&str] = &[
    "files",
    "shell",
    "web",
    "system",
    "services",
    "todos",
    "interaction",
    "memory",
    "skills",
    "data",
    "task",
    "assistants",
];

fn validate_env_name(name: &str) -> Result<(), String> {
    if name.is_empty() {
        return Err("environment variable name must not be empty".into());
    }
    if name.contains('=') || name.contains('\0') {
        return Err(format!(
            "{name:?} is not a valid environment variable name (no '=' or NUL)"
        ));
    }
    Ok(())
}

fn validate_header(name: &str, value: &str) -> Result<(), String> {
    let parsed = http::HeaderName::from_bytes(name.as_bytes())
        .map_err(|_| format!("{name:?} is not a valid HTTP header name"))?;
    if http::HeaderValue::from_str(value).is_err() {
        return Err("value is not a valid HTTP header value".into());
    }
    // The transport owns these; a configured value would break the session.
    const RESERVED: &[&str] = &[
        "mcp-session-id",
        "mcp-protocol-version",
        "last-event-id",
        "accept",
        "content-type",
    ];
    if RESERVED.contains(&parsed.as_str()) {
        return Err(format!("{name:?} is set by the MCP transport itself"));
    }
    Ok(())
}

// ---- serde: one flat shape, validated on the way in ----

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
enum TransportKind {
    Stdio,
    #[serde(alias = "streamable_http", alias = "streamable-http")]
    Http,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawServerConfig {
    #[serde(default)]
    name: String,
    #[serde(default)]
    transport: Option<TransportKind>,
    #[serde(default)]
    command: Option<String>,
    #[serde(default)]
    args: Option<Vec<String>>,
    #[serde(default)]
    env: Option<BTreeMap<String, Secret>>,
    #[serde(default)]
    cwd: Option<PathBuf>,
    #[serde(default)]
    url: Option<String>,
    #[serde(default)]
    headers: Option<BTreeMap<String, Secret>>,
    #[serde(default)]
    auth: Option<HttpAuth>,
    #[serde(default)]
    timeout_secs: Option<u64>,
    #[serde(default)]
    connect_timeout_secs: Option<u64>,
    #[serde(default)]
    disabled: Option<bool>,
}

impl TryFrom<RawServerConfig> for McpServerConfig {
    type Error = ConfigError;

    fn try_from(raw: RawServerConfig) -> Result<Self, ConfigError> {
        let fail = |field: &str, message: String| ConfigError {
            server: Some(raw.name.clone()),
            issues: vec![ConfigIssue {
                field: field.to_string(),
                message,
            }],
        };
        let kind = match (raw.transport, &raw.command, &raw.url) {
            (Some(k), _, _) => k,
            (None, Some(_), None) => TransportKind::Stdio,
            (None, None, Some(_)) => TransportKind::Http,
            (None, Some(_), Some(_)) => {
                return Err(fail(
                    "transport",
                    "both command and url are set; say which with transport: stdio | http".into(),
                ));
            }
            (None, None, None) => {
                return Err(fail(
                    "transport",
                    "needs command (a stdio server) or url (a Streamable HTTP server)".into(),
                ));
            }
        };
        let transport = match kind {
            TransportKind::Stdio => {
                for (field, set) in [
                    ("url", raw.url.is_some()),
                    ("headers", raw.headers.is_some()),
                    ("auth", raw.auth.is_some()),
                ] {
                    if set {
                        return Err(fail(field, "is only for transport: http".into()));
                    }
                }
                McpTransportConfig::Stdio(StdioConfig {
                    command: raw.command.clone().unwrap_or_default(),
                    args: raw.args.clone().unwrap_or_default(),
                    env: raw.env.clone().unwrap_or_default(),
                    cwd: raw.cwd.clone(),
                })
            }
            TransportKind::Http => {
                for (field, set) in [
                    ("command", raw.command.is_some()),
                    ("args", raw.args.is_some()),
                    ("env", raw.env.is_some()),
                    ("cwd", raw.cwd.is_some()),
                ] {
                    if set {
                        return Err(fail(field, "is only for transport: stdio".into()));
                    }
                }
                let Some(url) = raw.url.clone() else {
                    return Err(fail("url", "is required for transport: http".into()));
                };
                McpTransportConfig::Http(HttpConfig {
                    url,
                    headers: raw.headers.clone().unwrap_or_default(),
                    auth: raw.auth.clone().unwrap_or_default(),
                })
            }
        };
        let config = McpServerConfig {
            name: raw.name,
            transport,
            timeout_secs: raw.timeout_secs.unwrap_or(DEFAULT_TIMEOUT_SECS),
            connect_timeout_secs: raw
                .connect_timeout_secs
                .unwrap_or(DEFAULT_CONNECT_TIMEOUT_SECS),
            disabled: raw.disabled.unwrap_or(false),
        };
        config.validate()?;
        Ok(config)
    }
}

impl<'de> Deserialize<'de> for McpServerConfig {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let raw = RawServerConfig::deserialize(d)?;
        McpServerConfig::try_from(raw).map_err(serde::de::Error::custom)
    }
}

#[derive(Serialize)]
struct RawServerConfigOut<'a> {
    name: &'a str,
    transport: TransportKind,
    #[serde(skip_serializing_if = "Option::is_none")]
    command: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    args: Option<&'a [String]>,
    #[serde(skip_serializing_if = "Option::is_none")]
    env: Option<&'a BTreeMap<String, Secret>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    cwd: Option<&'a PathBuf>,
    #[serde(skip_serializing_if = "Option::is_none")]
    url: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    headers: Option<&'a BTreeMap<String, Secret>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    auth: Option<&'a HttpAuth>,
    timeout_secs: u64,
    connect_timeout_secs: u64,
    disabled: bool,
}

/// Serializes the flat shape with every secret masked as `"***"`.
impl Serialize for McpServerConfig {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut out = RawServerConfigOut {
            name: &self.name,
            transport: TransportKind::Stdio,
            command: None,
            args: None,
            env: None,
            cwd: None,
            url: None,
            headers: None,
            auth: None,
            timeout_secs: self.timeout_secs,
            connect_timeout_secs: self.connect_timeout_secs,
            disabled: self.disabled,
        };
        match &self.transport {
            McpTransportConfig::Stdio(c) => {
                out.command = Some(&c.command);
                out.args = Some(&c.args);
                out.env = Some(&c.env);
                out.cwd = c.cwd.as_ref();
            }
            McpTransportConfig::Http(c) => {
                out.transport = TransportKind::Http;
                out.url = Some(&c.url);
                out.headers = Some(&c.headers);
                out.auth = Some(&c.auth);
            }
        }
        out.serialize(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde_json::json;

    fn parse(v: serde_json::Value) -> Result<McpServerConfig, String> {
        serde_json::from_value(v).map_err(|e| e.to_string())
    }

    #[test]
    fn a_server_may_not_take_a_built_in_services_name() {
        for name in ["assistants", "files", "Shell", "memory"] {
            let err = parse(json!({"name": name, "command": "node"})).unwrap_err();
            assert!(err.contains("built-in tool service"), "{name}: {err}");
        }
        assert!(parse(json!({"name": "files2", "command": "node"})).is_ok());
    }

    #[test]
    fn stdio_shape_of_seed_000_parses_without_transport() {
        let c = parse(json!({
            "name": "filesystem", "command": "uvx",
            "args": ["mcp-server-filesystem", "/workspace"], "env": {"A": "b"}, "disabled": false
        }))
        .unwrap();
        assert_eq!(c.transport_kind(), "stdio");
        let McpTransportConfig::Stdio(s) = &c.transport else {
            panic!()
        };
        assert_eq!(s.command, "uvx");
        assert_eq!(s.args, vec!["mcp-server-filesystem", "/workspace"]);
        assert_eq!(s.env["A"].expose(), "b");
        assert_eq!(c.timeout_secs, DEFAULT_TIMEOUT_SECS);
        assert_eq!(c.connect_timeout_secs, DEFAULT_CONNECT_TIMEOUT_SECS);
    }

    #[test]
    fn http_auth_variants_parse() {
        let c = parse(json!({
            "name": "gh", "url": "https://api.example.com/mcp",
            "auth": {"type": "bearer_token", "token_env": "GITHUB_TOKEN"}
        }))
        .unwrap();
        let McpTransportConfig::Http(h) = &c.transport else {
            panic!()
        };
        assert_eq!(
            h.auth,
            HttpAuth::Bearer {
                token_env: Some("GITHUB_TOKEN".into()),
                token: None
            }
        );
        let c = parse(json!({
            "name": "oa", "transport": "http", "url": "http://127.0.0.1:9/mcp",
            "auth": {"type": "api_key", "key": "k-1"}
        }))
        .unwrap();
        let McpTransportConfig::Http(h) = &c.transport else {
            panic!()
        };
        let HttpAuth::ApiKey { key, header, .. } = &h.auth else {
            panic!("{:?}", h.auth)
        };
        assert_eq!(key.as_ref().unwrap().expose(), "k-1");
        assert_eq!(header, DEFAULT_API_KEY_HEADER);
        let c = parse(json!({
            "name": "b", "url": "http://x/mcp",
            "auth": {"type": "basic", "username_env": "U", "password_env": "P"}
        }))
        .unwrap();
        assert!(matches!(
            &c.transport,
            McpTransportConfig::Http(HttpConfig {
                auth: HttpAuth::Basic { .. },
                ..
            })
        ));
    }

    #[test]
    fn bad_configs_name_the_field() {
        let cases = [
            (json!({"name": "a__b", "command": "x"}), "name"),
            (json!({"name": "a b", "command": "x"}), "name"),
            (json!({"name": "", "command": "x"}), "name"),
            (json!({"name": "a".repeat(65), "command": "x"}), "name"),
            (json!({"name": "a", "command": "  "}), "command"),
            (json!({"name": "a", "url": "ftp://x/y"}), "scheme"),
            (json!({"name": "a", "url": "not a url"}), "url"),
            (json!({"name": "a"}), "needs command"),
            (
                json!({"name": "a", "command": "x", "url": "http://x"}),
                "both",
            ),
            (
                json!({"name": "a", "command": "x", "auth": {"type": "none"}}),
                "auth",
            ),
            (
                json!({"name": "a", "transport": "http", "command": "x"}),
                "command",
            ),
            (
                json!({"name": "a", "url": "http://x", "auth": {"type": "bearer"}}),
                "token_env",
            ),
            (
                json!({"name": "a", "url": "http://x", "auth": {"type": "bearer", "token": "t", "token_env": "T"}}),
                "not both",
            ),
            (
                json!({"name": "a", "url": "http://x", "headers": {"bad header": "v"}}),
                "header",
            ),
            (
                json!({"name": "a", "url": "http://x", "headers": {"Mcp-Session-Id": "v"}}),
                "transport",
            ),
            (
                json!({"name": "a", "command": "x", "env": {"A=B": "v"}}),
                "env",
            ),
            (
                json!({"name": "a", "command": "x", "timeout_secs": 0}),
                "timeout_secs",
            ),
            (
                json!({"name": "a", "command": "x", "comand": "y"}),
                "unknown field",
            ),
        ];
        for (input, needle) in cases {
            let err = parse(input.clone()).expect_err(&input.to_string());
            assert!(
                err.contains(needle),
                "{input}: {err:?} should mention {needle:?}"
            );
        }
    }

    #[test]
    fn validate_reports_every_problem() {
        let mut c = McpServerConfig::stdio("bad name", "", &[]);
        c.timeout_secs = 0;
        let err = c.validate().unwrap_err();
        let fields: Vec<_> = err.issues.iter().map(|i| i.field.as_str()).collect();
        assert_eq!(fields, vec!["name", "timeout_secs", "command"]);
    }

    #[test]
    fn serialization_masks_secrets_and_round_trips_the_shape() {
        let c = parse(json!({
            "name": "h", "url": "http://127.0.0.1:1/mcp", "headers": {"X-Team": "secret-team"},
            "auth": {"type": "bearer", "token": "sk-secret"}
        }))
        .unwrap();
        let text = serde_json::to_string(&c).unwrap();
        assert!(
            !text.contains("sk-secret") && !text.contains("secret-team"),
            "{text}"
        );
        assert!(!format!("{c:?}").contains("sk-secret"));
        let back: McpServerConfig = serde_json::from_str(&text).unwrap();
        assert_eq!(back.name, "h");
        assert_eq!(back.transport_kind(), "http");
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        #[test]
        fn server_names_are_accepted_exactly_when_they_fit_the_tool_name_scheme(
            name in "[a-zA-Z0-9_\\- .:/]{0,70}"
        ) {
            let ok = !name.is_empty()
                && name.len() <= 64
                && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
                && !name.contains("__")
                && !RESERVED_SERVER_NAMES.iter().any(|r| r.eq_ignore_ascii_case(&name));
            prop_assert_eq!(validate_server_name(&name).is_ok(), ok);
        }

        #[test]
        fn a_valid_config_survives_serialization_except_for_masked_secrets(
            name in "[a-z][a-z0-9-]{0,20}",
            args in proptest::collection::vec("[a-z0-9/.-]{0,12}", 0..4),
            timeout in 1u64..10_000,
        ) {
            prop_assume!(validate_server_name(&name).is_ok());
            let mut c = McpServerConfig::stdio(name, "node", &[]);
            if let McpTransportConfig::Stdio(s) = &mut c.transport { s.args = args; }
            c.timeout_secs = timeout;
            let back: McpServerConfig =
                serde_json::from_str(&serde_json::to_string(&c).unwrap()).unwrap();
            prop_assert_eq!(back, c);
        }
    }
}
