//! The launcher: `agentry sandbox-exec --spec JSON -- PROGRAM ARGS…`.
//!
//! The server cannot restrict a child between `fork` and `exec` without `unsafe` (`pre_exec`),
//! so it starts this launcher instead. The launch is two processes of the same binary:
//!
//! 1. The **outer launcher** (the spec names the server's pid) is the launch's anchor:
//!    - `setsid`: a new session and process group (pgid = its pid), away from the server's
//!      terminal;
//!    - joins the launch's pids cgroup, when the server made one (the process limit);
//!    - becomes a child subreaper, so every process of the launch stays below it even when its
//!      parent exits (a double fork, a `setsid`) and can be found from the parent links;
//!    - starts the inner launcher as its child and waits, watching **the server process**
//!      through a pidfd (a process, not the thread that happened to spawn the launcher, which is
//!      what `PR_SET_PDEATHSIG` would watch). When the server is gone — `kill -9`, an OOM kill,
//!      a crash — it kills every process of the launch (its descendants, its process group, its
//!      cgroup) and exits; when the program exits, it kills what the program left behind and
//!      passes the program's exit status on.
//!
//!    It restricts nothing of itself: it runs no tenant code, and the program cannot signal it
//!    (bwrap: another pid namespace; landlock: the signal scope).
//! 2. The **inner launcher** restricts itself and `exec`s:
//!    - sets the rlimits (CPU, address space, file size, open files, processes, no core dumps);
//!    - `landlock` mode: Landlock rules (workspace read-write, system read-only, nothing else;
//!      TCP off without egress; no signals or abstract sockets out of the sandbox), no
//!      capabilities, `PR_SET_NO_NEW_PRIVS`, a seccomp filter; then `exec`s the command;
//!    - `bwrap` mode: `exec`s bubblewrap, whose `--die-with-parent` is then tied to the
//!      single-threaded outer launcher;
//!    - `none` mode: `exec`s the command with the limits only.
//!
//! Its environment is already the allow-list (the server cleared the rest).

use std::ffi::OsString;
use std::os::unix::process::CommandExt;
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
    /// Already in a pids cgroup (the inner launcher).
    #[serde(default)]
    pub in_cgroup: bool,
    /// The server that started the launch: this is the outer launcher, which watches it (see
    /// the module docs). `None`: the inner launcher, which restricts itself and `exec`s.
    #[serde(default)]
    pub server_pid: Option<u32>,
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

    match spec.server_pid {
        Some(server) => supervise(&spec, server, &program, &rest),
        None => restrict_and_exec(&spec, &program, &rest),
    }
}

/// The inner launcher: limits, then the backend's restrictions, then `exec`.
fn restrict_and_exec(
    spec: &LauncherSpec,
    program: &OsString,
    rest: &[OsString],
) -> Result<ExitCode, (u8, String)> {
    let fail = |m: String| (EXIT_SETUP_FAILED, m);
    // With a cgroup the process count is its `pids.max`; RLIMIT_NPROC would count every process
    // of the uid (the server's threads too), so it is the fallback only.
    set_limits(&spec.limits, spec.cgroup.is_none() && !spec.in_cgroup).map_err(fail)?;
    std::env::set_current_dir(&spec.cwd)
        .map_err(|e| fail(format!("cwd {}: {e}", spec.cwd.display())))?;
    if let LaunchMode::Landlock(rules) = &spec.mode {
        crate::landlock::restrict_self(rules).map_err(fail)?;
    }
    // Only returns on failure.
    let e = std::process::Command::new(program).args(rest).exec();
    Err(exec_error(program, &e))
}

/// The outer launcher: anchor the launch, run the inner launcher, and make sure nothing of the
/// launch outlives either the program or the server.
fn supervise(
    spec: &LauncherSpec,
    server: u32,
    program: &OsString,
    rest: &[OsString],
) -> Result<ExitCode, (u8, String)> {
    use nix::sys::signal::{SigSet, Signal};
    use nix::sys::signalfd::{SfdFlags, SignalFd};

    let fail = |m: String| (EXIT_SETUP_FAILED, m);
    // A new session; fails only when already a group leader, which is as good.
    let _ = nix::unistd::setsid();
    if let Some(cg) = &spec.cgroup {
        std::fs::write(cg.join("cgroup.procs"), std::process::id().to_string())
            .map_err(|e| fail(format!("joining the cgroup {}: {e}", cg.display())))?;
    }
    nix::sys::prctl::set_child_subreaper(true)
        .map_err(|e| fail(format!("becoming the launch's subreaper: {e}")))?;
    // Children's exits (and a SIGTERM meant for the group, which the program handles) arrive
    // on a descriptor, so one `poll` waits for the program and for the server. `Command`
    // clears the signal mask of the child it starts.
    let mut mask = SigSet::empty();
    mask.add(Signal::SIGCHLD);
    mask.add(Signal::SIGTERM);
    mask.thread_block()
        .map_err(|e| fail(format!("blocking SIGCHLD: {e}")))?;
    let signals = SignalFd::with_flags(&mask, SfdFlags::SFD_NONBLOCK | SfdFlags::SFD_CLOEXEC)
        .map_err(|e| fail(format!("signalfd: {e}")))?;
    let watch = ServerWatch::open(server);
    if !watch.alive() {
        return Err(fail("the server that started this launch is gone".into()));
    }

    let me = std::env::current_exe()
        .map_err(|e| fail(format!("cannot find the launcher itself: {e}")))?;
    let inner = LauncherSpec {
        // bwrap's options put the program in its place; the inner launcher execs bwrap.
        mode: match &spec.mode {
            LaunchMode::Bwrap => LaunchMode::None,
            other => other.clone(),
        },
        in_cgroup: spec.cgroup.is_some() || spec.in_cgroup,
        cgroup: None,
        server_pid: None,
        ..spec.clone()
    };
    let inner = serde_json::to_string(&inner)
        .map_err(|e| fail(format!("encoding the inner launch: {e}")))?;
    let child = std::process::Command::new(me)
        .arg(crate::LAUNCHER_SUBCOMMAND)
        .arg("--spec")
        .arg(inner)
        .arg("--")
        .arg(program)
        .args(rest)
        .spawn()
        .map_err(|e| exec_error(program, &e))?;
    let child = nix::unistd::Pid::from_raw(i32::try_from(child.id()).unwrap_or(i32::MAX));

    let anchor = nix::unistd::getpid();
    loop {
        if let Some(status) = reap(child) {
            kill_launch(anchor, spec.cgroup.as_deref());
            return Ok(pass_on(status));
        }
        if !watch.wait(&signals) {
            // The server is gone: so is everything it started.
            kill_launch(anchor, spec.cgroup.as_deref());
            return Ok(ExitCode::from(128 + Signal::SIGKILL as u8));
        }
        while let Ok(Some(_)) = signals.read_signal() {}
    }
}

/// Reap every exited child (orphans of the launch come here as the subreaper); the program's
/// status once it has exited.
fn reap(program: nix::unistd::Pid) -> Option<nix::sys::wait::WaitStatus> {
    use nix::sys::wait::{WaitPidFlag, WaitStatus, waitpid};
    let mut found = None;
    loop {
        match waitpid(None, Some(WaitPidFlag::WNOHANG)) {
            Ok(WaitStatus::StillAlive) | Err(_) => return found,
            Ok(s @ (WaitStatus::Exited(pid, _) | WaitStatus::Signaled(pid, _, _)))
                if pid == program =>
            {
                found = Some(s);
            }
            Ok(_) => {}
        }
    }
}

/// The program's exit, as the launcher's own: its code, or death by the same signal.
fn pass_on(status: nix::sys::wait::WaitStatus) -> ExitCode {
    use nix::sys::wait::WaitStatus;
    match status {
        WaitStatus::Exited(_, code) => ExitCode::from(u8::try_from(code).unwrap_or(1)),
        WaitStatus::Signaled(_, sig, _) => {
            use nix::sys::signal::{SigSet, SigmaskHow, raise};
            // No core file of the launcher; the signal unblocked, so it ends this process
            // the way it ended the program (the server reports the signal).
            let _ = nix::sys::resource::setrlimit(nix::sys::resource::Resource::RLIMIT_CORE, 0, 0);
            let mut all = SigSet::empty();
            all.add(sig);
            let _ = nix::sys::signal::sigprocmask(SigmaskHow::SIG_UNBLOCK, Some(&all), None);
            let _ = raise(sig);
            ExitCode::from(128u8.saturating_add(sig as u8))
        }
        _ => ExitCode::FAILURE,
    }
}

/// SIGKILL every process of the launch but the launcher itself: its descendants (all of them,
/// as their subreaper), its process group and its cgroup; again until none is left, since a
/// process may fork between the listing and the kill.
fn kill_launch(anchor: nix::unistd::Pid, cgroup: Option<&std::path::Path>) {
    use nix::sys::signal::{Signal, kill};
    use nix::unistd::Pid;
    let me = anchor.as_raw();
    for _ in 0..200 {
        let mut victims = crate::group::descendants(me);
        if let Some(cg) = cgroup {
            victims.extend(crate::group::cgroup_pids(cg));
        }
        victims.extend(crate::group::group_members(me, 0));
        victims.retain(|p| *p != me && !is_zombie(*p));
        victims.sort_unstable();
        victims.dedup();
        if victims.is_empty() {
            break;
        }
        for pid in victims {
            let _ = kill(Pid::from_raw(pid), Signal::SIGKILL);
        }
        let _ = reap(Pid::from_raw(0));
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    let _ = reap(Pid::from_raw(0));
}

fn is_zombie(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| {
            let rest = &s[s.rfind(')')? + 1..];
            rest.split_whitespace().next().map(|state| state == "Z")
        })
        // Gone is as good as dead.
        .unwrap_or(true)
}

/// Whether the server that started the launch still runs: a pidfd of it (readable once the
/// whole process has exited), or, on a kernel without pidfds, the parent pid checked twice a
/// second (an orphan is re-parented).
struct ServerWatch {
    server: u32,
    pidfd: Option<std::os::fd::OwnedFd>,
}

impl ServerWatch {
    fn open(server: u32) -> Self {
        let pidfd = i32::try_from(server)
            .ok()
            .and_then(rustix::process::Pid::from_raw)
            .and_then(|pid| {
                rustix::process::pidfd_open(pid, rustix::process::PidfdFlags::empty()).ok()
            });
        Self { server, pidfd }
    }

    /// The server is still this launcher's parent. Checked after the pidfd was opened, so the
    /// pidfd is the parent's and not a reused pid's.
    fn alive(&self) -> bool {
        nix::unistd::getppid().as_raw() == i32::try_from(self.server).unwrap_or(-1)
    }

    /// Wait until a signal arrives on `signals` (then `true`) or the server is gone (`false`).
    fn wait(&self, signals: &nix::sys::signalfd::SignalFd) -> bool {
        use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
        use std::os::fd::AsFd;
        loop {
            let mut fds = vec![PollFd::new(signals.as_fd(), PollFlags::POLLIN)];
            if let Some(p) = &self.pidfd {
                fds.push(PollFd::new(p.as_fd(), PollFlags::POLLIN));
            }
            let timeout = if self.pidfd.is_some() {
                PollTimeout::NONE
            } else {
                PollTimeout::from(500u16)
            };
            match poll(&mut fds, timeout) {
                Ok(_) => {}
                Err(nix::errno::Errno::EINTR) => continue,
                // Nothing to wait on: fall back to the parent check below.
                Err(_) => std::thread::sleep(std::time::Duration::from_millis(500)),
            }
            let ready = |f: &PollFd<'_>| f.revents().is_some_and(|r| !r.is_empty());
            let server_gone = fds.get(1).is_some_and(ready) || !self.alive();
            if server_gone {
                return false;
            }
            if ready(&fds[0]) {
                return true;
            }
        }
    }
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
