//! Cluster mode across replicas (issue 13; docs/operations.md, "Running N replicas"): this
//! replica's part in the cluster, started over the engine once it is built — the replicas' bus
//! (answering the commands others forward here), the heartbeat and the failover watcher that
//! takes over a dead replica's sessions ([`watcher`]). Sending a command to the replica that
//! runs a session is the engine's own (`engine::forward`); the events of a session reach every
//! replica through its stream (`session::remote`).
//!
//! This module takes the [`Engine`] and the engine does not name it: the dependency goes one
//! way (see `services/gateway/src/layout.rs`).

pub mod watcher;

use std::sync::Arc;

use crate::engine::Engine;

impl Engine {
    /// Cluster mode: take this replica's part in the cluster (the replicas' bus, answering
    /// commands forwarded here; the heartbeat; the failover watcher). Call once, after
    /// [`Engine::with_quotas`]. A no-op in single-node mode.
    pub fn start_cluster(&self) {
        start(self);
    }
}

/// Start this replica's part of the cluster: the replicas' bus (answering the commands others
/// forward here), the heartbeat and the failover watcher. A no-op in single-node mode.
fn start(engine: &Engine) {
    let Some(coordination) = engine.deps().coordination.clone() else {
        return;
    };
    let bus = coordination.start_bus(&engine.deps().runtime);
    let me = engine.clone();
    bus.serve(Arc::new(move |body| {
        let engine = me.clone();
        Box::pin(async move { engine.answer_forwarded(body).await })
    }));
    watcher::start(engine);
}
