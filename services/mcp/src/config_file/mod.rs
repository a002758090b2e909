//! The MCP config file: the servers an operator configures for the whole deployment, in YAML (or
//! JSON), loaded at start and hot-reloaded by [`McpConfigWatcher`].
//!
//! Two shapes are accepted (see `docs/mcp.md` for a full example):
//!
//! - seed 003's `mcp_servers: {external_services: [...], local_services: [...]}`, where external
//!   services are Streamable HTTP servers (`url`, `authentication`, `headers`) and local services
//!   are stdio servers (`command`, `args`, `env`, `cwd`);
//! - a flat `servers: [...]` list of [`McpServerConfig`]s in their own shape (seed 000's
//!   `mcp.json`).
//!
//! Both may carry, per server, what the client itself does not use — `description`, `version`,
//! `health_check`, `rate_limit`, `tools` — which is kept as the server's [`ServerPolicy`] for the
//! pool. Unknown keys are errors, every problem is reported with its path in the file
//! (`mcp_servers.external_services[2].url: …`), and names are unique across the file.

mod parse;
#[cfg(test)]
mod tests;
mod watcher;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use crate::client::config::McpServerConfig;

pub use watcher::{McpConfigWatcher, WatchOptions};

/// The environment variable (config key `mcp.config_file`) that names the file.
pub const CONFIG_FILE_ENV: &str = "AGENTRY_MCP__CONFIG_FILE";
/// A larger file is refused: a config of servers is a few KiB.
pub const MAX_CONFIG_FILE_BYTES: u64 = 1024 * 1024;

/// Every server configured in the file, in file order (external services before local ones).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct McpFileConfig {
    pub servers: Vec<FileServerEntry>,
}

/// One server from the file: how to reach it, and what the pool should do with it.
#[derive(Debug, Clone, PartialEq)]
pub struct FileServerEntry {
    pub config: McpServerConfig,
    pub policy: ServerPolicy,
}

/// What the file says about a server beyond how to connect to it. `None` means "not set: the
/// pool's default".
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ServerPolicy {
    pub description: Option<String>,
    pub version: Option<String>,
    /// `health_check.endpoint` (HTTP servers): a path on the server's origin, e.g. `/health`.
    pub health_endpoint: Option<String>,
    /// `health_check.interval`.
    pub health_interval: Option<Duration>,
    /// `health_check.timeout`.
    pub health_timeout: Option<Duration>,
    /// `rate_limit`: tool calls per minute to this server.
    pub rate_limit_per_minute: Option<u32>,
    /// `tools`: when set, only these of the server's tools are offered to the agent.
    pub tool_allow_list: Option<BTreeSet<String>>,
}

impl ServerPolicy {
    /// Whether the server's tool `tool` (its own name, not `<server>__<tool>`) may be offered.
    pub fn allows_tool(&self, tool: &str) -> bool {
        self.tool_allow_list
            .as_ref()
            .is_none_or(|allowed| allowed.contains(tool))
    }
}

impl McpFileConfig {
    pub fn get(&self, name: &str) -> Option<&FileServerEntry> {
        self.servers.iter().find(|s| s.config.name == name)
    }

    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.servers.iter().map(|s| s.config.name.as_str())
    }

    pub fn is_empty(&self) -> bool {
        self.servers.is_empty()
    }

    /// Parse the text of a config file. Whitespace only (or an empty document) is an empty config.
    pub fn parse(text: &str, format: FileFormat) -> Result<LoadedConfig, ConfigFileError> {
        parse::parse_document(text, format).map_err(|issues| ConfigFileError { file: None, issues })
    }

    /// Read and parse `path` (format from its extension: `.json` is JSON, anything else YAML).
    pub fn load(path: &Path) -> Result<LoadedConfig, LoadError> {
        let text = read_config_text(path)?;
        Self::parse(&text, FileFormat::from_path(path)).map_err(|mut e| {
            e.file = Some(path.to_path_buf());
            LoadError::Invalid(e)
        })
    }
}

pub(crate) fn read_config_text(path: &Path) -> Result<String, LoadError> {
    let meta = match std::fs::metadata(path) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(LoadError::Missing {
                path: path.to_path_buf(),
            });
        }
        Err(e) => {
            return Err(LoadError::Read {
                path: path.to_path_buf(),
                message: e.to_string(),
            });
        }
    };
    if !meta.is_file() {
        return Err(LoadError::Read {
            path: path.to_path_buf(),
            message: "not a regular file".into(),
        });
    }
    if meta.len() > MAX_CONFIG_FILE_BYTES {
        return Err(LoadError::TooLarge {
            path: path.to_path_buf(),
            size: meta.len(),
        });
    }
    match std::fs::read(path) {
        Ok(bytes) => String::from_utf8(bytes).map_err(|e| LoadError::Read {
            path: path.to_path_buf(),
            message: format!("not UTF-8 text (byte {})", e.utf8_error().valid_up_to()),
        }),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Err(LoadError::Missing {
            path: path.to_path_buf(),
        }),
        Err(e) => Err(LoadError::Read {
            path: path.to_path_buf(),
            message: e.to_string(),
        }),
    }
}

/// A parsed file and what is worth telling the operator about it without refusing it.
#[derive(Debug, Clone, PartialEq)]
pub struct LoadedConfig {
    pub config: McpFileConfig,
    /// E.g. an `*_env` variable that is not set (connecting will fail until it is).
    pub warnings: Vec<FileIssue>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FileFormat {
    Yaml,
    Json,
}

impl FileFormat {
    /// `.json` is JSON; anything else is YAML.
    pub fn from_path(path: &Path) -> Self {
        match path.extension().and_then(|e| e.to_str()) {
            Some(ext) if ext.eq_ignore_ascii_case("json") => FileFormat::Json,
            _ => FileFormat::Yaml,
        }
    }
}

/// One problem, at a path in the file such as `mcp_servers.external_services[2].url`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileIssue {
    /// Empty for problems with the file as a whole (syntax errors).
    pub path: String,
    pub message: String,
}

impl std::fmt::Display for FileIssue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.path.is_empty() {
            f.write_str(&self.message)
        } else {
            write!(f, "{}: {}", self.path, self.message)
        }
    }
}

/// Every problem in a file that was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "invalid MCP config file{} ({} problem{}): {}",
    file_label(.file),
    .issues.len(),
    if .issues.len() == 1 { "" } else { "s" },
    join_issues(.issues)
)]
pub struct ConfigFileError {
    pub file: Option<PathBuf>,
    pub issues: Vec<FileIssue>,
}

fn file_label(file: &Option<PathBuf>) -> String {
    file.as_ref()
        .map(|f| format!(" {}", f.display()))
        .unwrap_or_default()
}

fn join_issues(issues: &[FileIssue]) -> String {
    issues
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("; ")
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LoadError {
    #[error("MCP config file {} does not exist", .path.display())]
    Missing { path: PathBuf },
    #[error("MCP config file {} could not be read: {message}", .path.display())]
    Read { path: PathBuf, message: String },
    #[error(
        "MCP config file {} is {size} bytes; at most {MAX_CONFIG_FILE_BYTES} are read",
        .path.display()
    )]
    TooLarge { path: PathBuf, size: u64 },
    #[error(transparent)]
    Invalid(#[from] ConfigFileError),
}

/// How the file's servers changed between two good versions, matched by name.
#[derive(Debug, Clone, PartialEq)]
pub struct ConfigDiff {
    /// In the new file only (new file order).
    pub added: Vec<FileServerEntry>,
    /// In the old file only (old file order).
    pub removed: Vec<FileServerEntry>,
    /// In both, with any difference in config or policy (new file order).
    pub changed: Vec<ServerChange>,
    /// The whole new config.
    pub config: Arc<McpFileConfig>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct ServerChange {
    pub old: FileServerEntry,
    pub new: FileServerEntry,
}

impl ServerChange {
    pub fn name(&self) -> &str {
        &self.new.config.name
    }

    /// The way to reach the server changed (so a connection must be made again), as opposed to
    /// only its policy.
    pub fn needs_reconnect(&self) -> bool {
        self.old.config != self.new.config
    }
}

impl ConfigDiff {
    pub fn between(old: &McpFileConfig, new: Arc<McpFileConfig>) -> ConfigDiff {
        let added = new
            .servers
            .iter()
            .filter(|s| old.get(&s.config.name).is_none())
            .cloned()
            .collect();
        let removed = old
            .servers
            .iter()
            .filter(|s| new.get(&s.config.name).is_none())
            .cloned()
            .collect();
        let changed = new
            .servers
            .iter()
            .filter_map(|n| {
                let o = old.get(&n.config.name)?;
                (o != n).then(|| ServerChange {
                    old: o.clone(),
                    new: n.clone(),
                })
            })
            .collect();
        ConfigDiff {
            added,
            removed,
            changed,
            config: new,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.added.is_empty() && self.removed.is_empty() && self.changed.is_empty()
    }

    /// `added [a, b]; removed [c]; changed [d]` for logs.
    pub fn summary(&self) -> String {
        let names = |it: &mut dyn Iterator<Item = &str>| it.collect::<Vec<_>>().join(", ");
        format!(
            "added [{}]; removed [{}]; changed [{}]",
            names(&mut self.added.iter().map(|s| s.config.name.as_str())),
            names(&mut self.removed.iter().map(|s| s.config.name.as_str())),
            names(&mut self.changed.iter().map(ServerChange::name)),
        )
    }
}
