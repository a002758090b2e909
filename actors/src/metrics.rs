//! What an operator watches of the engine: its metrics, through the `metrics` facade (the
//! gateway installs the Prometheus recorder; without one, as in tests, these are no-ops). The
//! log line of each run that did not complete is the run's outcome's own
//! (`agent::RunOutcome::log_end`).
//!
//! A leaf: the engine's modules report here, so it names none of them.

use std::collections::BTreeSet;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use agentry_schema::events::DoneStatus;
pub fn record_hitl_wait(waited: Duration, decided: bool) {
    metrics::histogram!("agentry_hitl_wait_seconds", "outcome" => if decided { "decided" } else { "timed_out_or_cancelled" })
        .record(waited.as_secs_f64());
}

pub fn record_run_done(status: DoneStatus, tenant: &str, tokens: u64) {
    metrics::counter!("agentry_runs_total", "status" => status.as_str()).increment(1);
    if tokens > 0 {
        match TENANT_LABELS.label(tenant) {
            Some(t) => metrics::counter!("agentry_tokens_total", "tenant" => t).increment(tokens),
            None => metrics::counter!("agentry_tokens_total").increment(tokens),
        }
    }
}

/// A label whose values come from tenants (their ids, the model names their assistants ask
/// for) gets at most `cap` distinct values in the process; the rest are `other`, so a tenant
/// cannot grow the metric series without bound.
pub struct BoundedLabel {
    enabled: AtomicBool,
    cap: AtomicUsize,
    seen: Mutex<BTreeSet<String>>,
}

impl BoundedLabel {
    const fn new(enabled: bool, cap: usize) -> Self {
        BoundedLabel {
            enabled: AtomicBool::new(enabled),
            cap: AtomicUsize::new(cap),
            seen: Mutex::new(BTreeSet::new()),
        }
    }

    /// Turn the label on or off and set how many values it may take.
    pub fn configure(&self, enabled: bool, cap: usize) {
        self.enabled.store(enabled, Ordering::Relaxed);
        self.cap.store(cap, Ordering::Relaxed);
    }

    /// The value to record: `value` while there is room (or it was seen), `other` beyond the
    /// cap, `None` when the label is off.
    pub fn label(&self, value: &str) -> Option<String> {
        if !self.enabled.load(Ordering::Relaxed) {
            return None;
        }
        let mut seen = self.seen.lock().unwrap_or_else(|e| e.into_inner());
        if seen.contains(value) {
            return Some(value.to_string());
        }
        if seen.len() < self.cap.load(Ordering::Relaxed) {
            seen.insert(value.to_string());
            return Some(value.to_string());
        }
        Some("other".to_string())
    }
}

/// The `tenant` label of `agentry_tokens_total`: off unless `metrics.tenant_labels` (the
/// gateway configures it at start).
pub static TENANT_LABELS: BoundedLabel = BoundedLabel::new(false, 0);

/// The `model` label of the model-call metrics: model names come from assistants, which tenants
/// write.
pub static MODEL_LABELS: BoundedLabel = BoundedLabel::new(true, 50);

/// The names of users' MCP servers in the per-server MCP metrics (`server="user:<name>"`):
/// tenants choose them. Platform servers (the operator's config file) are labelled by name
/// without a cap.
pub static MCP_USER_SERVER_LABELS: BoundedLabel = BoundedLabel::new(true, 50);

/// What kind of failure a model call had, as a bounded label.
pub fn model_error_kind(e: &agentry_llm::LlmError) -> &'static str {
    use agentry_llm::LlmError as E;
    match e {
        E::RateLimited { .. } => "rate_limited",
        E::Server { .. } => "server",
        E::Timeout(_) => "timeout",
        E::Connect(_) => "connect",
        E::Auth { .. } => "auth",
        E::BadRequest { .. } => "bad_request",
        E::Decode(_) => "decode",
        E::Config(_) => "config",
    }
}

/// One model call: its latency until the answer ended (or failed, or the run was cancelled),
/// by provider, model and outcome (`ok`, `error`, `cancelled`); failures also count by provider,
/// model and kind ([`model_error_kind`]).
pub fn record_model_call(
    provider: &str,
    model: &str,
    took: Duration,
    outcome: &'static str,
    error: Option<&str>,
) {
    let model = MODEL_LABELS.label(model).unwrap_or_default();
    metrics::histogram!(
        "agentry_model_call_duration_seconds",
        "provider" => provider.to_string(),
        "model" => model.clone(),
        "outcome" => outcome
    )
    .record(took.as_secs_f64());
    if let Some(kind) = error {
        metrics::counter!(
            "agentry_model_errors_total",
            "provider" => provider.to_string(),
            "model" => model,
            "kind" => kind.to_string()
        )
        .increment(1);
    }
}

/// The `tool` label: the model names the tool, and may name ones that do not exist.
pub static TOOL_LABELS: BoundedLabel = BoundedLabel::new(true, 100);

/// One tool call, by tool and outcome (`success`, `error`: the tool reported failure, `failed`:
/// no result — unknown, refused, invalid, timed out), with its latency. MCP tools (named
/// `<server>__<tool>` by servers tenants add) count together as `mcp`.
pub fn record_tool_call(name: &str, outcome: &'static str, took: Duration) {
    let tool = if name.contains("__") {
        "mcp".to_string()
    } else {
        TOOL_LABELS.label(name).unwrap_or_default()
    };
    metrics::counter!("agentry_tool_calls_total", "tool" => tool.to_string(), "outcome" => outcome)
        .increment(1);
    metrics::histogram!("agentry_tool_call_duration_seconds", "tool" => tool.to_string(), "outcome" => outcome)
        .record(took.as_secs_f64());
}

/// Approvals and questions waiting for a human right now.
pub fn approvals_waiting(delta: f64) {
    metrics::gauge!("agentry_approvals_waiting").increment(delta);
}

/// A supervised actor (quota, MCP pool) was restarted after it stopped or panicked.
pub fn actor_restarted(actor: &'static str, why: &'static str) {
    metrics::counter!("agentry_actor_restarts_total", "actor" => actor, "why" => why).increment(1);
}

pub fn record_quota_rejection(quota: &'static str) {
    metrics::counter!("agentry_quota_rejections_total", "quota" => quota).increment(1);
}

pub fn live_sessions(delta: f64) {
    metrics::gauge!("agentry_live_sessions").increment(delta);
}

#[cfg(test)]
mod tests {
    use super::BoundedLabel;

    #[test]
    fn bounded_labels_keep_the_first_values_and_call_the_rest_other() {
        let l = BoundedLabel::new(true, 2);
        assert_eq!(l.label("a").as_deref(), Some("a"));
        assert_eq!(l.label("b").as_deref(), Some("b"));
        assert_eq!(l.label("c").as_deref(), Some("other"));
        assert_eq!(
            l.label("a").as_deref(),
            Some("a"),
            "seen values keep their label"
        );
        l.configure(false, 2);
        assert_eq!(l.label("a"), None, "off: no label at all");
    }
}
