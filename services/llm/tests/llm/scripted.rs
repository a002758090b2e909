//! The scripted model, and the fake server's auto mode (which reuses its decisions) through the
//! real clients: a `/tool` line becomes a tool call, its result becomes a summary.

use crate::common;

use std::time::{Duration, Instant};

use agentry_llm::{
    ChatMessage, ChatModel, ChatRequest, ScriptedModel, StopReason, StreamEvent, ToolCall,
    collect_stream, complete,
};
use common::{call, cases, model, server, text_deltas, text_of, user};
use futures::StreamExt;
use serde_json::json;

#[tokio::test]
async fn scripted_text_streams_in_word_sized_deltas() {
    let model = ScriptedModel::new();
    assert_eq!((model.provider(), model.model()), ("scripted", "scripted"));
    let events = call(&model, user("how are you today")).await.unwrap();
    assert_eq!(text_of(&events), "(scripted) You said: how are you today");
    assert_eq!(text_deltas(&events), 7);
    assert_eq!(events.last(), Some(&StreamEvent::Done(StopReason::EndTurn)));
    // Usage is characters / 4 rounded up: 17 characters in, 38 out.
    assert_eq!(
        events[events.len() - 2],
        StreamEvent::Usage(agentry_schema::events::TokenUsage::new(5, 10))
    );
}

#[tokio::test]
async fn scripted_tool_round_trip() {
    let model = ScriptedModel::new();
    let mut request = user("/tool get_time {\"tz\": \"UTC\"}");
    let first = complete(&model, request.clone()).await.unwrap();
    assert_eq!(first.stop_reason, Some(StopReason::ToolUse));
    let expected = ToolCall {
        id: "call_1".into(),
        name: "get_time".into(),
        arguments: json!({"tz": "UTC"}),
    };
    assert_eq!(first.tool_calls, vec![expected.clone()]);
    request.messages.push(ChatMessage::Assistant {
        content: String::new(),
        tool_calls: vec![expected],
    });
    request.messages.push(ChatMessage::Tool {
        images: Vec::new(),
        tool_call_id: "call_1".into(),
        name: "get_time".into(),
        content: "\"12:00\"".into(),
        is_error: false,
    });
    let second = complete(&model, request).await.unwrap();
    assert_eq!(second.text, "(scripted) Tool get_time returned: \"12:00\"");
    assert_eq!(second.stop_reason, Some(StopReason::EndTurn));
}

#[tokio::test]
async fn scripted_sleep_is_cancelled_by_dropping_the_stream() {
    let model = ScriptedModel::new();
    let started = Instant::now();
    let mut stream = model.stream(&user("/sleep 20000\nhi")).await.unwrap();
    let first = tokio::time::timeout(Duration::from_millis(200), stream.next()).await;
    assert!(first.is_err(), "nothing may arrive during the sleep");
    drop(stream);
    assert!(started.elapsed() < Duration::from_secs(5));

    // A short sleep is honoured, then the reply comes.
    let started = Instant::now();
    let response = complete(&model, user("/sleep 300\n/echo done"))
        .await
        .unwrap();
    assert_eq!(response.text, "done");
    assert!(started.elapsed() >= Duration::from_millis(300));
}

/// The same conversation through the fake server's auto mode over each wire format gives what
/// the scripted model gives.
#[tokio::test]
async fn fake_auto_mode_matches_the_scripted_model_over_both_wires() {
    for (wire, stream) in cases() {
        let server = server();
        let fake = model(&server, wire, stream);
        let scripted = ScriptedModel::new();
        let case = format!("{wire:?} stream={stream}");

        let mut request = ChatRequest {
            system: Some("sys".into()),
            ..user("please\n/tool read_file {\"path\": \"/etc/hosts\"}\n/tool date")
        };
        let over_http = complete(&*fake, request.clone()).await.unwrap();
        let local = complete(&scripted, request.clone()).await.unwrap();
        assert_eq!(over_http.tool_calls, local.tool_calls, "{case}");
        assert_eq!(
            over_http.tool_calls,
            vec![
                ToolCall {
                    id: "call_1".into(),
                    name: "read_file".into(),
                    arguments: json!({"path": "/etc/hosts"})
                },
                ToolCall {
                    id: "call_2".into(),
                    name: "date".into(),
                    arguments: json!({})
                },
            ],
            "{case}"
        );
        assert_eq!(over_http.stop_reason, Some(StopReason::ToolUse), "{case}");

        request.messages.push(ChatMessage::Assistant {
            content: String::new(),
            tool_calls: over_http.tool_calls.clone(),
        });
        request.messages.push(ChatMessage::Tool {
            images: Vec::new(),
            tool_call_id: "call_1".into(),
            name: "read_file".into(),
            content: "127.0.0.1 localhost".into(),
            is_error: false,
        });
        request.messages.push(ChatMessage::Tool {
            images: Vec::new(),
            tool_call_id: "call_2".into(),
            name: "date".into(),
            content: "{\"error\":\"clock unavailable\"}".into(),
            is_error: true,
        });
        let over_http = complete(&*fake, request.clone()).await.unwrap();
        let local = complete(&scripted, request).await.unwrap();
        assert_eq!(
            over_http.text,
            "(scripted) Tool read_file returned: 127.0.0.1 localhost\nTool date failed: {\"error\":\"clock unavailable\"}",
            "{case}"
        );
        assert_eq!(over_http.text, local.text, "{case}");
        assert_eq!(over_http.stop_reason, Some(StopReason::EndTurn), "{case}");
        assert!(
            over_http.usage.input > 0 && over_http.usage.output > 0,
            "{case}"
        );
    }
}

#[tokio::test]
async fn fake_auto_mode_honours_sleep() {
    let server = server();
    let fake = model(&server, common::Wire::OpenAi, true);
    let started = Instant::now();
    let response = collect_stream(fake.stream(&user("/sleep 400\nhi")).await.unwrap())
        .await
        .unwrap();
    assert_eq!(response.text, "(scripted) You said: hi");
    assert!(started.elapsed() >= Duration::from_millis(400));
}

#[tokio::test]
async fn many_concurrent_sessions_get_their_own_answers() {
    let server = server();
    server.set_stream_profile(0, Duration::from_millis(5));
    let openai = model(&server, common::Wire::OpenAi, true);
    let anthropic = model(&server, common::Wire::Anthropic, true);
    let calls = (0..60).map(|i| {
        let model = if i % 2 == 0 {
            openai.clone()
        } else {
            anthropic.clone()
        };
        async move {
            let text = format!("message number {i} from session {i}");
            let response = complete(&*model, user(&text)).await.unwrap();
            assert_eq!(response.text, format!("(scripted) You said: {text}"));
        }
    });
    futures::future::join_all(calls).await;
    assert_eq!(server.request_count(), 60);
}
