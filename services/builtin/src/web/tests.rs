use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};

use axum::Router;
use axum::extract::State;
use axum::http::{HeaderMap as AxHeaders, Method as AxMethod, StatusCode as AxStatus, header};
use axum::response::{Html, IntoResponse, Redirect};
use axum::routing::{any, get, post};
use proptest::prelude::*;

use super::*;
use crate::test_support::ctx;
use agentry_tools::tool::ToolContext;

#[derive(Clone, Default)]
struct Hits(Arc<AtomicUsize>);

async fn echo(
    State(hits): State<Hits>,
    method: AxMethod,
    headers: AxHeaders,
    body: String,
) -> impl IntoResponse {
    hits.0.fetch_add(1, Ordering::SeqCst);
    let h = |name: &str| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(String::from)
    };
    axum::Json(json!({
        "method": method.as_str(),
        "x_test": h("x-test"),
        "authorization": h("authorization"),
        "content_type": h("content-type"),
        "body": body,
    }))
}

async fn search(headers: AxHeaders, body: String) -> impl IntoResponse {
    if headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        != Some("Bearer test-key")
    {
        return (AxStatus::UNAUTHORIZED, "bad api key").into_response();
    }
    let req: Value = serde_json::from_str(&body).unwrap_or_default();
    let query = req["query"].as_str().unwrap_or("").to_string();
    let n = req["max_results"].as_u64().unwrap_or(5) as usize;
    let results: Vec<Value> = (1..=10)
        .take(n)
        .map(|i| json!({"title": format!("{query} result {i}"), "url": format!("https://example.com/{i}"),
                        "content": format!("snippet {i}"), "score": 1.0 / i as f64}))
        .collect();
    axum::Json(json!({"query": query, "answer": "forty-two", "results": results})).into_response()
}

struct Server {
    addr: SocketAddr,
    hits: Hits,
}

async fn serve() -> Server {
    let hits = Hits::default();
    let app = Router::new()
        .route("/echo", any(echo))
        .route("/json", get(|| async { axum::Json(json!({"hello": "world"})) }))
        .route("/missing", get(|| async { (AxStatus::NOT_FOUND, "nothing here") }))
        .route("/page", get(|| async {
            Html("<html><head><title>Test  Page</title><script>evil()</script><style>p{}</style></head>\
                  <body><h1>Hello</h1><p>Some <b>bold</b> text and a <a href=\"/x\">link</a>.</p></body></html>")
        }))
        .route("/text", get(|| async { "plain text here" }))
        .route("/binary", get(|| async { ([(header::CONTENT_TYPE, "image/png")], vec![0x89u8, b'P', b'N', b'G', 0, 0]) }))
        .route("/big", get(|| async { "x".repeat(10_000) }))
        .route("/redirect", get(|| async { Redirect::to("/json") }))
        .route("/redirect-post", post(|| async { Redirect::to("/echo") }))
        .route("/redirect-307", post(|| async { Redirect::temporary("/echo") }))
        .route("/redirect-private", get(|| async { Redirect::temporary("http://10.255.255.1/secret") }))
        .route("/redirect-file", get(|| async { Redirect::temporary("file:///etc/passwd") }))
        .route("/loop", get(|| async { Redirect::temporary("/loop") }))
        .route("/search", post(search))
        .with_state(hits.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    Server { addr, hits }
}

/// The tests' config: loopback (and only loopback) is allowed, so the policy still refuses
/// other private ranges.
fn loopback_cfg() -> BuiltinConfig {
    BuiltinConfig {
        allowed_networks: vec!["127.0.0.0/8".parse().unwrap()],
        ..BuiltinConfig::default()
    }
}

fn tool(name: &str, cfg: &BuiltinConfig) -> Arc<dyn Tool> {
    tools(cfg)
        .into_iter()
        .find(|t| t.spec().name == name)
        .unwrap()
}

fn test_ctx() -> (tempfile::TempDir, ToolContext) {
    let tmp = tempfile::tempdir().unwrap();
    let c = ctx(tmp.path());
    (tmp, c)
}

#[tokio::test]
async fn every_method_is_sent_with_its_headers_and_body() {
    let s = serve().await;
    let (_t, c) = test_ctx();
    let http = tool("http_request", &loopback_cfg());
    for method in ["GET", "POST", "PUT", "DELETE", "PATCH"] {
        let out = http
            .call(
                json!({"url": format!("http://{}/echo", s.addr), "method": method,
                       "headers": {"X-Test": "yes"}, "body": format!("payload for {method}")}),
                &c,
            )
            .await
            .unwrap();
        assert!(!out.is_error, "{out:?}");
        assert_eq!(out.content["status_code"], 200);
        assert_eq!(out.content["json"]["method"], method);
        assert_eq!(out.content["json"]["x_test"], "yes");
        assert_eq!(out.content["json"]["body"], format!("payload for {method}"));
    }
    let out = http
        .call(json!({"url": format!("http://{}/echo", s.addr), "method": "POST", "json": {"a": [1, 2]}}), &c)
        .await
        .unwrap();
    assert_eq!(out.content["json"]["content_type"], "application/json");
    assert_eq!(out.content["json"]["body"], r#"{"a":[1,2]}"#);
    let out = http
        .call(
            json!({"url": format!("http://{}/json", s.addr), "method": "HEAD"}),
            &c,
        )
        .await
        .unwrap();
    assert_eq!(out.content["status_code"], 200);
    assert_eq!(out.content["body"], "");
    assert_eq!(s.hits.0.load(Ordering::SeqCst), 6);
}

#[tokio::test]
async fn error_statuses_carry_status_code_and_error_message() {
    let s = serve().await;
    let (_t, c) = test_ctx();
    let out = tool("http_request", &loopback_cfg())
        .call(json!({"url": format!("http://{}/missing", s.addr)}), &c)
        .await
        .unwrap();
    assert!(out.is_error);
    assert_eq!(out.content["status_code"], 404);
    assert_eq!(
        out.content["error_message"],
        "HTTP 404 Not Found: nothing here"
    );
    let out = tool("fetch_url", &loopback_cfg())
        .call(json!({"url": format!("http://{}/missing", s.addr)}), &c)
        .await
        .unwrap();
    assert!(out.is_error);
    assert_eq!(out.content["status_code"], 404);
}

#[tokio::test]
async fn bad_arguments_are_structured_errors() {
    let (_t, c) = test_ctx();
    let http = tool("http_request", &loopback_cfg());
    for args in [
        json!({"url": "http://127.0.0.1:1/", "method": "TRACE"}),
        json!({"url": "http://127.0.0.1:1/", "body": "a", "json": {}}),
        json!({"url": "http://127.0.0.1:1/", "headers": {"bad header": "x"}}),
        json!({"url": "not a url"}),
        json!({"url": "file:///etc/passwd"}),
    ] {
        let err = http.call(args.clone(), &c).await.unwrap_err();
        assert!(
            matches!(err, ToolError::InvalidArguments { .. }),
            "{args}: {err:?}"
        );
    }
}

#[tokio::test]
async fn redirects_are_followed_and_checked_hop_by_hop() {
    let s = serve().await;
    let (_t, c) = test_ctx();
    let http = tool("http_request", &loopback_cfg());
    let out = http
        .call(json!({"url": format!("http://{}/redirect", s.addr)}), &c)
        .await
        .unwrap();
    assert_eq!(out.content["json"], json!({"hello": "world"}));
    assert_eq!(out.content["redirects"], 1);
    assert!(out.content["url"].as_str().unwrap().ends_with("/json"));

    // 303 turns a POST into a GET without body; 307 keeps both.
    let out = http
        .call(json!({"url": format!("http://{}/redirect-post", s.addr), "method": "POST", "body": "b"}), &c)
        .await
        .unwrap();
    assert_eq!(out.content["json"]["method"], "GET");
    assert_eq!(out.content["json"]["body"], "");
    let out = http
        .call(json!({"url": format!("http://{}/redirect-307", s.addr), "method": "POST", "body": "b"}), &c)
        .await
        .unwrap();
    assert_eq!(out.content["json"]["method"], "POST");
    assert_eq!(out.content["json"]["body"], "b");

    let err = http
        .call(
            json!({"url": format!("http://{}/redirect-private", s.addr)}),
            &c,
        )
        .await
        .unwrap_err();
    assert!(
        matches!(&err, ToolError::Refused(m) if m.contains("10.255.255.1")),
        "{err:?}"
    );
    let err = http
        .call(
            json!({"url": format!("http://{}/redirect-file", s.addr)}),
            &c,
        )
        .await
        .unwrap_err();
    assert!(matches!(err, ToolError::InvalidArguments { .. }), "{err:?}");
    let err = http
        .call(json!({"url": format!("http://{}/loop", s.addr)}), &c)
        .await
        .unwrap_err();
    assert!(err.to_string().contains("too many redirects"), "{err}");
}

#[tokio::test]
async fn loopback_and_private_targets_are_refused_by_default() {
    let s = serve().await;
    let (_t, c) = test_ctx();
    let default = BuiltinConfig::default();
    let port = s.addr.port();
    for url in [
        format!("http://127.0.0.1:{port}/echo"),
        format!("http://localhost:{port}/echo"),
        format!("http://[::1]:{port}/echo"),
        format!("http://0.0.0.0:{port}/echo"),
        format!("http://[::ffff:127.0.0.1]:{port}/echo"),
        "http://10.0.0.1/".to_string(),
        "http://169.254.169.254/latest/meta-data/".to_string(),
        "http://192.168.0.1/".to_string(),
        "http://100.64.0.1/".to_string(),
    ] {
        for name in ["http_request", "fetch_url"] {
            let err = tool(name, &default)
                .call(json!({"url": url}), &c)
                .await
                .unwrap_err();
            assert!(
                matches!(err, ToolError::Refused(_)),
                "{name} {url}: {err:?}"
            );
        }
    }
    // Nothing reached the server.
    assert_eq!(s.hits.0.load(Ordering::SeqCst), 0);
    // And the switch opens it.
    let open = BuiltinConfig {
        allow_private_addresses: true,
        ..default
    };
    let out = tool("http_request", &open)
        .call(json!({"url": format!("http://localhost:{port}/echo")}), &c)
        .await
        .unwrap();
    assert_eq!(out.content["status_code"], 200);
    assert_eq!(s.hits.0.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn bodies_are_capped() {
    let s = serve().await;
    let (_t, c) = test_ctx();
    let cfg = BuiltinConfig {
        http_body_cap_bytes: 100,
        ..loopback_cfg()
    };
    let out = tool("http_request", &cfg)
        .call(json!({"url": format!("http://{}/big", s.addr)}), &c)
        .await
        .unwrap();
    assert_eq!(out.content["body"].as_str().unwrap().len(), 100);
    assert_eq!(out.content["truncated"], true);
    let out = tool("http_request", &loopback_cfg())
        .call(json!({"url": format!("http://{}/binary", s.addr)}), &c)
        .await
        .unwrap();
    assert_eq!(out.content["body"], Value::Null);
    assert!(out.content["note"].as_str().unwrap().contains("image/png"));
}

#[tokio::test]
async fn fetch_url_turns_html_into_markdown() {
    let s = serve().await;
    let (_t, c) = test_ctx();
    let fetch = tool("fetch_url", &loopback_cfg());
    let out = fetch
        .call(json!({"url": format!("http://{}/page", s.addr)}), &c)
        .await
        .unwrap();
    assert!(!out.is_error);
    assert_eq!(out.content["title"], "Test Page");
    let md = out.content["content"].as_str().unwrap();
    assert!(md.contains("# Hello"), "{md}");
    assert!(md.contains("**bold**"), "{md}");
    assert!(md.contains("[link](/x)"), "{md}");
    assert!(!md.contains("evil"), "{md}");

    let out = fetch
        .call(json!({"url": format!("http://{}/text", s.addr)}), &c)
        .await
        .unwrap();
    assert_eq!(out.content["content"], "plain text here");
    let out = fetch
        .call(
            json!({"url": format!("http://{}/big", s.addr), "max_chars": 10}),
            &c,
        )
        .await
        .unwrap();
    assert_eq!(out.content["content"], "xxxxxxxxxx");
    assert_eq!(out.content["truncated"], true);
    let out = fetch
        .call(json!({"url": format!("http://{}/binary", s.addr)}), &c)
        .await
        .unwrap();
    assert!(out.is_error);
    assert!(
        out.content["error_message"]
            .as_str()
            .unwrap()
            .contains("image/png")
    );
}

#[tokio::test]
async fn web_search_calls_the_configured_service() {
    let s = serve().await;
    let (_t, c) = test_ctx();
    let cfg = BuiltinConfig {
        search_api_key: "test-key".into(),
        search_base_url: format!("http://{}/", s.addr),
        ..BuiltinConfig::default()
    };
    let out = tool("web_search", &cfg)
        .call(json!({"query": "rust actors", "max_results": 3}), &c)
        .await
        .unwrap();
    assert!(!out.is_error, "{out:?}");
    assert_eq!(out.content["answer"], "forty-two");
    assert_eq!(out.content["count"], 3);
    assert_eq!(out.content["results"][0]["title"], "rust actors result 1");
    assert_eq!(out.content["results"][2]["url"], "https://example.com/3");

    let wrong = BuiltinConfig {
        search_api_key: "wrong".into(),
        ..cfg
    };
    let out = tool("web_search", &wrong)
        .call(json!({"query": "x"}), &c)
        .await
        .unwrap();
    assert!(out.is_error);
    assert_eq!(out.content["status_code"], 401);
    assert!(
        out.content["error_message"]
            .as_str()
            .unwrap()
            .contains("bad api key")
    );
}

#[tokio::test]
async fn cancellation_stops_a_request() {
    // A listener that accepts and never answers.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((sock, _)) = listener.accept().await {
            held.push(sock);
        }
    });
    let (_t, c) = test_ctx();
    let cancel = c.cancel.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(200)).await;
        cancel.cancel();
    });
    let err = tool("http_request", &loopback_cfg())
        .call(json!({"url": format!("http://{addr}/")}), &c)
        .await
        .unwrap_err();
    assert_eq!(err, ToolError::Cancelled);
    let short = BuiltinConfig {
        http_timeout_secs: 1,
        ..loopback_cfg()
    };
    let (_t2, c2) = test_ctx();
    let err = tool("http_request", &short)
        .call(
            json!({"url": format!("http://{addr}/"), "timeout_secs": 1}),
            &c2,
        )
        .await
        .unwrap_err();
    assert!(matches!(err, ToolError::Timeout(_)), "{err:?}");
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(100))]

    /// Seed property 15: any custom header and body arrive at the server as sent.
    #[test]
    fn custom_headers_and_bodies_reach_the_server(
        header_value in "[A-Za-z0-9_.~-]{1,40}",
        body in "\\PC{0,200}",
        method in prop::sample::select(vec!["POST", "PUT", "PATCH", "DELETE"]),
    ) {
        static RT: std::sync::OnceLock<(tokio::runtime::Runtime, SocketAddr)> = std::sync::OnceLock::new();
        let (rt, addr) = RT.get_or_init(|| {
            let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().unwrap();
            let addr = rt.block_on(serve()).addr;
            (rt, addr)
        });
        let (_t, c) = test_ctx();
        let out = rt.block_on(tool("http_request", &loopback_cfg()).call(
            json!({"url": format!("http://{addr}/echo"), "method": method,
                   "headers": {"x-test": header_value}, "body": body}),
            &c,
        )).unwrap();
        prop_assert_eq!(&out.content["json"]["method"], method);
        prop_assert_eq!(out.content["json"]["x_test"].as_str().unwrap(), header_value.as_str());
        prop_assert_eq!(out.content["json"]["body"].as_str().unwrap(), body.as_str());
    }
}

#[tokio::test]
async fn the_connection_goes_to_the_checked_address_not_a_fresh_dns_answer() {
    let s = serve().await;
    // A name that no DNS server knows: the request can only reach the server through the pin.
    let url = Url::parse(&format!("http://pinned.invalid:{}/json", s.addr.port())).unwrap();
    let target = CheckedTarget {
        url: url.clone(),
        pinned_host: Some("pinned.invalid".into()),
        addrs: vec![s.addr],
    };
    let client = client_for(&target, &loopback_cfg(), Duration::from_secs(5)).unwrap();
    let resp = client.get(url).send().await.unwrap();
    assert_eq!(resp.status(), 200);
    assert_eq!(
        resp.json::<Value>().await.unwrap(),
        json!({"hello": "world"})
    );
}
