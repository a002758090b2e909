//! A fake language model server for tests and benchmarks.
//!
//! [`FakeModelServer`] is a real HTTP server on `127.0.0.1` that speaks the OpenAI chat
//! completions (`POST /v1/chat/completions`, also `/chat/completions`) and Anthropic messages
//! (`POST /v1/messages`) wire formats, streaming (SSE) and not, exactly as the real providers do,
//! so the real provider clients of `agentry-llm` can be tested end to end.
//!
//! What it answers comes from a per-server queue of [`FakeReply`]s (text, tool calls, errors,
//! 429s, slow or broken streams). When the queue is empty it falls back to its default reply,
//! normally [`DefaultReply::Auto`]: the scripted model's decision function
//! ([`agentry_llm::scripted_reply`]) applied to the conversation it received, so `/tool NAME
//! {json}` in a user message yields a tool call and tool results yield a summary.
//!
//! Every request is recorded ([`FakeModelServer::requests`]) so tests can assert what the client
//! sent.
//!
//! `POST /v1/embeddings` (also `/embeddings`) answers with deterministic vectors
//! ([`fake_embedding`]: a concept lexicon plus hashed words, so "relational datastore" is close
//! to "We run PostgreSQL 16"), or with the vector a test registered for the exact text
//! ([`FakeModelServer::set_embedding`]). Its requests are recorded apart
//! ([`FakeModelServer::embedding_requests`]), so chat requests keep their positions.
//!
//! ```no_run
//! # async fn demo() {
//! use agentry_fake_model::{FakeConfig, FakeModelServer, FakeReply};
//! let server = FakeModelServer::start(FakeConfig::default());
//! server.push(FakeReply::text("Hello there").in_chunks(3));
//! let openai_base = server.base_url_openai(); // http://127.0.0.1:PORT/v1
//! let anthropic_base = server.base_url_anthropic(); // http://127.0.0.1:PORT
//! # }
//! ```

mod embed;
mod server;
mod wire;

use std::collections::{BTreeMap, VecDeque};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use serde_json::Value;

pub use embed::{
    CONCEPTS as FAKE_EMBEDDING_CONCEPTS, DIMENSIONS as FAKE_EMBEDDING_DIMENSIONS, fake_embedding,
};
pub use wire::{parse_anthropic_request, parse_openai_request};

/// Which wire format a request used.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Endpoint {
    /// `POST /v1/chat/completions` or `/chat/completions`.
    OpenAiChat,
    /// `POST /v1/messages`.
    AnthropicMessages,
}

/// One request the server received.
#[derive(Debug, Clone, PartialEq)]
pub struct RecordedRequest {
    pub endpoint: Endpoint,
    pub path: String,
    /// Header names lowercased. Repeated headers are joined with `, `.
    pub headers: BTreeMap<String, String>,
    /// The parsed JSON body, or `Value::Null` if it was not JSON.
    pub body: Value,
    /// The body as received.
    pub raw_body: String,
}

impl RecordedRequest {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .get(&name.to_ascii_lowercase())
            .map(String::as_str)
    }

    /// Whether the client asked for a streamed answer.
    pub fn is_streaming(&self) -> bool {
        self.body.get("stream").and_then(Value::as_bool) == Some(true)
    }
}

/// A tool call the fake model makes. `arguments` is the raw JSON text, so a test can send
/// arguments that are not valid JSON.
#[derive(Debug, Clone, PartialEq)]
pub struct FakeToolCall {
    pub id: String,
    pub name: String,
    pub arguments: String,
}

impl FakeToolCall {
    pub fn new(id: &str, name: &str, arguments: Value) -> Self {
        Self {
            id: id.to_string(),
            name: name.to_string(),
            arguments: arguments.to_string(),
        }
    }

    /// A call whose argument text is sent verbatim (for invalid-JSON tests).
    pub fn raw(id: &str, name: &str, arguments: &str) -> Self {
        Self {
            id: id.to_string(),
            name: name.to_string(),
            arguments: arguments.to_string(),
        }
    }
}

/// What one reply does.
#[derive(Debug, Clone, PartialEq)]
pub enum ReplyKind {
    /// Text, then tool calls (if any).
    Answer {
        text: String,
        tool_calls: Vec<FakeToolCall>,
    },
    /// An HTTP error. `body: None` means the provider's usual error JSON carrying `message`.
    Error {
        status: u16,
        message: String,
        body: Option<String>,
        retry_after: Option<String>,
    },
    /// Decide like the scripted model from the conversation received.
    Auto,
}

/// How a streamed (or, halved, a non-streamed) body ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StreamEnd {
    /// Everything, with the provider's final markers.
    Complete,
    /// After this many frames the connection is aborted (an incomplete chunked body).
    BreakAfter(usize),
    /// After this many frames the body ends cleanly, without the final markers.
    TruncateAfter(usize),
}

/// One scripted reply of the fake server.
#[derive(Debug, Clone, PartialEq)]
pub struct FakeReply {
    pub kind: ReplyKind,
    /// Text chunks (and argument pieces); `None` = the server's profile.
    pub chunks: Option<usize>,
    /// Delay before the response head; `None` = the server's latency.
    pub latency: Option<Duration>,
    /// Delay between streamed frames; `None` = the server's profile.
    pub chunk_delay: Option<Duration>,
    /// `(input, output)` tokens reported; `None` = estimated as characters / 4.
    pub usage: Option<(u64, u64)>,
    /// Report the answer as cut short by `max_tokens` (`length` / `max_tokens`).
    pub max_tokens_reached: bool,
    /// Interleave the argument pieces of parallel tool calls (OpenAI format only).
    pub interleave: bool,
    /// Answer with one JSON document even when the client asked for a stream, as some
    /// OpenAI-compatible servers do.
    pub ignore_stream: bool,
    pub end: StreamEnd,
}

impl FakeReply {
    fn new(kind: ReplyKind) -> Self {
        Self {
            kind,
            chunks: None,
            latency: None,
            chunk_delay: None,
            usage: None,
            max_tokens_reached: false,
            interleave: false,
            ignore_stream: false,
            end: StreamEnd::Complete,
        }
    }

    pub fn text(text: &str) -> Self {
        Self::new(ReplyKind::Answer {
            text: text.to_string(),
            tool_calls: Vec::new(),
        })
    }

    pub fn tool_call(id: &str, name: &str, arguments: Value) -> Self {
        Self::tool_calls(vec![FakeToolCall::new(id, name, arguments)])
    }

    /// Several (parallel) tool calls in one answer.
    pub fn tool_calls(calls: Vec<FakeToolCall>) -> Self {
        Self::new(ReplyKind::Answer {
            text: String::new(),
            tool_calls: calls,
        })
    }

    /// The scripted model's decision for the conversation received.
    pub fn auto() -> Self {
        Self::new(ReplyKind::Auto)
    }

    /// An HTTP error with the provider's error JSON around `message`.
    pub fn error(status: u16, message: &str) -> Self {
        Self::new(ReplyKind::Error {
            status,
            message: message.to_string(),
            body: None,
            retry_after: None,
        })
    }

    /// An HTTP error with exactly this body.
    pub fn raw_error(status: u16, body: &str) -> Self {
        Self::new(ReplyKind::Error {
            status,
            message: String::new(),
            body: Some(body.to_string()),
            retry_after: None,
        })
    }

    /// A 429, with a `Retry-After` header value when given (`"2"`, or an HTTP date).
    pub fn rate_limited(retry_after: Option<&str>) -> Self {
        Self::error(429, "Rate limit reached for requests").with_retry_after(retry_after)
    }

    /// Streams `text`, then aborts the connection after `frames` frames.
    pub fn broken(text: &str, frames: usize) -> Self {
        Self {
            end: StreamEnd::BreakAfter(frames),
            ..Self::text(text)
        }
    }

    /// Streams `text`, then ends the body cleanly after `frames` frames, without the final
    /// markers.
    pub fn truncated(text: &str, frames: usize) -> Self {
        Self {
            end: StreamEnd::TruncateAfter(frames),
            ..Self::text(text)
        }
    }

    /// Text before the tool calls of an answer (ignored for errors and auto).
    pub fn with_text(mut self, lead: &str) -> Self {
        if let ReplyKind::Answer { text, .. } = &mut self.kind {
            *text = lead.to_string();
        }
        self
    }

    /// `Retry-After` on an error reply.
    pub fn with_retry_after(mut self, value: Option<&str>) -> Self {
        if let ReplyKind::Error { retry_after, .. } = &mut self.kind {
            *retry_after = value.map(str::to_string);
        }
        self
    }

    pub fn in_chunks(mut self, chunks: usize) -> Self {
        self.chunks = Some(chunks);
        self
    }

    pub fn with_latency(mut self, latency: Duration) -> Self {
        self.latency = Some(latency);
        self
    }

    pub fn with_chunk_delay(mut self, delay: Duration) -> Self {
        self.chunk_delay = Some(delay);
        self
    }

    pub fn with_usage(mut self, input: u64, output: u64) -> Self {
        self.usage = Some((input, output));
        self
    }

    pub fn max_tokens_reached(mut self) -> Self {
        self.max_tokens_reached = true;
        self
    }

    pub fn interleaved(mut self) -> Self {
        self.interleave = true;
        self
    }

    pub fn ignoring_stream(mut self) -> Self {
        self.ignore_stream = true;
        self
    }
}

/// What the server answers when its queue is empty.
#[derive(Debug, Clone, PartialEq)]
pub enum DefaultReply {
    /// The scripted model's decision for the conversation received.
    Auto,
    /// This reply, every time.
    Always(FakeReply),
}

#[derive(Debug, Clone)]
pub struct FakeConfig {
    /// The address to listen on: loopback unless a container must reach it from another.
    pub host: std::net::IpAddr,
    /// 0 picks a free port.
    pub port: u16,
    /// Delay before each response head (time to first byte).
    pub latency: Duration,
    /// Text chunks per streamed answer; 0 = one chunk per word.
    pub chunks: usize,
    /// Delay between streamed frames.
    pub chunk_delay: Duration,
    pub default_reply: DefaultReply,
    /// When set, requests must carry this key (`Authorization: Bearer` / `x-api-key`) or get a
    /// 401 like the real providers.
    pub api_key: Option<String>,
    /// actix-web worker threads.
    pub workers: usize,
    /// How many requests to keep for [`FakeModelServer::requests`] (oldest dropped first);
    /// 0 records nothing (benchmarks).
    pub record_limit: usize,
    /// How many [`ModelTiming`]s to keep for [`FakeModelServer::take_timings`] (oldest dropped
    /// first); 0 (the default) measures nothing.
    pub timing_limit: usize,
}

/// When the server worked on one answered request, for benchmarks: the client's time minus
/// the model's time is what the client itself spent. `Instant`s compare with the benchmark's
/// own clock when the server runs in the benchmark's process.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModelTiming {
    /// The last user message of the conversation: a benchmark makes it unique per run, so the
    /// model calls of one run can be found (a tool run calls the model twice).
    pub key: String,
    /// The request was received.
    pub received: Instant,
    /// The first body frame was handed to the connection (after the configured latency).
    pub first_byte: Option<Instant>,
    /// The last frame was handed to the connection.
    pub done: Instant,
}

impl Default for FakeConfig {
    fn default() -> Self {
        Self {
            host: std::net::Ipv4Addr::LOCALHOST.into(),
            port: 0,
            latency: Duration::ZERO,
            chunks: 0,
            chunk_delay: Duration::ZERO,
            default_reply: DefaultReply::Auto,
            api_key: None,
            workers: 1,
            record_limit: 10_000,
            timing_limit: 0,
        }
    }
}

/// The mutable state shared by the handlers and the handle.
#[derive(Debug)]
pub(crate) struct State {
    pub queue: VecDeque<FakeReply>,
    pub default_reply: DefaultReply,
    pub latency: Duration,
    pub chunks: usize,
    pub chunk_delay: Duration,
    pub api_key: Option<String>,
    pub requests: VecDeque<RecordedRequest>,
    pub record_limit: usize,
    pub served: u64,
    pub timings: VecDeque<ModelTiming>,
    pub timing_limit: usize,
    /// Vectors tests registered, by exact input text.
    pub embeddings: std::collections::HashMap<String, Vec<f32>>,
    /// Embedding requests, apart from the chat ones (same record limit).
    pub embedding_requests: VecDeque<RecordedRequest>,
    /// When set, every embeddings request fails with this status.
    pub embeddings_failing: Option<u16>,
}

#[derive(Debug)]
pub(crate) struct Shared {
    state: Mutex<State>,
}

impl Shared {
    pub fn lock(&self) -> MutexGuard<'_, State> {
        // A panicking handler must not take the whole fake server down with it.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// A running fake model server. Dropping it stops the server.
pub struct FakeModelServer {
    addr: SocketAddr,
    shared: Arc<Shared>,
    handle: actix_web::dev::ServerHandle,
}

impl FakeModelServer {
    /// Start on `config.host:config.port` (loopback by default). Needs a Tokio runtime; panics if the port cannot be
    /// bound (test support: use [`FakeModelServer::try_start`] to handle that).
    pub fn start(config: FakeConfig) -> Self {
        match Self::try_start(config) {
            Ok(server) => server,
            Err(e) => panic!("the fake model server could not start: {e}"),
        }
    }

    pub fn try_start(config: FakeConfig) -> std::io::Result<Self> {
        let shared = Arc::new(Shared {
            state: Mutex::new(State {
                queue: VecDeque::new(),
                default_reply: config.default_reply,
                latency: config.latency,
                chunks: config.chunks,
                chunk_delay: config.chunk_delay,
                api_key: config.api_key,
                requests: VecDeque::new(),
                record_limit: config.record_limit,
                served: 0,
                timings: VecDeque::new(),
                timing_limit: config.timing_limit,
                embeddings: std::collections::HashMap::new(),
                embedding_requests: VecDeque::new(),
                embeddings_failing: None,
            }),
        });
        let (addr, server) = server::run(
            shared.clone(),
            (config.host, config.port).into(),
            config.workers.max(1),
        )?;
        let handle = server.handle();
        tokio::spawn(server);
        Ok(Self {
            addr,
            shared,
            handle,
        })
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://127.0.0.1:PORT`
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Base URL for an OpenAI-compatible client: `http://127.0.0.1:PORT/v1`.
    pub fn base_url_openai(&self) -> String {
        format!("{}/v1", self.url())
    }

    /// Base URL for an Anthropic client: `http://127.0.0.1:PORT`.
    pub fn base_url_anthropic(&self) -> String {
        self.url()
    }

    /// Queue a reply; replies are used in order, one per request.
    pub fn push(&self, reply: FakeReply) {
        self.shared.lock().queue.push_back(reply);
    }

    pub fn push_all(&self, replies: impl IntoIterator<Item = FakeReply>) {
        self.shared.lock().queue.extend(replies);
    }

    /// Replies still queued.
    pub fn pending(&self) -> usize {
        self.shared.lock().queue.len()
    }

    pub fn set_default_reply(&self, reply: DefaultReply) {
        self.shared.lock().default_reply = reply;
    }

    /// Delay before each response head.
    pub fn set_latency(&self, latency: Duration) {
        self.shared.lock().latency = latency;
    }

    /// Text chunks per streamed answer (0 = one per word) and the delay between frames.
    pub fn set_stream_profile(&self, chunks: usize, chunk_delay: Duration) {
        let mut state = self.shared.lock();
        state.chunks = chunks;
        state.chunk_delay = chunk_delay;
    }

    pub fn set_api_key(&self, key: Option<&str>) {
        self.shared.lock().api_key = key.map(str::to_string);
    }

    /// The requests received so far (up to the record limit), oldest first.
    pub fn requests(&self) -> Vec<RecordedRequest> {
        self.shared.lock().requests.iter().cloned().collect()
    }

    /// Requests received so far, including those no longer recorded.
    pub fn request_count(&self) -> u64 {
        self.shared.lock().served
    }

    pub fn clear_requests(&self) {
        self.shared.lock().requests.clear();
    }

    /// The timings of the requests answered since the last call (needs
    /// [`FakeConfig::timing_limit`]), oldest first. A response the client dropped before its
    /// end is not counted.
    pub fn take_timings(&self) -> Vec<ModelTiming> {
        self.shared.lock().timings.drain(..).collect()
    }

    /// `POST /v1/embeddings` answers `vector` for exactly `text` from now on.
    pub fn set_embedding(&self, text: &str, vector: Vec<f32>) {
        self.shared
            .lock()
            .embeddings
            .insert(text.to_string(), vector);
    }

    /// `Some(status)`: every embeddings request fails with it (an outage); `None`: they work.
    pub fn fail_embeddings(&self, status: Option<u16>) {
        self.shared.lock().embeddings_failing = status;
    }

    /// The embeddings requests received so far (up to the record limit), oldest first.
    pub fn embedding_requests(&self) -> Vec<RecordedRequest> {
        self.shared
            .lock()
            .embedding_requests
            .iter()
            .cloned()
            .collect()
    }

    /// Stop accepting and close connections; waits for the workers to stop.
    pub async fn stop(self) {
        self.handle.stop(false).await;
    }
}

impl Drop for FakeModelServer {
    fn drop(&mut self) {
        // The stop command is sent right away; nothing needs to wait for it.
        drop(self.handle.stop(false));
    }
}
