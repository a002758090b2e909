//! agentry-gateway: the `agentry` binary's library. The protocol adapters over the actor system
//! (`protocols/`: REST chat, SSE, WebSocket, the OpenAI-compatible `/v1`, the MCP server),
//! the resource routes (`routes/`), authentication, the admin API, OpenAPI and metrics; the
//! composition root that wires the store, the model clients, the tools and the actors together.

pub mod access;
pub mod admin_cli;
pub mod auth;
pub mod cluster;
pub mod error;
pub mod extract;
#[cfg(test)]
mod layout;
pub mod mcp_stored;
pub mod metrics;
pub mod openapi;
pub mod protocols;
pub mod readiness;
pub mod request_id;
pub mod routes;
pub mod settings;
pub mod startup;
pub mod state;
pub mod telemetry;
pub mod views;
pub mod webhooks;
pub mod wiring;

pub use settings::Settings;
pub use startup::Application;

/// The retention sweep of `agentry_domain::retention`, started with this process's settings.
pub mod retention {
    use actix_web::web;

    use crate::state::AppState;

    pub fn spawn(state: web::Data<AppState>) {
        let policy = agentry_domain::retention::Policy {
            interval: std::time::Duration::from_secs(state.settings.retention.interval_secs),
            session_days: state.settings.session.retention_days,
            checkpoints_per_session: state.settings.retention.checkpoints_per_session,
            event_days: state.settings.retention.event_days,
        };
        let shutdown = state.shutdown.clone();
        agentry_domain::retention::spawn(state.into_inner(), policy, shutdown);
    }
}

/// The listener of `agentry_domain::invalidate` (cluster mode), over this process's state.
pub mod invalidate {
    use actix_web::web;

    use crate::state::AppState;

    pub fn spawn_listener(state: web::Data<AppState>) {
        agentry_domain::invalidate::spawn_listener(state.into_inner());
    }
}
