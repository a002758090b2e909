//! The logging and tracing values of the settings, parsed and checked: the log filter, the OTLP
//! endpoint and headers. The settings check them at load (`Settings::validate`); telemetry uses
//! them at start. Nothing here depends on the settings.

use tracing_subscriber::EnvFilter;

const LEVELS: &[&str] = &["trace", "debug", "info", "warn", "error", "off"];

/// Parse a tracing filter (`info`, `agentry=debug,info`, `agentry::access=warn,info`), refusing
/// what `EnvFilter` would take silently but nobody means: a bare word that is not a level
/// (`verbose`) is, to `EnvFilter`, a target at every level, which turns every other log off.
pub fn parse_filter(filter: &str) -> Result<EnvFilter, String> {
    let example =
        "write LEVEL or TARGET=LEVEL, comma-separated, e.g. `info` or `agentry=debug,info`";
    if filter.trim().is_empty() {
        return Err(format!("is empty: {example}"));
    }
    for directive in filter.split(',').map(str::trim).filter(|d| !d.is_empty()) {
        let level = directive.rsplit_once('=').map_or(directive, |(_, l)| l);
        let numeric = level.parse::<u8>().is_ok_and(|n| n <= 5);
        if !numeric && !LEVELS.contains(&level.to_ascii_lowercase().as_str()) {
            return Err(format!(
                "`{directive}` names no level (trace, debug, info, warn, error, off): {example}"
            ));
        }
    }
    EnvFilter::try_new(filter)
        .map_err(|e| format!("is not a valid tracing filter ({e}): {example}"))
}

/// The OTLP/HTTP traces URL for a configured base endpoint (`http://collector:4318` →
/// `http://collector:4318/v1/traces`), as the OpenTelemetry specification builds it from
/// `OTEL_EXPORTER_OTLP_ENDPOINT`.
pub fn traces_url(base: &str) -> String {
    let base = base.trim();
    if base.trim_end_matches('/').ends_with("/v1/traces") {
        base.to_string()
    } else {
        format!("{}/v1/traces", base.trim_end_matches('/'))
    }
}

/// `otel.endpoint` is empty (tracing off) or an `http(s)://host[:port][/path]` URL.
pub fn check_endpoint(endpoint: &str) -> Result<(), String> {
    let endpoint = endpoint.trim();
    if endpoint.is_empty() {
        return Ok(());
    }
    match endpoint.parse::<actix_web::http::Uri>() {
        Ok(u) if matches!(u.scheme_str(), Some("http" | "https")) && u.host().is_some() => Ok(()),
        _ => Err(format!(
            "{endpoint:?} is not an http(s) URL: write the collector's OTLP/HTTP address, e.g. http://otel-collector:4318"
        )),
    }
}

/// `otel.headers`: `name=value` pairs separated by commas, values percent-encoded (the
/// `OTEL_EXPORTER_OTLP_HEADERS` format), checked to make valid HTTP headers.
pub fn parse_headers(input: &str) -> Result<Vec<(String, String)>, String> {
    let mut out = Vec::new();
    for pair in input.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let Some((name, value)) = pair.split_once('=') else {
            return Err(
                "write name=value pairs separated by commas, e.g. Authorization=Basic%20…".into(),
            );
        };
        let (name, value) = (name.trim(), percent_decode(value.trim()));
        if name.is_empty()
            || actix_web::http::header::HeaderName::try_from(name).is_err()
            || actix_web::http::header::HeaderValue::try_from(value.as_str()).is_err()
        {
            // The value may be a secret: only the name is shown.
            return Err(format!("the header {name:?} is not a valid HTTP header"));
        }
        out.push((name.to_string(), value));
    }
    Ok(out)
}

/// `%XX` escapes decoded; anything else kept as it is (`+` stays `+`, as base64 needs).
fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let hex = |b: u8| (b as char).to_digit(16);
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%'
            && i + 2 < bytes.len()
            && let (Some(h), Some(l)) = (hex(bytes[i + 1]), hex(bytes[i + 2]))
        {
            out.push(u8::try_from(h * 16 + l).unwrap_or(b'?'));
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}
