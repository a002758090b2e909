//! [`SandboxConfig`]: the `[sandbox]` section of `agentry.toml` (`AGENTRY_SANDBOX__*`), and the
//! [`Limits`] every launched process tree runs under.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

/// Which backend to use. `auto` probes `bwrap`, then `landlock`, for real at start.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum BackendChoice {
    #[default]
    Auto,
    Bwrap,
    Landlock,
    /// No isolation at all: only by explicit configuration, with a warning at start.
    None,
}

/// A backend that is in use.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Backend {
    Bwrap,
    Landlock,
    None,
}

impl Backend {
    pub fn as_str(self) -> &'static str {
        match self {
            Backend::Bwrap => "bwrap",
            Backend::Landlock => "landlock",
            Backend::None => "none",
        }
    }
}

impl std::fmt::Display for Backend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Resource limits of one launched process tree. Every value is a ceiling; 0 is refused by
/// [`SandboxConfig::validate`] (a limit of nothing is a typo, not a policy).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Limits {
    /// CPU seconds of each process (RLIMIT_CPU): SIGXCPU, then SIGKILL.
    pub cpu_secs: u64,
    /// Address space of each process (RLIMIT_AS), in bytes.
    pub memory_bytes: u64,
    /// Processes (and threads) of the whole tree: a pids cgroup where the server can create
    /// one, RLIMIT_NPROC (per uid, not binding root) otherwise.
    pub max_processes: u64,
    /// The largest file a process may write (RLIMIT_FSIZE), in bytes.
    pub max_file_bytes: u64,
    /// Open files per process (RLIMIT_NOFILE).
    pub max_open_files: u64,
}

/// A tighter set of limits for one launch (a tenant's policy, a test): each field that is set
/// lowers the configured one, never raises it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct LimitOverride {
    pub cpu_secs: Option<u64>,
    pub memory_bytes: Option<u64>,
    pub max_processes: Option<u64>,
    pub max_file_bytes: Option<u64>,
    pub max_open_files: Option<u64>,
}

/// What a tenant's policy asks of its sandboxes (`policy.sandbox`): tighter limits, egress.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TenantSandbox {
    pub limits: LimitOverride,
    pub egress: bool,
}

impl From<&agentry_schema::policy::SandboxPolicy> for TenantSandbox {
    fn from(p: &agentry_schema::policy::SandboxPolicy) -> Self {
        TenantSandbox {
            limits: LimitOverride {
                cpu_secs: p.cpu_secs,
                memory_bytes: p.memory_bytes,
                max_processes: p.max_processes,
                max_file_bytes: p.max_file_bytes,
                max_open_files: p.max_open_files,
            },
            egress: p.egress,
        }
    }
}

impl Limits {
    /// These limits lowered by `o` (tighter-only; a 0 in `o` is ignored).
    pub fn tightened(self, o: &LimitOverride) -> Limits {
        let min = |base: u64, v: Option<u64>| match v {
            Some(v) if v > 0 => base.min(v),
            _ => base,
        };
        Limits {
            cpu_secs: min(self.cpu_secs, o.cpu_secs),
            memory_bytes: min(self.memory_bytes, o.memory_bytes),
            max_processes: min(self.max_processes, o.max_processes),
            max_file_bytes: min(self.max_file_bytes, o.max_file_bytes),
            max_open_files: min(self.max_open_files, o.max_open_files),
        }
    }
}

/// The `[sandbox]` section. See `docs/tools.md` ("The sandbox") for what each key governs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SandboxConfig {
    /// `auto` (default), `bwrap`, `landlock` or `none`.
    pub backend: BackendChoice,
    /// The bubblewrap program.
    pub bwrap_path: String,
    /// The launcher that applies limits (and Landlock) before it runs a command: this
    /// executable (`agentry sandbox-exec`) when unset.
    pub launcher: Option<PathBuf>,
    /// Host paths made readable (and executable) inside every sandbox besides the system
    /// directories: where MCP servers or toolchains are installed (`/opt/mcp`, a venv).
    pub read_only_paths: Vec<PathBuf>,
    /// Paths hidden even though they lie in a readable directory: secrets under `/etc`. The data
    /// dir and the config file are always hidden.
    pub hidden_paths: Vec<PathBuf>,
    /// Whether sandboxed programs may reach the network at all. Off by default: every sandbox
    /// is offline. On: the platform's own MCP servers get network, and so do the programs of
    /// tenants whose policy has `sandbox.egress`.
    pub egress: bool,
    pub cpu_secs: u64,
    pub memory_bytes: u64,
    pub max_processes: u64,
    pub max_file_bytes: u64,
    pub max_open_files: u64,
}

impl Default for SandboxConfig {
    fn default() -> Self {
        Self {
            backend: BackendChoice::Auto,
            bwrap_path: "bwrap".into(),
            launcher: None,
            read_only_paths: Vec::new(),
            hidden_paths: [
                "/etc/shadow",
                "/etc/shadow-",
                "/etc/gshadow",
                "/etc/gshadow-",
                "/etc/sudoers",
                "/etc/sudoers.d",
                "/etc/ssh",
                "/etc/ssl/private",
                "/etc/security/opasswd",
                "/etc/agentry",
            ]
            .into_iter()
            .map(PathBuf::from)
            .collect(),
            egress: false,
            cpu_secs: 600,
            memory_bytes: 4 * 1024 * 1024 * 1024,
            max_processes: 256,
            max_file_bytes: 1024 * 1024 * 1024,
            max_open_files: 1024,
        }
    }
}

impl SandboxConfig {
    pub fn limits(&self) -> Limits {
        Limits {
            cpu_secs: self.cpu_secs,
            memory_bytes: self.memory_bytes,
            max_processes: self.max_processes,
            max_file_bytes: self.max_file_bytes,
            max_open_files: self.max_open_files,
        }
    }

    /// Every problem, as `(key, reason)`.
    pub fn validate(&self) -> Vec<(String, String)> {
        let mut out = Vec::new();
        for (key, v) in [
            ("cpu_secs", self.cpu_secs),
            ("memory_bytes", self.memory_bytes),
            ("max_processes", self.max_processes),
            ("max_file_bytes", self.max_file_bytes),
            ("max_open_files", self.max_open_files),
        ] {
            if v == 0 {
                out.push((key.to_string(), "must be at least 1".to_string()));
            }
        }
        if self.memory_bytes > 0 && self.memory_bytes < 16 * 1024 * 1024 {
            out.push((
                "memory_bytes".into(),
                "below 16 MiB no program starts; give at least 16777216".into(),
            ));
        }
        for p in self.read_only_paths.iter().chain(&self.hidden_paths) {
            if !p.is_absolute() {
                out.push((
                    "read_only_paths / hidden_paths".into(),
                    format!("{} is not an absolute path", p.display()),
                ));
            }
        }
        if self.bwrap_path.trim().is_empty() {
            out.push(("bwrap_path".into(), "must not be empty".into()));
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_empty_section_gives_the_defaults_and_they_are_valid() {
        let cfg: SandboxConfig = serde_json::from_str("{}").unwrap();
        assert_eq!(cfg, SandboxConfig::default());
        assert_eq!(cfg.backend, BackendChoice::Auto);
        assert!(!cfg.egress);
        assert!(cfg.validate().is_empty());
    }

    #[test]
    fn unknown_keys_and_backends_are_refused() {
        assert!(serde_json::from_str::<SandboxConfig>(r#"{"max_procs": 3}"#).is_err());
        assert!(serde_json::from_str::<SandboxConfig>(r#"{"backend": "docker"}"#).is_err());
        let cfg: SandboxConfig =
            serde_json::from_str(r#"{"backend": "none", "max_processes": 0}"#).unwrap();
        assert_eq!(cfg.backend, BackendChoice::None);
        assert_eq!(cfg.validate()[0].0, "max_processes");
    }

    #[test]
    fn an_override_only_tightens() {
        let base = SandboxConfig::default().limits();
        let o = LimitOverride {
            cpu_secs: Some(5),
            memory_bytes: Some(u64::MAX),
            max_processes: Some(0),
            ..LimitOverride::default()
        };
        let t = base.tightened(&o);
        assert_eq!(t.cpu_secs, 5);
        assert_eq!(t.memory_bytes, base.memory_bytes);
        assert_eq!(t.max_processes, base.max_processes);
    }
}
