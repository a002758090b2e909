//! Logging and tracing. Logs: JSON or human-readable, with a filter from config that `RUST_LOG`
//! overrides; a filter that does not parse, or names no level, stops the start instead of
//! silencing the logs. Traces: when an OTLP endpoint is configured, Agentry's own spans
//! (requests, runs, steps, model and tool calls, approval waits, MCP calls) go to it over
//! OTLP/HTTP through a bounded queue that drops (and counts) rather than slow a run.

use std::sync::Mutex;
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, SyncSender, TrySendError};
use std::time::{Duration, Instant};

use opentelemetry::trace::TracerProvider as _;
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::error::{OTelSdkError, OTelSdkResult};
use opentelemetry_sdk::trace::{SdkTracerProvider, SpanData, SpanExporter, SpanProcessor};
use tracing_subscriber::Layer;
use tracing_subscriber::filter::{LevelFilter, Targets};
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;

use crate::settings::{LogFormat, LogSettings, OtelSettings};

pub mod values;
pub use values::{check_endpoint, parse_filter, parse_headers, traces_url};

/// Spans that never reached the collector, by `reason` (`queue_full`, `export_failed`).
pub const SPANS_DROPPED: &str = "agentry_otel_spans_dropped_total";
/// Spans the collector accepted.
pub const SPANS_EXPORTED: &str = "agentry_otel_spans_exported_total";
/// Spans sent to the collector in one request at most.
const MAX_BATCH: usize = 512;
/// How long a finished span waits for its batch at most.
const EXPORT_DELAY: Duration = Duration::from_secs(1);
/// One export request's limit: past it the batch is dropped and counted.
const EXPORT_TIMEOUT: Duration = Duration::from_secs(10);

/// Where spans go: `otel.endpoint`, else the standard variables (the traces-specific one as it
/// is, the general one with `/v1/traces` added). `None`: tracing is off. `OTEL_SDK_DISABLED=true`
/// turns it off whatever is set.
pub fn resolve_endpoint(
    otel: &OtelSettings,
    env: impl Fn(&str) -> Option<String>,
) -> Option<String> {
    let set = |k: &str| {
        env(k)
            .map(|v| v.trim().to_string())
            .filter(|v| !v.is_empty())
    };
    if set("OTEL_SDK_DISABLED").is_some_and(|v| v.eq_ignore_ascii_case("true")) {
        return None;
    }
    if !otel.endpoint.trim().is_empty() {
        return Some(traces_url(&otel.endpoint));
    }
    set("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
        .or_else(|| set("OTEL_EXPORTER_OTLP_ENDPOINT").map(|base| traces_url(&base)))
}

/// The OTLP protocol asked for by `OTEL_EXPORTER_OTLP_TRACES_PROTOCOL` (else
/// `OTEL_EXPORTER_OTLP_PROTOCOL`) is the one this build speaks, `http/protobuf`, or unset. gRPC
/// is not built in (it would add tonic and its HTTP/2 stack for what every collector also
/// takes over HTTP), so asking for it stops the start instead of sending HTTP to a gRPC port.
pub fn check_protocol(env: impl Fn(&str) -> Option<String>) -> Result<(), String> {
    let set = |k: &str| {
        env(k)
            .map(|v| v.trim().to_string())
            .filter(|v| !v.is_empty())
    };
    let (var, value) = match set("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL") {
        Some(v) => ("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", v),
        None => match set("OTEL_EXPORTER_OTLP_PROTOCOL") {
            Some(v) => ("OTEL_EXPORTER_OTLP_PROTOCOL", v),
            None => return Ok(()),
        },
    };
    if value == "http/protobuf" {
        return Ok(());
    }
    Err(format!(
        "{var}={value}: Agentry exports traces over OTLP/HTTP with protobuf only (`http/protobuf`); \
         point it at the collector's OTLP/HTTP receiver (port 4318) and unset {var} or set it to \
         http/protobuf (docs/deploy.md, Traces)"
    ))
}

/// What [`init`] set up; [`Telemetry::shutdown`] sends the spans still queued before the
/// process exits.
pub struct Telemetry {
    provider: Option<SdkTracerProvider>,
}

impl Telemetry {
    /// Whether spans are exported.
    pub fn tracing_enabled(&self) -> bool {
        self.provider.is_some()
    }

    /// Export what is queued (bounded by the export timeout) and stop the exporter.
    pub fn shutdown(&self) {
        if let Some(p) = &self.provider
            && let Err(e) = p.shutdown()
        {
            tracing::warn!(error = %e, "the last spans could not be exported");
        }
    }
}

/// Install the subscriber. `RUST_LOG`, when set, wins over `log.level`; either is checked by
/// [`parse_filter`], and a bad one is an error naming where it came from. With an OTLP endpoint
/// ([`resolve_endpoint`]) Agentry's spans (targets `agentry*`, level info and above, whatever
/// the log filter) are exported too, and W3C trace context is read from and written to HTTP.
/// `otel` is `None` for the commands that serve nothing (`config`, `migrate`, …).
pub fn init(log: &LogSettings, otel: Option<&OtelSettings>) -> Result<Telemetry, String> {
    let filter = match std::env::var("RUST_LOG") {
        Ok(env) if !env.trim().is_empty() => {
            parse_filter(&env).map_err(|why| format!("RUST_LOG {why}"))?
        }
        _ => parse_filter(&log.level).map_err(|why| format!("log.level {why}"))?,
    };
    let endpoint = otel.and_then(|o| resolve_endpoint(o, |k| std::env::var(k).ok()));
    if endpoint.is_some() {
        check_protocol(|k| std::env::var(k).ok())?;
    }
    let provider = match (otel, &endpoint) {
        (Some(otel), Some(url)) => Some(tracer_provider(url, otel)?),
        _ => None,
    };
    let fmt = tracing_subscriber::fmt::layer().with_writer(std::io::stderr);
    let fmt = match log.format {
        LogFormat::Json => fmt
            .json()
            .flatten_event(true)
            .with_current_span(true)
            .with_filter(filter)
            .boxed(),
        LogFormat::Pretty => fmt.with_filter(filter).boxed(),
    };
    let otel_layer = provider.as_ref().map(|p| {
        tracing_opentelemetry::layer()
            .with_tracer(p.tracer("agentry"))
            .with_tracked_inactivity(false)
            .with_threads(false)
            .with_filter(Targets::new().with_target("agentry", LevelFilter::INFO))
    });
    if provider.is_some() {
        opentelemetry::global::set_text_map_propagator(
            opentelemetry_sdk::propagation::TraceContextPropagator::new(),
        );
    }
    // try_init: a second call (tests) keeps the first subscriber.
    let _ = tracing_subscriber::registry()
        .with(fmt)
        .with(otel_layer)
        .try_init();
    if let Some(url) = endpoint {
        tracing::info!(endpoint = %url, "exporting traces over OTLP/HTTP");
    }
    Ok(Telemetry { provider })
}

/// Make `span` continue the trace of an incoming request's W3C `traceparent` (and
/// `tracestate`), when tracing is on and the header is valid; otherwise it starts a trace.
pub fn continue_trace(span: &tracing::Span, headers: &actix_web::http::header::HeaderMap) {
    use tracing_opentelemetry::OpenTelemetrySpanExt;
    struct Headers<'a>(&'a actix_web::http::header::HeaderMap);
    impl opentelemetry::propagation::Extractor for Headers<'_> {
        fn get(&self, key: &str) -> Option<&str> {
            self.0.get(key).and_then(|v| v.to_str().ok())
        }
        fn keys(&self) -> Vec<&str> {
            self.0.keys().map(|k| k.as_str()).collect()
        }
    }
    if !headers.contains_key("traceparent") {
        return;
    }
    let cx = opentelemetry::global::get_text_map_propagator(|p| p.extract(&Headers(headers)));
    use opentelemetry::trace::TraceContextExt;
    if cx.span().span_context().is_valid() {
        let _ = span.set_parent(cx);
    }
}

fn tracer_provider(url: &str, otel: &OtelSettings) -> Result<SdkTracerProvider, String> {
    use opentelemetry_otlp::{WithExportConfig, WithHttpConfig};
    let mut exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .with_protocol(opentelemetry_otlp::Protocol::HttpBinary)
        .with_endpoint(url)
        .with_timeout(EXPORT_TIMEOUT)
        .with_headers(parse_headers(otel.headers.expose())?.into_iter().collect())
        .build()
        .map_err(|e| format!("the OTLP exporter for {url} could not be set up: {e}"))?;
    // OTEL_SERVICE_NAME, then `service.name` in OTEL_RESOURCE_ATTRIBUTES, then otel.service_name.
    let detected = Resource::builder().build();
    let unnamed = detected
        .get(&opentelemetry::Key::new("service.name"))
        .is_none_or(|v| v.as_str().starts_with("unknown_service"));
    let mut resource = Resource::builder().with_attribute(opentelemetry::KeyValue::new(
        "service.version",
        env!("CARGO_PKG_VERSION"),
    ));
    if unnamed {
        resource = resource.with_service_name(otel.service_name.clone());
    }
    let resource = resource.build();
    // The exporter lives on the processor's thread from now on: it gets the resource first.
    exporter.set_resource(&resource);
    // The sampler is the SDK's default, which reads OTEL_TRACES_SAMPLER(_ARG).
    Ok(SdkTracerProvider::builder()
        .with_resource(resource)
        .with_span_processor(BoundedBatchProcessor::new(exporter, otel.queue_size))
        .build())
}

enum Control {
    Flush(SyncSender<()>),
    Shutdown(SyncSender<()>),
}

/// A batching span processor whose queue is bounded and never waited on: a span that finds it
/// full is dropped and counted (`agentry_otel_spans_dropped_total{reason="queue_full"}`), so a
/// slow or absent collector never slows a run. Batches are exported from a thread of its own
/// (the exporter's HTTP client is a blocking one), one at a time; a batch the collector refuses
/// or that times out is dropped and counted too.
#[derive(Debug)]
struct BoundedBatchProcessor {
    spans: SyncSender<SpanData>,
    control: Mutex<mpsc::Sender<Control>>,
    worker: Mutex<Option<std::thread::JoinHandle<()>>>,
}

impl BoundedBatchProcessor {
    fn new<E: SpanExporter + 'static>(exporter: E, queue_size: usize) -> Self {
        let (spans, rx) = mpsc::sync_channel(queue_size);
        let (control, control_rx) = mpsc::channel();
        let worker = std::thread::Builder::new()
            .name("otel-export".into())
            .spawn(move || export_loop(exporter, rx, control_rx))
            .ok();
        BoundedBatchProcessor {
            spans,
            control: Mutex::new(control),
            worker: Mutex::new(worker),
        }
    }

    fn ask(
        &self,
        make: impl FnOnce(SyncSender<()>) -> Control,
        timeout: Duration,
    ) -> OTelSdkResult {
        let (tx, rx) = mpsc::sync_channel(1);
        let sent = self
            .control
            .lock()
            .map_err(|_| OTelSdkError::InternalFailure("control lock poisoned".into()))?
            .send(make(tx));
        if sent.is_err() {
            return Err(OTelSdkError::AlreadyShutdown);
        }
        rx.recv_timeout(timeout)
            .map_err(|_| OTelSdkError::Timeout(timeout))
    }
}

impl SpanProcessor for BoundedBatchProcessor {
    fn on_start(&self, _: &mut opentelemetry_sdk::trace::Span, _: &opentelemetry::Context) {}

    fn on_end(&self, span: SpanData) {
        if !span.span_context.is_sampled() {
            return;
        }
        match self.spans.try_send(span) {
            Ok(()) => {}
            Err(TrySendError::Full(_)) => {
                metrics::counter!(SPANS_DROPPED, "reason" => "queue_full").increment(1);
            }
            Err(TrySendError::Disconnected(_)) => {
                metrics::counter!(SPANS_DROPPED, "reason" => "shut_down").increment(1);
            }
        }
    }

    fn force_flush(&self) -> OTelSdkResult {
        self.ask(Control::Flush, EXPORT_TIMEOUT + Duration::from_secs(1))
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        let result = self.ask(Control::Shutdown, timeout);
        if result.is_ok()
            && let Ok(mut w) = self.worker.lock()
            && let Some(handle) = w.take()
        {
            let _ = handle.join();
        }
        result
    }
}

fn export_loop<E: SpanExporter>(
    exporter: E,
    spans: Receiver<SpanData>,
    control: Receiver<Control>,
) {
    let mut batch = Vec::new();
    let mut due = Instant::now() + EXPORT_DELAY;
    let mut failing = false;
    let mut export = |batch: &mut Vec<SpanData>| {
        if batch.is_empty() {
            return;
        }
        let n = batch.len() as u64;
        match futures::executor::block_on(exporter.export(std::mem::take(batch))) {
            Ok(()) => {
                metrics::counter!(SPANS_EXPORTED).increment(n);
                if failing {
                    failing = false;
                    tracing::info!("spans reach the OTLP collector again");
                }
            }
            Err(e) => {
                metrics::counter!(SPANS_DROPPED, "reason" => "export_failed").increment(n);
                if !failing {
                    failing = true;
                    tracing::warn!(error = %e, spans = n, "the OTLP collector did not take a batch of spans; they are dropped (agentry_otel_spans_dropped_total) until it does");
                }
            }
        }
    };
    loop {
        let wait = due
            .saturating_duration_since(Instant::now())
            .min(Duration::from_millis(100));
        match spans.recv_timeout(wait) {
            Ok(span) => {
                batch.push(span);
                if batch.len() >= MAX_BATCH {
                    export(&mut batch);
                    due = Instant::now() + EXPORT_DELAY;
                }
            }
            Err(RecvTimeoutError::Timeout) => {}
            Err(RecvTimeoutError::Disconnected) => {
                export(&mut batch);
                return;
            }
        }
        if let Ok(ctl) = control.try_recv() {
            while let Ok(span) = spans.try_recv() {
                batch.push(span);
                if batch.len() >= MAX_BATCH {
                    export(&mut batch);
                }
            }
            export(&mut batch);
            match ctl {
                Control::Flush(done) => {
                    let _ = done.send(());
                }
                Control::Shutdown(done) => {
                    let _ = exporter.shutdown();
                    let _ = done.send(());
                    return;
                }
            }
        }
        if Instant::now() >= due {
            export(&mut batch);
            due = Instant::now() + EXPORT_DELAY;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{parse_filter, resolve_endpoint, traces_url};
    use crate::settings::OtelSettings;

    /// An environment holding only `pairs`.
    fn env(pairs: &'static [(&'static str, &'static str)]) -> impl Fn(&str) -> Option<String> {
        move |k: &str| {
            pairs
                .iter()
                .find(|(n, _)| *n == k)
                .map(|(_, v)| v.to_string())
        }
    }

    #[test]
    fn the_endpoint_comes_from_config_then_the_standard_variables() {
        let off = OtelSettings::default();
        assert_eq!(resolve_endpoint(&off, env(&[])), None);
        assert_eq!(
            resolve_endpoint(
                &off,
                env(&[("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4318/")])
            ),
            Some("http://c:4318/v1/traces".into())
        );
        assert_eq!(
            resolve_endpoint(
                &off,
                env(&[
                    ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4318"),
                    ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "http://t:9/custom")
                ])
            ),
            Some("http://t:9/custom".into())
        );
        let on = OtelSettings {
            endpoint: "https://cloud.langfuse.com/api/public/otel".into(),
            ..OtelSettings::default()
        };
        assert_eq!(
            resolve_endpoint(
                &on,
                env(&[("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4318")])
            ),
            Some("https://cloud.langfuse.com/api/public/otel/v1/traces".into())
        );
        assert_eq!(
            resolve_endpoint(&on, env(&[("OTEL_SDK_DISABLED", "true")])),
            None
        );
        assert_eq!(
            traces_url("http://c:4318/v1/traces"),
            "http://c:4318/v1/traces"
        );
    }

    #[test]
    fn only_the_http_protobuf_protocol_is_accepted() {
        use super::check_protocol;
        assert!(check_protocol(env(&[])).is_ok());
        assert!(check_protocol(env(&[("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf")])).is_ok());
        let err = check_protocol(env(&[("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")])).unwrap_err();
        assert!(
            err.starts_with("OTEL_EXPORTER_OTLP_PROTOCOL=grpc:") && err.contains("4318"),
            "{err}"
        );
        // The traces-specific variable wins, as the specification says.
        assert!(
            check_protocol(env(&[
                ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc"),
                ("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "http/protobuf")
            ]))
            .is_ok()
        );
        let err = check_protocol(env(&[("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "http/json")]))
            .unwrap_err();
        assert!(
            err.contains("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL=http/json"),
            "{err}"
        );
    }

    #[test]
    fn headers_are_name_value_pairs_with_percent_encoded_values() {
        use super::parse_headers;
        assert_eq!(
            parse_headers("Authorization=Basic%20cGs6c2s+, x-tenant = a%2Cb").unwrap(),
            [
                ("Authorization".to_string(), "Basic cGs6c2s+".to_string()),
                ("x-tenant".to_string(), "a,b".to_string())
            ]
        );
        assert_eq!(parse_headers("").unwrap(), []);
        assert!(parse_headers("Authorization").is_err());
        let err = parse_headers("bad name=secret-value").unwrap_err();
        assert!(
            err.contains("bad name") && !err.contains("secret-value"),
            "{err}"
        );
        assert!(parse_headers("x=a%0Ab").is_err(), "no header injection");
        assert_eq!(parse_headers("x=100%").unwrap()[0].1, "100%");
    }

    #[test]
    fn filters_that_name_a_level_parse_and_bare_words_do_not() {
        for ok in [
            "info",
            "WARN",
            "agentry=debug,info",
            "agentry::access=warn,info",
            "agentry_gateway=trace, warn",
            "3",
        ] {
            assert!(parse_filter(ok).is_ok(), "{ok}");
        }
        for (bad, needle) in [
            ("verbose", "`verbose` names no level"),
            ("info,agentry", "`agentry` names no level"),
            ("agentry=loud", "`agentry=loud`"),
            ("", "is empty"),
            ("  ", "is empty"),
        ] {
            let err = parse_filter(bad).unwrap_err();
            assert!(err.contains(needle), "{bad}: {err}");
        }
    }
}
