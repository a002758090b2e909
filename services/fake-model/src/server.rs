//! The actix-web server: records each request, checks it like the real provider would, picks
//! the next reply, and sends it with the configured latency and streaming profile.

use std::collections::{BTreeMap, VecDeque};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use actix_web::http::StatusCode;
use actix_web::{App, HttpRequest, HttpResponse, HttpServer, web};
use agentry_llm::{ChatRequest, ScriptedAction, estimate_tokens, estimate_usage, scripted_reply};
use bytes::Bytes;
use futures::{Stream, StreamExt};
use serde_json::Value;

use crate::wire::{self, Answer, Invalid, Pieces};
use crate::{
    DefaultReply, Endpoint, FakeReply, FakeToolCall, ModelTiming, RecordedRequest, ReplyKind,
    Shared,
};
use crate::{State, StreamEnd};

/// Big conversations are fine; the real APIs accept tens of megabytes.
const MAX_BODY: usize = 64 * 1024 * 1024;

/// How long a broken stream waits before aborting, so the frames before the break are flushed
/// to the client first.
const BREAK_FLUSH: Duration = Duration::from_millis(50);

pub(crate) fn run(
    shared: Arc<Shared>,
    addr: SocketAddr,
    workers: usize,
) -> std::io::Result<(SocketAddr, actix_web::dev::Server)> {
    let data = web::Data::from(shared);
    let server = HttpServer::new(move || {
        App::new()
            .app_data(data.clone())
            .app_data(web::PayloadConfig::new(MAX_BODY))
            .route("/v1/chat/completions", web::post().to(openai))
            .route("/chat/completions", web::post().to(openai))
            .route("/v1/messages", web::post().to(anthropic))
            .route("/v1/embeddings", web::post().to(embeddings))
            .route("/embeddings", web::post().to(embeddings))
    })
    .workers(workers)
    // Streamed frames must leave at once, as from a real provider, not wait for an ACK.
    .tcp_nodelay(true)
    .disable_signals()
    .shutdown_timeout(1)
    .bind(addr)?;
    let addr = server
        .addrs()
        .first()
        .copied()
        .ok_or_else(|| std::io::Error::other("the server bound no address"))?;
    Ok((addr, server.run()))
}

async fn openai(request: HttpRequest, body: Bytes, shared: web::Data<Shared>) -> HttpResponse {
    handle(Endpoint::OpenAiChat, request, body, shared).await
}

async fn anthropic(request: HttpRequest, body: Bytes, shared: web::Data<Shared>) -> HttpResponse {
    handle(Endpoint::AnthropicMessages, request, body, shared).await
}

/// `POST /v1/embeddings`: OpenAI's wire (`input` a string or an array of strings), vectors
/// from [`crate::embed::fake_embedding`] unless a test registered one for the text. Recorded
/// apart from the chat requests; uses no reply of the queue.
async fn embeddings(request: HttpRequest, body: Bytes, shared: web::Data<Shared>) -> HttpResponse {
    let json: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    let (key_ok, failing, latency) = {
        let mut state = shared.lock();
        state.served += 1;
        if state.record_limit > 0 {
            while state.embedding_requests.len() >= state.record_limit {
                state.embedding_requests.pop_front();
            }
            let headers = request
                .headers()
                .iter()
                .map(|(n, v)| {
                    (
                        n.as_str().to_ascii_lowercase(),
                        String::from_utf8_lossy(v.as_bytes()).into_owned(),
                    )
                })
                .collect();
            state.embedding_requests.push_back(RecordedRequest {
                endpoint: Endpoint::OpenAiChat,
                path: request.path().to_string(),
                headers,
                body: json.clone(),
                raw_body: String::from_utf8_lossy(&body).into_owned(),
            });
        }
        (
            check_key(&state, Endpoint::OpenAiChat, &request),
            state.embeddings_failing,
            state.latency,
        )
    };
    if !key_ok {
        return error_response(
            Endpoint::OpenAiChat,
            401,
            "Incorrect API key provided.",
            None,
            None,
        );
    }
    if let Some(status) = failing {
        return error_response(
            Endpoint::OpenAiChat,
            status,
            "The embeddings service is unavailable.",
            None,
            None,
        );
    }
    let Some(model) = json.get("model").and_then(Value::as_str) else {
        return error_response(
            Endpoint::OpenAiChat,
            400,
            "you must provide a model parameter",
            None,
            None,
        );
    };
    let inputs: Option<Vec<String>> = match json.get("input") {
        Some(Value::String(s)) => Some(vec![s.clone()]),
        Some(Value::Array(items)) if !items.is_empty() => items
            .iter()
            .map(|i| i.as_str().map(str::to_string))
            .collect(),
        _ => None,
    };
    let Some(inputs) = inputs else {
        return error_response(
            Endpoint::OpenAiChat,
            400,
            "'input' must be a string or a non-empty array of strings",
            None,
            None,
        );
    };
    let registered = shared.lock().embeddings.clone();
    let data: Vec<Value> = inputs
        .iter()
        .enumerate()
        .map(|(i, text)| {
            let vector = registered
                .get(text)
                .cloned()
                .unwrap_or_else(|| crate::embed::fake_embedding(text));
            serde_json::json!({"object": "embedding", "index": i, "embedding": vector})
        })
        .collect();
    let tokens: u64 = inputs.iter().map(|t| estimate_tokens(t)).sum();
    sleep(latency).await;
    HttpResponse::Ok().json(serde_json::json!({
        "object": "list",
        "data": data,
        "model": model,
        "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
    }))
}

/// Timing and shape settings in force for one request.
struct Profile {
    latency: Duration,
    chunks: usize,
    chunk_delay: Duration,
}

async fn handle(
    endpoint: Endpoint,
    request: HttpRequest,
    body: Bytes,
    shared: web::Data<Shared>,
) -> HttpResponse {
    let received = Instant::now();
    let raw_body = String::from_utf8_lossy(&body).into_owned();
    let json: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    let mut headers = BTreeMap::new();
    for (name, value) in request.headers() {
        let value = String::from_utf8_lossy(value.as_bytes()).into_owned();
        headers
            .entry(name.as_str().to_ascii_lowercase())
            .and_modify(|v: &mut String| {
                v.push_str(", ");
                v.push_str(&value);
            })
            .or_insert(value);
    }
    let recorded = RecordedRequest {
        endpoint,
        path: request.path().to_string(),
        headers,
        body: json.clone(),
        raw_body,
    };

    let (key_ok, profile) = {
        let mut state = shared.lock();
        state.served += 1;
        record(&mut state, recorded);
        let profile = Profile {
            latency: state.latency,
            chunks: state.chunks,
            chunk_delay: state.chunk_delay,
        };
        (check_key(&state, endpoint, &request), profile)
    };
    if !key_ok {
        let message = match endpoint {
            Endpoint::OpenAiChat => "Incorrect API key provided.",
            Endpoint::AnthropicMessages => "invalid x-api-key",
        };
        return error_response(endpoint, 401, message, None, None);
    }

    // A request the real provider would refuse gets its 400 and does not use up a reply.
    let parsed = if json.is_null() {
        Err(Invalid(
            "We could not parse the JSON body of your request.".into(),
        ))
    } else {
        match endpoint {
            Endpoint::OpenAiChat => wire::parse_openai(&json),
            Endpoint::AnthropicMessages => {
                if request.headers().get("anthropic-version").is_none() {
                    Err(Invalid("anthropic-version: header is required".into()))
                } else {
                    wire::parse_anthropic(&json)
                }
            }
        }
    };
    let conversation = match parsed {
        Ok(conversation) => conversation,
        Err(Invalid(message)) => return error_response(endpoint, 400, &message, None, None),
    };
    let (reply, n, timed) = {
        let mut state = shared.lock();
        (next_reply(&mut state), state.served, state.timing_limit > 0)
    };
    let timing = timed.then(|| Timing {
        shared: shared.clone().into_inner(),
        key: last_user_message(&conversation),
        received,
    });

    let mut latency = reply.latency.unwrap_or(profile.latency);
    let pieces = Pieces {
        chunks: reply.chunks.unwrap_or(profile.chunks),
    };
    let chunk_delay = reply.chunk_delay.unwrap_or(profile.chunk_delay);

    let answer = match &reply.kind {
        ReplyKind::Error {
            status,
            message,
            body,
            retry_after,
        } => {
            sleep(latency).await;
            return error_response(
                endpoint,
                *status,
                message,
                body.as_deref(),
                retry_after.as_deref(),
            );
        }
        ReplyKind::Answer { text, tool_calls } => {
            answer_of(&reply, &conversation, text.clone(), tool_calls.clone())
        }
        ReplyKind::Auto => {
            let decided = scripted_reply(&conversation);
            latency += decided.delay;
            let (text, calls) = match &decided.action {
                ScriptedAction::Text(text) => (text.clone(), Vec::new()),
                ScriptedAction::ToolCalls(calls) => (
                    String::new(),
                    calls
                        .iter()
                        .map(|c| FakeToolCall::new(&c.id, &c.name, c.arguments.clone()))
                        .collect(),
                ),
            };
            let usage = estimate_usage(&conversation, &decided);
            let mut answer = answer_of(&reply, &conversation, text, calls);
            if reply.usage.is_none() {
                (answer.input_tokens, answer.output_tokens) = (usage.input, usage.output);
            }
            answer
        }
    };

    sleep(latency).await;

    let model = json
        .get("model")
        .and_then(Value::as_str)
        .unwrap_or("fake")
        .to_string();
    let streaming =
        json.get("stream").and_then(Value::as_bool) == Some(true) && !reply.ignore_stream;
    let created = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    if streaming {
        let frames = match endpoint {
            Endpoint::OpenAiChat => {
                let include_usage =
                    json.pointer("/stream_options/include_usage") == Some(&Value::Bool(true));
                wire::openai_stream(
                    &answer,
                    &format!("chatcmpl-fake-{n}"),
                    &model,
                    created,
                    pieces,
                    include_usage,
                    reply.interleave,
                )
            }
            Endpoint::AnthropicMessages => {
                wire::anthropic_stream(&answer, &format!("msg_fake_{n}"), &model, pieces)
            }
        };
        HttpResponse::Ok()
            .content_type("text/event-stream; charset=utf-8")
            .insert_header(("cache-control", "no-cache"))
            .streaming(timed_by(timing, deliver(frames, chunk_delay, reply.end)))
    } else {
        let document = match endpoint {
            Endpoint::OpenAiChat => {
                wire::openai_json(&answer, &format!("chatcmpl-fake-{n}"), &model, created)
            }
            Endpoint::AnthropicMessages => {
                wire::anthropic_json(&answer, &format!("msg_fake_{n}"), &model)
            }
        };
        let text = document.to_string();
        let frames = match reply.end {
            StreamEnd::Complete => vec![Bytes::from(text)],
            // A broken non-streamed body: the first half of the document, then the break.
            _ => {
                let half = wire::split_even(&text, 2);
                half.into_iter().map(Bytes::from).collect()
            }
        };
        let end = match reply.end {
            StreamEnd::Complete => StreamEnd::Complete,
            StreamEnd::BreakAfter(_) => StreamEnd::BreakAfter(1),
            StreamEnd::TruncateAfter(_) => StreamEnd::TruncateAfter(1),
        };
        HttpResponse::Ok()
            .content_type("application/json")
            .streaming(timed_by(timing, deliver(frames, Duration::ZERO, end)))
    }
}

/// What is known of a request whose timing is measured, until its body has been sent.
struct Timing {
    shared: Arc<Shared>,
    key: String,
    received: Instant,
}

fn last_user_message(conversation: &ChatRequest) -> String {
    conversation
        .messages
        .iter()
        .rev()
        .find_map(|m| match m {
            agentry_llm::ChatMessage::User { content } => Some(content.clone()),
            _ => None,
        })
        .unwrap_or_default()
}

/// `body`, noting when its first frame and its end were handed on (when `timing` is given).
fn timed_by(
    timing: Option<Timing>,
    body: impl Stream<Item = Result<Bytes, std::io::Error>> + 'static,
) -> impl Stream<Item = Result<Bytes, std::io::Error>> {
    let body = Box::pin(body);
    futures::stream::unfold(
        (body, timing, None::<Instant>),
        |(mut body, timing, first)| async move {
            match body.next().await {
                Some(frame) => {
                    let first = first.or_else(|| Some(Instant::now()));
                    Some((frame, (body, timing, first)))
                }
                None => {
                    if let Some(t) = timing {
                        let mut state = t.shared.lock();
                        while state.timings.len() >= state.timing_limit {
                            state.timings.pop_front();
                        }
                        state.timings.push_back(ModelTiming {
                            key: t.key,
                            received: t.received,
                            first_byte: first,
                            done: Instant::now(),
                        });
                    }
                    None
                }
            }
        },
    )
}

fn record(state: &mut State, request: RecordedRequest) {
    if state.record_limit == 0 {
        return;
    }
    while state.requests.len() >= state.record_limit {
        state.requests.pop_front();
    }
    state.requests.push_back(request);
}

fn check_key(state: &State, endpoint: Endpoint, request: &HttpRequest) -> bool {
    let Some(expected) = &state.api_key else {
        return true;
    };
    let header = |name: &str| {
        request
            .headers()
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::to_string)
    };
    match endpoint {
        Endpoint::OpenAiChat => header("authorization")
            .and_then(|v| v.strip_prefix("Bearer ").map(str::to_string))
            .is_some_and(|k| &k == expected),
        Endpoint::AnthropicMessages => header("x-api-key").is_some_and(|k| &k == expected),
    }
}

fn next_reply(state: &mut State) -> FakeReply {
    state
        .queue
        .pop_front()
        .unwrap_or_else(|| match &state.default_reply {
            DefaultReply::Auto => FakeReply::auto(),
            DefaultReply::Always(reply) => reply.clone(),
        })
}

fn answer_of(
    reply: &FakeReply,
    conversation: &ChatRequest,
    text: String,
    tool_calls: Vec<FakeToolCall>,
) -> Answer {
    let (input_tokens, output_tokens) = reply.usage.unwrap_or_else(|| {
        let input = estimate_usage(
            conversation,
            &agentry_llm::ScriptedReply {
                delay: Duration::ZERO,
                action: ScriptedAction::Text(String::new()),
            },
        )
        .input;
        let output = estimate_tokens(&text)
            + tool_calls
                .iter()
                .map(|c| estimate_tokens(&c.name) + estimate_tokens(&c.arguments))
                .sum::<u64>();
        (input, output)
    });
    Answer {
        text,
        tool_calls,
        max_tokens_reached: reply.max_tokens_reached,
        input_tokens,
        output_tokens,
    }
}

async fn sleep(duration: Duration) {
    if !duration.is_zero() {
        tokio::time::sleep(duration).await;
    }
}

fn error_response(
    endpoint: Endpoint,
    status: u16,
    message: &str,
    body: Option<&str>,
    retry_after: Option<&str>,
) -> HttpResponse {
    let status = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let mut response = HttpResponse::build(status);
    if let Some(value) = retry_after {
        response.insert_header(("retry-after", value));
    }
    match body {
        Some(body) => response
            .content_type("application/json")
            .body(body.to_string()),
        None => response.json(wire::error_body(endpoint, status.as_u16(), message)),
    }
}

struct Delivery {
    frames: VecDeque<Bytes>,
    sent: usize,
    delay: Duration,
    end: StreamEnd,
}

/// The frames as a body stream, `delay` apart, ending as `end` says.
fn deliver(
    frames: Vec<Bytes>,
    delay: Duration,
    end: StreamEnd,
) -> impl Stream<Item = Result<Bytes, std::io::Error>> {
    let delivery = Delivery {
        frames: frames.into(),
        sent: 0,
        delay,
        end,
    };
    futures::stream::unfold(delivery, |mut d| async move {
        match d.end {
            StreamEnd::BreakAfter(n) if d.sent >= n => {
                tokio::time::sleep(BREAK_FLUSH).await;
                d.frames.clear();
                d.end = StreamEnd::TruncateAfter(0);
                return Some((
                    Err(std::io::Error::other("the fake model broke the stream")),
                    d,
                ));
            }
            StreamEnd::TruncateAfter(n) if d.sent >= n => return None,
            _ => {}
        }
        let frame = d.frames.pop_front()?;
        if d.sent > 0 {
            sleep(d.delay).await;
        }
        d.sent += 1;
        Some((Ok(frame), d))
    })
}
