//! Local servers as child processes: the environment allow-list, the process group, stderr
//! capture, and killing the whole group on close.
//!
//! The child gets a **cleared** environment plus only the variables in [`ENV_ALLOW_LIST`]
//! (and any `LC_*`) copied from the Agentry process, then the server's configured `env` on top.
//! Everything else — API keys, database URLs, `AGENTRY_*` — stays out of the child. The program
//! is executed directly (no shell), in its own process group, so that closing the connection can
//! signal every process the server started (`npx` → `node`, `uvx` → `python`).

use std::collections::VecDeque;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use process_wrap::tokio::{CommandWrap, ProcessGroup as GroupLeader};
use rmcp::transport::TokioChildProcess;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::ChildStderr;

use super::config::StdioConfig;
use super::error::McpError;

/// Variables copied from the parent's environment when set. `LC_*` are copied too.
pub const ENV_ALLOW_LIST: &[&str] = &[
    "PATH",
    "HOME",
    "USER",
    "LOGNAME",
    "LANG",
    "LANGUAGE",
    "TERM",
    "TMPDIR",
    "TZ",
    "SSL_CERT_FILE",
    "SSL_CERT_DIR",
];

/// Longest stderr line kept (longer lines are cut).
const STDERR_LINE_MAX: usize = 2048;
/// Lines of stderr kept for error messages.
const STDERR_TAIL_LINES: usize = 20;

/// Whether `name` is passed through from the parent's environment.
pub fn is_allowed_env(name: &str) -> bool {
    ENV_ALLOW_LIST.contains(&name) || name.starts_with("LC_")
}

/// The environment the child starts with, before the server's own `env`.
pub fn inherited_env() -> Vec<(String, String)> {
    std::env::vars_os()
        .filter_map(|(k, v)| Some((k.into_string().ok()?, v.into_string().ok()?)))
        .filter(|(k, _)| is_allowed_env(k))
        .collect()
}

/// The last lines a server wrote to stderr, for error messages.
#[derive(Clone, Default)]
pub(crate) struct StderrTail(Arc<Mutex<VecDeque<String>>>);

impl StderrTail {
    fn push(&self, line: String) {
        let mut q = self.0.lock().unwrap_or_else(|p| p.into_inner());
        if q.len() == STDERR_TAIL_LINES {
            q.pop_front();
        }
        q.push_back(line);
    }

    pub(crate) fn text(&self) -> String {
        let q = self.0.lock().unwrap_or_else(|p| p.into_inner());
        q.iter().cloned().collect::<Vec<_>>().join("\n")
    }
}

/// A spawned server: the rmcp transport, and the group to kill on close.
pub(crate) struct SpawnedServer {
    pub transport: TokioChildProcess,
    pub process_group: Option<Arc<ProcessGroup>>,
    pub stderr: StderrTail,
}

/// A server's process group. Once it has been killed it is never signalled again, so a pgid
/// reused later by an unrelated process is safe from us.
#[derive(Debug)]
pub(crate) struct ProcessGroup {
    pub pgid: i32,
    done: std::sync::atomic::AtomicBool,
}

impl ProcessGroup {
    fn new(pgid: i32) -> Arc<Self> {
        Arc::new(Self {
            pgid,
            done: std::sync::atomic::AtomicBool::new(false),
        })
    }

    /// TERM, then KILL, whatever is left of the group. Idempotent.
    pub(crate) async fn kill(&self) {
        if !self.done.swap(true, std::sync::atomic::Ordering::SeqCst) {
            kill_process_group(self.pgid).await;
        }
    }

    /// For `Drop`, where nothing can be awaited.
    pub(crate) fn kill_now(&self) {
        if !self.done.swap(true, std::sync::atomic::Ordering::SeqCst) {
            let _ = killpg(Pid::from_raw(self.pgid), Signal::SIGKILL);
        }
    }
}

pub(crate) fn spawn(server: &str, cfg: &StdioConfig) -> Result<SpawnedServer, McpError> {
    let mut cmd = tokio::process::Command::new(&cfg.command);
    cmd.args(&cfg.args).env_clear();
    for (k, v) in inherited_env() {
        cmd.env(k, v);
    }
    for (k, v) in &cfg.env {
        cmd.env(k, v.expose());
    }
    if let Some(dir) = &cfg.cwd {
        cmd.current_dir(dir);
    }
    let mut wrapped = CommandWrap::from(cmd);
    wrapped.wrap(GroupLeader::leader());
    let (transport, stderr) = TokioChildProcess::builder(wrapped)
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| McpError::SpawnFailed {
            server: server.to_string(),
            command: cfg.command.clone(),
            reason: match e.kind() {
                std::io::ErrorKind::NotFound => {
                    format!("{e} (not found on the allowed PATH, or cwd missing)")
                }
                _ => e.to_string(),
            },
        })?;
    let process_group = transport
        .id()
        .and_then(|id| i32::try_from(id).ok())
        .map(ProcessGroup::new);
    let tail = StderrTail::default();
    if let Some(stderr) = stderr {
        tokio::spawn(forward_stderr(server.to_string(), stderr, tail.clone()));
    }
    Ok(SpawnedServer {
        transport,
        process_group,
        stderr: tail,
    })
}

/// Stderr goes to tracing line by line (cut at [`STDERR_LINE_MAX`]); the last lines are kept.
async fn forward_stderr(server: String, stderr: ChildStderr, tail: StderrTail) {
    let mut reader = BufReader::new(stderr);
    let mut buf = Vec::new();
    loop {
        buf.clear();
        match reader.read_until(b'\n', &mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(_) => {
                let end = buf.len().min(STDERR_LINE_MAX);
                let line = String::from_utf8_lossy(&buf[..end]).trim_end().to_string();
                tracing::debug!(target: "agentry_mcp::server_stderr", server = %server, "{line}");
                tail.push(line);
            }
        }
    }
}

/// Whether any process of the group is still alive.
pub fn process_group_alive(pgid: i32) -> bool {
    killpg(Pid::from_raw(pgid), None).is_ok()
}

/// TERM then KILL every process left in the group (the leader has normally exited by now, but
/// its children may not have).
async fn kill_process_group(pgid: i32) {
    let pid = Pid::from_raw(pgid);
    if killpg(pid, Signal::SIGTERM).is_err() {
        return; // no process left in the group
    }
    for _ in 0..20 {
        tokio::time::sleep(Duration::from_millis(100)).await;
        if !process_group_alive(pgid) {
            return;
        }
    }
    let _ = killpg(pid, Signal::SIGKILL);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn allow_list_passes_locale_and_path_but_not_secrets() {
        assert!(is_allowed_env("PATH"));
        assert!(is_allowed_env("LC_ALL"));
        assert!(is_allowed_env("HOME"));
        assert!(!is_allowed_env("AWS_SECRET_ACCESS_KEY"));
        assert!(!is_allowed_env("AGENTRY_AUTH__ADMIN_KEY"));
        assert!(!is_allowed_env("LD_PRELOAD"));
        assert!(!is_allowed_env("path"));
    }
}
