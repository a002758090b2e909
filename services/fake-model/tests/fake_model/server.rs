//! The fake server's wire output as raw HTTP, independent of Agentry's clients: the SSE event
//! names and shapes, `[DONE]`, usage, errors with Retry-After, recording and default replies.

use std::time::Duration;

use agentry_fake_model::{
    DefaultReply, Endpoint, FakeConfig, FakeModelServer, FakeReply, FakeToolCall,
};
use serde_json::{Value, json};

fn data_lines(body: &str) -> Vec<&str> {
    body.lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .collect()
}

#[tokio::test]
async fn openai_streams_chunks_usage_and_done() {
    let server = FakeModelServer::start(FakeConfig::default());
    server.push(
        FakeReply::tool_calls(vec![FakeToolCall::new("c1", "ls", json!({"dir": "/"}))])
            .with_text("ab")
            .in_chunks(2)
            .with_usage(7, 3),
    );
    let response = reqwest::Client::new()
        .post(format!("{}/chat/completions", server.base_url_openai()))
        .json(
            &json!({"model": "m", "stream": true, "stream_options": {"include_usage": true},
                      "messages": [{"role": "user", "content": "x"}]}),
        )
        .send()
        .await
        .unwrap();
    assert_eq!(
        response.headers()["content-type"],
        "text/event-stream; charset=utf-8"
    );
    let body = response.text().await.unwrap();
    let data = data_lines(&body);
    assert_eq!(data.last(), Some(&"[DONE]"));
    let chunks: Vec<Value> = data[..data.len() - 1]
        .iter()
        .map(|d| serde_json::from_str(d).unwrap())
        .collect();
    assert!(
        chunks
            .iter()
            .all(|c| c["object"] == "chat.completion.chunk")
    );
    assert_eq!(chunks[0]["choices"][0]["delta"]["role"], "assistant");
    let text: String = chunks
        .iter()
        .filter_map(|c| c["choices"][0]["delta"]["content"].as_str())
        .collect();
    assert_eq!(text, "ab");
    let arguments: String = chunks
        .iter()
        .filter_map(|c| c["choices"][0]["delta"]["tool_calls"][0]["function"]["arguments"].as_str())
        .collect();
    assert_eq!(arguments, "{\"dir\":\"/\"}");
    let finish = &chunks[chunks.len() - 2];
    assert_eq!(finish["choices"][0]["finish_reason"], "tool_calls");
    let usage = &chunks[chunks.len() - 1];
    assert_eq!(usage["choices"], json!([]));
    assert_eq!(
        usage["usage"],
        json!({"prompt_tokens": 7, "completion_tokens": 3, "total_tokens": 10})
    );
}

#[tokio::test]
async fn anthropic_streams_named_events_in_order() {
    let server = FakeModelServer::start(FakeConfig::default());
    server.push(
        FakeReply::tool_call("toolu_1", "ls", json!({"dir": "/"}))
            .with_text("hi")
            .with_usage(11, 4),
    );
    let body = reqwest::Client::new()
        .post(format!("{}/v1/messages", server.base_url_anthropic()))
        .header("anthropic-version", "2023-06-01")
        .json(&json!({"model": "m", "max_tokens": 10, "stream": true,
                      "messages": [{"role": "user", "content": "x"}]}))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let names: Vec<&str> = body
        .lines()
        .filter_map(|l| l.strip_prefix("event: "))
        .collect();
    let mut expected = vec![
        "message_start",
        "ping",
        "content_block_start",
        "content_block_delta",
        "content_block_stop",
        "content_block_start",
    ];
    let deltas = names
        .iter()
        .filter(|n| **n == "content_block_delta")
        .count();
    expected.extend(std::iter::repeat_n("content_block_delta", deltas - 1));
    expected.extend(["content_block_stop", "message_delta", "message_stop"]);
    assert_eq!(names, expected);
    let events: Vec<Value> = data_lines(&body)
        .iter()
        .map(|d| serde_json::from_str(d).unwrap())
        .collect();
    assert_eq!(events[0]["message"]["usage"]["input_tokens"], 11);
    let message_delta = &events[events.len() - 2];
    assert_eq!(message_delta["delta"]["stop_reason"], "tool_use");
    assert_eq!(message_delta["usage"]["output_tokens"], 4);
}

#[tokio::test]
async fn errors_carry_the_provider_shape_and_retry_after() {
    let server = FakeModelServer::start(FakeConfig::default());
    server.push(FakeReply::rate_limited(Some("3")));
    server.push(FakeReply::rate_limited(None));
    let client = reqwest::Client::new();
    let response = client
        .post(format!("{}/v1/messages", server.url()))
        .header("anthropic-version", "2023-06-01")
        .json(&json!({"model": "m", "max_tokens": 5, "messages": []}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 429);
    assert_eq!(response.headers()["retry-after"], "3");
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["type"], "error");
    assert_eq!(body["error"]["type"], "rate_limit_error");

    let response = client
        .post(format!("{}/v1/chat/completions", server.url()))
        .json(&json!({"model": "m", "messages": []}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 429);
    assert!(response.headers().get("retry-after").is_none());
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["error"]["code"], "rate_limit_exceeded");
}

#[tokio::test]
async fn invalid_requests_get_400_without_using_up_a_reply() {
    let server = FakeModelServer::start(FakeConfig::default());
    server.push(FakeReply::text("kept"));
    let client = reqwest::Client::new();
    // No anthropic-version header.
    let response = client
        .post(format!("{}/v1/messages", server.url()))
        .json(&json!({"model": "m", "max_tokens": 5, "messages": []}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 400);
    let response = client
        .post(format!("{}/v1/chat/completions", server.url()))
        .body("{not json")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 400);
    assert_eq!(server.pending(), 1);
    assert_eq!(server.request_count(), 2);
    let recorded = server.requests();
    assert_eq!(recorded[0].endpoint, Endpoint::AnthropicMessages);
    assert_eq!(recorded[1].body, Value::Null);
    assert_eq!(recorded[1].raw_body, "{not json");
}

#[tokio::test]
async fn default_reply_and_record_limit_are_configurable() {
    let server = FakeModelServer::start(FakeConfig {
        default_reply: DefaultReply::Always(FakeReply::text("always this")),
        record_limit: 2,
        ..FakeConfig::default()
    });
    let client = reqwest::Client::new();
    for i in 0..3 {
        let body: Value = client
            .post(format!("{}/chat/completions", server.base_url_openai()))
            .json(
                &json!({"model": "m", "messages": [{"role": "user", "content": format!("m{i}")}]}),
            )
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        assert_eq!(body["choices"][0]["message"]["content"], "always this");
    }
    let recorded = server.requests();
    assert_eq!(recorded.len(), 2);
    assert_eq!(recorded[0].body["messages"][0]["content"], "m1");
    assert_eq!(server.request_count(), 3);

    server.set_default_reply(DefaultReply::Auto);
    let body: Value = client
        .post(format!("{}/chat/completions", server.base_url_openai()))
        .json(&json!({"model": "m", "messages": [{"role": "user", "content": "/echo auto"}]}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(body["choices"][0]["message"]["content"], "auto");
}

#[tokio::test]
async fn a_stopped_server_refuses_connections() {
    let server = FakeModelServer::start(FakeConfig::default());
    let url = server.base_url_openai();
    server.stop().await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    let outcome = reqwest::Client::new()
        .post(format!("{url}/chat/completions"))
        .json(&json!({"model": "m", "messages": []}))
        .send()
        .await;
    assert!(outcome.is_err_and(|e| e.is_connect()));
}

#[tokio::test]
async fn timings_are_kept_per_answered_request_when_asked_for() {
    let latency = Duration::from_millis(30);
    let server = FakeModelServer::start(FakeConfig {
        latency,
        chunks: 4,
        chunk_delay: Duration::from_millis(5),
        timing_limit: 2,
        ..FakeConfig::default()
    });
    let client = reqwest::Client::new();
    let ask = |content: &'static str, stream: bool| {
        let client = client.clone();
        let url = format!("{}/chat/completions", server.base_url_openai());
        async move {
            let before = std::time::Instant::now();
            let body = client
                .post(url)
                .json(&json!({"model": "m", "stream": stream, "messages": [
                    {"role": "user", "content": "earlier"},
                    {"role": "assistant", "content": "ok"},
                    {"role": "user", "content": content}]}))
                .send()
                .await
                .unwrap()
                .text()
                .await
                .unwrap();
            (before, body)
        }
    };
    let (before, _) = ask("first", true).await;
    let timings = server.take_timings();
    assert_eq!(timings.len(), 1);
    let t = &timings[0];
    assert_eq!(t.key, "first", "keyed by the last user message");
    assert!(t.received >= before);
    let first_byte = t.first_byte.expect("a body was sent");
    assert!(first_byte - t.received >= latency, "{t:?}");
    // Four chunks 5 ms apart after the first frame: the end is later than the first byte.
    assert!(t.done - first_byte >= Duration::from_millis(15), "{t:?}");
    assert!(server.take_timings().is_empty(), "taken once");

    // Not streamed too; the oldest is dropped past the limit.
    for content in ["a", "b", "c"] {
        ask(content, false).await;
    }
    let keys: Vec<String> = server.take_timings().into_iter().map(|t| t.key).collect();
    assert_eq!(keys, ["b", "c"]);

    // Off by default.
    let plain = FakeModelServer::start(FakeConfig::default());
    reqwest::Client::new()
        .post(format!("{}/chat/completions", plain.base_url_openai()))
        .json(&json!({"model": "m", "messages": [{"role": "user", "content": "x"}]}))
        .send()
        .await
        .unwrap();
    assert!(plain.take_timings().is_empty());
}
