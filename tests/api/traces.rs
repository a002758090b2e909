//! OpenTelemetry end to end: a small OTLP/HTTP receiver of the test's own (protobuf decoded with
//! `opentelemetry-proto`) takes the real server's spans. A chat with a tool call and an approval
//! is one trace continuing the client's `traceparent`: request → run → steps → model calls and
//! the tool call (→ its approval wait), with the GenAI attributes; the trace id is in `done` and
//! on the execution, and every model request carried `traceparent` naming its model-call span.
//! A tool call to a user's MCP server over HTTP carries the trace context of its `mcp
//! tools/call` span, as the `traceparent` header and in `_meta`. A run resumed after `kill -9`
//! continues the trace its checkpoint names, so `done` and the execution agree on one trace id.
//! A collector that hangs never slows a run: spans that do not fit the queue are dropped and
//! counted.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::{AnyValue, KeyValue, any_value};
use prost::Message;
use reqwest::Method;
use serde_json::{Value, json};

use rmcp::handler::server::ServerHandler;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, ErrorData,
    ListToolsResult, PaginatedRequestParams, ServerCapabilities, ServerConfig, Tool,
    ToolAnnotations,
};
use rmcp::service::{RequestContext, RoleServer};
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};

use crate::ctx::Ctx;
use crate::fake_model::{self, SseReader, Wire};
use crate::observability::sample;
use crate::streaming::new_session;

/// One span as received, with its resource's attributes.
#[derive(Debug, Clone)]
pub struct Received {
    pub trace_id: String,
    pub span_id: String,
    pub parent: String,
    pub name: String,
    pub kind: i32,
    pub attrs: BTreeMap<String, Value>,
    pub resource: BTreeMap<String, Value>,
}

impl Received {
    pub fn attr(&self, key: &str) -> &Value {
        self.attrs.get(key).unwrap_or(&Value::Null)
    }
}

const SPAN_KIND_SERVER: i32 = 2;
const SPAN_KIND_CLIENT: i32 = 3;

fn value(v: &Option<AnyValue>) -> Value {
    match v.as_ref().and_then(|v| v.value.as_ref()) {
        Some(any_value::Value::StringValue(s)) => json!(s),
        Some(any_value::Value::BoolValue(b)) => json!(b),
        Some(any_value::Value::IntValue(i)) => json!(i),
        Some(any_value::Value::DoubleValue(d)) => json!(d),
        Some(other) => json!(format!("{other:?}")),
        None => Value::Null,
    }
}

fn attrs(kvs: &[KeyValue]) -> BTreeMap<String, Value> {
    kvs.iter()
        .map(|kv| (kv.key.clone(), value(&kv.value)))
        .collect()
}

/// An OTLP/HTTP receiver on loopback: `POST /v1/traces` with a protobuf body and the
/// `Authorization` header a hosted backend (Langfuse) would want.
pub struct OtlpReceiver {
    pub base: String,
    spans: Arc<Mutex<Vec<Received>>>,
}

/// What the receiver wants in `Authorization` (`otel.headers` sends it).
pub const OTLP_AUTH: &str = "Basic cGstbGYtMTIzOnNrLWxmLTQ1Ng==";

type Spans = Arc<Mutex<Vec<Received>>>;

async fn accept(
    State(spans): State<Spans>,
    headers: HeaderMap,
    body: Bytes,
) -> (StatusCode, [(&'static str, &'static str); 1], Vec<u8>) {
    let protobuf = [("content-type", "application/x-protobuf")];
    if headers.get("authorization").and_then(|v| v.to_str().ok()) != Some(OTLP_AUTH) {
        return (StatusCode::UNAUTHORIZED, protobuf, Vec::new());
    }
    if headers.get("content-type").and_then(|v| v.to_str().ok()) != Some("application/x-protobuf") {
        return (StatusCode::UNSUPPORTED_MEDIA_TYPE, protobuf, Vec::new());
    }
    let Ok(req) = ExportTraceServiceRequest::decode(body) else {
        return (StatusCode::BAD_REQUEST, protobuf, Vec::new());
    };
    let mut out = spans.lock().unwrap();
    for rs in req.resource_spans {
        let resource = rs
            .resource
            .map(|r| attrs(&r.attributes))
            .unwrap_or_default();
        for ss in rs.scope_spans {
            for s in ss.spans {
                out.push(Received {
                    trace_id: hex(&s.trace_id),
                    span_id: hex(&s.span_id),
                    parent: hex(&s.parent_span_id),
                    name: s.name.clone(),
                    kind: s.kind,
                    attrs: attrs(&s.attributes),
                    resource: resource.clone(),
                });
            }
        }
    }
    // An empty ExportTraceServiceResponse: everything accepted.
    (StatusCode::OK, protobuf, Vec::new())
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

impl OtlpReceiver {
    pub async fn start() -> OtlpReceiver {
        let spans = Arc::new(Mutex::new(Vec::new()));
        let app = axum::Router::new()
            .route("/v1/traces", axum::routing::post(accept))
            .with_state(spans.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, app).await });
        OtlpReceiver { base, spans }
    }

    /// The spans of `trace_id` once `complete` holds for them (the exporter sends every second).
    pub async fn trace(
        &self,
        trace_id: &str,
        complete: impl Fn(&[Received]) -> bool,
    ) -> Vec<Received> {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let spans: Vec<Received> = self
                .spans
                .lock()
                .unwrap()
                .iter()
                .filter(|s| s.trace_id == trace_id)
                .cloned()
                .collect();
            if complete(&spans) {
                return spans;
            }
            assert!(
                Instant::now() < deadline,
                "the trace never arrived whole; received: {:#?}",
                spans
                    .iter()
                    .map(|s| (&s.name, &s.span_id, &s.parent))
                    .collect::<Vec<_>>()
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

fn named<'a>(spans: &'a [Received], name: &str) -> Vec<&'a Received> {
    spans.iter().filter(|s| s.name == name).collect()
}

fn one<'a>(spans: &'a [Received], name: &str) -> &'a Received {
    let found = named(spans, name);
    assert_eq!(found.len(), 1, "one `{name}` span: {found:#?}");
    found[0]
}

/// A gateway exporting to `otlp`, with the standard resource variables set.
pub async fn start(otlp: &OtlpReceiver) -> (agentry_fake_model::FakeModelServer, Ctx) {
    fake_model::start(
        Wire::OpenAi,
        &[
            ("AGENTRY_OTEL__ENDPOINT", otlp.base.as_str()),
            // Percent-encoded like OTEL_EXPORTER_OTLP_HEADERS; the receiver refuses without it.
            (
                "AGENTRY_OTEL__HEADERS",
                "Authorization=Basic%20cGstbGYtMTIzOnNrLWxmLTQ1Ng==",
            ),
            ("OTEL_SERVICE_NAME", "agentry-e2e"),
            ("OTEL_RESOURCE_ATTRIBUTES", "deployment.environment=e2e"),
        ],
    )
    .await
}

/// A chat over SSE, continuing `traceparent`, whose model writes `file` (which needs approval):
/// the stream and the `hitl_request` it reached.
async fn write_file_until_asked(
    ctx: &Ctx,
    key: &str,
    sid: &str,
    traceparent: &str,
    file: &str,
) -> (SseReader, Value) {
    let message = format!(r#"/tool write_file {{"file_path": "{file}", "content": "traced"}}"#);
    let res = ctx
        .request(Method::POST, "/api/v1/chat/stream", Some(key))
        .header("traceparent", traceparent)
        .json(&json!({ "session_id": sid, "message": message }))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 200);
    let mut sse = SseReader::new(res);
    let asked = sse.until("hitl_request").await.last().unwrap().clone();
    (sse, asked)
}

/// The whole trace of a chat over SSE with an approved tool call.
pub async fn a_chat_with_an_approval_is_one_trace(
    ctx: &Ctx,
    fake: &agentry_fake_model::FakeModelServer,
    otlp: &OtlpReceiver,
) {
    let t = ctx.tenant().await;
    let key = &t.member.key;
    let sid = new_session(ctx, key).await;
    let trace_id = "4bf92f3577b34da6a3ce929d0e0e4736";
    let client_span = "00f067aa0ba902b7";
    let asked = fake.requests().len();
    let (mut sse, asked_for) = write_file_until_asked(
        ctx,
        key,
        &sid,
        &format!("00-{trace_id}-{client_span}-01"),
        "traced.txt",
    )
    .await;
    let request = asked_for["data"]["request_id"]
        .as_str()
        .unwrap()
        .to_string();
    ctx.ok(
        Method::POST,
        &format!("/api/v1/sessions/{sid}/approvals/{request}"),
        key,
        Some(json!({"type": "approve"})),
        200,
    )
    .await;
    let evs = sse.until("done").await;
    let done = evs.last().unwrap();
    assert_eq!(done["data"]["status"], "completed", "{done}");
    // The run's trace id: in `done` and on the execution.
    assert_eq!(done["data"]["trace_id"], trace_id, "{done}");
    let run = done["run_id"].as_str().unwrap();
    let exec = ctx
        .ok(
            Method::GET,
            &format!("/api/v1/executions/{run}"),
            key,
            None,
            200,
        )
        .await;
    assert_eq!(exec["trace_id"], trace_id, "{exec}");

    let spans = otlp
        .trace(trace_id, |s| {
            named(s, "chat fake-large").len() == 2
                && !named(s, "agent run").is_empty()
                && !named(s, "execute_tool write_file").is_empty()
                && !named(s, "approval write_file").is_empty()
                && !named(s, "POST /api/v1/chat/stream").is_empty()
        })
        .await;
    // Every span of the trace has its parent in it, but the request's: its parent is the
    // client's span.
    let ids: Vec<&str> = spans.iter().map(|s| s.span_id.as_str()).collect();
    let http = one(&spans, "POST /api/v1/chat/stream");
    assert_eq!(http.parent, client_span, "{http:#?}");
    assert_eq!(http.kind, SPAN_KIND_SERVER);
    assert_eq!(http.attr("http.route"), "/api/v1/chat/stream");
    assert_eq!(http.attr("http.response.status_code"), 200);
    assert_eq!(http.resource["service.name"], "agentry-e2e", "{http:#?}");
    assert_eq!(http.resource["deployment.environment"], "e2e", "{http:#?}");
    for s in &spans {
        assert!(
            s.span_id == http.span_id || ids.contains(&s.parent.as_str()),
            "`{}`'s parent is not in the trace: {spans:#?}",
            s.name
        );
    }
    let run_span = one(&spans, "agent run");
    assert_eq!(
        run_span.parent, http.span_id,
        "the run is the request's child"
    );
    assert_eq!(run_span.attr("run_id"), run);
    assert_eq!(run_span.attr("session_id"), sid.as_str());
    assert_eq!(run_span.attr("tenant_id"), t.id.as_str());
    assert_eq!(run_span.attr("agentry.run.status"), "completed");

    let step1 = one(&spans, "step 1");
    let step2 = one(&spans, "step 2");
    for step in [step1, step2] {
        assert_eq!(
            step.parent, run_span.span_id,
            "steps are the run's children"
        );
    }
    // One model call per step, with the GenAI attributes.
    let models = named(&spans, "chat fake-large");
    let in_step = |step: &Received| {
        *models
            .iter()
            .find(|m| m.parent == step.span_id)
            .unwrap_or_else(|| panic!("no model call in {step:#?}: {models:#?}"))
    };
    let (first, second) = (in_step(step1), in_step(step2));
    for (m, finish) in [(first, "tool_calls"), (second, "stop")] {
        assert_eq!(m.kind, SPAN_KIND_CLIENT);
        assert_eq!(m.attr("gen_ai.operation.name"), "chat");
        assert_eq!(m.attr("gen_ai.system"), "openai");
        assert_eq!(m.attr("gen_ai.request.model"), "fake-large");
        assert_eq!(m.attr("gen_ai.response.finish_reasons"), finish, "{m:#?}");
        for tokens in ["gen_ai.usage.input_tokens", "gen_ai.usage.output_tokens"] {
            assert!(
                m.attr(tokens).as_i64().is_some_and(|n| n > 0),
                "{tokens}: {m:#?}"
            );
        }
    }
    // The tool call belongs to the step whose model asked for it; its approval wait to it.
    let tool = one(&spans, "execute_tool write_file");
    assert_eq!(tool.parent, step1.span_id, "{tool:#?}");
    assert_eq!(tool.attr("gen_ai.tool.name"), "write_file");
    assert_eq!(tool.attr("gen_ai.operation.name"), "execute_tool");
    assert_eq!(tool.attr("agentry.tool.approved"), true, "{tool:#?}");
    assert_eq!(tool.attr("agentry.tool.outcome"), "success", "{tool:#?}");
    assert!(
        tool.attr("agentry.tool.service")
            .as_str()
            .is_some_and(|s| !s.is_empty()),
        "{tool:#?}"
    );
    let wait = one(&spans, "approval write_file");
    assert_eq!(wait.parent, tool.span_id, "{wait:#?}");
    assert_eq!(wait.attr("agentry.approval.outcome"), "approved");

    // Each model request carried the trace context of its own model-call span.
    let sent: Vec<String> = fake.requests()[asked..]
        .iter()
        .map(|r| r.header("traceparent").unwrap_or_default().to_string())
        .collect();
    assert_eq!(
        sent,
        [first, second]
            .iter()
            .map(|m| format!("00-{trace_id}-{}-01", m.span_id))
            .collect::<Vec<_>>(),
        "traceparent sent to the model"
    );
}

/// A refused request's warning line carries its request id and the trace it continued.
pub async fn a_refused_request_is_logged_with_its_trace_id(ctx: &Ctx) {
    let trace_id = "6bf92f3577b34da6a3ce929d0e0e4738";
    let res = ctx
        .request(
            Method::GET,
            "/api/v1/sessions",
            Some("agk_not_a_key_at_all_0000000000"),
        )
        .header("traceparent", format!("00-{trace_id}-00f067aa0ba902b9-01"))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 401);
    let request_id = res.headers()["x-request-id"].to_str().unwrap().to_string();
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let lines = ctx.server.log_lines(|l| {
            l["request_id"] == request_id.as_str() && l["target"] == "agentry::access"
        });
        if let Some(l) = lines.first() {
            assert_eq!(l["level"], "WARN", "{l}");
            assert_eq!(l["status"], 401, "{l}");
            assert_eq!(l["trace_id"], trace_id, "{l}");
            break;
        }
        assert!(Instant::now() < deadline, "no access line for {request_id}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Without a `traceparent` a request starts a trace of its own, and the run still has one.
pub async fn a_request_without_traceparent_starts_a_trace(ctx: &Ctx, otlp: &OtlpReceiver) {
    let t = ctx.tenant().await;
    let r = ctx
        .ok(
            Method::POST,
            "/api/v1/chat",
            &t.member.key,
            Some(json!({"message": "hello"})),
            200,
        )
        .await;
    let done = r["events"].as_array().unwrap().last().unwrap().clone();
    let trace_id = done["data"]["trace_id"].as_str().unwrap().to_string();
    assert_eq!(trace_id.len(), 32, "{done}");
    assert!(trace_id.bytes().all(|b| b.is_ascii_hexdigit()), "{done}");
    let spans = otlp
        .trace(&trace_id, |s| {
            !named(s, "agent run").is_empty() && !named(s, "POST /api/v1/chat").is_empty()
        })
        .await;
    let http = one(&spans, "POST /api/v1/chat");
    assert_eq!(http.parent, "", "a root span: {http:#?}");
    assert_eq!(one(&spans, "agent run").parent, http.span_id);
}

/// A collector that accepts connections and never answers: every chat still completes, and the
/// spans that no longer fit the queue (`otel.queue_size` = 4) are counted as dropped.
pub async fn a_hanging_collector_never_slows_a_run() {
    let hole = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let endpoint = format!("http://{}", hole.local_addr().unwrap());
    let held = Arc::new(Mutex::new(Vec::new()));
    let keep = held.clone();
    tokio::spawn(async move {
        while let Ok((socket, _)) = hole.accept().await {
            keep.lock().unwrap().push(socket);
        }
    });
    let ctx = Ctx::start_with(
        &[
            ("AGENTRY_OTEL__ENDPOINT", endpoint.as_str()),
            ("AGENTRY_OTEL__QUEUE_SIZE", "4"),
        ],
        None,
    )
    .await;
    let metrics = ctx.metrics().await;
    assert!(
        metrics
            .lines()
            .any(|l| l == r#"agentry_otel_spans_dropped_total{reason="queue_full"} 0"#),
        "the series is there, at 0, from the start:\n{metrics}"
    );
    let t = ctx.tenant().await;
    // The first export hangs (for its 10 s timeout) about a second after the first spans end;
    // from then on the queue fills up. Chats go on regardless.
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut chats = 0;
    loop {
        let r = ctx
            .ok(
                Method::POST,
                "/api/v1/chat",
                &t.member.key,
                Some(json!({"message": "hello"})),
                200,
            )
            .await;
        let done = r["events"].as_array().unwrap().last().unwrap().clone();
        assert_eq!(done["data"]["status"], "completed", "{done}");
        chats += 1;
        let dropped = sample(
            &ctx.metrics().await,
            "agentry_otel_spans_dropped_total",
            &[("reason", "queue_full")],
        );
        if dropped > 0.0 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "{chats} chats and no span dropped although the collector never answers"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(!held.lock().unwrap().is_empty(), "the exporter did connect");
}

/// What the probe MCP server saw of one `tools/call`: the HTTP `traceparent` header and
/// `_meta.traceparent`.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SeenCall {
    pub header: Option<String>,
    pub meta: Option<String>,
}

/// A Streamable HTTP MCP server (rmcp's, on axum) with one read-only tool, `echo`, that records
/// the trace context of every call.
#[derive(Clone, Default)]
struct Probe {
    seen: Arc<Mutex<Vec<SeenCall>>>,
}

impl ServerHandler for Probe {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
    }

    async fn list_tools(
        &self,
        _: Option<PaginatedRequestParams>,
        _: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let schema = json!({"type": "object", "properties": {"text": {"type": "string"}}});
        let Value::Object(schema) = schema else {
            unreachable!()
        };
        Ok(ListToolsResult::with_all_items(vec![
            Tool::new("echo", "Echoes its text", schema)
                .with_annotations(ToolAnnotations::new().read_only(true)),
        ]))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let header = ctx
            .extensions
            .get::<http::request::Parts>()
            .and_then(|p| p.headers.get("traceparent"))
            .and_then(|v| v.to_str().ok())
            .map(str::to_string);
        let meta = ctx.meta.get_traceparent().map(str::to_string);
        self.seen.lock().unwrap().push(SeenCall { header, meta });
        let text = request
            .arguments
            .and_then(|a| a.get("text").and_then(Value::as_str).map(str::to_string))
            .unwrap_or_default();
        Ok(CallToolResult::success(vec![ContentBlock::text(format!("echo: {text}"))]).into())
    }
}

/// The probe on 127.0.0.2 (the tests' allowed network for users' MCP servers): its URL and
/// what it saw.
async fn start_probe() -> (String, Arc<Mutex<Vec<SeenCall>>>) {
    let probe = Probe::default();
    let seen = probe.seen.clone();
    let service = StreamableHttpService::new(
        move || Ok(probe.clone()),
        Arc::new(LocalSessionManager::default()),
        StreamableHttpServerConfig::default().with_allowed_hosts(["127.0.0.2"]),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.2:0").await.unwrap();
    let url = format!("http://{}/mcp", listener.local_addr().unwrap());
    let app = axum::Router::new().route_service("/mcp", service);
    tokio::spawn(async move { axum::serve(listener, app).await });
    (url, seen)
}

/// A user's HTTP MCP server gets the W3C trace context of the `mcp tools/call` span with the
/// call: the `traceparent` header (rmcp's transport has no header hook: Agentry's HTTP client
/// lifts it from `_meta`) and `_meta.traceparent`, both naming that span of the run's trace.
pub async fn an_mcp_call_over_http_carries_the_trace_context(ctx: &Ctx, otlp: &OtlpReceiver) {
    let (url, seen) = start_probe().await;
    let t = ctx.tenant().await;
    let me = &t.member;
    ctx.ok(
        Method::POST,
        &crate::mcp::servers_path(&me.user_id),
        &me.key,
        Some(json!({"name": "probe", "url": url})),
        201,
    )
    .await;
    let trace_id = "0af7651916cd43dd8448eb211c80319c";
    let res = ctx
        .request(Method::POST, "/api/v1/chat", Some(&me.key))
        .header("traceparent", format!("00-{trace_id}-b7ad6b7169203331-01"))
        .json(&json!({"message": r#"/tool probe__echo {"text": "traced"}"#}))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 200);
    let body: Value = res.json().await.unwrap();
    let done = body["events"].as_array().unwrap().last().unwrap().clone();
    assert_eq!(done["data"]["status"], "completed", "{body}");
    assert_eq!(done["data"]["trace_id"], trace_id, "{done}");
    let result = body["events"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["event_type"] == "tool_result")
        .unwrap_or_else(|| panic!("no tool_result: {body}"));
    assert!(result.to_string().contains("echo: traced"), "{result}");

    let spans = otlp
        .trace(trace_id, |s| {
            !named(s, "mcp tools/call echo").is_empty()
                && !named(s, "execute_tool probe__echo").is_empty()
        })
        .await;
    let mcp = one(&spans, "mcp tools/call echo");
    assert_eq!(mcp.kind, SPAN_KIND_CLIENT);
    assert_eq!(
        mcp.parent,
        one(&spans, "execute_tool probe__echo").span_id,
        "{mcp:#?}"
    );
    let expected = format!("00-{trace_id}-{}-01", mcp.span_id);
    let seen = seen.lock().unwrap().clone();
    assert_eq!(
        seen,
        [SeenCall {
            header: Some(expected.clone()),
            meta: Some(expected)
        }],
        "what the MCP server received"
    );
}

/// The events of session `sid` after `after`, from the store.
async fn stored_events(ctx: &Ctx, key: &str, sid: &str, after: i64) -> Vec<Value> {
    let page = ctx
        .ok(
            Method::GET,
            &format!("/api/v1/sessions/{sid}/events?after_seq={after}&limit=1000"),
            key,
            None,
            200,
        )
        .await;
    page["events"].as_array().unwrap().clone()
}

/// `kill -9` while a run waits for an approval; the restarted server resumes the run from its
/// checkpoint, and the resumed run's span continues the run's trace as a child of the span its
/// checkpoint names (the run's span before the crash): the trace id in `done`, on the
/// execution, and on every span of the resumed run is the one the client's request started.
pub async fn a_run_resumed_after_a_restart_continues_its_trace(ctx: &mut Ctx, otlp: &OtlpReceiver) {
    let t = ctx.tenant().await;
    let key = t.member.key.clone();
    let sid = new_session(ctx, &key).await;
    let trace_id = "5bf92f3577b34da6a3ce929d0e0e4737";
    let (sse, asked) = write_file_until_asked(
        ctx,
        &key,
        &sid,
        &format!("00-{trace_id}-00f067aa0ba902b8-01"),
        "resumed.txt",
    )
    .await;
    let run: agentry_schema::ids::RunId = asked["run_id"].as_str().unwrap().parse().unwrap();
    // The checkpoint taken before asking names the run's span.
    let cp = agentry_store::checkpoints::latest(&ctx.db, &t.scope(), run)
        .await
        .unwrap()
        .expect("a checkpoint before the approval");
    let parent = cp.state["trace_parent"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert!(
        parent.starts_with(&format!("00-{trace_id}-")),
        "the checkpoint's trace context: {}",
        cp.state
    );
    let run_span_id = parent.split('-').nth(2).unwrap().to_string();
    drop(sse);
    ctx.server.crash_and_restart().await;

    // The resumed run asks again; approve that request.
    let seen = asked["seq"].as_i64().unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    let request = loop {
        let evs = stored_events(ctx, &key, &sid, seen).await;
        if let Some(e) = evs.iter().rev().find(|e| e["event_type"] == "hitl_request") {
            break e["data"]["request_id"].as_str().unwrap().to_string();
        }
        assert!(
            Instant::now() < deadline,
            "the resumed run never asked: {evs:#?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    ctx.ok(
        Method::POST,
        &format!("/api/v1/sessions/{sid}/approvals/{request}"),
        &key,
        Some(json!({"type": "approve"})),
        200,
    )
    .await;
    let done = loop {
        let evs = stored_events(ctx, &key, &sid, seen).await;
        if let Some(d) = evs.iter().find(|e| e["event_type"] == "done") {
            break d.clone();
        }
        assert!(
            Instant::now() < deadline,
            "the resumed run never ended: {evs:#?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert_eq!(done["data"]["status"], "completed", "{done}");
    assert_eq!(done["data"]["trace_id"], trace_id, "{done}");
    let exec = ctx
        .ok(
            Method::GET,
            &format!("/api/v1/executions/{run}"),
            &key,
            None,
            200,
        )
        .await;
    assert_eq!(exec["trace_id"], trace_id, "{exec}");

    let spans = otlp
        .trace(trace_id, |s| {
            named(s, "agent run")
                .iter()
                .any(|r| r.attr("agentry.run.resumed") == true)
                && !named(s, "execute_tool write_file").is_empty()
        })
        .await;
    let resumed = named(&spans, "agent run")
        .into_iter()
        .find(|r| r.attr("agentry.run.resumed") == true)
        .unwrap();
    assert_eq!(resumed.parent, run_span_id, "{resumed:#?}");
    assert_eq!(resumed.attr("run_id"), run.to_string().as_str());
    assert_eq!(resumed.attr("agentry.run.status"), "completed");
    // The resumed run's work is in the same trace, under it: it resumes acting on the tool
    // call its checkpoint holds (the step that asked for it was the run's before the crash).
    let tool = one(&spans, "execute_tool write_file");
    assert_eq!(tool.parent, resumed.span_id, "{tool:#?}");
}
