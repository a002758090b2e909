//! The engine's knobs, from the server configuration (`[session]`, `[cluster]`, `[mcp]`,
//! `[tasks]`, …): plain data the composition root fills in and the engine's modules read.
//!
//! A leaf: it names no other module of this crate, so every module can read its settings
//! without importing the one that acts on them (the agent loop's `task` tool and the MCP pool
//! read theirs here, and `deps` holds them in [`EngineDeps`](crate::deps::EngineDeps)).

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use agentry_builtin::BuiltinConfig;
use agentry_builtin::net_guard::GuardedResolver;

/// Engine knobs, from the server configuration.
#[derive(Debug, Clone)]
pub struct EngineConfig {
    /// How long an approval waits before it counts as a reject.
    pub hitl_timeout: Duration,
    /// An idle session actor stops after this long.
    pub session_timeout: Duration,
    /// How many stored messages a run sends the model as history.
    pub history_window: u64,
    /// How many recent events each session keeps in memory for replay.
    pub event_ring: usize,
    /// Checkpoints kept per run once it ends.
    pub checkpoint_keep: u64,
    /// The data dir; workspaces live in `{data_dir}/workspaces/{tenant}/{user}`.
    pub data_dir: PathBuf,
    /// How many times a crashed run is restarted from its checkpoint before it fails.
    pub max_restarts: u32,
    /// After a cancel, how long the loop gets to stop by itself before it is aborted.
    pub cancel_grace: Duration,
    /// How often buffered events are written to the database.
    pub event_flush_interval: Duration,
    /// Live session actors per process past which the least recently used idle ones stop
    /// (they start again, from the database, when next used); 0: no cap.
    pub max_live_sessions: usize,
    /// Cluster mode: how long a replica's lease on a session's live run lasts unless renewed
    /// (it is renewed every third of this).
    pub session_lease_ttl: Duration,
    /// Cluster mode: a replica silent this long (no heartbeat) is dead, and the others take
    /// over its sessions that have a run going or waiting.
    pub replica_ttl: Duration,
    /// Cluster mode: how long a command forwarded to a session's owner waits for its answer.
    pub forward_timeout: Duration,
    /// Tokens each model call reserves of the tenant's `tokens_per_day` for its answer, on top
    /// of the prompt's estimate (a request's own `max_tokens` wins).
    pub reserve_output_tokens: u64,
    pub mcp_pool: McpPoolConfig,
    /// Delegation with `task`: depth, fan-out and parallelism (see `agent::task`).
    pub tasks: TaskLimits,
}

impl Default for EngineConfig {
    fn default() -> Self {
        EngineConfig {
            hitl_timeout: Duration::from_secs(300),
            session_timeout: Duration::from_secs(3600),
            history_window: 50,
            event_ring: 1024,
            checkpoint_keep: 3,
            data_dir: PathBuf::from("./agentry-data"),
            max_restarts: 2,
            cancel_grace: Duration::from_millis(300),
            event_flush_interval: Duration::from_millis(100),
            max_live_sessions: 1_000,
            session_lease_ttl: Duration::from_secs(10),
            replica_ttl: Duration::from_secs(3),
            forward_timeout: Duration::from_secs(5),
            reserve_output_tokens: 1024,
            mcp_pool: McpPoolConfig::default(),
            tasks: TaskLimits::default(),
        }
    }
}

/// The MCP pool's timers and where its servers run (`[mcp]`; see `mcp_pool`).
#[derive(Debug, Clone)]
pub struct McpPoolConfig {
    pub health_interval: Duration,
    pub idle_timeout: Duration,
    /// How long a run waits for servers that are still connecting before it starts without them.
    pub connect_wait: Duration,
    pub backoff_base: Duration,
    pub backoff_max: Duration,
    /// Where stdio servers run; the default refuses to start them.
    pub sandbox: agentry_sandbox::SandboxHandle,
    /// `{data_dir}/workspaces`: a stdio server runs in `{workspaces}/{tenant}/{user}`, its
    /// user's workspace. Filled in from the engine's data dir when left empty.
    pub workspaces: std::path::PathBuf,
    /// Resolves and checks the host of a user's HTTP server on every connection (the
    /// operator's servers are not checked). The default refuses private and loopback addresses.
    pub user_http_guard: Arc<GuardedResolver>,
}

impl Default for McpPoolConfig {
    fn default() -> Self {
        McpPoolConfig {
            health_interval: Duration::from_secs(30),
            idle_timeout: Duration::from_secs(600),
            connect_wait: Duration::from_secs(10),
            backoff_base: Duration::from_millis(500),
            backoff_max: Duration::from_secs(60),
            sandbox: agentry_sandbox::SandboxHandle::default(),
            workspaces: std::path::PathBuf::new(),
            user_http_guard: Arc::new(GuardedResolver::new(&BuiltinConfig::default())),
        }
    }
}

/// How far delegation goes (`[tasks]` in the server's configuration).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TaskLimits {
    /// How deep child runs nest: a run a person started is at depth 0, its children at 1.
    pub max_depth: u32,
    /// `task` calls one model step may make; the ones past it are refused.
    pub max_per_step: u32,
    /// Child runs of one run going at once; more wait for a place.
    pub max_parallel: u32,
}

impl Default for TaskLimits {
    fn default() -> Self {
        TaskLimits {
            max_depth: 3,
            max_per_step: 5,
            max_parallel: 3,
        }
    }
}
