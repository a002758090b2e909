//! Configuration: defaults in code < `agentry.toml` (or `--config FILE`) < `AGENTRY_*` env
//! (DESIGN §11). Every key has a default, so the binary starts with none set; a bad value fails
//! at start naming the key and why. Secrets are wrapped in [`Secret`] and never print.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use agentry_llm::ModelConfig;
use agentry_mcp::builtin::BuiltinConfig;
use agentry_schema::secret::Secret;
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default)]
pub struct Settings {
    /// SQLite file, workspaces, skills.
    pub data_dir: PathBuf,
    pub server: ServerSettings,
    pub database: DatabaseSettings,
    pub redis: RedisSettings,
    pub auth: AuthSettings,
    pub hitl: HitlSettings,
    pub session: SessionSettings,
    pub log: LogSettings,
    /// The default model (`[llm]`, `AGENTRY_LLM__*`); see docs/models.md.
    pub llm: ModelConfig,
    /// Limits and switches of the built-in tools (`[tools]`, `AGENTRY_TOOLS__*`); see
    /// docs/tools.md.
    pub tools: BuiltinConfig,
    /// MCP servers: the platform's config file, the key sealing users' MCP secrets, the pool
    /// (`[mcp]`, `AGENTRY_MCP__*`); see docs/mcp.md.
    pub mcp: McpSettings,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            data_dir: PathBuf::from("./agentry-data"),
            server: ServerSettings::default(),
            database: DatabaseSettings::default(),
            redis: RedisSettings::default(),
            auth: AuthSettings::default(),
            hitl: HitlSettings::default(),
            session: SessionSettings::default(),
            log: LogSettings::default(),
            llm: ModelConfig::default(),
            tools: BuiltinConfig::default(),
            mcp: McpSettings::default(),
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct McpSettings {
    /// The platform's MCP server file (YAML or JSON), offered to every user and hot-reloaded;
    /// empty = none.
    pub config_file: Option<PathBuf>,
    /// Seals the env values and auth of users' MCP servers in the database: 32 bytes as base64
    /// or hex, or `passphrase:<16+ characters>`. Empty: users can add only servers without
    /// secrets.
    pub encryption_key: Secret,
    /// How often live MCP connections are pinged.
    pub health_interval_secs: u64,
    /// An MCP connection unused this long is closed.
    pub idle_timeout_secs: u64,
    /// How long a run waits for a user's servers to connect before it starts without them.
    pub connect_wait_secs: u64,
    /// `Host` headers `/mcp` answers (names or `name:port`); others get 403, which stops DNS
    /// rebinding against a server on a laptop. Add the name clients reach the server by; `*`
    /// accepts any (behind a proxy that checks it).
    pub server_allowed_hosts: Vec<String>,
}

impl Default for McpSettings {
    fn default() -> Self {
        McpSettings {
            config_file: None,
            encryption_key: Secret::default(),
            health_interval_secs: 30,
            idle_timeout_secs: 600,
            connect_wait_secs: 10,
            server_allowed_hosts: vec!["localhost".into(), "127.0.0.1".into(), "::1".into()],
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ServerSettings {
    pub host: String,
    /// 0 picks a free port (tests).
    pub port: u16,
    /// WebSocket connections beyond this get 503 before the upgrade.
    pub max_connections: usize,
    /// Largest accepted request body.
    pub body_limit_bytes: usize,
    /// Largest accepted WebSocket frame.
    pub frame_limit_bytes: usize,
    /// Origins allowed by CORS; `["*"]` allows any.
    pub cors_origins: Vec<String>,
    /// HTTP worker threads; 0 = one per core.
    pub workers: usize,
    /// How long a graceful shutdown waits for in-flight requests.
    pub shutdown_timeout_secs: u64,
    /// The server pings each WebSocket this often.
    pub ws_heartbeat_secs: u64,
    /// A WebSocket client silent (no frame, no pong) this long is dropped.
    pub ws_client_timeout_secs: u64,
}

impl Default for ServerSettings {
    fn default() -> Self {
        ServerSettings {
            host: "127.0.0.1".into(),
            port: 8000,
            max_connections: 10_000,
            body_limit_bytes: 1 << 20,
            frame_limit_bytes: 256 << 10,
            cors_origins: vec!["*".into()],
            workers: 0,
            shutdown_timeout_secs: 30,
            ws_heartbeat_secs: 15,
            ws_client_timeout_secs: 45,
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct DatabaseSettings {
    /// `sqlite://…`, `postgres://…`, `mysql://…`; empty = SQLite in the data dir.
    pub url: Secret,
    pub max_connections: u32,
    pub connect_timeout_secs: u64,
}

impl Default for DatabaseSettings {
    fn default() -> Self {
        DatabaseSettings {
            url: Secret::default(),
            max_connections: 20,
            connect_timeout_secs: 10,
        }
    }
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RedisSettings {
    /// Set to enable multi-replica mode (`redis://…` or `rediss://…`).
    pub url: Secret,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct AuthSettings {
    /// The platform admin key; the admin API is off (404) while it is empty.
    pub admin_key: Secret,
    /// How long a resolved API key is reused without asking the database. A revoked key, a
    /// suspended tenant or a disabled user takes effect within this bound on every replica (at
    /// once on the replica that made the change). 0 disables the cache.
    pub cache_ttl_secs: u64,
}

impl Default for AuthSettings {
    fn default() -> Self {
        AuthSettings {
            admin_key: Secret::default(),
            cache_ttl_secs: 5,
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct HitlSettings {
    /// How long an approval or question waits for a human before it counts as a reject.
    pub timeout_secs: u64,
}

impl Default for HitlSettings {
    fn default() -> Self {
        HitlSettings { timeout_secs: 300 }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SessionSettings {
    /// An idle session's actor stops after this long (its data stays in the database).
    pub timeout_secs: u64,
    /// Delete sessions idle for this many days; 0 keeps them forever.
    pub retention_days: u64,
}

impl Default for SessionSettings {
    fn default() -> Self {
        SessionSettings {
            timeout_secs: 3600,
            retention_days: 0,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    Pretty,
    Json,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct LogSettings {
    pub format: LogFormat,
    /// A tracing filter such as `info` or `agentry=debug,info`; `RUST_LOG` overrides it.
    pub level: String,
}

impl Default for LogSettings {
    fn default() -> Self {
        LogSettings {
            format: LogFormat::Pretty,
            level: "info".into(),
        }
    }
}

/// What is wrong with a CORS origin list, if anything: `*` alone, or `scheme://host[:port]`
/// origins (actix-cors would refuse anything else only when the first request arrives).
fn cors_problem(origins: &[String]) -> Option<String> {
    if origins.is_empty() {
        return Some("must list at least one origin, or `*` for any".into());
    }
    if origins.iter().any(|o| o == "*") {
        return (origins.len() > 1)
            .then(|| "`*` allows any origin and cannot be combined with others".into());
    }
    for o in origins {
        let ok = o.parse::<actix_web::http::Uri>().ok().is_some_and(|u| {
            matches!(u.scheme_str(), Some("http" | "https"))
                && u.host().is_some()
                && matches!(u.path(), "" | "/")
                && u.query().is_none()
        });
        if !ok || o.ends_with('/') {
            return Some(format!(
                "{o:?} is not an origin: write scheme://host[:port], e.g. https://app.example.com"
            ));
        }
    }
    None
}

/// A configuration problem, naming the key.
#[derive(Debug, thiserror::Error)]
#[error("invalid configuration: {0}")]
pub struct ConfigError(pub String);

/// Keys whose env value is a comma-separated list.
const LIST_KEYS: &[&str] = &[
    "server.cors_origins",
    "tools.shell_env_passthrough",
    "tools.allowed_networks",
    "mcp.server_allowed_hosts",
];

/// Sections whose structs (owned by other crates) accept unknown keys: checked here against
/// their defaults so a misspelt key fails at start instead of being ignored.
fn unknown_keys(
    section: &str,
    given: &config::Value,
    known: &serde_json::Value,
    out: &mut Vec<String>,
) {
    let (Ok(table), serde_json::Value::Object(known)) = (given.clone().into_table(), known) else {
        return;
    };
    for (key, value) in table {
        let path = format!("{section}.{key}");
        match known.get(&key) {
            None => out.push(path),
            Some(sub @ serde_json::Value::Object(_)) => unknown_keys(&path, &value, sub, out),
            Some(_) => {}
        }
    }
}

impl Settings {
    /// Load from defaults, then `file` (or `./agentry.toml` when present), then the process
    /// environment.
    pub fn load(file: Option<&Path>) -> Result<Settings, ConfigError> {
        Self::load_from(file, None)
    }

    /// As [`Settings::load`], with the environment given explicitly (tests).
    pub fn load_from(
        file: Option<&Path>,
        env: Option<HashMap<String, String>>,
    ) -> Result<Settings, ConfigError> {
        let mut b = config::Config::builder();
        match file {
            Some(path) => {
                if !path.exists() {
                    return Err(ConfigError(format!(
                        "config file {} does not exist",
                        path.display()
                    )));
                }
                b = b.add_source(config::File::from(path).required(true));
            }
            None => {
                b = b.add_source(config::File::with_name("agentry").required(false));
            }
        }
        let mut envsrc = config::Environment::with_prefix("AGENTRY")
            .prefix_separator("_")
            .separator("__")
            .try_parsing(true)
            .list_separator(",");
        for key in LIST_KEYS {
            envsrc = envsrc.with_list_parse_key(key);
        }
        // Test-only and tool variables share the prefix; they are not configuration keys.
        let env = env.unwrap_or_else(|| std::env::vars().collect());
        let filtered: HashMap<String, String> = env
            .into_iter()
            .filter(|(k, _)| k.starts_with("AGENTRY_") && !k.starts_with("AGENTRY_TEST_"))
            .collect();
        envsrc = envsrc.source(Some(filtered.into_iter().collect()));
        let cfg = b
            .add_source(envsrc)
            .build()
            .map_err(|e| ConfigError(e.to_string()))?;
        let mut unknown = Vec::new();
        for (section, known) in [
            ("llm", serde_json::to_value(ModelConfig::default())),
            ("tools", serde_json::to_value(BuiltinConfig::default())),
        ] {
            if let (Ok(given), Ok(known)) = (cfg.get::<config::Value>(section), known) {
                unknown_keys(section, &given, &known, &mut unknown);
            }
        }
        if !unknown.is_empty() {
            return Err(ConfigError(format!(
                "unknown key(s) {}: check the spelling (docs/tools.md, docs/models.md)",
                unknown.join(", ")
            )));
        }
        let settings: Settings = cfg
            .try_deserialize()
            .map_err(|e| ConfigError(e.to_string()))?;
        settings.validate()?;
        Ok(settings)
    }

    fn validate(&self) -> Result<(), ConfigError> {
        let bad = |key: &str, why: &str| Err(ConfigError(format!("{key}: {why}")));
        if self.server.host.trim().is_empty() {
            return bad("server.host", "must not be empty");
        }
        if self.server.max_connections == 0 {
            return bad("server.max_connections", "must be at least 1");
        }
        if self.server.body_limit_bytes < 1024 {
            return bad("server.body_limit_bytes", "must be at least 1024");
        }
        if self.server.frame_limit_bytes < 1024 {
            return bad("server.frame_limit_bytes", "must be at least 1024");
        }
        if self.server.ws_heartbeat_secs == 0 {
            return bad("server.ws_heartbeat_secs", "must be at least 1");
        }
        if self.server.ws_client_timeout_secs <= self.server.ws_heartbeat_secs {
            return bad(
                "server.ws_client_timeout_secs",
                "must be longer than server.ws_heartbeat_secs, or every client would be dropped",
            );
        }
        if let Some(why) = cors_problem(&self.server.cors_origins) {
            return bad("server.cors_origins", &why);
        }
        let url = self.database.url.expose();
        if !url.is_empty() && agentry_store::backend_of(url).is_none() {
            return bad(
                "database.url",
                "must start with sqlite://, postgres:// or mysql://",
            );
        }
        if self.database.max_connections == 0 {
            return bad("database.max_connections", "must be at least 1");
        }
        let redis = self.redis.url.expose();
        if !(redis.is_empty() || redis.starts_with("redis://") || redis.starts_with("rediss://")) {
            return bad("redis.url", "must start with redis:// or rediss://");
        }
        let admin = self.auth.admin_key.expose();
        if !admin.is_empty() && admin.len() < 16 {
            return bad("auth.admin_key", "must be at least 16 characters");
        }
        if self.hitl.timeout_secs == 0 {
            return bad("hitl.timeout_secs", "must be at least 1");
        }
        if self.session.timeout_secs == 0 {
            return bad("session.timeout_secs", "must be at least 1");
        }
        if tracing_subscriber::EnvFilter::try_new(&self.log.level).is_err() {
            return bad(
                "log.level",
                "is not a valid tracing filter (try `info` or `agentry=debug,info`)",
            );
        }
        if self.mcp.health_interval_secs == 0 {
            return bad("mcp.health_interval_secs", "must be at least 1");
        }
        if self
            .mcp
            .server_allowed_hosts
            .iter()
            .all(|h| h.trim().is_empty())
        {
            // rmcp reads an empty list as "any host": say so explicitly with `*` instead.
            return bad(
                "mcp.server_allowed_hosts",
                "must name at least one host (or `*` to accept any Host header)",
            );
        }
        if self.mcp.idle_timeout_secs == 0 {
            return bad("mcp.idle_timeout_secs", "must be at least 1");
        }
        if !self.mcp.encryption_key.is_empty()
            && let Err(e) = agentry_mcp::secrets::SecretBox::new(self.mcp.encryption_key.expose())
        {
            return bad("mcp.encryption_key", &e.to_string());
        }
        if let Some(path) = &self.mcp.config_file
            && !path.as_os_str().is_empty()
            && let Err(e) = agentry_mcp::config_file::McpFileConfig::load(path)
            && !matches!(e, agentry_mcp::config_file::LoadError::Missing { .. })
        {
            return bad("mcp.config_file", &e.to_string());
        }
        if !self.redis.url.is_empty() {
            return bad(
                "redis.url",
                "multi-replica mode (Redis) is not available in this version; unset it and run one replica",
            );
        }
        // The model errors name their own key (llm.base_url, AGENTRY_LLM__API_KEY, …).
        self.llm
            .validate()
            .map_err(|e| ConfigError(format!("llm: {e}")))?;
        Ok(())
    }

    /// The database URL, defaulting to a SQLite file in the data dir.
    pub fn database_url(&self) -> String {
        let url = self.database.url.expose();
        if url.is_empty() {
            format!(
                "sqlite://{}?mode=rwc",
                self.data_dir.join("agentry.db").display()
            )
        } else {
            url.to_string()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(pairs: &[(&str, &str)]) -> Option<HashMap<String, String>> {
        Some(
            pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        )
    }

    #[test]
    fn defaults_load_with_nothing_set() {
        let s = Settings::load_from(None, env(&[])).unwrap();
        assert_eq!(s.server.host, "127.0.0.1");
        assert_eq!(s.server.port, 8000);
        assert_eq!(s.server.max_connections, 10_000);
        assert_eq!(s.hitl.timeout_secs, 300);
        assert_eq!(s.session.timeout_secs, 3600);
        assert!(s.auth.admin_key.is_empty());
        assert!(s.database_url().starts_with("sqlite://"));
        assert!(s.database_url().contains("agentry-data"));
    }

    #[test]
    fn env_overrides_with_double_underscore_sections() {
        let s = Settings::load_from(
            None,
            env(&[
                ("AGENTRY_SERVER__PORT", "9123"),
                ("AGENTRY_DATA_DIR", "/tmp/x"),
                ("AGENTRY_DATABASE__URL", "postgres://u@h/db"),
                ("AGENTRY_AUTH__ADMIN_KEY", "a-very-long-admin-key"),
                (
                    "AGENTRY_SERVER__CORS_ORIGINS",
                    "https://a.example,https://b.example",
                ),
                ("AGENTRY_LOG__FORMAT", "json"),
                ("AGENTRY_TEST_POSTGRES_URL", "ignored"),
            ]),
        )
        .unwrap();
        assert_eq!(s.server.port, 9123);
        assert_eq!(s.data_dir, PathBuf::from("/tmp/x"));
        assert_eq!(s.database_url(), "postgres://u@h/db");
        assert_eq!(s.auth.admin_key.expose(), "a-very-long-admin-key");
        assert_eq!(
            s.server.cors_origins,
            vec!["https://a.example", "https://b.example"]
        );
        assert_eq!(s.log.format, LogFormat::Json);
    }

    #[test]
    fn mcp_server_allowed_hosts_default_to_loopback_and_never_to_empty() {
        let s = Settings::load_from(None, env(&[])).unwrap();
        assert_eq!(
            s.mcp.server_allowed_hosts,
            vec!["localhost", "127.0.0.1", "::1"]
        );
        let s = Settings::load_from(
            None,
            env(&[(
                "AGENTRY_MCP__SERVER_ALLOWED_HOSTS",
                "agentry.example,localhost",
            )]),
        )
        .unwrap();
        assert_eq!(
            s.mcp.server_allowed_hosts,
            vec!["agentry.example", "localhost"]
        );
        // Empty would mean "any host" to rmcp: refused, naming the key.
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("agentry.toml");
        std::fs::write(&path, "[mcp]\nserver_allowed_hosts = []\n").unwrap();
        let err = Settings::load_from(Some(&path), env(&[])).unwrap_err();
        assert!(err.0.contains("mcp.server_allowed_hosts"), "{err}");
    }

    #[test]
    fn file_sits_between_defaults_and_env() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("agentry.toml");
        std::fs::write(
            &path,
            "[server]\nport = 7001\nhost = \"0.0.0.0\"\n[hitl]\ntimeout_secs = 5\n",
        )
        .unwrap();
        let s = Settings::load_from(Some(&path), env(&[("AGENTRY_SERVER__PORT", "7002")])).unwrap();
        assert_eq!(s.server.port, 7002);
        assert_eq!(s.server.host, "0.0.0.0");
        assert_eq!(s.hitl.timeout_secs, 5);
    }

    #[test]
    fn bad_values_name_the_key() {
        let cases: &[(&str, &str, &str)] = &[
            ("AGENTRY_SERVER__PORT", "eighty", "port"),
            ("AGENTRY_SERVER__PORT", "70000", "port"),
            ("AGENTRY_DATABASE__URL", "oracle://x", "database.url"),
            ("AGENTRY_REDIS__URL", "http://x", "redis.url"),
            ("AGENTRY_AUTH__ADMIN_KEY", "short", "auth.admin_key"),
            ("AGENTRY_HITL__TIMEOUT_SECS", "0", "hitl.timeout_secs"),
            ("AGENTRY_LOG__FORMAT", "xml", "format"),
            ("AGENTRY_SERVER__PROT", "1", "prot"),
        ];
        for (k, v, needle) in cases {
            let err = Settings::load_from(None, env(&[(k, v)]))
                .unwrap_err()
                .to_string();
            assert!(err.contains(needle), "{k}={v}: {err}");
        }
        let err = Settings::load_from(Some(Path::new("/nonexistent/agentry.toml")), env(&[]))
            .unwrap_err();
        assert!(err.to_string().contains("does not exist"));
    }

    #[test]
    fn tools_and_llm_sections_load_with_comma_lists() {
        let s = Settings::load_from(
            None,
            env(&[
                ("AGENTRY_TOOLS__SHELL_ENV_PASSTHROUGH", "PATH,HOME,LANG"),
                (
                    "AGENTRY_TOOLS__ALLOWED_NETWORKS",
                    "10.20.0.0/16,fd00:1::/64",
                ),
                ("AGENTRY_TOOLS__READ_MAX_BYTES", "2048"),
                ("AGENTRY_TOOLS__SEARCH_API_KEY", "123456"),
                ("AGENTRY_LLM__PROVIDER", "openai"),
                ("AGENTRY_LLM__BASE_URL", "http://127.0.0.1:11434/v1"),
                ("AGENTRY_LLM__MODEL", "llama3.2"),
            ]),
        )
        .unwrap();
        assert_eq!(s.tools.shell_env_passthrough, vec!["PATH", "HOME", "LANG"]);
        let nets: Vec<String> = s
            .tools
            .allowed_networks
            .iter()
            .map(|c| String::from(*c))
            .collect();
        assert_eq!(nets, vec!["10.20.0.0/16", "fd00:1::/64"]);
        assert_eq!(s.tools.read_max_bytes, 2048);
        assert_eq!(s.tools.search_api_key.expose(), "123456");
        assert_eq!(s.llm.provider, agentry_llm::Provider::OpenAi);
        assert_eq!(s.llm.effective_model(), "llama3.2");
        // Defaults when nothing is set.
        let d = Settings::load_from(None, env(&[])).unwrap();
        assert_eq!(d.tools, BuiltinConfig::default());
        assert_eq!(d.llm, ModelConfig::default());
        assert_eq!(d.auth.cache_ttl_secs, 5);
    }

    #[test]
    fn bad_tools_llm_and_cors_values_name_the_key() {
        let cases: &[(&[(&str, &str)], &str)] = &[
            (
                &[("AGENTRY_TOOLS__ALLOWED_NETWORKS", "10.0.0.0/99")],
                "10.0.0.0/99",
            ),
            (
                &[("AGENTRY_TOOLS__READ_MAX_BYTE", "1")],
                "tools.read_max_byte",
            ),
            (&[("AGENTRY_LLM__PROVIDR", "openai")], "llm.providr"),
            (&[("AGENTRY_LLM__OPENAI__API_KY", "k")], "llm.openai.api_ky"),
            (&[("AGENTRY_LLM__PROVIDER", "gemini")], "gemini"),
            (
                &[("AGENTRY_LLM__PROVIDER", "openai")],
                "AGENTRY_LLM__API_KEY",
            ),
            (
                &[
                    ("AGENTRY_LLM__PROVIDER", "anthropic"),
                    ("AGENTRY_LLM__BASE_URL", "not a url"),
                ],
                "llm.base_url",
            ),
            (
                &[("AGENTRY_SERVER__CORS_ORIGINS", "*,https://a.example")],
                "server.cors_origins",
            ),
            (
                &[("AGENTRY_SERVER__CORS_ORIGINS", "a.example")],
                "server.cors_origins",
            ),
            (
                &[("AGENTRY_SERVER__CORS_ORIGINS", "https://a.example/path")],
                "server.cors_origins",
            ),
        ];
        for (pairs, needle) in cases {
            let err = Settings::load_from(None, env(pairs))
                .unwrap_err()
                .to_string();
            assert!(err.contains(needle), "{pairs:?}: {err}");
        }
        assert!(
            Settings::load_from(
                None,
                env(&[(
                    "AGENTRY_SERVER__CORS_ORIGINS",
                    "https://a.example,http://localhost:3000"
                )])
            )
            .is_ok()
        );
    }

    #[test]
    fn secrets_never_print() {
        let s = Settings::load_from(
            None,
            env(&[
                ("AGENTRY_AUTH__ADMIN_KEY", "super-secret-admin-key"),
                ("AGENTRY_DATABASE__URL", "postgres://u:hunter2@h/db"),
                ("AGENTRY_LLM__PROVIDER", "openai"),
                ("AGENTRY_LLM__API_KEY", "sk-llm-secret"),
                ("AGENTRY_TOOLS__SEARCH_API_KEY", "tvly-search-secret"),
            ]),
        )
        .unwrap();
        let dbg = format!("{s:?}");
        let json = serde_json::to_string(&s).unwrap();
        for out in [dbg, json] {
            for secret in ["super-secret", "hunter2", "llm-secret", "search-secret"] {
                assert!(!out.contains(secret), "{secret}");
            }
        }
    }
}
