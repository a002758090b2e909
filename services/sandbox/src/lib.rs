//! Launching tenant processes (DESIGN §13): every program Agentry starts on behalf of a tenant
//! (`execute`, stdio MCP servers, `agentry tool-server` children) goes through a [`Sandbox`].
//!
//! - [`SandboxHandle::start`] reaps what a crashed predecessor left running, then picks the
//!   backend (`auto`: `bwrap`, then `landlock`, each probed by running a real command) and
//!   reports it in a [`SandboxStatus`]. When no backend works the handle refuses every launch
//!   with the reason; it never falls back to `none` by itself.
//! - [`Sandbox::prepare`] turns a [`LaunchSpec`] (program, arguments, workspace, environment,
//!   limits, egress, owner) into the command to spawn: the launcher (`agentry sandbox-exec`,
//!   [`launcher`]) which restricts itself and runs bubblewrap or execs the program.
//! - [`Prepared::started`] gives the [`ProcessGroup`] of the spawned launch: killed on cancel,
//!   timeout, run end, shutdown ([`Sandbox::kill_all`]), and at the next start after a crash.
//!
//! A remote sandbox (Modal, Runloop, Daytona) plugs in as another [`Sandbox`]: its `prepare`
//! returns the command of a local relay (the provider's CLI or a small bridge) whose stdin,
//! stdout and stderr are the remote process's and whose exit is the remote exit; killing the
//! relay's process group must end the remote process. Everything above the trait (output
//! capture, timeouts, MCP over stdio) works unchanged. `docs/security.md` has the details.

pub mod bwrap;
pub mod config;
pub mod group;
pub mod landlock;
pub mod launcher;

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;

pub use config::{Backend, BackendChoice, LimitOverride, Limits, SandboxConfig, TenantSandbox};
pub use group::{Owner, ProcessGroup, Reaped};

use group::{Cgroups, Registry};
use launcher::{LaunchMode, LauncherSpec};

/// The subcommand of the `agentry` binary that is the launcher.
pub const LAUNCHER_SUBCOMMAND: &str = "sandbox-exec";

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SandboxError {
    /// No backend works here (or none was set up): programs cannot be run.
    #[error("programs cannot run: {0}")]
    Unavailable(String),
    #[error("{0}")]
    InvalidSpec(String),
    #[error("could not prepare the sandbox: {0}")]
    Setup(String),
}

/// One program to launch.
#[derive(Debug, Clone, Default)]
pub struct LaunchSpec {
    /// Run directly (no shell); a bare name is looked up on the `PATH` of `env`.
    pub program: String,
    pub args: Vec<String>,
    /// The caller's workspace: the one writable host directory.
    pub workspace: PathBuf,
    /// Where the program starts: inside the workspace (default: its root) or a read-only path.
    pub cwd: Option<PathBuf>,
    /// The whole environment of the program (already allow-listed by the caller).
    pub env: Vec<(String, String)>,
    /// Extra read-only host paths for this launch (a platform server's install dir).
    pub read_only: Vec<PathBuf>,
    /// Tighter limits for this launch (a tenant's policy).
    pub limits: LimitOverride,
    /// Network egress wanted (a tenant's policy, a platform server); granted only when
    /// `sandbox.egress` lets programs out at all.
    pub egress: bool,
    pub owner: Owner,
    /// Pipe stdin (an MCP server) or close it (a shell command).
    pub stdin: bool,
}

/// How programs run in this process, for `/api/v1/health` and `agentry config`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SandboxStatus {
    /// What was configured.
    pub configured: BackendChoice,
    /// The backend in use; `None` when programs cannot run.
    pub backend: Option<Backend>,
    /// Why programs cannot run, or why a preferred backend was skipped.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// How `max_processes` is enforced: `cgroup`, `rlimit` (per uid, not binding root), or
    /// `none`.
    pub process_limit: String,
    /// Whether egress can be granted at all (`sandbox.egress`).
    pub egress: bool,
}

impl SandboxStatus {
    pub fn ready(&self) -> bool {
        self.backend.is_some()
    }
}

/// A way to run tenant programs. See the module docs for how a remote one plugs in.
pub trait Sandbox: Send + Sync + 'static {
    fn status(&self) -> &SandboxStatus;
    /// The command that runs `spec`; spawn it, then hand its pid to [`Prepared::started`].
    fn prepare(&self, spec: &LaunchSpec) -> Result<Prepared, SandboxError>;
    /// Kill every launch still running (shutdown). Returns how many there were.
    fn kill_all(&self) -> usize;
}

/// A command ready to spawn. Dropping it unspawned removes what was made for it.
pub struct Prepared {
    pub command: tokio::process::Command,
    cgroup: Option<PathBuf>,
    tmp: Option<PathBuf>,
    record: Option<PathBuf>,
    backend: Backend,
    owner: Owner,
    registry: Arc<Registry>,
    done: bool,
}

impl Prepared {
    /// The spawned launch's process group (`pid` is the child's id), recorded on disk.
    pub fn started(mut self, pid: Option<u32>) -> Result<Arc<ProcessGroup>, SandboxError> {
        self.done = true;
        let pid = pid
            .and_then(|p| i32::try_from(p).ok())
            .ok_or_else(|| SandboxError::Setup("the child exited before it had a pid".into()))?;
        let group = Arc::new(ProcessGroup::new(
            pid,
            self.cgroup.take(),
            self.tmp.take(),
            self.record.take(),
            std::mem::take(&mut self.owner),
        ));
        let id = self.registry.add(&group);
        group.set_registry(&self.registry, id);
        if let Some(record) = self.record_path(&group) {
            let body = serde_json::to_vec(&group.record(self.backend)).unwrap_or_default();
            if let Err(e) = std::fs::write(&record, body) {
                tracing::warn!(error = %e, path = %record.display(), "could not record a sandboxed process group");
            }
        }
        Ok(group)
    }

    fn record_path(&self, group: &ProcessGroup) -> Option<PathBuf> {
        group.record_file().map(Path::to_path_buf)
    }
}

impl Drop for Prepared {
    fn drop(&mut self) {
        if !self.done {
            if let Some(cg) = &self.cgroup {
                let _ = std::fs::remove_dir(cg);
            }
            if let Some(tmp) = &self.tmp {
                let _ = std::fs::remove_dir_all(tmp);
            }
        }
    }
}

/// Where the launcher is and what to hide, from the process that starts the sandbox.
#[derive(Debug, Clone, Default)]
pub struct StartOptions {
    /// The data dir: hidden from every sandbox; `{data_dir}/sandbox` keeps records and temp dirs.
    pub data_dir: PathBuf,
    /// The config file, hidden too.
    pub config_file: Option<PathBuf>,
}

/// The shared handle every tool holds. Cheap to clone.
#[derive(Clone)]
pub struct SandboxHandle(Arc<dyn Sandbox>);

impl std::fmt::Debug for SandboxHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("SandboxHandle")
            .field(self.0.status())
            .finish()
    }
}

impl PartialEq for SandboxHandle {
    fn eq(&self, other: &Self) -> bool {
        self.0.status() == other.0.status()
    }
}

impl Default for SandboxHandle {
    /// Refuses every launch: a process that runs programs must set up its sandbox.
    fn default() -> Self {
        Self::unavailable(
            BackendChoice::Auto,
            "no sandbox was set up in this process".into(),
        )
    }
}

impl SandboxHandle {
    pub fn new(sandbox: Arc<dyn Sandbox>) -> Self {
        Self(sandbox)
    }

    /// A handle that refuses every launch with `reason`.
    pub fn unavailable(configured: BackendChoice, reason: String) -> Self {
        Self(Arc::new(Unavailable(SandboxStatus {
            configured,
            backend: None,
            error: Some(reason),
            process_limit: "none".into(),
            egress: false,
        })))
    }

    /// Programs run directly as this process's user, in their own process group, with the
    /// given environment only: no isolation and no limits. For unit tests of the tools.
    pub fn unconfined_for_tests() -> Self {
        Self(Arc::new(LocalSandbox::direct()))
    }

    /// Reap the leftovers of a crashed predecessor, then pick and probe the backend.
    pub async fn start(config: &SandboxConfig, opts: &StartOptions) -> Self {
        let problems = config.validate();
        if !problems.is_empty() {
            let msg = problems
                .iter()
                .map(|(k, r)| format!("sandbox.{k}: {r}"))
                .collect::<Vec<_>>()
                .join("; ");
            return Self::unavailable(config.backend, msg);
        }
        let state_dir = opts.data_dir.join("sandbox");
        let instance = instance_name(&opts.data_dir);
        let cgroups = Cgroups::detect(&instance);
        if let Ok(c) = &cgroups {
            let swept = c.sweep_stale();
            if swept > 0 {
                tracing::info!(
                    directories = swept,
                    "removed empty cgroup directories of servers that are gone"
                );
            }
        }
        let reaped = group::reap_leftovers(&state_dir, cgroups.as_ref().ok().map(|c| c.instance()));
        if !reaped.killed.is_empty() {
            tracing::warn!(
                groups = reaped.killed.len(),
                "killed sandboxed processes a previous server left running"
            );
        }
        let launcher = match &config.launcher {
            Some(p) => Ok(p.clone()),
            None => {
                std::env::current_exe().map_err(|e| format!("cannot find this executable: {e}"))
            }
        };
        let candidates: Vec<Backend> = match config.backend {
            BackendChoice::Auto => vec![Backend::Bwrap, Backend::Landlock],
            BackendChoice::Bwrap => vec![Backend::Bwrap],
            BackendChoice::Landlock => vec![Backend::Landlock],
            BackendChoice::None => vec![Backend::None],
        };
        let launcher = match launcher {
            Ok(l) => l,
            Err(e) => return Self::unavailable(config.backend, e),
        };
        let mut failures = Vec::new();
        for backend in candidates {
            let sandbox = LocalSandbox::new(
                backend,
                config.clone(),
                Some(launcher.clone()),
                opts,
                &state_dir,
                cgroups.clone(),
            );
            if backend == Backend::None {
                tracing::warn!(
                    "sandbox.backend = none: tenant programs run as the server's own user with \
                     no isolation; only for a trusted single-user setup"
                );
                return Self(Arc::new(sandbox));
            }
            match sandbox.probe().await {
                Ok(()) => {
                    let mut sandbox = sandbox;
                    if !failures.is_empty() {
                        sandbox.status.error = Some(failures.join("; "));
                    }
                    tracing::info!(backend = %backend, process_limit = %sandbox.status.process_limit, "sandbox ready");
                    return Self(Arc::new(sandbox));
                }
                Err(e) => {
                    tracing::warn!(backend = %backend, error = %e, "sandbox backend does not work here");
                    failures.push(format!("{backend}: {e}"));
                }
            }
        }
        let reason = format!(
            "no sandbox backend works on this host ({}); install bubblewrap or enable Landlock, \
             or set sandbox.backend = \"none\" for a trusted single-user setup",
            failures.join("; ")
        );
        tracing::error!("{reason}");
        Self::unavailable(config.backend, reason)
    }

    pub fn status(&self) -> &SandboxStatus {
        self.0.status()
    }

    pub fn prepare(&self, spec: &LaunchSpec) -> Result<Prepared, SandboxError> {
        self.0.prepare(spec)
    }

    pub fn kill_all(&self) -> usize {
        self.0.kill_all()
    }
}

/// `agentry-<16 hex of the data dir's canonical path>`: one cgroup directory per data dir.
fn instance_name(data_dir: &Path) -> String {
    let canonical = std::fs::canonicalize(data_dir).unwrap_or_else(|_| data_dir.to_path_buf());
    // FNV-1a: stable across builds, unlike the std hasher's keys.
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in canonical.as_os_str().as_encoded_bytes() {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    format!("agentry-{h:016x}")
}

struct Unavailable(SandboxStatus);

impl Sandbox for Unavailable {
    fn status(&self) -> &SandboxStatus {
        &self.0
    }

    fn prepare(&self, _spec: &LaunchSpec) -> Result<Prepared, SandboxError> {
        Err(SandboxError::Unavailable(
            self.0.error.clone().unwrap_or_default(),
        ))
    }

    fn kill_all(&self) -> usize {
        0
    }
}

/// The local backends: bwrap, landlock, none (and direct, for tests).
struct LocalSandbox {
    backend: Backend,
    config: SandboxConfig,
    /// `None`: run programs directly (tests only).
    launcher: Option<PathBuf>,
    system: Vec<bwrap::SystemEntry>,
    /// Canonical paths hidden inside the read-only trees.
    hidden: Vec<PathBuf>,
    state_dir: Option<PathBuf>,
    cgroups: Option<Cgroups>,
    registry: Arc<Registry>,
    status: SandboxStatus,
}

fn canonical_or_same(p: &Path) -> PathBuf {
    std::fs::canonicalize(p).unwrap_or_else(|_| p.to_path_buf())
}

impl LocalSandbox {
    fn new(
        backend: Backend,
        config: SandboxConfig,
        launcher: Option<PathBuf>,
        opts: &StartOptions,
        state_dir: &Path,
        cgroups: Result<Cgroups, String>,
    ) -> Self {
        let mut hidden: Vec<PathBuf> = config
            .hidden_paths
            .iter()
            .chain(std::iter::once(&opts.data_dir))
            .chain(opts.config_file.iter())
            .filter(|p| !p.as_os_str().is_empty())
            .map(|p| canonical_or_same(p))
            .collect();
        hidden.sort();
        hidden.dedup();
        let process_limit = match &cgroups {
            Ok(_) => "cgroup".to_string(),
            Err(e) => format!("rlimit (per uid; {e})"),
        };
        let status = SandboxStatus {
            configured: config.backend,
            backend: Some(backend),
            error: None,
            process_limit,
            egress: config.egress,
        };
        Self {
            backend,
            config,
            launcher,
            system: bwrap::system_entries(),
            hidden,
            state_dir: Some(state_dir.to_path_buf()),
            cgroups: cgroups.ok(),
            registry: Arc::default(),
            status,
        }
    }

    fn direct() -> Self {
        let config = SandboxConfig {
            backend: BackendChoice::None,
            ..SandboxConfig::default()
        };
        Self {
            backend: Backend::None,
            status: SandboxStatus {
                configured: BackendChoice::None,
                backend: Some(Backend::None),
                error: Some("unconfined (tests)".into()),
                process_limit: "none".into(),
                egress: true,
            },
            config,
            launcher: None,
            system: Vec::new(),
            hidden: Vec::new(),
            state_dir: None,
            cgroups: None,
            registry: Arc::default(),
        }
    }

    /// Run `sh -c 'exit 0'` through the whole launch path.
    async fn probe(&self) -> Result<(), String> {
        let state = self.state_dir.as_ref().ok_or("no state dir")?;
        let ws = state.join("probe");
        std::fs::create_dir_all(&ws).map_err(|e| format!("creating {}: {e}", ws.display()))?;
        let spec = LaunchSpec {
            program: "/bin/sh".into(),
            args: vec!["-c".into(), "exit 0".into()],
            workspace: ws,
            env: vec![("PATH".into(), "/usr/bin:/bin".into())],
            owner: Owner {
                kind: "probe".into(),
                ..Owner::default()
            },
            ..LaunchSpec::default()
        };
        let mut prepared = self.prepare(&spec).map_err(|e| e.to_string())?;
        prepared.command.stdout(Stdio::null());
        let child = prepared
            .command
            .spawn()
            .map_err(|e| format!("cannot start the launcher: {e}"))?;
        let group = prepared.started(child.id()).map_err(|e| e.to_string())?;
        let out = tokio::time::timeout(Duration::from_secs(20), child.wait_with_output()).await;
        group.release();
        match out {
            Err(_) => Err("a trivial sandboxed command did not finish within 20 s".into()),
            Ok(Err(e)) => Err(format!("waiting for the probe: {e}")),
            Ok(Ok(o)) if o.status.success() => Ok(()),
            Ok(Ok(o)) => {
                let stderr = String::from_utf8_lossy(&o.stderr);
                Err(format!(
                    "a trivial sandboxed command failed ({}): {}",
                    o.status,
                    stderr.trim()
                ))
            }
        }
    }

    /// The read-only paths of a launch as `(source, destination)`: each at its canonical path,
    /// and also at the path as given when that went through a symlink.
    fn read_only_mounts(&self, spec: &LaunchSpec) -> Vec<(PathBuf, PathBuf)> {
        let mut out = Vec::new();
        for p in self.config.read_only_paths.iter().chain(&spec.read_only) {
            let Ok(canonical) = std::fs::canonicalize(p) else {
                continue;
            };
            if bwrap::is_under(&canonical, &self.hidden) {
                continue;
            }
            out.push((canonical.clone(), canonical.clone()));
            if *p != canonical && p.is_absolute() {
                out.push((canonical, p.clone()));
            }
        }
        if let Some(l) = &self.launcher
            && let Ok(c) = std::fs::canonicalize(l)
        {
            out.push((c.clone(), c));
        }
        out.sort();
        out.dedup();
        out
    }
}

/// `cwd` made absolute against `workspace`, normalized, and checked to lie in `roots`.
pub fn resolve_cwd(
    workspace: &Path,
    cwd: Option<&Path>,
    roots: &[PathBuf],
) -> Result<PathBuf, SandboxError> {
    use std::path::Component;
    let joined = match cwd {
        None => return Ok(workspace.to_path_buf()),
        Some(c) => workspace.join(c),
    };
    let mut out = PathBuf::new();
    for c in joined.components() {
        match c {
            Component::RootDir => out.push("/"),
            Component::Normal(n) => out.push(n),
            Component::CurDir => {}
            Component::ParentDir | Component::Prefix(_) => {
                return Err(SandboxError::InvalidSpec(format!(
                    "the working directory {} may not contain ..",
                    joined.display()
                )));
            }
        }
    }
    let out = canonical_or_same(&out);
    if out.starts_with(workspace) || bwrap::is_under(&out, roots) {
        Ok(out)
    } else {
        Err(SandboxError::InvalidSpec(format!(
            "the working directory {} is outside the workspace",
            out.display()
        )))
    }
}

impl Sandbox for LocalSandbox {
    fn status(&self) -> &SandboxStatus {
        &self.status
    }

    fn kill_all(&self) -> usize {
        self.registry.kill_all()
    }

    fn prepare(&self, spec: &LaunchSpec) -> Result<Prepared, SandboxError> {
        if spec.program.is_empty() {
            return Err(SandboxError::InvalidSpec("no program given".into()));
        }
        let workspace = std::fs::canonicalize(&spec.workspace).map_err(|e| {
            SandboxError::InvalidSpec(format!(
                "the workspace {} cannot be used: {e}",
                spec.workspace.display()
            ))
        })?;
        // A workspace inside the data dir is the normal case (the data dir is hidden as a whole,
        // the workspace mounted on its own); a workspace that holds a hidden path would expose it.
        if self.launcher.is_some() && self.hidden.iter().any(|h| h.starts_with(&workspace)) {
            return Err(SandboxError::InvalidSpec(format!(
                "the workspace {} contains a hidden path (the data dir or a secret)",
                workspace.display()
            )));
        }
        let ro = self.read_only_mounts(spec);
        let ro_roots: Vec<PathBuf> = ro.iter().map(|(_, d)| d.clone()).collect();
        let cwd = resolve_cwd(&workspace, spec.cwd.as_deref(), &ro_roots)?;
        let limits = self.config.limits().tightened(&spec.limits);
        let egress = spec.egress && self.config.egress;

        let mut env: Vec<(String, String)> = spec.env.clone();
        let has = |env: &[(String, String)], k: &str| env.iter().any(|(key, _)| key == k);
        if !has(&env, "HOME") {
            env.push(("HOME".into(), workspace.to_string_lossy().into_owned()));
        }
        if !has(&env, "PATH") {
            env.push(("PATH".into(), "/usr/local/bin:/usr/bin:/bin".into()));
        }

        let Some(launcher) = &self.launcher else {
            // Direct (tests): no isolation, no limits.
            let mut cmd = tokio::process::Command::new(&spec.program);
            cmd.args(&spec.args)
                .current_dir(&cwd)
                .env_clear()
                .envs(env)
                .process_group(0);
            return Ok(self.prepared(cmd, spec, None, None, None));
        };

        let id = uuid::Uuid::now_v7().simple().to_string();
        let cgroup = match &self.cgroups {
            Some(c) => Some(
                c.create(&id, limits.max_processes)
                    .map_err(|e| SandboxError::Setup(format!("creating the pids cgroup: {e}")))?,
            ),
            None => None,
        };
        let state = self.state_dir.clone().unwrap_or_else(std::env::temp_dir);
        let record = state.join("groups").join(format!("{id}.json"));
        if let Some(dir) = record.parent() {
            std::fs::create_dir_all(dir)
                .map_err(|e| SandboxError::Setup(format!("creating {}: {e}", dir.display())))?;
        }
        let mut tmp = None;
        let (mode, mut program_argv): (LaunchMode, Vec<std::ffi::OsString>) = match self.backend {
            Backend::Bwrap => {
                let hidden = self
                    .hidden
                    .iter()
                    .filter(|h| {
                        bwrap::is_under(h, &ro_roots)
                            || self.system.iter().any(|s| match s {
                                bwrap::SystemEntry::Dir(d) => h.starts_with(d),
                                bwrap::SystemEntry::Symlink(..) => false,
                            })
                    })
                    .filter_map(|h| std::fs::metadata(h).ok().map(|m| (h.clone(), m.is_dir())))
                    .collect();
                let layout = bwrap::Layout {
                    workspace: workspace.clone(),
                    cwd: cwd.clone(),
                    read_only: ro.clone(),
                    hidden,
                    network: egress,
                    tmp_bytes: limits.max_file_bytes,
                };
                let mut argv = vec![std::ffi::OsString::from(&self.config.bwrap_path)];
                argv.extend(bwrap::options(&layout, &self.system));
                env.retain(|(k, _)| k != "TMPDIR");
                env.push(("TMPDIR".into(), "/tmp".into()));
                (LaunchMode::Bwrap, argv)
            }
            Backend::Landlock => {
                let dir = state.join("tmp").join(&id);
                std::fs::create_dir_all(&dir)
                    .map_err(|e| SandboxError::Setup(format!("creating {}: {e}", dir.display())))?;
                env.retain(|(k, _)| k != "TMPDIR");
                env.push(("TMPDIR".into(), dir.to_string_lossy().into_owned()));
                let mut read_exec = Vec::new();
                for s in &self.system {
                    if let bwrap::SystemEntry::Dir(d) = s {
                        read_exec.extend(landlock::allowed_beneath(d, &self.hidden));
                    }
                }
                read_exec.push(PathBuf::from("/proc"));
                read_exec.extend(ro_roots.iter().cloned());
                let rules = landlock::Rules {
                    read_exec,
                    read_write: vec![workspace.clone(), dir.clone()],
                    devices: landlock::DEVICES.iter().map(PathBuf::from).collect(),
                    egress,
                };
                tmp = Some(dir);
                (LaunchMode::Landlock(rules), Vec::new())
            }
            Backend::None => (LaunchMode::None, Vec::new()),
        };
        program_argv.push(spec.program.clone().into());
        program_argv.extend(spec.args.iter().map(Into::into));
        let launcher_spec = LauncherSpec {
            mode,
            limits,
            cgroup: cgroup.clone(),
            cwd: cwd.clone(),
            in_cgroup: false,
            server_pid: Some(std::process::id()),
        };
        let json = serde_json::to_string(&launcher_spec)
            .map_err(|e| SandboxError::Setup(format!("encoding the launch: {e}")))?;
        let mut cmd = tokio::process::Command::new(launcher);
        cmd.arg(LAUNCHER_SUBCOMMAND)
            .arg("--spec")
            .arg(json)
            .arg("--")
            .args(program_argv)
            .current_dir(&cwd)
            .env_clear()
            .envs(env);
        Ok(self.prepared(cmd, spec, cgroup, tmp, Some(record)))
    }
}

impl Drop for LocalSandbox {
    /// The last handle is gone: its cgroup directory goes once its launches' cgroups are
    /// removed. Launches still running are their owners' (each holds its `ProcessGroup`);
    /// shutdown kills them with `kill_all`.
    fn drop(&mut self) {
        if let Some(c) = &self.cgroups {
            let instance = c.instance().to_path_buf();
            let _ = std::thread::Builder::new()
                .name("sandbox-cgroup-cleanup".into())
                .spawn(move || {
                    for _ in 0..60 {
                        if std::fs::remove_dir(&instance).is_ok() || !instance.exists() {
                            return;
                        }
                        std::thread::sleep(Duration::from_millis(100));
                    }
                });
        }
    }
}

impl LocalSandbox {
    fn prepared(
        &self,
        mut cmd: tokio::process::Command,
        spec: &LaunchSpec,
        cgroup: Option<PathBuf>,
        tmp: Option<PathBuf>,
        record: Option<PathBuf>,
    ) -> Prepared {
        cmd.stdin(if spec.stdin {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
        Prepared {
            command: cmd,
            cgroup,
            tmp,
            record,
            backend: self.backend,
            owner: spec.owner.clone(),
            registry: self.registry.clone(),
            done: false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::ffi::OsString;

    /// A bwrap sandbox whose launcher is never run: only the command line is looked at.
    fn bwrap_sandbox(state: &Path) -> LocalSandbox {
        LocalSandbox::new(
            Backend::Bwrap,
            SandboxConfig::default(),
            Some(PathBuf::from("/usr/bin/true")),
            &StartOptions {
                data_dir: state.to_path_buf(),
                config_file: None,
            },
            &state.join("sandbox"),
            Err("not in unit tests".into()),
        )
    }

    /// The bwrap options of a launcher command line: between `bwrap` and its `--`.
    fn bwrap_options(cmd: &tokio::process::Command) -> Vec<OsString> {
        let args: Vec<OsString> = cmd.as_std().get_args().map(OsString::from).collect();
        assert_eq!(args[0], LAUNCHER_SUBCOMMAND);
        assert_eq!(args[1], "--spec");
        assert_eq!(args[3], "--");
        assert_eq!(args[4], "bwrap");
        let end = args[5..].iter().position(|a| a == "--").unwrap() + 5;
        args[5..end].to_vec()
    }

    #[test]
    fn a_working_directory_outside_the_workspace_is_refused() {
        let ws = Path::new("/data/ws");
        assert_eq!(resolve_cwd(ws, None, &[]).unwrap(), ws);
        assert_eq!(
            resolve_cwd(ws, Some(Path::new("a/b")), &[]).unwrap(),
            ws.join("a/b")
        );
        assert!(resolve_cwd(ws, Some(Path::new("../other")), &[]).is_err());
        assert!(resolve_cwd(ws, Some(Path::new("/etc")), &[]).is_err());
        assert!(resolve_cwd(ws, Some(Path::new("/opt/x")), &[PathBuf::from("/opt")]).is_ok());
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(200))]

        /// Whatever a tenant controls (program, arguments, environment, working directory) never
        /// becomes a bwrap option or a mount: the options are the same as for a fixed command,
        /// the only writable mount is the workspace, and the start directory stays inside it.
        #[test]
        fn tenant_strings_never_become_bwrap_options_or_host_paths(
            program in "(--[a-z-]{1,10}|/[a-z/.]{0,16}|\\PC{1,12})",
            args in proptest::collection::vec("(--[a-z-]{1,12}|--bind|/|\\.\\./\\.\\.|\\PC{0,12})", 0..6),
            env_value in "(--[a-z-]{1,10}|\\PC{0,16})",
            workdir in proptest::option::of("(\\.\\.|[a-z]{1,4}|/[a-z]{1,6})(/(\\.\\.|[a-z]{1,4})){0,3}"),
        ) {
            let tmp = tempfile::tempdir().unwrap();
            let ws = tmp.path().join("workspaces/t/u");
            std::fs::create_dir_all(&ws).unwrap();
            let sandbox = bwrap_sandbox(tmp.path());
            let ws = std::fs::canonicalize(&ws).unwrap();
            let base = sandbox.prepare(&LaunchSpec {
                program: "true".into(),
                workspace: ws.clone(),
                ..LaunchSpec::default()
            }).unwrap();
            let spec = LaunchSpec {
                program: program.clone(),
                args: args.clone(),
                workspace: ws.clone(),
                cwd: workdir.as_ref().map(PathBuf::from),
                env: vec![("X".into(), format!("ENVMARK{env_value}"))],
                ..LaunchSpec::default()
            };
            match sandbox.prepare(&spec) {
                Err(SandboxError::InvalidSpec(_)) => {
                    // Only a working directory can be refused.
                    prop_assert!(workdir.is_some());
                }
                Err(e) => prop_assert!(false, "unexpected {e}"),
                Ok(prepared) => {
                    let mut opts = bwrap_options(&prepared.command);
                    let mut base_opts = bwrap_options(&base.command);
                    // The start directory is the one option value that differs.
                    let chdir = opts.iter().position(|a| a == "--chdir").unwrap();
                    let cwd = PathBuf::from(opts[chdir + 1].clone());
                    prop_assert!(cwd.starts_with(&ws), "{} outside {}", cwd.display(), ws.display());
                    opts.remove(chdir + 1);
                    let b = base_opts.iter().position(|a| a == "--chdir").unwrap();
                    base_opts.remove(b + 1);
                    prop_assert_eq!(&opts, &base_opts);
                    let binds: Vec<OsString> = opts.windows(3).filter(|w| w[0] == "--bind").map(|w| w[1].clone()).collect();
                    prop_assert_eq!(binds, vec![OsString::from(&ws)]);
                    // The program and its arguments follow the options' `--` verbatim.
                    let all: Vec<OsString> = prepared.command.as_std().get_args().map(OsString::from).collect();
                    let tail = &all[all.len() - 1 - args.len()..];
                    prop_assert_eq!(&tail[0], &OsString::from(&program));
                    for (a, b) in tail[1..].iter().zip(&args) {
                        prop_assert_eq!(a, &OsString::from(b));
                    }
                    // Environment values travel in the environment, never on the command line.
                    prop_assert!(!opts.iter().any(|o| o.to_string_lossy().contains("ENVMARK")));
                }
            }
        }
    }
}
