//! Prometheus metrics at `/metrics`.
//!
//! The process installs one `metrics` recorder (the Prometheus exporter); everything in the
//! process — this crate's HTTP metrics and the engine's own (`agentry_live_sessions`,
//! `agentry_runs_total{status}`, `agentry_tokens_total{tenant}`, `agentry_hitl_wait_seconds`,
//! `agentry_quota_rejections_total{quota}`, `agentry_ws_connections`) — goes through the
//! `metrics` macros into it.
//!
//! HTTP requests are counted and timed by method, the matched route *pattern*
//! (`/api/v1/sessions/{id}`, never the raw path, so ids cannot blow up the label space;
//! `unmatched` for unknown routes) and status.

use std::sync::OnceLock;
use std::time::{Duration, Instant};

use actix_web::body::{BoxBody, MessageBody};
use actix_web::dev::{ServiceRequest, ServiceResponse};
use actix_web::http::Method;
use actix_web::middleware::Next;
use actix_web::{HttpResponse, web};
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};

pub const HTTP_REQUESTS: &str = "agentry_http_requests_total";
pub const HTTP_DURATION: &str = "agentry_http_request_duration_seconds";

/// Latency buckets (seconds) for every `*_seconds` histogram: from a cached auth hit to a long
/// approval wait.
const BUCKETS: &[f64] = &[
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0,
];

static HANDLE: OnceLock<PrometheusHandle> = OnceLock::new();

/// The process's Prometheus handle, installing the recorder on first use. Should another
/// recorder already be installed (an embedding program's), `/metrics` renders an empty
/// registry rather than failing the start.
pub fn handle() -> PrometheusHandle {
    HANDLE
        .get_or_init(|| {
            let builder = || {
                PrometheusBuilder::new()
                    .set_buckets_for_metric(Matcher::Suffix("_seconds".into()), BUCKETS)
                    .unwrap_or_else(|_| PrometheusBuilder::new())
            };
            match builder().install_recorder() {
                Ok(h) => {
                    describe();
                    h
                }
                Err(e) => {
                    tracing::warn!(error = %e, "a metrics recorder is already installed; /metrics will be empty");
                    builder().build_recorder().handle()
                }
            }
        })
        .clone()
}

fn describe() {
    metrics::describe_counter!(
        HTTP_REQUESTS,
        "HTTP requests by method, route pattern and status"
    );
    metrics::describe_histogram!(
        HTTP_DURATION,
        metrics::Unit::Seconds,
        "HTTP request latency (until the response head) by method, route pattern and status"
    );
    metrics::describe_gauge!("agentry_live_sessions", "Session actors alive");
    metrics::describe_counter!("agentry_runs_total", "Agent runs finished, by status");
    metrics::describe_counter!("agentry_tokens_total", "Model tokens used, by tenant");
    metrics::describe_histogram!(
        "agentry_hitl_wait_seconds",
        metrics::Unit::Seconds,
        "How long approvals and questions waited for a human"
    );
    metrics::describe_counter!(
        "agentry_quota_rejections_total",
        "Requests refused by a tenant quota, by quota"
    );
    metrics::describe_gauge!("agentry_ws_connections", "Open WebSocket connections");
}

/// Drain histogram buckets now and then so memory stays flat between scrapes.
pub fn spawn_upkeep(handle: PrometheusHandle) {
    actix_web::rt::spawn(async move {
        let mut tick = tokio::time::interval(Duration::from_secs(5));
        loop {
            tick.tick().await;
            handle.run_upkeep();
        }
    });
}

fn method_label(m: &Method) -> &'static str {
    match *m {
        Method::GET => "GET",
        Method::POST => "POST",
        Method::PUT => "PUT",
        Method::PATCH => "PATCH",
        Method::DELETE => "DELETE",
        Method::HEAD => "HEAD",
        Method::OPTIONS => "OPTIONS",
        _ => "other",
    }
}

/// Middleware: count and time every request.
pub async fn track(
    req: ServiceRequest,
    next: Next<impl MessageBody + 'static>,
) -> Result<ServiceResponse<BoxBody>, actix_web::Error> {
    let method = method_label(req.method());
    let route = req
        .match_pattern()
        .unwrap_or_else(|| "unmatched".to_string());
    let start = Instant::now();
    let res = next
        .call(req)
        .await
        .map(ServiceResponse::map_into_boxed_body);
    let status = match &res {
        Ok(r) => r.status(),
        Err(e) => e.as_response_error().status_code(),
    };
    let labels = [
        ("method", method.to_string()),
        ("route", route),
        ("status", status.as_u16().to_string()),
    ];
    metrics::counter!(HTTP_REQUESTS, &labels).increment(1);
    metrics::histogram!(HTTP_DURATION, &labels).record(start.elapsed().as_secs_f64());
    res
}

pub fn configure(cfg: &mut web::ServiceConfig) {
    cfg.service(crate::routes::resource::endpoint("/metrics").get(render));
}

/// Prometheus text exposition of every metric of the process.
#[utoipa::path(
    get,
    path = "/metrics",
    tag = "meta",
    security(()),
    responses((status = 200, description = "Prometheus text format (version 0.0.4)", body = String, content_type = "text/plain"))
)]
pub async fn render(state: web::Data<crate::state::AppState>) -> HttpResponse {
    HttpResponse::Ok()
        .content_type("text/plain; version=0.0.4; charset=utf-8")
        .body(state.metrics.render())
}
