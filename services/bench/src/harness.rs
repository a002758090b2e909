//! One measured server: the fake model in this process, the real `agentry` binary as a child
//! process on a free port with its own data directory, and a tenant with a key and the
//! benchmark's assistants.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use agentry_fake_model::{FakeConfig, FakeModelServer};
use anyhow::{Context, Result, bail};
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

/// The assistant of one-tool runs: calls are approved without asking.
pub const AUTO_ASSISTANT: &str = "bench-auto";
/// The assistant whose `write_todos` calls wait for a human's decision.
pub const HITL_ASSISTANT: &str = "bench-hitl";

/// The embeddings model name the fake model server answers as (any name works; memories are
/// stored with it).
pub const EMBEDDING_MODEL: &str = "fake-embedding";

/// Where the server keeps its data.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Database {
    /// A new SQLite file in a temporary data directory (the embedded default).
    Sqlite,
    /// A `postgres://` or `mysql://` URL.
    Url(String),
}

impl Database {
    pub fn parse(value: &str) -> Result<Self> {
        match value {
            "sqlite" => Ok(Database::Sqlite),
            url if url.starts_with("postgres://")
                || url.starts_with("postgresql://")
                || url.starts_with("mysql://") =>
            {
                Ok(Database::Url(url.to_string()))
            }
            other => bail!(
                "--database takes `sqlite`, a postgres:// URL or a mysql:// URL, not `{other}`"
            ),
        }
    }

    /// `sqlite`, `postgres` or `mysql`: how results are labelled.
    pub fn label(&self) -> &'static str {
        match self {
            Database::Sqlite => "sqlite",
            Database::Url(url) if url.starts_with("mysql") => "mysql",
            Database::Url(_) => "postgres",
        }
    }
}

/// The fake model's timing: latency before the response head, and the streaming profile.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct ModelProfile {
    pub latency_ms: u64,
    /// Text chunks per streamed answer (0 = one per word).
    pub chunks: usize,
    pub chunk_delay_ms: u64,
}

impl ModelProfile {
    pub const INSTANT: ModelProfile = ModelProfile {
        latency_ms: 0,
        chunks: 0,
        chunk_delay_ms: 0,
    };
}

/// What a scenario needs to start its server.
#[derive(Debug, Clone)]
pub struct Target {
    pub agentry: PathBuf,
    pub database: Database,
    /// `AGENTRY_SERVER__WORKERS` (0 = one per core).
    pub workers: usize,
}

pub struct Harness {
    pub model: FakeModelServer,
    server: Server,
    pub pid: u32,
    pub port: u16,
    pub http: reqwest::Client,
    /// A tenant user's key (role admin, so it may create assistants).
    pub key: String,
}

/// One `agentry serve` child process on a free loopback port, with its own data directory.
pub struct Server {
    child: Child,
    pub pid: u32,
    pub port: u16,
    data_dir: tempfile::TempDir,
}

impl Server {
    /// Start `agentry serve` with `model_url` as its model and `admin_key` as the operator key;
    /// `env` adds `AGENTRY_*` settings. Returns once it listens.
    pub async fn spawn(
        target: &Target,
        model_url: &str,
        admin_key: &str,
        env: &[(&str, String)],
    ) -> Result<Server> {
        let data_dir = tempfile::tempdir().context("creating a data directory")?;
        let mut cmd = Command::new(&target.agentry);
        cmd.arg("serve")
            .env("AGENTRY_DATA_DIR", data_dir.path())
            .env("AGENTRY_SERVER__PORT", "0")
            .env("AGENTRY_SERVER__WORKERS", target.workers.to_string())
            .env("AGENTRY_SERVER__MAX_CONNECTIONS", "1000000")
            .env("AGENTRY_LOG__FORMAT", "json")
            // AGENTRY_BENCH_SERVER_LOG (e.g. `info,agentry_store::sql=trace`) turns the servers'
            // log up to diagnose a figure; every line is then shown, and the figures of that
            // run are charged with the logging.
            .env(
                "AGENTRY_LOG__LEVEL",
                server_log().unwrap_or_else(|| "info".into()),
            )
            .env("AGENTRY_AUTH__ADMIN_KEY", admin_key)
            .env("AGENTRY_LLM__PROVIDER", "openai")
            .env("AGENTRY_LLM__BASE_URL", model_url)
            .env("AGENTRY_LLM__API_KEY", "bench")
            .env("AGENTRY_LLM__MODEL", "fake")
            .env_remove("RUST_LOG")
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        if let Database::Url(url) = &target.database {
            cmd.env("AGENTRY_DATABASE__URL", url);
        }
        for (k, v) in env {
            cmd.env(k, v);
        }
        let mut child = cmd
            .spawn()
            .with_context(|| format!("starting {}", target.agentry.display()))?;
        let pid = child.id().context("the server exited at once")?;
        let stderr = child.stderr.take().context("no stderr pipe")?;
        let port = listening_port(stderr).await?;
        Ok(Server {
            child,
            pid,
            port,
            data_dir,
        })
    }

    /// Stop the server (SIGTERM, then a kill after 10 s).
    pub async fn stop(mut self) {
        if let Ok(pid) = i32::try_from(self.pid) {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(pid),
                nix::sys::signal::Signal::SIGTERM,
            );
        }
        if tokio::time::timeout(Duration::from_secs(10), self.child.wait())
            .await
            .is_err()
        {
            let _ = self.child.kill().await;
        }
    }

    /// `kill -9`: the process dies at once, with no chance to hand anything over.
    pub async fn crash(mut self) -> Result<()> {
        let pid = i32::try_from(self.pid).context("pid out of range")?;
        nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(pid),
            nix::sys::signal::Signal::SIGKILL,
        )
        .context("kill -9")?;
        self.child
            .wait()
            .await
            .context("waiting for the killed server")?;
        Ok(())
    }
}

/// Where a client reaches one server, and with which key.
#[derive(Clone)]
pub struct Endpoint {
    pub http: reqwest::Client,
    pub port: u16,
    pub key: String,
}

impl Endpoint {
    pub fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.port)
    }

    pub fn ws_url(&self, session_id: &str) -> String {
        format!("ws://127.0.0.1:{}/ws/chat/{session_id}", self.port)
    }

    /// A new session of `assistant`; its id.
    pub async fn create_session(&self, assistant: &str) -> Result<String> {
        let session = post(
            &self.http,
            &self.url("/api/v1/sessions"),
            &self.key,
            json!({"assistant_id": assistant}),
        )
        .await?;
        str_field(&session, "session_id")
    }
}

async fn post(http: &reqwest::Client, url: &str, bearer: &str, body: Value) -> Result<Value> {
    let response = http
        .post(url)
        .bearer_auth(bearer)
        .json(&body)
        .send()
        .await
        .with_context(|| format!("POST {url}"))?;
    let status = response.status();
    let text = response.text().await.unwrap_or_default();
    if !status.is_success() {
        bail!("POST {url} answered {status}: {text}");
    }
    serde_json::from_str(&text).with_context(|| format!("POST {url}: the answer is not JSON"))
}

/// A tenant with every quota off, a user of role admin and its key (through the server at
/// `base`, `http://127.0.0.1:PORT`); the key.
pub async fn create_tenant(http: &reqwest::Client, base: &str, admin_key: &str) -> Result<String> {
    // Every quota 0 = no limit: the benchmark measures the server, not its limits. A shared
    // database keeps earlier runs' tenants, and names are unique.
    let name = format!("bench-{}", chrono::Utc::now().format("%Y%m%dT%H%M%S%.6f"));
    let tenant = post(
        http,
        &format!("{base}/api/v1/admin/tenants"),
        admin_key,
        json!({"name": name, "max_users": 0, "max_sessions_per_user": 0,
               "requests_per_minute": 0, "tokens_per_day": 0, "max_concurrent_runs": 0}),
    )
    .await?;
    let tenant_id = str_field(&tenant, "id")?;
    let user = post(
        http,
        &format!("{base}/api/v1/admin/tenants/{tenant_id}/users"),
        admin_key,
        json!({"name": "bench", "role": "admin"}),
    )
    .await?;
    let user_id = str_field(&user, "id")?;
    let key = post(
        http,
        &format!("{base}/api/v1/admin/tenants/{tenant_id}/api-keys"),
        admin_key,
        json!({"user_id": user_id, "name": "bench"}),
    )
    .await?;
    str_field(&key, "key")
}

/// The benchmark's assistants, [`AUTO_ASSISTANT`] and [`HITL_ASSISTANT`], for `key`'s tenant.
pub async fn create_assistants(http: &reqwest::Client, base: &str, key: &str) -> Result<()> {
    let url = format!("{base}/api/v1/agents");
    post(
        http,
        &url,
        key,
        json!({"id": AUTO_ASSISTANT, "tools": ["write_todos"], "auto_approve": true}),
    )
    .await?;
    post(
        http,
        &url,
        key,
        json!({"id": HITL_ASSISTANT, "tools": ["write_todos"],
               "interrupt_on": ["write_todos"], "auto_approve": false}),
    )
    .await?;
    Ok(())
}

/// The operator key every benchmark server gets (16+ characters: the pid is padded, small pids
/// happen).
pub fn admin_key() -> String {
    format!("bench-admin-key-{:08}", std::process::id())
}

/// The fake model with `profile`, recording its timings for the figures.
pub fn start_model(profile: ModelProfile) -> Result<FakeModelServer> {
    FakeModelServer::try_start(FakeConfig {
        latency: Duration::from_millis(profile.latency_ms),
        chunks: profile.chunks,
        chunk_delay: Duration::from_millis(profile.chunk_delay_ms),
        workers: 1,
        record_limit: 0,
        timing_limit: 1_000_000,
        ..FakeConfig::default()
    })
    .context("starting the fake model server")
}

pub fn http_client() -> Result<reqwest::Client> {
    reqwest::Client::builder()
        .pool_max_idle_per_host(256)
        .build()
        .context("building the HTTP client")
}

impl Harness {
    /// Start the model and the server, and create a tenant with no quotas, a user, a key and
    /// the benchmark's assistants. `env` adds `AGENTRY_*` settings.
    pub async fn start(
        target: &Target,
        profile: ModelProfile,
        env: &[(&str, String)],
    ) -> Result<Self> {
        Self::start_inner(target, profile, env, false).await
    }

    /// [`Harness::start`], with the fake model server as the embeddings endpoint too (model
    /// [`EMBEDDING_MODEL`]): memory search by meaning.
    pub async fn start_with_embeddings(
        target: &Target,
        profile: ModelProfile,
        env: &[(&str, String)],
    ) -> Result<Self> {
        Self::start_inner(target, profile, env, true).await
    }

    async fn start_inner(
        target: &Target,
        profile: ModelProfile,
        env: &[(&str, String)],
        embeddings: bool,
    ) -> Result<Self> {
        let model = start_model(profile)?;
        let admin_key = admin_key();
        let mut env = env.to_vec();
        if embeddings {
            env.push(("AGENTRY_EMBEDDINGS__BASE_URL", model.base_url_openai()));
            env.push(("AGENTRY_EMBEDDINGS__MODEL", EMBEDDING_MODEL.to_string()));
        }
        let server = Server::spawn(target, &model.base_url_openai(), &admin_key, &env).await?;
        let http = http_client()?;
        let base = format!("http://127.0.0.1:{}", server.port);
        let key = create_tenant(&http, &base, &admin_key).await?;
        create_assistants(&http, &base, &key).await?;
        Ok(Harness {
            model,
            pid: server.pid,
            port: server.port,
            server,
            http,
            key,
        })
    }

    /// The server's database, for a scenario that seeds rows directly.
    pub fn database_url(&self, target: &Target) -> String {
        match &target.database {
            Database::Sqlite => format!(
                "sqlite://{}?mode=rwc",
                self.server.data_dir.path().join("agentry.db").display()
            ),
            Database::Url(url) => url.clone(),
        }
    }

    /// How clients reach this server.
    pub fn endpoint(&self) -> Endpoint {
        Endpoint {
            http: self.http.clone(),
            port: self.port,
            key: self.key.clone(),
        }
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.port)
    }

    pub fn ws_url(&self, session_id: &str) -> String {
        format!("ws://127.0.0.1:{}/ws/chat/{session_id}", self.port)
    }

    async fn post(&self, path: &str, bearer: &str, body: Value) -> Result<Value> {
        post(&self.http, &self.url(path), bearer, body).await
    }

    /// A new session of `assistant`; its id.
    pub async fn create_session(&self, assistant: &str) -> Result<String> {
        self.endpoint().create_session(assistant).await
    }

    /// One run through `POST /api/v1/chat` in a new session of `assistant`: every event of the
    /// run, `done` last.
    pub async fn rest_run(&self, assistant: &str, message: &str) -> Result<Vec<Value>> {
        let body = self
            .post(
                "/api/v1/chat",
                &self.key,
                json!({"message": message, "assistant_id": assistant}),
            )
            .await?;
        body.get("events")
            .and_then(Value::as_array)
            .cloned()
            .with_context(|| format!("no `events` in {body}"))
    }

    /// The value of the gauge `name` in `/metrics`.
    pub async fn gauge(&self, name: &str) -> Result<u64> {
        let text = self
            .http
            .get(self.url("/metrics"))
            .send()
            .await
            .context("GET /metrics")?
            .error_for_status()
            .context("GET /metrics")?
            .text()
            .await
            .context("reading /metrics")?;
        Ok(sum_samples(&text, name))
    }

    /// The server's resident memory, from `/proc`.
    pub fn rss_bytes(&self) -> Result<u64> {
        rss_bytes(self.pid)
    }

    /// CPU time the server has used (user + system).
    pub fn cpu_time(&self) -> Result<Duration> {
        cpu_time(self.pid)
    }

    /// Context switches (voluntary and not) of the server's threads alive now.
    pub fn context_switches(&self) -> Result<u64> {
        context_switches(self.pid)
    }

    /// SQL statements the server has sent, from its `agentry_db_statements_total`.
    pub async fn sql_statements(&self) -> Result<u64> {
        let text = self
            .http
            .get(self.url("/metrics"))
            .send()
            .await
            .context("GET /metrics")?
            .error_for_status()
            .context("GET /metrics")?
            .text()
            .await
            .context("reading /metrics")?;
        Ok(sum_samples(&text, "agentry_db_statements_total"))
    }

    /// Stop the server (SIGTERM, then a kill after 10 s).
    pub async fn stop(self) {
        self.server.stop().await;
        self.model.stop().await;
    }
}

fn str_field(v: &Value, name: &str) -> Result<String> {
    v.get(name)
        .and_then(Value::as_str)
        .map(str::to_string)
        .with_context(|| format!("no `{name}` in {v}"))
}

/// Read the server's JSON log until it says which port it listens on, then keep draining it
/// (a full pipe would block the server).
/// The servers' log level asked for with `AGENTRY_BENCH_SERVER_LOG`, if any.
fn server_log() -> Option<String> {
    std::env::var("AGENTRY_BENCH_SERVER_LOG")
        .ok()
        .filter(|v| !v.is_empty())
}

async fn listening_port(stderr: tokio::process::ChildStderr) -> Result<u16> {
    let verbose = server_log().is_some();
    let mut lines = BufReader::new(stderr).lines();
    let mut last = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let line = tokio::time::timeout_at(deadline.into(), lines.next_line())
            .await
            .context("the server did not listen within 120 s")?
            .context("reading the server's log")?;
        let Some(line) = line else {
            bail!("the server exited before listening:\n{}", last.join("\n"));
        };
        if let Ok(v) = serde_json::from_str::<Value>(&line)
            && let Some(port) = v.get("port").and_then(Value::as_u64)
        {
            let port = u16::try_from(port).context("port out of range")?;
            tokio::spawn(async move {
                while let Ok(Some(line)) = lines.next_line().await {
                    // Warnings and errors during a benchmark are worth seeing.
                    if verbose
                        || line.contains("\"level\":\"ERROR\"")
                        || line.contains("\"level\":\"WARN\"")
                    {
                        eprintln!("agentry: {line}");
                    }
                }
            });
            return Ok(port);
        }
        last.push(line);
        if last.len() > 20 {
            last.remove(0);
        }
    }
}

/// The sum of every sample of the counter `name` in a Prometheus text exposition.
pub fn sum_samples(text: &str, name: &str) -> u64 {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| {
            let (series, value) = l.rsplit_once(' ')?;
            let metric = series.split('{').next()?;
            (metric == name).then(|| value.trim().parse::<f64>().ok())?
        })
        .map(|v| v as u64)
        .sum()
}

/// Voluntary plus involuntary context switches summed over the threads of `pid`, from
/// `/proc/{pid}/task/*/status` (`/proc/{pid}/status` alone counts only the main thread).
/// Threads that exited are not counted; the server's worker threads live as long as it does.
pub fn context_switches(pid: u32) -> Result<u64> {
    let dir = format!("/proc/{pid}/task");
    let mut total = 0;
    for task in std::fs::read_dir(&dir).with_context(|| format!("reading {dir}"))? {
        let Ok(task) = task else { continue };
        let Ok(status) = std::fs::read_to_string(task.path().join("status")) else {
            continue;
        };
        total += status
            .lines()
            .filter_map(|l| {
                l.strip_prefix("voluntary_ctxt_switches:")
                    .or_else(|| l.strip_prefix("nonvoluntary_ctxt_switches:"))
            })
            .filter_map(|v| v.trim().parse::<u64>().ok())
            .sum::<u64>();
    }
    Ok(total)
}

pub fn rss_bytes(pid: u32) -> Result<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .with_context(|| format!("reading /proc/{pid}/status"))?;
    let kb = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .context("no VmRSS in /proc status")?;
    Ok(kb * 1024)
}

/// User + system CPU time of a process, from `/proc/{pid}/stat` (clock ticks of 1/100 s on
/// Linux).
pub fn cpu_time(pid: u32) -> Result<Duration> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .with_context(|| format!("reading /proc/{pid}/stat"))?;
    // The command name may hold spaces and parentheses: fields count from the last `)`.
    let rest = stat
        .rsplit_once(')')
        .map(|(_, r)| r)
        .context("malformed /proc stat")?;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // After `)`: state is field 0, utime 11, stime 12.
    let ticks = |i: usize| -> Result<u64> {
        fields
            .get(i)
            .and_then(|v| v.parse().ok())
            .context("malformed /proc stat")
    };
    let ticks = ticks(11)? + ticks(12)?;
    Ok(Duration::from_millis(ticks * 10))
}

/// The `agentry` binary beside this executable (`target/<profile>/agentry`), or `None`.
pub fn agentry_beside_me() -> Option<PathBuf> {
    let me = std::env::current_exe().ok()?;
    let dir = me.parent()?;
    // A test binary lives in `deps/`, one level further down.
    [dir, dir.parent().unwrap_or(dir)]
        .iter()
        .map(|d| d.join("agentry"))
        .find(|p| is_file(p))
}

fn is_file(p: &Path) -> bool {
    p.metadata().map(|m| m.is_file()).unwrap_or(false)
}
