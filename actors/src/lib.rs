//! agentry-actors: the actor tree of DESIGN §3 and the agent loop of §4.
//!
//! ```text
//! Registry (one per process)            tenant id -> TenantSupervisor
//! └─ TenantSupervisor (one per tenant)  routes by session; restarts dead session actors
//!    ├─ QuotaActor                      rate, concurrency, sessions per user, tokens per day
//!    ├─ McpPoolActor                    per-user MCP connections: connect, health, backoff, idle
//!    └─ SessionActor (per live session) event log + replay, subscribers, the run, the queue
//!       └─ (the agent loop, a task on the engine runtime)
//!
//! ApprovalDesk (one per process, not an actor)  pending approvals and questions by id: a
//!                                               decision goes from the adapter to the waiting
//!                                               run through it, in one hop
//! ```
//!
//! [`Engine`] ([`engine`]) is the facade the gateway calls; [`agent`] is the agent loop a session
//! runs. Nothing here knows HTTP.

pub mod agent;
pub mod cluster;
pub mod config;
pub mod deps;
pub mod engine;
pub mod error;
pub mod hitl;
pub mod journal;
pub mod live_sessions;
pub mod mcp_pool;
pub mod metrics;
pub mod profiles;
pub mod quota;
pub mod registry;
pub mod remote_agents;
pub mod session;
pub mod supervise;
pub mod tenant;
#[cfg(feature = "test-hooks")]
pub mod test_hooks;
pub mod tools;

pub use config::EngineConfig;
pub use deps::{
    AllowAll, ChosenModel, ConfiguredModels, EngineDeps, ModelProvider, ModelRefusal,
    TenantConnections, ToolPolicy, ToolProvider, ToolRequest, ToolSet,
};
pub use engine::{
    ChatCommand, ChatStarted, CreateSession, Engine, RunOutput, RunStream, SessionHandle,
    channel_subscriber, check_message,
};
pub use error::EngineError;
pub use profiles::ModelChoice;
pub use session::{ChatAccepted, SessionEvent, SessionStatus, Subscriber, SubscriptionId};
