//! The MCP client's integration tests, one binary (each test binary links the crate tree): config
//! hot reload, the official conformance scenarios, the OAuth fixture, real MCP servers.

#[path = "../support/mod.rs"]
mod support;

mod config_reload;
mod conformance;
mod oauth_fixture;
mod real_servers;
