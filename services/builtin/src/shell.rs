//! The `shell` service: `execute` runs one command line with `sh -c` in the workspace.
//!
//! - The command first passes the [`command_guard`](super::command_guard); a dangerous one is
//!   refused without running.
//! - It runs in the [sandbox](agentry_sandbox) (`BuiltinConfig::sandbox`): bubblewrap or
//!   Landlock, only the workspace writable, no network unless allowed, limits per process tree;
//!   in its own process group, recorded with its run and tool call, with a cleared environment
//!   (only `shell_env_passthrough`, plus `HOME` = the workspace), stdin closed. Without a
//!   working sandbox the call is refused with the reason.
//! - stdout and stderr are captured up to `shell_output_cap_bytes` together; the rest is
//!   drained and dropped, with a note.
//! - On timeout or cancellation the whole process group is killed; when the command ends, any
//!   process it left in its group is killed too, so nothing outlives the call.
//! - The call always needs approval: a shell is not jailed the way the file tools are.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use agentry_sandbox::{LaunchSpec, Owner, SandboxError};
use async_trait::async_trait;
use serde::Deserialize;
use serde_json::{Value, json};
use tokio::io::{AsyncRead, AsyncReadExt};

use super::command_guard::check_command;
use super::jail::{Jail, display};
use super::{BuiltinConfig, blocking, parse_args};
use agentry_tools::tool::{Tool, ToolContext, ToolError, ToolOutput, ToolSpec};

/// Commands longer than this are refused (a command line is not a place for data).
const MAX_COMMAND_BYTES: usize = 64 * 1024;
/// After the command exits, how long its output pipes may stay open before they are dropped.
const PIPE_GRACE: Duration = Duration::from_secs(2);

pub fn tools(cfg: &BuiltinConfig) -> Vec<Arc<dyn Tool>> {
    vec![Arc::new(Execute::new(cfg))]
}

pub struct Execute {
    spec: ToolSpec,
    cfg: Arc<BuiltinConfig>,
}

#[derive(Deserialize)]
struct ExecuteArgs {
    command: String,
    #[serde(default)]
    timeout_secs: Option<u64>,
    #[serde(default)]
    workdir: Option<String>,
}

impl Execute {
    pub fn new(cfg: &BuiltinConfig) -> Self {
        let spec = ToolSpec::new(
            "shell",
            "execute",
            "Run a shell command (sh -c) in the workspace directory and return its exit code, \
             stdout and stderr. Destructive commands (rm -rf, mkfs, dd, writes to devices, \
             shutdown, …) are refused. Every call needs the user's approval.",
            json!({
                "type": "object",
                "properties": {
                    "command": {"type": "string", "minLength": 1},
                    "timeout_secs": {"type": "integer", "minimum": 1, "maximum": cfg.shell_max_timeout_secs.max(1),
                                     "description": format!("Default {} s", cfg.shell_timeout_secs)},
                    "workdir": {"type": "string", "description": "Directory relative to the workspace root (default: the root)"}
                },
                "required": ["command"]
            }),
        )
        .with_approval(true)
        // The tool enforces its own timeout (and returns the partial output); the loop's is a
        // backstop a little later.
        .with_timeout(Duration::from_secs(cfg.shell_max_timeout_secs.max(1) + 10));
        Self {
            spec,
            cfg: Arc::new(cfg.clone()),
        }
    }
}

/// stdout and stderr, sharing one byte budget.
struct Capture {
    stdout: Vec<u8>,
    stderr: Vec<u8>,
    remaining: usize,
    dropped: u64,
}

async fn drain<R: AsyncRead + Unpin>(mut reader: R, capture: Arc<Mutex<Capture>>, is_stdout: bool) {
    let mut buf = [0u8; 8192];
    loop {
        match reader.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => {
                let mut c = capture.lock().unwrap_or_else(|p| p.into_inner());
                let keep = n.min(c.remaining);
                c.remaining -= keep;
                c.dropped += (n - keep) as u64;
                let target = if is_stdout {
                    &mut c.stdout
                } else {
                    &mut c.stderr
                };
                target.extend_from_slice(&buf[..keep]);
            }
        }
    }
}

enum Ending {
    Exited(std::process::ExitStatus),
    TimedOut,
    Cancelled,
}

#[async_trait]
impl Tool for Execute {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    async fn call(&self, args: Value, ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
        let args: ExecuteArgs = parse_args("execute", args)?;
        let command = args.command.trim().to_string();
        if command.is_empty() {
            return Err(ToolError::invalid("command must not be empty"));
        }
        if command.len() > MAX_COMMAND_BYTES {
            return Err(ToolError::invalid(format!(
                "the command is {} bytes, over the limit of {MAX_COMMAND_BYTES}",
                command.len()
            )));
        }
        check_command(&command).map_err(|e| ToolError::Refused(e.to_string()))?;
        let timeout = Duration::from_secs(
            args.timeout_secs
                .unwrap_or(self.cfg.shell_timeout_secs)
                .clamp(1, self.cfg.shell_max_timeout_secs.max(1)),
        );

        let workspace = ctx.workspace.clone();
        let workdir = args.workdir.clone();
        let (root, cwd, shown_cwd) = blocking(move || {
            let jail = Jail::open(&workspace)?;
            let rel = jail.resolve(workdir.as_deref().unwrap_or("."))?;
            let cwd = jail.absolute(&rel);
            if !cwd.is_dir() {
                return Err(ToolError::invalid(format!(
                    "workdir {} is not a directory",
                    display(&rel)
                )));
            }
            Ok((jail.canonical_root().to_path_buf(), cwd, display(&rel)))
        })
        .await?;

        let mut env: Vec<(String, String)> = self
            .cfg
            .shell_env_passthrough
            .iter()
            .filter_map(|k| std::env::var(k).ok().map(|v| (k.clone(), v)))
            .collect();
        if !env.iter().any(|(k, _)| k == "PATH") {
            env.push(("PATH".into(), "/usr/local/bin:/usr/bin:/bin".into()));
        }
        env.push(("HOME".into(), root.to_string_lossy().into_owned()));
        env.push(("PWD".into(), cwd.to_string_lossy().into_owned()));
        let spec = LaunchSpec {
            program: "sh".into(),
            args: vec!["-c".into(), command.clone()],
            workspace: root.clone(),
            cwd: Some(cwd.clone()),
            env,
            owner: Owner {
                kind: "execute".into(),
                tenant_id: Some(ctx.tenant_id.to_string()),
                user_id: Some(ctx.user_id.to_string()),
                run_id: Some(ctx.run_id.to_string()),
                tool_call_id: Some(ctx.tool_call_id.clone()),
            },
            limits: ctx.workspace.sandbox.limits,
            egress: ctx.workspace.sandbox.egress,
            ..LaunchSpec::default()
        };
        let mut prepared = self.cfg.sandbox.prepare(&spec).map_err(sandbox_error)?;

        let started = Instant::now();
        let mut child = prepared
            .command
            .spawn()
            .map_err(|e| ToolError::failed(format!("cannot start the command: {e}")))?;
        // Dropping the group (any return below, or this future being dropped by the loop's own
        // timeout) kills whatever is left of the command.
        let group = prepared.started(child.id()).map_err(sandbox_error)?;
        let capture = Arc::new(Mutex::new(Capture {
            stdout: Vec::new(),
            stderr: Vec::new(),
            remaining: self.cfg.shell_output_cap_bytes,
            dropped: 0,
        }));
        let mut readers = Vec::new();
        if let Some(out) = child.stdout.take() {
            readers.push(tokio::spawn(drain(out, capture.clone(), true)));
        }
        if let Some(err) = child.stderr.take() {
            readers.push(tokio::spawn(drain(err, capture.clone(), false)));
        }

        let ending = tokio::select! {
            status = child.wait() => match status {
                Ok(status) => Ending::Exited(status),
                Err(e) => {
                    group.release();
                    return Err(ToolError::failed(format!("waiting for the command failed: {e}")));
                }
            },
            _ = tokio::time::sleep(timeout) => Ending::TimedOut,
            _ = ctx.cancel.cancelled() => Ending::Cancelled,
        };
        // Whatever happened, nothing of this command may keep running.
        group.release();
        if !matches!(ending, Ending::Exited(_)) {
            let _ = child.wait().await;
        }
        for reader in readers {
            let abort = reader.abort_handle();
            if tokio::time::timeout(PIPE_GRACE, reader).await.is_err() {
                abort.abort();
            }
        }
        if matches!(ending, Ending::Cancelled) {
            return Err(ToolError::Cancelled);
        }

        let c = capture.lock().unwrap_or_else(|p| p.into_inner());
        let stdout = String::from_utf8_lossy(&c.stdout).into_owned();
        let stderr = String::from_utf8_lossy(&c.stderr).into_owned();
        let mut result = json!({
            "command": command,
            "workdir": shown_cwd,
            "stdout": stdout,
            "stderr": stderr,
            "truncated": c.dropped > 0,
            "duration_ms": started.elapsed().as_millis() as u64,
        });
        if c.dropped > 0 {
            result["note"] = json!(format!(
                "output cut at {} bytes; {} more bytes were dropped",
                self.cfg.shell_output_cap_bytes, c.dropped
            ));
        }
        match ending {
            Ending::Exited(status) => {
                result["exit_code"] = json!(status.code());
                if status.code().is_none() {
                    use std::os::unix::process::ExitStatusExt;
                    result["signal"] = json!(status.signal());
                }
                result["timed_out"] = json!(false);
                Ok(if status.success() {
                    ToolOutput::ok(result)
                } else {
                    ToolOutput::failed(result)
                })
            }
            Ending::TimedOut => {
                result["exit_code"] = Value::Null;
                result["timed_out"] = json!(true);
                result["error"] = json!(format!(
                    "the command did not finish within {} s and was killed",
                    timeout.as_secs()
                ));
                Ok(ToolOutput::failed(result))
            }
            Ending::Cancelled => Err(ToolError::Cancelled),
        }
    }
}

/// A launch the sandbox refuses is refused, with its reason (which backend failed and why).
fn sandbox_error(e: SandboxError) -> ToolError {
    match e {
        SandboxError::Unavailable(reason) => {
            ToolError::Refused(format!("commands cannot run on this server: {reason}"))
        }
        SandboxError::InvalidSpec(m) => ToolError::invalid(m),
        SandboxError::Setup(m) => ToolError::failed(m),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::ctx;

    /// Unit tests run commands unconfined (the launcher is the `agentry` binary); the sandbox
    /// itself is tested in `services/sandbox` and end to end.
    fn execute(cfg: &BuiltinConfig) -> Execute {
        Execute::new(&BuiltinConfig {
            sandbox: agentry_sandbox::SandboxHandle::unconfined_for_tests(),
            ..cfg.clone()
        })
    }

    #[tokio::test]
    async fn without_a_sandbox_commands_are_refused_with_the_reason() {
        let tmp = tempfile::tempdir().unwrap();
        let ctx = ctx(tmp.path());
        let err = Execute::new(&BuiltinConfig::default())
            .call(json!({"command": "touch ran"}), &ctx)
            .await
            .unwrap_err();
        assert!(
            matches!(&err, ToolError::Refused(m) if m.contains("no sandbox was set up")),
            "{err:?}"
        );
        assert!(!tmp.path().join("ran").exists());
    }

    #[tokio::test]
    async fn runs_in_the_workspace_and_reports_the_exit_code() {
        let tmp = tempfile::tempdir().unwrap();
        let ctx = ctx(tmp.path());
        let tool = execute(&BuiltinConfig::default());
        let out = tool
            .call(
                json!({"command": "pwd; echo out; echo err >&2; printf x > made.txt"}),
                &ctx,
            )
            .await
            .unwrap();
        assert!(!out.is_error);
        assert_eq!(out.content["exit_code"], 0);
        let canonical = tmp.path().canonicalize().unwrap();
        assert_eq!(
            out.content["stdout"],
            format!("{}\nout\n", canonical.display())
        );
        assert_eq!(out.content["stderr"], "err\n");
        assert_eq!(
            std::fs::read_to_string(tmp.path().join("made.txt")).unwrap(),
            "x"
        );

        let out = tool.call(json!({"command": "exit 3"}), &ctx).await.unwrap();
        assert!(out.is_error);
        assert_eq!(out.content["exit_code"], 3);
    }

    #[tokio::test]
    async fn the_environment_is_cleared_except_the_passthrough() {
        let tmp = tempfile::tempdir().unwrap();
        let ctx = ctx(tmp.path());
        // Some variable of the test process that is not passed through must not reach the
        // command; PATH, which is, must arrive unchanged.
        let (leak, _) = std::env::vars()
            .find(|(k, _)| k != "PATH" && k.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'))
            .expect("the test process has some environment");
        let cfg = BuiltinConfig {
            shell_env_passthrough: vec!["PATH".into()],
            ..BuiltinConfig::default()
        };
        let out = execute(&cfg)
            .call(
                json!({"command": format!("echo \"[$PATH][${{{leak}:-unset}}][$HOME]\"")}),
                &ctx,
            )
            .await
            .unwrap();
        let canonical = tmp.path().canonicalize().unwrap();
        assert_eq!(
            out.content["stdout"],
            format!(
                "[{}][unset][{}]\n",
                std::env::var("PATH").unwrap(),
                canonical.display()
            )
        );
    }

    #[tokio::test]
    async fn dangerous_commands_are_refused_without_running() {
        let tmp = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(tmp.path().join("keep")).unwrap();
        let ctx = ctx(tmp.path());
        let err = execute(&BuiltinConfig::default())
            .call(json!({"command": "rm -rf keep"}), &ctx)
            .await
            .unwrap_err();
        assert!(
            matches!(&err, ToolError::Refused(m) if m.contains("rm_recursive_force")),
            "{err:?}"
        );
        assert!(tmp.path().join("keep").is_dir());
    }

    #[tokio::test]
    async fn output_is_capped_with_a_note() {
        let tmp = tempfile::tempdir().unwrap();
        let ctx = ctx(tmp.path());
        let cfg = BuiltinConfig {
            shell_output_cap_bytes: 100,
            ..BuiltinConfig::default()
        };
        let out = execute(&cfg)
            .call(
                json!({"command": "head -c 100000 /dev/zero | tr '\\0' a"}),
                &ctx,
            )
            .await
            .unwrap();
        assert_eq!(out.content["stdout"].as_str().unwrap(), "a".repeat(100));
        assert_eq!(out.content["truncated"], true);
        assert!(
            out.content["note"]
                .as_str()
                .unwrap()
                .contains("99900 more bytes")
        );
        assert_eq!(out.content["exit_code"], 0);
    }

    #[tokio::test]
    async fn a_timeout_kills_the_whole_process_group() {
        let tmp = tempfile::tempdir().unwrap();
        let ctx = ctx(tmp.path());
        let started = Instant::now();
        // The background child would create `late` after 3 s if it survived the kill.
        let out = execute(&BuiltinConfig::default())
            .call(
                json!({"command": "(sleep 3; touch late) & echo started; sleep 30", "timeout_secs": 1}),
                &ctx,
            )
            .await
            .unwrap();
        assert!(out.is_error);
        assert_eq!(out.content["timed_out"], true);
        assert_eq!(out.content["exit_code"], Value::Null);
        assert_eq!(out.content["stdout"], "started\n");
        assert!(
            started.elapsed() < Duration::from_secs(15),
            "{:?}",
            started.elapsed()
        );
        tokio::time::sleep(Duration::from_secs(4)).await;
        assert!(
            !tmp.path().join("late").exists(),
            "a process of the group survived"
        );
    }

    #[tokio::test]
    async fn cancellation_kills_the_command_promptly() {
        let tmp = tempfile::tempdir().unwrap();
        let ctx = ctx(tmp.path());
        let cancel = ctx.cancel.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(300)).await;
            cancel.cancel();
        });
        let started = Instant::now();
        let err = execute(&BuiltinConfig::default())
            .call(json!({"command": "sleep 30; touch late"}), &ctx)
            .await
            .unwrap_err();
        assert_eq!(err, ToolError::Cancelled);
        assert!(started.elapsed() < Duration::from_secs(10));
        tokio::time::sleep(Duration::from_millis(500)).await;
        assert!(!tmp.path().join("late").exists());
    }

    #[tokio::test]
    async fn background_processes_do_not_outlive_the_command() {
        let tmp = tempfile::tempdir().unwrap();
        let ctx = ctx(tmp.path());
        let started = Instant::now();
        let out = execute(&BuiltinConfig::default())
            .call(
                json!({"command": "(sleep 2; touch late) & echo done"}),
                &ctx,
            )
            .await
            .unwrap();
        assert_eq!(out.content["stdout"], "done\n");
        assert!(started.elapsed() < Duration::from_secs(10));
        tokio::time::sleep(Duration::from_secs(3)).await;
        assert!(!tmp.path().join("late").exists());
    }

    #[tokio::test]
    async fn workdir_is_jailed() {
        let tmp = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(tmp.path().join("ws/sub")).unwrap();
        let ctx = ctx(&tmp.path().join("ws"));
        let tool = execute(&BuiltinConfig::default());
        let out = tool
            .call(json!({"command": "pwd", "workdir": "sub"}), &ctx)
            .await
            .unwrap();
        assert!(
            out.content["stdout"]
                .as_str()
                .unwrap()
                .ends_with("/ws/sub\n")
        );
        let err = tool
            .call(json!({"command": "pwd", "workdir": ".."}), &ctx)
            .await
            .unwrap_err();
        assert!(matches!(err, ToolError::Refused(_)), "{err:?}");
    }

    #[test]
    fn execute_always_needs_approval() {
        let tool = execute(&BuiltinConfig::default());
        assert!(tool.spec().requires_approval);
        assert!(tool.needs_approval(&json!({"command": "ls"})));
    }
}
