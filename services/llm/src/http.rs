//! What the HTTP providers share: sending a request with retries, turning HTTP failures into
//! [`LlmError`]s with the provider's own message, and turning a response body (SSE or one JSON
//! document) into a [`ChatStream`] through a provider-specific decoder.

use std::collections::VecDeque;
use std::pin::Pin;
use std::time::{Duration, SystemTime};

use bytes::Bytes;
use futures::{Stream, StreamExt};
use reqwest::StatusCode;
use serde_json::Value;

use crate::retry::{RetryPolicy, parse_retry_after};
use crate::sse::{SseError, SseEvent};
use crate::{ChatStream, LlmError, StreamEvent};

/// Timeouts and retries of one HTTP provider.
#[derive(Debug, Clone)]
pub(crate) struct Transport {
    pub client: reqwest::Client,
    /// Limit on waiting for the response head, and then on each gap between body chunks.
    pub timeout: Duration,
    pub retry: RetryPolicy,
}

impl Transport {
    /// Send the request built by `build` until it gets a 2xx, a non-retryable error, or runs out
    /// of retries ([`RetryPolicy::backoff`], with the provider's `Retry-After` winning). The
    /// waits are `tokio::time::sleep`, so dropping the returned future cancels the wait and any
    /// request in flight.
    pub async fn send(
        &self,
        provider: &'static str,
        build: impl Fn() -> reqwest::RequestBuilder,
    ) -> Result<reqwest::Response, LlmError> {
        use backon::Retryable;
        let attempt = || {
            // The model call's span (the caller's) goes along as W3C trace context.
            let mut request = build();
            if let Some(tp) = agentry_schema::trace_context::traceparent(&tracing::Span::current())
            {
                request = request.header("traceparent", tp);
            }
            self.send_once(request)
        };
        let mut retries = 0u32;
        attempt
            .retry(self.retry.backoff())
            .sleep(tokio::time::sleep)
            .when(|(error, _)| error.is_retryable())
            .adjust(|(_, retry_after), step| self.retry.next_delay(step, *retry_after))
            .notify(|(error, _), delay| {
                retries += 1;
                tracing::warn!(
                    provider,
                    attempt = retries,
                    max_retries = self.retry.max_retries,
                    delay_ms = delay.as_millis() as u64,
                    error = %error,
                    "model request failed; retrying"
                );
            })
            .await
            .map_err(|(error, _)| error)
    }

    async fn send_once(
        &self,
        request: reqwest::RequestBuilder,
    ) -> Result<reqwest::Response, (LlmError, Option<Duration>)> {
        let response = match tokio::time::timeout(self.timeout, request.send()).await {
            Err(_) => return Err((LlmError::Timeout(self.timeout), None)),
            Ok(Err(e)) => return Err((transport_error(&e, self.timeout), None)),
            Ok(Ok(response)) => response,
        };
        let status = response.status();
        if status.is_success() {
            return Ok(response);
        }
        let retry_after = parse_retry_after(response.headers(), SystemTime::now());
        // The error body is best effort: a slow or broken one still leaves the status to report.
        let body = match tokio::time::timeout(self.timeout, response.bytes()).await {
            Ok(Ok(body)) => String::from_utf8_lossy(&body).into_owned(),
            _ => String::new(),
        };
        Err((status_error(status, &body, retry_after), retry_after))
    }
}

/// The error for a non-2xx response.
pub(crate) fn status_error(
    status: StatusCode,
    body: &str,
    retry_after: Option<Duration>,
) -> LlmError {
    let message = error_message(status, body);
    let code = status.as_u16();
    match code {
        429 => LlmError::RateLimited { retry_after },
        401 | 403 => LlmError::Auth {
            status: code,
            message,
        },
        500..=599 => LlmError::Server {
            status: code,
            message,
        },
        _ => LlmError::BadRequest {
            status: code,
            message,
        },
    }
}

/// The human-readable message of a provider error body: `error.message` (OpenAI, Anthropic),
/// `error` as a string (Ollama), `message`, `detail`; else the body itself, shortened; else the
/// status's reason phrase.
pub(crate) fn error_message(status: StatusCode, body: &str) -> String {
    if let Ok(json) = serde_json::from_str::<Value>(body)
        && let Some(message) = json_error_message(&json)
    {
        return message;
    }
    let body = body.trim();
    if body.is_empty() {
        return status
            .canonical_reason()
            .unwrap_or("no error message")
            .to_string();
    }
    truncate_chars(body, 500)
}

pub(crate) fn json_error_message(json: &Value) -> Option<String> {
    let text = |v: &Value| v.as_str().map(str::to_string);
    json.pointer("/error/message")
        .and_then(text)
        .or_else(|| json.get("error").and_then(text))
        .or_else(|| json.get("message").and_then(text))
        .or_else(|| json.get("detail").and_then(text))
}

pub(crate) fn truncate_chars(text: &str, max: usize) -> String {
    match text.char_indices().nth(max) {
        Some((cut, _)) => format!("{}…", &text[..cut]),
        None => text.to_string(),
    }
}

/// A failure of reqwest itself (no HTTP status).
fn transport_error(error: &reqwest::Error, timeout: Duration) -> LlmError {
    if error.is_timeout() {
        LlmError::Timeout(timeout)
    } else if error.is_builder() {
        LlmError::Config(error_chain(error))
    } else {
        LlmError::Connect(error_chain(error))
    }
}

/// `error: cause: cause…`, because reqwest's own message ("error sending request") hides the
/// useful part (connection refused, DNS failure…).
pub(crate) fn error_chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        let cause_text = cause.to_string();
        if !text.contains(&cause_text) {
            text.push_str(": ");
            text.push_str(&cause_text);
        }
        source = cause.source();
    }
    text
}

/// Whether a decoder has seen the end of the answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Flow {
    Continue,
    Finished,
}

/// Turns a provider's SSE events into [`StreamEvent`]s.
pub(crate) trait SseDecoder: Send + 'static {
    fn on_event(&mut self, event: SseEvent, out: &mut Vec<StreamEvent>) -> Result<Flow, LlmError>;

    /// The body ended before the decoder reported [`Flow::Finished`]: either finish the answer
    /// (lenient servers that omit the final marker) or say it was cut short.
    fn on_end(&mut self, out: &mut Vec<StreamEvent>) -> Result<(), LlmError>;
}

/// Why the response body stopped: a gap longer than the idle timeout, or the body broke.
#[derive(Debug, thiserror::Error)]
enum BodyError {
    #[error("no data for the idle timeout")]
    Idle,
    #[error(transparent)]
    Broken(reqwest::Error),
}

/// The response body's chunks, each within `idle_timeout` of the previous one.
fn body_with_idle_timeout(
    response: reqwest::Response,
    idle_timeout: Duration,
) -> impl Stream<Item = Result<Bytes, BodyError>> + Send + 'static {
    let body: Pin<Box<dyn Stream<Item = reqwest::Result<Bytes>> + Send>> =
        Box::pin(response.bytes_stream());
    futures::stream::unfold(Some(body), move |body| async move {
        let mut body = body?;
        match tokio::time::timeout(idle_timeout, body.next()).await {
            Err(_) => Some((Err(BodyError::Idle), None)),
            Ok(Some(Ok(chunk))) => Some((Ok(chunk), Some(body))),
            Ok(Some(Err(error))) => Some((Err(BodyError::Broken(error)), None)),
            Ok(None) => None,
        }
    })
}

struct SseState<D> {
    events: Pin<Box<dyn Stream<Item = Result<SseEvent, SseError<BodyError>>> + Send>>,
    decoder: D,
    pending: VecDeque<Result<StreamEvent, LlmError>>,
    finished: bool,
    idle_timeout: Duration,
}

impl<D: SseDecoder> SseState<D> {
    fn push(&mut self, events: Vec<StreamEvent>, result: Result<Flow, LlmError>) {
        self.pending.extend(events.into_iter().map(Ok));
        match result {
            Ok(Flow::Continue) => {}
            Ok(Flow::Finished) => self.finished = true,
            Err(error) => {
                self.pending.push_back(Err(error));
                self.finished = true;
            }
        }
    }
}

/// Stream a `text/event-stream` response through `decoder`. The stream ends after the decoder's
/// last event or after the first error item; a gap longer than `idle_timeout` between body chunks
/// is a [`LlmError::Timeout`] item.
pub(crate) fn sse_stream<D: SseDecoder>(
    response: reqwest::Response,
    idle_timeout: Duration,
    decoder: D,
) -> ChatStream {
    let state = SseState {
        events: Box::pin(crate::sse::events(body_with_idle_timeout(
            response,
            idle_timeout,
        ))),
        decoder,
        pending: VecDeque::new(),
        finished: false,
        idle_timeout,
    };
    Box::pin(futures::stream::unfold(state, |mut state| async move {
        loop {
            if let Some(item) = state.pending.pop_front() {
                return Some((item, state));
            }
            if state.finished {
                return None;
            }
            match state.events.next().await {
                Some(Ok(event)) => {
                    let mut out = Vec::new();
                    let result = state.decoder.on_event(event, &mut out);
                    state.push(out, result);
                }
                Some(Err(error)) => {
                    state.finished = true;
                    let error = match error {
                        SseError::Body(BodyError::Idle) => LlmError::Timeout(state.idle_timeout),
                        SseError::Body(BodyError::Broken(e)) if e.is_timeout() => {
                            LlmError::Timeout(state.idle_timeout)
                        }
                        SseError::Body(BodyError::Broken(e)) => LlmError::Connect(format!(
                            "the response stream broke: {}",
                            error_chain(&e)
                        )),
                        SseError::Malformed(why) => {
                            LlmError::Decode(format!("the event stream is malformed: {why}"))
                        }
                    };
                    return Some((Err(error), state));
                }
                None => {
                    let mut out = Vec::new();
                    let result = state.decoder.on_end(&mut out).map(|()| Flow::Finished);
                    state.push(out, result);
                    state.finished = true;
                }
            }
        }
    }))
}

/// Read a whole JSON response body (non-streaming mode) within `timeout`.
pub(crate) async fn read_json(
    response: reqwest::Response,
    timeout: Duration,
) -> Result<Value, LlmError> {
    let body = match tokio::time::timeout(timeout, response.bytes()).await {
        Err(_) => return Err(LlmError::Timeout(timeout)),
        Ok(Err(error)) if error.is_timeout() => return Err(LlmError::Timeout(timeout)),
        Ok(Err(error)) => {
            return Err(LlmError::Connect(format!(
                "the response broke: {}",
                error_chain(&error)
            )));
        }
        Ok(Ok(body)) => body,
    };
    serde_json::from_slice(&body).map_err(|e| {
        LlmError::Decode(format!(
            "the response is not JSON ({e}): {}",
            truncate_chars(&String::from_utf8_lossy(&body), 200)
        ))
    })
}

/// Parse a tool call's argument text. Empty means no arguments; text that is not JSON is kept
/// as `{"__invalid_json__": text}` so the agent loop can tell the model.
pub(crate) fn parse_arguments(raw: &str) -> Value {
    if raw.trim().is_empty() {
        return Value::Object(Default::default());
    }
    match serde_json::from_str(raw) {
        Ok(value) => value,
        Err(_) => serde_json::json!({ "__invalid_json__": raw }),
    }
}

/// The response is one JSON document (`Content-Type: application/json`), not an event stream.
pub(crate) fn is_json(response: &reqwest::Response) -> bool {
    response
        .headers()
        .get(reqwest::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.trim_start().starts_with("application/json"))
}

/// `0.7f32` as the JSON number `0.7`, not its f64 widening `0.699999988079071`.
pub(crate) fn temperature_json(temperature: f32) -> Value {
    temperature
        .to_string()
        .parse::<f64>()
        .ok()
        .and_then(serde_json::Number::from_f64)
        .map_or(Value::Null, Value::Number)
}

/// Events of a finished, non-streamed answer as a stream.
pub(crate) fn events_stream(events: Vec<StreamEvent>) -> ChatStream {
    Box::pin(futures::stream::iter(events.into_iter().map(Ok)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn provider_messages_are_extracted() {
        let bad = StatusCode::BAD_REQUEST;
        assert_eq!(
            error_message(
                bad,
                r#"{"error":{"message":"Invalid model","type":"invalid_request_error"}}"#
            ),
            "Invalid model"
        );
        assert_eq!(
            error_message(
                bad,
                r#"{"type":"error","error":{"type":"invalid_request_error","message":"max_tokens: required"}}"#
            ),
            "max_tokens: required"
        );
        assert_eq!(
            error_message(bad, r#"{"error":"model not found"}"#),
            "model not found"
        );
        assert_eq!(error_message(bad, "  plain words "), "plain words");
        assert_eq!(error_message(bad, ""), "Bad Request");
        assert_eq!(error_message(bad, &"x".repeat(600)).chars().count(), 501);
    }

    #[test]
    fn statuses_map_to_errors() {
        assert!(matches!(
            status_error(StatusCode::UNAUTHORIZED, "", None),
            LlmError::Auth { status: 401, .. }
        ));
        assert!(matches!(
            status_error(StatusCode::FORBIDDEN, "", None),
            LlmError::Auth { status: 403, .. }
        ));
        assert!(matches!(
            status_error(StatusCode::NOT_FOUND, "", None),
            LlmError::BadRequest { status: 404, .. }
        ));
        assert_eq!(
            status_error(
                StatusCode::TOO_MANY_REQUESTS,
                "",
                Some(Duration::from_secs(2))
            ),
            LlmError::RateLimited {
                retry_after: Some(Duration::from_secs(2))
            }
        );
        assert!(matches!(
            status_error(StatusCode::from_u16(529).unwrap(), "", None),
            LlmError::Server { status: 529, .. }
        ));
    }

    #[test]
    fn arguments_parse_or_are_kept_raw() {
        assert_eq!(parse_arguments(""), serde_json::json!({}));
        assert_eq!(parse_arguments(r#"{"a":1}"#), serde_json::json!({"a":1}));
        assert_eq!(
            parse_arguments("{oops"),
            serde_json::json!({"__invalid_json__": "{oops"})
        );
    }
}
