//! The W3C trace context of a `tracing` span, when OpenTelemetry export is on (the gateway
//! installs the layer that gives spans their trace and span ids; without it there are none).
//! Model calls send it as `traceparent`, runs store their trace id.

use opentelemetry::trace::TraceContextExt;
use tracing_opentelemetry::OpenTelemetrySpanExt;

fn span_context(span: &tracing::Span) -> Option<opentelemetry::trace::SpanContext> {
    let cx = span.context();
    let sc = cx.span().span_context().clone();
    sc.is_valid().then_some(sc)
}

/// The `traceparent` header value for a call made inside `span` (`00-<trace>-<span>-<flags>`).
pub fn traceparent(span: &tracing::Span) -> Option<String> {
    span_context(span).map(|sc| {
        format!(
            "00-{}-{}-{:02x}",
            sc.trace_id(),
            sc.span_id(),
            sc.trace_flags().to_u8()
        )
    })
}

/// The 32-hex-digit trace id `span` belongs to.
pub fn trace_id(span: &tracing::Span) -> Option<String> {
    span_context(span).map(|sc| sc.trace_id().to_string())
}
