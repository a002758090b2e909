//! The launcher: `agentry sandbox-exec --spec JSON -- PROGRAM ARGS…`.
//!
//! The server cannot restrict a child between `fork` and `exec` without `unsafe` (`pre_exec`),
//! so it starts this launcher instead, which restricts **itself** and then runs the command:
//!
//! 1. `setsid`: a new session and process group (pgid = its pid), away from the server's
//!    terminal;
//! 2. joins the launch's pids cgroup, when the server made one (the process limit);
//! 3. sets the rlimits (CPU, address space, file size, open files, processes, no core dumps);
//! 4. `landlock` mode: Landlock rules (workspace read-write, system read-only, nothing else; TCP
//!    off without egress; no signals or abstract sockets out of the sandbox), no capabilities,
//!    `PR_SET_NO_NEW_PRIVS`, a seccomp filter; then `exec`s the command;
//! 5. `bwrap` mode: runs bubblewrap (through a second launcher that sets the limits and execs
//!    it) as its own child and waits, so bwrap's `--die-with-parent` is tied to this
//!    single-threaded launcher, not to whichever server thread spawned it;
//! 6. `none` mode: `exec`s the command with the limits only.
//!
//! Its environment is already the allow-list (the server cleared the rest).

use std::ffi::OsString;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::PathBuf;
use std::process::ExitCode;

use serde::{Deserialize, Serialize};

use crate::config::Limits;

/// What the launcher does, as the server serialized it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LauncherSpec {
    pub mode: LaunchMode,
    pub limits: Limits,
    /// A cgroup directory to join (its `pids.max` is already set).
    pub cgroup: Option<PathBuf>,
    /// Where the command starts (landlock and none; bwrap has `--chdir`).
    pub cwd: PathBuf,
    /// Already in a pids cgroup (the inner launcher of bwrap mode).
    #[serde(default)]
    pub in_cgroup: bool,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum LaunchMode {
    /// The command is bwrap with its options: run it as a child and wait.
    Bwrap,
    Landlock(crate::landlock::Rules),
    None,
}

/// Exit codes of the launcher itself (the command's own code is passed through).
pub const EXIT_SETUP_FAILED: u8 = 125;
pub const EXIT_CANNOT_EXEC: u8 = 126;
pub const EXIT_NOT_FOUND: u8 = 127;

/// Entry point of `agentry sandbox-exec`; `args` are the arguments after `sandbox-exec`.
pub fn main(args: Vec<OsString>) -> ExitCode {
    match run(args) {
        Ok(code) => code,
        Err((code, msg)) => {
            eprintln!("agentry sandbox-exec: {msg}");
            ExitCode::from(code)
        }
    }
}

fn run(args: Vec<OsString>) -> Result<ExitCode, (u8, String)> {
    let fail = |m: String| (EXIT_SETUP_FAILED, m);
    let mut it = args.into_iter();
    if it.next().as_deref() != Some("--spec".as_ref()) {
        return Err(fail(
            "usage: sandbox-exec --spec JSON -- PROGRAM [ARGS…]".into(),
        ));
    }
    let spec = it
        .next()
        .and_then(|s| s.into_string().ok())
        .ok_or_else(|| fail("--spec needs a JSON value".into()))?;
    let spec: LauncherSpec =
        serde_json::from_str(&spec).map_err(|e| fail(format!("bad --spec: {e}")))?;
    if it.next().as_deref() != Some("--".as_ref()) {
        return Err(fail("expected -- before the program".into()));
    }
    let program = it.next().ok_or_else(|| fail("no program given".into()))?;
    let rest: Vec<OsString> = it.collect();

    // A new session; fails only when already a group leader, which is as good.
    let _ = nix::unistd::setsid();
    if let Some(cg) = &spec.cgroup {
        std::fs::write(cg.join("cgroup.procs"), std::process::id().to_string())
            .map_err(|e| fail(format!("joining the cgroup {}: {e}", cg.display())))?;
    }
    let mut cmd = std::process::Command::new(&program);
    cmd.args(&rest);
    if !matches!(spec.mode, LaunchMode::Bwrap) {
        // With a cgroup the process count is its `pids.max`; RLIMIT_NPROC would count every
        // process of the uid (the server's threads too), so it is the fallback only. (The inner
        // launcher of bwrap mode has no cgroup of its own but is in its parent's.)
        set_limits(&spec.limits, spec.cgroup.is_none() && !spec.in_cgroup).map_err(fail)?;
    }
    match &spec.mode {
        LaunchMode::Bwrap => {
            // bwrap runs as this launcher's child so its `--die-with-parent` is tied to this
            // single-threaded process. The limits cannot be set here first: spawning from a
            // process that already exceeds the address-space limit fails. A second launcher
            // (`none` mode) sets them and execs bwrap.
            let me = std::env::current_exe()
                .map_err(|e| fail(format!("cannot find the launcher itself: {e}")))?;
            let inner = LauncherSpec {
                mode: LaunchMode::None,
                in_cgroup: spec.cgroup.is_some(),
                cgroup: None,
                ..spec.clone()
            };
            let inner = serde_json::to_string(&inner)
                .map_err(|e| fail(format!("encoding the inner launch: {e}")))?;
            let status = std::process::Command::new(me)
                .arg(crate::LAUNCHER_SUBCOMMAND)
                .arg("--spec")
                .arg(inner)
                .arg("--")
                .arg(&program)
                .args(&rest)
                .status()
                .map_err(|e| exec_error(&program, &e))?;
            return Ok(match (status.code(), status.signal()) {
                (Some(c), _) => ExitCode::from(u8::try_from(c).unwrap_or(1)),
                (None, Some(sig)) => ExitCode::from(128u8.saturating_add(sig as u8)),
                _ => ExitCode::FAILURE,
            });
        }
        LaunchMode::Landlock(rules) => {
            std::env::set_current_dir(&spec.cwd)
                .map_err(|e| fail(format!("cwd {}: {e}", spec.cwd.display())))?;
            crate::landlock::restrict_self(rules).map_err(fail)?;
        }
        LaunchMode::None => {
            std::env::set_current_dir(&spec.cwd)
                .map_err(|e| fail(format!("cwd {}: {e}", spec.cwd.display())))?;
        }
    }
    // Only returns on failure.
    let e = cmd.exec();
    Err(exec_error(&program, &e))
}

fn exec_error(program: &OsString, e: &std::io::Error) -> (u8, String) {
    let code = if e.kind() == std::io::ErrorKind::NotFound {
        EXIT_NOT_FOUND
    } else {
        EXIT_CANNOT_EXEC
    };
    (
        code,
        format!("cannot run {}: {e}", program.to_string_lossy()),
    )
}

fn set_limits(l: &Limits, nproc: bool) -> Result<(), String> {
    use nix::sys::resource::{Resource, setrlimit};
    for (what, res, v) in [
        ("cpu_secs", Resource::RLIMIT_CPU, l.cpu_secs),
        ("memory_bytes", Resource::RLIMIT_AS, l.memory_bytes),
        ("max_file_bytes", Resource::RLIMIT_FSIZE, l.max_file_bytes),
        ("max_open_files", Resource::RLIMIT_NOFILE, l.max_open_files),
        ("max_processes", Resource::RLIMIT_NPROC, l.max_processes),
        ("core dumps", Resource::RLIMIT_CORE, 0),
    ] {
        if matches!(res, Resource::RLIMIT_NPROC) && !nproc {
            continue;
        }
        // The soft limit a notch below the hard one for CPU, so SIGXCPU comes before SIGKILL.
        let soft = if matches!(res, Resource::RLIMIT_CPU) {
            v.saturating_sub(1).max(1)
        } else {
            v
        };
        setrlimit(res, soft, v).map_err(|e| format!("setting {what} to {v}: {e}"))?;
    }
    Ok(())
}
