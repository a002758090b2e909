//! The `web` service: http_request, fetch_url, and web_search (when a search key is set).
//!
//! Requests go through [`net_guard`](super::net_guard): every hop (the first URL and each
//! redirect) is resolved, every address checked, and the connection pinned to the checked
//! addresses. Proxies from the environment are ignored (they would bypass the check). Bodies
//! are read up to `http_body_cap_bytes`. All three tools need approval.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use reqwest::header::{HeaderMap, HeaderName, HeaderValue};
use reqwest::{Method, StatusCode};
use serde::Deserialize;
use serde_json::{Map, Value, json};
use tokio_util::sync::CancellationToken;
use url::Url;

use super::net_guard::{CheckedTarget, check_parsed};
use super::{BuiltinConfig, blocking, parse_args, truncate_utf8};
use agentry_tools::tool::{Tool, ToolContext, ToolError, ToolOutput, ToolSpec};

const SERVICE: &str = "web";
/// How much of an error body goes into `error_message`.
const ERROR_EXCERPT_CHARS: usize = 500;

pub fn tools(cfg: &BuiltinConfig) -> Vec<Arc<dyn Tool>> {
    let cfg = Arc::new(cfg.clone());
    let mut tools: Vec<Arc<dyn Tool>> = vec![
        Arc::new(HttpRequest::new(cfg.clone())),
        Arc::new(FetchUrl::new(cfg.clone())),
    ];
    if !cfg.search_api_key.is_empty() {
        tools.push(Arc::new(WebSearch::new(cfg)));
    }
    tools
}

// ---------------------------------------------------------------------------------------------
// the guarded client

/// A response, read up to the body cap.
#[derive(Debug)]
pub(crate) struct Fetched {
    pub status: StatusCode,
    pub final_url: Url,
    pub headers: HeaderMap,
    pub body: Vec<u8>,
    pub truncated: bool,
    pub redirects: usize,
}

impl Fetched {
    fn content_type(&self) -> String {
        self.headers
            .get(reqwest::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_ascii_lowercase()
    }

    fn headers_json(&self) -> Value {
        let mut map = Map::new();
        for (name, value) in &self.headers {
            let v = String::from_utf8_lossy(value.as_bytes()).into_owned();
            match map.get_mut(name.as_str()) {
                Some(Value::String(existing)) => {
                    existing.push_str(", ");
                    existing.push_str(&v);
                }
                _ => {
                    map.insert(name.as_str().to_string(), Value::String(v));
                }
            }
        }
        Value::Object(map)
    }
}

struct Request {
    method: Method,
    url: Url,
    headers: HeaderMap,
    body: Option<Vec<u8>>,
}

fn client_for(
    target: &CheckedTarget,
    cfg: &BuiltinConfig,
    timeout: Duration,
) -> Result<reqwest::Client, ToolError> {
    let mut builder = reqwest::Client::builder()
        .no_proxy()
        .redirect(reqwest::redirect::Policy::none())
        .timeout(timeout)
        .connect_timeout(timeout)
        .user_agent(cfg.user_agent.clone());
    if let Some(host) = &target.pinned_host {
        builder = builder.resolve_to_addrs(host, &target.addrs);
    }
    builder
        .build()
        .map_err(|e| ToolError::failed(format!("cannot build the HTTP client: {e}")))
}

fn map_reqwest(e: reqwest::Error, url: &Url, timeout: Duration) -> ToolError {
    if e.is_timeout() {
        ToolError::Timeout(timeout)
    } else if e.is_connect() {
        ToolError::Failed {
            message: format!(
                "cannot connect to {}: {e}",
                url.host_str().unwrap_or_default()
            ),
            retryable: true,
        }
    } else {
        ToolError::Failed {
            message: format!("request to {url} failed: {e}"),
            retryable: e.is_request() || e.is_body(),
        }
    }
}

fn same_origin(a: &Url, b: &Url) -> bool {
    a.scheme() == b.scheme()
        && a.host_str() == b.host_str()
        && a.port_or_known_default() == b.port_or_known_default()
}

/// Send a request, following redirects hop by hop (each one checked), and read the body up
/// to the cap. The whole exchange is bounded by `timeout` and stops on `cancel`.
async fn send_guarded(
    cfg: &BuiltinConfig,
    request: Request,
    timeout: Duration,
    cancel: &CancellationToken,
) -> Result<Fetched, ToolError> {
    let work = async {
        let Request {
            mut method,
            mut url,
            mut headers,
            mut body,
        } = request;
        let mut redirects = 0usize;
        loop {
            let target = check_parsed(url.clone(), cfg).await?;
            let client = client_for(&target, cfg, timeout)?;
            let mut req = client
                .request(method.clone(), url.clone())
                .headers(headers.clone());
            if let Some(b) = &body {
                req = req.body(b.clone());
            }
            let mut resp = req
                .send()
                .await
                .map_err(|e| map_reqwest(e, &url, timeout))?;
            let status = resp.status();
            if status.is_redirection()
                && let Some(location) = resp.headers().get(reqwest::header::LOCATION)
            {
                if redirects >= cfg.http_max_redirects {
                    return Err(ToolError::failed(format!(
                        "too many redirects (more than {}) starting from {url}",
                        cfg.http_max_redirects
                    )));
                }
                let location = location
                    .to_str()
                    .map_err(|_| ToolError::failed("a redirect has a Location that is not text"))?;
                let next = url.join(location).map_err(|e| {
                    ToolError::failed(format!("a redirect points to a bad URL {location:?}: {e}"))
                })?;
                if !same_origin(&url, &next) {
                    // Credentials are for the origin they were given to.
                    for h in [
                        reqwest::header::AUTHORIZATION,
                        reqwest::header::COOKIE,
                        reqwest::header::PROXY_AUTHORIZATION,
                    ] {
                        headers.remove(h);
                    }
                }
                let keeps_method = matches!(
                    status,
                    StatusCode::TEMPORARY_REDIRECT | StatusCode::PERMANENT_REDIRECT
                );
                if !keeps_method && method != Method::HEAD {
                    method = Method::GET;
                    body = None;
                    headers.remove(reqwest::header::CONTENT_TYPE);
                    headers.remove(reqwest::header::CONTENT_LENGTH);
                }
                url = next;
                redirects += 1;
                continue;
            }
            let mut data = Vec::new();
            let mut truncated = false;
            while let Some(chunk) = resp
                .chunk()
                .await
                .map_err(|e| map_reqwest(e, &url, timeout))?
            {
                let room = cfg.http_body_cap_bytes.saturating_sub(data.len());
                if chunk.len() > room {
                    data.extend_from_slice(&chunk[..room]);
                    truncated = true;
                    break;
                }
                data.extend_from_slice(&chunk);
            }
            return Ok(Fetched {
                status,
                final_url: url,
                headers: resp.headers().clone(),
                body: data,
                truncated,
                redirects,
            });
        }
    };
    tokio::select! {
        result = tokio::time::timeout(timeout, work) => result.map_err(|_| ToolError::Timeout(timeout))?,
        _ = cancel.cancelled() => Err(ToolError::Cancelled),
    }
}

fn is_textual(content_type: &str) -> bool {
    content_type.is_empty()
        || content_type.starts_with("text/")
        || content_type.contains("json")
        || content_type.contains("xml")
        || content_type.contains("javascript")
        || content_type.contains("x-www-form-urlencoded")
        || content_type.contains("yaml")
}

fn error_message(f: &Fetched) -> String {
    let reason = f.status.canonical_reason().unwrap_or("error");
    let text = String::from_utf8_lossy(&f.body);
    let excerpt: String = text.trim().chars().take(ERROR_EXCERPT_CHARS).collect();
    if excerpt.is_empty() {
        format!("HTTP {} {reason}", f.status.as_u16())
    } else {
        format!("HTTP {} {reason}: {excerpt}", f.status.as_u16())
    }
}

fn timeout_from(arg: Option<u64>, cfg: &BuiltinConfig) -> Duration {
    Duration::from_secs(
        arg.unwrap_or(cfg.http_timeout_secs)
            .clamp(1, cfg.http_timeout_secs.max(1) * 4),
    )
}

// ---------------------------------------------------------------------------------------------
// http_request

pub struct HttpRequest {
    spec: ToolSpec,
    cfg: Arc<BuiltinConfig>,
}

#[derive(Deserialize)]
struct HttpArgs {
    url: String,
    #[serde(default)]
    method: Option<String>,
    #[serde(default)]
    headers: Option<Map<String, Value>>,
    #[serde(default)]
    body: Option<String>,
    #[serde(default)]
    json: Option<Value>,
    #[serde(default)]
    timeout_secs: Option<u64>,
}

impl HttpRequest {
    fn new(cfg: Arc<BuiltinConfig>) -> Self {
        let spec = ToolSpec::new(
            SERVICE,
            "http_request",
            "Make an HTTP request (GET, POST, PUT, DELETE, PATCH, HEAD) with optional headers and a \
             text body or a JSON body. Returns status_code, headers and body; a status >= 400 is \
             reported as an error with status_code and error_message. Private network addresses \
             are refused.",
            json!({
                "type": "object",
                "properties": {
                    "url": {"type": "string", "description": "http:// or https:// URL"},
                    "method": {"type": "string", "enum": ["GET", "POST", "PUT", "DELETE", "PATCH", "HEAD"], "default": "GET"},
                    "headers": {"type": "object", "additionalProperties": {"type": "string"}},
                    "body": {"type": "string", "description": "Raw request body"},
                    "json": {"description": "JSON request body (sets Content-Type: application/json)"},
                    "timeout_secs": {"type": "integer", "minimum": 1}
                },
                "required": ["url"]
            }),
        )
        .with_approval(true)
        .with_timeout(Duration::from_secs(cfg.http_timeout_secs.max(1) * 4 + 5));
        Self { spec, cfg }
    }
}

#[async_trait]
impl Tool for HttpRequest {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    async fn call(&self, args: Value, ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
        let args: HttpArgs = parse_args("http_request", args)?;
        let method = match args
            .method
            .as_deref()
            .unwrap_or("GET")
            .to_ascii_uppercase()
            .as_str()
        {
            "GET" => Method::GET,
            "POST" => Method::POST,
            "PUT" => Method::PUT,
            "DELETE" => Method::DELETE,
            "PATCH" => Method::PATCH,
            "HEAD" => Method::HEAD,
            other => {
                return Err(ToolError::invalid(format!(
                    "method {other:?} is not supported; use GET, POST, PUT, DELETE, PATCH or HEAD"
                )));
            }
        };
        if args.body.is_some() && args.json.is_some() {
            return Err(ToolError::invalid("give either body or json, not both"));
        }
        let mut headers = HeaderMap::new();
        for (name, value) in args.headers.unwrap_or_default() {
            let value = match value {
                Value::String(s) => s,
                other => other.to_string(),
            };
            let hn = HeaderName::from_bytes(name.as_bytes())
                .map_err(|_| ToolError::invalid(format!("{name:?} is not a valid header name")))?;
            let hv = HeaderValue::from_str(&value).map_err(|_| {
                ToolError::invalid(format!("the value of header {name} is not valid"))
            })?;
            headers.append(hn, hv);
        }
        let body = match (args.body, args.json) {
            (Some(b), None) => Some(b.into_bytes()),
            (None, Some(j)) => {
                if !headers.contains_key(reqwest::header::CONTENT_TYPE) {
                    headers.insert(
                        reqwest::header::CONTENT_TYPE,
                        HeaderValue::from_static("application/json"),
                    );
                }
                Some(j.to_string().into_bytes())
            }
            _ => None,
        };
        let url = Url::parse(args.url.trim())
            .map_err(|e| ToolError::invalid(format!("{:?} is not a valid URL: {e}", args.url)))?;
        let timeout = timeout_from(args.timeout_secs, &self.cfg);
        let fetched = send_guarded(
            &self.cfg,
            Request {
                method: method.clone(),
                url,
                headers,
                body,
            },
            timeout,
            &ctx.cancel,
        )
        .await?;

        let content_type = fetched.content_type();
        let mut out = json!({
            "status_code": fetched.status.as_u16(),
            "url": fetched.final_url.as_str(),
            "method": method.as_str(),
            "headers": fetched.headers_json(),
            "redirects": fetched.redirects,
            "truncated": fetched.truncated,
        });
        if is_textual(&content_type) {
            let text = String::from_utf8_lossy(&fetched.body).into_owned();
            if content_type.contains("json")
                && !fetched.truncated
                && let Ok(parsed) = serde_json::from_str::<Value>(&text)
            {
                out["json"] = parsed;
            }
            out["body"] = Value::String(text);
        } else {
            out["body"] = Value::Null;
            out["note"] = json!(format!(
                "binary body of {} bytes ({content_type}) not shown",
                fetched.body.len()
            ));
        }
        if fetched.status.as_u16() >= 400 {
            out["error_message"] = json!(error_message(&fetched));
            return Ok(ToolOutput::failed(out));
        }
        Ok(ToolOutput::ok(out))
    }
}

// ---------------------------------------------------------------------------------------------
// fetch_url

pub struct FetchUrl {
    spec: ToolSpec,
    cfg: Arc<BuiltinConfig>,
}

#[derive(Deserialize)]
struct FetchArgs {
    url: String,
    #[serde(default)]
    max_chars: Option<usize>,
}

impl FetchUrl {
    fn new(cfg: Arc<BuiltinConfig>) -> Self {
        let spec = ToolSpec::new(
            SERVICE,
            "fetch_url",
            "Fetch a web page with GET and return its content as Markdown text (HTML is \
             converted; plain text and JSON are returned as they are). Private network addresses \
             are refused.",
            json!({
                "type": "object",
                "properties": {
                    "url": {"type": "string", "description": "http:// or https:// URL"},
                    "max_chars": {"type": "integer", "minimum": 1, "description": format!("At most {} characters", cfg.fetch_max_chars)}
                },
                "required": ["url"]
            }),
        )
        .with_approval(true)
        .with_timeout(Duration::from_secs(cfg.http_timeout_secs.max(1) + 10));
        Self { spec, cfg }
    }
}

/// The text of the page's `<title>`, if any.
fn html_title(html: &str) -> Option<String> {
    let lower = html.to_ascii_lowercase();
    let start = lower.find("<title")?;
    let open_end = start + lower[start..].find('>')? + 1;
    let close = open_end + lower[open_end..].find("</title")?;
    let title = html.get(open_end..close)?.trim();
    (!title.is_empty()).then(|| title.split_whitespace().collect::<Vec<_>>().join(" "))
}

pub(crate) fn html_to_markdown(html: &str) -> String {
    let converter = htmd::HtmlToMarkdown::builder()
        .skip_tags(vec![
            "script", "style", "noscript", "iframe", "svg", "head", "template",
        ])
        .build();
    converter.convert(html).unwrap_or_else(|_| html.to_string())
}

#[async_trait]
impl Tool for FetchUrl {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    async fn call(&self, args: Value, ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
        let args: FetchArgs = parse_args("fetch_url", args)?;
        let url = Url::parse(args.url.trim())
            .map_err(|e| ToolError::invalid(format!("{:?} is not a valid URL: {e}", args.url)))?;
        let mut headers = HeaderMap::new();
        headers.insert(
            reqwest::header::ACCEPT,
            HeaderValue::from_static(
                "text/html,application/xhtml+xml,text/plain;q=0.9,application/json;q=0.8,*/*;q=0.5",
            ),
        );
        let timeout = Duration::from_secs(self.cfg.http_timeout_secs.max(1));
        let fetched = send_guarded(
            &self.cfg,
            Request {
                method: Method::GET,
                url,
                headers,
                body: None,
            },
            timeout,
            &ctx.cancel,
        )
        .await?;
        if fetched.status.as_u16() >= 400 {
            return Ok(ToolOutput::failed(json!({
                "url": fetched.final_url.as_str(),
                "status_code": fetched.status.as_u16(),
                "error_message": error_message(&fetched),
            })));
        }
        let content_type = fetched.content_type();
        if !is_textual(&content_type) {
            return Ok(ToolOutput::failed(json!({
                "url": fetched.final_url.as_str(),
                "status_code": fetched.status.as_u16(),
                "content_type": content_type,
                "error_message": format!("{content_type} content cannot be shown as text"),
            })));
        }
        let max_chars = args
            .max_chars
            .unwrap_or(self.cfg.fetch_max_chars)
            .min(self.cfg.fetch_max_chars);
        let is_html = content_type.contains("html")
            || (content_type.is_empty() && fetched.body.trim_ascii_start().starts_with(b"<"));
        let body = String::from_utf8_lossy(&fetched.body).into_owned();
        let (title, mut text) = if is_html {
            blocking(move || Ok((html_title(&body), html_to_markdown(&body)))).await?
        } else {
            (None, body)
        };
        let mut truncated = fetched.truncated;
        if text.chars().count() > max_chars {
            let cut = text
                .char_indices()
                .nth(max_chars)
                .map_or(text.len(), |(i, _)| i);
            truncate_utf8(&mut text, cut);
            truncated = true;
        }
        Ok(ToolOutput::ok(json!({
            "url": args.url,
            "final_url": fetched.final_url.as_str(),
            "status_code": fetched.status.as_u16(),
            "content_type": content_type,
            "title": title,
            "content": text,
            "truncated": truncated,
        })))
    }
}

// ---------------------------------------------------------------------------------------------
// web_search

pub struct WebSearch {
    spec: ToolSpec,
    cfg: Arc<BuiltinConfig>,
}

#[derive(Deserialize)]
struct SearchArgs {
    query: String,
    #[serde(default)]
    max_results: Option<u32>,
    #[serde(default)]
    search_depth: Option<String>,
}

#[derive(Deserialize)]
struct SearchResponse {
    #[serde(default)]
    answer: Option<String>,
    #[serde(default)]
    results: Vec<SearchHit>,
}

#[derive(Deserialize)]
struct SearchHit {
    #[serde(default)]
    title: String,
    #[serde(default)]
    url: String,
    #[serde(default)]
    content: String,
    #[serde(default)]
    score: Option<f64>,
}

impl WebSearch {
    fn new(cfg: Arc<BuiltinConfig>) -> Self {
        let spec = ToolSpec::new(
            SERVICE,
            "web_search",
            "Search the web. Returns a short answer when the search service gives one and a list \
             of results (title, url, content snippet, score).",
            json!({
                "type": "object",
                "properties": {
                    "query": {"type": "string", "minLength": 1},
                    "max_results": {"type": "integer", "minimum": 1, "maximum": 20},
                    "search_depth": {"type": "string", "enum": ["basic", "advanced"], "default": "basic"}
                },
                "required": ["query"]
            }),
        )
        .with_approval(true)
        .with_timeout(Duration::from_secs(cfg.http_timeout_secs.max(1) + 10));
        Self { spec, cfg }
    }
}

#[async_trait]
impl Tool for WebSearch {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    async fn call(&self, args: Value, ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
        let args: SearchArgs = parse_args("web_search", args)?;
        if args.query.trim().is_empty() {
            return Err(ToolError::invalid("query must not be empty"));
        }
        let endpoint = format!("{}/search", self.cfg.search_base_url.trim_end_matches('/'));
        let max_results = args
            .max_results
            .unwrap_or(self.cfg.search_max_results)
            .clamp(1, 20);
        let timeout = Duration::from_secs(self.cfg.http_timeout_secs.max(1));
        // The search endpoint is the operator's configuration, not the model's choice, so it is
        // not subject to the private-address policy.
        let client = reqwest::Client::builder()
            .no_proxy()
            .timeout(timeout)
            .user_agent(self.cfg.user_agent.clone())
            .build()
            .map_err(|e| ToolError::failed(format!("cannot build the HTTP client: {e}")))?;
        let key = self.cfg.search_api_key.expose();
        let request = client
            .post(&endpoint)
            .bearer_auth(key)
            .json(&json!({
                "api_key": key,
                "query": args.query,
                "max_results": max_results,
                "search_depth": args.search_depth.as_deref().unwrap_or("basic"),
                "include_answer": true,
            }))
            .send();
        let resp = tokio::select! {
            r = request => r.map_err(|e| ToolError::Failed {
                message: format!("the search service is unreachable: {}", e.without_url()),
                retryable: true,
            })?,
            _ = ctx.cancel.cancelled() => return Err(ToolError::Cancelled),
        };
        let status = resp.status();
        let bytes = resp.bytes().await.map_err(|e| ToolError::Failed {
            message: format!("reading the search response failed: {}", e.without_url()),
            retryable: true,
        })?;
        if !status.is_success() {
            let text = String::from_utf8_lossy(&bytes);
            return Ok(ToolOutput::failed(json!({
                "status_code": status.as_u16(),
                "error_message": format!(
                    "the search service answered HTTP {}: {}",
                    status.as_u16(),
                    text.trim().chars().take(ERROR_EXCERPT_CHARS).collect::<String>()
                ),
            })));
        }
        let parsed: SearchResponse = serde_json::from_slice(&bytes).map_err(|e| {
            ToolError::failed(format!(
                "the search service sent an unexpected response: {e}"
            ))
        })?;
        let results: Vec<Value> = parsed
            .results
            .into_iter()
            .take(max_results as usize)
            .map(
                |h| json!({"title": h.title, "url": h.url, "content": h.content, "score": h.score}),
            )
            .collect();
        Ok(ToolOutput::ok(json!({
            "query": args.query,
            "answer": parsed.answer,
            "results": results,
            "count": results.len(),
        })))
    }
}

#[cfg(test)]
mod tests;
