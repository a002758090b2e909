//! Shared helpers for the end-to-end tests: start the real `agentry` binary on a free port with
//! its own data dir, and wait until it answers.

#![allow(dead_code)]

use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

pub struct Server {
    pub child: Child,
    pub base: String,
    pub port: u16,
    pub data_dir: tempfile::TempDir,
    /// Every line the server logged (stderr) since it started listening (across restarts).
    pub logs: Arc<Mutex<Vec<String>>>,
    /// The lines it logged while starting, up to and including the one saying it listens (of
    /// every start, across restarts).
    pub start_logs: Arc<Mutex<Vec<String>>>,
    /// The settings it was started with, for a restart.
    env: Vec<(String, String)>,
}

/// The port a starting `agentry serve` (JSON logs) says it listens on; `seen` gets every log
/// line before it.
pub async fn listening_port(
    lines: &mut tokio::io::Lines<BufReader<impl tokio::io::AsyncRead + Unpin>>,
    mut seen: impl FnMut(&str),
) -> u16 {
    tokio::time::timeout(Duration::from_secs(60), async {
        while let Some(line) = lines.next_line().await.unwrap() {
            seen(&line);
            if let Ok(v) = serde_json::from_str::<serde_json::Value>(&line)
                && let Some(p) = v.get("port").and_then(|p| p.as_u64())
            {
                return p as u16;
            }
        }
        panic!("agentry exited before listening");
    })
    .await
    .expect("agentry did not start listening within 60 s")
}

impl Server {
    /// Start `agentry serve` with extra `AGENTRY_*` env pairs. Port 0; the bound port is read
    /// from the log line the server prints when it listens.
    pub async fn start(env: &[(&str, &str)]) -> Server {
        Self::start_in(tempfile::tempdir().unwrap(), env).await
    }

    /// As [`Server::start`], on an existing data dir (a restart).
    pub async fn start_in(data_dir: tempfile::TempDir, env: &[(&str, &str)]) -> Server {
        let env: Vec<(String, String)> = env
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let logs = Arc::new(Mutex::new(Vec::new()));
        let start_logs = Arc::new(Mutex::new(Vec::new()));
        let (child, port) = spawn(data_dir.path(), &env, logs.clone(), start_logs.clone()).await;
        Server {
            child,
            base: format!("http://127.0.0.1:{port}"),
            port,
            data_dir,
            logs,
            start_logs,
            env,
        }
    }

    /// `kill -9` the server (no shutdown of any kind), then start it again on the same data
    /// dir and settings, as after a crash. The port may change.
    pub async fn crash_and_restart(&mut self) {
        self.crash().await;
        self.restart().await;
    }

    /// `kill -9` the server and reap it.
    pub async fn crash(&mut self) {
        self.child.start_kill().expect("kill -9 the server");
        self.child
            .wait()
            .await
            .expect("the killed server is reaped");
    }

    /// Start the server again (after [`Server::crash`]) on the same data dir and settings.
    pub async fn restart(&mut self) {
        let (child, port) = spawn(
            self.data_dir.path(),
            &self.env,
            self.logs.clone(),
            self.start_logs.clone(),
        )
        .await;
        self.child = child;
        self.port = port;
        self.base = format!("http://127.0.0.1:{port}");
    }

    /// The logged JSON lines that satisfy `keep`.
    pub fn log_lines(&self, keep: impl Fn(&serde_json::Value) -> bool) -> Vec<serde_json::Value> {
        self.logs
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
            .filter(|v| keep(v))
            .collect()
    }

    /// Whether a line logged while starting contains `needle`.
    pub fn logged_at_start(&self, needle: &str) -> bool {
        self.start_logs
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .any(|l| l.contains(needle))
    }

    /// Send SIGTERM.
    pub fn terminate(&self) {
        let pid = self.child.id().expect("the server is running");
        let status = std::process::Command::new("kill")
            .arg("-TERM")
            .arg(pid.to_string())
            .status()
            .expect("kill runs");
        assert!(status.success(), "kill -TERM {pid}");
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{}", self.base, path)
    }
}

async fn spawn(
    data_dir: &std::path::Path,
    env: &[(String, String)],
    logs: Arc<Mutex<Vec<String>>>,
    start_logs: Arc<Mutex<Vec<String>>>,
) -> (Child, u16) {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_agentry"));
    cmd.arg("serve")
        .env("AGENTRY_DATA_DIR", data_dir)
        .env("AGENTRY_SERVER__PORT", "0")
        .env("AGENTRY_LOG__FORMAT", "json")
        .env("AGENTRY_SERVER__WORKERS", "2")
        // Sandboxed MCP servers run the reference servers from the test cache (node, the
        // venv): readable inside the sandbox like an operator's install dir.
        .env(
            "AGENTRY_SANDBOX__READ_ONLY_PATHS",
            agentry_mcp::testing::sandbox_read_only_paths(),
        )
        .stderr(std::process::Stdio::piped())
        .stdout(std::process::Stdio::null())
        .kill_on_drop(true);
    for (k, v) in env {
        cmd.env(k, v);
    }
    let mut child = cmd.spawn().expect("spawn agentry");
    let stderr = child.stderr.take().unwrap();
    let mut lines = BufReader::new(stderr).lines();
    let port = listening_port(&mut lines, |l| {
        start_logs
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(l.to_string())
    })
    .await;
    // Keep draining the log so the child never blocks on a full pipe; keep it for tests.
    tokio::spawn(async move {
        while let Ok(Some(line)) = lines.next_line().await {
            logs.lock().unwrap_or_else(|e| e.into_inner()).push(line);
        }
    });
    (child, port)
}

/// `agentry ARGS` in `dir` with exactly the `AGENTRY_*` variables given (none inherited) and
/// the data dir `dir/data`: the same start for every test of the binary's commands.
pub fn agentry(
    dir: &std::path::Path,
    args: &[&str],
    env: &[(&str, &str)],
) -> std::process::Command {
    let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_agentry"));
    cmd.args(args).current_dir(dir);
    for (k, _) in std::env::vars() {
        if k.starts_with("AGENTRY_") {
            cmd.env_remove(k);
        }
    }
    cmd.env("AGENTRY_DATA_DIR", dir.join("data"));
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd
}

/// Run [`agentry`] to the end.
pub fn run(dir: &std::path::Path, args: &[&str], env: &[(&str, &str)]) -> std::process::Output {
    agentry(dir, args, env).output().unwrap()
}
