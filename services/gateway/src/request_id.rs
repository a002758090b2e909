//! `X-Request-Id` on every response: kept from the request when it is sane, generated
//! otherwise, and recorded on the request's tracing span; and the access log, one line per
//! request (target `agentry::access`).

use actix_web::body::{BoxBody, MessageBody};
use actix_web::dev::{ServiceRequest, ServiceResponse};
use actix_web::http::header::{HeaderName, HeaderValue};
use actix_web::middleware::Next;
use std::time::Instant;

use actix_web::http::StatusCode;
use actix_web::{Error, HttpMessage};
use tracing::Instrument;

use crate::auth::Authentication;

pub const X_REQUEST_ID: HeaderName = HeaderName::from_static("x-request-id");

/// The request's id, available to handlers through `req.extensions()` or as an extractor.
#[derive(Debug, Clone)]
pub struct RequestId(pub String);

impl actix_web::FromRequest for RequestId {
    type Error = std::convert::Infallible;
    type Future = std::future::Ready<Result<Self, Self::Error>>;

    /// The middleware's id; a route mounted without it gets a fresh one.
    fn from_request(req: &actix_web::HttpRequest, _: &mut actix_web::dev::Payload) -> Self::Future {
        let id = req
            .extensions()
            .get::<RequestId>()
            .cloned()
            .unwrap_or_else(|| RequestId(uuid::Uuid::new_v4().to_string()));
        std::future::ready(Ok(id))
    }
}

fn acceptable(v: &HeaderValue) -> Option<String> {
    let s = v.to_str().ok()?;
    (!s.is_empty() && s.len() <= 128 && s.bytes().all(|b| b.is_ascii_graphic()))
        .then(|| s.to_string())
}

pub async fn request_id(
    req: ServiceRequest,
    next: Next<impl MessageBody + 'static>,
) -> Result<ServiceResponse<BoxBody>, Error> {
    let id = req
        .headers()
        .get(&X_REQUEST_ID)
        .and_then(acceptable)
        .unwrap_or_else(|| uuid::Uuid::new_v4().to_string());
    req.extensions_mut().insert(RequestId(id.clone()));
    let start = Instant::now();
    let method = req.method().to_string();
    let route = req.match_pattern();
    let unmatched = route.is_none().then(|| req.path().to_string());
    let span = tracing::info_span!(
        "http",
        otel.name = %format!("{method} {}", route.as_deref().unwrap_or("unmatched")),
        otel.kind = "server",
        otel.status_code = tracing::field::Empty,
        request_id = %id,
        method = %req.method(),
        path = %req.path(),
        http.route = route.as_deref().unwrap_or("unmatched"),
        http.response.status_code = tracing::field::Empty,
        tenant_id = tracing::field::Empty,
        user_id = tracing::field::Empty,
    );
    // W3C trace context from the caller: this request's span continues the caller's trace.
    crate::telemetry::continue_trace(&span, req.headers());
    let header = HeaderValue::from_str(&id).ok();
    let result = next.call(req).instrument(span.clone()).await;
    let (status, tenant) = match &result {
        Ok(res) => (
            res.status(),
            res.request()
                .extensions()
                .get::<Authentication>()
                .and_then(Authentication::tenant_id),
        ),
        Err(e) => (e.as_response_error().status_code(), None),
    };
    span.record("http.response.status_code", i64::from(status.as_u16()));
    if status.is_server_error() {
        span.record("otel.status_code", "ERROR");
    }
    access_log(&AccessLine {
        request_id: &id,
        method: &method,
        route: route.as_deref().unwrap_or("unmatched"),
        path: unmatched.as_deref(),
        status,
        duration_ms: start.elapsed().as_secs_f64() * 1000.0,
        tenant_id: tenant.map(|t| t.to_string()),
        trace_id: agentry_schema::trace_context::trace_id(&span),
    });
    match result {
        Ok(res) => {
            let mut res = res.map_into_boxed_body();
            if let Some(v) = header {
                res.headers_mut().insert(X_REQUEST_ID, v);
            }
            Ok(res)
        }
        // An error that escaped the handlers (a middleware's, say): keep its response, add the
        // header. (The request cannot be cloned here: routing needs it uniquely owned.)
        Err(e) => {
            let mut resp = e.error_response();
            if let Some(v) = header {
                resp.headers_mut().insert(X_REQUEST_ID, v);
            }
            Err(actix_web::error::InternalError::from_response(e.to_string(), resp).into())
        }
    }
}

/// What the access log says about one request. Never a header: keys travel in headers.
struct AccessLine<'a> {
    request_id: &'a str,
    method: &'a str,
    /// The matched route's pattern (`/api/v1/sessions/{session_id}`), `unmatched` otherwise.
    route: &'a str,
    /// The raw path, only for unmatched routes (a matched one's ids are in the pattern's place).
    path: Option<&'a str>,
    status: StatusCode,
    duration_ms: f64,
    tenant_id: Option<String>,
    /// The request's trace (when traces are exported), to open a refused or failed request's
    /// trace from its log line.
    trace_id: Option<String>,
}

/// One line per request: `info` normally, `warn` for refused credentials (401/403) and a server
/// that cannot serve (503), `error` for any other 5xx. Filter it with the `agentry::access`
/// target (`AGENTRY_LOG__LEVEL=agentry::access=warn,info` keeps only the warnings).
fn access_log(line: &AccessLine<'_>) {
    macro_rules! emit {
        ($level:expr, $message:literal) => {
            tracing::event!(
                target: "agentry::access",
                $level,
                request_id = line.request_id,
                method = line.method,
                route = line.route,
                path = line.path,
                status = line.status.as_u16(),
                duration_ms = line.duration_ms,
                tenant_id = line.tenant_id.as_deref(),
                trace_id = line.trace_id.as_deref(),
                $message
            )
        };
    }
    match line.status.as_u16() {
        401 | 403 => emit!(tracing::Level::WARN, "request refused"),
        503 => emit!(tracing::Level::WARN, "request refused: unavailable"),
        500.. => emit!(tracing::Level::ERROR, "request failed"),
        _ => emit!(tracing::Level::INFO, "request"),
    }
}
