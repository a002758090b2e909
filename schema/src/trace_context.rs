//! The W3C trace context of a `tracing` span, when OpenTelemetry export is on (the gateway
//! installs the layer that gives spans their trace and span ids; without it there are none).
//! Model and MCP calls send it as `traceparent`, runs store their trace id, and a run resumed
//! after a restart continues the trace its checkpoint names.

use opentelemetry::trace::{SpanContext, SpanId, TraceContextExt, TraceFlags, TraceId, TraceState};
use tracing_opentelemetry::OpenTelemetrySpanExt;

fn span_context(span: &tracing::Span) -> Option<SpanContext> {
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

/// A version-00 `traceparent` (`00-<32 hex>-<16 hex>-<2 hex>`, ids not all zero) as a remote
/// span context; anything else is `None`.
fn parse(traceparent: &str) -> Option<SpanContext> {
    let mut parts = traceparent.trim().split('-');
    let (version, trace, span, flags) =
        (parts.next()?, parts.next()?, parts.next()?, parts.next()?);
    let lower_hex = |s: &str, len: usize| {
        s.len() == len
            && s.bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    };
    if parts.next().is_some()
        || version != "00"
        || !lower_hex(trace, 32)
        || !lower_hex(span, 16)
        || !lower_hex(flags, 2)
    {
        return None;
    }
    let sc = SpanContext::new(
        TraceId::from_hex(trace).ok()?,
        SpanId::from_hex(span).ok()?,
        TraceFlags::new(u8::from_str_radix(flags, 16).ok()?),
        true,
        TraceState::default(),
    );
    sc.is_valid().then_some(sc)
}

/// Make `span` (not entered yet) a child of the remote span `traceparent` names, so it joins
/// that trace. Returns whether it did: a malformed value, or tracing being off, leaves `span`
/// starting a trace of its own.
pub fn continue_from(span: &tracing::Span, traceparent: &str) -> bool {
    let Some(sc) = parse(traceparent) else {
        return false;
    };
    let cx = opentelemetry::Context::new().with_remote_span_context(sc);
    span.set_parent(cx).is_ok() && span_context(span).is_some()
}

#[cfg(test)]
mod tests {
    use super::parse;

    #[test]
    fn only_well_formed_version_00_traceparents_parse() {
        let ok = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
        let sc = parse(ok).unwrap();
        assert_eq!(
            sc.trace_id().to_string(),
            "4bf92f3577b34da6a3ce929d0e0e4736"
        );
        assert_eq!(sc.span_id().to_string(), "00f067aa0ba902b7");
        assert!(sc.is_sampled() && sc.is_remote());
        for bad in [
            "",
            "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-x",
            "00-4bf92f3577b34da6a3ce929d0e0e473-00f067aa0ba902b7-01",
        ] {
            assert!(parse(bad).is_none(), "{bad}");
        }
    }
}
