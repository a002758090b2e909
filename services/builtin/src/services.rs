//! The `services` service: get_service_status, start_service, stop_service, restart_service
//! through `systemctl` (seed 004 §3.5, property 17).
//!
//! `systemctl` is run directly (no shell) with a validated unit name after `--`. Where the host
//! has no systemd (a container, say), the answer is status `unknown` with the reason. Changing
//! a service always needs approval; so does any tool on `sshd`/`ssh`, `systemd*` or `dbus*`.

use std::process::Stdio;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use async_trait::async_trait;
use regex::Regex;
use serde::Deserialize;
use serde_json::{Value, json};
use tokio::process::Command;

use super::{BuiltinConfig, parse_args};
use agentry_tools::tool::{Tool, ToolContext, ToolError, ToolOutput, ToolSpec};

const SERVICE: &str = "services";

pub fn tools(cfg: &BuiltinConfig) -> Vec<Arc<dyn Tool>> {
    let cfg = Arc::new(cfg.clone());
    vec![
        Arc::new(ServiceTool::new(Action::Status, cfg.clone())),
        Arc::new(ServiceTool::new(Action::Start, cfg.clone())),
        Arc::new(ServiceTool::new(Action::Stop, cfg.clone())),
        Arc::new(ServiceTool::new(Action::Restart, cfg)),
    ]
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Action {
    Status,
    Start,
    Stop,
    Restart,
}

impl Action {
    fn tool_name(self) -> &'static str {
        match self {
            Action::Status => "get_service_status",
            Action::Start => "start_service",
            Action::Stop => "stop_service",
            Action::Restart => "restart_service",
        }
    }

    fn verb(self) -> &'static str {
        match self {
            Action::Status => "status",
            Action::Start => "start",
            Action::Stop => "stop",
            Action::Restart => "restart",
        }
    }
}

/// Units whose every tool needs a human: losing them loses the machine.
pub fn is_sensitive_service(name: &str) -> bool {
    let n = name.trim().to_ascii_lowercase();
    let n = n
        .strip_suffix(".service")
        .or_else(|| n.strip_suffix(".socket"))
        .unwrap_or(&n);
    n == "sshd"
        || n == "ssh"
        || n.starts_with("sshd@")
        || n.starts_with("systemd")
        || n.starts_with("dbus")
}

fn validate_name(name: &str) -> Result<(), ToolError> {
    static RE: OnceLock<Regex> = OnceLock::new();
    let re = RE.get_or_init(|| {
        Regex::new(r"^[A-Za-z0-9][A-Za-z0-9_.@:\\-]{0,254}$").expect("constant pattern compiles")
    });
    if re.is_match(name) {
        Ok(())
    } else {
        Err(ToolError::invalid(format!(
            "{name:?} is not a valid service name (letters, digits and _ . @ : - \\ only, not \
             starting with a symbol)"
        )))
    }
}

pub struct ServiceTool {
    spec: ToolSpec,
    action: Action,
    cfg: Arc<BuiltinConfig>,
}

#[derive(Deserialize)]
struct ServiceArgs {
    service_name: String,
}

impl ServiceTool {
    fn new(action: Action, cfg: Arc<BuiltinConfig>) -> Self {
        let description = match action {
            Action::Status => {
                "Get the status of a systemd service: running, stopped or unknown, with its active and sub state."
            }
            Action::Start => "Start a systemd service. Needs approval.",
            Action::Stop => "Stop a systemd service. Needs approval.",
            Action::Restart => "Restart a systemd service. Needs approval.",
        };
        let spec = ToolSpec::new(
            SERVICE,
            action.tool_name(),
            description,
            json!({
                "type": "object",
                "properties": {
                    "service_name": {"type": "string", "minLength": 1, "maxLength": 255,
                                     "description": "Unit name, e.g. nginx or nginx.service"}
                },
                "required": ["service_name"]
            }),
        )
        .with_approval(action != Action::Status)
        .with_timeout(Duration::from_secs(cfg.service_timeout_secs.max(1) * 2 + 5));
        Self { spec, action, cfg }
    }

    async fn systemctl(&self, args: &[&str]) -> Result<SystemctlRun, ToolError> {
        let mut cmd = Command::new(&self.cfg.systemctl_path);
        cmd.args(args)
            .env_clear()
            .env(
                "PATH",
                std::env::var("PATH").unwrap_or_else(|_| "/usr/bin:/bin".into()),
            )
            .env("LC_ALL", "C")
            .env("SYSTEMD_COLORS", "0")
            .env("SYSTEMD_PAGER", "")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        let timeout = Duration::from_secs(self.cfg.service_timeout_secs.max(1));
        let child = match cmd.spawn() {
            Ok(child) => child,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Ok(SystemctlRun::NoSystemd(format!(
                    "{} is not installed on this host (no systemd)",
                    self.cfg.systemctl_path
                )));
            }
            Err(e) => return Err(ToolError::failed(format!("cannot run systemctl: {e}"))),
        };
        let out = tokio::time::timeout(timeout, child.wait_with_output())
            .await
            .map_err(|_| ToolError::Timeout(timeout))?
            .map_err(|e| ToolError::failed(format!("systemctl failed: {e}")))?;
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        let stderr = String::from_utf8_lossy(&out.stderr).trim().to_string();
        if !out.status.success()
            && (stderr.contains("not been booted with systemd")
                || stderr.contains("Failed to connect to bus")
                || stderr.contains("Failed to connect to system scope bus"))
        {
            return Ok(SystemctlRun::NoSystemd(format!(
                "no systemd on this host: {}",
                stderr.lines().next().unwrap_or(&stderr)
            )));
        }
        Ok(SystemctlRun::Ran {
            code: out.status.code(),
            stdout,
            stderr,
        })
    }

    async fn status(&self, name: &str) -> Result<Value, ToolError> {
        let run = self
            .systemctl(&[
                "show",
                "--no-pager",
                "--property=LoadState,ActiveState,SubState,Description,MainPID,UnitFileState",
                "--",
                name,
            ])
            .await?;
        Ok(match run {
            SystemctlRun::NoSystemd(reason) => json!({
                "service": name,
                "status": "unknown",
                "reason": reason,
            }),
            SystemctlRun::Ran {
                code,
                stdout,
                stderr,
            } => {
                if code != Some(0) {
                    return Ok(json!({
                        "service": name,
                        "status": "unknown",
                        "reason": format!("systemctl show failed: {stderr}"),
                    }));
                }
                let prop = |key: &str| {
                    stdout
                        .lines()
                        .find_map(|l| l.strip_prefix(key).and_then(|r| r.strip_prefix('=')))
                        .unwrap_or("")
                        .to_string()
                };
                let load = prop("LoadState");
                let active = prop("ActiveState");
                if load == "not-found" {
                    return Ok(json!({
                        "service": name,
                        "status": "unknown",
                        "reason": format!("there is no unit named {name}"),
                        "load_state": load,
                    }));
                }
                let status = match active.as_str() {
                    "active" | "reloading" | "deactivating" => "running",
                    "inactive" | "failed" => "stopped",
                    _ => "unknown",
                };
                let main_pid: u64 = prop("MainPID").parse().unwrap_or(0);
                json!({
                    "service": name,
                    "status": status,
                    "active_state": active,
                    "sub_state": prop("SubState"),
                    "load_state": load,
                    "unit_file_state": prop("UnitFileState"),
                    "description": prop("Description"),
                    "main_pid": if main_pid == 0 { Value::Null } else { json!(main_pid) },
                    "failed": active == "failed",
                })
            }
        })
    }
}

enum SystemctlRun {
    NoSystemd(String),
    Ran {
        code: Option<i32>,
        stdout: String,
        stderr: String,
    },
}

#[async_trait]
impl Tool for ServiceTool {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    fn needs_approval(&self, args: &Value) -> bool {
        self.spec.requires_approval
            || args
                .get("service_name")
                .and_then(Value::as_str)
                .is_some_and(is_sensitive_service)
    }

    async fn call(&self, args: Value, _ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
        let args: ServiceArgs = parse_args(self.action.tool_name(), args)?;
        let name = args.service_name.trim().to_string();
        validate_name(&name)?;
        if self.action == Action::Status {
            return Ok(ToolOutput::ok(self.status(&name).await?));
        }
        let verb = self.action.verb();
        match self
            .systemctl(&["--no-ask-password", verb, "--", &name])
            .await?
        {
            SystemctlRun::NoSystemd(reason) => Ok(ToolOutput::failed(json!({
                "service": name,
                "action": verb,
                "status": "unknown",
                "error_message": format!("cannot {verb} {name}: {reason}"),
            }))),
            SystemctlRun::Ran { code, stderr, .. } => {
                let mut status = self.status(&name).await?;
                status["action"] = json!(verb);
                if code == Some(0) {
                    status["result"] = json!("ok");
                    Ok(ToolOutput::ok(status))
                } else {
                    status["result"] = json!("failed");
                    status["exit_code"] = json!(code);
                    status["error_message"] = json!(if stderr.is_empty() {
                        format!("systemctl {verb} {name} failed")
                    } else {
                        stderr
                    });
                    Ok(ToolOutput::failed(status))
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::ctx;
    use std::os::unix::fs::PermissionsExt;

    fn tool(action: Action, cfg: &BuiltinConfig) -> ServiceTool {
        ServiceTool::new(action, Arc::new(cfg.clone()))
    }

    /// A stand-in `systemctl` (a real program) that knows one unit, `web`, and logs its calls.
    fn fake_systemctl(dir: &std::path::Path) -> BuiltinConfig {
        let script = dir.join("systemctl");
        let log = dir.join("calls.log");
        std::fs::write(
            &script,
            format!(
                r#"#!/bin/sh
echo "$@" >> {log}
state_file={dir}/state
[ -f "$state_file" ] || echo inactive > "$state_file"
for last; do :; done
case "$*" in
  *show*)
    if [ "$last" = web ]; then
      echo "LoadState=loaded"; echo "ActiveState=$(cat $state_file)"; echo "SubState=running"
      echo "Description=Web server"; echo "MainPID=4242"; echo "UnitFileState=enabled"
    else
      echo "LoadState=not-found"; echo "ActiveState=inactive"; echo "SubState=dead"; echo "MainPID=0"
    fi ;;
  *start*) if [ "$last" = web ]; then echo active > "$state_file"; else echo "Unit $last.service not found." >&2; exit 5; fi ;;
  *stop*) echo inactive > "$state_file" ;;
esac
"#,
                log = log.display(),
                dir = dir.display()
            ),
        )
        .unwrap();
        std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
        BuiltinConfig {
            systemctl_path: script.display().to_string(),
            ..BuiltinConfig::default()
        }
    }

    #[tokio::test]
    async fn without_systemd_the_status_is_unknown_with_the_reason() {
        let tmp = tempfile::tempdir().unwrap();
        // This machine is a container without systemd; a host with systemd would report the
        // unit's real state instead, which the fake-systemctl tests cover.
        let booted = std::path::Path::new("/run/systemd/system").exists();
        let out = tool(Action::Status, &BuiltinConfig::default())
            .call(json!({"service_name": "cron"}), &ctx(tmp.path()))
            .await
            .unwrap();
        let status = out.content["status"].as_str().unwrap();
        assert!(["running", "stopped", "unknown"].contains(&status));
        if !booted {
            assert_eq!(status, "unknown");
            assert!(
                out.content["reason"].as_str().unwrap().contains("systemd"),
                "{}",
                out.content
            );
        }
        let missing = BuiltinConfig {
            systemctl_path: "/nonexistent/systemctl".into(),
            ..BuiltinConfig::default()
        };
        let out = tool(Action::Restart, &missing)
            .call(json!({"service_name": "nginx"}), &ctx(tmp.path()))
            .await
            .unwrap();
        assert!(out.is_error);
        assert_eq!(out.content["status"], "unknown");
        assert!(
            out.content["error_message"]
                .as_str()
                .unwrap()
                .contains("not installed")
        );
    }

    #[tokio::test]
    async fn status_start_and_stop_go_through_systemctl() {
        let tmp = tempfile::tempdir().unwrap();
        let cfg = fake_systemctl(tmp.path());
        let c = ctx(&tmp.path().join("ws"));
        let out = tool(Action::Status, &cfg)
            .call(json!({"service_name": "web"}), &c)
            .await
            .unwrap();
        assert_eq!(out.content["status"], "stopped");
        assert_eq!(out.content["description"], "Web server");
        assert_eq!(out.content["main_pid"], 4242);

        let out = tool(Action::Start, &cfg)
            .call(json!({"service_name": "web"}), &c)
            .await
            .unwrap();
        assert!(!out.is_error);
        assert_eq!(out.content["result"], "ok");
        assert_eq!(out.content["status"], "running");

        let out = tool(Action::Stop, &cfg)
            .call(json!({"service_name": "web"}), &c)
            .await
            .unwrap();
        assert_eq!(out.content["status"], "stopped");

        let out = tool(Action::Status, &cfg)
            .call(json!({"service_name": "ghost"}), &c)
            .await
            .unwrap();
        assert_eq!(out.content["status"], "unknown");
        assert!(out.content["reason"].as_str().unwrap().contains("no unit"));

        let out = tool(Action::Start, &cfg)
            .call(json!({"service_name": "ghost"}), &c)
            .await
            .unwrap();
        assert!(out.is_error);
        assert_eq!(out.content["exit_code"], 5);
        assert!(
            out.content["error_message"]
                .as_str()
                .unwrap()
                .contains("not found")
        );

        let calls = std::fs::read_to_string(tmp.path().join("calls.log")).unwrap();
        assert!(calls.contains("--no-ask-password start -- web"), "{calls}");
    }

    #[tokio::test]
    async fn bad_names_are_refused_before_systemctl_runs() {
        let tmp = tempfile::tempdir().unwrap();
        let cfg = fake_systemctl(tmp.path());
        for bad in [
            "--all",
            "-H host",
            "web; reboot",
            "a b",
            "",
            "../x",
            "$(id)",
        ] {
            let err = tool(Action::Status, &cfg)
                .call(json!({"service_name": bad}), &ctx(tmp.path()))
                .await
                .unwrap_err();
            assert!(
                matches!(err, ToolError::InvalidArguments { .. }),
                "{bad}: {err:?}"
            );
        }
        assert!(!tmp.path().join("calls.log").exists());
    }

    #[test]
    fn sensitive_services_always_need_approval() {
        let cfg = BuiltinConfig::default();
        let status = tool(Action::Status, &cfg);
        assert!(!status.needs_approval(&json!({"service_name": "nginx"})));
        for name in [
            "sshd",
            "ssh.service",
            "systemd-journald",
            "systemd-logind.service",
            "dbus",
            "dbus-broker.service",
            "SSHD",
        ] {
            assert!(
                status.needs_approval(&json!({"service_name": name})),
                "{name}"
            );
        }
        for action in [Action::Start, Action::Stop, Action::Restart] {
            assert!(tool(action, &cfg).needs_approval(&json!({"service_name": "nginx"})));
        }
    }
}
