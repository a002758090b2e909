//! Cluster mode across replicas (issue 13; docs/operations.md, "Running N replicas"): client
//! commands forwarded to the replica that runs a session ([`forward`]), and failover: the
//! replicas' heartbeats and the watcher that takes over a dead replica's sessions
//! ([`watcher`]). The events of a session reach every replica through its stream
//! (`session::remote`).

pub(crate) mod forward;
pub mod watcher;

use std::sync::Arc;

use crate::engine::Engine;

/// Start this replica's part of the cluster: the replicas' bus (answering the commands others
/// forward here), the heartbeat and the failover watcher. A no-op in single-node mode.
pub(crate) fn start(engine: &Engine) {
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
