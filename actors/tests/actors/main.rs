//! The actor tree's integration tests, one binary (each test binary links the whole crate tree,
//! so one instead of four saves CI link time): the engine end to end, the MCP pool through chat
//! runs, the engine's properties, cluster-mode quotas against Redis.

#[path = "../support/mod.rs"]
mod support;

mod engine;
mod mcp;
mod properties;
mod redis_quota;
