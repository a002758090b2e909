//! The OpenAI-compatible and Anthropic clients against the fake model server over real HTTP:
//! answers assembled from the wire, and the requests they send.

use crate::common;

use std::time::Duration;

use agentry_fake_model::{Endpoint, FakeReply, FakeToolCall};
use agentry_llm::{
    ChatMessage, ChatRequest, StopReason, StreamEvent, ToolCall, ToolSchema, collect_stream,
};
use agentry_schema::events::TokenUsage;
use common::{Wire, call, cases, model, server, text_deltas, text_of, user};
use serde_json::json;

#[tokio::test]
async fn text_replies_are_assembled_from_chunks_with_usage() {
    for (wire, stream) in cases() {
        let server = server();
        let text = "Hello there, this answer arrives in pieces ✓";
        server.push(FakeReply::text(text).in_chunks(5).with_usage(42, 9));
        let events = call(&*model(&server, wire, stream), user("hi"))
            .await
            .unwrap();
        let case = format!("{wire:?} stream={stream}");
        assert_eq!(text_of(&events), text, "{case}");
        assert_eq!(
            text_deltas(&events),
            if stream { 5 } else { 1 },
            "{case}: {events:?}"
        );
        let n = events.len();
        assert_eq!(
            events[n - 2..],
            [
                StreamEvent::Usage(TokenUsage::new(42, 9)),
                StreamEvent::Done(StopReason::EndTurn)
            ],
            "{case}"
        );
        assert_eq!(server.request_count(), 1, "{case}");
    }
}

#[tokio::test]
async fn word_sized_chunks_by_default_and_runtime_profile_changes() {
    for wire in common::WIRES {
        let server = server();
        let model = model(&server, wire, true);
        server.push(FakeReply::text("one two three four"));
        let events = call(&*model, user("hi")).await.unwrap();
        assert_eq!(text_deltas(&events), 4, "{wire:?}");

        server.set_stream_profile(2, Duration::from_millis(20));
        server.set_latency(Duration::from_millis(300));
        server.push(FakeReply::text("one two three four"));
        let started = std::time::Instant::now();
        let events = call(&*model, user("hi")).await.unwrap();
        assert_eq!(text_deltas(&events), 2, "{wire:?}");
        assert_eq!(text_of(&events), "one two three four");
        assert!(
            started.elapsed() >= Duration::from_millis(300),
            "latency not applied"
        );
    }
}

#[tokio::test]
async fn parallel_tool_calls_are_assembled_with_ids_and_parsed_arguments() {
    let big_args = json!({
        "path": "/var/log/syslog",
        "lines": [1, 2, 3, 500],
        "options": {"follow": false, "pattern": "error|warn — ünïcode"}
    });
    for (wire, stream) in cases() {
        let server = server();
        server.push(
            FakeReply::tool_calls(vec![
                FakeToolCall::new("call_read", "read_file", big_args.clone()),
                FakeToolCall::new("call_ls", "list_directory", json!({"dir": "/tmp"})),
                FakeToolCall::new("call_date", "date", json!({})),
            ])
            .with_text("Let me look.")
            // Arguments split into 9 pieces each, pieces of the calls interleaved (OpenAI).
            .in_chunks(9)
            .interleaved()
            .with_usage(100, 30),
        );
        let events = call(&*model(&server, wire, stream), user("look"))
            .await
            .unwrap();
        let case = format!("{wire:?} stream={stream}");
        assert_eq!(text_of(&events), "Let me look.", "{case}");
        let calls: Vec<ToolCall> = events
            .iter()
            .filter_map(|e| match e {
                StreamEvent::ToolCall(c) => Some(c.clone()),
                _ => None,
            })
            .collect();
        assert_eq!(
            calls,
            vec![
                ToolCall {
                    id: "call_read".into(),
                    name: "read_file".into(),
                    arguments: big_args.clone()
                },
                ToolCall {
                    id: "call_ls".into(),
                    name: "list_directory".into(),
                    arguments: json!({"dir": "/tmp"})
                },
                ToolCall {
                    id: "call_date".into(),
                    name: "date".into(),
                    arguments: json!({})
                },
            ],
            "{case}"
        );
        assert_eq!(
            events.last(),
            Some(&StreamEvent::Done(StopReason::ToolUse)),
            "{case}"
        );
        assert!(
            events.contains(&StreamEvent::Usage(TokenUsage::new(100, 30))),
            "{case}"
        );
    }
}

#[tokio::test]
async fn tool_arguments_that_are_not_json_are_kept_raw() {
    for (wire, stream) in cases() {
        if wire == Wire::Anthropic && !stream {
            // A non-streamed Anthropic tool_use carries an object; invalid text cannot occur.
            continue;
        }
        let server = server();
        server.push(FakeReply::tool_calls(vec![FakeToolCall::raw(
            "c1",
            "shell",
            "{\"cmd\": \"ls",
        )]));
        let events = call(&*model(&server, wire, stream), user("x"))
            .await
            .unwrap();
        assert!(
            events.contains(&StreamEvent::ToolCall(ToolCall {
                id: "c1".into(),
                name: "shell".into(),
                arguments: json!({"__invalid_json__": "{\"cmd\": \"ls"})
            })),
            "{wire:?} stream={stream}: {events:?}"
        );
    }
}

#[tokio::test]
async fn max_tokens_cut_is_reported() {
    for (wire, stream) in cases() {
        let server = server();
        server.push(FakeReply::text("cut sh").max_tokens_reached());
        let events = call(&*model(&server, wire, stream), user("x"))
            .await
            .unwrap();
        assert_eq!(
            events.last(),
            Some(&StreamEvent::Done(StopReason::MaxTokens)),
            "{wire:?} stream={stream}"
        );
    }
}

fn conversation() -> ChatRequest {
    ChatRequest {
        system: Some("You are Agentry's test assistant.".into()),
        messages: vec![
            ChatMessage::User {
                content: "What is in /tmp and what time is it?".into(),
            },
            ChatMessage::Assistant {
                content: "Checking.".into(),
                tool_calls: vec![
                    ToolCall {
                        id: "call_1".into(),
                        name: "list_directory".into(),
                        arguments: json!({"dir": "/tmp"}),
                    },
                    ToolCall {
                        id: "call_2".into(),
                        name: "date".into(),
                        arguments: json!({}),
                    },
                ],
            },
            ChatMessage::Tool {
                images: Vec::new(),
                tool_call_id: "call_1".into(),
                name: "list_directory".into(),
                content: "[\"a.txt\"]".into(),
                is_error: false,
            },
            ChatMessage::Tool {
                images: Vec::new(),
                tool_call_id: "call_2".into(),
                name: "date".into(),
                content: "{\"error\":\"timeout\"}".into(),
                is_error: true,
            },
        ],
        tools: vec![
            ToolSchema {
                name: "list_directory".into(),
                description: "List a directory".into(),
                parameters: json!({"type": "object", "properties": {"dir": {"type": "string"}}, "required": ["dir"]}),
            },
            ToolSchema {
                name: "date".into(),
                description: "The time".into(),
                parameters: json!({"type": "object", "properties": {}}),
            },
        ],
        temperature: Some(0.7),
        max_tokens: Some(256),
    }
}

#[tokio::test]
async fn openai_requests_carry_system_tools_and_tool_results() {
    for stream in [true, false] {
        let server = server();
        server.push(FakeReply::text("ok"));
        call(&*model(&server, Wire::OpenAi, stream), conversation())
            .await
            .unwrap();
        let requests = server.requests();
        assert_eq!(requests.len(), 1);
        let sent = &requests[0];
        assert_eq!(sent.endpoint, Endpoint::OpenAiChat);
        assert_eq!(sent.path, "/v1/chat/completions");
        assert_eq!(sent.header("authorization"), Some("Bearer test-key"));
        let body = &sent.body;
        assert_eq!(body["model"], "fake-model-1");
        assert_eq!(body["stream"], stream);
        if stream {
            assert_eq!(body["stream_options"], json!({"include_usage": true}));
        } else {
            assert!(body.get("stream_options").is_none());
        }
        assert_eq!(body["max_tokens"], 256);
        // 0.7f32 goes out as 0.7, not as its f64 widening.
        assert_eq!(body["temperature"], json!(0.7));
        assert_eq!(
            body["messages"],
            json!([
                {"role": "system", "content": "You are Agentry's test assistant."},
                {"role": "user", "content": "What is in /tmp and what time is it?"},
                {"role": "assistant", "content": "Checking.", "tool_calls": [
                    {"id": "call_1", "type": "function", "function": {"name": "list_directory", "arguments": "{\"dir\":\"/tmp\"}"}},
                    {"id": "call_2", "type": "function", "function": {"name": "date", "arguments": "{}"}},
                ]},
                {"role": "tool", "tool_call_id": "call_1", "content": "[\"a.txt\"]"},
                {"role": "tool", "tool_call_id": "call_2", "content": "{\"error\":\"timeout\"}"},
            ])
        );
        assert_eq!(
            body["tools"],
            json!([
                {"type": "function", "function": {"name": "list_directory", "description": "List a directory",
                  "parameters": {"type": "object", "properties": {"dir": {"type": "string"}}, "required": ["dir"]}}},
                {"type": "function", "function": {"name": "date", "description": "The time",
                  "parameters": {"type": "object", "properties": {}}}},
            ])
        );
    }
}

#[tokio::test]
async fn anthropic_requests_carry_system_tools_and_merged_tool_results() {
    for stream in [true, false] {
        let server = server();
        server.push(FakeReply::text("ok"));
        call(&*model(&server, Wire::Anthropic, stream), conversation())
            .await
            .unwrap();
        let requests = server.requests();
        assert_eq!(requests.len(), 1);
        let sent = &requests[0];
        assert_eq!(sent.endpoint, Endpoint::AnthropicMessages);
        assert_eq!(sent.path, "/v1/messages");
        assert_eq!(sent.header("x-api-key"), Some("test-key"));
        assert_eq!(sent.header("anthropic-version"), Some("2023-06-01"));
        assert_eq!(sent.header("authorization"), None);
        let body = &sent.body;
        assert_eq!(body["model"], "fake-model-1");
        assert_eq!(body["stream"], stream);
        assert_eq!(body["max_tokens"], 256);
        assert_eq!(body["system"], "You are Agentry's test assistant.");
        assert_eq!(
            body["messages"],
            json!([
                {"role": "user", "content": "What is in /tmp and what time is it?"},
                {"role": "assistant", "content": [
                    {"type": "text", "text": "Checking."},
                    {"type": "tool_use", "id": "call_1", "name": "list_directory", "input": {"dir": "/tmp"}},
                    {"type": "tool_use", "id": "call_2", "name": "date", "input": {}},
                ]},
                {"role": "user", "content": [
                    {"type": "tool_result", "tool_use_id": "call_1", "content": "[\"a.txt\"]"},
                    {"type": "tool_result", "tool_use_id": "call_2", "content": "{\"error\":\"timeout\"}", "is_error": true},
                ]},
            ])
        );
        assert_eq!(
            body["tools"],
            json!([
                {"name": "list_directory", "description": "List a directory",
                 "input_schema": {"type": "object", "properties": {"dir": {"type": "string"}}, "required": ["dir"]}},
                {"name": "date", "description": "The time", "input_schema": {"type": "object", "properties": {}}},
            ])
        );
    }
}

#[tokio::test]
async fn local_servers_need_no_key() {
    for wire in common::WIRES {
        let server = server();
        server.push(FakeReply::text("no key needed"));
        let mut config = common::config(&server, wire, true);
        config.api_key = None;
        let model = common::build(&config);
        let response = collect_stream(model.stream(&user("x")).await.unwrap())
            .await
            .unwrap();
        assert_eq!(response.text, "no key needed");
        let sent = &server.requests()[0];
        assert_eq!(sent.header("authorization"), None, "{wire:?}");
        assert_eq!(sent.header("x-api-key"), None, "{wire:?}");
    }
}

#[tokio::test]
async fn a_json_answer_to_a_streaming_request_is_still_understood() {
    for wire in common::WIRES {
        let server = server();
        server.push(
            FakeReply::text("one document")
                .ignoring_stream()
                .with_usage(3, 2),
        );
        let events = call(&*model(&server, wire, true), user("x")).await.unwrap();
        assert_eq!(
            events,
            vec![
                StreamEvent::TextDelta("one document".into()),
                StreamEvent::Usage(TokenUsage::new(3, 2)),
                StreamEvent::Done(StopReason::EndTurn),
            ],
            "{wire:?}"
        );
        assert_eq!(server.requests()[0].body["stream"], true);
    }
}
