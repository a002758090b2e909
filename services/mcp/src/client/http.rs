//! Streamable HTTP: auth headers from the config, and expired-session detection.
//!
//! rmcp's transport keeps `Mcp-Session-Id` and, when a POST that carried a session gets HTTP 404,
//! re-runs the `initialize` handshake and retries that request once. Some servers (the reference
//! TypeScript servers among them) answer an unknown session with **400** and a JSON-RPC error
//! such as `Bad Request: No valid session ID provided` instead; [`SessionAwareClient`] turns that
//! answer into the same "session expired" signal so rmcp recovers the same way.
//!
//! rmcp's transport has no per-request header hook, and it sends from a task of its own, where
//! the caller's span is not current. A request carries its trace context in `_meta.traceparent`
//! ([`super::connection`] puts it there inside the `mcp tools/call` span); [`SessionAwareClient`]
//! copies it into the W3C `traceparent` header of the HTTP request that carries it.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use agentry_schema::secret::Secret;
use base64::Engine;
use futures::stream::BoxStream;
use http::{HeaderName, HeaderValue};
use rmcp::model::{ClientJsonRpcMessage, GetMeta, JsonRpcMessage, ServerJsonRpcMessage};
use rmcp::transport::streamable_http_client::{
    SseError, StreamableHttpClient, StreamableHttpClientTransportConfig, StreamableHttpError,
    StreamableHttpPostResponse,
};
use sse_stream::Sse;

use super::config::{HttpAuth, HttpConfig};
use super::error::McpError;
use super::handler::Shared;
use agentry_builtin::net_guard::GuardedResolver;

/// Resolve a secret given as an env var name or a literal. A missing variable is an error that
/// names it.
fn resolve(
    server: &str,
    env: &Option<String>,
    literal: &Option<Secret>,
    purpose: &str,
) -> Result<Secret, McpError> {
    if let Some(s) = literal {
        return Ok(s.clone());
    }
    let var = env.clone().unwrap_or_default();
    match std::env::var(&var) {
        Ok(v) if !v.is_empty() => Ok(Secret::new(v)),
        _ => Err(McpError::MissingEnv {
            server: server.to_string(),
            var,
            purpose: purpose.to_string(),
        }),
    }
}

fn header_value(server: &str, name: &str, value: &str) -> Result<HeaderValue, McpError> {
    let mut v = HeaderValue::from_str(value).map_err(|_| McpError::Protocol {
        server: server.to_string(),
        reason: format!("the value for header {name} is not a valid header value"),
    })?;
    v.set_sensitive(true);
    Ok(v)
}

/// The rmcp transport config for `cfg`: URL, custom headers and auth, with env vars read now.
pub(crate) fn transport_config(
    server: &str,
    cfg: &HttpConfig,
) -> Result<StreamableHttpClientTransportConfig, McpError> {
    let mut headers: HashMap<HeaderName, HeaderValue> = HashMap::new();
    for (name, value) in &cfg.headers {
        let n = HeaderName::from_bytes(name.as_bytes()).map_err(|_| McpError::Protocol {
            server: server.to_string(),
            reason: format!("{name:?} is not a valid header name"),
        })?;
        headers.insert(n, header_value(server, name, value.expose())?);
    }
    let mut config = StreamableHttpClientTransportConfig::with_uri(cfg.url.clone());
    match &cfg.auth {
        // The token comes from `oauth::authorized_manager`, through rmcp's `AuthClient`.
        HttpAuth::None | HttpAuth::OAuth(_) => {}
        HttpAuth::Bearer { token_env, token } => {
            let token = resolve(server, token_env, token, "bearer token")?;
            config = config.auth_header(token.expose().to_string());
        }
        HttpAuth::ApiKey {
            key_env,
            key,
            header,
        } => {
            let key = resolve(server, key_env, key, "API key")?;
            let n = HeaderName::from_bytes(header.as_bytes()).map_err(|_| McpError::Protocol {
                server: server.to_string(),
                reason: format!("{header:?} is not a valid header name"),
            })?;
            headers.insert(n, header_value(server, header, key.expose())?);
        }
        HttpAuth::Basic {
            username_env,
            password_env,
        } => {
            let user = resolve(
                server,
                &Some(username_env.clone()),
                &None,
                "basic auth user",
            )?;
            let pass = resolve(
                server,
                &Some(password_env.clone()),
                &None,
                "basic auth password",
            )?;
            let encoded = base64::engine::general_purpose::STANDARD.encode(format!(
                "{}:{}",
                user.expose(),
                pass.expose()
            ));
            headers.insert(
                http::header::AUTHORIZATION,
                header_value(server, "Authorization", &format!("Basic {encoded}"))?,
            );
        }
    }
    config.custom_headers = headers;
    config.reinit_on_expired_session = true;
    Ok(config)
}

/// What the HTTP client tells its connection about the transport, beyond the messages.
pub(crate) struct HttpSignals {
    shared: Arc<Shared>,
    /// A request carried a session id: the server runs sessions, so rmcp opens the standalone
    /// GET stream (it does so only for a session).
    session_used: AtomicBool,
    /// The first standalone GET stream was answered (opened, refused, or failed).
    get_settled: tokio::sync::watch::Sender<bool>,
}

impl HttpSignals {
    pub(crate) fn new(shared: Arc<Shared>) -> Arc<Self> {
        Arc::new(Self {
            shared,
            session_used: AtomicBool::new(false),
            get_settled: tokio::sync::watch::channel(false).0,
        })
    }

    /// Wait, at most `within`, until the server has answered the standalone GET stream, when
    /// the server runs sessions (it has one). rmcp opens that stream in the background right
    /// after the handshake, and a server sends requests not tied to a call (elicitation from a
    /// handler that does not name its request, as the TypeScript SDK does by default) on it:
    /// one sent before the stream is open is lost, and the call that caused it hangs. So the
    /// connection is handed out only once the stream is open. Returns whether it was answered.
    pub(crate) async fn standalone_stream_open(&self, within: Duration) -> bool {
        if !self.session_used.load(Ordering::SeqCst) {
            return true;
        }
        let mut rx = self.get_settled.subscribe();
        tokio::time::timeout(within, rx.wait_for(|settled| *settled))
            .await
            .is_ok()
    }

    /// A request failed before it reached the server. When a stream was broken and resuming it
    /// is refused this way, the server is gone: the calls in flight fail at once (rmcp would
    /// keep trying to resume their streams with backoff, and a call would wait for the next
    /// health check or its own timeout).
    fn request_failed(&self, what: &str, error: &StreamableHttpError<reqwest::Error>) {
        if let StreamableHttpError::Client(e) = error
            && (e.is_connect() || e.is_timeout())
        {
            self.shared.transport_broken(format!(
                "the server stopped answering ({what} failed: {})",
                plain_reqwest(e)
            ));
        }
    }
}

/// A reqwest error in words, without the URL's query or the error's type.
pub(crate) fn plain_reqwest(e: &reqwest::Error) -> String {
    let mut cause: Option<&dyn std::error::Error> = std::error::Error::source(e);
    let mut deepest = None;
    while let Some(c) = cause {
        deepest = Some(c.to_string());
        cause = c.source();
    }
    let kind = if e.is_connect() {
        "could not connect"
    } else if e.is_timeout() {
        "timed out"
    } else if e.is_body() || e.is_decode() {
        "the response broke off"
    } else {
        "the request failed"
    };
    match deepest {
        Some(d) if !d.is_empty() => format!("{kind}: {d}"),
        _ => kind.to_string(),
    }
}

/// reqwest, plus: a POST that carried a session and got a JSON-RPC error about the session is an
/// expired session; the connection hears when the standalone stream is open and when the
/// server stopped answering ([`HttpSignals`]).
#[derive(Clone)]
pub(crate) struct SessionAwareClient {
    inner: reqwest::Client,
    signals: Arc<HttpSignals>,
}

impl SessionAwareClient {
    /// With a `guard`, every name is resolved and checked by it (no proxy, checked redirects):
    /// the client connects only to addresses the guard allowed.
    pub(crate) fn new(
        connect_timeout: std::time::Duration,
        guard: Option<&Arc<GuardedResolver>>,
        signals: Arc<HttpSignals>,
    ) -> Result<Self, reqwest::Error> {
        let mut builder = reqwest::Client::builder().connect_timeout(connect_timeout);
        if let Some(guard) = guard {
            builder = builder
                .no_proxy()
                .redirect(guard.redirect_policy())
                .dns_resolver(guard.clone());
        }
        Ok(Self {
            inner: builder.build()?,
            signals,
        })
    }
}

/// An error answer that means "I don't know this session": code -32000/-32001 and a message
/// naming the session (the reference servers' `No valid session ID provided`, `Session not
/// found`).
fn is_session_rejection(message: &ServerJsonRpcMessage) -> bool {
    let JsonRpcMessage::Error(e) = message else {
        return false;
    };
    let code = e.error.code.0;
    let text = e.error.message.to_ascii_lowercase();
    (code == -32000 || code == -32001) && text.contains("session")
}

/// `headers` plus the `traceparent` of `message`'s `_meta`, when it has a valid one.
fn with_trace_context(
    message: &ClientJsonRpcMessage,
    mut headers: HashMap<HeaderName, HeaderValue>,
) -> HashMap<HeaderName, HeaderValue> {
    if let JsonRpcMessage::Request(r) = message
        && let Some(tp) = r.request.get_meta().get_traceparent()
        && let Ok(value) = HeaderValue::from_str(tp)
    {
        headers.insert(HeaderName::from_static("traceparent"), value);
    }
    headers
}

impl SessionAwareClient {
    /// A GET was answered: the standalone stream is open (or will not be), and a refused
    /// connection means the server is gone.
    fn settled<T>(&self, resuming: bool, r: &Result<T, StreamableHttpError<reqwest::Error>>) {
        if let Err(e) = r {
            let what = if resuming {
                "resuming a response stream"
            } else {
                "opening the event stream"
            };
            self.signals.request_failed(what, e);
        }
        self.signals.get_settled.send_replace(true);
    }
}

/// The most a raw `tools/list` answer may be (body or event stream), like rmcp's own bound on
/// JSON answers: a hostile server cannot make the client buffer without end.
const MAX_TOOLS_LIST_ANSWER: usize = 16 * 1024 * 1024;

impl SessionAwareClient {
    /// A `tools/list` request is POSTed here rather than by rmcp's client, so that its raw
    /// answer can be read for `execution.taskSupport` (rmcp drops it; see `task_support`).
    /// `None` when `message` is something else, or the answer is not a plain 200 with JSON or
    /// an event stream: then rmcp's client sends it (`tools/list` changes nothing on the server,
    /// so asking twice is harmless) and handles what comes back.
    async fn post_tools_list(
        &self,
        uri: &Arc<str>,
        message: &ClientJsonRpcMessage,
        session_id: &Option<Arc<str>>,
        auth_header: &Option<String>,
        custom_headers: &HashMap<HeaderName, HeaderValue>,
    ) -> Option<Result<StreamableHttpPostResponse, StreamableHttpError<reqwest::Error>>> {
        use futures::StreamExt;
        let JsonRpcMessage::Request(r) = message else {
            return None;
        };
        if !matches!(r.request, rmcp::model::ClientRequest::ListToolsRequest(_)) {
            return None;
        }
        let mut request = self
            .inner
            .post(uri.as_ref())
            .header(http::header::ACCEPT, "text/event-stream, application/json")
            .json(message);
        if let Some(token) = auth_header {
            request = request.bearer_auth(token);
        }
        for (name, value) in custom_headers {
            request = request.header(name, value);
        }
        if let Some(session) = session_id {
            request = request.header("Mcp-Session-Id", session.as_ref());
        }
        let response = match request.send().await {
            Ok(r) => r,
            Err(e) => {
                let e = StreamableHttpError::Client(e);
                self.signals.request_failed("a request", &e);
                return Some(Err(e));
            }
        };
        if response.status() != reqwest::StatusCode::OK {
            return None;
        }
        let session = response
            .headers()
            .get("mcp-session-id")
            .and_then(|v| v.to_str().ok())
            .map(str::to_string);
        let content_type = response
            .headers()
            .get(http::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_ascii_lowercase();
        let shared = self.signals.shared.clone();
        let mut seen = 0usize;
        let body = response.bytes_stream().map(move |chunk| {
            let chunk = chunk.map_err(std::io::Error::other)?;
            seen += chunk.len();
            if seen > MAX_TOOLS_LIST_ANSWER {
                return Err(std::io::Error::other(format!(
                    "the tools/list answer is larger than {MAX_TOOLS_LIST_ANSWER} bytes"
                )));
            }
            Ok(chunk)
        });
        if content_type.starts_with("application/json") {
            let mut body = Box::pin(body);
            let mut bytes = Vec::new();
            while let Some(chunk) = body.next().await {
                match chunk {
                    Ok(c) => bytes.extend_from_slice(&c),
                    Err(e) => {
                        return Some(Err(StreamableHttpError::UnexpectedServerResponse(
                            format!("reading the tools/list answer: {e}").into(),
                        )));
                    }
                }
            }
            shared.task_support.observe_text(&bytes);
            return Some(
                serde_json::from_slice::<ServerJsonRpcMessage>(&bytes)
                    .map(|m| StreamableHttpPostResponse::Json(m, session))
                    .map_err(|e| {
                        StreamableHttpError::UnexpectedServerResponse(
                            format!("the tools/list answer is not JSON-RPC: {e}").into(),
                        )
                    }),
            );
        }
        if content_type.starts_with("text/event-stream") {
            let events = sse_stream::SseStream::from_bytes_stream(body)
                .inspect(move |event| {
                    if let Ok(Sse {
                        data: Some(data), ..
                    }) = event
                    {
                        shared.task_support.observe_text(data.as_bytes());
                    }
                })
                .boxed();
            return Some(Ok(StreamableHttpPostResponse::Sse(events, session)));
        }
        None
    }
}

impl StreamableHttpClient for SessionAwareClient {
    type Error = reqwest::Error;

    async fn post_message(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> Result<StreamableHttpPostResponse, StreamableHttpError<Self::Error>> {
        let custom_headers = with_trace_context(&message, custom_headers);
        let had_session = session_id.is_some();
        if had_session {
            self.signals.session_used.store(true, Ordering::SeqCst);
        }
        if let Some(answer) = self
            .post_tools_list(&uri, &message, &session_id, &auth_header, &custom_headers)
            .await
        {
            return answer;
        }
        let response = self
            .inner
            .post_message(uri, message, session_id, auth_header, custom_headers)
            .await
            .inspect_err(|e| self.signals.request_failed("a request", e))?;
        match &response {
            StreamableHttpPostResponse::Json(m, _) if had_session && is_session_rejection(m) => {
                tracing::info!("MCP server rejected the session; re-initializing");
                Err(StreamableHttpError::SessionExpired)
            }
            _ => Ok(response),
        }
    }

    async fn post_message_with_max_sse_event_size(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
        max_sse_event_size: usize,
    ) -> Result<StreamableHttpPostResponse, StreamableHttpError<Self::Error>> {
        let custom_headers = with_trace_context(&message, custom_headers);
        let had_session = session_id.is_some();
        if had_session {
            self.signals.session_used.store(true, Ordering::SeqCst);
        }
        if let Some(answer) = self
            .post_tools_list(&uri, &message, &session_id, &auth_header, &custom_headers)
            .await
        {
            return answer;
        }
        let response = self
            .inner
            .post_message_with_max_sse_event_size(
                uri,
                message,
                session_id,
                auth_header,
                custom_headers,
                max_sse_event_size,
            )
            .await
            .inspect_err(|e| self.signals.request_failed("a request", e))?;
        match &response {
            StreamableHttpPostResponse::Json(m, _) if had_session && is_session_rejection(m) => {
                tracing::info!("MCP server rejected the session; re-initializing");
                Err(StreamableHttpError::SessionExpired)
            }
            _ => Ok(response),
        }
    }

    async fn delete_session(
        &self,
        uri: Arc<str>,
        session_id: Arc<str>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> Result<(), StreamableHttpError<Self::Error>> {
        self.inner
            .delete_session(uri, session_id, auth_header, custom_headers)
            .await
    }

    async fn get_stream(
        &self,
        uri: Arc<str>,
        session_id: Option<Arc<str>>,
        last_event_id: Option<String>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> Result<BoxStream<'static, Result<Sse, SseError>>, StreamableHttpError<Self::Error>> {
        let resuming = last_event_id.is_some();
        let r = self
            .inner
            .get_stream(uri, session_id, last_event_id, auth_header, custom_headers)
            .await;
        self.settled(resuming, &r);
        r
    }

    async fn get_stream_with_max_sse_event_size(
        &self,
        uri: Arc<str>,
        session_id: Option<Arc<str>>,
        last_event_id: Option<String>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
        max_sse_event_size: usize,
    ) -> Result<BoxStream<'static, Result<Sse, SseError>>, StreamableHttpError<Self::Error>> {
        let resuming = last_event_id.is_some();
        let r = self
            .inner
            .get_stream_with_max_sse_event_size(
                uri,
                session_id,
                last_event_id,
                auth_header,
                custom_headers,
                max_sse_event_size,
            )
            .await;
        self.settled(resuming, &r);
        r
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;
    use std::net::IpAddr;
    use std::sync::atomic::{AtomicUsize, Ordering};

    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpListener;

    use crate::client::{ClientHooks, McpConnection, McpServerConfig, StdioLaunch};
    use agentry_builtin::BuiltinConfig;
    use agentry_builtin::net_guard::{ScriptedResolver, check_url_with};

    /// Accept connections on `listener`, count them, and answer each with `reply` (if any).
    fn count_connections(listener: TcpListener, reply: Option<String>) -> Arc<AtomicUsize> {
        let hits = Arc::new(AtomicUsize::new(0));
        let counted = hits.clone();
        tokio::spawn(async move {
            while let Ok((mut sock, _)) = listener.accept().await {
                counted.fetch_add(1, Ordering::SeqCst);
                if let Some(reply) = &reply {
                    let mut buf = vec![0u8; 16 * 1024];
                    let _ = sock.read(&mut buf).await;
                    let _ = sock.write_all(reply.as_bytes()).await;
                }
            }
        });
        hits
    }

    /// A user's server at 127.0.0.2 (allowed) and an internal service on 127.0.0.1 (refused by
    /// the policy), on the same port.
    async fn two_listeners() -> (TcpListener, TcpListener, u16) {
        let internal = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = internal.local_addr().unwrap().port();
        let public = TcpListener::bind(("127.0.0.2", port)).await.unwrap();
        (internal, public, port)
    }

    fn policy() -> BuiltinConfig {
        BuiltinConfig {
            allowed_networks: vec!["127.0.0.2/32".parse().unwrap()],
            ..BuiltinConfig::default()
        }
    }

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    async fn connect_guarded(
        url: &str,
        dns: Arc<ScriptedResolver>,
    ) -> Result<McpConnection, McpError> {
        let dir = tempfile::tempdir().unwrap();
        let launch = StdioLaunch {
            http_guard: Some(Arc::new(GuardedResolver::with_resolver(&policy(), dns))),
            ..StdioLaunch::unconfined(dir.path().to_path_buf())
        };
        let mut config = McpServerConfig::http("guarded", url);
        config.connect_timeout_secs = 10;
        McpConnection::connect(&config, ClientHooks::default(), &launch).await
    }

    /// DNS rebinding: the name passed the check with an allowed address, then answers with an
    /// internal one. The client resolves through the guard, so it never reaches the internal
    /// service.
    #[tokio::test]
    async fn a_name_rebound_after_the_check_does_not_reach_the_new_address() {
        let (internal, public, port) = two_listeners().await;
        let internal_hits = count_connections(internal, None);
        let public_hits = count_connections(public, None);
        let dns = ScriptedResolver::new(vec![Ok(vec![ip("127.0.0.2")]), Ok(vec![ip("127.0.0.1")])]);
        let url = format!("http://rebind.test:{port}/mcp");
        let checked = check_url_with(&url, &policy(), dns.as_ref()).await.unwrap();
        assert_eq!(
            checked.addrs,
            vec![std::net::SocketAddr::new(ip("127.0.0.2"), port)]
        );

        let err = connect_guarded(&url, dns.clone()).await.unwrap_err();
        assert_eq!(
            internal_hits.load(Ordering::SeqCst),
            0,
            "reached the internal service: {err}"
        );
        assert_eq!(public_hits.load(Ordering::SeqCst), 0);
        assert!(
            dns.lookups() >= 2,
            "the client did not resolve through the guard"
        );
    }

    /// The same name answering the allowed address is connected to (the guard does not simply
    /// refuse everything), and a redirect to a refused IP literal is not followed.
    #[tokio::test]
    async fn a_guarded_client_connects_to_the_checked_address_and_checks_redirects() {
        let (internal, public, port) = two_listeners().await;
        let internal_hits = count_connections(internal, None);
        let redirect = format!(
            "HTTP/1.1 307 Temporary Redirect\r\nlocation: http://127.0.0.1:{port}/mcp\r\n\
             content-length: 0\r\nconnection: close\r\n\r\n"
        );
        let public_hits = count_connections(public, Some(redirect));
        let dns = ScriptedResolver::new(vec![Ok(vec![ip("127.0.0.2")])]);
        let url = format!("http://rebind.test:{port}/mcp");
        let err = connect_guarded(&url, dns).await.unwrap_err();
        assert!(public_hits.load(Ordering::SeqCst) >= 1, "{err}");
        assert_eq!(
            internal_hits.load(Ordering::SeqCst),
            0,
            "followed the redirect: {err}"
        );
    }

    fn http(auth: HttpAuth) -> HttpConfig {
        HttpConfig {
            url: "http://127.0.0.1:1/mcp".into(),
            headers: BTreeMap::from([("X-Team".to_string(), Secret::new("t1"))]),
            auth,
        }
    }

    #[test]
    fn missing_env_var_is_named() {
        let err = transport_config(
            "gh",
            &http(HttpAuth::Bearer {
                token_env: Some("AGENTRY_TEST_SURELY_UNSET_TOKEN".into()),
                token: None,
            }),
        )
        .unwrap_err();
        assert!(
            matches!(&err, McpError::MissingEnv { var, .. } if var == "AGENTRY_TEST_SURELY_UNSET_TOKEN"),
            "{err:?}"
        );
        assert!(err.to_string().contains("AGENTRY_TEST_SURELY_UNSET_TOKEN"));
    }

    #[test]
    fn auth_variants_become_headers() {
        let c = transport_config(
            "s",
            &http(HttpAuth::Bearer {
                token_env: None,
                token: Some(Secret::new("tok")),
            }),
        )
        .unwrap();
        assert_eq!(c.auth_header.as_deref(), Some("tok"));
        assert_eq!(c.custom_headers[&HeaderName::from_static("x-team")], "t1");

        let c = transport_config(
            "s",
            &http(HttpAuth::ApiKey {
                key_env: None,
                key: Some(Secret::new("k")),
                header: "X-API-Key".into(),
            }),
        )
        .unwrap();
        assert_eq!(c.custom_headers[&HeaderName::from_static("x-api-key")], "k");

        // PATH is always set where tests run; HOME too.
        let c = transport_config(
            "s",
            &http(HttpAuth::Basic {
                username_env: "PATH".into(),
                password_env: "HOME".into(),
            }),
        )
        .unwrap();
        let expected = base64::engine::general_purpose::STANDARD.encode(format!(
            "{}:{}",
            std::env::var("PATH").unwrap(),
            std::env::var("HOME").unwrap()
        ));
        assert_eq!(
            c.custom_headers[&http::header::AUTHORIZATION],
            format!("Basic {expected}").as_str()
        );
    }
}
