//! Local servers as child processes: the sandbox, the environment allow-list, the process group,
//! stderr capture, and killing the whole group on close.
//!
//! Every server runs in the [sandbox](agentry_sandbox) given by its [`StdioLaunch`]: the user's
//! workspace is its working directory and the only writable place; a user's server gets the
//! tenant's limits and egress, a platform server (the operator's file) also sees its command and
//! `cwd` read-only. The child gets a **cleared** environment plus only the variables in
//! [`ENV_ALLOW_LIST`] (and any `LC_*`) copied from the Agentry process (`HOME` and `TMPDIR` are
//! the sandbox's), then the server's configured `env` on top. Everything else — API keys,
//! database URLs, `AGENTRY_*` — stays out of the child. The program is executed directly (no
//! shell), in its own process group, so that closing the connection can signal every process
//! the server started (`npx` → `node`, `uvx` → `python`).

use std::collections::VecDeque;
use std::process::Stdio;
use std::sync::{Arc, Mutex};

use std::path::PathBuf;

pub(crate) use agentry_sandbox::ProcessGroup;
use agentry_sandbox::{LaunchSpec, Owner, SandboxError, SandboxHandle, TenantSandbox};
use nix::sys::signal::killpg;
use nix::unistd::Pid;
use process_wrap::tokio::{ChildWrapper, CommandWrap};
use rmcp::RoleClient;
use rmcp::service::{RxJsonRpcMessage, TxJsonRpcMessage};
use rmcp::transport::Transport;
use rmcp::transport::async_rw::AsyncRwTransport;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{ChildStderr, ChildStdin, ChildStdout};

use super::handler::Shared;
use super::task_support::TapRead;

use super::config::StdioConfig;
use super::error::McpError;
use agentry_builtin::net_guard::GuardedResolver;

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
    pub transport: ChildTransport,
    pub process_group: Option<Arc<ProcessGroup>>,
    pub stderr: StderrTail,
}

/// Where a stdio server runs, and how an HTTP server may be reached.
#[derive(Debug, Clone)]
pub struct StdioLaunch {
    pub sandbox: SandboxHandle,
    /// The user's workspace: the server's working directory and its only writable place.
    pub workspace: PathBuf,
    /// The tenant's policy: tighter limits, egress.
    pub tenant: TenantSandbox,
    /// A platform server from the operator's file: its command and `cwd` are readable, and it
    /// gets network whenever `sandbox.egress` allows it.
    pub platform: bool,
    /// Recorded with the process group.
    pub owner: Owner,
    /// For an HTTP server: the resolver that checks every address before the client connects
    /// (users' servers; `None` for the operator's, which may live on private networks).
    pub http_guard: Option<Arc<GuardedResolver>>,
}

impl StdioLaunch {
    /// No isolation, in `workspace`: for operator tools (the conformance client) and tests.
    pub fn unconfined(workspace: PathBuf) -> Self {
        Self {
            sandbox: SandboxHandle::unconfined_for_tests(),
            workspace,
            tenant: TenantSandbox::default(),
            platform: true,
            owner: Owner::default(),
            http_guard: None,
        }
    }
}

/// Variables the sandbox sets itself.
const SANDBOX_OWNED: &[&str] = &["HOME", "TMPDIR"];

pub(crate) fn spawn(
    server: &str,
    cfg: &StdioConfig,
    launch: &StdioLaunch,
    shared: &Arc<Shared>,
) -> Result<SpawnedServer, McpError> {
    let failed = |reason: String| McpError::SpawnFailed {
        server: server.to_string(),
        command: cfg.command.clone(),
        reason,
    };
    std::fs::create_dir_all(&launch.workspace)
        .map_err(|e| failed(format!("preparing the workspace: {e}")))?;
    let mut env: Vec<(String, String)> = inherited_env()
        .into_iter()
        .filter(|(k, _)| !SANDBOX_OWNED.contains(&k.as_str()))
        .collect();
    for (k, v) in &cfg.env {
        env.retain(|(key, _)| key != k);
        env.push((k.clone(), v.expose().to_string()));
    }
    let mut read_only = Vec::new();
    if launch.platform {
        let command = PathBuf::from(&cfg.command);
        if command.is_absolute() {
            read_only.push(command);
        }
        read_only.extend(cfg.cwd.iter().cloned());
    }
    let spec = LaunchSpec {
        program: cfg.command.clone(),
        args: cfg.args.clone(),
        workspace: launch.workspace.clone(),
        cwd: cfg.cwd.clone(),
        env,
        read_only,
        limits: launch.tenant.limits,
        egress: launch.platform || launch.tenant.egress,
        owner: launch.owner.clone(),
        stdin: true,
    };
    let prepared = launch.sandbox.prepare(&spec).map_err(|e| match e {
        SandboxError::Unavailable(reason) => failed(format!(
            "stdio MCP servers cannot run on this server: {reason}"
        )),
        other => failed(other.to_string()),
    })?;
    let mut prepared = prepared;
    let command = std::mem::replace(&mut prepared.command, tokio::process::Command::new("true"));
    let (transport, stderr) =
        ChildTransport::spawn(CommandWrap::from(command), shared).map_err(|e| {
            failed(match e.kind() {
                std::io::ErrorKind::NotFound => {
                    format!("{e} (not found on the allowed PATH, or cwd missing)")
                }
                _ => e.to_string(),
            })
        })?;
    let process_group = prepared
        .started(transport.id())
        .map_err(|e| failed(e.to_string()))
        .ok();
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

/// How long a closed server may take to exit by itself, then after `SIGTERM`, before it is
/// killed (rmcp's child transport waits as long).
const EXIT_WAIT: std::time::Duration = std::time::Duration::from_secs(3);

/// The child process and the MCP stdio transport on its stdin/stdout: rmcp's
/// `TokioChildProcess`, except that stdout is read through a [`TapRead`], so the raw `tools/list`
/// answers are seen before rmcp parses them (it drops `execution.taskSupport`).
pub(crate) struct ChildTransport {
    /// Killed when dropped, if still there.
    child: Option<Box<dyn ChildWrapper>>,
    transport: AsyncRwTransport<RoleClient, TapRead<ChildStdout>, ChildStdin>,
}

impl ChildTransport {
    fn spawn(
        mut command: CommandWrap,
        shared: &Arc<Shared>,
    ) -> std::io::Result<(Self, Option<ChildStderr>)> {
        command
            .command_mut()
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = command.spawn()?;
        let stdin = child
            .inner_mut()
            .stdin()
            .take()
            .ok_or_else(|| std::io::Error::other("the child has no stdin"))?;
        let stdout = child
            .inner_mut()
            .stdout()
            .take()
            .ok_or_else(|| std::io::Error::other("the child has no stdout"))?;
        let stderr = child.inner_mut().stderr().take();
        let transport = AsyncRwTransport::new_client(TapRead::new(stdout, shared.clone()), stdin);
        Ok((
            ChildTransport {
                child: Some(child),
                transport,
            },
            stderr,
        ))
    }

    fn id(&self) -> Option<u32> {
        self.child.as_ref()?.id()
    }

    /// The MCP stdio shutdown: close stdin and wait for the server to exit; then `SIGTERM` and
    /// wait again; then kill it.
    async fn shutdown(&mut self) -> std::io::Result<()> {
        let Some(child) = self.child.as_mut() else {
            return Ok(());
        };
        self.transport.close().await?;
        async fn exited(child: &mut Box<dyn ChildWrapper>) -> bool {
            matches!(
                tokio::time::timeout(EXIT_WAIT, child.wait()).await,
                Ok(Ok(_))
            )
        }
        if exited(child).await {
            self.child = None;
            return Ok(());
        }
        if child.signal(nix::libc::SIGTERM).is_ok() && exited(child).await {
            self.child = None;
            return Ok(());
        }
        let r = Box::into_pin(child.kill()).await;
        self.child = None;
        r
    }
}

impl Drop for ChildTransport {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            // Reaped on a task: `kill` waits for the exit, so no zombie is left.
            if let Ok(rt) = tokio::runtime::Handle::try_current() {
                rt.spawn(async move {
                    let _ = Box::into_pin(child.kill()).await;
                });
            } else {
                let _ = child.start_kill();
            }
        }
    }
}

impl Transport<RoleClient> for ChildTransport {
    type Error = std::io::Error;

    fn send(
        &mut self,
        item: TxJsonRpcMessage<RoleClient>,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send + 'static {
        self.transport.send(item)
    }

    fn receive(&mut self) -> impl Future<Output = Option<RxJsonRpcMessage<RoleClient>>> + Send {
        self.transport.receive()
    }

    fn close(&mut self) -> impl Future<Output = Result<(), Self::Error>> + Send {
        self.shutdown()
    }
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
