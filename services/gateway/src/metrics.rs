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
//!
//! Labels whose values tenants choose are bounded (`agentry_actors::metrics::BoundedLabel`):
//! tenant ids only with `metrics.tenant_labels`, model names and MCP tools capped. Each scrape
//! also samples the process (`process_*`, from `/proc`) and the database pool
//! (`agentry_db_pool_connections{state}`) and counts the SQL statements sent
//! (`agentry_db_statements_total{kind}`). With `metrics.token` set, `/metrics` needs it.

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
pub const DB_STATEMENTS: &str = "agentry_db_statements_total";

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
    metrics::describe_counter!(
        agentry_domain::retention::SWEEPS,
        "Retention sweeps finished by this process"
    );
    metrics::describe_counter!(
        agentry_domain::retention::REMOVED,
        "Rows the retention sweep removed, by kind (sessions, checkpoints, memories, events)"
    );
    metrics::describe_histogram!(
        agentry_domain::retention::SWEEP_SECONDS,
        metrics::Unit::Seconds,
        "How long each retention sweep took"
    );
    metrics::describe_gauge!(
        agentry_domain::retention::SWEEPER,
        "1 while this process runs the retention sweep (always on a single node; the duty's holder in a cluster)"
    );
    metrics::describe_histogram!(
        "agentry_model_call_duration_seconds",
        metrics::Unit::Seconds,
        "Model calls until the answer ended, by provider, model and outcome (ok, error, cancelled)"
    );
    metrics::describe_counter!(
        "agentry_model_errors_total",
        "Failed model calls by provider, model and kind (rate_limited, server, timeout, connect, auth, bad_request, decode, config)"
    );
    metrics::describe_counter!(
        "agentry_tool_calls_total",
        "Tool calls by tool (MCP tools together as `mcp`) and outcome (success, error, failed)"
    );
    metrics::describe_histogram!(
        "agentry_tool_call_duration_seconds",
        metrics::Unit::Seconds,
        "Tool call latency by tool and outcome"
    );
    metrics::describe_gauge!(
        "agentry_approvals_waiting",
        "Approvals and questions waiting for a human"
    );
    metrics::describe_counter!(
        "agentry_actor_restarts_total",
        "Tenant actors (quota, mcp_pool) restarted by their supervisor, by why (stopped, panicked)"
    );
    metrics::describe_gauge!(
        "agentry_db_pool_connections",
        "Database pool connections by state (in_use, idle)"
    );
    metrics::describe_counter!(
        DB_STATEMENTS,
        "SQL statements sent to the database, by kind (select, insert, update, delete, other)"
    );
    metrics::describe_gauge!(
        "agentry_db_pool_max_connections",
        "Database pool size limit (database.max_connections)"
    );
    metrics::describe_gauge!(
        "process_resident_memory_bytes",
        metrics::Unit::Bytes,
        "Resident memory of the process"
    );
    metrics::describe_gauge!("process_open_fds", "Open file descriptors");
    metrics::describe_gauge!("process_max_fds", "The open file descriptor limit");
    metrics::describe_gauge!(
        "agentry_mcp_connections",
        "MCP client connections by state (connecting, connected, error, …), over every tenant"
    );
    metrics::describe_counter!(
        "agentry_mcp_calls_total",
        "MCP tools/call requests by outcome (ok, tool_error, timeout, cancelled, transport_error, error)"
    );
    metrics::describe_histogram!(
        "agentry_mcp_call_duration_seconds",
        metrics::Unit::Seconds,
        "MCP tools/call latency"
    );
    metrics::describe_counter!(
        "agentry_mcp_reconnects_total",
        "Reconnects of MCP servers that had been connected"
    );
    metrics::describe_counter!(
        "agentry_mcp_server_calls_total",
        "MCP tools/call requests through the pool by server (a platform server's name, or user:<name>) and outcome (ok, error, timeout, cancelled)"
    );
    metrics::describe_histogram!(
        "agentry_mcp_server_call_duration_seconds",
        metrics::Unit::Seconds,
        "MCP tools/call latency by server"
    );
    metrics::describe_counter!(
        "agentry_mcp_server_reconnects_total",
        "Reconnects of MCP servers that had been connected, by server"
    );
    metrics::describe_counter!(
        "agentry_mcp_server_connect_failures_total",
        "Failed MCP connect attempts, by server"
    );
    metrics::describe_gauge!(
        "agentry_mcp_server_connections",
        "MCP client connections by server and state, over every tenant and user"
    );
    metrics::describe_counter!(
        crate::telemetry::SPANS_DROPPED,
        "Trace spans not exported, by reason (queue_full, export_failed, shut_down)"
    );
    metrics::describe_counter!(
        crate::telemetry::SPANS_EXPORTED,
        "Trace spans the OTLP collector accepted"
    );
    // Present (at 0) from the start, so an alert on drops has a series to watch.
    for reason in ["queue_full", "export_failed"] {
        metrics::counter!(crate::telemetry::SPANS_DROPPED, "reason" => reason).increment(0);
    }
    metrics::counter!("agentry_mcp_reconnects_total").increment(0);
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
        .map(|p| documented_form(&p))
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

/// A route pattern as the OpenAPI document writes it: a parameter's regex dropped
/// (`/files/{path:.*}` → `/files/{path}`), so the label matches the documented path.
fn documented_form(pattern: &str) -> String {
    let mut out = String::with_capacity(pattern.len());
    let mut in_regex = false;
    let mut depth = 0usize;
    for c in pattern.chars() {
        match c {
            '{' => {
                depth += 1;
                if !in_regex {
                    out.push(c);
                }
            }
            '}' => {
                depth = depth.saturating_sub(1);
                if depth == 0 {
                    in_regex = false;
                    out.push(c);
                }
            }
            ':' if depth == 1 => in_regex = true,
            _ if !in_regex => out.push(c),
            _ => {}
        }
    }
    out
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
pub async fn render(
    state: web::Data<crate::state::AppState>,
    req: actix_web::HttpRequest,
) -> Result<HttpResponse, crate::error::ApiError> {
    let token = &state.settings.metrics.token;
    if !token.is_empty() {
        let presented = req
            .headers()
            .get(actix_web::http::header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "))
            .unwrap_or_default();
        use subtle::ConstantTimeEq;
        if !bool::from(presented.as_bytes().ct_eq(token.expose().as_bytes())) {
            return Err(crate::error::ApiError::new(
                agentry_schema::error::ErrorCode::Unauthorized,
                "`/metrics` needs the metrics token: `Authorization: Bearer <metrics.token>`",
            ));
        }
    }
    sample_process();
    sample_pool(&state.db);
    sample_statements();
    let mut body = state.metrics.render();
    body.push_str(&cpu_seconds_family());
    Ok(HttpResponse::Ok()
        .content_type("text/plain; version=0.0.4; charset=utf-8")
        .body(body))
}

/// `process_cpu_seconds_total`, written here rather than through the recorder: it is a counter
/// (it only grows), and the recorder's counters are whole numbers while CPU time is counted in
/// hundredths of a second. Empty where `/proc/self/stat` cannot be read.
fn cpu_seconds_family() -> String {
    // Fields 14 and 15 (utime, stime) after the parenthesised command name, in clock ticks;
    // /proc always counts in USER_HZ, which Linux fixes at 100 for user space.
    let Some(seconds) = std::fs::read_to_string("/proc/self/stat")
        .ok()
        .and_then(|stat| {
            let (_, rest) = stat.rsplit_once(')')?;
            let fields: Vec<&str> = rest.split_whitespace().collect();
            let ticks = |i: usize| fields.get(i).and_then(|f| f.parse::<f64>().ok());
            Some((ticks(11)? + ticks(12)?) / 100.0)
        })
    else {
        return String::new();
    };
    format!(
        "# HELP process_cpu_seconds_total CPU time (user and system) the process used since it started\n\
         # TYPE process_cpu_seconds_total counter\n\
         process_cpu_seconds_total {seconds}\n"
    )
}

/// The process's resident memory and file descriptors, from `/proc/self` (Linux; on other
/// systems these gauges are absent). CPU time is [`cpu_seconds_family`].
fn sample_process() {
    if let Ok(status) = std::fs::read_to_string("/proc/self/status")
        && let Some(kb) = status
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
    {
        metrics::gauge!("process_resident_memory_bytes").set(kb * 1024.0);
    }
    if let Ok(dir) = std::fs::read_dir("/proc/self/fd") {
        metrics::gauge!("process_open_fds").set(dir.count() as f64);
    }
    if let Ok(limits) = std::fs::read_to_string("/proc/self/limits")
        && let Some(soft) = limits
            .lines()
            .find(|l| l.starts_with("Max open files"))
            .and_then(|l| l.split_whitespace().nth(3))
            .and_then(|v| v.parse::<f64>().ok())
    {
        metrics::gauge!("process_max_fds").set(soft);
    }
}

/// SQL statements sent so far, by kind (`agentry_store::stats`).
fn sample_statements() {
    for (kind, n) in agentry_store::stats::statement_counts().iter() {
        metrics::counter!(DB_STATEMENTS, "kind" => kind).absolute(n);
    }
}

/// Connections of the database pool in use and idle, and its limit (`database.max_connections`;
/// one on SQLite, see `agentry_store::connect`).
fn sample_pool(db: &sea_orm::DatabaseConnection) {
    use sea_orm::DbBackend;
    let (size, idle, max) = match db.get_database_backend() {
        DbBackend::Postgres => {
            let p = db.get_postgres_connection_pool();
            (p.size(), p.num_idle(), p.options().get_max_connections())
        }
        DbBackend::MySql => {
            let p = db.get_mysql_connection_pool();
            (p.size(), p.num_idle(), p.options().get_max_connections())
        }
        DbBackend::Sqlite => {
            let p = db.get_sqlite_connection_pool();
            (p.size(), p.num_idle(), p.options().get_max_connections())
        }
        _ => return,
    };
    let idle = idle as f64;
    metrics::gauge!("agentry_db_pool_connections", "state" => "idle").set(idle);
    metrics::gauge!("agentry_db_pool_connections", "state" => "in_use")
        .set((f64::from(size) - idle).max(0.0));
    metrics::gauge!("agentry_db_pool_max_connections").set(f64::from(max));
}

#[cfg(test)]
mod route_label_tests {
    use super::documented_form;

    #[test]
    fn route_labels_drop_parameter_regexes() {
        assert_eq!(
            documented_form("/api/v1/files/{path:.*}"),
            "/api/v1/files/{path}"
        );
        assert_eq!(documented_form("/docs/{_:.*}"), "/docs/{_}");
        assert_eq!(
            documented_form("/api/v1/sessions/{session_id}/events"),
            "/api/v1/sessions/{session_id}/events"
        );
        assert_eq!(documented_form("/x/{n:[0-9]{2}}/y"), "/x/{n}/y");
    }
}
