//! The engine's metrics, through the `metrics` facade; the gateway installs the Prometheus
//! recorder. Without a recorder (tests) these are no-ops.

use std::time::Duration;

use agentry_schema::events::DoneStatus;

pub fn record_hitl_wait(waited: Duration, decided: bool) {
    metrics::histogram!("agentry_hitl_wait_seconds", "outcome" => if decided { "decided" } else { "timed_out_or_cancelled" })
        .record(waited.as_secs_f64());
}

pub fn record_run_done(status: DoneStatus, tenant: &str, tokens: u64) {
    metrics::counter!("agentry_runs_total", "status" => status.as_str()).increment(1);
    if tokens > 0 {
        metrics::counter!("agentry_tokens_total", "tenant" => tenant.to_string()).increment(tokens);
    }
}

pub fn record_quota_rejection(quota: &'static str) {
    metrics::counter!("agentry_quota_rejections_total", "quota" => quota).increment(1);
}

pub fn live_sessions(delta: f64) {
    metrics::gauge!("agentry_live_sessions").increment(delta);
}
