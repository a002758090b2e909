//! The `agentry-fake-model` binary as a benchmark script uses it: start it, read its URL from the
//! first line of stdout, talk to it in both wire formats.

use std::process::Stdio;
use std::time::{Duration, Instant};

use agentry_llm::{
    AnthropicModel, ChatMessage, ChatModel, ChatRequest, OpenAiModel, StreamEvent, complete,
};
use futures::StreamExt;
use serde_json::json;
use tokio::io::{AsyncBufReadExt, BufReader};

fn user(text: &str) -> ChatRequest {
    ChatRequest {
        messages: vec![ChatMessage::User {
            content: text.into(),
        }],
        ..ChatRequest::default()
    }
}

#[tokio::test]
async fn the_binary_prints_its_url_and_answers_in_auto_mode() {
    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_agentry-fake-model"))
        .args([
            "--port",
            "0",
            "--latency-ms",
            "200",
            "--chunks",
            "2",
            "--chunk-delay-ms",
            "10",
        ])
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let mut lines = BufReader::new(stdout).lines();
    let url = tokio::time::timeout(Duration::from_secs(30), lines.next_line())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert!(url.starts_with("http://127.0.0.1:"), "{url}");

    let client = reqwest::Client::new();
    let openai = OpenAiModel::new(client.clone(), &format!("{url}/v1"), None, "bench");
    let started = Instant::now();
    let mut stream = openai.stream(&user("hello from the bench")).await.unwrap();
    assert!(
        started.elapsed() >= Duration::from_millis(200),
        "--latency-ms"
    );
    let mut deltas = Vec::new();
    while let Some(item) = stream.next().await {
        if let StreamEvent::TextDelta(text) = item.unwrap() {
            deltas.push(text);
        }
    }
    assert_eq!(deltas.len(), 2, "--chunks 2: {deltas:?}");
    assert_eq!(deltas.concat(), "(scripted) You said: hello from the bench");

    let anthropic = AnthropicModel::new(client.clone(), &url, None, "bench");
    let response = complete(&anthropic, user("/tool get_time {\"tz\": \"UTC\"}"))
        .await
        .unwrap();
    assert_eq!(response.tool_calls.len(), 1);
    assert_eq!(response.tool_calls[0].name, "get_time");
    assert_eq!(response.tool_calls[0].arguments, json!({"tz": "UTC"}));

    // The plain wire format, without the client library.
    let raw: serde_json::Value = client
        .post(format!("{url}/chat/completions"))
        .json(&json!({"model": "m", "messages": [{"role": "user", "content": "/echo raw"}]}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(raw["object"], "chat.completion");
    assert_eq!(raw["choices"][0]["message"]["content"], "raw");
    assert_eq!(raw["choices"][0]["finish_reason"], "stop");

    child.kill().await.unwrap();
}
