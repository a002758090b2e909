//! agentry-gateway: the `agentry` binary's library. HTTP, WebSocket and SSE over the actor
//! system, authentication, the admin API, OpenAPI and metrics; the composition root that wires
//! the store, the model clients, the tools and the actors together.

pub mod access;
pub mod admin_cli;
pub mod auth;
pub mod cluster;
pub mod error;
pub mod extract;
pub mod invalidate;
#[cfg(test)]
mod layout;
pub mod mcp_reexport;
pub mod mcp_server;
pub mod metrics;
pub mod openapi;
pub mod readiness;
pub mod request_id;
pub mod retention;
pub mod roles;
pub mod routes;
pub mod settings;
pub mod skill_bundle;
pub mod startup;
pub mod state;
pub mod telemetry;
pub mod tenancy;
pub mod views;
pub mod virtual_servers;
pub mod wiring;
pub mod ws;

pub use settings::Settings;
pub use startup::Application;
