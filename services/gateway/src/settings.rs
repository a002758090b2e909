//! Configuration: defaults in code < `agentry.toml` (or `--config FILE`) < `AGENTRY_*` env
//! (DESIGN §11). Every key has a default, so the binary starts with none set; a bad value fails
//! at start naming the key and why. Secrets are wrapped in [`Secret`] and never print.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use agentry_builtin::BuiltinConfig;
use agentry_llm::ModelConfig;
use agentry_schema::secret::Secret;
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default)]
pub struct Settings {
    /// SQLite file and workspaces (skills live in the database).
    pub data_dir: PathBuf,
    pub server: ServerSettings,
    pub database: DatabaseSettings,
    pub redis: RedisSettings,
    /// This replica in cluster mode, and the database lease (`[cluster]`, `AGENTRY_CLUSTER__*`);
    /// see docs/operations.md, "Running N replicas".
    pub cluster: ClusterSettings,
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
    /// How tenant programs run (`[sandbox]`, `AGENTRY_SANDBOX__*`); see docs/security.md.
    pub sandbox: agentry_sandbox::SandboxConfig,
    /// The config file that was read, if any: hidden from sandboxed programs.
    #[serde(skip)]
    pub config_file: Option<PathBuf>,
    /// The files secrets were read from (`*_file` keys): hidden from sandboxed programs too.
    #[serde(skip)]
    pub secret_files: Vec<PathBuf>,
    /// `/metrics`: an optional bearer token, per-tenant labels (`[metrics]`,
    /// `AGENTRY_METRICS__*`); see docs/api.md.
    pub metrics: MetricsSettings,
    /// OpenTelemetry traces over OTLP/HTTP (`[otel]`, `AGENTRY_OTEL__*`); see docs/deploy.md.
    pub otel: OtelSettings,
    /// How tenant quotas are counted (`[quota]`, `AGENTRY_QUOTA__*`); see docs/admin.md.
    pub quota: QuotaSettings,
    /// The background sweep that removes old data (`[retention]`, `AGENTRY_RETENTION__*`; the
    /// session period is `session.retention_days`); see docs/operations.md, "Retention".
    pub retention: RetentionSettings,
    /// Long-term memory: how many memories a run's prompt gets, the similarity thresholds,
    /// automatic extraction (`[memory]`, `AGENTRY_MEMORY__*`); see docs/memory.md.
    pub memory: agentry_builtin::memory::MemoryConfig,
    /// The platform's embeddings endpoint for semantic memory search (`[embeddings]`,
    /// `AGENTRY_EMBEDDINGS__*`); none: memories are searched by words. See docs/memory.md.
    pub embeddings: agentry_llm::EmbeddingsConfig,
    /// Delegation with the `task` tool (`[tasks]`, `AGENTRY_TASKS__*`); see docs/agents.md.
    pub tasks: TaskSettings,
}

/// How far delegation with `task` goes.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct TaskSettings {
    /// How deep child runs nest: a run a person started is at depth 0, its children at 1. A
    /// run at this depth gets a tool error from `task`.
    pub max_depth: u32,
    /// `task` calls one model step may make; the calls past it get a tool error.
    pub max_per_step: u32,
    /// Child runs of one run going at once; the others wait for a place.
    pub max_parallel: u32,
}

impl Default for TaskSettings {
    fn default() -> Self {
        TaskSettings {
            max_depth: 3,
            max_per_step: 5,
            max_parallel: 3,
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RetentionSettings {
    /// Time between two sweeps. The first runs this long after the start.
    pub interval_secs: u64,
    /// Checkpoints kept per session, newest first; the newest of every run that is not
    /// finished is kept besides (a restart resumes from it). 0 keeps only those.
    pub checkpoints_per_session: u64,
    /// Delete the stored events (all but each run's `done`) of runs that ended more than this
    /// many days ago; 0 keeps them forever.
    pub event_days: u64,
}

impl Default for RetentionSettings {
    fn default() -> Self {
        RetentionSettings {
            interval_secs: 3600,
            checkpoints_per_session: 3,
            event_days: 0,
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default)]
pub struct QuotaSettings {
    /// Tokens each model call reserves of its tenant's `tokens_per_day` for the answer, on top
    /// of the prompt's estimate (four characters a token), until the call's real usage replaces
    /// the reservation. Parallel runs overshoot the budget by at most one call's reservation.
    pub reserve_output_tokens: u64,
}

impl Default for QuotaSettings {
    fn default() -> Self {
        QuotaSettings {
            reserve_output_tokens: 1024,
        }
    }
}

/// Where traces go. Off unless an endpoint is set here or by the standard
/// `OTEL_EXPORTER_OTLP_ENDPOINT` / `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`; the other standard
/// variables (`OTEL_SERVICE_NAME`, `OTEL_RESOURCE_ATTRIBUTES`, `OTEL_TRACES_SAMPLER(_ARG)`,
/// `OTEL_EXPORTER_OTLP_HEADERS`) apply as the OpenTelemetry SDKs define them.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct OtelSettings {
    /// The collector's OTLP/HTTP base URL (`http://collector:4318`); spans go to
    /// `{endpoint}/v1/traces`. A URL already ending in `/v1/traces` is used as it is.
    pub endpoint: String,
    /// Headers sent with every export, `name=value` pairs separated by commas, values
    /// percent-encoded as in `OTEL_EXPORTER_OTLP_HEADERS` (Langfuse:
    /// `Authorization=Basic%20<base64 of public:secret key>`). A secret: never printed.
    pub headers: Secret,
    /// `service.name` when neither `OTEL_SERVICE_NAME` nor `OTEL_RESOURCE_ATTRIBUTES` names one.
    pub service_name: String,
    /// Spans waiting for export at most; more are dropped (and counted in
    /// `agentry_otel_spans_dropped_total`) rather than slowing a run.
    pub queue_size: usize,
}

impl Default for OtelSettings {
    fn default() -> Self {
        OtelSettings {
            endpoint: String::new(),
            headers: Secret::default(),
            service_name: "agentry".into(),
            queue_size: 2048,
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct MetricsSettings {
    /// When set, `/metrics` answers only `Authorization: Bearer <token>` (401 otherwise).
    pub token: Secret,
    /// Label `agentry_tokens_total` by tenant id. Off: one series for all tenants.
    pub tenant_labels: bool,
    /// With `tenant_labels`, at most this many tenants get a label of their own; later ones
    /// count as `other`, so the number of series stays bounded.
    pub max_tenant_labels: usize,
}

impl Default for MetricsSettings {
    fn default() -> Self {
        MetricsSettings {
            token: Secret::default(),
            tenant_labels: false,
            max_tenant_labels: 100,
        }
    }
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            data_dir: PathBuf::from("./agentry-data"),
            server: ServerSettings::default(),
            database: DatabaseSettings::default(),
            redis: RedisSettings::default(),
            cluster: ClusterSettings::default(),
            auth: AuthSettings::default(),
            hitl: HitlSettings::default(),
            session: SessionSettings::default(),
            quota: QuotaSettings::default(),
            retention: RetentionSettings::default(),
            tasks: TaskSettings::default(),
            memory: agentry_builtin::memory::MemoryConfig::default(),
            embeddings: agentry_llm::EmbeddingsConfig::default(),
            log: LogSettings::default(),
            llm: ModelConfig::default(),
            tools: BuiltinConfig::default(),
            mcp: McpSettings::default(),
            sandbox: agentry_sandbox::SandboxConfig::default(),
            config_file: None,
            secret_files: Vec::new(),
            metrics: MetricsSettings::default(),
            otel: OtelSettings::default(),
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default)]
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
    /// The base URL MCP clients reach this server by (`https://agentry.example.com`), for the
    /// OAuth protected-resource metadata of `/mcp` (RFC 9728): the resource it names and the
    /// `resource_metadata` URL of a 401's `WWW-Authenticate`. Empty: taken from each request
    /// (its scheme and `Host`, or `Forwarded`/`X-Forwarded-*` behind a proxy).
    pub public_url: String,
    /// Tokens of an external OAuth authorization server accepted by `/mcp` beside the API keys
    /// (`[mcp.oauth]`, `AGENTRY_MCP__OAUTH__*`); off while `issuer` is empty. docs/mcp.md, "OAuth".
    pub oauth: McpOAuthSettings,
}

/// How a token claim names a tenant or a user: by its id or by its name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum ClaimMatch {
    #[default]
    Id,
    Name,
}

/// An external authorization server whose JWT access tokens `/mcp` accepts, and how a token maps
/// to a tenant and a user of it.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default)]
pub struct McpOAuthSettings {
    /// The authorization server's issuer identifier: a token's `iss` must equal it exactly, and
    /// the protected-resource metadata names it in `authorization_servers`. Empty: OAuth is off.
    pub issuer: String,
    /// Where its signing keys are (a JWKS). Empty: the `jwks_uri` of its RFC 8414 metadata
    /// (`/.well-known/oauth-authorization-server`, else `/.well-known/openid-configuration`).
    pub jwks_url: String,
    /// The `aud` a token must carry. Empty: `<mcp.public_url>/mcp` (one of the two is required:
    /// the audience cannot come from the request's own `Host`, which the caller chooses).
    pub audience: String,
    /// The claim naming the token's tenant.
    pub tenant_claim: String,
    /// Whether `tenant_claim` holds the tenant's id or its name.
    pub tenant_match: ClaimMatch,
    /// The claim naming the user within that tenant.
    pub user_claim: String,
    /// Whether `user_claim` holds the user's id or their name.
    pub user_match: ClaimMatch,
    /// Scopes listed in the protected-resource metadata (`scopes_supported`).
    pub scopes_supported: Vec<String>,
    /// Scopes a token must all carry (its `scope` claim, space-separated) to be accepted.
    pub required_scopes: Vec<String>,
    /// How long fetched signing keys are kept; a token with an unknown `kid` fetches them again
    /// (at most once a second).
    pub jwks_cache_secs: u64,
    /// Clock skew allowed on `exp` and `nbf`.
    pub leeway_secs: u64,
    /// The authorization server's RFC 7662 introspection endpoint. Set: tokens that are not
    /// JWTs (opaque tokens) are checked there. Empty: only JWTs are accepted.
    pub introspection_url: String,
    /// The client Agentry authenticates as at the introspection endpoint (HTTP Basic).
    pub introspection_client_id: String,
    pub introspection_client_secret: Secret,
    /// Also ask the introspection endpoint about JWTs (after their signature and claims are
    /// checked), so a revoked token stops working before it expires.
    pub introspect_jwts: bool,
}

impl Default for McpOAuthSettings {
    fn default() -> Self {
        McpOAuthSettings {
            issuer: String::new(),
            jwks_url: String::new(),
            audience: String::new(),
            tenant_claim: "agentry_tenant".into(),
            tenant_match: ClaimMatch::Id,
            user_claim: "sub".into(),
            user_match: ClaimMatch::Id,
            scopes_supported: Vec::new(),
            required_scopes: Vec::new(),
            jwks_cache_secs: 300,
            leeway_secs: 30,
            introspection_url: String::new(),
            introspection_client_id: String::new(),
            introspection_client_secret: Secret::default(),
            introspect_jwts: false,
        }
    }
}

impl McpOAuthSettings {
    pub fn enabled(&self) -> bool {
        !self.issuer.trim().is_empty()
    }
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
            public_url: String::new(),
            oauth: McpOAuthSettings::default(),
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default)]
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
    /// How long a graceful shutdown (SIGTERM) lets running runs finish; what is still running
    /// then resumes at the next start. Open requests get 5 s more.
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
#[serde(default)]
pub struct DatabaseSettings {
    /// `sqlite://…`, `postgres://…`, `mysql://…`; empty = SQLite in the data dir.
    pub url: Secret,
    /// The pool's size (on SQLite too: readers run beside the one writer).
    pub max_connections: u32,
    /// How long start-up waits for the database to accept a connection.
    pub connect_timeout_secs: u64,
    /// How long a request waits for a pooled connection (opening one included) before it is
    /// answered 503 `database_unavailable`: short, so an outage fails fast.
    pub acquire_timeout_secs: u64,
}

impl Default for DatabaseSettings {
    fn default() -> Self {
        DatabaseSettings {
            url: Secret::default(),
            max_connections: 20,
            connect_timeout_secs: 10,
            acquire_timeout_secs: 2,
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default)]
pub struct RedisSettings {
    /// Set to run as one replica of a cluster (`redis://[user:password@]host:port[/db]`);
    /// needs PostgreSQL or MySQL. Unset: a single-node server.
    pub url: Secret,
    /// Every Redis key and channel of this deployment starts with `{key_prefix}:`, so several
    /// deployments can share one Redis.
    pub key_prefix: String,
}

impl Default for RedisSettings {
    fn default() -> Self {
        RedisSettings {
            url: Secret::default(),
            key_prefix: "agentry".into(),
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default)]
pub struct ClusterSettings {
    /// This server's id, shown in `/api/v1/health` and the logs, unique among the live
    /// replicas. Empty: `<host name>-<6 random characters>`, new at every start.
    pub replica_id: String,
    /// The database lease (one single-node server per database; one row per replica): renewed
    /// every third of this; a holder silent this long counts as dead and is taken over.
    pub database_lease_ttl_secs: u64,
    /// How long a replica's lease on a session's live run lasts unless renewed (every third of
    /// this). A replica that stalls longer loses the session, and its late writes are refused.
    pub session_lease_ttl_secs: u64,
    /// How long a replica counts as alive after its last heartbeat (sent every quarter of
    /// this, from a thread of its own). Once it is silent this long, the other replicas take
    /// over its sessions that have a run going or waiting: this bounds failover.
    pub replica_ttl_ms: u64,
    /// How long a command forwarded to the replica that runs a session (a chat, an approval,
    /// a cancel sent to another replica) waits for its answer before it fails with 503.
    pub forward_timeout_ms: u64,
    /// Where the other replicas reach this one over HTTP (`/mcp` requests for an MCP session
    /// this replica holds are proxied here): `http://<pod IP>:<port>` in Kubernetes. Empty:
    /// `http://<server.host>:<port>`, or the host name when `server.host` listens on every
    /// address.
    pub advertise_url: String,
}

impl Default for ClusterSettings {
    fn default() -> Self {
        ClusterSettings {
            replica_id: String::new(),
            database_lease_ttl_secs: 15,
            session_lease_ttl_secs: 10,
            replica_ttl_ms: 3000,
            forward_timeout_ms: 5000,
            advertise_url: String::new(),
        }
    }
}

/// What is wrong with a configured replica id, if anything.
fn replica_id_problem(id: &str) -> Option<&'static str> {
    if id.len() > 100 {
        return Some("must be at most 100 characters");
    }
    (!id.chars()
        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.')))
    .then_some("may contain only letters, digits, `-`, `_` and `.`")
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default)]
pub struct AuthSettings {
    /// The platform admin key. While it is empty, the first start generates one (see
    /// `generate_admin_key`).
    pub admin_key: Secret,
    /// With no `admin_key`: generate a platform admin key at the first start (printed once in
    /// the start log, stored hashed in the database, accepted by every replica). `false` keeps
    /// the admin API off (404) until `admin_key` is set.
    pub generate_admin_key: bool,
    /// How long a resolved API key is reused without asking the database. A revoked key, a
    /// suspended tenant or a disabled user takes effect within this bound on every replica (at
    /// once on the replica that made the change). 0 disables the cache.
    pub cache_ttl_secs: u64,
}

impl Default for AuthSettings {
    fn default() -> Self {
        AuthSettings {
            admin_key: Secret::default(),
            generate_admin_key: true,
            cache_ttl_secs: 5,
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default)]
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
#[serde(default)]
pub struct SessionSettings {
    /// An idle session's actor stops after this long (its data stays in the database).
    pub timeout_secs: u64,
    /// Delete sessions idle for this many days; 0 keeps them forever.
    pub retention_days: u64,
    /// Live session actors per process: past it, the least recently used idle ones stop (their
    /// data stays in the database; the next use starts them again). 0: no cap.
    pub max_live: usize,
}

impl Default for SessionSettings {
    fn default() -> Self {
        SessionSettings {
            timeout_secs: 3600,
            retention_days: 0,
            max_live: 1_000,
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
#[serde(default)]
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

/// Every secret key. Each may instead be given as a file holding the value, the Kubernetes way:
/// `<key>_file` (`AGENTRY_AUTH__ADMIN_KEY_FILE=/run/secrets/admin-key`, or `admin_key_file` under
/// `[auth]`), so the secret need not sit in the environment at all.
pub const SECRET_KEYS: &[&str] = &[
    "auth.admin_key",
    "database.url",
    "redis.url",
    "llm.api_key",
    "llm.openai.api_key",
    "llm.anthropic.api_key",
    "mcp.encryption_key",
    "tools.search_api_key",
    "metrics.token",
    "otel.headers",
    "embeddings.api_key",
    "mcp.oauth.introspection_client_secret",
];

/// The env variable that sets `key` (`auth.admin_key` → `AGENTRY_AUTH__ADMIN_KEY`).
fn env_var(key: &str) -> String {
    format!("AGENTRY_{}", key.to_uppercase().replace('.', "__"))
}

/// Read the secret files named by `<key>_file`: each value for its key, with the file's path.
/// Both a key and its file set, an unreadable file, or an empty one stop the start naming the
/// key and the path. One trailing newline (`\n` or `\r\n`) is dropped, as `echo` and most
/// secret stores write one.
fn secrets_from_files(
    cfg: &config::Config,
) -> Result<Vec<(&'static str, String, PathBuf)>, ConfigError> {
    let mut out = Vec::new();
    for &key in SECRET_KEYS {
        let file_key = format!("{key}_file");
        let Some(path) = cfg
            .get_string(&file_key)
            .ok()
            .filter(|p| !p.trim().is_empty())
        else {
            continue;
        };
        let direct = cfg.get_string(key).ok().filter(|v| !v.is_empty());
        if direct.is_some() {
            return Err(ConfigError(format!(
                "{key} is set both directly and as a file ({file_key} = {path}; env {} and {}_FILE): give it one way",
                env_var(key),
                env_var(key)
            )));
        }
        let path = PathBuf::from(path);
        let raw = std::fs::read_to_string(&path).map_err(|e| {
            ConfigError(format!(
                "{file_key}: cannot read the file {} for {key}: {e}",
                path.display()
            ))
        })?;
        let value = raw
            .strip_suffix("\r\n")
            .or_else(|| raw.strip_suffix('\n'))
            .unwrap_or(&raw)
            .to_string();
        if value.is_empty() {
            return Err(ConfigError(format!(
                "{file_key}: the file {} for {key} is empty",
                path.display()
            )));
        }
        out.push((key, value, path));
    }
    Ok(out)
}

/// Set `key` (dotted) to `value` in the loaded configuration and drop its `<key>_file`.
fn put_secret(root: &mut config::Value, key: &str, value: String) {
    let mut node = root;
    let mut parts: Vec<&str> = key.split('.').collect();
    let Some(leaf) = parts.pop() else { return };
    for part in parts {
        let config::ValueKind::Table(table) = &mut node.kind else {
            return;
        };
        node = table.entry(part.to_string()).or_insert_with(|| {
            config::Value::new(None, config::ValueKind::Table(Default::default()))
        });
    }
    if let config::ValueKind::Table(table) = &mut node.kind {
        table.remove(&format!("{leaf}_file"));
        table.insert(
            leaf.to_string(),
            config::Value::new(None, config::ValueKind::String(value)),
        );
    }
}

/// Keys whose env value is a comma-separated list.
const LIST_KEYS: &[&str] = &[
    "server.cors_origins",
    "tools.shell_env_passthrough",
    "tools.allowed_networks",
    "mcp.server_allowed_hosts",
    "mcp.oauth.scopes_supported",
    "mcp.oauth.required_scopes",
    "sandbox.read_only_paths",
    "sandbox.hidden_paths",
];

/// `AGENTRY_*` variables that are not server configuration: the terminal client's, the test
/// suite's and the benchmark's. Every other `AGENTRY_*` variable must name a key.
const NOT_CONFIG_VARS: &[&str] = &[
    "AGENTRY_URL",
    "AGENTRY_KEY",
    "AGENTRY_ADMIN_KEY",
    "AGENTRY_MCP_CACHE",
    "AGENTRY_MCP_NODE",
];
const NOT_CONFIG_PREFIXES: &[&str] = &["AGENTRY_TEST_", "AGENTRY_BENCH_"];

/// The configuration file looked for in the working directory when `--config` is not given.
/// Found by its full name only: the `config` crate's `File::with_name("agentry")` would also
/// take a file named `agentry` (the binary itself, in the usual `./agentry serve` layout).
pub const DEFAULT_CONFIG_FILE: &str = "agentry.toml";

/// The config key an `AGENTRY_*` variable sets (`AGENTRY_SERVER__PORT` → `server.port`).
fn env_key(var: &str) -> Option<String> {
    var.strip_prefix("AGENTRY_")
        .map(|k| k.to_lowercase().replace("__", "."))
}

/// The variables that set `key` or a key below it (`databse` is set by `AGENTRY_DATABSE__URL`),
/// each with the rest of its name below `key` (`__URL`).
fn vars_setting(key: &str, env: &HashMap<String, String>) -> Vec<(String, String)> {
    let mut vars: Vec<(String, String)> = env
        .keys()
        .filter_map(|v| {
            let k = env_key(v)?;
            let rest = k.strip_prefix(key)?;
            (rest.is_empty() || rest.starts_with('.'))
                .then(|| (v.clone(), rest.to_uppercase().replace('.', "__")))
        })
        .collect();
    vars.sort();
    vars
}

/// The known key closest to `key` among its siblings in the defaults, if one is close enough to
/// be a typo of it.
fn suggestion(key: &str, known: &serde_json::Value) -> Option<String> {
    let (parent, leaf) = key.rsplit_once('.').unwrap_or(("", key));
    let mut node = known;
    for part in parent.split('.').filter(|p| !p.is_empty()) {
        node = node.get(part)?;
    }
    let siblings = node.as_object()?;
    siblings
        .keys()
        .map(|k| (strsim::damerau_levenshtein(leaf, k), k))
        .filter(|(d, k)| *d <= 2.max(k.len() / 3) || k.replace('_', "") == leaf.replace('_', ""))
        .min_by_key(|(d, _)| *d)
        .map(|(_, k)| {
            if parent.is_empty() {
                k.clone()
            } else {
                format!("{parent}.{k}")
            }
        })
}

/// `url` with the password of its user info and any `password=` query value replaced by `***`.
pub fn mask_password(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_string();
    };
    let auth_end = rest.find(['/', '?']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(auth_end);
    let authority = match authority.rsplit_once('@') {
        Some((user_info, host)) => match user_info.split_once(':') {
            Some((user, _)) => format!("{user}:***@{host}"),
            None => authority.to_string(),
        },
        None => authority.to_string(),
    };
    let tail = match tail.split_once('?') {
        Some((path, query)) => {
            let query: Vec<String> = query
                .split('&')
                .map(|pair| match pair.split_once('=') {
                    Some((k, _)) if k.eq_ignore_ascii_case("password") => format!("{k}=***"),
                    _ => pair.to_string(),
                })
                .collect();
            format!("{path}?{}", query.join("&"))
        }
        None => tail.to_string(),
    };
    format!("{scheme}://{authority}{tail}")
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
        let file = match file {
            Some(path) if !path.is_file() => {
                return Err(ConfigError(format!(
                    "config file {} does not exist",
                    path.display()
                )));
            }
            Some(path) => Some(path.to_path_buf()),
            None => Some(PathBuf::from(DEFAULT_CONFIG_FILE)).filter(|p| p.is_file()),
        };
        if let Some(path) = &file {
            // The format is fixed so the crate never guesses an extension for the name.
            b = b.add_source(config::File::from(path.as_path()).format(config::FileFormat::Toml));
        }
        let mut envsrc = config::Environment::with_prefix("AGENTRY")
            .prefix_separator("_")
            .separator("__")
            .try_parsing(true)
            .list_separator(",");
        for key in LIST_KEYS {
            envsrc = envsrc.with_list_parse_key(key);
        }
        let env = env.unwrap_or_else(|| std::env::vars().collect());
        let env: HashMap<String, String> = env
            .into_iter()
            .filter(|(k, _)| {
                k.starts_with("AGENTRY_")
                    && !NOT_CONFIG_VARS.contains(&k.as_str())
                    && !NOT_CONFIG_PREFIXES.iter().any(|p| k.starts_with(p))
            })
            .collect();
        envsrc = envsrc.source(Some(env.clone().into_iter().collect()));
        let cfg = b
            .add_source(envsrc)
            .build()
            .map_err(|e| ConfigError(e.to_string()))?;
        // Secrets given as files become the keys' values; the `*_file` keys are consumed here,
        // so even a section that refuses unknown fields never sees them.
        let mut cfg = cfg;
        let mut secret_files = Vec::new();
        for (key, value, path) in secrets_from_files(&cfg)? {
            put_secret(&mut cfg.cache, key, value);
            secret_files.push(path);
        }
        // Every key that no settings struct consumes is a typo or a key of another version:
        // refused, so the known keys are exactly the structs' fields (no list to keep).
        let mut unknown = Vec::new();
        let settings: Settings =
            serde_ignored::deserialize(cfg, |path| unknown.push(path.to_string()))
                .map_err(|e| ConfigError(e.to_string()))?;
        if !unknown.is_empty() {
            let known = serde_json::to_value(Settings::default()).unwrap_or_default();
            let mut lines = Vec::new();
            for key in &unknown {
                let hint = suggestion(key, &known);
                let vars = vars_setting(key, &env);
                if vars.is_empty() {
                    let hint = hint.as_ref().map(|h| format!(" (did you mean `{h}`?)"));
                    lines.push(format!("`{key}`{}", hint.unwrap_or_default()));
                }
                for (var, rest) in vars {
                    let hint = hint.as_ref().map(|h| {
                        format!(
                            " (did you mean AGENTRY_{}{rest}?)",
                            h.to_uppercase().replace('.', "__")
                        )
                    });
                    lines.push(format!("{var}{}", hint.unwrap_or_default()));
                }
            }
            return Err(ConfigError(format!(
                "unknown configuration key(s): {}. The keys are listed in README.md (Configuration), docs/models.md and docs/tools.md",
                lines.join(", ")
            )));
        }
        let mut settings = settings;
        settings.config_file = file;
        settings.secret_files = secret_files;
        settings.validate()?;
        Ok(settings)
    }

    /// What is wrong with `[mcp.oauth]`, naming the key.
    fn mcp_oauth_problem(&self) -> Option<(&'static str, String)> {
        let o = &self.mcp.oauth;
        if !o.enabled() {
            return None;
        }
        let http_url = |v: &str| {
            url::Url::parse(v.trim())
                .ok()
                .filter(|u| matches!(u.scheme(), "http" | "https") && u.host().is_some())
        };
        match http_url(&o.issuer) {
            Some(u) if u.query().is_none() && u.fragment().is_none() => {}
            _ => {
                return Some((
                    "mcp.oauth.issuer",
                    "must be the authorization server's issuer URL, e.g. https://login.example.com (no query or fragment)".into(),
                ));
            }
        }
        if !o.jwks_url.trim().is_empty() && http_url(&o.jwks_url).is_none() {
            return Some(("mcp.oauth.jwks_url", "must be an http(s) URL".into()));
        }
        if o.audience.trim().is_empty() && self.mcp.public_url.trim().is_empty() {
            return Some((
                "mcp.oauth.audience",
                "set it (the `aud` tokens for /mcp carry, e.g. https://agentry.example.com/mcp) or set mcp.public_url: a token's audience cannot be checked against the request's own Host header, which the caller chooses".into(),
            ));
        }
        if o.tenant_claim.trim().is_empty() {
            return Some(("mcp.oauth.tenant_claim", "must name a claim".into()));
        }
        if o.user_claim.trim().is_empty() {
            return Some(("mcp.oauth.user_claim", "must name a claim".into()));
        }
        if o.jwks_cache_secs == 0 {
            return Some(("mcp.oauth.jwks_cache_secs", "must be at least 1".into()));
        }
        if o.introspection_url.trim().is_empty() {
            if o.introspect_jwts {
                return Some((
                    "mcp.oauth.introspect_jwts",
                    "needs mcp.oauth.introspection_url".into(),
                ));
            }
        } else {
            if http_url(&o.introspection_url).is_none() {
                return Some((
                    "mcp.oauth.introspection_url",
                    "must be an http(s) URL".into(),
                ));
            }
            if o.introspection_client_id.trim().is_empty()
                || o.introspection_client_secret.is_empty()
            {
                return Some((
                    "mcp.oauth.introspection_client_id",
                    "the introspection endpoint needs a client: set introspection_client_id and introspection_client_secret".into(),
                ));
            }
        }
        None
    }

    fn validate(&self) -> Result<(), ConfigError> {
        let bad = |key: &str, why: &str| Err(ConfigError(format!("{key}: {why}")));
        if self.server.host.trim().is_empty() {
            return bad("server.host", "must not be empty");
        }
        if self.tasks.max_per_step == 0 {
            return bad(
                "tasks.max_per_step",
                "must be at least 1 (to turn delegation off, leave `task` out of the role's tool permissions)",
            );
        }
        if self.tasks.max_parallel == 0 {
            return bad("tasks.max_parallel", "must be at least 1");
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
        if self.database.acquire_timeout_secs == 0 {
            return bad("database.acquire_timeout_secs", "must be at least 1");
        }
        if self.retention.interval_secs == 0 {
            return bad("retention.interval_secs", "must be at least 1");
        }
        if self.memory.top_k > 50 {
            return bad("memory.top_k", "must be at most 50");
        }
        if !(-1.0..=1.0).contains(&self.memory.min_similarity) {
            return bad("memory.min_similarity", "must be between -1 and 1");
        }
        if !(self.memory.merge_similarity > 0.0 && self.memory.merge_similarity <= 1.0) {
            return bad("memory.merge_similarity", "must be above 0 and at most 1");
        }
        if self.memory.max_candidates == 0 {
            return bad("memory.max_candidates", "must be at least 1");
        }
        if let Some(url) = self
            .embeddings
            .base_url
            .as_deref()
            .filter(|u| !u.trim().is_empty())
            && !(url.starts_with("http://") || url.starts_with("https://"))
        {
            return bad(
                "embeddings.base_url",
                "must be an http:// or https:// URL (the API root, e.g. https://api.openai.com/v1)",
            );
        }
        let redis = self.redis.url.expose();
        if redis.starts_with("rediss://") {
            return bad(
                "redis.url",
                "rediss:// (TLS) is not supported by this build; reach Redis over redis:// on a private network, or through a TLS sidecar",
            );
        }
        if !(redis.is_empty() || redis.starts_with("redis://")) {
            return bad("redis.url", "must start with redis://");
        }
        if !redis.is_empty()
            && matches!(
                agentry_store::backend_of(&self.database_url()),
                Some(sea_orm::DatabaseBackend::Sqlite)
            )
        {
            return bad(
                "redis.url",
                "cluster mode (Redis set) needs a database every replica shares: set database.url (AGENTRY_DATABASE__URL) to postgres://… or mysql://… — SQLite is one file on one machine. Or unset redis.url to run a single-node server",
            );
        }
        if self.redis.key_prefix.trim().is_empty() {
            return bad("redis.key_prefix", "must not be empty");
        }
        if let Some(why) = replica_id_problem(&self.cluster.replica_id) {
            return bad("cluster.replica_id", why);
        }
        if self.cluster.database_lease_ttl_secs < 3 {
            return bad("cluster.database_lease_ttl_secs", "must be at least 3");
        }
        if self.cluster.session_lease_ttl_secs < 3 {
            return bad("cluster.session_lease_ttl_secs", "must be at least 3");
        }
        if !(1000..=60_000).contains(&self.cluster.replica_ttl_ms) {
            return bad(
                "cluster.replica_ttl_ms",
                "must be between 1000 and 60000 (milliseconds)",
            );
        }
        let advertised = self.cluster.advertise_url.trim();
        if !(advertised.is_empty()
            || advertised.starts_with("http://")
            || advertised.starts_with("https://"))
        {
            return bad(
                "cluster.advertise_url",
                "must be an http:// or https:// URL (the base other replicas reach this one at)",
            );
        }
        if !(100..=120_000).contains(&self.cluster.forward_timeout_ms) {
            return bad(
                "cluster.forward_timeout_ms",
                "must be between 100 and 120000 (milliseconds)",
            );
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
        if let Err(why) = crate::telemetry::values::parse_filter(&self.log.level) {
            return bad("log.level", &why);
        }
        if let Err(why) = crate::telemetry::values::check_endpoint(&self.otel.endpoint) {
            return bad("otel.endpoint", &why);
        }
        if let Err(why) = crate::telemetry::values::parse_headers(self.otel.headers.expose()) {
            return bad("otel.headers", &why);
        }
        if self.otel.service_name.trim().is_empty() {
            return bad("otel.service_name", "must not be empty");
        }
        if self.otel.queue_size == 0 {
            return bad("otel.queue_size", "must be at least 1");
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
        let public = self.mcp.public_url.trim();
        if !public.is_empty()
            && (!(public.starts_with("http://") || public.starts_with("https://"))
                || public.trim_end_matches('/').matches('/').count() > 2
                || public.contains(['?', '#']))
        {
            return bad(
                "mcp.public_url",
                "must be a base URL like https://agentry.example.com (no path, query or fragment)",
            );
        }
        if self.mcp.idle_timeout_secs == 0 {
            return bad("mcp.idle_timeout_secs", "must be at least 1");
        }
        if let Some((key, why)) = self.mcp_oauth_problem() {
            return bad(key, &why);
        }
        if !self.mcp.encryption_key.is_empty()
            && let Err(e) = agentry_sealing::SecretBox::new(self.mcp.encryption_key.expose())
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
        if let Some((key, why)) = self.sandbox.validate().into_iter().next() {
            return bad(&format!("sandbox.{key}"), &why);
        }
        // The model errors name their own key (llm.base_url, AGENTRY_LLM__API_KEY, …).
        self.llm
            .validate()
            .map_err(|e| ConfigError(format!("llm: {e}")))?;
        Ok(())
    }

    /// Every configuration key as the environment variable that sets it (`AGENTRY_DATA_DIR`,
    /// `AGENTRY_SERVER__PORT`, …), derived from the settings' own shape, so deployment files
    /// (docker-compose.yml, the Helm chart) can be checked against the real keys.
    pub fn env_keys(&self) -> Vec<String> {
        fn walk(path: &mut Vec<String>, value: &serde_json::Value, out: &mut Vec<String>) {
            match value {
                serde_json::Value::Object(map) if !map.is_empty() => {
                    for (key, sub) in map {
                        path.push(key.to_uppercase());
                        walk(path, sub, out);
                        path.pop();
                    }
                }
                _ => out.push(format!("AGENTRY_{}", path.join("__"))),
            }
        }
        let mut out = Vec::new();
        if let Ok(value) = serde_json::to_value(self) {
            walk(&mut Vec::new(), &value, &mut out);
        }
        out.sort();
        out
    }

    /// The effective configuration as `agentry config` prints it: secrets masked (`***`) or
    /// marked `unset`, and the database and Redis URLs readable with only their password
    /// masked, so the kind, host and database name can be checked.
    pub fn view(&self) -> serde_json::Value {
        let mut v = serde_json::to_value(self).unwrap_or_default();
        v["database"]["url"] = mask_password(&self.database_url()).into();
        if !self.redis.url.is_empty() {
            v["redis"]["url"] = mask_password(self.redis.url.expose()).into();
        }
        v
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

    /// A file holding `content`, kept alive with its directory.
    fn secret_file(dir: &tempfile::TempDir, name: &str, content: &str) -> String {
        let path = dir.path().join(name);
        std::fs::write(&path, content).unwrap();
        path.to_string_lossy().into_owned()
    }

    #[test]
    fn every_secret_can_be_a_file_with_its_trailing_newline_dropped() {
        let dir = tempfile::tempdir().unwrap();
        let admin = secret_file(&dir, "admin", "admin-key-from-a-file\n");
        let llm = secret_file(&dir, "llm", "sk-from-a-file\r\n");
        let openai = secret_file(&dir, "openai", "sk-openai");
        let anthropic = secret_file(&dir, "anthropic", "sk-ant\n");
        let mcp = secret_file(&dir, "mcp", "passphrase:a long enough passphrase\n");
        let db = secret_file(&dir, "db", "postgres://u:pw@h/db\n");
        let search = secret_file(&dir, "search", "search key with spaces \n\n");
        let metrics = secret_file(&dir, "metrics", "metrics-token\n");
        let s = Settings::load_from(
            None,
            env(&[
                ("AGENTRY_AUTH__ADMIN_KEY_FILE", &admin),
                ("AGENTRY_LLM__PROVIDER", "openai"),
                ("AGENTRY_LLM__API_KEY_FILE", &llm),
                ("AGENTRY_LLM__OPENAI__API_KEY_FILE", &openai),
                ("AGENTRY_LLM__ANTHROPIC__API_KEY_FILE", &anthropic),
                ("AGENTRY_MCP__ENCRYPTION_KEY_FILE", &mcp),
                ("AGENTRY_DATABASE__URL_FILE", &db),
                ("AGENTRY_TOOLS__SEARCH_API_KEY_FILE", &search),
                ("AGENTRY_METRICS__TOKEN_FILE", &metrics),
            ]),
        )
        .unwrap();
        assert_eq!(s.auth.admin_key.expose(), "admin-key-from-a-file");
        assert_eq!(s.llm.api_key.as_ref().unwrap().expose(), "sk-from-a-file");
        assert_eq!(s.llm.openai.api_key.as_ref().unwrap().expose(), "sk-openai");
        assert_eq!(s.llm.anthropic.api_key.as_ref().unwrap().expose(), "sk-ant");
        assert_eq!(
            s.mcp.encryption_key.expose(),
            "passphrase:a long enough passphrase"
        );
        assert_eq!(s.database_url(), "postgres://u:pw@h/db");
        // Only one trailing newline goes: the rest of the file is the value.
        assert_eq!(s.tools.search_api_key.expose(), "search key with spaces \n");
        assert_eq!(s.metrics.token.expose(), "metrics-token");
        assert_eq!(s.secret_files.len(), 8);
        // The value is checked like a direct one, and never printed.
        let view = s.view().to_string();
        assert!(!view.contains("admin-key-from-a-file") && !view.contains("sk-from"));

        // The same from agentry.toml.
        let toml = dir.path().join("agentry.toml");
        std::fs::write(
            &toml,
            format!("[auth]\nadmin_key_file = {admin:?}\n[metrics]\ntoken_file = {metrics:?}\n"),
        )
        .unwrap();
        let s = Settings::load_from(Some(&toml), env(&[])).unwrap();
        assert_eq!(s.auth.admin_key.expose(), "admin-key-from-a-file");
        assert_eq!(s.metrics.token.expose(), "metrics-token");
        // A redis URL from a file arrives too.
        let redis = secret_file(&dir, "redis", "redis://:pw@h:6379/2\n");
        let s = Settings::load_from(
            None,
            env(&[
                ("AGENTRY_REDIS__URL_FILE", &redis),
                ("AGENTRY_DATABASE__URL", "postgres://u@h/db"),
            ]),
        )
        .unwrap();
        assert_eq!(s.redis.url.expose(), "redis://:pw@h:6379/2");
        assert_eq!(s.view()["redis"]["url"], "redis://:***@h:6379/2");
    }

    #[test]
    fn a_secret_file_that_is_missing_empty_or_doubled_stops_the_start() {
        let dir = tempfile::tempdir().unwrap();
        let admin = secret_file(&dir, "admin", "admin-key-from-a-file\n");
        let empty = secret_file(&dir, "empty", "\n");
        let missing = dir.path().join("missing").to_string_lossy().into_owned();
        let err = |pairs: &[(&str, &str)]| {
            Settings::load_from(None, env(pairs))
                .map(|_| ())
                .unwrap_err()
                .to_string()
        };
        let e = err(&[
            ("AGENTRY_AUTH__ADMIN_KEY", "a-direct-admin-key-too"),
            ("AGENTRY_AUTH__ADMIN_KEY_FILE", &admin),
        ]);
        assert!(
            e.contains("AGENTRY_AUTH__ADMIN_KEY and AGENTRY_AUTH__ADMIN_KEY_FILE")
                && e.contains("one way"),
            "{e}"
        );
        assert!(!e.contains("admin-key-from-a-file"), "never the value: {e}");
        let e = err(&[("AGENTRY_MCP__ENCRYPTION_KEY_FILE", &missing)]);
        assert!(
            e.contains("mcp.encryption_key_file") && e.contains(&missing),
            "{e}"
        );
        let e = err(&[("AGENTRY_LLM__API_KEY_FILE", &empty)]);
        assert!(e.contains("llm.api_key_file") && e.contains("empty"), "{e}");
        // The directory itself is not a file.
        let d = dir.path().to_string_lossy().into_owned();
        let e = err(&[("AGENTRY_AUTH__ADMIN_KEY_FILE", &d)]);
        assert!(e.contains("auth.admin_key_file") && e.contains(&d), "{e}");
        // A `_file` of a key that is not a secret is an unknown key, as before.
        let e = err(&[("AGENTRY_SERVER__HOST_FILE", &admin)]);
        assert!(e.contains("AGENTRY_SERVER__HOST_FILE"), "{e}");
    }

    #[test]
    fn defaults_load_with_nothing_set() {
        let s = Settings::load_from(None, env(&[])).unwrap();
        assert_eq!(s.server.host, "127.0.0.1");
        assert_eq!(s.server.port, 8000);
        assert_eq!(s.server.max_connections, 10_000);
        assert_eq!(s.hitl.timeout_secs, 300);
        assert_eq!(s.session.timeout_secs, 3600);
        assert_eq!(s.session.max_live, 1_000);
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
    fn mcp_oauth_is_off_by_default_and_checked_when_on() {
        let s = Settings::load_from(None, env(&[])).unwrap();
        assert!(!s.mcp.oauth.enabled());
        assert_eq!(s.mcp.oauth.tenant_claim, "agentry_tenant");
        assert_eq!(s.mcp.oauth.user_claim, "sub");
        let issuer = ("AGENTRY_MCP__OAUTH__ISSUER", "https://login.example");
        let s = Settings::load_from(
            None,
            env(&[
                issuer,
                ("AGENTRY_MCP__PUBLIC_URL", "https://agentry.example"),
                ("AGENTRY_MCP__OAUTH__USER_MATCH", "name"),
                ("AGENTRY_MCP__OAUTH__REQUIRED_SCOPES", "mcp,files"),
            ]),
        )
        .unwrap();
        assert!(s.mcp.oauth.enabled());
        assert_eq!(s.mcp.oauth.user_match, ClaimMatch::Name);
        assert_eq!(s.mcp.oauth.required_scopes, ["mcp", "files"]);
        // The audience is fixed by configuration, never by the request.
        let err = Settings::load_from(None, env(&[issuer])).unwrap_err();
        assert!(err.0.contains("mcp.oauth.audience"), "{err}");
        let aud = (
            "AGENTRY_MCP__OAUTH__AUDIENCE",
            "https://agentry.example/mcp",
        );
        assert!(Settings::load_from(None, env(&[issuer, aud])).is_ok());
        for (key, value, named) in [
            (
                "AGENTRY_MCP__OAUTH__ISSUER",
                "login.example",
                "mcp.oauth.issuer",
            ),
            (
                "AGENTRY_MCP__OAUTH__JWKS_URL",
                "file:///keys",
                "mcp.oauth.jwks_url",
            ),
            (
                "AGENTRY_MCP__OAUTH__TENANT_CLAIM",
                " ",
                "mcp.oauth.tenant_claim",
            ),
            (
                "AGENTRY_MCP__OAUTH__JWKS_CACHE_SECS",
                "0",
                "mcp.oauth.jwks_cache_secs",
            ),
            (
                "AGENTRY_MCP__OAUTH__INTROSPECT_JWTS",
                "true",
                "mcp.oauth.introspect_jwts",
            ),
            (
                "AGENTRY_MCP__OAUTH__INTROSPECTION_URL",
                "https://login.example/introspect",
                "mcp.oauth.introspection_client_id",
            ),
        ] {
            let err = Settings::load_from(None, env(&[issuer, aud, (key, value)])).unwrap_err();
            assert!(err.0.contains(named), "{key}={value}: {err}");
        }
        // Introspection with its client; the secret is masked in `agentry config`.
        let s = Settings::load_from(
            None,
            env(&[
                issuer,
                aud,
                (
                    "AGENTRY_MCP__OAUTH__INTROSPECTION_URL",
                    "https://login.example/introspect",
                ),
                ("AGENTRY_MCP__OAUTH__INTROSPECTION_CLIENT_ID", "agentry"),
                ("AGENTRY_MCP__OAUTH__INTROSPECTION_CLIENT_SECRET", "s3cret"),
            ]),
        )
        .unwrap();
        assert_eq!(s.mcp.oauth.introspection_client_secret.expose(), "s3cret");
        assert_eq!(
            s.view()["mcp"]["oauth"]["introspection_client_secret"],
            "***"
        );
        let err = Settings::load_from(
            None,
            env(&[
                issuer,
                aud,
                ("AGENTRY_MCP__OAUTH__INTROSPECTION_URL", "not a url"),
            ]),
        )
        .unwrap_err();
        assert!(err.0.contains("mcp.oauth.introspection_url"), "{err}");
    }

    #[test]
    fn mcp_public_url_is_a_base_url() {
        let s = Settings::load_from(None, env(&[])).unwrap();
        assert_eq!(s.mcp.public_url, "");
        for ok in ["https://agentry.example", "http://127.0.0.1:8000/"] {
            let s = Settings::load_from(None, env(&[("AGENTRY_MCP__PUBLIC_URL", ok)])).unwrap();
            assert_eq!(s.mcp.public_url, ok);
        }
        for bad in [
            "agentry.example",
            "ftp://agentry.example",
            "https://agentry.example/mcp",
            "https://agentry.example?x=1",
        ] {
            let err =
                Settings::load_from(None, env(&[("AGENTRY_MCP__PUBLIC_URL", bad)])).unwrap_err();
            assert!(err.0.contains("mcp.public_url"), "{bad}: {err}");
        }
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
            ("AGENTRY_LOG__LEVEL", "verbose", "log.level"),
            ("AGENTRY_SERVER__PROT", "1", "AGENTRY_SERVER__PROT"),
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
    fn cluster_mode_needs_a_shared_database_and_a_sane_replica_id() {
        let err = |pairs: &[(&str, &str)]| {
            Settings::load_from(None, env(pairs))
                .map(|_| ())
                .unwrap_err()
                .to_string()
        };
        // Redis with the default SQLite, or an explicit SQLite URL: refused, saying what to do.
        for db in [None, Some("sqlite:///tmp/x.db")] {
            let mut pairs = vec![("AGENTRY_REDIS__URL", "redis://127.0.0.1:6379/0")];
            if let Some(db) = db {
                pairs.push(("AGENTRY_DATABASE__URL", db));
            }
            let e = err(&pairs);
            assert!(
                e.contains("redis.url") && e.contains("SQLite") && e.contains("postgres://"),
                "{e}"
            );
        }
        // PostgreSQL and MySQL are accepted, with a replica id of our own.
        for db in ["postgres://u@h/db", "mysql://u@h/db"] {
            let s = Settings::load_from(
                None,
                env(&[
                    ("AGENTRY_REDIS__URL", "redis://127.0.0.1:6379/3"),
                    ("AGENTRY_DATABASE__URL", db),
                    ("AGENTRY_CLUSTER__REPLICA_ID", "replica-a.1"),
                    ("AGENTRY_REDIS__KEY_PREFIX", "acme"),
                ]),
            )
            .unwrap();
            assert_eq!(s.cluster.replica_id, "replica-a.1");
            assert_eq!(s.redis.key_prefix, "acme");
        }
        let pg = ("AGENTRY_DATABASE__URL", "postgres://u@h/db");
        let redis = ("AGENTRY_REDIS__URL", "redis://127.0.0.1:6379/3");
        let e = err(&[pg, redis, ("AGENTRY_CLUSTER__REPLICA_ID", "a b")]);
        assert!(e.contains("cluster.replica_id"), "{e}");
        let e = err(&[pg, ("AGENTRY_REDIS__URL", "rediss://h:6380")]);
        assert!(e.contains("redis.url") && e.contains("TLS"), "{e}");
        let e = err(&[pg, redis, ("AGENTRY_REDIS__KEY_PREFIX", " ")]);
        assert!(e.contains("redis.key_prefix"), "{e}");
        let e = err(&[("AGENTRY_CLUSTER__DATABASE_LEASE_TTL_SECS", "1")]);
        assert!(e.contains("cluster.database_lease_ttl_secs"), "{e}");
        let e = err(&[("AGENTRY_CLUSTER__REPLICA_TTL_MS", "500")]);
        assert!(e.contains("cluster.replica_ttl_ms"), "{e}");
        let e = err(&[("AGENTRY_CLUSTER__FORWARD_TIMEOUT_MS", "0")]);
        assert!(e.contains("cluster.forward_timeout_ms"), "{e}");
        let e = err(&[("AGENTRY_CLUSTER__ADVERTISE_URL", "10.0.0.7:8000")]);
        assert!(e.contains("cluster.advertise_url"), "{e}");
        // The defaults: single-node, a generated id, a 15 s database lease, a replica dead
        // after 3 s of silence, forwarded commands answered within 5 s.
        let s = Settings::load_from(None, env(&[])).unwrap();
        assert!(s.redis.url.is_empty() && s.cluster.replica_id.is_empty());
        assert_eq!(s.cluster.database_lease_ttl_secs, 15);
        assert_eq!(
            (s.cluster.replica_ttl_ms, s.cluster.forward_timeout_ms),
            (3000, 5000)
        );
        assert!(s.cluster.advertise_url.is_empty());
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
                "AGENTRY_TOOLS__READ_MAX_BYTE (did you mean AGENTRY_TOOLS__READ_MAX_BYTES?)",
            ),
            (
                &[("AGENTRY_LLM__PROVIDR", "openai")],
                "AGENTRY_LLM__PROVIDR",
            ),
            (
                &[("AGENTRY_LLM__OPENAI__API_KY", "k")],
                "AGENTRY_LLM__OPENAI__API_KY",
            ),
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

    fn toml(text: &str) -> (tempfile::TempDir, PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("agentry.toml");
        std::fs::write(&path, text).unwrap();
        (dir, path)
    }

    #[test]
    fn unknown_sections_and_keys_in_the_file_are_refused_with_a_suggestion() {
        let cases: &[(&str, &str)] = &[
            (
                "[databse]\nurl = \"sqlite://x\"\n",
                "`databse` (did you mean `database`?)",
            ),
            (
                "[database]\nulr = \"sqlite://x\"\n",
                "`database.ulr` (did you mean `database.url`?)",
            ),
            (
                "datadir = \"/tmp/x\"\n",
                "`datadir` (did you mean `data_dir`?)",
            ),
            (
                "[llm.openai]\napi_ky = \"k\"\n",
                "`llm.openai.api_ky` (did you mean `llm.openai.api_key`?)",
            ),
            (
                "[tools]\nread_max_byte = 1\n",
                "did you mean `tools.read_max_bytes`?",
            ),
            ("[nothing_like_it]\nx = 1\n", "`nothing_like_it`"),
        ];
        for (text, needle) in cases {
            let (_dir, path) = toml(text);
            let err = Settings::load_from(Some(&path), env(&[]))
                .unwrap_err()
                .to_string();
            assert!(err.contains(needle), "{text}: {err}");
        }
        let (_dir, path) = toml("[nothing_like_it]\nx = 1\n");
        let err = Settings::load_from(Some(&path), env(&[]))
            .unwrap_err()
            .to_string();
        assert!(!err.contains("did you mean"), "{err}");
    }

    #[test]
    fn unknown_agentry_variables_are_refused_with_the_variable_to_use() {
        let cases: &[(&str, &str)] = &[
            (
                "AGENTRY_DATADIR",
                "AGENTRY_DATADIR (did you mean AGENTRY_DATA_DIR?)",
            ),
            (
                "AGENTRY_DATABASE__ULR",
                "did you mean AGENTRY_DATABASE__URL?",
            ),
            (
                "AGENTRY_DATABSE__URL",
                "AGENTRY_DATABSE__URL (did you mean AGENTRY_DATABASE__URL?)",
            ),
            ("AGENTRY_SERVER_PORT", "AGENTRY_SERVER_PORT"),
            (
                "AGENTRY_LLM__OPENAI__BASEURL",
                "did you mean AGENTRY_LLM__OPENAI__BASE_URL?",
            ),
        ];
        for (var, needle) in cases {
            let err = Settings::load_from(None, env(&[(var, "sqlite://x")]))
                .unwrap_err()
                .to_string();
            assert!(err.contains(needle), "{var}: {err}");
        }
        // The terminal client's and the test suite's variables are not server configuration.
        Settings::load_from(
            None,
            env(&[
                ("AGENTRY_KEY", "k"),
                ("AGENTRY_URL", "http://127.0.0.1:1"),
                ("AGENTRY_MCP_CACHE", "/tmp"),
                ("AGENTRY_TEST_POSTGRES_URL", "postgres://x"),
                ("AGENTRY_BENCH_POSTGRES_URL", "postgres://x"),
            ]),
        )
        .unwrap();
    }

    #[test]
    fn the_view_masks_only_passwords_and_marks_unset_secrets() {
        let s = Settings::load_from(
            None,
            env(&[
                (
                    "AGENTRY_DATABASE__URL",
                    "postgres://agentry:hunter2@db.internal:5432/agentry",
                ),
                ("AGENTRY_DATA_DIR", "/srv/agentry"),
            ]),
        )
        .unwrap();
        let v = s.view();
        assert_eq!(
            v["database"]["url"],
            "postgres://agentry:***@db.internal:5432/agentry"
        );
        assert_eq!(v["auth"]["admin_key"], "unset");
        assert_eq!(v["redis"]["url"], "unset");
        assert!(!v.to_string().contains("hunter2"));
        let s = Settings::load_from(None, env(&[("AGENTRY_DATA_DIR", "/srv/agentry")])).unwrap();
        assert_eq!(
            s.view()["database"]["url"],
            "sqlite:///srv/agentry/agentry.db?mode=rwc"
        );
        let s = Settings::load_from(
            None,
            env(&[("AGENTRY_AUTH__ADMIN_KEY", "a-long-enough-admin-key")]),
        )
        .unwrap();
        assert_eq!(s.view()["auth"]["admin_key"], "***");
        for (url, masked) in [
            ("mysql://root@127.0.0.1/db", "mysql://root@127.0.0.1/db"),
            (
                "postgres://u:p%40ss@h/db?sslmode=require",
                "postgres://u:***@h/db?sslmode=require",
            ),
            (
                "postgres://h/db?user=u&password=secret",
                "postgres://h/db?user=u&password=***",
            ),
            (
                "redis://:pw@127.0.0.1:6379/0",
                "redis://:***@127.0.0.1:6379/0",
            ),
        ] {
            assert_eq!(mask_password(url), masked);
        }
    }

    #[test]
    fn the_sandbox_section_loads_from_env_and_refuses_bad_values() {
        let s = Settings::load_from(
            None,
            env(&[
                ("AGENTRY_SANDBOX__BACKEND", "landlock"),
                ("AGENTRY_SANDBOX__READ_ONLY_PATHS", "/opt/mcp,/srv/venv"),
                ("AGENTRY_SANDBOX__MAX_PROCESSES", "64"),
            ]),
        )
        .unwrap();
        assert_eq!(s.sandbox.backend, agentry_sandbox::BackendChoice::Landlock);
        assert_eq!(
            s.sandbox.read_only_paths,
            vec![PathBuf::from("/opt/mcp"), PathBuf::from("/srv/venv")]
        );
        assert_eq!(s.sandbox.max_processes, 64);
        assert!(Settings::load_from(None, env(&[("AGENTRY_SANDBOX__BACKEND", "docker")])).is_err());
        let err = Settings::load_from(None, env(&[("AGENTRY_SANDBOX__MAX_PROCESSES", "0")]))
            .unwrap_err()
            .to_string();
        assert!(err.contains("sandbox.max_processes"), "{err}");
        let err = Settings::load_from(None, env(&[("AGENTRY_SANDBOX__MAX_PROCS", "3")]))
            .unwrap_err()
            .to_string();
        assert!(err.contains("max_procs"), "{err}");
    }

    #[test]
    fn env_keys_name_every_leaf_not_sections() {
        let keys = Settings::default().env_keys();
        for want in [
            "AGENTRY_DATA_DIR",
            "AGENTRY_SERVER__PORT",
            "AGENTRY_AUTH__ADMIN_KEY",
            "AGENTRY_LLM__OPENAI__API_KEY",
            "AGENTRY_LOG__LEVEL",
        ] {
            assert!(keys.iter().any(|k| k == want), "{want} in {keys:?}");
        }
        // Sections are not keys; secrets are listed like any key.
        assert!(!keys.iter().any(|k| k == "AGENTRY_SERVER"), "{keys:?}");
        assert!(
            keys.iter().any(|k| k == "AGENTRY_DATABASE__URL"),
            "{keys:?}"
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
